//! Fan-outs in simulated time whose nodes go silent (no reset: dropped
//! packets, a frozen host), found by the client's liveness detector over
//! simulated heartbeats, mixed with slow uploaders (which must hold nobody back) and lossy control paths
//! that must never be taken for silent ones. Deterministic by seed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use haul_netsim::fanout::{run, FanoutOutcome, FanoutSim, Heartbeats};
use haul_netsim::rng::Rng;
use haul_plan::{piece_size, Plan, Rates, Shape};

const MIB: u64 = 1 << 20;
/// 100 Mbit/s: the lab's fan-out links.
const RATE: f64 = 12.5e6;
/// One-way delay of every hop: the lab's `delay 5ms`.
const DELAY: f64 = 0.005;
/// From a lost try of a heartbeat to the next: QUIC learns of the loss
/// when a later packet (the next heartbeat) is acknowledged.
const RTO: f64 = 0.25 + 2.0 * DELAY;

fn sim(
    rates: &[f64],
    size: u64,
    plan: &Plan,
    deaths: Vec<(f64, usize)>,
    loss: Vec<f64>,
) -> FanoutSim {
    FanoutSim {
        size,
        piece: u64::from(piece_size(size, plan.pipeline_depth())),
        client_rate: RATE,
        rates: rates.to_vec(),
        delay: DELAY,
        detect: 0.0,
        deaths,
        heartbeats: Some(Heartbeats {
            loss,
            rto: RTO,
            seed: 11,
        }),
    }
}

/// One node alone: T(1).
fn t1(size: u64) -> f64 {
    let plan = Plan::build(&Rates::equal(1, RATE, DELAY), Shape::Chain, size);
    run(&plan, &sim(&[RATE], size, &plan, Vec::new(), Vec::new())).seconds
}

fn assert_clean(out: &FanoutOutcome, what: &str) {
    assert!(
        out.all_live_complete(),
        "{what}: a live node never completed"
    );
    assert_eq!(out.false_suspicions, 0, "{what}: a live node was suspected");
}

#[test]
fn one_of_eight_nodes_going_silent_at_half_costs_the_others_under_a_third() {
    // The lab case: 128 MiB to 8 nodes at 100 Mbit/s, one node's
    // link pulled at half of T(1). Before the detector the others waited
    // out two 60 s timeouts (22x T(1)).
    let size = 128 * MIB;
    let one = t1(size);
    let rates = vec![RATE; 8];
    for shape in [Shape::Chain, Shape::Stripes(2)] {
        let plan = Plan::build(&Rates::equal(8, RATE, DELAY), shape, size);
        for silent in 0..8 {
            let out = run(
                &plan,
                &sim(&rates, size, &plan, vec![(one / 2.0, silent)], Vec::new()),
            );
            assert_clean(&out, &format!("{shape}, node {silent} silent"));
            let ratio = out.seconds / one;
            eprintln!("{shape}, node {silent} silent at half: {ratio:.2}x T(1)");
            assert!(
                ratio <= 1.3,
                "{shape}, node {silent} silent: {ratio:.2}x T(1)"
            );
        }
    }
}

/// Nodes that go silent: `count` distinct ones at random times in `[from, until)`.
fn silences(n: usize, count: usize, from: f64, until: f64, seed: u64) -> Vec<(f64, usize)> {
    let mut rng = Rng::new(seed);
    let mut out: Vec<(f64, usize)> = Vec::new();
    while out.len() < count {
        let i = rng.below(n as u64) as usize;
        if out.iter().all(|&(_, j)| j != i) {
            out.push((from + rng.f64() * (until - from), i));
        }
    }
    out
}

