//! `haul daemon` with haul nodes as sources (LDM's REQUEST): a real
//! `haul serve` upstream as `haul://`, and one started over ssh by a real
//! OpenSSH sshd as `host:DIR`; the catalog decides what is fetched, each
//! file is fetched once (counted in the upstream node's own log), and what
//! comes in goes on to the sites as from any other source.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use crate::daemon::{catalog, check, checked, free_port, Daemon};
use crate::harness::{b3, logged_with_payload, wait_for, write_file, Node, Scratch, BIN};

/// An upstream node with a token and a JSON transfer log.
fn upstream(s: &Scratch, name: &str) -> Node {
    let token = s.path(&format!("{name}.token"));
    std::fs::write(&token, format!("token-of-{name}\n")).unwrap();
    Node::start(
        &s.path(name),
        &s.path(&format!("config-{name}")),
        &[
            "--token-file",
            &token.display().to_string(),
            "--log-format",
            "json",
            "--log-file",
            &s.path(&format!("{name}.log")).display().to_string(),
        ],
    )
}

/// How many times node `name` sent each file of `data/` (its log).
fn sent_by(s: &Scratch, name: &str) -> HashMap<String, usize> {
    logged_with_payload(&s.path(&format!("{name}.log")), "file_sent")
        .into_iter()
        .map(|(path, n)| (path.trim_start_matches("data/").to_owned(), n))
        .collect()
}

/// Every one of `files` under `dir` as under `from`.
fn same(dir: &Path, from: &Path, files: &[&str]) -> bool {
    files.iter().all(|f| {
        let here = dir.join(f);
        here.exists() && b3(&here) == b3(&from.join(f))
    })
}

#[test]
fn a_node_is_a_daemon_source_and_what_it_fetches_goes_on_to_the_sites() {
    let s = Scratch::new();
    let up = upstream(&s, "up");
    let data = s.path("up/data");
    write_file(&data.join("f0.nc"), 9 << 20, 1);
    write_file(&data.join("f1.nc"), 10_000, 2);
    write_file(&data.join("2026/f2.nc"), 70_000, 3);
    write_file(&data.join("skip.txt"), 100, 4);
    // `keep = ["xattrs"]`: an attribute comes here and goes on to the site.
    let tag = |p: &Path| {
        let out = std::process::Command::new("getfattr")
            .args(["-n", "user.sst.granule", "--only-values"])
            .arg(p)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let set = std::process::Command::new("setfattr")
        .args(["-n", "user.sst.granule", "-v", "g-0042"])
        .arg(data.join("f1.nc"))
        .status()
        .unwrap();
    assert!(set.success());
    // And, as root, its owner (a number no name has here).
    if cfg!(feature = "root-tests") {
        std::os::unix::fs::chown(data.join("f1.nc"), Some(4321), Some(4322)).unwrap();
    }
    let site = upstream(&s, "site");
    std::fs::create_dir_all(s.path("site/sst")).unwrap();
    let status = free_port();
    let acquired = s.path("acquired");
    let config = s.path("haul.toml");
    std::fs::write(
        &config,
        format!(
            r#"catalog = "sqlite:{catalog}"
status = "127.0.0.1:{status}"
down_retry = "1s"

[[site]]
name = "a"
url = "{site_url}"
token_file = "{site_token}"
fingerprint = "{site_fp}"

[[source]]
name = "sst"
url = "{up_url}"
token_file = "{up_token}"
fingerprint = "{up_fp}"
dest = "{dest}"
schedule = "every 1s"
refetch = "if-changed"
include = ["*.nc"]
deliver = ["a"]
keep = ["archive", "xattrs"]
"#,
            catalog = s.path("catalog.db").display(),
            site_url = site.url("sst"),
            site_token = s.path("site.token").display(),
            site_fp = site.fingerprint.as_deref().unwrap_or(""),
            // No trailing slash: a source's directory's contents come to
            // dest, as from any other source.
            up_url = up.url("data"),
            up_token = s.path("up.token").display(),
            up_fp = up.fingerprint.as_deref().unwrap_or(""),
            dest = acquired.display(),
        ),
    )
    .unwrap();
    // --check names the node, keys of other sources are refused.
    let said = checked(&config);
    assert!(
        said.contains(&format!("[sst] {} -> ", up.url("data"))),
        "{said}"
    );
    let wrong = s.path("wrong.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &wrong,
        text.replace("refetch =", "rename = \"{name}\"\nrefetch ="),
    )
    .unwrap();
    let out = check(&wrong);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("rename is for FTP, SFTP, HTTP and S3 sources only"),
        "{err}"
    );

    let daemon = Daemon::start(&config, &s.path("daemon.log"));
    let first = ["f0.nc", "f1.nc", "2026/f2.nc"];
    wait_for(
        Duration::from_secs(90),
        "the node's files here and at the site",
        || same(&acquired, &data, &first) && same(&s.path("site/sst"), &data, &first),
    );
    assert!(!acquired.join("skip.txt").exists());
    assert!(said.contains("keep:     owner, group, xattrs"), "{said}");
    assert_eq!(tag(&acquired.join("f1.nc")), "g-0042", "kept here");
    if cfg!(feature = "root-tests") {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(acquired.join("f1.nc")).unwrap();
        assert_eq!((m.uid(), m.gid()), (4321, 4322), "owners kept here");
    }
    assert_eq!(tag(&s.path("site/sst/f1.nc")), "g-0042", "kept at the site");
    // The catalog holds each with its BLAKE3, as the node's file.
    let fetched = catalog(&config, &["list", "--source", "sst"]);
    assert_eq!(fetched.len(), 3, "{fetched:?}");
    assert!(
        fetched.iter().all(|f| f["state"] == "fetched"),
        "{fetched:?}"
    );
    for f in first {
        let shown = catalog(&config, &["show", "sst", f]);
        assert_eq!(shown[0]["blake3"], b3(&data.join(f)).as_str(), "{f}");
    }
    // A new file, and one changed at the node: only they come again.
    write_file(&data.join("f3.nc"), 30_000, 5);
    // Replaced whole (as an archive does), never seen half-written.
    write_file(&data.join("f1.tmp"), 12_000, 6);
    std::fs::rename(data.join("f1.tmp"), data.join("f1.nc")).unwrap();
    wait_for(
        Duration::from_secs(60),
        "the new and the changed file",
        || {
            same(&acquired, &data, &["f1.nc", "f3.nc"])
                && same(&s.path("site/sst"), &data, &["f1.nc", "f3.nc"])
        },
    );
    // Runs go on every second; each file left the node once per version.
    std::thread::sleep(Duration::from_secs(3));
    let sent = sent_by(&s, "up");
    assert_eq!(sent.get("f0.nc"), Some(&1), "{sent:?}");
    assert_eq!(sent.get("2026/f2.nc"), Some(&1), "{sent:?}");
    assert_eq!(sent.get("f3.nc"), Some(&1), "{sent:?}");
    assert_eq!(sent.get("f1.nc"), Some(&2), "{sent:?}");
    assert!(!sent.contains_key("skip.txt"), "{sent:?}");
    // A file the catalog has is not fetched again because it is gone here
    // (the catalog decides, not what dest holds).
    std::fs::remove_file(acquired.join("f3.nc")).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(!acquired.join("f3.nc").exists());
    assert_eq!(sent_by(&s, "up").get("f3.nc"), Some(&1));
    drop(daemon);
}

