//! The embedded driver: one SQLite file in WAL mode (`sqlite:PATH`).
//! Writers take the database's write lock (`BEGIN IMMEDIATE`), so two
//! daemons on one machine sharing the file still never claim one file twice.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use crate::decide::{action, db_size, hook_failure, Row, FILE_COLUMNS};
use crate::deliveries::{self, CatchUp, DeliveryRecord, Owed, SiteTotals};
use crate::runs;
use crate::{
    join_checksums, Action, Catalog, CatalogError, Fetched, FileRecord, HookFailure, Known,
    Refetch, Result, RunCounts, RunProgress, RunRecord, Seen, SourceTotals,
};

/// Schema versions, applied in order at open (never edit one: add the next).
const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        "CREATE TABLE files (
        source TEXT NOT NULL,
        path TEXT NOT NULL,
        size INTEGER,
        mtime INTEGER,
        etag TEXT,
        checksums TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL,
        claimed_by TEXT,
        claim_until INTEGER,
        blake3 TEXT,
        local_path TEXT,
        fetched_at INTEGER,
        attempts INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        next_retry INTEGER,
        first_seen INTEGER NOT NULL,
        last_seen INTEGER NOT NULL,
        PRIMARY KEY (source, path)
    );
    CREATE INDEX files_claims ON files (claimed_by) WHERE state = 'claimed';
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        source TEXT NOT NULL,
        worker TEXT NOT NULL,
        started INTEGER NOT NULL,
        ended INTEGER,
        listed INTEGER NOT NULL DEFAULT 0,
        claimed INTEGER NOT NULL DEFAULT 0,
        fetched INTEGER NOT NULL DEFAULT 0,
        failed INTEGER NOT NULL DEFAULT 0,
        bytes INTEGER NOT NULL DEFAULT 0,
        error TEXT
    );
    CREATE INDEX runs_source ON runs (source, id);",
    ),
    (
        2,
        // Hooks and sidecars that failed after a delivery or a run.
        "ALTER TABLE files ADD COLUMN hook_error TEXT;
    ALTER TABLE files ADD COLUMN hook_failed_at INTEGER;
    ALTER TABLE runs ADD COLUMN hook_error TEXT;
    ALTER TABLE runs ADD COLUMN hook_failed_at INTEGER;",
    ),
    (3, deliveries::SQLITE_SCHEMA),
    (4, runs::SQLITE_SCHEMA),
];

/// A catalog in one SQLite file.
pub struct SqliteCatalog {
    conn: Mutex<Connection>,
}

impl SqliteCatalog {
    /// Opens (creating the file and its directory if needed) and migrates.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // A missing directory is made; a failure shows as SQLite's own.
            let _ = std::fs::create_dir_all(dir);
        }
        let opened = (|| {
            let mut conn = Connection::open(path)?;
            conn.busy_timeout(Duration::from_secs(30))?;
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            migrate(&mut conn)?;
            Ok(conn)
        })();
        match opened {
            Ok(conn) => Ok(Self {
                conn: Mutex::new(conn),
            }),
            Err(CatalogError::Sqlite(e)) => Err(why_not_opened(path).unwrap_or(e.into())),
            Err(e) => Err(e),
        }
    }

    fn conn(&self) -> Result<MutexGuard<'_, Connection>> {
        self.conn.lock().map_err(|_| CatalogError::Poisoned)
    }
}

/// Why `path` cannot be opened for writing, found out by trying (SQLite
/// says only "unable to open database file" or "readonly database"): the
/// file, then a file beside it (SQLite keeps its WAL there). `None`: both
/// can be written, SQLite's own error says more.
fn why_not_opened(path: &Path) -> Option<CatalogError> {
    let probe = path.with_extension("haul-probe");
    let tried = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .and_then(|_| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&probe)
                .map(drop)
        });
    let _ = std::fs::remove_file(&probe);
    let e = tried.err()?;
    let what = match e.raw_os_error() {
        Some(30) => {
            "its filesystem is mounted read-only: remount it read-write, or point `catalog` at a writable path"
        }
        Some(13 | 1) => {
            "the daemon's user may not write it or its directory: fix the owner or mode (chown, chmod; chattr -i if immutable)"
        }
        Some(28) => "its filesystem is full: free space there (df -h)",
        Some(2 | 20) => "its directory does not exist and cannot be made: create it",
        _ => "it cannot be written",
    };
    Some(CatalogError::Open {
        path: path.display().to_string(),
        why: format!("{what} ({e})"),
    })
}

