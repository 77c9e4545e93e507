//! Rates shown to people: bytes per second averaged over a sliding window
//! of a few seconds, with time passed in.
//!
//! A rate taken from two samples a few milliseconds apart (a burst of
//! chunks, a report that came late) swings to absurd values (TiB/s); a
//! rate over the whole run hides a stall for minutes. [`WindowedRate`]
//! keeps the samples of the last window and divides what moved by the time
//! it took, never by a span shorter than [`MIN_SPAN`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The window rates are averaged over by default.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(5);

/// The shortest span a rate is computed over: before the samples cover
/// this much time there is no rate yet.
pub const MIN_SPAN: Duration = Duration::from_millis(500);

/// Samples closer together than this are merged (the newest total wins),
/// so a window holds a bounded number of them however often bytes move.
const MERGE: Duration = Duration::from_millis(100);

/// A byte rate over a sliding window of samples of a growing total.
#[derive(Debug, Clone)]
pub struct WindowedRate {
    window: Duration,
    /// `(when, total bytes then)`, oldest first; the first may lie before
    /// the window (it anchors the window's start).
    samples: VecDeque<(Instant, u64)>,
}

impl Default for WindowedRate {
    fn default() -> Self {
        Self::new(DEFAULT_WINDOW)
    }
}

impl WindowedRate {
    /// A rate averaged over `window` (at least [`MIN_SPAN`]).
    pub fn new(window: Duration) -> Self {
        Self {
            window: window.max(MIN_SPAN),
            samples: VecDeque::new(),
        }
    }

    /// Records that `total` bytes had moved by `now`. Totals only grow: a
    /// smaller one (a counter that started over) starts the window again.
    pub fn record(&mut self, now: Instant, total: u64) {
        if let Some(&(t, last)) = self.samples.back() {
            if total < last || now < t {
                self.samples.clear();
            }
        }
        // The newest sample is replaced while it is within MERGE of the
        // one before it (which stays put), so samples lie about MERGE apart.
        let n = self.samples.len();
        let merge = n >= 2
            && self
                .samples
                .get(n - 2)
                .is_some_and(|&(t, _)| now.saturating_duration_since(t) < MERGE);
        match (merge, self.samples.back_mut()) {
            (true, Some(back)) => *back = (now, total),
            _ => self.samples.push_back((now, total)),
        }
        // Keep one sample at or before the window's start, none older.
        let start = now.checked_sub(self.window);
        while let (Some(start), Some(&(second, _))) = (start, self.samples.get(1)) {
            if second > start {
                break;
            }
            self.samples.pop_front();
        }
    }

    /// Bytes per second over the window that ends at `now`; `None` until
    /// the samples span [`MIN_SPAN`]. A transfer that stalled for a whole
    /// window has a rate of zero.
    pub fn rate(&self, now: Instant) -> Option<f64> {
        let &(_, last) = self.samples.back()?;
        let start = now.checked_sub(self.window);
        // The newest sample at or before the window's start, else the oldest.
        let base = start
            .and_then(|start| self.samples.iter().rev().find(|(t, _)| *t <= start))
            .or_else(|| self.samples.front())?;
        let span = now.saturating_duration_since(base.0);
        if span < MIN_SPAN {
            return None;
        }
        Some(last.saturating_sub(base.1) as f64 / span.as_secs_f64())
    }

    /// How long `remaining` bytes take at [`WindowedRate::rate`]; `None`
    /// with no rate yet or a stalled one.
    pub fn eta(&self, now: Instant, remaining: u64) -> Option<Duration> {
        let rate = self.rate(now)?;
        if rate < 1.0 {
            return None;
        }
        Duration::try_from_secs_f64(remaining as f64 / rate).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn no_rate_before_the_samples_span_enough_time() {
        let t0 = Instant::now();
        let mut r = WindowedRate::default();
        assert_eq!(r.rate(t0), None);
        r.record(t0, 0);
        // A burst a millisecond after the first sample is no TiB/s.
        r.record(at(t0, 1), 64 << 20);
        assert_eq!(r.rate(at(t0, 1)), None);
        assert_eq!(r.rate(at(t0, 499)), None);
        let rate = r.rate(at(t0, 500)).unwrap_or_default();
        assert!((rate - 128.0 * 1048576.0).abs() < 1.0, "{rate}");
    }

    #[test]
    fn a_steady_rate_is_measured_over_the_window() {
        let t0 = Instant::now();
        let mut r = WindowedRate::new(Duration::from_secs(5));
        for s in 0..=20u64 {
            r.record(at(t0, s * 1000), s * 10_000_000);
        }
        let rate = r.rate(at(t0, 20_000)).unwrap_or_default();
        assert!((rate - 10_000_000.0).abs() < 1.0, "{rate}");
        assert!(r.samples.len() <= 7, "{} samples kept", r.samples.len());
    }

    #[test]
    fn a_spike_is_averaged_out_and_a_stall_goes_to_zero() {
        let t0 = Instant::now();
        let mut r = WindowedRate::new(Duration::from_secs(5));
        for s in 0..=10u64 {
            r.record(at(t0, s * 1000), s * 1_000_000);
        }
        // A report that carried 3 s of bytes arrives 10 ms after the last.
        r.record(at(t0, 10_010), 13_000_000);
        let rate = r.rate(at(t0, 10_010)).unwrap_or_default();
        assert!(rate < 2_000_000.0, "spiked to {rate}");
        // Nothing moves for a whole window: zero, not the old rate.
        assert_eq!(r.rate(at(t0, 15_010)), Some(0.0));
        assert_eq!(r.eta(at(t0, 15_010), 1000), None);
    }

    #[test]
    fn a_counter_that_starts_over_starts_the_window_over() {
        let t0 = Instant::now();
        let mut r = WindowedRate::default();
        r.record(t0, 0);
        r.record(at(t0, 1000), 50_000_000);
        r.record(at(t0, 2000), 10);
        assert_eq!(r.rate(at(t0, 2000)), None);
        r.record(at(t0, 3000), 1_000_010);
        let rate = r.rate(at(t0, 3000)).unwrap_or_default();
        assert!((rate - 1_000_000.0).abs() < 1.0, "{rate}");
    }

    #[test]
    fn many_samples_a_second_stay_few() {
        let t0 = Instant::now();
        let mut r = WindowedRate::new(Duration::from_secs(5));
        for ms in 0..=10_000u64 {
            r.record(at(t0, ms), ms * 1000);
        }
        assert!(r.samples.len() <= 53, "{} samples kept", r.samples.len());
        let rate = r.rate(at(t0, 10_000)).unwrap_or_default();
        assert!((rate - 1_000_000.0).abs() < 1000.0, "{rate}");
    }

    #[test]
    fn eta_is_what_is_left_at_the_rate() {
        let t0 = Instant::now();
        let mut r = WindowedRate::default();
        r.record(t0, 0);
        r.record(at(t0, 2000), 2_000_000);
        assert_eq!(r.eta(at(t0, 2000), 5_000_000), Some(Duration::from_secs(5)));
    }
}
