//! `haul serve --status ADDR`: a node's /metrics (accepted by promtool,
//! its counters equal to a known push, pull and refusals), /status (the
//! same counters as JSON, and a transfer while it is open) and /healthz.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::harness::*;

const T: Duration = Duration::from_secs(120);

/// The samples of a Prometheus text page: `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_owned(), v.parse().unwrap_or(f64::NAN)))
        .collect()
}

/// Waits until the node behind status `port` serves no connection (a
/// client may exit a moment before the node has closed its side).
fn settled(port: u16) {
    wait_for(
        Duration::from_secs(10),
        "the node's connections to close",
        || {
            let (_, text) = http_get(port, "/metrics");
            samples(&text).get("haul_node_connections_open") == Some(&0.0)
        },
    );
}

/// A child process killed and waited for if a test fails while it runs.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn client(s: &Scratch, args: &[&str]) -> std::process::Output {
    let mut c = haul(&s.path("config"));
    c.args(args);
    run(c, T)
}

#[test]
fn node_metrics_count_a_known_push_pull_and_refusals() {
    let s = Scratch::new();
    write_file(&s.path("src/data/big.bin"), 9 << 20, 41);
    write_file(&s.path("src/data/small.txt"), 1000, 42);
    let log = s.path("node.log");
    let node = Node::start_logged(
        &s.path("node"),
        &s.path("config"),
        &["--token", "node-secret-1", "--status", "127.0.0.1:0"],
        &log,
    );
    let port = node
        .status
        .expect("the listening event names the status address");
    let (health, body) = http_get(port, "/healthz");
    assert!(health.contains("200") && body == "ok\n", "{health} {body}");

    let src = s.path("src/data");
    let src = src.to_str().unwrap();
    let out = client(
        &s,
        &["push", "--token", "node-secret-1", src, &node.url("in")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let out = client(
        &s,
        &["push", "--token", "guess-secret-2", src, &node.url("in")],
    );
    assert_ne!(out.status.code(), Some(0), "a wrong token was accepted");
    let back = s.path("back");
    let out = client(
        &s,
        &[
            "pull",
            "--token",
            "node-secret-1",
            &node.url("in/data"),
            back.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let out = client(
        &s,
        &["ls", "--token", "node-secret-1", &node.url("nowhere")],
    );
    assert_ne!(out.status.code(), Some(0), "ls of a missing path succeeded");

    let total = (9u64 << 20) + 1000;
    settled(port);
    let (_, text) = http_get(port, "/metrics");
    promtool_check(&text);
    let m = samples(&text);
    let get = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no {k} in\n{text}"));
    assert_eq!(get("haul_node_files_received_total"), 2.0, "{text}");
    assert_eq!(get("haul_node_files_sent_total"), 2.0, "{text}");
    assert_eq!(get("haul_node_file_bytes_received_total"), total as f64);
    assert_eq!(get("haul_node_file_bytes_sent_total"), total as f64);
    // A fresh push and a fresh pull move every byte once.
    assert_eq!(get("haul_node_payload_bytes_received_total"), total as f64);
    assert_eq!(get("haul_node_payload_bytes_sent_total"), total as f64);
    assert_eq!(get("haul_node_file_failures_total"), 0.0);
    assert_eq!(get("haul_node_refusals_total{cause=\"unauthorized\"}"), 1.0);
    // A listing of a missing path is an answer, not a refusal (a push
    // looks at its DEST so before creating it).
    assert!(!text.contains("cause=\"not_found\""), "{text}");
    assert_eq!(get("haul_node_refusals_total{cause=\"read_only\"}"), 0.0);
    assert!(get("haul_node_connections_total{request=\"push\"}") >= 2.0);
    assert!(get("haul_node_connections_total{request=\"fetch\"}") >= 1.0);
    assert!(get("haul_node_connections_total{request=\"list\"}") >= 2.0);
    assert_eq!(get("haul_node_partial_files"), 0.0);
    assert_eq!(
        get("haul_node_chunk_memory_limit_bytes"),
        (256u64 << 20) as f64
    );
    let build = format!(
        "haul_node_build_info{{version=\"{}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(get(&build), 1.0);

    let (_, status) = http_get(port, "/status");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["files"]["received"], 2, "{status}");
    assert_eq!(status["bytes"]["file_sent"], total, "{status}");
    assert_eq!(status["refusals"]["unauthorized"], 1, "{status}");
    assert_eq!(status["open"], serde_json::json!([]), "{status}");
    let (missing, _) = http_get(port, "/nope");
    assert!(missing.contains("404"), "{missing}");
    // The console shows the same, and the payload in its chart.
    let (line, page) = http_get(port, "/");
    assert!(
        line.contains("200") && page.starts_with("<!DOCTYPE html>"),
        "{line}"
    );
    let tile = |name: &str| {
        page.split("<div class=\"tile\">")
            .find(|t| t.contains(&format!("<span>{name}</span>")))
            .unwrap_or_else(|| panic!("no {name} tile: {page}"))
            .to_string()
    };
    assert!(tile("Files received").contains("<b>2</b>"), "{page}");
    assert!(tile("Refusals").contains("<b>1</b>"), "{page}");
    assert!(tile("Health").contains(">ok<"), "{page}");
    assert!(
        page.contains("payload received per minute: 9.0 MiB in the last hour"),
        "{page}"
    );

    // The transfer log has the refusal too: its connection line, never the token.
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.lines()
            .any(|l| l.contains("connection peer=") && l.contains("auth=refused")),
        "{text}"
    );
    assert!(
        !text.contains("node-secret-1") && !text.contains("guess-secret-2"),
        "{text}"
    );
}

#[test]
fn status_lists_a_transfer_while_it_runs() {
    let s = Scratch::new();
    write_file(&s.path("src/slow.bin"), 6 << 20, 43);
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--status", "127.0.0.1:0", "--read-only"],
    );
    let port = node.status.expect("status address");
    // Read-only: a push is refused under its own cause.
    let src = s.path("src");
    let out = client(&s, &["push", src.to_str().unwrap(), &node.url("in")]);
    assert_ne!(out.status.code(), Some(0), "a read-only node took a push");
    let (_, text) = http_get(port, "/metrics");
    let m = samples(&text);
    assert_eq!(
        m["haul_node_refusals_total{cause=\"read_only\"}"], 1.0,
        "{text}"
    );
    // A pull paced at 2 MB/s is open for about 3 s: /status shows it.
    std::fs::create_dir_all(s.path("node/out")).unwrap();
    std::fs::copy(s.path("src/slow.bin"), s.path("node/out/slow.bin")).unwrap();
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--bwlimit", "2M", &node.url("out/slow.bin")])
        .arg(s.path("back.bin"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut pull = Killed(c.spawn().expect("spawn the pull"));
    let mut seen = serde_json::Value::Null;
    wait_for(Duration::from_secs(20), "a fetch in /status", || {
        let (_, body) = http_get(port, "/status");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let open = v["open"].as_array().cloned().unwrap_or_default();
        match open
            .into_iter()
            .find(|c| c["request"] == "fetch" && c["payload_bytes"].as_u64() > Some(0))
        {
            Some(c) => {
                seen = c;
                true
            }
            None => false,
        }
    });
    // /metrics agrees while the fetch is still open.
    wait_for(Duration::from_secs(20), "a fetch in /metrics", || {
        let (_, text) = http_get(port, "/metrics");
        let m = samples(&text);
        m.get("haul_node_requests_in_flight{request=\"fetch\"}") >= Some(&1.0)
            && m.get("haul_node_connections_open") >= Some(&1.0)
    });
    assert!(
        seen["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{seen}"
    );
    assert_eq!(seen["auth"], "open", "{seen}");
    let done = pull.0.wait().expect("the pull");
    assert!(done.success());
    assert_eq!(b3(&s.path("back.bin")), b3(&s.path("src/slow.bin")));
    // A root moved away (an unmount looks the same) turns /healthz red.
    let (health, _) = http_get(port, "/healthz");
    assert!(health.contains("200"), "{health}");
    std::fs::rename(s.path("node"), s.path("moved")).unwrap();
    let (health, body) = http_get(port, "/healthz");
    assert!(
        health.contains("503") && body.contains("restart the node"),
        "{health} {body}"
    );
}

#[test]
fn a_chain_fan_out_is_counted_on_every_node_and_its_relays_forwards() {
    let s = Scratch::new();
    write_file(&s.path("src/a.bin"), 5 << 20, 44);
    write_file(&s.path("src/b.txt"), 777, 45);
    let total = (5u64 << 20) + 777;
    let nodes: Vec<Node> = (0..3)
        .map(|i| {
            let root = s.path(&format!("n{i}"));
            Node::start(
                &root,
                &s.path("cfg"),
                &["--open", "--status", "127.0.0.1:0"],
            )
        })
        .collect();
    let mut c = haul(&s.path("config"));
    c.arg("push").arg(s.path("src"));
    c.args(nodes.iter().map(|n| n.url("d")));
    c.args(["--plan", "chain"]);
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    for (i, node) in nodes.iter().enumerate() {
        let port = node.status.expect("status");
        settled(port);
        let (_, text) = http_get(port, "/metrics");
        let m = samples(&text);
        assert_eq!(m["haul_node_fanouts_total"], 1.0, "node {i}:\n{text}");
        assert_eq!(
            m["haul_node_files_received_total"], 2.0,
            "node {i}:\n{text}"
        );
        assert_eq!(
            m["haul_node_file_bytes_received_total"], total as f64,
            "node {i}:\n{text}"
        );
        // The client feeds node 0; nodes 0 and 1 each forward to the next.
        let forwards = if i < 2 { 1.0 } else { 0.0 };
        assert_eq!(
            m["haul_node_relay_forwards_total"], forwards,
            "node {i}:\n{text}"
        );
        assert_eq!(m["haul_node_relay_forwards_failed_total"], 0.0, "node {i}");
        // What a relay forwards counts as sent: each file once per forward.
        assert_eq!(
            m["haul_node_files_sent_total"],
            2.0 * forwards,
            "node {i}:\n{text}"
        );
        assert!(
            m["haul_node_payload_bytes_sent_total"] >= total as f64 * forwards,
            "node {i}:\n{text}"
        );
        assert_eq!(
            m["haul_node_connections_total{request=\"fanout\"}"], 1.0,
            "node {i}:\n{text}"
        );
    }
}
