//! The outcome of a transfer, gathered from its events.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::event::{Event, Observer};
use serde::Serialize;

/// One delivered file.
#[derive(Debug, Clone, Serialize)]
pub struct FileRecord {
    /// Path under the destination.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// BLAKE3, hex (empty when skipped as already identical).
    pub blake3: String,
}

/// One failed entry.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    /// Path concerned.
    pub path: String,
    /// Why.
    pub error: String,
    /// What kind of failure.
    pub kind: crate::FailKind,
}

/// A transport `--transport auto` chose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChosenTransport {
    /// `tcp` or `quic`.
    pub name: String,
    /// Why, in one line.
    pub why: String,
}

/// What a transfer did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Entries delivered and verified (files, dirs, links).
    pub entries_ok: u64,
    /// Files delivered and verified.
    pub files_ok: u64,
    /// Files already identical at the destination.
    pub files_skipped: u64,
    /// Entries that failed.
    pub failed: u64,
    /// Bytes of files now verified at the destination.
    pub bytes_verified: u64,
    /// Payload bytes that crossed the network (resends included).
    pub bytes_transferred: u64,
    /// With `-z` (or `-S`): those bytes as they went on the wire, packed
    /// (what compression and holes kept off it taken away).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_on_wire: Option<u64>,
    /// Wall time in seconds.
    pub seconds: f64,
    /// Connections used at most at once.
    pub connections: u32,
    /// The highest rate payload moved at, bytes per second over
    /// [`crate::rate::DEFAULT_WINDOW`] (0: the run was shorter): what the
    /// path carried once the transfer was up to speed.
    pub peak_rate: f64,
    /// Entries `--delete` removed from the destination.
    pub deleted: u64,
    /// Files delivered, with hashes.
    pub files: Vec<FileRecord>,
    /// Failures with reasons.
    pub failures: Vec<Failure>,
    /// The transport `--transport auto` chose for the node, and why
    /// (absent when it did not choose: a fixed transport, a short run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<ChosenTransport>,
}

impl Summary {
    /// Verified bytes per second.
    pub fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes_verified as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// What a dry run found, in totals.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DryRunReport {
    /// Files that would be sent.
    pub send_files: u64,
    /// Their bytes.
    pub send_bytes: u64,
    /// Files already up to date.
    pub up_to_date_files: u64,
    /// Their bytes.
    pub up_to_date_bytes: u64,
    /// Directories and links that would be made.
    pub make: u64,
    /// Entries `--delete` would remove.
    pub delete: u64,
    /// Their bytes (files only).
    pub delete_bytes: u64,
    /// Entries that could not be read (a transfer would fail them; with
    /// `--delete`, nothing would be deleted).
    pub errors: u64,
}

impl DryRunReport {
    /// Counts an entry found to need `action` (`size`: its bytes, 0 for
    /// directories and links).
    pub fn count(&mut self, action: crate::DryRunAction, size: u64) {
        use crate::DryRunAction::*;
        match action {
            Send => {
                self.send_files += 1;
                self.send_bytes += size;
            }
            UpToDate => {
                self.up_to_date_files += 1;
                self.up_to_date_bytes += size;
            }
            Make => self.make += 1,
            Delete => {
                self.delete += 1;
                self.delete_bytes += size;
            }
        }
    }
}

/// Gathers a [`Summary`] from events and forwards them to another observer.
pub struct Tally {
    inner: Arc<dyn Observer>,
    summary: Mutex<Summary>,
    moved: AtomicU64,
    /// Paths reported failed (each counts once), and delivered (a
    /// recovering tally's). Locked before `summary`, and held while it is
    /// changed: a failure and a delivery of one path never interleave.
    paths: Mutex<Paths>,
    /// Data connections open now, and the most open at once.
    open: AtomicU32,
    peak: AtomicU32,
    /// [`Summary::peak_rate`]'s bits.
    peak_rate: AtomicU64,
    /// A path delivered after it failed is not a failure ([`Tally::recovering`]).
    recovers: bool,
}

/// The paths a [`Tally`] saw fail and, when it recovers, delivered.
#[derive(Default)]
struct Paths {
    failed: std::collections::HashSet<String>,
    delivered: std::collections::HashSet<String>,
}

/// A data connection counted by [`Tally::connection`] while it lives.
pub struct CountedConnection(Arc<Tally>);

