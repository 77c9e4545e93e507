//! One conformance suite, run against both drivers: embedded SQLite, and a
//! real PostgreSQL server the test starts (initdb + postgres on 127.0.0.1).
//! Each case gets a fresh catalog; a failure names the driver and the case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::Arc;

use haul_catalog::{
    Catalog, Fetched, HookFailure, PostgresCatalog, Refetch, RunCounts, Seen, SqliteCatalog, State,
};

/// Opens catalogs by name: a fresh one, or the same one again.
trait Backend {
    fn fresh(&self, name: &str) -> Box<dyn Catalog>;
    fn reopen(&self, name: &str) -> Box<dyn Catalog>;
    /// Runs `sql` on an empty database `name` without opening it as a
    /// catalog (to lay down an older schema).
    fn raw(&self, name: &str, sql: &str);
}

struct Sqlite(tempfile::TempDir);

impl Backend for Sqlite {
    fn fresh(&self, name: &str) -> Box<dyn Catalog> {
        self.reopen(name)
    }
    fn reopen(&self, name: &str) -> Box<dyn Catalog> {
        let path = self.0.path().join(format!("{name}.db"));
        Box::new(SqliteCatalog::open(&path).unwrap())
    }
    fn raw(&self, name: &str, sql: &str) {
        let path = self.0.path().join(format!("{name}.db"));
        rusqlite::Connection::open(path)
            .unwrap()
            .execute_batch(sql)
            .unwrap();
    }
}

struct Postgres(haul_catalog::testserver::TestServer);

impl Backend for Postgres {
    fn fresh(&self, name: &str) -> Box<dyn Catalog> {
        let url = self.0.create_database(name).unwrap();
        Box::new(PostgresCatalog::connect(&url).unwrap())
    }
    fn reopen(&self, name: &str) -> Box<dyn Catalog> {
        Box::new(PostgresCatalog::connect(&self.0.url(name)).unwrap())
    }
    fn raw(&self, name: &str, sql: &str) {
        let url = self.0.create_database(name).unwrap();
        // The client blocks on a runtime of its own: not inside another's.
        let sql = sql.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY");
        std::thread::spawn(move || {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.batch_execute(&sql).unwrap();
        })
        .join()
        .unwrap();
    }
}

fn seen(path: &str, size: u64, mtime: i64) -> Seen {
    Seen {
        path: path.into(),
        size: Some(size),
        mtime: Some(mtime),
        etag: Some(format!("\"{size}-{mtime}\"")),
        checksums: vec!["md5:00ff".into()],
    }
}

fn done(size: u64) -> Fetched {
    Fetched {
        blake3: "ab".repeat(32),
        local_path: "/data/x".into(),
        at: 1000,
        size,
    }
}

type Case = fn(&dyn Backend, &str);

const CASES: &[(&str, Case)] = &[
    ("claims_once", claims_once),
    (
        "fetched_is_final_unless_changed",
        fetched_is_final_unless_changed,
    ),
    ("leases_expire_and_renew", leases_expire_and_renew),
    (
        "failures_wait_for_their_retry",
        failures_wait_for_their_retry,
    ),
    ("release_gives_claims_back", release_gives_claims_back),
    ("runs_are_recorded", runs_are_recorded),
    ("forget_by_prefix", forget_by_prefix),
    ("survives_reopen", survives_reopen),
    ("many_files_decided_in_memory", many_files_decided_in_memory),
    ("workers_never_share_a_file", workers_never_share_a_file),
    ("one_batch_raced_by_workers", one_batch_raced_by_workers),
    ("fetched_in_a_batch", fetched_in_a_batch),
    ("hook_failures_are_kept", hook_failures_are_kept),
    ("schema_1_is_migrated", schema_1_is_migrated),
];

fn run_all(backend: &dyn Backend, driver: &str) {
    for (name, case) in CASES {
        eprintln!("{driver}: {name}");
        case(backend, name);
    }
}

#[test]
fn sqlite_conformance() {
    run_all(&Sqlite(tempfile::tempdir().unwrap()), "sqlite");
}

