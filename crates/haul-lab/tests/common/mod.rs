//! Measurement tools for the lab's accuracy tests: UDP probe flows, a UDP
//! echo for round-trip times and TCP bulk flows, all in-process (sockets
//! are opened on threads that entered a host's namespace).

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_arguments
)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use haul_lab::Lab;

static LOCK: Mutex<()> = Mutex::new(());

/// Serializes the lab tests of one binary: measurements on a 2-core box
/// must not run side by side.
pub fn serial() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Fails a lab test run without root (never a silent pass): such tests
/// are ignored unless built with `root-tests`.
pub fn root(test: &str) {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "{test}: the lab needs root (network namespaces, TUN); run as root"
    );
}

/// CLOCK_MONOTONIC in nanoseconds (the same clock in every namespace).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn setsockopt_int(fd: i32, level: i32, name: i32, v: i32) {
    // SAFETY: v is a valid int for the option.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        );
    }
}

/// One packet as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub seq: u32,
    pub sent_ns: u64,
    pub at_ns: u64,
    pub intact: bool,
}

/// Layout: seq (4 bytes), send time (8), the send time again (8), then a
/// pattern derived from seq, so a flip anywhere shows.
fn payload(seq: u32, size: usize) -> Vec<u8> {
    let mut p = vec![0u8; size.max(20)];
    p[..4].copy_from_slice(&seq.to_be_bytes());
    // Every bit of seq changes the pattern (odd multiplier: a bijection).
    let h = u64::from(seq)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .to_le_bytes();
    for (k, b) in p.iter_mut().enumerate().skip(20) {
        *b = h[k % 8] ^ (k as u8);
    }
    p
}

fn parse(p: &[u8], size: usize, at_ns: u64) -> Arrival {
    let seq = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
    let sent_ns = u64::from_be_bytes(p[4..12].try_into().unwrap());
    let mut expect = payload(seq, size);
    expect[4..12].copy_from_slice(&p[4..12]);
    expect[12..20].copy_from_slice(&p[4..12]);
    Arrival {
        seq,
        sent_ns,
        at_ns,
        intact: p.len() == size && p == &expect[..],
    }
}

/// Sends `n` UDP packets of `size` bytes, `gap` apart, from host `from` to
/// host `to` (1-based); returns what arrived within `linger` after the last
/// send. `no_check` turns the UDP checksum off (corruption then reaches
/// the application).
pub fn udp_flow(
    lab: &Lab,
    from: usize,
    to: usize,
    n: u32,
    gap: Duration,
    size: usize,
    no_check: bool,
    linger: Duration,
) -> Vec<Arrival> {
    let dst: SocketAddr = (lab.host(to).addr(), 9000).into();
    let rx = lab
        .host(to)
        .run(move || {
            let s = UdpSocket::bind(dst)?;
            setsockopt_int(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                8 << 20,
            );
            s.set_read_timeout(Some(Duration::from_millis(50)))?;
            Ok(s)
        })
        .unwrap();
    let tx = lab
        .host(from)
        .run(move || {
            let s = UdpSocket::bind("0.0.0.0:0")?;
            if no_check {
                setsockopt_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_NO_CHECK, 1);
            }
            s.connect(dst)?;
            Ok(s)
        })
        .unwrap();
    let total = gap * n + linger;
    let receiver = std::thread::spawn(move || {
        let start = Instant::now();
        let mut buf = vec![0u8; 65536];
        let mut got = Vec::new();
        while start.elapsed() < total {
            if let Ok(k) = rx.recv(&mut buf) {
                got.push(parse(&buf[..k], size, mono_ns()));
            }
        }
        got
    });
    let t0 = Instant::now();
    for i in 0..n {
        let target = t0 + gap * i;
        let now = Instant::now();
        if target > now {
            std::thread::sleep(target - now);
        }
        let mut p = payload(i, size);
        let now = mono_ns().to_be_bytes();
        p[4..12].copy_from_slice(&now);
        p[12..20].copy_from_slice(&now);
        tx.send(&p).unwrap();
    }
    receiver.join().unwrap()
}

