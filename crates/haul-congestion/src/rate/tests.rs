//! The controller against haul-netsim's link model in simulated time: a
//! sender paced and windowed as quinn does it, packets through the link
//! (loss before the rate queue, a bounded queue, the delay), acks back over
//! a clean path, losses declared as quinn would (three later packets acked,
//! or 9/8 RTT without an ack).

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use haul_netsim::link::{Link, Nanos};
use haul_netsim::Profile;

use super::*;

const PKT: usize = 1200;
const MS: Nanos = 1_000_000;
const SEC: Nanos = 1_000_000_000;

/// Constant-rate competing traffic through the same link, from `from` on.
struct Competitor {
    from: Nanos,
    every: Nanos,
    next: Nanos,
}

struct Run {
    link: Link,
    /// One-way delay of the clean ack path.
    back: Nanos,
    c: LossTolerant,
    epoch: Instant,
    now: Nanos,
    next_seq: u64,
    /// In flight: seq → sent at.
    flight: BTreeMap<u64, Nanos>,
    in_flight: u64,
    acks: VecDeque<(Nanos, u64)>,
    srtt: Option<Duration>,
    min_rtt: Duration,
    /// Pacing: earliest time of the next send.
    next_send: Nanos,
    /// Acked bytes per 100 ms slot.
    goodput: Vec<u64>,
    competitor: Option<Competitor>,
    /// The receiver's flow-control window: in flight at most this many
    /// bytes, whatever the controller allows; a sender held by it is
    /// app-limited, as quinn reports it.
    flow_window: Option<u64>,
}

impl Run {
    fn new(spec: &str, cfg: RateConfig) -> Self {
        let profile = Profile::parse(spec).unwrap();
        let back = profile.delay_ns;
        // The handshake measured the path's round trip before data flows.
        let rtt = Duration::from_nanos(2 * back);
        let epoch = Instant::now();
        let mut c = LossTolerant::new(cfg);
        c.on_ack(epoch, 0, true, rtt, rtt);
        Self {
            link: Link::new(profile, 7),
            back,
            c,
            epoch,
            now: 0,
            next_seq: 0,
            flight: BTreeMap::new(),
            in_flight: 0,
            acks: VecDeque::new(),
            srtt: Some(rtt),
            min_rtt: rtt,
            next_send: 0,
            goodput: Vec::new(),
            competitor: None,
            flow_window: None,
        }
    }

    fn at(&self, t: Nanos) -> Instant {
        self.epoch + Duration::from_nanos(t)
    }

    fn srtt(&self) -> Duration {
        self.srtt.unwrap_or(Duration::from_millis(333))
    }

    /// Runs until `end` (simulated).
    fn run_until(&mut self, end: Nanos) {
        while self.now < end {
            self.send_what_may_go();
            self.deliver();
            self.take_acks();
            self.declare_late_losses();
            self.now = self.next_event().min(end).max(self.now + 1);
        }
    }

    fn next_event(&self) -> Nanos {
        let mut t = self.now + 5 * MS;
        if self.in_flight + PKT as u64 <= self.c.window() && !self.flow_blocked() {
            t = t.min(self.next_send.max(self.now));
        }
        if let Some(d) = self.link.next_due() {
            t = t.min(d);
        }
        if let Some((d, _)) = self.acks.front() {
            t = t.min(*d);
        }
        if let Some(c) = &self.competitor {
            t = t.min(c.next.max(c.from));
        }
        t
    }

    fn send_what_may_go(&mut self) {
        if let Some(c) = &mut self.competitor {
            while self.now >= c.from && c.next <= self.now {
                let mut pkt = vec![0u8; 1500];
                pkt[0] = 1;
                self.link.push(self.now, pkt);
                c.next = c.next.max(c.from) + c.every;
            }
        }
        while self.next_send <= self.now
            && self.in_flight + PKT as u64 <= self.c.window()
            && !self.flow_blocked()
        {
            let seq = self.next_seq;
            self.next_seq += 1;
            let mut pkt = vec![0u8; PKT];
            pkt[1..9].copy_from_slice(&seq.to_be_bytes());
            self.link.push(self.now, pkt);
            self.flight.insert(seq, self.now);
            self.in_flight += PKT as u64;
            // quinn's pacer: 1.25 × window per smoothed RTT.
            let rate = 1.25 * self.c.window() as f64 / self.srtt().as_secs_f64();
            self.next_send = self.now + (PKT as f64 / rate * 1e9) as Nanos;
        }
    }

