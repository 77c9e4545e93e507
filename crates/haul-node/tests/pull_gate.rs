//! A node pull under a caller's gate (the daemon's catalog over a
//! `haul://` or ssh source), in process: the gate alone decides what is
//! fetched (not what DEST holds), each started file is settled exactly
//! once with its BLAKE3 while its permit is still held, and a pull that
//! breaks settles what it started as failed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod test_node;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use haul_remote::gate::{FileGate, Gate, GateFile, GateOutcome};
use haul_transport::{Direction, Fault};
use test_node::{options, pattern, write, Heard, TestNode};

/// A gate that records every call, declines and takes back what it is
/// told to, and adopts what it is told to.
#[derive(Default)]
struct Book {
    declined: Vec<&'static str>,
    taken_back: Vec<&'static str>,
    adopted: Vec<&'static str>,
    admitted: Mutex<Vec<String>>,
    started: Mutex<Vec<String>>,
    settled: Mutex<HashMap<String, Vec<GateOutcome>>>,
    /// Permits not dropped yet.
    held: Arc<AtomicUsize>,
    /// Permits held when a file was settled (at least its own).
    held_at_settle: Mutex<Vec<usize>>,
    /// Files at once, as the daemon's caps: a start waits for a slot.
    cap: Option<Arc<tokio::sync::Semaphore>>,
}

