//! One conformance suite, run against both drivers: embedded SQLite, and a
//! real PostgreSQL server the test starts (initdb + postgres on 127.0.0.1).
//! Each case gets a fresh catalog; a failure names the driver and the case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::Arc;

use haul_catalog::{
    Catalog, CatchUp, DeliveryRecord, Fetched, HookFailure, Owed, PostgresCatalog, Refetch,
    RunCounts, RunProgress, Seen, SiteTotals, SqliteCatalog, State,
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
    (
        "runs_count_as_files_are_recorded",
        runs_count_as_files_are_recorded,
    ),
    ("forget_by_prefix", forget_by_prefix),
    ("survives_reopen", survives_reopen),
    ("many_files_decided_in_memory", many_files_decided_in_memory),
    ("workers_never_share_a_file", workers_never_share_a_file),
    ("one_batch_raced_by_workers", one_batch_raced_by_workers),
    ("fetched_in_a_batch", fetched_in_a_batch),
    ("hook_failures_are_kept", hook_failures_are_kept),
    ("schema_1_is_migrated", schema_1_is_migrated),
    (
        "deliveries_owed_and_claimed_once",
        deliveries_owed_and_claimed_once,
    ),
    (
        "delivery_leases_expire_and_renew",
        delivery_leases_expire_and_renew,
    ),
    (
        "delivered_is_final_unless_refetched",
        delivered_is_final_unless_refetched,
    ),
    (
        "delivery_failures_wait_for_their_retry",
        delivery_failures_wait_for_their_retry,
    ),
    ("retry_files_makes_them_due", retry_files_makes_them_due),
    (
        "retry_deliveries_makes_them_due",
        retry_deliveries_makes_them_due,
    ),
    (
        "release_worker_gives_deliveries_back",
        release_worker_gives_deliveries_back,
    ),
    (
        "catch_up_orders_by_fetch_time",
        catch_up_orders_by_fetch_time,
    ),
    ("site_totals_add_up", site_totals_add_up),
    ("deliveries_are_listed", deliveries_are_listed),
    ("forget_site_by_prefix", forget_site_by_prefix),
    ("sites_are_independent", sites_are_independent),
    ("a_site_added_later_owes_all", a_site_added_later_owes_all),
    ("schema_2_is_migrated", schema_2_is_migrated),
    (
        "workers_never_share_a_delivery",
        workers_never_share_a_delivery,
    ),
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
    let r1 = c.begin_run("s", "w1", 100, 100 + 30).unwrap();
    let r2 = c.begin_run("t", "w1", 105, 105 + 30).unwrap();
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

/// A run counts what it recorded in the transaction that recorded it, so a
/// worker killed mid-run leaves a run with its real counts; the run is
/// closed as abandoned by the first worker to see it unrenewed (or by its
/// own worker's next start), and its worker can still end it properly.
fn runs_count_as_files_are_recorded(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    let f = [seen("a", 5, 1), seen("b", 7, 1), seen("c", 9, 1)];
    c.claim("s", &f, Refetch::Never, "w1", 1000, 100).unwrap();
    let r1 = c.begin_run("s", "w1", 100, 130).unwrap();
    let r2 = c.begin_run("s", "w2", 100, 130).unwrap();
    let progress = |fetched, bytes, failed| RunProgress {
        id: r1,
        fetched,
        bytes,
        listed: 3,
        claimed: 3,
        failed,
    };
    c.fetched_batch("s", &[("a".into(), done(5))], Some(&progress(1, 5, 0)))
        .unwrap();
    c.fetched_batch(
        "s",
        &[("b".into(), done(7)), ("c".into(), done(9))],
        Some(&progress(2, 16, 1)),
    )
    .unwrap();
    // A later record never lowers what an earlier one counted.
    c.fetched_batch("s", &[], Some(&progress(0, 0, 0))).unwrap();
    let run = |id| {
        c.runs(None, 10)
            .unwrap()
            .into_iter()
            .find(|r| r.id == id)
            .unwrap()
    };
    let want = RunCounts {
        listed: 3,
        claimed: 3,
        fetched: 3,
        failed: 1,
        bytes: 21,
    };
    assert_eq!((run(r1).counts, run(r1).ended), (want, None));
    // w1 renews (its run is alive until 160); w2 does not: at 140 only
    // w2's run is closed, with what it recorded.
    c.renew("w1", 160).unwrap();
    assert_eq!(c.abandon_runs(None, 140).unwrap(), 1);
    assert!(run(r2).abandoned && run(r2).ended == Some(140));
    assert!(run(r2).error.unwrap().contains("abandoned"));
    assert!(!run(r1).abandoned && run(r1).ended.is_none());
    // w1 starts again: its own open runs died with it, renewed or not.
    assert_eq!(c.abandon_runs(Some("w1"), 150).unwrap(), 1);
    assert_eq!((run(r1).counts, run(r1).ended), (want, Some(150)));
    assert!(run(r1).abandoned);
    assert_eq!(c.abandon_runs(Some("w1"), 155).unwrap(), 0);
    // A worker cut off from the catalog that ends its run after all.
    c.end_run(r2, 170, &RunCounts::default(), None).unwrap();
    assert!(!run(r2).abandoned && run(r2).error.is_none());
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
    setup.fetched_batch("s", &fetched, None).unwrap();
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
    c.fetched_batch("s", &batch, None).unwrap();
    c.fetched_batch("s", &[], None).unwrap();
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
    c.fetched_batch("s", &[("a".into(), done(1))], None)
        .unwrap();
    assert_eq!(c.file("s", "a").unwrap().unwrap().hook_failure, None);
    let r1 = c.begin_run("s", "w1", 100, 100 + 30).unwrap();
    let r2 = c.begin_run("s", "w1", 200, 200 + 30).unwrap();
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

/// Schema version 1 as the first haul with a catalog laid it down.
const SCHEMA_1: &str = "CREATE TABLE haul_schema (version BIGINT NOT NULL);
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
     CREATE INDEX runs_source ON runs (source, id);";

/// A fetched file and a run in the schema 1 tables.
const SCHEMA_1_ROWS: &str = "
     INSERT INTO files (source, path, size, state, blake3, local_path, fetched_at,
         first_seen, last_seen)
         VALUES ('s', 'old.nc', 7, 'fetched', 'cd', '/data/old.nc', 50, 40, 40);
     INSERT INTO runs (source, worker, started, ended, fetched) VALUES ('s', 'w0', 40, 60, 1);";

/// A catalog written by a haul that knew schema version 1 only is brought
/// to the current version at open, its files and runs kept.
fn schema_1_is_migrated(b: &dyn Backend, name: &str) {
    b.raw(name, &format!("{SCHEMA_1}{SCHEMA_1_ROWS}"));
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
    // Migrated through version 3 too: the old file is owed to a site.
    assert_eq!(c.site_totals("s", "site", 100).unwrap().pending_files, 1);
    // Opened again: nothing is applied twice.
    drop(c);
    assert_eq!(b.reopen(name).runs(None, 10).unwrap().len(), 1);
}

/// Fetches `path` of `source` (claimed, then recorded fetched) with content
/// `blake3` at `at`; a later call with another `at` is a new version.
fn fetch(c: &dyn Catalog, source: &str, path: &str, size: u64, blake3: &str, at: i64) {
    let got = c
        .claim(
            source,
            &[seen(path, size, at)],
            Refetch::IfChanged,
            "fetcher",
            at + 60,
            at,
        )
        .unwrap();
    assert_eq!(got, vec![path.to_string()], "fetch {path}");
    c.fetched(
        source,
        path,
        &Fetched {
            blake3: blake3.into(),
            local_path: format!("/data/{path}"),
            at,
            size,
        },
    )
    .unwrap();
}

/// Claims deliveries of source `s` to `site` for `worker`, oldest first;
/// returns their paths.
fn claim_d(c: &dyn Catalog, site: &str, worker: &str, until: i64, now: i64) -> Vec<String> {
    paths(
        &c.claim_deliveries("s", site, worker, until, now, CatchUp::Oldest, 100)
            .unwrap(),
    )
}

fn paths(owed: &[Owed]) -> Vec<String> {
    owed.iter().map(|o| o.path.clone()).collect()
}

fn ok(files: &[&str], blake3: &str) -> Vec<(String, String)> {
    files
        .iter()
        .map(|f| (f.to_string(), blake3.to_string()))
        .collect()
}

fn listed(c: &dyn Catalog, site: &str, state: Option<&str>) -> Vec<(String, String)> {
    c.deliveries("s", site, state, 100)
        .unwrap()
        .into_iter()
        .map(|d| (d.path, d.state))
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// Fetched files are owed to a site and claimed by one worker; files
/// seen but not fetched, and other sources' files, are not owed.
fn deliveries_owed_and_claimed_once(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    fetch(&*c, "s", "a", 10, "b1", 100);
    fetch(&*c, "s", "d/b", 20, "b2", 110);
    fetch(&*c, "t", "other", 5, "b3", 105);
    c.claim("s", &[seen("new", 1, 1)], Refetch::Never, "f", 900, 120)
        .unwrap();
    let got = c
        .claim_deliveries("s", "site", "w1", 500, 200, CatchUp::Oldest, 10)
        .unwrap();
    assert_eq!(
        got,
        vec![
            Owed {
                path: "a".into(),
                local_path: "/data/a".into(),
                blake3: "b1".into(),
                size: 10,
                fetched_at: 100,
            },
            Owed {
                path: "d/b".into(),
                local_path: "/data/d/b".into(),
                blake3: "b2".into(),
                size: 20,
                fetched_at: 110,
            },
        ]
    );
    // Another worker while w1's lease lives: nothing.
    assert!(claim_d(&*c, "site", "w2", 600, 210).is_empty());
    // w1 again (a restart): what it holds.
    assert_eq!(claim_d(&*c, "site", "w1", 600, 210), vec!["a", "d/b"]);
    assert_eq!(
        listed(&*c, "site", Some("claimed")),
        pairs(&[("a", "claimed"), ("d/b", "claimed")])
    );
    // The limit is kept.
    assert_eq!(
        c.claim_deliveries("t", "site", "w3", 600, 210, CatchUp::Oldest, 0)
            .unwrap(),
        vec![]
    );
    assert_eq!(
        paths(
            &c.claim_deliveries("t", "site", "w3", 600, 210, CatchUp::Oldest, 1)
                .unwrap()
        ),
        vec!["other"]
    );
}

/// A live lease of another worker holds a delivery; an ended one does
/// not; `renew` extends delivery claims.
fn delivery_leases_expire_and_renew(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    fetch(&*c, "s", "a", 1, "b1", 100);
    assert_eq!(claim_d(&*c, "site", "w1", 300, 200), vec!["a"]);
    assert!(claim_d(&*c, "site", "w2", 900, 299).is_empty());
    // At 300 the lease is still w1's (it ends after 300).
    assert!(claim_d(&*c, "site", "w2", 900, 300).is_empty());
    assert_eq!(c.renew("w1", 600).unwrap(), 1);
    assert!(claim_d(&*c, "site", "w2", 900, 400).is_empty());
    // w1 died: after its lease, w2 takes the delivery over.
    assert_eq!(claim_d(&*c, "site", "w2", 900, 601), vec!["a"]);
    assert_eq!(c.renew("w1", 2000).unwrap(), 0);
    assert!(claim_d(&*c, "site", "w1", 2000, 700).is_empty());
    // A file claim and a delivery claim are renewed together.
    c.claim("s", &[seen("n", 1, 1)], Refetch::Never, "w2", 900, 700)
        .unwrap();
    assert_eq!(c.renew("w2", 1500).unwrap(), 2);
    assert!(claim_d(&*c, "site", "w1", 2000, 1000).is_empty());
    assert_eq!(claim_d(&*c, "site", "w1", 2000, 1501), vec!["a"]);
}

/// A confirmed file is owed no more, unless it is fetched again with other
/// content (a confirmation of an older version does not count).
fn delivered_is_final_unless_refetched(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    fetch(&*c, "s", "a", 1, "v1", 100);
    fetch(&*c, "s", "b", 1, "v1", 101);
    assert_eq!(claim_d(&*c, "site", "w1", 300, 200), vec!["a", "b"]);
    c.delivered("s", "site", &ok(&["a"], "v1"), 250).unwrap();
    c.delivered("s", "site", &[], 250).unwrap();
    // Delivered is final, even for the worker that claimed it.
    assert_eq!(claim_d(&*c, "site", "w1", 400, 260), vec!["b"]);
    assert_eq!(claim_d(&*c, "site", "w2", 900, 500), vec!["b"]);
    c.delivered("s", "site", &ok(&["b"], "v1"), 510).unwrap();
    assert!(claim_d(&*c, "site", "w2", 900, 520).is_empty());
    let t = c.site_totals("s", "site", 520).unwrap();
    assert_eq!((t.pending_files, t.delivered_files), (0, 2));
    // Fetched again with other content: owed again.
    fetch(&*c, "s", "a", 2, "v2", 600);
    assert_eq!(
        c.deliveries("s", "site", Some("pending"), 10).unwrap()[0].path,
        "a"
    );
    assert_eq!(claim_d(&*c, "site", "w3", 900, 610), vec!["a"]);
    // The site confirms the old version (a late answer): still owed.
    c.delivered("s", "site", &ok(&["a"], "v1"), 620).unwrap();
    assert_eq!(claim_d(&*c, "site", "w3", 900, 630), vec!["a"]);
    c.delivered("s", "site", &ok(&["a"], "v2"), 640).unwrap();
    assert!(claim_d(&*c, "site", "w3", 900, 650).is_empty());
    // Fetched again with the same content: nothing owed.
    fetch(&*c, "s", "b", 1, "v1", 700);
    assert!(claim_d(&*c, "site", "w3", 900, 710).is_empty());
}

/// A failed delivery counts its attempts, keeps the site's error and is
/// not claimed before its retry time.
fn delivery_failures_wait_for_their_retry(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    fetch(&*c, "s", "a", 1, "v1", 100);
    assert_eq!(claim_d(&*c, "site", "w1", 300, 200), vec!["a"]);
    c.delivery_failed("s", "site", &ok(&["a"], "503 busy"), 400)
        .unwrap();
    c.delivery_failed("s", "site", &[], 400).unwrap();
    let rec = &c.deliveries("s", "site", None, 10).unwrap()[0];
    assert_eq!(
        (rec.state.as_str(), rec.attempts, rec.error.as_deref()),
        ("failed", 1, Some("503 busy"))
    );
    assert_eq!(rec.next_retry, Some(400));
    // Not before its retry time, for anyone (its claim is gone).
    assert!(claim_d(&*c, "site", "w1", 900, 399).is_empty());
    assert!(claim_d(&*c, "site", "w2", 900, 399).is_empty());
    assert_eq!(claim_d(&*c, "site", "w2", 900, 400), vec!["a"]);
    c.delivery_failed("s", "site", &ok(&["a"], "connection reset"), 1000)
        .unwrap();
    let rec = &c.deliveries("s", "site", None, 10).unwrap()[0];
    assert_eq!(
        (rec.attempts, rec.error.as_deref(), rec.next_retry),
        (2, Some("connection reset"), Some(1000))
    );
    assert!(claim_d(&*c, "site", "w2", 2000, 999).is_empty());
    assert_eq!(claim_d(&*c, "site", "w2", 2000, 1000), vec!["a"]);
    c.delivered("s", "site", &ok(&["a"], "v1"), 1100).unwrap();
    let rec = &c.deliveries("s", "site", None, 10).unwrap()[0];
    assert_eq!(
        rec,
        &DeliveryRecord {
            path: "a".into(),
            size: 1,
            state: "delivered".into(),
            attempts: 0,
            error: None,
            next_retry: None,
            delivered_at: Some(1100),
            blake3: Some("v1".into()),
        }
    );
}

/// `retry_files` makes a source's failed files due at once, and only its
/// failed ones.
fn retry_files_makes_them_due(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    let f = [seen("a", 1, 1), seen("b", 1, 1), seen("c", 1, 1)];
    c.claim("s", &f, Refetch::Never, "w1", 160, 100).unwrap();
    c.claim("t", &f[..1], Refetch::Never, "w1", 160, 100)
        .unwrap();
    c.failed("s", "a", "refused", 10_000).unwrap();
    c.failed("s", "b", "refused", 10_000).unwrap();
    c.failed("t", "a", "refused", 10_000).unwrap();
    c.fetched("s", "c", &done(1)).unwrap();
    assert!(c
        .claim("s", &f, Refetch::Never, "w2", 900, 200)
        .unwrap()
        .is_empty());
    assert_eq!(c.retry_files("s").unwrap(), 2);
    assert!(!c.known("s").unwrap()["a"].needs_nothing(&f[0], Refetch::Never, 200));
    assert_eq!(
        c.claim("s", &f, Refetch::Never, "w2", 900, 200).unwrap(),
        vec!["a".to_string(), "b".to_string()]
    );
    // The other source's failure still waits; attempts are kept.
    assert!(c
        .claim("t", &f[..1], Refetch::Never, "w2", 900, 200)
        .unwrap()
        .is_empty());
    assert_eq!(c.file("s", "a").unwrap().unwrap().attempts, 1);
    assert_eq!(c.retry_files("s").unwrap(), 0);
}

/// `retry_deliveries` makes a site's failed deliveries due at once.
fn retry_deliveries_makes_them_due(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    fetch(&*c, "s", "a", 1, "v1", 100);
    fetch(&*c, "s", "b", 1, "v1", 101);
    assert_eq!(claim_d(&*c, "site", "w1", 300, 200), vec!["a", "b"]);
    assert_eq!(claim_d(&*c, "other", "w1", 300, 200), vec!["a", "b"]);
    c.delivery_failed("s", "site", &ok(&["a", "b"], "down"), 10_000)
        .unwrap();
    c.delivery_failed("s", "other", &ok(&["a"], "down"), 10_000)
        .unwrap();
    assert!(claim_d(&*c, "site", "w2", 900, 210).is_empty());
    assert_eq!(c.retry_deliveries("s", "site").unwrap(), 2);
    assert_eq!(claim_d(&*c, "site", "w2", 900, 210), vec!["a", "b"]);
    // Claimed now: nothing failed left to retry. The other site's wait.
    assert_eq!(c.retry_deliveries("s", "site").unwrap(), 0);
    assert_eq!(c.retry_deliveries("t", "other").unwrap(), 0);
    assert!(claim_d(&*c, "other", "w2", 900, 350).contains(&"b".to_string()));
    assert_eq!(
        listed(&*c, "other", Some("failed")),
        pairs(&[("a", "failed")])
    );
    // The attempts are kept.
    assert_eq!(c.deliveries("s", "site", None, 10).unwrap()[0].attempts, 1);
}

/// `release_worker` gives a worker's delivery claims back (with its file
/// claims): another worker claims them at once.
fn release_worker_gives_deliveries_back(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    fetch(&*c, "s", "a", 1, "v1", 100);
    fetch(&*c, "s", "b", 1, "v1", 101);
    assert_eq!(claim_d(&*c, "site", "w1", 1000, 200), vec!["a", "b"]);
    c.claim("s", &[seen("n", 1, 1)], Refetch::Never, "w1", 1000, 200)
        .unwrap();
    assert!(claim_d(&*c, "site", "w2", 1000, 210).is_empty());
    assert_eq!(c.release_worker("w2").unwrap(), 0);
    assert_eq!(c.release_worker("w1").unwrap(), 3);
    assert_eq!(
        listed(&*c, "site", None),
        pairs(&[("a", "pending"), ("b", "pending")])
    );
    assert_eq!(claim_d(&*c, "site", "w2", 1000, 210), vec!["a", "b"]);
    assert_eq!(c.release_worker("w1").unwrap(), 0);
}

/// `Oldest` hands out the files fetched first, `Newest` the last (ties by
/// path either way).
fn catch_up_orders_by_fetch_time(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    fetch(&*c, "s", "x", 1, "v", 300);
    fetch(&*c, "s", "y", 1, "v", 100);
    fetch(&*c, "s", "z", 1, "v", 200);
    fetch(&*c, "s", "w", 1, "v", 200);
    let claim = |site: &str, by: CatchUp, limit: u32| {
        paths(
            &c.claim_deliveries("s", site, "w1", 1000, 400, by, limit)
                .unwrap(),
        )
    };
    assert_eq!(claim("old", CatchUp::Oldest, 2), vec!["y", "w"]);
    assert_eq!(claim("new", CatchUp::Newest, 2), vec!["x", "w"]);
    // The rest, in the same order after what the worker already holds.
    assert_eq!(claim("old", CatchUp::Oldest, 10), vec!["y", "w", "z", "x"]);
    assert_eq!(claim("new", CatchUp::Newest, 10), vec!["x", "w", "z", "y"]);
    assert_eq!("newest".parse::<CatchUp>(), Ok(CatchUp::Newest));
    assert_eq!("oldest".parse::<CatchUp>(), Ok(CatchUp::Oldest));
    assert!("latest".parse::<CatchUp>().is_err());
}

/// What a source owes a site and what it delivered there.
fn site_totals_add_up(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    assert_eq!(
        c.site_totals("s", "site", 0).unwrap(),
        SiteTotals::default()
    );
    fetch(&*c, "s", "a", 10, "v", 100);
    fetch(&*c, "s", "b", 20, "v", 200);
    fetch(&*c, "s", "c", 30, "v", 300);
    fetch(&*c, "s", "d", 40, "v", 400);
    fetch(&*c, "t", "a", 1000, "v", 50);
    let owed = c
        .claim_deliveries("s", "site", "w1", 1000, 500, CatchUp::Oldest, 3)
        .unwrap();
    assert_eq!(paths(&owed), vec!["a", "b", "c"]);
    c.delivered("s", "site", &ok(&["a"], "v"), 510).unwrap();
    c.delivery_failed("s", "site", &ok(&["b"], "refused"), 900)
        .unwrap();
    // b failed, c claimed, d untouched: all owed.
    assert_eq!(
        c.site_totals("s", "site", 520).unwrap(),
        SiteTotals {
            pending_files: 3,
            pending_bytes: 90,
            oldest_pending: Some(200),
            delivered_files: 1,
            delivered_bytes: 10,
            failed_files: 1,
            last_delivered: Some(510),
            last_error: Some("refused".into()),
        }
    );
    c.delivered("s", "site", &ok(&["b", "c"], "v"), 530)
        .unwrap();
    assert_eq!(
        c.site_totals("s", "site", 540).unwrap(),
        SiteTotals {
            pending_files: 1,
            pending_bytes: 40,
            oldest_pending: Some(400),
            delivered_files: 3,
            delivered_bytes: 60,
            failed_files: 0,
            last_delivered: Some(530),
            last_error: None,
        }
    );
    // a fetched again with new content: owed again.
    fetch(&*c, "s", "a", 11, "v2", 600);
    let t = c.site_totals("s", "site", 610).unwrap();
    assert_eq!(
        (t.pending_files, t.pending_bytes, t.oldest_pending),
        (2, 51, Some(400))
    );
    assert_eq!((t.delivered_files, t.delivered_bytes), (2, 50));
    // Another site owes everything.
    let t = c.site_totals("s", "other", 610).unwrap();
    assert_eq!((t.pending_files, t.pending_bytes), (4, 101));
    assert_eq!((t.delivered_files, t.last_delivered), (0, None));
}

/// Each fetched file with its delivery to a site, all or in one shown state.
fn deliveries_are_listed(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    fetch(&*c, "s", "a", 1, "v", 100);
    fetch(&*c, "s", "b", 2, "v", 200);
    fetch(&*c, "s", "c", 3, "v", 300);
    fetch(&*c, "s", "d", 4, "v", 400);
    c.claim("s", &[seen("e", 1, 1)], Refetch::Never, "f", 900, 410)
        .unwrap();
    let owed = c
        .claim_deliveries("s", "site", "w1", 1000, 500, CatchUp::Oldest, 3)
        .unwrap();
    assert_eq!(owed.len(), 3);
    c.delivered("s", "site", &ok(&["a"], "v"), 510).unwrap();
    c.delivery_failed("s", "site", &ok(&["b"], "refused"), 900)
        .unwrap();
    let all = c.deliveries("s", "site", None, 100).unwrap();
    assert_eq!(
        all,
        vec![
            DeliveryRecord {
                path: "a".into(),
                size: 1,
                state: "delivered".into(),
                attempts: 0,
                error: None,
                next_retry: None,
                delivered_at: Some(510),
                blake3: Some("v".into()),
            },
            DeliveryRecord {
                path: "b".into(),
                size: 2,
                state: "failed".into(),
                attempts: 1,
                error: Some("refused".into()),
                next_retry: Some(900),
                delivered_at: None,
                // The version that was being delivered.
                blake3: Some("v".into()),
            },
            DeliveryRecord {
                path: "c".into(),
                size: 3,
                state: "claimed".into(),
                attempts: 0,
                error: None,
                next_retry: None,
                delivered_at: None,
                blake3: Some("v".into()),
            },
            DeliveryRecord {
                path: "d".into(),
                size: 4,
                state: "pending".into(),
                attempts: 0,
                error: None,
                next_retry: None,
                delivered_at: None,
                blake3: None,
            },
        ]
    );
    assert_eq!(
        listed(&*c, "site", Some("pending")),
        pairs(&[("d", "pending")])
    );
    assert_eq!(
        listed(&*c, "site", Some("failed")),
        pairs(&[("b", "failed")])
    );
    assert_eq!(
        listed(&*c, "site", Some("delivered")),
        pairs(&[("a", "delivered")])
    );
    assert_eq!(
        listed(&*c, "site", Some("claimed")),
        pairs(&[("c", "claimed")])
    );
    assert_eq!(c.deliveries("s", "site", None, 2).unwrap().len(), 2);
    assert_eq!(
        c.deliveries("s", "site", Some("bogus"), 10).unwrap(),
        vec![]
    );
    // A site with no rows: every fetched file pending.
    assert_eq!(
        listed(&*c, "other", None),
        pairs(&[
            ("a", "pending"),
            ("b", "pending"),
            ("c", "pending"),
            ("d", "pending")
        ])
    );
    // a fetched again with new content: pending, not delivered.
    fetch(&*c, "s", "a", 5, "v2", 600);
    assert_eq!(listed(&*c, "site", Some("delivered")), vec![]);
    assert_eq!(
        listed(&*c, "site", Some("pending")),
        pairs(&[("a", "pending"), ("d", "pending")])
    );
}

/// `forget_site` drops what a site confirmed (all, or under a prefix), so
/// those files are owed to it again; other sites keep theirs.
fn forget_site_by_prefix(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    let all = ["2024/a", "2024/b", "20245", "x"];
    for (i, p) in all.iter().enumerate() {
        fetch(&*c, "s", p, 1, "v", 100 + i as i64);
    }
    for site in ["one", "two"] {
        assert_eq!(claim_d(&*c, site, "w1", 1000, 200).len(), 4);
        c.delivered("s", site, &ok(&all, "v"), 210).unwrap();
    }
    assert_eq!(c.forget_site("s", "one", Some("2024/")).unwrap(), 2);
    assert_eq!(
        claim_d(&*c, "one", "w2", 1000, 300),
        vec!["2024/a", "2024/b"]
    );
    assert_eq!(c.forget_site("s", "one", Some("x")).unwrap(), 1);
    assert_eq!(c.forget_site("s", "one", Some("nothing/")).unwrap(), 0);
    assert_eq!(c.site_totals("s", "one", 300).unwrap().pending_files, 3);
    assert_eq!(c.forget_site("s", "one", None).unwrap(), 3);
    assert_eq!(c.site_totals("s", "one", 300).unwrap().pending_files, 4);
    assert_eq!(c.forget_site("s", "one", Some("")).unwrap(), 0);
    let t = c.site_totals("s", "two", 300).unwrap();
    assert_eq!((t.pending_files, t.delivered_files), (0, 4));
    assert_eq!(c.forget_site("t", "two", None).unwrap(), 0);
}

/// Two sites of one source: claims, confirmations and failures of one
/// leave the other alone.
fn sites_are_independent(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    fetch(&*c, "s", "a", 1, "v", 100);
    fetch(&*c, "s", "b", 1, "v", 101);
    assert_eq!(claim_d(&*c, "one", "w1", 1000, 200), vec!["a", "b"]);
    // w1's live lease on site one does not hold site two.
    assert_eq!(claim_d(&*c, "two", "w2", 1000, 200), vec!["a", "b"]);
    c.delivered("s", "one", &ok(&["a"], "v"), 210).unwrap();
    c.delivery_failed("s", "two", &ok(&["b"], "full"), 5000)
        .unwrap();
    c.release_worker("w2").unwrap();
    assert_eq!(claim_d(&*c, "two", "w3", 1000, 220), vec!["a"]);
    assert_eq!(claim_d(&*c, "one", "w1", 1000, 220), vec!["b"]);
    let one = c.site_totals("s", "one", 230).unwrap();
    let two = c.site_totals("s", "two", 230).unwrap();
    assert_eq!((one.delivered_files, one.failed_files), (1, 0));
    assert_eq!(one.last_error, None);
    assert_eq!((two.delivered_files, two.failed_files), (0, 1));
    assert_eq!(two.last_error.as_deref(), Some("full"));
}

/// A site added to a source after its files were fetched (and delivered
/// elsewhere) owes every fetched file.
fn a_site_added_later_owes_all(b: &dyn Backend, name: &str) {
    let c = b.fresh(name);
    let all: Vec<String> = (0..5).map(|i| format!("f{i}")).collect();
    for (i, p) in all.iter().enumerate() {
        fetch(&*c, "s", p, 3, "v", 100 + i as i64);
    }
    assert_eq!(claim_d(&*c, "first", "w1", 1000, 200), all);
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    c.delivered("s", "first", &ok(&refs, "v"), 210).unwrap();
    assert_eq!(c.site_totals("s", "first", 220).unwrap().pending_files, 0);
    let t = c.site_totals("s", "late", 300).unwrap();
    assert_eq!(
        (t.pending_files, t.pending_bytes, t.oldest_pending),
        (5, 15, Some(100))
    );
    // What a source keeping no local copy must still keep: every file,
    // while "late" has confirmed none; then the one "late" lacks.
    let sites = ["first".to_owned(), "late".to_owned()];
    assert_eq!(c.unconfirmed("s", &sites, &all).unwrap(), all);
    assert_eq!(claim_d(&*c, "late", "w1", 1000, 300), all);
    c.delivered("s", "late", &ok(&refs[..4], "v"), 310).unwrap();
    assert_eq!(c.unconfirmed("s", &sites, &all).unwrap(), ["f4"]);
    assert!(c.unconfirmed("s", &sites[..1], &all).unwrap().is_empty());
    // A file being fetched again (its size changed at the source) is kept
    // whatever the sites confirmed of the old version, as is one the
    // catalog does not know.
    c.claim(
        "s",
        &[seen("f0", 99, 500)],
        Refetch::IfChanged,
        "fetcher",
        560,
        500,
    )
    .unwrap();
    assert_eq!(c.unconfirmed("s", &sites[..1], &all[..1]).unwrap(), ["f0"]);
    let unknown = ["nowhere".to_owned()];
    assert_eq!(c.unconfirmed("s", &sites[..1], &unknown).unwrap(), unknown);
}

/// A catalog at schema version 2 (the last before deliveries) is brought
/// to the current version at open: its fetched files are owed to sites.
fn schema_2_is_migrated(b: &dyn Backend, name: &str) {
    b.raw(
        name,
        &format!(
            "{SCHEMA_1}
             ALTER TABLE files ADD COLUMN hook_error TEXT;
             ALTER TABLE files ADD COLUMN hook_failed_at BIGINT;
             ALTER TABLE runs ADD COLUMN hook_error TEXT;
             ALTER TABLE runs ADD COLUMN hook_failed_at BIGINT;
             INSERT INTO haul_schema (version) VALUES (2);
             {SCHEMA_1_ROWS}
             UPDATE files SET hook_error = 'on_file hook: exit status 1', hook_failed_at = 55;"
        ),
    );
    let c = b.reopen(name);
    let rec = c.file("s", "old.nc").unwrap().unwrap();
    assert_eq!(rec.state.name(), "fetched");
    assert_eq!(
        rec.hook_failure,
        Some(HookFailure {
            error: "on_file hook: exit status 1".into(),
            at: 55
        })
    );
    let t = c.site_totals("s", "site", 100).unwrap();
    assert_eq!((t.pending_files, t.pending_bytes), (1, 7));
    assert_eq!(
        c.claim_deliveries("s", "site", "w1", 1000, 100, CatchUp::Oldest, 10)
            .unwrap(),
        vec![Owed {
            path: "old.nc".into(),
            local_path: "/data/old.nc".into(),
            blake3: "cd".into(),
            size: 7,
            fetched_at: 50,
        }]
    );
    c.delivered("s", "site", &ok(&["old.nc"], "cd"), 110)
        .unwrap();
    // Opened again: nothing applied twice, the confirmation kept.
    drop(c);
    let c = b.reopen(name);
    assert_eq!(c.site_totals("s", "site", 120).unwrap().delivered_files, 1);
    assert_eq!(c.runs(None, 10).unwrap().len(), 1);
}

/// Three workers claim one site's deliveries at once, in batches, each
/// confirming what it got: every file is delivered by exactly one.
fn workers_never_share_a_delivery(b: &dyn Backend, name: &str) {
    let setup = b.fresh(name);
    let files: Vec<(String, Fetched)> = (0..600)
        .map(|i| {
            let path = format!("{i:04}");
            setup
                .claim("s", &[seen(&path, 1, 1)], Refetch::Never, "f", 900, 100)
                .unwrap();
            (path, done(1))
        })
        .collect();
    setup.fetched_batch("s", &files, None).unwrap();
    drop(setup);
    let start = Arc::new(std::sync::Barrier::new(3));
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let c = b.reopen(name);
            let start = start.clone();
            std::thread::spawn(move || {
                let worker = format!("w{w}");
                let mut mine = Vec::new();
                start.wait();
                loop {
                    let got = c
                        .claim_deliveries("s", "site", &worker, 1000, 200, CatchUp::Oldest, 50)
                        .unwrap();
                    if got.is_empty() {
                        return mine;
                    }
                    let done: Vec<(String, String)> =
                        got.into_iter().map(|o| (o.path, o.blake3)).collect();
                    c.delivered("s", "site", &done, 300).unwrap();
                    mine.extend(done.into_iter().map(|d| d.0));
                }
            })
        })
        .collect();
    let mut all = HashSet::new();
    for w in workers {
        for path in w.join().unwrap() {
            assert!(all.insert(path.clone()), "{path} delivered by two workers");
        }
    }
    assert_eq!(all.len(), 600);
    let t = b.reopen(name).site_totals("s", "site", 400).unwrap();
    assert_eq!((t.pending_files, t.delivered_files), (0, 600));
}