    fn flow_blocked(&self) -> bool {
        self.flow_window
            .is_some_and(|w| self.in_flight + PKT as u64 > w)
    }

    fn deliver(&mut self) {
        while let Some((due, pkt)) = self.link.poll(self.now) {
            if pkt[0] == 1 {
                continue;
            }
            let seq = u64::from_be_bytes(pkt[1..9].try_into().unwrap());
            self.acks.push_back((due + self.back, seq));
        }
    }

    fn take_acks(&mut self) {
        while self.acks.front().is_some_and(|(t, _)| *t <= self.now) {
            let Some((_, seq)) = self.acks.pop_front() else {
                break;
            };
            let Some(sent) = self.flight.remove(&seq) else {
                continue;
            };
            self.in_flight -= PKT as u64;
            let sample = Duration::from_nanos(self.now - sent);
            self.min_rtt = self.min_rtt.min(sample);
            self.srtt = Some(match self.srtt {
                None => sample,
                Some(s) => (s * 7 + sample) / 8,
            });
            let slot = (self.now / (100 * MS)) as usize;
            if self.goodput.len() <= slot {
                self.goodput.resize(slot + 1, 0);
            }
            self.goodput[slot] += PKT as u64;
            let (now, srtt, min) = (self.at(self.now), self.srtt(), self.min_rtt);
            let app_limited = self.flow_blocked();
            self.c.on_delivery_rtt(sample);
            self.c.on_ack(now, PKT as u64, app_limited, srtt, min);
            // Packet threshold: three later packets acked.
            let lost: Vec<u64> = self
                .flight
                .range(..seq.saturating_sub(2))
                .map(|(s, _)| *s)
                .collect();
            self.lose(&lost);
        }
    }

    fn declare_late_losses(&mut self) {
        let limit = (self.srtt().as_nanos() as Nanos) * 9 / 8 + MS;
        let lost: Vec<u64> = self
            .flight
            .iter()
            .take_while(|(_, sent)| self.now.saturating_sub(**sent) > limit)
            .map(|(s, _)| *s)
            .collect();
        self.lose(&lost);
    }

    fn lose(&mut self, seqs: &[u64]) {
        if seqs.is_empty() {
            return;
        }
        for s in seqs {
            self.flight.remove(s);
        }
        let bytes = (seqs.len() * PKT) as u64;
        self.in_flight -= bytes;
        self.c.on_loss(self.at(self.now), bytes, false);
    }

    /// Mean goodput in bits per second between `from` and `to` seconds.
    fn goodput_mbit(&self, from: f64, to: f64) -> f64 {
        let (a, b) = ((from * 10.0) as usize, (to * 10.0) as usize);
        let bytes: u64 = self.goodput.iter().take(b).skip(a).sum();
        bytes as f64 * 8.0 / (to - from) / 1e6
    }
}

fn run(spec: &str, secs: u64) -> Run {
    let mut r = Run::new(spec, RateConfig::default());
    r.run_until(secs * SEC);
    r
}

#[test]
fn on_a_clean_link_the_rate_converges_on_the_bottleneck() {
    let r = run("rate 100mbit delay 10ms", 12);
    let g = r.goodput_mbit(4.0, 12.0);
    // IP bytes on the link are payload here; 100 Mbit/s is the ceiling.
    assert!(g > 85.0 && g <= 101.0, "goodput {g:.1} Mbit/s");
    assert!(!r.c.in_startup());
    // The queue stays short: the RTT near the path's 20 ms.
    assert!(r.srtt() < Duration::from_millis(45), "srtt {:?}", r.srtt());
}

#[test]
fn random_loss_does_not_collapse_the_rate() {
    let clean = run("rate 100mbit delay 10ms", 12).goodput_mbit(4.0, 12.0);
    for loss in [5, 16, 30] {
        let r = run(&format!("rate 100mbit delay 10ms loss {loss}%"), 12);
        let g = r.goodput_mbit(4.0, 12.0);
        assert!(
            g >= 0.7 * clean,
            "loss {loss}%: {g:.1} of {clean:.1} Mbit/s"
        );
        // Loss before the rate queue costs no link time: nearly all of it.
        let est = r.c.loss();
        assert!(
            (est - loss as f64 / 100.0).abs() < 0.08,
            "loss {loss}%: estimated {est:.3}"
        );
    }
}

