//! `--transport auto`: which transport carries a node's connections,
//! chosen by measuring both — the policy, sans-IO, with time passed in.
//!
//! The dialer that runs it (haul-node's `auto_dial`) starts a node's first
//! connection over TCP and QUIC at once and keeps the first that comes up
//! (happy eyeballs); while undecided, each further connection goes over the
//! transport with fewer connections (waiting up to [`HANDSHAKE_GRACE`] for the
//! slower handshake), so that both carry data. Each
//! connection's [`Meter`] counts what it delivered: the bytes its peer
//! acknowledged (TCP: `TCP_INFO`'s `bytes_acked`; QUIC: sent less declared
//! lost) and the bytes it received. The dialer samples them every quarter
//! second (and at each connection's handshake) into a [`Choice`], which
//! decides:
//!
//! - a short path — TCP's handshake under [`SHORT_HANDSHAKE`], or its round
//!   trip under [`SHORT_RTT`] with nothing lost once it carried data: TCP at
//!   once (QUIC has nothing to win there and costs CPU);
//! - a transport whose handshake failed (a node with `--no-quic`, UDP
//!   refused), or QUIC not up [`HANDSHAKE_GRACE`] after TCP was (UDP dropped by a
//!   firewall): the other, at once;
//! - otherwise once data flowed for the trial ([`TRIAL`], longer on long
//!   paths: [`TRIAL_RTTS`] round trips, at most [`TRIAL_MAX`]): each
//!   transport's goodput per connection over the trial's second half (its
//!   first half is start-up: slow start, buffers filling); QUIC when it
//!   delivered at least [`QUIC_MARGIN`] more than TCP, else TCP — kernel TCP
//!   costs a core less per gigabit, and on a clean link the two are equal —
//!   except on a long path ([`LONG_RTT`]), where ties go to QUIC;
//! - only one transport carried data in that window (one connection for
//!   one file): that one;
//! - before the trial's end, a crawl: one transport moving [`CRAWL_RATIO`]
//!   times less than the other, or nothing while its connections are up.
//!
//! Once decided, the connections of the other transport are
//! [`Meter::supersede`]d: each gives the work it holds back to its pool
//! (saying `Bye` to its peer between messages, which keeps what it
//! verified; only a pushed chunk still being written over TCP is cut, at
//! its next 256 KiB), and the pool
//! dials again, over the chosen transport, which resumes that work from
//! what the peer holds. Finishing it instead cost more than it saved:
//! the loser crawls (TCP at 16 % loss moved 11 Mbit/s where QUIC moved
//! 176) or takes CPU the winner needs (QUIC beside TCP on loopback).
//!
//! QUIC's count (sent less declared lost) includes what is in flight, so
//! it runs ahead of TCP's acknowledged bytes by a window while its window
//! grows: the trial's second half, compared, leaves out most of that.
//!
//! Measured side by side, the two share the path: their per-connection
//! goodput is each one's share under the other's competition. Where one is
//! much better alone (TCP at 30 % loss moves almost nothing; QUIC on a fast
//! clean LAN is CPU-bound) it is so in competition too; where they are near
//! each other, either is within the margin of the better.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::Transport;