#[test]
fn postgres_conformance() {
    let pg = haul_catalog::testserver::TestServer::start().unwrap();
    run_all(&Postgres(pg), "postgres");
}

fn claims_once(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    let files = [seen("a.nc", 10, 100), seen("d/b.nc", 20, 100)];
    let got = c
        .claim("s", &files, Refetch::Never, "w1", 160, 100)
        .unwrap();
    assert_eq!(got, vec!["a.nc".to_string(), "d/b.nc".to_string()]);
    // Another worker, lease still live: nothing.
    assert!(c
        .claim("s", &files, Refetch::Never, "w2", 160, 110)
        .unwrap()
        .is_empty());
    // The same worker again (a restart): its own claims.
    assert_eq!(
        c.claim("s", &files[..1], Refetch::Never, "w1", 170, 110)
            .unwrap(),
        vec!["a.nc".to_string()]
    );
    let rec = c.file("s", "d/b.nc").unwrap().unwrap();
    assert_eq!(rec.seen, files[1]);
    assert_eq!(
        rec.state,
        State::Claimed {
            by: "w1".into(),
            until: 160
        }
    );
    assert_eq!(rec.first_seen, 100);
    // Another source's file of the same path is another file.
    assert_eq!(
        c.claim("t", &files[..1], Refetch::Never, "w2", 160, 110)
            .unwrap()
            .len(),
        1
    );
    assert!(c.file("s", "nope").unwrap().is_none());
}

fn fetched_is_final_unless_changed(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    let v1 = seen("a", 10, 100);
    c.claim(
        "s",
        std::slice::from_ref(&v1),
        Refetch::Never,
        "w1",
        200,
        100,
    )
    .unwrap();
    c.fetched("s", "a", &done(10)).unwrap();
    let rec = c.file("s", "a").unwrap().unwrap();
    assert_eq!(
        rec.state,
        State::Fetched {
            blake3: "ab".repeat(32),
            local_path: "/data/x".into(),
            at: 1000
        }
    );
    for refetch in [Refetch::Never, Refetch::IfChanged] {
        assert!(c
            .claim("s", std::slice::from_ref(&v1), refetch, "w1", 300, 200)
            .unwrap()
            .is_empty());
    }
    let v2 = seen("a", 11, 150);
    assert!(c
        .claim(
            "s",
            std::slice::from_ref(&v2),
            Refetch::Never,
            "w1",
            300,
            200
        )
        .unwrap()
        .is_empty());
    let known = c.known("s").unwrap();
    assert!(known["a"].needs_nothing(&v2, Refetch::Never, 200));
    assert!(!known["a"].needs_nothing(&v2, Refetch::IfChanged, 200));
    assert_eq!(
        c.claim(
            "s",
            std::slice::from_ref(&v2),
            Refetch::IfChanged,
            "w1",
            300,
            200
        )
        .unwrap(),
        vec!["a".to_string()]
    );
    assert_eq!(c.file("s", "a").unwrap().unwrap().seen, v2);
}

fn leases_expire_and_renew(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    let f = [seen("a", 1, 1)];
    c.claim("s", &f, Refetch::Never, "w1", 160, 100).unwrap();
    assert_eq!(c.renew("w1", 400).unwrap(), 1);
    // Renewed: still w1's at 300.
    assert!(c
        .claim("s", &f, Refetch::Never, "w2", 500, 300)
        .unwrap()
        .is_empty());
    // Expired (w1 died): w2 takes it over.
    assert_eq!(
        c.claim("s", &f, Refetch::Never, "w2", 500, 400).unwrap(),
        vec!["a".to_string()]
    );
    assert_eq!(c.renew("w1", 900).unwrap(), 0);
    assert_eq!(
        c.file("s", "a").unwrap().unwrap().state,
        State::Claimed {
            by: "w2".into(),
            until: 500
        }
    );
}

