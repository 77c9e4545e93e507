//! Untrusted peers: path escapes from a hand-built client, malformed frames,
//! wrong tokens, changed keys, peers that stop answering.

use std::io::Write;
use std::time::{Duration, Instant};

use haul_proto::{ChunkHeader, Entry, EntryKind, ErrorCode, Message, Request};

use crate::harness::*;
use crate::proxy::{Faults, Proxy};
use crate::raw::{file, Raw};

const T: Duration = Duration::from_secs(60);

#[test]
fn a_malicious_pusher_cannot_write_outside_the_root() {
    let s = Scratch::new();
    let outside = s.path("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::fs::create_dir_all(s.path("node")).expect("mkdir");
    std::os::unix::fs::symlink(&outside, s.path("node/out")).expect("symlink");
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );

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
    let evil = [
        "../evil",
        "a/../../evil",
        "/tmp/evil",
        "out/evil",
        "a//b",
        ".haul/partial/x",
        "a\\..\\..\\evil",
    ];
    let mut id = 0;
    for path in evil {
        id += 1;
        raw.send(&Message::Offer {
            content: None,
            id,
            entry: file(path, 5),
            first: 0,
            end: 1,
            seal: None,
        });
        match raw.recv() {
            Some(Message::FileError {
                id: got,
                code: ErrorCode::BadPath,
                message,
            }) => {
                assert_eq!(got, id);
                assert!(!message.is_empty());
            }
            other => panic!("{path}: expected a BadPath error, got {other:?}"),
        }
    }
    let long = "n".repeat(300);
    let nul = "a\0b".to_owned();
    for path in [long.as_str(), nul.as_str()] {
        id += 1;
        raw.send(&Message::Offer {
            content: None,
            id,
            entry: file(path, 5),
            first: 0,
            end: 1,
            seal: None,
        });
        assert!(matches!(
            raw.recv(),
            Some(Message::FileError {
                code: ErrorCode::BadPath,
                ..
            })
        ));
    }
    // Symlinks that point out of the root are refused.
    for target in ["/etc", "../../..", "x/../../.."] {
        id += 1;
        let entry = Entry {
            kind: EntryKind::Symlink {
                target: target.into(),
            },
            ..file("l", 0)
        };
        raw.send(&Message::Offer {
            content: None,
            id,
            entry,
            first: 0,
            end: 0,
            seal: None,
        });
        assert!(
            matches!(raw.recv(), Some(Message::FileError { .. })),
            "{target}"
        );
    }
    // A chain of links that each look inside but climb out together:
    // `a/s -> ..` is fine on its own; `y -> a/s/../outside` would leave.
    id += 1;
    let dir = Entry {
        kind: EntryKind::Dir,
        ..file("a", 0)
    };
    raw.send(&Message::Offer {
        content: None,
        id,
        entry: dir,
        first: 0,
        end: 0,
        seal: None,
    });
    assert!(matches!(raw.recv(), Some(Message::Done { ok: true, .. })));
    id += 1;
    let up = Entry {
        kind: EntryKind::Symlink {
            target: "..".into(),
        },
        ..file("a/s", 0)
    };
    raw.send(&Message::Offer {
        content: None,
        id,
        entry: up,
        first: 0,
        end: 0,
        seal: None,
    });
    assert!(matches!(raw.recv(), Some(Message::Done { ok: true, .. })));
    for (link, target) in [("y", "a/s/../outside"), (".x.haul", "a/s/../../outside/x")] {
        id += 1;
        let entry = Entry {
            kind: EntryKind::Symlink {
                target: target.into(),
            },
            ..file(link, 0)
        };
        raw.send(&Message::Offer {
            content: None,
            id,
            entry,
            first: 0,
            end: 0,
            seal: None,
        });
        assert!(
            matches!(raw.recv(), Some(Message::FileError { .. })),
            "{link} -> {target}"
        );
    }
    // A file whose staging name an attacker might have pre-planted is still
    // written only where it belongs.
    id += 1;
    let data = b"hello";
    let digest = *blake3::hash(data).as_bytes();
    raw.send(&Message::Offer {
        content: None,
        id,
        entry: file("x", 5),
        first: 0,
        end: 1,
        seal: None,
    });
    assert!(matches!(raw.recv(), Some(Message::Need { .. })));
    raw.send(&Message::Chunk(ChunkHeader {
        packed: None,
        from_record: false,
        id,
        index: 0,
        len: 5,
        digest,
        seal: None,
    }));
    raw.s.write_all(data).expect("payload");
    raw.send(&Message::RangeEnd { id, chunks: 1 });
    assert!(matches!(raw.recv(), Some(Message::RangeStatus { ref bad, .. }) if bad.is_empty()));
    raw.send(&Message::Commit { id, root: digest });
    assert!(matches!(raw.recv(), Some(Message::Done { ok: true, .. })));
    assert_eq!(std::fs::read(s.path("node/x")).expect("x"), data);

    raw.send(&Message::Bye);
    assert_eq!(raw.recv(), Some(Message::Bye));

    // A bad destination is refused at the handshake.
    let mut raw = Raw::connect(&node.addr);
    assert!(matches!(
        raw.hello(Request::Push {
            dest: "../up".into(),
            checksum: false,
            replace_dirs: false,
            skip: Default::default(),
            backup: None,
            rate_hint: 0,
        }),
        Message::Refused {
            code: ErrorCode::BadPath,
            ..
        }
    ));

    assert_eq!(
        std::fs::read_dir(&outside).expect("outside").count(),
        0,
        "nothing written outside"
    );
    assert!(!s.path("evil").exists() && !s.path("node/evil").exists());
}

