//! The controller itself: rounds, the bottleneck estimate, random loss,
//! congestion signals, the rate and the window (see the crate docs).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

mod floor;
use floor::Floor;

/// Smoothed RTTs without an ack after which a packet counts as lost (the
/// quinn side sets its time threshold to this; a lost packet stays in
/// flight that long, and the window makes room for it). Above quinn's
/// default 9/8: reordering moves packets by a fraction of the RTT, and at
/// 9/8 a reordering path declares most of them lost (measured in simulated
/// time, reorder 25 %: 24 Mbit/s of 100 at 9/8, 78 at 3/2).
pub const LOSS_AFTER_RTTS: f64 = 1.5;

/// Rounds the path's RTT floor (the smallest smoothed RTT of a round)
/// is remembered for at least: long enough that a queue of its own that
/// stood a while does not become the floor.
const FLOOR_ROUNDS: usize = 40;
/// ... and at least this long (BBR's min-RTT window). With 40 rounds
/// alone, at 50 % corruption on a 20 ms path the rate sat above the link
/// for 40 rounds (under a second), the queue's RTT became the floor, the
/// queue's own drops then counted as the path's random loss, and the loss
/// estimate climbed to its cap, keeping the queue full (simulated time,
/// 256 MiB: the queue dropped 19 % of the packets sent; 9 % with the
/// window, at the same goodput).
pub const FLOOR_WINDOW: Duration = Duration::from_secs(10);
/// Bound on the floors kept (a rising RTT keeps one per round).
const MAX_FLOORS: usize = 4096;

/// Rounds the bottleneck estimate remembers its largest sample for.
pub const BTL_ROUNDS: usize = 10;
/// Largest random-loss fraction compensated for (the rate is at most
/// `1 / (1 − MAX_LOSS)` times the estimate).
pub const MAX_LOSS: f64 = 0.6;
/// The smoothed RTT above this many times the minimum (plus
/// [`QUEUE_RTT_SLACK`]) means the sender fills a queue.
pub const QUEUE_RTT_FACTOR: f64 = 1.5;
/// Slack on top of [`QUEUE_RTT_FACTOR`] (jitter, ack delay).
pub const QUEUE_RTT_SLACK: Duration = Duration::from_millis(10);
/// A probing round whose loss exceeds the cruise loss by this much found
/// the capacity: the extra loss came with the extra rate.
pub const PROBE_LOSS_MARGIN: f64 = 0.08;
/// Rate growth per round in startup (BBR's 2/ln 2).
pub const STARTUP_GAIN: f64 = 2.885;
/// Loss above a hint's that says the hint fills the path (a short queue
/// dropping the first round's burst): cruise rather than climb.
const FULL_LOSS_MARGIN: f64 = 0.01;
/// Rate growth per round after a hint held ([`LossTolerant::start_at`]):
/// a hint is near the path's rate, and a round at startup's gain from
/// there would send nearly three times the link for a whole round trip.
pub const CLIMB_GAIN: f64 = 1.25;
/// Gains of the cruise cycle, one per round: probe up, drain, cruise.
const CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// In-flight time allowed over the minimum RTT (acks and receivers take a
/// little time; the lab's forwarding under load takes a few ms): without
/// it the window, not the rate, would bound the sender below its estimate
/// and the estimate would shrink with it. At most this much queue stands.
pub const WINDOW_SLACK: Duration = Duration::from_millis(5);
/// Rounds after startup that carry no congestion signal (its excess is
/// still being acked or declared lost).
const SETTLE_ROUNDS: u8 = 2;
/// Cruise rounds the random-loss estimate looks back on.
const LOSS_ROUNDS: usize = 16;
/// Fewest bytes a round must see acked or lost for its loss fraction to count.
const MIN_ROUND_BYTES: u64 = 16 * 1200;
/// A startup round that lost this much more than the path's loss overshot
/// the capacity (the rate is then at least 1.18 times it; one round later
/// it would be [`STARTUP_GAIN`] times that).
pub const STARTUP_LOSS_MARGIN: f64 = 0.15;
/// Fewest bytes a startup round must see for its loss to end startup (250
/// packets: a round of 30 % random loss shows 38 % less than once in 600).
const OVERSHOOT_MIN_BYTES: u64 = 250 * 1200;

