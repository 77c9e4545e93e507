//! The daemon's writes to the catalog when the catalog may refuse them (a
//! full disk, a read-only file, PostgreSQL stopped or failing over).
//!
//! A delivered file's record and a run's end go through
//! [`CatalogWrites::write`]: written at once while the catalog takes
//! writes; once one is refused, it and every later one are *held*, in
//! order, in memory, and the daemon is degraded: no new file is claimed
//! (`run.rs` asks [`CatalogWrites::refusing`]), no run starts, `/healthz`
//! answers 503 with the cause, `haul_catalog_writable` is 0, and one log
//! line names the cause and what to do. [`CatalogWrites::keep`] tries the
//! held writes again with backoff, then this worker's leases; when all went
//! in, the daemon takes up its work by itself.
//!
//! Nothing is held on disk: the disk may be the full one. A daemon stopped
//! (or killed) while it holds records loses only the records — each file
//! is under its final name, verified, and its catalog row still says
//! claimed or new. The next run finds it there with the listed size and
//! mtime, reads its BLAKE3 there and records it without asking the source
//! ([`haul_fetch::FileGate::adopt_existing`]).
//!
//! The same task renews this worker's leases (and its open runs' sign of
//! life), and closes the runs of workers that stopped renewing theirs.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use haul_catalog::{Catalog, Fetched, RunCounts, RunProgress};
use haul_run::backoff::Backoff;
use tokio::sync::{watch, Notify};

use crate::run::blocking;
use crate::status::Board;
use crate::{unix, DaemonError};

/// First wait before held writes are tried again (doubling).
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// Longest wait between two tries.
const RETRY_MOST: Duration = Duration::from_secs(30);

/// A write the catalog must take before the daemon is whole again.
#[derive(Debug, Clone)]
pub(crate) enum Write {
    /// Delivered files of a source, and what they add to their run.
    Fetched {
        /// The source.
        source: String,
        /// Each file's path and facts.
        files: Vec<(String, Fetched)>,
        /// Its run's progress.
        run: Option<RunProgress>,
    },
    /// A run's end.
    EndRun {
        /// The run.
        id: i64,
        /// When it ended.
        ended: i64,
        /// Its counts.
        counts: RunCounts,
        /// Why it could not run, if it could not.
        error: Option<String>,
    },
}

impl Write {
    fn apply(&self, c: &dyn Catalog) -> haul_catalog::Result<()> {
        match self {
            Write::Fetched { source, files, run } => c.fetched_batch(source, files, run.as_ref()),
            Write::EndRun {
                id,
                ended,
                counts,
                error,
            } => c.end_run(*id, *ended, counts, error.as_deref()),
        }
    }

    /// Delivered files it records.
    fn files(&self) -> u64 {
        match self {
            Write::Fetched { files, .. } => files.len() as u64,
            Write::EndRun { .. } => 0,
        }
    }
}

#[derive(Default)]
struct State {
    /// Why the catalog refuses writes, since when (wall clock, monotonic).
    refused: Option<(String, i64, Instant)>,
    held: VecDeque<Write>,
}

/// The daemon's catalog writes, held while the catalog refuses them.
pub(crate) struct CatalogWrites {
    catalog: Arc<dyn Catalog>,
    board: Arc<Board>,
    state: Mutex<State>,
    /// Told (all waiting) when the catalog starts refusing writes or takes
    /// them again: the scheduler, which also looks each second.
    changed: Notify,
    /// Told (keeping a permit) when the catalog starts refusing writes:
    /// the keeper, so a refusal while it is busy is not missed.
    to_keeper: Notify,
}