#[test]
fn a_one_second_delay_costs_startup_rounds_not_the_rate() {
    let r = run("rate 200mbit delay 1000ms", 90);
    let g = r.goodput_mbit(40.0, 90.0);
    assert!(g > 150.0, "goodput {g:.1} Mbit/s at 1 s one way");
    // From the first byte, startup included: 1 GiB averages above 60 % of
    // the link (the bench target; TCP: 6.7 %).
    let mut acked = 0u64;
    let slot = r.goodput.iter().position(|b| {
        acked += b;
        acked >= 1 << 30
    });
    let secs = (slot.expect("1 GiB within 90 s") + 1) as f64 / 10.0;
    let avg = 8.0 * (1u64 << 30) as f64 / secs / 1e6;
    assert!(avg > 120.0, "1 GiB averaged {avg:.1} Mbit/s ({secs:.1} s)");
}

#[test]
fn a_sender_held_by_flow_control_still_leaves_startup_when_it_overshoots() {
    // The receiver's window, not the controller, holds the sender (3 round
    // trips of the link's rate): every round is app-limited. Startup must
    // still end once its own losses show the capacity (in the lab, a
    // startup that never ended dropped 57 % of what it sent at 1 s).
    let mut r = Run::new("rate 200mbit delay 1000ms", RateConfig::default());
    r.flow_window = Some(75_000_000);
    r.run_until(60 * SEC);
    assert!(!r.c.in_startup(), "still in startup after 60 s");
    let g = r.goodput_mbit(30.0, 60.0);
    assert!(g > 150.0, "goodput {g:.1} Mbit/s at 1 s one way");
    let st = r.link.stats();
    let dropped = st.queue_drops as f64 / st.packets as f64;
    assert!(
        dropped < 0.2,
        "{:.0} % of packets dropped by the queue",
        dropped * 100.0
    );
}

#[test]
fn a_round_that_lost_far_above_the_path_ends_startup_though_goodput_grew() {
    // At 1 s one way, goodput lags the rate by a round: it still grows
    // while startup already sends several times the capacity, and a sender
    // held by flow control reports every round app-limited. The lab's
    // trace: goodput 15, then 22.5 MB/s with 13.5 MB lost of 37.6 MB.
    let mut c = LossTolerant::new(RateConfig::default());
    let t0 = Instant::now();
    let rtt = Duration::from_millis(1010);
    c.on_ack(t0, 0, true, rtt, rtt);
    let mut t = t0;
    for (acked, lost) in [(2_000_000u64, 0u64), (6_000_000, 0), (15_000_000, 0)] {
        t += rtt;
        c.on_loss(t, lost, false);
        c.on_ack(t, acked, true, rtt, rtt);
    }
    assert!(c.in_startup());
    let srtt = rtt + Duration::from_millis(58);
    t += srtt;
    c.on_loss(t, 13_500_000, false);
    c.on_ack(t, 22_500_000, true, srtt, rtt);
    assert!(!c.in_startup(), "startup went on at {} B/s", c.rate());
    assert!(c.rate() < 30_000_000, "rate {} B/s", c.rate());
}

#[test]
fn a_competing_flow_that_fills_the_queue_makes_it_back_off() {
    let mut r = Run::new("rate 100mbit delay 10ms", RateConfig::default());
    r.run_until(6 * SEC);
    assert!(r.goodput_mbit(3.0, 6.0) > 85.0);
    // 70 Mbit/s of traffic that does not back off arrives.
    r.competitor = Some(Competitor {
        from: 6 * SEC,
        every: 1500 * 8 * 1000 / 70, // ns per 1500-byte packet at 70 Mbit/s
        next: 0,
    });
    r.run_until(16 * SEC);
    let g = r.goodput_mbit(10.0, 16.0);
    assert!(g < 40.0, "kept {g:.1} Mbit/s of a link with 30 left");
    assert!(g > 10.0, "starved itself: {g:.1} Mbit/s");
    // Congestion is not mistaken for random loss.
    assert!(r.c.loss() < 0.2, "loss estimate {:.3}", r.c.loss());
}