/// Marks of the acked count per RTT: a round's goodput sample is the
/// best delivery rate over one RTT ending at any of them, not only the
/// one that lines up with the round (at long RTTs the capacity is found
/// in the middle of a round, and the round's average hides it).
const MARKS_PER_RTT: u32 = 8;

/// Settings of a [`LossTolerant`] controller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateConfig {
    /// Datagram size the window is counted in.
    pub mtu: u64,
    /// The window before anything was measured (quinn's default: 10 packets).
    pub initial_window: u64,
    /// Smallest window (packets keep flowing to measure the path).
    pub min_window: u64,
    /// Largest window: rate × RTT for the fastest, longest link it must fill.
    pub max_window: u64,
    /// A cap on the send rate in bytes per second (`--max-rate`).
    pub max_rate: Option<u64>,
    /// What the path settled at before (or `--rate-hint`): the connection
    /// starts there at its first acknowledgement instead of in startup.
    pub start: Option<PathHint>,
}

/// What is known of a path before its first round: the goodput a transfer
/// over it settled at (bytes per second, payload) and its random loss.
/// A controller given one starts at `rate / (1 − loss)` and falls back to
/// what the path delivers at the first sign that it no longer holds
/// ([`LossTolerant::start_at`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathHint {
    /// Goodput, bytes per second.
    pub rate: u64,
    /// Random-loss fraction (at most [`MAX_LOSS`] counts).
    pub loss: f64,
}

