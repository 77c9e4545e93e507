//! An in-test UDP proxy between a QUIC client and a node that flips a byte
//! in some of the datagrams it forwards, both ways: damage on a real
//! connection, with no test hooks in haul.

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
}

impl UdpProxy {
    /// Forwards to `target`, flipping one byte of every `every`-th datagram
    /// in each direction (at a position that varies).
    pub fn start(target: SocketAddr, every: u64) -> UdpProxy {
        let front = UdpSocket::bind("127.0.0.1:0").expect("bind proxy");
        let back = UdpSocket::bind("127.0.0.1:0").expect("bind proxy");
        back.connect(target).expect("connect proxy");
        for s in [&front, &back] {
            s.set_read_timeout(Some(Duration::from_millis(50)))
                .expect("timeout");
        }
        let addr = front.local_addr().expect("addr");
        let client: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let (stop, flipped) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (front2, back2) = (
            front.try_clone().expect("clone"),
            back.try_clone().expect("clone"),
        );
        let up = {
            let (stop, flipped, client) = (stop.clone(), flipped.clone(), client.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let Ok((len, from)) = front.recv_from(&mut buf) else {
                        continue;
                    };
                    *client.lock().expect("lock") = Some(from);
                    n += 1;
                    damage(&mut buf[..len], n, every, &flipped);
                    let _ = back.send(&buf[..len]);
                }
            })
        };
        let down = {
            let (stop, flipped) = (stop.clone(), flipped.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let Ok(len) = back2.recv(&mut buf) else {
                        continue;
                    };
                    let Some(to) = *client.lock().expect("lock") else {
                        continue;
                    };
                    n += 1;
                    damage(&mut buf[..len], n, every, &flipped);
                    let _ = front2.send_to(&buf[..len], to);
                }
            })
        };
        UdpProxy {
            addr,
            flipped,
            stop,
            threads: vec![up, down],
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("haul://{}/{}", self.addr, path)
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
    }
}
