//! Whether a fan-out's node is still there: silence measured against what
//! the path can explain, with time passed in.
//!
//! A relay killed outright is seen at once (the kernel resets its
//! connections); one whose host lost power, froze or was cut off says
//! nothing at all, and waiting out `--timeout` (60 s) for it held every
//! node behind it for two minutes in the lab. So the client watches each
//! node's control connection: a node sends a report or a keepalive on it
//! at least every [`HEARTBEAT`], whatever its data is doing (the
//! connection carries no bulk data, so no chunk of its own queues in front
//! of it; a bottleneck queue its forwards fill can, which the floor and
//! the learned limit below allow for). The client *suspects* a node that
//! has said nothing for [`Liveness::limit`]:
//!
//! ```text
//! limit = max(FLOOR, 4 · HEARTBEAT + 4 · rtt)
//! ```
//!
//! - A constant delay moves every message alike and opens no gap: the
//!   round trip counts only as the time a lost packet takes to be sent
//!   again (QUIC's probe timeout and TCP's retransmission are about a
//!   round trip and a bit), allowed four times over.
//! - Loss opens gaps only as long as every packet in them is lost: with a
//!   message every 250 ms, two seconds of silence on a live path at 30 %
//!   loss needs eight losses in a row and more (0.3⁸ ≈ 7·10⁻⁵ a window),
//!   where one message a second would have needed two (9 %).
//! - The floor (2 s) covers a loaded machine's scheduling and a queue in
//!   front of a slow link; it is still thirty times under `--timeout`.
//!
//! The limit learns: a node whose messages came with a gap of `g` gets at
//! least `3g` from then on (at most four times the limit it started with),
//! so a path whose queue or losses space its messages out is given room
//! before it is suspected, as TCP's retransmission timer follows the round
//! trips it sees.
//!
//! A suspect is routed around at once ([`crate::Routing::lost`]); one
//! that speaks again is let back in as a leaf ([`crate::Routing::rejoin`])
//! and completes from the client (the client waits a few seconds for a
//! suspect when every other node is done), so a false suspicion costs
//! upload, not a failure. `tests/silent.rs` in haul-netsim runs this
//! detector against simulated heartbeats over lossy control paths.

use std::time::{Duration, Instant};

/// A node's control connection carries a report or a keepalive at least
/// this often.
pub const HEARTBEAT: Duration = Duration::from_millis(250);

/// No node is suspected sooner than this after its last word.
pub const FLOOR: Duration = Duration::from_secs(2);

/// One node's liveness as its control connection shows it.
#[derive(Debug, Clone)]
pub struct Liveness {
    /// The limit it started with.
    base: Duration,
    limit: Duration,
    last: Instant,
    suspected: bool,
}

/// What changed at a step of [`Liveness`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing new.
    Same,
    /// Silent past the limit: route around it (silent for this long).
    Suspect(Duration),
    /// A suspect spoke again.
    Back,
}

impl Liveness {
    /// A node whose round trip (as admission measured it) is `rtt`, last
    /// heard at `now`.
    pub fn new(rtt: Duration, now: Instant) -> Self {
        let base = Self::limit_for(rtt);
        Self {
            base,
            limit: base,
            last: now,
            suspected: false,
        }
    }

    /// The silence after which a node at round trip `rtt` is suspected.
    pub fn limit_for(rtt: Duration) -> Duration {
        FLOOR.max(
            HEARTBEAT
                .saturating_mul(4)
                .saturating_add(rtt.saturating_mul(4)),
        )
    }

    /// This node's limit.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// The node said something at `now`.
    pub fn heard(&mut self, now: Instant) -> Verdict {
        let gap = now.saturating_duration_since(self.last);
        let room = gap.saturating_mul(3).min(self.base.saturating_mul(4));
        self.limit = self.limit.max(room);
        self.last = self.last.max(now);
        match std::mem::replace(&mut self.suspected, false) {
            true => Verdict::Back,
            false => Verdict::Same,
        }
    }

    /// When [`Self::check`] has something to say (`None` while suspected:
    /// only [`Self::heard`] changes that; or never, for a limit past the
    /// clock's end).
    pub fn deadline(&self) -> Option<Instant> {
        if self.suspected {
            return None;
        }
        self.last.checked_add(self.limit)
    }

    /// The time is `now`: a node silent past its limit becomes a suspect
    /// (once).
    pub fn check(&mut self, now: Instant) -> Verdict {
        let silent = now.saturating_duration_since(self.last);
        if self.suspected || silent < self.limit {
            return Verdict::Same;
        }
        self.suspected = true;
        Verdict::Suspect(silent)
    }

    /// Suspected now.
    pub fn is_suspected(&self) -> bool {
        self.suspected
    }
}

/// What a node last said it holds (payload bytes received, entries
/// delivered), and since when neither has changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Bytes it received.
    pub bytes: u64,
    /// Entries it delivered (or found up to date: a node that already
    /// holds what comes moves on without bytes).
    pub entries: u64,
    /// When either last changed (or the node got a new parent).
    pub since: Instant,
}

impl Held {
    /// Nothing yet, at `now`.
    pub fn new(now: Instant) -> Self {
        Self {
            bytes: 0,
            entries: 0,
            since: now,
        }
    }

    /// It reported `bytes` and `entries` at `now`.
    pub fn report(&mut self, bytes: u64, entries: u64, now: Instant) {
        if (bytes, entries) != (self.bytes, self.entries) {
            (self.bytes, self.entries) = (bytes, entries);
            self.since = now;
        }
    }
}