#[test]
fn max_rate_caps_it() {
    let cfg = RateConfig {
        max_rate: Some(2_500_000), // 20 Mbit/s
        ..RateConfig::default()
    };
    let mut r = Run::new("rate 100mbit delay 10ms", cfg);
    r.run_until(8 * SEC);
    let g = r.goodput_mbit(3.0, 8.0);
    assert!(
        g <= 21.0 && g > 15.0,
        "goodput {g:.1} Mbit/s under a 20 Mbit/s cap"
    );
}

#[test]
fn rounds_with_little_to_send_do_not_end_startup() {
    // A connection's first rounds carry its handshake and requests: a few
    // KB acked per round, app-limited, before the data flows.
    let mut c = LossTolerant::new(RateConfig::default());
    let t0 = Instant::now();
    let rtt = Duration::from_millis(1010);
    for round in 1..=5u32 {
        c.on_ack(t0 + rtt * round, 2_700, true, rtt, rtt);
    }
    assert!(
        c.in_startup(),
        "startup ended on rounds with nothing to send"
    );
}

#[test]
fn a_queue_of_its_own_that_stands_for_seconds_is_not_the_path() {
    // 50 rounds at the path's 20 ms, then 7 s of rounds behind a 40 ms
    // queue that drops a fifth of what it gets (the rate sits above the
    // link). Those drops are congestion: the floor stays the path's, and
    // the random-loss estimate stays where the clean rounds put it.
    let path = Duration::from_millis(20);
    let queued = Duration::from_millis(60);
    let mut c = LossTolerant::new(RateConfig::default());
    let mut now = Instant::now();
    for round in 0..170u32 {
        let rtt = if round < 50 { path } else { queued };
        for _ in 0..10 {
            now += rtt / 10;
            c.on_ack(now, 12_000, false, rtt, path);
            if round >= 50 {
                c.on_loss(now, 3_000, false);
            }
        }
    }
    assert_eq!(c.path_rtt(), path);
    assert!(c.loss() < 0.05, "loss estimate {:.3}", c.loss());
}

#[test]
fn the_window_holds_what_delayed_packets_keep_in_flight() {
    // A path that reorders: the smoothed RTT is the 10 ms of the packets
    // that overtook, each of the others takes 20 ms to be acknowledged.
    // With a window of 10 ms the delayed packets held the sender to about
    // half the link (simulated time, reorder 25 %: 91.7 of 181.5 Mbit/s).
    let t0 = Instant::now();
    let fed = |delivery: Duration| {
        let mut c = LossTolerant::new(RateConfig::default());
        let srtt = Duration::from_millis(10);
        let mut t = t0;
        for _ in 0..3000 {
            t += Duration::from_micros(100);
            c.on_delivery_rtt(delivery);
            c.on_ack(t, 1200, false, srtt, srtt);
        }
        (c.window(), c.rate())
    };
    let (w_same, rate_same) = fed(Duration::from_millis(10));
    let (w, rate) = fed(Duration::from_millis(20));
    assert_eq!(
        rate, rate_same,
        "the rate is the rate: only the window differs"
    );
    assert!(
        w as f64 >= rate as f64 * 0.020,
        "window {w} for {rate} B/s: under 20 ms of it"
    );
    assert!(w > w_same, "{w} vs {w_same}");
}

/// A run at 1 s one way that starts at `hint`.
fn hinted(spec: &str, hint: PathHint, secs: u64) -> Run {
    let cfg = RateConfig {
        start: Some(hint),
        ..RateConfig::default()
    };
    let mut r = Run::new(spec, cfg);
    r.run_until(secs * SEC);
    r
}

/// 200 Mbit/s of payload, in bytes per second.
const LINK_200: u64 = 25_000_000;

