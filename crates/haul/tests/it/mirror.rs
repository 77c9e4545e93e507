//! `--delete` (mirror) for pulls from a real node and local copies: what
//! DEST holds under the source's top and the source does not have goes,
//! after everything verified; nothing goes when anything failed; excluded
//! files, DEST's other entries and haul's state stay; a DEST that is a
//! symlink or holds `..` is refused; `--dry-run` shows it all first.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::dry_run::state;
use crate::harness::*;

const T: Duration = Duration::from_secs(120);

fn events(out: &Output, kind: &str) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == kind)
        .filter(|v| kind != "dry_run" || v["action"] == "delete")
        .map(|v| v["path"].as_str().unwrap_or_default().to_owned())
        .collect();
    v.sort();
    v
}

/// DEST with an earlier copy of `data` plus what the source no longer has.
fn stale_dest(dst: &Path) {
    write_file(&dst.join("data/a.bin"), 3000, 1);
    write_file(&dst.join("data/old.txt"), 10, 2);
    write_file(&dst.join("data/gone/x.txt"), 10, 3);
    write_file(&dst.join("data/keep.log"), 10, 4);
    write_file(&dst.join("other.txt"), 10, 5);
}

fn pull(config: &Path, args: &[&str]) -> Output {
    let mut c = haul(config);
    c.args(["--json", "pull"]).args(args);
    run(c, T)
}

#[test]
fn delete_mirrors_a_node_pull_and_a_local_copy() {
    let s = Scratch::new();
    write_file(&s.path("node/data/a.bin"), 3000, 1);
    write_file(&s.path("node/data/sub/b.txt"), 50, 6);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let dst = s.path("dst");
    stale_dest(&dst);
    let url = node.url("data");
    let d = dst.to_str().unwrap();
    let gone = ["data/gone", "data/gone/x.txt", "data/old.txt"];

    // The dry run shows the deletions and changes nothing.
    let before = state(&dst);
    let out = pull(
        &s.path("config"),
        &[&url, d, "--delete", "-n", "--exclude", "*.log"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(events(&out, "dry_run"), gone);
    assert_eq!(state(&dst), before);

    let out = pull(
        &s.path("config"),
        &[&url, d, "--delete", "--exclude", "*.log"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(events(&out, "deleted"), gone);
    assert_eq!(summary(&out)["deleted"], 3);
    let mut names: Vec<String> = listing(&dst)
        .into_iter()
        .map(|l| l.split(' ').next().unwrap().to_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "data/",
            "data/a.bin",
            "data/keep.log",
            "data/sub/",
            "data/sub/b.txt",
            "other.txt"
        ]
    );

    // A local copy mirrors the same way (contents of src/ into DEST).
    let copy = s.path("copy");
    write_file(&copy.join("stale.bin"), 10, 7);
    let out = pull(
        &s.path("config"),
        &[
            &format!("{}/", s.path("node/data").display()),
            copy.to_str().unwrap(),
            "--delete",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(events(&out, "deleted"), ["stale.bin"]);
    assert_eq!(listing(&copy), listing(&s.path("node/data")));
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn a_failure_anywhere_deletes_nothing() {
    let s = Scratch::new();
    write_file(&s.path("node/data/a.bin"), 3000, 1);
    write_file(&s.path("node/data/b.bin"), 3000, 2);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let dst = s.path("dst");
    stale_dest(&dst);
    // A non-empty directory where the source has a file, that cannot be
    // removed to make room (--delete would replace it): that file fails.
    std::fs::remove_file(dst.join("data/a.bin")).unwrap();
    write_file(&dst.join("data/a.bin/inside"), 1, 9);
    let _stuck = Immutable::set(&dst.join("data/a.bin/inside"));
    let before = state(&dst);
    let out = pull(
        &s.path("config"),
        &[&node.url("data"), dst.to_str().unwrap(), "--delete"],
    );
    assert_eq!(out.status.code(), Some(23), "{}", stderr(&out));
    assert!(events(&out, "deleted").is_empty());
    let warned = String::from_utf8_lossy(&out.stdout);
    assert!(
        warned.contains("--delete: nothing deleted, because 1 entry failed"),
        "{warned}"
    );
    for kept in ["data/old.txt", "data/gone/x.txt", "data/keep.log"] {
        assert!(dst.join(kept).exists(), "{kept} was deleted");
    }
    // b.bin arrived: the rest of the transfer went on.
    assert!(dst.join("data/b.bin").exists());
    assert_ne!(state(&dst), before);
}

#[test]
fn delete_refuses_a_symlinked_dest_or_one_with_dotdot() {
    let s = Scratch::new();
    write_file(&s.path("src/f"), 10, 1);
    std::fs::create_dir_all(s.path("real")).unwrap();
    std::os::unix::fs::symlink(s.path("real"), s.path("link")).unwrap();
    let src = format!("{}/", s.path("src").display());
    for dest in [
        s.path("link").display().to_string(),
        format!("{}/real/../real", s.dir.path().display()),
    ] {
        for extra in [&[][..], &["-n"][..]] {
            let mut args = vec![src.as_str(), dest.as_str(), "--delete"];
            args.extend_from_slice(extra);
            let out = pull(&s.path("config"), &args);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{dest} {extra:?}: {}",
                stderr(&out)
            );
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("--delete refuses DEST"), "{text}");
        }
    }
    assert_eq!(std::fs::read_dir(s.path("real")).unwrap().count(), 0);
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn push_delete_mirrors_onto_a_node_and_deletes_nothing_after_a_failure() {
    let s = Scratch::new();
    write_file(&s.path("src/data/a.bin"), 3000, 1);
    write_file(&s.path("src/data/sub/b.txt"), 50, 2);
    stale_dest(&s.path("node/in"));
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let push = |extra: &[&str]| {
        let mut c = haul(&s.path("config"));
        c.args(["--json", "push", "--delete"])
            .arg(s.path("src/data"))
            .arg(node.url("in"))
            .args(extra);
        run(c, T)
    };
    let gone = ["data/gone", "data/gone/x.txt", "data/old.txt"];
    // The dry run lists the node's deletions and changes nothing.
    let before = state(&s.path("node"));
    let out = push(&["-n", "--exclude", "*.log"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(events(&out, "dry_run"), gone);
    assert_eq!(state(&s.path("node")), before);

    // A failure (a non-empty directory where a file goes, that cannot be
    // removed to make room): nothing deleted.
    std::fs::remove_file(s.path("node/in/data/a.bin")).unwrap();
    write_file(&s.path("node/in/data/a.bin/inside"), 1, 9);
    let stuck = Immutable::set(&s.path("node/in/data/a.bin/inside"));
    let out = push(&["--exclude", "*.log"]);
    assert_eq!(out.status.code(), Some(23), "{}", stderr(&out));
    assert!(events(&out, "deleted").is_empty());
    assert!(s.path("node/in/data/old.txt").exists());
    drop(stuck);

    // Fixed: the node now mirrors the source, the excluded log and what is
    // beside DEST/data stay, and so does the node's state.
    std::fs::remove_dir_all(s.path("node/in/data/a.bin")).unwrap();
    let out = push(&["--exclude", "*.log"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(events(&out, "deleted"), gone);
    assert_eq!(summary(&out)["deleted"], 3);
    let mut names: Vec<String> = listing(&s.path("node/in"))
        .into_iter()
        .map(|l| l.split(' ').next().unwrap().to_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "data/",
            "data/a.bin",
            "data/keep.log",
            "data/sub/",
            "data/sub/b.txt",
            "other.txt"
        ]
    );
    assert!(s.path("node/.haul").exists());
}
