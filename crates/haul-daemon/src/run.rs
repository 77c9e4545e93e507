//! One run of one source: list it through haul-fetch's crawl (or a node's
//! listing, `SourceFrom::Node`: `haul_node::pull` under the same gate), decide each
//! listed file from the catalog (known files in memory, the rest claimed),
//! fetch the claimed ones within the daemon's caps, record each outcome.
//!
//! The catalog is asked in batches, not per file. Files the crawl admitted
//! wait in [`Claims::pending`]; when one of them reaches a download slot,
//! it is claimed together with the next pending ones in one call (one
//! transaction), and those start from that claim as their slots come. A
//! batch holds about [`CLAIM_AHEAD`] of this worker's downloads (measured
//! as it goes: one large slow file at a time, hundreds of small ones), so
//! workers sharing a catalog still divide a source's files between them.
//! Delivered files are recorded by group commit ([`Recorder`]): what
//! finished while one record was being written is written next, together,
//! with what it adds to the run's counts in the same transaction. A file is
//! recorded before its download's slot is given back, so a crash loses no
//! delivery; while the catalog refuses writes the record is held
//! (`writes.rs`) and no new file starts.
//!
//! A file the catalog knows but has not recorded fetched, found at the
//! destination with the listed size and mtime, is *adopted*: hashed there
//! and recorded, never fetched again (its record was lost with a catalog
//! that refused it). A run whose files keep failing because the source
//! stopped answering ends early as a source that is down: the daemon's
//! backoff for a down source paces the retries, not each file's.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use haul_catalog::{Catalog, Fetched, HookFailure, Known, RunCounts, RunProgress, Seen};
use haul_fetch::{FileGate, Gate, GateFile, GateOutcome};
use haul_run::{Event, Observer};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::delivery::{file_env, run_env, run_hook, FileFacts, RunFacts};
use crate::status::Board;
use crate::writes::{CatalogWrites, Write};
use crate::{unix, DaemonError, SourceFrom, SourceSpec};

/// Most files claimed in one catalog call (the crawl's queue of admitted
/// files, 64 in haul-fetch, usually bounds a batch first).
const CLAIM_BATCH: usize = 1000;

/// How much of this worker's work a batch of claims holds: as many files as
/// it started in that long, lately.
const CLAIM_AHEAD: Duration = Duration::from_secs(1);

/// Longest wait before a failed file is tried again.
const FILE_RETRY_MAX: Duration = Duration::from_secs(6 * 3600);

/// Files in a row that could not reach the source (with no delivery in
/// between) after which a run stops starting files: the source is down.
const UNREACHABLE_IN_A_ROW: u32 = 3;

/// What a run shares with the daemon.
pub(crate) struct RunContext {
    pub catalog: Arc<dyn Catalog>,
    pub worker: String,
    pub lease: Duration,
    pub global: Arc<Semaphore>,
    pub host: Arc<Semaphore>,
    pub board: Arc<Board>,
    /// Told when fetched files were recorded (the source's distributor).
    pub fetched: Arc<tokio::sync::Notify>,
    /// Writes that must not be lost, held while the catalog refuses them.
    pub writes: Arc<CatalogWrites>,
    /// First wait before a failed file is tried again (doubling per
    /// attempt, at most [`FILE_RETRY_MAX`]).
    pub file_retry: Duration,
    /// The transfer log, if the daemon keeps one.
    pub log: Option<Arc<haul_node::TransferLog>>,
}

/// The catalog's say over one run's files.
struct RunGate {
    ctx: Arc<RunContext>,
    source: Arc<SourceSpec>,
    known: HashMap<String, Known>,
    claims: tokio::sync::Mutex<Claims>,
    recorder: Recorder,
    listed: AtomicU64,
    claimed: AtomicU64,
    fetched: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
    /// The run's id in the catalog.
    run: i64,
    /// Files in a row that could not reach the source, and the last error.
    unreachable: std::sync::Mutex<(u32, Option<String>)>,
    /// A listed file this run left for a later one (a failed file waiting
    /// out its retry, one another worker holds or that could not be
    /// claimed): a node source's cursor does not pass it.
    left_for_later: std::sync::atomic::AtomicBool,
}