fn migrate(conn: &mut Connection) -> Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS haul_schema (version INTEGER NOT NULL)")?;
    let current: i64 = tx.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM haul_schema",
        [],
        |r| r.get(0),
    )?;
    let newest = MIGRATIONS.last().map_or(0, |m| m.0);
    if current > newest {
        return Err(CatalogError::TooNew {
            found: current,
            known: newest,
        });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        tracing::info!("catalog: applying schema version {version}");
        tx.execute_batch(sql)?;
        tx.execute("INSERT INTO haul_schema (version) VALUES (?1)", [version])?;
    }
    tx.commit()?;
    Ok(())
}

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        source: r.get(0)?,
        path: r.get(1)?,
        size: r.get(2)?,
        mtime: r.get(3)?,
        etag: r.get(4)?,
        checksums: r.get(5)?,
        state: r.get(6)?,
        claimed_by: r.get(7)?,
        claim_until: r.get(8)?,
        blake3: r.get(9)?,
        local_path: r.get(10)?,
        fetched_at: r.get(11)?,
        attempts: r.get(12)?,
        last_error: r.get(13)?,
        next_retry: r.get(14)?,
        first_seen: r.get(15)?,
        hook_error: r.get(16)?,
        hook_failed_at: r.get(17)?,
    })
}

fn read_known(r: &rusqlite::Row<'_>) -> rusqlite::Result<Known> {
    Ok(Known {
        size: r
            .get::<_, Option<i64>>(0)?
            .and_then(|s| u64::try_from(s).ok()),
        mtime: r.get(1)?,
        etag: r.get(2)?,
        state: r.get(3)?,
        claimed_by: r.get(4)?,
        claim_until: r.get(5)?,
        next_retry: r.get(6)?,
        attempts: u32::try_from(r.get::<_, i64>(7)?).unwrap_or(u32::MAX),
        fetched_before: r.get(8)?,
    })
}

/// Records one fetched file (on a connection or inside a transaction).
fn record_fetched(conn: &Connection, source: &str, path: &str, facts: &Fetched) -> Result<()> {
    conn.prepare_cached(
        "UPDATE files SET state = 'fetched', blake3 = ?3, local_path = ?4, fetched_at = ?5,
             size = ?6, claimed_by = NULL, claim_until = NULL, attempts = 0,
             last_error = NULL, next_retry = NULL, hook_error = NULL, hook_failed_at = NULL
         WHERE source = ?1 AND path = ?2",
    )?
    .execute(params![
        source,
        path,
        facts.blake3,
        facts.local_path,
        facts.at,
        db_size(Some(facts.size))
    ])?;
    Ok(())
}

const KNOWN_COLUMNS: &str =
    "size, mtime, etag, state, claimed_by, claim_until, next_retry, attempts,
     blake3 IS NOT NULL";

