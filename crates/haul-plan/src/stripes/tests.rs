use crate::routing::{Routing, Step};
use crate::{stripe_chunks, Parent, Plan, Rates, Shape};

const MIB: u64 = 1 << 20;
/// 200 Mbit/s.
const RATE: f64 = 25e6;
const SIZES: [usize; 12] = [1, 2, 3, 5, 7, 8, 13, 64, 100, 257, 999, 1000];

/// Hops from the client to `i` in one stripe; `None` on a cycle.
fn hops(parents: &[Parent], i: usize) -> Option<usize> {
    let (mut at, mut hops) = (parents[i], 1);
    while let Parent::Node(p) = at {
        hops += 1;
        if hops > parents.len() + 1 {
            return None;
        }
        at = parents[p];
    }
    Some(hops)
}

#[test]
fn stripes_cut_a_file_into_contiguous_ranges_of_nearly_equal_length() {
    for chunks in 0..70u64 {
        for k in 1..=9 {
            let ranges: Vec<_> = (0..k).map(|s| stripe_chunks(chunks, k, s)).collect();
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges[k - 1].end, chunks);
            for w in ranges.windows(2) {
                assert_eq!(w[0].end, w[1].start, "{chunks} {k}");
            }
            let lens: Vec<u64> = ranges.iter().map(|r| r.end - r.start).collect();
            let (lo, hi) = (lens.iter().min(), lens.iter().max());
            assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "{lens:?}");
        }
    }
    assert!(stripe_chunks(5, 2, 7).is_empty());
}

#[test]
fn every_node_gets_every_stripe_once_from_a_parent_that_holds_it_first() {
    for n in SIZES {
        for k in [2u32, 3, 4, 8] {
            let plan = Plan::build(&Rates::unknown(n), Shape::Stripes(k), MIB);
            assert_eq!(plan.shape, Shape::Stripes(k));
            assert_eq!(plan.stripe_count(), k as usize);
            assert_eq!(plan.parents, plan.stripes[0]);
            for s in 0..k as usize {
                let parents = plan.stripe(s);
                assert_eq!(parents.len(), n);
                // One root per stripe: the client sends each stripe once.
                assert_eq!(plan.children_in(s, Parent::Client).len(), 1, "n {n} k {k}");
                for i in 0..n {
                    let depth = hops(parents, i).unwrap_or_else(|| panic!("cycle: n {n} k {k}"));
                    if let Parent::Node(p) = parents[i] {
                        assert_ne!(p, i);
                        assert!(hops(parents, p).is_some_and(|d| d < depth));
                    }
                }
            }
        }
    }
}

#[test]
fn every_node_uploads_about_the_data_once() {
    for n in SIZES {
        for k in [2u32, 3, 4, 8] {
            let plan = Plan::build(&Rates::unknown(n), Shape::Stripes(k), MIB);
            // Each stream carries 1/k of the data: k streams are the data once.
            assert_eq!(plan.uploads(Parent::Client), k as usize);
            let mut interior_twice = 0;
            for i in 0..n {
                let node = Parent::Node(i);
                assert!(plan.uploads(node) <= k as usize, "n {n} k {k} node {i}");
                let interior = (0..k as usize)
                    .filter(|&s| !plan.children_in(s, node).is_empty())
                    .count();
                interior_twice += usize::from(interior >= 2);
                // With fewer nodes than stripes, nodes are interior in
                // several; else in their home stripe and at most one more.
                assert!(n < k as usize || interior <= 2, "n {n} k {k} node {i}");
            }
            // Beyond its home stripe, a node fills at most the one place
            // a stripe's home group lacks.
            if n >= k as usize {
                assert!(
                    interior_twice <= k as usize,
                    "n {n} k {k}: {interior_twice}"
                );
            }
            // And nearly all the nodes' upload is used (total streams: k·n).
            let total: usize = (0..n).map(|i| plan.uploads(Parent::Node(i))).sum();
            assert_eq!(total, k as usize * (n - 1));
        }
    }
}

