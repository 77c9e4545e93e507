//! The limit haul's push is measured against: one file moved over TCP with
//! `sendfile(2)` on the sending side and plain large writes into a file on
//! the receiving side. No hashing, no protocol.
//!
//! ```text
//! sendfile-baseline recv ADDR OUT [--fsync]   # prints the bound address, writes one file, exits
//! sendfile-baseline send ADDR FILE
//! ```

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::ExitCode;

fn recv(addr: &str, out: &str, fsync: bool) -> std::io::Result<u64> {
    let listener = TcpListener::bind(addr)?;
    println!("{}", listener.local_addr()?);
    std::io::stdout().flush()?;
    let (mut sock, _) = listener.accept()?;
    let mut file = File::create(out)?;
    let mut buf = vec![0u8; 4 << 20];
    let mut total = 0u64;
    loop {
        // Fill the buffer, then write it in one large write (as haul's receiver does).
        let mut filled = 0;
        while filled < buf.len() {
            let n = sock.read(&mut buf[filled..])?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        if filled == 0 {
            break;
        }
        file.write_all(&buf[..filled])?;
        total += filled as u64;
    }
    if fsync {
        file.sync_all()?;
    }
    Ok(total)
}

fn send(addr: &str, path: &str) -> std::io::Result<u64> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let sock = TcpStream::connect(addr)?;
    let mut off: libc::off_t = 0;
    while (off as u64) < len {
        let left = (len - off as u64).min(1 << 30) as usize;
        // SAFETY: both descriptors are open; `off` is a valid local.
        let n = unsafe { libc::sendfile(sock.as_raw_fd(), file.as_raw_fd(), &mut off, left) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if n == 0 {
            break;
        }
    }
    Ok(off as u64)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.get(1).map(String::as_str) {
        Some("recv") if args.len() >= 4 => {
            recv(&args[2], &args[3], args.iter().any(|a| a == "--fsync"))
        }
        Some("send") if args.len() == 4 => send(&args[2], &args[3]),
        _ => {
            eprintln!("usage: sendfile-baseline recv ADDR OUT [--fsync] | send ADDR FILE");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sendfile-baseline: {e}");
            ExitCode::FAILURE
        }
    }
}
