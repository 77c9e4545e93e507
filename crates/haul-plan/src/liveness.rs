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
//! The limit learns: a node whose messages came with a gap of `g` while it
//! was trusted gets at least `3g` from then on (at most four times the
//! limit it started with),
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
//!
//! Silence is a node's own only while the client still hears others
//! ([`Silences`]): when every node goes quiet at once, the one thing they
//! share — the client's own link — is the likelier cause, and routing
//! around all of them would leave the client feeding every node itself
//! once they speak again (in the lab, the origin's link pulled for 3 s
//! cost a 4-node chain 12.5 s instead of 3.4 s plus the outage). Nobody
//! is suspected then, until a silence nobody witnessed lasted
//! [`UNWITNESSED`] (6 s).
//!
//! Two live nodes can lose the path between them and nothing else: both
//! go on talking to the client, and only the data between them stops. So
//! every sending edge is kept alive too — its sender says something every
//! [`HEARTBEAT`] whether it has data or not — and a receiver that has heard
//! nothing over an edge for [`EDGE_QUIET`] (bytes, not frames: a large
//! chunk takes long to arrive on a slow link, never silently) tells the
//! client. The client moves it off that sender when the sender was heard
//! throughout the silence ([`Heard::throughout`]) and the silence passed
//! [`edge_limit`] — the link between them is what failed
//! ([`crate::Routing::cut`]); a sender silent itself is routed around as
//! above ([`crate::Routing::lost`]).

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
        // Gaps the path opened while the node was trusted teach patience;
        // an outage it was suspected for does not (a second one is found
        // as fast as the first).
        if !self.suspected {
            let gap = now.saturating_duration_since(self.last);
            let room = gap.saturating_mul(3).min(self.base.saturating_mul(4));
            self.limit = self.limit.max(room);
        }
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

/// A receiver tells the client when nothing came over its sending edge for
/// this long (and again as the silence grows): the shortest silence a
/// control connection is suspected for ([`FLOOR`]), as both carry
/// something every [`HEARTBEAT`]. The client believes a cut only past
/// [`edge_limit`].
pub const EDGE_QUIET: Duration = FLOOR;

/// The silence of a sending edge from a node at round trip `rtt_from` to
/// one at `rtt_to` (each as the client measured it) after which the path
/// between them is believed cut: [`Liveness::limit_for`] a path as long as
/// the two together (the client cannot measure the path between them; a
/// long one delays a retransmission as a long control path does).
pub fn edge_limit(rtt_from: Duration, rtt_to: Duration) -> Duration {
    Liveness::limit_for(rtt_from.saturating_add(rtt_to))
}

/// A witness must have been heard this long after a node's silence began
/// (two heartbeats: nodes cut off together fall silent within one of each
/// other).
pub const WITNESS: Duration = Duration::from_millis(500);

/// A gap longer than this in what a node says ends its run of being heard:
/// a node back from a silence of its own — or from one it shared — is no
/// witness for silences that began before. The floor of [`Liveness`]: a
/// gap a live path may open (a heartbeat and its retransmission lost) is
/// no silence.
pub const GAP: Duration = FLOOR;

/// A silence nobody witnesses is suspected anyway once it lasted this long:
/// an outage of the client's own link longer than this (or every node cut
/// off together: one host, one site) is routed around as silence is, and a
/// fan-out never waits out `--timeout` for it. Past an outage of 3 s and
/// TCP's backed-off retransmission after it.
pub const UNWITNESSED: Duration = Duration::from_secs(6);

/// When a node was last heard, and since when it has been heard without a
/// [`GAP`] (kept per node by whoever reads its control connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heard {
    /// Its last message.
    pub last: Instant,
    /// The start of its present run of messages.
    pub since: Instant,
}

impl Heard {
    /// Heard first at `now` (admitted).
    pub fn new(now: Instant) -> Self {
        Self {
            last: now,
            since: now,
        }
    }

    /// A message at `now`.
    pub fn message(&mut self, now: Instant) {
        if now.saturating_duration_since(self.last) > GAP {
            self.since = now;
        }
        self.last = self.last.max(now);
    }

