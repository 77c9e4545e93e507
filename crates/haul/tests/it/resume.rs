//! Kill either side mid-transfer; the same command again sends only what
//! was not yet verified.

use std::time::Duration;

use crate::harness::*;
use crate::proxy::{plaintext_node_behind, Faults, Proxy};

const SIZE: u64 = 100 << 20;
const T: Duration = Duration::from_secs(120);

fn slow(node: &Node) -> Proxy {
    Proxy::start(
        &node.addr,
        Faults {
            rate: Some(25 << 20),
            ..Faults::default()
        },
    )
}

/// The largest staging file under `root`: how much of a file arrived.
pub(crate) fn partial_bytes(root: &std::path::Path) -> u64 {
    std::fs::read_dir(root.join(".haul/partial"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// Starts `cmd` with its output discarded and waits until `root` holds `mib`
/// MiB of partial data.
fn start_until(
    mut cmd: std::process::Command,
    root: &std::path::Path,
    mib: u64,
) -> std::process::Child {
    crate::harness::with_test_transport(&mut cmd);
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let child = cmd.spawn().expect("spawn");
    wait_for(T, "partial data to arrive", || {
        partial_bytes(root) >= mib << 20
    });
    child
}

/// The resumed transfer: succeeds, re-sends at most `SIZE - kept` bytes.
fn assert_resumed(out: &std::process::Output, kept: u64) {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
    let sent = summary(out)["bytes_transferred"].as_u64().expect("bytes");
    assert!(
        sent <= SIZE - kept,
        "re-sent {sent} bytes of {SIZE}: verified chunks were sent again"
    );
}

fn push_cmd(s: &Scratch, url: &str, retries: &str) -> std::process::Command {
    let mut c = haul(&s.path("config"));
    c.args([
        "push",
        "--json",
        "--plaintext",
        "-j",
        "1",
        "--retries",
        retries,
    ])
    .arg(s.path("src/file.bin"))
    .arg(url);
    c
}

#[test]
fn resume_after_sigkill_of_the_sender() {
    let s = Scratch::new();
    write_file(&s.path("src/file.bin"), SIZE, 7);
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let proxy = slow(&node);
    let mut child = start_until(push_cmd(&s, &proxy.url(""), "0"), &s.path("node"), 40);
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    assert!(!s.path("node/file.bin").exists());

    let out = run(push_cmd(&s, &node.url(""), "3"), T);
    assert_resumed(&out, 32 << 20);
    assert_eq!(b3(&s.path("node/file.bin")), b3(&s.path("src/file.bin")));
}

#[test]
fn resume_after_sigkill_of_the_receiving_node() {
    let s = Scratch::new();
    write_file(&s.path("src/file.bin"), SIZE, 8);
    let mut node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let proxy = slow(&node);
    let mut child = start_until(push_cmd(&s, &proxy.url(""), "0"), &s.path("node"), 40);
    node.kill9();
    let status = child.wait().expect("wait");
    assert!(!status.success(), "the client must report the lost node");
    drop(proxy);

    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let out = run(push_cmd(&s, &node.url(""), "3"), T);
    assert_resumed(&out, 32 << 20);
    assert_eq!(b3(&s.path("node/file.bin")), b3(&s.path("src/file.bin")));
}

#[test]
fn resume_a_pull_after_sigkill_of_the_puller() {
    let s = Scratch::new();
    write_file(&s.path("node/file.bin"), SIZE, 9);
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let proxy = slow(&node);
    // Into DEST, which exists (a missing one would name the one file).
    std::fs::create_dir_all(s.path("dst")).expect("mkdir");
    let pull = |url: String| {
        let mut c = haul(&s.path("config"));
        c.args(["pull", "--json", "--plaintext", "-j", "1"])
            .arg(url)
            .arg(s.path("dst"));
        c
    };
    let mut child = start_until(pull(proxy.url("file.bin")), &s.path("dst"), 40);
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();

    let out = run(pull(node.url("file.bin")), T);
    assert_resumed(&out, 32 << 20);
    assert_eq!(b3(&s.path("dst/file.bin")), b3(&s.path("node/file.bin")));
}

/// A pull whose listing breaks off (its connection cut after a few
/// entries) lists again from where it stopped and fetches everything;
/// with no retries left it ends failed, saying so, never as a whole pull
/// (what the listing never reached was never queued: a pull that exited 0
/// with half a tree was seen through a lossy UDP path). Run again, it
/// fetches the rest.
#[test]
fn a_pull_whose_listing_breaks_off_lists_again_or_fails_never_half_done() {
    let s = Scratch::new();
    crate::transfer::make_tree(&s.path("node/in/data"));
    let (node, proxy) = plaintext_node_behind(
        &s,
        Faults {
            cut_first_down_at: Some(1500),
            ..Faults::default()
        },
    );
    let pull = |url: String, dest: &str, retries: &str| {
        let mut c = haul(&s.path("config"));
        c.args([
            "pull",
            "--json",
            "--plaintext",
            "-j",
            "2",
            "--retries",
            retries,
        ])
        .arg(url)
        .arg(s.path(dest));
        c
    };
    let out = run(pull(proxy.url("in/data"), "again", "3"), T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("listing again from where it stopped"),
        "{}",
        said(&out)
    );
    assert_eq!(
        listing(&s.path("node/in/data")),
        listing(&s.path("again/data"))
    );
    // Each entry once: none listed twice by the second listing.
    let starts = String::from_utf8_lossy(&out.stdout)
        .matches("\"file_start\"")
        .count();
    let files = listing(&s.path("node/in/data"))
        .iter()
        .filter(|l| !l.ends_with('/') && !l.contains(" -> "))
        .count();
    assert_eq!(starts, files, "{}", said(&out));

    // The proxy cuts only its first connection: a new one for the next run.
    let proxy = Proxy::start(
        &node.addr,
        Faults {
            cut_first_down_at: Some(1500),
            ..Faults::default()
        },
    );
    let out = run(pull(proxy.url("in/data"), "back", "0"), T);
    assert_eq!(out.status.code(), Some(23), "{}", said(&out));
    let sum = summary(&out);
    assert!(sum["entries_ok"].as_u64().unwrap_or(0) > 0, "{sum}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("listing broke off"), "{stdout}");
    assert_ne!(
        listing(&s.path("node/in/data")),
        listing(&s.path("back/data"))
    );

    let out = run(pull(node.url("in/data"), "back", "3"), T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(
        listing(&s.path("node/in/data")),
        listing(&s.path("back/data"))
    );
}

#[test]
fn sigterm_stops_the_node_and_the_transfer_resumes() {
    let s = Scratch::new();
    write_file(&s.path("src/file.bin"), SIZE, 10);
    let mut node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext", "--grace", "1"],
    );
    let proxy = slow(&node);
    let mut child = start_until(push_cmd(&s, &proxy.url(""), "0"), &s.path("node"), 20);
    unsafe { libc::kill(node.child.id() as i32, libc::SIGTERM) };
    let started = std::time::Instant::now();
    let status = node.child.wait().expect("wait");
    assert!(status.success(), "the node exits cleanly on SIGTERM");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "grace period respected"
    );
    let _ = child.wait();
    assert!(!s.path("node/file.bin").exists());
    drop(proxy);

    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let out = run(push_cmd(&s, &node.url(""), "3"), T);
    assert_resumed(&out, 16 << 20);
    assert_eq!(b3(&s.path("node/file.bin")), b3(&s.path("src/file.bin")));
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn disk_full_is_a_clear_error_and_stays_resumable() {
    crate::harness::assert_root("mounting a small tmpfs");
    let s = Scratch::new();
    write_file(&s.path("src/file.bin"), 24 << 20, 11);
    let root = s.path("node");
    std::fs::create_dir_all(&root).expect("mkdir");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=12m", "tmpfs"])
        .arg(&root)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !mounted {
        eprintln!("skipped: cannot mount tmpfs here");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _guard = Unmount(root.clone());
    let node = Node::start(&root, &s.path("config"), &["--open", "--plaintext"]);
    let out = run(push_cmd(&s, &node.url(""), "0"), T);
    assert_eq!(out.status.code(), Some(23), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("disk full"), "{text}");
    assert!(
        !root.join("file.bin").exists(),
        "nothing under the final name"
    );
    assert!(
        partial_bytes(&root) > 0,
        "the partial file stays for a resume"
    );
}
