use super::*;

const MIB: u64 = 1 << 20;

fn t1(rates: &Rates, size: u64, piece: u64) -> f64 {
    let one = Rates {
        client: rates.client,
        nodes: vec![rates.nodes.first().copied().flatten()],
        delay: rates.delay,
    };
    Plan::build(&one, Shape::Chain, size).predict_with(&one, size, piece)
}

#[test]
fn parses_every_shape_and_refuses_others() {
    assert_eq!("chain".parse::<Shape>().ok(), Some(Shape::Chain));
    assert_eq!("tree".parse::<Shape>().ok(), Some(Shape::Tree(2)));
    assert_eq!("tree:4".parse::<Shape>().ok(), Some(Shape::Tree(4)));
    assert_eq!("auto".parse::<Shape>().ok(), Some(Shape::Auto));
    assert_eq!("stripes".parse::<Shape>().ok(), Some(Shape::Stripes(2)));
    assert_eq!("stripes:8".parse::<Shape>().ok(), Some(Shape::Stripes(8)));
    for bad in [
        "",
        "tree:1",
        "tree:0",
        "tree:x",
        "ring",
        "tree:65",
        "stripes:1",
        "stripes:65",
        "stripes:",
        "stripes4",
    ] {
        assert!(bad.parse::<Shape>().is_err(), "{bad}");
    }
    assert_eq!(Shape::Tree(3).to_string(), "tree:3");
    for shape in [Shape::Stripes(5), Shape::Tree(7), Shape::Chain, Shape::Auto] {
        assert_eq!(shape.to_string().parse::<Shape>().ok(), Some(shape));
    }
}

#[test]
fn a_chain_links_every_node_once_in_order() {
    let plan = Plan::build(&Rates::unknown(4), Shape::Chain, MIB);
    assert_eq!(
        plan.parents,
        vec![
            Parent::Client,
            Parent::Node(0),
            Parent::Node(1),
            Parent::Node(2)
        ]
    );
    assert_eq!(plan.children(Parent::Client), vec![0]);
    assert_eq!(plan.depth(3), 4);
}

#[test]
fn a_tree_gives_each_sender_at_most_k_children() {
    for n in [1, 2, 5, 13, 100] {
        for k in [2, 3, 8] {
            let plan = Plan::build(&Rates::unknown(n), Shape::Tree(k), MIB);
            let mut senders = vec![Parent::Client];
            senders.extend((0..n).map(Parent::Node));
            for s in senders {
                assert!(plan.children(s).len() <= k as usize);
            }
            // Every node reaches the client (no cycles), within log_k n + 1 hops.
            let bound = (n as f64).log(k as f64).ceil() as usize + 1;
            for i in 0..n {
                assert!(plan.depth(i) <= bound, "n {n} k {k} node {i}");
            }
        }
    }
}

#[test]
fn slow_uploaders_become_leaves_and_end_the_chain() {
    let mb = 1e6;
    let rates = Rates {
        client: Some(25.0 * mb),
        nodes: vec![
            Some(25.0 * mb),
            Some(2.5 * mb),
            Some(25.0 * mb),
            Some(25.0 * mb),
        ],
        delay: 0.005,
    };
    let chain = Plan::build(&rates, Shape::Chain, 32 * MIB);
    assert!(chain.children(Parent::Node(1)).is_empty(), "{chain:?}");
    let tree = Plan::build(&rates, Shape::Tree(2), 32 * MIB);
    assert!(tree.children(Parent::Node(1)).is_empty(), "{tree:?}");
    // Nobody waits on the slow node: the plan is as fast as with a fast one.
    let fast = Rates {
        nodes: vec![Some(25.0 * mb); 4],
        ..rates.clone()
    };
    let with_fast = Plan::build(&fast, Shape::Chain, 32 * MIB).predict_with(&fast, 32 * MIB, MIB);
    assert!((chain.predict_with(&rates, 32 * MIB, MIB) - with_fast).abs() < 1e-9);
}

