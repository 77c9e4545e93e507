//! haul's download driver for remote sources (FTP, FTPS, SFTP, HTTP(S), S3):
//! `haul pull URL DEST`.
//!
//! Bird's-eye view: [`fetch`] states the URL's path; a file becomes one job,
//! a directory is crawled (`crawl.rs`) with one session, depth first, and the
//! files the [`filter::Filter`] takes stream through a bounded channel to the
//! download workers (`download.rs`) — the first download starts while the
//! listing goes on, and a directory of 100,000 entries never sits in memory.
//! Workers borrow logged-in sessions from a `SessionPool` (`sessions.rs`) capped
//! by `--max-conn-per-host` and reused from file to file.
//!
//! A source whose listings lack what a stat tells (HTTP, S3) gets a stat
//! per file before it is read — except a file with nothing of it at the
//! destination yet: that one is fetched with one described read (the
//! answer's headers describe it, then its body follows), which saves a
//! round trip per new file. Where listings are exact (S3), a file the
//! listing shows already at the destination is skipped without a stat.
//!
//! Each file is fetched into the engine's [`haul_engine::PartialFile`] in
//! BLAKE3-hashed chunks: the resume log records every chunk written, so an
//! interrupted download (a broken connection, a killed server, a killed
//! haul) continues from the last verified chunk with a ranged read. The
//! resume state is keyed by the remote size, mtime and ETag: a file that
//! changed starts over rather than splicing two versions. Before the atomic
//! rename the size is checked, and every checksum the source offers (ETag
//! MD5, x-amz-checksum-*, Content-MD5 / Digest, sidecars) is computed over
//! the staged bytes; a mismatch discards the data and is retried.
//!
//! Invariants:
//! - Nothing appears under a final name before its size and every offered
//!   checksum verified, and its data was fsynced.
//! - Every network wait is bounded by the remote's timeout; every retry
//!   backs off exponentially with jitter, within `--retries`.
//! - A failing file never stops the others; it is reported with its reason.

pub mod check;
mod crawl;
mod download;
pub mod dry_run;
pub mod listing;
pub mod pace;
pub mod rename;
mod retry;
mod sessions;
mod sidecar;
pub mod verify;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use haul_engine::{Destination, ReceiveError};
use haul_remote::{EntryKind, Remote, RemoteError};
use haul_run::backoff::RetryPolicy;
use haul_run::concurrency::{AutoParams, AutoTuner, Concurrency};
use haul_run::summary::{Summary, Tally};
use haul_run::{Event, Observer};
use tokio::sync::{mpsc, Semaphore};

/// The filters, shared with pushes and node pulls (`haul-filter`).
pub use haul_filter as filter;
pub use haul_filter::{Filter, RuleKind};
pub use haul_remote::gate::{FileGate, Gate, GateFile, GateOutcome};
pub use rename::RenameTemplate;

use crate::crawl::FileJob;
use crate::sessions::SessionPool;
use crate::sidecar::Sidecars;