fn failures_wait_for_their_retry(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    let f = [seen("a", 1, 1)];
    c.claim("s", &f, Refetch::Never, "w1", 160, 100).unwrap();
    assert_eq!(c.failed("s", "a", "connection refused", 200).unwrap(), 1);
    assert!(c
        .claim("s", &f, Refetch::Never, "w1", 300, 150)
        .unwrap()
        .is_empty());
    assert!(c.known("s").unwrap()["a"].needs_nothing(&f[0], Refetch::Never, 150));
    assert_eq!(
        c.claim("s", &f, Refetch::Never, "w1", 300, 200).unwrap(),
        vec!["a".to_string()]
    );
    assert_eq!(c.failed("s", "a", "timed out", 400).unwrap(), 2);
    let rec = c.file("s", "a").unwrap().unwrap();
    assert_eq!(
        rec.state,
        State::Failed {
            attempts: 2,
            error: "timed out".into(),
            next_retry: 400
        }
    );
    c.claim("s", &f, Refetch::Never, "w1", 600, 400).unwrap();
    c.fetched("s", "a", &done(1)).unwrap();
    assert_eq!(c.file("s", "a").unwrap().unwrap().attempts, 0);
    assert_eq!(c.files(None, Some("failed"), 10).unwrap().len(), 0);
}

fn release_gives_claims_back(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    let f = [seen("a", 1, 1), seen("b", 1, 1), seen("c", 1, 1)];
    c.claim("s", &f, Refetch::Never, "w1", 1000, 100).unwrap();
    c.release("s", "a", "w2").unwrap();
    assert_eq!(c.file("s", "a").unwrap().unwrap().state.name(), "claimed");
    c.release("s", "a", "w1").unwrap();
    assert_eq!(c.file("s", "a").unwrap().unwrap().state, State::New);
    assert_eq!(c.release_worker("w1").unwrap(), 2);
    assert_eq!(c.files(Some("s"), Some("new"), 10).unwrap().len(), 3);
    assert_eq!(
        c.claim("s", &f, Refetch::Never, "w2", 1000, 100)
            .unwrap()
            .len(),
        3
    );
}

fn runs_are_recorded(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    let r1 = c.begin_run("s", "w1", 100).unwrap();
    let r2 = c.begin_run("t", "w1", 105).unwrap();
    let counts = RunCounts {
        listed: 5,
        claimed: 3,
        fetched: 2,
        failed: 1,
        bytes: 1 << 40,
    };
    c.end_run(r1, 110, &counts, None).unwrap();
    c.end_run(r2, 111, &RunCounts::default(), Some("connection refused"))
        .unwrap();
    let all = c.runs(None, 10).unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].id, r2);
    assert_eq!(all[0].error.as_deref(), Some("connection refused"));
    let s = c.runs(Some("s"), 10).unwrap();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].counts, counts);
    assert_eq!((s[0].started, s[0].ended), (100, Some(110)));
    assert_eq!(s[0].worker, "w1");
}

fn forget_by_prefix(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    let f = [
        seen("2024/a", 1, 1),
        seen("2024/b", 1, 1),
        seen("20245", 1, 1),
        seen("x", 1, 1),
    ];
    c.claim("s", &f, Refetch::Never, "w1", 1000, 100).unwrap();
    c.claim("t", &f, Refetch::Never, "w1", 1000, 100).unwrap();
    for p in ["2024/a", "2024/b", "20245", "x"] {
        c.fetched("s", p, &done(1)).unwrap();
    }
    assert_eq!(c.forget("s", Some("2024/")).unwrap(), 2);
    assert_eq!(c.forget("s", Some("x")).unwrap(), 1);
    assert_eq!(c.files(Some("s"), None, 10).unwrap().len(), 1);
    // Forgotten means fetched again.
    assert_eq!(
        c.claim("s", &f, Refetch::Never, "w1", 1000, 100)
            .unwrap()
            .len(),
        3
    );
    assert_eq!(c.forget("t", None).unwrap(), 4);
    let totals = c.totals().unwrap();
    assert_eq!(totals.len(), 1);
    assert_eq!(totals[0].source, "s");
    assert_eq!(totals[0].bytes_fetched, 1);
    assert_eq!(totals[0].last_fetched, Some(1000));
    let mut states = totals[0].by_state.clone();
    states.sort();
    assert_eq!(
        states,
        vec![("claimed".to_string(), 3), ("fetched".to_string(), 1)]
    );
}