/// The trial's length on short paths: data flowing this long, then decided.
pub const TRIAL: Duration = Duration::from_secs(3);
/// On long paths the trial lasts this many round trips.
pub const TRIAL_RTTS: u32 = 6;
/// The longest trial (a 1 s one-way path: 12 s).
pub const TRIAL_MAX: Duration = Duration::from_secs(20);
/// How long QUIC may take to come up after TCP did, before it counts as
/// blocked (a firewall dropping UDP answers nothing at all) — and TCP
/// after QUIC (its two round trips; a SYN lost on a bad link waits 1 s).
pub const HANDSHAKE_GRACE: Duration = Duration::from_millis(1500);
/// QUIC is chosen when its goodput per connection is at least this much
/// above TCP's (ties go to TCP: the kernel's work costs less CPU).
pub const QUIC_MARGIN: f64 = 1.10;
/// A transport this many times behind is a crawl: decided before the
/// trial's end (TCP at 16 % loss moved 11 Mbit/s where QUIC moved 176).
pub const CRAWL_RATIO: f64 = 3.0;
/// A path whose round trip over TCP is shorter than this, and on which
/// TCP lost nothing ([`CLEAN_LOSS`]), is a LAN's: TCP at once, no trial.
/// There QUIC has nothing to win (its gains are loss, long round trips)
/// and costs CPU: both running at once on 2 cores moved 1 GiB over
/// loopback in 4.2 s where TCP alone took 1.5.
pub const SHORT_RTT: Duration = Duration::from_millis(5);
/// A TCP handshake quicker than this (connect and TLS: two round trips)
/// marks a LAN's path at once ([`SHORT_RTT`]'s reasons).
pub const SHORT_HANDSHAKE: Duration = Duration::from_millis(8);
/// The share of TCP's segments retransmitted below which a path is clean.
pub const CLEAN_LOSS: f64 = 0.001;

/// The least stretch of the trial's second half a crawl is judged on.
pub const EARLY_WINDOW: Duration = Duration::from_millis(500);
/// A round trip from which ties go to QUIC ([`Choice`]'s goodput rule).
pub const LONG_RTT: Duration = Duration::from_millis(100);
/// Data must reach this much before the trial's clock starts (a listing or
/// a handshake is not data).
pub const TRIAL_START_BYTES: u64 = 1 << 20;

/// What one connection delivered, written by its transport and read by the
/// dialer that chooses. Shared; every count only grows.
#[derive(Debug, Default)]
pub struct Meter {
    /// Bytes the peer acknowledged (what this side sent and got there).
    acked: AtomicU64,
    /// Bytes that arrived from the peer.
    received: AtomicU64,
    /// The transport's smoothed round trip, microseconds (0: not known).
    rtt_us: AtomicU64,
    /// Packets (TCP segments) sent, and of them declared lost.
    sent_packets: AtomicU64,
    lost_packets: AtomicU64,
    /// The choice went to the other transport: give the work back.
    superseded: AtomicBool,
}

impl Meter {
    /// A meter at zero.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The transport's counts of what the peer acknowledged (its totals).
    pub fn sender_totals(&self, acked: u64, sent_packets: u64, lost_packets: u64, rtt: Duration) {
        self.acked.fetch_max(acked, Ordering::Relaxed);
        self.sent_packets.fetch_max(sent_packets, Ordering::Relaxed);
        self.lost_packets.fetch_max(lost_packets, Ordering::Relaxed);
        let us = u64::try_from(rtt.as_micros()).unwrap_or(u64::MAX);
        if us > 0 {
            self.rtt_us.store(us, Ordering::Relaxed);
        }
    }

