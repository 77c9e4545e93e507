//! QUIC with the loss-tolerant controller over simulated bad links: each
//! transfer completes, nothing damaged is read, and the time is the link's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use haul_congestion::RateConfig;
use haul_netsim::quic::{QuicRun, QuicSim};
use haul_netsim::Profile;

const MIB: u64 = 1 << 20;

fn push(size: u64, up: &str, rate: Option<RateConfig>, limit: Duration) -> QuicRun {
    push_seeded(size, up, rate, limit, 3)
}

fn push_seeded(
    size: u64,
    up: &str,
    rate: Option<RateConfig>,
    limit: Duration,
    seed: u64,
) -> QuicRun {
    push_both_ways(size, up, "delay 10ms", rate, limit, seed)
}

/// A push with `up` on the data's way and `down` on the acks'.
fn push_both_ways(
    size: u64,
    up: &str,
    down: &str,
    rate: Option<RateConfig>,
    limit: Duration,
    seed: u64,
) -> QuicRun {
    let up = Profile::parse(up).unwrap();
    let down = Profile::parse(down).unwrap();
    let mut sim = QuicSim::new(size, &up, &down, rate, seed).unwrap();
    sim.run(limit)
}

/// Goodput in Mbit/s of a finished run.
fn mbit(size: u64, r: &QuicRun) -> f64 {
    let took = r.took.expect("finished").as_secs_f64();
    size as f64 * 8.0 / took / 1e6
}

#[test]
fn thirty_percent_loss_keeps_most_of_the_clean_rate() {
    let size = 48 * MIB;
    let ours = Some(RateConfig::default());
    let limit = Duration::from_secs(120);
    let clean = push(size, "rate 100mbit delay 10ms", ours, limit);
    let lossy = push(size, "rate 100mbit delay 10ms loss 30%", ours, limit);
    for r in [&clean, &lossy] {
        assert_eq!(r.received, size, "{r:?}");
        assert_eq!(r.corrupt, 0);
    }
    let (c, l) = (mbit(size, &clean), mbit(size, &lossy));
    // quinn's own CUBIC reads the same loss as congestion.
    let cubic = push(8 * MIB, "rate 100mbit delay 10ms loss 30%", None, limit);
    let cubic = cubic.took.map_or(0.0, |_| mbit(8 * MIB, &cubic));
    println!("clean {c:.1} Mbit/s, 30% loss {l:.1} Mbit/s ({} dropped); CUBIC at 30% loss {cubic:.2} Mbit/s", lossy.dropped());
    assert!(c > 70.0, "clean {c:.1} Mbit/s");
    assert!(l >= 0.7 * c, "30% loss: {l:.1} of {c:.1} Mbit/s");
    assert!(
        cubic < 0.2 * c,
        "CUBIC kept {cubic:.1} Mbit/s: the comparison says nothing"
    );
}

#[test]
fn every_bad_link_completes_and_nothing_damaged_is_read() {
    let size = 8 * MIB;
    for spec in [
        "rate 100mbit delay 1000ms",
        "rate 100mbit delay 10ms loss 10% 50%",
        "rate 100mbit delay 10ms loss gemodel 2% 30% 80% 1%",
        "rate 100mbit delay 10ms reorder 25% 50%",
        "rate 100mbit delay 10ms duplicate 50%",
        "rate 100mbit delay 10ms corrupt 50%",
    ] {
        let r = push(
            size,
            spec,
            Some(RateConfig::default()),
            Duration::from_secs(300),
        );
        assert_eq!(r.received, size, "{spec}: {r:?}");
        assert_eq!(r.corrupt, 0, "{spec}");
        println!("{spec}: {:.1} Mbit/s", mbit(size, &r));
    }
}

/// A push like [`push`] with haul's controller and a 120 s limit.
fn push_ours(size: u64, up: &str) -> QuicRun {
    push(
        size,
        up,
        Some(RateConfig::default()),
        Duration::from_secs(120),
    )
}