impl Default for RateConfig {
    fn default() -> Self {
        Self {
            mtu: 1200,
            initial_window: 14_720,
            min_window: 4 * 1200,
            // 1 Gbit/s × 2 s.
            max_window: 250_000_000,
            max_rate: None,
            start: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Startup {
        stalls: u8,
        best: f64,
    },
    /// Started at a [`PathHint`]: at its rate until two rounds that sent
    /// showed no sign of a queue or one did (then the estimate is what got
    /// through). `full`: a round lost a little or queued a little — the
    /// hint fills the path, cruise follows; else [`Mode::Climb`].
    Resumed {
        quiet: u8,
        full: bool,
    },
    /// After a hint held: a quarter more each round, while goodput follows
    /// (a hint below the path's rate — a run that shared the link — is
    /// left in a few rounds, not cruise's quarter every eight); ends as
    /// startup does, on a queue, loss, or goodput that stopped growing.
    Climb {
        stalls: u8,
        best: f64,
    },
    /// One round after startup at its inverse gain.
    Drain,
    Cruise {
        phase: usize,
    },
}

/// What one round saw.
#[derive(Debug, Clone, Copy, Default)]
struct Round {
    start: Option<Instant>,
    acked: u64,
    lost: u64,
    app_limited: bool,
    /// The highest delivery rate over one RTT that ended in this round.
    peak: f64,
    /// The smallest smoothed RTT seen in this round.
    low_srtt: Option<Duration>,
    /// Packets whose delivery RTT was noted, and those RTTs' sum (seconds).
    delivered: u64,
    delivery_secs: f64,
}

/// The loss-tolerant rate controller (see the crate docs).
#[derive(Debug, Clone)]
pub struct LossTolerant {
    cfg: RateConfig,
    mode: Mode,
    /// Send rate now, bytes per second.
    rate: f64,
    /// Recent goodput samples (bytes per second), newest last.
    samples: VecDeque<f64>,
    /// Random-loss fraction estimate.
    loss: f64,
    /// Loss fractions of recent cruise rounds.
    losses: VecDeque<f64>,
    /// Rounds after startup whose acks and losses are still startup's.
    settling: u8,
    round: Round,
    srtt: Duration,
    min_rtt: Duration,
    /// Bytes in flight don't matter here; the window is what quinn enforces.
    window: u64,
    /// Bytes acked since the start.
    acked: u64,
    /// (time, bytes acked by then), about [`MARKS_PER_RTT`] a round trip,
    /// reaching back one RTT: delivery rates over one RTT at any offset.
    marks: VecDeque<(Instant, u64)>,
    /// The floor of the recent rounds' smallest smoothed RTTs: the path's.
    floors: Floor,
    /// The floor of the recent rounds' mean delivery RTTs (each packet's
    /// own, from its sending to its acknowledgement).
    delivery: Floor,
    /// Rounds ended since the start.
    rounds: u64,
    /// A hint to start at, taken at the next acknowledgement (once the RTT
    /// is known, so the window fits the path).
    pending: Option<PathHint>,
}

impl LossTolerant {
    /// A controller at the start of a connection.
    pub fn new(cfg: RateConfig) -> Self {
        let rtt = Duration::from_millis(333);
        let rate = cfg.initial_window as f64 / rtt.as_secs_f64();
        let mut c = Self {
            cfg,
            mode: Mode::Startup {
                stalls: 0,
                best: 0.0,
            },
            rate,
            samples: VecDeque::with_capacity(BTL_ROUNDS + 1),
            loss: 0.0,
            losses: VecDeque::with_capacity(LOSS_ROUNDS + 1),
            settling: 0,
            round: Round::default(),
            srtt: rtt,
            min_rtt: rtt,
            window: cfg.initial_window,
            acked: 0,
            marks: VecDeque::with_capacity(2 * MARKS_PER_RTT as usize + 2),
            floors: Floor::default(),
            delivery: Floor::default(),
            rounds: 0,
            pending: cfg.start,
        };
        c.window = c.cfg.initial_window.max(c.cfg.min_window);
        c
    }

    /// The send rate now, in bytes per second.
    pub fn rate(&self) -> u64 {
        self.rate as u64
    }

    /// The window quinn should enforce, in bytes.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// The bottleneck estimate (largest recent goodput), bytes per second.
    pub fn bottleneck(&self) -> u64 {
        self.best_sample() as u64
    }

    /// The random-loss estimate, 0..=[`MAX_LOSS`].
    pub fn loss(&self) -> f64 {
        self.loss
    }

    /// True while the rate still grows exponentially.
    pub fn in_startup(&self) -> bool {
        matches!(self.mode, Mode::Startup { .. })
    }

    /// True once the rate was found: startup (or a hint and the climb from
    /// it) ended in cruise. A connection that never got that far — too
    /// short, or one that had little to send — says nothing of the path.
    pub fn settled(&self) -> bool {
        matches!(self.mode, Mode::Cruise { .. } | Mode::Drain)
    }

    /// Starts at `hint` instead of finding the rate from nothing, from the
    /// next acknowledgement on: a path known to carry it (a second transfer
    /// over a 1 s link) runs at its rate from the first round rather than
    /// after a dozen startup rounds. Ignored once startup is over (the
    /// path was measured already) or when the rate is higher already.
    /// Falls back fast: a round with a queue or with loss well above the
    /// hint's sets the estimate to what was delivered.
    pub fn start_at(&mut self, hint: PathHint) {
        self.pending = Some(hint);
    }

    fn resume(&mut self, hint: PathHint) {
        let loss = hint.loss.clamp(0.0, MAX_LOSS);
        let rate = hint.rate as f64 / (1.0 - loss);
        if !self.in_startup() || rate <= self.rate {
            tracing::debug!(
                hint = hint.rate,
                rate = self.rate as u64,
                "path hint not taken: the rate was measured or is higher already"
            );
            return;
        }
        tracing::debug!(
            hint = hint.rate,
            loss,
            srtt_ms = self.srtt.as_millis() as u64,
            "starting at the path's hinted rate"
        );
        self.samples.clear();
        self.samples.push_back(hint.rate as f64);
        self.loss = loss;
        self.losses.clear();
        self.mode = Mode::Resumed {
            quiet: 0,
            full: false,
        };
        self.set_rate();
    }

    /// The datagram size changed.
    pub fn set_mtu(&mut self, mtu: u64) {
        self.cfg.mtu = mtu.max(1200);
        self.update_window();
    }

    /// An acknowledged packet took `rtt` from its sending to its
    /// acknowledgement. On a path that reorders, the smoothed RTT follows
    /// the packets that overtook (quinn samples only a newly largest
    /// acknowledgement), while the window must hold what the delayed ones
    /// keep in flight: the window covers the floor of each round's mean.
    pub fn on_delivery_rtt(&mut self, rtt: Duration) {
        self.round.delivered += 1;
        self.round.delivery_secs += rtt.as_secs_f64();
    }

    /// `bytes` were acknowledged at `now`; `rtt` is the smoothed RTT and
    /// `min_rtt` the smallest seen. `app_limited`: the sender had nothing
    /// more to send (a low goodput then says nothing about the path).
    pub fn on_ack(
        &mut self,
        now: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: Duration,
        min_rtt: Duration,
    ) {
        self.srtt = rtt.max(Duration::from_micros(100));
        self.min_rtt = min_rtt.max(Duration::from_micros(100)).min(self.srtt);
        let low = self.round.low_srtt.get_or_insert(self.srtt);
        *low = (*low).min(self.srtt);
        if let Some(hint) = self.pending.take() {
            self.resume(hint);
        }
        let start = *self.round.start.get_or_insert(now);
        self.round.acked += bytes;
        self.round.app_limited |= app_limited;
        self.acked += bytes;
        self.mark(now);
        let gain = match self.mode {
            Mode::Startup { .. } => Some((STARTUP_GAIN, self.startup_cap())),
            Mode::Climb { .. } => Some((CLIMB_GAIN, self.climb_cap())),
            _ => None,
        };
        if let Some((gain, most)) = gain {
            // Like slow start, each acked byte adds to the rate: a round
            // multiplies it by the gain; bounded by what was delivered.
            let grown = self.rate + bytes as f64 * (gain - 1.0) / self.srtt.as_secs_f64();
            let cap = self.cfg.max_rate.map_or(f64::INFINITY, |r| r as f64);
            self.rate = grown.min(most).min(cap);
        }
        let elapsed = now.saturating_duration_since(start);
        if elapsed >= self.srtt {
            self.end_round(now, elapsed);
            self.round = Round {
                start: Some(now),
                ..Round::default()
            };
        }
        self.update_window();
    }

    /// Notes the acked count now and then, and the delivery rate over the
    /// last RTT.
    fn mark(&mut self, now: Instant) {
        let step = self.srtt / MARKS_PER_RTT;
        if self
            .marks
            .back()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) < step)
        {
            return;
        }
        self.marks.push_back((now, self.acked));
        // Keep one mark at least an RTT old, and none older than that.
        while self.marks.len() > 2
            && self
                .marks
                .get(1)
                .is_some_and(|(t, _)| now.saturating_duration_since(*t) >= self.srtt)
        {
            self.marks.pop_front();
        }
        if let Some(&(t, acked)) = self.marks.front() {
            let span = now.saturating_duration_since(t);
            if span >= self.srtt {
                let rate = (self.acked - acked) as f64 / span.as_secs_f64();
                self.round.peak = self.round.peak.max(rate);
            }
        }
    }

