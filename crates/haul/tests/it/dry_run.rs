//! `-n`/`--dry-run`: what a push, a pull from a node and a local copy would
//! do, while every byte, mtime and name on both sides stays as it was
//! (both trees hashed before and after, haul's state directories included).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::harness::*;

const T: Duration = Duration::from_secs(120);

/// Everything under `root`, haul's own state included: names, kinds,
/// sizes, mtimes (ns) and BLAKE3 of files.
pub(crate) fn state(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if !root.exists() {
        return out;
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            let mtime = m.mtime() * 1_000_000_000 + m.mtime_nsec();
            if m.is_dir() {
                stack.push(e.path());
                out.push(format!("{rel}/ {mtime}"));
            } else if m.is_file() {
                out.push(format!("{rel} {} {mtime} {}", m.len(), b3(&e.path())));
            } else {
                out.push(format!("{rel} -> {mtime}"));
            }
        }
    }
    out.sort();
    out
}

/// The `dry_run` events of a `--json` run: (action, path, size).
fn planned(out: &Output) -> Vec<(String, String, u64)> {
    let mut v: Vec<_> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "dry_run")
        .map(|v| {
            (
                v["action"].as_str().unwrap().to_owned(),
                v["path"].as_str().unwrap().to_owned(),
                v["size"].as_u64().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn totals(out: &Output) -> Value {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "dry_run_summary")
        .unwrap_or_else(|| panic!("no dry_run_summary: {}", stderr(out)))
}

fn s(a: &str, p: &str, n: u64) -> (String, String, u64) {
    (a.into(), p.into(), n)
}

#[test]
fn dry_runs_change_nothing_on_either_side() {
    let s_ = Scratch::new();
    let src = s_.path("src/data");
    write_file(&src.join("a.bin"), 5 << 20, 1);
    write_file(&src.join("sub/b.txt"), 100, 2);
    write_file(&src.join("sub/c.txt"), 200, 3);
    let node = Node::start(&s_.path("node"), &s_.path("config"), &["--open"]);
    let mut c = haul(&s_.path("config"));
    c.args(["push", "-q"]).arg(&src).arg(node.url("in"));
    ok(&run(c, T));
    // Since then: b.txt changed (same size, new bytes and mtime), a new
    // file and directory, a file only the node has.
    std::thread::sleep(Duration::from_millis(20));
    write_file(&src.join("sub/b.txt"), 100, 22);
    write_file(&src.join("new/n.txt"), 7, 4);
    write_file(&s_.path("node/in/data/extra.txt"), 9, 5);
    let before = (state(&s_.path("src")), state(&s_.path("node")));

    // Push.
    let mut c = haul(&s_.path("config"));
    c.args(["--json", "push", "-n"])
        .arg(&src)
        .arg(node.url("in"));
    let out = run(c, T);
    ok(&out);
    assert_eq!(
        planned(&out),
        [
            s("make", "data/new", 0),
            s("send", "data/new/n.txt", 7),
            s("send", "data/sub/b.txt", 100),
            s("up_to_date", "data/a.bin", 5 << 20),
            s("up_to_date", "data/sub/c.txt", 200),
        ]
    );
    let t = totals(&out);
    assert_eq!(
        (t["send_files"].as_u64(), t["send_bytes"].as_u64()),
        (Some(2), Some(107))
    );
    assert_eq!(t["up_to_date_files"], 2);
    assert_eq!((state(&s_.path("src")), state(&s_.path("node"))), before);

    // Pull from the node into a DEST that does not exist: it still does not.
    let mut c = haul(&s_.path("config"));
    c.args(["--json", "pull", "--dry-run", &node.url("in/data")])
        .arg(s_.path("dst"));
    let out = run(c, T);
    ok(&out);
    assert_eq!(totals(&out)["send_files"], 4, "{}", stderr(&out));
    assert!(!s_.path("dst").exists());

    // Pull into the source's own tree (a local DEST with history), and a
    // local copy: the human form too.
    let mut c = haul(&s_.path("config"));
    c.args(["--json", "pull", "-n", &node.url("in/data")])
        .arg(s_.path("src"));
    let out = run(c, T);
    ok(&out);
    assert_eq!(
        planned(&out),
        [
            s("send", "data/extra.txt", 9),
            s("send", "data/sub/b.txt", 100),
            s("up_to_date", "data/a.bin", 5 << 20),
            s("up_to_date", "data/sub/c.txt", 200),
        ]
    );
    let mut c = haul(&s_.path("config"));
    c.args(["pull", "-n"]).arg(&src).arg(s_.path("node/in"));
    let out = run(c, T);
    ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("send       data/sub/b.txt  100 B"), "{text}");
    assert!(
        text.contains("dry run: would send 2 files (107 B), 2 up to date"),
        "{text}"
    );
    drop(node);
    assert_eq!((state(&s_.path("src")), state(&s_.path("node"))), before);
}

#[test]
fn dry_runs_of_ftp_and_http_pulls_change_nothing() {
    let ftp = haul_ftp::testserver::FtpServer::start(haul_ftp::testserver::Mode::Plain)
        .expect("start vsftpd (apt-get install vsftpd)");
    let http = haul_http::testserver::TestServer::start()
        .expect("start nginx (apt-get install nginx-light)");
    for (root, url) in [
        (ftp.root(), ftp.url("/t/")),
        (http.root(), http.http_url("/t/")),
    ] {
        let s_ = Scratch::new();
        write_file(&root.join("t/a.bin"), 6 << 20, 1);
        write_file(&root.join("t/sub/b.txt"), 100, 2);
        write_file(&root.join("t/sub/c.txt"), 200, 3);
        let dst = s_.path("dst");
        let mut c = haul(&s_.path("config"));
        c.args(["-q", "pull", &url]).arg(&dst);
        ok(&run(c, T));
        // Since then, at the server: b.txt grew, a new file.
        write_file(&root.join("t/sub/b.txt"), 150, 22);
        write_file(&root.join("t/new.txt"), 7, 4);
        let before = (state(&dst), state(&root.join("t")));
        let mut c = haul(&s_.path("config"));
        c.args(["--json", "pull", "-n", &url]).arg(&dst);
        let out = run(c, T);
        ok(&out);
        assert_eq!(
            planned(&out),
            [
                s("send", "new.txt", 7),
                s("send", "sub/b.txt", 150),
                s("up_to_date", "a.bin", 6 << 20),
                s("up_to_date", "sub/c.txt", 200),
            ],
            "{url}"
        );
        assert_eq!(totals(&out)["send_bytes"], 157);
        assert_eq!((state(&dst), state(&root.join("t"))), before, "{url}");
        // Into a DEST that does not exist: everything, and still no DEST.
        let mut c = haul(&s_.path("config"));
        c.args(["--json", "pull", "--dry-run", &url])
            .arg(s_.path("fresh"));
        let out = run(c, T);
        ok(&out);
        assert_eq!(totals(&out)["send_files"], 4, "{url}");
        assert!(!s_.path("fresh").exists());
    }
}

#[test]
fn a_fan_out_dry_run_reports_each_node_and_changes_none() {
    let s_ = Scratch::new();
    let src = s_.path("src/data");
    write_file(&src.join("a.bin"), 3 << 20, 1);
    write_file(&src.join("b.txt"), 10, 2);
    let a = Node::start(&s_.path("a"), &s_.path("config"), &["--open"]);
    let b = Node::start(&s_.path("b"), &s_.path("config"), &["--open"]);
    let mut c = haul(&s_.path("config"));
    c.args(["push", "-q"]).arg(&src).arg(a.url("in"));
    ok(&run(c, T));
    // What --delete would remove on a is listed, and stays.
    write_file(&s_.path("a/in/data/stale"), 5, 3);
    let before = (state(&s_.path("a")), state(&s_.path("b")));
    let mut c = haul(&s_.path("config"));
    c.args(["--json", "push", "-n", "--delete"])
        .arg(&src)
        .arg(a.url("in"))
        .arg(b.url("in"));
    let out = run(c, T);
    ok(&out);
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &Value| v["event"] == "dry_run_summary")
        .collect();
    assert_eq!(lines.len(), 2, "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        (
            lines[0]["send_files"].as_u64(),
            lines[0]["up_to_date_files"].as_u64(),
            lines[0]["delete"].as_u64()
        ),
        (Some(0), Some(2), Some(1))
    );
    assert_eq!(
        (
            lines[1]["send_files"].as_u64(),
            lines[1]["up_to_date_files"].as_u64()
        ),
        (Some(2), Some(0))
    );
    assert_eq!((state(&s_.path("a")), state(&s_.path("b"))), before);
    // With --max-delete 0, a's one deletion keeps every node from pruning,
    // and the dry run says so.
    let mut c = haul(&s_.path("config"));
    c.args(["--json", "push", "-n", "--delete", "--max-delete", "0"])
        .arg(&src)
        .arg(a.url("in"))
        .arg(b.url("in"));
    let out = run(c, T);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|v| v["event"] == "warning"
                && v["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("deletes nothing on any node"))),
        "{said}"
    );
    assert_eq!((state(&s_.path("a")), state(&s_.path("b"))), before);
}

