//! `haul daemon` against real servers (nginx, vsftpd): sources on their
//! schedules, only new files fetched (counted in the servers' logs), a
//! source down for a while, kill -9 and restart, config errors.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::harness::{b3, haul, http_get, promtool_check, run, wait_for, write_file, Scratch, BIN};

/// A running `haul daemon`, its log in a file; killed on drop.
pub(crate) struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    pub(crate) fn start(config: &Path, log: &Path) -> Daemon {
        Self::start_env(config, log, &[])
    }

    /// [`Daemon::start`] with more environment (an S3 source's credentials).
    pub(crate) fn start_env(config: &Path, log: &Path, env: &[(&str, String)]) -> Daemon {
        let mut cmd = Command::new(BIN);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        Self::spawn(cmd, config, log)
    }

    /// The daemon `cmd` runs (`haul` with nothing yet: a lab host's).
    pub(crate) fn spawn(mut cmd: Command, config: &Path, log: &Path) -> Daemon {
        let child = cmd
            .args(["daemon", "--config"])
            .arg(config)
            .env("HAUL_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("daemon log"))
            .spawn()
            .expect("spawn haul daemon");
        Daemon {
            child,
            log: log.to_path_buf(),
        }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then the exit status (within 30 s).
    pub(crate) fn terminate(&mut self) -> std::process::ExitStatus {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        for _ in 0..300 {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "the daemon did not stop within 30 s of SIGTERM:\n{}",
            self.log()
        );
    }

    pub(crate) fn kill9(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// [`wait_for`], with the daemon's log in the failure.
pub(crate) fn wait_seeing(
    daemon: &Daemon,
    limit: Duration,
    what: &str,
    mut f: impl FnMut() -> bool,
) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(
            start.elapsed() < limit,
            "timed out waiting for {what}; the daemon's log:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `haul --json catalog --config CONFIG ARGS...` as JSON lines.
pub(crate) fn catalog(config: &Path, args: &[&str]) -> Vec<serde_json::Value> {
    let mut cmd = haul(config.parent().expect("dir"));
    cmd.args(["--json", "catalog", "--config"])
        .arg(config)
        .args(args);
    let out = run(cmd, Duration::from_secs(30));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

/// `haul daemon --check --config CONFIG`: its output (and exit code).
pub(crate) fn check(config: &Path) -> std::process::Output {
    let mut cmd = haul(config.parent().expect("dir"));
    cmd.args(["daemon", "--check", "--config"]).arg(config);
    run(cmd, Duration::from_secs(30))
}

/// [`check`] of a config that must pass: what it printed.
pub(crate) fn checked(config: &Path) -> String {
    let out = check(config);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    said
}

/// Lines of nginx's access log that GET `uri` (with any range).
fn gets(log: &str, uri: &str) -> usize {
    log.lines()
        .filter(|l| l.split(' ').nth(2) == Some("GET") && l.split(' ').nth(3) == Some(uri))
        .count()
}

pub(crate) fn nginx_log(srv: &haul_http::testserver::TestServer) -> String {
    std::fs::read_to_string(srv.access_log()).unwrap_or_default()
}

#[test]
fn two_sources_on_their_schedules_fetch_only_new_files() {
    let s = Scratch::new();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    let ftp =
        haul_ftp::testserver::FtpServer::start(haul_ftp::testserver::Mode::Plain).expect("vsftpd");
    for i in 0..3 {
        write_file(&http.root().join(format!("sst/f{i}.nc")), 10_000 + i, i);
        write_file(&http.root().join(format!("sst/skip{i}.txt")), 100, i);
        write_file(&ftp.root().join(format!("obs/o{i}.dat")), 5_000 + i, 10 + i);
    }
    let config = s.path("haul.toml");
    std::fs::write(
        &config,
        format!(
            r#"catalog = "sqlite:{cat}"
status = "off"
down_retry = "1s"

[[source]]
name = "sst"
url = "{http}"
dest = "{d1}"
schedule = "every 1s"
include = ["*.nc"]

[[source]]
name = "obs"
url = "{ftp}"
dest = "{d2}"
schedule = "every 3s"
"#,
            cat = s.path("catalog.db").display(),
            http = http.http_url("/sst/"),
            ftp = ftp.url("/obs/"),
            d1 = s.path("sst").display(),
            d2 = s.path("obs").display(),
        ),
    )
    .unwrap();
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    let dest_has = |p: &str| s.path(p).exists();
    wait_for(Duration::from_secs(60), "the first files", || {
        (0..3).all(|i| dest_has(&format!("sst/f{i}.nc")) && dest_has(&format!("obs/o{i}.dat")))
    });
    assert!(
        !dest_has("sst/skip0.txt"),
        "the include filter let a .txt through"
    );
    // New files between runs: only they are fetched.
    write_file(&http.root().join("sst/f3.nc"), 20_000, 3);
    write_file(&ftp.root().join("obs/o3.dat"), 6_000, 13);
    wait_for(Duration::from_secs(60), "the new files", || {
        dest_has("sst/f3.nc") && dest_has("obs/o3.dat")
    });
    // Let a few more runs of each list the unchanged sources.
    std::thread::sleep(Duration::from_secs(4));
    let runs = catalog(&config, &["runs", "--limit", "100"]);
    let count = |name: &str| runs.iter().filter(|r| r["source"] == name).count();
    assert!(
        count("sst") >= 5,
        "sst (every 1s) ran {} times",
        count("sst")
    );
    assert!(
        count("obs") >= 2 && count("obs") < count("sst"),
        "obs (every 3s) ran {} times, sst {}",
        count("obs"),
        count("sst")
    );
    assert_eq!(daemon.terminate().code(), Some(0), "{}", daemon.log());
    let log = nginx_log(&http);
    for i in 0..4 {
        assert_eq!(gets(&log, &format!("/sst/f{i}.nc")), 1, "f{i}.nc:\n{log}");
        assert_eq!(
            b3(&s.path(&format!("sst/f{i}.nc"))),
            b3(&http.root().join(format!("sst/f{i}.nc")))
        );
    }
    let ftp_log = ftp.log();
    for i in 0..4 {
        let retrs = ftp_log
            .lines()
            .filter(|l| l.contains(&format!("RETR /obs/o{i}.dat")) && l.contains("FTP command"))
            .count();
        assert_eq!(retrs, 1, "o{i}.dat was read {retrs} times");
    }
    // The catalog holds each file as fetched, with its BLAKE3.
    let files = catalog(&config, &["list", "--source", "sst"]);
    assert_eq!(files.len(), 4, "{files:?}");
    assert!(files.iter().all(|f| f["state"] == "fetched"));
    let shown = catalog(&config, &["show", "sst", "f3.nc"]);
    assert_eq!(
        shown[0]["blake3"].as_str(),
        Some(b3(&s.path("sst/f3.nc")).as_str())
    );
    // forget = fetch again at the next run.
    catalog(&config, &["forget", "sst", "f1.nc"]);
    let mut daemon = Daemon::start(&config, &s.path("daemon2.log"));
    wait_for(
        Duration::from_secs(30),
        "the forgotten file fetched again",
        || gets(&nginx_log(&http), "/sst/f1.nc") == 2,
    );
    assert_eq!(daemon.terminate().code(), Some(0));
    assert_eq!(gets(&nginx_log(&http), "/sst/f0.nc"), 1);
}

#[test]
fn a_source_down_for_a_while_does_not_delay_the_others() {
    let s = Scratch::new();
    let mut down = haul_http::testserver::TestServer::start().expect("nginx");
    let up = haul_http::testserver::TestServer::start().expect("nginx");
    write_file(&down.root().join("d/late.bin"), 3000, 1);
    write_file(&up.root().join("u/first.bin"), 3000, 2);
    down.stop();
    let config = s.path("haul.toml");
    std::fs::write(
        &config,
        format!(
            r#"catalog = "sqlite:{cat}"
status = "off"
down_retry = "1s"

[[source]]
name = "down"
url = "{down}"
dest = "{d1}"
schedule = "every 1h"
timeout = 2
retries = 1

[[source]]
name = "up"
url = "{up}"
dest = "{d2}"
schedule = "every 1s"
"#,
            cat = s.path("catalog.db").display(),
            down = down.http_url("/d/"),
            up = up.http_url("/u/"),
            d1 = s.path("d").display(),
            d2 = s.path("u").display(),
        ),
    )
    .unwrap();
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    wait_for(Duration::from_secs(20), "the up source's file", || {
        s.path("u/first.bin").exists()
    });
    // The down source is retried with backoff (1 s, 2 s, ...), not hourly.
    wait_for(
        Duration::from_secs(30),
        "two failed runs of the down source",
        || {
            catalog(&config, &["runs", "--source", "down"])
                .iter()
                .filter(|r| !r["error"].is_null())
                .count()
                >= 2
        },
    );
    write_file(&up.root().join("u/second.bin"), 3000, 3);
    wait_for(
        Duration::from_secs(20),
        "a new file of the up source",
        || s.path("u/second.bin").exists(),
    );
    down.start_again().expect("nginx again");
    wait_for(
        Duration::from_secs(60),
        "the down source's file once it is back",
        || s.path("d/late.bin").exists(),
    );
    assert_eq!(daemon.terminate().code(), Some(0));
    assert!(daemon.log().contains("down"), "{}", daemon.log());
}

#[test]
fn kill9_mid_download_resumes_and_fetches_nothing_twice() {
    let s = Scratch::new();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    // /slow/ is served at 8 MB/s: 40 MiB take 5 s.
    write_file(&http.root().join("slow/big.bin"), 40 << 20, 7);
    write_file(&http.root().join("slow/small.txt"), 1000, 8);
    let config = s.path("haul.toml");
    std::fs::write(
        &config,
        format!(
            r#"catalog = "sqlite:{cat}"
status = "off"
worker = "w1"

[[source]]
name = "slow"
url = "{url}"
dest = "{dest}"
schedule = "every 2s"
"#,
            cat = s.path("catalog.db").display(),
            url = http.http_url("/slow/"),
            dest = s.path("out").display(),
        ),
    )
    .unwrap();
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    let partial = s.path("out/.haul/partial");
    wait_for(
        Duration::from_secs(30),
        "8 MiB of the big file staged",
        || {
            std::fs::read_dir(&partial)
                .map(|d| {
                    d.flatten().any(|e| {
                        e.path().extension().is_some_and(|x| x == "part")
                            && e.metadata().is_ok_and(|m| m.len() >= 8 << 20)
                    })
                })
                .unwrap_or(false)
        },
    );
    daemon.kill9();
    let claimed = catalog(&config, &["list", "--state", "claimed"]);
    assert!(
        claimed.iter().any(|f| f["path"] == "big.bin"),
        "the killed worker's claim is in the catalog: {claimed:?}"
    );
    let mut daemon = Daemon::start(&config, &s.path("daemon2.log"));
    wait_for(Duration::from_secs(60), "the big file delivered", || {
        s.path("out/big.bin").exists()
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(daemon.terminate().code(), Some(0), "{}", daemon.log());
    assert_eq!(
        b3(&s.path("out/big.bin")),
        b3(&http.root().join("slow/big.bin"))
    );
    let log = nginx_log(&http);
    let big: Vec<&str> = log
        .lines()
        .filter(|l| l.split(' ').nth(2) == Some("GET") && l.contains("/slow/big.bin"))
        .collect();
    // The restart read a range from where the verified chunks end.
    assert!(
        big.iter()
            .any(|l| l.contains("range=bytes=") && !l.contains("range=bytes=0-")),
        "no resumed range:\n{log}"
    );
    let sent: u64 = big
        .iter()
        .filter_map(|l| l.rsplit("sent=").next()?.trim().parse::<u64>().ok())
        .sum();
    assert!(
        sent < (40 << 20) + (4 << 20),
        "{sent} bytes sent for 40 MiB:\n{log}"
    );
    assert_eq!(gets(&log, "/slow/small.txt"), 1, "{log}");
    let files = catalog(&config, &["list"]);
    assert!(files.iter().all(|f| f["state"] == "fetched"), "{files:?}");
}

/// The `.part` files in `dir` of at least `min` bytes.
fn parts_in(dir: &Path, min: u64) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.path().extension().is_some_and(|x| x == "part")
                        && e.metadata().is_ok_and(|m| m.len() >= min)
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_global_staging_holds_partials_and_a_restart_resumes_from_it() {
    let s = Scratch::new();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    // /slow/ is served at 8 MB/s: 16 MiB take 2 s.
    write_file(&http.root().join("slow/big.bin"), 16 << 20, 9);
    let config = s.path("haul.toml");
    std::fs::write(
        &config,
        format!(
            r#"catalog = "sqlite:{cat}"
status = "off"
worker = "w1"
staging = "{staging}"

[[source]]
name = "slow"
url = "{url}"
dest = "{dest}"
schedule = "every 2s"
"#,
            cat = s.path("catalog.db").display(),
            staging = s.path("staging").display(),
            url = http.http_url("/slow/"),
            dest = s.path("out").display(),
        ),
    )
    .unwrap();
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    let staged = s.path("staging/slow");
    wait_for(
        Duration::from_secs(30),
        "4 MiB staged in staging/slow",
        || parts_in(&staged, 4 << 20) == 1,
    );
    assert!(
        !s.path("out/.haul").exists(),
        "nothing is staged beneath dest when staging is set"
    );
    daemon.kill9();
    let mut daemon = Daemon::start(&config, &s.path("daemon2.log"));
    wait_for(Duration::from_secs(30), "the big file delivered", || {
        s.path("out/big.bin").exists()
    });
    assert_eq!(daemon.terminate().code(), Some(0), "{}", daemon.log());
    assert_eq!(
        b3(&s.path("out/big.bin")),
        b3(&http.root().join("slow/big.bin"))
    );
    // The restart found the verified chunks in staging and read the rest.
    let log = nginx_log(&http);
    assert!(
        log.lines().any(|l| l.contains("/slow/big.bin")
            && l.contains("range=bytes=")
            && !l.contains("range=bytes=0-")),
        "no resumed range:\n{log}"
    );
    assert_eq!(
        parts_in(&staged, 0),
        0,
        "the partial was renamed into place"
    );
    assert!(!s.path("out/.haul").exists());
}

#[test]
fn check_prints_plans_and_names_the_line_of_an_error() {
    let s = Scratch::new();
    let config = s.path("haul.toml");
    // The issue's minimal config, exactly (paths and URL aside).
    std::fs::write(
        &config,
        r#"catalog = "sqlite:/var/lib/haul/catalog.db"
status = "127.0.0.1:9464"

[[source]]
name = "sst"
url = "https://archive.example/pub/sst/"
dest = "/data/sst"
schedule = "every 10m"
include = ["*.nc"]
"#,
    )
    .unwrap();
    let mut cmd = haul(s.path("cfg").as_path());
    cmd.args(["daemon", "--check", "--config"]).arg(&config);
    let out = run(cmd, Duration::from_secs(30));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("[sst] https://archive.example/pub/sst/ -> /data/sst"),
        "{text}"
    );
    assert!(
        text.contains("schedule: every 10m") && text.contains("next runs:"),
        "{text}"
    );
    let typo = std::fs::read_to_string(&config)
        .unwrap()
        .replace("include =", "inclde =");
    std::fs::write(&config, typo).unwrap();
    let mut cmd = haul(s.path("cfg").as_path());
    cmd.args(["daemon", "--check", "--config"]).arg(&config);
    let out = run(cmd, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("line 9") && err.contains("inclde"), "{err}");
}

/// A free port on 127.0.0.1 (bound and released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn status_metrics_hooks_and_sidecars() {
    let s = Scratch::new();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    for i in 0..3 {
        write_file(&http.root().join(format!("ok/f{i}.bin")), 1000 + i, i);
        write_file(&http.root().join(format!("bad/g{i}.bin")), 1000 + i, 20 + i);
        write_file(
            &http.root().join(format!("hang/h{i}.bin")),
            1000 + i,
            40 + i,
        );
    }
    let port = free_port();
    let config = s.path("haul.toml");
    let seen = s.path("seen.txt");
    std::fs::write(
        &config,
        format!(
            r#"catalog = "sqlite:{cat}"
status = "127.0.0.1:{port}"
hook_timeout = "1s"

[[source]]
name = "ok"
url = "{ok}"
dest = "{d}/ok"
schedule = "every 1s"
sidecar = true
on_file = 'echo "$HAUL_PATH $HAUL_BLAKE3 $HAUL_SIZE" >> {seen}; grep -q "\"worker\"" && echo stdin-ok >> {seen}'
on_run = 'echo "run $HAUL_SOURCE $HAUL_FETCHED" >> {seen}'

[[source]]
name = "bad"
url = "{bad}"
dest = "{d}/bad"
schedule = "every 1s"
on_file = "echo no >&2; exit 7"

[[source]]
name = "hang"
url = "{hang}"
dest = "{d}/hang"
schedule = "every 1s"
on_file = "sleep 60"
"#,
            cat = s.path("catalog.db").display(),
            ok = http.http_url("/ok/"),
            bad = http.http_url("/bad/"),
            hang = http.http_url("/hang/"),
            d = s.path("out").display(),
            seen = seen.display(),
        ),
    )
    .unwrap();
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    wait_for(Duration::from_secs(60), "every file, hooks or not", || {
        (0..3).all(|i| {
            s.path(&format!("out/ok/f{i}.bin")).exists()
                && s.path(&format!("out/bad/g{i}.bin")).exists()
                && s.path(&format!("out/hang/h{i}.bin")).exists()
        })
    });
    wait_for(Duration::from_secs(30), "the hooks to end", || {
        let (_, m) = http_get(port, "/metrics");
        m.contains("haul_hook_failures_total{source=\"bad\"} 3")
            && m.contains("haul_hook_failures_total{source=\"hang\"} 3")
    });
    // The sidecar and the hook saw the file's facts.
    let side: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(s.path("out/ok/f1.bin.haul.json")).expect("sidecar"),
    )
    .unwrap();
    let digest = b3(&s.path("out/ok/f1.bin"));
    assert_eq!(side["blake3"].as_str(), Some(digest.as_str()));
    assert_eq!(side["size"], 1001);
    assert_eq!(side["source"], "ok");
    let hooks = std::fs::read_to_string(&seen).unwrap();
    assert!(hooks.contains(&format!("f1.bin {digest} 1001")), "{hooks}");
    assert_eq!(hooks.matches("stdin-ok").count(), 3, "{hooks}");
    assert!(hooks.contains("run ok 3"), "{hooks}");
    // A failing hook is recorded and the file stays delivered (never fetched again).
    let log = daemon.log();
    assert!(
        log.contains("exited with exit status: 7") && log.contains("still running after"),
        "{log}"
    );
    let (status, body) = http_get(port, "/healthz");
    assert!(status.contains("200") && body == "ok\n", "{status} {body}");
    let (_, metrics) = http_get(port, "/metrics");
    assert!(
        metrics.contains("haul_files_fetched_total{source=\"ok\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("haul_catalog_files{source=\"bad\",state=\"fetched\"} 3"),
        "{metrics}"
    );
    promtool_check(&metrics);
    let (_, status) = http_get(port, "/status");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["sources"]["ok"]["files_fetched"], 3);
    assert_eq!(status["catalog"]["ok"]["files"]["fetched"], 3);
    let mut cmd = haul(s.path("cfg").as_path());
    cmd.args(["status", "--config"]).arg(&config);
    let out = run(cmd, Duration::from_secs(30));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("[ok]") && text.contains("3 files fetched"),
        "{text}"
    );
    assert_eq!(daemon.terminate().code(), Some(0));
    for i in 0..3 {
        assert_eq!(gets(&nginx_log(&http), &format!("/bad/g{i}.bin")), 1);
    }
    // The failures are kept in the catalog with their files, and
    // `haul catalog show` names them; a file whose hook passed has none.
    for (source, path, why) in [
        ("bad", "g1.bin", "exited with exit status: 7"),
        ("hang", "h2.bin", "still running after"),
    ] {
        let shown = catalog(&config, &["show", source, path]);
        assert_eq!(shown[0]["state"], "fetched", "{shown:?}");
        let failure = shown[0]["hook_failure"].as_str().unwrap_or_default();
        assert!(
            failure.starts_with("on_file hook") && failure.contains(why),
            "{shown:?}"
        );
        assert!(shown[0]["hook_failed_at"].is_string(), "{shown:?}");
    }
    let ok = catalog(&config, &["show", "ok", "f0.bin"]);
    assert!(ok[0].get("hook_failure").is_none(), "{ok:?}");
    let mut cmd = haul(s.path("cfg").as_path());
    cmd.args(["catalog", "--config"])
        .arg(&config)
        .args(["show", "bad", "g0.bin"]);
    let out = run(cmd, Duration::from_secs(30));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("hook_failure") && l.contains("exit status: 7")),
        "{text}"
    );
}

#[test]
fn a_failing_on_run_hook_is_kept_with_its_run() {
    let s = Scratch::new();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    write_file(&http.root().join("r/a.bin"), 100, 1);
    let config = s.path("haul.toml");
    std::fs::write(
        &config,
        format!(
            r#"catalog = "sqlite:{cat}"
status = "off"

[[source]]
name = "r"
url = "{url}"
dest = "{d}"
schedule = "every 1h"
on_run = "echo broken >&2; exit 3"
"#,
            cat = s.path("catalog.db").display(),
            url = http.http_url("/r/"),
            d = s.path("out").display(),
        ),
    )
    .unwrap();
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    wait_for(Duration::from_secs(30), "the run's hook", || {
        daemon.log().contains("on_run hook")
    });
    let runs = catalog(&config, &["runs"]);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["fetched"], 1, "{runs:?}");
    let failure = runs[0]["hook_failure"].as_str().unwrap_or_default();
    assert!(
        failure.contains("exit status: 3") && failure.contains("broken"),
        "{runs:?}"
    );
    // The file itself is delivered, with no hook failure of its own.
    let file = catalog(&config, &["show", "r", "a.bin"]);
    assert_eq!(file[0]["state"], "fetched");
    assert!(file[0].get("hook_failure").is_none(), "{file:?}");
    assert_eq!(daemon.terminate().code(), Some(0));
}