/// How to fetch.
#[derive(Debug)]
pub struct FetchOptions {
    /// Files in flight: fixed, or `auto` (start at 4, add while throughput rises).
    pub jobs: Concurrency,
    /// Range connections for one large file.
    pub streams: u32,
    /// Files at least this large are split over `streams`.
    pub split_min: u64,
    /// Sessions open to the remote at most.
    pub max_conn_per_host: u32,
    /// How one file (or one listing) is tried again after retryable
    /// failures: the same policy as a node's connections.
    pub retry: RetryPolicy,
    /// rsync's quick check: a file present with the same size and mtime is skipped.
    pub quick_check: bool,
    /// Skip any file that already exists at the destination, whatever its size.
    pub skip_existing: bool,
    /// `--checksum`: a file at the destination with the source's size is up
    /// to date when it matches every checksum the source offers for it
    /// (stated first), and fetched again when one differs, whatever the
    /// mtimes say; where the source offers none, the quick check decides
    /// (and a warning counts those files).
    pub checksum: bool,
    /// `--delete` (mirror): once every file was delivered and nothing
    /// failed, the source is listed again and what the destination holds
    /// under it that the source does not have is removed.
    pub delete: bool,
    /// `--max-delete N`: with `--delete`, delete nothing when more than N
    /// entries would go.
    pub max_delete: Option<u64>,
    /// `--delete-excluded`: `--delete` also removes what the filters leave
    /// out at the destination.
    pub delete_excluded: bool,
    /// What the crawl takes.
    pub filter: Filter,
    /// Destination paths from a template.
    pub rename: Option<RenameTemplate>,
    /// Check files against sidecar checksum files.
    pub verify_sidecar: bool,
    /// Delete each remote file once its copy is verified.
    pub delete_source: bool,
    /// Prefix under the destination (the source directory's name when the
    /// URL has no trailing slash; set by [`fetch`]).
    pub dest_prefix: String,
    /// The caller's say over each file (`haul daemon`'s catalog and caps).
    pub gate: Option<Gate>,
    /// Where partial files are staged (default `DEST/.haul/partial`); on
    /// DEST's filesystem, for this destination only.
    pub staging: Option<std::path::PathBuf>,
    /// scp's rule: a URL naming one file, pulled to a DEST that names a
    /// file (nothing there or a regular file, no trailing `/`), makes that
    /// file ([`haul_engine::OneFile`]). Off, DEST is always a directory (a
    /// daemon's); `--rename` turns it off too.
    pub one_file_names: bool,
    /// `--backup`: what a delivered file or `--delete` replaces or removes
    /// at the destination is kept as (rsync's `-b`).
    pub backup: Option<haul_proto::Backup>,
    /// `--max-transfer`: once this many bytes arrived, no further download
    /// starts (rclone's soft cutoff; those under way finish).
    pub max_transfer: Option<u64>,
}

impl Default for FetchOptions {
    fn default() -> Self {
        Self {
            jobs: Concurrency::Auto { max: 16 },
            streams: 1,
            split_min: 64 << 20,
            max_conn_per_host: 16,
            retry: RetryPolicy::default(),
            quick_check: true,
            skip_existing: false,
            checksum: false,
            delete: false,
            max_delete: None,
            delete_excluded: false,
            filter: Filter::default(),
            rename: None,
            verify_sidecar: false,
            delete_source: false,
            dest_prefix: String::new(),
            gate: None,
            staging: None,
            one_file_names: false,
            backup: None,
            max_transfer: None,
        }
    }
}

/// Why a fetch could not run at all (per-file failures are in the summary).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL's path could not be stated.
    #[error("{url}")]
    Remote {
        /// The URL, without secrets.
        url: String,
        /// Why.
        source: RemoteError,
    },
    /// The destination could not be opened.
    #[error(transparent)]
    Destination(#[from] ReceiveError),
    /// The backup rule cannot be kept at the destination.
    #[error("--backup: {0}")]
    Backup(String),
}

impl FetchError {
    /// What kind of failure it is: a server that stopped answering, or
    /// could not be reached.
    pub fn fail_kind(&self) -> haul_run::FailKind {
        match self {
            FetchError::Remote { source, .. } => download::fail_kind(source),
            FetchError::Destination(_) | FetchError::Backup(_) => haul_run::FailKind::Error,
        }
    }

    /// True when the cause is how haul was invoked or configured (a wrong
    /// password, an unknown host key): exit code 2 territory.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            FetchError::Remote {
                source: RemoteError::Auth(_)
                    | RemoteError::HostKey(_)
                    | RemoteError::Unsupported(_),
                ..
            } | FetchError::Backup(_)
        )
    }
}

