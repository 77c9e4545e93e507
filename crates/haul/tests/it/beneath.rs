//! Writes stay beneath the root: a hand-built peer names the root itself, and
//! a local user swaps directories inside the root (or a pull's DEST) for
//! symlinks to outside while sessions go on. Nothing outside is ever
//! created or changed: not its entries, not its modes, not its mtimes.

use std::net::TcpListener;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use haul_proto::{Entry, EntryKind, ErrorCode, Message, Request};

use crate::harness::*;
use crate::raw::{file, file_root, Raw};

const T: Duration = Duration::from_secs(60);

/// What a directory outside the root looks like: every path under it with
/// its mode, mtime and contents' hash. Compared before and after an attack.
fn snapshot(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let m = std::fs::symlink_metadata(&d).expect("stat");
        out.push(format!(
            "{} {:o} {}.{}",
            d.display(),
            m.mode(),
            m.mtime(),
            m.mtime_nsec()
        ));
        if !m.is_dir() {
            continue;
        }
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_file() {
                out.push(format!("{} {}", p.display(), b3(&p)));
            }
            if std::fs::symlink_metadata(&p).expect("stat").is_dir() {
                stack.push(p);
            } else {
                let m = std::fs::symlink_metadata(&p).expect("stat");
                out.push(format!("{} {:o} {}", p.display(), m.mode(), m.mtime()));
            }
        }
    }
    out.sort();
    out
}