#[test]
fn a_remembered_rate_fills_a_one_second_link_from_the_first_round() {
    // Without the hint, startup spends about a dozen 2 s rounds (the test
    // above: 1 GiB averages ~65 % of the link); with the path's settled
    // rate, the first round trip of data already runs at it.
    let cold = run("rate 200mbit delay 1000ms", 20).goodput_mbit(2.0, 20.0);
    let hint = PathHint {
        rate: LINK_200 * 95 / 100,
        loss: 0.0,
    };
    let r = hinted("rate 200mbit delay 1000ms", hint, 20);
    let warm = r.goodput_mbit(2.0, 20.0);
    assert!(
        warm > 150.0,
        "hinted: {warm:.1} Mbit/s over 2-20 s (cold {cold:.1})"
    );
    assert!(
        warm > 1.5 * cold,
        "hinted {warm:.1} vs cold {cold:.1} Mbit/s"
    );
    let st = r.link.stats();
    let dropped = st.queue_drops as f64 / st.packets as f64;
    // Cruise at 1 s drops a few percent whatever the start (the window's
    // bursts into a short queue; the cold run's cruise too).
    assert!(
        dropped < 0.15,
        "{:.1} % dropped by the queue",
        dropped * 100.0
    );
}

#[test]
fn a_hint_the_path_no_longer_carries_falls_back_in_a_few_rounds() {
    // Remembered at 200 Mbit/s; the link now gives 50.
    let hint = PathHint {
        rate: LINK_200,
        loss: 0.0,
    };
    let r = hinted("rate 50mbit delay 1000ms", hint, 40);
    let g = r.goodput_mbit(12.0, 40.0);
    assert!(g > 40.0 && g <= 51.0, "goodput {g:.1} Mbit/s of 50");
    assert!(
        (r.c.rate() as f64) < 1.5 * 50e6 / 8.0,
        "still sending {} B/s",
        r.c.rate()
    );
    let st = r.link.stats();
    let dropped = st.queue_drops as f64 / st.packets as f64;
    assert!(
        dropped < 0.35,
        "{:.1} % dropped by the queue",
        dropped * 100.0
    );
}

#[test]
fn a_hint_with_the_paths_loss_starts_at_the_compensated_rate() {
    let hint = PathHint {
        rate: LINK_200 * 9 / 10,
        loss: 0.3,
    };
    let r = hinted("rate 200mbit delay 1000ms loss 30%", hint, 20);
    let g = r.goodput_mbit(2.0, 20.0);
    assert!(g > 150.0, "goodput {g:.1} Mbit/s at 30 % loss");
    // Without the loss (a pull's hint: the client does not see the
    // sender's losses) it falls back, learns the loss, and climbs again.
    let blind = PathHint { loss: 0.0, ..hint };
    let r = hinted("rate 200mbit delay 1000ms loss 30%", blind, 40);
    let g = r.goodput_mbit(16.0, 40.0);
    assert!(
        g > 140.0,
        "goodput {g:.1} Mbit/s at 30 % loss, hint without it"
    );
}

#[test]
fn a_hint_after_startup_found_the_rate_is_not_taken() {
    let mut r = run("rate 100mbit delay 10ms", 6);
    assert!(!r.c.in_startup());
    let before = r.c.bottleneck();
    r.c.start_at(PathHint {
        rate: 10 * LINK_200,
        loss: 0.0,
    });
    r.run_until(7 * SEC);
    assert!(
        r.c.bottleneck() <= before * 2,
        "{} after {before}",
        r.c.bottleneck()
    );
}

#[test]
fn a_hint_below_the_paths_rate_is_climbed_from_in_a_few_rounds() {
    // Remembered from a run that shared the link: an eighth of it.
    let hint = PathHint {
        rate: LINK_200 / 8,
        loss: 0.0,
    };
    let r = hinted("rate 200mbit delay 1000ms", hint, 40);
    let g = r.goodput_mbit(24.0, 40.0);
    assert!(g > 150.0, "goodput {g:.1} Mbit/s 24-40 s from a hint of 25");
    assert!(r.c.settled(), "{:?}", r.c.mode);
}

#[test]
fn a_hint_a_little_above_the_link_teaches_no_loss() {
    // A tenth above the link: the short queue drops what does not fit,
    // and the RTT hardly shows it; those drops are not the path's loss.
    let hint = PathHint {
        rate: LINK_200 * 11 / 10,
        loss: 0.0,
    };
    let r = hinted("rate 200mbit delay 1000ms", hint, 40);
    let g = r.goodput_mbit(10.0, 40.0);
    assert!(g > 150.0, "goodput {g:.1} Mbit/s");
    assert!(r.c.loss() < 0.05, "loss estimate {:.3}", r.c.loss());
    assert!(
        (r.c.rate() as f64) < 1.3 * LINK_200 as f64,
        "rate {} B/s",
        r.c.rate()
    );
}
