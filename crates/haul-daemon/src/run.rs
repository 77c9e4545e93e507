//! One run of one source: list it through haul-fetch's crawl, decide each
//! listed file from the catalog (known files in memory, the rest claimed),
//! fetch the claimed ones within the daemon's caps, record each outcome.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use haul_catalog::{Catalog, Fetched, Known, RunCounts, Seen};
use haul_fetch::{FileGate, Gate, GateFile, GateOutcome};
use haul_session::{Event, Observer};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::delivery::{file_env, run_env, run_hook, FileFacts, RunFacts};
use crate::status::Board;
use crate::{unix, DaemonError, SourceSpec};

/// First wait before a failed file is tried again (doubling per attempt).
const FILE_RETRY_BASE: Duration = Duration::from_secs(60);
/// Longest wait before a failed file is tried again.
const FILE_RETRY_MAX: Duration = Duration::from_secs(6 * 3600);

/// What a run shares with the daemon.
pub(crate) struct RunContext {
    pub catalog: Arc<dyn Catalog>,
    pub worker: String,
    pub lease: Duration,
    pub global: Arc<Semaphore>,
    pub host: Arc<Semaphore>,
    pub board: Arc<Board>,
}

/// The catalog's say over one run's files.
struct RunGate {
    ctx: Arc<RunContext>,
    source: Arc<SourceSpec>,
    known: HashMap<String, Known>,
    listed: AtomicU64,
    claimed: AtomicU64,
    fetched: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
}

/// Runs a catalog call on a blocking thread (the drivers are synchronous).
pub(crate) async fn blocking<T: Send + 'static>(
    catalog: &Arc<dyn Catalog>,
    f: impl FnOnce(&dyn Catalog) -> haul_catalog::Result<T> + Send + 'static,
) -> Result<T, DaemonError> {
    let c = catalog.clone();
    tokio::task::spawn_blocking(move || f(c.as_ref()))
        .await
        .map_err(|e| DaemonError::Task(e.to_string()))?
        .map_err(DaemonError::Catalog)
}

fn seen_of(file: &GateFile) -> Seen {
    let mtime = file.entry.mtime.and_then(|t| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .ok()
            .and_then(|d| i64::try_from(d.as_secs()).ok())
    });
    Seen {
        path: file.rel.clone(),
        size: file.entry.size,
        mtime,
        etag: file.entry.version.clone(),
        checksums: file
            .entry
            .checksums
            .iter()
            .map(|c| format!("{}:{}", c.algorithm(), c.hex()))
            .collect(),
    }
}