#[test]
fn a_node_marked_slow_alone_ends_the_chain() {
    // Only the slow node's rate is given (`--rate URL=20mbit`).
    let mut rates = Rates::unknown(8);
    rates.nodes[4] = Some(2.5e6);
    let chain = Plan::build(&rates, Shape::Chain, 32 * MIB);
    assert!(chain.children(Parent::Node(4)).is_empty(), "{chain:?}");
    assert_eq!(chain.depth(4), 8);
    let tree = Plan::build(&rates, Shape::Tree(2), 32 * MIB);
    assert!(tree.children(Parent::Node(4)).is_empty(), "{tree:?}");
    // Striped trees: a leaf in every stripe (the unknown nodes are not
    // assumed as slow as the one rate given).
    let striped = Plan::build(&rates, Shape::Stripes(2), 32 * MIB);
    assert_eq!(striped.uploads(Parent::Node(4)), 0, "{striped:?}");
}

#[test]
fn the_model_matches_the_chain_and_tree_formulas() {
    let rates = Rates::unknown(8);
    let (s, c) = (256 * MIB, 4 * MIB);
    let chain = Plan::build(&rates, Shape::Chain, s).predict_with(&rates, s, c);
    // S/B + (N−1)·c/B with B = 1 byte/s.
    assert!((chain - (s + 7 * c) as f64).abs() < 1e-6);
    let ratio = chain / t1(&rates, s, c);
    assert!((1.10..1.11).contains(&ratio), "{ratio}");
    // 8 peers at 32 MiB with 1 MiB pieces: the issue's ≤ 1.3.
    let ratio = Plan::build(&rates, Shape::Chain, 32 * MIB).predict_with(&rates, 32 * MIB, MIB)
        / t1(&rates, 32 * MIB, MIB);
    assert!(ratio <= 1.3, "{ratio}");
    let tree = Plan::build(&rates, Shape::Tree(2), s).predict_with(&rates, s, c);
    assert!(tree > 2.0 * s as f64 && tree < chain * 2.0);
}

#[test]
fn pieces_shrink_with_depth_within_bounds() {
    use haul_proto::digest::MAX_CHUNKS;
    assert_eq!(piece_size(256 * MIB, 1), MAX_PIECE);
    assert_eq!(piece_size(32 * MIB, 8), 512 << 10);
    assert_eq!(piece_size(256 * MIB, 1000), MIN_PIECE);
    assert_eq!(piece_size(0, 5), MIN_PIECE);
    for size in [1, 4095, 1 << 30, 1 << 40, 1 << 42] {
        for depth in [1, 8, 1000] {
            let p = piece_size(size, depth);
            assert!(p.is_power_of_two() && haul_proto::digest::valid_chunk_size(p));
            assert!(size.div_ceil(u64::from(p)) <= MAX_CHUNKS, "{size} {depth}");
        }
    }
}

#[test]
fn a_thousand_nodes_take_at_most_half_again_the_time_of_one() {
    let rates = Rates::unknown(1000);
    let s = 256 * MIB;
    let plan = Plan::build(&rates, Shape::Auto, s);
    let ratio = plan.predict(&rates, s)
        / Plan::build(&Rates::unknown(1), Shape::Chain, s).predict(&Rates::unknown(1), s);
    assert!(ratio <= 1.5, "{ratio} with {}", plan.shape);
}

#[test]
fn a_plan_with_a_cycle_never_completes() {
    let plan = Plan {
        shape: Shape::Chain,
        parents: vec![Parent::Node(1), Parent::Node(0)],
        stripes: Vec::new(),
        room: Vec::new(),
        pinned: Vec::new(),
    };
    assert!(plan
        .predict_with(&Rates::unknown(2), MIB, MIB)
        .is_infinite());
}

#[test]
fn auto_keeps_the_chain_when_short_and_picks_a_tree_when_long() {
    let short = Plan::build(&Rates::unknown(8), Shape::Auto, 256 * MIB);
    assert_eq!(short.shape, Shape::Chain);
    // 1,000 nodes of a 16 MiB dataset: the chain's latency (999 pieces)
    // dwarfs the data; a tree or striped trees win.
    let long = Plan::build(&Rates::unknown(1000), Shape::Auto, 16 * MIB);
    assert!(
        matches!(long.shape, Shape::Tree(_) | Shape::Stripes(_)),
        "{:?}",
        long.shape
    );
    // Without striped trees, a tree.
    let single = Plan::build_among(
        &Rates::unknown(1000),
        Shape::Auto,
        16 * MIB,
        Candidates::SingleParent,
    );
    assert!(matches!(single.shape, Shape::Tree(_)), "{:?}", single.shape);
}

