//! Exponential backoff with jitter and a limit, pure: the caller sleeps.
//!
//! Jitter comes from a generator seeded per connection (or per file), so
//! connections of one process that failed together do not all come back at
//! the same instant.

use std::time::Duration;

/// How a connection, file or listing is tried again: the one policy
/// behind `--retries`, for a node's pools and re-listings, remote crawls
/// and downloads, and the daemon's sources alike (each attempt draws its
/// own jitter from its [`Backoff`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries before giving up (progress made starts the count again).
    pub retries: u32,
    /// The first wait; it doubles up to [`RetryPolicy::MAX_WAIT`].
    pub first_wait: Duration,
}

impl RetryPolicy {
    /// The longest wait between two attempts.
    pub const MAX_WAIT: Duration = Duration::from_secs(30);

    /// A budget under this policy, its jitter from `seed` (give each
    /// connection or file its own).
    pub fn backoff(&self, seed: u64) -> Backoff {
        Backoff::new(self.retries, self.first_wait, Self::MAX_WAIT, seed)
    }
}

impl Default for RetryPolicy {
    /// `--retries 5`, a first wait of about half a second.
    fn default() -> Self {
        Self {
            retries: 5,
            first_wait: Duration::from_millis(500),
        }
    }
}

/// The retry budget of one connection, file or listing.
#[derive(Debug, Clone)]
pub struct Backoff {
    attempts: u32,
    limit: u32,
    base: Duration,
    max: Duration,
    rng: u64,
}

impl Backoff {
    /// `limit` retries; the first wait is about `base`, doubling to at most
    /// `max`; jitter from `seed` (give each connection its own).
    pub fn new(limit: u32, base: Duration, max: Duration, seed: u64) -> Self {
        Self {
            attempts: 0,
            limit,
            base,
            max,
            // Never zero: xorshift would stay there.
            rng: seed | 1,
        }
    }

    /// A seed that differs between calls and processes (for callers that
    /// have no seed of their own).
    pub fn fresh_seed() -> u64 {
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    }

    /// Retries used so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The wait before the next attempt, or `None` once the budget is spent.
    /// Waits spread between half and all of the exponential step.
    pub fn next_wait(&mut self) -> Option<Duration> {
        if self.attempts >= self.limit {
            return None;
        }
        self.attempts += 1;
        let exp = self
            .base
            .saturating_mul(1 << (self.attempts - 1).min(16))
            .min(self.max);
        let half = exp / 2;
        Some(half + half.mul_f64(self.unit()))
    }

    /// Progress was made: the budget starts again (a flaky link that still
    /// moves data is not given up on).
    pub fn progress_made(&mut self) {
        self.attempts = 0;
    }

    /// A number in `0..1` (xorshift64*).
    fn unit(&mut self) -> f64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn grows_is_bounded_and_stops() {
        let mut b = Backoff::new(4, 100 * MS, 300 * MS, 7);
        let waits: Vec<Duration> = std::iter::from_fn(|| b.next_wait()).collect();
        assert_eq!(waits.len(), 4);
        assert!(waits[0] >= 50 * MS && waits[0] <= 100 * MS);
        assert!(waits[1] >= 100 * MS && waits[1] <= 200 * MS);
        assert!(waits[2] >= 150 * MS && waits[2] <= 300 * MS, "capped");
        assert!(waits[3] <= 300 * MS);
        b.progress_made();
        assert_eq!(b.attempts(), 0);
        assert!(b.next_wait().is_some());
    }

    #[test]
    fn connections_with_their_own_seeds_do_not_retry_in_lockstep() {
        let waits = |seed| {
            let mut b = Backoff::new(5, 1000 * MS, 8000 * MS, seed);
            std::iter::from_fn(move || b.next_wait()).collect::<Vec<_>>()
        };
        let a = waits(1);
        let b = waits(2);
        assert_ne!(a, b);
        assert!(a.iter().zip(&b).any(|(x, y)| x.abs_diff(*y) > 20 * MS));
        // The same seed gives the same waits (tests are deterministic).
        assert_eq!(waits(3), waits(3));
    }
}
