//! The sans-IO link model: packets go in with a timestamp and come out at
//! later times, impaired as a [`Profile`] says. No sockets, no clocks: the
//! caller passes the time (nanoseconds on any monotonic scale).
//!
//! The order of stages for one packet is netem's: duplication, then for
//! each copy loss, corruption, the rate queue (a serializing token bucket
//! bounded by `limit` packets), then the delay (with jitter, or none when
//! the packet is picked for reordering).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use crate::packet::corruptible_range;
use crate::profile::{Chance, Distribution, Loss, Profile};
use crate::rng::Rng;
use crate::stats::LinkStats;

/// Time in nanoseconds.
pub type Nanos = u64;

struct Scheduled {
    due: Nanos,
    seq: u64,
    pkt: Vec<u8>,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        self.due == other.due && self.seq == other.seq
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    // Reversed: BinaryHeap is a max-heap and we want the earliest first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

/// Memory of the previous decision, for correlated chances.
#[derive(Debug, Default, Clone, Copy)]
struct Memory {
    loss: bool,
    corrupt: bool,
    duplicate: bool,
    reorder: bool,
    jitter: f64,
}

/// One direction of one link.
pub struct Link {
    profile: Profile,
    rng: Rng,
    up: bool,
    heap: BinaryHeap<Scheduled>,
    seq: u64,
    /// Departure times of the packets still in the rate queue.
    backlog: VecDeque<Nanos>,
    /// When the serializer is next free.
    free_at: Nanos,
    /// Latest due time handed out (rate-limited links stay FIFO, as netem).
    last_due: Nanos,
    ge_bad: bool,
    mem: Memory,
    reorder_counter: u32,
    stats: LinkStats,
}

/// Draws a chance with netem's meaning of correlation made exact: with
/// probability `corr` repeat the previous decision, else draw afresh, so
/// the long-run rate stays `p` (netem's own approximation lowers it).
fn correlated(rng: &mut Rng, c: Chance, last: &mut bool) -> bool {
    if c.p <= 0.0 {
        return false;
    }
    if c.corr > 0.0 && rng.chance(c.corr) {
        return *last;
    }
    *last = rng.chance(c.p);
    *last
}

/// A zero-mean, unit-deviation sample of the distribution.
fn unit_sample(rng: &mut Rng, d: Distribution) -> f64 {
    // Pareto with alpha 3 (as netem's table), shifted to mean 0 and scaled
    // to deviation 1: mean 1.5, deviation sqrt(3/4).
    let pareto = |rng: &mut Rng| {
        let u = 1.0 - rng.f64();
        (u.powf(-1.0 / 3.0) - 1.5) / 0.75f64.sqrt()
    };
    match d {
        Distribution::Uniform => (2.0 * rng.f64() - 1.0) * 3f64.sqrt(),
        Distribution::Normal => rng.normal().clamp(-4.0, 4.0),
        Distribution::Pareto => pareto(rng).min(8.0),
        Distribution::Paretonormal => {
            let v = 0.25 * rng.normal().clamp(-4.0, 4.0) + 0.75 * pareto(rng).min(8.0);
            v / (0.25f64 * 0.25 + 0.75 * 0.75).sqrt()
        }
    }
}

impl Link {
    /// A link with `profile`, whose random decisions are fixed by `seed`.
    pub fn new(profile: Profile, seed: u64) -> Link {
        Link {
            profile,
            rng: Rng::new(seed),
            up: true,
            heap: BinaryHeap::new(),
            seq: 0,
            backlog: VecDeque::new(),
            free_at: 0,
            last_due: 0,
            ge_bad: false,
            mem: Memory::default(),
            reorder_counter: 0,
            stats: LinkStats::default(),
        }
    }

    /// The current profile.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Replaces the profile; packets already inside keep their schedule.
    pub fn set_profile(&mut self, profile: Profile) {
        self.profile = profile;
    }

    /// Whether the link carries packets.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// Takes the link down (everything inside and everything offered is
    /// dropped, like a pulled cable) or brings it back up.
    pub fn set_up(&mut self, up: bool) {
        if !up {
            self.stats.down_drops += self.heap.len() as u64;
            self.heap.clear();
            self.backlog.clear();
            self.free_at = 0;
            self.last_due = 0;
        }
        self.up = up;
    }

    /// Counters so far.
    pub fn stats(&self) -> LinkStats {
        LinkStats {
            in_flight: self.heap.len() as u64,
            ..self.stats.clone()
        }
    }

    /// When the next packet is due, if any is inside.
    pub fn next_due(&self) -> Option<Nanos> {
        self.heap.peek().map(|s| s.due)
    }