/// A tenth of the nodes upload at a fifth of the rate (the plan knows:
/// `--rate`), and another tenth sit behind control paths that lose 30 % of
/// every try; `silent` nodes go silent.
fn mixed(n: usize, size: u64, shape: Shape, silent: usize, seed: u64) -> (FanoutOutcome, f64) {
    let mut rates = vec![RATE; n];
    let mut loss = vec![0.0; n];
    let mut rng = Rng::new(seed);
    for i in 0..n {
        match rng.below(10) {
            0 => rates[i] = RATE / 5.0,
            1 => loss[i] = 0.3,
            _ => {}
        }
    }
    let mut known = Rates::equal(n, RATE, DELAY);
    for (k, r) in known.nodes.iter_mut().zip(&rates) {
        *k = Some(*r);
    }
    let plan = Plan::build(&known, shape, size);
    let clean = run(&plan, &sim(&rates, size, &plan, Vec::new(), loss.clone()));
    let deaths = silences(n, silent, 0.5, clean.seconds * 0.8, seed + 1);
    (
        run(&plan, &sim(&rates, size, &plan, deaths, loss)),
        clean.seconds,
    )
}

#[test]
fn a_hundred_nodes_with_silent_slow_and_lossy_ones_all_complete_and_none_is_falsely_suspected() {
    for (shape, seed) in [
        (Shape::Chain, 1),
        (Shape::Tree(3), 2),
        (Shape::Stripes(3), 3),
    ] {
        let (out, clean) = mixed(100, 64 * MIB, shape, 3, seed);
        assert_clean(&out, &format!("{shape}"));
        assert!(out.died.iter().filter(|&&d| d).count() >= 1, "{shape}");
        // Each silence costs at most its detection (2 s) and a re-send of
        // what the orphans lacked, never a timeout.
        let bound = clean * 1.3 + 3.0 * 2.5;
        eprintln!("{shape}: {:.2} s, clean {clean:.2} s", out.seconds);
        assert!(
            out.seconds <= bound,
            "{shape}: {:.2} s > {bound:.2} s",
            out.seconds
        );
    }
}

#[test]
fn a_thousand_striped_nodes_with_one_percent_going_silent_stay_within_1_6x_of_one() {
    let size = 256 * MIB;
    let n = 1000;
    let plan = Plan::build(&Rates::equal(n, RATE, DELAY), Shape::Stripes(4), size);
    let one = t1(size);
    let rates = vec![RATE; n];
    let mut loss = vec![0.0; n];
    for l in loss.iter_mut().step_by(10) {
        *l = 0.3;
    }
    let deaths = silences(n, n / 100, 0.5, one * 0.8, 5);
    let out = run(&plan, &sim(&rates, size, &plan, deaths, loss));
    assert_clean(&out, "1,000 striped");
    let ratio = out.seconds / one;
    eprintln!("1,000 striped, 10 silent: {ratio:.2}x T(1)");
    assert!(ratio <= 1.6, "{ratio:.2}x T(1)");
}

#[test]
fn a_live_node_behind_a_very_lossy_control_path_is_suspected_then_rejoins_and_completes() {
    // A control path that loses 85 % of every try opens gaps of seconds:
    // the node is suspected, comes back as a leaf the client feeds, its
    // limit learns the path, and it completes.
    let size = 64 * MIB;
    let rates = vec![RATE; 8];
    let plan = Plan::build(&Rates::equal(8, RATE, DELAY), Shape::Chain, size);
    let s = sim(&rates, size, &plan, Vec::new(), vec![0.0, 0.0, 0.0, 0.85]);
    let out = run(&plan, &s);
    assert!(out.all_live_complete(), "{out:?}");
    assert!(out.false_suspicions >= 1, "{out:?}");
    assert_eq!(out.rejoined, out.false_suspicions, "each came back");
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let a = mixed(200, 16 * MIB, Shape::Tree(3), 4, 9);
    let b = mixed(200, 16 * MIB, Shape::Tree(3), 4, 9);
    assert_eq!(a.0, b.0);
    let c = mixed(200, 16 * MIB, Shape::Tree(3), 4, 10);
    assert_ne!(a.0.complete, c.0.complete);
}
