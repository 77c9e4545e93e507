//! What the kernel knows of a TCP connection (`TCP_INFO`): the bytes its
//! peer acknowledged, segments sent and retransmitted, the least round
//! trip. `--transport auto` compares it with QUIC's own counts
//! ([`crate::choice`]).

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Meter;

/// How often a writer reads `TCP_INFO` (a system call) into its meter.
const EVERY: Duration = Duration::from_millis(100);

/// A TCP connection's [`Meter`], fed from `TCP_INFO` as the connection
/// writes.
pub(crate) struct TcpMeter {
    /// The socket: valid for as long as the writer holding this lives (the
    /// writer holds the socket's write half).
    fd: RawFd,
    meter: Arc<Meter>,
    read_at: Option<Instant>,
}

impl TcpMeter {
    pub(crate) fn new(fd: RawFd, meter: Arc<Meter>) -> Self {
        Self {
            fd,
            meter,
            read_at: None,
        }
    }

    /// [`Meter::check`].
    pub(crate) fn check(&self) -> Result<(), crate::TransportError> {
        self.meter.check()
    }

    /// Reads `TCP_INFO` into the meter, at most every [`EVERY`].
    pub(crate) fn note(&mut self) {
        let now = Instant::now();
        if self.read_at.is_some_and(|t| now.duration_since(t) < EVERY) {
            return;
        }
        self.read_at = Some(now);
        if let Some(info) = read(self.fd) {
            self.meter.sender_totals(
                info.tcpi_bytes_acked,
                u64::from(info.tcpi_data_segs_out),
                u64::from(info.tcpi_total_retrans),
                // The least round trip seen: a full send buffer's queue
                // raises the smoothed one on loopback to milliseconds.
                Duration::from_micros(u64::from(match info.tcpi_min_rtt {
                    0 => info.tcpi_rtt,
                    min => min,
                })),
            );
        }
    }
}

/// `TCP_INFO` of the socket `fd`; `None` if the kernel would not say.
fn read(fd: RawFd) -> Option<libc::tcp_info> {
    // SAFETY: `tcp_info` is plain old data (all integers): zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `fd` is an open socket (see `TcpMeter::fd`); `info` and `len`
    // are valid for writes of `len` bytes, which the kernel does not exceed.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[tokio::test]
    async fn acknowledged_bytes_are_counted() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        let meter = Meter::new();
        let mut tcp = TcpMeter::new(client.as_raw_fd(), meter.clone());
        client.write_all(&[7u8; 100_000]).await.unwrap();
        let mut got = vec![0u8; 100_000];
        server.read_exact(&mut got).await.unwrap();
        // Acknowledged by now or very soon (loopback).
        for _ in 0..100 {
            tcp.read_at = None;
            tcp.note();
            if meter.delivered() >= 100_000 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(meter.delivered() >= 100_000, "{}", meter.delivered());
        assert!(meter.packets().0 > 0);
        assert!(meter.rtt().is_some());
    }
}
