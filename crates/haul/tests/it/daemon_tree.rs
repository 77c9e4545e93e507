//! A distribution tree in one daemon config (issue 33's item 5): site `a`
//! names `b` and `c` as its `downstream`, a source delivers to `a`, and
//! every file reaches all three — `b` and `c` fed by `a`'s relay, every
//! connection the daemon makes to them passed on by `a`'s node (`haul
//! serve --jump-to`). A downstream site `a` may not pass connections on to
//! is said so, with the flag that allows it; the others go on. (That the
//! daemon needs no route to `b` at all is `lab_fanout`'s two-level test.)

use std::time::Duration;

use crate::daemon::{catalog, checked, Daemon};
use crate::daemon_sites::{holds, received, start_site, start_site_with, Site};
use crate::harness::{wait_for, write_file, Scratch};

fn site_toml(s: &Scratch, site: &Site, extra: &str) -> String {
    format!(
        "\n[[site]]\nname = \"{name}\"\nurl = \"{url}\"\ntoken_file = \"{token}\"\nfingerprint = \"{fp}\"\n{extra}\n",
        name = site.name,
        url = site.node.url("sst"),
        token = s.path(&format!("{}.token", site.name)).display(),
        fp = site.node.fingerprint.as_deref().unwrap_or(""),
    )
}

#[test]
fn a_site_feeds_its_downstream_sites_and_passes_the_daemons_connections_on() {
    let s = Scratch::new();
    let http = haul_http::testserver::TestServer::start().expect("nginx");
    let archive = http.root().join("sst");
    write_file(&archive.join("f0.nc"), 9 << 20, 1);
    write_file(&archive.join("f1.nc"), 10_000, 2);
    // A second source that delivers to b alone: a owes nothing of it, so
    // the daemon feeds b itself, through a's node.
    let only_b = http.root().join("only-b");
    write_file(&only_b.join("g0.nc"), 5 << 20, 7);
    let (b, c, d) = (
        start_site(&s, "b", "127.0.0.1:0"),
        start_site(&s, "c", "127.0.0.1:0"),
        start_site(&s, "d", "127.0.0.1:0"),
    );
    // a passes connections on to b and c, not to d.
    let a = start_site_with(
        &s,
        "a",
        "127.0.0.1:0",
        &["--jump-to", &b.node.addr, "--jump-to", &c.node.addr],
    );
    // A status port of its own: the default one is any other test's too.
    let mut text = format!(
        "catalog = \"sqlite:{}\"\nstatus = \"127.0.0.1:{}\"\ndown_retry = \"1s\"\n",
        s.path("catalog.db").display(),
        crate::daemon::free_port()
    );
    text += &site_toml(&s, &a, "downstream = [\"b\", \"c\", \"d\"]");
    // b's max_rate caps what the daemon itself sends it, also through a.
    text += &site_toml(&s, &b, "max_rate = \"2M\"");
    for site in [&c, &d] {
        text += &site_toml(&s, site, "");
    }
    text += &format!(
        "\n[[source]]\nname = \"sst\"\nurl = \"{}\"\ndest = \"{}\"\nschedule = \"every 1s\"\ninclude = [\"*.nc\"]\ndeliver = [\"a\"]\n",
        http.http_url("/sst/"),
        s.path("acquired").display()
    );
    text += &format!(
        "\n[[source]]\nname = \"direct\"\nurl = \"{}\"\ndest = \"{}\"\nschedule = \"every 1s\"\ndeliver = [\"b\"]\n",
        http.http_url("/only-b/"),
        s.path("acquired-b").display()
    );
    let config = s.path("haul.toml");
    std::fs::write(&config, text).unwrap();
    // --check: delivering to a delivers below it too, each beneath a.
    let said = checked(&config);
    assert!(
        said.contains("deliver:  a, b, c, d (oldest first)"),
        "{said}"
    );
    let c_line = format!(
        "site c: {} (tcp, fed and reached through a)",
        c.node.url("sst")
    );
    assert!(said.contains(&c_line), "{said}");
    for below in ["a -> b", "a -> c", "a -> d"] {
        assert!(said.contains(below), "{below}: {said}");
    }
    let mut daemon = Daemon::start(&config, &s.path("daemon.log"));
    let files = ["f0.nc", "f1.nc"];
    wait_for(Duration::from_secs(90), "the files at a, b and c", || {
        ["a", "b", "c"]
            .iter()
            .all(|n| holds(&s, n, &archive, &files))
    });
    // Each received each file once; b and c from a's relay, which the
    // plan put above them.
    for site in ["a", "b", "c"] {
        let got = received(&s, site);
        for f in files {
            assert_eq!(
                got.get(&format!("sst/{f}")),
                Some(&1),
                "{site} {f}: {got:?}"
            );
        }
    }
    let log = daemon.log();
    for below in [&b, &c] {
        let planned = format!("{} <- {}", below.node.addr, a.node.addr);
        assert!(log.contains(&planned), "{planned}: {log}");
    }
    // a's transfer log: the daemon's connections to b and c came through it.
    let a_log = std::fs::read_to_string(s.path("a.log")).unwrap();
    for below in [&b, &c] {
        assert!(
            a_log.lines().any(|l| l.contains("\"request\":\"jump\"")
                && l.contains(&format!("\"path\":\"{}\"", below.node.addr))),
            "no jump to {}: {a_log}",
            below.node.addr
        );
    }
    // The second source's file: at b, fed by the daemon through a (a
    // passed the connection on), and nowhere else.
    wait_for(Duration::from_secs(60), "g0 at b", || {
        holds(&s, "b", &only_b, &["g0.nc"])
    });
    assert!(!s.path("site-a/sst/g0.nc").exists());
    assert!(!s.path("site-c/sst/g0.nc").exists());
    // At b's max_rate: 5 MiB at 2 MiB/s takes more than 2 s (a moment on
    // loopback without it).
    let b_log = std::fs::read_to_string(s.path("b.log")).unwrap();
    let secs = b_log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|r| r["event"] == "file_received" && r["path"] == "sst/g0.nc")
        .and_then(|r| r["secs"].as_f64())
        .expect("g0's line in b's log");
    assert!(secs > 2.0, "g0 reached b in {secs} s: not at its max_rate");
    // d: refused by a, said with the flag that would allow it; nothing
    // arrived there.
    wait_for(Duration::from_secs(30), "d's failures recorded", || {
        catalog(&config, &["list", "--site", "d", "--state", "failed"]).len() == 2
    });
    let failed = catalog(&config, &["list", "--site", "d", "--state", "failed"]);
    let error = failed[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("--jump-to {}", d.node.addr)),
        "{failed:?}"
    );
    assert!(received(&s, "d").is_empty());
    for (site, files) in [("b", 3), ("c", 2)] {
        wait_for(Duration::from_secs(30), "b and c confirmed", || {
            catalog(&config, &["list", "--site", site, "--state", "delivered"]).len() == files
        });
    }
    assert!(daemon.terminate().success());
}
