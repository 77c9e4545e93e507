//! The client's liveness detector ([`haul_plan::Liveness`]) against
//! simulated heartbeats: each node's control connection carries a message
//! every [`HEARTBEAT`], over a path that loses each try of it with some
//! probability. A lost try is sent again once the sender learns of the
//! loss — over QUIC when a later packet is acknowledged, about a
//! heartbeat and a round trip later (`rto`), each time — and the stream is
//! ordered: nothing after a lost message is delivered before it, so losses
//! in a row open gaps the way they do on a real lossy link. A node that
//! goes silent stops sending them. (TCP doubles its retransmission timeout
//! after each loss of one segment: over TCP a lossy control path opens
//! longer gaps than modelled here — at loss rates where TCP moves little
//! data anyway.) A silence becomes a suspicion as the client's
//! coordinator decides it ([`haul_plan::Silences`]: another node heard
//! throughout it, or 6 s of it unwitnessed). [`crate::fanout::run`] routes
//! around whatever is suspected, and lets back in whatever speaks again,
//! so a false suspicion shows in its outcome.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use haul_plan::liveness::HEARTBEAT;
use haul_plan::{Heard, Liveness, Silences, Verdict};

use crate::rng::Rng;

/// The control paths a simulated fan-out's heartbeats take.
#[derive(Debug, Clone)]
pub struct Heartbeats {
    /// Each node's chance of losing one try of a heartbeat (by node; a
    /// node past the end of the list loses none).
    pub loss: Vec<f64>,
    /// Seconds from a lost try to the next.
    pub rto: f64,
    /// Seeds the losses and each node's phase.
    pub seed: u64,
}

/// The detector's view of every node while a simulation runs.
pub(crate) struct Watch {
    t0: Instant,
    /// When each node sends its next heartbeat (seconds).
    next: Vec<f64>,
    /// Heartbeats on their way: (arrival in ns, node).
    arriving: BinaryHeap<Reverse<(u64, usize)>>,
    /// When each node's latest message is delivered (the stream is in
    /// order: none before it).
    delivered: Vec<f64>,
    live: Vec<Liveness>,
    /// How each node was heard, and the silences not suspected yet.
    heard: Vec<Heard>,
    quiet: Silences,
    rng: Rng,
    loss: Vec<f64>,
    rto: f64,
    delay: f64,
}

impl Watch {
    /// `n` nodes, each a one-way `delay` from the client.
    pub(crate) fn new(h: &Heartbeats, n: usize, delay: f64) -> Self {
        let t0 = Instant::now();
        let mut rng = Rng::new(h.seed);
        let every = HEARTBEAT.as_secs_f64();
        let rtt = Duration::from_secs_f64(2.0 * delay.max(0.0));
        Self {
            t0,
            next: (0..n).map(|_| rng.f64() * every).collect(),
            arriving: BinaryHeap::new(),
            delivered: vec![0.0; n],
            live: (0..n).map(|_| Liveness::new(rtt, t0)).collect(),
            heard: vec![Heard::new(t0); n],
            quiet: Silences::default(),
            rng,
            loss: h.loss.clone(),
            rto: h.rto,
            delay,
        }
    }

    /// The silence after which a node is suspected, in seconds.
    pub(crate) fn limit(&self) -> f64 {
        self.live.first().map_or(0.0, |l| l.limit().as_secs_f64())
    }

    fn at(&self, t: f64) -> Instant {
        self.t0 + Duration::from_secs_f64(t.max(0.0))
    }

    /// Moves to `now`: nodes that are not `silent` send their heartbeats,
    /// arrivals are heard, and the detector's verdicts that changed come
    /// back in time order.
    pub(crate) fn step(&mut self, now: f64, silent: &[bool]) -> Vec<(usize, Verdict)> {
        let every = HEARTBEAT.as_secs_f64();
        for i in 0..self.next.len() {
            while self.next[i] <= now {
                let sent = self.next[i];
                self.next[i] += every;
                if silent.get(i).copied().unwrap_or(false) {
                    continue;
                }
                let loss = self.loss.get(i).copied().unwrap_or(0.0);
                let (mut extra, mut tries) = (0.0, 0);
                while tries < 64 && self.rng.chance(loss) {
                    extra += self.rto;
                    tries += 1;
                }
                let arrives = (sent + self.delay + extra).max(self.delivered[i]);
                self.delivered[i] = arrives;
                self.arriving.push(Reverse(((arrives * 1e9) as u64, i)));
            }
        }
        let mut verdicts = Vec::new();
        while let Some(&Reverse((ns, i))) = self.arriving.peek() {
            if ns as f64 / 1e9 > now {
                break;
            }
            self.arriving.pop();
            let at = self.t0 + Duration::from_nanos(ns);
            if let Some(h) = self.heard.get_mut(i) {
                h.message(at);
            }
            if let Some(v @ Verdict::Back) = self.live.get_mut(i).map(|l| l.heard(at)) {
                self.quiet.forget(i);
                verdicts.push((i, v));
            }
        }
        let at = self.at(now);
        for (i, l) in self.live.iter_mut().enumerate() {
            if let Verdict::Suspect(silent) = l.check(at) {
                self.quiet.silent(i, at.checked_sub(silent).unwrap_or(at));
            }
        }
        for (i, since) in self.quiet.suspects(&self.heard, at) {
            verdicts.push((i, Verdict::Suspect(at.saturating_duration_since(since))));
        }
        verdicts
    }
}
