//! One conformance suite, run against both drivers: embedded SQLite, and a
//! real PostgreSQL server the test starts (initdb + postgres on 127.0.0.1).
//! Each case gets a fresh catalog; a failure names the driver and the case.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::Arc;

use haul_catalog::{
    Catalog, Fetched, PostgresCatalog, Refetch, RunCounts, Seen, SqliteCatalog, State,
};

/// Opens catalogs by name: a fresh one, or the same one again.
trait Backend {
    fn fresh(&self, name: &str) -> Box<dyn Catalog>;
    fn reopen(&self, name: &str) -> Box<dyn Catalog>;
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
