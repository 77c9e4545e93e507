//! The filter flags mean the same for every source: one tree, one set of
//! rules, pushed to a real node, pulled from it, copied locally and pulled
//! from a real FTP server (vsftpd), each giving the same files.

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use haul_ftp::testserver::{FtpServer, Mode};

use crate::harness::*;

const T: Duration = Duration::from_secs(120);

/// The tree every source serves.
fn filter_tree(root: &Path) {
    write_file(&root.join("keep/a.nc"), 100, 1);
    write_file(&root.join("keep/b.txt"), 100, 2);
    write_file(&root.join("keep/big.nc"), 5000, 3);
    write_file(&root.join("tmp/x.nc"), 100, 4);
    write_file(&root.join("deep/1/z.nc"), 100, 5);
    write_file(&root.join("deep/1/2/3/y.nc"), 100, 6);
    write_file(&root.join("notes/readme.txt"), 100, 7);
    write_file(&root.join("top.nc"), 100, 8);
    write_file(&root.join("old.nc"), 100, 9);
    let f = std::fs::File::options()
        .write(true)
        .open(root.join("old.nc"))
        .unwrap();
    f.set_modified(UNIX_EPOCH + Duration::from_secs(1_000_000_000))
        .unwrap();
}

/// What the rules below take from it: `.nc` files up to 1000 bytes, newer
/// than 2020, at most two directories deep, nothing under `tmp/`, and no
/// directory in which nothing was taken.
const TAKEN: &[&str] = &[
    "deep/",
    "deep/1/",
    "deep/1/z.nc",
    "keep/",
    "keep/a.nc",
    "top.nc",
];

/// The filter flags, with the rules file `rules` holds.
fn filter_flags(rules: &Path) -> Vec<String> {
    std::fs::write(rules, "# scratch space\n- tmp/\n+ *.nc\n").unwrap();
    [
        "--filter-from",
        rules.to_str().unwrap(),
        "--exclude",
        "*",
        "--max-size",
        "1000",
        "--min-size",
        "1",
        "--newer-than",
        "2020-01-01",
        "--max-depth",
        "2",
    ]
    .map(String::from)
    .to_vec()
}

/// The names under `root` (directories with a trailing `/`).
fn names(root: &Path) -> Vec<String> {
    listing(root)
        .into_iter()
        .map(|l| match l.split_once(' ') {
            Some((name, _hash)) => name.to_owned(),
            None => l,
        })
        .collect()
}

#[test]
fn the_same_rules_for_push_node_pull_local_copy_and_ftp() {
    let s = Scratch::new();
    let src = s.path("src/data");
    filter_tree(&src);
    filter_tree(&s.path("node/served"));
    let flags = filter_flags(&s.path("rules.txt"));
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);

    // Push: the sender's walk takes only what the rules take.
    let mut c = haul(&s.path("config"));
    c.args(["--json", "push"])
        .arg(&src)
        .arg(node.url("in"))
        .args(&flags);
    let out = run(c, T);
    ok(&out);
    assert_eq!(names(&s.path("node/in/data")), TAKEN);
    assert_eq!(summary(&out)["files_ok"], 3);

    // Pull from the node: the listing is filtered before anything is asked.
    let mut c = haul(&s.path("config"));
    c.args(["--json", "pull", &node.url("served")])
        .arg(s.path("pulled"))
        .args(&flags);
    let out = run(c, T);
    ok(&out);
    assert_eq!(names(&s.path("pulled/served")), TAKEN);

    // A local copy, contents only (`dir/`).
    let mut c = haul(&s.path("config"));
    c.args(["--json", "pull", &format!("{}/", src.display())])
        .arg(s.path("copied"))
        .args(&flags);
    let out = run(c, T);
    ok(&out);
    assert_eq!(names(&s.path("copied")), TAKEN);

    // FTP: the crawl, through the same module.
    let srv = FtpServer::start(Mode::Plain).expect("start vsftpd (apt-get install vsftpd)");
    filter_tree(&srv.root().join("tree"));
    let mut c = haul(&s.path("config"));
    c.args(["--json", "pull", &srv.url("/tree/")])
        .arg(s.path("ftp"))
        .args(&flags);
    let out = run(c, T);
    ok(&out);
    assert_eq!(names(&s.path("ftp")), TAKEN);
}

#[test]
fn a_bad_filter_file_is_a_usage_error_naming_the_line() {
    let s = Scratch::new();
    write_file(&s.path("src/f"), 10, 1);
    std::fs::write(s.path("rules"), "+ *.nc\n*.txt\n").unwrap();
    let mut c = haul(&s.path("config"));
    c.args(["pull"])
        .arg(s.path("src/"))
        .arg(s.path("dst"))
        .arg("--filter-from")
        .arg(s.path("rules"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("line 2"), "{}", stderr(&out));
    assert!(!s.path("dst").exists(), "nothing created on a usage error");
}