/// State shared by the crawl and the workers.
pub(crate) struct Ctx {
    pub(crate) pool: Arc<SessionPool>,
    pub(crate) dest: Arc<Destination>,
    pub(crate) opts: FetchOptions,
    pub(crate) tally: Arc<Tally>,
    pub(crate) host: String,
    pub(crate) started: SystemTime,
    pub(crate) sidecars: Sidecars,
    /// Bytes received so far, counted as they arrive (for `-j auto`).
    pub(crate) received: AtomicU64,
    /// With `--rename`: each destination path and the remote file that
    /// took it first (two files must never land on one name).
    pub(crate) renamed: std::sync::Mutex<std::collections::HashMap<String, String>>,
    /// Checksum files delivered but not deleted by `--delete-source`.
    pub(crate) kept_sidecars: AtomicU64,
    /// `--checksum`: files of the source's size the source offered no
    /// checksum for (the quick check decided them).
    pub(crate) unchecked: AtomicU64,
    /// With `--verify-sidecar`: how many files had no checksum file, and
    /// the first few of them.
    pub(crate) without_sidecar: std::sync::Mutex<(u64, Vec<String>)>,
    /// `--backup`: where what a delivery replaces is kept.
    pub(crate) backups: Option<Arc<haul_engine::backup::Backups>>,
}

impl Ctx {
    /// Size of the regular file already at `rel` under the destination.
    pub(crate) fn existing_size(&self, rel: &str) -> Option<u64> {
        self.dest.existing_file_size(rel)
    }
}

/// Fetches `path` (a file or a directory tree) from `remote` into `dest`.
/// A directory URL without a trailing `/` lands in `dest/NAME/` (rsync's
/// rule); with a trailing `/` its contents land in `dest/`.
pub async fn fetch(
    remote: Arc<dyn Remote>,
    path: &str,
    dest: &Path,
    mut opts: FetchOptions,
    observer: Arc<dyn Observer>,
    timeout: Duration,
) -> Result<Summary, FetchError> {
    let started = Instant::now();
    let tally = Tally::new(observer);
    let url = remote.display();
    let host = remote.host();
    let pool = SessionPool::new(remote, opts.max_conn_per_host, timeout);
    let remote_err = |source| FetchError::Remote {
        url: format!("{path} on {url}"),
        source,
    };
    // The source itself, stated with the pool's first session.
    let mut lease = pool.take().await.map_err(remote_err)?;
    let root = lease.session().stat(path).await.map_err(remote_err)?;
    pool.give_back(lease);
    let trimmed = path.trim_end_matches('/');
    let name = trimmed.rsplit('/').next().unwrap_or("").to_string();
    let one = (root.kind == EntryKind::File && opts.one_file_names && opts.rename.is_none())
        .then(|| haul_engine::OneFile::local(dest))
        .flatten();
    let dest = one.as_ref().map_or(dest, |one| one.dir.as_path());
    let destination = Destination::open_staged(dest, opts.staging.as_deref())?;
    let backups = opts
        .backup
        .clone()
        .map(|b| haul_engine::backup::Backups::new(b, destination.held_root(), "").map(Arc::new))
        .transpose()
        .map_err(FetchError::Backup)?;
    destination.apply_dir_metadata_at_end();
    // Remote modes are not carried over: local ones are left alone.
    destination.keep_modes();
    let (jobs_tx, jobs_rx) = mpsc::channel::<FileJob>(64);
    match root.kind {
        EntryKind::File => {
            if name.is_empty() {
                return Err(remote_err(RemoteError::NotFound(
                    "the URL names no file".into(),
                )));
            }
            let dir = &trimmed[..trimmed.len() - name.len()];
            opts.dest_prefix.clear();
            let ctx = ctx(&pool, &destination, opts, &tally, host, backups);
            let entry = haul_remote::RemoteEntry {
                name: name.clone(),
                ..root
            };
            let job = ctx
                .job_for(format!("{dir}{name}"), name, entry)
                .map(|job| FileJob {
                    stated: true,
                    dest_rel: one.map_or(job.dest_rel, |one| one.name),
                    ..job
                });
            drop(jobs_tx);
            let (tx, rx) = mpsc::channel(1);
            if let Some(job) = job {
                if job.admitted(&ctx).await {
                    let _ = tx.send(job).await;
                }
            }
            drop(tx);
            run_workers(ctx.clone(), rx).await;
            drop(jobs_rx);
            return Ok(finish(&ctx, &destination, started));
        }
        EntryKind::Dir => {
            if !path.ends_with('/') && !name.is_empty() {
                opts.dest_prefix = name;
            }
        }
        EntryKind::Other => {
            return Err(remote_err(RemoteError::Unsupported(
                "neither a file nor a directory".into(),
            )))
        }
    }
    let ctx = ctx(&pool, &destination, opts, &tally, host, backups);
    let dir = if path.ends_with('/') {
        path.to_string()
    } else {
        format!("{path}/")
    };
    let crawler = tokio::spawn(crawl::crawl(ctx.clone(), dir.clone(), jobs_tx));
    run_workers(ctx.clone(), jobs_rx).await;
    let crawled = crawler.await.is_ok();
    if ctx.opts.delete {
        mirror(&ctx, &dir, dest, crawled).await;
    }
    Ok(finish(&ctx, &destination, started))
}