    /// `bytes` were declared lost at `now` (`persistent`: every packet of a
    /// long stretch was lost).
    pub fn on_loss(&mut self, now: Instant, bytes: u64, persistent: bool) {
        self.round.start.get_or_insert(now);
        self.round.lost += bytes;
        if persistent {
            // Nothing got through for a while: start measuring again, from
            // half the rate (the estimate would otherwise hold a dead path's).
            self.rate = (self.rate / 2.0).max(self.floor_rate());
            self.samples.clear();
            self.mode = Mode::Startup {
                stalls: 0,
                best: 0.0,
            };
            self.update_window();
        }
    }

    /// An explicit congestion signal (ECN CE marks): the path has a queue.
    pub fn on_congestion_mark(&mut self) {
        self.back_off(self.best_sample() * 0.85);
    }

    fn end_round(&mut self, now: Instant, elapsed: Duration) {
        let round = self.round;
        self.rounds += 1;
        if let Some(low) = round.low_srtt {
            self.floors.note(now, self.rounds, low);
        }
        if round.delivered > 0 {
            let mean = round.delivery_secs / round.delivered as f64;
            self.delivery
                .note(now, self.rounds, Duration::from_secs_f64(mean));
        }
        let path = self.path_rtt();
        let secs = elapsed.as_secs_f64().max(1e-6);
        let goodput = (round.acked as f64 / secs).max(round.peak);
        let seen = round.acked + round.lost;
        let loss = (seen >= MIN_ROUND_BYTES).then(|| round.lost as f64 / seen as f64);
        // At the cap (`max_rate`) or with nothing to send, a lower sample
        // says nothing about the path: only a higher one counts.
        let capped = self
            .cfg
            .max_rate
            .is_some_and(|cap| self.rate >= cap as f64 * 0.99);
        if !(round.app_limited || capped) || goodput > self.best_sample() {
            self.samples.push_back(goodput);
            while self.samples.len() > BTL_ROUNDS {
                self.samples.pop_front();
            }
        }
        let queued = self.srtt.as_secs_f64()
            > path.as_secs_f64() * QUEUE_RTT_FACTOR + QUEUE_RTT_SLACK.as_secs_f64();
        // One line a round at trace level: what the lab and the simulation
        // are compared by (`HAUL_LOG=haul_congestion=trace`).
        tracing::trace!(
            mode = ?self.mode,
            goodput = goodput as u64,
            lost = round.lost,
            acked = round.acked,
            round_us = elapsed.as_micros() as u64,
            srtt_ms = self.srtt.as_millis() as u64,
            min_ms = self.min_rtt.as_millis() as u64,
            rate = self.rate as u64,
            window = self.window,
            loss = self.loss,
            "round"
        );
        match self.mode {
            Mode::Startup { stalls, best } => {
                // Below the capacity, startup's loss is the path's (the
                // quartile leaves out the rounds that overshot).
                if let (Some(l), true) = (loss, self.srtt <= path + QUEUE_RTT_SLACK) {
                    self.note_loss(l);
                }
                // Only a round that had data to send says anything: the
                // first rounds of a connection carry its handshake and
                // requests (measured in the lab at 1 s one way: three such
                // rounds ended startup at 3 KB/s).
                // A round that lost well above the path's loss sent more
                // than the path takes: startup is over, whether or not its
                // goodput still grew (goodput lags the rate by a round, so
                // at long RTTs it grows while the rate is already several
                // times the capacity), and even if it was app-limited (a
                // sender held by the receiver's flow control is).
                let overshot = seen >= OVERSHOOT_MIN_BYTES
                    && loss.is_some_and(|l| l > self.loss + STARTUP_LOSS_MARGIN);
                let sending = seen >= MIN_ROUND_BYTES && !round.app_limited;
                let grew = goodput >= best * 1.25;
                let stalls = match (sending, grew) {
                    (false, _) => stalls,
                    (true, true) => 0,
                    (true, false) => stalls + 1,
                };
                if queued || stalls >= 2 || overshot {
                    // The capacity is found: drain what startup queued (or
                    // cruise, if the excess was dropped, not queued); what
                    // the next rounds see of startup's excess is no signal.
                    self.settling = SETTLE_ROUNDS;
                    self.mode = if queued {
                        Mode::Drain
                    } else {
                        Mode::Cruise { phase: 2 }
                    };
                } else {
                    self.mode = Mode::Startup {
                        stalls,
                        best: best.max(goodput),
                    };
                }
            }
            Mode::Resumed { quiet, full } => {
                // Sent at the hint: a queue, or loss well above the hint's,
                // says the path no longer carries it. What got through is
                // the estimate then (no 15 % steps: the hint may be far off),
                // and a round drains the queue.
                let overshot = queued
                    || (seen >= OVERSHOOT_MIN_BYTES
                        && loss.is_some_and(|l| l > self.loss + STARTUP_LOSS_MARGIN));
                let sending = seen >= MIN_ROUND_BYTES && !round.app_limited;
                // A little loss above the hint's, or a little queue: the
                // hint is about what the path carries, nothing to climb to
                // (a climb round from there overfills a short queue).
                let full = full
                    || (sending
                        && (self.srtt > path + QUEUE_RTT_SLACK
                            || loss.is_some_and(|l| l > self.loss + FULL_LOSS_MARGIN)));
                if overshot {
                    tracing::debug!(
                        goodput = goodput as u64,
                        "the hinted rate does not hold: falling back to what got through"
                    );
                    self.samples.clear();
                    self.samples.push_back(goodput.max(self.floor_rate()));
                    self.settling = SETTLE_ROUNDS;
                    self.mode = Mode::Cruise { phase: 1 };
                } else if sending && quiet >= 1 {
                    // The hint held: from here the estimate is what was
                    // measured, not the hint (a connection closing soon
                    // after must not report the hint back as the path's).
                    self.samples.clear();
                    self.samples.push_back(goodput.max(self.floor_rate()));
                    self.mode = if full {
                        self.settling = SETTLE_ROUNDS;
                        Mode::Cruise { phase: 2 }
                    } else {
                        Mode::Climb {
                            stalls: 0,
                            best: goodput,
                        }
                    };
                } else {
                    self.mode = Mode::Resumed {
                        quiet: quiet + u8::from(sending),
                        full,
                    };
                }
                // No loss is noted as the path's here: the first round at
                // the hint fills the path at once (quinn paces at 5/4 of
                // the window's rate), and what a short queue drops of that
                // burst is no random loss (noted, it raised the rate above
                // the link for good; simulated time, 1 s one way: a queue
                // that dropped 28 % of what was sent).
            }
            Mode::Climb { stalls, best } => {
                // As startup: a queue or a loss well above the path's ends
                // it (what got through is the estimate then); so do two
                // rounds whose goodput did not follow the rate. No loss is
                // the path's here (the rounds probe above the estimate).
                let overshot = queued
                    || (seen >= OVERSHOOT_MIN_BYTES
                        && loss.is_some_and(|l| l > self.loss + STARTUP_LOSS_MARGIN));
                let sending = seen >= MIN_ROUND_BYTES && !round.app_limited;
                let stalls = match (sending, goodput >= best * 1.1) {
                    (false, _) => stalls,
                    (true, true) => 0,
                    (true, false) => stalls + 1,
                };
                if overshot {
                    self.samples.clear();
                    self.samples.push_back(goodput.max(self.floor_rate()));
                    self.settling = SETTLE_ROUNDS;
                    self.mode = Mode::Cruise { phase: 1 };
                } else if stalls >= 2 {
                    self.settling = SETTLE_ROUNDS;
                    self.mode = Mode::Cruise { phase: 2 };
                } else {
                    self.mode = Mode::Climb {
                        stalls,
                        best: best.max(goodput),
                    };
                }
            }
            Mode::Drain => self.mode = Mode::Cruise { phase: 2 },
            Mode::Cruise { phase } if self.settling > 0 => {
                self.settling -= 1;
                self.mode = Mode::Cruise {
                    phase: (phase + 1) % CYCLE.len(),
                };
            }
            Mode::Cruise { phase } => {
                // Acks and losses seen now are mostly of packets sent a
                // round ago (losses are declared LOSS_AFTER_RTTS after).
                let sent_at = CYCLE[(phase + CYCLE.len() - 1) % CYCLE.len()];
                // A queue that drops: at long RTTs a full queue is a small
                // part of the RTT, so it counts together with extra loss.
                let dropping = self.srtt > path + QUEUE_RTT_SLACK
                    && loss.is_some_and(|l| l > self.loss + PROBE_LOSS_MARGIN);
                if (queued || dropping) && sent_at == 1.0 {
                    // Cruising at the estimate fills a queue (another flow
                    // came, or the estimate is too high): back off towards
                    // what got through. After a probe, the same signs only
                    // say it found the capacity; the drain round follows.
                    return self.back_off(goodput);
                }
                // With a queue building, loss may be congestion: only what
                // is lost with the RTT near its floor is the path's.
                let floor = self.srtt <= path + QUEUE_RTT_SLACK;
                if let (Some(l), true) = (loss, floor) {
                    self.note_loss(l);
                }
                self.mode = Mode::Cruise {
                    phase: (phase + 1) % CYCLE.len(),
                };
            }
        }
        self.set_rate();
    }

