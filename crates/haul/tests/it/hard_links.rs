//! rsync's `-H`: names of one file within a transfer land as links to one
//! inode again, its data sent once — for a push, a pull from a node and a
//! local copy — grouped as `rsync -aH` groups the same tree; a node asked
//! to link outside its root, to a symlink, a directory or its state
//! directory refuses and touches nothing (real `haul serve` nodes on
//! 127.0.0.1, an in-test TCP proxy counting the bytes on the wire).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use haul_proto::{Message, Request};

use crate::harness::*;
use crate::proxy::{plaintext_node_behind, Faults};
use crate::raw::Raw;

const T: Duration = Duration::from_secs(120);
const BIG: u64 = 4 << 20;

/// `src/`: `a` (4 MiB) also named `b` and `sub/c`; `x` also named `y`;
/// `solo` with one name.
fn linked_tree(src: &Path) {
    write_file(&src.join("a"), BIG, 1);
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::hard_link(src.join("a"), src.join("b")).unwrap();
    std::fs::hard_link(src.join("a"), src.join("sub/c")).unwrap();
    write_file(&src.join("x"), 1 << 20, 2);
    std::fs::hard_link(src.join("x"), src.join("y")).unwrap();
    write_file(&src.join("solo"), 1000, 3);
}

/// The files under `root`, grouped by inode: each group's paths, sorted.
fn groups(root: &Path) -> Vec<Vec<String>> {
    let mut by_inode: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() && rel != ".haul" {
                dirs.push(path.clone());
            } else if meta.is_file() {
                by_inode
                    .entry(meta.ino())
                    .or_default()
                    .push(rel.into_owned());
            }
        }
    }
    let mut out: Vec<Vec<String>> = by_inode
        .into_values()
        .map(|mut g| {
            g.sort();
            g
        })
        .collect();
    out.sort();
    out
}

#[test]
fn h_makes_one_files_names_links_again_with_its_data_sent_once() {
    let s = Scratch::new();
    let src = s.path("src");
    linked_tree(&src);
    let from = format!("{}/", src.display());
    let out = std::process::Command::new("rsync")
        .args(["-aH", &from])
        .arg(s.path("rsync"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_text(&out));
    let want = groups(&s.path("rsync"));
    assert_eq!(
        want,
        vec![
            vec!["a".to_owned(), "b".into(), "sub/c".into()],
            vec!["solo".into()],
            vec!["x".into(), "y".into()],
        ]
    );
    let (_node, proxy) = plaintext_node_behind(&s, Faults::default());

    // A push: each inode's data crosses once, and lands linked as rsync's.
    let mut c = haul(&s.path("config"));
    c.args(["push", "--plaintext", "-aH", "--json", &from])
        .arg(proxy.url("in"));
    let out = run(c, T);
    ok(&out);
    let up = proxy.up_bytes.load(Ordering::Relaxed);
    assert!(up < BIG + (2 << 20), "{up} bytes for 5 MiB of data");
    assert_eq!(groups(&s.path("node/in")), want);
    assert_eq!(b3(&s.path("node/in/sub/c")), b3(&src.join("a")));
    assert_eq!(summary(&out)["failed"], 0);

    // Again: every name is up to date, nothing crosses, the links stay.
    let mut c = haul(&s.path("config"));
    c.args(["push", "--plaintext", "-H", &from])
        .arg(proxy.url("in"));
    let before = proxy.up_bytes.load(Ordering::Relaxed);
    ok(&run(c, T));
    assert!(proxy.up_bytes.load(Ordering::Relaxed) - before < 64 << 10);
    assert_eq!(groups(&s.path("node/in")), want);

    // A dry run finds nothing to change; at a fresh DEST, the links to make.
    for (dest, changes) in [("in", 0), ("fresh", 7)] {
        let mut c = haul(&s.path("config"));
        c.args(["push", "--plaintext", "-H", "-n", &from])
            .arg(proxy.url(dest));
        let out = run(c, T);
        ok(&out);
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with("dry run:"))
            .map(str::to_owned)
            .collect();
        assert_eq!(lines.len(), changes, "{dest}: {lines:?}");
    }

    // A pull back from the node: the links again, each inode fetched once.
    let down = proxy.down_bytes.load(Ordering::Relaxed);
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--plaintext", "-H"])
        .arg(proxy.url("in/"))
        .arg(s.path("back"));
    ok(&run(c, T));
    let down = proxy.down_bytes.load(Ordering::Relaxed) - down;
    assert!(down < BIG + (2 << 20), "{down} bytes for 5 MiB of data");
    assert_eq!(groups(&s.path("back")), want);

    // A local copy.
    let mut c = haul(&s.path("config"));
    c.args(["pull", "-H", &from]).arg(s.path("local"));
    ok(&run(c, T));
    assert_eq!(groups(&s.path("local")), want);
    assert_eq!(b3(&s.path("local/y")), b3(&src.join("x")));

    // A name that became a file of its own: kept by --ignore-existing,
    // linked again otherwise, and with -b what it held is kept beside it.
    std::fs::remove_file(s.path("local/y")).unwrap();
    std::fs::write(s.path("local/y"), b"apart").unwrap();
    let mut c = haul(&s.path("config"));
    c.args(["pull", "-H", "--ignore-existing", &from])
        .arg(s.path("local"));
    ok(&run(c, T));
    assert_eq!(std::fs::read(s.path("local/y")).unwrap(), b"apart");
    let mut c = haul(&s.path("config"));
    c.args(["pull", "-H", "-b", &from]).arg(s.path("local"));
    ok(&run(c, T));
    assert_eq!(std::fs::read(s.path("local/y~")).unwrap(), b"apart");
    std::fs::remove_file(s.path("local/y~")).unwrap();
    assert_eq!(groups(&s.path("local")), want);

    // Without -H each name is a file of its own: the checks above can fail.
    let mut c = haul(&s.path("config"));
    c.args(["pull", &from]).arg(s.path("apart"));
    ok(&run(c, T));
    assert_eq!(groups(&s.path("apart")).len(), 6);
}

