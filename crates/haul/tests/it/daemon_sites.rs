//! `haul daemon` delivering to sites: real nginx as the archive, real
//! `haul serve` nodes as the sites (each with its own token, its transfer
//! log in JSON), the SQLite catalog. Every fetched file reaches every site
//! through the fan-out, each site receives each file once (counted in its
//! own log), a site that is down is named with its error and catches up
//! with exactly what it lacks when it is back.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use crate::daemon::{catalog, free_port, Daemon};
use crate::harness::http_get;
use crate::harness::{b3, logged_with_payload, wait_for, write_file, Node, Scratch};

/// A site: a node with its own token, logging each file it receives.
pub(crate) struct Site {
    pub(crate) node: Node,
    pub(crate) name: &'static str,
}

pub(crate) fn start_site(s: &Scratch, name: &'static str, listen: &str) -> Site {
    start_site_with(s, name, listen, &[])
}

/// [`start_site`] with more `haul serve` flags.
pub(crate) fn start_site_with(
    s: &Scratch,
    name: &'static str,
    listen: &str,
    extra: &[&str],
) -> Site {
    let token = s.path(&format!("{name}.token"));
    std::fs::write(&token, format!("token-of-{name}\n")).unwrap();
    let log = s.path(&format!("{name}.log"));
    // Appended to across restarts: the count spans the node's whole life.
    let node = Node::start_on(
        &s.path(&format!("site-{name}")),
        &s.path(&format!("config-{name}")),
        listen,
        &[
            &[
                "--token-file",
                &token.display().to_string(),
                "--log-format",
                "json",
                "--log-file",
                &log.display().to_string(),
            ][..],
            extra,
        ]
        .concat(),
    );
    Site { node, name }
}

/// How many times each path was received by site `name` (its log).
pub(crate) fn received(s: &Scratch, name: &str) -> HashMap<String, usize> {
    logged_with_payload(&s.path(&format!("{name}.log")), "file_received")
}

fn config(
    s: &Scratch,
    archive: &str,
    sites: &[&Site],
    status: u16,
    extra: &str,
) -> std::path::PathBuf {
    let head = format!(
        "catalog = \"sqlite:{}\"\nstatus = \"127.0.0.1:{status}\"\n",
        s.path("catalog.db").display()
    );
    config_as(s, "haul.toml", &head, archive, sites, "", extra)
}

/// A config named `file`: `head` (catalog, status, worker…), the sites
/// (each with `site_extra`), one source `sst` with `extra`.
fn config_as(
    s: &Scratch,
    file: &str,
    head: &str,
    archive: &str,
    sites: &[&Site],
    site_extra: &str,
    extra: &str,
) -> std::path::PathBuf {
    let mut text = format!("{head}down_retry = \"1s\"\n");
    for site in sites {
        text.push_str(&format!(
            r#"
[[site]]
name = "{name}"
url = "{url}"
token_file = "{token}"
fingerprint = "{fp}"
{site_extra}
"#,
            name = site.name,
            url = site.node.url("sst"),
            token = s.path(&format!("{}.token", site.name)).display(),
            fp = site.node.fingerprint.as_deref().unwrap_or(""),
        ));
    }
    let names: Vec<String> = sites.iter().map(|s| format!("\"{}\"", s.name)).collect();
    text.push_str(&format!(
        r#"
[[source]]
name = "sst"
url = "{archive}"
dest = "{dest}"
schedule = "every 1s"
include = ["*.nc"]
deliver = [{names}]
{extra}
"#,
        dest = s.path("acquired").display(),
        names = names.join(", "),
    ));
    let path = s.path(file);
    std::fs::write(&path, text).unwrap();
    path
}

/// Every one of `files` at `site` as at the archive.
pub(crate) fn holds(s: &Scratch, site: &str, archive: &Path, files: &[&str]) -> bool {
    files.iter().all(|f| {
        let there = s.path(&format!("site-{site}/sst/{f}"));
        there.exists() && b3(&there) == b3(&archive.join(f))
    })
}