    /// Random loss is the floor under every round's loss (congestion only
    /// adds to it): the lower quartile of the recent cruise rounds', so the
    /// rounds a probe or a queue pushed up do not count.
    fn note_loss(&mut self, l: f64) {
        self.losses.push_back(l.min(MAX_LOSS));
        while self.losses.len() > LOSS_ROUNDS {
            self.losses.pop_front();
        }
        let mut sorted: Vec<f64> = self.losses.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        self.loss = sorted.get(sorted.len() / 4).copied().unwrap_or(0.0);
    }

    /// The estimate drops towards `delivered` (by at most 15 % a round, so
    /// one bad round does not cost a long climb back); one round drains
    /// the queue.
    fn back_off(&mut self, delivered: f64) {
        let next = delivered.max(self.best_sample() * 0.85);
        self.samples.clear();
        self.samples.push_back(next.max(self.floor_rate()));
        self.mode = Mode::Cruise { phase: 1 };
        self.set_rate();
    }

    /// The path's round trip without a queue: the smallest smoothed RTT of
    /// recent rounds, never below the minimum RTT. Not the minimum RTT
    /// itself: a reordered packet that skipped the delay is as fast as
    /// the ack path alone, and a window of that RTT would hold the sender
    /// far below its rate (measured: reorder 25 % cost 3/4 of the rate).
    fn path_rtt(&self) -> Duration {
        self.floors.get().unwrap_or(self.min_rtt).max(self.min_rtt)
    }