    /// `n` bytes arrived.
    pub fn received(&self, n: usize) {
        self.received.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Bytes delivered either way so far.
    pub fn delivered(&self) -> u64 {
        self.acked.load(Ordering::Relaxed) + self.received.load(Ordering::Relaxed)
    }

    /// The round trip the transport measured, if it did.
    pub fn rtt(&self) -> Option<Duration> {
        match self.rtt_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Packets sent and declared lost.
    pub fn packets(&self) -> (u64, u64) {
        (
            self.sent_packets.load(Ordering::Relaxed),
            self.lost_packets.load(Ordering::Relaxed),
        )
    }

    /// Tells the connection the choice went to the other transport.
    pub fn supersede(&self) {
        self.superseded.store(true, Ordering::Relaxed);
    }

    /// True once [`Meter::supersede`]d.
    pub fn is_superseded(&self) -> bool {
        self.superseded.load(Ordering::Relaxed)
    }

    /// An error ([`crate::TransportError::Superseded`]) once superseded: the
    /// connection's driver gives its work back (saying `Bye`, between
    /// messages), and a large payload's write over TCP ends between its
    /// 256 KiB pieces (a pull's receiving side is only cut between messages).
    pub fn check(&self) -> Result<(), crate::TransportError> {
        match self.is_superseded() {
            true => Err(crate::TransportError::Superseded),
            false => Ok(()),
        }
    }
}

/// A transport's standing in the choice.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Standing {
    /// Not tried, or its handshake is under way.
    Pending,
    /// A connection came up (at this time).
    Up(Instant),
    /// Its handshake failed, for this reason.
    Failed(String),
}

/// One transport's connections and what they delivered.
#[derive(Debug)]
struct Side {
    standing: Standing,
    /// Its connections' meters (weak: a connection that ended keeps the
    /// count it last had, in `last`).
    meters: Vec<Weak<Meter>>,
    /// What each connection had delivered at the last sample.
    last: Vec<u64>,
    /// Its quickest handshake (TCP's: connect and TLS, two round trips).
    handshake: Option<Duration>,
    /// (time, total delivered) at the trial's midpoint, and which of the
    /// connections then open delivered since.
    mid: Option<(Instant, Vec<u64>)>,
}

impl Side {
    fn new() -> Self {
        Self {
            standing: Standing::Pending,
            handshake: None,
            meters: Vec::new(),
            last: Vec::new(),
            mid: None,
        }
    }

    /// Reads each connection's delivered bytes (one that ended keeps
    /// its last count).
    fn read(&mut self) {
        let now: Vec<u64> = self
            .meters
            .iter()
            .zip(self.last.iter())
            .map(|(m, &last)| m.upgrade().map_or(last, |m| m.delivered()))
            .collect();
        self.last = now;
    }

    fn total(&self) -> u64 {
        self.last.iter().sum::<u64>()
    }

    fn live(&self) -> usize {
        self.meters.iter().filter(|m| m.strong_count() > 0).count()
    }

    fn rtt(&self) -> Option<Duration> {
        self.meters.iter().filter_map(|m| m.upgrade()?.rtt()).max()
    }

    fn loss(&self) -> Option<f64> {
        let (sent, lost) = self
            .meters
            .iter()
            .filter_map(Weak::upgrade)
            .map(|m| m.packets())
            .fold((0, 0), |(s, l), (ms, ml)| (s + ms, l + ml));
        (sent > 0).then(|| lost as f64 / sent as f64)
    }

    /// Goodput per connection since the midpoint, bytes per second, and
    /// how many connections carried it; `None` when none did.
    fn per_connection(&self, now: Instant) -> Option<(f64, usize)> {
        let (at, mid) = self.mid.as_ref()?;
        let secs = now.duration_since(*at).as_secs_f64();
        let deltas: Vec<u64> = self
            .last
            .iter()
            .enumerate()
            .map(|(i, &v)| v.saturating_sub(mid.get(i).copied().unwrap_or(0)))
            .filter(|&d| d > 0)
            .collect();
        if deltas.is_empty() || secs <= 0.0 {
            return None;
        }
        let bytes: u64 = deltas.iter().sum();
        Some((bytes as f64 / secs / deltas.len() as f64, deltas.len()))
    }
}

/// The transport chosen, and why (for `-v` and `--json`).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The transport the node's connections use from now on.
    pub transport: Transport,
    /// One line that says why.
    pub why: String,
    /// What a connection of the chosen transport moved, bytes per second,
    /// and the share of its packets lost (none known: not measured): the
    /// chosen transport's next connections start there.
    pub measured: Option<crate::PathHint>,
}

/// The choice between TCP and QUIC for one node (see the module docs).
#[derive(Debug)]
pub struct Choice {
    tcp: Side,
    quic: Side,
    /// When data passed [`TRIAL_START_BYTES`].
    started: Option<Instant>,
    decided: Option<Decision>,
}