#[test]
fn auto_is_never_slower_than_the_chain_or_any_tree() {
    for n in [1, 3, 10, 100, 1000] {
        for s in [32 * MIB, 256 * MIB, 4 * MIB, 1000] {
            let rates = Rates::unknown(n);
            let auto = Plan::build(&rates, Shape::Auto, s).predict(&rates, s);
            for shape in [
                Shape::Chain,
                Shape::Tree(2),
                Shape::Tree(4),
                Shape::Stripes(2),
                Shape::Stripes(4),
            ] {
                let other = Plan::build(&rates, shape, s).predict(&rates, s);
                // A tree replaces the chain only when 5 % faster.
                assert!(auto <= other * 1.06, "n {n} {shape}: {auto} > {other}");
            }
        }
    }
}

mod routing {
    use crate::routing::{Routing, Step};
    use crate::{Parent, Plan, Rates, Shape};

    const MIB: u64 = 1 << 20;

    #[test]
    fn start_names_every_relay_and_the_clients_children() {
        let plan = Plan::build(&Rates::unknown(5), Shape::Tree(2), MIB);
        let r = Routing::new(&plan);
        let steps = r.start();
        let sends: Vec<_> = steps
            .iter()
            .filter(|s| matches!(s, Step::Send { .. }))
            .collect();
        assert_eq!(sends.len(), 2);
        let forwarded: usize = steps
            .iter()
            .map(|s| match s {
                Step::Forward { children, .. } => children.len(),
                Step::ForwardStripes { children, .. } => children.iter().map(Vec::len).sum(),
                Step::Send { .. } | Step::SendStripe { .. } => 0,
            })
            .sum();
        assert_eq!(forwarded, 3);
    }

    #[test]
    fn a_lost_relay_hands_its_children_to_the_nearest_live_ancestor() {
        let plan = Plan::build(&Rates::unknown(5), Shape::Chain, MIB);
        let mut r = Routing::new(&plan);
        assert_eq!(
            r.lost(2),
            vec![Step::Forward {
                node: 1,
                children: vec![3]
            }]
        );
        assert_eq!(r.parent(3), Parent::Node(1));
        // Its new parent dies too: up to 0.
        assert_eq!(
            r.lost(1),
            vec![Step::Forward {
                node: 0,
                children: vec![3]
            }]
        );
        // And the head: the client sends to 3 itself.
        assert_eq!(r.lost(0), vec![Step::Send { node: 3 }]);
        assert!(r.lost(0).is_empty(), "a node is lost once");
        assert!(r.pending());
        r.done(3);
        r.done(4);
        assert!(!r.pending());
    }

    #[test]
    fn a_node_that_reported_is_not_lost_and_a_leaf_moves_nobody() {
        let plan = Plan::build(&Rates::unknown(3), Shape::Chain, MIB);
        let mut r = Routing::new(&plan);
        r.done(1);
        assert!(r.lost(1).is_empty());
        assert!(r.is_alive(1));
        assert_eq!(
            r.lost(2),
            vec![Step::Forward {
                node: 1,
                children: vec![]
            }]
        );
    }

