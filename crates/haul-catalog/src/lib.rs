//! The persistent catalog of `haul daemon`: every remote file a source
//! listed (path, size, mtime, ETag, checksums), its state, and each run.
//!
//! Bird's-eye view: one [`Catalog`] trait, two drivers — embedded SQLite
//! (`sqlite:PATH`, WAL; `sqlite.rs`) for one daemon, PostgreSQL
//! (`postgres://…`; `postgres.rs`) for several daemons sharing the work.
//! Both apply their versioned migrations when opened ([`open`]), and both
//! decide with the same pure rules (`decide.rs`), so one conformance suite
//! (`tests/conformance.rs`) runs against each.
//!
//! A file's life: listed → [`State::New`] → claimed by a worker until a
//! lease ends ([`State::Claimed`]) → [`State::Fetched`] (BLAKE3, local
//! path, time) or [`State::Failed`] (attempts, last error, next retry). A
//! claim whose lease ended (its worker died) may be taken by any worker.
//!
//! Deciding a listing of 100,000 files costs no query per file: a run loads
//! [`Catalog::known`] once (one query), skips in memory what needs nothing
//! ([`Known::needs_nothing`]), and hands only the rest to
//! [`Catalog::claim`] in batches (one transaction each, whatever its size),
//! and what was delivered is recorded in batches too
//! ([`Catalog::fetched_batch`]).
//!
//! Deliveries to sites (`deliveries.rs`): every fetched file of a source
//! that delivers to sites is owed to each of them until that site confirmed
//! it. Nothing queues that debt: a (file, site) is *pending* while the site
//! has no confirmation of the file's current BLAKE3, so a file fetched,
//! fetched again with new content, or a site added to a source's list is
//! pending with no step that a crash could lose. A worker claims pending
//! deliveries with a lease (as it claims fetches), and records each as
//! delivered (with the BLAKE3 the site confirmed) or failed (attempts, the
//! site's error, next retry); [`Catalog::renew`] and
//! [`Catalog::release_worker`] cover these claims too.
//!
//! Times are Unix seconds (UTC), passed in by the caller: the catalog has no
//! clock, so tests and several machines agree on what "now" is.

mod decide;
mod deliveries;
mod error;
pub mod pgconnect;
mod postgres;
mod runs;
mod sqlite;
#[cfg(feature = "test-server")]
pub mod testserver;

use std::collections::HashMap;

pub use decide::{Action, Known};
pub use deliveries::{CatchUp, DeliveryRecord, Owed, SiteTotals};
pub use error::CatalogError;
pub use postgres::PostgresCatalog;
pub use sqlite::SqliteCatalog;

/// A file as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Path relative to the source's URL.
    pub path: String,
    /// Size in bytes, when the listing tells it.
    pub size: Option<u64>,
    /// Modification time (Unix seconds), when the listing tells it.
    pub mtime: Option<i64>,
    /// ETag or another version token.
    pub etag: Option<String>,
    /// Checksums the source offers, `ALGO:HEX` each.
    pub checksums: Vec<String>,
}

/// Whether a file fetched once is fetched again when its version changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Refetch {
    /// Never: once fetched, a file is done.
    #[default]
    Never,
    /// When its size, mtime or ETag changed.
    IfChanged,
}

/// What became of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Seen, not yet claimed.
    New,
    /// A worker is fetching it.
    Claimed {
        /// The worker's name.
        by: String,
        /// When the lease ends (Unix seconds) unless renewed.
        until: i64,
    },
    /// Delivered and verified.
    Fetched {
        /// Whole-file BLAKE3 (hex).
        blake3: String,
        /// Where it was delivered.
        local_path: String,
        /// When (Unix seconds).
        at: i64,
    },
    /// The last attempt failed.
    Failed {
        /// Attempts so far.
        attempts: u32,
        /// The last error.
        error: String,
        /// Not claimed again before this (Unix seconds).
        next_retry: i64,
    },
}

