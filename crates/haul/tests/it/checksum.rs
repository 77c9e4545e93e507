//! `--checksum` against a real node, and `haul check` with a `haul://`
//! side: the node hashes what it holds (`List{sums}`), so a file changed
//! with its size and mtime kept — which the quick check cannot see — is
//! the only one that moves, in a push, a pull, a fan-out and their dry
//! runs; `haul check` finds it without downloading anything.

use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::harness::*;

const T: Duration = Duration::from_secs(120);

/// Paths of the `--json` events of `kind` (dry runs: of `action`).
fn paths(out: &Output, kind: &str, action: Option<&str>) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == kind)
        .filter(|v| action.is_none_or(|a| v["action"] == a))
        .map(|v| v["path"].as_str().unwrap_or_default().to_owned())
        .collect();
    v.sort();
    v
}

fn moved(out: &Output) -> (u64, u64) {
    let sum = summary(out);
    (
        sum["files_ok"].as_u64().unwrap_or(u64::MAX),
        sum["files_skipped"].as_u64().unwrap_or(u64::MAX),
    )
}

#[test]
fn push_and_pull_checksum_move_only_the_file_whose_content_changed() {
    let s = Scratch::new();
    for i in 0..3 {
        write_file(&s.path(&format!("src/data/f{i}.bin")), 3 << 20, i);
    }
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let push = |extra: &[&str]| {
        let mut c = haul(&s.path("config"));
        c.args(["--json", "push"])
            .arg(s.path("src/data"))
            .arg(node.url("in"))
            .args(extra);
        let out = run(c, T);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        out
    };
    assert_eq!(moved(&push(&[])), (3, 0));
    flip_keeping_mtime(&s.path("src/data/f1.bin"), 2_000_000);
    // The quick check cannot see it.
    assert_eq!(moved(&push(&[])), (0, 3));
    assert_ne!(
        b3(&s.path("src/data/f1.bin")),
        b3(&s.path("node/in/data/f1.bin"))
    );
    // A dry run with --checksum names it and changes nothing.
    let out = push(&["-c", "-n"]);
    assert_eq!(paths(&out, "dry_run", Some("send")), ["data/f1.bin"]);
    assert_ne!(
        b3(&s.path("src/data/f1.bin")),
        b3(&s.path("node/in/data/f1.bin"))
    );
    // --checksum sends that file alone.
    let out = push(&["--checksum"]);
    assert_eq!(
        moved(&out),
        (1, 2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(summary(&out)["files"][0]["path"], "data/f1.bin");
    assert_eq!(
        listing(&s.path("src/data")),
        listing(&s.path("node/in/data"))
    );

    // A pull: the local copy changes with its size and mtime kept.
    let pull = |extra: &[&str]| {
        let mut c = haul(&s.path("config"));
        c.args(["--json", "pull"])
            .arg(node.url("in/data"))
            .arg(s.path("dst"))
            .args(extra);
        let out = run(c, T);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        out
    };
    assert_eq!(moved(&pull(&[])), (3, 0));
    flip_keeping_mtime(&s.path("dst/data/f2.bin"), 1_000_000);
    assert_eq!(moved(&pull(&[])), (0, 3));
    let out = pull(&["-c", "-n"]);
    assert_eq!(paths(&out, "dry_run", Some("send")), ["data/f2.bin"]);
    let out = pull(&["-c"]);
    assert_eq!(
        moved(&out),
        (1, 2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        listing(&s.path("node/in/data")),
        listing(&s.path("dst/data"))
    );
}

#[test]
fn check_with_a_node_side_compares_by_the_nodes_own_hashes() {
    let s = Scratch::new();
    write_file(&s.path("local/run/a.bin"), 4 << 20, 1);
    write_file(&s.path("local/run/sub/b.txt"), 100, 2);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let mut c = haul(&s.path("config"));
    c.arg("push").arg(s.path("local/run")).arg(node.url("in"));
    assert_eq!(run(c, T).status.code(), Some(0));
    let check = |a: &str, b: &str| {
        let mut c = haul(&s.path("config"));
        c.args(["--json", "check", a, b]);
        run(c, T)
    };
    let local = s.path("local/run");
    let local = local.to_str().unwrap();
    let remote = node.url("in/run");
    for (a, b) in [(local, remote.as_str()), (remote.as_str(), local)] {
        let out = check(a, b);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(paths(&out, "check_item", None).is_empty());
    }
    // Both sides on nodes (the same node twice).
    let out = check(&remote, &remote);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // The node's copy changes with its size and mtime kept; a file only
    // on the node appears.
    flip_keeping_mtime(&s.path("node/in/run/a.bin"), 3_000_000);
    write_file(&s.path("node/in/run/extra.txt"), 5, 3);
    let out = check(local, &remote);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let items = crate::check::items(&out);
    assert_eq!(
        items,
        [
            ("differs".to_owned(), "a.bin".to_owned()),
            ("only_in_dst".to_owned(), "extra.txt".to_owned())
        ]
    );
    // Filters apply to the node's side too.
    let mut c = haul(&s.path("config"));
    c.args([
        "check",
        local,
        &remote,
        "--exclude",
        "a.bin",
        "--exclude",
        "extra.txt",
    ]);
    assert_eq!(run(c, T).status.code(), Some(0));
}

#[test]
fn fanout_checksum_and_delete_mirror_every_node() {
    let s = Scratch::new();
    for i in 0..3 {
        write_file(&s.path(&format!("src/data/f{i}.bin")), 2 << 20, i);
    }
    let a = Node::start(&s.path("a"), &s.path("config"), &["--open"]);
    let b = Node::start(&s.path("b"), &s.path("config"), &["--open"]);
    let fan = |extra: &[&str]| {
        let mut c = haul(&s.path("config"));
        c.args(["--json", "push"])
            .arg(s.path("src/data"))
            .arg(a.url("in"))
            .arg(b.url("in"))
            .args(extra);
        run(c, T)
    };
    let out = fan(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // f1 changes at the source with its size and mtime kept; b holds a
    // file the source does not have.
    flip_keeping_mtime(&s.path("src/data/f1.bin"), 1_500_000);
    write_file(&s.path("b/in/data/stale.txt"), 10, 9);
    let out = fan(&["-c", "--delete"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(paths(&out, "deleted", None), ["data/stale.txt"]);
    let report: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "fanout")
        .expect("fanout summary");
    // Only f1 left the client (to the nodes it sends to itself): the
    // others were the same on both nodes.
    let sent = report["sent"]["files_ok"].as_u64().unwrap_or(0);
    assert!((1..=2).contains(&sent), "{report}");
    assert_eq!(report["sent"]["files_skipped"], 2, "{report}");
    assert_eq!(report["nodes"][1]["deleted"], 1, "{report}");
    for n in ["a", "b"] {
        assert_eq!(
            listing(&s.path("src/data")),
            listing(&s.path(&format!("{n}/in/data")))
        );
    }
}

/// A single file pushed to a node's root with `-c` or `-n`: the node lists
/// that file (not the contents of a directory of its name), so the second
/// run finds it up to date instead of failing with "exists and is not a
/// directory"; a directory pushed to the root is compared the same way.
#[test]
fn checksum_and_dry_run_pushes_to_a_node_root() {
    let s = Scratch::new();
    write_file(&s.path("src/one.bin"), 5000, 1);
    write_file(&s.path("src/tree/sub/a"), 700, 2);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let push = |src: &str, flag: &str| {
        let mut c = haul(&s.path("config"));
        c.args(["push", "--json", "--token", "t", flag])
            .arg(s.path(src))
            .arg(node.url(""));
        let out = run(c, T);
        assert_eq!(out.status.code(), Some(0), "{src} {flag}: {}", said(&out));
        out
    };
    for src in ["src/one.bin", "src/tree"] {
        push(src, "-c");
        let again = push(src, "-c");
        assert_eq!(summary(&again)["files_skipped"], 1, "{}", said(&again));
        let dry = push(src, "-n");
        let dry = String::from_utf8_lossy(&dry.stdout);
        assert!(dry.contains(r#""action":"up_to_date""#), "{dry}");
        assert!(!dry.contains(r#""action":"send""#), "{dry}");
    }
    assert_eq!(b3(&s.path("node/one.bin")), b3(&s.path("src/one.bin")));
    assert_eq!(
        b3(&s.path("node/tree/sub/a")),
        b3(&s.path("src/tree/sub/a"))
    );
}
