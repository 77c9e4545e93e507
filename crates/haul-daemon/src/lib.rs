//! `haul daemon`: sources on their schedules, decided from the catalog,
//! fetched through haul-fetch's download driver (FTP, SFTP, HTTP, S3) or
//! pulled from haul nodes as `haul pull` does (`haul://`, ssh), for months.
//!
//! Bird's-eye view: [`run`] keeps one slot per source (its next run, its
//! run in progress, how long it has been down). A due source gets a run
//! (`run.rs`): haul-fetch's crawl, or a node pull, with a
//! [`haul_fetch::FileGate`] that decides each listed file from the
//! catalog — files the catalog holds as done are skipped in memory (one
//! query per run loads them), the others are claimed with a lease — and
//! waits for the daemon-wide caps (files in flight in all, and per host)
//! before each download. A source that cannot be listed is tried again
//! with backoff; it never holds up another. A worker renews its leases
//! while it lives; on start it takes back the claims it held before a
//! crash, and resumes their partial downloads from the verified chunks
//! kept.
//!
//! A source with sites (`deliver`) has a distributor too
//! (`distribute.rs`): what the source fetched goes to its sites through the
//! fan-out, each (file, site) claimed, confirmed or failed in the catalog.
//!
//! Control comes as [`Command`]s: `Reload` (SIGHUP: the new sources take
//! effect, running runs finish as they were) and `Stop` (SIGTERM: running
//! runs get the grace period to finish; after it they are dropped, their
//! verified chunks kept for the next start, and their claims released).

mod console;
pub mod control;
mod delivery;
pub mod distribute;
mod listener;
mod metrics;
mod run;
pub mod schedule;
mod sites;
pub mod status;
mod writes;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use haul_catalog::{Catalog, CatalogError, CatchUp, Refetch};
use haul_fetch::FetchOptions;
use haul_remote::Remote;
use haul_run::backoff::Backoff;
use tokio::sync::{mpsc, watch, Notify, Semaphore};
use tokio::task::JoinSet;

pub use control::{Action, Answer};
pub use delivery::HOOK_VARIABLES;
pub use haul_status::StatusListener;
pub use listener::DaemonRoutes;
pub use metrics::prometheus_text;
pub use schedule::Schedule;
pub use sites::SiteSpec;
pub use status::{Board, SiteRow, Snapshot, SourceStatus};

use crate::run::{blocking, run_once, RunContext};
use crate::writes::CatalogWrites;

/// Builds a run's fetch options (called at each run: relative dates such
/// as `newer_than = "7d"` are relative to the run).
pub type OptionsFactory = Arc<dyn Fn() -> Result<FetchOptions, String> + Send + Sync>;

/// Builds a run's node and the options of its pull (called at each run,
/// as [`OptionsFactory`]; an ssh source starts its node afresh each run).
pub type NodeFactory =
    Arc<dyn Fn() -> Result<(haul_node::NodePath, haul_node::ClientOptions), String> + Send + Sync>;

/// Where a source's files come from, and how each run reads them.
#[derive(Clone)]
pub enum SourceFrom {
    /// A remote haul-fetch reads (FTP, FTPS, SFTP, HTTP(S), S3).
    Remote {
        /// The opened remote.
        remote: Arc<dyn Remote>,
        /// The directory on the remote.
        path: String,
        /// Each run's fetch options.
        options: OptionsFactory,
    },
    /// A haul node (`haul://HOST:PORT/DIR`, or `[user@]host:DIR` over
    /// ssh), pulled as `haul pull` does: verified chunk by chunk, resumed
    /// from what a broken run left. The node path names a directory whose
    /// contents land in `dest`.
    Node(NodeFactory),
}