#[test]
fn three_workers_on_one_postgres_catalog_one_killed() {
    let s = Scratch::new();
    let pg = haul_catalog::testserver::TestServer::start().expect("PostgreSQL");
    let url = pg.create_database("daemon").unwrap();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    // /slow/ is sent at 8 MB/s per connection: 12 MiB take 1.5 s.
    let n = 9;
    for i in 0..n {
        write_file(
            &http.root().join(format!("slow/f{i}.bin")),
            12 << 20,
            100 + i,
        );
    }
    let mut workers = Vec::new();
    for w in 1..=3 {
        let config = s.path(&format!("w{w}.toml"));
        std::fs::write(
            &config,
            format!(
                r#"catalog = "{url}"
status = "off"
worker = "w{w}"
lease = "3s"

[[source]]
name = "slow"
url = "{src}"
dest = "{dest}"
schedule = "every 1s"
jobs = 1
"#,
                src = http.http_url("/slow/"),
                dest = s.path("out").display(),
            ),
        )
        .unwrap();
        workers.push(Daemon::start(&config, &s.path(&format!("w{w}.log"))));
    }
    let config = s.path("w2.toml");
    // Kill w1 while it holds a claim and has bytes of it staged.
    wait_for(Duration::from_secs(30), "w1 mid-download", || {
        catalog(&config, &["list", "--state", "claimed"])
            .iter()
            .any(|f| f["claimed_by"] == "w1")
            && std::fs::read_dir(s.path("out/.haul/partial"))
                .map(|d| {
                    d.flatten()
                        .any(|e| e.metadata().is_ok_and(|m| m.len() >= 2 << 20))
                })
                .unwrap_or(false)
    });
    workers[0].kill9();
    let orphaned: Vec<String> = catalog(&config, &["list", "--state", "claimed"])
        .iter()
        .filter(|f| f["claimed_by"] == "w1")
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect();
    assert!(!orphaned.is_empty());
    wait_for(Duration::from_secs(90), "every file delivered", || {
        (0..n).all(|i| s.path(&format!("out/f{i}.bin")).exists())
    });
    std::thread::sleep(Duration::from_secs(2));
    for w in workers.iter_mut().skip(1) {
        assert_eq!(w.terminate().code(), Some(0), "{}", w.log());
    }
    let files = catalog(&config, &["list"]);
    assert_eq!(files.len(), n as usize);
    assert!(files.iter().all(|f| f["state"] == "fetched"), "{files:?}");
    // Each file's bytes crossed the network about once: a whole second
    // download would double them (a resumed one repeats at most a chunk).
    let log = nginx_log(&http);
    for i in 0..n {
        let uri = format!("/slow/f{i}.bin");
        let sent: u64 = log
            .lines()
            .filter(|l| l.split(' ').nth(2) == Some("GET") && l.split(' ').nth(3) == Some(&*uri))
            .filter_map(|l| l.rsplit("sent=").next()?.trim().parse::<u64>().ok())
            .sum();
        assert!(
            sent < (12 << 20) + (4 << 20),
            "{uri}: {sent} bytes sent:\n{log}"
        );
        assert_eq!(
            b3(&s.path(&format!("out/f{i}.bin"))),
            b3(&http.root().join(&uri[1..]))
        );
    }
    // The killed worker's files were taken over by the others.
    for path in &orphaned {
        let shown = catalog(&config, &["show", "slow", path]);
        assert_eq!(shown[0]["state"], "fetched", "{path}");
    }
    let runs = catalog(&config, &["runs", "--limit", "1000"]);
    for w in ["w2", "w3"] {
        assert!(
            runs.iter()
                .any(|r| r["worker"] == w && r["fetched"].as_u64() > Some(0)),
            "{w} fetched nothing: {runs:?}"
        );
    }
}

