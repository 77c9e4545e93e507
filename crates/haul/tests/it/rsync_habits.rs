//! What rsync's users type and what their scripts read: `-avP` and its
//! friends accepted, `--exclude-from`, `-v` naming each file sent, dry
//! runs that list only changes, a tip for rsync's flags haul lacks, and
//! exit codes by cause (real `haul serve` nodes on 127.0.0.1).

use std::path::Path;
use std::time::Duration;

use crate::harness::*;

const T: Duration = Duration::from_secs(120);

fn local_copy(config: &Path, flags: &[&str], src: &Path, dst: &Path) -> std::process::Output {
    let mut c = haul(config);
    c.arg("pull").args(flags);
    c.arg(format!("{}/", src.display())).arg(dst);
    run(c, T)
}

/// `--json` says which fields of each entry changed, `-i` or not.
#[test]
fn json_names_the_fields_that_changed() {
    let s = Scratch::new();
    let (src, dst) = (s.path("src"), s.path("dst"));
    write_file(&src.join("grown"), 200, 1);
    write_file(&dst.join("grown"), 100, 1);
    write_file(&src.join("new"), 10, 2);
    let out = local_copy(&s.path("config"), &["--json"], &src, &dst);
    ok(&out);
    let fields = |path: &str| {
        crate::remote::events(&out)
            .into_iter()
            .find(|e| e["event"] == "itemized" && e["path"] == path)
            .map(|e| e["fields"].clone())
    };
    assert_eq!(fields("grown"), Some(serde_json::json!(["size"])));
    assert_eq!(fields("new"), Some(serde_json::json!(["new"])));
}

#[test]
fn avp_and_exclude_from_are_taken_and_v_names_each_file_sent() {
    let s = Scratch::new();
    let src = s.path("src");
    write_file(&src.join("a.nc"), 5000, 1);
    write_file(&src.join("sub/b.nc"), 100, 2);
    write_file(&src.join("sub/c.nc"), 0, 3);
    write_file(&src.join("scratch.tmp"), 100, 4);
    write_file(&src.join("cache/d.nc"), 100, 5);
    let rules = s.path("excludes");
    std::fs::write(
        &rules,
        "# rsync's format: one pattern a line\n+ keep.tmp\n*.tmp\n\ncache/\n",
    )
    .unwrap();
    write_file(&src.join("keep.tmp"), 10, 6);
    let dst = s.path("dst");
    // `-h` is rsync's --human-readable, never help: `-avh` copies.
    let flags = [
        "-avhP",
        "--stats",
        "-rtlpD",
        "--exclude-from",
        rules.to_str().unwrap(),
    ];

    let out = local_copy(&s.path("config"), &flags, &src, &dst);
    ok(&out);
    let mut named = stdout_lines(&out);
    named.sort();
    assert_eq!(
        named,
        ["a.nc", "keep.tmp", "sub/b.nc", "sub/c.nc"],
        "{}",
        said(&out)
    );
    assert!(!dst.join("scratch.tmp").exists() && !dst.join("cache").exists());
    assert_eq!(b3(&dst.join("a.nc")), b3(&src.join("a.nc")));

    // Again: nothing moves, nothing is named.
    let out = local_copy(&s.path("config"), &flags, &src, &dst);
    ok(&out);
    assert_eq!(stdout_lines(&out), Vec::<String>::new(), "{}", said(&out));

    // One file changed: it alone is named.
    write_file(&src.join("sub/b.nc"), 200, 9);
    let out = local_copy(&s.path("config"), &flags, &src, &dst);
    ok(&out);
    assert_eq!(stdout_lines(&out), ["sub/b.nc"], "{}", said(&out));
    assert_eq!(b3(&dst.join("sub/b.nc")), b3(&src.join("sub/b.nc")));
}

#[test]
fn a_dry_run_lists_what_would_change_and_vv_everything() {
    let s = Scratch::new();
    let src = s.path("src");
    for i in 0..5 {
        write_file(&src.join(format!("f{i}")), 100, i);
    }
    let dst = s.path("dst");
    ok(&local_copy(&s.path("config"), &[], &src, &dst));
    write_file(&src.join("f3"), 300, 33);

    let out = local_copy(&s.path("config"), &["-n"], &src, &dst);
    ok(&out);
    let lines = stdout_lines(&out);
    let entries: Vec<_> = lines
        .iter()
        .filter(|l| !l.starts_with("dry run:"))
        .collect();
    assert_eq!(entries.len(), 1, "{lines:?}");
    assert!(
        entries[0].starts_with("send") && entries[0].contains("f3"),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("1 file") && l.contains("4 up to date")),
        "the totals still count what is up to date: {lines:?}"
    );

    let out = local_copy(&s.path("config"), &["-n", "-vv"], &src, &dst);
    ok(&out);
    let up = stdout_lines(&out)
        .iter()
        .filter(|l| l.starts_with("up to date"))
        .count();
    assert_eq!(up, 4, "{}", said(&out));
}