    /// Offers a packet to the link at time `now`.
    pub fn push(&mut self, now: Nanos, pkt: Vec<u8>) {
        self.stats.packets += 1;
        self.stats.bytes += pkt.len() as u64;
        if !self.up {
            self.stats.down_drops += 1;
            return;
        }
        let dup = self.profile.duplicate;
        if correlated(&mut self.rng, dup, &mut self.mem.duplicate) {
            self.stats.duplicated += 1;
            self.admit(now, pkt.clone());
        }
        self.admit(now, pkt);
    }

    /// Takes the next packet due at or before `now`, with its due time.
    pub fn poll(&mut self, now: Nanos) -> Option<(Nanos, Vec<u8>)> {
        if self.heap.peek()?.due > now {
            return None;
        }
        let s = self.heap.pop()?;
        self.stats.delivered += 1;
        self.stats.delivered_bytes += s.pkt.len() as u64;
        Some((s.due, s.pkt))
    }

    fn lose(&mut self) -> bool {
        match self.profile.loss {
            Loss::None => false,
            Loss::Random(c) => correlated(&mut self.rng, c, &mut self.mem.loss),
            Loss::Gemodel {
                p,
                r,
                bad_loss,
                good_loss,
            } => {
                // netem: the loss decision uses the state before the move.
                let loss_p = if self.ge_bad { bad_loss } else { good_loss };
                let mv = if self.ge_bad { r } else { p };
                if self.rng.chance(mv) {
                    self.ge_bad = !self.ge_bad;
                }
                self.rng.chance(loss_p)
            }
        }
    }

    fn corrupt(&mut self, pkt: &mut [u8]) {
        let range = corruptible_range(pkt);
        if range.is_empty() {
            return;
        }
        let span = (range.end - range.start) as u64;
        let byte = range.start + self.rng.below(span) as usize;
        let bit = self.rng.below(8) as u32;
        pkt[byte] ^= 1u8 << bit;
        self.stats.corrupted += 1;
    }

    fn delay_sample(&mut self) -> Nanos {
        let p = &self.profile;
        if p.jitter_ns == 0 {
            return p.delay_ns;
        }
        let (dist, rho, jitter, delay) = (p.distribution, p.delay_corr, p.jitter_ns, p.delay_ns);
        let fresh = unit_sample(&mut self.rng, dist);
        let t = if rho > 0.0 {
            (1.0 - rho) * fresh + rho * self.mem.jitter
        } else {
            fresh
        };
        self.mem.jitter = t;
        // Uniform's unit sample spans +-sqrt(3); netem's uniform jitter
        // spans +-jitter, so scale it back.
        let scale = if dist == Distribution::Uniform {
            jitter as f64 / 3f64.sqrt()
        } else {
            jitter as f64
        };
        (delay as f64 + t * scale).max(0.0) as Nanos
    }

    fn reorder_now(&mut self) -> bool {
        let r = self.profile.reorder;
        if r.chance.p <= 0.0 || r.gap == 0 {
            return false;
        }
        if self.reorder_counter + 1 < r.gap
            || !correlated(&mut self.rng, r.chance, &mut self.mem.reorder)
        {
            self.reorder_counter = self.reorder_counter.saturating_add(1);
            false
        } else {
            self.reorder_counter = 0;
            true
        }
    }

    fn admit(&mut self, now: Nanos, mut pkt: Vec<u8>) {
        if self.lose() {
            self.stats.dropped += 1;
            return;
        }
        let corrupt = self.profile.corrupt;
        if correlated(&mut self.rng, corrupt, &mut self.mem.corrupt) {
            self.corrupt(&mut pkt);
        }
        let depart = match self.profile.rate_bps {
            Some(rate) => {
                while self.backlog.front().is_some_and(|&t| t <= now) {
                    self.backlog.pop_front();
                }
                if self.backlog.len() >= self.profile.limit {
                    self.stats.queue_drops += 1;
                    return;
                }
                let tx = (pkt.len() as u128 * 8 * 1_000_000_000 / u128::from(rate.max(1))) as Nanos;
                let done = now.max(self.free_at) + tx;
                self.free_at = done;
                self.backlog.push_back(done);
                done
            }
            None => now,
        };
        let due = if self.reorder_now() {
            self.stats.reordered += 1;
            depart
        } else {
            let mut due = depart + self.delay_sample();
            if self.profile.rate_bps.is_some() {
                due = due.max(self.last_due);
            }
            self.last_due = self.last_due.max(due);
            due
        };
        self.seq += 1;
        self.heap.push(Scheduled {
            due,
            seq: self.seq,
            pkt,
        });
    }
}

#[cfg(test)]
mod tests;