#[test]
fn reordering_keeps_the_rate_and_nothing_delivered_is_discarded() {
    // netem's `reorder 25% 50%`: a quarter of the packets skip the 10 ms
    // delay, so the others arrive ~200 packet numbers behind the newest at
    // 200 Mbit/s. quinn-proto 0.11 discarded every packet more than 129
    // numbers behind as a possible duplicate (quinn-rs/quinn#2710), and the
    // rate fell to a quarter of the link (47.8 of 181.5 Mbit/s); the
    // workspace's patched quinn-proto (vendor/quinn-proto) keeps 4,096.
    // The window covers the delayed packets' own RTT, not the smoothed RTT
    // of those that overtook.
    let size = 32 * MIB;
    let clean = push_ours(size, "rate 200mbit delay 10ms");
    assert_eq!(clean.received, size);
    assert_eq!(clean.path.duplicates, 0, "a clean link duplicates nothing");
    // The counter counts: a link that duplicates is seen to.
    let twice = push_ours(4 * MIB, "rate 200mbit delay 10ms duplicate 10%");
    assert!(twice.path.duplicates > 100, "{twice:?}");
    let clean = mbit(size, &clean);
    for (spec, target) in [
        ("rate 200mbit delay 10ms reorder 25% 50%", 0.85),
        ("rate 200mbit delay 10ms reorder 80% 50%", 0.6),
        ("rate 200mbit delay 10ms 5ms", 0.85),
    ] {
        let r = push_ours(size, spec);
        let discarded = r.path.duplicates;
        assert_eq!(r.received, size, "{spec}: {r:?}");
        assert_eq!(r.corrupt, 0);
        let g = mbit(size, &r);
        println!(
            "{spec}: {g:.1} Mbit/s of {clean:.1} clean, {discarded} discarded as duplicates, {} packets sent, {} declared lost, {} of them late",
            r.path.sent, r.path.lost, r.path.spurious
        );
        assert_eq!(
            discarded, 0,
            "{spec}: delivered packets were discarded as duplicates"
        );
        assert!(
            g >= target * clean,
            "{spec}: {g:.1} Mbit/s, {:.2} of clean {clean:.1}",
            g / clean
        );
        assert!(r.path.sent > 0, "{spec}: {r:?}");
    }
}

#[test]
fn reordering_on_a_path_with_a_short_way_back_keeps_the_rate() {
    // The 10 ms of reordering all on the data's way, 1 ms on the acks':
    // the overtaking packets' RTT is a tenth of the delayed ones', and
    // quinn sizes packet numbers by the distance from the largest
    // acknowledged packet (one that overtook): one byte here, for packets
    // arriving up to ~170 numbers behind (see HAUL-PATCH.md's limit).
    let size = 32 * MIB;
    let ours = Some(RateConfig::default());
    let limit = Duration::from_secs(120);
    let clean = push_both_ways(size, "rate 200mbit delay 1ms", "delay 1ms", ours, limit, 3);
    let spec = "rate 200mbit delay 10ms reorder 25% 50%";
    let r = push_both_ways(size, spec, "delay 1ms", ours, limit, 3);
    assert_eq!(r.received, size, "{r:?}");
    assert_eq!(r.corrupt, 0);
    let (c, g) = (mbit(size, &clean), mbit(size, &r));
    println!(
        "{spec}, acks 1 ms: {g:.1} Mbit/s of {c:.1} clean; {} sent, {} declared lost, {} of them late",
        r.path.sent, r.path.lost, r.path.spurious
    );
    assert!(g >= 0.85 * c, "{g:.1} Mbit/s of {c:.1}");
}

#[test]
fn a_remembered_rate_starts_a_one_second_link_at_speed() {
    // 128 MiB at 200 Mbit/s, 1 s one way, real quinn-proto endpoints:
    // startup spends about a dozen 2 s round trips; a controller started
    // at the rate the path settled at before runs at it from the first
    // round trip of data (simulated time: 61 → 121 Mbit/s; the handshake
    // and the last ack are 3 s of the 8.9; at 1 GiB 144 → 171). A hint
    // twice the link falls back to what got through and still beats
    // startup (107).
    let size = 128 * MIB;
    let spec = "rate 200mbit delay 1000ms";
    let at = |hint: Option<u64>| {
        let start = hint.map(|m| haul_congestion::PathHint {
            rate: m * 1_000_000 / 8,
            loss: 0.0,
        });
        let cfg = RateConfig {
            start,
            ..RateConfig::default()
        };
        let r = push(size, spec, Some(cfg), Duration::from_secs(300));
        assert_eq!(r.received, size, "{hint:?}: {r:?}");
        assert_eq!(r.corrupt, 0);
        mbit(size, &r)
    };
    let (cold, warm, high) = (at(None), at(Some(190)), at(Some(400)));
    println!("1 s one way: cold {cold:.1}, remembered {warm:.1}, twice the link {high:.1} Mbit/s");
    assert!(warm > 95.0, "remembered: {warm:.1} Mbit/s (cold {cold:.1})");
    assert!(warm > 1.5 * cold, "remembered {warm:.1} vs cold {cold:.1}");
    assert!(
        high > 1.4 * cold,
        "a hint twice the link: {high:.1} vs cold {cold:.1}"
    );
}

