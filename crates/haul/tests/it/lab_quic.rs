//! QUIC through the lab (root only): pushes and pulls complete, verified,
//! through loss, corruption, reordering, duplication and a 1 s delay, a
//! link pulled for 20 s and plugged back, and a node killed mid-transfer
//! and started again. Rates are the benchmark's
//! (`docs/BENCHMARKS.md`); this checks what must hold on any machine.

use std::process::Command;
use std::time::Duration;

use haul_lab::{Dir, Lab};

use crate::harness::{b3, run, said, wait_for, write_file, Node, Scratch, BIN};

const LIMIT: Duration = Duration::from_secs(180);

fn root() -> crate::harness::LabTurn {
    crate::harness::lab_root("lab QUIC")
}

/// A two-host lab on `link` with an open node on h2 (its root `node` and
/// config `cfg` in `s`), listening on port 7878.
fn lab_with_node(link: &str, seed: u64, s: &Scratch) -> (Lab, Node) {
    let lab = Lab::builder()
        .hosts(2)
        .link(link)
        .seed(seed)
        .start()
        .expect("lab");
    let node = node_on_h2(&lab, s);
    (lab, node)
}

/// An open node on the lab's h2 (again, after a kill: the same root and key).
fn node_on_h2(lab: &Lab, s: &Scratch) -> Node {
    let host = lab.host(2);
    Node::spawn(
        host.command(BIN),
        &s.path("node"),
        &s.path("cfg"),
        &format!("{}:7878", host.addr()),
        &["--open"],
    )
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn lab_quic_completes_through_bad_links_with_nothing_damaged() {
    let _turn = root();
    let s = Scratch::new();
    write_file(&s.path("src/a.bin"), 6 << 20, 11);
    write_file(&s.path("src/small"), 5000, 12);
    let (lab, mut node) = lab_with_node("rate 100mbit delay 10ms", 5, &s);
    let haul = |args: &[&str]| {
        let mut cmd: Command = lab.host(1).command(BIN);
        cmd.env("HAUL_CONFIG_DIR", s.path("client"))
            .args(args)
            .args(["--transport", "quic", "--json", "--timeout", "20"]);
        cmd
    };
    let want = b3(&s.path("src/a.bin"));
    for (i, impair) in [
        "loss 30%",
        "loss 50%",
        "corrupt 50%",
        "reorder 25% 50%",
        "reorder 80% 50%",
        "duplicate 50%",
    ]
    .iter()
    .enumerate()
    {
        // On the data's way (the sender's egress), as the seed's benchmark
        // impaired it; acknowledgements come back over a clean link.
        let (bad, clean) = (
            format!("rate 100mbit delay 10ms {impair}"),
            "rate 100mbit delay 10ms",
        );
        lab.set_profile(1, Dir::Egress, &bad).expect("profile");
        lab.set_profile(2, Dir::Egress, clean).expect("profile");
        let dest = format!("d{i}");
        let mut push = haul(&["push"]);
        push.arg(s.path("src")).arg(node.url(&dest));
        let t0 = std::time::Instant::now();
        let out = run(push, LIMIT);
        eprintln!("{impair}: push {:?}", t0.elapsed());
        assert!(out.status.success(), "push, {impair}: {}", said(&out));
        assert_eq!(
            b3(&s.path(&format!("node/{dest}/src/a.bin"))),
            want,
            "{impair}"
        );
        lab.set_profile(1, Dir::Egress, clean).expect("profile");
        lab.set_profile(2, Dir::Egress, &bad).expect("profile");
        let mut pull = haul(&["pull"]);
        pull.arg(node.url(&format!("{dest}/src")))
            .arg(s.path(&format!("back{i}")));
        let t0 = std::time::Instant::now();
        let out = run(pull, LIMIT);
        eprintln!("{impair}: pull {:?}", t0.elapsed());
        assert!(out.status.success(), "pull, {impair}: {}", said(&out));
        assert_eq!(b3(&s.path(&format!("back{i}/src/a.bin"))), want, "{impair}");
    }
    // A second of delay each way.
    lab.set_profile(1, Dir::Both, "rate 100mbit delay 1000ms")
        .expect("profile");
    lab.set_profile(2, Dir::Both, "rate 100mbit delay 10ms")
        .expect("profile");
    let mut push = haul(&["push"]);
    push.arg(s.path("src/small")).arg(node.url("far/"));
    let t0 = std::time::Instant::now();
    let out = run(push, LIMIT);
    eprintln!("1 s: push {:?}", t0.elapsed());
    assert!(out.status.success(), "1 s delay: {}", said(&out));
    assert!(s.path("node/far/small").exists());
    // A link pulled for 20 s mid-file and plugged back: the connection
    // times out (--timeout 20), the retry resumes from what was verified.
    lab.set_profile(1, Dir::Both, "rate 20mbit delay 10ms")
        .expect("profile");
    // A chunk verified on the node: its resume log (`.state`, a 64-byte
    // header and 36 bytes a chunk) holds a record.
    let staged = || {
        std::fs::read_dir(s.path("node/.haul/partial"))
            .map(|d| {
                d.flatten().any(|e| {
                    e.file_name().to_string_lossy().ends_with(".state")
                        && e.metadata().is_ok_and(|m| m.len() >= 64 + 36)
                })
            })
            .unwrap_or(false)
    };
    let pushing = {
        let mut cmd = haul(&["push"]);
        cmd.arg(s.path("src/a.bin")).arg(node.url("cut/"));
        std::thread::spawn(move || run(cmd, LIMIT))
    };
    wait_for(LIMIT, "a verified chunk", staged);
    lab.link_down(1).expect("link down");
    std::thread::sleep(Duration::from_secs(20));
    lab.link_up(1).expect("link up");
    let t0 = std::time::Instant::now();
    let out = pushing.join().expect("push thread");
    eprintln!("cut: rest {:?}", t0.elapsed());
    assert!(out.status.success(), "link pulled: {}", said(&out));
    assert_eq!(b3(&s.path("node/cut/a.bin")), want);
    // The node killed (-9) mid-file and started again on the same root
    // and key: the client's retry finds it and resumes.
    let pushing = {
        let mut cmd = haul(&["push"]);
        cmd.arg(s.path("src/a.bin")).arg(node.url("killed/"));
        std::thread::spawn(move || run(cmd, LIMIT))
    };
    wait_for(LIMIT, "a verified chunk", staged);
    node.kill9();
    let node = node_on_h2(&lab, &s);
    let t0 = std::time::Instant::now();
    let out = pushing.join().expect("push thread");
    eprintln!("restarted: rest {:?}", t0.elapsed());
    assert!(out.status.success(), "node restarted: {}", said(&out));
    // The restarted node's stateless reset ended the old connection at
    // once: the rest (under 6 MiB at 20 Mbit/s) did not wait out --timeout.
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "the old connection waited {:?}",
        t0.elapsed()
    );
    assert_eq!(b3(&s.path("node/killed/a.bin")), want);
    // The connection that finished sent only what the node lacked.
    let done = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["event"] == "file_done")
        .expect("file_done event");
    assert!(
        done["sent"].as_u64().unwrap_or(u64::MAX) < 6 << 20,
        "nothing resumed: {done}"
    );
    drop(node);
}

