//! A cap on the bytes a transfer moves per second (`--max-rate`, rsync's
//! `--bwlimit`), shared by all its connections and applied as bytes are
//! written and read, in slices of [`SLICE`] bytes: paced, never a second's
//! worth at once and then a pause.
//!
//! The limiter keeps a virtual clock: each slice may go when the slices
//! before it had their time at the rate. A pause gives no credit beyond
//! [`SLACK`] (a late wake-up is made up, an idle second is not followed by a
//! second's burst).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most bytes moved between two waits.
pub const SLICE: usize = 64 << 10;

/// Credit a late wake-up or a quiet moment leaves: at most this much of the
/// rate goes at once after a pause. A loaded machine wakes timers tens of
/// milliseconds late; with 5 ms the time lost to each late wake-up was never
/// made up and a lab push ran 5-10 % under its cap while other tests ran.
const SLACK: Duration = Duration::from_millis(50);

/// A byte rate shared by the connections of one transfer.
#[derive(Debug)]
pub struct RateLimit {
    bytes_per_sec: f64,
    /// When the next byte may go.
    next: Mutex<Option<Instant>>,
}

impl RateLimit {
    /// A limit of `bytes_per_sec` (at least 1).
    pub fn new(bytes_per_sec: u64) -> Self {
        Self {
            bytes_per_sec: bytes_per_sec.max(1) as f64,
            next: Mutex::new(None),
        }
    }

    /// The rate in bytes per second.
    pub fn bytes_per_sec(&self) -> u64 {
        self.bytes_per_sec as u64
    }

    /// When `n` bytes may go, reserving their time (pure: `now` passed in).
    pub fn reserve(&self, now: Instant, n: usize) -> Instant {
        let Ok(mut next) = self.next.lock() else {
            return now;
        };
        let start = match *next {
            Some(t) => t.max(now.checked_sub(SLACK).unwrap_or(now)),
            None => now,
        };
        *next = Some(start + Duration::from_secs_f64(n as f64 / self.bytes_per_sec));
        start
    }

    /// Waits until `n` bytes may go.
    pub async fn take(&self, n: usize) {
        let at = self.reserve(Instant::now(), n);
        if at > Instant::now() {
            tokio::time::sleep_until(at.into()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_are_spread_at_the_rate() {
        let l = RateLimit::new(1_000_000);
        let t0 = Instant::now();
        let mut last = t0;
        for _ in 0..100 {
            last = l.reserve(t0, 10_000);
        }
        // 100 slices of 10 kB at 1 MB/s: the last starts 0.99 s in.
        let d = last.duration_since(t0).as_secs_f64();
        assert!((d - 0.99).abs() < 1e-6, "{d}");
    }

    #[test]
    fn a_quiet_moment_gives_no_burst_of_credit() {
        let l = RateLimit::new(1_000_000);
        let t0 = Instant::now();
        l.reserve(t0, 10_000);
        // Ten seconds of silence, then slices of 100 ms each: the first goes
        // at once, the second after at most SLACK's credit (no ten seconds
        // of saved credit).
        let later = t0 + Duration::from_secs(10);
        let first = l.reserve(later, 100_000);
        let second = l.reserve(later, 100_000);
        assert!(first <= later);
        let wait = second - later;
        assert!(
            wait >= Duration::from_millis(100) - SLACK - Duration::from_millis(1),
            "{wait:?}"
        );
    }

    #[test]
    fn wake_ups_a_little_late_keep_the_rate() {
        // A sender that always wakes 20 ms after its time (a loaded
        // machine): the slices still start at the rate's own times.
        let l = RateLimit::new(1_000_000);
        let t0 = Instant::now();
        let mut at = l.reserve(t0, 10_000);
        for _ in 0..99 {
            at = l.reserve(at + Duration::from_millis(20), 10_000);
        }
        let d = at.duration_since(t0).as_secs_f64();
        assert!((d - 0.99).abs() < 0.021, "{d}");
    }
}
