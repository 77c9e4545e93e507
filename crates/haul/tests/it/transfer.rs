//! Trees, names, sizes, modes, mtimes, concurrency, local copies.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::harness::*;

const T: Duration = Duration::from_secs(120);

pub(crate) fn make_tree(root: &std::path::Path) {
    write_file(&root.join("big.bin"), 21 << 20, 1); // several 4 MiB chunks, last one short
    write_file(&root.join("nested/deeper/still/f.txt"), 1000, 2);
    write_file(&root.join("name with spaces ü 日本.txt"), 333, 3);
    write_file(&root.join("zero"), 0, 4);
    std::fs::create_dir_all(root.join("empty/dir")).expect("mkdir");
    for i in 0..40 {
        write_file(&root.join(format!("many/{i:03}")), 100 + i * 37, 10 + i);
    }
    std::os::unix::fs::symlink("nested/deeper", root.join("link")).expect("symlink");
    std::fs::set_permissions(root.join("zero"), std::fs::Permissions::from_mode(0o640))
        .expect("chmod");
    let f = std::fs::File::options()
        .write(true)
        .open(root.join("nested/deeper/still/f.txt"))
        .expect("open");
    f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_234_567_890))
        .expect("mtime");
    // Directory mtimes are set after their content is in place.
    let d = std::fs::File::open(root.join("nested/deeper")).expect("dir");
    d.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000))
        .expect("dir mtime");
}

fn assert_dir_mtime(root: &std::path::Path) {
    let m = std::fs::metadata(root.join("nested/deeper")).expect("dir meta");
    assert_eq!(
        m.modified().expect("mtime"),
        std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000),
        "directory mtime of {}",
        root.display()
    );
}