/// The actions a real `--json` run took, in the dry run's words: files
/// sent or found up to date, and deletions (a pull makes the directories
/// its files need and names none of them).
fn done(out: &Output) -> Vec<(String, String)> {
    let mut v: Vec<_> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            let path = v["path"].as_str()?.to_owned();
            match v["event"].as_str()? {
                "file_done" if v["skipped"] == true => Some(("up_to_date".into(), path)),
                "file_done" => Some(("send".into(), path)),
                "deleted" => Some(("delete".into(), path)),
                _ => None,
            }
        })
        .collect();
    v.sort();
    v
}

/// The remote location of the agreement table (the node and local ones are
/// `haul-node/tests/dry_run_agrees.rs`): for FTP and HTTP, what `--dry-run`
/// says a pull would do is what the pull then does, entry by entry — the
/// same quick check (the engine's), the same `--delete`.
#[test]
fn a_remote_dry_run_and_the_real_pull_agree_on_every_entry() {
    let ftp = haul_ftp::testserver::FtpServer::start(haul_ftp::testserver::Mode::Plain)
        .expect("start vsftpd (apt-get install vsftpd)");
    let http = haul_http::testserver::TestServer::start()
        .expect("start nginx (apt-get install nginx-light)");
    // HTTP's pull states each file before reading it (nginx's index tells
    // minutes at best); its dry run must state it too, or a touch within
    // the minute goes unseen by the dry run alone.
    // FTP's LIST tells the minute, so a same-size touch within it is up to
    // date there; HTTP states each file (seconds) and sends it.
    for (root, url, touched) in [
        (ftp.root(), ftp.url("/g/"), "up_to_date"),
        (http.root(), http.http_url("/g/"), "send"),
    ] {
        let s_ = Scratch::new();
        write_file(&root.join("g/same.bin"), 3 << 20, 1);
        write_file(&root.join("g/grown.txt"), 100, 2);
        write_file(&root.join("g/touched.txt"), 100, 3);
        // Times in the past, 10 s into a minute: vsftpd lists a future
        // mtime by its date alone (read as midnight), which would make the
        // answer depend on the clock's second.
        let set = |t: SystemTime| {
            let f = std::fs::File::options()
                .write(true)
                .open(root.join("g/touched.txt"))
                .unwrap();
            f.set_modified(t).unwrap();
        };
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let was = SystemTime::UNIX_EPOCH + Duration::from_secs(now - now % 60 - 120 + 10);
        set(was);
        let dst = s_.path("dst");
        let mut c = haul(&s_.path("config"));
        c.args(["-q", "pull", &url]).arg(&dst);
        ok(&run(c, T));
        // Since then: a file grew, one was touched (same size, its mtime a
        // second later), one is new at the server; one is only in DEST.
        write_file(&root.join("g/grown.txt"), 150, 22);
        set(was + Duration::from_secs(1));
        write_file(&root.join("g/sub/new.txt"), 7, 4);
        write_file(&dst.join("stale.txt"), 5, 5);
        let mut c = haul(&s_.path("config"));
        c.args(["--json", "pull", "-n", "--delete", &url]).arg(&dst);
        let dry = run(c, T);
        ok(&dry);
        let said: Vec<(String, String)> = planned(&dry)
            .into_iter()
            .filter(|(a, _, _)| a != "make")
            .map(|(a, p, _)| (a, p))
            .collect();
        let mut want: Vec<(String, String)> = [
            ("delete", "stale.txt"),
            ("send", "grown.txt"),
            ("send", "sub/new.txt"),
            (touched, "touched.txt"),
            ("up_to_date", "same.bin"),
        ]
        .iter()
        .map(|(a, p)| ((*a).to_owned(), (*p).to_owned()))
        .collect();
        want.sort();
        assert_eq!(said, want, "the dry run of {url}");
        let mut c = haul(&s_.path("config"));
        c.args(["--json", "pull", "--delete", &url]).arg(&dst);
        let real = run(c, T);
        ok(&real);
        assert_eq!(
            done(&real),
            said,
            "the pull of {url} did what its dry run said"
        );
    }
}