impl Catalog for SqliteCatalog {
    fn known(&self, source: &str) -> Result<HashMap<String, Known>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(&format!(
            "SELECT path, {KNOWN_COLUMNS} FROM files WHERE source = ?1"
        ))?;
        let rows = stmt.query_map([source], |r| {
            let path: String = r.get(0)?;
            let known = Known {
                size: r
                    .get::<_, Option<i64>>(1)?
                    .and_then(|s| u64::try_from(s).ok()),
                mtime: r.get(2)?,
                etag: r.get(3)?,
                state: r.get(4)?,
                claimed_by: r.get(5)?,
                claim_until: r.get(6)?,
                next_retry: r.get(7)?,
                attempts: u32::try_from(r.get::<_, i64>(8)?).unwrap_or(u32::MAX),
                fetched_before: r.get(9)?,
            };
            Ok((path, known))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn claim(
        &self,
        source: &str,
        files: &[Seen],
        refetch: Refetch,
        worker: &str,
        lease_until: i64,
        now: i64,
    ) -> Result<Vec<String>> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut claimed = Vec::new();
        {
            let mut get = tx.prepare_cached(&format!(
                "SELECT {KNOWN_COLUMNS} FROM files WHERE source = ?1 AND path = ?2"
            ))?;
            let mut insert = tx.prepare_cached(
                "INSERT INTO files (source, path, size, mtime, etag, checksums, state, claimed_by,
                     claim_until, first_seen, last_seen)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'claimed', ?7, ?8, ?9, ?9)",
            )?;
            let mut update = tx.prepare_cached(
                "UPDATE files SET size = ?3, mtime = ?4, etag = ?5, checksums = ?6,
                     state = 'claimed', claimed_by = ?7, claim_until = ?8, last_seen = ?9
                 WHERE source = ?1 AND path = ?2",
            )?;
            for seen in files {
                let known = get
                    .query_row(params![source, seen.path], read_known)
                    .optional()?;
                let args = params![
                    source,
                    seen.path,
                    db_size(seen.size),
                    seen.mtime,
                    seen.etag,
                    join_checksums(&seen.checksums),
                    worker,
                    lease_until,
                    now
                ];
                match action(known.as_ref(), seen, refetch, worker, now) {
                    Action::Insert => insert.execute(args)?,
                    Action::Claim => update.execute(args)?,
                    Action::Leave => continue,
                };
                claimed.push(seen.path.clone());
            }
        }
        tx.commit()?;
        Ok(claimed)
    }

    fn renew(&self, worker: &str, until: i64) -> Result<u64> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx.execute(
            "UPDATE files SET claim_until = ?2 WHERE state = 'claimed' AND claimed_by = ?1",
            params![worker, until],
        )?;
        let d = tx.execute(deliveries::RENEW_SQL, params![worker, until])?;
        tx.execute(runs::RENEW_SQL, params![worker, until])?;
        tx.commit()?;
        Ok((n + d) as u64)
    }

    fn release_worker(&self, worker: &str) -> Result<u64> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx.execute(
            "UPDATE files SET state = 'new', claimed_by = NULL, claim_until = NULL
             WHERE state = 'claimed' AND claimed_by = ?1",
            [worker],
        )?;
        let d = tx.execute(deliveries::RELEASE_SQL, [worker])?;
        tx.commit()?;
        Ok((n + d) as u64)
    }

    fn release(&self, source: &str, path: &str, worker: &str) -> Result<()> {
        self.conn()?.execute(
            "UPDATE files SET state = 'new', claimed_by = NULL, claim_until = NULL
             WHERE source = ?1 AND path = ?2 AND state = 'claimed' AND claimed_by = ?3",
            params![source, path, worker],
        )?;
        Ok(())
    }

    fn fetched(&self, source: &str, path: &str, facts: &Fetched) -> Result<()> {
        let conn = self.conn()?;
        record_fetched(&conn, source, path, facts)
    }

    fn fetched_batch(
        &self,
        source: &str,
        files: &[(String, Fetched)],
        run: Option<&RunProgress>,
    ) -> Result<()> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for (path, facts) in files {
            record_fetched(&tx, source, path, facts)?;
        }
        if let Some(r) = run {
            let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            tx.prepare_cached(&runs::progress_sql(1))?.execute(params![
                r.id,
                n(r.fetched),
                n(r.bytes),
                n(r.listed),
                n(r.claimed),
                n(r.failed)
            ])?;
        }
        tx.commit()?;
        Ok(())
    }

    fn failed(&self, source: &str, path: &str, error: &str, next_retry: i64) -> Result<u32> {
        let attempts: Option<i64> = self
            .conn()?
            .query_row(
                "UPDATE files SET state = 'failed', attempts = attempts + 1, last_error = ?3,
                     next_retry = ?4, claimed_by = NULL, claim_until = NULL
                 WHERE source = ?1 AND path = ?2 RETURNING attempts",
                params![source, path, error, next_retry],
                |r| r.get(0),
            )
            .optional()?;
        Ok(attempts.map_or(0, |a| u32::try_from(a).unwrap_or(u32::MAX)))
    }

    fn file_hook_failed(&self, source: &str, path: &str, f: &HookFailure) -> Result<()> {
        self.conn()?.execute(
            "UPDATE files SET hook_error = ?3, hook_failed_at = ?4 WHERE source = ?1 AND path = ?2",
            params![source, path, f.error, f.at],
        )?;
        Ok(())
    }

    fn run_hook_failed(&self, id: i64, f: &HookFailure) -> Result<()> {
        self.conn()?.execute(
            "UPDATE runs SET hook_error = ?2, hook_failed_at = ?3 WHERE id = ?1",
            params![id, f.error, f.at],
        )?;
        Ok(())
    }

    fn begin_run(&self, source: &str, worker: &str, started: i64, alive: i64) -> Result<i64> {
        let conn = self.conn()?;
        conn.execute(
            "INSERT INTO runs (source, worker, started, alive_until) VALUES (?1, ?2, ?3, ?4)",
            params![source, worker, started, alive],
        )?;
        Ok(conn.last_insert_rowid())
    }

    fn end_run(&self, id: i64, ended: i64, c: &RunCounts, error: Option<&str>) -> Result<()> {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.conn()?.execute(
            runs::END_SQL,
            params![
                id,
                ended,
                n(c.listed),
                n(c.claimed),
                n(c.fetched),
                n(c.failed),
                n(c.bytes),
                error
            ],
        )?;
        Ok(())
    }

    fn abandon_runs(&self, worker: Option<&str>, now: i64) -> Result<u64> {
        let n = self
            .conn()?
            .execute(runs::ABANDON_SQL, params![worker, now])?;
        Ok(n as u64)
    }

    fn runs(&self, source: Option<&str>, limit: u32) -> Result<Vec<RunRecord>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(&format!(
            "SELECT {} FROM runs WHERE (?1 IS NULL OR source = ?1) ORDER BY id DESC LIMIT ?2",
            runs::COLUMNS
        ))?;
        let rows = stmt.query_map(params![source, limit], |r| {
            let n = |i: usize| r.get::<_, i64>(i).map(|v| u64::try_from(v).unwrap_or(0));
            Ok(RunRecord {
                id: r.get(0)?,
                source: r.get(1)?,
                worker: r.get(2)?,
                started: r.get(3)?,
                ended: r.get(4)?,
                counts: RunCounts {
                    listed: n(5)?,
                    claimed: n(6)?,
                    fetched: n(7)?,
                    failed: n(8)?,
                    bytes: n(9)?,
                },
                error: r.get(10)?,
                hook_failure: hook_failure(r.get(11)?, r.get(12)?),
                abandoned: r.get::<_, i64>(13)? != 0,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn files(
        &self,
        source: Option<&str>,
        state: Option<&str>,
        limit: u32,
    ) -> Result<Vec<FileRecord>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(&format!(
            "SELECT {FILE_COLUMNS} FROM files
             WHERE (?1 IS NULL OR source = ?1) AND (?2 IS NULL OR state = ?2)
             ORDER BY source, path LIMIT ?3"
        ))?;
        let rows = stmt.query_map(params![source, state, limit], read_row)?;
        Ok(rows
            .map(|r| r.map(Row::into_record))
            .collect::<rusqlite::Result<_>>()?)
    }

    fn file(&self, source: &str, path: &str) -> Result<Option<FileRecord>> {
        let conn = self.conn()?;
        let row = conn
            .query_row(
                &format!("SELECT {FILE_COLUMNS} FROM files WHERE source = ?1 AND path = ?2"),
                params![source, path],
                read_row,
            )
            .optional()?;
        Ok(row.map(Row::into_record))
    }

    fn forget(&self, source: &str, prefix: Option<&str>) -> Result<u64> {
        let prefix = prefix.map(|p| p.trim_end_matches('/'));
        let n = self.conn()?.execute(
            "DELETE FROM files WHERE source = ?1 AND (?2 IS NULL OR ?2 = '' OR path = ?2
                 OR substr(path, 1, length(?2) + 1) = ?2 || '/')",
            params![source, prefix],
        )?;
        Ok(n as u64)
    }

    fn totals(&self) -> Result<Vec<SourceTotals>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(
            "SELECT source, state, COUNT(*),
                 COALESCE(SUM(CASE WHEN state = 'fetched' THEN size ELSE 0 END), 0),
                 MAX(fetched_at)
             FROM files GROUP BY source, state ORDER BY source, state",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, Option<i64>>(4)?,
            ))
        })?;
        let mut out: Vec<SourceTotals> = Vec::new();
        for row in rows {
            let (source, state, count, bytes, last) = row?;
            crate::add_totals(&mut out, source, state, count, bytes, last);
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn claim_deliveries(
        &self,
        source: &str,
        site: &str,
        worker: &str,
        lease_until: i64,
        now: i64,
        by: CatchUp,
        limit: u32,
    ) -> Result<Vec<Owed>> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute(
            &deliveries::claim_sql(by),
            params![source, site, worker, lease_until, now, limit],
        )?;
        let owed = {
            let mut stmt = tx.prepare(&deliveries::held_sql(by))?;
            let rows = stmt.query_map(params![source, site, worker, limit], |r| {
                Ok(Owed {
                    path: r.get(0)?,
                    local_path: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                    blake3: r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                    size: r
                        .get::<_, Option<i64>>(3)?
                        .and_then(|s| u64::try_from(s).ok())
                        .unwrap_or(0),
                    fetched_at: r.get::<_, Option<i64>>(4)?.unwrap_or(0),
                })
            })?;
            rows.collect::<rusqlite::Result<Vec<_>>>()?
        };
        tx.commit()?;
        Ok(owed)
    }

    fn delivered(
        &self,
        source: &str,
        site: &str,
        files: &[(String, String)],
        at: i64,
    ) -> Result<()> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut stmt = tx.prepare_cached(deliveries::DELIVERED_SQL)?;
            for (path, blake3) in files {
                stmt.execute(params![source, path, site, blake3, at])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn delivery_failed(
        &self,
        source: &str,
        site: &str,
        files: &[(String, String)],
        next_retry: i64,
    ) -> Result<()> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut stmt = tx.prepare_cached(deliveries::FAILED_SQL)?;
            for (path, error) in files {
                stmt.execute(params![source, path, site, error, next_retry])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn site_totals(&self, source: &str, site: &str, _now: i64) -> Result<SiteTotals> {
        let conn = self.conn()?;
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        let mut t = conn.query_row(&deliveries::totals_sql(), params![source, site], |r| {
            Ok(SiteTotals {
                pending_files: n(r.get(0)?),
                pending_bytes: n(r.get(1)?),
                oldest_pending: r.get(2)?,
                delivered_files: n(r.get(3)?),
                delivered_bytes: n(r.get(4)?),
                failed_files: n(r.get(5)?),
                last_delivered: r.get(6)?,
                last_error: None,
            })
        })?;
        if t.failed_files > 0 {
            t.last_error = conn
                .query_row(deliveries::LAST_ERROR_SQL, params![source, site], |r| {
                    r.get(0)
                })
                .optional()?;
        }
        Ok(t)
    }

    fn deliveries(
        &self,
        source: &str,
        site: &str,
        state: Option<&str>,
        limit: u32,
    ) -> Result<Vec<DeliveryRecord>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(&deliveries::list_sql())?;
        let rows = stmt.query_map(params![source, site, state, limit], |r| {
            Ok(DeliveryRecord {
                path: r.get(0)?,
                state: r.get(1)?,
                attempts: u32::try_from(r.get::<_, i64>(2)?).unwrap_or(u32::MAX),
                error: r.get(3)?,
                next_retry: r.get(4)?,
                delivered_at: r.get(5)?,
                blake3: r.get(6)?,
                size: r
                    .get::<_, Option<i64>>(7)?
                    .and_then(|s| u64::try_from(s).ok())
                    .unwrap_or(0),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn retry_files(&self, source: &str) -> Result<u64> {
        let n = self
            .conn()?
            .execute(crate::RETRY_FILES_SQL, params![source])?;
        Ok(n as u64)
    }

    fn retry_deliveries(&self, source: &str, site: &str) -> Result<u64> {
        let n = self
            .conn()?
            .execute(deliveries::RETRY_SQL, params![source, site])?;
        Ok(n as u64)
    }

    fn unconfirmed(&self, source: &str, sites: &[String], paths: &[String]) -> Result<Vec<String>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(deliveries::CONFIRMED_ONE_SQL)?;
        let mut out = Vec::new();
        for path in paths {
            for site in sites {
                let confirmed: i64 = stmt.query_row(params![source, site, path], |r| r.get(0))?;
                if confirmed == 0 {
                    out.push(path.clone());
                    break;
                }
            }
        }
        Ok(out)
    }

    fn forget_site(&self, source: &str, site: &str, prefix: Option<&str>) -> Result<u64> {
        let prefix = prefix.map(|p| p.trim_end_matches('/'));
        let n = self
            .conn()?
            .execute(deliveries::FORGET_SQL, params![source, site, prefix])?;
        Ok(n as u64)
    }
}
