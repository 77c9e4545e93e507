//! `--transport quic` against real nodes: the same results as TCP, the
//! same key pinning, and clear words when QUIC cannot be used.

use std::time::{Duration, Instant};

use crate::harness::*;
use crate::transfer::make_tree;
use crate::udp_proxy::UdpProxy;

const T: Duration = Duration::from_secs(120);

/// Everything a run printed (with `--json`, errors are events on stdout).
fn said(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &stderr(out)
}

fn quic(s: &Scratch, args: &[&str]) -> std::process::Command {
    let mut c = haul(&s.path("config"));
    c.args(args).args(["--transport", "quic", "--json"]);
    c
}

#[test]
fn push_then_pull_a_tree_over_quic() {
    let s = Scratch::new();
    let src = s.path("src/data");
    make_tree(&src);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "sekrit"]);
    let mut c = quic(&s, &["push", "--token", "sekrit", "-j", "4"]);
    c.arg(&src).arg(node.url("in"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(summary(&out)["failed"], 0);
    assert_eq!(listing(&src), listing(&s.path("node/in/data")));
    // Again: nothing moves.
    let mut c = quic(&s, &["push", "--token", "sekrit"]);
    c.arg(&src).arg(node.url("in"));
    let out = run(c, T);
    assert_eq!(summary(&out)["bytes_transferred"], 0, "{}", stderr(&out));
    // Back, with the transport from the environment and a split file.
    let mut c = haul(&s.path("config"));
    c.env("HAUL_TRANSPORT", "quic")
        .args(["pull", "--json", "--token", "sekrit", "--streams", "2"])
        .args(["--split-min", "1M", "-j", "3"])
        .arg(node.url("in/data"))
        .arg(s.path("back"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(listing(&src), listing(&s.path("back/data")));
    let big = b3(&src.join("big.bin"));
    assert_eq!(b3(&s.path("back/data/big.bin")), big);
}

#[test]
fn quic_pins_the_same_key_as_tcp() {
    let s = Scratch::new();
    write_file(&s.path("src/f"), 100_000, 3);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    // Learned over TCP, trusted over QUIC: one key, one known_hosts line.
    let mut c = haul(&s.path("config"));
    c.args(["push", "--json"])
        .arg(s.path("src/f"))
        .arg(node.url("a/"));
    assert_eq!(run(c, T).status.code(), Some(0));
    let mut c = quic(&s, &["push"]);
    c.arg(s.path("src/f")).arg(node.url("b/"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(s.path("node/b/f").exists());
    // The same address with another key is refused over QUIC too.
    let addr = node.addr.clone();
    drop(node);
    let other = Node::start_on(&s.path("node2"), &s.path("other"), &addr, &["--open"]);
    let mut c = quic(&s, &["push"]);
    c.arg(s.path("src/f")).arg(other.url("c/"));
    let out = run(c, T);
    assert_ne!(out.status.code(), Some(0));
    let err = said(&out);
    assert!(err.contains("This may be an attack"), "{err}");
    assert!(!s.path("node2/c").exists());
}

#[test]
fn quic_mistakes_say_what_to_do() {
    let s = Scratch::new();
    write_file(&s.path("src/f"), 1000, 1);
    let mut c = quic(&s, &["push", "--plaintext"]);
    c.arg(s.path("src/f")).arg("haul://127.0.0.1:9/x");
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(2));
    assert!(said(&out).contains("no QUIC form"), "{}", said(&out));
    // A node that does not take QUIC: the client says what to try, soon.
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open", "--no-quic"]);
    let started = Instant::now();
    let mut c = quic(&s, &["push", "--timeout", "2", "--retries", "0"]);
    c.arg(s.path("src/f")).arg(node.url("x/"));
    let out = run(c, T);
    assert_ne!(out.status.code(), Some(0));
    let err = said(&out);
    assert!(err.contains("--transport tcp"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_quic_push_resumes_after_sigkill_of_the_sender() {
    let s = Scratch::new();
    let size = 200u64 << 20;
    write_file(&s.path("src/file.bin"), size, 9);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let push = || {
        let mut c = quic(&s, &["push", "-j", "1"]);
        c.arg(s.path("src/file.bin")).arg(node.url(""));
        c
    };
    let mut cmd = push();
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().expect("spawn");
    let partial = || crate::resume::partial_bytes(&s.path("node"));
    wait_for(T, "partial data", || partial() >= 24 << 20);
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    assert!(
        !s.path("node/file.bin").exists(),
        "finished before the kill"
    );
    let out = run(push(), T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let sent = summary(&out)["bytes_transferred"].as_u64().unwrap();
    assert!(sent <= size - (16 << 20), "re-sent {sent} of {size}");
    assert_eq!(b3(&s.path("node/file.bin")), b3(&s.path("src/file.bin")));
}

#[test]
fn damaged_datagrams_are_dropped_never_delivered() {
    // One datagram in 7, each way, has a bit flipped on its way: QUIC's
    // AEAD drops it and the data is sent again; BLAKE3 checks stay.
    let s = Scratch::new();
    let src = s.path("src/data");
    make_tree(&src);
    write_file(&src.join("more.bin"), 20 << 20, 17);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let proxy = UdpProxy::start(node.addr.parse().expect("node address"), 7);
    let mut c = quic(&s, &["push", "-j", "2"]);
    c.arg(&src).arg(proxy.url("in"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(listing(&src), listing(&s.path("node/in/data")));
    let mut c = quic(&s, &["pull", "--streams", "2", "--split-min", "4M"]);
    c.arg(proxy.url("in/data")).arg(s.path("back"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(
        listing(&src),
        listing(&s.path("back/data")),
        "{}",
        said(&out)
    );
    for f in ["big.bin", "more.bin"] {
        assert_eq!(
            b3(&s.path(&format!("back/data/{f}"))),
            b3(&src.join(f)),
            "{f}"
        );
    }
    let flipped = proxy.flipped.load(std::sync::atomic::Ordering::Relaxed);
    assert!(flipped > 1000, "only {flipped} datagrams damaged");
}

/// A QUIC node that is not there fails as fast as TCP: a closed UDP port
/// (ICMP port unreachable, as a node started with --no-quic has) is
/// "refused" at once, and a port where nothing ever answers (a silent UDP
/// socket: a host that drops the packets) after --connect-timeout, with no
/// retry; neither says "raise --timeout", both name --transport tcp.
#[test]
fn a_quic_node_that_is_not_there_fails_fast() {
    let s = Scratch::new();
    write_file(&s.path("src/f"), 1000, 1);
    let closed = Node::start(&s.path("node"), &s.path("config"), &["--open", "--no-quic"]);
    let started = Instant::now();
    let mut c = quic(&s, &["push"]);
    c.arg(s.path("src/f")).arg(closed.url("x/"));
    let out = run(c, T);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(10), "{}", said(&out));
    assert!(took < Duration::from_secs(3), "closed port: {took:?}");
    let err = said(&out);
    assert!(err.contains("UDP port is closed"), "{err}");
    assert!(
        err.contains("--transport tcp") && !err.contains("raise --timeout"),
        "{err}"
    );

    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let started = Instant::now();
    let mut c = quic(&s, &["push", "--connect-timeout", "2"]);
    c.arg(s.path("src/f")).arg(format!("haul://{addr}/x"));
    let out = run(c, T);
    let took = started.elapsed();
    // rsync's "timeout waiting for daemon connection".
    assert_eq!(out.status.code(), Some(35), "{}", said(&out));
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "nothing answers: {took:?}"
    );
    let err = said(&out);
    assert!(
        err.contains("no answer from") && err.contains("within 2s"),
        "{err}"
    );
    assert!(
        err.contains("--transport tcp") && !err.contains("raise --timeout"),
        "{err}"
    );
    assert!(!err.contains("retry 1/"), "not retried: {err}");
    drop(silent);
}

/// A node killed (-9) mid-push and started again on its address and key
/// ends the client's old QUIC connection within a round trip (a stateless
/// reset from a key derived from the node's identity), so the push resumes
/// at once rather than after its 60 s idle limit (TCP gets a reset too).
#[test]
fn a_restarted_node_ends_the_old_quic_connection_at_once() {
    let s = Scratch::new();
    let size = 24u64 << 20;
    write_file(&s.path("src/file.bin"), size, 4);
    let mut node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let addr = node.addr.clone();
    let mut c = quic(
        &s,
        &["push", "-j", "1", "--bwlimit", "4M", "--timeout", "60"],
    );
    c.arg(s.path("src/file.bin")).arg(node.url(""));
    let pushing = std::thread::spawn(move || run(c, T));
    let partial = || crate::resume::partial_bytes(&s.path("node"));
    wait_for(T, "partial data", || partial() >= 4 << 20);
    node.kill9();
    let restarted = Node::start_on(&s.path("node"), &s.path("config"), &addr, &["--open"]);
    let since = Instant::now();
    let out = pushing.join().expect("push thread");
    let took = since.elapsed();
    eprintln!("restarted: the push ended {took:?} later");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(b3(&s.path("node/file.bin")), b3(&s.path("src/file.bin")));
    // What was left (at most 20 MiB at 4 MB/s) and a retry's backoff; the
    // old connection's idle limit alone would be 60 s.
    assert!(took < Duration::from_secs(30), "resumed after {took:?}");
    drop(restarted);
}