impl State {
    /// The state's name as stored and shown: `new`, `claimed`, `fetched`, `failed`.
    pub fn name(&self) -> &'static str {
        match self {
            State::New => "new",
            State::Claimed { .. } => "claimed",
            State::Fetched { .. } => "fetched",
            State::Failed { .. } => "failed",
        }
    }
}

/// One file of the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRecord {
    /// The source's name.
    pub source: String,
    /// The file as last seen (or as fetched, for a fetched file whose
    /// source says `refetch = "never"`).
    pub seen: Seen,
    /// Its state.
    pub state: State,
    /// When it was first listed.
    pub first_seen: i64,
    /// Failed attempts since it was last fetched.
    pub attempts: u32,
    /// The last delivery's hook (or sidecar) that failed, if one did:
    /// the file stays delivered; this says what did not happen after it.
    pub hook_failure: Option<HookFailure>,
}

/// A hook (`on_file`, `on_run`) or a metadata sidecar that failed after
/// the file or run it was about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFailure {
    /// What failed and why, as reported (`on_file hook: exit status 3`,
    /// `on_file hook: killed after 60 s`, `sidecar: …`).
    pub error: String,
    /// When (Unix seconds).
    pub at: i64,
}

/// A fetched file's facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// Whole-file BLAKE3 (hex).
    pub blake3: String,
    /// Where it was delivered.
    pub local_path: String,
    /// When (Unix seconds).
    pub at: i64,
    /// Its size.
    pub size: u64,
}

/// What one run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunCounts {
    /// Files the listing showed (after the filters).
    pub listed: u64,
    /// Files this run claimed.
    pub claimed: u64,
    /// Files delivered.
    pub fetched: u64,
    /// Files that failed.
    pub failed: u64,
    /// Bytes delivered.
    pub bytes: u64,
}

/// One run of one source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    /// The run's id.
    pub id: i64,
    /// The source's name.
    pub source: String,
    /// The worker that ran it.
    pub worker: String,
    /// Start (Unix seconds).
    pub started: i64,
    /// End, once ended.
    pub ended: Option<i64>,
    /// Its counts.
    pub counts: RunCounts,
    /// Why it could not run, if it could not.
    pub error: Option<String>,
    /// The `on_run` hook's failure after it, if it failed.
    pub hook_failure: Option<HookFailure>,
    /// Closed by another worker (or its own next start) because its worker
    /// stopped before ending it; its counts are what it recorded.
    pub abandoned: bool,
}

/// What a run adds with one record of fetched files, in the same
/// transaction (so a run whose worker dies still counts what it delivered).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunProgress {
    /// The run.
    pub id: i64,
    /// Files this record adds to the run's `fetched`.
    pub fetched: u64,
    /// Bytes it adds to the run's `bytes`.
    pub bytes: u64,
    /// Listed, claimed and failed as the worker counts them now (kept
    /// when higher than the run's).
    pub listed: u64,
    /// See `listed`.
    pub claimed: u64,
    /// See `listed`.
    pub failed: u64,
}

/// Per-source totals, for `/metrics` and `haul status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceTotals {
    /// The source's name.
    pub source: String,
    /// Files in each state, by [`State::name`].
    pub by_state: Vec<(String, u64)>,
    /// Bytes of the fetched files.
    pub bytes_fetched: u64,
    /// When the last file was fetched.
    pub last_fetched: Option<i64>,
}

/// Result of a catalog call.
pub type Result<T> = std::result::Result<T, CatalogError>;

/// The catalog: one interface, one behaviour, whichever driver.
pub trait Catalog: Send + Sync {
    /// Every file of `source` with what the decision needs, in one query.
    fn known(&self, source: &str) -> Result<HashMap<String, Known>>;

    /// Records `files` as seen and claims for `worker` until `lease_until`
    /// those that need fetching: new ones, failed ones whose retry time
    /// came, claims whose lease ended (or that `worker` holds), and with
    /// [`Refetch::IfChanged`] fetched ones whose version changed. A file
    /// claimed by a live lease of another worker is left alone. Returns
    /// the paths claimed.
    fn claim(
        &self,
        source: &str,
        files: &[Seen],
        refetch: Refetch,
        worker: &str,
        lease_until: i64,
        now: i64,
    ) -> Result<Vec<String>>;

