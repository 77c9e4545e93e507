//! A source file that changes while it is sent is never delivered torn:
//! the destination holds nothing under the final name, or exactly one
//! version that existed on the source's disk (byte-compared with copies
//! taken before and after the change).

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::harness::*;

const T: Duration = Duration::from_secs(120);
const MIB: u64 = 1 << 20;

/// A source file and the versions it goes through.
pub(crate) struct Changing {
    pub(crate) path: PathBuf,
    before: String,
    after: String,
}

impl Changing {
    /// A `len`-byte file at `path`; `after` is what it will hold once
    /// [`Changing::change`] wrote 4 KiB at 1 MiB and 4 KiB near its end.
    pub(crate) fn new(path: &Path, len: u64) -> Self {
        write_file(path, len, 7);
        // Written an hour ago: a change now moves its mtime even where a
        // server tells times to the second (FTP, SFTP, HTTP).
        let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(path)
            .and_then(|f| f.set_modified(hour_ago))
            .expect("mtime");
        let before = b3(path);
        let copy = path.with_extension("after");
        std::fs::copy(path, &copy).expect("copy");
        Self::patch(&copy, len);
        let after = b3(&copy);
        std::fs::remove_file(&copy).expect("rm");
        Self {
            path: path.to_owned(),
            before,
            after,
        }
    }

    fn patch(path: &Path, len: u64) {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open for writing");
        f.write_all_at(&[0xa5; 4096], MIB).expect("write");
        f.write_all_at(&[0x5a; 4096], len - 3 * MIB).expect("write");
    }

    /// Changes the file in place after `delay` (as `dd conv=notrunc`).
    pub(crate) fn change(&self, delay: Duration) -> std::thread::JoinHandle<()> {
        let path = self.path.clone();
        let len = std::fs::metadata(&path).expect("meta").len();
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            Self::patch(&path, len);
        })
    }

    /// Rewrites the file every 30 ms until `stop` is set.
    fn keep_changing(
        &self,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<()> {
        let path = self.path.clone();
        std::thread::spawn(move || {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .expect("open for writing");
            let mut n = 0u8;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n = n.wrapping_add(1);
                f.write_all_at(&[n; 4096], 2 * MIB).expect("write");
                std::thread::sleep(Duration::from_millis(30));
            }
        })
    }

    /// What `dest` holds: `None`, or which version (it fails on a torn one).
    pub(crate) fn delivered(&self, dest: &Path, out: &Output) -> Option<&'static str> {
        if !dest.exists() {
            return None;
        }
        let got = b3(dest);
        if got == self.after {
            Some("after")
        } else if got == self.before {
            Some("before")
        } else {
            panic!(
                "{} holds a version that never existed on disk\n{}",
                dest.display(),
                said(out)
            )
        }
    }
}

/// `haul push`, or a local copy with `haul pull`: SRC to DEST at a rate
/// that leaves time to change the file while it is read.
fn transfer(config: &Path, verb: &str, src: &Path, dest: &str, extra: &[&str]) -> Command {
    let mut c = haul(config);
    c.args([verb, "--json", "--bwlimit", "8M"]);
    if dest.starts_with("haul://") {
        c.args(["--token", "t"]);
    }
    c.args(extra).arg(src).arg(dest);
    c
}

fn events(out: &Output, kind: &str) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == kind)
        .collect()
}

/// The file changes once, mid-transfer, and settles: the same run sends it
/// again and delivers the version that is on disk now, never the mix.
fn changed_once_is_sent_again(verb: &str) {
    let s = Scratch::new();
    let file = Changing::new(&s.path("src/grow.bin"), 24 * MIB);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let (dest, delivered) = match verb {
        "push" => (node.url("in/"), s.path("node/in/grow.bin")),
        _ => (
            format!("{}/", s.path("copy").display()),
            s.path("copy/grow.bin"),
        ),
    };
    let writer = file.change(Duration::from_millis(900));
    let out = run(transfer(&s.path("config"), verb, &file.path, &dest, &[]), T);
    writer.join().expect("writer");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(
        file.delivered(&delivered, &out),
        Some("after"),
        "the settled version is delivered by the same run"
    );
    let src_mtime = std::fs::metadata(&file.path).unwrap().modified().unwrap();
    let dest_mtime = std::fs::metadata(&delivered).unwrap().modified().unwrap();
    assert_eq!(src_mtime, dest_mtime, "the delivered version's own mtime");
    let done = events(&out, "file_done");
    assert_eq!(done.len(), 1, "{}", said(&out));
    assert_eq!(done[0]["blake3"], file.after.as_str());
}

#[test]
fn a_file_changed_while_it_is_pushed_is_sent_again_whole() {
    changed_once_is_sent_again("push");
}

#[test]
fn a_file_changed_during_a_local_copy_is_copied_again_whole() {
    changed_once_is_sent_again("pull");
}

