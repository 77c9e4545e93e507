//! `--transport auto` against real nodes on loopback: a short path is TCP
//! at once (said at `-v` and in `--json`), the race's QUIC connection is no
//! failure on the node, a node without QUIC is reached over TCP. Which
//! transport a long or bad link gets, and a UDP port dropped on the way,
//! are the lab's (`lab_quic.rs`); the policy's rules are unit-tested in
//! simulated time (`haul-transport/src/choice_tests.rs`).

use std::time::{Duration, Instant};

use crate::harness::*;

const T: Duration = Duration::from_secs(120);

/// A push of `src` to `node`'s `in`, with the default transport, `-v` and
/// `--json`.
fn push(s: &Scratch, node: &Node, src: &std::path::Path, extra: &[&str]) -> std::process::Output {
    push_to(s, node, src, "in", extra)
}

fn push_to(
    s: &Scratch,
    node: &Node,
    src: &std::path::Path,
    dest: &str,
    extra: &[&str],
) -> std::process::Output {
    let mut c = haul(&s.path("config"));
    c.args(["-v", "push", "--json"])
        .args(extra)
        .arg(src)
        .arg(node.url(dest));
    run(c, T)
}

/// The "connected to … over …" lines, in order.
fn connections(err: &str) -> Vec<&str> {
    err.lines()
        .filter(|l| l.contains("connected to "))
        .collect()
}

#[test]
fn on_a_short_path_auto_is_tcp_at_once_and_the_node_hears_no_failure() {
    let s = Scratch::new();
    let src = s.path("src/set");
    for i in 0..6 {
        write_file(&src.join(format!("f{i}.bin")), 6 << 20, i);
    }
    // One file large enough to be split between the transports.
    write_file(&src.join("big.bin"), 80 << 20, 9);
    let log = s.path("node.log");
    let node = Node::start_logged(&s.path("node"), &s.path("config"), &["--open"], &log);
    for round in 0..3 {
        let dest = format!("in{round}");
        // Long enough (3 s) that TCP's own round trip decides when its
        // handshake was slow (a loaded machine, a debug build's TLS).
        let out = push_to(&s, &node, &src, &dest, &["-j", "4", "--max-rate", "40M"]);
        ok(&out);
        assert_eq!(listing(&src), listing(&s.path(&format!("node/{dest}/set"))));
        let sum = summary(&out);
        assert_eq!(sum["transport"]["name"], "tcp", "{}", said(&out));
        let why = sum["transport"]["why"].as_str().unwrap_or_default();
        assert!(why.starts_with("a short"), "{why}");
        assert!(
            stderr(&out).contains("TCP from now on: a short"),
            "{}",
            stderr(&out)
        );
    }
    // The race's QUIC connection, closed unused or handed back with a
    // goodbye, is no failure on the node's side.
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!log.to_lowercase().contains("warn"), "{log}");
}

#[test]
fn a_node_without_quic_is_reached_over_tcp() {
    let s = Scratch::new();
    write_file(&s.path("src/f.bin"), 8 << 20, 7);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open", "--no-quic"]);
    let started = Instant::now();
    let out = push(&s, &node, &s.path("src/f.bin"), &[]);
    ok(&out);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(b3(&s.path("src/f.bin")), b3(&s.path("node/in")));
    let sum = summary(&out);
    assert_eq!(sum["transport"]["name"], "tcp", "{}", said(&out));
    // Known from QUIC's refusal (ICMP) or from TCP's quick handshake,
    // whichever came first.
    let why = sum["transport"]["why"].as_str().unwrap_or_default();
    assert!(
        why.contains("QUIC did not") || why.starts_with("a short"),
        "{why}"
    );
    assert!(
        connections(&stderr(&out))
            .iter()
            .all(|l| l.contains("over TLS 1.3")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_pull_chooses_too() {
    let s = Scratch::new();
    for i in 0..6 {
        write_file(&s.path(&format!("node/out/f{i}.bin")), 6 << 20, 20 + i);
    }
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let mut c = haul(&s.path("config"));
    c.args(["-v", "pull", "--json", "-j", "4", "--max-rate", "20M"])
        .arg(node.url("out/"))
        .arg(s.path("back"));
    let out = run(c, T);
    ok(&out);
    assert_eq!(listing(&s.path("node/out")), listing(&s.path("back")));
    let sum = summary(&out);
    assert_eq!(sum["transport"]["name"], "tcp", "{}", said(&out));
}