#[test]
fn a_malicious_puller_cannot_read_outside_the_root() {
    let s = Scratch::new();
    write_file(&s.path("outside/secret"), 10, 1);
    write_file(&s.path("node/ok"), 10, 2);
    std::os::unix::fs::symlink(s.path("outside"), s.path("node/out")).expect("symlink");
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );

    let mut raw = Raw::connect(&node.addr);
    assert!(matches!(
        raw.hello(Request::List {
            path: "out".into(),
            sums: false,
            keep: Default::default(),
            since: None,
        }),
        Message::Refused { .. }
    ));
    let mut raw = Raw::connect(&node.addr);
    assert!(matches!(
        raw.hello(Request::List {
            path: "../".into(),
            sums: false,
            keep: Default::default(),
            since: None,
        }),
        Message::Refused { .. }
    ));

    let mut raw = Raw::connect(&node.addr);
    assert!(matches!(
        raw.hello(Request::Fetch {
            keep: Default::default(),
            compress: 0,
            rate_hint: 0,
        }),
        Message::Welcome { .. }
    ));
    for (id, path) in [
        (1, "out/secret"),
        (2, "../outside/secret"),
        (3, "/etc/passwd"),
        (4, "missing"),
    ] {
        raw.send(&Message::Want {
            id,
            path: path.into(),
            dest: "x".into(),
            first: 0,
            end: u32::MAX,
        });
        assert!(
            matches!(raw.recv(), Some(Message::FileError { id: got, .. }) if got == id),
            "{path}"
        );
    }
    // A legitimate want still works on the same connection.
    raw.send(&Message::Want {
        id: 9,
        path: "ok".into(),
        dest: "ok".into(),
        first: 0,
        end: u32::MAX,
    });
    assert!(matches!(raw.recv(), Some(Message::Offer { id: 9, .. })));
}