impl Drop for CountedConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Tally {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Observer>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            summary: Mutex::new(Summary::default()),
            moved: AtomicU64::new(0),
            paths: Mutex::default(),
            open: AtomicU32::new(0),
            peak: AtomicU32::new(0),
            peak_rate: AtomicU64::new(0),
            recovers: false,
        })
    }

    /// Wraps `inner`, counting what holds at the end: a path delivered by
    /// one session is not a failure, whether another failed it before or
    /// after. A fan-out node's count: a session re-routed away, or one
    /// presenting a replayed ticket with entries the origin never sealed,
    /// fails entries the node gets from its real upstream.
    pub fn recovering(inner: Arc<dyn Observer>) -> Arc<Self> {
        let mut tally = Self::new(inner);
        if let Some(t) = Arc::get_mut(&mut tally) {
            t.recovers = true;
        }
        tally
    }

    /// Counts a data connection as open until the guard drops.
    pub fn connection(self: &Arc<Self>) -> CountedConnection {
        let now = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
        CountedConnection(self.clone())
    }

    /// Payload bytes moved so far (for the concurrency controller).
    pub fn moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    /// Payload moved at `rate` bytes per second over a window: the summary
    /// keeps the highest ([`Summary::peak_rate`]).
    pub fn note_rate(&self, rate: f64) {
        let _ = self
            .peak_rate
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                (rate > f64::from_bits(bits)).then(|| rate.to_bits())
            });
    }

    /// Entries that failed so far.
    pub fn failed(&self) -> u64 {
        self.summary.lock().map(|s| s.failed).unwrap_or(u64::MAX)
    }

    /// Whether `path` was reported failed (and, for a recovering tally,
    /// not delivered).
    pub fn has_failed(&self, path: &str) -> bool {
        self.paths
            .lock()
            .map_or(true, |paths| paths.failed.contains(path))
    }

    /// Entries delivered (or found identical) so far.
    pub fn entries_ok(&self) -> u64 {
        self.summary.lock().map(|s| s.entries_ok).unwrap_or(0)
    }

    /// The summary so far, with its wall time set. `connections` is how
    /// many were used at most, unless connections were counted
    /// ([`Tally::connection`]): then the most open at once.
    pub fn finish(&self, elapsed: Duration, connections: u32) -> Summary {
        let mut s = self.summary.lock().map(|s| s.clone()).unwrap_or_default();
        s.seconds = elapsed.as_secs_f64();
        s.bytes_transferred = self.moved();
        s.peak_rate = f64::from_bits(self.peak_rate.load(Ordering::Relaxed));
        s.connections = match self.peak.load(Ordering::Relaxed) {
            0 => connections,
            peak => peak,
        };
        s
    }
}

impl Observer for Tally {
    fn event(&self, event: &Event) {
        match event {
            Event::Progress { bytes, .. } => {
                self.moved.fetch_add(*bytes, Ordering::Relaxed);
            }
            Event::FileDone {
                path,
                size,
                blake3,
                skipped,
                ..
            } => {
                let mut paths = self.paths.lock().ok();
                let recovered = self.recovers
                    && paths.as_mut().is_some_and(|p| {
                        p.delivered.insert(path.clone());
                        p.failed.remove(path)
                    });
                if let Ok(mut s) = self.summary.lock() {
                    if recovered {
                        s.failed = s.failed.saturating_sub(1);
                        s.failures.retain(|f| f.path != *path);
                    }
                    s.entries_ok += 1;
                    if *skipped {
                        s.files_skipped += 1;
                    } else if !blake3.is_empty() {
                        s.files_ok += 1;
                        s.bytes_verified += size;
                        s.files.push(FileRecord {
                            path: path.clone(),
                            size: *size,
                            blake3: blake3.clone(),
                        });
                    }
                }
                drop(paths);
            }
            Event::Deleted { .. } => {
                if let Ok(mut s) = self.summary.lock() {
                    s.deleted += 1;
                }
            }
            Event::FileError { path, error, kind } => {
                // A file counts once, however many of its ranges or
                // attempts reported it (and not at all, recovering, once
                // delivered).
                let mut paths = self.paths.lock().ok();
                let first = path.is_empty()
                    || paths.as_mut().is_none_or(|p| {
                        !(self.recovers && p.delivered.contains(path))
                            && p.failed.insert(path.clone())
                    });
                if let Ok(mut s) = self.summary.lock() {
                    if first {
                        s.failed += 1;
                        s.failures.push(Failure {
                            path: path.clone(),
                            error: error.clone(),
                            kind: *kind,
                        });
                    }
                }
                drop(paths);
            }
            _ => {}
        }
        self.inner.event(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recovering_tally_takes_back_a_failure_the_path_was_then_delivered_after() {
        let done = |path: &str| Event::FileDone {
            path: path.into(),
            size: 3,
            blake3: "ab".into(),
            skipped: false,
            sent: 3,
        };
        for recovering in [false, true] {
            let tally = match recovering {
                true => Tally::recovering(Arc::new(crate::event::Quiet)),
                false => Tally::new(Arc::new(crate::event::Quiet)),
            };
            tally.event(&Event::file_error(
                "a",
                "not sealed by this transfer's origin",
            ));
            tally.event(&Event::file_error("b", "disk full"));
            tally.event(&done("a"));
            // A stale session failing it after it was delivered.
            tally.event(&Event::file_error("a", "the peer closed the connection"));
            let s = tally.finish(Duration::ZERO, 0);
            assert_eq!(s.failed, if recovering { 1 } else { 2 });
            assert_eq!(s.failures.len() as u64, s.failed);
            assert_eq!(tally.has_failed("a"), !recovering);
            assert!(tally.has_failed("b"));
        }
    }

    #[test]
    fn a_file_fails_once_however_often_it_is_reported() {
        let tally = Tally::new(Arc::new(crate::event::Quiet));
        for error in ["range 0: gone", "range 1: gone", "range 1: gone"] {
            tally.event(&Event::file_error("big.bin", error));
        }
        tally.event(&Event::file_error("other", "x"));
        let s = tally.finish(Duration::from_secs(1), 1);
        assert_eq!(s.failed, 2);
        assert_eq!(s.failures.len(), 2);
        assert_eq!(s.failures[0].error, "range 0: gone");
    }
}