    /// Heard without a [`GAP`] from before `since` to [`WITNESS`] after it:
    /// whatever went silent at `since`, this node did not.
    pub fn throughout(&self, since: Instant) -> bool {
        self.since <= since && self.last >= since + WITNESS
    }
}

/// The nodes silent past their limit ([`Liveness`]) that are not
/// suspected yet. A node's silence is its own when another node was heard
/// throughout it — heard without a [`GAP`] from before it began to
/// [`WITNESS`] after —; when every node goes quiet at once, none is a
/// witness for the others, and nobody is suspected until the silence is
/// [`UNWITNESSED`] long. Time is passed in.
#[derive(Debug, Default)]
pub struct Silences {
    /// Node → when its silence began.
    quiet: std::collections::HashMap<usize, Instant>,
}

impl Silences {
    /// Node `i` has been silent since `since`.
    pub fn silent(&mut self, i: usize, since: Instant) {
        self.quiet.insert(i, since);
    }

    /// Node `i` spoke again, or is out of the plan: no more of its silence.
    pub fn forget(&mut self, i: usize) {
        self.quiet.remove(&i);
    }

    /// No silence waits for a witness.
    pub fn is_empty(&self) -> bool {
        self.quiet.is_empty()
    }

    /// The silent nodes now suspected (taken out, with when their silence
    /// began): witnessed, or unwitnessed for [`UNWITNESSED`]; `heard[j]`:
    /// how node `j` was heard.
    pub fn suspects(&mut self, heard: &[Heard], now: Instant) -> Vec<(usize, Instant)> {
        let witnessed = |i: usize, since: Instant| {
            heard
                .iter()
                .enumerate()
                .any(|(j, h)| j != i && !self.quiet.contains_key(&j) && h.throughout(since))
        };
        let mut out: Vec<(usize, Instant)> = self
            .quiet
            .iter()
            .map(|(&i, &since)| (i, since))
            .filter(|&(i, since)| witnessed(i, since) || now >= since + UNWITNESSED)
            .collect();
        out.sort_unstable();
        for (i, _) in &out {
            self.quiet.remove(i);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Node `j` heard every heartbeat from `from` to `to`.
    fn steady(from: Instant, to: Instant) -> Heard {
        let mut h = Heard::new(from);
        let mut t = from;
        while t < to {
            t += HEARTBEAT;
            h.message(t);
        }
        h
    }

    #[test]
    fn a_node_silent_while_others_speak_is_suspected() {
        let t0 = Instant::now();
        let mut s = Silences::default();
        s.silent(1, t0 + 3000 * MS);
        let heard = [steady(t0, t0 + 3200 * MS), Heard::new(t0)];
        assert!(s.suspects(&heard, t0 + 3250 * MS).is_empty(), "too soon");
        let heard = [steady(t0, t0 + 5000 * MS), Heard::new(t0)];
        assert_eq!(s.suspects(&heard, t0 + 5000 * MS), [(1, t0 + 3000 * MS)]);
        assert!(s.is_empty());
    }

    #[test]
    fn a_silence_everyone_shares_is_nobodys_own_until_it_lasts() {
        let t0 = Instant::now();
        let down = t0 + 10_000 * MS;
        let mut s = Silences::default();
        // The client's link goes for 3 s: nobody is heard from `down` on.
        let mut heard = [steady(t0, down), steady(t0, down), steady(t0, down)];
        for i in 0..3 {
            s.silent(i, down);
        }
        let up = down + 3000 * MS;
        assert!(s.suspects(&heard, up).is_empty());
        // Back: node 2 first (its run starts again), node 0 a second
        // later; node 1 was never heard again.
        heard[2].message(up + 100 * MS);
        s.forget(2);
        heard[2] = steady(up + 100 * MS, up + 2000 * MS);
        assert!(s.suspects(&heard, up + 2000 * MS).is_empty(), "no witness");
        s.forget(0);
        heard[0].message(up + 1100 * MS);
        // Unwitnessed: suspected once its silence lasted UNWITNESSED.
        assert!(s.suspects(&heard, down + UNWITNESSED - MS).is_empty());
        assert_eq!(s.suspects(&heard, down + UNWITNESSED), [(1, down)]);
    }

    #[test]
    fn a_node_with_a_gap_of_its_own_is_no_witness() {
        let t0 = Instant::now();
        let mut s = Silences::default();
        s.silent(1, t0 + 2000 * MS);
        // Node 0 went quiet for 3 s around node 1's silence (a longer
        // limit, so never flagged) and speaks again first.
        let mut h = steady(t0, t0 + 1900 * MS);
        for ms in (4900..=5500).step_by(250) {
            h.message(t0 + ms * MS);
        }
        assert_eq!(h.since, t0 + 4900 * MS);
        assert!(s.suspects(&[h, Heard::new(t0)], t0 + 5500 * MS).is_empty());
        // A gap a live path opens (1.5 s) keeps a witness.
        let mut w = steady(t0, t0 + 1900 * MS);
        for ms in (3400..=3900).step_by(250) {
            w.message(t0 + ms * MS);
        }
        assert_eq!(w.since, t0);
        assert_eq!(
            s.suspects(&[w, Heard::new(t0)], t0 + 3900 * MS),
            [(1, t0 + 2000 * MS)]
        );
    }

    #[test]
    fn nobody_is_a_witness_alone_and_a_forgotten_node_is_gone() {
        let t0 = Instant::now();
        let mut s = Silences::default();
        s.silent(0, t0);
        assert!(s.suspects(&[Heard::new(t0)], t0 + 5000 * MS).is_empty());
        assert_eq!(s.suspects(&[Heard::new(t0)], t0 + UNWITNESSED), [(0, t0)]);
        s.silent(0, t0);
        s.forget(0);
        assert!(s.is_empty());
    }

    #[test]
    fn an_edge_between_two_nodes_is_given_both_round_trips() {
        assert_eq!(edge_limit(Duration::ZERO, Duration::ZERO), EDGE_QUIET);
        assert_eq!(edge_limit(20 * MS, 20 * MS), FLOOR);
        // Two 1 s round trips: a path as long as 2 s of round trip.
        assert_eq!(edge_limit(1000 * MS, 1000 * MS), 9000 * MS);
        assert_eq!(edge_limit(Duration::MAX, 5 * MS), Duration::MAX);
    }

    #[test]
    fn a_witness_heard_throughout_a_silence_and_one_with_a_gap() {
        let t0 = Instant::now();
        let since = t0 + 3000 * MS;
        assert!(steady(t0, since + WITNESS).throughout(since));
        assert!(
            !steady(t0, since + 200 * MS).throughout(since),
            "not long enough after"
        );
        assert!(
            !steady(since + 100 * MS, since + 3000 * MS).throughout(since),
            "began after"
        );
        let mut gap = steady(t0, since - 100 * MS);
        gap.message(since + 2500 * MS);
        assert!(!gap.throughout(since), "a gap over the silence");
    }

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
        assert_eq!(l.deadline(), Some(t0 + FLOOR * 7));
    }

    #[test]
    fn a_path_that_spaces_its_messages_out_gets_thrice_its_widest_gap_up_to_four_times_the_floor() {
        let t0 = Instant::now();
        let mut l = Liveness::new(10 * MS, t0);
        l.heard(t0 + 1500 * MS);
        assert_eq!(l.limit(), 4500 * MS);
        assert_eq!(l.check(t0 + 5900 * MS), Verdict::Same);
        assert_eq!(l.check(t0 + 6000 * MS), Verdict::Suspect(4500 * MS));
        // Back after 20 s: an outage teaches nothing.
        assert_eq!(l.heard(t0 + 21_500 * MS), Verdict::Back);
        assert_eq!(l.limit(), 4500 * MS);
        // A 3 s gap while trusted: patience grows, to four times the floor
        // at most; narrow gaps never shrink it again.
        l.heard(t0 + 24_500 * MS);
        assert_eq!(l.limit(), FLOOR * 4);
        l.heard(t0 + 24_600 * MS);
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
}