#[test]
fn every_new_file_reaches_every_site_once_and_a_site_down_catches_up() {
    let s = Scratch::new();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    let archive = http.root().join("sst");
    // A multi-chunk file, small ones, one in a directory of its own.
    write_file(&archive.join("f0.nc"), 9 << 20, 1);
    write_file(&archive.join("f1.nc"), 10_000, 2);
    write_file(&archive.join("2026/f2.nc"), 70_000, 3);
    write_file(&archive.join("skip.txt"), 100, 4);
    let (a, b, c) = (
        start_site(&s, "a", "127.0.0.1:0"),
        start_site(&s, "b", "127.0.0.1:0"),
        start_site(&s, "c", "127.0.0.1:0"),
    );
    let status = free_port();
    // The transfer log as JSON: a line per file fetched, delivered, failed.
    let transfers = s.path("transfers.jsonl");
    let head = format!(
        "catalog = \"sqlite:{}\"\nstatus = \"127.0.0.1:{status}\"\nlog_file = \"{}\"\nlog_format = \"json\"\n",
        s.path("catalog.db").display(),
        transfers.display()
    );
    let config = config_as(
        &s,
        "haul.toml",
        &head,
        &http.http_url("/sst/"),
        &[&a, &b, &c],
        "",
        "",
    );
    // --check shows the sites and the plan.
    let said = crate::daemon::checked(&config);
    assert!(said.contains("site a: haul://"), "{said}");
    assert!(
        said.contains("deliver:  a, b, c (oldest first); one fan-out per batch, plan"),
        "{said}"
    );
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    let first = ["f0.nc", "f1.nc", "2026/f2.nc"];
    wait_for(
        Duration::from_secs(90),
        "the first files at every site",
        || {
            ["a", "b", "c"]
                .iter()
                .all(|n| holds(&s, n, &archive, &first))
        },
    );
    assert!(!s.path("site-a/sst/skip.txt").exists());
    // The transfer log: each file fetched once, sent to each site once,
    // with its BLAKE3.
    let records = |want: usize| {
        let mut got = Vec::new();
        wait_for(Duration::from_secs(20), "the transfer log's lines", || {
            got = std::fs::read_to_string(&transfers)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .collect();
            got.len() >= want
        });
        got
    };
    // A connection line per run, a received line per file, a sent line
    // per file and site.
    let log = records(1 + 3 + 9);
    for f in first {
        let hash = b3(&archive.join(f));
        let fetched = log
            .iter()
            .filter(|r| {
                r["event"] == "file_received" && r["path"].as_str().is_some_and(|p| p.ends_with(f))
            })
            .collect::<Vec<_>>();
        assert_eq!(fetched.len(), 1, "{f}: {log:?}");
        assert_eq!(fetched[0]["blake3"], hash.as_str(), "{f}");
        assert_eq!(fetched[0]["auth"], "daemon");
        assert_eq!(fetched[0]["request"], "fetch");
        for site in [&a, &b, &c] {
            let sent: Vec<_> = log
                .iter()
                .filter(|r| {
                    r["event"] == "file_sent"
                        && r["path"] == f
                        && r["peer"]
                            .as_str()
                            .is_some_and(|p| p.contains(&site.node.addr))
                })
                .collect();
            assert_eq!(sent.len(), 1, "{f} to {}: {log:?}", site.name);
            assert_eq!(sent[0]["blake3"], hash.as_str());
            assert_eq!(sent[0]["request"], "deliver");
        }
    }
    // A burst: three new files go out together.
    for i in 3..6 {
        write_file(&archive.join(format!("f{i}.nc")), 30_000 + i, 10 + i);
    }
    let burst = ["f3.nc", "f4.nc", "f5.nc"];
    wait_for(Duration::from_secs(60), "the burst at every site", || {
        ["a", "b", "c"]
            .iter()
            .all(|n| holds(&s, n, &archive, &burst))
    });
    wait_for(Duration::from_secs(30), "the burst confirmed by c", || {
        catalog(&config, &["list", "--site", "c", "--state", "pending"]).is_empty()
            && catalog(&config, &["list", "--site", "c", "--state", "claimed"]).is_empty()
    });
    // Site c goes down; a new file reaches a and b, c's share waits with
    // c's error, and its lag shows.
    let c_addr = c.node.addr.clone();
    drop(c);
    write_file(&archive.join("f6.nc"), 50_000, 16);
    wait_for(Duration::from_secs(60), "f6 at a and b", || {
        ["a", "b"]
            .iter()
            .all(|n| holds(&s, n, &archive, &["f6.nc"]))
    });
    wait_for(Duration::from_secs(30), "c's failure recorded", || {
        catalog(&config, &["list", "--site", "c", "--state", "failed"])
            .iter()
            .any(|d| d["path"] == "f6.nc")
    });
    let failed = catalog(&config, &["list", "--site", "c", "--state", "failed"]);
    let f6 = failed.iter().find(|d| d["path"] == "f6.nc").unwrap();
    let log = records(1);
    assert!(
        log.iter().any(|r| r["event"] == "file_failed"
            && r["path"] == "f6.nc"
            && r["peer"].as_str().is_some_and(|p| p.contains(&c_addr))),
        "no file_failed line for f6.nc at c: {log:?}"
    );
    assert!(
        f6["error"].as_str().unwrap_or("").contains(&c_addr),
        "the error names the site's address: {f6}"
    );
    let (_, metrics) = http_get(status, "/metrics");
    assert!(
        metrics.contains("haul_site_files_pending{source=\"sst\",site=\"c\"} 1\n"),
        "{metrics}"
    );
    assert!(metrics.contains("haul_site_files_pending{source=\"sst\",site=\"a\"} 0\n"));
    let (_, status_json) = http_get(status, "/status");
    let v: serde_json::Value = serde_json::from_str(&status_json).unwrap();
    let row = v["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["site"] == "c")
        .unwrap()
        .clone();
    assert_eq!(row["files_pending"], 1, "{row}");
    assert!(row["last_error"].as_str().is_some(), "{row}");
    // The console shows c failing with c's error, and its "retry" — with
    // the token the daemon made and printed at start — makes it due.
    let (_, page) = http_get(status, "/");
    let c_row = page
        .split("<tr>")
        .find(|r| r.contains("sst → <b>c</b>"))
        .unwrap_or_else(|| panic!("no row for c: {page}"));
    assert!(
        c_row.contains(">failing<") && c_row.contains(&c_addr),
        "{c_row}"
    );
    let log = daemon.log();
    let token = log
        .split("?token=")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .unwrap_or_else(|| panic!("no console link in the log: {log}"));
    let (line, said) = crate::console::post_act(
        status,
        &format!("Authorization: Bearer {token}\r\n"),
        "action=retry&source=sst&site=c",
    );
    assert!(
        line.contains("200") && said.contains("sst → c: 1 failed delivery(ies) due again"),
        "{line} {said}"
    );
    // c comes back on its address: it gets f6, and only f6.
    let c = start_site(&s, "c", &c_addr);
    wait_for(Duration::from_secs(90), "c caught up", || {
        holds(&s, "c", &archive, &["f6.nc"])
    });
    wait_for(Duration::from_secs(30), "c's delivery recorded", || {
        catalog(&config, &["list", "--site", "c", "--state", "pending"]).is_empty()
    });
    // A file gone from here is never recorded as delivered: forgotten for
    // a (so owed to it again), it fails there saying why.
    std::fs::remove_file(s.path("acquired/f1.nc")).unwrap();
    catalog(&config, &["forget", "sst", "f1.nc", "--site", "a"]);
    let t0 = std::time::Instant::now();
    while !catalog(&config, &["list", "--site", "a", "--state", "failed"])
        .iter()
        .any(|d| d["path"] == "f1.nc")
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "f1.nc did not fail at a: {:?}\n{}",
            catalog(&config, &["list", "--site", "a"]),
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let failed = catalog(&config, &["list", "--site", "a", "--state", "failed"]);
    let f1 = failed.iter().find(|d| d["path"] == "f1.nc").unwrap();
    assert!(
        f1["error"].as_str().unwrap_or("").contains("f1.nc"),
        "the error names the file: {f1}"
    );
    assert_eq!(daemon.terminate().code(), Some(0), "{}", daemon.log());
    if std::env::var_os("HAUL_TEST_SHOW_LOG").is_some() {
        eprintln!("{}", daemon.log());
    }
    // Each site received each file once, whoever relayed it.
    let all = [
        "f0.nc",
        "f1.nc",
        "2026/f2.nc",
        "f3.nc",
        "f4.nc",
        "f5.nc",
        "f6.nc",
    ];
    for name in ["a", "b", "c"] {
        let got = received(&s, name);
        for f in all {
            assert_eq!(
                got.get(&format!("sst/{f}")).copied().unwrap_or(0),
                1,
                "site {name} received {f} other than once: {got:?}\n{}",
                daemon.log()
            );
        }
    }
    // The catalog says so too, with the BLAKE3 each site confirmed.
    let delivered = catalog(&config, &["list", "--site", "b", "--state", "delivered"]);
    assert_eq!(delivered.len(), all.len(), "{delivered:?}");
    for d in &delivered {
        let path = d["path"].as_str().unwrap();
        assert_eq!(d["blake3"].as_str().unwrap(), b3(&archive.join(path)));
    }
    drop((a, b, c));
}

#[test]
fn a_buffer_only_daemon_keeps_what_a_site_lacks_and_hooks_each_delivery() {
    let s = Scratch::new();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    let archive = http.root().join("sst");
    for i in 0..3 {
        write_file(&archive.join(format!("f{i}.nc")), 20_000 + i, 40 + i);
    }
    let a = start_site(&s, "a", "127.0.0.1:0");
    // b is known (its address and key) but down from the start.
    let b = start_site(&s, "b", "127.0.0.1:0");
    let b_addr = b.node.addr.clone();
    let status = free_port();
    let hooks = s.path("hooks.txt");
    let extra = format!(
        "keep_local = false\non_deliver = 'echo \"$HAUL_EVENT $HAUL_SITE $HAUL_PATH $HAUL_BLAKE3 $HAUL_SITE_URL\" >> {}'\n",
        hooks.display()
    );
    let config = config(&s, &http.http_url("/sst/"), &[&a, &b], status, &extra);
    drop(b);
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    let files = ["f0.nc", "f1.nc", "f2.nc"];
    wait_for(Duration::from_secs(60), "every file at a", || {
        holds(&s, "a", &archive, &files)
    });
    wait_for(Duration::from_secs(30), "b's failures recorded", || {
        catalog(&config, &["list", "--site", "b", "--state", "failed"]).len() == 3
    });
    // b lacks them all: every local copy stays, and the status says why.
    std::thread::sleep(Duration::from_secs(2));
    for f in files {
        assert!(
            s.path(&format!("acquired/{f}")).exists(),
            "{f} removed while b lacks it"
        );
    }
    let (_, body) = http_get(status, "/status");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let rows = v["deliveries"].as_array().unwrap();
    let row = |site: &str| rows.iter().find(|r| r["site"] == site).unwrap().clone();
    assert_eq!(row("b")["files_pending"], 3, "{body}");
    assert_eq!(row("a")["files_pending"], 0, "{body}");
    assert!(row("b")["lag_seconds"].as_i64().unwrap() >= 1, "{body}");
    let mut st = crate::harness::haul(&s.path("cfg"));
    st.args(["status", "--config"]).arg(&config);
    let out = crate::harness::run(st, Duration::from_secs(30));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{table}");
    let b_line = table
        .lines()
        .find(|l| l.starts_with("sst") && l.contains(" b "))
        .unwrap_or_else(|| panic!("no row for b:\n{table}"));
    assert!(
        b_line.contains(&b_addr),
        "b's row names its error: {b_line}"
    );
    // b comes back: it catches up, and then nothing is kept here.
    let b = start_site(&s, "b", &b_addr);
    wait_for(Duration::from_secs(60), "b caught up", || {
        holds(&s, "b", &archive, &files)
    });
    wait_for(Duration::from_secs(30), "the local copies released", || {
        files
            .iter()
            .all(|f| !s.path(&format!("acquired/{f}")).exists())
    });
    assert_eq!(daemon.terminate().code(), Some(0), "{}", daemon.log());
    // One hook run per (file, site), with the file's facts and the site's.
    let text = std::fs::read_to_string(&hooks).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines.len(), 6, "{text}");
    for f in files {
        for (site, node) in [("a", &a.node), ("b", &b.node)] {
            let want = format!(
                "delivered {site} {f} {} {}",
                b3(&archive.join(f)),
                node.url(&format!("sst/{f}"))
            );
            assert!(lines.contains(&want.as_str()), "no {want:?} in\n{text}");
        }
    }
    // The files are still known to the catalog as fetched: a next run does
    // not fetch them again.
    assert_eq!(catalog(&config, &["list", "--state", "fetched"]).len(), 3);
}

