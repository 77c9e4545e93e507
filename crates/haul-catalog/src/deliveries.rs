//! What a source owes its sites: one row per (file, site) that was ever
//! claimed, confirmed or failed, and the SQL both drivers run over it.
//!
//! Nothing is queued. A fetched file is *owed* to a site while the site
//! has no confirmation of the file's current BLAKE3 ([`OWED`]): a file
//! just fetched, one fetched again with new content, or every file of a
//! source when a site is added to its `deliver` list. So a crash between
//! recording a fetch and handing it to the distributor loses nothing —
//! there is no such step — and a site's confirmation is final for the
//! version it confirmed.
//!
//! A row's `state` is `claimed` (a worker is delivering it, until its lease
//! ends), `delivered` (the site confirmed `blake3` at `delivered_at`),
//! `failed` (attempts, the site's error, not before `next_retry`) or
//! `pending` (a claim given back). Shown states add `pending` for files
//! with no row, or a confirmation of an older version.
//!
//! The SQL is written once, with `?N` parameters; the PostgreSQL driver
//! turns them into `$N` ([`postgres_sql`]).

/// Which owed files a site gets first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatchUp {
    /// The oldest fetched first (an archive: every file matters).
    #[default]
    Oldest,
    /// The newest first (a real-time feed: what is late matters least).
    Newest,
}

impl std::str::FromStr for CatchUp {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "oldest" => Ok(Self::Oldest),
            "newest" => Ok(Self::Newest),
            other => Err(format!(
                "catch_up = {other:?}: use \"oldest\" or \"newest\""
            )),
        }
    }
}

/// A delivery a worker claimed: the fetched file and where it lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owed {
    /// Path relative to the source (and to its destination).
    pub path: String,
    /// Where it was delivered locally.
    pub local_path: String,
    /// Its BLAKE3 when it was fetched (hex).
    pub blake3: String,
    /// Its size.
    pub size: u64,
    /// When it was fetched (Unix seconds).
    pub fetched_at: i64,
}

/// One fetched file's delivery to one site, as `haul catalog list --site`
/// shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRecord {
    /// Path relative to the source.
    pub path: String,
    /// Its size.
    pub size: u64,
    /// `pending`, `claimed`, `delivered` or `failed`.
    pub state: String,
    /// Failed attempts since it was last delivered.
    pub attempts: u32,
    /// The site's last error.
    pub error: Option<String>,
    /// A failed delivery is not tried again before this.
    pub next_retry: Option<i64>,
    /// When the site confirmed it.
    pub delivered_at: Option<i64>,
    /// The BLAKE3 the site confirmed (or that is being delivered).
    pub blake3: Option<String>,
}

/// What a source owes one site and what it delivered there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SiteTotals {
    /// Files owed (pending, claimed or failed).
    pub pending_files: u64,
    /// Their bytes.
    pub pending_bytes: u64,
    /// When the oldest owed file was fetched: the site's lag is `now` less this.
    pub oldest_pending: Option<i64>,
    /// Files the site confirmed at their current version.
    pub delivered_files: u64,
    /// Their bytes.
    pub delivered_bytes: u64,
    /// Owed files whose last attempt failed.
    pub failed_files: u64,
    /// When the site last confirmed a file.
    pub last_delivered: Option<i64>,
    /// The site's most recent error for a file it still lacks.
    pub last_error: Option<String>,
}

/// The site's confirmation is not of the file's current version, over
/// `f` (files) and `d` (its deliveries row for the site, LEFT JOINed).
const OWED: &str = "NOT COALESCE(d.state = 'delivered' AND d.blake3 = f.blake3, FALSE)";

/// `f` and `d` joined for site `?2` of source `?1`, fetched files only.
const FROM: &str = "FROM files f LEFT JOIN deliveries d
     ON d.source = f.source AND d.path = f.path AND d.site = ?2
     WHERE f.source = ?1 AND f.state = 'fetched'";

