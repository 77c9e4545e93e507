//! Predicted fan-out times: T(N)/T(1) for chain, trees, striped trees and
//! `auto` (with the shape it picks), by the planner's model (`haul_plan::Plan::predict`) and by the piece-level
//! simulation (`haul_netsim::fanout`), on equal links of 200 Mbit/s.
//!
//!   cargo run --release -p haul-bench --bin fanout-model [SIZE_MIB] [HOP_MS...]
//!
//! Default: 256 MiB, hops of 1 ms and 5 ms. Then, for each hop delay, one
//! of 8 nodes killed at half the clean run's time (detected 1 s later):
//! T/T(1) of the 7 others for each choice of the killed node (worst and
//! median), the lab row in simulated time.

use haul_netsim::fanout::{run, FanoutSim};
use haul_plan::{piece_size, Plan, Rates, Shape};

const RATE: f64 = 25e6;

/// The columns.
const SHAPES: [Shape; 6] = [
    Shape::Chain,
    Shape::Tree(2),
    Shape::Tree(4),
    Shape::Stripes(2),
    Shape::Stripes(4),
    Shape::Auto,
];

/// `n` nodes and a client with equal uploads, hops of `delay`.
fn links(n: usize, delay: f64) -> Rates {
    Rates::equal(n, RATE, delay)
}

fn simulate(plan: &Plan, n: usize, size: u64, delay: f64) -> f64 {
    simulate_deaths(plan, n, size, delay, Vec::new())
}

fn simulate_deaths(plan: &Plan, n: usize, size: u64, delay: f64, deaths: Vec<(f64, usize)>) -> f64 {
    let sim = FanoutSim {
        size,
        piece: u64::from(piece_size(size, plan.pipeline_depth())),
        client_rate: RATE,
        rates: vec![RATE; n],
        delay,
        detect: 1.0,
        deaths,
        heartbeats: None,
    };
    run(plan, &sim).seconds
}

fn main() {
    let mut args = std::env::args().skip(1);
    let size_mib: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(256);
    let mut hops: Vec<f64> = args.filter_map(|s| s.parse().ok()).collect();
    if hops.is_empty() {
        hops = vec![1.0, 5.0];
    }
    let size = size_mib << 20;
    println!("fan-out of {size_mib} MiB on equal 200 Mbit/s links: T(N)/T(1), model / simulation");
    for hop_ms in hops {
        let delay = hop_ms / 1000.0;
        let one = Plan::build(&links(1, delay), Shape::Chain, size);
        let t1_model = one.predict(&links(1, delay), size);
        let t1_sim = simulate(&one, 1, size, delay);
        println!("\nhop delay {hop_ms} ms (T(1) = {t1_sim:.2} s simulated)");
        print!("{:>6}", "nodes");
        for shape in SHAPES {
            let width = if shape == Shape::Auto { 25 } else { 12 };
            print!("  {:>width$}", shape.to_string());
        }
        println!();
        for n in [1usize, 2, 3, 6, 8, 100, 1000] {
            let rates = links(n, delay);
            print!("{n:>6}");
            for shape in SHAPES {
                let plan = Plan::build(&rates, shape, size);
                let model = plan.predict(&rates, size) / t1_model;
                let sim = simulate(&plan, n, size, delay) / t1_sim;
                if shape == Shape::Auto {
                    let cell = format!("{model:.2} / {sim:.2} ({})", plan.shape);
                    print!("  {cell:>25}");
                } else {
                    print!("  {:>12}", format!("{model:.2} / {sim:.2}"));
                }
            }
            println!();
        }
        killed(size, delay, t1_sim);
    }
}

/// One of 8 nodes killed at half the clean time, each node in turn: the
/// worst and the median T/T(1) of the others.
fn killed(size: u64, delay: f64, t1: f64) {
    println!("one of 8 nodes killed at half (detected after 1 s): T/T(1), worst / median over the node killed");
    for shape in SHAPES.into_iter().filter(|&s| s != Shape::Auto) {
        let plan = Plan::build(&links(8, delay), shape, size);
        let clean = simulate(&plan, 8, size, delay);
        let mut ratios: Vec<f64> = (0..8)
            .map(|dead| simulate_deaths(&plan, 8, size, delay, vec![(clean / 2.0, dead)]) / t1)
            .collect();
        ratios.sort_by(f64::total_cmp);
        println!(
            "  {:>12}  {:.2} / {:.2}",
            shape.to_string(),
            ratios[7],
            ratios[3]
        );
    }
}