    /// Extends every claim `worker` holds to `until`, and says its open
    /// runs are alive until then; returns how many claims.
    fn renew(&self, worker: &str, until: i64) -> Result<u64>;

    /// Gives back every claim `worker` holds (a restart, or a shutdown
    /// with files unfinished): they become new again. Returns how many.
    fn release_worker(&self, worker: &str) -> Result<u64>;

    /// Gives back one claim (the file was not fetched after all).
    fn release(&self, source: &str, path: &str, worker: &str) -> Result<()>;

    /// Records `path` as fetched.
    fn fetched(&self, source: &str, path: &str, facts: &Fetched) -> Result<()>;

    /// Records each of `files` (path and facts) as fetched, all in one
    /// transaction: what a run delivered while the previous record was
    /// being written costs one commit, not one each. `run`'s counts grow
    /// in the same transaction.
    fn fetched_batch(
        &self,
        source: &str,
        files: &[(String, Fetched)],
        run: Option<&RunProgress>,
    ) -> Result<()>;

    /// Records a failed attempt; returns the attempts so far.
    fn failed(&self, source: &str, path: &str, error: &str, next_retry: i64) -> Result<u32>;

    /// Records that a hook (or the sidecar) failed after `path` was
    /// delivered; the next delivery of the file clears it.
    fn file_hook_failed(&self, source: &str, path: &str, failure: &HookFailure) -> Result<()>;

    /// Records that the `on_run` hook failed after run `id`.
    fn run_hook_failed(&self, id: i64, failure: &HookFailure) -> Result<()>;

    /// Starts a run whose worker is alive until `alive_until` (then
    /// [`renew`](Catalog::renew)ed); returns its id.
    fn begin_run(&self, source: &str, worker: &str, started: i64, alive_until: i64) -> Result<i64>;

    /// Ends run `id`.
    fn end_run(&self, id: i64, ended: i64, counts: &RunCounts, error: Option<&str>) -> Result<()>;

    /// Closes, as abandoned at `now`, the open runs of `worker` (when given:
    /// a worker starting again) and those whose worker was last alive
    /// before `now`; returns how many.
    fn abandon_runs(&self, worker: Option<&str>, now: i64) -> Result<u64>;

    /// The latest runs (of `source`, or all), newest first.
    fn runs(&self, source: Option<&str>, limit: u32) -> Result<Vec<RunRecord>>;

    /// Files (of `source`, or all; in `state` when given), by source and path.
    fn files(
        &self,
        source: Option<&str>,
        state: Option<&str>,
        limit: u32,
    ) -> Result<Vec<FileRecord>>;

    /// One file.
    fn file(&self, source: &str, path: &str) -> Result<Option<FileRecord>>;

    /// Makes the failed files of `source` due now (the console's "retry";
    /// their attempts are kept); returns how many.
    fn retry_files(&self, source: &str) -> Result<u64>;

    /// Forgets files of `source` (all, or those under `prefix`: the path
    /// itself or below it as a directory), so the next run fetches them
    /// again. Returns how many.
    fn forget(&self, source: &str, prefix: Option<&str>) -> Result<u64>;

    /// Totals per source.
    fn totals(&self) -> Result<Vec<SourceTotals>>;

    /// Claims for `worker` until `lease_until` at most `limit` of what
    /// `source` owes `site`: fetched files the site has not confirmed at
    /// their current BLAKE3, whose delivery no live lease of another worker
    /// holds and whose retry time came (claims `worker` held are taken
    /// back). Ordered by fetch time as `order` says. Returns them.
    #[allow(clippy::too_many_arguments)]
    fn claim_deliveries(
        &self,
        source: &str,
        site: &str,
        worker: &str,
        lease_until: i64,
        now: i64,
        order: CatchUp,
        limit: u32,
    ) -> Result<Vec<Owed>>;

