//! `haul ls`: the same names and sizes from a real node, the local path it
//! serves and a real FTP server (vsftpd) holding the same tree; `-R`, the
//! filters and `--json`.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use haul_ftp::testserver::{FtpServer, Mode};
use serde_json::Value;

use crate::harness::*;

fn tree(root: &Path) {
    write_file(&root.join("a.nc"), 100, 1);
    write_file(&root.join("b.log"), 7, 2);
    write_file(&root.join("sub/c.nc"), 2000, 3);
    write_file(&root.join("sub/deeper/d.nc"), 30, 4);
}

/// (path, kind, size) of each `entry` event.
fn entries(out: &Output) -> Vec<(String, String, Option<u64>)> {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
    let mut v: Vec<_> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "entry")
        .map(|v| {
            (
                v["path"].as_str().unwrap().to_owned(),
                v["kind"].as_str().unwrap().to_owned(),
                v["size"].as_u64(),
            )
        })
        .collect();
    v.sort();
    v
}

fn ls(config: &Path, args: &[&str]) -> Output {
    let mut c = haul(config);
    c.args(["--json", "ls"]).args(args);
    run(c, Duration::from_secs(60))
}

fn e(p: &str, k: &str, s: Option<u64>) -> (String, String, Option<u64>) {
    (p.into(), k.into(), s)
}

#[test]
fn ls_lists_nodes_local_paths_and_ftp_alike() {
    let s = Scratch::new();
    tree(&s.path("node/data"));
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let srv = FtpServer::start(Mode::Plain).expect("start vsftpd (apt-get install vsftpd)");
    tree(&srv.root().join("data"));
    let cfg = s.path("config");
    let local = s.path("node/data").display().to_string();
    let sources = [node.url("data"), local, srv.url("/data/")];

    for src in &sources {
        // First level only.
        assert_eq!(
            entries(&ls(&cfg, &[src])),
            [
                e("a.nc", "file", Some(100)),
                e("b.log", "file", Some(7)),
                e("sub", "dir", None)
            ],
            "{src}"
        );
        // The tree, filtered.
        assert_eq!(
            entries(&ls(
                &cfg,
                &[src, "-R", "--exclude", "*.log", "--max-size", "1000"]
            )),
            [
                e("a.nc", "file", Some(100)),
                e("sub", "dir", None),
                e("sub/deeper", "dir", None),
                e("sub/deeper/d.nc", "file", Some(30)),
            ],
            "{src}"
        );
    }
    // People read sizes, times and names.
    let mut c = haul(&cfg);
    c.args(["ls", &node.url("data")]);
    let out = run(c, Duration::from_secs(60));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.ends_with("  a.nc") && l.trim_start().starts_with("100 ")),
        "{text}"
    );
    assert!(text.lines().any(|l| l.ends_with("  sub/")), "{text}");
    // A path the node does not have: exit 2.
    let out = ls(&cfg, &[&node.url("nothing")]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
