//! Retries of one file (or one listing): [`haul_run::backoff`]'s
//! exponential backoff with jitter and a limit, for the errors worth
//! retrying.

use std::time::Duration;

use haul_remote::RemoteError;
use haul_run::backoff::RetryPolicy;

/// The retry budget of one file (or one directory listing).
#[derive(Debug)]
pub(crate) struct Backoff(haul_run::backoff::Backoff);

impl Backoff {
    /// A budget under `policy`, with its own jitter.
    pub(crate) fn new(policy: RetryPolicy) -> Self {
        Self(policy.backoff(haul_run::backoff::Backoff::fresh_seed()))
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
        let mut b = Backoff::new(RetryPolicy {
            retries: 3,
            first_wait: Duration::from_millis(100),
        });
        let t = RemoteError::Timeout("x".into());
        let w1 = b.next(&t).unwrap();
        let w2 = b.next(&t).unwrap();
        let w3 = b.next(&t).unwrap();
        assert!(w1 >= Duration::from_millis(50) && w1 <= Duration::from_millis(100));
        assert!(w2 >= Duration::from_millis(100) && w2 <= Duration::from_millis(200));
        assert!(w3 >= Duration::from_millis(200) && w3 <= Duration::from_millis(400));
        assert!(b.next(&t).is_none());
        let mut b = Backoff::new(RetryPolicy {
            retries: 3,
            first_wait: Duration::from_millis(100),
        });
        assert!(b.next(&RemoteError::NotFound("x".into())).is_none());
    }
}
