//! The config's parsing and checks, on TOML text.

use super::*;

const MINIMAL: &str = r#"catalog = "sqlite:/var/lib/haul/catalog.db"
status = "127.0.0.1:9464"

[[source]]
name = "sst"
url = "https://archive.example/pub/sst/"
dest = "/data/sst"
schedule = "every 10m"
include = ["*.nc"]
"#;

#[test]
fn the_issues_minimal_config_parses() {
    let c = parse(MINIMAL).unwrap();
    assert_eq!(c.catalog, "sqlite:/var/lib/haul/catalog.db");
    assert_eq!(c.status, Some("127.0.0.1:9464".parse().unwrap()));
    assert_eq!(c.sources.len(), 1);
    let s = &c.sources[0];
    assert_eq!(s.name, "sst");
    assert_eq!(s.schedule.describe(), "every 10m");
    assert_eq!(s.refetch, Refetch::Never);
    assert_eq!(s.rules.len(), 1);
}

/// The issue's config with sites, token files in a scratch directory.
fn with_sites(dir: &Path) -> String {
    for name in ["a", "b"] {
        std::fs::write(dir.join(format!("{name}.token")), format!("t-{name}\n")).unwrap();
    }
    format!(
        r#"catalog = "sqlite:/var/lib/haul/catalog.db"
status = "127.0.0.1:9464"

[[site]]
name = "a"
url = "haul://a.example:7878/sst"
token_file = "{d}/a.token"

[[site]]
name = "b"
url = "haul://b.example:7878/sst"
token_file = "{d}/b.token"

[[source]]
name = "sst"
url = "https://archive.example/pub/sst/"
dest = "/data/sst"
schedule = "every 10m"
include = ["*.nc"]
deliver = ["a", "b"]
"#,
        d = dir.display()
    )
}

#[test]
fn nodes_are_sources_with_their_own_keys_and_refuse_a_remotes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("up.token"), "t-up\n").unwrap();
    let node = MINIMAL.replace(
            "url = \"https://archive.example/pub/sst/\"",
            &format!(
                "url = \"haul://up.example:7878/sst\"\ntoken_file = \"{}/up.token\"\ntransport = \"quic\"",
                dir.path().display()
            ),
        );
    let c = parse(&node).unwrap();
    let n = c.sources[0].node.as_ref().expect("a node source");
    assert_eq!(n.client.token, "t-up");
    assert_eq!(n.client.transport, haul_transport::Transport::Quic);
    // Its directory's contents come to dest.
    assert!(
        matches!(&n.at, NodeAt::Haul(u) if u.path.ends_with("sst/")),
        "{:?}",
        n.at
    );
    assert_eq!(c.sources[0].shown_url(), "haul://up.example:7878/sst");
    // Over ssh, with the remote shell and the far haul.
    let ssh = MINIMAL.replace(
        "url = \"https://archive.example/pub/sst/\"",
        "url = \"haul@far.example:/srv/out\"\nrsh = \"ssh -p 2222\"\nremote_haul = \"/opt/haul\"",
    );
    let c = parse(&ssh).unwrap();
    let n = c.sources[0].node.as_ref().expect("an ssh source");
    assert!(matches!(&n.at, NodeAt::Ssh(at) if at.path == "/srv/out/" && at.host == "far.example"));
    assert_eq!(n.client.ssh.remote_haul, "/opt/haul");
    // A remote's keys on a node, a node's on a remote: refused, named.
    let e = error_of(&node.replace(
        "schedule =",
        "rename = \"{name}\"\nuser = \"x\"\nschedule =",
    ));
    assert!(
        e.contains("rename, user are for FTP, SFTP, HTTP and S3 sources only"),
        "{e}"
    );
    let e = error_of(&MINIMAL.replace("schedule =", "token_file = \"/t\"\nschedule ="));
    assert!(e.contains("token_file is for haul node sources"), "{e}");
    let e = error_of(&node.replace("schedule =", "rsh = \"ssh -p 2\"\nschedule ="));
    assert!(e.contains("rsh is for a node started over ssh"), "{e}");
    let e = error_of(&ssh.replace("schedule =", "fingerprint = \"SHA256:x\"\nschedule ="));
    assert!(e.contains("fingerprint is for a haul:// node"), "{e}");
    let e = error_of(&ssh.replace("schedule =", "ssh_key = [\"/k\"]\nschedule ="));
    assert!(e.contains("as rsh = \"ssh -i KEY\""), "{e}");
    // Neither a remote nor a node.
    let e = error_of(&MINIMAL.replace("https://archive.example/pub/sst/", "/local/dir"));
    assert!(e.contains("nor a haul node"), "{e}");
}

