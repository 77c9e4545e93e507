//! Fan-out: one push to many real nodes that relay to each other.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use haul_proto::{ErrorCode, Message, Request};

use crate::harness::{
    b3, flip_keeping_mtime, haul, listing, run, stderr, write_file, Node, Scratch,
};
use crate::proxy::{Faults, Proxy};
use crate::raw::Raw;

const LIMIT: Duration = Duration::from_secs(120);

/// A tree with nested directories, many small files and files of several chunks.
pub fn dataset(root: &Path) {
    for d in 0..4 {
        for f in 0..25 {
            write_file(&root.join(format!("d{d}/e/f{f}")), 100 + f * 7, d * 100 + f);
        }
    }
    write_file(&root.join("big/a.bin"), (3 << 20) + 12345, 7);
    write_file(&root.join("big/b.bin"), 9 << 20, 8);
    std::fs::create_dir_all(root.join("empty/dir")).unwrap();
}

/// The `fanout` event of a `--json` run.
pub fn fanout(out: &Output) -> serde_json::Value {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "fanout")
        .unwrap_or_else(|| panic!("no fanout event; stderr {}", stderr(out)))
}

/// `n` open TLS nodes with roots `n0`, `n1`, ...
fn open_nodes(s: &Scratch, n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| Node::start(&s.path(&format!("n{i}")), &s.path("cfg"), &["--open"]))
        .collect()
}

/// `n` open plaintext nodes with roots `n0`, `n1`, ...
fn plaintext_nodes(s: &Scratch, n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| {
            let root = s.path(&format!("n{i}"));
            Node::start(&root, &s.path("cfg"), &["--open", "--plaintext"])
        })
        .collect()
}

pub fn push(config: &Path, src: &Path, urls: &[String], extra: &[&str]) -> Output {
    let mut cmd = haul(config);
    cmd.arg("push")
        .arg(src)
        .args(urls)
        .args(extra)
        .arg("--json");
    run(cmd, LIMIT)
}

#[test]
fn a_chain_and_a_tree_deliver_the_same_tree_to_every_node() {
    let s = Scratch::new();
    dataset(&s.path("src"));
    let want = listing(&s.path("src"));
    let nodes: Vec<Node> = (0..4)
        .map(|i| {
            let cfg = s.path(&format!("cfg{i}"));
            Node::start(&s.path(&format!("n{i}")), &cfg, &["--token", "secret"])
        })
        .collect();
    for (plan, dest) in [("chain", "c"), ("tree", "t"), ("tree:3", "t3")] {
        let urls: Vec<String> = nodes.iter().map(|n| n.url(dest)).collect();
        let out = push(
            &s.path("client"),
            &s.path("src"),
            &urls,
            &["--token", "secret", "--plan", plan],
        );
        assert!(out.status.success(), "{plan}: {}", stderr(&out));
        let f = fanout(&out);
        let reports = f["nodes"].as_array().unwrap();
        assert_eq!(reports.len(), 4);
        for (i, r) in reports.iter().enumerate() {
            assert_eq!(r["ok"], true, "{plan} node {i}: {r}");
            assert_eq!(
                listing(&s.path(&format!("n{i}/{dest}/src"))),
                want,
                "{plan} node {i}"
            );
        }
        // The client sent the data once per child of its own, not per node.
        let from_client = reports.iter().filter(|r| r["from"] == "client").count();
        let expect = match plan {
            "chain" => 1,
            "tree" => 2,
            _ => 3,
        };
        assert_eq!(from_client, expect, "{plan}: {f}");
        let per_copy: u64 = (3 << 20) + 12345 + (9 << 20);
        let sent = f["sent"]["bytes_transferred"].as_u64().unwrap();
        assert!(sent >= per_copy * expect as u64 && sent < per_copy * (expect as u64 + 1));
        assert!(s.path(&format!("n0/{dest}/src/empty/dir")).is_dir());
    }
}