fn survives_reopen(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    c.claim("s", &[seen("a", 1, 1)], Refetch::Never, "w1", 1000, 100)
        .unwrap();
    c.fetched("s", "a", &done(1)).unwrap();
    drop(c);
    // Opening again applies no migration twice and forgets nothing.
    let c = b.reopen(name);
    assert_eq!(c.file("s", "a").unwrap().unwrap().state.name(), "fetched");
}

fn many_files_decided_in_memory(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    let files: Vec<Seen> = (0..10_000)
        .map(|i| seen(&format!("d/{i:06}"), i, 7))
        .collect();
    let mut claimed = 0;
    for batch in files.chunks(1000) {
        claimed += c
            .claim("s", batch, Refetch::Never, "w1", 1000, 100)
            .unwrap()
            .len();
    }
    assert_eq!(claimed, 10_000);
    for f in files.iter().take(9_990) {
        c.fetched("s", &f.path, &done(f.size.unwrap_or(0))).unwrap();
    }
    // The next run: one query, then decided in memory; 10 left to do.
    let known = c.known("s").unwrap();
    assert_eq!(known.len(), 10_000);
    let todo: Vec<&Seen> = files
        .iter()
        .filter(|f| !known[&f.path].needs_nothing(f, Refetch::Never, 200))
        .collect();
    assert_eq!(todo.len(), 10);
}

fn workers_never_share_a_file(b: &dyn Backend, name: &str) {
    b.fresh(name);
    let files: Arc<Vec<Seen>> =
        Arc::new((0..3000).map(|i| seen(&format!("{i:05}"), 1, 1)).collect());
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let c = b.reopen(name);
            let files = files.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                // Each worker walks the listing in batches of 100, as a run does.
                for batch in files.chunks(100) {
                    mine.extend(
                        c.claim("s", batch, Refetch::Never, &format!("w{w}"), 1000, 100)
                            .unwrap(),
                    );
                }
                mine
            })
        })
        .collect();
    let mut all = HashSet::new();
    let mut total = 0;
    for w in workers {
        let mine = w.join().unwrap();
        total += mine.len();
        all.extend(mine);
    }
    assert_eq!(total, 3000, "a file was claimed by two workers, or by none");
    assert_eq!(all.len(), 3000);
}

