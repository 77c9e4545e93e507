//! A node's transfer log (a line per connection and per file, text or
//! JSON, on stderr and in `--log-file`) and the removal of abandoned
//! staging files (`--partial-ttl`, `--prune-partials`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::harness::*;

const T: Duration = Duration::from_secs(120);

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits until the log at `path` holds every one of `wanted`, and returns it.
fn log_with(path: &Path, wanted: &[&str]) -> String {
    wait_for(Duration::from_secs(20), "the node's log lines", || {
        let log = read(path);
        wanted.iter().all(|w| log.contains(w))
    });
    read(path)
}

/// A tree of a multi-chunk file and a small one under `src/data`.
fn tree(s: &Scratch) -> (String, String) {
    write_file(&s.path("src/data/big.bin"), 9 << 20, 31);
    write_file(&s.path("src/data/small.txt"), 1000, 32);
    (
        b3(&s.path("src/data/big.bin")),
        b3(&s.path("src/data/small.txt")),
    )
}

fn push_and_pull(s: &Scratch, node: &Node, auth: &[&str]) {
    let mut c = haul(&s.path("config"));
    c.args(["push", "--json"])
        .args(auth)
        .arg(s.path("src/data"))
        .arg(node.url("in"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--json"])
        .args(auth)
        .arg(node.url("in/data"))
        .arg(s.path("back"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
}

#[test]
fn text_log_has_a_line_per_connection_and_per_file_never_the_token() {
    let s = Scratch::new();
    let (big, small) = tree(&s);
    let log = s.path("node.log");
    let node = Node::start_logged(
        &s.path("node"),
        &s.path("config"),
        &["--token", "sekrit-token"],
        &log,
    );
    push_and_pull(&s, &node, &["--token", "sekrit-token"]);
    let big_in = format!("path=\"in/data/big.bin\" bytes={} sent=", 9 << 20);
    let text = log_with(
        &log,
        &[
            "file_received peer=127.0.0.1:",
            &big_in,
            &format!("blake3={big}"),
            &format!("blake3={small}"),
            "file_sent peer=",
            "request=fetch",
        ],
    );
    assert!(
        !text.contains("sekrit-token"),
        "the token was logged:\n{text}"
    );
    let line = |start: &str, has: &str| {
        text.lines()
            .find(|l| l.contains(start) && l.contains(has))
            .unwrap_or_else(|| panic!("no {start:?} line with {has:?}:\n{text}"))
            .to_owned()
    };
    let push = line("connection peer=127.0.0.1:", "request=push");
    assert!(
        push.contains("auth=token:") && push.contains("path=\"in\""),
        "{push}"
    );
    let list = line("connection peer=", "request=list");
    assert!(list.contains("path=\"in/data\""), "{list}");
    let received = line("file_received", "big.bin");
    assert!(
        received.contains(&big_in) && received.contains(&format!("blake3={big}")),
        "a received file is named by its path beneath the root: {received}"
    );
    let small_in = line("file_received", "small.txt");
    assert!(
        small_in.contains("path=\"in/data/small.txt\" bytes=1000 ")
            && small_in.contains(&format!("blake3={small}")),
        "{small_in}"
    );
    assert!(
        received.contains("request=push") && received.contains(" secs="),
        "{received}"
    );
    let sent = line("file_sent", "big.bin");
    assert!(
        sent.contains("path=\"in/data/big.bin\"") && sent.contains(&format!("blake3={big}")),
        "a sent file is named by its path beneath the root: {sent}"
    );
    let sent_small = line("file_sent", "small.txt");
    assert!(
        sent_small.contains(&format!("blake3={small}")),
        "{sent_small}"
    );
    // The token's id is the same for every connection of one token.
    let id = |l: &str| {
        l.split_whitespace()
            .find(|w| w.starts_with("auth="))
            .map(str::to_owned)
    };
    assert_eq!(id(&push), id(&list));
}

#[test]
fn json_log_goes_to_stderr_and_to_the_log_file() {
    let s = Scratch::new();
    let (big, small) = tree(&s);
    let stderr_log = s.path("stderr.log");
    let file = s.path("logs/transfer.jsonl");
    std::fs::create_dir_all(s.path("logs")).unwrap();
    let file_arg = file.to_str().unwrap();
    let node = Node::start_logged(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--log-format", "json", "--log-file", file_arg],
        &stderr_log,
    );
    push_and_pull(&s, &node, &[]);
    let wanted = [
        "\"event\":\"file_received\"",
        "\"event\":\"file_sent\"",
        &format!("\"blake3\":\"{big}\""),
        &format!("\"blake3\":\"{small}\""),
    ];
    log_with(&file, &wanted);
    let on_stderr = log_with(&stderr_log, &wanted);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & !0o640, 0, "log file mode {mode:o}");

    let records: Vec<serde_json::Value> = read(&file)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    for r in &records {
        for field in [
            "event", "peer", "auth", "request", "path", "bytes", "blake3", "secs",
        ] {
            assert!(r.get(field).is_some(), "{field} missing in {r}");
        }
        assert_eq!(r["auth"], "open", "{r}");
    }
    let find = |event: &str, path: &str| {
        records
            .iter()
            .find(|r| r["event"] == event && r["path"] == path)
            .unwrap_or_else(|| panic!("no {event} of {path}: {records:?}"))
    };
    let push = find("connection", "in");
    assert_eq!(push["request"], "push");
    assert!(push["peer"].as_str().unwrap().starts_with("127.0.0.1:"));
    let got = find("file_received", "in/data/big.bin");
    assert_eq!(got["bytes"], 9 << 20);
    assert_eq!(got["blake3"], big.as_str());
    assert!(got["secs"].as_f64().unwrap() >= 0.0);
    let sent = find("file_sent", "in/data/small.txt");
    assert_eq!(sent["blake3"], small.as_str());
    assert_eq!(sent["request"], "fetch");
    // The same objects on stderr (after the log's own prefix).
    let stderr_objects = on_stderr
        .lines()
        .filter_map(|l| l.find('{').map(|i| &l[i..]))
        .filter_map(|j| serde_json::from_str::<serde_json::Value>(j).ok())
        .filter(|v| v["event"] == "file_received" && v["path"] == "in/data/big.bin")
        .count();
    assert_eq!(stderr_objects, 1, "{on_stderr}");
}

#[test]
fn sigusr1_reopens_the_log_file_after_logrotate_moved_it() {
    let s = Scratch::new();
    tree(&s);
    let file = s.path("transfer.log");
    let node = Node::start_logged(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--log-file", file.to_str().unwrap()],
        &s.path("stderr.log"),
    );
    let push = |dest: &str| {
        let mut c = haul(&s.path("config"));
        c.args(["push", "--json"])
            .arg(s.path("src/data"))
            .arg(node.url(dest));
        let out = run(c, T);
        assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    };
    push("one");
    log_with(&file, &["path=\"one/data/big.bin\""]);
    // logrotate: move the file away, then signal.
    let rotated = s.path("transfer.log.1");
    std::fs::rename(&file, &rotated).unwrap();
    unsafe { libc::kill(node.child.id() as i32, libc::SIGUSR1) };
    log_with(
        &s.path("stderr.log"),
        &["SIGUSR1: 1 transfer log file(s) reopened"],
    );
    push("two");
    let fresh = log_with(&file, &["path=\"two/data/big.bin\""]);
    assert!(!fresh.contains("path=\"one/"), "{fresh}");
    let old = read(&rotated);
    assert!(
        old.contains("path=\"one/data/big.bin\"") && !old.contains("path=\"two/"),
        "{old}"
    );
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & !0o640, 0, "log file mode {mode:o}");
}

/// A staging file as `partial.rs` makes one (`<32 hex>.part` and its
/// `.state` in `ROOT/.haul/partial`, 0700 and 0600), last written `age` ago.
fn staged(root: &Path, id: char, len: u64, age: Duration) -> std::path::PathBuf {
    let dir = root.join(".haul/partial");
    std::fs::create_dir_all(&dir).unwrap();
    for d in [root.join(".haul"), dir.clone()] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let stem = id.to_string().repeat(32);
    let part = dir.join(format!("{stem}.part"));
    for (path, n) in [
        (part.clone(), len),
        (dir.join(format!("{stem}.state")), 100),
    ] {
        write_file(&path, n, 5);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(SystemTime::now() - age).unwrap();
    }
    part
}

const DAY: Duration = Duration::from_secs(86_400);

#[test]
fn a_partial_older_than_the_ttl_is_removed_at_start_a_younger_one_kept() {
    let s = Scratch::new();
    let root = s.path("node");
    let old = staged(&root, 'a', 3 << 20, 8 * DAY);
    let young = staged(&root, 'b', 3 << 20, DAY);
    let log = s.path("node.log");
    let node = Node::start_logged(&root, &s.path("config"), &["--open"], &log);
    assert!(
        !old.exists(),
        "a partial untouched for 8 days outlived the default 7d"
    );
    assert!(!old.with_extension("state").exists());
    assert!(young.exists() && young.with_extension("state").exists());
    let text = log_with(&log, &["removed 2"]);
    assert!(
        text.contains(&format!("({} bytes)", (3 << 20) + 100)),
        "{text}"
    );
    drop(node);

    // A shorter TTL takes the younger one too.
    let node = Node::start_logged(
        &root,
        &s.path("config"),
        &["--open", "--partial-ttl", "12h"],
        &log,
    );
    assert!(!young.exists());
    drop(node);
}

/// Holds `flock(LOCK_EX)` on `path` as a writer receiving into it does.
fn lock(path: &Path) -> std::fs::File {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: an open descriptor.
    assert_eq!(
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    f
}

#[test]
fn prune_partials_says_what_it_freed_and_keeps_a_locked_one() {
    let s = Scratch::new();
    let root = s.path("node");
    let old = staged(&root, 'a', 2 << 20, 3 * DAY);
    let young = staged(&root, 'b', 2 << 20, 3600 * Duration::from_secs(1));
    let busy = staged(&root, 'c', 2 << 20, 3 * DAY);
    let held = lock(&busy);
    let prune = |json: bool| {
        let mut c = haul(&s.path("config"));
        c.args(["serve", "--root"])
            .arg(&root)
            .args(["--prune-partials", "--partial-ttl", "2d"]);
        if json {
            c.arg("--json");
        }
        run(c, T)
    };
    let out = prune(true);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["event"], "pruned_partials");
    assert_eq!(v["files"], 2);
    assert_eq!(v["bytes"], (2 << 20) + 100);
    assert_eq!(v["in_use"], 1);
    assert!(!old.exists());
    assert!(young.exists(), "younger than --partial-ttl");
    assert!(
        busy.exists() && busy.with_extension("state").exists(),
        "locked: in use"
    );

    // Let go, it is freed; the text says so.
    drop(held);
    let out = prune(false);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains("removed 2 partial file(s), 2.0 MiB"),
        "{stdout}"
    );
    assert!(!busy.exists() && young.exists());
}