impl RunGate {
    fn counts(&self) -> RunCounts {
        RunCounts {
            listed: self.listed.load(Ordering::Relaxed),
            claimed: self.claimed.load(Ordering::Relaxed),
            fetched: self.fetched.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }

    fn retry_after(&self, rel: &str) -> Duration {
        let attempts = self.known.get(rel).map_or(0, |k| k.attempts);
        FILE_RETRY_BASE
            .saturating_mul(1u32 << attempts.min(12))
            .min(FILE_RETRY_MAX)
    }
}

impl RunGate {
    /// The sidecar and the `on_file` hook of a delivered file.
    async fn after_file(&self, file: &GateFile, at: i64, blake3: String) {
        let src = &self.source;
        if !src.sidecar && src.on_file.is_none() {
            return;
        }
        let (name, rel) = (&src.name, &file.rel);
        let seen = seen_of(file);
        let facts = FileFacts {
            event: "file",
            source: name.clone(),
            url: format!("{}/{}", src.url.trim_end_matches('/'), rel),
            path: rel.clone(),
            local_path: src.dest.join(&file.dest_rel).display().to_string(),
            size: file.entry.size.unwrap_or(0),
            remote_mtime: seen.mtime,
            etag: seen.etag,
            checksums_verified: seen.checksums,
            blake3,
            fetched_at: at,
            worker: self.ctx.worker.clone(),
        };
        if src.sidecar {
            let (dest, dest_rel, f) = (src.dest.clone(), file.dest_rel.clone(), facts.clone());
            let written = tokio::task::spawn_blocking(move || {
                crate::delivery::write_sidecar(&dest, &dest_rel, &f)
            })
            .await;
            if let Err(e) = written
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
            {
                tracing::warn!("{name}: {rel}: cannot write its sidecar: {e}");
                self.ctx.board.hook_failure(name);
            }
        }
        if let Some(cmd) = &src.on_file {
            let json = serde_json::to_value(&facts).unwrap_or_default();
            if let Err(e) = run_hook(cmd, &file_env(&facts), &json, src.hook_timeout).await {
                tracing::warn!("{name}: {rel}: on_file hook {e} (the file stays delivered)");
                self.ctx.board.hook_failure(name);
            }
        }
    }
}

#[async_trait::async_trait]
impl FileGate for RunGate {
    async fn admit(&self, file: &GateFile) -> bool {
        self.listed.fetch_add(1, Ordering::Relaxed);
        let seen = seen_of(file);
        let now = unix(SystemTime::now());
        // Done files are decided here, in memory; the rest are claimed
        // when a download slot is free (`start`), so workers sharing a
        // catalog take files as they can fetch them.
        !self
            .known
            .get(&seen.path)
            .is_some_and(|k| k.needs_nothing(&seen, self.source.refetch, now))
    }

    async fn start(&self, file: &GateFile) -> Option<Box<dyn Send>> {
        let global = self.ctx.global.clone().acquire_owned().await.ok();
        let host = self.ctx.host.clone().acquire_owned().await.ok();
        let (name, worker, refetch) = (
            self.source.name.clone(),
            self.ctx.worker.clone(),
            self.source.refetch,
        );
        let now = unix(SystemTime::now());
        let until = now + secs(self.ctx.lease);
        let seen = seen_of(file);
        let claimed = blocking(&self.ctx.catalog, move |c| {
            c.claim(&name, &[seen], refetch, &worker, until, now)
        })
        .await;
        match claimed {
            Ok(paths) if !paths.is_empty() => {}
            Ok(_) => return None,
            Err(e) => {
                tracing::error!("{}: {}: cannot claim: {e}", self.source.name, file.rel);
                return None;
            }
        }
        self.claimed.fetch_add(1, Ordering::Relaxed);
        self.ctx.board.in_flight(&self.source.name, 1);
        Some(Box::new(InFlight {
            _permits: (global, host),
            board: self.ctx.board.clone(),
            source: self.source.name.clone(),
        }))
    }

    async fn settled(&self, file: &GateFile, outcome: GateOutcome) {
        let (name, rel) = (self.source.name.clone(), file.rel.clone());
        let now = unix(SystemTime::now());
        let result = match outcome {
            GateOutcome::Delivered {
                blake3,
                size,
                fetched,
            } => {
                self.fetched.fetch_add(1, Ordering::Relaxed);
                self.bytes.fetch_add(size, Ordering::Relaxed);
                self.ctx.board.delivered(&name, size, fetched, now);
                let facts = Fetched {
                    blake3,
                    local_path: self.source.dest.join(&file.dest_rel).display().to_string(),
                    at: now,
                    size,
                };
                tracing::info!("{name}: fetched {rel} ({size} bytes)");
                let (at, root) = (facts.at, facts.blake3.clone());
                let recorded =
                    blocking(&self.ctx.catalog, move |c| c.fetched(&name, &rel, &facts)).await;
                self.after_file(file, at, root).await;
                recorded
            }
            GateOutcome::UpToDate { size } => {
                // Already at the destination (the catalog was lost, or the
                // file was put there by hand): recorded, no digest known.
                let facts = Fetched {
                    blake3: String::new(),
                    local_path: self.source.dest.join(&file.dest_rel).display().to_string(),
                    at: now,
                    size,
                };
                blocking(&self.ctx.catalog, move |c| c.fetched(&name, &rel, &facts)).await
            }
            GateOutcome::Failed { error } => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                self.ctx.board.failure(&name);
                let next = now + secs(self.retry_after(&rel));
                blocking(&self.ctx.catalog, move |c| {
                    c.failed(&name, &rel, &error, next).map(|_| ())
                })
                .await
            }
            GateOutcome::Dropped => {
                let worker = self.ctx.worker.clone();
                blocking(&self.ctx.catalog, move |c| c.release(&name, &rel, &worker)).await
            }
        };
        if let Err(e) = result {
            tracing::error!(
                "{}: {}: cannot record the outcome in the catalog: {e}",
                self.source.name,
                file.rel
            );
        }
    }
}