    /// The floor of the rounds' mean delivery RTTs, at most what the queue
    /// signal would call a queue of its own over the path's RTT (so no
    /// queue the sender stands keeps its own window).
    fn delivery_rtt(&self) -> Duration {
        let path = self.path_rtt();
        let most = path.mul_f64(QUEUE_RTT_FACTOR) + QUEUE_RTT_SLACK;
        self.delivery.get().unwrap_or_default().min(most)
    }

    fn best_sample(&self) -> f64 {
        self.samples.iter().copied().fold(0.0, f64::max)
    }

    /// Startup's rate stays within reach of what was delivered (its
    /// samples lag a round behind the rate).
    fn startup_cap(&self) -> f64 {
        2.0 * STARTUP_GAIN * self.best_sample().max(self.initial_rate())
    }

    /// A climb's rate stays within two rounds' growth of what was
    /// delivered (goodput lags the rate by a round).
    fn climb_cap(&self) -> f64 {
        CLIMB_GAIN * CLIMB_GAIN * self.best_sample() / (1.0 - self.loss.min(MAX_LOSS))
    }

    fn initial_rate(&self) -> f64 {
        self.cfg.initial_window as f64 / self.srtt.as_secs_f64().max(1e-3)
    }

    fn floor_rate(&self) -> f64 {
        self.cfg.min_window as f64 / self.srtt.as_secs_f64().max(1e-3)
    }

