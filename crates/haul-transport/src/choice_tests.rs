//! The choice in simulated time: meters fed as transports would, samples
//! every quarter second.

use super::*;

const TICK: Duration = Duration::from_millis(250);

/// Two sides with `tcp` and `quic` connections, each connection moving
/// its side's bytes per second, sampled until a decision or `limit`.
struct Trial {
    choice: Choice,
    start: Instant,
    now: Instant,
    tcp: Vec<Arc<Meter>>,
    quic: Vec<Arc<Meter>>,
}

impl Trial {
    fn new(tcp: usize, quic: usize) -> Self {
        let start = Instant::now();
        let mut choice = Choice::new();
        let mut up = |t, n| {
            (0..n)
                .map(|_| {
                    let m = Meter::new();
                    choice.up(t, &m, start - LAN * 2, start);
                    m
                })
                .collect::<Vec<_>>()
        };
        let (tcp, quic) = (up(Transport::Tcp, tcp), up(Transport::Quic, quic));
        Self {
            choice,
            start,
            now: start,
            tcp,
            quic,
        }
    }

    /// Runs at `tcp` and `quic` bytes per second per connection (an
    /// acknowledging peer: the sender's totals), until decided or `limit`.
    fn run(&mut self, tcp: u64, quic: u64, rtt: Duration, limit: Duration) -> Option<Decision> {
        while self.now.duration_since(self.start) < limit {
            self.now += TICK;
            let secs = self.now.duration_since(self.start).as_secs_f64();
            for (meters, rate) in [(&self.tcp, tcp), (&self.quic, quic)] {
                for m in meters {
                    m.sender_totals((rate as f64 * secs) as u64, 0, 0, rtt);
                }
            }
            if let Some(d) = self.choice.sample(self.now) {
                return Some(d.clone());
            }
        }
        None
    }

    fn elapsed(&self) -> Duration {
        self.now.duration_since(self.start)
    }
}

const MB: u64 = 1_000_000;
/// A round trip long enough that the trial runs (a LAN's is decided at once).
const LAN: Duration = Duration::from_millis(20);

#[test]
fn much_faster_quic_is_chosen_after_the_trial_and_tcp_is_told_to_go() {
    let mut t = Trial::new(2, 2);
    let d = t.run(2 * MB, 20 * MB, LAN, TRIAL_MAX).expect("decided");
    assert_eq!(d.transport, Transport::Quic);
    assert!(d.why.contains("QUIC moved 160 Mbit/s"), "{}", d.why);
    assert!(d.why.contains("TCP 16"), "{}", d.why);
    // Decided within the trial's length plus the bytes it waited for.
    assert!(t.elapsed() <= TRIAL + Duration::from_millis(500));
    assert!(t.tcp.iter().all(|m| m.is_superseded()));
    assert!(t.quic.iter().all(|m| !m.is_superseded()));
    assert_eq!(t.choice.next(), Transport::Quic);
    // A TCP connection that comes up late is told at once.
    let late = Meter::new();
    t.choice.up(Transport::Tcp, &late, t.now - LAN * 2, t.now);
    assert!(late.is_superseded());
}

#[test]
fn a_crawl_is_decided_early_and_the_crawler_gives_its_work_back_at_once() {
    let rtt = Duration::from_secs(1);
    let mut t = Trial::new(1, 1);
    let d = t.run(MB, 10 * MB, rtt, TRIAL_MAX).expect("decided");
    assert_eq!(d.transport, Transport::Quic);
    // Half the 6 s trial, then half a second of its second half.
    let trial = rtt * TRIAL_RTTS;
    assert!(t.elapsed() < trial, "{:?}", t.elapsed());
    assert!(t.elapsed() >= trial / 2 + EARLY_WINDOW, "{:?}", t.elapsed());
    // TCP's connections give their work back.
    assert!(t.tcp[0].check().is_err());
    assert!(t.quic[0].check().is_ok());
}

#[test]
fn ties_and_small_margins_go_to_tcp() {
    for quic in [10 * MB, 10 * MB + MB / 2] {
        let d = Trial::new(1, 1)
            .run(10 * MB, quic, LAN, TRIAL_MAX)
            .expect("decided");
        assert_eq!(d.transport, Transport::Tcp, "{}", d.why);
    }
    let d = Trial::new(1, 1)
        .run(10 * MB, 12 * MB, LAN, TRIAL_MAX)
        .expect("decided");
    assert_eq!(d.transport, Transport::Quic, "{}", d.why);
}

#[test]
fn goodput_is_compared_per_connection() {
    // Three TCP connections at 4 MB/s each move more together than one
    // QUIC connection at 10, but each moves less.
    let d = Trial::new(3, 1)
        .run(4 * MB, 10 * MB, LAN, TRIAL_MAX)
        .expect("decided");
    assert_eq!(d.transport, Transport::Quic, "{}", d.why);
}

