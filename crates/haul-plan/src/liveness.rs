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
//! is suspected then; a node still silent a while after the others are
//! heard again is.

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

/// A witness must have been heard this long after a node's silence began
/// (two heartbeats: nodes cut off together fall silent within one of each
/// other).
pub const WITNESS: Duration = Duration::from_millis(500);

/// When a node comes back from a silence others still share, they get
/// this long from then to be heard (a TCP connection that lost packets for
/// seconds retransmits after a backed-off timer) before a witness counts.
pub const AFTER_OUTAGE: Duration = Duration::from_secs(4);

/// The nodes silent past their limit ([`Liveness`]) that are not
/// suspected yet, and whose silence is their own: a node is suspected
/// only when another node, not silent itself, was heard [`WITNESS`] after
/// its silence began. Time is passed in.
#[derive(Debug, Default)]
pub struct Silences {
    /// Node → when its silence began (or a shared outage ended).
    quiet: std::collections::HashMap<usize, Instant>,
}

impl Silences {
    /// Node `i` has been silent since `since`.
    pub fn silent(&mut self, i: usize, since: Instant) {
        self.quiet.insert(i, since);
    }

    /// Node `i` spoke at `now`. If it was silent, the others still silent
    /// shared its outage, most likely: their silence counts from
    /// [`AFTER_OUTAGE`] after now.
    pub fn heard(&mut self, i: usize, now: Instant) {
        if self.quiet.remove(&i).is_some() {
            let from = now + AFTER_OUTAGE;
            for since in self.quiet.values_mut() {
                *since = (*since).max(from);
            }
        }
    }

    /// Node `i` is out of the plan: no more of its silence.
    pub fn forget(&mut self, i: usize) {
        self.quiet.remove(&i);
    }

    /// No silence waits for a witness.
    pub fn is_empty(&self) -> bool {
        self.quiet.is_empty()
    }

    /// The silent nodes a witness shows silent on their own (taken out,
    /// with when their silence began), given when each node was last heard
    /// (`heard[j]`).
    pub fn alone(&mut self, heard: &[Instant]) -> Vec<(usize, Instant)> {
        let witnessed = |i: usize, since: Instant| {
            heard
                .iter()
                .enumerate()
                .any(|(j, &at)| j != i && !self.quiet.contains_key(&j) && at >= since + WITNESS)
        };
        let mut alone: Vec<(usize, Instant)> = self
            .quiet
            .iter()
            .map(|(&i, &since)| (i, since))
            .filter(|&(i, since)| witnessed(i, since))
            .collect();
        alone.sort_unstable();
        for (i, _) in &alone {
            self.quiet.remove(i);
        }
        alone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_node_silent_while_others_speak_is_silent_alone() {
        let t0 = Instant::now();
        let mut s = Silences::default();
        s.silent(1, t0);
        // Node 0 heard 2 s into node 1's silence: a witness.
        let heard = [t0 + 2000 * MS, t0];
        assert_eq!(s.alone(&heard), [(1, t0)]);
        assert!(s.is_empty());
    }

    #[test]
    fn a_silence_everyone_shares_is_nobodys_own_until_the_others_speak_again() {
        let t0 = Instant::now();
        let mut s = Silences::default();
        // The client's link goes: every node's last word came within a
        // heartbeat of the others'.
        let mut heard = [t0, t0 + 200 * MS, t0 + 100 * MS];
        for (i, at) in heard.iter().enumerate() {
            s.silent(i, *at);
        }
        assert!(s.alone(&heard).is_empty(), "nobody heard since");
        // The link is back: node 2 first; the others get their time.
        let up = t0 + 5000 * MS;
        heard[2] = up;
        s.heard(2, up);
        heard[2] = up + 3000 * MS;
        assert!(s.alone(&heard).is_empty(), "within the outage's grace");
        // Node 0 back too: node 1's grace counts from then.
        let back = up + 3100 * MS;
        s.heard(0, back);
        heard[0] = back;
        heard[2] = up + AFTER_OUTAGE + WITNESS;
        assert!(s.alone(&heard).is_empty(), "node 0 came back later");
        // Node 1 stays silent: once the others were heard past its grace,
        // it is suspected.
        heard[2] = back + AFTER_OUTAGE + WITNESS;
        assert_eq!(s.alone(&heard), [(1, back + AFTER_OUTAGE)]);
    }

    #[test]
    fn nobody_is_a_witness_alone_and_a_forgotten_node_is_gone() {
        let t0 = Instant::now();
        let mut s = Silences::default();
        s.silent(0, t0);
        assert!(s.alone(&[t0 + 9000 * MS]).is_empty(), "no other node");
        s.forget(0);
        assert!(s.is_empty());
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