    fn set_rate(&mut self) {
        let rate = match self.mode {
            Mode::Startup { .. } => self.rate.min(self.startup_cap()),
            Mode::Resumed { .. } => self.best_sample() / (1.0 - self.loss.min(MAX_LOSS)),
            Mode::Climb { .. } => self.rate.min(self.climb_cap()),
            Mode::Drain => self.best_sample() / STARTUP_GAIN,
            Mode::Cruise { phase } => {
                self.best_sample() * CYCLE[phase] / (1.0 - self.loss.min(MAX_LOSS))
            }
        };
        let cap = self.cfg.max_rate.map_or(f64::INFINITY, |r| r as f64);
        self.rate = rate.max(self.floor_rate()).min(cap);
        self.update_window();
    }

    fn update_window(&mut self) {
        // rate × the path's RTT (the floor of recent rounds', so no
        // standing queue keeps itself; at least the floor of their mean
        // delivery RTTs, which a reordering path's delayed packets take)
        // plus WINDOW_SLACK (the window, not the pacer, bounds quinn's
        // rate), and the lost packets that stay in flight until they are
        // declared lost, LOSS_AFTER_RTTS later.
        let path = self.path_rtt().max(self.delivery_rtt());
        let (min, srtt) = (path.as_secs_f64(), self.srtt.as_secs_f64());
        let capped = self
            .cfg
            .max_rate
            .is_some_and(|cap| self.rate >= cap as f64 * 0.99);
        // At the cap, no headroom: the window is what holds the rate there.
        let base = if capped {
            srtt.max(self.delivery_rtt().as_secs_f64())
        } else {
            min + WINDOW_SLACK.as_secs_f64()
        };
        let in_flight_time = base + LOSS_AFTER_RTTS * self.loss * srtt;
        let w = (self.rate * in_flight_time) as u64 + if capped { 0 } else { 2 * self.cfg.mtu };
        let min = self.cfg.min_window.max(4 * self.cfg.mtu);
        self.window = w.clamp(min, self.cfg.max_window.max(min));
    }
}

#[cfg(test)]
mod tests;