#[test]
fn depth_grows_as_log_k_of_the_nodes() {
    for n in SIZES {
        for k in [2u32, 3, 4, 8] {
            let plan = Plan::build(&Rates::unknown(n), Shape::Stripes(k), MIB);
            let log = (n as f64).log(f64::from(k)).ceil() as usize;
            // One hop more than a tree's: the client feeds one root per
            // stripe. With fewer nodes than stripes, at most three hops.
            let bound = if n >= k as usize { log + 1 } else { 3 };
            assert!(
                plan.max_depth() <= bound,
                "n {n} k {k}: {} > {bound}",
                plan.max_depth()
            );
        }
    }
    let plan = Plan::build(&Rates::unknown(1000), Shape::Stripes(4), MIB);
    assert!(plan.max_depth() >= 5, "{}", plan.max_depth());
}

#[test]
fn slow_uploaders_are_leaves_in_every_stripe() {
    let fast = Rates::equal(50, RATE, 0.005);
    let mut rates = fast.clone();
    rates.nodes[17] = Some(RATE / 10.0);
    for k in [2u32, 4, 8] {
        let plan = Plan::build(&rates, Shape::Stripes(k), 256 * MIB);
        assert_eq!(plan.uploads(Parent::Node(17)), 0, "k {k}");
        for i in 0..50 {
            assert!(
                plan.uploads(Parent::Node(i)) <= k as usize,
                "k {k} node {i}"
            );
        }
        // The others' room is just enough: nobody waits on the slow node.
        let t = plan.predict(&rates, 256 * MIB);
        let t_fast = Plan::build(&fast, Shape::Stripes(k), 256 * MIB).predict(&fast, 256 * MIB);
        assert!(t <= t_fast * 1.01, "k {k}: {t} vs {t_fast}");
    }
}

#[test]
fn with_many_slow_uploaders_the_extra_children_are_spread() {
    let mut rates = Rates::equal(50, RATE, 0.005);
    for slow in [3, 17, 40] {
        rates.nodes[slow] = Some(RATE / 10.0);
    }
    // Half the typical rate: room for half the children.
    rates.nodes[9] = Some(RATE / 2.0);
    for k in [2u32, 4, 8] {
        let plan = Plan::build(&rates, Shape::Stripes(k), 256 * MIB);
        for slow in [3, 17, 40] {
            assert_eq!(plan.uploads(Parent::Node(slow)), 0, "k {k} node {slow}");
        }
        // The nodes' room (k each, k/2 for node 9) is short of the
        // k·(n−1) streams: a few nodes take one more, none two.
        assert!(plan.uploads(Parent::Node(9)) <= k as usize / 2 + 1, "k {k}");
        for i in 0..50 {
            assert!(
                plan.uploads(Parent::Node(i)) <= k as usize + 1,
                "k {k} node {i}"
            );
        }
    }
}

#[test]
fn a_thousand_nodes_at_five_ms_hops_take_at_most_half_again_the_time_of_one() {
    let size = 256 * MIB;
    let one = Rates::equal(1, RATE, 0.005);
    let t1 = Plan::build(&one, Shape::Chain, size).predict(&one, size);
    let rates = Rates::equal(1000, RATE, 0.005);
    for k in [2, 4] {
        let ratio = Plan::build(&rates, Shape::Stripes(k), size).predict(&rates, size) / t1;
        assert!(ratio <= 1.5, "stripes:{k}: {ratio}");
    }
    // Where the chain and the trees miss it.
    for shape in [Shape::Chain, Shape::Tree(2), Shape::Tree(4)] {
        let ratio = Plan::build(&rates, shape, size).predict(&rates, size) / t1;
        assert!(ratio > 1.5, "{shape}: {ratio}");
    }
    let auto = Plan::build(&rates, Shape::Auto, size);
    assert!(matches!(auto.shape, Shape::Stripes(_)), "{}", auto.shape);
    assert!(auto.predict(&rates, size) / t1 <= 1.5);
}

