//! Fan-out in simulated time: pieces moving down a relay plan, nodes dying,
//! the client's [`Routing`] re-routing past them.
//!
//! This is the flow the real fan-out has, at piece level and with no bytes:
//! every sender (the client or a relay) shares its upload rate among the
//! children it has something to send to; a relay forwards piece `j` only
//! once it arrived (verified) there; each hop adds a one-way delay; pieces
//! of one parent arrive in order, so what a node holds is always a prefix,
//! and a node given a new parent resumes after it (`Need{have}`). A node
//! that dies stops sending at once; the client notices after the detection
//! time (a fixed `detect`, or — with [`Heartbeats`] — when the client's
//! liveness detector, fed simulated heartbeats over lossy control paths,
//! suspects it) and applies [`Routing::lost`]; a node suspected while alive
//! speaks again and rejoins ([`Routing::rejoin`]). A node is done
//! (it reports) once it holds everything and each of its children holds
//! what it sends them, as a real relay reports after its forwards ended.
//!
//! A striped plan runs the same way per stripe: the pieces of stripe `s`
//! ([`haul_plan::stripe_chunks`]) flow down stripe `s`'s tree, what a node
//! holds of each stripe is a prefix of it, a sender's upload is shared
//! among its children in every stripe, and a lost node's children in each
//! stripe move where [`Routing::lost`] puts them (where there is upload to
//! spare).
//!
//! 1,000 nodes of a 256 MiB transfer take well under a second of CPU.

use haul_plan::{stripe_chunks, Parent, Plan, Routing, Verdict};

pub use crate::heartbeat::Heartbeats;
use crate::heartbeat::Watch;

/// How long the client waits for suspects once every other node is done
/// (as `haul_node::fanout` does).
const SUSPECT_GRACE: f64 = 5.0;

