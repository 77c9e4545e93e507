//! The shared driver: PostgreSQL (`postgres://…`), for several daemons on
//! one or many machines dividing a source's files. A batch is claimed in one
//! transaction: the known rows are locked `FOR UPDATE SKIP LOCKED` (rows
//! another worker is deciding right now are skipped, not waited for), new
//! rows are inserted `ON CONFLICT DO NOTHING` (a row another worker inserted
//! first is theirs), and the claims are written with one `UNNEST` update. So
//! a batch costs four statements whatever its size.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use postgres::{Client, Config, NoTls, Transaction};

use crate::decide::{action, db_size, hook_failure, Row, FILE_COLUMNS};
use crate::deliveries::{self, postgres_sql, CatchUp, DeliveryRecord, Owed, SiteTotals};
use crate::runs;
use crate::{
    join_checksums, Action, Catalog, CatalogError, Fetched, FileRecord, HookFailure, Known,
    Refetch, Result, RunCounts, RunProgress, RunRecord, Seen, SourceTotals,
};

/// Schema versions, applied in order at connect (never edit one: add the next).
const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        "CREATE TABLE files (
        source TEXT NOT NULL,
        path TEXT NOT NULL,
        size BIGINT,
        mtime BIGINT,
        etag TEXT,
        checksums TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL,
        claimed_by TEXT,
        claim_until BIGINT,
        blake3 TEXT,
        local_path TEXT,
        fetched_at BIGINT,
        attempts BIGINT NOT NULL DEFAULT 0,
        last_error TEXT,
        next_retry BIGINT,
        first_seen BIGINT NOT NULL,
        last_seen BIGINT NOT NULL,
        PRIMARY KEY (source, path)
    );
    CREATE INDEX files_claims ON files (claimed_by) WHERE state = 'claimed';
    CREATE TABLE runs (
        id BIGSERIAL PRIMARY KEY,
        source TEXT NOT NULL,
        worker TEXT NOT NULL,
        started BIGINT NOT NULL,
        ended BIGINT,
        listed BIGINT NOT NULL DEFAULT 0,
        claimed BIGINT NOT NULL DEFAULT 0,
        fetched BIGINT NOT NULL DEFAULT 0,
        failed BIGINT NOT NULL DEFAULT 0,
        bytes BIGINT NOT NULL DEFAULT 0,
        error TEXT
    );
    CREATE INDEX runs_source ON runs (source, id);",
    ),
    (
        2,
        // Hooks and sidecars that failed after a delivery or a run.
        "ALTER TABLE files ADD COLUMN hook_error TEXT;
    ALTER TABLE files ADD COLUMN hook_failed_at BIGINT;
    ALTER TABLE runs ADD COLUMN hook_error TEXT;
    ALTER TABLE runs ADD COLUMN hook_failed_at BIGINT;",
    ),
    (
        3,
        // What each source owes its sites (`deliveries.rs`).
        "CREATE TABLE deliveries (
        source TEXT NOT NULL,
        path TEXT NOT NULL,
        site TEXT NOT NULL,
        state TEXT NOT NULL,
        blake3 TEXT,
        claimed_by TEXT,
        claim_until BIGINT,
        attempts BIGINT NOT NULL DEFAULT 0,
        last_error TEXT,
        next_retry BIGINT,
        delivered_at BIGINT,
        PRIMARY KEY (source, path, site)
    );
    CREATE INDEX deliveries_claims ON deliveries (claimed_by) WHERE state = 'claimed';",
    ),
    (4, runs::POSTGRES_SCHEMA),
];

/// Any constant: the advisory lock that serializes migrations of workers
/// starting together.
const MIGRATION_LOCK: i64 = 0x6861_756c;

/// Attempts at a claim that PostgreSQL aborted as a deadlock.
const DEADLOCK_RETRIES: u32 = 3;

/// A catalog in a PostgreSQL database.
pub struct PostgresCatalog {
    config: Config,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    client: Mutex<Option<Client>>,
}