/// Round-trip times in milliseconds of `samples` UDP echoes from host
/// `from` to host `to`, one every `every`.
pub fn udp_rtts(lab: &Lab, from: usize, to: usize, samples: u32, every: Duration) -> Vec<f64> {
    let dst: SocketAddr = (lab.host(to).addr(), 9001).into();
    let echo = lab
        .host(to)
        .run(move || {
            let s = UdpSocket::bind(dst)?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            Ok(s)
        })
        .unwrap();
    let server = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while let Ok((k, peer)) = echo.recv_from(&mut buf) {
            if &buf[..k] == b"stop" {
                break;
            }
            let _ = echo.send_to(&buf[..k], peer);
        }
    });
    let c = lab
        .host(from)
        .run(move || {
            let s = UdpSocket::bind("0.0.0.0:0")?;
            s.connect(dst)?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            Ok(s)
        })
        .unwrap();
    let mut rtts = Vec::new();
    let mut buf = [0u8; 64];
    for i in 0..samples {
        let t = Instant::now();
        c.send(&i.to_be_bytes()).unwrap();
        loop {
            let k = c.recv(&mut buf).expect("echo reply lost");
            if buf[..k] == i.to_be_bytes() {
                break;
            }
        }
        rtts.push(t.elapsed().as_secs_f64() * 1e3);
        std::thread::sleep(every);
    }
    let _ = c.send(b"stop");
    server.join().unwrap();
    rtts
}

/// Median of a sample.
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Mean of a sample.
pub fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Runs TCP bulk flows (from, to) side by side for `secs` and returns each
/// flow's goodput in bit/s, measured at the receiver after `warmup`.
pub fn tcp_flows(lab: &Lab, pairs: &[(usize, usize)], secs: f64, warmup: f64) -> Vec<f64> {
    let mut handles = Vec::new();
    for (k, &(from, to)) in pairs.iter().enumerate() {
        let dst: SocketAddr = (lab.host(to).addr(), 9100 + k as u16).into();
        let listener = lab.host(to).run(move || TcpListener::bind(dst)).unwrap();
        let receiver = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = vec![0u8; 1 << 18];
            let start = Instant::now();
            let mut in_window = 0u64;
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => {
                        let t = start.elapsed().as_secs_f64();
                        if t >= warmup && t <= secs {
                            in_window += k as u64;
                        }
                    }
                }
            }
            in_window as f64 * 8.0 / (secs - warmup)
        });
        let stream = lab.host(from).run(move || TcpStream::connect(dst)).unwrap();
        let sender = std::thread::spawn(move || {
            let mut s = stream;
            let buf = vec![7u8; 1 << 18];
            let start = Instant::now();
            // A little past the window so the receiver's window is full.
            while start.elapsed().as_secs_f64() < secs + 0.2 {
                if s.write_all(&buf).is_err() {
                    break;
                }
            }
            let _ = s.shutdown(std::net::Shutdown::Both);
        });
        handles.push((receiver, sender));
    }
    handles
        .into_iter()
        .map(|(r, s)| {
            s.join().unwrap();
            r.join().unwrap()
        })
        .collect()
}

/// Fraction of packets that arrived before a packet sent earlier
/// (netem's reordering: a picked packet jumps the delay queue).
pub fn early_fraction(arrivals: &[Arrival]) -> f64 {
    let max = arrivals.iter().map(|a| a.seq).max().unwrap_or(0) as usize;
    let mut order = vec![usize::MAX; max + 1];
    for (i, a) in arrivals.iter().enumerate() {
        if order[a.seq as usize] == usize::MAX {
            order[a.seq as usize] = i;
        }
    }
    let (mut early, mut latest, mut count) = (0, 0usize, 0);
    for &o in order.iter().filter(|&&o| o != usize::MAX) {
        if count > 0 && o < latest {
            early += 1;
        }
        latest = latest.max(o);
        count += 1;
    }
    early as f64 / count.max(1) as f64
}