/// `--delete`: once nothing failed, lists the source again (complete, or
/// nothing is deleted) and removes what DEST holds under the source's top
/// that the source does not have, through the filter (what it leaves out
/// is kept).
async fn mirror(ctx: &Ctx, dir: &str, dest: &Path, crawled: bool) {
    use haul_engine::mirror::nothing_deleted;
    let failed = ctx.tally.failed();
    if failed > 0 || !crawled {
        let why = if crawled {
            format!("{failed} file(s) failed")
        } else {
            "the listing stopped".into()
        };
        ctx.tally.event(&nothing_deleted(&why));
        return;
    }
    let filter = Arc::new(ctx.opts.filter.clone());
    let listing = listing::list_remote(ctx.pool.remote().clone(), dir, true, filter).await;
    let listing = match listing {
        Ok(l) if l.errors.is_empty() => l,
        Ok(l) => {
            let (path, error) = &l.errors[0];
            ctx.tally.event(&nothing_deleted(&format!(
                "the source's listing was not complete ({path}: {error})"
            )));
            return;
        }
        Err(e) => {
            ctx.tally.event(&nothing_deleted(&format!(
                "the source could not be listed again ({e})"
            )));
            return;
        }
    };
    let top = ctx.opts.dest_prefix.clone();
    let mut source: std::collections::HashSet<String> = listing
        .entries
        .into_iter()
        .map(|l| crawl::join_rel(&top, &l.path))
        .collect();
    if !top.is_empty() {
        source.insert(top.clone());
    }
    let filter = Arc::new(ctx.opts.filter.clone());
    haul_engine::mirror::prune_reported(
        dest,
        &top,
        &source,
        Some(&filter).filter(|_| !ctx.opts.delete_excluded),
        ctx.opts.max_delete,
        ctx.opts.backup.as_ref(),
        ctx.tally.as_ref(),
    );
}

fn ctx(
    pool: &Arc<SessionPool>,
    dest: &Arc<Destination>,
    opts: FetchOptions,
    tally: &Arc<Tally>,
    host: String,
    backups: Option<Arc<haul_engine::backup::Backups>>,
) -> Arc<Ctx> {
    Arc::new(Ctx {
        pool: pool.clone(),
        dest: dest.clone(),
        opts,
        tally: tally.clone(),
        host,
        started: SystemTime::now(),
        sidecars: Sidecars::default(),
        received: AtomicU64::new(0),
        renamed: std::sync::Mutex::new(std::collections::HashMap::new()),
        kept_sidecars: AtomicU64::new(0),
        unchecked: AtomicU64::new(0),
        without_sidecar: std::sync::Mutex::new((0, Vec::new())),
        backups,
    })
}