#[test]
fn downstream_sites_are_fed_through_the_site_above_and_delivered_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    std::fs::write(dir.path().join("c.token"), "t-c\n").unwrap();
    let tree = with_sites(dir.path())
            .replace(
                "token_file = \"{d}/a.token\"".replace("{d}", &d.to_string()).as_str(),
                &format!("token_file = \"{d}/a.token\"\ndownstream = [\"b\"]"),
            )
            .replace(
                "[[source]]",
                &format!(
                    "[[site]]\nname = \"c\"\nurl = \"haul://c.example:7878/sst\"\ntoken_file = \"{d}/c.token\"\n\n[[source]]"
                ),
            )
            .replace("deliver = [\"a\", \"b\"]", "deliver = [\"a\"]");
    let c = parse(&tree).unwrap();
    assert_eq!(c.sites[1].via.as_deref(), Some("a"));
    assert_eq!(c.sites[0].via, None);
    // Delivering to a delivers to b, beneath it.
    assert_eq!(c.sources[0].deliver, ["a", "b"]);
    // Two levels: c beneath b; named once however it is reached.
    let deeper = tree.replace(
        &format!("token_file = \"{d}/b.token\""),
        &format!("token_file = \"{d}/b.token\"\ndownstream = [\"c\"]"),
    );
    let c = parse(&deeper.replace("deliver = [\"a\"]", "deliver = [\"c\", \"a\"]")).unwrap();
    assert_eq!(c.sources[0].deliver, ["c", "a", "b"]);
    // Refused: a name no site has, itself, two sites above one, a loop,
    // and ssh on either end.
    let e = error_of(&tree.replace("downstream = [\"b\"]", "downstream = [\"x\"]"));
    assert!(e.contains("downstream names \"x\", and no [[site]]"), "{e}");
    let e = error_of(&tree.replace("downstream = [\"b\"]", "downstream = [\"a\"]"));
    assert!(e.contains("names itself downstream"), "{e}");
    let e = error_of(&tree.replace("downstream = [\"b\"]", "downstream = [\"b\", \"b\"]"));
    assert!(e.contains("names \"b\" downstream twice"), "{e}");
    let e = error_of(&tree.replace(
        &format!("token_file = \"{d}/c.token\""),
        &format!("token_file = \"{d}/c.token\"\ndownstream = [\"b\"]"),
    ));
    assert!(e.contains("downstream of both"), "{e}");
    let e = error_of(&deeper.replace(
        &format!("token_file = \"{d}/c.token\""),
        &format!("token_file = \"{d}/c.token\"\ndownstream = [\"a\"]"),
    ));
    assert!(e.contains("form a loop"), "{e}");
    let e = error_of(&tree.replace(
        &format!("url = \"haul://b.example:7878/sst\"\ntoken_file = \"{d}/b.token\""),
        "url = \"haul@far.example:/srv/b\"",
    ));
    assert!(e.contains("must be a running node"), "{e}");
    let e = error_of(&tree.replace(
        &format!("url = \"haul://a.example:7878/sst\"\ntoken_file = \"{d}/a.token\""),
        "url = \"haul@far.example:/srv/a\"",
    ));
    assert!(e.contains("--jump-to"), "{e}");
}