/// Files between their admission and their download's start.
#[derive(Default)]
struct Claims {
    /// Admitted, not asked for yet, in listing order.
    pending: Vec<Seen>,
    /// Their paths.
    pending_paths: HashSet<String>,
    /// Claimed for this run; download not started yet.
    ours: HashSet<String>,
    /// Files the next batch claims (1 at first, then by the rate).
    batch: usize,
    /// When the last batch was claimed.
    last_batch: Option<Instant>,
    /// Downloads started since.
    started: u64,
}

impl Claims {
    /// Sizes the next batch from the downloads started since the last one:
    /// [`CLAIM_AHEAD`] of them, growing at most fourfold a batch.
    fn resize(&mut self, now: Instant) {
        if let Some(last) = self.last_batch {
            let secs = now.duration_since(last).as_secs_f64().max(1e-3);
            let rate = self.started as f64 / secs;
            let want = (rate * CLAIM_AHEAD.as_secs_f64()).ceil();
            let most = self.batch.max(1).saturating_mul(4).min(CLAIM_BATCH);
            self.batch = if want >= most as f64 {
                most
            } else {
                (want as usize).max(1)
            };
        }
        self.batch = self.batch.max(1);
        self.last_batch = Some(now);
        self.started = 0;
    }

    /// The next batch: `first` and the pending files after it in listing
    /// order, [`Claims::batch`] in all.
    fn take(&mut self, first: &str) -> Vec<Seen> {
        let mut batch = Vec::with_capacity(self.batch);
        if let Some(i) = self.pending.iter().position(|s| s.path == first) {
            batch.push(self.pending.remove(i));
        }
        let more = self
            .batch
            .saturating_sub(batch.len())
            .min(self.pending.len());
        batch.extend(self.pending.drain(..more));
        for s in &batch {
            self.pending_paths.remove(&s.path);
        }
        batch
    }
}

/// Group commit of delivered files: [`Recorder::fetched`] returns once its
/// file is in the catalog, and files delivered while a batch was being
/// written go into the next one together.
#[derive(Default)]
struct Recorder {
    /// Files waiting for the writer: path, facts, and whether the run
    /// counts it as fetched.
    queue: std::sync::Mutex<Vec<(String, Fetched, bool)>>,
    writing: tokio::sync::Mutex<()>,
}