#[test]
fn rsyncs_other_flags_say_what_haul_does_instead() {
    let s = Scratch::new();
    write_file(&s.path("src/a"), 10, 1);
    for (flags, words) in [
        (
            &["-avz", "--zc=lz4"][..],
            "--zc is rsync's; haul compresses with zstd only",
        ),
        (&["-L"][..], "sends symlinks as symlinks"),
        (&["--delete-after"][..], "use --delete"),
        (&["--inplace"][..], "never writes a file in place"),
    ] {
        let mut c = haul(&s.path("config"));
        c.arg("push")
            .args(flags)
            .arg(s.path("src"))
            .arg("haul://127.0.0.1:9/in");
        let out = run(c, T);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(words), "{flags:?}: {err}");
        assert!(!err.contains("as a value"), "{flags:?}: {err}");
    }
    // -c compares content: with --ignore-existing it would replace what
    // that keeps, so the two are refused together.
    let mut c = haul(&s.path("config"));
    c.args(["push", "-c", "--ignore-existing"])
        .arg(s.path("src"))
        .arg("haul://127.0.0.1:9/in");
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    // --help is still help.
    let mut c = haul(&s.path("config"));
    c.args(["push", "--help"]);
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--exclude-from"));
    // A flag rsync does not have either: clap's own words.
    let mut c = haul(&s.path("config"));
    c.args(["push", "--frobnicate"])
        .arg(s.path("src"))
        .arg("haul://127.0.0.1:9/in");
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--frobnicate"), "{}", stderr(&out));
}

/// A port on 127.0.0.1 that nothing listens on (bound, then let go).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

#[test]
fn exit_codes_say_unreachable_refused_and_timed_out() {
    let s = Scratch::new();
    write_file(&s.path("src/a"), 10, 1);
    let push = |url: String, extra: &[&str]| {
        let mut c = haul(&s.path("config"));
        c.args(["push", "--retries", "0", "--timeout", "2"])
            .args(extra)
            .arg(s.path("src"))
            .arg(url);
        run(c, T)
    };

    let out = push(
        format!("haul://127.0.0.1:{}/in", closed_port()),
        &["--token", "t"],
    );
    assert_eq!(
        out.status.code(),
        Some(10),
        "nothing listens: {}",
        said(&out)
    );

    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "right"]);
    let out = push(node.url("in"), &["--token", "wrong"]);
    assert_eq!(out.status.code(), Some(5), "a wrong token: {}", said(&out));

    // A listener that never answers: the handshake times out.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("haul://{}/in", silent.local_addr().expect("addr"));
    let out = push(url, &["--plaintext", "--token", "t"]);
    assert_eq!(out.status.code(), Some(30), "a silent node: {}", said(&out));
    drop(silent);

    let help = run(
        {
            let mut c = haul(&s.path("config"));
            c.arg("--help");
            c
        },
        T,
    );
    let text = String::from_utf8_lossy(&help.stdout);
    for code in ["23", "24", "30", "35", "10", "41"] {
        assert!(
            text.contains(&format!("  {code}  ")),
            "--help lists {code}: {text}"
        );
    }
}

/// A file removed after it was listed and before it was read: the others
/// arrive, and the run exits 24 as rsync's does.
#[test]
fn a_source_file_that_vanishes_mid_push_exits_24() {
    let s = Scratch::new();
    // `z-gone` comes last in the walk, while about 5 s of data at 2 MB/s
    // is still to go: whether its turn has come (its read then sees it
    // unlinked and its reopen finds nothing) or not (its open finds
    // nothing), it has vanished.
    for i in 0..150 {
        write_file(&s.path(&format!("src/m{i:03}")), 64 << 10, i);
    }
    write_file(&s.path("src/z-gone"), 1000, 999);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let mut c = haul(&s.path("config"));
    c.args([
        "push",
        "--json",
        "-j",
        "1",
        "--max-rate",
        "2M",
        "--token",
        "t",
    ])
    .arg(format!("{}/", s.path("src").display()))
    .arg(node.url("in"));
    with_test_transport(&mut c);
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("spawn");
    // Removed once the walk listed it (a file gone before it is listed is
    // simply not there, as for rsync).
    let stdout = child.stdout.take().expect("stdout");
    let (listed_tx, listed) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("\"listing_done\"") {
                let _ = listed_tx.send(());
            }
            lines.push(line);
        }
        lines
    });
    listed.recv_timeout(T).expect("the walk ended");
    std::fs::remove_file(s.path("src/z-gone")).expect("rm");
    let status = child.wait().expect("wait");
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    let stdout = reader.join().expect("reader").join("\n");
    let out = std::process::Output {
        status,
        stdout: stdout.into_bytes(),
        stderr: stderr.into_bytes(),
    };
    let sum = summary(&out);
    assert_eq!(out.status.code(), Some(24), "{}", sum["failures"]);
    assert_eq!(sum["failed"], 1, "{sum}");
    assert_eq!(sum["failures"][0]["path"], "z-gone", "{sum}");
    assert_eq!(sum["failures"][0]["kind"], "vanished", "{sum}");
    assert_eq!(b3(&s.path("node/in/m149")), b3(&s.path("src/m149")));
    assert!(!s.path("node/in/z-gone").exists());
}

