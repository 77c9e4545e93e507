//! A node pull under a caller's [`Gate`] (the daemon's catalog, for a
//! `haul://` or ssh source): the gate decides which listed files are
//! fetched, when each may start, and hears what became of each — as it
//! does over haul-fetch's pulls (FTP, SFTP, HTTP, S3), so the daemon has
//! one way to decide over any source's files.
//!
//! The order is haul-fetch's: every listed file the filter took is
//! [admitted](haul_remote::gate::FileGate::admit) in listing order, and
//! admitted files wait in a channel for a
//! [start](haul_remote::gate::FileGate::start) (the gate's caps and
//! claims), so the gate may claim files in batches while earlier ones
//! download. The channel is not bounded, as a pull's queue is not: the
//! node's listing is read at its own pace, never held up by the caps
//! (a listing left unread would time out on the node). A started file is fetched whatever DEST holds (the gate
//! decides, not the quick check), except a copy the gate
//! [adopts](haul_remote::gate::FileGate::adopt_existing): one with the
//! listed size and mtime is hashed there and settled up to date. Each
//! started file is settled exactly once, from the pull's own events
//! (`file_done`, `file_error`), or, if the pull ended first, as failed
//! with the pull's error; its permit is held until then.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use haul_engine::Destination;
use haul_proto::{Entry, SkipRule};
use haul_remote::gate::{Gate, GateFile, GateOutcome};
use haul_remote::{EntryKind as RemoteKind, RemoteEntry};
use haul_run::FailKind;
use haul_session::{Event, Observer};
use tokio::task::JoinSet;

/// A listed file the gate admitted: what the pull queues once it starts.
pub(crate) struct AdmittedFile {
    /// The entry as DEST names it.
    pub entry: Entry,
    /// The path the node serves it under.
    pub served: String,
    /// The file as the gate sees it.
    pub file: GateFile,
}

/// A started file, the gate's permit held until it is settled, and the
/// verified bytes that came for it over every connection.
type Started = (GateFile, Box<dyn Send>, u64);

/// The gate of one pull, and the files it started that are not settled.
pub(crate) struct Gated {
    gate: Gate,
    /// Started, not settled: by path under DEST.
    started: Mutex<HashMap<String, Started>>,
    /// Outcomes being told to the gate (awaited before the pull returns).
    settling: Mutex<JoinSet<()>>,
}

impl Gated {
    /// A pull's gate.
    pub fn new(gate: Gate) -> Arc<Self> {
        Arc::new(Self {
            gate,
            started: Mutex::default(),
            settling: Mutex::default(),
        })
    }

    /// `observer`, with the pull's outcomes told to the gate first.
    pub fn watching(self: &Arc<Self>, observer: Arc<dyn Observer>) -> Arc<dyn Observer> {
        Arc::new(Watch {
            gated: self.clone(),
            inner: observer,
        })
    }

    /// `entry` (a file, as DEST names it) as the gate sees it: its path
    /// under DEST is also its path relative to the source.
    pub fn file(entry: &Entry, served: &str) -> GateFile {
        let name = entry.path.rsplit('/').next().unwrap_or(&entry.path);
        let mtime = u64::try_from(entry.mtime_sec).ok().and_then(|s| {
            SystemTime::UNIX_EPOCH.checked_add(Duration::new(s, entry.mtime_nsec.min(999_999_999)))
        });
        GateFile {
            rel: entry.path.clone(),
            remote_path: served.to_owned(),
            dest_rel: entry.path.clone(),
            entry: RemoteEntry {
                name: name.to_owned(),
                kind: RemoteKind::File,
                size: Some(entry.size),
                mtime,
                version: None,
                checksums: Vec::new(),
            },
        }
    }

    /// Whether the gate takes `file` at all.
    pub async fn admit(&self, file: &GateFile) -> bool {
        self.gate.0.admit(file).await
    }