#[test]
fn two_workers_on_postgres_share_deliveries_and_take_over_a_killed_ones() {
    let s = Scratch::new();
    let pg = haul_catalog::testserver::TestServer::start().expect("PostgreSQL");
    let url = pg.create_database("deliveries").unwrap();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    let archive = http.root().join("sst");
    let n = 6;
    for i in 0..n {
        write_file(&archive.join(format!("f{i}.nc")), 4 << 20, 60 + i);
    }
    let (a, b) = (
        start_site(&s, "a", "127.0.0.1:0"),
        start_site(&s, "b", "127.0.0.1:0"),
    );
    // What a worker sends a site is capped (4 MB/s), so a round of two
    // 4 MiB files takes about two seconds: long enough to kill it mid-way.
    let configs: Vec<_> = (1..=2)
        .map(|w| {
            let head = format!(
                "catalog = \"{url}\"\nstatus = \"off\"\nworker = \"w{w}\"\nlease = \"3s\"\n"
            );
            config_as(
                &s,
                &format!("w{w}.toml"),
                &head,
                &http.http_url("/sst/"),
                &[&a, &b],
                "max_rate = \"4M\"",
                "deliver_batch = 2",
            )
        })
        .collect();
    let w1 = Daemon::start(&configs[0], &s.path("w1.log"));
    let w2 = Daemon::start(&configs[1], &s.path("w2.log"));
    // Whichever worker claims a round first is killed in it (on a busy
    // machine one worker may claim every round before the other's first
    // run ends), and the other takes over.
    let delivering = |w: &Daemon| w.log().contains("sst: delivering");
    wait_for(Duration::from_secs(60), "a worker delivering", || {
        delivering(&w1) || delivering(&w2)
    });
    std::thread::sleep(Duration::from_millis(700));
    let (mut w1, mut w2) = if delivering(&w1) { (w1, w2) } else { (w2, w1) };
    w1.kill9();
    let files: Vec<String> = (0..n).map(|i| format!("f{i}.nc")).collect();
    let names: Vec<&str> = files.iter().map(String::as_str).collect();
    wait_for(Duration::from_secs(120), "every file at both sites", || {
        holds(&s, "a", &archive, &names) && holds(&s, "b", &archive, &names)
    });
    wait_for(Duration::from_secs(30), "every delivery recorded", || {
        ["a", "b"].iter().all(|site| {
            catalog(
                &configs[1],
                &["list", "--site", site, "--state", "delivered"],
            )
            .len()
                == n as usize
        })
    });
    assert_eq!(w2.terminate().code(), Some(0), "{}", w2.log());
    if std::env::var_os("HAUL_TEST_SHOW_LOG").is_some() {
        eprintln!("w1:\n{}\nw2:\n{}", w1.log(), w2.log());
    }
    assert!(
        w2.log().contains("file(s) delivered"),
        "w2 delivered nothing:\n{}",
        w2.log()
    );
    // Each site received each file once: what w1 had confirmed was not
    // sent again, and what it left half-way was finished, not restarted.
    for site in ["a", "b"] {
        let got = received(&s, site);
        for f in &files {
            assert_eq!(
                got.get(&format!("sst/{f}")).copied().unwrap_or(0),
                1,
                "site {site} received {f} other than once: {got:?}\nw1:\n{}\nw2:\n{}",
                w1.log(),
                w2.log()
            );
        }
    }
    drop((a, b));
}