/// A victim directory outside the root, shaped like what the attack aims at.
fn victim(s: &Scratch) -> PathBuf {
    let o = s.path("outside");
    std::fs::create_dir_all(o.join("e")).expect("mkdir");
    std::fs::write(o.join("e/keep"), b"precious").expect("write");
    std::fs::set_permissions(o.join("e"), std::fs::Permissions::from_mode(0o750)).expect("chmod");
    std::fs::set_permissions(&o, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    o
}

fn dir_entry(path: &str, mode: u32) -> Entry {
    Entry {
        kind: EntryKind::Dir,
        mode,
        mtime_sec: 1_000_000_000,
        ..file(path, 0)
    }
}

pub(crate) fn push_session(node: &Node) -> Raw {
    let mut raw = Raw::connect(&node.addr);
    assert!(matches!(
        raw.hello(Request::Push {
            dest: String::new(),
            checksum: false,
            replace_dirs: false,
            skip: Default::default(),
            backup: None,
            rate_hint: 0,
        }),
        Message::Welcome { .. }
    ));
    raw
}

pub(crate) fn open_node(s: &Scratch) -> Node {
    std::fs::create_dir_all(s.path("node")).expect("mkdir");
    std::fs::set_permissions(s.path("node"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    )
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777
}

/// `R/d` becomes a symlink to `outside` (the real `d` moves to `R/d.moved`).
fn swap_for_symlink(root: &Path, name: &str, outside: &Path) {
    std::fs::rename(root.join(name), root.join(format!("{name}.moved"))).expect("move");
    symlink(outside, root.join(name)).expect("symlink");
}

#[test]
fn no_peer_can_change_the_roots_own_mode() {
    let s = Scratch::new();
    let node = open_node(&s);
    let mut raw = push_session(&node);
    raw.send(&Message::Offer {
        content: None,
        id: 1,
        entry: dir_entry("", 0o777),
        first: 0,
        end: 0,
        seal: None,
    });
    match raw.recv() {
        Some(Message::FileError {
            id: 1,
            code: ErrorCode::BadPath,
            message,
        }) => assert!(message.contains("root itself"), "{message}"),
        other => panic!("expected the empty path refused, got {other:?}"),
    }
    raw.send(&Message::Bye);
    assert_eq!(raw.recv(), Some(Message::Bye));
    // Once the session ended, directory metadata was applied: the root's
    // own is untouched.
    std::thread::sleep(Duration::from_millis(300));
    drop(node);
    assert_eq!(mode(&s.path("node")), 0o755);
}

#[test]
fn a_directory_swapped_between_two_offers_leads_nowhere() {
    let s = Scratch::new();
    let outside = victim(&s);
    let node = open_node(&s);
    let root = s.path("node");
    let before = snapshot(&outside);
    let mut raw = push_session(&node);
    raw.send(&Message::Offer {
        content: None,
        id: 1,
        entry: dir_entry("d/e", 0o777),
        first: 0,
        end: 0,
        seal: None,
    });
    assert!(matches!(raw.recv(), Some(Message::Done { ok: true, .. })));
    // A local user swaps `d` for a symlink to a look-alike tree outside.
    swap_for_symlink(&root, "d", &outside);
    let entry = file("d/e/evil", 5);
    let answer = raw.offer_and_send(2, &entry, b"pwned");
    if let Some(Message::RangeStatus { ref bad, .. }) = answer {
        assert!(bad.is_empty());
        raw.send(&Message::Commit {
            id: 2,
            root: file_root(&entry, b"pwned"),
        });
        let _ = raw.recv_skipping_keepalives();
    }
    raw.send(&Message::Bye);
    let _ = raw.recv_skipping_keepalives();
    drop(raw);
    // Let the node end the session (it applies directory metadata then).
    std::thread::sleep(Duration::from_millis(300));
    drop(node);
    assert!(
        !outside.join("e/evil").exists(),
        "a file was created outside"
    );
    assert_eq!(snapshot(&outside), before, "something outside changed");
    // What was received landed inside, in the directory that was checked.
    let inside = root.join("d.moved/e/evil");
    assert!(
        !inside.exists() || std::fs::read(&inside).expect("read") == b"pwned",
        "inside copy"
    );
}

#[test]
fn a_swap_between_the_chunks_and_the_rename_of_a_multi_chunk_file_leads_nowhere() {
    let s = Scratch::new();
    let outside = victim(&s);
    let node = open_node(&s);
    let root = s.path("node");
    std::fs::create_dir_all(root.join("d/e")).expect("mkdir");
    let before = snapshot(&outside);
    let mut raw = push_session(&node);
    let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let entry = Entry {
        chunk_size: 1024,
        ..file("d/e/big", data.len() as u64)
    };
    match raw.offer_and_send(1, &entry, &data) {
        Some(Message::RangeStatus { bad, .. }) => assert!(bad.is_empty()),
        other => panic!("expected the range verified, got {other:?}"),
    }
    // Every chunk verified and staged; now `d` leads outside.
    swap_for_symlink(&root, "d", &outside);
    raw.send(&Message::Commit {
        id: 1,
        root: file_root(&entry, &data),
    });
    let done = raw.recv_skipping_keepalives();
    raw.send(&Message::Bye);
    let _ = raw.recv_skipping_keepalives();
    drop(raw);
    std::thread::sleep(Duration::from_millis(300));
    drop(node);
    assert!(!outside.join("e/big").exists(), "renamed outside");
    assert_eq!(snapshot(&outside), before, "something outside changed");
    if let Some(Message::Done { ok: true, .. }) = done {
        assert_eq!(
            std::fs::read(root.join("d.moved/e/big")).expect("inside"),
            data
        );
    }
}

/// A node played by the test: it lists `src/sub/{a,b}` and serves them,
/// calling `before_first_commit` once, between the first file's verified
/// chunks and its commit.
fn fake_node(listener: TcpListener, mut before_first_commit: impl FnMut() + Send + 'static) {
    let files: Vec<(&str, &[u8])> = vec![("src/sub/a", b"alpha"), ("src/sub/b", b"bravo")];
    let mut swapped = false;
    for stream in listener.incoming().take(2) {
        let mut raw = Raw::from_stream(stream.expect("accept"));
        let request = match raw.recv() {
            Some(Message::Hello { request, .. }) => request,
            other => panic!("expected Hello, got {other:?}"),
        };
        raw.send(&Message::Welcome {
            version: haul_proto::PROTOCOL_VERSION,
        });
        match request {
            Request::List { .. } => {
                for d in ["src", "src/sub"] {
                    raw.send(&Message::Listing {
                        entry: dir_entry(d, 0o777),
                    });
                }
                for (path, data) in &files {
                    raw.send(&Message::Listing {
                        entry: file(path, data.len() as u64),
                    });
                }
                raw.send(&Message::Bye);
                let _ = raw.recv_skipping_keepalives();
            }
            Request::Fetch { .. } => {
                let mut offered: Vec<(u32, Entry, &[u8])> = Vec::new();
                while let Some(msg) = raw.recv_skipping_keepalives() {
                    match msg {
                        Message::Want { id, path, dest, .. } => {
                            let (_, data) = files.iter().find(|(p, _)| *p == path).expect("known");
                            let entry = file(&dest, data.len() as u64);
                            raw.send(&Message::Offer {
                                content: None,
                                id,
                                entry: entry.clone(),
                                first: 0,
                                end: 1,
                                seal: None,
                            });
                            offered.push((id, entry, data));
                        }
                        Message::Need {
                            id, skip: false, ..
                        } => {
                            let (_, entry, data) =
                                offered.iter().find(|o| o.0 == id).expect("offered");
                            let (entry, data) = (entry.clone(), *data);
                            let chunks = raw.send_chunks(id, &entry, data);
                            raw.send(&Message::RangeEnd { id, chunks });
                        }
                        Message::RangeStatus { id, .. } => {
                            if !swapped {
                                swapped = true;
                                before_first_commit();
                            }
                            let (_, entry, data) =
                                offered.iter().find(|o| o.0 == id).expect("offered");
                            raw.send(&Message::Commit {
                                id,
                                root: file_root(entry, data),
                            });
                        }
                        Message::Bye => {
                            raw.send(&Message::Bye);
                            break;
                        }
                        _ => {}
                    }
                }
            }
            Request::Push { .. }
            | Request::Admit { .. }
            | Request::Relayed { .. }
            | Request::Prune { .. }
            | Request::Link { .. }
            | Request::Jump { .. } => {
                panic!("the client only lists and fetches")
            }
        }
    }
}

#[test]
fn a_pull_into_a_dest_whose_subdirectory_is_swapped_writes_nothing_outside() {
    let s = Scratch::new();
    let outside = s.path("outside");
    std::fs::create_dir_all(outside.join("keep")).expect("mkdir");
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    let before = snapshot(&outside);
    let dest = s.path("dest");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (swap_root, swap_to) = (dest.join("src"), outside.clone());
    let node = std::thread::spawn(move || {
        fake_node(listener, move || {
            swap_for_symlink(&swap_root, "sub", &swap_to)
        })
    });
    let mut c = haul(&s.path("config"));
    c.args([
        "pull",
        "--plaintext",
        "-j",
        "1",
        "--retries",
        "0",
        "--timeout",
        "10",
    ])
    .arg(format!("haul://{addr}/src"))
    .arg(&dest);
    let out = run(c, T);
    node.join().expect("fake node");
    assert!(
        !outside.join("a").exists() && !outside.join("b").exists(),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        snapshot(&outside),
        before,
        "something outside changed: {}",
        stderr(&out)
    );
    // Whatever was delivered is inside DEST, in the directory that was checked.
    for name in ["a", "b"] {
        let p = dest.join("src/sub.moved").join(name);
        assert!(!p.exists() || std::fs::read(&p).expect("read").len() == 5);
    }
    // DEST's own mode is the puller's, never the node's 0777.
    assert_ne!(mode(&dest) & 0o777, 0o777);
}

#[test]
fn racing_swaps_never_let_pushes_out() {
    let s = Scratch::new();
    let outside = s.path("outside");
    std::fs::create_dir_all(outside.join("s")).expect("mkdir");
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    for i in 0..20 {
        write_file(&s.path(&format!("src/race/f{i}")), 100, i);
        write_file(&s.path(&format!("src/race/s/g{i}")), 100, 100 + i);
    }
    // Three chunks: staged in the state directory, renamed into place.
    write_file(&s.path("src/race/s/big"), 9 << 20, 7);
    let node = open_node(&s);
    let root = s.path("node");
    std::fs::create_dir_all(root.join("x/race/s")).expect("mkdir");
    let before = snapshot(&outside);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, dir, outside) = (stop.clone(), root.join("x"), outside.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if std::fs::rename(dir.join("race"), dir.join("race.real")).is_ok() {
                    let _ = symlink(&outside, dir.join("race"));
                    std::thread::sleep(Duration::from_micros(200));
                    let _ = std::fs::remove_file(dir.join("race"));
                    // A push may have made a new `race` while the real one
                    // was away (the node creates what is missing): it goes,
                    // or every later swap would fail and the race stop.
                    if std::fs::rename(dir.join("race.real"), dir.join("race")).is_err() {
                        let _ = std::fs::remove_dir_all(dir.join("race"));
                        let _ = std::fs::rename(dir.join("race.real"), dir.join("race"));
                    }
                    swaps += 1;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            swaps
        })
    };
    let started = Instant::now();
    let mut pushes = 0;
    while started.elapsed() < Duration::from_secs(10) {
        let mut c = haul(&s.path("config"));
        c.args(["push", "--plaintext", "-q", "-j", "2", "--retries", "0"])
            .arg(s.path("src/race"))
            .arg(node.url("x"));
        let _ = run(c, T);
        pushes += 1;
        // Changed sources make every push send again.
        write_file(&s.path("src/race/f0"), 100, pushes as u64);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper");
    drop(node);
    assert!(swaps > 100 && pushes > 3, "{swaps} swaps, {pushes} pushes");
    assert_eq!(snapshot(&outside), before, "something outside changed");
}