#[test]
fn malformed_frames_close_only_that_connection() {
    let s = Scratch::new();
    write_file(&s.path("src/f"), 1000, 1);
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );

    // An oversized length prefix.
    let mut raw = Raw::connect(&node.addr);
    raw.s
        .write_all(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3])
        .expect("write");
    assert_eq!(raw.recv(), None, "connection closed");

    // A chunk header announcing 1 GiB for a 10-byte file.
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
    raw.send(&Message::Offer {
        content: None,
        id: 1,
        entry: file("f10", 10),
        first: 0,
        end: 1,
        seal: None,
    });
    assert!(matches!(raw.recv(), Some(Message::Need { .. })));
    raw.send(&Message::Chunk(ChunkHeader {
        packed: None,
        from_record: false,
        id: 1,
        index: 0,
        len: 1 << 30,
        digest: [0; 32],
        seal: None,
    }));
    assert_eq!(raw.recv(), None, "connection closed");
    assert!(!s.path("node/f10").exists());

    // Garbage bytes instead of a hello.
    let mut raw = Raw::connect(&node.addr);
    raw.s.write_all(&[0, 0, 0, 3, 200, 1, 1]).expect("write");
    assert_eq!(raw.recv(), None);

    // The node still serves everyone else.
    let mut c = haul(&s.path("config"));
    c.args(["push", "--plaintext", "-q"])
        .arg(s.path("src/f"))
        .arg(node.url(""));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(b3(&s.path("node/f")), b3(&s.path("src/f")));
}

#[test]
fn wrong_or_missing_token_is_refused() {
    let s = Scratch::new();
    write_file(&s.path("src/f"), 10, 1);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "right"]);
    for token in [Some("wrong"), None] {
        let mut c = haul(&s.path("config"));
        c.args(["push", "-q"])
            .arg(s.path("src/f"))
            .arg(node.url(""));
        if let Some(t) = token {
            c.args(["--token", t]);
        }
        let out = run(c, T);
        assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
        assert!(stderr(&out).contains("token"), "{}", stderr(&out));
    }
    assert!(!s.path("node/f").exists());
    // The token can come from the environment too.
    let mut c = haul(&s.path("config"));
    c.args(["push", "-q"])
        .arg(s.path("src/f"))
        .arg(node.url(""))
        .env("HAUL_TOKEN", "right");
    assert_eq!(run(c, T).status.code(), Some(0));
}