impl Default for Choice {
    fn default() -> Self {
        Self::new()
    }
}

impl Choice {
    /// Nothing tried yet.
    pub fn new() -> Self {
        Self {
            tcp: Side::new(),
            quic: Side::new(),
            started: None,
            decided: None,
        }
    }

    fn side(&mut self, t: Transport) -> &mut Side {
        match t {
            Transport::Quic => &mut self.quic,
            _ => &mut self.tcp,
        }
    }

    fn side_of(&self, t: Transport) -> &Side {
        match t {
            Transport::Quic => &self.quic,
            _ => &self.tcp,
        }
    }

    /// The decision, once made.
    pub fn decided(&self) -> Option<&Decision> {
        self.decided.as_ref()
    }

    /// A connection over `t` came up at `now`, metered by `meter`.
    /// The handshake took from `began` to `now`.
    pub fn up(&mut self, t: Transport, meter: &Arc<Meter>, began: Instant, now: Instant) {
        let side = self.side(t);
        if !matches!(side.standing, Standing::Up(_)) {
            side.standing = Standing::Up(now);
        }
        let took = now.saturating_duration_since(began);
        side.handshake = Some(side.handshake.map_or(took, |h| h.min(took)));
        side.meters.push(Arc::downgrade(meter));
        side.last.push(0);
        if let Some((_, mid)) = side.mid.as_mut() {
            mid.push(0);
        }
        if self.decided.as_ref().is_some_and(|d| d.transport != t) {
            meter.supersede();
        }
    }

    /// A handshake over `t` failed with `why` (a connection that came up
    /// before keeps `t` standing: this one attempt failed, not the way).
    pub fn failed(&mut self, t: Transport, why: String) {
        let side = self.side(t);
        if side.standing == Standing::Pending {
            side.standing = Standing::Failed(why);
        }
    }

    /// True while `t` may still be tried (not failed, not decided against).
    pub fn usable(&self, t: Transport) -> bool {
        let side = self.side_of(t);
        match &self.decided {
            Some(d) => d.transport == t,
            None => !matches!(side.standing, Standing::Failed(_)),
        }
    }

    /// The transport the next connection should use: the chosen one; while
    /// undecided, of those up, the one with fewer live connections (TCP on
    /// a tie), so that both carry data — never one whose handshake is still
    /// under way (a blocked UDP port would hold the connection for the
    /// whole handshake limit).
    pub fn next(&self) -> Transport {
        if let Some(d) = &self.decided {
            return d.transport;
        }
        let up = |side: &Side| matches!(side.standing, Standing::Up(_));
        match (up(&self.tcp), up(&self.quic)) {
            (false, true) => Transport::Quic,
            (true, true) if self.quic.live() < self.tcp.live() => Transport::Quic,
            (false, false) if !self.usable(Transport::Tcp) => Transport::Quic,
            _ => Transport::Tcp,
        }
    }

    /// Samples every meter at `now` and decides when it can; returns the
    /// decision when this call made it.
    pub fn sample(&mut self, now: Instant) -> Option<&Decision> {
        if self.decided.is_some() {
            return None;
        }
        self.tcp.read();
        self.quic.read();
        let decision = self.decide(now)?;
        for m in self.side(other(decision.transport)).meters.iter() {
            if let Some(m) = m.upgrade() {
                m.supersede();
            }
        }
        self.decided = Some(decision);
        self.decided.as_ref()
    }

