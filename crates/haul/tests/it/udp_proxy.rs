//! An in-test UDP proxy between a QUIC client and a node that flips a byte
//! in some of the datagrams it forwards, both ways: damage on a real
//! connection, with no test hooks in haul.

use std::collections::hash_map::{Entry, HashMap};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A running proxy; stopped and joined on drop.
pub struct UdpProxy {
    /// Where clients send (`127.0.0.1:port`).
    pub addr: SocketAddr,
    /// Datagrams damaged so far.
    pub flipped: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// One per client address.
    downs: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl UdpProxy {
    /// Forwards to `target`, flipping one byte of every `every`-th datagram
    /// in each direction (at a position that varies). Each client address
    /// gets a socket of its own towards `target`, as behind a NAT: a pull
    /// runs several QUIC connections at once, each from its own port, and
    /// each must get its own replies.
    pub fn start(target: SocketAddr, every: u64) -> UdpProxy {
        let front = UdpSocket::bind("127.0.0.1:0").expect("bind proxy");
        front
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        let addr = front.local_addr().expect("addr");
        let (stop, flipped) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let downs: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let up = {
            let (stop, flipped, downs) = (stop.clone(), flipped.clone(), downs.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                let mut n = 0u64;
                let mut backs: HashMap<SocketAddr, UdpSocket> = HashMap::new();
                while !stop.load(Ordering::Relaxed) {
                    let Ok((len, from)) = front.recv_from(&mut buf) else {
                        continue;
                    };
                    let back = match backs.entry(from) {
                        Entry::Occupied(e) => e.into_mut(),
                        Entry::Vacant(e) => {
                            let back = UdpSocket::bind("127.0.0.1:0").expect("bind proxy");
                            back.connect(target).expect("connect proxy");
                            back.set_read_timeout(Some(Duration::from_millis(50)))
                                .expect("timeout");
                            let (back2, front2) = (
                                back.try_clone().expect("clone"),
                                front.try_clone().expect("clone"),
                            );
                            let (stop, flipped) = (stop.clone(), flipped.clone());
                            let down = std::thread::spawn(move || {
                                downstream(&back2, &front2, from, every, &stop, &flipped)
                            });
                            downs.lock().expect("lock").push(down);
                            e.insert(back)
                        }
                    };
                    n += 1;
                    damage(&mut buf[..len], n, every, &flipped);
                    let _ = back.send(&buf[..len]);
                }
            })
        };
        UdpProxy {
            addr,
            flipped,
            stop,
            threads: vec![up],
            downs,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("haul://{}/{}", self.addr, path)
    }
}

/// Forwards what `target` sends back on `back` to the client `to`.
fn downstream(
    back: &UdpSocket,
    front: &UdpSocket,
    to: SocketAddr,
    every: u64,
    stop: &AtomicBool,
    flipped: &AtomicU64,
) {
    let mut buf = vec![0u8; 65536];
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Ok(len) = back.recv(&mut buf) else {
            continue;
        };
        n += 1;
        damage(&mut buf[..len], n, every, flipped);
        let _ = front.send_to(&buf[..len], to);
    }
}

fn damage(pkt: &mut [u8], n: u64, every: u64, flipped: &AtomicU64) {
    if every == 0 || !n.is_multiple_of(every) || pkt.is_empty() {
        return;
    }
    let at = (n.wrapping_mul(2_654_435_761) % pkt.len() as u64) as usize;
    pkt[at] ^= 1 << (n % 8);
    flipped.fetch_add(1, Ordering::Relaxed);
}

impl Drop for UdpProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let downs = std::mem::take(&mut *self.downs.lock().unwrap_or_else(|e| e.into_inner()));
        for t in downs {
            let _ = t.join();
        }
    }
}