#[test]
fn a_changed_server_key_is_refused() {
    let s = Scratch::new();
    write_file(&s.path("src/f"), 10, 1);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let fp = node.fingerprint.clone().expect("fingerprint");

    // Explicit pin: the right one works, another is refused.
    let mut c = haul(&s.path("config"));
    c.args(["push", "-q", "--fingerprint", &fp])
        .arg(s.path("src/f"))
        .arg(node.url(""));
    assert_eq!(run(c, T).status.code(), Some(0));
    let mut c = haul(&s.path("config"));
    c.args([
        "push",
        "-q",
        "--fingerprint",
        "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ])
    .arg(s.path("src/f"))
    .arg(node.url(""));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(40), "{}", stderr(&out));
    assert!(stderr(&out).contains("presented key"), "{}", stderr(&out));
    // The pin came from the command line: no known-hosts advice.
    assert!(
        !stderr(&out).contains("remove its line"),
        "{}",
        stderr(&out)
    );

    // Trust on first use, then a different key at the same address.
    let mut c = haul(&s.path("config"));
    c.args(["push", "-q"])
        .arg(s.path("src/f"))
        .arg(node.url("tofu"));
    assert_eq!(run(c, T).status.code(), Some(0));
    let kh = s.path("config/known_hosts");
    let text = std::fs::read_to_string(&kh).expect("known_hosts written");
    assert!(text.contains(&fp));
    std::fs::write(
        &kh,
        text.replace(&fp, "SHA256:someotherkeyAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
    )
    .expect("write");
    let mut c = haul(&s.path("config"));
    c.args(["push", "-q"])
        .arg(s.path("src/f"))
        .arg(node.url("tofu2"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(40), "{}", stderr(&out));
    assert!(stderr(&out).contains("remove its line"), "{}", stderr(&out));
    assert!(!s.path("node/tofu2").exists());
}

#[test]
fn a_peer_that_stops_answering_is_timed_out() {
    let s = Scratch::new();
    write_file(&s.path("src/f"), 30 << 20, 1);
    // A listener that accepts and never says a word.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = silent.local_addr().expect("addr").to_string();
    let started = Instant::now();
    let mut c = haul(&s.path("config"));
    c.args([
        "push",
        "-q",
        "--plaintext",
        "--timeout",
        "2",
        "--retries",
        "0",
    ])
    .arg(s.path("src/f"))
    .arg(format!("haul://{addr}/"));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(30), "{}", stderr(&out));
    assert!(stderr(&out).contains("timed out"), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(15));

    // A node that stalls mid-transfer.
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let faults = Faults {
        rate: Some(10 << 20),
        ..Faults::default()
    };
    let stall = faults.stall.clone();
    let proxy = Proxy::start(&node.addr, faults);
    let mut c = haul(&s.path("config"));
    c.args([
        "push",
        "-q",
        "--plaintext",
        "--timeout",
        "2",
        "--retries",
        "1",
    ])
    .arg(s.path("src/f"))
    .arg(proxy.url(""));
    c.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let child = c.spawn().expect("spawn");
    wait_for(T, "some bytes", || {
        proxy.up_bytes.load(std::sync::atomic::Ordering::Relaxed) > 2 << 20
    });
    stall.store(true, std::sync::atomic::Ordering::Relaxed);
    let started = Instant::now();
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(30), "{}", stderr(&out));
    assert!(stderr(&out).contains("timed out"), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn a_first_handshake_that_goes_unanswered_is_tried_again() {
    let s = Scratch::new();
    write_file(&s.path("src/f"), 1 << 20, 1);
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    for (i, verb) in ["push", "pull"].into_iter().enumerate() {
        // Nothing crosses the proxy for 3 s: the first attempt's handshake
        // (limit 2 s, from --timeout) times out; the retry goes through.
        let faults = Faults::default();
        let stall = faults.stall.clone();
        stall.store(true, std::sync::atomic::Ordering::Relaxed);
        let proxy = Proxy::start(&node.addr, faults);
        let mut c = haul(&s.path("config"));
        c.args([verb, "--plaintext", "--timeout", "2", "--retries", "3"]);
        match verb {
            "push" => c.arg(s.path("src/f")).arg(proxy.url("in/")),
            _ => c
                .arg(proxy.url("in/f"))
                .arg(format!("{}/", s.path(&format!("back{i}")).display())),
        };
        let unstall = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(3));
            stall.store(false, std::sync::atomic::Ordering::Relaxed);
        });
        let out = run(c, T);
        let _ = unstall.join();
        assert!(out.status.success(), "{verb}: {}", said(&out));
        assert!(
            stderr(&out).contains("retry 1/3"),
            "{verb}: {}",
            stderr(&out)
        );
    }
    assert_eq!(b3(&s.path("back1/f")), b3(&s.path("src/f")));
}

#[test]
fn mistakes_exit_2_with_what_to_do() {
    let s = Scratch::new();
    write_file(&s.path("src/f"), 10, 1);
    write_file(&s.path("afile"), 3, 2);
    let tls = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let expect_2 = |mut c: std::process::Command, words: &str| {
        c.arg("-q");
        let out = run(c, T);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(words),
            "{words:?} not in {}",
            stderr(&out)
        );
        stderr(&out)
    };

    // --plaintext against a TLS node.
    let mut c = haul(&s.path("config"));
    c.args(["push", "--plaintext"])
        .arg(s.path("src/f"))
        .arg(tls.url("x"));
    expect_2(c, "drop --plaintext");
    // Not a port.
    let mut c = haul(&s.path("config"));
    c.arg("push")
        .arg(s.path("src/f"))
        .arg("haul://127.0.0.1:99999/x");
    expect_2(c, "not a port");
    // A path the node does not have: no DEST made, the node's root not shown.
    let mut c = haul(&s.path("config"));
    c.arg("pull").arg(tls.url("missing")).arg(s.path("dest"));
    let err = expect_2(c, "no such file or directory on the node");
    assert!(!err.contains(&*s.path("node").to_string_lossy()), "{err}");
    assert!(!s.path("dest").exists());
    // DEST is a file.
    let mut c = haul(&s.path("config"));
    c.arg("pull").arg(s.path("src")).arg(s.path("afile"));
    expect_2(c, "is not a directory");
    // A node told both --open and a token.
    let mut c = haul(&s.path("config"));
    c.args([
        "serve",
        "--open",
        "--token",
        "t",
        "--listen",
        "127.0.0.1:0",
        "--root",
    ])
    .arg(s.path("other"));
    expect_2(c, "exclude each other");
    // A node on a port that is taken.
    let mut c = haul(&s.path("config"));
    c.args([
        "serve",
        "--open",
        "--create-root",
        "--listen",
        &tls.addr,
        "--root",
    ])
    .arg(s.path("other"));
    expect_2(c, "cannot listen on");
}