/// A fan-out to simulate.
#[derive(Debug, Clone)]
pub struct FanoutSim {
    /// Bytes of the dataset (one file).
    pub size: u64,
    /// Bytes per piece (the chunk a relay forwards at once).
    pub piece: u64,
    /// The client's upload, bytes per second.
    pub client_rate: f64,
    /// Each node's upload, bytes per second.
    pub rates: Vec<f64>,
    /// One-way delay of every hop, seconds.
    pub delay: f64,
    /// Seconds from a node's death until the client acts on it.
    pub detect: f64,
    /// Nodes that die (go silent: no reset), and when (seconds from the
    /// start).
    pub deaths: Vec<(f64, usize)>,
    /// Detect deaths by the client's liveness detector over these
    /// heartbeats instead of after `detect`.
    pub heartbeats: Option<Heartbeats>,
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub struct FanoutOutcome {
    /// When each node held everything (seconds); `None`: it never did.
    pub complete: Vec<Option<f64>>,
    /// Nodes that died before they were done.
    pub died: Vec<bool>,
    /// When the last live node held everything.
    pub seconds: f64,
    /// When the last live node reported (the client's end of the
    /// transfer; the run stops there).
    pub ended: f64,
    /// Pieces the client sent.
    pub client_pieces: u64,
    /// Pieces sent by anyone.
    pub pieces_sent: u64,
    /// Live nodes the detector suspected (each time).
    pub false_suspicions: u64,
    /// Suspects let back in.
    pub rejoined: u64,
}

impl FanoutOutcome {
    /// Every node that did not die holds everything.
    pub fn all_live_complete(&self) -> bool {
        self.complete
            .iter()
            .zip(&self.died)
            .all(|(c, &d)| d || c.is_some())
    }
}

/// One node's side of its incoming edge.
#[derive(Debug, Clone, Default)]
struct Inbound {
    /// Pieces arrived (a prefix).
    have: u64,
    /// Pieces fully sent to it, not yet arrived: their arrival times.
    flight: std::collections::VecDeque<f64>,
    /// Bytes of the piece being sent now.
    partial: f64,
}

impl Inbound {
    fn sent(&self) -> u64 {
        self.have + self.flight.len() as u64
    }
}

/// Runs `sim` on `plan` (whose node count must match `sim.rates`).
pub fn run(plan: &Plan, sim: &FanoutSim) -> FanoutOutcome {
    let n = plan.parents.len();
    let pieces = sim.size.div_ceil(sim.piece.max(1)).max(1);
    let stripes = plan.stripe_count();
    // Pieces of each stripe.
    let want: Vec<u64> = (0..stripes)
        .map(|s| {
            let r = stripe_chunks(pieces, stripes, s);
            r.end - r.start
        })
        .collect();
    let fastest = sim.rates.iter().copied().fold(sim.client_rate, f64::max);
    // Eight steps per piece at the fastest rate.
    let dt = (sim.piece as f64 / fastest / 8.0).max(1e-6);
    let mut routing = Routing::new(plan);
    // inbound[s][i]: node i's side of its edge in stripe s.
    let mut inbound = vec![vec![Inbound::default(); n]; stripes];
    let mut dead = vec![false; n];
    let mut complete = vec![None; n];
    let mut deaths = sim.deaths.clone();
    deaths.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut deaths = deaths.into_iter().peekable();
    let mut noticed: Vec<(f64, usize)> = Vec::new();
    let mut watch = sim.heartbeats.as_ref().map(|h| Watch::new(h, n, sim.delay));
    let detect = watch.as_ref().map_or(sim.detect, |w| w.limit() + 1.0);
    let (mut false_suspicions, mut rejoined) = (0u64, 0u64);
    // Suspects not back yet, and when the latest was suspected: the client
    // waits a grace for them once every other node is done.
    let (mut suspects, mut last_suspected) = (0usize, 0.0f64);
    let (mut client_pieces, mut pieces_sent) = (0u64, 0u64);
    let mut kids = children_of(&routing, n);
    // The (stripe, child, pieces it may have) a sender feeds in a step.
    let mut active: Vec<(usize, usize, u64)> = Vec::new();
    let mut now = 0.0;
    // Long enough for anything that can finish: every piece at the slowest
    // rate over every hop, plus every death noticed.
    let slowest = sim.rates.iter().copied().fold(sim.client_rate, f64::min);
    let limit = (pieces as f64 * sim.piece as f64 / slowest.max(1.0)) * (n as f64 + 1.0)
        + (n as f64 + 1.0) * sim.delay
        + sim.deaths.len() as f64 * detect
        + SUSPECT_GRACE
        + 1.0;
    let waiting = |suspects: usize, last: f64, now: f64| suspects > 0 && now < last + SUSPECT_GRACE;
    while (routing.pending() || waiting(suspects, last_suspected, now)) && now < limit {
        now += dt;
        while deaths.peek().is_some_and(|(t, _)| *t <= now) {
            if let Some((_, i)) = deaths.next() {
                if i < n && !routing.is_done(i) && !dead[i] {
                    dead[i] = true;
                    if watch.is_none() {
                        noticed.push((now + sim.detect, i));
                    }
                }
            }
        }
        let mut rerouted = false;
        if let Some(w) = &mut watch {
            for (i, verdict) in w.step(now, &dead) {
                match verdict {
                    Verdict::Suspect(_) if routing.is_alive(i) && !routing.is_done(i) => {
                        false_suspicions += u64::from(!dead[i]);
                        noticed.push((now, i));
                        suspects += 1;
                        last_suspected = now;
                    }
                    Verdict::Back if !dead[i] && !routing.rejoin(i).is_empty() => {
                        rejoined += 1;
                        suspects = suspects.saturating_sub(1);
                        rerouted = true;
                    }
                    _ => {}
                }
            }
        }
        noticed.retain(|&(t, i)| {
            if t > now {
                return true;
            }
            // Its children in each stripe get a new parent; what the dead
            // node had in flight to them is lost.
            for (s, by_sender) in kids.iter().enumerate() {
                for &c in &by_sender[i] {
                    let inb = &mut inbound[s][c];
                    inb.flight.clear();
                    inb.partial = 0.0;
                }
            }
            routing.lost(i);
            rerouted = true;
            false
        });
        if rerouted {
            kids = children_of(&routing, n);
        }
        // Arrivals.
        for i in 0..n {
            let mut holds_all = true;
            for (s, &wanted) in want.iter().enumerate() {
                let inb = &mut inbound[s][i];
                while inb.flight.front().is_some_and(|&t| t <= now) {
                    inb.flight.pop_front();
                    inb.have += 1;
                }
                holds_all &= inb.have >= wanted;
            }
            if holds_all && complete[i].is_none() && !dead[i] {
                complete[i] = Some(now);
            }
        }
        // Sends: each sender shares its rate among the children it can
        // feed, over every stripe.
        for sender in 0..=n {
            let rate = if sender == n {
                sim.client_rate
            } else if dead[sender] {
                continue;
            } else {
                sim.rates[sender]
            };
            active.clear();
            for (s, by_sender) in kids.iter().enumerate() {
                // What the sender holds of the stripe: what it can send.
                let can = match sender == n {
                    true => want[s],
                    false => inbound[s][sender].have.min(want[s]),
                };
                active.extend(
                    by_sender[sender]
                        .iter()
                        .filter(|&&c| !dead[c] && inbound[s][c].sent() < can)
                        .map(|&c| (s, c, can)),
                );
            }
            if active.is_empty() {
                continue;
            }
            let share = rate * dt / active.len() as f64;
            for &(s, c, upto) in &active {
                let inb = &mut inbound[s][c];
                inb.partial += share;
                while inb.partial >= sim.piece as f64 && inb.sent() < upto {
                    inb.partial -= sim.piece as f64;
                    inb.flight.push_back(now + sim.delay);
                    pieces_sent += 1;
                    if sender == n {
                        client_pieces += 1;
                    }
                }
                if inb.sent() >= upto {
                    inb.partial = 0.0;
                }
            }
        }
        // Reports: complete, and every live child holds what it is sent
        // (the forwards ended). Not "every child done": in a striped plan
        // two nodes can be each other's child in different stripes.
        for i in 0..n {
            if complete[i].is_some()
                && !routing.is_done(i)
                && !dead[i]
                && kids.iter().enumerate().all(|(s, k)| {
                    k[i].iter()
                        .all(|&c| dead[c] || inbound[s][c].have >= want[s])
                })
            {
                routing.done(i);
            }
        }
    }
    let seconds = complete.iter().flatten().copied().fold(0.0, f64::max);
    FanoutOutcome {
        complete,
        died: dead,
        seconds,
        ended: now,
        client_pieces,
        pieces_sent,
        false_suspicions,
        rejoined,
    }
}

/// Each sender's current children per stripe (`[stripe][sender]`); sender
/// `n` is the client.
fn children_of(routing: &Routing, n: usize) -> Vec<Vec<Vec<usize>>> {
    (0..routing.stripes())
        .map(|s| {
            let mut kids = vec![Vec::new(); n + 1];
            for i in 0..n {
                if !routing.is_alive(i) {
                    continue;
                }
                match routing.parent_in(s, i) {
                    Parent::Client => kids[n].push(i),
                    Parent::Node(p) => kids[p].push(i),
                }
            }
            kids
        })
        .collect()
}