#[test]
fn sighup_reloads_the_sources_and_keeps_a_bad_config_out() {
    let s = Scratch::new();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    write_file(&http.root().join("one/a.bin"), 1000, 1);
    write_file(&http.root().join("two/b.bin"), 1000, 2);
    let config = s.path("haul.toml");
    let source = |name: &str| {
        format!(
            "\n[[source]]\nname = \"{name}\"\nurl = \"{}\"\ndest = \"{}\"\nschedule = \"every 1s\"\n",
            http.http_url(&format!("/{name}/")),
            s.path(name).display()
        )
    };
    let head = format!(
        "catalog = \"sqlite:{}\"\nstatus = \"off\"\n",
        s.path("catalog.db").display()
    );
    std::fs::write(&config, format!("{head}{}", source("one"))).unwrap();
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    wait_for(Duration::from_secs(20), "the first source's file", || {
        s.path("one/a.bin").exists()
    });
    // A config with a typo: reported, the running one kept.
    std::fs::write(&config, format!("{head}{}shedule = 1\n", source("two"))).unwrap();
    unsafe { libc::kill(daemon.child.id() as i32, libc::SIGHUP) };
    wait_for(Duration::from_secs(10), "the bad config reported", || {
        daemon.log().contains("keeping the running configuration")
    });
    assert!(daemon.log().contains("shedule"), "{}", daemon.log());
    std::fs::write(&config, format!("{head}{}{}", source("one"), source("two"))).unwrap();
    unsafe { libc::kill(daemon.child.id() as i32, libc::SIGHUP) };
    wait_for(Duration::from_secs(20), "the new source's file", || {
        s.path("two/b.bin").exists()
    });
    assert_eq!(daemon.terminate().code(), Some(0), "{}", daemon.log());
    assert_eq!(gets(&nginx_log(&http), "/one/a.bin"), 1);
}

