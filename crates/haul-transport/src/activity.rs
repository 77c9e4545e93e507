//! When bytes last arrived on a connection: one clock its reader touches
//! on every read that returned data, however the bytes are framed (a
//! control message, a part of a chunk's payload, any QUIC stream).
//!
//! A fan-out's relayed receiver asks it how long its sender has been
//! silent (`haul_session::Heartbeat`): the frames alone would not say, as a
//! large chunk's payload arrives for seconds between two of them on a slow
//! link, and a link cut halfway through one leaves the reader waiting
//! inside it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The time of the last arrival, shared by a reader and whoever watches it.
#[derive(Debug)]
pub struct Activity {
    epoch: Instant,
    micros: AtomicU64,
}

impl Activity {
    /// A clock whose last arrival is now.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            epoch: Instant::now(),
            micros: AtomicU64::new(0),
        })
    }

    /// Bytes arrived now.
    pub fn touch(&self) {
        let us = self.epoch.elapsed().as_micros() as u64;
        self.micros.fetch_max(us, Ordering::Relaxed);
    }

    /// When bytes last arrived (the clock's start, if none did).
    pub fn last(&self) -> Instant {
        self.epoch + Duration::from_micros(self.micros.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_arrival_only_moves_forward() {
        let a = Activity::new();
        let start = a.last();
        std::thread::sleep(Duration::from_millis(2));
        a.touch();
        let touched = a.last();
        assert!(touched > start);
        assert!(touched <= Instant::now());
        a.touch();
        assert!(a.last() >= touched);
    }
}
