//! The runs table's SQL that both drivers share (`?N` parameters; the
//! PostgreSQL driver turns them into `$N`).
//!
//! A run's `fetched` and `bytes` grow in the transaction that records its
//! files ([`progress_sql`]), so a run whose worker died still counts what
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

/// Adds files and bytes to a run and raises its listed, claimed and
/// failed to what its worker counts now (never lowers them); parameters
/// numbered from `?{first}`: the run's id, then fetched, bytes, listed,
/// claimed, failed. (Numbered from elsewhere than 1 so PostgreSQL can run
/// it in the statement that records the files.)
pub(crate) fn progress_sql(first: usize) -> String {
    let [id, fetched, bytes, listed, claimed, failed] = std::array::from_fn(|i| first + i);
    format!(
        "UPDATE runs SET fetched = fetched + ?{fetched}, bytes = bytes + ?{bytes},
             listed = CASE WHEN listed > ?{listed} THEN listed ELSE ?{listed} END,
             claimed = CASE WHEN claimed > ?{claimed} THEN claimed ELSE ?{claimed} END,
             failed = CASE WHEN failed > ?{failed} THEN failed ELSE ?{failed} END
         WHERE id = ?{id}"
    )
}

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