#[test]
fn sites_over_ssh_serve_their_directory_and_may_share_a_host() {
    let dir = tempfile::tempdir().unwrap();
    // An ssh site's node offers its own token and key: none is given.
    let d = dir.path().display();
    let text = with_sites(dir.path())
        .replace(
            &format!("url = \"haul://a.example:7878/sst\"\ntoken_file = \"{d}/a.token\""),
            "url = \"haul@far.example:/srv/sst\"\nrsh = \"ssh -p 2222\"",
        )
        .replace(
            &format!("url = \"haul://b.example:7878/sst\"\ntoken_file = \"{d}/b.token\""),
            "url = \"haul@far.example:/srv/other\"",
        );
    let c = parse(&text).unwrap();
    assert!(
        matches!(&c.sites[0].at, NodeAt::Ssh(at) if at.path == "/srv/sst/" && at.host == "far.example"),
        "{:?}",
        c.sites[0].at
    );
    assert_eq!(c.sites[0].client.ssh.rsh, ["ssh", "-p", "2222"]);
    assert_eq!(c.sites[1].at.shown(), "haul@far.example:/srv/other/");
    // One directory twice, and a key the ssh offer overrides: refused.
    let twice = text.replace("/srv/other", "/srv/sst/");
    assert!(
        error_of(&twice).contains("one site per node"),
        "{}",
        error_of(&twice)
    );
    // ssh_tunnel: that site is fed through its ssh channel, never a relay.
    let tunnelled = parse(&text.replace("rsh = ", "ssh_tunnel = true\nrsh = ")).unwrap();
    assert!(tunnelled.sites[0].client.ssh.tunnel);
    let e = error_of(&text.replace("rsh = ", "plaintext = true\nrsh = "));
    assert!(e.contains("plaintext is for a haul:// node"), "{e}");
    let e = error_of(&with_sites(dir.path()).replace("haul://a.example:7878/sst", "/local/sst"));
    assert!(e.contains("not a haul node"), "{e}");
}

#[test]
fn the_issues_config_with_sites_parses() {
    let dir = tempfile::tempdir().unwrap();
    let c = parse(&with_sites(dir.path())).unwrap();
    assert_eq!(c.sites.len(), 2);
    assert!(
        matches!(&c.sites[0].at, NodeAt::Haul(u) if u.addr == "a.example:7878" && u.path.trim_matches('/') == "sst")
    );
    assert_eq!(c.sites[1].client.token, "t-b");
    let s = &c.sources[0];
    assert_eq!(s.deliver, ["a", "b"]);
    assert!(s.keep_local);
    assert_eq!(s.catch_up, haul_catalog::CatchUp::Oldest);
}