    /// Waits for the gate's start of `admitted`. `Some`: fetch it (it is
    /// settled from the pull's events). `None`: not this one (the gate
    /// took it back, or adopted the copy DEST holds: settled already).
    pub async fn start(
        &self,
        admitted: AdmittedFile,
        dest: &Arc<Destination>,
    ) -> Option<AdmittedFile> {
        let file = &admitted.file;
        let permit = self.gate.0.start(file).await?;
        if self.gate.0.adopt_existing(file)
            && dest.quick_check(&admitted.entry, SkipRule::default())
        {
            let (d, rel) = (dest.clone(), file.dest_rel.clone());
            let hashed = tokio::task::spawn_blocking(move || d.hash_existing(&rel))
                .await
                .ok()
                .flatten();
            if let Some(hash) = hashed {
                let outcome = GateOutcome::UpToDate {
                    size: admitted.entry.size,
                    blake3: Some(hash.to_hex().to_string()),
                };
                self.settle(file.clone(), outcome, permit);
                return None;
            }
            // Not readable as one version: fetched after all.
        }
        let Ok(mut started) = self.started.lock() else {
            return None;
        };
        if started.contains_key(&file.dest_rel) {
            // Listed twice: fetched once, and this start let go at once.
            drop(started);
            self.settle(file.clone(), GateOutcome::Dropped, permit);
            return None;
        }
        started.insert(file.dest_rel.clone(), (file.clone(), permit, 0));
        Some(admitted)
    }

    /// Tells the gate what became of `file`, then lets its permit go.
    fn settle(&self, file: GateFile, outcome: GateOutcome, permit: Box<dyn Send>) {
        let gate = self.gate.clone();
        if let Ok(mut settling) = self.settling.lock() {
            // Those already told are reaped as new ones go (a pull of a
            // million files does not keep a million finished tasks).
            while settling.try_join_next().is_some() {}
            settling.spawn(async move {
                gate.0.settled(&file, outcome).await;
                drop(permit);
            });
        }
    }

    /// The pull's event about `path`, if it settles a started file.
    fn heard(&self, event: &Event) {
        if let Event::Progress { path, bytes } = event {
            if let Ok(mut started) = self.started.lock() {
                if let Some((_, _, came)) = started.get_mut(path) {
                    *came = came.saturating_add(*bytes);
                }
            }
            return;
        }
        let (path, outcome) = match event {
            Event::FileDone {
                path,
                size,
                blake3,
                sent,
                skipped,
            } => {
                let outcome = match skipped {
                    false => GateOutcome::Delivered {
                        blake3: blake3.clone(),
                        size: *size,
                        fetched: *sent,
                    },
                    true => GateOutcome::UpToDate {
                        size: *size,
                        blake3: (!blake3.is_empty()).then(|| blake3.clone()),
                    },
                };
                (path, outcome)
            }
            Event::FileError { path, error, kind } => (
                path,
                GateOutcome::Failed {
                    error: error.clone(),
                    unreachable: matches!(kind, FailKind::Unreachable | FailKind::Timeout),
                },
            ),
            _ => return,
        };
        let taken = self.started.lock().ok().and_then(|mut s| s.remove(path));
        if let Some((file, permit, came)) = taken {
            // A file split over connections: its `file_done` counts the
            // committing one's bytes, its progress every connection's.
            let outcome = match outcome {
                GateOutcome::Delivered {
                    blake3,
                    size,
                    fetched,
                } => GateOutcome::Delivered {
                    blake3,
                    size,
                    fetched: fetched.max(came),
                },
                other => other,
            };
            self.settle(file, outcome, permit);
        }
    }

    /// The pull ended: every started file it said nothing of failed with
    /// `why`; returns once the gate heard every outcome.
    pub async fn finish(&self, why: &str, unreachable: bool) {
        let left: Vec<Started> = self
            .started
            .lock()
            .map(|mut s| s.drain().map(|(_, v)| v).collect())
            .unwrap_or_default();
        for (file, permit, _) in left {
            let outcome = GateOutcome::Failed {
                error: why.to_owned(),
                unreachable,
            };
            self.settle(file, outcome, permit);
        }
        let mut settling = match self.settling.lock() {
            Ok(mut s) => std::mem::take(&mut *s),
            Err(_) => return,
        };
        while settling.join_next().await.is_some() {}
    }
}

/// A pull's observer that tells the gate each started file's outcome.
struct Watch {
    gated: Arc<Gated>,
    inner: Arc<dyn Observer>,
}

impl Observer for Watch {
    fn event(&self, event: &Event) {
        self.gated.heard(event);
        self.inner.event(event);
    }
}