impl PostgresCatalog {
    /// Connects (10 s timeout unless the URL sets `connect_timeout`) and
    /// migrates. The URL's `sslmode` (`disable`, `prefer` (default),
    /// `require`, `verify-ca`, `verify-full`) and `sslrootcert` are
    /// libpq's; without a password in the URL, libpq's password file is
    /// read (`passfile=` in the URL, else `$PGPASSFILE`, else
    /// `~/.pgpass`; only if private). See [`crate::pgconnect`].
    pub fn connect(url: &str) -> Result<Self> {
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let pgpassfile = std::env::var_os("PGPASSFILE").map(std::path::PathBuf::from);
        let spec = crate::pgconnect::spec(url, home.as_deref(), pgpassfile.as_deref())?;
        tracing::debug!("catalog: PostgreSQL with sslmode {:?}", spec.mode);
        let mut config = spec.config;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        config.keepalives_idle(Duration::from_secs(30));
        let catalog = Self {
            config,
            tls: spec.tls,
            client: Mutex::new(None),
        };
        let mut client = catalog.client()?;
        if let Some(c) = client.as_mut() {
            migrate(c)?;
        }
        drop(client);
        Ok(catalog)
    }

    /// The connection, opened again if it was lost (a database restart).
    fn client(&self) -> Result<MutexGuard<'_, Option<Client>>> {
        let mut guard = self.client.lock().map_err(|_| CatalogError::Poisoned)?;
        if guard.as_ref().is_none_or(Client::is_closed) {
            let mut client = match &self.tls {
                Some(tls) => self.config.connect(tls.clone())?,
                None => self.config.connect(NoTls)?,
            };
            // No statement waits forever (a lock held by a stuck worker).
            client.batch_execute("SET statement_timeout = '120s'")?;
            *guard = Some(client);
        }
        Ok(guard)
    }

    fn with<T>(&self, f: impl FnOnce(&mut Client) -> Result<T>) -> Result<T> {
        let mut guard = self.client()?;
        match guard.as_mut() {
            Some(c) => f(c),
            None => Err(CatalogError::Poisoned),
        }
    }
}

impl Drop for PostgresCatalog {
    /// The client closes its connection by blocking on a runtime of its
    /// own, which panics inside another runtime's thread: it is closed on
    /// a thread of its own.
    fn drop(&mut self) {
        let client = match self.client.get_mut() {
            Ok(c) => c.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(client) = client {
            let _ = std::thread::spawn(move || drop(client)).join();
        }
    }
}

fn migrate(client: &mut Client) -> Result<()> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS haul_schema (version BIGINT NOT NULL)")?;
    let current: i64 = tx
        .query_one("SELECT COALESCE(MAX(version), 0) FROM haul_schema", &[])?
        .get(0);
    let newest = MIGRATIONS.last().map_or(0, |m| m.0);
    if current > newest {
        return Err(CatalogError::TooNew {
            found: current,
            known: newest,
        });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        tracing::info!("catalog: applying schema version {version}");
        tx.batch_execute(sql)?;
        tx.execute("INSERT INTO haul_schema (version) VALUES ($1)", &[version])?;
    }
    tx.commit()?;
    Ok(())
}

fn known_of(r: &postgres::Row) -> Result<Known> {
    Ok(Known {
        size: r
            .try_get::<_, Option<i64>>("size")?
            .and_then(|s| u64::try_from(s).ok()),
        mtime: r.try_get("mtime")?,
        etag: r.try_get("etag")?,
        state: r.try_get("state")?,
        claimed_by: r.try_get("claimed_by")?,
        claim_until: r.try_get("claim_until")?,
        next_retry: r.try_get("next_retry")?,
        attempts: u32::try_from(r.try_get::<_, i64>("attempts")?).unwrap_or(u32::MAX),
        fetched_before: r.try_get("fetched_before")?,
    })
}

fn row_of(r: &postgres::Row) -> Result<Row> {
    Ok(Row {
        source: r.try_get(0)?,
        path: r.try_get(1)?,
        size: r.try_get(2)?,
        mtime: r.try_get(3)?,
        etag: r.try_get(4)?,
        checksums: r.try_get(5)?,
        state: r.try_get(6)?,
        claimed_by: r.try_get(7)?,
        claim_until: r.try_get(8)?,
        blake3: r.try_get(9)?,
        local_path: r.try_get(10)?,
        fetched_at: r.try_get(11)?,
        attempts: r.try_get(12)?,
        last_error: r.try_get(13)?,
        next_retry: r.try_get(14)?,
        first_seen: r.try_get(15)?,
        hook_error: r.try_get(16)?,
        hook_failed_at: r.try_get(17)?,
    })
}