/// Names of one file in two sources of one push are joined too, as
/// `rsync -aH one two DEST` joins them.
#[test]
fn names_of_one_file_in_two_sources_are_joined() {
    let s = Scratch::new();
    write_file(&s.path("src/one/f"), BIG, 1);
    std::fs::create_dir_all(s.path("src/two")).unwrap();
    std::fs::hard_link(s.path("src/one/f"), s.path("src/two/g")).unwrap();
    write_file(&s.path("src/two/solo"), 10, 2);
    let (one, two) = (s.path("src/one"), s.path("src/two"));
    let reference = s.path("rsync");
    rsync(&["-aH"], &[&one, &two], &reference);
    let want = groups(&reference);
    assert!(
        want.contains(&vec!["one/f".to_owned(), "two/g".into()]),
        "{want:?}"
    );

    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let mut c = haul(&s.path("config"));
    c.args(["push", "-H"])
        .args([&one, &two])
        .arg(node.url("in"));
    ok(&run(c, T));
    assert_eq!(groups(&s.path("node/in")), want, "push");
}

#[test]
fn a_first_name_left_out_hands_its_role_to_the_next() {
    // The node's listing names b and sub/c links to a; the pull leaves a
    // out: b is fetched as the file, sub/c linked to it. A file already at
    // DEST under the name left out is never linked to.
    let s = Scratch::new();
    linked_tree(&s.path("node/in"));
    write_file(&s.path("back/a"), 10, 9);
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--plaintext", "-H", "--exclude", "/a"])
        .arg(node.url("in/"))
        .arg(s.path("back"));
    ok(&run(c, T));
    assert_eq!(
        groups(&s.path("back")),
        vec![
            vec!["a".to_owned()],
            vec!["b".into(), "sub/c".into()],
            vec!["solo".into()],
            vec!["x".into(), "y".into()],
        ]
    );
    assert_eq!(std::fs::metadata(s.path("back/a")).unwrap().len(), 10);
    assert_eq!(b3(&s.path("back/sub/c")), b3(&s.path("node/in/a")));
}