/// Inode of a delivered file: a file fetched again is renamed into place
/// from its staging file, so it gets a new one.
fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .ino()
}

/// The catalog's runs of a source, oldest first, once `n` have ended.
fn ended_runs(config: &Path, n: usize) -> Vec<serde_json::Value> {
    let mut runs = Vec::new();
    wait_for(Duration::from_secs(30), &format!("{n} runs ended"), || {
        runs = catalog(config, &["runs"]);
        runs.iter().filter(|r| !r["ended"].is_null()).count() >= n
    });
    runs.reverse();
    runs
}

#[test]
fn an_s3_source_fetches_each_object_once_and_new_ones_next_run() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let srv = rt
        .block_on(haul_s3::testserver::MotoServer::start())
        .expect("start moto_server (pip install 'moto[server]')");
    rt.block_on(async {
        srv.create_bucket("bkt").await.unwrap();
        for i in 0..3 {
            srv.put_object(
                "bkt",
                &format!("run/o{i}.nc"),
                format!("object {i}\n").as_bytes(),
            )
            .await
            .unwrap();
        }
        srv.put_object("bkt", "run/skip.txt", b"no").await.unwrap();
    });
    let s = Scratch::new();
    let config = s.path("haul.toml");
    std::fs::write(
        &config,
        format!(
            r#"catalog = "sqlite:{cat}"
status = "off"

[[source]]
name = "bucket"
url = "s3://bkt/run/"
dest = "{dest}"
schedule = "every 2s"
include = ["*.nc"]
s3_endpoint = "{endpoint}"
s3_region = "us-east-1"
s3_path_style = true
"#,
            cat = s.path("catalog.db").display(),
            dest = s.path("out").display(),
            endpoint = srv.endpoint(),
        ),
    )
    .unwrap();
    let mut daemon = Daemon::start_env(&config, &s.path("daemon.log"), &srv.env());
    wait_for(Duration::from_secs(30), "the 3 objects", || {
        (0..3).all(|i| s.path(&format!("out/o{i}.nc")).exists())
    });
    let first = inode(&s.path("out/o0.nc"));
    // A second run (nothing new) has ended before more objects appear.
    let runs = ended_runs(&config, 2);
    rt.block_on(async {
        for i in 3..5 {
            srv.put_object(
                "bkt",
                &format!("run/o{i}.nc"),
                format!("object {i}\n").as_bytes(),
            )
            .await
            .unwrap();
        }
    });
    wait_for(Duration::from_secs(30), "the 2 new objects", || {
        (3..5).all(|i| s.path(&format!("out/o{i}.nc")).exists())
    });
    let all = ended_runs(&config, runs.len() + 2);
    assert_eq!(daemon.terminate().code(), Some(0), "{}", daemon.log());
    assert_eq!(std::fs::read(s.path("out/o4.nc")).unwrap(), b"object 4\n");
    assert!(!s.path("out/skip.txt").exists());
    assert_eq!(
        inode(&s.path("out/o0.nc")),
        first,
        "o0.nc was fetched again"
    );
    // moto logs each request: one GET per object, whatever the runs.
    for i in 0..5 {
        let needle = format!("\"GET /bkt/run/o{i}.nc HTTP");
        let gets = srv.requests_at_least(&needle, 1, Duration::from_secs(10));
        assert_eq!(gets, 1, "o{i}.nc: {gets} GETs");
    }
    // The runs: 3 claimed, then none, ..., then the 2 new ones, then none.
    let claimed: Vec<u64> = all.iter().filter_map(|r| r["claimed"].as_u64()).collect();
    assert_eq!(claimed.iter().sum::<u64>(), 5, "{all:?}");
    assert_eq!(claimed[0], 3, "{all:?}");
    let files = catalog(&config, &["list", "--source", "bucket"]);
    assert_eq!(files.len(), 5, "{files:?}");
    assert!(files.iter().all(|f| f["state"] == "fetched"), "{files:?}");
    // S3's ETag is kept as the file's version.
    assert!(files.iter().all(|f| f["etag"].is_string()), "{files:?}");
}