/// Held while a file downloads: the caps' permits and the in-flight count.
struct InFlight {
    _permits: (Option<OwnedSemaphorePermit>, Option<OwnedSemaphorePermit>),
    board: Arc<Board>,
    source: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.board.in_flight(&self.source, -1);
    }
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// Logs a run's events: failures and warnings at their level, files at debug.
struct RunLog {
    source: String,
}

impl Observer for RunLog {
    fn event(&self, event: &Event) {
        match event {
            Event::FileError { path, error } => {
                tracing::warn!("{}: {path}: {error}", self.source);
            }
            Event::Warning { message } => tracing::warn!("{}: {message}", self.source),
            other => tracing::debug!("{}: {other:?}", self.source),
        }
    }
}

/// Runs `source` once; returns the counts, or why the source could not be
/// listed at all (the daemon backs off).
pub(crate) async fn run_once(
    ctx: Arc<RunContext>,
    source: Arc<SourceSpec>,
) -> Result<RunCounts, DaemonError> {
    let started = unix(SystemTime::now());
    let (name, worker) = (source.name.clone(), ctx.worker.clone());
    let id = blocking(&ctx.catalog, move |c| c.begin_run(&name, &worker, started)).await?;
    let name = source.name.clone();
    let known = blocking(&ctx.catalog, move |c| c.known(&name)).await?;
    let gate = Arc::new(RunGate {
        ctx: ctx.clone(),
        source: source.clone(),
        known,
        listed: AtomicU64::new(0),
        claimed: AtomicU64::new(0),
        fetched: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
    });
    let result = match (source.options)() {
        Err(why) => Err(DaemonError::Options(why)),
        Ok(mut opts) => {
            opts.gate = Some(Gate(gate.clone()));
            // The catalog decides what is fetched, not what the destination
            // holds: a file forgotten in the catalog is fetched again.
            opts.quick_check = false;
            let observer = Arc::new(RunLog {
                source: source.name.clone(),
            });
            haul_fetch::fetch(
                source.remote.clone(),
                &source.path,
                &source.dest,
                opts,
                observer,
                source.timeout,
            )
            .await
            .map(|_| ())
            .map_err(|e| DaemonError::Fetch(e.to_string()))
        }
    };
    let counts = gate.counts();
    let error = result.as_ref().err().map(ToString::to_string);
    let ended = unix(SystemTime::now());
    let e = error.clone();
    blocking(&ctx.catalog, move |c| {
        c.end_run(id, ended, &counts, e.as_deref())
    })
    .await?;
    if let Some(cmd) = &source.on_run {
        let facts = RunFacts {
            event: "run",
            source: source.name.clone(),
            run_id: id,
            listed: counts.listed,
            claimed: counts.claimed,
            fetched: counts.fetched,
            failed: counts.failed,
            bytes: counts.bytes,
            error,
            worker: ctx.worker.clone(),
        };
        let json = serde_json::to_value(&facts).unwrap_or_default();
        if let Err(e) = run_hook(cmd, &run_env(&facts), &json, source.hook_timeout).await {
            tracing::warn!("{}: on_run hook {e}", source.name);
            ctx.board.hook_failure(&source.name);
        }
    }
    result.map(|()| counts)
}