/// `keep`: on the deliveries of a source with sites (and a node
/// source's pulls); an FTP/SFTP/HTTP/S3 source without sites is told
/// it has nothing to keep, an unknown name what `keep` takes.
#[test]
fn keep_is_for_node_pulls_and_deliveries() {
    let dir = tempfile::tempdir().unwrap();
    let with = |text: &str, keep: &str| {
        text.replace("include = [", &format!("keep = {keep}\ninclude = ["))
    };
    let c = parse(&with(&with_sites(dir.path()), r#"["archive", "xattrs"]"#)).unwrap();
    let k = c.sources[0].keep;
    assert!(k.owner && k.group && k.xattrs && !k.acls);
    assert_eq!(
        parse(MINIMAL).unwrap().sources[0].keep,
        haul_proto::Keep::default()
    );
    let e = error_of(&with(MINIMAL, r#"["xattrs"]"#));
    assert!(e.contains("carries no owners or attributes"), "{e}");
    let e = error_of(&with(&with_sites(dir.path()), r#"["xattr"]"#));
    assert!(e.contains("keep: \"xattr\" is not one of"), "{e}");
}

#[test]
fn site_errors_say_what_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let base = with_sites(dir.path());
    let e = error_of(&base.replace(r#"deliver = ["a", "b"]"#, r#"deliver = ["a", "c"]"#));
    assert!(
        e.contains(r#"deliver names "c""#) && e.contains("the sites are a, b"),
        "{e}"
    );
    let e = error_of(&base.replace(r#"deliver = ["a", "b"]"#, "keep_local = false"));
    assert!(
        e.contains("keep_local = false") && e.contains("delivers to no site"),
        "{e}"
    );
    let e = error_of(&base.replace(
        r#"deliver = ["a", "b"]"#,
        "deliver = [\"a\"]\ncatch_up = \"latest\"",
    ));
    assert!(e.contains(r#"use "oldest" or "newest""#), "{e}");
    let e = error_of(&base.replace("haul://a.example:7878/sst", "ftp://a.example/sst"));
    assert!(
        e.contains("[[site]] \"a\"") && e.contains("haul://HOST:PORT/DIR"),
        "{e}"
    );
    let e = error_of(&base.replace(
        &format!("{}/b.token", dir.path().display()),
        "/nonexistent/b.token",
    ));
    assert!(
        e.contains("[[site]] \"b\"") && e.contains("/nonexistent/b.token"),
        "{e}"
    );
    let e = error_of(&base.replace("haul://b.example", "haul://a.example"));
    assert!(e.contains("one site per node"), "{e}");
}

#[test]
fn a_transfer_log_needs_a_file_and_a_known_format() {
    let set = |v: &str| MINIMAL.replace("status =", &format!("{v}\nstatus ="));
    assert!(parse(MINIMAL).unwrap().log.is_none());
    let log = parse(&set("log_file = \"/tmp/t.log\"")).unwrap().log;
    assert_eq!(log, Some(("/tmp/t.log".into(), haul_node::LogFormat::Text)));
    let json = set("log_file = \"/tmp/t.log\"\nlog_format = \"json\"");
    assert_eq!(
        parse(&json).unwrap().log.map(|l| l.1),
        Some(haul_node::LogFormat::Json)
    );
    let e = parse(&set("log_format = \"json\""))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("log_format needs a log_file"), "{e}");
    let e = format!(
        "{:#}",
        parse(&set("log_file = \"/tmp/t.log\"\nlog_format = \"xml\""))
            .err()
            .unwrap()
    );
    assert!(e.contains("use text or json"), "{e}");
    let e = format!("{:#}", parse(&set("log_file = \"t.log\"")).err().unwrap());
    assert!(e.contains("log_file must be an absolute path"), "{e}");
}

#[test]
fn partial_ttl_is_a_week_unless_set_as_an_age_or_off() {
    assert_eq!(
        parse(MINIMAL).unwrap().partial_ttl,
        Some(DEFAULT_PARTIAL_TTL)
    );
    let set = |v: &str| MINIMAL.replace("status =", &format!("partial_ttl = \"{v}\"\nstatus ="));
    assert_eq!(
        parse(&set("12h")).unwrap().partial_ttl,
        Some(Duration::from_secs(12 * 3600))
    );
    assert_eq!(parse(&set("off")).unwrap().partial_ttl, None);
    let e = error_of(&set("a while"));
    assert!(e.contains("line 2") && e.contains("partial_ttl"), "{e}");
}

fn error_of(text: &str) -> String {
    format!("{:#}", parse(text).err().unwrap())
}

#[test]
fn the_consoles_token_from_the_config_or_a_file() {
    let with = |line: &str| MINIMAL.replace("status =", &format!("{line}\nstatus ="));
    assert_eq!(parse(MINIMAL).unwrap().status_token, None);
    let c = parse(&with("status_token = \"0123456789abcdef\"")).unwrap();
    assert_eq!(c.status_token.as_deref(), Some("0123456789abcdef"));
    let e = error_of(&with("status_token = \"short\""));
    assert!(e.contains("line 2") && e.contains("at least 16"), "{e}");
    let e = error_of(&with("status_token = \"0123456789 abcdef\""));
    assert!(e.contains("without spaces"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("status.token");
    std::fs::write(&file, "fedcba9876543210fedc\nignored\n").unwrap();
    let c = parse(&with(&format!(
        "status_token_file = {:?}",
        file.display().to_string()
    )))
    .unwrap();
    assert_eq!(c.status_token.as_deref(), Some("fedcba9876543210fedc"));
    let both = format!(
        "status_token = \"0123456789abcdef\"\nstatus_token_file = {:?}",
        file.display().to_string()
    );
    assert!(error_of(&with(&both)).contains("both set"));
    let e = error_of(&with("status_token_file = \"/nonexistent/haul.token\""));
    assert!(e.contains("cannot read it"), "{e}");
}

#[test]
fn errors_name_the_line() {
    let typo = MINIMAL.replace("schedule =", "shedule =");
    let e = error_of(&typo);
    assert!(
        e.contains("line 8") && e.contains("unknown field `shedule`"),
        "{e}"
    );
    let bad = MINIMAL.replace("every 10m", "every ten minutes");
    let e = error_of(&bad);
    assert!(e.contains("line 8") && e.contains("schedule"), "{e}");
    let bad = format!("{MINIMAL}refetch = \"always\"\n");
    let e = error_of(&bad);
    assert!(e.contains("line 10") && e.contains("if-changed"), "{e}");
    let bad = MINIMAL.replace("127.0.0.1:9464", "localhost");
    assert!(error_of(&bad).contains("line 2"));
    let bad = MINIMAL.replace("https://archive", "gopher://archive");
    assert!(error_of(&bad).contains("line 6"));
    let bad = format!("{MINIMAL}min_size = \"lots\"\n");
    assert!(
        error_of(&bad).contains("\"sst\" (line 4)"),
        "{}",
        error_of(&bad)
    );
}

#[test]
fn staging_must_share_the_destinations_filesystem() {
    use std::os::unix::fs::MetadataExt;
    let here = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    assert_ne!(
        std::fs::metadata(here.path()).unwrap().dev(),
        std::fs::metadata(shm.path()).unwrap().dev(),
        "this test needs /dev/shm on another filesystem than the temp dir"
    );
    let config = |staging: &Path| {
        format!(
                "catalog = \"sqlite:/tmp/c.db\"\nstaging = {:?}\n\n[[source]]\nname = \"a/b\"\nurl = \"https://h/x/\"\ndest = {:?}\nschedule = \"every 1m\"\n",
                staging.display().to_string(),
                here.path().join("data/new").display().to_string(),
            )
    };
    // Same filesystem (neither exists yet): each source stages in a
    // directory of its own, its name made one path component.
    let c = parse(&config(&here.path().join("stage"))).unwrap();
    assert_eq!(c.staging, Some(here.path().join("stage")));
    assert_eq!(
        c.sources[0].staging,
        Some(here.path().join("stage").join("a%2Fb"))
    );
    let e = error_of(&config(&shm.path().join("stage")));
    assert!(
        e.contains("line 2")
            && e.contains("\"a/b\"")
            && e.contains("rename(2), which cannot cross filesystems"),
        "{e}"
    );
    let e = error_of(&MINIMAL.replace("status =", "staging = \"relative/dir\"\nstatus ="));
    assert!(e.contains("line 2") && e.contains("absolute path"), "{e}");
    // Without staging, each dest keeps its own.
    assert_eq!(parse(MINIMAL).unwrap().sources[0].staging, None);
}

#[test]
fn cron_and_options() {
    let text = MINIMAL.replace("every 10m", "*/15 * * * *")
            + "refetch = \"if-changed\"\njobs = 4\nstreams = 2\njitter = \"30s\"\nexclude = [\"tmp/\"]\n";
    let c = parse(&text).unwrap();
    let s = &c.sources[0];
    assert_eq!(s.refetch, Refetch::IfChanged);
    assert_eq!(s.transfer.jobs, "4");
    assert_eq!(s.jitter, Duration::from_secs(30));
    assert_eq!(s.rules[0].0, haul_fetch::RuleKind::Exclude);
}

/// The same settings in the daemon's TOML and as `haul pull` flags give
/// the same options: each default comes from the flag's definition.
#[test]
fn the_daemon_and_the_cli_give_equal_options_for_equal_settings() {
    use clap::Parser;
    let pull = |flags: &[&str]| {
        let mut argv = vec![
            "haul",
            "pull",
            "https://archive.example/pub/sst/",
            "/data/sst",
        ];
        argv.extend_from_slice(flags);
        match crate::cli::Cli::try_parse_from(argv).unwrap().command {
            crate::cli::Command::Pull(p) => p,
            _ => unreachable!("a pull"),
        }
    };
    let cases: [(&str, &[&str]); 2] = [
            ("", &[]),
            (
                "jobs = 4\nstreams = 2\nsplit_min = \"32M\"\ntimeout = 30\nretries = 3\nmax_conn = 2\nregex = \"nc$\"\n",
                &["-j", "4", "--streams", "2", "--split-min", "32M", "--timeout", "30", "--retries", "3", "--max-conn-per-host", "2", "--regex", "nc$"],
            ),
        ];
    for (keys, flags) in cases {
        let config = MINIMAL.replace("include = [\"*.nc\"]\n", keys);
        let daemon = &parse(&config).unwrap().sources[0];
        let cli = pull(flags);
        assert_eq!(
            format!("{:?}", daemon.transfer),
            format!("{:?}", cli.transfer),
            "{keys}"
        );
        assert_eq!(
            format!("{:?}", daemon.remote),
            format!("{:?}", cli.remote),
            "{keys}"
        );
    }
}