#[test]
fn an_sftp_source_fetches_each_file_once_and_new_ones_next_run() {
    let srv = haul_sftp::testserver::TestServer::start()
        .expect("start sshd (apt-get install openssh-server; needs root)");
    let tree = srv.root().join("sftp-src");
    for i in 0..3 {
        write_file(&tree.join(format!("d/f{i}.dat")), 20_000 + i, 60 + i);
    }
    let s = Scratch::new();
    let config = s.path("haul.toml");
    std::fs::write(
        &config,
        format!(
            r#"catalog = "sqlite:{cat}"
status = "off"

[[source]]
name = "ssh"
url = "{url}"
dest = "{dest}"
schedule = "every 2s"
ssh_key = ["{key}"]
ssh_known_hosts = "{kh}"
"#,
            cat = s.path("catalog.db").display(),
            url = srv.url(
                &haul_sftp::testserver::TestServer::key_user(),
                &format!("{}/", tree.display())
            ),
            dest = s.path("out").display(),
            key = srv.client_key().display(),
            kh = srv.known_hosts_file().display(),
        ),
    )
    .unwrap();
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    wait_for(Duration::from_secs(30), "the 3 files", || {
        (0..3).all(|i| s.path(&format!("out/d/f{i}.dat")).exists())
    });
    let first: Vec<u64> = (0..3)
        .map(|i| inode(&s.path(&format!("out/d/f{i}.dat"))))
        .collect();
    let runs = ended_runs(&config, 2);
    // Written aside and renamed in, so that no run lists a file half written.
    for (name, size, seed) in [("d/f3.dat", 30_000, 70), ("e/g.dat", 1_000, 71)] {
        let aside = srv.root().join(format!("aside-{seed}"));
        write_file(&aside, size, seed);
        std::fs::create_dir_all(tree.join(name).parent().unwrap()).unwrap();
        std::fs::rename(&aside, tree.join(name)).unwrap();
    }
    wait_for(Duration::from_secs(30), "the 2 new files", || {
        s.path("out/d/f3.dat").exists() && s.path("out/e/g.dat").exists()
    });
    let all = ended_runs(&config, runs.len() + 2);
    assert_eq!(daemon.terminate().code(), Some(0), "{}", daemon.log());
    for (i, ino) in first.iter().enumerate() {
        assert_eq!(
            inode(&s.path(&format!("out/d/f{i}.dat"))),
            *ino,
            "f{i}.dat was fetched again"
        );
    }
    assert_eq!(b3(&s.path("out/e/g.dat")), b3(&tree.join("e/g.dat")));
    // Each file fetched by exactly one run.
    let log = daemon.log();
    for name in ["d/f0.dat", "d/f1.dat", "d/f2.dat", "d/f3.dat", "e/g.dat"] {
        let times = log.matches(&format!("ssh: fetched {name} (")).count();
        assert_eq!(times, 1, "{name} fetched {times} times:\n{log}");
    }
    let claimed: Vec<u64> = all.iter().filter_map(|r| r["claimed"].as_u64()).collect();
    assert_eq!(claimed.iter().sum::<u64>(), 5, "{all:?}");
    assert_eq!(claimed[0], 3, "{all:?}");
}

