//! An in-test TCP proxy between a client and a node that can throttle,
//! flip a byte, or stall: faults on a real connection, no test hooks in haul.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the proxy does to traffic.
#[derive(Clone, Default)]
pub struct Faults {
    /// Bytes per second in each direction (None: unlimited).
    pub rate: Option<u64>,
    /// Flip one byte at this offset of the client→node stream (once overall).
    pub flip_up_at: Option<u64>,
    /// Flip one byte at this offset of the node→client stream (once overall).
    pub flip_down_at: Option<u64>,
    /// While set, nothing is forwarded (a peer that stops answering).
    pub stall: Arc<AtomicBool>,
    /// Cut the first connection (both ways) once this many node→client
    /// bytes went through it: a pull's listing that breaks off.
    pub cut_first_down_at: Option<u64>,
}

pub struct Proxy {
    pub addr: String,
    stop: Arc<AtomicBool>,
    pub up_bytes: Arc<AtomicU64>,
    pub down_bytes: Arc<AtomicU64>,
}

impl Proxy {
    pub fn start(target: &str, faults: Faults) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr").to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let up_bytes = Arc::new(AtomicU64::new(0));
        let down_bytes = Arc::new(AtomicU64::new(0));
        let flipped_up = Arc::new(AtomicBool::new(false));
        let flipped_down = Arc::new(AtomicBool::new(false));
        let (target, stop2, up2) = (target.to_owned(), stop.clone(), up_bytes.clone());
        let down2 = down_bytes.clone();
        std::thread::spawn(move || {
            let mut accepted = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let Ok(node) = TcpStream::connect(&target) else {
                            continue;
                        };
                        accepted += 1;
                        let cut = faults.cut_first_down_at.filter(|_| accepted == 1);
                        let _ = client.set_nonblocking(false);
                        let pipes = [
                            (
                                client.try_clone(),
                                node.try_clone(),
                                faults.flip_up_at,
                                flipped_up.clone(),
                                Some(up2.clone()),
                                None,
                            ),
                            (
                                node.try_clone(),
                                client.try_clone(),
                                faults.flip_down_at,
                                flipped_down.clone(),
                                Some(down2.clone()),
                                cut,
                            ),
                        ];
                        for (from, to, flip, flipped, counter, cut) in pipes {
                            let (Ok(from), Ok(to)) = (from, to) else {
                                continue;
                            };
                            let (rate, stall, stop) =
                                (faults.rate, faults.stall.clone(), stop2.clone());
                            let faults = PumpFaults {
                                rate,
                                flip,
                                flipped,
                                stall,
                                cut,
                            };
                            std::thread::spawn(move || pump(from, to, faults, stop, counter));
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy {
            addr,
            stop,
            up_bytes,
            down_bytes,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("haul://{}/{}", self.addr, path)
    }
}

/// A plaintext, open node rooted at `s`'s `node` (config in `config`),
/// reached through a proxy with `faults`.
pub fn plaintext_node_behind(
    s: &crate::harness::Scratch,
    faults: Faults,
) -> (crate::harness::Node, Proxy) {
    let node = crate::harness::Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let proxy = Proxy::start(&node.addr, faults);
    (node, proxy)
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What one direction of one connection does to its bytes.
struct PumpFaults {
    rate: Option<u64>,
    flip: Option<u64>,
    flipped: Arc<AtomicBool>,
    stall: Arc<AtomicBool>,
    cut: Option<u64>,
}

fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    faults: PumpFaults,
    stop: Arc<AtomicBool>,
    counter: Option<Arc<AtomicU64>>,
) {
    let PumpFaults {
        rate,
        flip,
        flipped,
        stall,
        cut,
    } = faults;
    let _ = from.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0u64;
    let start = Instant::now();
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if stall.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => break,
        };
        if let Some(at) = flip {
            if at >= total && at < total + n as u64 && !flipped.swap(true, Ordering::SeqCst) {
                buf[(at - total) as usize] ^= 0x5a;
            }
        }
        total += n as u64;
        if let Some(c) = &counter {
            c.fetch_add(n as u64, Ordering::Relaxed);
        }
        if let Some(cut) = cut.filter(|&c| total >= c) {
            let keep = n - (total - cut) as usize;
            let _ = to.write_all(&buf[..keep]);
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
            return;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        if let Some(rate) = rate {
            let due = Duration::from_secs_f64(total as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
