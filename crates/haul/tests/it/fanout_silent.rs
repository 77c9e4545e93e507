//! Fan-out through relays that go silent: a relay frozen with SIGSTOP
//! (nothing answers; no reset, unlike a killed one) is routed around in
//! seconds, far under `--timeout`, and one resumed rejoins as a leaf.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::fanout::fanout;
use crate::harness::{haul, listing, run, stderr, wait_for, write_file, Node, Scratch};

/// Four open TLS nodes in a chain, `n0` … `n3`.
fn chain(s: &Scratch) -> Vec<Node> {
    (0..4)
        .map(|i| Node::start(&s.path(&format!("n{i}")), &s.path("cfg"), &["--open"]))
        .collect()
}

/// The dataset: one large file (the relay is caught in it) and small ones.
fn dataset(src: &Path) {
    write_file(&src.join("big.bin"), 80 << 20, 5);
    for i in 0..20 {
        write_file(&src.join(format!("small/f{i}")), 2000 + i, 6 + i);
    }
}

/// Starts the push (the client's upload limited, so the relays are caught
/// mid-file) with the default 60 s `--timeout` said out loud: waiting it
/// out is what a silent relay must not cost.
fn start_push(s: &Scratch, urls: Vec<String>) -> std::thread::JoinHandle<(Output, Duration)> {
    let (config, src) = (s.path("client"), s.path("src"));
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut cmd = haul(&config);
        cmd.arg("push").arg(&src).args(&urls);
        cmd.args(["--bwlimit", "12M", "--timeout", "60", "--json"]);
        let out = run(cmd, Duration::from_secs(180));
        (out, started.elapsed())
    })
}

/// Waits until node `i` staged more than 8 MiB.
fn wait_staged(s: &Scratch, i: usize) {
    let partial = s.path(&format!("n{i}/.haul/partial"));
    wait_for(Duration::from_secs(60), "the relay to stage data", || {
        std::fs::read_dir(&partial)
            .map(|d| {
                d.flatten()
                    .any(|e| e.metadata().map(|m| m.len() > 8 << 20).unwrap_or(false))
            })
            .unwrap_or(false)
    });
}

fn signal(node: &Node, sig: i32) {
    // SAFETY: a signal to our own child process.
    unsafe { libc::kill(node.child.id() as i32, sig) };
}

/// The `--json` events named `event`.
pub(crate) fn events(out: &Output, event: &str) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == event)
        .collect()
}

/// Every node gets exactly one `node_done`.
fn one_node_done_each(out: &Output, urls: &[String]) {
    let done = events(out, "node_done");
    for u in urls {
        let n = done.iter().filter(|d| d["node"] == u.as_str()).count();
        assert_eq!(n, 1, "node_done events for {u}: {done:?}");
    }
}

/// Four nodes in a chain, a push to them started, and the second frozen
/// (SIGSTOP) once it staged data.
type Pushing = std::thread::JoinHandle<(Output, Duration)>;
fn push_and_freeze_the_second(s: &Scratch) -> (Vec<Node>, Vec<String>, Pushing) {
    dataset(&s.path("src"));
    let nodes = chain(s);
    let urls: Vec<String> = nodes.iter().map(|n| n.url("in")).collect();
    let pushing = start_push(s, urls.clone());
    wait_staged(s, 1);
    signal(&nodes[1], libc::SIGSTOP);
    (nodes, urls, pushing)
}

#[test]
fn a_frozen_relay_is_routed_around_in_seconds_and_the_others_complete() {
    let s = Scratch::new();
    let (nodes, urls, pushing) = push_and_freeze_the_second(&s);
    let (out, took) = pushing.join().unwrap();
    signal(&nodes[1], libc::SIGCONT);
    assert_eq!(out.status.code(), Some(23), "{}", stderr(&out));
    // 80 MiB at 12 MiB/s is under 7 s; a relay waited out for `--timeout`
    // took more than 60.
    assert!(took < Duration::from_secs(40), "took {took:?}");
    let f = fanout(&out);
    let reports = f["nodes"].as_array().unwrap();
    let frozen = &reports[1];
    assert_eq!(frozen["ok"], false, "{f}");
    let why = frozen["error"].as_str().unwrap();
    assert!(why.contains("silent"), "{why}");
    assert!(frozen["bytes"].as_u64().unwrap() > 0, "what it held: {f}");
    for i in [0, 2, 3] {
        assert_eq!(reports[i]["ok"], true, "node {i}: {f}");
        assert_eq!(
            listing(&s.path(&format!("n{i}/in/src"))),
            listing(&s.path("src"))
        );
    }
    // Its successor was fed by the node before it.
    assert_eq!(reports[2]["from"], nodes[0].addr.as_str(), "{f}");
    one_node_done_each(&out, &urls);
    let warned = events(&out, "warning");
    assert!(
        warned
            .iter()
            .any(|w| w["message"].as_str().unwrap_or("").contains("went silent")),
        "{warned:?}"
    );
}

#[test]
fn a_relay_frozen_and_resumed_rejoins_as_a_leaf_and_completes() {
    let s = Scratch::new();
    let (nodes, urls, pushing) = push_and_freeze_the_second(&s);
    // Past the client's limit (2 s) and back while the others still run.
    std::thread::sleep(Duration::from_millis(3000));
    signal(&nodes[1], libc::SIGCONT);
    let (out, took) = pushing.join().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        stderr(&out),
        String::from_utf8_lossy(&out.stdout)
    );
    let f = fanout(&out);
    assert!(took < Duration::from_secs(40), "took {took:?}: {f}");
    let reports = f["nodes"].as_array().unwrap();
    for (i, r) in reports.iter().enumerate() {
        assert_eq!(r["ok"], true, "node {i}: {f}");
        assert_eq!(
            listing(&s.path(&format!("n{i}/in/src"))),
            listing(&s.path("src"))
        );
    }
    assert_eq!(reports[1]["from"], "client", "a leaf the client fed: {f}");
    assert_eq!(reports[2]["from"], nodes[0].addr.as_str(), "{f}");
    one_node_done_each(&out, &urls);
    let warned: Vec<String> = events(&out, "warning")
        .iter()
        .map(|w| w["message"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        warned.iter().any(|w| w.contains("went silent")),
        "{warned:?}"
    );
    assert!(
        warned.iter().any(|w| w.contains("answers again")),
        "{warned:?}"
    );
}