/// A node behind a pulled link (a blackhole: no answer, not even ICMP)
/// fails after --connect-timeout (TCP: each attempt, with backoff between;
/// QUIC: once, nothing answered), never after minutes of handshakes, and
/// the message names the real choices.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn lab_a_blackholed_node_fails_after_the_connect_timeout() {
    let _turn = root();
    let lab = Lab::builder()
        .hosts(2)
        .link("rate 100mbit delay 5ms")
        .start()
        .expect("lab");
    let s = Scratch::new();
    write_file(&s.path("src/f"), 1000, 1);
    lab.link_down(2).expect("link down");
    let url = format!("haul://{}:7878/x/", lab.host(2).addr());
    for (transport, at_most) in [("quic", 5), ("tcp", 9)] {
        let mut cmd: Command = lab.host(1).command(BIN);
        cmd.env("HAUL_CONFIG_DIR", s.path("client"))
            .args(["push", "--json", "--transport", transport])
            .args(["--connect-timeout", "2", "--retries", "1"])
            .arg(s.path("src/f"))
            .arg(&url);
        let started = std::time::Instant::now();
        let out = run(cmd, LIMIT);
        let took = started.elapsed();
        // Nothing answered within --connect-timeout: rsync's 35.
        assert_eq!(out.status.code(), Some(35), "{transport}: {}", said(&out));
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(at_most),
            "{transport}: {took:?}\n{}",
            said(&out)
        );
        let err = said(&out);
        assert!(!err.contains("raise --timeout"), "{transport}: {err}");
        if transport == "quic" {
            assert!(
                err.contains("no answer from") && err.contains("--transport tcp"),
                "{err}"
            );
        }
    }
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn lab_a_push_long_enough_is_remembered_and_the_next_starts_at_its_rate() {
    // 48 MiB over 40 Mbit/s with a 20 ms delay: about 11 s, long enough to
    // be the path's rate (10 s and 16 round trips).
    let _turn = root();
    let s = Scratch::new();
    write_file(&s.path("big/a.bin"), 48 << 20, 21);
    write_file(&s.path("small/b.bin"), 1 << 20, 22);
    let (lab, node) = lab_with_node("rate 40mbit delay 20ms", 6, &s);
    let haul = |args: &[&str]| {
        let mut cmd: Command = lab.host(1).command(BIN);
        cmd.env("HAUL_CONFIG_DIR", s.path("client"))
            .env("XDG_CACHE_HOME", s.path("client/cache"))
            .args(args)
            .args(["--transport", "quic", "--timeout", "20"]);
        cmd
    };
    let mut push = haul(&["push"]);
    push.arg(s.path("big")).arg(node.url("in"));
    let out = run(push, LIMIT);
    assert!(out.status.success(), "{}", said(&out));
    let paths = std::fs::read_to_string(s.path("client/cache/haul/paths")).unwrap_or_default();
    let line: Vec<&str> = paths.split_whitespace().collect();
    assert_eq!(line.len(), 8, "{paths}");
    assert_eq!(line[..3], ["v1", "push", node.addr.as_str()], "{paths}");
    // Its own controller's estimate: about the link's 5 MB/s.
    let rate: f64 = line[3].parse().expect("rate");
    assert!(rate > 3.5e6 && rate < 5.6e6, "{paths}");
    let rtt: u64 = line[5].parse().expect("rtt");
    assert!((40..=80).contains(&rtt), "{paths}");

    let mut push = haul(&["-v", "push"]);
    push.arg(s.path("small")).arg(node.url("in"));
    let out = run(push, LIMIT);
    let said_ = said(&out);
    assert!(out.status.success(), "{said_}");
    assert!(
        said_.contains("push: starting at") && said_.contains("the rate it reached"),
        "{said_}"
    );
    assert_eq!(
        b3(&s.path("small/b.bin")),
        b3(&s.path("node/in/small/b.bin"))
    );
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn lab_auto_moves_to_quic_on_a_lossy_link() {
    // 10 % loss at a 20 ms round trip: Linux TCP moves a few hundred KB/s
    // a connection, QUIC most of the link. `auto` (the default) measures
    // both for the first seconds, then the TCP connections hand their files
    // back and everything ends over QUIC, verified.
    let _turn = root();
    let s = Scratch::new();
    for i in 0..8 {
        write_file(&s.path(&format!("set/f{i}.bin")), 8 << 20, 40 + i);
    }
    let (lab, node) = lab_with_node("rate 100mbit delay 10ms loss 10%", 9, &s);
    let mut cmd: Command = lab.host(1).command(BIN);
    cmd.env("HAUL_CONFIG_DIR", s.path("client"))
        .env("XDG_CACHE_HOME", s.path("client/cache"))
        .args(["-v", "push", "--json", "-j", "4", "--timeout", "20"])
        .args(["--transport", "auto"])
        .arg(s.path("set"))
        .arg(node.url("in"));
    let started = std::time::Instant::now();
    let out = run(cmd, LIMIT);
    assert!(out.status.success(), "{}", said(&out));
    let took = started.elapsed();
    let sum = crate::harness::summary(&out);
    assert_eq!(sum["transport"]["name"], "quic", "{}", said(&out));
    for i in 0..8 {
        let f = format!("f{i}.bin");
        assert_eq!(
            b3(&s.path("set").join(&f)),
            b3(&s.path("node/in/set").join(&f))
        );
    }
    // 64 MiB at most of 100 Mbit/s after a trial of at most 3 s: well
    // under what TCP alone takes (minutes).
    assert!(took < Duration::from_secs(45), "{took:?}\n{}", said(&out));
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn lab_auto_leaves_a_dropped_udp_port_for_tcp_within_two_seconds() {
    // A 20 ms round trip (no short path) and a firewall on h1 dropping UDP
    // to the node: the first connection does not wait for QUIC, and the
    // choice is TCP once QUIC stayed silent 1.5 s.
    let _turn = root();
    let s = Scratch::new();
    write_file(&s.path("small"), 100_000, 50);
    write_file(&s.path("big.bin"), 12 << 20, 51);
    let (lab, node) = lab_with_node("rate 100mbit delay 10ms", 10, &s);
    let mut nft: Command = lab.host(1).command("nft");
    nft.args([
        "add table ip haul_lab_auto ; add chain ip haul_lab_auto out { type filter hook output priority 0 ; } ; add rule ip haul_lab_auto out udp dport 7878 drop",
    ]);
    assert!(nft.status().expect("nft").success());
    let haul = |extra: &[&str], src: &str| {
        let mut cmd: Command = lab.host(1).command(BIN);
        cmd.env("HAUL_CONFIG_DIR", s.path("client"))
            .env("XDG_CACHE_HOME", s.path("client/cache"))
            .args([
                "-v",
                "push",
                "--json",
                "--transport",
                "auto",
                "--timeout",
                "20",
            ])
            .args(extra)
            .arg(s.path(src))
            .arg(node.url("in/"));
        cmd
    };
    let started = std::time::Instant::now();
    let out = run(haul(&[], "small"), LIMIT);
    assert!(out.status.success(), "{}", said(&out));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}\n{}",
        started.elapsed(),
        said(&out)
    );
    // 12 MiB at 3 MB/s: long enough for the choice.
    let out = run(haul(&["--max-rate", "3M"], "big.bin"), LIMIT);
    assert!(out.status.success(), "{}", said(&out));
    let sum = crate::harness::summary(&out);
    assert_eq!(sum["transport"]["name"], "tcp", "{}", said(&out));
    let why = sum["transport"]["why"].as_str().unwrap_or_default();
    assert!(why.contains("QUIC did not answer within 1.5 s"), "{why}");
    assert_eq!(b3(&s.path("big.bin")), b3(&s.path("node/in/big.bin")));
}