/// The columns of `files` a batch of [`Seen`] fills, as arrays for `UNNEST`.
struct Columns {
    path: Vec<String>,
    size: Vec<Option<i64>>,
    mtime: Vec<Option<i64>>,
    etag: Vec<Option<String>>,
    checksums: Vec<String>,
}

impl Columns {
    fn of<'a>(files: impl Iterator<Item = &'a Seen>) -> Self {
        let mut c = Columns {
            path: vec![],
            size: vec![],
            mtime: vec![],
            etag: vec![],
            checksums: vec![],
        };
        for s in files {
            c.path.push(s.path.clone());
            c.size.push(db_size(s.size));
            c.mtime.push(s.mtime);
            c.etag.push(s.etag.clone());
            c.checksums.push(join_checksums(&s.checksums));
        }
        c
    }
}

const UNNEST: &str =
    "UNNEST($2::text[], $3::int8[], $4::int8[], $5::text[], $6::text[]) AS t(p, s, m, e, c)";

fn claim_batch(
    tx: &mut Transaction<'_>,
    source: &str,
    files: &[Seen],
    refetch: Refetch,
    worker: &str,
    lease_until: i64,
    now: i64,
) -> Result<Vec<String>> {
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let mut known = HashMap::new();
    for r in tx.query(
        "SELECT path, size, mtime, etag, state, claimed_by, claim_until, next_retry, attempts,
                     blake3 IS NOT NULL AS fetched_before
         FROM files WHERE source = $1 AND path = ANY($2) ORDER BY path FOR UPDATE SKIP LOCKED",
        &[&source, &paths],
    )? {
        known.insert(r.try_get::<_, String>("path")?, known_of(&r)?);
    }
    let mut fresh = Vec::new();
    let mut due = Vec::new();
    for seen in files {
        match action(known.get(&seen.path), seen, refetch, worker, now) {
            Action::Insert => fresh.push(seen),
            Action::Claim => due.push(seen),
            Action::Leave => {}
        }
    }
    let mut claimed = Vec::new();
    if !fresh.is_empty() {
        // The same order in every worker: no two inserts wait on each other in a cycle.
        fresh.sort_by(|a, b| a.path.cmp(&b.path));
        let c = Columns::of(fresh.into_iter());
        for r in tx.query(
            &format!(
                "INSERT INTO files (source, path, size, mtime, etag, checksums, state, claimed_by,
                     claim_until, first_seen, last_seen)
                 SELECT $1, p, s, m, e, c, 'claimed', $7, $8, $9, $9 FROM {UNNEST}
                 ON CONFLICT (source, path) DO NOTHING RETURNING path"
            ),
            &[
                &source,
                &c.path,
                &c.size,
                &c.mtime,
                &c.etag,
                &c.checksums,
                &worker,
                &lease_until,
                &now,
            ],
        )? {
            claimed.push(r.try_get::<_, String>(0)?);
        }
    }
    if !due.is_empty() {
        let c = Columns::of(due.into_iter());
        tx.execute(
            &format!(
                "UPDATE files f SET size = t.s, mtime = t.m, etag = t.e, checksums = t.c,
                     state = 'claimed', claimed_by = $7, claim_until = $8, last_seen = $9
                 FROM {UNNEST} WHERE f.source = $1 AND f.path = t.p"
            ),
            &[
                &source,
                &c.path,
                &c.size,
                &c.mtime,
                &c.etag,
                &c.checksums,
                &worker,
                &lease_until,
                &now,
            ],
        )?;
        claimed.extend(c.path);
    }
    Ok(claimed)
}

