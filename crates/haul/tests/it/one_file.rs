//! scp's and rsync's rule for one file: a DEST that does not exist (or is
//! a regular file) and does not end in `/` is the file's new name; an
//! existing directory or a trailing `/` keeps "into the directory". The
//! same for a local copy, a pull from a node, a push and remote pulls, and
//! a second run moves nothing.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use haul_http::testserver::TestServer;

use crate::harness::*;

const T: Duration = Duration::from_secs(60);

fn transfer(config: &Path, verb: &str, src: &str, dest: &str) -> Output {
    let mut c = haul(config);
    c.args([verb, "--json"]);
    if src.starts_with("haul://") || dest.starts_with("haul://") {
        c.args(["--token", "t"]);
    }
    c.arg(src).arg(dest);
    run(c, T)
}

/// `src` to `dest`, twice: the first run verifies one file, the second
/// finds it up to date; `landed` then holds `src_file`'s bytes.
fn lands_as(config: &Path, verb: &str, src: &str, dest: &str, src_file: &Path, landed: &Path) {
    let out = transfer(config, verb, src, dest);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(summary(&out)["files_ok"], 1, "{}", said(&out));
    assert!(
        landed.is_file(),
        "{} is not a file\n{}",
        landed.display(),
        said(&out)
    );
    assert_eq!(b3(landed), b3(src_file));
    let again = transfer(config, verb, src, dest);
    assert_eq!(again.status.code(), Some(0), "{}", said(&again));
    let sum = summary(&again);
    assert_eq!(
        (sum["files_ok"].as_u64(), sum["files_skipped"].as_u64()),
        (Some(0), Some(1)),
        "{sum}"
    );
}

#[test]
fn a_local_copy_names_the_file_as_dest_says() {
    let s = Scratch::new();
    let src = s.path("src/app.log");
    write_file(&src, 10_000, 1);
    let cfg = s.path("cfg");
    let src_arg = src.to_str().unwrap();
    // Missing DEST, no slash: the new name (its directory made).
    let new = s.path("out/new.log");
    lands_as(&cfg, "pull", src_arg, new.to_str().unwrap(), &src, &new);
    // A trailing slash: into the directory (made), under its own name.
    let slashed = format!("{}/", s.path("logs").display());
    lands_as(
        &cfg,
        "pull",
        src_arg,
        &slashed,
        &src,
        &s.path("logs/app.log"),
    );
    // An existing directory: into it.
    std::fs::create_dir(s.path("there")).unwrap();
    let there = s.path("there");
    lands_as(
        &cfg,
        "pull",
        src_arg,
        there.to_str().unwrap(),
        &src,
        &s.path("there/app.log"),
    );
    // An existing regular file: replaced.
    let old = s.path("old.log");
    std::fs::write(&old, b"something else").unwrap();
    lands_as(&cfg, "pull", src_arg, old.to_str().unwrap(), &src, &old);
    // A directory source keeps the tree rule: DEST/NAME.
    let out = transfer(
        &cfg,
        "pull",
        s.path("src").to_str().unwrap(),
        s.path("tree").to_str().unwrap(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(b3(&s.path("tree/src/app.log")), b3(&src));
}

#[test]
fn a_pull_from_a_node_names_the_file_as_dest_says() {
    let s = Scratch::new();
    let src = s.path("node/out/app.log");
    write_file(&src, 5 << 20, 2);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let cfg = s.path("config");
    let url = node.url("out/app.log");
    let new = s.path("here/new.log");
    lands_as(&cfg, "pull", &url, new.to_str().unwrap(), &src, &new);
    let slashed = format!("{}/", s.path("logs").display());
    lands_as(&cfg, "pull", &url, &slashed, &src, &s.path("logs/app.log"));
    // A directory on the node, to a DEST that does not exist: DEST/NAME.
    let out = transfer(
        &cfg,
        "pull",
        &node.url("out"),
        s.path("tree").to_str().unwrap(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(b3(&s.path("tree/out/app.log")), b3(&src));
    // --delete with one file deletes nothing beside it.
    std::fs::write(s.path("here/keep.txt"), b"mine").unwrap();
    let mut c = haul(&cfg);
    c.args(["pull", "--json", "--delete", "--token", "t"])
        .arg(&url)
        .arg(&new);
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(s.path("here/keep.txt").exists(), "{}", said(&out));
}

#[test]
fn a_push_names_the_file_as_the_node_path_says() {
    let s = Scratch::new();
    let src = s.path("src/app.log");
    write_file(&src, 10_000, 3);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let cfg = s.path("config");
    let src_arg = src.to_str().unwrap();
    lands_as(
        &cfg,
        "push",
        src_arg,
        &node.url("in/new.log"),
        &src,
        &s.path("node/in/new.log"),
    );
    lands_as(
        &cfg,
        "push",
        src_arg,
        &node.url("logs/"),
        &src,
        &s.path("node/logs/app.log"),
    );
    // An existing directory on the node: into it.
    std::fs::create_dir_all(s.path("node/there")).unwrap();
    lands_as(
        &cfg,
        "push",
        src_arg,
        &node.url("there"),
        &src,
        &s.path("node/there/app.log"),
    );
    // A dry run says the same.
    let mut c = haul(&cfg);
    c.args(["push", "--json", "--dry-run", "--token", "t", src_arg])
        .arg(node.url("in/other.log"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("other.log") && !text.contains("app.log"),
        "{text}"
    );
}

#[test]
fn an_http_pull_names_the_file_as_dest_says() {
    let srv = TestServer::start().expect("start nginx (apt-get install nginx-light)");
    write_file(&srv.root().join("data/f.bin"), 100_000, 4);
    let s = Scratch::new();
    let url = srv.http_url("/data/f.bin");
    let new = s.path("dst/new.bin");
    lands_as(
        &s.path("cfg"),
        "pull",
        &url,
        new.to_str().unwrap(),
        &srv.root().join("data/f.bin"),
        &new,
    );
    let slashed = format!("{}/", s.path("in").display());
    lands_as(
        &s.path("cfg"),
        "pull",
        &url,
        &slashed,
        &srv.root().join("data/f.bin"),
        &s.path("in/f.bin"),
    );
}