#[test]
fn a_start_up_burst_in_the_first_half_does_not_count() {
    // TCP's first second fills buffers at 50 MB/s, then it moves 2 MB/s;
    // QUIC moves a steady 5 MB/s.
    let mut t = Trial::new(1, 1);
    let mut decided = None;
    while decided.is_none() && t.elapsed() < TRIAL_MAX {
        t.now += TICK;
        let secs = t.elapsed().as_secs_f64();
        let tcp = if secs <= 1.0 {
            50.0 * secs
        } else {
            50.0 + 2.0 * (secs - 1.0)
        };
        t.tcp[0].sender_totals((tcp * MB as f64) as u64, 0, 0, LAN);
        t.quic[0].sender_totals((5.0 * secs * MB as f64) as u64, 0, 0, LAN);
        decided = t.choice.sample(t.now).cloned();
    }
    assert_eq!(decided.expect("decided").transport, Transport::Quic);
}

#[test]
fn a_long_path_gets_a_longer_trial() {
    let rtt = Duration::from_secs(2);
    let mut t = Trial::new(1, 1);
    let d = t.run(4 * MB, 5 * MB, rtt, TRIAL_MAX).expect("decided");
    assert_eq!(d.transport, Transport::Quic);
    assert!(t.elapsed() >= rtt * TRIAL_RTTS, "{:?}", t.elapsed());
    assert!(t.elapsed() <= TRIAL_MAX);
}

#[test]
fn only_one_transport_carrying_data_is_kept() {
    let d = Trial::new(1, 1)
        .run(0, 5 * MB, LAN, TRIAL_MAX)
        .expect("decided");
    assert_eq!(d.transport, Transport::Quic);
    assert!(d.why.starts_with("only QUIC carried data"), "{}", d.why);
    let d = Trial::new(1, 1)
        .run(5 * MB, 0, LAN, TRIAL_MAX)
        .expect("decided");
    assert_eq!(d.transport, Transport::Tcp);
}

#[test]
fn no_data_no_decision() {
    assert_eq!(Trial::new(1, 1).run(0, 0, LAN, TRIAL_MAX), None);
    // A listing's few kilobytes do not start the trial.
    let mut t = Trial::new(1, 1);
    t.tcp[0].received(64 * 1024);
    assert_eq!(t.run(0, 0, LAN, Duration::from_secs(5)), None);
}

#[test]
fn a_failed_handshake_decides_at_once() {
    let now = Instant::now();
    let mut c = Choice::new();
    let m = Meter::new();
    c.up(Transport::Tcp, &m, now - LAN * 2, now);
    c.failed(Transport::Quic, "connection refused".into());
    let d = c.sample(now).expect("decided").clone();
    assert_eq!(d.transport, Transport::Tcp);
    assert_eq!(d.why, "QUIC did not come up: connection refused");
    assert!(!m.is_superseded());

    let mut c = Choice::new();
    c.failed(Transport::Tcp, "refused".into());
    assert_eq!(c.next(), Transport::Quic);
    c.up(Transport::Quic, &m, now - LAN * 2, now);
    assert_eq!(c.sample(now).expect("decided").transport, Transport::Quic);
}

#[test]
fn quic_silent_after_tcp_came_up_counts_as_blocked() {
    let now = Instant::now();
    let mut c = Choice::new();
    let held = Meter::new();
    c.up(Transport::Tcp, &held, now - LAN * 2, now);
    assert_eq!(c.wait_until(), Some(now + HANDSHAKE_GRACE));
    assert!(c.sample(now + HANDSHAKE_GRACE / 2).is_none());
    let d = c.sample(now + HANDSHAKE_GRACE).expect("decided");
    assert_eq!(d.transport, Transport::Tcp);
    assert!(d.why.contains("UDP blocked"), "{}", d.why);
    assert_eq!(c.wait_until(), None);
}

#[test]
fn undecided_connections_alternate_over_the_transports_up() {
    let now = Instant::now();
    let mut c = Choice::new();
    // Nothing up yet: TCP (QUIC's handshake may be the slow one).
    assert_eq!(c.next(), Transport::Tcp);
    let mut held = Vec::new();
    let mut seen = Vec::new();
    held.push(Meter::new());
    c.up(Transport::Quic, &held[0], now - LAN * 2, now);
    held.push(Meter::new());
    c.up(Transport::Tcp, &held[1], now - LAN * 2, now);
    for _ in 0..4 {
        let t = c.next();
        seen.push(t);
        let m = Meter::new();
        c.up(t, &m, now - LAN * 2, now);
        held.push(m);
    }
    assert_eq!(
        seen,
        [
            Transport::Tcp,
            Transport::Quic,
            Transport::Tcp,
            Transport::Quic
        ]
    );
    // A connection that ended frees its side's place.
    held.remove(0);
    assert_eq!(c.next(), Transport::Quic);
    // Only TCP up (QUIC's handshake under way): TCP.
    let mut c = Choice::new();
    c.up(Transport::Tcp, &held[0], now - LAN * 2, now);
    c.up(Transport::Tcp, &held[1], now - LAN * 2, now);
    assert_eq!(c.next(), Transport::Tcp);
}

