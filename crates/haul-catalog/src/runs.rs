//! The runs table's SQL that both drivers share (`?N` parameters; the
//! PostgreSQL driver turns them into `$N`).
//!
//! A run's `fetched` and `bytes` grow in the transaction that records its
//! files ([`PROGRESS_SQL`]), so a run whose worker died still counts what
//! it delivered. While a run is open its worker renews `alive_until` with
//! its claims; a run whose worker stopped renewing (or that its worker
//! finds open when it starts again) is closed as `abandoned` by whoever
//! notices first ([`ABANDON_SQL`]).

/// Schema 4 for SQLite: runs know when their worker was last alive, and
/// whether they were abandoned. Runs left open by an older haul are
/// closed by the first sweep.
pub(crate) const SQLITE_SCHEMA: &str = "ALTER TABLE runs ADD COLUMN alive_until INTEGER;
    ALTER TABLE runs ADD COLUMN abandoned INTEGER NOT NULL DEFAULT 0;
    UPDATE runs SET alive_until = started WHERE ended IS NULL;";

/// Schema 4 for PostgreSQL (as [`SQLITE_SCHEMA`]).
pub(crate) const POSTGRES_SCHEMA: &str = "ALTER TABLE runs ADD COLUMN alive_until BIGINT;
    ALTER TABLE runs ADD COLUMN abandoned BIGINT NOT NULL DEFAULT 0;
    UPDATE runs SET alive_until = started WHERE ended IS NULL;";

/// Adds `?2` files and `?3` bytes to run `?1`; listed `?4`, claimed `?5`
/// and failed `?6` as its worker counts them now (never lowered).
pub(crate) const PROGRESS_SQL: &str = "UPDATE runs SET fetched = fetched + ?2, bytes = bytes + ?3,
         listed = CASE WHEN listed > ?4 THEN listed ELSE ?4 END,
         claimed = CASE WHEN claimed > ?5 THEN claimed ELSE ?5 END,
         failed = CASE WHEN failed > ?6 THEN failed ELSE ?6 END
     WHERE id = ?1";

/// Ends run `?1` at `?2` with its counts and error; a run closed as
/// abandoned meanwhile (its worker was cut off from the catalog) is
/// reopened and ended by its worker.
pub(crate) const END_SQL: &str = "UPDATE runs SET ended = ?2, listed = ?3, claimed = ?4,
         fetched = ?5, failed = ?6, bytes = ?7, error = ?8, abandoned = 0
     WHERE id = ?1";

/// Worker `?1` is alive until `?2`: its open runs say so.
pub(crate) const RENEW_SQL: &str =
    "UPDATE runs SET alive_until = ?2 WHERE worker = ?1 AND ended IS NULL";

/// Closes at `?2` the open runs of worker `?1` (a worker starting again:
/// its runs from before died with it) and those whose worker was last
/// alive before `?2`.
pub(crate) const ABANDON_SQL: &str = "UPDATE runs SET ended = ?2, abandoned = 1,
         error = COALESCE(error, 'abandoned: its worker stopped before the run ended')
     WHERE ended IS NULL AND (worker = ?1 OR alive_until < ?2)";

/// The columns [`crate::RunRecord`] is read from, in order.
pub(crate) const COLUMNS: &str = "id, source, worker, started, ended, listed, claimed, fetched,
     failed, bytes, error, hook_error, hook_failed_at, abandoned";