#[test]
fn a_node_started_over_ssh_is_a_daemon_source_and_a_site() {
    let srv = haul_sftp::testserver::TestServer::start()
        .expect("start sshd (apt-get install openssh-server; needs root)");
    let s = Scratch::new();
    let far = srv.root().join("archive");
    write_file(&far.join("a.nc"), 3 << 20, 7);
    write_file(&far.join("sub/b.nc"), 5_000, 8);
    let acquired = s.path("acquired");
    // The site: a directory on the same host, a node started there over
    // ssh for each delivery round.
    let site = srv.root().join("site");
    std::fs::create_dir_all(&site).unwrap();
    let tunnelled = srv.root().join("site-u");
    std::fs::create_dir_all(&tunnelled).unwrap();
    let rsh = crate::ssh::rsh(&srv, &srv.known_hosts_file());
    let config = s.path("haul.toml");
    std::fs::write(
        &config,
        format!(
            r#"catalog = "sqlite:{catalog}"
status = "127.0.0.1:{status}"
down_retry = "1s"

[[site]]
name = "s"
url = "{user}@127.0.0.1:{site}"
rsh = "{rsh}"
remote_haul = "{bin}"

[[site]]
name = "t"
url = "{user}@127.0.0.1:{site}-t"
rsh = "{rsh}"
remote_haul = "/nowhere/haul"

# Fed through its ssh channel, never a relay.
[[site]]
name = "u"
url = "{user}@127.0.0.1:{site}-u"
rsh = "{rsh}"
remote_haul = "{bin}"
ssh_tunnel = true

[[source]]
name = "far"
url = "{user}@127.0.0.1:{far}"
rsh = "{rsh}"
remote_haul = "{bin}"
dest = "{dest}"
schedule = "every 1s"
deliver = ["s", "t", "u"]
"#,
            catalog = s.path("catalog.db").display(),
            status = free_port(),
            user = haul_sftp::testserver::TestServer::key_user(),
            far = far.display(),
            site = site.display(),
            bin = BIN,
            dest = acquired.display(),
        ),
    )
    .unwrap();
    // --check names the site as written.
    let said = checked(&config);
    assert!(
        said.contains(&format!(
            "site s: {}@127.0.0.1:{}/",
            haul_sftp::testserver::TestServer::key_user(),
            site.display()
        )),
        "{said}"
    );
    let daemon = Daemon::start(&config, &s.path("daemon.log"));
    wait_for(
        Duration::from_secs(90),
        "the far files here and at the site",
        || same(&acquired, &far, &["a.nc", "sub/b.nc"]) && same(&site, &far, &["a.nc", "sub/b.nc"]),
    );
    wait_for(
        Duration::from_secs(30),
        "both confirmed by the site",
        || catalog(&config, &["list", "--site", "s", "--state", "delivered"]).len() == 2,
    );
    wait_for(
        Duration::from_secs(30),
        "both at and confirmed by the site fed through its ssh channel",
        || {
            same(&tunnelled, &far, &["a.nc", "sub/b.nc"])
                && catalog(&config, &["list", "--site", "u", "--state", "delivered"]).len() == 2
        },
    );
    let log = std::fs::read_to_string(s.path("daemon.log")).unwrap();
    assert!(
        log.contains("--ssh-tunnel; fed through its ssh channel"),
        "{log}"
    );
    // The site whose node cannot start there fails with ssh's words, and
    // held back nothing of the other's.
    let mut failed = Vec::new();
    wait_for(Duration::from_secs(30), "t's failures recorded", || {
        failed = catalog(&config, &["list", "--site", "t", "--state", "failed"]);
        failed.len() == 2
    });
    assert!(
        failed.iter().all(|f| f["error"]
            .as_str()
            .is_some_and(|e| e.contains("/nowhere/haul"))),
        "{failed:?}"
    );
    let shown = catalog(&config, &["show", "far", "sub/b.nc"]);
    assert_eq!(shown[0]["blake3"], b3(&far.join("sub/b.nc")).as_str());
    drop(daemon);
}