/// `--max-delete N` with `--delete`: more than N to go, none goes (exit
/// 25), for a local copy and a push to a node alike; N enough, they go.
#[test]
fn max_delete_keeps_everything_when_more_would_go() {
    let s = Scratch::new();
    write_file(&s.path("src/keep"), 100, 1);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let dst = s.path("dst");
    for i in 0..3 {
        write_file(&dst.join(format!("stale{i}")), 10, i);
        write_file(&s.path(&format!("node/in/stale{i}")), 10, i);
    }
    let src = format!("{}/", s.path("src").display());
    let push = |flags: &[&str]| {
        let mut c = haul(&s.path("config"));
        c.args(["push", "--json", "--token", "t", "--delete"])
            .args(flags)
            .arg(&src)
            .arg(node.url("in"));
        run(c, T)
    };

    let out = local_copy(
        &s.path("config"),
        &["--delete", "--max-delete", "2"],
        &s.path("src"),
        &dst,
    );
    assert_eq!(out.status.code(), Some(25), "{}", said(&out));
    assert!(
        stderr(&out).contains("more than --max-delete 2"),
        "{}",
        stderr(&out)
    );
    assert!((0..3).all(|i| dst.join(format!("stale{i}")).exists()));
    assert_eq!(b3(&dst.join("keep")), b3(&s.path("src/keep")));
    let out = push(&["--max-delete", "2"]);
    assert_eq!(out.status.code(), Some(25), "{}", said(&out));
    assert_eq!(summary(&out)["failures"][0]["kind"], "delete_limit");
    assert!((0..3).all(|i| s.path(&format!("node/in/stale{i}")).exists()));

    let out = local_copy(
        &s.path("config"),
        &["--delete", "--max-delete", "3"],
        &s.path("src"),
        &dst,
    );
    ok(&out);
    assert!((0..3).all(|i| !dst.join(format!("stale{i}")).exists()));
    ok(&push(&["--max-delete", "3"]));
    assert!((0..3).all(|i| !s.path(&format!("node/in/stale{i}")).exists()));

    // Without --delete it means nothing: refused as a mistake.
    let out = local_copy(
        &s.path("config"),
        &["--max-delete", "3"],
        &s.path("src"),
        &dst,
    );
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
}

/// rclone's `--max-age` and `--min-age`: files younger, and older, than an
/// age.
#[test]
fn max_age_and_min_age_pick_files_by_age() {
    let s = Scratch::new();
    let src = s.path("src");
    write_file(&src.join("new"), 10, 1);
    write_file(&src.join("old"), 10, 2);
    let f = std::fs::File::options()
        .write(true)
        .open(src.join("old"))
        .unwrap();
    f.set_modified(std::time::SystemTime::now() - Duration::from_secs(10 * 86400))
        .unwrap();
    drop(f);
    let out = local_copy(&s.path("config"), &["--min-age", "2d"], &src, &s.path("a"));
    ok(&out);
    assert!(s.path("a/old").exists() && !s.path("a/new").exists());
    let out = local_copy(&s.path("config"), &["--max-age", "2d"], &src, &s.path("b"));
    ok(&out);
    assert!(!s.path("b/old").exists() && s.path("b/new").exists());
    // A push and a pull from a node pick the same way; --include-from
    // takes its rules from a file, one kind of rule.
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let mut c = haul(&s.path("config"));
    c.args(["push", "--token", "t", "--min-age", "2d"])
        .arg(format!("{}/", src.display()))
        .arg(node.url("in"));
    ok(&run(c, T));
    assert!(s.path("node/in/old").exists() && !s.path("node/in/new").exists());
    write_file(&s.path("node/in/fresh"), 10, 3);
    let rules = s.path("includes");
    std::fs::write(&rules, "# taken\nfresh\n").unwrap();
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--token", "t", "--max-age", "2d", "--include-from"])
        .arg(&rules)
        .args(["--exclude", "*"])
        .arg(format!("{}/", node.url("in")))
        .arg(s.path("c"));
    ok(&run(c, T));
    assert!(s.path("c/fresh").exists() && !s.path("c/old").exists());
}