/// Four workers claim the very same batch of 1,000 files at once (one call
/// each, released together): new files, files a dead worker's lease held,
/// failed files due again, files given back, fetched files and failed ones
/// not due yet. Every file that needs fetching is claimed by exactly one of
/// them, each claim is recorded under the worker that got it, and nothing
/// else is claimed.
fn one_batch_raced_by_workers(b: &dyn Backend, name: &str) {
    let setup = b.fresh(name);
    let files: Vec<Seen> = (0..1000)
        .map(|i| seen(&format!("r/{i:04}"), 1, 1))
        .collect();
    // Files 0..400 are known: claimed once by a worker that died (lease
    // until 150), then some settled.
    let dead = setup
        .claim("s", &files[..400], Refetch::Never, "dead", 150, 100)
        .unwrap();
    assert_eq!(dead.len(), 400);
    let mut fetched = Vec::new();
    for (i, f) in files[..400].iter().enumerate() {
        match i % 5 {
            0 => fetched.push((f.path.clone(), done(1))),
            1 => {
                setup.failed("s", &f.path, "refused", 150).unwrap();
            }
            2 => {
                setup.failed("s", &f.path, "refused", 10_000).unwrap();
            }
            3 => setup.release("s", &f.path, "dead").unwrap(),
            _ => {} // still claimed by "dead", lease over at 200
        }
    }
    setup.fetched_batch("s", &fetched).unwrap();
    drop(setup);
    // Due at 200: all but the fetched (80) and the failed not yet due (80).
    let expected: HashSet<String> = files
        .iter()
        .enumerate()
        .filter(|(i, _)| *i >= 400 || !matches!(i % 5, 0 | 2))
        .map(|(_, f)| f.path.clone())
        .collect();
    assert_eq!(expected.len(), 840);
    let files = Arc::new(files);
    let start = Arc::new(std::sync::Barrier::new(4));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let c = b.reopen(name);
            let (files, start) = (files.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mine = c
                    .claim("s", &files, Refetch::Never, &format!("w{w}"), 1000, 200)
                    .unwrap();
                (w, mine)
            })
        })
        .collect();
    let mut owner = std::collections::HashMap::new();
    for handle in workers {
        let (w, mine) = handle.join().unwrap();
        for path in mine {
            if let Some(first) = owner.insert(path.clone(), w) {
                panic!("{path} was claimed by w{first} and by w{w}");
            }
        }
    }
    let claimed: HashSet<String> = owner.keys().cloned().collect();
    assert_eq!(claimed, expected, "claimed files differ from the due ones");
    let c = b.reopen(name);
    for (path, w) in &owner {
        assert_eq!(
            c.file("s", path).unwrap().unwrap().state,
            State::Claimed {
                by: format!("w{w}"),
                until: 1000
            },
            "{path}"
        );
    }
    // A second round at once: everything is held by a live lease.
    assert!(c
        .claim("s", &files, Refetch::Never, "w9", 1000, 300)
        .unwrap()
        .is_empty());
}

/// A batch of fetched files is recorded as one; files not in it keep their state.
fn fetched_in_a_batch(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    let files: Vec<Seen> = (0..600).map(|i| seen(&format!("{i:03}"), 5, 1)).collect();
    c.claim("s", &files, Refetch::Never, "w1", 1000, 100)
        .unwrap();
    c.failed("s", "001", "reset", 500).unwrap();
    let batch: Vec<(String, Fetched)> = files[..500]
        .iter()
        .map(|f| {
            (
                f.path.clone(),
                Fetched {
                    blake3: format!("{:0>64}", f.path),
                    local_path: format!("/data/{}", f.path),
                    at: 1234,
                    size: 5,
                },
            )
        })
        .collect();
    c.fetched_batch("s", &batch).unwrap();
    c.fetched_batch("s", &[]).unwrap();
    assert_eq!(
        c.files(Some("s"), Some("fetched"), 1000).unwrap().len(),
        500
    );
    assert_eq!(
        c.files(Some("s"), Some("claimed"), 1000).unwrap().len(),
        100
    );
    let rec = c.file("s", "001").unwrap().unwrap();
    assert_eq!(rec.attempts, 0, "a fetched file's failures are cleared");
    assert_eq!(
        rec.state,
        State::Fetched {
            blake3: format!("{:0>64}", "001"),
            local_path: "/data/001".into(),
            at: 1234
        }
    );
    assert_eq!(c.totals().unwrap()[0].bytes_fetched, 2500);
}