/// One source, validated.
pub struct SourceSpec {
    /// Its name (the catalog's key).
    pub name: String,
    /// Its URL without secrets, for messages.
    pub url: String,
    /// The host the caps count against.
    pub host: String,
    /// Where its files come from.
    pub from: SourceFrom,
    /// The local destination.
    pub dest: PathBuf,
    /// When it runs.
    pub schedule: Schedule,
    /// A random delay up to this after each scheduled time.
    pub jitter: Duration,
    /// Whether fetched files are fetched again when they change.
    pub refetch: Refetch,
    /// Network timeout of each wait.
    pub timeout: Duration,
    /// Write `NAME.haul.json` beside each delivered file.
    pub sidecar: bool,
    /// `sh -c` command after each delivered file.
    pub on_file: Option<String>,
    /// `sh -c` command after each run.
    pub on_run: Option<String>,
    /// How long a hook may run before it is killed.
    pub hook_timeout: Duration,
    /// Where its partial downloads are staged (this source's own directory
    /// under the daemon's `staging`, on `dest`'s filesystem); `None`:
    /// `dest/.haul/partial`.
    pub staging: Option<PathBuf>,
    /// The sites every fetched file goes to (`deliver`).
    pub deliver: Vec<Arc<SiteSpec>>,
    /// Which owed files a site behind gets first.
    pub catch_up: CatchUp,
    /// What its pulls from a node and its deliveries keep beyond mode and
    /// mtime (owner, group, attributes, ACLs, holes).
    pub keep: haul_proto::Keep,
    /// Keep the fetched files here once every site confirmed them (false:
    /// the daemon's disk is a buffer, never emptied of a file some site
    /// still lacks).
    pub keep_local: bool,
    /// `sh -c` command after each file a site confirmed.
    pub on_deliver: Option<String>,
    /// Files one delivery round claims per site.
    pub deliver_batch: u32,
}

/// The daemon's settings.
pub struct DaemonOptions {
    /// This worker's name in the catalog's claims (unique per process
    /// sharing a catalog; stable across restarts, so a restart takes back
    /// its own claims at once).
    pub worker: String,
    /// Files downloading at once, all sources together.
    pub max_files: usize,
    /// Files downloading at once from one host, all sources together.
    pub max_files_per_host: usize,
    /// How long a claim lasts unless renewed (renewed every third of it).
    pub lease: Duration,
    /// How long runs may take to finish after `Stop`.
    pub grace: Duration,
    /// First wait before a source that could not be listed (or stopped
    /// answering mid-run) is tried again (doubling, at most `down_retry_max`
    /// and at most until its next scheduled run).
    pub down_retry: Duration,
    /// Longest wait between two tries of a source that is down.
    pub down_retry_max: Duration,
    /// First wait before a file that failed is tried again (doubling per
    /// attempt, at most 6 h). A file that failed because the source did
    /// not answer is due again as soon as the source is.
    pub file_retry: Duration,
    /// The sources.
    pub sources: Vec<SourceSpec>,
    /// Partial downloads no run has written for this long are removed
    /// from the sources' staging directories, at start and hourly (one a
    /// download holds never is); `None`: never.
    pub partial_ttl: Option<Duration>,
    /// The transfer log (`log_file`): a line per run and per file fetched,
    /// delivered to a site or failed. Taken at start (a reload keeps it).
    pub log: Option<Arc<haul_node::TransferLog>>,
}

/// How often the daemon looks for abandoned partial downloads.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Removes the partial downloads of `sources` that nothing has written for
/// `ttl` (never one a download holds: [`haul_engine::prune`]), each in its
/// staging directory (`staging`, else `DEST/.haul/partial`), and logs what
/// that freed.
fn prune_partials(sources: &[Arc<SourceSpec>], ttl: Duration) {
    let now = SystemTime::now();
    for spec in sources {
        match haul_engine::prune::prune_staging_of(&spec.dest, spec.staging.as_deref(), ttl, now) {
            Ok(p) if p.files > 0 || p.in_use > 0 => tracing::info!(
                "{}: partial downloads untouched for {}s: removed {} file(s) ({} bytes), kept {} in use",
                spec.name,
                ttl.as_secs(),
                p.files,
                p.bytes,
                p.in_use
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!("{}: cannot prune partial downloads: {e}", spec.name),
        }
    }
}

/// What the daemon is told while it runs.
pub enum Command {
    /// Take these settings (the sources; caps and lease from the start stay).
    Reload(DaemonOptions),
    /// Finish and stop.
    Stop,
    /// An operator's action ([`control`]), answered on the channel.
    Act(Action, tokio::sync::oneshot::Sender<Answer>),
}

/// Why the daemon failed.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The catalog failed.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// A task failed to run.
    #[error("internal task failed: {0}")]
    Task(String),
    /// A source's options could not be built.
    #[error("{0}")]
    Options(String),
    /// A source could not be fetched at all (listed, or its path stated).
    #[error("{0}")]
    Fetch(String),
}

