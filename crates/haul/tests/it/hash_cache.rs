//! The content-hash cache end to end: counted with `strace` (every byte a
//! process reads through `read`/`pread`), a second `haul check` and a
//! `push -c` of an unchanged tree read no file data on either side — the
//! node answers `List{sums}` from the records it kept when it received the
//! files; a record made stale behind haul's back (content edited, size and
//! mtime kept, with `--ignore-ctime` so the ctime does not tell) is refused
//! by the receiver, the sender hashes the file again, the right bytes
//! arrive and the output says so; `haul hash` prints b3sum's lines and
//! verifies them; a filesystem without user xattrs keeps its records in
//! the store.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use crate::harness::*;

const T: Duration = Duration::from_secs(120);

/// Writes `len` bytes at `path` with an mtime an hour old (a record taken
/// within a timestamp tick of a file's mtime is not trusted).
fn old_file(path: &Path, len: u64, seed: u64) {
    write_file(path, len, seed);
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
}

/// `cmd` run under `strace`, and the bytes it read (all processes and
/// threads, every `read`/`pread64`/`readv`/`preadv`).
fn traced(cmd: &Command, scratch: &Scratch, name: &str) -> (std::process::Output, u64) {
    let log = scratch.path(&format!("{name}.strace"));
    let mut t = Command::new("strace");
    t.args([
        "-f",
        "-qq",
        "-e",
        "trace=read,pread64,readv,preadv,preadv2",
        "-o",
    ])
    .arg(&log)
    .arg(cmd.get_program())
    .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => t.env(k, v),
            None => t.env_remove(k),
        };
    }
    let out = run(t, T);
    (out, bytes_read(&log))
}

/// Kills a process group when dropped.
struct KillGroup(u32);