#[test]
fn a_malicious_pruner_removes_nothing_outside_dest_or_in_the_state_dir() {
    let s = Scratch::new();
    let outside = s.path("outside");
    write_file(&outside.join("keep"), 10, 1);
    write_file(&s.path("node/in/ok.txt"), 10, 2);
    write_file(&s.path("node/other/keep"), 10, 3);
    std::fs::create_dir_all(s.path("node/in/d")).expect("mkdir");
    std::os::unix::fs::symlink(&outside, s.path("node/in/out")).expect("symlink");
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext"],
    );
    let before = crate::dry_run::state(&s.path("node/.haul"));
    // Refused: a DEST that climbs out.
    let mut raw = Raw::connect(&node.addr);
    assert!(matches!(
        raw.hello(Request::Prune {
            dest: "../x".into(),
            backup: None,
        }),
        Message::Refused { .. }
    ));
    let mut raw = Raw::connect(&node.addr);
    assert!(matches!(
        raw.hello(Request::Prune {
            dest: String::new(),
            backup: None,
        }),
        Message::Welcome { .. }
    ));
    for evil in [
        "../outside/keep",
        "in/../other/keep",
        "/etc/hostname",
        ".haul",
        ".haul/partial",
        "in/out/keep",
        "",
        "in/d/..",
    ] {
        raw.send(&Message::Remove { path: evil.into() });
        match raw.recv() {
            Some(Message::Done {
                ok: false, message, ..
            }) => {
                assert!(
                    !message.contains(s.dir.path().to_str().unwrap()),
                    "{message}"
                );
            }
            other => panic!("{evil:?}: {other:?}"),
        }
    }
    // What may go, goes: a file, then an empty directory.
    for fine in ["in/ok.txt", "in/d"] {
        raw.send(&Message::Remove { path: fine.into() });
        assert!(
            matches!(raw.recv(), Some(Message::Done { ok: true, .. })),
            "{fine}"
        );
    }
    raw.send(&Message::Bye);
    assert!(outside.join("keep").exists());
    assert!(s.path("node/other/keep").exists());
    assert!(s.path("node/in/out").symlink_metadata().is_ok());
    assert!(!s.path("node/in/ok.txt").exists() && !s.path("node/in/d").exists());
    assert_eq!(crate::dry_run::state(&s.path("node/.haul")), before);
}

/// A token file others can read gets a warning that says how to fix it
/// (ssh's StrictModes habit); one only its owner reads gets none.
#[test]
fn a_token_file_readable_by_others_is_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new();
    write_file(&s.path("src/f"), 100, 1);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "sekrit"]);
    let token = s.path("token");
    std::fs::write(&token, "sekrit\n").unwrap();
    for (mode, warned) in [(0o644, true), (0o600, false)] {
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(mode)).unwrap();
        let mut c = haul(&s.path("config"));
        c.args(["push", "--token-file"])
            .arg(&token)
            .arg(s.path("src/f"))
            .arg(node.url("in"));
        let out = run(c, Duration::from_secs(60));
        assert_eq!(out.status.code(), Some(0), "{}", said(&out));
        let err = stderr(&out);
        assert_eq!(err.contains("chmod 600"), warned, "mode {mode:o}: {err}");
    }
}