#[test]
fn the_model_of_a_striped_plan_matches_its_formula() {
    // 1 node, 4 stripes: the client sends each stripe of S/4 at B/4, and
    // the first piece's latency is part of the stripe's time: S/B.
    let (s, c) = (64 * MIB, MIB);
    let rates = Rates::unknown(1);
    let one = Plan::build(&rates, Shape::Stripes(4), s).predict_with(&rates, s, c);
    assert!((one - s as f64).abs() < 1e-6, "{one}");
    // 4 nodes, 4 stripes: each node roots its home stripe and feeds the 3
    // others at B/3; a leaf waits one more piece at B/3: S/B + 3c/B.
    let rates = Rates::unknown(4);
    let plan = Plan::build(&rates, Shape::Stripes(4), s);
    for i in 0..4 {
        assert_eq!(plan.uploads(Parent::Node(i)), 3);
    }
    let four = plan.predict_with(&rates, s, c);
    assert!((four - (s + 3 * c) as f64).abs() < 1e-6, "{four}");
}

#[test]
fn auto_keeps_the_chain_for_eight_equal_nodes() {
    for delay in [0.0, 0.001, 0.005] {
        for size in [32 * MIB, 256 * MIB] {
            let plan = Plan::build(&Rates::equal(8, RATE, delay), Shape::Auto, size);
            assert_eq!(plan.shape, Shape::Chain, "{delay} {size}");
        }
    }
}

#[test]
fn a_lost_node_hands_its_children_in_every_stripe_to_a_live_ancestor() {
    let n = 200;
    let plan = Plan::build(&Rates::unknown(n), Shape::Stripes(4), MIB);
    let mut routing = Routing::new(&plan);
    assert_eq!(routing.stripes(), 4);
    let start = routing.start();
    let sends: Vec<_> = start
        .iter()
        .filter_map(|s| match s {
            Step::SendStripe { node, stripe } => Some((*node, *stripe)),
            _ => None,
        })
        .collect();
    assert_eq!(sends.len(), 4);
    // Kill nodes in a scattered order; after each loss every live node gets
    // every stripe from a live node or the client, without a cycle, and
    // the steps tell exactly the new parents.
    let mut order: Vec<usize> = (0..n).map(|i| (i * 37) % n).collect();
    order.truncate(n / 2);
    for dead in order {
        let before: Vec<Vec<Parent>> = (0..4)
            .map(|s| (0..n).map(|i| routing.parent_in(s, i)).collect())
            .collect();
        let steps = routing.lost(dead);
        assert!(!routing.is_alive(dead));
        for s in 0..4 {
            let now: Vec<Parent> = (0..n).map(|i| routing.parent_in(s, i)).collect();
            for i in (0..n).filter(|&i| routing.is_alive(i)) {
                if let Parent::Node(p) = now[i] {
                    assert!(routing.is_alive(p), "stripe {s}: {i} under dead {p}");
                }
                assert!(hops(&now, i).is_some());
                if before[s][i] != now[i] {
                    assert_eq!(before[s][i], Parent::Node(dead));
                    let told = steps.iter().any(|step| match (step, now[i]) {
                        (Step::ForwardStripes { node, children }, Parent::Node(p)) => {
                            *node == p && children[s].contains(&i)
                        }
                        (Step::SendStripe { node, stripe }, Parent::Client) => {
                            *node == i && *stripe == s
                        }
                        _ => false,
                    });
                    assert!(told, "stripe {s}: move of {i} not told: {steps:?}");
                }
            }
        }
    }
    assert!(routing.lost(0).is_empty() || !routing.is_alive(0));
}

#[test]
fn a_lost_relays_children_go_where_there_is_upload_to_spare() {
    // Eight equal nodes in two stripes: 14 streams for 16 places. Whichever
    // node is lost, nobody feeds more streams than its room (the nearest
    // ancestor taking all the orphans fed three: 1.52x T(1) in the lab).
    let plan = Plan::build(&Rates::unknown(8), Shape::Stripes(2), 128 * MIB);
    assert_eq!(plan.room, vec![2; 8]);
    for dead in 0..8 {
        let mut routing = Routing::new(&plan);
        routing.lost(dead);
        for p in (0..8).filter(|&p| p != dead) {
            let feeds: usize = (0..2)
                .map(|s| routing.children_in(s, Parent::Node(p)).len())
                .sum();
            assert!(feeds <= 2, "{dead} lost: {p} feeds {feeds}");
            for s in 0..2 {
                let now: Vec<Parent> = (0..8).map(|i| routing.parent_in(s, i)).collect();
                assert!(
                    hops(&now, p).is_some(),
                    "{dead} lost: a cycle in stripe {s}"
                );
            }
        }
    }
}
