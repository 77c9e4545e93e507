//! Retries of one file (or one listing): [`haul_session::backoff`]'s
//! exponential backoff with jitter and a limit, for the errors worth
//! retrying.

use std::time::Duration;

use haul_remote::RemoteError;

/// The retry budget of one file (or one directory listing).
#[derive(Debug)]
pub(crate) struct Backoff(haul_session::backoff::Backoff);

/// Longest wait between two attempts.
const MAX_WAIT: Duration = Duration::from_secs(30);

impl Backoff {
    /// `limit` retries, first wait about `base`.
    pub(crate) fn with_base(limit: u32, base: Duration) -> Self {
        let seed = haul_session::backoff::Backoff::fresh_seed();
        Self(haul_session::backoff::Backoff::new(
            limit, base, MAX_WAIT, seed,
        ))
    }

    /// Retries used so far.
    pub(crate) fn attempts(&self) -> u32 {
        self.0.attempts()
    }

    /// The wait before the next attempt after `err`, or `None` when `err`
    /// is not worth retrying or the budget is spent.
    pub(crate) fn next(&mut self, err: &RemoteError) -> Option<Duration> {
        if !err.is_retryable() {
            return None;
        }
        self.0.next_wait()
    }

    /// A retryable failure that moved data does not use up the budget: a
    /// flaky link that still makes progress is not given up on.
    pub(crate) fn progress_made(&mut self) {
        self.0.progress_made();
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