impl Recorder {
    /// Records `path` (with the files queued meanwhile) and what they add
    /// to the run; `false`: the catalog refuses writes, the record is held.
    async fn fetched(
        &self,
        writes: &CatalogWrites,
        source: &str,
        entry: (String, Fetched, bool),
        run: RunProgress,
    ) -> bool {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(entry);
        let _writer = self.writing.lock().await;
        let batch = std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()));
        // Empty: the writer before took this file and wrote (or held) it
        // before letting go of `writing`.
        if batch.is_empty() {
            return !writes.refusing();
        }
        let counted = batch.iter().filter(|f| f.2);
        let run = RunProgress {
            fetched: counted.clone().count() as u64,
            bytes: counted.map(|f| f.1.size).sum(),
            ..run
        };
        let files = batch.into_iter().map(|(p, f, _)| (p, f)).collect();
        writes
            .write(Write::Fetched {
                source: source.to_string(),
                files,
                run: Some(run),
            })
            .await
    }
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

    /// What the run's record says so far, for the next record.
    fn progress(&self) -> RunProgress {
        let c = self.counts();
        RunProgress {
            id: self.run,
            fetched: 0,
            bytes: 0,
            listed: c.listed,
            claimed: c.claimed,
            failed: c.failed,
        }
    }

    /// The source stopped answering: files in a row could not reach it
    /// with no delivery between them. Its last error then.
    fn source_lost(&self) -> Option<String> {
        let u = self.unreachable.lock().unwrap_or_else(|e| e.into_inner());
        (u.0 >= UNREACHABLE_IN_A_ROW).then(|| u.1.clone().unwrap_or_default())
    }

    /// Counts a file that could (`None`) or could not (`Some(error)`)
    /// reach the source.
    fn reached(&self, unreachable: Option<&str>) {
        let mut u = self.unreachable.lock().unwrap_or_else(|e| e.into_inner());
        match unreachable {
            None => *u = (0, None),
            Some(e) => *u = (u.0 + 1, Some(e.to_string())),
        }
    }

    /// Claims `first` with the next batch of pending files, in one call.
    async fn claim_batch(&self, claims: &mut Claims, first: &str) {
        claims.resize(Instant::now());
        let batch = claims.take(first);
        let now = unix(SystemTime::now());
        let until = now + secs(self.ctx.lease);
        let (name, worker, refetch) = (
            self.source.name.clone(),
            self.ctx.worker.clone(),
            self.source.refetch,
        );
        let n = batch.len();
        match blocking(&self.ctx.catalog, move |c| {
            c.claim(&name, &batch, refetch, &worker, until, now)
        })
        .await
        {
            Ok(paths) => claims.ours.extend(paths),
            Err(e) => {
                if !self.ctx.writes.refusing() {
                    tracing::debug!("{}: cannot claim {n} file(s): {e}", self.source.name);
                }
                self.ctx.writes.refused(&e);
            }
        }
    }

    /// Gives back the claims of files whose downloads never started (the
    /// fetch stopped early).
    /// Gives back the claims of files not started; how many there were.
    async fn release_unstarted(&self) -> usize {
        let left: Vec<String> = self.claims.lock().await.ours.drain().collect();
        if left.is_empty() {
            return 0;
        }
        let (name, worker) = (self.source.name.clone(), self.ctx.worker.clone());
        let n = left.len();
        let released = blocking(&self.ctx.catalog, move |c| {
            left.iter().try_for_each(|p| c.release(&name, p, &worker))
        })
        .await;
        if let Err(e) = released.map_err(|e| (self.ctx.writes.refusing(), e)) {
            if e.0 {
                return n; // said once by the catalog's writes
            }
            let e = e.1;
            tracing::warn!(
                "{}: cannot give back {n} claim(s) of files not started: {e} (their leases end on their own)",
                self.source.name
            );
        }
        n
    }

    fn retry_after(&self, rel: &str) -> Duration {
        let attempts = self.known.get(rel).map_or(0, |k| k.attempts);
        self.ctx
            .file_retry
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
            site: None,
            site_url: None,
            delivered_at: None,
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
                self.hook_failed(rel, format!("sidecar: {e}")).await;
            }
        }
        if let Some(cmd) = &src.on_file {
            let json = serde_json::to_value(&facts).unwrap_or_default();
            if let Err(e) = run_hook(cmd, &file_env(&facts), &json, src.hook_timeout).await {
                tracing::warn!("{name}: {rel}: on_file hook {e} (the file stays delivered)");
                self.hook_failed(rel, format!("on_file hook {e}")).await;
            }
        }
    }

    /// Counts a failed hook or sidecar and keeps it with the file in the catalog.
    async fn hook_failed(&self, rel: &str, error: String) {
        let name = self.source.name.clone();
        self.ctx.board.hook_failure(&name);
        let failure = HookFailure {
            error,
            at: unix(SystemTime::now()),
        };
        let path = rel.to_string();
        let n = name.clone();
        if let Err(e) = blocking(&self.ctx.catalog, move |c| {
            c.file_hook_failed(&n, &path, &failure)
        })
        .await
        {
            tracing::error!("{name}: {rel}: cannot record the hook's failure in the catalog: {e}");
        }
    }
}

#[async_trait::async_trait]
impl FileGate for RunGate {
    /// Files seen and claimed but never recorded fetched: a copy at the
    /// destination with the listed size and mtime is the one this daemon
    /// delivered before its record was lost. Not a file fetched before in
    /// another version (`refetch = "if-changed"`): its copy may be the old
    /// version under the same size and mtime, so it is fetched.
    fn adopt_existing(&self, file: &GateFile) -> bool {
        self.known
            .get(&file.rel)
            .is_some_and(|k| k.state != "fetched" && !k.fetched_before)
    }

