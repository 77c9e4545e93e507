//! A relay that lies: a `haul serve` whose forwards forge every chunk they
//! relay (bytes and digest rewritten, the origin's seal passed on —
//! `haul_node::forging`, which only test builds can switch on, with
//! `HAUL_TEST_FORGE_FORWARDS=1`). The node it relays to refuses the first
//! chunk, the client evicts the liar, and the run names it — in the
//! summary table, a warning line, the `--json` report and event, and the
//! exit code (42) — while every node ends with the origin's files.

use std::process::Command;

use crate::fanout::{dataset, fanout, push};
use crate::harness::{haul, listing, run, stderr, Node, Scratch, BIN};

const LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Four open nodes `n0..n3`, `n1` lying as a relay.
fn nodes_with_a_liar(s: &Scratch) -> Vec<Node> {
    (0..4)
        .map(|i| {
            let mut cmd = Command::new(BIN);
            if i == 1 {
                cmd.env("HAUL_TEST_FORGE_FORWARDS", "1");
            }
            let root = s.path(&format!("n{i}"));
            Node::spawn(cmd, &root, &s.path("cfg"), "127.0.0.1:0", &["--open"])
        })
        .collect()
}

#[test]
fn a_lying_relay_is_evicted_and_named_in_the_summary_the_json_and_the_exit_code() {
    let s = Scratch::new();
    dataset(&s.path("src"));
    let want = listing(&s.path("src"));
    let nodes = nodes_with_a_liar(&s);
    let urls: Vec<String> = nodes.iter().map(|n| n.url("in")).collect();
    let out = push(
        &s.path("client"),
        &s.path("src"),
        &urls,
        &["--plan", "chain"],
    );
    assert_eq!(out.status.code(), Some(42), "{}", stderr(&out));
    for i in 0..4 {
        assert_eq!(
            listing(&s.path(&format!("n{i}/in/src"))),
            want,
            "node {i}: {}",
            stderr(&out)
        );
    }
    let f = fanout(&out);
    let reports = f["nodes"].as_array().unwrap();
    for (i, r) in reports.iter().enumerate() {
        assert_eq!(r["ok"], true, "node {i}: {r}");
        match i {
            1 => {
                assert_eq!(r["evicted"]["by"], urls[2].as_str(), "{r}");
                assert!(r["evicted"]["chunks"].as_u64().unwrap() >= 1, "{r}");
            }
            _ => assert!(r["evicted"].is_null(), "node {i}: {r}"),
        }
    }
    // The node behind it got everything from elsewhere: nobody receives
    // from the liar at the end.
    assert!(
        reports
            .iter()
            .all(|r| !r["from"].as_str().unwrap().contains(nodes[1].addr.as_str())),
        "{f}"
    );
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "relay_evicted")
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["node"], urls[1].as_str());
    assert_eq!(events[0]["by"], urls[2].as_str());

    // Once more for people: the two nodes behind the liar lost a file.
    for i in [2, 3] {
        std::fs::remove_file(s.path(&format!("n{i}/in/src/big/b.bin"))).unwrap();
    }
    let mut cmd = haul(&s.path("client"));
    cmd.arg("push")
        .arg(s.path("src"))
        .args(&urls)
        .args(["--plan", "chain"]);
    let out = run(cmd, LIMIT);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(42), "{text}");
    let table = text
        .lines()
        .find(|l| l.trim_start().starts_with(urls[1].as_str()))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(table.contains("EVICTED"), "{text}");
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("warning:") && l.contains("failed the origin's seal"))
        .collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(warnings[0].contains(&nodes[1].addr), "{text}");
    for i in [2, 3] {
        assert_eq!(listing(&s.path(&format!("n{i}/in/src"))), want, "node {i}");
    }
}