    #[test]
    fn an_evicted_relay_loses_its_children_done_or_not() {
        // Not done: out of the plan as a lost node, its child to its parent.
        let plan = Plan::build(&Rates::unknown(4), Shape::Chain, MIB);
        let mut r = Routing::new(&plan);
        assert_eq!(
            r.evict(1),
            vec![Step::Forward {
                node: 0,
                children: vec![2]
            }]
        );
        assert!(!r.is_alive(1));
        assert!(r.evict(1).is_empty(), "once");
        assert_eq!(r.rejoin(1), vec![Step::Send { node: 1 }]);
        // Done, yet feeding a child it adopted after it reported: the
        // child moves to its parent; it stays in, done, and adopts nobody.
        let mut r = Routing::new(&plan);
        r.done(1);
        r.lost(2);
        assert_eq!(r.parent(3), Parent::Node(1));
        assert_eq!(
            r.evict(1),
            vec![Step::Forward {
                node: 0,
                children: vec![3]
            }]
        );
        assert!(!r.is_alive(1) && r.is_done(1), "out, its result standing");
        assert_eq!(r.parent(3), Parent::Node(0));
        assert!(r.children(Parent::Node(1)).is_empty());
        r.lost(3);
        assert!(r.children(Parent::Node(1)).is_empty());
    }

    #[test]
    fn a_node_that_reported_is_forwarded_nothing_and_never_moved() {
        // A chain 0 → 1 → 2 → 3; 2 reported. 1 is lost: only 3 — not done —
        // would move; 2, done, keeps its parent and is in nobody's forward.
        let plan = Plan::build(&Rates::unknown(4), Shape::Chain, MIB);
        let mut r = Routing::new(&plan);
        r.done(2);
        assert!(r.children(Parent::Node(1)).is_empty());
        assert_eq!(
            r.lost(1),
            vec![Step::Forward {
                node: 0,
                children: vec![]
            }]
        );
        assert_eq!(r.parent(2), Parent::Node(1), "where its data came from");
        assert_eq!(r.parent(3), Parent::Node(2));
        // A done node that fed only done nodes retires with nothing to say.
        r.done(3);
        assert!(r.retire(2).is_empty());
    }

    #[test]
    fn a_done_node_that_retires_hands_on_the_children_it_adopted_and_stays_done() {
        let plan = Plan::build(&Rates::unknown(4), Shape::Chain, MIB);
        let mut r = Routing::new(&plan);
        assert!(r.retire(1).is_empty(), "not done: nothing");
        r.done(1);
        r.lost(2);
        assert_eq!(r.parent(3), Parent::Node(1));
        assert_eq!(
            r.retire(1),
            vec![Step::Forward {
                node: 0,
                children: vec![3]
            }]
        );
        assert!(!r.is_alive(1) && r.is_done(1), "out, its result standing");
        assert!(r.children(Parent::Node(1)).is_empty());
        assert!(r.retire(1).is_empty(), "once");
        // Out, it is never an adopter again: chain 0 → 1 → 2 → 3 where 0
        // and 1 reported and 0 retired; 2 is lost, so 3 goes to 1; when 1
        // retires too, 3 goes to the client, not to the retired 0.
        let mut r = Routing::new(&plan);
        r.done(0);
        r.done(1);
        r.retire(0);
        r.lost(2);
        assert_eq!(r.parent(3), Parent::Node(1));
        assert_eq!(r.retire(1), vec![Step::Send { node: 3 }]);
        assert_eq!(r.parent(3), Parent::Client);
    }

    #[test]
    fn a_cut_link_moves_one_child_off_one_parent_and_never_back() {
        // A chain 0 → 1 → 2 → 3; the path 1 → 2 fails while both live.
        let plan = Plan::build(&Rates::unknown(4), Shape::Chain, MIB);
        let mut r = Routing::new(&plan);
        assert!(r.cut(2, 1).is_empty(), "2 does not feed 1");
        assert_eq!(
            r.cut(1, 2),
            vec![
                Step::Forward {
                    node: 1,
                    children: vec![]
                },
                Step::Forward {
                    node: 0,
                    children: vec![1, 2]
                },
            ]
        );
        assert_eq!(r.parent(2), Parent::Node(0));
        assert_eq!(r.parent(3), Parent::Node(2), "its own child stays");
        assert!(r.is_alive(1) && r.is_alive(2));
        assert!(r.cut(1, 2).is_empty(), "once");
        // 0 goes: both its children move up to the client.
        let steps = r.lost(0);
        assert!(steps.contains(&Step::Send { node: 1 }), "{steps:?}");
        assert!(steps.contains(&Step::Send { node: 2 }), "{steps:?}");
        assert_eq!(r.parent(2), Parent::Client);
        // A done child is left alone.
        let mut r = Routing::new(&plan);
        r.done(2);
        assert!(r.cut(1, 2).is_empty());
    }