/// rsync's `--ignore-existing`, `--size-only` and `-u`: what DEST already
/// has is kept by each rule, for a local copy and a push to a node alike
/// (`-v` names what was sent).
#[test]
fn ignore_existing_size_only_and_update_keep_what_they_say() {
    let s = Scratch::new();
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let other = Node::start(&s.path("other"), &s.path("config"), &["--token", "t"]);
    let now = std::time::SystemTime::now();
    let age = |p: &Path, secs: u64| {
        let f = std::fs::File::options().write(true).open(p).unwrap();
        f.set_modified(now - Duration::from_secs(secs)).unwrap();
    };
    let src = s.path("src");
    for (name, seed) in [("a", 1), ("b", 2), ("c", 3), ("d", 4)] {
        write_file(&src.join(name), 100, seed);
        age(&src.join(name), 1000);
    }
    // DEST: `a` older and of another size, `b` older and of the same
    // size, `c` newer and of another size; no `d`.
    let fill = |dst: &Path| {
        write_file(&dst.join("a"), 200, 9);
        age(&dst.join("a"), 2000);
        write_file(&dst.join("b"), 100, 8);
        age(&dst.join("b"), 2000);
        write_file(&dst.join("c"), 150, 7);
        age(&dst.join("c"), 10);
    };
    for (flag, sent) in [
        ("--ignore-existing", &["d"][..]),
        ("--size-only", &["a", "c", "d"][..]),
        ("-u", &["a", "b", "d"][..]),
        ("-v", &["a", "b", "c", "d"][..]),
    ] {
        let dst = s.path(&format!("copy{flag}"));
        fill(&dst);
        // The dry run says the same.
        let out = local_copy(&s.path("config"), &["-n", flag], &src, &dst);
        ok(&out);
        let mut would: Vec<String> = stdout_lines(&out)
            .iter()
            .filter_map(|l| l.strip_prefix("send"))
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect();
        would.sort();
        assert_eq!(would, sent, "dry run {flag}: {}", said(&out));
        let out = local_copy(&s.path("config"), &["-v", flag], &src, &dst);
        ok(&out);
        let mut named = stdout_lines(&out);
        named.sort();
        assert_eq!(named, sent, "local copy {flag}: {}", said(&out));
        for name in ["a", "b", "c"] {
            // Every kept file differs from the source's by construction.
            let same = b3(&dst.join(name)) == b3(&src.join(name));
            assert_eq!(same, sent.contains(&name), "local copy {flag} {name}");
        }

        let at = format!("in{flag}");
        let held = s.path(&format!("node/{at}"));
        fill(&held);
        let mut c = haul(&s.path("config"));
        c.args(["push", "-v", flag, "--token", "t"])
            .arg(format!("{}/", src.display()))
            .arg(node.url(&at));
        let out = run(c, T);
        ok(&out);
        let mut named = stdout_lines(&out);
        named.sort();
        assert_eq!(named, sent, "push {flag}: {}", said(&out));
        for name in ["a", "b", "c", "d"] {
            let same = b3(&held.join(name)) == b3(&src.join(name));
            assert_eq!(same, sent.contains(&name), "push {flag} {name}");
        }

        // A fan-out: the first node holds DEST's files and keeps what the
        // rule keeps; the second, fed through it, lacks them and gets all.
        let at = format!("fan{flag}");
        let held = s.path(&format!("node/{at}"));
        fill(&held);
        let mut c = haul(&s.path("config"));
        c.args(["push", flag, "--token", "t"])
            .arg(format!("{}/", src.display()))
            .arg(node.url(&at))
            .arg(other.url(&at));
        let out = run(c, T);
        ok(&out);
        for name in ["a", "b", "c", "d"] {
            let same = b3(&held.join(name)) == b3(&src.join(name));
            assert_eq!(same, sent.contains(&name), "fan-out {flag} {name}");
            let there = s.path(&format!("other/{at}/{name}"));
            assert_eq!(b3(&there), b3(&src.join(name)), "fan-out {flag} {name}");
        }
    }
}