#[test]
fn a_node_links_nothing_outside_its_root_nor_to_what_is_not_a_file() {
    let s = Scratch::new();
    let outside = s.path("outside");
    write_file(&outside.join("keep"), 10, 1);
    write_file(&s.path("node/in/ok"), 10, 2);
    std::fs::create_dir_all(s.path("node/in/d")).unwrap();
    std::os::unix::fs::symlink(&outside, s.path("node/in/out")).unwrap();
    std::os::unix::fs::symlink(outside.join("keep"), s.path("node/in/sym")).unwrap();
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let mut raw = Raw::connect(&node.addr);
    assert!(matches!(
        raw.hello(Request::Link {
            dest: "../x".into(),
            backup: None,
            skip: Default::default(),
        }),
        Message::Refused { .. }
    ));
    let mut raw = Raw::connect(&node.addr);
    assert!(matches!(
        raw.hello(Request::Link {
            dest: "in".into(),
            backup: None,
            skip: Default::default(),
        }),
        Message::Welcome { .. }
    ));
    for (path, target) in [
        ("x", "../outside/keep"),
        ("x", "../../outside/keep"),
        ("x", "/etc/hostname"),
        ("x", "out/keep"),
        ("x", "sym"),
        ("x", "d"),
        ("x", "missing"),
        ("../x", "ok"),
        ("out/x", "ok"),
        ("d", "ok"),
        ("ok", "ok"),
        ("", "ok"),
    ] {
        raw.send(&Message::Link {
            path: path.into(),
            target: target.into(),
        });
        match raw.recv() {
            Some(Message::Done {
                ok: false, message, ..
            }) => assert!(
                !message.contains(s.dir.path().to_str().unwrap()),
                "{message}"
            ),
            other => panic!("{path} -> {target}: {other:?}"),
        }
    }
    // What may be linked is.
    raw.send(&Message::Link {
        path: "x".into(),
        target: "ok".into(),
    });
    assert!(matches!(raw.recv(), Some(Message::Done { ok: true, .. })));
    raw.send(&Message::Bye);
    let ino = |p: &str| std::fs::symlink_metadata(s.path(p)).unwrap().ino();
    assert_eq!(ino("node/in/x"), ino("node/in/ok"));
    assert_eq!(std::fs::metadata(outside.join("keep")).unwrap().nlink(), 1);
    assert!(!outside.join("x").exists() && !s.path("x").exists());
    assert!(s.path("node/in/d").is_dir());
    assert!(s
        .path("node/in/sym")
        .symlink_metadata()
        .unwrap()
        .is_symlink());

    // A read-only node makes none.
    drop(node);
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext", "--read-only"],
    );
    let mut raw = Raw::connect(&node.addr);
    assert!(matches!(
        raw.hello(Request::Link {
            dest: "in".into(),
            backup: None,
            skip: Default::default(),
        }),
        Message::Refused { .. }
    ));
}

fn stderr_text(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_fan_out_makes_the_links_on_every_node() {
    let s = Scratch::new();
    let src = s.path("src");
    linked_tree(&src);
    let one = Node::start(
        &s.path("one"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let two = Node::start(
        &s.path("two"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let mut c = haul(&s.path("config"));
    c.args(["push", "--plaintext", "-H"])
        .arg(format!("{}/", src.display()))
        .arg(one.url("in"))
        .arg(two.url("in"));
    ok(&run(c, T));
    let want = vec![
        vec!["a".to_owned(), "b".into(), "sub/c".into()],
        vec!["solo".into()],
        vec!["x".into(), "y".into()],
    ];
    assert_eq!(groups(&s.path("one/in")), want);
    assert_eq!(groups(&s.path("two/in")), want);
    assert_eq!(b3(&s.path("two/in/sub/c")), b3(&src.join("a")));
}
