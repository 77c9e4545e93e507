//! Exponential backoff with jitter and a limit.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use haul_remote::RemoteError;

/// The retry budget of one file (or one directory listing).
#[derive(Debug)]
pub(crate) struct Backoff {
    attempts: u32,
    limit: u32,
    base: Duration,
}

/// Longest wait between two attempts.
const MAX_WAIT: Duration = Duration::from_secs(30);

impl Backoff {
    /// `limit` retries, first wait about `base`.
    pub(crate) fn with_base(limit: u32, base: Duration) -> Self {
        Self {
            attempts: 0,
            limit,
            base,
        }
    }

    /// Retries used so far.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The wait before the next attempt after `err`, or `None` when `err`
    /// is not worth retrying or the budget is spent.
    pub(crate) fn next(&mut self, err: &RemoteError) -> Option<Duration> {
        if !err.is_retryable() || self.attempts >= self.limit {
            return None;
        }
        self.attempts += 1;
        let exp = self
            .base
            .saturating_mul(1 << (self.attempts - 1).min(16))
            .min(MAX_WAIT);
        // Full jitter on the upper half: waits spread between exp/2 and exp.
        let half = exp / 2;
        let r = RandomState::new().build_hasher().finish();
        let jitter = half.mul_f64((r % 10_000) as f64 / 10_000.0);
        Some(half + jitter)
    }

    /// A retryable failure that moved data does not use up the budget: a
    /// flaky link that still makes progress is not given up on.
    pub(crate) fn progress_made(&mut self) {
        self.attempts = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_is_bounded_and_stops() {
        let mut b = Backoff::with_base(3, Duration::from_millis(100));
        let t = RemoteError::Timeout("x".into());
        let w1 = b.next(&t).unwrap();
        let w2 = b.next(&t).unwrap();
        let w3 = b.next(&t).unwrap();
        assert!(w1 >= Duration::from_millis(50) && w1 <= Duration::from_millis(100));
        assert!(w2 >= Duration::from_millis(100) && w2 <= Duration::from_millis(200));
        assert!(w3 >= Duration::from_millis(200) && w3 <= Duration::from_millis(400));
        assert!(b.next(&t).is_none());
        let mut b = Backoff::with_base(3, Duration::from_millis(100));
        assert!(b.next(&RemoteError::NotFound("x".into())).is_none());
    }
}