/// The row `t` may be claimed by worker `?3` at `?5`: none, given back,
/// its claim `?3`'s or ended, its retry time come, or confirmed for
/// another version.
fn claimable(t: &str) -> String {
    format!(
        "({t}.state IS NULL OR {t}.state IN ('pending', 'delivered')
          OR ({t}.state = 'claimed' AND ({t}.claimed_by = ?3 OR {t}.claim_until < ?5))
          OR ({t}.state = 'failed' AND COALESCE({t}.next_retry, 0) <= ?5))"
    )
}

fn order(by: CatchUp) -> &'static str {
    match by {
        CatchUp::Oldest => "f.fetched_at ASC, f.path ASC",
        CatchUp::Newest => "f.fetched_at DESC, f.path ASC",
    }
}

/// Claims up to `?6` owed files of source `?1` for site `?2` by worker `?3`
/// until `?4` at `?5`. A row raced by another worker is re-checked on its
/// current version (the upsert's `WHERE`), so two workers never hold one
/// delivery.
pub(crate) fn claim_sql(by: CatchUp) -> String {
    format!(
        "INSERT INTO deliveries (source, path, site, state, blake3, claimed_by, claim_until)
         SELECT f.source, f.path, ?2, 'claimed', f.blake3, ?3, ?4 {FROM}
           AND {OWED} AND {d}
         ORDER BY {o} LIMIT ?6
         ON CONFLICT (source, path, site) DO UPDATE SET state = 'claimed',
             blake3 = excluded.blake3, claimed_by = excluded.claimed_by,
             claim_until = excluded.claim_until
         WHERE NOT (deliveries.state = 'delivered' AND deliveries.blake3 = excluded.blake3)
           AND {t}",
        d = claimable("d"),
        o = order(by),
        t = claimable("deliveries"),
    )
}

/// What worker `?3` holds of source `?1` for site `?2`, up to `?4`.
pub(crate) fn held_sql(by: CatchUp) -> String {
    format!(
        "SELECT f.path, f.local_path, f.blake3, f.size, f.fetched_at
         FROM deliveries d JOIN files f ON f.source = d.source AND f.path = d.path
         WHERE d.source = ?1 AND d.site = ?2 AND d.state = 'claimed' AND d.claimed_by = ?3
           AND f.state = 'fetched'
         ORDER BY {} LIMIT ?4",
        order(by)
    )
}

/// Records `?2` at site `?3` of source `?1` confirmed with BLAKE3 `?4` at `?5`.
pub(crate) const DELIVERED_SQL: &str =
    "INSERT INTO deliveries (source, path, site, state, blake3, delivered_at)
     VALUES (?1, ?2, ?3, 'delivered', ?4, ?5)
     ON CONFLICT (source, path, site) DO UPDATE SET state = 'delivered',
         blake3 = excluded.blake3, delivered_at = excluded.delivered_at, claimed_by = NULL,
         claim_until = NULL, attempts = 0, last_error = NULL, next_retry = NULL";

/// Records a failed delivery of `?2` to site `?3` of source `?1`: error
/// `?4`, not before `?5`.
pub(crate) const FAILED_SQL: &str =
    "INSERT INTO deliveries (source, path, site, state, attempts, last_error, next_retry)
     VALUES (?1, ?2, ?3, 'failed', 1, ?4, ?5)
     ON CONFLICT (source, path, site) DO UPDATE SET state = 'failed',
         attempts = deliveries.attempts + 1, last_error = excluded.last_error,
         next_retry = excluded.next_retry, claimed_by = NULL, claim_until = NULL";

/// Extends worker `?1`'s delivery claims to `?2`.
pub(crate) const RENEW_SQL: &str =
    "UPDATE deliveries SET claim_until = ?2 WHERE state = 'claimed' AND claimed_by = ?1";

/// Gives back worker `?1`'s delivery claims.
pub(crate) const RELEASE_SQL: &str =
    "UPDATE deliveries SET state = 'pending', claimed_by = NULL, claim_until = NULL
     WHERE state = 'claimed' AND claimed_by = ?1";

/// Makes the failed deliveries of source `?1` to site `?2` due.
pub(crate) const RETRY_SQL: &str =
    "UPDATE deliveries SET next_retry = 0 WHERE source = ?1 AND site = ?2 AND state = 'failed'";