struct Permit(Arc<AtomicUsize>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl FileGate for Book {
    async fn admit(&self, file: &GateFile) -> bool {
        self.admitted.lock().unwrap().push(file.rel.clone());
        !self.declined.contains(&file.rel.as_str())
    }

    async fn start(&self, file: &GateFile) -> Option<Box<dyn Send>> {
        if self.taken_back.contains(&file.rel.as_str()) {
            return None;
        }
        let slot = match &self.cap {
            Some(cap) => Some(cap.clone().acquire_owned().await.ok()?),
            None => None,
        };
        self.started.lock().unwrap().push(file.rel.clone());
        self.held.fetch_add(1, Ordering::SeqCst);
        Some(Box::new((Permit(self.held.clone()), slot)))
    }

    async fn settled(&self, file: &GateFile, outcome: GateOutcome) {
        self.held_at_settle
            .lock()
            .unwrap()
            .push(self.held.load(Ordering::SeqCst));
        let mut settled = self.settled.lock().unwrap();
        settled.entry(file.rel.clone()).or_default().push(outcome);
    }

    fn adopt_existing(&self, file: &GateFile) -> bool {
        self.adopted.contains(&file.rel.as_str())
    }
}

fn b3(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// Sets `path`'s mtime.
fn touch(path: &std::path::Path, at: SystemTime) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(at)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_decides_what_a_node_pull_fetches_and_hears_each_outcome_once() {
    let node = TestNode::start();
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let big = pattern(5 << 20, 1);
    write(&node.file("tree/big.bin"), &big);
    for (name, seed) in [
        ("a.txt", 2),
        ("sub/b.txt", 3),
        ("declined.txt", 4),
        ("back.txt", 5),
        ("adopted.txt", 6),
        ("same.txt", 7),
    ] {
        write(&node.file(&format!("tree/{name}")), &pattern(3000, seed));
        touch(&node.file(&format!("tree/{name}")), at);
    }
    let dest = tempfile::tempdir().unwrap();
    // DEST holds two files as the node's by size and mtime: one the gate
    // adopts, one it does not (its copy here differs, and is fetched).
    write(&dest.path().join("adopted.txt"), &pattern(3000, 6));
    touch(&dest.path().join("adopted.txt"), at);
    write(&dest.path().join("same.txt"), &pattern(3000, 99));
    touch(&dest.path().join("same.txt"), at);
    let book = Arc::new(Book {
        declined: vec!["declined.txt"],
        taken_back: vec!["back.txt"],
        adopted: vec!["adopted.txt"],
        ..Book::default()
    });
    let mut opts = options(&node, 2);
    opts.gate = Some(Gate(book.clone()));
    let heard = Arc::new(Heard::default());
    let summary = haul_node::pull(&node.at("tree/", []), dest.path(), &opts, heard.clone())
        .await
        .unwrap();
    assert_eq!(summary.failed, 0, "{summary:?}");
    let mut admitted = book.admitted.lock().unwrap().clone();
    admitted.sort();
    assert_eq!(
        admitted,
        [
            "a.txt",
            "adopted.txt",
            "back.txt",
            "big.bin",
            "declined.txt",
            "same.txt",
            "sub/b.txt"
        ]
    );
    // Declined and taken back: never fetched, never settled.
    assert!(!dest.path().join("declined.txt").exists());
    assert!(!dest.path().join("back.txt").exists());
    let settled = book.settled.lock().unwrap().clone();
    let mut names: Vec<&String> = settled.keys().collect();
    names.sort();
    assert_eq!(
        names,
        ["a.txt", "adopted.txt", "big.bin", "same.txt", "sub/b.txt"]
    );
    assert!(settled.values().all(|o| o.len() == 1), "{settled:?}");
    // Fetched with the BLAKE3 of what arrived; the copy that only looked
    // the same was fetched all the same.
    for (name, bytes) in [
        ("big.bin", big.clone()),
        ("a.txt", pattern(3000, 2)),
        ("sub/b.txt", pattern(3000, 3)),
        ("same.txt", pattern(3000, 7)),
    ] {
        assert_eq!(
            std::fs::read(dest.path().join(name)).unwrap(),
            bytes,
            "{name}"
        );
        match &settled[name][0] {
            GateOutcome::Delivered {
                blake3,
                size,
                fetched,
            } => {
                assert_eq!(blake3, &b3(&bytes), "{name}");
                assert_eq!(*size, bytes.len() as u64, "{name}");
                assert!(*fetched >= *size, "{name}: {fetched}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    // Adopted: hashed where it is, not fetched.
    assert_eq!(
        settled["adopted.txt"][0],
        GateOutcome::UpToDate {
            size: 3000,
            blake3: Some(b3(&pattern(3000, 6))),
        }
    );
    // Each outcome was told while its permit was held; all are gone now.
    assert!(book.held_at_settle.lock().unwrap().iter().all(|&h| h >= 1));
    assert_eq!(book.held.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_pull_that_breaks_settles_what_it_started_as_failed() {
    let node = TestNode::start();
    for i in 0..6 {
        write(
            &node.file(&format!("tree/f{i}.bin")),
            &pattern(2 << 20, i as u8),
        );
    }
    let dest = tempfile::tempdir().unwrap();
    // Two files at once: the rest wait for a slot that only a settled
    // file gives back (the daemon's caps), so a pull that broke must
    // settle what it started before it waits for the rest of its listing.
    let book = Arc::new(Book {
        cap: Some(Arc::new(tokio::sync::Semaphore::new(2))),
        ..Book::default()
    });
    let mut opts = options(&node, 1);
    opts.retry.retries = 0;
    opts.gate = Some(Gate(book.clone()));
    // The listing comes whole; the one fetching connection is cut early,
    // and no retry is allowed.
    let cut = Fault::cut(Direction::Inbound, 3 << 20);
    let remote = node.at("tree/", [None, Some(cut)]);
    let heard = Arc::new(Heard::default());
    let pull = haul_node::pull(&remote, dest.path(), &opts, heard);
    let _ = tokio::time::timeout(Duration::from_secs(30), pull)
        .await
        .expect("the broken pull ended");
    let started = book.started.lock().unwrap().clone();
    let settled = book.settled.lock().unwrap().clone();
    assert!(!started.is_empty());
    // Every started file heard of exactly once; at least one failed.
    for f in &started {
        assert_eq!(settled.get(f).map(Vec::len), Some(1), "{f}: {settled:?}");
    }
    assert_eq!(settled.len(), started.len(), "{settled:?}");
    // What the broken connections left is the source's failure, not
    // the files'.
    assert!(
        settled.values().any(|o| matches!(
            o[0],
            GateOutcome::Failed {
                unreachable: true,
                ..
            }
        )),
        "{settled:?}"
    );
    for (f, o) in &settled {
        if let GateOutcome::Delivered { blake3, .. } = &o[0] {
            let here = std::fs::read(dest.path().join(f)).unwrap();
            assert_eq!(blake3, &b3(&here), "{f}");
        }
    }
    assert_eq!(book.held.load(Ordering::SeqCst), 0);
}
