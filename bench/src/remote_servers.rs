//! Starts the real servers the remote-pull benchmark reads from — vsftpd and
//! nginx on 127.0.0.1, configured by the same code as haul's tests — fills
//! them with `COUNT` random files of `MIB` MiB under `/data/`, prints one
//! `NAME URL` line per server (and `ftp-root DIR` / `http-root DIR`, where
//! the servers' files are), then serves until its standard input closes.
//!
//!     remote-servers COUNT MIB

use std::io::{Read, Write};

fn main() {
    if let Err(e) = run() {
        eprintln!("remote-servers: {e}");
        std::process::exit(1);
    }
}

fn run() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let count: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(16);
    let mib: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(64);
    let ftp = haul_ftp::testserver::FtpServer::start(haul_ftp::testserver::Mode::Plain)?;
    let http = haul_http::testserver::TestServer::start()?;
    let ftp_data = ftp.root().join("data");
    let http_data = http.root().join("data");
    std::fs::create_dir_all(&ftp_data)?;
    std::fs::create_dir_all(&http_data)?;
    let mut block = vec![0u8; 1 << 20];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..count {
        let name = format!("f{i:02}.bin");
        let path = ftp_data.join(&name);
        let mut f = std::fs::File::create(&path)?;
        for _ in 0..mib {
            for b in block.chunks_exact_mut(8) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                b.copy_from_slice(&seed.to_le_bytes());
            }
            f.write_all(&block)?;
        }
        drop(f);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
        if std::fs::hard_link(&path, http_data.join(&name)).is_err() {
            std::fs::copy(&path, http_data.join(&name))?;
        }
    }
    println!("ftp {}", ftp.url("/data/"));
    println!("ftp-root {}", ftp.root().display());
    println!("http {}", http.http_url("/data/"));
    println!("http-root {}", http.root().display());
    println!("ready");
    std::io::stdout().flush()?;
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    Ok(())
}