/// Forgets site `?2`'s rows of source `?1` (all, or under prefix `?3`).
pub(crate) const FORGET_SQL: &str = "DELETE FROM deliveries WHERE source = ?1 AND site = ?2
     AND (CAST(?3 AS TEXT) IS NULL OR ?3 = '' OR path = ?3
          OR substr(path, 1, length(?3) + 1) = ?3 || '/')";

/// Totals of site `?2` of source `?1`: owed files, bytes, oldest fetch,
/// delivered files, bytes, failed, last delivery.
pub(crate) fn totals_sql() -> String {
    format!(
        "SELECT
           CAST(COALESCE(SUM(CASE WHEN {OWED} THEN 1 ELSE 0 END), 0) AS BIGINT),
           CAST(COALESCE(SUM(CASE WHEN {OWED} THEN f.size ELSE 0 END), 0) AS BIGINT),
           MIN(CASE WHEN {OWED} THEN f.fetched_at END),
           CAST(COALESCE(SUM(CASE WHEN {OWED} THEN 0 ELSE 1 END), 0) AS BIGINT),
           CAST(COALESCE(SUM(CASE WHEN {OWED} THEN 0 ELSE f.size END), 0) AS BIGINT),
           CAST(COALESCE(SUM(CASE WHEN {OWED} AND d.state = 'failed' THEN 1 ELSE 0 END), 0)
                AS BIGINT),
           MAX(d.delivered_at)
         {FROM}"
    )
}

/// 1 when site `?2` confirmed file `?3` of source `?1` at its current
/// version and the file is not being fetched again, else 0 (a file being
/// refetched, or one the catalog forgot, is confirmed nowhere).
pub(crate) const CONFIRMED_ONE_SQL: &str = "SELECT CAST(COUNT(*) AS BIGINT)
     FROM files f JOIN deliveries d ON d.source = f.source AND d.path = f.path AND d.site = ?2
     WHERE f.source = ?1 AND f.path = ?3 AND f.state = 'fetched'
       AND d.state = 'delivered' AND d.blake3 = f.blake3";

/// The latest error of a file site `?2` still lacks, of source `?1`.
pub(crate) const LAST_ERROR_SQL: &str = "SELECT last_error FROM deliveries
     WHERE source = ?1 AND site = ?2 AND state = 'failed' AND last_error IS NOT NULL
     ORDER BY next_retry DESC LIMIT 1";

/// Every fetched file of source `?1` with its delivery to site `?2` (in
/// shown state `?3` when not NULL), by path, up to `?4`.
pub(crate) fn list_sql() -> String {
    format!(
        "SELECT path, st, attempts, last_error, next_retry, delivered_at, dblake3, size FROM (
           SELECT f.path AS path,
             CASE WHEN d.state IS NULL THEN 'pending'
                  WHEN d.state = 'delivered' AND d.blake3 IS DISTINCT FROM f.blake3 THEN 'pending'
                  ELSE d.state END AS st,
             CAST(COALESCE(d.attempts, 0) AS BIGINT) AS attempts, d.last_error AS last_error,
             d.next_retry AS next_retry, d.delivered_at AS delivered_at, d.blake3 AS dblake3,
             f.size AS size
           {FROM}) x
         WHERE CAST(?3 AS TEXT) IS NULL OR st = ?3
         ORDER BY path LIMIT ?4"
    )
}

/// `sql` with PostgreSQL's `$N` for SQLite's `?N` (the SQL here has no
/// other `?`).
pub(crate) fn postgres_sql(sql: &str) -> String {
    sql.replace('?', "$")
}

/// The deliveries table for SQLite (the PostgreSQL driver's migration has
/// its own types).
pub(crate) const SQLITE_SCHEMA: &str = "CREATE TABLE deliveries (
        source TEXT NOT NULL,
        path TEXT NOT NULL,
        site TEXT NOT NULL,
        state TEXT NOT NULL,
        blake3 TEXT,
        claimed_by TEXT,
        claim_until INTEGER,
        attempts INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        next_retry INTEGER,
        delivered_at INTEGER,
        PRIMARY KEY (source, path, site)
    );
    CREATE INDEX deliveries_claims ON deliveries (claimed_by) WHERE state = 'claimed';";