#[test]
fn an_ended_connection_keeps_what_it_delivered() {
    let mut t = Trial::new(1, 1);
    t.tcp[0].sender_totals(3 * MB, 0, 0, LAN);
    t.choice.sample(t.now);
    t.tcp.clear();
    t.choice.sample(t.now);
    assert_eq!(t.choice.tcp.total(), 3 * MB);
}

#[test]
fn a_short_clean_path_is_tcp_at_once() {
    let now = Instant::now();
    let mut c = Choice::new();
    let (tcp, quic) = (Meter::new(), Meter::new());
    c.up(Transport::Tcp, &tcp, now - LAN * 2, now);
    c.up(Transport::Quic, &quic, now - LAN * 2, now);
    // Not before TCP carried data.
    quic.sender_totals(50 * MB, 40_000, 0, Duration::from_micros(300));
    assert!(c.sample(now + TICK).is_none());
    tcp.sender_totals(2 * MB, 1_500, 0, Duration::from_micros(300));
    let d = c.sample(now + 2 * TICK).expect("decided").clone();
    assert_eq!(d.transport, Transport::Tcp);
    assert!(d.why.contains("short, clean path"), "{}", d.why);
    assert!(quic.check().is_err(), "QUIC gives its work back");
    // A short path that loses, or a long clean one, runs the trial.
    for (lost, rtt) in [
        (30, Duration::from_micros(300)),
        (0, Duration::from_millis(20)),
    ] {
        let mut c = Choice::new();
        let tcp = Meter::new();
        c.up(Transport::Tcp, &tcp, now - LAN * 2, now);
        c.up(Transport::Quic, &Meter::new(), now - LAN * 2, now);
        tcp.sender_totals(2 * MB, 1_500, lost, rtt);
        assert!(c.sample(now + TICK).is_none());
    }
}

#[test]
fn a_tcp_handshake_of_a_few_milliseconds_decides_at_once() {
    let now = Instant::now();
    let mut c = Choice::new();
    c.up(
        Transport::Quic,
        &Meter::new(),
        now - Duration::from_millis(2),
        now,
    );
    // QUIC's own quick handshake says nothing (its gains are elsewhere).
    assert!(c.sample(now).is_none());
    let tcp = Meter::new();
    c.up(Transport::Tcp, &tcp, now - Duration::from_millis(3), now);
    let d = c.sample(now).expect("decided").clone();
    assert_eq!(d.transport, Transport::Tcp);
    assert!(d.why.contains("TCP connected in 3.0 ms"), "{}", d.why);
}

#[test]
fn a_stalled_transport_is_a_crawl() {
    // TCP in retransmission timeouts moves nothing at all after its start.
    let mut t = Trial::new(1, 1);
    let mut decided = None;
    while decided.is_none() && t.elapsed() < TRIAL_MAX {
        t.now += TICK;
        let secs = t.elapsed().as_secs_f64();
        t.tcp[0].sender_totals(MB / 2, 400, 100, LAN);
        t.quic[0].sender_totals((10.0 * secs * MB as f64) as u64, 0, 0, LAN);
        decided = t.choice.sample(t.now).cloned();
    }
    let d = decided.expect("decided");
    assert_eq!(d.transport, Transport::Quic, "{}", d.why);
    assert!(t.elapsed() < TRIAL, "{:?}", t.elapsed());
}

#[test]
fn on_a_long_path_ties_go_to_quic() {
    let rtt = Duration::from_millis(500);
    for (tcp, quic, chosen) in [
        (10 * MB, 10 * MB, Transport::Quic),
        (10 * MB, 9 * MB + MB / 2, Transport::Quic),
        (12 * MB, 10 * MB, Transport::Tcp),
    ] {
        let d = Trial::new(1, 1)
            .run(tcp, quic, rtt, TRIAL_MAX)
            .expect("decided");
        assert_eq!(d.transport, chosen, "{}", d.why);
    }
}

#[test]
fn a_new_connection_waits_for_the_slower_handshake_and_not_for_ever() {
    let now = Instant::now();
    // QUIC first (one round trip), TCP's two still under way.
    let mut c = Choice::new();
    let quic = Meter::new();
    c.up(Transport::Quic, &quic, now - LAN, now);
    assert_eq!(c.wait_until(), Some(now + HANDSHAKE_GRACE));
    assert!(c.sample(now + HANDSHAKE_GRACE / 2).is_none());
    let tcp = Meter::new();
    c.up(
        Transport::Tcp,
        &tcp,
        now - LAN * 2,
        now + HANDSHAKE_GRACE / 2,
    );
    assert_eq!(c.wait_until(), None, "both up: the connections alternate");
    // TCP never came: QUIC, said so.
    let mut c = Choice::new();
    c.up(Transport::Quic, &quic, now - LAN, now);
    let d = c.sample(now + HANDSHAKE_GRACE).expect("decided");
    assert_eq!(d.transport, Transport::Quic);
    assert!(d.why.contains("TCP did not answer"), "{}", d.why);
}