/// Claims what `source` owes `site` for `worker` (`sql`: the claim and
/// the held select), then reads back what the worker holds: one
/// transaction, so a lease is never seen half-taken.
fn claim_owed(
    tx: &mut Transaction<'_>,
    sql: (&str, &str),
    (source, site, worker): (&str, &str, &str),
    lease_until: i64,
    now: i64,
    limit: i64,
) -> Result<Vec<Owed>> {
    tx.execute(
        sql.0,
        &[&source, &site, &worker, &lease_until, &now, &limit],
    )?;
    tx.query(sql.1, &[&source, &site, &worker, &limit])?
        .iter()
        .map(|r| {
            Ok(Owed {
                path: r.try_get(0)?,
                local_path: r.try_get::<_, Option<String>>(1)?.unwrap_or_default(),
                blake3: r.try_get::<_, Option<String>>(2)?.unwrap_or_default(),
                size: r
                    .try_get::<_, Option<i64>>(3)?
                    .and_then(|s| u64::try_from(s).ok())
                    .unwrap_or(0),
                fetched_at: r.try_get::<_, Option<i64>>(4)?.unwrap_or(0),
            })
        })
        .collect()
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Catalog for PostgresCatalog {
    fn known(&self, source: &str) -> Result<HashMap<String, Known>> {
        self.with(|c| {
            let mut out = HashMap::new();
            for r in c.query(
                "SELECT path, size, mtime, etag, state, claimed_by, claim_until, next_retry, attempts,
                     blake3 IS NOT NULL AS fetched_before
                 FROM files WHERE source = $1",
                &[&source],
            )? {
                out.insert(r.try_get::<_, String>("path")?, known_of(&r)?);
            }
            Ok(out)
        })
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
        self.with(|c| {
            let mut tries = 0;
            loop {
                let mut tx = c.transaction()?;
                match claim_batch(&mut tx, source, files, refetch, worker, lease_until, now) {
                    Ok(claimed) => {
                        tx.commit()?;
                        return Ok(claimed);
                    }
                    Err(CatalogError::Postgres(e))
                        if e.code() == Some(&postgres::error::SqlState::T_R_DEADLOCK_DETECTED)
                            && tries < DEADLOCK_RETRIES =>
                    {
                        tries += 1;
                        tracing::debug!("catalog: claim deadlocked with another worker; again");
                    }
                    Err(e) => return Err(e),
                }
            }
        })
    }

    fn renew(&self, worker: &str, until: i64) -> Result<u64> {
        self.with(|c| {
            let mut tx = c.transaction()?;
            let n = tx.execute(
                "UPDATE files SET claim_until = $2 WHERE state = 'claimed' AND claimed_by = $1",
                &[&worker, &until],
            )?;
            let d = tx.execute(&postgres_sql(deliveries::RENEW_SQL), &[&worker, &until])?;
            tx.execute(&postgres_sql(runs::RENEW_SQL), &[&worker, &until])?;
            tx.commit()?;
            Ok(n + d)
        })
    }

    fn release_worker(&self, worker: &str) -> Result<u64> {
        self.with(|c| {
            let mut tx = c.transaction()?;
            let n = tx.execute(
                "UPDATE files SET state = 'new', claimed_by = NULL, claim_until = NULL
                 WHERE state = 'claimed' AND claimed_by = $1",
                &[&worker],
            )?;
            let d = tx.execute(&postgres_sql(deliveries::RELEASE_SQL), &[&worker])?;
            tx.commit()?;
            Ok(n + d)
        })
    }

    fn release(&self, source: &str, path: &str, worker: &str) -> Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE files SET state = 'new', claimed_by = NULL, claim_until = NULL
                 WHERE source = $1 AND path = $2 AND state = 'claimed' AND claimed_by = $3",
                &[&source, &path, &worker],
            )?;
            Ok(())
        })
    }

    fn fetched(&self, source: &str, path: &str, f: &Fetched) -> Result<()> {
        self.fetched_batch(source, &[(path.to_string(), f.clone())], None)
    }

    fn fetched_batch(
        &self,
        source: &str,
        files: &[(String, Fetched)],
        run: Option<&RunProgress>,
    ) -> Result<()> {
        if files.is_empty() && run.is_none() {
            return Ok(());
        }
        let mut paths = Vec::with_capacity(files.len());
        let mut blake3 = Vec::with_capacity(files.len());
        let mut local = Vec::with_capacity(files.len());
        let mut at = Vec::with_capacity(files.len());
        let mut size = Vec::with_capacity(files.len());
        for (path, f) in files {
            paths.push(path.as_str());
            blake3.push(f.blake3.as_str());
            local.push(f.local_path.as_str());
            at.push(f.at);
            size.push(db_size(Some(f.size)));
        }
        const RECORD: &str = "UPDATE files f SET state = 'fetched', blake3 = t.b, local_path = t.l,
                 fetched_at = t.a, size = t.s, claimed_by = NULL, claim_until = NULL,
                 attempts = 0, last_error = NULL, next_retry = NULL, hook_error = NULL,
                 hook_failed_at = NULL
             FROM UNNEST($2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[])
                 AS t(p, b, l, a, s)
             WHERE f.source = $1 AND f.path = t.p";
        self.with(|c| {
            // One statement either way (one round trip, one commit): the
            // run's progress rides on the files' update as a CTE.
            match run {
                None => c.execute(RECORD, &[&source, &paths, &blake3, &local, &at, &size])?,
                Some(r) => c.execute(
                    &format!(
                        "WITH recorded AS ({RECORD} RETURNING 1) {}",
                        postgres_sql(&runs::progress_sql(7))
                    ),
                    &[
                        &source,
                        &paths,
                        &blake3,
                        &local,
                        &at,
                        &size,
                        &r.id,
                        &count(r.fetched),
                        &count(r.bytes),
                        &count(r.listed),
                        &count(r.claimed),
                        &count(r.failed),
                    ],
                )?,
            };
            Ok(())
        })
    }

    fn failed(&self, source: &str, path: &str, error: &str, next_retry: i64) -> Result<u32> {
        self.with(|c| {
            let row = c.query_opt(
                "UPDATE files SET state = 'failed', attempts = attempts + 1, last_error = $3,
                     next_retry = $4, claimed_by = NULL, claim_until = NULL
                 WHERE source = $1 AND path = $2 RETURNING attempts",
                &[&source, &path, &error, &next_retry],
            )?;
            Ok(match row {
                Some(r) => u32::try_from(r.try_get::<_, i64>(0)?).unwrap_or(u32::MAX),
                None => 0,
            })
        })
    }

    fn file_hook_failed(&self, source: &str, path: &str, f: &HookFailure) -> Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE files SET hook_error = $3, hook_failed_at = $4
                 WHERE source = $1 AND path = $2",
                &[&source, &path, &f.error, &f.at],
            )?;
            Ok(())
        })
    }

    fn run_hook_failed(&self, id: i64, f: &HookFailure) -> Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE runs SET hook_error = $2, hook_failed_at = $3 WHERE id = $1",
                &[&id, &f.error, &f.at],
            )?;
            Ok(())
        })
    }

    fn begin_run(&self, source: &str, worker: &str, started: i64, alive: i64) -> Result<i64> {
        self.with(|c| {
            Ok(c.query_one(
                "INSERT INTO runs (source, worker, started, alive_until) VALUES ($1, $2, $3, $4)
                 RETURNING id",
                &[&source, &worker, &started, &alive],
            )?
            .try_get(0)?)
        })
    }

    fn end_run(&self, id: i64, ended: i64, n: &RunCounts, error: Option<&str>) -> Result<()> {
        self.with(|c| {
            c.execute(
                &postgres_sql(runs::END_SQL),
                &[
                    &id,
                    &ended,
                    &count(n.listed),
                    &count(n.claimed),
                    &count(n.fetched),
                    &count(n.failed),
                    &count(n.bytes),
                    &error,
                ],
            )?;
            Ok(())
        })
    }

    fn abandon_runs(&self, worker: Option<&str>, now: i64) -> Result<u64> {
        self.with(|c| Ok(c.execute(&postgres_sql(runs::ABANDON_SQL), &[&worker, &now])?))
    }

    fn runs(&self, source: Option<&str>, limit: u32) -> Result<Vec<RunRecord>> {
        self.with(|c| {
            let rows = c.query(
                &format!(
                    "SELECT {} FROM runs WHERE ($1::text IS NULL OR source = $1)
                     ORDER BY id DESC LIMIT $2",
                    runs::COLUMNS
                ),
                &[&source, &i64::from(limit)],
            )?;
            let mut out = Vec::with_capacity(rows.len());
            for r in rows {
                let n = |i: usize| -> Result<u64> {
                    Ok(u64::try_from(r.try_get::<_, i64>(i)?).unwrap_or(0))
                };
                out.push(RunRecord {
                    id: r.try_get(0)?,
                    source: r.try_get(1)?,
                    worker: r.try_get(2)?,
                    started: r.try_get(3)?,
                    ended: r.try_get(4)?,
                    counts: RunCounts {
                        listed: n(5)?,
                        claimed: n(6)?,
                        fetched: n(7)?,
                        failed: n(8)?,
                        bytes: n(9)?,
                    },
                    error: r.try_get(10)?,
                    hook_failure: hook_failure(r.try_get(11)?, r.try_get(12)?),
                    abandoned: r.try_get::<_, i64>(13)? != 0,
                });
            }
            Ok(out)
        })
    }

    fn files(
        &self,
        source: Option<&str>,
        state: Option<&str>,
        limit: u32,
    ) -> Result<Vec<FileRecord>> {
        self.with(|c| {
            let rows = c.query(
                &format!(
                    "SELECT {FILE_COLUMNS} FROM files
                     WHERE ($1::text IS NULL OR source = $1) AND ($2::text IS NULL OR state = $2)
                     ORDER BY source, path LIMIT $3"
                ),
                &[&source, &state, &i64::from(limit)],
            )?;
            rows.iter()
                .map(|r| row_of(r).map(Row::into_record))
                .collect()
        })
    }

    fn file(&self, source: &str, path: &str) -> Result<Option<FileRecord>> {
        self.with(|c| {
            let row = c.query_opt(
                &format!("SELECT {FILE_COLUMNS} FROM files WHERE source = $1 AND path = $2"),
                &[&source, &path],
            )?;
            row.as_ref()
                .map(|r| row_of(r).map(Row::into_record))
                .transpose()
        })
    }

    fn forget(&self, source: &str, prefix: Option<&str>) -> Result<u64> {
        let prefix = prefix.map(|p| p.trim_end_matches('/'));
        self.with(|c| {
            Ok(c.execute(
                "DELETE FROM files WHERE source = $1 AND ($2::text IS NULL OR $2 = '' OR path = $2
                     OR left(path, length($2) + 1) = $2 || '/')",
                &[&source, &prefix],
            )?)
        })
    }

    fn totals(&self) -> Result<Vec<SourceTotals>> {
        self.with(|c| {
            let mut out = Vec::new();
            for r in c.query(
                "SELECT source, state, COUNT(*)::int8,
                     COALESCE(SUM(CASE WHEN state = 'fetched' THEN size ELSE 0 END), 0)::int8,
                     MAX(fetched_at)
                 FROM files GROUP BY source, state ORDER BY source, state",
                &[],
            )? {
                crate::add_totals(
                    &mut out,
                    r.try_get(0)?,
                    r.try_get(1)?,
                    r.try_get(2)?,
                    r.try_get(3)?,
                    r.try_get(4)?,
                );
            }
            Ok(out)
        })
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
        let claim = postgres_sql(&deliveries::claim_sql(by));
        let held = postgres_sql(&deliveries::held_sql(by));
        let limit = i64::from(limit);
        self.with(|c| {
            let mut tries = 0;
            loop {
                let mut tx = c.transaction()?;
                let got = claim_owed(
                    &mut tx,
                    (&claim, &held),
                    (source, site, worker),
                    lease_until,
                    now,
                    limit,
                );
                match got {
                    Ok(owed) => {
                        tx.commit()?;
                        return Ok(owed);
                    }
                    Err(CatalogError::Postgres(e))
                        if e.code() == Some(&postgres::error::SqlState::T_R_DEADLOCK_DETECTED)
                            && tries < DEADLOCK_RETRIES =>
                    {
                        tries += 1;
                        tracing::debug!(
                            "catalog: delivery claim deadlocked with another worker; again"
                        );
                    }
                    Err(e) => return Err(e),
                }
            }
        })
    }

    fn delivered(
        &self,
        source: &str,
        site: &str,
        files: &[(String, String)],
        at: i64,
    ) -> Result<()> {
        if files.is_empty() {
            return Ok(());
        }
        self.with(|c| {
            let mut tx = c.transaction()?;
            let stmt = tx.prepare(&postgres_sql(deliveries::DELIVERED_SQL))?;
            for (path, blake3) in files {
                tx.execute(&stmt, &[&source, path, &site, blake3, &at])?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    fn delivery_failed(
        &self,
        source: &str,
        site: &str,
        files: &[(String, String)],
        next_retry: i64,
    ) -> Result<()> {
        if files.is_empty() {
            return Ok(());
        }
        self.with(|c| {
            let mut tx = c.transaction()?;
            let stmt = tx.prepare(&postgres_sql(deliveries::FAILED_SQL))?;
            for (path, error) in files {
                tx.execute(&stmt, &[&source, path, &site, error, &next_retry])?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    fn site_totals(&self, source: &str, site: &str, _now: i64) -> Result<SiteTotals> {
        self.with(|c| {
            let r = c.query_one(&postgres_sql(&deliveries::totals_sql()), &[&source, &site])?;
            let n = |i: usize| -> Result<u64> {
                Ok(u64::try_from(r.try_get::<_, i64>(i)?).unwrap_or(0))
            };
            let mut t = SiteTotals {
                pending_files: n(0)?,
                pending_bytes: n(1)?,
                oldest_pending: r.try_get(2)?,
                delivered_files: n(3)?,
                delivered_bytes: n(4)?,
                failed_files: n(5)?,
                last_delivered: r.try_get(6)?,
                last_error: None,
            };
            if t.failed_files > 0 {
                t.last_error = c
                    .query_opt(&postgres_sql(deliveries::LAST_ERROR_SQL), &[&source, &site])?
                    .map(|r| r.try_get(0))
                    .transpose()?;
            }
            Ok(t)
        })
    }

    fn deliveries(
        &self,
        source: &str,
        site: &str,
        state: Option<&str>,
        limit: u32,
    ) -> Result<Vec<DeliveryRecord>> {
        self.with(|c| {
            let rows = c.query(
                &postgres_sql(&deliveries::list_sql()),
                &[&source, &site, &state, &i64::from(limit)],
            )?;
            rows.iter()
                .map(|r| {
                    Ok(DeliveryRecord {
                        path: r.try_get(0)?,
                        state: r.try_get(1)?,
                        attempts: u32::try_from(r.try_get::<_, i64>(2)?).unwrap_or(u32::MAX),
                        error: r.try_get(3)?,
                        next_retry: r.try_get(4)?,
                        delivered_at: r.try_get(5)?,
                        blake3: r.try_get(6)?,
                        size: r
                            .try_get::<_, Option<i64>>(7)?
                            .and_then(|s| u64::try_from(s).ok())
                            .unwrap_or(0),
                    })
                })
                .collect()
        })
    }

    fn retry_files(&self, source: &str) -> Result<u64> {
        self.with(|c| Ok(c.execute(&postgres_sql(crate::RETRY_FILES_SQL), &[&source])?))
    }

    fn retry_deliveries(&self, source: &str, site: &str) -> Result<u64> {
        self.with(|c| Ok(c.execute(&postgres_sql(deliveries::RETRY_SQL), &[&source, &site])?))
    }

    fn unconfirmed(&self, source: &str, sites: &[String], paths: &[String]) -> Result<Vec<String>> {
        self.with(|c| {
            let stmt = c.prepare(&postgres_sql(deliveries::CONFIRMED_ONE_SQL))?;
            let mut out = Vec::new();
            for path in paths {
                for site in sites {
                    let confirmed: i64 = c.query_one(&stmt, &[&source, site, path])?.try_get(0)?;
                    if confirmed == 0 {
                        out.push(path.clone());
                        break;
                    }
                }
            }
            Ok(out)
        })
    }

    fn forget_site(&self, source: &str, site: &str, prefix: Option<&str>) -> Result<u64> {
        let prefix = prefix.map(|p| p.trim_end_matches('/'));
        self.with(|c| {
            Ok(c.execute(
                &postgres_sql(deliveries::FORGET_SQL),
                &[&source, &site, &prefix],
            )?)
        })
    }
}