    #[test]
    fn a_cut_link_in_striped_trees_moves_the_child_in_every_stripe_and_never_to_that_parent() {
        let plan = Plan::build(&Rates::unknown(9), Shape::Stripes(3), MIB);
        let mut r = Routing::new(&plan);
        // A parent and a child it feeds in some stripe.
        let (p, c) = (0..9)
            .flat_map(|p| (0..9).map(move |c| (p, c)))
            .find(|&(p, c)| (0..3).any(|s| r.parent_in(s, c) == Parent::Node(p)))
            .unwrap_or((0, 1));
        let moved: Vec<usize> = (0..3)
            .filter(|&s| r.parent_in(s, c) == Parent::Node(p))
            .collect();
        let steps = r.cut(p, c);
        assert!(!steps.is_empty());
        for s in 0..3 {
            assert_ne!(r.parent_in(s, c), Parent::Node(p), "stripe {s}");
            assert!(!r.children_in(s, Parent::Node(p)).contains(&c));
        }
        // Whoever feeds it now is told, in every stripe it moved in.
        for &s in &moved {
            match r.parent_in(s, c) {
                Parent::Node(a) => assert!(
                    steps.iter().any(|st| matches!(st,
                        Step::ForwardStripes { node, children } if *node == a && children[s].contains(&c))),
                    "{steps:?}"
                ),
                Parent::Client => assert!(
                    steps.contains(&Step::SendStripe { node: c, stripe: s }),
                    "{steps:?}"
                ),
            }
        }
        // Later orphanings never hand it back to `p`.
        for lost in (0..9).filter(|&i| i != p && i != c) {
            r.lost(lost);
            for s in 0..3 {
                assert_ne!(r.parent_in(s, c), Parent::Node(p));
            }
        }
    }

    #[test]
    fn a_suspect_that_speaks_again_rejoins_as_a_leaf_of_the_client_and_adopts_nobody() {
        let plan = Plan::build(&Rates::unknown(5), Shape::Chain, MIB);
        let mut r = Routing::new(&plan);
        assert!(r.rejoin(2).is_empty(), "a live node does not rejoin");
        r.lost(2);
        assert_eq!(r.rejoin(2), vec![Step::Send { node: 2 }]);
        assert!(r.is_alive(2));
        assert_eq!(r.parent(2), Parent::Client);
        assert!(r.children(Parent::Node(2)).is_empty());
        assert!(r.rejoin(2).is_empty(), "once");
        // Its old parent goes next: the orphan is 3 (re-routed before), not
        // the rejoined leaf, and the leaf's own parent stays the client.
        assert_eq!(
            r.lost(1),
            vec![Step::Forward {
                node: 0,
                children: vec![3]
            }]
        );
        assert_eq!(r.parent(2), Parent::Client);
        r.done(2);
        r.lost(2);
        assert!(r.is_alive(2) && r.is_done(2), "a node that reported stays");
    }

    #[test]
    fn a_striped_suspect_rejoins_fed_every_stripe_by_the_client_and_takes_no_orphans() {
        let plan = Plan::build(&Rates::unknown(9), Shape::Stripes(3), MIB);
        let mut r = Routing::new(&plan);
        let interior = (0..9)
            .find(|&i| (0..3).any(|s| !r.children_in(s, Parent::Node(i)).is_empty()))
            .unwrap_or(0);
        r.lost(interior);
        let steps = r.rejoin(interior);
        assert_eq!(
            steps,
            (0..3)
                .map(|stripe| Step::SendStripe {
                    node: interior,
                    stripe
                })
                .collect::<Vec<_>>()
        );
        // Every other interior node lost in turn: none of their orphans
        // goes to the rejoined leaf.
        for i in 0..9 {
            if i != interior {
                r.lost(i);
                for s in 0..3 {
                    assert!(r.children_in(s, Parent::Node(interior)).is_empty());
                }
            }
        }
    }
}