/// rsync's `--files-from` (and `-0`): only the paths listed, relative to
/// the source's top, a directory with all beneath it; the same for a local
/// copy, a push to a node and a pull from it.
#[test]
fn files_from_takes_only_the_paths_listed() {
    let s = Scratch::new();
    let src = s.path("src");
    for p in ["a/x.nc", "a/y.nc", "b/deep/z", "c", "d e", "skip/me"] {
        write_file(&src.join(p), 10, p.len() as u64);
    }
    let list = s.path("list");
    std::fs::write(&list, "a/x.nc\n./b/\n# a comment\nd e\n").unwrap();
    let taken = ["a/x.nc", "b/deep/z", "d e"];
    let check = |root: &Path| {
        for p in ["a/x.nc", "a/y.nc", "b/deep/z", "c", "d e", "skip/me"] {
            assert_eq!(
                root.join(p).exists(),
                taken.contains(&p),
                "{}: {p}",
                root.display()
            );
        }
        assert!(!root.join("skip").exists(), "no directory made for nothing");
    };
    let flags = ["--files-from", list.to_str().unwrap()];
    ok(&local_copy(
        &s.path("config"),
        &flags,
        &src,
        &s.path("copy"),
    ));
    check(&s.path("copy"));

    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let nul = s.path("list0");
    std::fs::write(&nul, "a/x.nc\0b\0d e\0").unwrap();
    let mut c = haul(&s.path("config"));
    c.args(["push", "-0", "--token", "t", "--files-from"])
        .arg(&nul)
        .arg(format!("{}/", src.display()))
        .arg(node.url("in"));
    ok(&run(c, T));
    check(&s.path("node/in"));

    // A pull from the node takes the same paths; one the node does not
    // have fails (rsync's "link_stat failed", exit 23), the others land.
    let missing = s.path("list-missing");
    std::fs::write(&missing, "a/x.nc\nb\nd e\nnot/there\n").unwrap();
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--json", "--token", "t", "--files-from"])
        .arg(&missing)
        .arg(format!("{}/", node.url("in")))
        .arg(s.path("back"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(23), "{}", said(&out));
    check(&s.path("back"));
    let sum = summary(&out);
    assert_eq!(sum["failed"], 1, "{sum}");
    assert_eq!(sum["failures"][0]["path"], "not/there", "{sum}");
    assert!(said(&out).contains("--files-from"), "{}", said(&out));
    // Its dry run says the same.
    let mut c = haul(&s.path("config"));
    c.args(["pull", "-n", "--token", "t", "--files-from"])
        .arg(&missing)
        .arg(format!("{}/", node.url("in")))
        .arg(s.path("back"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(23), "{}", said(&out));
    assert!(said(&out).contains("not/there"), "{}", said(&out));
    // A named entry the node skips (a FIFO: it says so) is not called
    // missing: the listing was not whole.
    let fifo = s.path("node/in/fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    std::fs::write(&missing, "a/x.nc\nfifo\n").unwrap();
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--json", "--token", "t", "--files-from"])
        .arg(&missing)
        .arg(format!("{}/", node.url("in")))
        .arg(s.path("back2"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(s.path("back2/a/x.nc").exists());

    // A list written relative to another directory: refused, nothing sent.
    std::fs::write(&list, "a/x.nc\nsrc/c\n").unwrap();
    let out = local_copy(&s.path("config"), &flags, &src, &s.path("wrong"));
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(stderr(&out).contains("\"src/c\""), "{}", stderr(&out));
    assert!(!s.path("wrong/a/x.nc").exists());

    std::fs::write(&list, "../etc/passwd\n").unwrap();
    let out = local_copy(&s.path("config"), &flags, &src, &s.path("other"));
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(stderr(&out).contains("climbs out"), "{}", stderr(&out));
}

/// rsync's `--delete-excluded`: `--delete` keeps what the filters leave
/// out; with it, that goes too — for a local copy and a push alike.
#[test]
fn delete_excluded_removes_what_the_rules_leave_out() {
    let s = Scratch::new();
    write_file(&s.path("src/keep.nc"), 10, 1);
    write_file(&s.path("src/new.log"), 10, 2);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let dst = s.path("dst");
    let stale = |root: &Path| {
        write_file(&root.join("old.log"), 10, 3);
        write_file(&root.join("gone.nc"), 10, 4);
    };
    stale(&dst);
    stale(&s.path("node/in"));
    let src = s.path("src");
    let flags = |extra: &'static str| vec!["--exclude", "*.log", extra];

    // -v names each deletion on stdout, as rsync's does.
    let mut verbose = flags("--delete");
    verbose.push("-v");
    let out = local_copy(&s.path("config"), &verbose, &src, &dst);
    ok(&out);
    assert!(dst.join("old.log").exists() && !dst.join("gone.nc").exists());
    assert!(
        stdout_lines(&out).contains(&"deleting gone.nc".to_owned()),
        "{}",
        said(&out)
    );
    assert!(!dst.join("new.log").exists());
    let out = local_copy(&s.path("config"), &flags("--delete-excluded"), &src, &dst);
    ok(&out);
    assert!(!dst.join("old.log").exists() && dst.join("keep.nc").exists());

    let push = |extra: &'static str| {
        let mut c = haul(&s.path("config"));
        c.args(["push", "--token", "t"])
            .args(flags(extra))
            .arg(format!("{}/", src.display()))
            .arg(node.url("in"));
        run(c, T)
    };
    ok(&push("--delete"));
    assert!(s.path("node/in/old.log").exists() && !s.path("node/in/gone.nc").exists());
    ok(&push("--delete-excluded"));
    assert!(!s.path("node/in/old.log").exists() && s.path("node/in/keep.nc").exists());
}

#[test]
fn log_file_appends_a_line_per_file_sent_received_or_failed() {
    let s = Scratch::new();
    write_file(&s.path("src/a.bin"), 5000, 1);
    write_file(&s.path("src/sub/b.bin"), 10, 2);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let log = s.path("haul.log");
    let from = format!("{}/", s.path("src").display());
    let mut c = haul(&s.path("config"));
    c.args(["push", "--token", "t", "--log-file"])
        .arg(&log)
        .arg(&from)
        .arg(node.url("in"));
    ok(&run(c, T));
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].contains(" connection ") && lines[0].contains("request=push"),
        "{text}"
    );
    for f in ["a.bin", "sub/b.bin"] {
        assert!(
            lines
                .iter()
                .any(|l| l.contains("file_sent") && l.contains(&format!("path=\"{f}\""))),
            "{f}: {text}"
        );
    }
    // A pull appends JSON lines: the run, then each file received.
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--token", "t", "--log-format", "json", "--log-file"])
        .arg(&log)
        .arg(format!("{}/", node.url("in")))
        .arg(s.path("back"));
    ok(&run(c, T));
    let text = std::fs::read_to_string(&log).unwrap();
    let json: Vec<serde_json::Value> = text
        .lines()
        .skip(3)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(json[0]["event"], "connection", "{text}");
    let received: Vec<&str> = json
        .iter()
        .filter(|v| v["event"] == "file_received")
        .map(|v| v["path"].as_str().unwrap())
        .collect();
    assert_eq!(received.len(), 2, "{text}");
    assert!(json.iter().all(|v| v["event"] != "file_failed"), "{text}");

    // What --delete removes is logged too.
    write_file(&s.path("node/in/extra"), 10, 3);
    let mut c = haul(&s.path("config"));
    c.args(["push", "--token", "t", "--delete", "--log-file"])
        .arg(&log)
        .arg(&from)
        .arg(node.url("in"));
    ok(&run(c, T));
    let text = std::fs::read_to_string(&log).unwrap();
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("20") && last.contains(" deleted ") && last.contains("path=\"extra\""),
        "{text}"
    );
}

#[test]
fn max_transfer_starts_no_file_after_its_limit_and_exits_8() {
    // Twelve 1 MiB files, a 3 MiB limit, one connection: a few files land
    // (those started before the limit was reached), the rest are left, the
    // run says so once and exits 8; the next run sends the rest. A push to
    // a node stops the same way.
    let s = Scratch::new();
    let src = s.path("src");
    for i in 0..12 {
        write_file(&src.join(format!("f{i:02}")), 1 << 20, i);
    }
    let dst = s.path("dst");
    let out = local_copy(
        &s.path("config"),
        &["--max-transfer", "3M", "-j", "1", "--json"],
        &src,
        &dst,
    );
    assert_eq!(out.status.code(), Some(8), "{}", said(&out));
    let landed = std::fs::read_dir(&dst).unwrap().count();
    assert!((3..=6).contains(&landed), "{landed} files landed");
    let first = summary(&out);
    let failures = first["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "one line for what is left: {failures:?}");
    assert_eq!(failures[0]["kind"], "transfer_limit");
    assert!(failures[0]["error"]
        .as_str()
        .unwrap()
        .contains("--max-transfer reached"));
    let out = local_copy(&s.path("config"), &["--json"], &src, &dst);
    ok(&out);
    assert_eq!(summary(&out)["files_skipped"], landed);
    assert_eq!(std::fs::read_dir(&dst).unwrap().count(), 12);
    assert_eq!(b3(&dst.join("f11")), b3(&src.join("f11")));

    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let mut c = haul(&s.path("config"));
    c.args(["push", "--plaintext", "--max-transfer", "3M", "-j", "1"])
        .arg(format!("{}/", src.display()))
        .arg(node.url("in"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(8), "{}", said(&out));
    let landed = std::fs::read_dir(s.path("node/in")).unwrap().count();
    assert!((3..=6).contains(&landed), "{landed} files landed");
    // A fan-out to two nodes: both cut after the same file.
    let other = Node::start(
        &s.path("other"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let mut c = haul(&s.path("config"));
    c.args(["push", "--plaintext", "--max-transfer", "3M"])
        .arg(format!("{}/", src.display()))
        .arg(node.url("fan"))
        .arg(other.url("fan"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(8), "{}", said(&out));
    let held = |dir: &str| {
        let mut names: Vec<String> = std::fs::read_dir(s.path(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let fanned = held("node/fan");
    assert!(!fanned.is_empty() && fanned.len() < 12, "{fanned:?}");
    assert_eq!(held("other/fan"), fanned);

    // A run whose last file takes it past the limit left nothing: exit 0.
    write_file(&s.path("one/big"), 2 << 20, 99);
    let out = local_copy(
        &s.path("config"),
        &["--max-transfer", "1M"],
        &s.path("one"),
        &s.path("one-copy"),
    );
    ok(&out);
    assert_eq!(b3(&s.path("one-copy/big")), b3(&s.path("one/big")));
}

#[test]
fn i_itemizes_what_changes_as_rsync_does() {
    // The same trees for rsync and haul: a new file, one whose size and
    // mtime changed, one up to date, one up to date but for its permission
    // bits, a new directory with a file, one DEST has and SRC not
    // (--delete), two names of one file (-H).
    let s = Scratch::new();
    let src = s.path("src");
    write_file(&src.join("new"), 100, 1);
    write_file(&src.join("changed"), 200, 2);
    write_file(&src.join("same"), 50, 3);
    write_file(&src.join("dir/inner"), 10, 4);
    write_file(&src.join("perm"), 30, 7);
    std::fs::hard_link(src.join("same"), src.join("same2")).unwrap();
    // A symlink DEST has pointing elsewhere, and a directory DEST has with
    // another mtime.
    std::os::unix::fs::symlink("new", src.join("link")).unwrap();
    std::fs::create_dir(src.join("kept")).unwrap();
    let past = std::time::SystemTime::now() - Duration::from_secs(3600);
    let set_mtime = |path: &std::path::Path, t: std::time::SystemTime| {
        let secs = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let out = std::process::Command::new("touch")
            .args(["-h", "-d", &format!("@{secs}")])
            .arg(path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    };
    for f in [
        "changed",
        "same",
        "dir/inner",
        "new",
        "perm",
        "link",
        "kept",
        "dir",
        "",
    ] {
        set_mtime(&src.join(f), past);
    }
    let (ours, theirs) = (s.path("haul"), s.path("rsync"));
    for d in [&ours, &theirs] {
        write_file(&d.join("changed"), 150, 5);
        write_file(&d.join("gone"), 10, 6);
        std::os::unix::fs::symlink("gone", d.join("link")).unwrap();
        std::fs::create_dir(d.join("kept")).unwrap();
        set_mtime(&d.join("kept"), past - Duration::from_secs(60));
        for f in ["same", "perm"] {
            let out = std::process::Command::new("cp")
                .args(["-p"])
                .arg(src.join(f))
                .arg(d.join(f))
                .output()
                .unwrap();
            assert!(out.status.success());
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.join("perm"), std::fs::Permissions::from_mode(0o600)).unwrap();
        set_mtime(d, past);
    }
    let out = std::process::Command::new("rsync")
        .args(["-aHi", "--delete"])
        .arg(format!("{}/", src.display()))
        .arg(&theirs)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let rsync = stdout_lines(&out);
    // What rsync says of the directory and the link too.
    for line in ["cLc.t...... link -> new", ".d..t...... kept/"] {
        assert!(rsync.iter().any(|l| l == line), "{rsync:?}");
    }
    for (flags, dest) in [
        (&["-Hi", "-n", "--delete"][..], &ours),
        (&["-Hi", "--delete"][..], &ours),
    ] {
        let out = local_copy(&s.path("config"), flags, &src, dest);
        ok(&out);
        let mut ours: Vec<String> = stdout_lines(&out)
            .into_iter()
            .filter(|l| !l.starts_with("dry run:") && !l.starts_with("ok:"))
            .collect();
        let mut want = rsync.clone();
        ours.sort();
        want.sort();
        assert_eq!(ours, want, "{flags:?}");
    }
    // Nothing left to change: nothing itemized.
    let out = local_copy(&s.path("config"), &["-Hi", "--delete"], &src, &ours);
    ok(&out);
    assert_eq!(stdout_lines(&out), Vec::<String>::new());

    // -c: a file of the same size and mtime whose content differs (the
    // quick check would keep it) is received, and says `c`, as rsync's.
    for d in [&ours, &theirs] {
        write_file(&d.join("same"), 50, 99);
        set_mtime(&d.join("same"), past);
    }
    // And a file whose content matches but whose mtime does not is
    // brought in line (`.f..t......`), not sent.
    for d in [&ours, &theirs] {
        set_mtime(&d.join("changed"), past - Duration::from_secs(100));
    }
    let out = std::process::Command::new("rsync")
        .args(["-aci"])
        .arg(format!("{}/", src.display()))
        .arg(&theirs)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // (`same2` is the same file at DEST, linked by the -H run above.)
    let want = [
        ".f..t...... changed",
        ">fc........ same",
        ">fc........ same2",
    ];
    let mut theirs_said = stdout_lines(&out);
    theirs_said.sort();
    assert_eq!(theirs_said, want);
    for flags in [&["-n", "-ci"][..], &["-ci"][..]] {
        let out = local_copy(&s.path("config"), flags, &src, &ours);
        ok(&out);
        let mut lines: Vec<String> = stdout_lines(&out)
            .into_iter()
            .filter(|l| !l.starts_with("dry run:"))
            .collect();
        lines.sort();
        assert_eq!(lines, want, "{flags:?}: {}", said(&out));
    }
    assert_eq!(b3(&ours.join("same")), b3(&src.join("same")));
    // Nothing left to change, with or without -c.
    for flags in [&["-i"][..], &["-ci"][..]] {
        let out = local_copy(&s.path("config"), flags, &src, &ours);
        ok(&out);
        assert_eq!(stdout_lines(&out), Vec::<String>::new(), "{flags:?}");
    }

    // A push says what the node changed, as sent (`<`), as `rsync -i` to a
    // remote does.
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    write_file(&s.path("node/in/changed"), 150, 5);
    // Each push waits for the node to set its directories' mtimes.
    let push_with = |extra: &[&str]| {
        let mut c = haul(&s.path("config"));
        c.args(["push", "--plaintext", "-i"])
            .args(extra)
            .arg(format!("{}/", src.display()))
            .arg(node.url("in"));
        let out = run(c, T);
        ok(&out);
        let dirs = ["dir", "kept", "by-hand", "read-only"];
        dir_mtimes_settled(&src, &s.path("node/in"), &dirs);
        let mut lines: Vec<String> = stdout_lines(&out)
            .into_iter()
            .filter(|l| !l.starts_with("dry run:"))
            .collect();
        lines.sort();
        lines
    };
    let push = || push_with(&[]);
    assert_eq!(
        push(),
        [
            "<f+++++++++ dir/inner",
            "<f+++++++++ new",
            "<f+++++++++ perm",
            "<f+++++++++ same",
            "<f+++++++++ same2",
            "<f.st...... changed",
            "cL+++++++++ link -> new",
            "cd+++++++++ dir/",
            "cd+++++++++ kept/",
        ]
    );

    // A pull from the node says what it set in place too.
    let back = s.path("back");
    let pull = |extra: &[&str]| {
        let mut c = haul(&s.path("config"));
        c.args(["pull", "--plaintext"])
            .args(extra)
            .arg(format!("{}/", node.url("in")))
            .arg(&back);
        run(c, T)
    };
    ok(&pull(&[]));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(back.join("perm"), std::fs::Permissions::from_mode(0o600)).unwrap();
    set_mtime(&back.join("kept"), past - Duration::from_secs(60));
    std::fs::remove_file(back.join("link")).unwrap();
    std::os::unix::fs::symlink("perm", back.join("link")).unwrap();
    // -c brings a file of the same content in line too.
    set_mtime(&back.join("new"), past - Duration::from_secs(60));
    let out = pull(&["-ci"]);
    ok(&out);
    assert_eq!(
        stdout_lines(&out)
            .iter()
            .filter(|l| l.split_once(" ").is_some_and(|(_, p)| p == "new"))
            .collect::<Vec<_>>(),
        [".f..t...... new"],
        "{}",
        said(&out)
    );
    set_mtime(&back.join("kept"), past - Duration::from_secs(60));
    std::fs::set_permissions(back.join("perm"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::remove_file(back.join("link")).unwrap();
    std::os::unix::fs::symlink("perm", back.join("link")).unwrap();
    let out = pull(&["-i"]);
    ok(&out);
    let mut lines = stdout_lines(&out);
    lines.sort();
    assert_eq!(
        lines,
        [
            ".d..t...... kept/",
            ".f...p..... perm",
            "cLc.t...... link -> new"
        ]
    );
    // And a push, of what the node changed in place: a directory made
    // there by hand (a node that just served a push sets the mtimes of the
    // directories it made again when it goes idle), and one without
    // write permission for its owner, which haul gives it (said once).
    use std::os::unix::fs::DirBuilderExt;
    for d in [src.join("by-hand"), s.path("node/in/by-hand")] {
        std::fs::create_dir(&d).unwrap();
    }
    set_mtime(&src.join("by-hand"), past);
    set_mtime(&s.path("node/in/by-hand"), past - Duration::from_secs(60));
    std::fs::DirBuilder::new()
        .mode(0o555)
        .create(src.join("read-only"))
        .unwrap();
    set_mtime(&src.join("read-only"), past);
    assert_eq!(push(), [".d..t...... by-hand/", "cd+++++++++ read-only/"]);
    assert_eq!(push(), Vec::<String>::new());

    // -c brings the node's file of the same content in line, as
    // `rsync -aci` to a remote does (the node reads it again and sets its
    // mtime and mode; nothing is sent), and says so in a dry run too.
    set_mtime(&s.path("node/in/new"), past - Duration::from_secs(60));
    let perm = s.path("node/in/perm");
    std::fs::set_permissions(&perm, std::fs::Permissions::from_mode(0o600)).unwrap();
    let want = [".f...p..... perm", ".f..t...... new"];
    assert_eq!(push_with(&["-n", "-c"]), want);
    assert_eq!(push_with(&["-c"]), want);
    let mtime = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
    assert_eq!(mtime(&s.path("node/in/new")), mtime(&src.join("new")));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&perm), mode(&src.join("perm")));
    // In line: nothing left, with or without -c.
    assert_eq!(push(), Vec::<String>::new());
    assert_eq!(push_with(&["-c"]), Vec::<String>::new());
}