impl CatalogWrites {
    pub(crate) fn new(catalog: Arc<dyn Catalog>, board: Arc<Board>) -> Self {
        Self {
            catalog,
            board,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            to_keeper: Notify::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Shows `s` on the board (called with the state's lock held, so the
    /// board never shows an older state after a newer one).
    fn publish(&self, s: &State) {
        let refused = s.refused.as_ref().map(|r| (r.0.clone(), r.1));
        self.board
            .catalog_writes(refused, s.held.iter().map(Write::files).sum());
    }

    /// Whether the catalog refuses writes (nothing new is to be claimed).
    pub(crate) fn refusing(&self) -> bool {
        self.state().refused.is_some()
    }

    /// Delivered files whose records are held.
    pub(crate) fn unrecorded(&self) -> u64 {
        self.state().held.iter().map(Write::files).sum()
    }

    /// Waits until the catalog starts refusing writes or takes them again.
    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Writes `w` now, or holds it behind earlier held writes. `true`:
    /// written.
    pub(crate) async fn write(&self, w: Write) -> bool {
        {
            // Looked at and held in one step: the keeper takes up writes
            // again only with nothing held.
            let mut s = self.state();
            if s.refused.is_some() || !s.held.is_empty() {
                s.held.push_back(w);
                self.publish(&s);
                return false;
            }
        }
        let attempt = w.clone();
        match blocking(&self.catalog, move |c| attempt.apply(c)).await {
            Ok(()) => true,
            Err(e) => {
                {
                    let mut s = self.state();
                    s.held.push_back(w);
                    self.publish(&s);
                }
                self.refused(&e);
                false
            }
        }
    }

    /// A catalog call failed with `e`: from now on writes are held and
    /// nothing new is claimed. Said once, with the cause and what to do.
    pub(crate) fn refused(&self, e: &DaemonError) {
        let cause = e.to_string();
        let n = {
            let mut s = self.state();
            if s.refused.is_some() {
                return;
            }
            s.refused = Some((cause.clone(), unix(SystemTime::now()), Instant::now()));
            self.publish(&s);
            s.held.iter().map(Write::files).sum::<u64>()
        };
        tracing::error!(
            "the catalog refuses writes: {cause}. No new file is claimed until it takes them again; \
             {n} delivered file(s) wait for their record (and the files delivered meanwhile); \
             trying again every {}–{}s",
            RETRY_FIRST.as_secs(),
            RETRY_MOST.as_secs()
        );
        self.to_keeper.notify_one();
        self.changed.notify_waiters();
    }

    /// Tries the held writes in order; `Err` at the first refused.
    async fn flush(&self) -> Result<u64, DaemonError> {
        let mut written = 0;
        loop {
            let Some(w) = self.state().held.front().cloned() else {
                return Ok(written);
            };
            let n = w.files();
            blocking(&self.catalog, move |c| w.apply(c)).await?;
            written += n;
            let mut s = self.state();
            s.held.pop_front();
            self.publish(&s);
        }
    }

    /// Takes up writes again if nothing is held (a write may have been
    /// held since the flush); how long they were refused.
    fn take_up(&self) -> Option<Duration> {
        let mut s = self.state();
        if !s.held.is_empty() {
            return None;
        }
        let since = s.refused.take().map(|r| r.2.elapsed());
        self.publish(&s);
        Some(since.unwrap_or_default())
    }

    /// Renews `worker`'s leases every third of `lease` and closes the runs
    /// of workers that stopped renewing theirs; while the catalog refuses
    /// writes, tries the held ones with backoff instead, and takes up
    /// writes again when they and the renewal went in. Ends at `stop`.
    pub(crate) async fn keep(
        self: Arc<Self>,
        worker: String,
        lease: Duration,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut backoff = Backoff::new(u32::MAX, RETRY_FIRST, RETRY_MOST, Backoff::fresh_seed());
        let mut recorded = 0;
        loop {
            let refusing = self.refusing();
            let wait = if refusing {
                backoff.next_wait().unwrap_or(RETRY_MOST)
            } else {
                (lease / 3).max(Duration::from_secs(1))
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.to_keeper.notified(), if !refusing => continue,
                _ = stop.changed() => return,
            }
            let flushed = if refusing { self.flush().await } else { Ok(0) };
            let renewed = match flushed {
                Ok(n) => self.renew(&worker, lease).await.map(|()| n),
                Err(e) => Err(e),
            };
            match renewed {
                Ok(n) if refusing => {
                    recorded += n;
                    backoff.progress_made();
                    let Some(since) = self.take_up() else {
                        continue; // more was held meanwhile: flushed next
                    };
                    tracing::warn!(
                        "the catalog takes writes again after {:.0}s: {recorded} delivered file(s) recorded; claiming new files again",
                        since.as_secs_f64()
                    );
                    recorded = 0;
                    self.changed.notify_waiters();
                }
                Ok(_) => {}
                Err(e) => {
                    if !refusing {
                        self.refused(&e);
                    }
                    tracing::debug!("the catalog still refuses writes: {e}");
                }
            }
        }
    }

    /// Extends `worker`'s leases and closes other workers' dead runs.
    async fn renew(&self, worker: &str, lease: Duration) -> Result<(), DaemonError> {
        let now = unix(SystemTime::now());
        let until = now + i64::try_from(lease.as_secs()).unwrap_or(i64::MAX / 2);
        let w = worker.to_string();
        blocking(&self.catalog, move |c| c.renew(&w, until)).await?;
        let closed = blocking(&self.catalog, move |c| c.abandon_runs(None, now)).await?;
        if closed > 0 {
            tracing::info!("closed {closed} run(s) whose worker stopped before ending them");
        }
        Ok(())
    }
}