    /// Records that `site` confirmed each of `files` (path and the BLAKE3
    /// it holds) at `at`, in one transaction.
    fn delivered(
        &self,
        source: &str,
        site: &str,
        files: &[(String, String)],
        at: i64,
    ) -> Result<()>;

    /// Records that delivering each of `files` (path and the site's error)
    /// to `site` failed; none is claimed again before `next_retry`.
    fn delivery_failed(
        &self,
        source: &str,
        site: &str,
        files: &[(String, String)],
        next_retry: i64,
    ) -> Result<()>;

    /// Totals of what `source` owes `site` and what it delivered.
    fn site_totals(&self, source: &str, site: &str, now: i64) -> Result<SiteTotals>;

    /// Each fetched file of `source` with its delivery to `site` (in
    /// `state` when given: `pending`, `claimed`, `delivered`, `failed`), by
    /// path.
    fn deliveries(
        &self,
        source: &str,
        site: &str,
        state: Option<&str>,
        limit: u32,
    ) -> Result<Vec<DeliveryRecord>>;

    /// Makes failed deliveries of `source` to `site` due now (`haul catalog
    /// retry`); returns how many.
    fn retry_deliveries(&self, source: &str, site: &str) -> Result<u64>;

    /// Those of `paths` (files of `source`) that one of `sites` has not
    /// confirmed at their current version, or that are not fetched (being
    /// fetched again, failed, forgotten): what a source that keeps no local
    /// copy must still keep.
    fn unconfirmed(&self, source: &str, sites: &[String], paths: &[String]) -> Result<Vec<String>>;

    /// Forgets what `site` confirmed of `source` (all, or under `prefix`),
    /// so those files are delivered to it again. Returns how many.
    fn forget_site(&self, source: &str, site: &str, prefix: Option<&str>) -> Result<u64>;
}

/// Makes source `?1`'s failed files due now (both drivers).
pub(crate) const RETRY_FILES_SQL: &str =
    "UPDATE files SET next_retry = 0 WHERE source = ?1 AND state = 'failed'";

/// Opens (creating if needed, and migrating) the catalog at `url`:
/// `sqlite:PATH` or `postgres://…` / `postgresql://…`.
pub fn open(url: &str) -> Result<Box<dyn Catalog>> {
    if let Some(path) = url.strip_prefix("sqlite:") {
        let path = path.strip_prefix("//").unwrap_or(path);
        if path.is_empty() {
            return Err(CatalogError::Url(url.into()));
        }
        return Ok(Box::new(SqliteCatalog::open(std::path::Path::new(path))?));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Box::new(PostgresCatalog::connect(url)?));
    }
    Err(CatalogError::Url(shown_url(url)))
}

/// `url` without a password, for messages.
pub fn shown_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{}@{}", &url[..scheme + 3], user, &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

/// The checksums as stored: `ALGO:HEX` separated by spaces.
fn join_checksums(list: &[String]) -> String {
    list.join(" ")
}

fn split_checksums(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// Adds one `(source, state)` group to `out` (rows come ordered by source).
fn add_totals(
    out: &mut Vec<SourceTotals>,
    source: String,
    state: String,
    count: i64,
    bytes: i64,
    last_fetched: Option<i64>,
) {
    if out.last().is_none_or(|t| t.source != source) {
        out.push(SourceTotals {
            source,
            ..SourceTotals::default()
        });
    }
    if let Some(t) = out.last_mut() {
        t.by_state.push((state, u64::try_from(count).unwrap_or(0)));
        t.bytes_fetched += u64::try_from(bytes).unwrap_or(0);
        t.last_fetched = t.last_fetched.max(last_fetched);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_without_password() {
        assert_eq!(
            shown_url("postgres://u:secret@h:5432/db"),
            "postgres://u@h:5432/db"
        );
        assert_eq!(shown_url("sqlite:/x"), "sqlite:/x");
    }
}
