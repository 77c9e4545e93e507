//! A rising minimum over recent rounds: the smallest of the values noted in
//! the last [`FLOOR_ROUNDS`] rounds and in the last [`FLOOR_WINDOW`],
//! whichever reaches further back. Pure: times and round numbers come in.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{FLOOR_ROUNDS, FLOOR_WINDOW, MAX_FLOORS};

/// The floor of a duration noted once a round (a path's RTT without a
/// queue of its own).
#[derive(Debug, Clone, Default)]
pub(super) struct Floor {
    /// (when, round number, value), values rising from front to back.
    kept: VecDeque<(Instant, u64, Duration)>,
}

impl Floor {
    /// Round `round` ended at `now` with `low` its value.
    pub(super) fn note(&mut self, now: Instant, round: u64, low: Duration) {
        // A later, smaller value makes earlier, larger ones irrelevant.
        while self.kept.back().is_some_and(|&(_, _, v)| v >= low) {
            self.kept.pop_back();
        }
        self.kept.push_back((now, round, low));
        while self.kept.len() > MAX_FLOORS
            || self.kept.front().is_some_and(|&(t, r, _)| {
                now.saturating_duration_since(t) > FLOOR_WINDOW && r + FLOOR_ROUNDS as u64 <= round
            })
        {
            self.kept.pop_front();
        }
    }

    /// The floor (`None`: nothing noted yet).
    pub(super) fn get(&self) -> Option<Duration> {
        self.kept.front().map(|&(_, _, v)| v)
    }
}
