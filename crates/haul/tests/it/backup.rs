//! rsync's `-b`, `--backup-dir` and `--suffix`: what a transfer replaces
//! or `--delete` removes is kept — beside it with `~`, or under the backup
//! directory — for a local copy, a pull from a node, a push and a fan-out,
//! landing as `rsync -b` lands on the same trees; backups are never deleted
//! by a later `--delete`; a backup directory that leads out of the root (a peer's
//! `..`, a symlink at the node) keeps nothing outside and replaces nothing
//! (real `haul serve` nodes on 127.0.0.1).

use std::path::Path;
use std::time::{Duration, SystemTime};

use haul_proto::{Message, Request};

use crate::harness::*;
use crate::raw::Raw;

const T: Duration = Duration::from_secs(60);

fn write(path: &Path, text: &str, age_secs: u64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    let when = SystemTime::now() - Duration::from_secs(age_secs);
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(when)
        .unwrap();
}

/// SRC holds new versions of `a` and `sub/b`, and `c`.
fn source(src: &Path) {
    write(&src.join("a"), "a v2", 10);
    write(&src.join("sub/b"), "b v2", 10);
    write(&src.join("c"), "c", 10);
    write(&src.join("l"), "l as a file", 10);
}

/// DEST holds the old `a` and `sub/b`, a symlink `l` SRC has as a file,
/// and `gone`, which SRC does not have.
fn dest(dest: &Path) {
    write(&dest.join("a"), "a v1", 1000);
    write(&dest.join("sub/b"), "b v1", 1000);
    write(&dest.join("gone"), "gone", 1000);
    std::os::unix::fs::symlink("a", dest.join("l")).unwrap();
}

/// Each file and symlink under `root` with its content (or target), sorted.
fn contents(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if rel == ".haul" {
                continue;
            } else if meta.is_dir() {
                dirs.push(path);
            } else if meta.is_symlink() {
                out.push(format!(
                    "{rel} -> {}",
                    std::fs::read_link(&path).unwrap().display()
                ));
            } else {
                out.push(format!(
                    "{rel}: {}",
                    std::fs::read_to_string(&path).unwrap()
                ));
            }
        }
    }
    out.sort();
    out
}

fn rsync(args: &[&str], src: &Path, dest: &Path) {
    let from = format!("{}/", src.display());
    crate::harness::rsync(args, &[Path::new(&from)], dest);
}

#[test]
fn b_keeps_what_a_local_copy_replaces_or_deletes_as_rsync_does() {
    let s = Scratch::new();
    let src = s.path("src");
    source(&src);
    for (name, flags) in [
        ("beside", &["-b", "--delete"][..]),
        ("dir", &["--backup-dir", "old", "--delete"][..]),
        ("suffix", &["-b", "--suffix", ".bak"][..]),
    ] {
        let (ours, theirs) = (
            s.path(&format!("haul-{name}")),
            s.path(&format!("rsync-{name}")),
        );
        dest(&ours);
        dest(&theirs);
        let mut rsync_flags = vec!["-a"];
        rsync_flags.extend(flags.iter().filter(|f| **f != "--backup-dir"));
        if flags.contains(&"--backup-dir") {
            // rsync's --backup-dir wants -b; haul's implies it.
            rsync_flags = vec!["-a", "-b", "--backup-dir", "old", "--delete"];
        }
        rsync(&rsync_flags, &src, &theirs);
        let mut c = haul(&s.path("config"));
        c.arg("pull")
            .args(flags)
            .arg(format!("{}/", src.display()))
            .arg(&ours);
        ok(&run(c, T));
        assert_eq!(contents(&ours), contents(&theirs), "{name}");
    }
    let beside = contents(&s.path("haul-beside"));
    assert!(beside.contains(&"a~: a v1".to_owned()), "{beside:?}");
    assert!(beside.contains(&"gone~: gone".to_owned()), "{beside:?}");
    assert!(beside.contains(&"l~ -> a".to_owned()), "{beside:?}");
    let dir = contents(&s.path("haul-dir"));
    assert!(dir.contains(&"old/sub/b: b v1".to_owned()), "{dir:?}");

    // Again with --delete: the backups stay, and are not backed up again.
    let mut c = haul(&s.path("config"));
    c.args(["pull", "-b", "--delete"])
        .arg(format!("{}/", src.display()))
        .arg(s.path("haul-beside"));
    ok(&run(c, T));
    assert_eq!(contents(&s.path("haul-beside")), beside);
}