fn finish(ctx: &Ctx, dest: &Destination, started: Instant) -> Summary {
    if let Ok((count, first)) = ctx.without_sidecar.lock().map(|u| u.clone()) {
        if count > 0 {
            let more = count - first.len() as u64;
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            ctx.tally.event(&Event::Warning {
                message: format!(
                    "{count} file(s) had no checksum file beside them and were verified by size only: {}{more}",
                    first.join(", ")
                ),
            });
        }
    }
    let unchecked = ctx.unchecked.load(Ordering::Relaxed);
    if unchecked > 0 {
        ctx.tally.event(&Event::Warning {
            message: format!(
                "--checksum: the source offers no checksum for {unchecked} file(s) already here; they were compared by size and mtime"
            ),
        });
    }
    let kept = ctx.kept_sidecars.load(Ordering::Relaxed);
    if kept > 0 {
        ctx.tally.event(&Event::Warning {
            message: format!(
                "--delete-source kept {kept} checksum file(s) at the source: with --verify-sidecar they may cover files not delivered yet"
            ),
        });
    }
    dest.apply_dir_metadata();
    dest.tidy_state_dir();
    let summary = ctx.tally.finish(started.elapsed(), ctx.pool.peak());
    // With a gate, files it declined are its own to count (the daemon's
    // runs report them), not "nothing matched".
    if summary.entries_ok == 0
        && summary.failed == 0
        && summary.files_skipped == 0
        && ctx.opts.gate.is_none()
    {
        // An S3 prefix that does not exist lists like an empty one.
        ctx.tally.event(&Event::Warning {
            message: "nothing was fetched: the source is empty, or no file matched the filters"
                .into(),
        });
    }
    summary
}

/// Runs downloads from `jobs` with the concurrency policy; returns when the
/// channel is closed and every download has ended.
async fn run_workers(ctx: Arc<Ctx>, mut jobs: mpsc::Receiver<FileJob>) {
    let cap = ctx.pool.cap().max(1);
    let tuner = AutoTuner::new(ctx.opts.jobs, cap, AutoParams::REMOTE_FILES);
    let permits = Arc::new(Semaphore::new(tuner.level() as usize));
    let controller = (!tuner.is_settled())
        .then(|| tokio::spawn(auto_concurrency(ctx.clone(), permits.clone(), tuner)));
    let mut running = tokio::task::JoinSet::new();
    while let Some(job) = jobs.recv().await {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        if ctx
            .opts
            .max_transfer
            .is_some_and(|max| ctx.tally.moved() >= max)
        {
            // Nothing starts after the limit: what the crawl handed over
            // is counted, and the crawl stops (its sends fail).
            let mut left = 1;
            while jobs.try_recv().is_ok() {
                left += 1;
            }
            jobs.close();
            drop(job);
            ctx.tally
                .event(&Event::transfer_limit(ctx.tally.moved(), left));
            break;
        }
        let ctx = ctx.clone();
        running.spawn(async move {
            download::download(ctx, job).await;
            drop(permit);
        });
        // Reap finished downloads so the set stays small.
        while let Some(done) = running.try_join_next() {
            if let Err(e) = done {
                ctx_panic(&e);
            }
        }
    }
    while let Some(done) = running.join_next().await {
        if let Err(e) = done {
            ctx_panic(&e);
        }
    }
    if let Some(c) = controller {
        c.abort();
    }
}

fn ctx_panic(e: &tokio::task::JoinError) {
    tracing::error!("a download task failed: {e}");
}

/// `-j auto` ([`AutoTuner`] with [`AutoParams::REMOTE_FILES`], driven by
/// [`haul_run::steer`] as a node pool's connections are): adds a file slot
/// while the bytes arriving rise, then takes back the slots above the
/// level it settled at as downloads end.
async fn auto_concurrency(ctx: Arc<Ctx>, permits: Arc<Semaphore>, tuner: AutoTuner) {
    let received = || ctx.received.load(Ordering::Relaxed);
    let add = || {
        permits.add_permits(1);
        true
    };
    let Some(settled) = haul_run::steer::steer(tuner, "files at once", received, add).await else {
        return;
    };
    for _ in 0..settled.excess() {
        match permits.clone().acquire_owned().await {
            Ok(p) => p.forget(),
            Err(_) => return,
        }
    }
    tracing::info!("auto: settled at {} files at once", settled.level);
}
