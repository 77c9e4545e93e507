//! `haul pull URL DEST` against real servers (nginx, vsftpd, OpenSSH sshd,
//! moto) started on 127.0.0.1 by the source crates' `testserver` modules.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::harness::{b3, haul, listing, run, summary, wait_for, write_file};

mod changing;
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
    // Recreated at the destination, as rsync and lftp's mirror do.
    std::fs::create_dir_all(root.join("c/empty dir")).expect("mkdir");
}

/// The files of the fixture tree.
pub const FIXTURE_FILES: usize = 6;

/// Runs `haul --json pull ARGS` (2 min limit).
pub fn pull(config: &Path, args: &[&str]) -> Output {
    let mut cmd = haul(config);
    cmd.arg("--json").arg("pull").args(args);
    run(cmd, Duration::from_secs(120))
}

/// Runs `haul --json pull URL DST` (quick retries, 5 s timeout, 2 min limit)
/// through an outage of the server: once a partial file under
/// `DST/.haul/partial` holds `min_partial` bytes, `stop` takes the server
/// down and, 800 ms later, `start` brings it back.
pub fn pull_through_restart<S>(
    config: &Path,
    url: &str,
    dst: &Path,
    min_partial: u64,
    srv: &mut S,
    stop: impl FnOnce(&mut S),
    start: impl FnOnce(&mut S),
) -> Output {
    let config = config.to_path_buf();
    // Into DEST, which exists (a missing one would name the one file).
    std::fs::create_dir_all(dst).expect("mkdir DEST");
    let args = [url, dst.to_str().expect("UTF-8 path")]
        .into_iter()
        .chain(["--retry-base-ms", "300", "--retries", "8", "--timeout", "5"])
        .map(str::to_string)
        .collect::<Vec<_>>();
    let running = std::thread::spawn(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        pull(&config, &args)
    });
    let partial = dst.join(".haul/partial");
    wait_for(Duration::from_secs(30), "partial data", || {
        std::fs::read_dir(&partial)
            .map(|d| {
                d.flatten().any(|e| {
                    e.path().extension().is_some_and(|x| x == "part")
                        && e.metadata().is_ok_and(|m| m.len() >= min_partial)
                })
            })
            .unwrap_or(false)
    });
    stop(srv);
    std::thread::sleep(Duration::from_millis(800));
    start(srv);
    running
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
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