/// A hook that failed after a delivery is kept with the file (and shown
/// with it) until the file is delivered again; one after a run, with the run.
fn hook_failures_are_kept(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    c.claim("s", &[seen("a", 1, 1)], Refetch::Never, "w1", 1000, 100)
        .unwrap();
    c.fetched("s", "a", &done(1)).unwrap();
    assert_eq!(c.file("s", "a").unwrap().unwrap().hook_failure, None);
    let failure = HookFailure {
        error: "on_file hook: killed after 2s".into(),
        at: 1001,
    };
    c.file_hook_failed("s", "a", &failure).unwrap();
    let rec = c.file("s", "a").unwrap().unwrap();
    assert_eq!(rec.hook_failure, Some(failure.clone()));
    assert_eq!(rec.state.name(), "fetched", "the file stays delivered");
    assert_eq!(
        c.files(Some("s"), None, 10).unwrap()[0].hook_failure,
        Some(failure)
    );
    // Delivered again (forgotten, fetched anew): the old failure is gone.
    c.forget("s", None).unwrap();
    c.claim("s", &[seen("a", 1, 1)], Refetch::Never, "w1", 1000, 100)
        .unwrap();
    c.file_hook_failed(
        "s",
        "a",
        &HookFailure {
            error: "sidecar: disk full".into(),
            at: 5,
        },
    )
    .unwrap();
    c.fetched_batch("s", &[("a".into(), done(1))]).unwrap();
    assert_eq!(c.file("s", "a").unwrap().unwrap().hook_failure, None);
    let r1 = c.begin_run("s", "w1", 100).unwrap();
    let r2 = c.begin_run("s", "w1", 200).unwrap();
    c.end_run(r1, 110, &RunCounts::default(), None).unwrap();
    c.end_run(r2, 210, &RunCounts::default(), None).unwrap();
    let run_failure = HookFailure {
        error: "on_run hook: exit status 3".into(),
        at: 211,
    };
    c.run_hook_failed(r2, &run_failure).unwrap();
    let runs = c.runs(Some("s"), 10).unwrap();
    assert_eq!(runs[0].id, r2);
    assert_eq!(runs[0].hook_failure, Some(run_failure));
    assert_eq!(runs[1].hook_failure, None);
}

/// A catalog written by a haul that knew schema version 1 only is brought
/// to the current version at open, its files and runs kept.
fn schema_1_is_migrated(b: &dyn Backend, name: &str) {
    b.raw(
        name,
        "CREATE TABLE haul_schema (version BIGINT NOT NULL);
         INSERT INTO haul_schema (version) VALUES (1);
         CREATE TABLE files (
            source TEXT NOT NULL, path TEXT NOT NULL, size BIGINT, mtime BIGINT, etag TEXT,
            checksums TEXT NOT NULL DEFAULT '', state TEXT NOT NULL, claimed_by TEXT,
            claim_until BIGINT, blake3 TEXT, local_path TEXT, fetched_at BIGINT,
            attempts BIGINT NOT NULL DEFAULT 0, last_error TEXT, next_retry BIGINT,
            first_seen BIGINT NOT NULL, last_seen BIGINT NOT NULL, PRIMARY KEY (source, path));
         CREATE INDEX files_claims ON files (claimed_by) WHERE state = 'claimed';
         CREATE TABLE runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL, worker TEXT NOT NULL,
            started BIGINT NOT NULL, ended BIGINT, listed BIGINT NOT NULL DEFAULT 0,
            claimed BIGINT NOT NULL DEFAULT 0, fetched BIGINT NOT NULL DEFAULT 0,
            failed BIGINT NOT NULL DEFAULT 0, bytes BIGINT NOT NULL DEFAULT 0, error TEXT);
         CREATE INDEX runs_source ON runs (source, id);
         INSERT INTO files (source, path, size, state, blake3, local_path, fetched_at,
             first_seen, last_seen)
             VALUES ('s', 'old.nc', 7, 'fetched', 'cd', '/data/old.nc', 50, 40, 40);
         INSERT INTO runs (source, worker, started, ended, fetched) VALUES ('s', 'w0', 40, 60, 1);",
    );
    let c = b.reopen(name);
    let rec = c.file("s", "old.nc").unwrap().unwrap();
    assert_eq!(rec.state.name(), "fetched");
    assert_eq!(rec.hook_failure, None);
    let failure = HookFailure {
        error: "on_file hook: exit status 1".into(),
        at: 70,
    };
    c.file_hook_failed("s", "old.nc", &failure).unwrap();
    assert_eq!(
        c.file("s", "old.nc").unwrap().unwrap().hook_failure,
        Some(failure)
    );
    let runs = c.runs(None, 10).unwrap();
    assert_eq!((runs.len(), runs[0].counts.fetched), (1, 1));
    // Opened again: nothing is applied twice.
    drop(c);
    assert_eq!(b.reopen(name).runs(None, 10).unwrap().len(), 1);
}