    async fn admit(&self, file: &GateFile) -> bool {
        self.listed.fetch_add(1, Ordering::Relaxed);
        let seen = seen_of(file);
        let now = unix(SystemTime::now());
        // Done files are decided here, in memory; the rest wait to be
        // claimed when a download slot is free (`start`), in batches the
        // size of about a second of this worker's downloads, so workers
        // sharing a catalog take files as they can fetch them.
        if let Some(k) = self
            .known
            .get(&seen.path)
            .filter(|k| k.needs_nothing(&seen, self.source.refetch, now))
        {
            // Done, or failed and waiting: only the second is for later.
            if k.state != "fetched" {
                self.left_for_later.store(true, Ordering::Relaxed);
            }
            return false;
        }
        let mut claims = self.claims.lock().await;
        if claims.pending_paths.insert(seen.path.clone()) {
            claims.pending.push(seen);
        }
        true
    }

    async fn start(&self, file: &GateFile) -> Option<Box<dyn Send>> {
        let global = self.ctx.global.clone().acquire_owned().await.ok();
        let host = self.ctx.host.clone().acquire_owned().await.ok();
        // Nothing new while the catalog cannot record it, or while the
        // source does not answer (the run ends; the daemon's backoff for a
        // down source decides when it is tried again).
        if self.ctx.writes.refusing() || self.source_lost().is_some() {
            self.left_for_later.store(true, Ordering::Relaxed);
            return None;
        }
        {
            let mut claims = self.claims.lock().await;
            if claims.pending_paths.contains(&file.rel) {
                self.claim_batch(&mut claims, &file.rel).await;
            }
            // Not ours: another worker holds it, or the claim failed (logged).
            if !claims.ours.remove(&file.rel) {
                self.left_for_later.store(true, Ordering::Relaxed);
                return None;
            }
            claims.started += 1;
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
        let local_path = self.source.dest.join(&file.dest_rel).display().to_string();
        let result = match outcome {
            GateOutcome::Delivered {
                blake3,
                size,
                fetched,
            } => {
                self.reached(None);
                self.fetched.fetch_add(1, Ordering::Relaxed);
                self.bytes.fetch_add(size, Ordering::Relaxed);
                self.ctx.board.delivered(&name, size, fetched, now);
                let facts = Fetched {
                    blake3: blake3.clone(),
                    local_path,
                    at: now,
                    size,
                };
                tracing::info!("{name}: fetched {rel} ({size} bytes)");
                self.record(rel, facts, true).await;
                self.after_file(file, now, blake3).await;
                Ok(())
            }
            GateOutcome::UpToDate {
                size,
                blake3: Some(blake3),
            } => {
                // Delivered before, its record lost with a catalog that
                // refused it: recorded now from the copy at the destination.
                self.fetched.fetch_add(1, Ordering::Relaxed);
                self.bytes.fetch_add(size, Ordering::Relaxed);
                self.ctx.board.delivered(&name, size, 0, now);
                tracing::info!(
                    "{name}: {rel} was delivered before its record could be written: \
                     recorded from the copy at its destination, not fetched again"
                );
                let facts = Fetched {
                    blake3: blake3.clone(),
                    local_path,
                    at: now,
                    size,
                };
                // Its sidecar and hook ran when it was delivered.
                self.record(rel, facts, true).await;
                Ok(())
            }
            GateOutcome::UpToDate { size, blake3: None } => {
                // Already at the destination (`skip_existing`), or an adopted
                // copy that could not be read: recorded, no digest known.
                let facts = Fetched {
                    blake3: String::new(),
                    local_path,
                    at: now,
                    size,
                };
                self.record(rel, facts, false).await;
                Ok(())
            }
            GateOutcome::Failed { error, unreachable } => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                self.ctx.board.failure(&name);
                // A source that does not answer is the source's failure,
                // paced by the daemon's backoff for a down source: the file
                // is due again as soon as the source is.
                self.reached(unreachable.then_some(error.as_str()));
                let next = if unreachable {
                    now
                } else {
                    now + secs(self.retry_after(&rel))
                };
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
        // A failure or a claim given back that the catalog did not take:
        // said once as the catalog's refusal (the file's claim lapses; it is
        // tried again when the catalog takes writes).
        if let Err(e) = result {
            self.ctx.writes.refused(&e);
        }
    }
}

impl RunGate {
    /// Records a delivered file (held while the catalog refuses writes);
    /// tells the distributor once it is in the catalog.
    async fn record(&self, rel: String, facts: Fetched, counted: bool) {
        let written = self
            .recorder
            .fetched(
                &self.ctx.writes,
                &self.source.name,
                (rel, facts, counted),
                self.progress(),
            )
            .await;
        if written {
            self.ctx.fetched.notify_one();
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

/// Logs a run's events: failures and warnings at their level, files at
/// debug; and each file in the transfer log, if there is one.
struct RunLog {
    source: String,
    transfer_log: Option<Arc<haul_node::transfer_log::ConnectionLog>>,
    /// An entry failed (a listed file, or something the listing could not
    /// name): a node source's cursor does not pass it.
    had_errors: std::sync::atomic::AtomicBool,
}

impl Observer for RunLog {
    fn event(&self, event: &Event) {
        if let Some(log) = &self.transfer_log {
            log.event(event);
        }
        match event {
            Event::FileError { path, error, .. } => {
                self.had_errors.store(true, Ordering::Relaxed);
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
    let alive = started + secs(ctx.lease);
    let id = blocking(&ctx.catalog, move |c| {
        c.begin_run(&name, &worker, started, alive)
    })
    .await?;
    let name = source.name.clone();
    let known = match blocking(&ctx.catalog, move |c| c.known(&name)).await {
        Ok(known) => known,
        Err(e) => {
            let ended = unix(SystemTime::now());
            let end = Write::EndRun {
                id,
                ended,
                counts: RunCounts::default(),
                error: Some(e.to_string()),
            };
            ctx.writes.write(end).await;
            return Err(e);
        }
    };
    let gate = Arc::new(RunGate {
        ctx: ctx.clone(),
        source: source.clone(),
        known,
        claims: tokio::sync::Mutex::new(Claims::default()),
        recorder: Recorder::default(),
        listed: AtomicU64::new(0),
        claimed: AtomicU64::new(0),
        fetched: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        run: id,
        unreachable: std::sync::Mutex::new((0, None)),
        left_for_later: Default::default(),
    });
    let observer = Arc::new(RunLog {
        source: source.name.clone(),
        transfer_log: ctx
            .log
            .as_ref()
            .map(|l| l.daemon_run(&source.name, &source.url)),
        had_errors: Default::default(),
    });
    // A node source's place in the node's journal: advanced only by a run
    // that handled everything its listing named.
    let mut list_cursor = None;
    let result = match &source.from {
        SourceFrom::Remote {
            remote,
            path,
            options,
        } => match options() {
            Err(why) => Err(DaemonError::Options(why)),
            Ok(mut opts) => {
                opts.gate = Some(Gate(gate.clone()));
                opts.staging = source.staging.clone();
                // The catalog decides what is fetched, not what the
                // destination holds: a file forgotten in the catalog is
                // fetched again.
                opts.quick_check = false;
                haul_fetch::fetch(
                    remote.clone(),
                    path,
                    &source.dest,
                    opts,
                    observer.clone(),
                    source.timeout,
                )
                .await
                .map(|_| ())
                .map_err(|e| DaemonError::Fetch(haul_run::error_text(&e)))
            }
        },
        SourceFrom::Node(node) => match node() {
            Err(why) => Err(DaemonError::Options(why)),
            Ok((at, mut opts)) => {
                // As over any remote: the catalog decides (the pull then
                // receives whatever it starts, whatever DEST holds).
                opts.gate = Some(Gate(gate.clone()));
                opts.staging = source.staging.clone();
                list_cursor.clone_from(&opts.list_cursor);
                match std::fs::create_dir_all(&source.dest) {
                    Err(e) => Err(DaemonError::Fetch(format!(
                        "cannot make dest {}: {e}",
                        source.dest.display()
                    ))),
                    Ok(()) => haul_node::pull(&at, &source.dest, &opts, observer.clone())
                        .await
                        .map(|_| ())
                        .map_err(|e| DaemonError::Fetch(haul_run::error_text(&e))),
                }
            }
        },
    };
    let unstarted = gate.release_unstarted().await;
    // Listed, but its files stopped reaching the source: a source that is
    // down, tried again with the daemon's backoff.
    let result = match (result, gate.source_lost()) {
        (Ok(()), Some(e)) => Err(DaemonError::Fetch(format!(
            "the source stopped answering mid-run ({UNREACHABLE_IN_A_ROW} files in a row could not reach it): {e}"
        ))),
        (r, _) => r,
    };
    let counts = gate.counts();
    if let Some(cursor) = &list_cursor {
        let handled_all = result.is_ok()
            && counts.failed == 0
            && unstarted == 0
            && !gate.left_for_later.load(Ordering::Relaxed)
            && !observer.had_errors.load(Ordering::Relaxed);
        if handled_all {
            cursor.advance();
        } else {
            tracing::info!(
                "{}: something this run listed was left for later: the next run asks the node again from the same place",
                source.name
            );
        }
        if cursor.last_changes_only() == Some(true) {
            tracing::info!(
                "{}: the node listed only what changed since the last run ({} file(s))",
                source.name,
                counts.listed
            );
        }
    }
    let error = result.as_ref().err().map(ToString::to_string);
    let ended = unix(SystemTime::now());
    ctx.writes
        .write(Write::EndRun {
            id,
            ended,
            counts,
            error: error.clone(),
        })
        .await;
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
            let failure = HookFailure {
                error: format!("on_run hook {e}"),
                at: unix(SystemTime::now()),
            };
            if let Err(e) = blocking(&ctx.catalog, move |c| c.run_hook_failed(id, &failure)).await {
                tracing::error!(
                    "{}: cannot record the on_run hook's failure in the catalog: {e}",
                    source.name
                );
            }
        }
    }
    result.map(|()| counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(path: &str) -> Seen {
        Seen {
            path: path.into(),
            size: None,
            mtime: None,
            etag: None,
            checksums: vec![],
        }
    }

    #[test]
    fn batches_follow_the_download_rate() {
        let mut c = Claims::default();
        for i in 0..100 {
            let s = seen(&format!("{i:03}"));
            c.pending_paths.insert(s.path.clone());
            c.pending.push(s);
        }
        let t0 = Instant::now();
        // The first batch is one file: the rate is not known yet.
        c.resize(t0);
        let b = c.take("005");
        assert_eq!(
            b.iter().map(|s| s.path.as_str()).collect::<Vec<_>>(),
            ["005"]
        );
        // Small files: 50 started within 10 ms; the batch grows fourfold a time.
        c.started = 50;
        c.resize(t0 + Duration::from_millis(10));
        assert_eq!(c.batch, 4);
        let b = c.take("000");
        assert_eq!(
            b.iter().map(|s| s.path.as_str()).collect::<Vec<_>>(),
            ["000", "001", "002", "003"]
        );
        c.started = 50;
        c.resize(t0 + Duration::from_millis(20));
        assert_eq!(c.batch, 16);
        assert_eq!(c.take("010").len(), 16);
        assert!(!c.pending_paths.contains("010") && c.pending.len() == 100 - 21);
        // Slow large files: one started in 1.5 s: one at a time again, so
        // other workers get the rest.
        c.started = 1;
        c.resize(t0 + Duration::from_millis(1520));
        assert_eq!(c.batch, 1);
        // Never more than CLAIM_BATCH, never more than what is pending.
        c.batch = CLAIM_BATCH;
        c.started = 1_000_000;
        c.resize(t0 + Duration::from_secs(2));
        assert_eq!(c.batch, CLAIM_BATCH);
        assert_eq!(c.take("099").len(), 100 - 21);
        assert!(c.pending.is_empty() && c.pending_paths.is_empty());
    }
}