/// Seconds since the epoch.
pub(crate) fn unix(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// One source's place in the schedule.
pub(crate) struct Slot {
    spec: Arc<SourceSpec>,
    next: SystemTime,
    running: bool,
    /// Paused by an operator ([`control`]): no run starts.
    paused: bool,
    /// Runs failed in a row, and the wait before the next try: the same
    /// backoff with jitter as every other retry, with no limit (a source
    /// that is down is tried until it is back), doubling from `down_retry`
    /// to at most [`MAX_DOWN_WAIT`].
    down: Backoff,
}

/// The longest wait before a source that is down is tried again, unless
/// the configuration says otherwise (its schedule's next run comes first
/// when sooner): lftp's `net:reconnect-interval-max`.
pub const DEFAULT_DOWN_RETRY_MAX: Duration = Duration::from_secs(600);

/// First wait before a failed file is tried again, unless configured.
pub const DEFAULT_FILE_RETRY: Duration = Duration::from_secs(10);

fn slots(
    sources: Vec<SourceSpec>,
    old: &mut HashMap<String, Slot>,
    now: SystemTime,
    (down_retry, down_retry_max): (Duration, Duration),
) -> HashMap<String, Slot> {
    sources
        .into_iter()
        .map(|spec| {
            let prev = old.remove(&spec.name);
            let next = spec.schedule.first(now) + schedule::jitter(spec.jitter);
            let slot = Slot {
                next: prev.as_ref().map_or(next, |p| p.next.min(next)),
                running: prev.as_ref().is_some_and(|p| p.running),
                paused: prev.as_ref().is_some_and(|p| p.paused),
                down: prev.as_ref().map_or_else(
                    || {
                        let most = down_retry_max.max(down_retry);
                        Backoff::new(u32::MAX, down_retry, most, Backoff::fresh_seed())
                    },
                    |p| p.down.clone(),
                ),
                spec: Arc::new(spec),
            };
            (slot.spec.name.clone(), slot)
        })
        .collect()
}

/// Runs the daemon until [`Command::Stop`] (or the command channel closes).
pub async fn run(
    catalog: Arc<dyn Catalog>,
    board: Arc<Board>,
    opts: DaemonOptions,
    mut commands: mpsc::Receiver<Command>,
) -> Result<(), DaemonError> {
    let worker = opts.worker.clone();
    let w = worker.clone();
    let taken_back = blocking(&catalog, move |c| c.release_worker(&w)).await?;
    if taken_back > 0 {
        tracing::info!("took back {taken_back} file(s) this worker had claimed before it stopped");
    }
    let (w, now) = (worker.clone(), unix(SystemTime::now()));
    let closed = blocking(&catalog, move |c| c.abandon_runs(Some(&w), now)).await?;
    if closed > 0 {
        tracing::info!("closed {closed} run(s) this worker left open when it stopped");
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let writes = Arc::new(CatalogWrites::new(catalog.clone(), board.clone()));
    let keeper = tokio::spawn(
        writes
            .clone()
            .keep(worker.clone(), opts.lease, stop_rx.clone()),
    );
    let global = Arc::new(Semaphore::new(opts.max_files.max(1)));
    let per_host = opts.max_files_per_host.max(1);
    let mut hosts: HashMap<String, Arc<Semaphore>> = HashMap::new();
    let (lease, grace) = (opts.lease, opts.grace);
    let down_retry = (opts.down_retry, opts.down_retry_max);
    let mut table = slots(
        opts.sources,
        &mut HashMap::new(),
        SystemTime::now(),
        down_retry,
    );
    publish_sources(&board, &table);
    let mut runs: JoinSet<(String, Result<(), DaemonError>, Duration)> = JoinSet::new();
    let log = opts.log.clone();
    let mut distributors = Distributors {
        catalog: catalog.clone(),
        worker: worker.clone(),
        lease,
        log: log.clone(),
        site_retry: opts.down_retry,
        writes: writes.clone(),
        stop: stop_rx,
        by_source: HashMap::new(),
        tasks: JoinSet::new(),
    };
    distributors.update(&table);
    let partial_ttl = opts.partial_ttl;
    let mut prune_at = tokio::time::Instant::now();
    loop {
        let now = SystemTime::now();
        // While the catalog refuses writes no run starts (it could claim
        // nothing); due runs start when it takes writes again.
        let refusing = writes.refusing();
        for slot in table
            .values_mut()
            .filter(|s| !refusing && !s.running && !s.paused && s.next <= now)
        {
            let spec = slot.spec.clone();
            slot.running = true;
            slot.next = spec.schedule.next(now) + schedule::jitter(spec.jitter);
            board.next_run(&spec.name, unix(slot.next));
            board.run_started(&spec.name);
            let host = hosts
                .entry(spec.host.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(per_host)))
                .clone();
            let ctx = Arc::new(RunContext {
                catalog: catalog.clone(),
                worker: worker.clone(),
                lease,
                global: global.clone(),
                host,
                board: board.clone(),
                fetched: distributors.notify(&spec.name),
                writes: writes.clone(),
                file_retry: opts.file_retry,
                log: log.clone(),
            });
            tracing::info!("{}: run started ({})", spec.name, spec.url);
            runs.spawn(async move {
                let t0 = Instant::now();
                let name = spec.name.clone();
                let result = run_once(ctx, spec).await.map(|counts| {
                    tracing::info!(
                        "{name}: run ended: {} listed, {} claimed, {} fetched ({} bytes), {} failed",
                        counts.listed,
                        counts.claimed,
                        counts.fetched,
                        counts.bytes,
                        counts.failed
                    );
                });
                (name, result, t0.elapsed())
            });
        }
        let wake = table
            .values()
            .filter(|s| !s.running && !s.paused)
            .map(|s| s.next)
            .min()
            .unwrap_or(now + Duration::from_secs(3600));
        let wait = if refusing {
            // Woken when the catalog takes writes again; looked at each
            // second too, in case that came between the look and the wait.
            Duration::from_secs(1)
        } else {
            wake.duration_since(now).unwrap_or_default()
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = writes.changed() => {}
            () = tokio::time::sleep_until(prune_at), if partial_ttl.is_some() => {
                prune_at = tokio::time::Instant::now() + PRUNE_EVERY;
                if let Some(ttl) = partial_ttl {
                    let sources: Vec<_> = table.values().map(|s| s.spec.clone()).collect();
                    tokio::task::spawn_blocking(move || prune_partials(&sources, ttl));
                }
            }
            Some(done) = runs.join_next() => {
                let (name, result, took) = match done {
                    Ok(done) => done,
                    Err(e) => {
                        tracing::error!("a run task failed: {e}");
                        continue;
                    }
                };
                let now = SystemTime::now();
                let is_catalog = matches!(result, Err(DaemonError::Catalog(_)));
                if let Err(e @ DaemonError::Catalog(_)) = &result {
                    writes.refused(e);
                }
                let error = result.err().map(|e| e.to_string());
                board.run_ended(&name, took.as_secs_f64(), unix(now), error.clone());
                if let Some(slot) = table.get_mut(&name) {
                    slot.running = false;
                    match error {
                        None => slot.down.progress_made(),
                        // The catalog, not the source (said by the catalog's
                        // writes): tried again with the same backoff, once
                        // the catalog takes writes, so an error that
                        // persists is not met every second.
                        Some(_) if is_catalog => {
                            let backoff = slot.down.next_wait().unwrap_or(opts.down_retry_max);
                            slot.next = slot.next.min(now + backoff);
                            board.next_run(&name, unix(slot.next));
                        }
                        Some(e) => {
                            let backoff = slot.down.next_wait().unwrap_or(opts.down_retry_max);
                            slot.next = slot.next.min(now + backoff);
                            board.next_run(&name, unix(slot.next));
                            tracing::warn!(
                                "{name}: run failed ({e}); down {} time(s) in a row, trying again in {:.0}s",
                                slot.down.attempts(),
                                slot.next.duration_since(now).unwrap_or_default().as_secs_f64()
                            );
                        }
                    }
                }
            }
            cmd = commands.recv() => match cmd {
                Some(Command::Reload(new)) => {
                    tracing::info!("configuration reloaded: {} source(s)", new.sources.len());
                    table = slots(new.sources, &mut table, SystemTime::now(), down_retry);
                    publish_sources(&board, &table);
                    distributors.update(&table);
                }
                Some(Command::Act(action, reply)) => {
                    let _ = reply.send(control::act(action, &mut table, &board, &distributors));
                }
                Some(Command::Stop) | None => break,
            },
        }
    }
    // Actions that come now are told so; those waiting are answered.
    commands.close();
    while let Ok(cmd) = commands.try_recv() {
        if let Command::Act(_, reply) = cmd {
            let _ = reply.send(Err("the daemon is stopping".into()));
        }
    }
    // Runs and deliveries in progress share one grace period.
    let _ = stop_tx.send(true);
    distributors.by_source.clear();
    if !runs.is_empty() {
        tracing::info!(
            "stopping: {} run(s) in progress get {:.0}s to finish",
            runs.len(),
            grace.as_secs_f64()
        );
    }
    let deadline = tokio::time::Instant::now() + grace;
    let finished = tokio::time::timeout_at(deadline, async {
        while runs.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        tracing::info!(
            "stopping now: partial downloads keep their verified chunks for the next start"
        );
        runs.shutdown().await;
    }
    let tasks = &mut distributors.tasks;
    let finished = tokio::time::timeout_at(deadline, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        tracing::info!("stopping now: deliveries in progress are given back for the next start");
        distributors.tasks.shutdown().await;
    }
    keeper.abort();
    let unrecorded = writes.unrecorded();
    if unrecorded > 0 {
        tracing::error!(
            "stopping with {unrecorded} delivered file(s) not recorded (the catalog refuses writes): \
             the next start finds them at their destination and records them without fetching them again"
        );
    }
    let w = worker.clone();
    if let Err(e) = blocking(&catalog, move |c| c.release_worker(&w)).await {
        tracing::error!(
            "cannot give back this worker's claims: {e} (its next start takes them back; \
             other workers take them when their leases end)"
        );
    }
    Ok(())
}

/// The sources' distributors: one task each, told of a reloaded spec.
pub(crate) struct Distributors {
    catalog: Arc<dyn Catalog>,
    worker: String,
    lease: Duration,
    log: Option<Arc<haul_node::TransferLog>>,
    site_retry: Duration,
    writes: Arc<CatalogWrites>,
    stop: watch::Receiver<bool>,
    by_source: HashMap<String, (watch::Sender<Arc<SourceSpec>>, Arc<Notify>)>,
    tasks: JoinSet<()>,
}

impl Distributors {
    /// Starts a distributor for each new source, hands the others their
    /// spec; a removed source's distributor ends after its round.
    fn update(&mut self, table: &HashMap<String, Slot>) {
        self.by_source.retain(|name, _| table.contains_key(name));
        for slot in table.values() {
            let spec = slot.spec.clone();
            if let Some((tx, _)) = self.by_source.get(&spec.name) {
                let _ = tx.send(spec);
                continue;
            }
            let (tx, rx) = watch::channel(spec.clone());
            let fetched = Arc::new(Notify::new());
            let d = distribute::Distributor {
                catalog: self.catalog.clone(),
                worker: self.worker.clone(),
                lease: self.lease,
                log: self.log.clone(),
                site_retry: self.site_retry,
                fetched: fetched.clone(),
                writes: self.writes.clone(),
            };
            self.tasks
                .spawn(distribute::distribute(d, rx, self.stop.clone()));
            self.by_source.insert(spec.name.clone(), (tx, fetched));
        }
    }

    /// What a run of `source` notifies when it recorded fetched files.
    pub(crate) fn notify(&self, source: &str) -> Arc<Notify> {
        self.by_source
            .get(source)
            .map_or_else(|| Arc::new(Notify::new()), |(_, n)| n.clone())
    }
}

fn publish_sources(board: &Board, table: &HashMap<String, Slot>) {
    board.set_sources(table.values().map(|s| {
        (
            s.spec.name.as_str(),
            s.spec.url.clone(),
            s.spec.schedule.describe(),
            s.spec.deliver.iter().map(|d| d.name.clone()).collect(),
        )
    }));
    for s in table.values() {
        board.next_run(&s.spec.name, unix(s.next));
        board.paused(&s.spec.name, s.paused);
    }
}