    fn decide(&mut self, now: Instant) -> Option<Decision> {
        if let Some(d) = self.by_standing(now) {
            return Some(d);
        }
        if let Some(d) = self.by_short_path() {
            return Some(d);
        }
        let total = self.tcp.total() + self.quic.total();
        let started = match self.started {
            Some(t) => t,
            None if total >= TRIAL_START_BYTES => *self.started.insert(now),
            None => return None,
        };
        let rtt = self.tcp.rtt().max(self.quic.rtt()).unwrap_or_default();
        let trial = (rtt * TRIAL_RTTS).clamp(TRIAL, TRIAL_MAX);
        let elapsed = now.duration_since(started);
        if elapsed >= trial / 2 && self.tcp.mid.is_none() {
            for side in [&mut self.tcp, &mut self.quic] {
                side.mid = Some((now, side.last.clone()));
            }
        }
        let window = self
            .tcp
            .mid
            .as_ref()
            .map(|(at, _)| now.duration_since(*at))?;
        let (tcp, quic) = (self.tcp.per_connection(now), self.quic.per_connection(now));
        // Before the trial's end only a crawl decides: one moving
        // CRAWL_RATIO times less than the other, or nothing at all while
        // its connections are up (TCP stalled in retransmission timeouts).
        let crawls = match (tcp, quic) {
            (Some((t, _)), Some((q, _))) => q >= t * CRAWL_RATIO || t >= q * CRAWL_RATIO,
            (Some(_), None) => self.quic.live() > 0,
            (None, Some(_)) => self.tcp.live() > 0,
            (None, None) => false,
        };
        if elapsed < trial && !(crawls && window >= EARLY_WINDOW) {
            return None;
        }
        let secs = elapsed.as_secs_f64();
        let mbit = |bps: f64| bps * 8.0 / 1e6;
        let note = |side: &Side| {
            side.loss()
                .filter(|l| *l >= 0.005)
                .map(|l| format!(", {:.0} % of its packets lost", l * 100.0))
                .unwrap_or_default()
        };
        let d = match (tcp, quic) {
            (Some((t, tn)), Some((q, qn))) => {
                // Ties go to TCP (less CPU), but on a long path to QUIC: there
                // TCP's window stops at the kernel's buffer limits, later
                // than a trial of a few round trips sees (250 ms one way:
                // QUIC 113 Mbit/s, TCP 66, after 10 s).
                let transport = match rtt >= LONG_RTT {
                    false if q >= t * QUIC_MARGIN => Transport::Quic,
                    false => Transport::Tcp,
                    true if t >= q * QUIC_MARGIN => Transport::Tcp,
                    true => Transport::Quic,
                };
                let won = if transport == Transport::Quic { q } else { t };
                Decision {
                    transport,
                    why: format!(
                        "over the first {secs:.1} s QUIC moved {:.0} Mbit/s per connection ({qn}){}, TCP {:.0} ({tn}){}",
                        mbit(q),
                        note(&self.quic),
                        mbit(t),
                        note(&self.tcp),
                    ),
                    measured: Some(self.hint(transport, won)),
                }
            }
            (Some((t, _)), None) => Decision {
                transport: Transport::Tcp,
                why: format!(
                    "only TCP carried data in the first {secs:.1} s ({:.0} Mbit/s)",
                    mbit(t)
                ),
                measured: Some(self.hint(Transport::Tcp, t)),
            },
            (None, Some((q, _))) => Decision {
                transport: Transport::Quic,
                why: format!(
                    "only QUIC carried data in the first {secs:.1} s ({:.0} Mbit/s)",
                    mbit(q)
                ),
                measured: Some(self.hint(Transport::Quic, q)),
            },
            // Nothing moved in the second half (a pause): wait for data.
            (None, None) => return None,
        };
        Some(d)
    }

    /// `rate` bytes per second over `t`, with the share of `t`'s packets
    /// lost: a hint for the connections that follow.
    fn hint(&self, t: Transport, rate: f64) -> crate::PathHint {
        let side = self.side_of(t);
        crate::PathHint {
            rate: rate as u64,
            loss: side.loss().unwrap_or(0.0),
        }
    }

