//! A QUIC transfer starts at the rate its path is known to carry: what
//! `$XDG_CACHE_HOME/haul/paths` remembers of the node (the same way), or
//! `--rate-hint`; a pull's hint reaches the node, whose QUIC sender starts
//! there. (A transfer long enough to be remembered runs in the lab:
//! `lab_quic.rs`.)

use std::time::Duration;

use crate::harness::*;

const T: Duration = Duration::from_secs(90);

#[test]
fn a_remembered_path_starts_the_next_push_there_and_only_that_way() {
    let s = Scratch::new();
    write_file(&s.path("small/one"), 1 << 20, 2);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    // What a long push to this node settled at (the lab test
    // `lab_a_push_long_enough_is_remembered_and_the_next_starts_at_its_rate`
    // has a transfer write it).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let paths = s.path("config/cache/haul/paths");
    std::fs::create_dir_all(paths.parent().unwrap()).unwrap();
    let line = format!("v1 push {} 20000000 0.0000 1 0.0000 {now}\n", node.addr);
    std::fs::write(&paths, &line).unwrap();

    let mut c = haul(&s.path("config"));
    c.args(["push", "-v", "--transport", "quic"])
        .arg(s.path("small"))
        .arg(node.url("in"));
    let out = run(c, T);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let said = format!(
        "push: starting at 160.0 Mbit/s with {}, the rate it reached",
        node.addr
    );
    assert!(err.contains(&said), "{err}");
    // A short run leaves the memory as it was.
    assert_eq!(std::fs::read_to_string(&paths).unwrap(), line);
    // The other way knows nothing; `--rate-hint none` uses nothing.
    for extra in [&[][..], &["--rate-hint", "none"][..]] {
        let mut c = haul(&s.path("config"));
        c.args(["pull", "-v", "--transport", "quic"])
            .args(extra)
            .arg(node.url("in/small/one"))
            .arg(s.path("back"));
        let out = run(c, T);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(!err.contains("starting at"), "{extra:?}: {err}");
    }
    let mut c = haul(&s.path("config"));
    c.args(["push", "-v", "--transport", "quic", "--rate-hint", "none"])
        .arg(s.path("small"))
        .arg(node.url("in"));
    let out = run(c, T);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("starting at"), "{err}");
    assert_eq!(b3(&s.path("small/one")), b3(&s.path("back")));
}

#[test]
fn a_pulls_rate_hint_starts_the_nodes_sender() {
    let s = Scratch::new();
    write_file(&s.path("node/data/f"), 6 << 20, 3);
    let log = s.path("node.log");
    let node = Node::start_filtered(
        &s.path("node"),
        &s.path("config"),
        &["--open"],
        &log,
        "info,haul_congestion=debug",
    );
    let mut c = haul(&s.path("config"));
    c.args(["pull", "-v", "--transport", "quic", "--rate-hint", "80mbit"])
        .arg(node.url("data/f"))
        .arg(s.path("back"));
    let out = run(c, T);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("pull: starting at 80.0 Mbit/s (--rate-hint)"),
        "{err}"
    );
    assert_eq!(b3(&s.path("node/data/f")), b3(&s.path("back")));
    drop(node);
    let node_log = std::fs::read_to_string(&log).unwrap();
    let started: Vec<_> = node_log
        .lines()
        .filter(|l| l.contains("starting at the path's hinted rate"))
        .collect();
    // The node's sender's controller took it (each data connection of
    // the pool starts at it: whichever carries the file), at 10 MB/s.
    assert!(!started.is_empty(), "{node_log}");
    for line in started {
        assert!(line.contains("hint=10000000"), "{line}");
    }
}

#[test]
fn a_rate_hint_needs_a_unit_and_over_tcp_says_it_does_nothing() {
    let s = Scratch::new();
    write_file(&s.path("src/a"), 1000, 4);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let mut c = haul(&s.path("config"));
    c.args(["push", "--transport", "quic", "--rate-hint", "200"])
        .arg(s.path("src"))
        .arg(node.url("in"));
    let out = run(c, T);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--rate-hint") && err.contains("200mbit"),
        "{err}"
    );
    let mut c = haul(&s.path("config"));
    c.args(["push", "--transport", "tcp", "--rate-hint", "200mbit"])
        .arg(s.path("src"))
        .arg(node.url("in"));
    let out = run(c, T);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("--rate-hint applies to QUIC"), "{err}");
}