/// A file that never settles fails after `--retries` sends, says so, and
/// leaves nothing under its final name; the rest of the tree is delivered.
#[test]
fn a_file_that_keeps_changing_fails_and_is_not_delivered() {
    let s = Scratch::new();
    let file = Changing::new(&s.path("src/log.bin"), 8 * MIB);
    write_file(&s.path("src/quiet.txt"), 1000, 3);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = file.keep_changing(stop.clone());
    let src = format!("{}/", s.path("src").display());
    let out = run(
        transfer(
            &s.path("config"),
            "push",
            Path::new(&src),
            &node.url("in"),
            &["--retries", "1"],
        ),
        T,
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().expect("writer");
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert_eq!(file.delivered(&s.path("node/in/log.bin"), &out), None);
    assert_eq!(
        b3(&s.path("node/in/quiet.txt")),
        b3(&s.path("src/quiet.txt"))
    );
    let errors = events(&out, "file_error");
    assert_eq!(errors.len(), 1, "one line for the one file: {}", said(&out));
    let text = errors[0].to_string();
    assert!(
        text.contains("changed while it was being sent") && text.contains("not delivered"),
        "{text}"
    );
    let warnings = events(&out, "warning");
    assert!(
        warnings
            .iter()
            .any(|w| w.to_string().contains("sending it again")),
        "the first change is retried: {}",
        said(&out)
    );
}

/// A node serving a pull never sends a file torn either: the pull fails
/// that file (the version its listing named is gone), and DEST has nothing
/// under its name, or one whole version.
#[test]
fn a_file_changed_while_a_node_serves_it_is_not_delivered_torn() {
    let s = Scratch::new();
    let file = Changing::new(&s.path("node/out/grow.bin"), 24 * MIB);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let writer = file.change(Duration::from_millis(900));
    std::fs::create_dir_all(s.path("here")).expect("mkdir DEST");
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--json", "--bwlimit", "8M", "--token", "t"])
        .arg(node.url("out/grow.bin"))
        .arg(s.path("here"));
    let out = run(c, T);
    writer.join().expect("writer");
    match file.delivered(&s.path("here/grow.bin"), &out) {
        // Read whole before the change, or after it.
        Some(_) => assert_eq!(out.status.code(), Some(0), "{}", said(&out)),
        None => {
            assert_eq!(out.status.code(), Some(1), "{}", said(&out));
            assert!(said(&out).contains("changed while it was being sent"));
        }
    }
}

/// Every version that shows under `paths` while a transfer runs: each
/// file is hashed once per (inode, ctime), through the descriptor opened
/// under the final name (a rename over it meanwhile leaves that one whole).
struct Watch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    seen: std::thread::JoinHandle<Vec<(PathBuf, String)>>,
}

impl Watch {
    fn start(paths: Vec<PathBuf>) -> Self {
        use std::os::unix::fs::MetadataExt;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let halt = stop.clone();
        let seen = std::thread::spawn(move || {
            let mut last = vec![None; paths.len()];
            let mut seen = Vec::new();
            while !halt.load(std::sync::atomic::Ordering::Relaxed) {
                for (p, last) in paths.iter().zip(&mut last) {
                    let Ok(mut f) = std::fs::File::open(p) else {
                        continue;
                    };
                    let Ok(m) = f.metadata() else { continue };
                    let id = Some((m.ino(), m.ctime(), m.ctime_nsec()));
                    if *last == id {
                        continue;
                    }
                    *last = id;
                    let mut h = blake3::Hasher::new();
                    if std::io::copy(&mut f, &mut h).is_ok() {
                        seen.push((p.clone(), h.finalize().to_hex().to_string()));
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            seen
        });
        Self { stop, seen }
    }

    fn stop(self) -> Vec<(PathBuf, String)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.seen.join().expect("watcher")
    }
}

/// A fan-out to three nodes (the origin sends to the first, which relays):
/// a file changed mid-transfer ends on every node as the settled version,
/// in the same run: the origin sends it again and relays forward the new
/// version. And no node ever holds the torn read under the final name, not
/// even for a moment: each chunk of it carried the origin's seal, but the
/// origin never vouched for its root (its check saw the change), so no relay
/// commits it downstream. Watched while it runs: without the root seal, the
/// nodes downstream of the first hold the torn read for seconds.
#[test]
fn a_file_changed_during_a_fan_out_ends_on_every_node_as_the_settled_version() {
    let s = Scratch::new();
    let file = Changing::new(&s.path("src/grow.bin"), 24 * MIB);
    let nodes: Vec<Node> = (0..3)
        .map(|i| Node::start(&s.path(&format!("n{i}")), &s.path("config"), &["--open"]))
        .collect();
    let finals: Vec<PathBuf> = (0..3)
        .map(|i| s.path(&format!("n{i}/in/grow.bin")))
        .collect();
    let watch = Watch::start(finals.clone());
    let writer = file.change(Duration::from_millis(900));
    let mut c = haul(&s.path("config"));
    c.args(["push", "--json", "--bwlimit", "8M"])
        .arg(&file.path);
    for n in &nodes {
        c.arg(n.url("in"));
    }
    let out = run(c, T);
    writer.join().expect("writer");
    let seen = watch.stop();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    for (path, got) in &seen {
        assert!(
            *got == file.before || *got == file.after,
            "{} held a version that never existed on disk, during the run\n{}",
            path.display(),
            said(&out)
        );
    }
    for (i, got) in finals.iter().enumerate() {
        assert_eq!(file.delivered(got, &out), Some("after"), "node {i}");
    }
}