#[test]
fn a_handshake_through_half_corruption_costs_round_trips_not_seconds() {
    // Before the first RTT sample, a lost handshake packet is sent again
    // after about 3x the initial RTT: with RFC 9002's 333 ms, each one
    // cost a second (median of 41 small pushes: 1.10 s; with haul's
    // INITIAL_RTT of 100 ms: 0.47 s).
    let mut took: Vec<f64> = (0..41)
        .map(|seed| {
            let r = push_seeded(
                16 << 10,
                "rate 100mbit delay 10ms corrupt 50%",
                Some(RateConfig::default()),
                Duration::from_secs(60),
                seed,
            );
            assert_eq!(r.received, 16 << 10, "seed {seed}: {r:?}");
            r.took.expect("finished").as_secs_f64()
        })
        .collect();
    took.sort_by(f64::total_cmp);
    let median = took[took.len() / 2];
    println!(
        "16 KiB at corrupt 50 %: median {median:.3} s, slowest {:.3} s",
        took[took.len() - 1]
    );
    assert!(median < 0.6, "median {median:.3} s: {took:?}");
}

/// The lab's bad-link rows (`bench/bad-links.sh`, 200 Mbit/s, 10 ms) in
/// simulated time, for comparison with the lab: ignored (it prints, it
/// asserts nothing the other tests do not); `SIZE_MIB` sets the size.
/// `cargo test --release -p haul-netsim --test quic -- --ignored lab_rows --nocapture`
#[test]
#[ignore]
fn lab_rows_in_simulated_time() {
    let size = std::env::var("SIZE_MIB")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(256)
        * MIB;
    // The controller's per-round trace: HAUL_LOG=haul_congestion=trace.
    if let Ok(filter) = std::env::var("HAUL_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
    let start = std::env::var("HINT_MBIT")
        .ok()
        .and_then(|m| m.parse::<u64>().ok())
        .map(|m| haul_congestion::PathHint {
            rate: m * 1_000_000 / 8,
            loss: 0.0,
        });
    let ours = Some(RateConfig {
        start,
        ..RateConfig::default()
    });
    let mut clean = 0.0;
    // ROWS picks rows by number (0 clean, 1 loss, 2 corrupt, 3 reorder,
    // 4 reorder 80 %, 5 loss 50 %, 6 jitter, 7 delay 250 ms, 8 delay 1 s);
    // HINT_MBIT starts each at that rate, as a remembered path does:
    // the first row run is what the others are compared with.
    let rows = std::env::var("ROWS").unwrap_or_else(|_| "0 1 2 3".into());
    let specs = [
        "rate 200mbit delay 10ms",
        "rate 200mbit delay 10ms loss 30%",
        "rate 200mbit delay 10ms corrupt 50%",
        "rate 200mbit delay 10ms reorder 25% 50%",
        "rate 200mbit delay 10ms reorder 80% 50%",
        "rate 200mbit delay 10ms loss 50%",
        "rate 200mbit delay 10ms 5ms",
        "rate 200mbit delay 250ms",
        "rate 200mbit delay 1000ms",
    ];
    for row in rows.split_whitespace() {
        let Some(spec) = row.parse::<usize>().ok().and_then(|i| specs.get(i)) else {
            panic!("ROWS: {row} is not a row (0 to {})", specs.len() - 1);
        };
        let r = push(size, spec, ours, Duration::from_secs(600));
        assert_eq!(r.received, size, "{spec}: {r:?}");
        assert_eq!(r.corrupt, 0);
        let g = mbit(size, &r);
        if clean == 0.0 {
            clean = g;
        }
        let u = &r.up;
        println!(
            "{spec}: {g:.1} Mbit/s, {:.2} of clean; {} packets offered to the link (the data is {} of 1200 bytes), {} damaged, {} dropped by the queue; quinn sent {} packets, declared {} lost ({} of them late), discarded {} as duplicates, MTU {}",
            g / clean,
            u.packets,
            size.div_ceil(1200),
            u.corrupted,
            u.queue_drops,
            r.path.sent,
            r.path.lost,
            r.path.spurious,
            r.path.duplicates,
            r.path.mtu
        );
    }
}