#[test]
fn fixed_parents_hang_beneath_their_node_in_every_stripe_and_the_rest_is_planned_as_usual() {
    // Node 3 only node 0 reaches, node 4 only node 3 (a two-level tree).
    let fixed = [
        None,
        None,
        None,
        Some(Parent::Node(0)),
        Some(Parent::Node(3)),
    ];
    let rates = Rates::unknown(5);
    for shape in [Shape::Chain, Shape::Tree(2), Shape::Stripes(2), Shape::Auto] {
        let plan = Plan::build_fixed(&rates, shape, 64 * MIB, Candidates::All, &fixed);
        for s in 0..plan.stripe_count() {
            let parents = plan.stripe(s);
            assert_eq!(parents.len(), 5, "{shape}");
            assert_eq!(parents[3], Parent::Node(0), "{shape} stripe {s}");
            assert_eq!(parents[4], Parent::Node(3), "{shape} stripe {s}");
            // The free nodes are planned among themselves: none is fed by
            // a fixed one, and each reaches the client.
            for i in 0..3 {
                assert!(
                    !matches!(parents[i], Parent::Node(3 | 4)),
                    "{shape}: {parents:?}"
                );
                assert!(depth_in(parents, i) <= 3, "{shape}: {parents:?}");
            }
        }
        // The same plan over the three free nodes, widened.
        let free = Plan::build_among(&Rates::unknown(3), shape, 64 * MIB, Candidates::All);
        assert_eq!(plan.shape, free.shape);
        assert_eq!(plan.parents[..3], free.parents[..]);
        if !plan.room.is_empty() {
            assert_eq!(plan.room[3..], [0, 0]);
        }
        assert_eq!(plan.pinned, [false, false, false, true, true]);
        // Node 0 lost: its fixed child goes to the client, never to a
        // relay (which cannot reach it), in every stripe.
        let mut routing = Routing::new(&plan);
        routing.lost(0);
        for s in 0..plan.stripe_count() {
            assert_eq!(routing.parent_in(s, 3), Parent::Client, "{shape} {s}");
            assert_eq!(routing.parent_in(s, 4), Parent::Node(3), "{shape} {s}");
        }
        // Node 3 lost: its child too.
        routing.lost(3);
        assert_eq!(routing.parent(4), Parent::Client, "{shape}");
    }
}

#[test]
fn fixed_parents_that_loop_or_point_nowhere_are_planned_as_free() {
    let rates = Rates::unknown(4);
    let plain = Plan::build(&rates, Shape::Chain, MIB);
    let n = |i| Some(Parent::Node(i));
    for fixed in [
        vec![None, n(2), n(1), None],
        vec![n(0), None, None, None],
        vec![None, n(9), None, None],
        vec![],
    ] {
        let plan = Plan::build_fixed(&rates, Shape::Chain, MIB, Candidates::All, &fixed);
        assert_eq!(plan, plain, "{fixed:?}");
    }
}

#[test]
fn a_node_fixed_to_the_client_is_its_leaf_in_every_stripe() {
    // Node 1 only the client reaches (its parent is in no plan).
    let fixed = [None, Some(Parent::Client), None, None];
    for shape in [Shape::Chain, Shape::Tree(2), Shape::Stripes(2)] {
        let plan = Plan::build_fixed(&Rates::unknown(4), shape, 64 * MIB, Candidates::All, &fixed);
        for s in 0..plan.stripe_count() {
            let parents = plan.stripe(s);
            assert_eq!(parents[1], Parent::Client, "{shape}");
            assert!(!parents.contains(&Parent::Node(1)), "{shape}: {parents:?}");
        }
        let mut routing = Routing::new(&plan);
        // Whoever is lost, it is never anyone's adopted child.
        routing.lost(0);
        for s in 0..plan.stripe_count() {
            assert!(routing.children_in(s, Parent::Node(1)).is_empty());
        }
    }
    // Every node fixed to the client: each fed by it.
    let all = [Some(Parent::Client); 3];
    let plan = Plan::build_fixed(&Rates::unknown(3), Shape::Auto, MIB, Candidates::All, &all);
    assert_eq!(plan.parents, [Parent::Client; 3]);
}
