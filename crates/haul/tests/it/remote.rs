//! `haul pull URL DEST` against real servers (nginx, vsftpd, OpenSSH sshd,
//! moto) started on 127.0.0.1 by the source crates' `testserver` modules.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::harness::{b3, haul, listing, run, summary, write_file};

mod ftp;
mod http;
mod s3;
mod sftp;

/// A tree with nested dirs, spaces, unicode, a 0-byte file and a file of
/// several 4 MiB chunks.
pub fn fixture_tree(root: &Path) {
    write_file(&root.join("top.txt"), 1000, 1);
    write_file(&root.join("empty.dat"), 0, 2);
    write_file(&root.join("a/b/deep file.bin"), 70_000, 3);
    write_file(&root.join("a/naïve ünïcødé.txt"), 5, 4);
    write_file(&root.join("a/multi.bin"), 9 << 20, 5);
    write_file(&root.join("c/d/e/leaf.txt"), 17, 6);
}

/// The files of the fixture tree.
pub const FIXTURE_FILES: usize = 6;

/// Runs `haul --json pull ARGS` (2 min limit).
pub fn pull(config: &Path, args: &[&str]) -> Output {
    let mut cmd = haul(config);
    cmd.arg("--json").arg("pull").args(args);
    run(cmd, Duration::from_secs(120))
}

/// Same tree (names and contents) under both roots, and every delivered
/// file's BLAKE3 in the summary matches the content.
pub fn assert_same_tree(src: &Path, dst: &Path, out: &Output) {
    assert_eq!(
        listing(src),
        listing(dst),
        "trees differ; output {}",
        all_output(out)
    );
    let s = summary(out);
    for f in s["files"].as_array().expect("files") {
        let path = f["path"].as_str().expect("path");
        assert_eq!(
            f["blake3"].as_str().expect("blake3"),
            b3(&dst.join(path)),
            "{path}"
        );
    }
}

/// The JSON events of a run.
pub fn events(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Everything a run printed.
pub fn all_output(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