/// The `N` of each "run ended: N listed" line of a daemon's log.
fn listed_per_run(log: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|l| l.split("run ended: ").nth(1))
        .filter_map(|rest| rest.split(' ').next()?.parse().ok())
        .collect()
}

#[test]
fn a_watching_node_lists_only_what_is_new_since_the_daemons_last_run() {
    let s = Scratch::new();
    let token = s.path("up.token");
    std::fs::write(&token, "token-of-up\n").unwrap();
    let data = s.path("up/data");
    write_file(&data.join("f0.nc"), 3 << 20, 1);
    write_file(&data.join("sub/f1.nc"), 10_000, 2);
    write_file(&data.join("skip.txt"), 10, 3);
    // A tree a whole listing would name each run.
    for i in 0..20 {
        write_file(&data.join(format!("old/g{i}.nc")), 100 + i, 10 + i);
    }
    let up = Node::start(
        &s.path("up"),
        &s.path("config-up"),
        &["--token-file", &token.display().to_string(), "--watch"],
    );
    let acquired = s.path("acquired");
    let config = s.path("haul.toml");
    std::fs::write(
        &config,
        format!(
            "catalog = \"sqlite:{}\"\nstatus = \"127.0.0.1:{}\"\n\n[[source]]\nname = \"sst\"\nurl = \"{}\"\ntoken_file = \"{}\"\nfingerprint = \"{}\"\ndest = \"{}\"\nschedule = \"every 1s\"\nrefetch = \"if-changed\"\ninclude = [\"*.nc\"]\n",
            s.path("catalog.db").display(),
            free_port(),
            up.url("data"),
            token.display(),
            up.fingerprint.as_deref().unwrap_or(""),
            acquired.display()
        ),
    )
    .unwrap();
    let daemon = Daemon::start(&config, &s.path("daemon.log"));
    let first = ["f0.nc", "sub/f1.nc", "old/g7.nc"];
    wait_for(Duration::from_secs(60), "the first files", || {
        same(&acquired, &data, &first)
    });
    // Runs after the first list what changed: a file the node recorded
    // its hash on as it sent it (an attribute changed), then nothing.
    wait_for(Duration::from_secs(30), "runs that list nothing", || {
        listed_per_run(&daemon.log()).ends_with(&[0, 0])
    });
    let runs = listed_per_run(&daemon.log());
    assert_eq!(runs[0], 22, "the first run lists everything: {runs:?}");
    assert!(runs[1..].iter().all(|&n| n <= 2), "{runs:?}");
    // New files — one in a directory made after the watch began, three
    // levels deep — and one rewritten in place: listed, fetched.
    write_file(&data.join("sub/f2.nc"), 20_000, 4);
    write_file(&data.join("new/x/f3.nc"), 30_000, 5);
    write_file(&data.join("f0.nc"), 3 << 20, 6);
    let all = ["f0.nc", "sub/f1.nc", "sub/f2.nc", "new/x/f3.nc"];
    wait_for(Duration::from_secs(60), "the new and changed files", || {
        same(&acquired, &data, &all)
    });
    let log = daemon.log();
    let runs = listed_per_run(&log);
    assert!(
        runs[1..].iter().all(|&n| n <= 4),
        "later runs list what changed, not the tree: {runs:?}"
    );
    assert!(
        log.contains("sst: the node listed only what changed since the last run"),
        "{log}"
    );
}
