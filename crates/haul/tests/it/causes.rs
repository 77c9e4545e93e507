//! One cause, one line: entries that fail for the same reason (a
//! directory the receiver cannot write) are shown once, and the summary
//! says how many entries that cause stopped, never a line per entry;
//! `--json` keeps an event per entry and adds the grouped causes; no text
//! names haul's own `.haul` directory.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::harness::*;

const T: Duration = Duration::from_secs(120);

/// Files in the tree sent into a directory that cannot be written.
const FILES: u64 = 1000;

/// `src/tree`: [`FILES`] small files and one staged in `.haul/partial`
/// (over 4 MiB), so both ways of receiving a file meet the refusal.
fn tree(s: &Scratch) {
    for i in 0..FILES {
        write_file(&s.path(&format!("src/tree/f{i}")), 10, i);
    }
    write_file(&s.path("src/tree/big.bin"), 6 << 20, 7);
}

/// The lines a run printed on stderr.
fn lines(out: &Output) -> Vec<String> {
    stderr(out).lines().map(str::to_owned).collect()
}

/// Every line of both streams names the user's paths only.
fn no_internal_paths(out: &Output) {
    for text in [
        stderr(out),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ] {
        assert!(!text.contains(".haul"), "{text}");
    }
}

fn push(s: &Scratch, node: &Node, flags: &[&str]) -> Output {
    let mut c = haul(&s.path("config"));
    c.args(flags)
        .arg("push")
        .arg(s.path("src/tree"))
        .arg(node.url("in/sub"));
    run(c, T)
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn a_push_into_a_directory_the_node_cannot_write_says_so_once() {
    let s = Scratch::new();
    tree(&s);
    std::fs::create_dir_all(s.path("node/in/sub")).unwrap();
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let _stuck = Immutable::set(&s.path("node/in/sub"));
    let entries = FILES + 2; // the files, big.bin and tree itself

    let out = push(&s, &node, &[]);
    assert_eq!(out.status.code(), Some(23), "{}", stderr(&out));
    let shown = lines(&out);
    assert!(shown.len() <= 4, "{} lines:\n{}", shown.len(), stderr(&out));
    let expect =
        format!("  failed: {entries} entries under tree: receiver: cannot write in in/sub: ");
    assert!(
        shown.iter().any(|l| l.starts_with(&expect)),
        "no {expect:?} in\n{}",
        stderr(&out)
    );
    assert!(
        shown
            .iter()
            .any(|l| l.starts_with("FAILED: ") && l.contains(&format!("{entries} failed"))),
        "{}",
        stderr(&out)
    );
    no_internal_paths(&out);

    // Quiet: the first entry, then how many more.
    let out = push(&s, &node, &["-q"]);
    assert_eq!(out.status.code(), Some(23), "{}", stderr(&out));
    let shown = lines(&out);
    assert!(shown.len() <= 3, "{} lines:\n{}", shown.len(), stderr(&out));
    let more = format!(
        "error: {} more entries under tree failed the same way",
        entries - 1
    );
    assert!(
        shown.iter().any(|l| l.starts_with(&more)),
        "{}",
        stderr(&out)
    );

    // --json: an event per entry for scripts, and the causes grouped.
    let out = push(&s, &node, &["--json"]);
    assert_eq!(out.status.code(), Some(23), "{}", said(&out));
    let errors = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "file_error")
        .count() as u64;
    assert_eq!(errors, entries);
    let sum = summary(&out);
    assert_eq!(sum["failed"], entries);
    let causes = sum["causes"].as_array().expect("causes");
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0]["count"], entries);
    assert_eq!(causes[0]["under"], "tree");
    no_internal_paths(&out);
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn a_local_copy_into_a_directory_it_cannot_write_names_that_directory_once() {
    let s = Scratch::new();
    tree(&s);
    // DEST/tree is there and cannot be written: every file fails, the
    // small ones (made in place) and the big one (staged, then renamed).
    std::fs::create_dir_all(s.path("dst/tree")).unwrap();
    let _stuck = Immutable::set(&s.path("dst/tree"));
    let mut c = haul(&s.path("config"));
    c.arg("pull").arg(s.path("src/tree")).arg(s.path("dst/"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(23), "{}", stderr(&out));
    let shown = lines(&out);
    // A warning or two about tree's own mode and times may come too.
    assert!(shown.len() <= 6, "{} lines:\n{}", shown.len(), stderr(&out));
    let expect = format!("  failed: {} entries under tree: ", FILES + 1);
    assert!(
        shown
            .iter()
            .any(|l| l.starts_with(&expect) && l.contains("cannot write in tree: ")),
        "no {expect:?} in\n{}",
        stderr(&out)
    );
    no_internal_paths(&out);

    // A DEST that cannot be written at all: one line naming it, not the
    // staging directory haul would make in it.
    let ro = s.path("ro");
    std::fs::create_dir_all(&ro).unwrap();
    let _ro = Immutable::set(&ro);
    let mut c = haul(&s.path("config"));
    c.arg("pull").arg(s.path("src/tree")).arg(ro.join(""));
    let out = run(c, T);
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stderr(&out);
    assert!(
        text.contains(&format!("cannot write in {}", path(&ro))),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
    no_internal_paths(&out);
}

fn path(p: &Path) -> String {
    p.canonicalize().unwrap().display().to_string()
}