#[test]
fn push_then_pull_a_tree_over_tls() {
    let s = Scratch::new();
    let src = s.path("src/data");
    make_tree(&src);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "sekrit"]);
    let mut c = haul(&s.path("config"));
    c.args(["push", "--json", "--token", "sekrit"])
        .arg(&src)
        .arg(node.url("in"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sum = summary(&out);
    assert_eq!(sum["failed"], 0);
    assert_eq!(listing(&src), listing(&s.path("node/in/data")));
    assert_dir_mtime(&s.path("node/in/data"));
    // The summary carries every file's BLAKE3.
    let big = sum["files"]
        .as_array()
        .expect("files")
        .iter()
        .find(|f| f["path"] == "data/big.bin")
        .expect("big");
    assert_eq!(big["blake3"], b3(&src.join("big.bin")));
    // Modes and mtimes survive.
    let meta = std::fs::metadata(s.path("node/in/data/zero")).expect("meta");
    assert_eq!(meta.permissions().mode() & 0o777, 0o640);
    let m = std::fs::metadata(s.path("node/in/data/nested/deeper/still/f.txt")).expect("meta");
    assert_eq!(
        m.modified().expect("mtime"),
        std::time::UNIX_EPOCH + Duration::from_secs(1_234_567_890)
    );
    // Nothing staged is left behind.
    assert_eq!(
        std::fs::read_dir(s.path("node/.haul/partial"))
            .expect("partial")
            .count(),
        0
    );

    // The same push again sends nothing.
    let mut c = haul(&s.path("config"));
    c.args(["push", "--json", "--token", "sekrit"])
        .arg(&src)
        .arg(node.url("in"));
    let out = run(c, T);
    let sum = summary(&out);
    assert_eq!(sum["bytes_transferred"], 0);
    assert_eq!(sum["files_skipped"], 44);

    // And back: pull into another place.
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--json", "--token", "sekrit", "--timeout", "5"])
        .arg(node.url("in/data"))
        .arg(s.path("back"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // No connection stalled into a timeout and a retry.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("\"warning\""), "{stdout}");
    assert_eq!(listing(&src), listing(&s.path("back/data")));
    assert_dir_mtime(&s.path("back/data"));
    assert!(
        !s.path("back/.haul").exists(),
        "no state dir left after a clean pull"
    );
}

#[test]
fn plaintext_with_many_connections_and_streams() {
    let s = Scratch::new();
    let src = s.path("src");
    make_tree(&src);
    write_file(&src.join("huge.bin"), 40 << 20, 99);
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let flags = [
        "--json",
        "--plaintext",
        "-j",
        "4",
        "--streams",
        "4",
        "--split-min",
        "1M",
    ];
    let push = || {
        let mut c = haul(&s.path("config"));
        c.arg("push")
            .args(flags)
            .arg(format!("{}/", src.display()))
            .arg(node.url(""));
        let out = run(c, T);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        out
    };
    let out = push();
    // The most connections open at once: -j 4 caps them (all four open
    // unless the work ran out first).
    let used = summary(&out)["connections"].as_u64().expect("connections");
    assert!((2..=4).contains(&used), "{used}");
    assert_eq!(listing(&src), listing(&s.path("node")));
    // The split file counts once, with every stream's bytes.
    let big = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "file_done" && v["path"] == "big.bin")
        .collect::<Vec<_>>();
    assert_eq!(big.len(), 1, "{big:?}");
    assert_eq!(big[0]["sent"], 21 << 20);

    // Pushed again: every file is in place, split or not — nothing is sent.
    let sum = summary(&push());
    assert_eq!(sum["bytes_transferred"], 0, "{sum}");
    assert_eq!(sum["files_ok"], 0, "{sum}");
    assert_eq!(sum["failed"], 0, "{sum}");
    // make_tree's 44 files (big.bin split in 4) and huge.bin (split in 4).
    assert_eq!(sum["files_skipped"], 45, "{sum}");

    let mut c = haul(&s.path("config"));
    c.arg("pull")
        .args(flags)
        .arg(node.url(""))
        .arg(s.path("back"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(listing(&src), listing(&s.path("back")));
}

#[test]
fn local_copy_through_the_same_engine() {
    let s = Scratch::new();
    let src = s.path("src");
    make_tree(&src);
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--json", "-j", "2"])
        .arg(format!("{}/", src.display()))
        .arg(s.path("dst"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(listing(&src), listing(&s.path("dst")));
    assert_dir_mtime(&s.path("dst"));
    assert_eq!(summary(&out)["failed"], 0);
}

#[test]
fn usage_errors_exit_2() {
    let s = Scratch::new();
    let out = run(
        {
            let mut c = haul(&s.path("c"));
            c.args(["push", "/nonexistent/x", "haul://127.0.0.1:1/d"]);
            c
        },
        T,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    let out = run(
        {
            let mut c = haul(&s.path("c"));
            c.args(["serve", "--root"]).arg(s.path("r"));
            c
        },
        T,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--open"), "{}", stderr(&out));
    // A root that does not exist (a mistyped mount point) is refused, and
    // not made; --create-root makes it.
    let serve = |extra: &[&str]| {
        let mut c = haul(&s.path("c"));
        c.args([
            "serve",
            "--open",
            "--plaintext",
            "--listen",
            "127.0.0.1:0",
            "--root",
        ])
        .arg(s.path("typo/mnt"))
        .args(extra);
        c
    };
    let out = run(serve(&[]), T);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--create-root"), "{}", stderr(&out));
    assert!(!s.path("typo").exists());
    let mut c = serve(&["--create-root"]);
    let node = Killed(c.stdout(std::process::Stdio::null()).spawn().unwrap());
    wait_for(T, "the root made", || s.path("typo/mnt").is_dir());
    drop(node);
    let out = run(
        {
            let mut c = haul(&s.path("c"));
            c.args(["push", "-j", "0", "/tmp", "haul://127.0.0.1:1/d"]);
            c
        },
        T,
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn demo_runs_and_verifies() {
    let s = Scratch::new();
    let mut c = haul(&s.path("config"));
    c.args(["demo", "--size", "8", "--json"])
        .env("TMPDIR", s.path(""));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let demo = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "demo")
        .expect("demo event");
    assert_eq!(demo["verified"], true);
}

#[test]
fn a_changed_source_replaces_the_old_copy_atomically() {
    let s = Scratch::new();
    write_file(&s.path("src/small"), 100, 1);
    write_file(&s.path("src/big"), 9 << 20, 2);
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let push = || {
        let mut c = haul(&s.path("config"));
        c.args(["push", "-q", "--plaintext"])
            .arg(format!("{}/", s.path("src").display()))
            .arg(node.url(""));
        let out = run(c, T);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    };
    push();
    std::thread::sleep(Duration::from_millis(20));
    write_file(&s.path("src/small"), 120, 3);
    write_file(&s.path("src/big"), 9 << 20, 4);
    push();
    assert_eq!(listing(&s.path("src")), listing(&s.path("node")));
    // No staging names are left beside the files.
    let names: Vec<String> = std::fs::read_dir(s.path("node"))
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| n == ".haul" || !n.ends_with(".haul")),
        "{names:?}"
    );
}

/// The `warning` events of a `--json` run.
fn warnings(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "warning")
        .map(|v| v["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn links_special_files_and_mode_changes_as_rsync_would() {
    let s = Scratch::new();
    let src = s.path("src");
    write_file(&src.join("tree/f"), 10, 1);
    write_file(&src.join("target.txt"), 5, 2);
    std::os::unix::fs::symlink("target.txt", src.join("mylink")).expect("symlink");
    std::os::unix::fs::symlink("tree", src.join("treelink")).expect("symlink");
    std::os::unix::fs::symlink("/etc/passwd", src.join("tree/abs")).expect("symlink");
    let fifo = std::ffi::CString::new(src.join("tree/fifo").to_str().expect("utf8")).expect("c");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let push = |args: &[&std::path::Path], dest: &str| {
        let mut c = haul(&s.path("config"));
        c.args(["push", "--json"]).args(args).arg(node.url(dest));
        run(c, T)
    };

    // The link's own mtime, set without following it.
    let t = libc::timespec {
        tv_sec: 1_234_567_890,
        tv_nsec: 0,
    };
    let link = std::ffi::CString::new(src.join("mylink").to_str().expect("utf8")).expect("c");
    // SAFETY: a valid NUL-terminated path and two timespecs.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            link.as_ptr(),
            [t, t].as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(rc, 0);

    // Symlinks named as sources arrive as themselves, under their own names,
    // with their own mtimes.
    let out = push(&[&src.join("mylink"), &src.join("treelink")], "links");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let read = |p: &str| std::fs::read_link(s.path("node/links").join(p)).expect("link");
    assert_eq!(read("mylink"), std::path::Path::new("target.txt"));
    assert_eq!(read("treelink"), std::path::Path::new("tree"));
    assert!(!s.path("node/links/target.txt").exists());
    let m = std::fs::symlink_metadata(s.path("node/links/mylink")).expect("meta");
    assert_eq!(
        m.modified().expect("mtime"),
        std::time::UNIX_EPOCH + Duration::from_secs(1_234_567_890)
    );

    // A FIFO and an absolute link are skipped with a warning naming them,
    // and the rest verifies: exit 0.
    let out = push(&[&src.join("tree")], "t");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(summary(&out)["failed"], 0);
    let w = warnings(&out);
    assert!(w.iter().any(|m| m.contains("tree/fifo")), "{w:?}");
    assert!(w.iter().any(|m| m.contains("tree/abs")), "{w:?}");
    assert_eq!(std::fs::read(s.path("node/t/tree/f")).expect("f").len(), 10);

    // Only the mode changed at the source: the copy takes it, nothing is sent.
    std::fs::set_permissions(src.join("tree/f"), std::fs::Permissions::from_mode(0o600))
        .expect("chmod");
    let out = push(&[&src.join("tree")], "t");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(summary(&out)["files_skipped"], 1);
    let mode = std::fs::metadata(s.path("node/t/tree/f"))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn checksum_copies_only_a_file_changed_with_size_and_mtime_kept() {
    let s = Scratch::new();
    for i in 0..3 {
        write_file(&s.path(&format!("src/f{i}.bin")), 5 << 20, i);
    }
    let copy = |extra: &[&str]| {
        let mut c = haul(&s.path("config"));
        c.args(["--json", "pull"])
            .arg(format!("{}/", s.path("src").display()))
            .arg(s.path("dst"))
            .args(extra);
        let out = run(c, T);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        summary(&out)
    };
    copy(&[]);
    // One byte of f1 changes; its size and mtime are put back.
    let f1 = s.path("src/f1.bin");
    flip_keeping_mtime(&f1, 4_000_000);
    // The quick check cannot see it.
    let sum = copy(&[]);
    assert_eq!(
        (sum["files_ok"].as_u64(), sum["files_skipped"].as_u64()),
        (Some(0), Some(3))
    );
    assert_ne!(b3(&f1), b3(&s.path("dst/f1.bin")));
    // --checksum does, and copies that file alone.
    let sum = copy(&["--checksum"]);
    assert_eq!(
        (sum["files_ok"].as_u64(), sum["files_skipped"].as_u64()),
        (Some(1), Some(2)),
        "{sum}"
    );
    assert_eq!(sum["files"][0]["path"], "f1.bin");
    assert_eq!(listing(&s.path("src")), listing(&s.path("dst")));
}

/// A child process killed and waited for when it goes out of scope.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
