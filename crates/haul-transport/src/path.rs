//! What a transfer knows of its path before it starts, and what its QUIC
//! connections learned of it by the time they closed.
//!
//! A transfer over a path it has crossed before starts at the rate it
//! settled at ([`haul_congestion::PathHint`]): the client remembers it
//! (`haul-node`'s `path_memory`) or the user says it (`--rate-hint`).
//! Every data connection of the transfer starts at it — a push's sender is
//! the client's own controller ([`crate::MessageWriter::start_at`]); a
//! pull's is the node's, which reads it in the client's `Fetch` — since
//! which of a pool's connections will carry the data is not known when
//! they open (a single large file goes over one of them; many files over
//! all, which then overshoot together for a round and each fall back to
//! what got through, as startups that overshoot do). Every QUIC connection
//! of the transfer notes its round trip, loss and reordering here as it
//! closes, for the client to remember.

use std::sync::Mutex;
use std::time::Duration;

pub use haul_congestion::PathHint;

/// Which way a transfer's data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flow {
    /// From the client to the node.
    Push,
    /// From the node to the client.
    Pull,
}

impl Flow {
    /// `push` or `pull`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Push => "push",
            Self::Pull => "pull",
        }
    }
}

/// What QUIC connections saw of the path, merged over those that closed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PathSeen {
    /// The smallest round trip any of them measured.
    pub rtt: Option<Duration>,
    /// The bottleneck estimates (bytes per second acknowledged) of the
    /// controllers that found their rate, summed: what the client's own
    /// senders found the path to carry (the client's controllers send
    /// only on a push).
    pub rate: Option<u64>,
    /// The highest random-loss estimate of such a controller.
    pub loss: Option<f64>,
    /// Packets the client sent, and of those declared lost and
    /// acknowledged later after all (reordering).
    pub sent: u64,
    /// See `sent`.
    pub late: u64,
}

/// One transfer's hint and notes, shared by its connections.
#[derive(Debug, Default)]
pub struct PathLearning {
    start: Mutex<Option<PathHint>>,
    seen: Mutex<PathSeen>,
    /// What `--transport auto` chose for the node, and why.
    chosen: Mutex<Option<crate::Decision>>,
}

impl PathLearning {
    /// A transfer whose data connections start at `hint`.
    pub fn starting_at(hint: Option<PathHint>) -> Self {
        Self {
            start: Mutex::new(hint),
            seen: Mutex::default(),
            chosen: Mutex::default(),
        }
    }

    /// `--transport auto` chose a transport for the node.
    pub fn chose(&self, decision: &crate::Decision) {
        if let Ok(mut c) = self.chosen.lock() {
            *c = Some(decision.clone());
        }
    }

    /// What `--transport auto` chose, once it did.
    pub fn chosen(&self) -> Option<crate::Decision> {
        self.chosen.lock().ok().and_then(|c| c.clone())
    }

    /// The hint a data connection starts at.
    pub fn start(&self) -> Option<PathHint> {
        self.start.lock().ok().and_then(|s| *s)
    }

    /// What the transfer itself measured of the path (`--transport auto`'s
    /// trial): the hint of the connections it opens from now on, unless
    /// it started with one.
    pub fn measured(&self, hint: PathHint) {
        if let Ok(mut s) = self.start.lock() {
            s.get_or_insert(hint);
        }
    }

    /// A connection closed having seen this; `settled` is its controller's
    /// bottleneck estimate and loss if it left startup.
    pub fn note(&self, rtt: Duration, settled: Option<(u64, f64)>, sent: u64, late: u64) {
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        if !rtt.is_zero() {
            seen.rtt = Some(seen.rtt.map_or(rtt, |r| r.min(rtt)));
        }
        if let Some((rate, l)) = settled {
            seen.rate = Some(seen.rate.map_or(rate, |m| m.saturating_add(rate)));
            seen.loss = Some(seen.loss.map_or(l, |m| m.max(l)));
        }
        seen.sent += sent;
        seen.late += late;
    }

    /// What the connections that closed so far saw.
    pub fn seen(&self) -> PathSeen {
        self.seen.lock().map(|s| *s).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_merge_over_connections() {
        let hint = PathHint {
            rate: 1000,
            loss: 0.1,
        };
        let p = PathLearning::starting_at(Some(hint));
        assert_eq!(p.start(), Some(hint));
        // A hint the transfer started with is kept.
        p.measured(PathHint { rate: 5, loss: 0.0 });
        assert_eq!(p.start(), Some(hint));
        let cold = PathLearning::starting_at(None);
        cold.measured(hint);
        assert_eq!(cold.start(), Some(hint));
        p.note(Duration::from_millis(30), None, 10, 1);
        p.note(Duration::from_millis(20), Some((100, 0.2)), 5, 0);
        p.note(Duration::ZERO, Some((300, 0.1)), 0, 0);
        let s = p.seen();
        assert_eq!(s.rtt, Some(Duration::from_millis(20)));
        assert_eq!(s.rate, Some(400));
        assert_eq!(s.loss, Some(0.2));
        assert_eq!((s.sent, s.late), (15, 1));
    }
}