/// Bytes staged under a site's `.haul/partial` (its largest file).
fn staged_at(s: &Scratch, site: &str) -> u64 {
    std::fs::read_dir(s.path(&format!("site-{site}/.haul/partial")))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

#[test]
fn a_relaying_site_killed_mid_delivery_is_routed_around_and_catches_up() {
    let s = Scratch::new();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    let archive = http.root().join("sst");
    for i in 0..3 {
        write_file(&archive.join(format!("f{i}.nc")), 6 << 20, 80 + i);
    }
    let sites = [
        start_site(&s, "a", "127.0.0.1:0"),
        start_site(&s, "b", "127.0.0.1:0"),
        start_site(&s, "c", "127.0.0.1:0"),
    ];
    let head = format!(
        "catalog = \"sqlite:{}\"\nstatus = \"off\"\n",
        s.path("catalog.db").display()
    );
    // The daemon sends the first site of the chain 4 MB/s (a relays to b,
    // b to c, uncapped): 18 MiB take about 4.5 s, time to kill a mid-way.
    let config = config_as(
        &s,
        "haul.toml",
        &head,
        &http.http_url("/sst/"),
        &sites.iter().collect::<Vec<_>>(),
        "max_rate = \"4M\"\ntimeout = 5",
        "",
    );
    let [mut a, b, c] = sites;
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    wait_for(Duration::from_secs(60), "a relaying, 2 MiB staged", || {
        staged_at(&s, "a") >= 2 << 20
    });
    let a_addr = a.node.addr.clone();
    a.node.kill9();
    let files = ["f0.nc", "f1.nc", "f2.nc"];
    wait_for(
        Duration::from_secs(90),
        "b and c complete without a",
        || holds(&s, "b", &archive, &files) && holds(&s, "c", &archive, &files),
    );
    wait_for(
        Duration::from_secs(30),
        "a's share recorded as failed",
        || catalog(&config, &["list", "--site", "a", "--state", "failed"]).len() == 3,
    );
    assert!(
        catalog(&config, &["list", "--site", "b", "--state", "delivered"]).len() == 3
            && catalog(&config, &["list", "--site", "c", "--state", "delivered"]).len() == 3,
        "{}",
        daemon.log()
    );
    drop(a);
    let a = start_site(&s, "a", &a_addr);
    wait_for(Duration::from_secs(90), "a caught up", || {
        holds(&s, "a", &archive, &files)
    });
    wait_for(Duration::from_secs(30), "a's deliveries recorded", || {
        catalog(&config, &["list", "--site", "a", "--state", "delivered"]).len() == 3
    });
    assert_eq!(daemon.terminate().code(), Some(0), "{}", daemon.log());
    for site in ["a", "b", "c"] {
        let got = received(&s, site);
        for f in files {
            assert_eq!(
                got.get(&format!("sst/{f}")).copied().unwrap_or(0),
                1,
                "site {site} received {f} other than once: {got:?}\n{}",
                daemon.log()
            );
        }
    }
    drop((a, b, c));
}