    /// TCP at once on a short path: one whose TCP handshake (connect and
    /// TLS: two round trips and a little CPU) took under
    /// [`SHORT_HANDSHAKE`] — decided as TCP comes up, before QUIC takes any
    /// work — or, once TCP carried data, whose round trip is under
    /// [`SHORT_RTT`] with nothing lost.
    fn by_short_path(&self) -> Option<Decision> {
        let why = if let Some(h) = self.tcp.handshake.filter(|h| *h < SHORT_HANDSHAKE) {
            format!(
                "a short path (TCP connected in {:.1} ms): TCP costs the least CPU",
                h.as_secs_f64() * 1e3
            )
        } else {
            let rtt = self.tcp.rtt()?;
            let loss = self.tcp.loss()?;
            if self.tcp.total() < TRIAL_START_BYTES || rtt >= SHORT_RTT || loss >= CLEAN_LOSS {
                return None;
            }
            format!(
                "a short, clean path (TCP's round trip {:.1} ms, nothing lost): TCP costs the least CPU",
                rtt.as_secs_f64() * 1e3
            )
        };
        Some(Decision {
            transport: Transport::Tcp,
            why,
            measured: None,
        })
    }

    /// A decision the handshakes alone make: one failed, or QUIC silent
    /// [`HANDSHAKE_GRACE`] after TCP came up.
    fn by_standing(&self, now: Instant) -> Option<Decision> {
        match (&self.tcp.standing, &self.quic.standing) {
            (Standing::Failed(why), Standing::Up(_)) => Some(Decision {
                transport: Transport::Quic,
                why: format!("TCP did not come up: {why}"),
                measured: None,
            }),
            (Standing::Up(_), Standing::Failed(why)) => Some(Decision {
                transport: Transport::Tcp,
                why: format!("QUIC did not come up: {why}"),
                measured: None,
            }),
            (Standing::Pending, Standing::Up(at)) if now.duration_since(*at) >= HANDSHAKE_GRACE => {
                Some(Decision {
                    transport: Transport::Quic,
                    why: format!(
                        "TCP did not answer within {:.1} s of QUIC",
                        HANDSHAKE_GRACE.as_secs_f64()
                    ),
                    measured: None,
                })
            }
            (Standing::Up(at), Standing::Pending) if now.duration_since(*at) >= HANDSHAKE_GRACE => {
                Some(Decision {
                    transport: Transport::Tcp,
                    why: format!(
                        "QUIC did not answer within {:.1} s of TCP (UDP blocked on the way?)",
                        HANDSHAKE_GRACE.as_secs_f64()
                    ),
                    measured: None,
                })
            }
            _ => None,
        }
    }

    /// True once a connection of either transport came up.
    pub fn any_up(&self) -> bool {
        [&self.tcp, &self.quic]
            .iter()
            .any(|side| matches!(side.standing, Standing::Up(_)))
    }

    /// Until when a new connection should wait for the other transport's
    /// first handshake (`None`: not waiting): while nothing is chosen, one
    /// transport carries a connection and the other's handshake is still
    /// under way — a pool opens its connections within milliseconds, and
    /// the slower handshake (QUIC's beside a LAN's TCP; TCP's two round
    /// trips beside QUIC's one on a long path) would otherwise never carry
    /// its share of the trial. [`HANDSHAKE_GRACE`] after the first came up, the
    /// watcher decides without it.
    pub fn wait_until(&self) -> Option<Instant> {
        if self.decided.is_some() {
            return None;
        }
        match (&self.tcp.standing, &self.quic.standing) {
            (Standing::Up(at), Standing::Pending) if self.tcp.live() > 0 => {
                Some(*at + HANDSHAKE_GRACE)
            }
            (Standing::Pending, Standing::Up(at)) if self.quic.live() > 0 => {
                Some(*at + HANDSHAKE_GRACE)
            }
            _ => None,
        }
    }
}

/// The transport that is not `t`.
fn other(t: Transport) -> Transport {
    match t {
        Transport::Quic => Transport::Tcp,
        _ => Transport::Quic,
    }
}

#[cfg(test)]
#[path = "choice_tests.rs"]
mod tests;
