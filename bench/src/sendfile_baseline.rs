//! The limit haul's push is measured against: one file moved over TCP with
//! `sendfile(2)` on the sending side and plain large writes into a file on
//! the receiving side. No hashing, no protocol.
//!
//! ```text
//! sendfile-baseline recv ADDR OUT [--fsync] [--blake3]   # prints the bound address, writes one file, exits
//! sendfile-baseline send ADDR FILE [--blake3]
//! ```
//!
//! With `--blake3` on both sides it also does the hashing any verifying
//! transfer must do, and nothing else: the sender reads and hashes each
//! 4 MiB chunk before sending it, the receiver hashes each 4 MiB it received
//! before writing it. That is the limit for a tool that verifies every byte.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::ExitCode;

/// Chunk size of the `--blake3` hashing (haul's chunk size for files up to 512 GiB).
const CHUNK: usize = 4 << 20;

fn recv(addr: &str, out: &str, fsync: bool, hash: bool) -> std::io::Result<u64> {
    let listener = TcpListener::bind(addr)?;
    println!("{}", listener.local_addr()?);
    std::io::stdout().flush()?;
    let (mut sock, _) = listener.accept()?;
    let mut file = File::create(out)?;
    let mut buf = vec![0u8; CHUNK];
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
        if hash {
            std::hint::black_box(blake3::hash(&buf[..filled]));
        }
        file.write_all(&buf[..filled])?;
        total += filled as u64;
    }
    if fsync {
        file.sync_all()?;
    }
    Ok(total)
}

fn send(addr: &str, path: &str, hash: bool) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let sock = TcpStream::connect(addr)?;
    let mut off: libc::off_t = 0;
    let mut buf = vec![0u8; if hash { CHUNK } else { 0 }];
    while (off as u64) < len {
        let step = if hash { CHUNK as u64 } else { 1 << 30 };
        let left = (len - off as u64).min(step) as usize;
        if hash {
            file.read_exact_at(&mut buf[..left], off as u64)?;
            std::hint::black_box(blake3::hash(&buf[..left]));
        }
        let end = off + left as libc::off_t;
        while off < end {
            let left = (end - off) as usize;
            // SAFETY: both descriptors are open; `off` is a valid local.
            let n = unsafe { libc::sendfile(sock.as_raw_fd(), file.as_raw_fd(), &mut off, left) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if n == 0 {
                return Ok(off as u64);
            }
        }
    }
    Ok(off as u64)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.get(1).map(String::as_str) {
        Some("recv") if args.len() >= 4 => recv(
            &args[2],
            &args[3],
            args.iter().any(|a| a == "--fsync"),
            args.iter().any(|a| a == "--blake3"),
        ),
        Some("send") if args.len() >= 4 => {
            send(&args[2], &args[3], args.iter().any(|a| a == "--blake3"))
        }
        _ => {
            eprintln!(
                "usage: sendfile-baseline recv ADDR OUT [--fsync] [--blake3] | send ADDR FILE [--blake3]"
            );
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
