//! The limit haul's push is measured against: one file moved over TCP with
//! `sendfile(2)` on the sending side and plain large writes into a file on
//! the receiving side. No hashing, no protocol.
//!
//! ```text
//! sendfile-baseline recv ADDR OUT [--fsync] [--blake3|--blake3-thread] [--buffer BYTES]
//!                                  # prints the bound address, writes one file, exits
//! sendfile-baseline send ADDR FILE [--blake3]
//! ```
//!
//! With `--blake3` on both sides it also does the hashing any verifying
//! transfer must do, and nothing else: the sender reads and hashes each
//! 4 MiB chunk before sending it, the receiver hashes each 4 MiB it received
//! before writing it (each `--buffer BYTES` if given). That is the limit for
//! a tool that verifies every byte.
//! `recv … --blake3-thread` hashes on a second thread instead, overlapping
//! with the next `recv` (still hashing each 4 MiB before writing it).

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::ExitCode;

/// Chunk size of the `--blake3` hashing (haul's chunk size for files up to 512 GiB).
const CHUNK: usize = 4 << 20;

/// How the receiver hashes what it received.
#[derive(Clone, Copy, PartialEq)]
enum RecvHash {
    None,
    /// Each 4 MiB, before writing it.
    Inline,
    /// Each 4 MiB on a second thread while the next arrives, then written.
    Thread,
}

/// Reads up to `buf.len()` bytes; fewer only at the end of the stream.
fn fill(sock: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = sock.read(&mut buf[filled..])?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}

fn recv(addr: &str, out: &str, fsync: bool, hash: RecvHash, buffer: usize) -> std::io::Result<u64> {
    let listener = TcpListener::bind(addr)?;
    println!("{}", listener.local_addr()?);
    std::io::stdout().flush()?;
    let (mut sock, _) = listener.accept()?;
    let mut file = File::create(out)?;
    let total = if hash == RecvHash::Thread {
        recv_hashing_aside(&mut sock, &mut file)?
    } else {
        let mut buf = vec![0u8; buffer];
        let mut total = 0u64;
        loop {
            // Fill the buffer, then write it in one large write (as haul's receiver does).
            let filled = fill(&mut sock, &mut buf)?;
            if filled == 0 {
                break;
            }
            if hash == RecvHash::Inline {
                std::hint::black_box(blake3::hash(&buf[..filled]));
            }
            file.write_all(&buf[..filled])?;
            total += filled as u64;
        }
        total
    };
    if fsync {
        file.sync_all()?;
    }
    Ok(total)
}

/// Receives into one buffer while a second thread hashes the previous one,
/// which is written once hashed.
fn recv_hashing_aside(sock: &mut TcpStream, file: &mut File) -> std::io::Result<u64> {
    use std::sync::mpsc::sync_channel;
    let (to_hasher, hasher_in) = sync_channel::<(Vec<u8>, usize)>(1);
    let (hasher_out, hashed) = sync_channel::<(Vec<u8>, usize)>(1);
    let hasher = std::thread::spawn(move || {
        for (buf, n) in hasher_in {
            std::hint::black_box(blake3::hash(&buf[..n]));
            if hasher_out.send((buf, n)).is_err() {
                break;
            }
        }
    });
    let gone = || std::io::Error::other("hashing thread ended");
    let mut spare = vec![vec![0u8; CHUNK], vec![0u8; CHUNK]];
    let (mut total, mut in_flight) = (0u64, false);
    loop {
        let mut buf = spare.pop().ok_or_else(gone)?;
        let filled = fill(sock, &mut buf)?;
        if in_flight {
            let (done, n) = hashed.recv().map_err(|_| gone())?;
            file.write_all(&done[..n])?;
            total += n as u64;
            spare.push(done);
        }
        if filled == 0 {
            break;
        }
        to_hasher.send((buf, filled)).map_err(|_| gone())?;
        in_flight = true;
    }
    drop(to_hasher);
    hasher.join().map_err(|_| gone())?;
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

/// `--buffer BYTES`: the receiver's read and write size (default 4 MiB;
/// `--blake3-thread` always uses 4 MiB).
fn buffer_arg(args: &[String]) -> Option<usize> {
    let at = args.iter().position(|a| a == "--buffer")?;
    args.get(at + 1)?.parse().ok().filter(|&n| n > 0)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.get(1).map(String::as_str) {
        Some("recv") if args.len() >= 4 => recv(
            &args[2],
            &args[3],
            args.iter().any(|a| a == "--fsync"),
            if args.iter().any(|a| a == "--blake3-thread") {
                RecvHash::Thread
            } else if args.iter().any(|a| a == "--blake3") {
                RecvHash::Inline
            } else {
                RecvHash::None
            },
            buffer_arg(&args).unwrap_or(CHUNK),
        ),
        Some("send") if args.len() >= 4 => {
            send(&args[2], &args[3], args.iter().any(|a| a == "--blake3"))
        }
        _ => {
            eprintln!(
                "usage: sendfile-baseline recv ADDR OUT [--fsync] [--blake3|--blake3-thread] [--buffer BYTES] | send ADDR FILE [--blake3]"
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