#[test]
fn sigusr1_reopens_the_transfer_log_after_logrotate_moved_it() {
    let s = Scratch::new();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    write_file(&http.root().join("sst/a.nc"), 10_000, 1);
    let config = s.path("haul.toml");
    let log_file = s.path("transfers.log");
    std::fs::write(
        &config,
        format!(
            "catalog = \"sqlite:{}\"\nstatus = \"off\"\nlog_file = \"{}\"\n\n[[source]]\nname = \"sst\"\nurl = \"{}\"\ndest = \"{}\"\nschedule = \"every 1s\"\n",
            s.path("catalog.db").display(),
            log_file.display(),
            http.http_url("/sst/"),
            s.path("sst").display()
        ),
    )
    .unwrap();
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    wait_for(Duration::from_secs(30), "a.nc in the log", || {
        read(&log_file).contains("path=\"a.nc\"")
    });
    // logrotate moves the file, then sends SIGUSR1 (the package's
    // postrotate): the log reopens, and nothing else happens.
    let rotated = s.path("transfers.log.1");
    std::fs::rename(&log_file, &rotated).unwrap();
    unsafe { libc::kill(daemon.child.id() as i32, libc::SIGUSR1) };
    wait_for(Duration::from_secs(10), "the reopen said", || {
        daemon
            .log()
            .contains("SIGUSR1: 1 transfer log file(s) reopened")
    });
    assert!(!daemon.log().contains("configuration reloaded"));
    write_file(&http.root().join("sst/b.nc"), 10_000, 2);
    wait_for(Duration::from_secs(30), "b.nc in the new log", || {
        read(&log_file).contains("path=\"b.nc\"")
    });
    assert!(!read(&log_file).contains("path=\"a.nc\""));
    assert!(!read(&rotated).contains("path=\"b.nc\""));
    assert!(daemon.terminate().success());
}
