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

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn lab_quic_completes_through_bad_links_with_nothing_damaged() {
    let _turn = root();
    let lab = Lab::builder()
        .hosts(2)
        .link("rate 100mbit delay 10ms")
        .seed(5)
        .start()
        .expect("lab");
    let s = Scratch::new();
    write_file(&s.path("src/a.bin"), 6 << 20, 11);
    write_file(&s.path("src/small"), 5000, 12);
    let host = lab.host(2);
    let mut node = Node::spawn(
        host.command(BIN),
        &s.path("node"),
        &s.path("cfg"),
        &format!("{}:7878", host.addr()),
        &["--open"],
    );
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
    let node = Node::spawn(
        host.command(BIN),
        &s.path("node"),
        &s.path("cfg"),
        &format!("{}:7878", host.addr()),
        &["--open"],
    );
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
        assert_eq!(out.status.code(), Some(10), "{transport}: {}", said(&out));
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
