//! A node's memory is bounded whatever its peers announce: chunk buffers
//! are filled as payload arrives (never zero-filled ahead) and come from one
//! budget for every connection (`--chunk-memory`); past it, connections wait.

use std::io::Write;
use std::time::Duration;

use haul_proto::{ChunkHeader, Entry, Message, Request, MAX_CHUNK_LEN};

use crate::harness::*;
use crate::raw::{file, Raw};

/// The node's peak resident memory (`VmHWM`), in bytes.
fn peak_rss(node: &Node) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", node.child.id())).expect("/proc status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kib << 10
}

const MIB: u64 = 1 << 20;

#[test]
fn fifty_connections_announcing_maximal_chunks_stay_within_the_budget() {
    let s = Scratch::new();
    let node = Node::start(
        &s.path("node"),
        &s.path("config"),
        &["--open", "--plaintext", "--chunk-memory", "128M"],
    );
    let base = peak_rss(&node);
    let max = u64::from(MAX_CHUNK_LEN);
    // Each connection offers a file of one 64 MiB chunk, announces the
    // chunk, and sends 4 MiB of it. Without a budget that is 200 MiB of
    // payload held; zero-filled ahead, 3.2 GiB.
    let peers: Vec<_> = (0..50)
        .map(|i| {
            let addr = node.addr.clone();
            std::thread::spawn(move || {
                let mut raw = Raw::connect(&addr);
                raw.s
                    .set_write_timeout(Some(Duration::from_secs(5)))
                    .expect("timeout");
                if !matches!(
                    raw.hello(Request::Push {
                        dest: String::new(),
                        checksum: false,
                        replace_dirs: false,
                        skip: Default::default(),
                        backup: None,
                        rate_hint: 0,
                    }),
                    Message::Welcome { .. }
                ) {
                    return raw;
                }
                let entry = Entry {
                    chunk_size: MAX_CHUNK_LEN,
                    ..file(&format!("big{i}"), max)
                };
                raw.send(&Message::Offer {
                    content: None,
                    id: 1,
                    entry,
                    first: 0,
                    end: 1,
                    seal: None,
                });
                if !matches!(raw.recv(), Some(Message::Need { .. })) {
                    return raw;
                }
                raw.send(&Message::Chunk(ChunkHeader {
                    packed: None,
                    from_record: false,
                    id: 1,
                    index: 0,
                    len: MAX_CHUNK_LEN,
                    digest: [0; 32],
                    seal: None,
                }));
                let piece = vec![0x5a; 1 << 20];
                for _ in 0..4 {
                    // Connections past the budget are not read: their
                    // writes block until the timeout.
                    if raw.s.write_all(&piece).is_err() {
                        break;
                    }
                }
                raw
            })
        })
        .collect();
    // Another 50 announce a maximal control frame and send 64 KiB of it.
    let framers: Vec<_> = (0..50)
        .map(|_| {
            let mut raw = Raw::connect(&node.addr);
            let mut head = (haul_proto::MAX_FRAME_LEN).to_be_bytes().to_vec();
            head.push(1);
            head.extend(std::iter::repeat_n(0u8, 64 << 10));
            raw.s.write_all(&head).expect("frame head");
            raw
        })
        .collect();
    let held: Vec<Raw> = peers.into_iter().map(|p| p.join().expect("peer")).collect();
    std::thread::sleep(Duration::from_secs(1));
    let peak = peak_rss(&node);
    let grew = peak.saturating_sub(base);
    assert!(
        grew < 96 * MIB,
        "the node grew by {} MiB (from {} MiB) with 100 hostile connections",
        grew / MIB,
        base / MIB
    );
    // Still serving everyone else.
    write_file(&s.path("src/f"), 100, 1);
    let mut c = haul(&s.path("config"));
    c.args(["push", "--plaintext", "-q"])
        .arg(s.path("src/f"))
        .arg(node.url(""));
    drop(held);
    drop(framers);
    let out = run(c, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