/// How long a node may receive nothing while data flows into its parent
/// before the link between them is taken for broken: twice the liveness
/// limit (progress comes at most once a second, and a parent a few pieces
/// ahead is a pipeline, not a cut).
pub fn starved_after(rtt: Duration) -> Duration {
    Liveness::limit_for(rtt).saturating_mul(2)
}

/// A node whose link from its parent broke while both still talk to the
/// client (a partition between them, not a silent host): what it holds has
/// not grown for `after` ([`starved_after`]), and since then a parent's has
/// grown, to more than `margin` bytes beyond it — data flows above it and
/// does not reach it. A node that holds everything is never starved.
pub fn starved(
    child: Held,
    parents: impl IntoIterator<Item = Held>,
    now: Instant,
    after: Duration,
    margin: u64,
) -> bool {
    now.saturating_duration_since(child.since) >= after
        && parents
            .into_iter()
            .any(|p| p.since > child.since && p.bytes > child.bytes.saturating_add(margin))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_limit_is_the_floor_on_a_short_path_and_grows_with_the_round_trip() {
        assert_eq!(Liveness::limit_for(Duration::ZERO), FLOOR);
        assert_eq!(Liveness::limit_for(20 * MS), FLOOR);
        // 1 s one way: 4 round trips and 4 heartbeats.
        assert_eq!(Liveness::limit_for(2000 * MS), 9000 * MS);
        assert_eq!(Liveness::limit_for(Duration::MAX), Duration::MAX);
    }

    #[test]
    fn a_node_heard_every_heartbeat_is_never_suspected() {
        let t0 = Instant::now();
        let mut l = Liveness::new(10 * MS, t0);
        for k in 1..1000u32 {
            let now = t0 + HEARTBEAT * k;
            assert_eq!(l.check(now), Verdict::Same);
            assert_eq!(l.heard(now), Verdict::Same);
        }
    }

    #[test]
    fn silence_past_the_limit_is_suspected_once_and_speaking_again_is_back() {
        let t0 = Instant::now();
        let mut l = Liveness::new(10 * MS, t0);
        assert_eq!(l.deadline(), Some(t0 + FLOOR));
        assert_eq!(l.check(t0 + FLOOR - MS), Verdict::Same);
        assert_eq!(l.check(t0 + FLOOR), Verdict::Suspect(FLOOR));
        assert!(l.is_suspected());
        assert_eq!(l.deadline(), None);
        assert_eq!(l.check(t0 + FLOOR * 5), Verdict::Same);
        assert_eq!(l.heard(t0 + FLOOR * 6), Verdict::Back);
        assert!(!l.is_suspected());
        // That silence taught it patience (see below).
        assert_eq!(l.deadline(), Some(t0 + FLOOR * 6 + FLOOR * 4));
    }

    #[test]
    fn a_path_that_spaces_its_messages_out_gets_thrice_its_widest_gap_up_to_four_times_the_floor() {
        let t0 = Instant::now();
        let mut l = Liveness::new(10 * MS, t0);
        l.heard(t0 + 1500 * MS);
        assert_eq!(l.limit(), 4500 * MS);
        assert_eq!(l.check(t0 + 5900 * MS), Verdict::Same);
        assert_eq!(l.check(t0 + 6000 * MS), Verdict::Suspect(4500 * MS));
        // Back after 20 s: patience grows, to four times the floor at most.
        assert_eq!(l.heard(t0 + 21_500 * MS), Verdict::Back);
        assert_eq!(l.limit(), FLOOR * 4);
        // Narrow gaps never shrink it again.
        l.heard(t0 + 21_600 * MS);
        assert_eq!(l.limit(), FLOOR * 4);
    }

    #[test]
    fn a_message_that_arrives_out_of_order_in_time_does_not_move_the_clock_back() {
        let t0 = Instant::now();
        let mut l = Liveness::new(10 * MS, t0);
        l.heard(t0 + 500 * MS);
        l.heard(t0 + 100 * MS);
        assert_eq!(l.check(t0 + 2400 * MS), Verdict::Same);
        assert_eq!(l.check(t0 + 2500 * MS), Verdict::Suspect(FLOOR));
    }

    #[test]
    fn a_node_is_starved_only_when_it_stalls_while_its_parent_moves_on() {
        let t0 = Instant::now();
        let after = starved_after(10 * MS);
        assert_eq!(after, FLOOR * 2);
        let margin = 4 << 20;
        let at = |bytes: u64, since: Duration| Held {
            bytes,
            entries: 0,
            since: t0 + since,
        };
        // Stalled at 10 MiB since 1 s; the parent grew to 30 MiB at 4 s.
        let child = at(10 << 20, 1000 * MS);
        let parent = at(30 << 20, 4000 * MS);
        assert!(!starved(child, [parent], t0 + 4900 * MS, after, margin));
        assert!(starved(child, [parent], t0 + 5000 * MS, after, margin));
        // A parent stalled as long (its own upstream is slow): a pipeline.
        let waiting = at(30 << 20, 500 * MS);
        assert!(!starved(child, [waiting], t0 + 9000 * MS, after, margin));
        // A parent only a few pieces ahead.
        let close = at((10 << 20) + (3 << 20), 4000 * MS);
        assert!(!starved(child, [close], t0 + 9000 * MS, after, margin));
        // Any stripe's parent will do.
        assert!(starved(
            child,
            [waiting, parent],
            t0 + 9000 * MS,
            after,
            margin
        ));
        // Held counts a change only, of bytes or of entries.
        let mut h = Held::new(t0);
        h.report(5, 0, t0 + 100 * MS);
        h.report(5, 0, t0 + 900 * MS);
        assert_eq!(h.since, t0 + 100 * MS);
        h.report(5, 1, t0 + 1000 * MS);
        assert_eq!(h.since, t0 + 1000 * MS);
    }
}
