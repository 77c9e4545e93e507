//! `haul daemon` under its own faults, against real nginx and a real
//! filesystem: a catalog whose disk fills mid-run (the daemon holds what
//! it delivered, says so, and recovers by itself; killed meanwhile, its
//! next start records what it delivered without fetching it again), a
//! catalog that cannot be written at start, a source that stops mid-run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::daemon::{catalog, free_port, nginx_log, wait_seeing, Daemon};
use crate::harness::http_get;
use crate::harness::{b3, haul, run, write_file, Immutable, Scratch};

/// A tmpfs of `size` mounted at `dir`; unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("mkdir");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cannot mount a tmpfs at {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }

    /// Writes a filler file until the filesystem is full.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.0.join("filler")).expect("filler");
        let block = vec![0xa5u8; 64 << 10];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }

    fn free(&self) {
        std::fs::remove_file(self.0.join("filler")).expect("remove filler");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Bytes nginx sent for `uri`, over all its requests.
fn sent(log: &str, uri: &str) -> u64 {
    log.lines()
        .filter(|l| l.split(' ').nth(2) == Some("GET") && l.split(' ').nth(3) == Some(uri))
        .filter_map(|l| l.rsplit("sent=").next()?.trim().parse::<u64>().ok())
        .sum()
}

/// Files number `which` of `len` bytes each under the server's `dir`.
fn files(
    srv: &haul_http::testserver::TestServer,
    dir: &str,
    which: std::ops::Range<usize>,
    len: u64,
) -> Vec<String> {
    which
        .map(|i| {
            let name = format!("f{i:02}.bin");
            write_file(&srv.root().join(dir).join(&name), len, 100 + i as u64);
            name
        })
        .collect()
}

/// Every file of `names` is at `dest` byte-identical, and nginx sent each
/// once: no more than its size (and a little slack for headers' worth of
/// aborted ranges) over all requests.
fn each_once(srv: &haul_http::testserver::TestServer, dir: &str, dest: &Path, names: &[String]) {
    let log = nginx_log(srv);
    for name in names {
        let src = srv.root().join(dir).join(name);
        assert_eq!(b3(&dest.join(name)), b3(&src), "{name}");
        let len = std::fs::metadata(&src).expect("stat").len();
        let uri = format!("/{dir}/{name}");
        let got = sent(&log, &uri);
        assert!(
            got >= len && got < len + (256 << 10),
            "{uri}: {got} bytes sent for {len}: fetched again?\n{log}"
        );
    }
}

/// The runs in the catalog: every one ended, and their `fetched` add up to
/// `want`.
fn runs_add_up(config: &Path, want: u64) {
    let runs = catalog(config, &["runs", "--limit", "1000"]);
    assert!(
        runs.iter().all(|r| !r["ended"].is_null()),
        "a run left open: {runs:#?}"
    );
    let fetched: u64 = runs
        .iter()
        .map(|r| r["fetched"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(fetched, want, "{runs:#?}");
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn a_catalog_whose_disk_fills_holds_its_records_and_nothing_is_fetched_twice() {
    crate::harness::assert_root("mounting a small tmpfs");
    let s = Scratch::new();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    // /slow/ is sent at 8 MB/s: each 2 MiB file takes 0.25 s, so files are
    // in flight when the disk fills.
    let first = files(&http, "slow", 0..16, 2 << 20);
    let cat = Tmpfs::mount(&s.path("cat"), "4m");
    let port = free_port();
    let config = s.path("haul.toml");
    std::fs::write(
        &config,
        format!(
            r#"catalog = "sqlite:{cat}"
status = "127.0.0.1:{port}"
worker = "w1"
max_files = 2

[[source]]
name = "slow"
url = "{url}"
dest = "{dest}"
schedule = "every 2s"
"#,
            cat = s.path("cat/catalog.db").display(),
            url = http.http_url("/slow/"),
            dest = s.path("out").display(),
        ),
    )
    .unwrap();
    let fetched = |names: &[String]| {
        names
            .iter()
            .filter(|n| s.path("out").join(n).exists())
            .count()
    };
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    wait_seeing(&daemon, Duration::from_secs(30), "3 files fetched", || {
        fetched(&first) >= 3
    });

    // The disk fills: the daemon says why, once, stops claiming, and holds
    // the records of what was in flight.
    cat.fill();
    wait_seeing(
        &daemon,
        Duration::from_secs(30),
        "the daemon to say the catalog refuses writes",
        || daemon.log().contains("the catalog refuses writes"),
    );
    let log = daemon.log();
    assert!(log.contains("is full"), "the cause in words:\n{log}");
    assert_eq!(
        log.matches("the catalog refuses writes").count(),
        1,
        "{log}"
    );
    let (status, body) = http_get(port, "/healthz");
    assert!(
        status.contains("503") && body.contains("full"),
        "{status} {body}"
    );
    let (_, metrics) = http_get(port, "/metrics");
    assert!(metrics.contains("haul_catalog_writable 0\n"), "{metrics}");
    // Nothing new starts while it refuses.
    std::thread::sleep(Duration::from_secs(2));
    let while_full = fetched(&first);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        fetched(&first),
        while_full,
        "files fetched while nothing can be recorded"
    );

    // Space comes back: the daemon records what it held, and goes on.
    cat.free();
    wait_seeing(
        &daemon,
        Duration::from_secs(45),
        "the catalog to take writes again",
        || daemon.log().contains("the catalog takes writes again"),
    );
    let (status, _) = http_get(port, "/healthz");
    assert!(status.contains("200"), "{status}");
    wait_seeing(&daemon, Duration::from_secs(60), "every file", || {
        fetched(&first) == first.len()
    });
    wait_seeing(
        &daemon,
        Duration::from_secs(20),
        "every file recorded",
        || catalog(&config, &["list", "--state", "fetched"]).len() == first.len(),
    );

    // Again, and this time the daemon is killed while it holds records:
    // the next start finds those files delivered and records them.
    let second = files(&http, "slow", 16..32, 2 << 20);
    wait_seeing(
        &daemon,
        Duration::from_secs(30),
        "3 new files fetched",
        || fetched(&second) >= 3,
    );
    cat.fill();
    wait_seeing(&daemon, Duration::from_secs(30), "the refusal", || {
        daemon.log().matches("the catalog refuses writes").count() == 2
    });
    std::thread::sleep(Duration::from_secs(1));
    daemon.kill9();
    cat.free();
    let mut daemon = Daemon::start(&config, &s.path("daemon2.log"));
    wait_seeing(&daemon, Duration::from_secs(60), "every new file", || {
        fetched(&second) == second.len()
    });
    wait_seeing(
        &daemon,
        Duration::from_secs(30),
        "every file recorded",
        || catalog(&config, &["list", "--state", "fetched"]).len() == first.len() + second.len(),
    );
    assert_eq!(daemon.terminate().code(), Some(0), "{}", daemon.log());
    assert!(
        daemon.log().contains("not fetched again"),
        "held files adopted at the restart:\n{}",
        daemon.log()
    );
    let all: Vec<String> = first.iter().chain(&second).cloned().collect();
    each_once(&http, "slow", &s.path("out"), &all);
    // The killed worker's run was closed at its restart, with what it
    // recorded: the runs add up to every file once.
    runs_add_up(&config, all.len() as u64);
    let abandoned = catalog(&config, &["runs", "--limit", "1000"])
        .into_iter()
        .filter(|r| r["abandoned"] == true)
        .count();
    assert!(abandoned >= 1, "the killed run is marked abandoned");

    // A catalog that cannot be written at start: refused in words, and
    // fine again once it can be.
    let cat_file = s.path("cat/catalog.db");
    drop(cat);
    std::fs::create_dir_all(s.path("cat")).unwrap();
    std::fs::write(&cat_file, b"").unwrap();
    let lock = Immutable::set(&cat_file);
    let mut cmd = haul(&s.path(""));
    cmd.args(["daemon", "--config"]).arg(&config);
    let out = run(cmd, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("may not write it") && err.contains("chattr -i"),
        "{err}"
    );
    drop(lock);
    let mut cmd = haul(&s.path(""));
    cmd.args(["catalog", "--config"]).arg(&config).arg("runs");
    let out = run(cmd, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "writable again: {err}");
}

#[test]
fn a_source_that_stops_mid_run_resumes_within_seconds_of_its_return() {
    let s = Scratch::new();
    let mut http = haul_http::testserver::TestServer::start().expect("nginx");
    let names = files(&http, "slow", 0..12, 4 << 20);
    let config = s.path("haul.toml");
    std::fs::write(
        &config,
        format!(
            r#"catalog = "sqlite:{cat}"
status = "off"
max_files = 2
down_retry = "1s"
down_retry_max = "2s"

[[source]]
name = "slow"
url = "{url}"
dest = "{dest}"
schedule = "every 1h"
timeout = 2
retries = 1
"#,
            cat = s.path("catalog.db").display(),
            url = http.http_url("/slow/"),
            dest = s.path("out").display(),
        ),
    )
    .unwrap();
    let fetched = || {
        names
            .iter()
            .filter(|n| s.path("out").join(n).exists())
            .count()
    };
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    wait_seeing(&daemon, Duration::from_secs(30), "2 files fetched", || {
        fetched() >= 2
    });
    http.stop();
    std::thread::sleep(Duration::from_secs(12));
    let during = fetched();
    assert!(
        during < names.len(),
        "the outage came too late to test anything"
    );
    let log = daemon.log();
    assert!(
        log.contains("stopped answering mid-run"),
        "the run ends as a source that is down:\n{log}"
    );
    http.start_again().expect("nginx again");
    let back = Instant::now();
    wait_seeing(
        &daemon,
        Duration::from_secs(60),
        "the rest once the source is back",
        || fetched() == names.len(),
    );
    // 10 files of 4 MiB at 8 MB/s over 2 connections take about 2.6 s; the
    // source's first probe comes within 2 s (down_retry_max), not after a
    // per-file wait.
    let took = back.elapsed();
    eprintln!("the rest arrived {took:?} after the source came back");
    assert!(
        took < Duration::from_secs(12),
        "{took:?} after the source came back"
    );
    assert_eq!(daemon.terminate().code(), Some(0), "{}", daemon.log());
    let files = catalog(&config, &["list"]);
    assert!(files.iter().all(|f| f["state"] == "fetched"), "{files:?}");
}

#[test]
fn a_postgres_catalog_stopped_or_read_only_mid_run_is_waited_for() {
    let s = Scratch::new();
    let mut pg = haul_catalog::testserver::TestServer::start().expect("PostgreSQL");
    let url = pg.create_database("daemon").unwrap();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    let names = files(&http, "slow", 0..24, 2 << 20);
    let port = free_port();
    let config = s.path("haul.toml");
    std::fs::write(
        &config,
        format!(
            r#"catalog = "{url}"
status = "127.0.0.1:{port}"
worker = "w1"
max_files = 2

[[source]]
name = "slow"
url = "{src}"
dest = "{dest}"
schedule = "every 2s"
"#,
            src = http.http_url("/slow/"),
            dest = s.path("out").display(),
        ),
    )
    .unwrap();
    let fetched = || {
        names
            .iter()
            .filter(|n| s.path("out").join(n).exists())
            .count()
    };
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    wait_seeing(&daemon, Duration::from_secs(30), "3 files fetched", || {
        fetched() >= 3
    });

    // PostgreSQL stops for 10 s.
    pg.stop();
    wait_seeing(&daemon, Duration::from_secs(30), "the refusal", || {
        daemon.log().contains("the catalog refuses writes")
    });
    let (status, body) = http_get(port, "/healthz");
    assert!(
        status.contains("503") && body.contains("PostgreSQL"),
        "{status} {body}"
    );
    std::thread::sleep(Duration::from_secs(8));
    let while_down = fetched();
    pg.start_again().expect("PostgreSQL again");
    wait_seeing(&daemon, Duration::from_secs(45), "writes again", || {
        daemon.log().contains("the catalog takes writes again")
    });
    wait_seeing(&daemon, Duration::from_secs(30), "more files", || {
        fetched() > while_down
    });

    // The database turns read-only (a standby after a failover would):
    // said in words, waited for, and over when it takes writes again.
    for sql in [
        "ALTER SYSTEM SET default_transaction_read_only = on",
        "SELECT pg_reload_conf()",
    ] {
        pg.sql("postgres", sql).unwrap();
    }
    wait_seeing(
        &daemon,
        Duration::from_secs(30),
        "the read-only refusal",
        || daemon.log().matches("the catalog refuses writes").count() == 2,
    );
    assert!(daemon.log().contains("read-only"), "{}", daemon.log());
    std::thread::sleep(Duration::from_secs(3));
    for sql in [
        "ALTER SYSTEM RESET default_transaction_read_only",
        "SELECT pg_reload_conf()",
    ] {
        pg.sql("postgres", sql).unwrap();
    }
    wait_seeing(&daemon, Duration::from_secs(60), "every file", || {
        fetched() == names.len()
    });
    wait_seeing(
        &daemon,
        Duration::from_secs(30),
        "every file recorded",
        || catalog(&config, &["list", "--state", "fetched"]).len() == names.len(),
    );
    assert_eq!(daemon.terminate().code(), Some(0), "{}", daemon.log());
    each_once(&http, "slow", &s.path("out"), &names);
    runs_add_up(&config, names.len() as u64);
}