#[test]
fn striped_trees_put_every_file_together_on_every_node_from_one_upload() {
    let s = Scratch::new();
    dataset(&s.path("src"));
    std::os::unix::fs::symlink("e/f1", s.path("src/d0/link")).unwrap();
    let want = listing(&s.path("src"));
    let nodes: Vec<Node> = (0..5)
        .map(|i| {
            let cfg = s.path(&format!("cfg{i}"));
            Node::start(&s.path(&format!("n{i}")), &cfg, &["--token", "secret"])
        })
        .collect();
    let urls: Vec<String> = nodes.iter().map(|n| n.url("in")).collect();
    let args = ["--token", "secret", "--plan", "stripes:2"];
    let out = push(&s.path("client"), &s.path("src"), &urls, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let f = fanout(&out);
    assert_eq!(f["plan"]["shape"]["shape"], "stripes", "{f}");
    assert_eq!(f["plan"]["stripes"].as_array().unwrap().len(), 2, "{f}");
    let reports = f["nodes"].as_array().unwrap();
    let small: u64 = 4 * (0..25u64).map(|f| 100 + f * 7).sum::<u64>();
    let per_copy: u64 = (3 << 20) + 12345 + (9 << 20) + small;
    for (i, r) in reports.iter().enumerate() {
        assert_eq!(r["ok"], true, "node {i}: {r}");
        assert_eq!(listing(&s.path(&format!("n{i}/in/src"))), want, "node {i}");
        // Each node received the data once, its two halves from two parents.
        assert_eq!(r["bytes"].as_u64().unwrap(), per_copy, "node {i}: {r}");
        let from = r["from"].as_str().unwrap();
        assert_eq!(from.split(", ").count(), 2, "node {i}: {from}");
    }
    // The client uploaded the dataset once: each stripe to its own root.
    let sent = f["sent"]["bytes_transferred"].as_u64().unwrap();
    assert_eq!(sent, per_copy, "{f}");
    let roots = reports
        .iter()
        .filter(|r| r["from"].as_str().unwrap().contains("client"))
        .count();
    assert_eq!(roots, 2, "{f}");
    // Nothing left half-assembled in staging.
    for i in 0..5 {
        let partial = s.path(&format!("n{i}/.haul/partial"));
        let left = std::fs::read_dir(&partial).map(|d| d.count()).unwrap_or(0);
        assert_eq!(left, 0, "node {i} staging");
    }
    // A rerun after one node lost a large file sends only that file's
    // chunks, to that node, half through each stripe's parent.
    std::fs::remove_file(s.path("n3/in/src/big/b.bin")).unwrap();
    let out = push(&s.path("client"), &s.path("src"), &urls, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let f = fanout(&out);
    let bytes: Vec<u64> = f["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(bytes, vec![0, 0, 0, 9 << 20, 0], "{f}");
    assert_eq!(
        b3(&s.path("n3/in/src/big/b.bin")),
        b3(&s.path("src/big/b.bin"))
    );
}

#[test]
fn a_striped_relay_killed_mid_transfer_is_routed_around_in_every_stripe() {
    let s = Scratch::new();
    write_file(&s.path("src/big.bin"), 64 << 20, 3);
    for i in 0..30 {
        write_file(&s.path(&format!("src/small/f{i}")), 1000 + i, 4 + i);
    }
    let mut nodes = plaintext_nodes(&s, 5);
    let urls: Vec<String> = nodes.iter().map(|n| n.url("in")).collect();
    // Slow every upload of the first node, the client's root of stripe 0,
    // so the nodes below it are caught mid-file.
    let proxy = Proxy::start(
        &nodes[0].addr,
        Faults {
            rate: Some(16 << 20),
            ..Faults::default()
        },
    );
    let mut first = urls.clone();
    first[0] = proxy.url("in");
    let (config, src) = (s.path("client"), s.path("src"));
    let args = [
        "--plaintext",
        "--timeout",
        "10",
        "--plan",
        "stripes:2",
        "-v",
    ];
    let pushing = std::thread::spawn(move || push(&config, &src, &first, &args));
    // The plan of 5 equal nodes: node 2 relays stripe 0 below node 0 (to
    // nodes 1 and 3) and is a leaf in stripe 1.
    let partial = s.path("n2/.haul/partial");
    crate::harness::wait_for(Duration::from_secs(60), "node 2 to stage data", || {
        std::fs::read_dir(&partial)
            .map(|d| d.count() > 0)
            .unwrap_or(false)
    });
    std::thread::sleep(Duration::from_millis(800));
    let dead = nodes[2].addr.clone();
    nodes[2].kill9();
    let out = pushing.join().unwrap();
    assert_eq!(out.status.code(), Some(23), "{}", stderr(&out));
    let f = fanout(&out);
    let reports = f["nodes"].as_array().unwrap();
    assert_eq!(reports[2]["ok"], false, "{f}");
    assert!(!reports[2]["error"].as_str().unwrap().is_empty(), "{f}");
    // Its children in stripe 0 were re-routed where there was upload to
    // spare: node 1 to its parent there, node 0 (one stream freed), node 3
    // to node 4, which fed nobody (the nodes' room is 2 streams each).
    for (i, parent) in [(1, &proxy.addr), (3, &nodes[4].addr)] {
        let from = reports[i]["from"].as_str().unwrap();
        assert!(from.starts_with(&format!("{parent}, ")), "node {i}: {f}");
    }
    for i in [0, 1, 3, 4] {
        assert_eq!(reports[i]["ok"], true, "node {i}: {f}");
        assert_eq!(
            listing(&s.path(&format!("n{i}/in/src"))),
            listing(&s.path("src")),
            "node {i}"
        );
        assert_eq!(
            b3(&s.path(&format!("n{i}/in/src/big.bin"))),
            b3(&s.path("src/big.bin"))
        );
        assert!(
            !reports[i]["from"].as_str().unwrap().contains(&dead),
            "node {i}: {f}"
        );
    }
    // Run again without the dead node: nothing left to send.
    let again: Vec<String> = [0, 1, 3, 4].iter().map(|&i| urls[i].clone()).collect();
    let out = push(
        &s.path("client"),
        &s.path("src"),
        &again,
        &["--plaintext", "--plan", "stripes:2"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let f = fanout(&out);
    for n in f["nodes"].as_array().unwrap() {
        assert_eq!(n["bytes"], 0, "{f}");
    }
}

/// Bytes staged under `root`'s `.haul/partial` (0 when none).
fn staged(root: &Path) -> u64 {
    std::fs::read_dir(root.join(".haul/partial"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// A relay forwards a large file as it arrives, also when small files
/// offered with it come later: their chunks not being there yet must not
/// hold its reads (they held every byte of it until the small files came).
#[test]
fn a_relay_forwards_a_large_file_while_small_files_offered_with_it_are_still_to_come() {
    let s = Scratch::new();
    write_file(&s.path("src/big.bin"), 48 << 20, 21);
    for i in 0..20 {
        write_file(&s.path(&format!("src/small/f{i}")), 1500 + i, 30 + i);
    }
    let nodes = plaintext_nodes(&s, 2);
    let urls: Vec<String> = nodes.iter().map(|n| n.url("in")).collect();
    let (config, src) = (s.path("client"), s.path("src"));
    let pushing = std::thread::spawn(move || {
        push(&config, &src, &urls, &["--plaintext", "--bwlimit", "12M"])
    });
    // Until the first node staged three quarters of the file, how much
    // the second one holds.
    let (first, second) = (s.path("n0"), s.path("n1"));
    let mut relayed = 0;
    crate::harness::wait_for(LIMIT, "the first node to stage 36 MiB", || {
        relayed = relayed.max(staged(&second));
        staged(&first) >= 36 << 20 || pushing.is_finished()
    });
    let out = pushing.join().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        relayed >= 16 << 20,
        "the relay held back the large file: {relayed} bytes relayed"
    );
    for i in 0..2 {
        assert_eq!(
            listing(&s.path(&format!("n{i}/in/src"))),
            listing(&s.path("src"))
        );
    }
}

#[test]
fn a_rerun_sends_each_node_only_what_it_lacks() {
    let s = Scratch::new();
    dataset(&s.path("src"));
    let nodes = open_nodes(&s, 3);
    let urls: Vec<String> = nodes.iter().map(|n| n.url("in")).collect();
    let out = push(&s.path("client"), &s.path("src"), &urls, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The last node of the chain loses one file; the middle one another.
    std::fs::remove_file(s.path("n2/in/src/big/b.bin")).unwrap();
    std::fs::remove_file(s.path("n1/in/src/d1/e/f3")).unwrap();
    let out = push(&s.path("client"), &s.path("src"), &urls, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let f = fanout(&out);
    let bytes: Vec<u64> = f["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(bytes, vec![0, 100 + 3 * 7, 9 << 20], "{f}");
    assert_eq!(f["sent"]["bytes_transferred"], 0);
    for i in 0..3 {
        assert_eq!(
            listing(&s.path(&format!("n{i}/in/src"))),
            listing(&s.path("src"))
        );
    }
}

#[test]
fn a_relay_killed_mid_transfer_is_routed_around_and_named() {
    let s = Scratch::new();
    write_file(&s.path("src/big.bin"), 96 << 20, 3);
    // Small files offered behind the big one: the relay has staged (and
    // queued downstream) some whose bytes never came when it dies, and
    // its successor gets them again from another upstream.
    for i in 0..30 {
        write_file(&s.path(&format!("src/small/f{i}")), 1000 + i, 4 + i);
    }
    let mut nodes = plaintext_nodes(&s, 3);
    let urls: Vec<String> = nodes.iter().map(|n| n.url("in")).collect();
    // Slow the client's uplink so the relay is caught mid-file.
    let proxy = Proxy::start(
        &nodes[0].addr,
        Faults {
            rate: Some(24 << 20),
            ..Faults::default()
        },
    );
    let mut first = urls.clone();
    first[0] = proxy.url("in");
    let (config, src) = (s.path("client"), s.path("src"));
    let pushing = std::thread::spawn(move || {
        push(&config, &src, &first, &["--plaintext", "--timeout", "10"])
    });
    let partial = s.path("n1/.haul/partial");
    crate::harness::wait_for(Duration::from_secs(60), "the relay to stage data", || {
        std::fs::read_dir(&partial)
            .map(|d| {
                d.flatten()
                    .any(|e| e.metadata().map(|m| m.len() > 8 << 20).unwrap_or(false))
            })
            .unwrap_or(false)
    });
    nodes[1].kill9();
    let out = pushing.join().unwrap();
    assert_eq!(out.status.code(), Some(23), "{}", stderr(&out));
    let f = fanout(&out);
    let reports = f["nodes"].as_array().unwrap();
    assert_eq!(reports[1]["ok"], false, "{f}");
    let why = reports[1]["error"].as_str().unwrap();
    assert!(why.contains("control connection ended"), "{why}");
    for i in [0, 2] {
        assert_eq!(reports[i]["ok"], true, "node {i}: {f}");
        assert_eq!(
            listing(&s.path(&format!("n{i}/in/src"))),
            listing(&s.path("src"))
        );
    }
    // The survivor of the cut got the rest from the node before the dead one.
    assert_eq!(reports[2]["from"], proxy.addr.as_str());
    // Run again without the dead node: nothing left to send.
    let again = vec![urls[0].clone(), urls[2].clone()];
    let out = push(&s.path("client"), &s.path("src"), &again, &["--plaintext"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let f = fanout(&out);
    for n in f["nodes"].as_array().unwrap() {
        assert_eq!(n["bytes"], 0, "{f}");
    }
}

#[test]
fn a_piece_corrupted_on_its_way_to_a_relay_is_refused_and_sent_again() {
    let s = Scratch::new();
    write_file(&s.path("src/a.bin"), 6 << 20, 11);
    let nodes = plaintext_nodes(&s, 3);
    // Between the first relay and the second: a flipped payload byte
    // (plaintext, so only the chunk digest can catch it).
    let proxy = Proxy::start(
        &nodes[1].addr,
        Faults {
            flip_up_at: Some(2 << 20),
            ..Faults::default()
        },
    );
    let urls = vec![nodes[0].url("in"), proxy.url("in"), nodes[2].url("in")];
    let out = push(&s.path("client"), &s.path("src"), &urls, &["--plaintext"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(proxy.up_bytes.load(std::sync::atomic::Ordering::Relaxed) > 2 << 20);
    for i in 0..3 {
        assert_eq!(
            b3(&s.path(&format!("n{i}/in/src/a.bin"))),
            b3(&s.path("src/a.bin"))
        );
    }
}

#[test]
fn relay_tickets_work_only_on_their_node_and_only_while_the_transfer_lasts() {
    let s = Scratch::new();
    let a = Node::start(
        &s.path("a"),
        &s.path("cfg"),
        &["--plaintext", "--token", "ta"],
    );
    let b = Node::start(
        &s.path("b"),
        &s.path("cfg"),
        &["--plaintext", "--token", "tb"],
    );
    // Admission needs the node's own token.
    let mut control = Raw::connect(&a.addr);
    let refused = control.hello(Request::Admit {
        dest: "in".into(),
        origin: [0; 32],
        checksum: false,
        backup: None,
    });
    assert!(
        matches!(
            refused,
            Message::Refused {
                code: ErrorCode::Unauthorized,
                ..
            }
        ),
        "{refused:?}"
    );
    let mut control = Raw::connect(&a.addr);
    control.send(&Message::Hello {
        version: haul_proto::PROTOCOL_VERSION,
        token: "ta".into(),
        request: Request::Admit {
            dest: "in".into(),
            origin: [0; 32],
            checksum: false,
            backup: None,
        },
    });
    assert!(matches!(control.recv(), Some(Message::Welcome { .. })));
    let Some(Message::Ticket { ticket }) = control.recv() else {
        panic!("no ticket");
    };
    // Replayed against another node: refused.
    let mut other = Raw::connect(&b.addr);
    let answer = other.hello(Request::Relayed {
        ticket,
        stripe: None,
        edge: 1,
    });
    assert!(
        matches!(
            answer,
            Message::Refused {
                code: ErrorCode::Unauthorized,
                ..
            }
        ),
        "{answer:?}"
    );
    // A guess: refused.
    let mut guess = Raw::connect(&a.addr);
    let answer = guess.hello(Request::Relayed {
        ticket: [7; 32],
        stripe: None,
        edge: 1,
    });
    assert!(matches!(
        answer,
        Message::Refused {
            code: ErrorCode::Unauthorized,
            ..
        }
    ));
    // On its own node while the transfer lasts: a push.
    let mut data = Raw::connect(&a.addr);
    assert!(matches!(
        data.hello(Request::Relayed {
            ticket,
            stripe: None,
            edge: 1
        }),
        Message::Welcome { .. }
    ));
    drop(data);
    // The transfer ends: the ticket dies with it.
    control.send(&Message::Bye);
    drop(control);
    crate::harness::wait_for(Duration::from_secs(10), "the ticket to be revoked", || {
        let mut late = Raw::connect(&a.addr);
        matches!(
            late.hello(Request::Relayed {
                ticket,
                stripe: None,
                edge: 1
            }),
            Message::Refused {
                code: ErrorCode::Unauthorized,
                ..
            }
        )
    });
}

#[test]
fn a_node_whose_key_changed_is_refused_and_the_others_complete() {
    let s = Scratch::new();
    write_file(&s.path("src/f"), 5000, 1);
    let a = Node::start(&s.path("a"), &s.path("cfg_a"), &["--open"]);
    let b = Node::start(&s.path("b"), &s.path("cfg_b"), &["--open"]);
    let c = Node::start(&s.path("c"), &s.path("cfg_c"), &["--open"]);
    let urls = vec![a.url("in"), b.url("in"), c.url("in")];
    let out = push(&s.path("client"), &s.path("src"), &urls, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    // b comes back on the same port with another key.
    let addr = b.addr.clone();
    drop(b);
    let _b2 = Node::start_on(&s.path("b"), &s.path("cfg_b2"), &addr, &["--open"]);
    write_file(&s.path("src/g"), 7000, 2);
    let out = push(&s.path("client"), &s.path("src"), &urls, &[]);
    assert_eq!(out.status.code(), Some(23), "{}", stderr(&out));
    let f = fanout(&out);
    let reports = f["nodes"].as_array().unwrap();
    assert_eq!(reports[1]["ok"], false);
    assert!(reports[1]["error"].as_str().unwrap().contains("key"), "{f}");
    assert!(s.path("a/in/src/g").is_file() && s.path("c/in/src/g").is_file());
    assert!(!s.path("b/in/src/g").exists());
}

#[test]
fn fan_out_mistakes_say_what_to_do() {
    let s = Scratch::new();
    write_file(&s.path("src/f"), 10, 1);
    let list = s.path("nodes.txt");
    std::fs::write(&list, "# nodes\nhaul://127.0.0.1:1/in\nnot-a-url\n").unwrap();
    let mut cmd = haul(&s.path("cfg"));
    cmd.arg("push")
        .arg(s.path("src"))
        .arg("--to-file")
        .arg(&list);
    let out = run(cmd, LIMIT);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("nodes.txt:3"), "{}", stderr(&out));
    let mut cmd = haul(&s.path("cfg"));
    cmd.arg("push").arg(s.path("src")).args([
        "haul://127.0.0.1:1/a",
        "haul://127.0.0.1:2/b",
        "--plan",
        "ring",
    ]);
    let out = run(cmd, LIMIT);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("tree:K"), "{}", stderr(&out));
    // One stripe is no striped plan: refused before any node is contacted
    // (these ports have no node).
    let mut cmd = haul(&s.path("cfg"));
    cmd.arg("push").arg(s.path("src")).args([
        "haul://127.0.0.1:1/a",
        "haul://127.0.0.1:2/b",
        "--plan",
        "stripes:1",
    ]);
    let out = run(cmd, LIMIT);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("stripes:K"), "{}", stderr(&out));
}

#[test]
fn a_relay_whose_copy_differs_from_the_origin_relays_none_of_it_and_the_client_fills_in() {
    let s = Scratch::new();
    dataset(&s.path("src"));
    let nodes = open_nodes(&s, 3);
    let urls: Vec<String> = nodes.iter().map(|n| n.url("in")).collect();
    let out = push(
        &s.path("client"),
        &s.path("src"),
        &urls,
        &["--plan", "chain"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // The first relay's copy goes bad in one byte; its size and mtime stay,
    // so it still looks up to date. The two nodes after it lose theirs.
    let bad = s.path("n0/in/src/big/b.bin");
    flip_keeping_mtime(&bad, 5 << 20);
    for i in [1, 2] {
        std::fs::remove_file(s.path(&format!("n{i}/in/src/big/b.bin"))).unwrap();
    }
    let out = push(
        &s.path("client"),
        &s.path("src"),
        &urls,
        &["--plan", "chain"],
    );
    assert_eq!(out.status.code(), Some(23), "{}", stderr(&out));
    let f = fanout(&out);
    let reports = f["nodes"].as_array().unwrap();
    // The bad bytes went nowhere: both nodes behind it hold the origin's file,
    // filled in by the client once the relay refused to relay what it holds.
    let want = b3(&s.path("src/big/b.bin"));
    for i in [1, 2] {
        assert_eq!(
            b3(&s.path(&format!("n{i}/in/src/big/b.bin"))),
            want,
            "node {i}"
        );
        assert_eq!(reports[i]["ok"], true, "node {i}: {}", reports[i]);
        assert_eq!(reports[i]["repaired"], 1, "node {i}: {}", reports[i]);
    }
    assert_eq!(reports[0]["ok"], false, "{}", reports[0]);
    assert_eq!(reports[0]["damaged"][0], "src/big/b.bin", "{}", reports[0]);
    let why = reports[0]["error"].as_str().unwrap();
    assert!(why.contains("differs from the origin's"), "{why}");
    // What the client sent: the file for each of the two nodes, not more.
    let sent = f["sent"]["bytes_transferred"].as_u64().unwrap();
    assert!(sent <= 2 * (9 << 20), "{sent}");
}

#[test]
fn a_fan_out_over_quic_relays_over_quic() {
    let s = Scratch::new();
    dataset(&s.path("src"));
    let want = listing(&s.path("src"));
    let logs: Vec<_> = (0..3).map(|i| s.path(&format!("n{i}.log"))).collect();
    let nodes: Vec<Node> = (0..3)
        .map(|i| {
            Node::start_logged(
                &s.path(&format!("n{i}")),
                &s.path("cfg"),
                &["--open"],
                &logs[i],
            )
        })
        .collect();
    let urls: Vec<String> = nodes.iter().map(|n| n.url("q")).collect();
    let out = push(
        &s.path("client"),
        &s.path("src"),
        &urls,
        &["--transport", "quic"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    for i in 0..3 {
        assert_eq!(listing(&s.path(&format!("n{i}/q/src"))), want, "node {i}");
    }
    // Each relay reached the next node the way the client reached it.
    for i in 0..2 {
        let log = std::fs::read_to_string(&logs[i]).unwrap();
        let next = &nodes[i + 1].addr;
        assert!(
            log.contains(&format!("connected to {next} over QUIC")),
            "node {i} did not forward over QUIC:\n{log}"
        );
    }
}