/// A fan-out to two nodes (the first relays to the second): each node
/// keeps what the push replaces or `--delete` removes there, as `rsync -b`
/// does on the same tree, with `-b` and with `--backup-dir`.
#[test]
fn b_keeps_what_a_fan_out_replaces_or_deletes_on_every_node() {
    let s = Scratch::new();
    let src = s.path("src");
    source(&src);
    let from = format!("{}/", src.display());
    let nodes: Vec<Node> = ["n1", "n2"]
        .iter()
        .map(|n| Node::start(&s.path(n), &s.path("config"), &["--open"]))
        .collect();
    for (name, flags, rsync_flags) in [
        ("beside", &["-b"][..], &["-a", "-b", "--delete"][..]),
        (
            "dir",
            &["--backup-dir", "old"][..],
            &["-a", "-b", "--backup-dir", "old", "--delete"][..],
        ),
    ] {
        let theirs = s.path(&format!("rsync-{name}"));
        dest(&theirs);
        rsync(rsync_flags, &src, &theirs);
        for n in ["n1", "n2"] {
            dest(&s.path(&format!("{n}/{name}")));
        }
        let mut c = haul(&s.path("config"));
        c.arg("push").args(flags).args(["--delete", &from]);
        for node in &nodes {
            c.arg(node.url(name));
        }
        ok(&run(c, T));
        for n in ["n1", "n2"] {
            assert_eq!(
                contents(&s.path(&format!("{n}/{name}"))),
                contents(&theirs),
                "{name} on {n}"
            );
        }
    }
    let beside = contents(&s.path("n2/beside"));
    assert!(beside.contains(&"a~: a v1".to_owned()), "{beside:?}");
    assert!(beside.contains(&"gone~: gone".to_owned()), "{beside:?}");
}

#[test]
fn b_keeps_what_a_push_or_a_pull_replaces_beneath_the_root() {
    let s = Scratch::new();
    let src = s.path("src");
    source(&src);
    dest(&s.path("node/in"));
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let from = format!("{}/", src.display());
    let mut c = haul(&s.path("config"));
    c.args([
        "push",
        "--plaintext",
        "--backup-dir",
        "old",
        "--delete",
        &from,
    ])
    .arg(node.url("in"));
    ok(&run(c, T));
    let there = contents(&s.path("node/in"));
    for kept in [
        "old/a: a v1",
        "old/sub/b: b v1",
        "old/gone: gone",
        "old/l -> a",
    ] {
        assert!(there.contains(&kept.to_owned()), "{kept}: {there:?}");
    }
    assert!(there.contains(&"a: a v2".to_owned()), "{there:?}");
    assert!(!there.iter().any(|l| l.starts_with("gone")), "{there:?}");

    // A pull from the node keeps what it replaces beside it.
    write(&s.path("back/a"), "a v0", 2000);
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--plaintext", "-b"])
        .arg(node.url("in/a"))
        .arg(s.path("back/a"));
    ok(&run(c, T));
    assert_eq!(
        contents(&s.path("back")),
        vec!["a: a v2".to_owned(), "a~: a v0".into()]
    );
}

#[test]
fn a_backup_dir_that_leads_out_of_the_root_keeps_and_replaces_nothing() {
    let s = Scratch::new();
    let outside = s.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    write(&s.path("node/in/a"), "a v1", 1000);
    std::os::unix::fs::symlink(&outside, s.path("node/in/old")).unwrap();
    write(&s.path("src/a"), "a v2", 10);
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    // The node's backup directory is a symlink out of its root: the file
    // fails, is not replaced, and nothing lands outside.
    let mut c = haul(&s.path("config"));
    c.args(["push", "--plaintext", "--backup-dir", "old"])
        .arg(format!("{}/", s.path("src").display()))
        .arg(node.url("in"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(23), "{}", said(&out));
    assert_eq!(
        std::fs::read_to_string(s.path("node/in/a")).unwrap(),
        "a v1"
    );
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);

    // With -b, a directory in the way of a file is never emptied to make
    // room (what it holds would be lost): the file fails, saying so.
    write(&s.path("src2/d"), "d is a file here", 10);
    write(&s.path("dst2/d/inner"), "kept", 1000);
    let mut c = haul(&s.path("config"));
    c.args(["pull", "-b", "--delete"])
        .arg(format!("{}/", s.path("src2").display()))
        .arg(s.path("dst2"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(23), "{}", said(&out));
    assert_eq!(
        std::fs::read_to_string(s.path("dst2/d/inner")).unwrap(),
        "kept"
    );

    // A peer naming a backup directory above the root is refused.
    for dir in ["../x", "/tmp", ".haul"] {
        let mut raw = Raw::connect(&node.addr);
        raw.send(&Message::Hello {
            version: haul_proto::PROTOCOL_VERSION,
            token: String::new(),
            request: Request::Prune {
                dest: "in".into(),
                backup: Some(haul_proto::Backup {
                    dir: dir.into(),
                    suffix: String::new(),
                }),
            },
        });
        let answer = raw.recv();
        assert!(
            !matches!(answer, Some(Message::Welcome { .. })),
            "{dir}: {answer:?}"
        );
    }
    // As is a flag that would: said before anything runs.
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--backup-dir", "../up"])
        .arg(format!("{}/", s.path("src").display()))
        .arg(s.path("local"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("--backup-dir"), "{}", said(&out));
}