impl Drop for KillGroup {
    fn drop(&mut self) {
        if let Ok(pgid) = i32::try_from(self.0) {
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}

fn bytes_read(log: &Path) -> u64 {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.rsplit_once(") = ")?
                .1
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[test]
fn a_second_check_and_a_checksum_push_of_an_unchanged_tree_read_no_file_data() {
    let s = Scratch::new();
    for i in 0..4 {
        old_file(&s.path(&format!("a/f{i}")), 6 << 20, i);
        old_file(&s.path(&format!("b/f{i}")), 6 << 20, i);
    }
    let data = 2 * 4 * (6u64 << 20);
    let mut check = haul(&s.path("config"));
    check.args(["check"]).arg(s.path("a/")).arg(s.path("b/"));
    let (first, read1) = traced(&check, &s, "check1");
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert!(read1 >= data, "the first check reads both trees: {read1}");
    let (second, read2) = traced(&check, &s, "check2");
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    assert!(read2 < 1 << 20, "the second check read {read2} bytes");

    // Without the cache, every byte again.
    let mut off = haul(&s.path("config"));
    off.args(["check", "--no-hash-cache"])
        .arg(s.path("a/"))
        .arg(s.path("b/"));
    let (out, read3) = traced(&off, &s, "check3");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(read3 >= data, "--no-hash-cache read {read3}");

    // A file changed with its size and mtime kept is still found.
    std::thread::sleep(Duration::from_millis(50));
    flip_keeping_mtime(&s.path("b/f2"), 5 << 20);
    let out = run(
        {
            let mut c = haul(&s.path("config"));
            c.args(["check"]).arg(s.path("a/")).arg(s.path("b/"));
            c
        },
        T,
    );
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(said(&out).contains("f2"), "{}", said(&out));

    // A node that received the tree answers `-c` from the records it kept
    // at commit; the client from the ones it kept while sending.
    let node_strace = s.path("node.strace");
    let mut wrapped = Command::new("strace");
    wrapped
        .args([
            "-f",
            "-qq",
            "-e",
            "trace=read,pread64,readv,preadv,preadv2",
            "-o",
        ])
        .arg(&node_strace)
        .arg(env!("CARGO_BIN_EXE_haul"))
        .process_group(0);
    let node = Node::spawn(
        wrapped,
        &s.path("node"),
        &s.path("config"),
        "127.0.0.1:0",
        &["--open", "--plaintext"],
    );
    // Killing strace would leave the node it traces running: the whole
    // group goes (dropped before `node`, which then reaps strace).
    let _group = KillGroup(node.child.id());
    let push = |extra: &[&str]| {
        let mut c = haul(&s.path("config"));
        c.args(["--json", "push", "--plaintext"])
            .args(extra)
            .arg(s.path("a/"))
            .arg(node.url("t"));
        c
    };
    let (out, _) = traced(&push(&[]), &s, "push1");
    ok(&out);
    let node_before = bytes_read(&node_strace);
    let (out, client) = traced(&push(&["-c"]), &s, "push2");
    ok(&out);
    assert_eq!(summary(&out)["files_skipped"], 4, "{}", said(&out));
    let node_after = bytes_read(&node_strace);
    assert!(client < 1 << 20, "the client read {client} bytes for -c");
    assert!(
        node_after - node_before < 1 << 20,
        "the node read {} bytes for -c",
        node_after - node_before
    );
}

#[test]
fn a_stale_cached_hash_is_refused_and_the_file_sent_again_from_disk() {
    let s = Scratch::new();
    let f = s.path("src/big.bin");
    old_file(&f, 9 << 20, 7);
    let plain = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let tls = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    // Sent from the file (sendfile) in plaintext, from memory over TLS.
    for (dir, node, transport) in [("a", &plain, &["--plaintext"][..]), ("b", &tls, &[][..])] {
        // Sent once: the sender keeps the file's record.
        let mut c = haul(&s.path("config"));
        c.arg("push")
            .args(transport)
            .arg(&f)
            .arg(node.url(&format!("{dir}/1/")));
        ok(&run(c, T));
        // Edited in place, its size and mtime kept: only the ctime tells,
        // and --ignore-ctime does not look.
        std::thread::sleep(Duration::from_millis(50));
        flip_keeping_mtime(&f, 6 << 20);
        let mut c = haul(&s.path("config"));
        c.args(["push", "--ignore-ctime"])
            .args(transport)
            .arg(&f)
            .arg(node.url(&format!("{dir}/2/")));
        let out = run(c, T);
        assert_eq!(out.status.code(), Some(0), "{}", said(&out));
        assert!(
            stderr(&out).contains("cached hash was stale"),
            "{}",
            stderr(&out)
        );
        assert_eq!(b3(&s.path(&format!("node/{dir}/2/big.bin"))), b3(&f));
        // The record was written again from what was read.
        let mut c = haul(&s.path("config"));
        c.args(["hash", "--ignore-ctime"]).arg(&f);
        let out = run(c, T);
        let line = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(line.starts_with(&b3(&f)), "{}", said(&out));
    }
}

#[test]
fn hash_prints_b3sum_lines_and_checks_them() {
    let s = Scratch::new();
    old_file(&s.path("t/big"), 5 << 20, 1);
    old_file(&s.path("t/sub/mid"), 200 << 10, 2);
    std::fs::write(s.path("t/sub/small"), b"small\n").unwrap();
    let mut c = haul(&s.path("config"));
    c.args(["hash"]).arg(s.path("t"));
    let out = run(c, T);
    ok(&out);
    let lines = String::from_utf8_lossy(&out.stdout).into_owned();
    for name in ["t/big", "t/sub/mid", "t/sub/small"] {
        let want = format!("{}  {}", b3(&s.path(name)), s.path(name).display());
        assert!(lines.lines().any(|l| l == want), "{want} in {lines}");
    }
    // Kept on the large files, none on the small one.
    let xattr = |p: &str| {
        Command::new("getfattr")
            .args(["--only-values", "-n", "user.haul.blake3"])
            .arg(s.path(p))
            .output()
            .is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
    };
    assert!(xattr("t/big") && xattr("t/sub/mid") && !xattr("t/sub/small"));

    std::fs::write(s.path("sums"), &lines).unwrap();
    let mut c = haul(&s.path("config"));
    c.args(["hash", "--check"]).arg(s.path("sums"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(said(&out).matches(": OK").count(), 3, "{}", said(&out));
    std::fs::write(s.path("t/sub/small"), b"SMALL\n").unwrap();
    let mut c = haul(&s.path("config"));
    c.args(["hash", "-c"]).arg(s.path("sums"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(said(&out).contains("small: FAILED"), "{}", said(&out));

    // A line that is not one is said and counted; the others are checked.
    std::fs::write(s.path("mixed"), format!("\nnot a line\n{lines}")).unwrap();
    let mut c = haul(&s.path("config"));
    c.args(["hash", "-c"]).arg(s.path("mixed"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        stderr(&out).contains("line 2: not a b3sum line"),
        "{}",
        said(&out)
    );
    assert_eq!(said(&out).matches(": OK").count(), 2, "{}", said(&out));

    // A symlink to a directory, named: what it points to.
    std::os::unix::fs::symlink(s.path("t"), s.path("tl")).unwrap();
    let mut c = haul(&s.path("config"));
    c.args(["hash"]).arg(s.path("tl"));
    let out = run(c, T);
    ok(&out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        3,
        "{}",
        said(&out)
    );
}

#[test]
fn a_filesystem_without_user_xattrs_keeps_records_in_the_store() {
    assert_root("mounting a ramfs");
    let s = Scratch::new();
    let dir = s.path("ramfs");
    std::fs::create_dir_all(&dir).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "ramfs", "ramfs"])
        .arg(&dir)
        .status()
        .is_ok_and(|st| st.success());
    assert!(mounted, "cannot mount a ramfs at {}", dir.display());
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(dir.clone());
    let f = dir.join("f");
    old_file(&f, 3 << 20, 3);
    let mut c = haul(&s.path("config"));
    c.args(["hash"]).arg(&f);
    let (out, first) = traced(&c, &s, "hash1");
    ok(&out);
    assert!(first >= 3 << 20);
    let store = s.path("config/cache/haul/hashes");
    let kept = walk_files(&store);
    assert_eq!(kept.len(), 1, "one record in {}: {kept:?}", store.display());
    let (out, second) = traced(&c, &s, "hash2");
    ok(&out);
    assert!(second < 1 << 20, "read {second} bytes the second time");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(&b3(&f)));
}

/// The records under a store (not its own `.pruned` stamp or a writer's
/// `.…tmp` file).
fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            } else if !e.file_name().to_string_lossy().starts_with('.') {
                out.push(e.path());
            }
        }
    }
    out
}

#[test]
fn a_fan_out_origin_sends_from_a_record_and_every_node_keeps_one() {
    let s = Scratch::new();
    let f = s.path("src/big");
    old_file(&f, 48 << 20, 5);
    // A file a 3-node plan cuts in pieces under 1 MiB (256 KiB): its record
    // keeps pieces fine enough for it too.
    let small = s.path("src/small");
    old_file(&small, 6 << 20, 6);
    // Kept by `haul hash`.
    let mut c = haul(&s.path("config"));
    c.args(["hash"]).arg(s.path("src"));
    ok(&run(c, T));
    let nodes: Vec<Node> = (0..3)
        .map(|i| {
            Node::start(
                &s.path(&format!("n{i}")),
                &s.path("config"),
                &["--open", "--plaintext"],
            )
        })
        .collect();
    let mut push = haul(&s.path("config"));
    push.args(["--json", "push", "--plaintext"])
        .arg(format!("{}/", s.path("src").display()));
    for n in &nodes {
        push.arg(n.url("in/"));
    }
    let (out, read) = traced(&push, &s, "fanout");
    ok(&out);
    assert!(read < 1 << 20, "the origin read {read} bytes");
    for i in 0..3 {
        let got = s.path(&format!("n{i}/in/big"));
        assert_eq!(b3(&got), b3(&f), "node {i}");
        assert_eq!(
            b3(&s.path(&format!("n{i}/in/small"))),
            b3(&small),
            "node {i}"
        );
        let kept = Command::new("getfattr")
            .args(["--only-values", "-n", "user.haul.blake3"])
            .arg(&got)
            .output()
            .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
        let stored = !walk_files(&s.path("config/cache/haul/hashes")).is_empty();
        assert!(kept || stored, "node {i} kept no record");
    }

    // Again, with a fourth node last in the chain: the first nodes hold
    // every file and skip it, and the origin seals the chunks they relay
    // from the records too (no reading).
    let fourth = Node::start(&s.path("n3"), &s.path("config"), &["--open", "--plaintext"]);
    let mut again = haul(&s.path("config"));
    again
        .args(["--json", "push", "--plaintext"])
        .arg(format!("{}/", s.path("src").display()));
    for n in nodes.iter().chain([&fourth]) {
        again.arg(n.url("in/"));
    }
    let (out, read) = traced(&again, &s, "fanout-again");
    ok(&out);
    assert!(
        read < 1 << 20,
        "the origin read {read} bytes the second time"
    );
    // The first three skipped (received nothing); the fourth got it all.
    let bytes: Vec<u64> = crate::fanout::fanout(&out)["nodes"]
        .as_array()
        .expect("node reports")
        .iter()
        .map(|n| n["bytes"].as_u64().unwrap_or(u64::MAX))
        .collect();
    assert_eq!(bytes, vec![0, 0, 0, (48 << 20) + (6 << 20)], "{bytes:?}");
    assert_eq!(b3(&s.path("n3/in/big")), b3(&f));
    assert_eq!(b3(&s.path("n3/in/small")), b3(&small));
}

#[test]
fn a_striped_fan_out_keeps_the_record_its_stripes_verified() {
    let s = Scratch::new();
    let f = s.path("src/big");
    old_file(&f, 48 << 20, 9);
    let start =
        |name: &str| Node::start(&s.path(name), &s.path("config"), &["--open", "--plaintext"]);
    let push = |nodes: &[&Node], name: &str| {
        let mut c = haul(&s.path("config"));
        c.args(["--json", "push", "--plaintext", "--plan", "stripes:2"])
            .arg(&f);
        for n in nodes {
            c.arg(n.url("in/"));
        }
        traced(&c, &s, name)
    };
    // No record yet: each stripe's send reads and hashes its range, and no
    // send reads the whole file; the origin keeps the record once every
    // stripe was verified as one version.
    let (a, b) = (start("a"), start("b"));
    let (out, read) = push(&[&a, &b], "first");
    ok(&out);
    let f0 = crate::fanout::fanout(&out);
    assert_eq!(f0["plan"]["shape"]["shape"], "stripes", "{f0}");
    // Each stripe's range once (and the sockets' few bytes): no send read
    // the file whole on top.
    assert!(
        (48 << 20..49 << 20).contains(&read),
        "the first striped send read {read} bytes"
    );
    let (c, d) = (start("c"), start("d"));
    let (out, read) = push(&[&c, &d], "second");
    ok(&out);
    assert!(read < 1 << 20, "the second striped send read {read} bytes");
    for n in ["a", "b", "c", "d"] {
        assert_eq!(b3(&s.path(&format!("{n}/in/big"))), b3(&f), "node {n}");
    }
}
