//! rsync's `-S`: a sparse file's holes are not sent (a chunk of zeros
//! crosses as a header alone, the zeros of a chunk that is partly holes
//! are packed away) and stay holes where it lands — for a push,
//! a pull from a node and a local copy — with the file's BLAKE3 over every
//! byte, zeros included. An in-test TCP proxy counts the bytes on the wire;
//! `st_blocks` says what is allocated, compared with what `rsync -S` makes
//! of the same file (real `haul serve` nodes on 127.0.0.1).

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::harness::*;
use crate::proxy::{plaintext_node_behind, Faults};

const T: Duration = Duration::from_secs(120);
const SIZE: u64 = 64 << 20;

/// 64 MiB with 3 MiB of data that does not compress: at the start, in the
/// middle (not on a chunk boundary) and at the very end; the rest holes.
fn sparse_file(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let f = std::fs::File::create(path).unwrap();
    f.set_len(SIZE).unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let data: Vec<u8> = (0..1u32 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    for at in [0, (21 << 20) + 12345, SIZE - (1 << 20)] {
        f.write_all_at(&data, at).unwrap();
    }
}

fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn s_leaves_holes_unsent_and_unwritten() {
    let s = Scratch::new();
    let src = s.path("src/disk.img");
    sparse_file(&src);
    assert!(allocated(&src) < 8 << 20, "the filesystem keeps holes");
    let want = b3(&src);
    let (_node, proxy) = plaintext_node_behind(&s, Faults::default());
    let from = format!("{}/", s.path("src").display());

    // rsync -S on the same file: the reference for what lands.
    rsync(&["-aS"], &[Path::new(&from)], &s.path("rsync"));
    let rsync = allocated(&s.path("rsync/disk.img"));

    // A push: about the data crosses, and the node keeps the holes.
    let mut c = haul(&s.path("config"));
    c.args(["push", "--plaintext", "-S", &from])
        .arg(proxy.url("in"));
    ok(&run(c, T));
    let landed = s.path("node/in/disk.img");
    assert_eq!(b3(&landed), want);
    assert_eq!(std::fs::metadata(&landed).unwrap().len(), SIZE);
    // The data crosses, not the holes: the 13 chunks of zeros go as
    // headers, and the zeros in the 3 that hold data are packed away.
    let up = proxy.up_bytes.load(Ordering::Relaxed);
    assert!(
        (3 << 20..4 << 20).contains(&up),
        "{up} bytes on the wire for 3 MiB of data"
    );
    assert!(
        allocated(&landed) <= rsync + (4 << 20),
        "{} vs rsync's {rsync}",
        allocated(&landed)
    );

    // A pull back from the node, and a local copy: holes again.
    let down = proxy.down_bytes.load(Ordering::Relaxed);
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--plaintext", "-S"])
        .arg(proxy.url("in/"))
        .arg(s.path("back"));
    ok(&run(c, T));
    let back = s.path("back/disk.img");
    assert_eq!(b3(&back), want);
    let down = proxy.down_bytes.load(Ordering::Relaxed) - down;
    assert!(down < 4 << 20, "{down} bytes on the wire for 3 MiB of data");
    assert!(allocated(&back) < 8 << 20, "{}", allocated(&back));
    let mut c = haul(&s.path("config"));
    c.args(["pull", "-S", &from]).arg(s.path("local"));
    ok(&run(c, T));
    assert_eq!(b3(&s.path("local/disk.img")), want);
    assert!(allocated(&s.path("local/disk.img")) < 8 << 20);

    // With -z too (the data, random, does not shrink further).
    let before = proxy.up_bytes.load(Ordering::Relaxed);
    let mut c = haul(&s.path("config"));
    c.args(["push", "--plaintext", "-Sz", &from])
        .arg(proxy.url("sz"));
    ok(&run(c, T));
    let sz = proxy.up_bytes.load(Ordering::Relaxed) - before;
    assert!(sz < 4 << 20, "{sz} bytes on the wire for 3 MiB of data");
    assert_eq!(b3(&s.path("node/sz/disk.img")), want);

    // Without -S every zero is sent and written: the checks above can fail.
    let before = proxy.up_bytes.load(Ordering::Relaxed);
    let mut c = haul(&s.path("config"));
    c.args(["push", "--plaintext", &from])
        .arg(proxy.url("dense"));
    ok(&run(c, T));
    assert!(proxy.up_bytes.load(Ordering::Relaxed) - before > SIZE);
    assert!(allocated(&s.path("node/dense/disk.img")) > SIZE / 2);
}

#[test]
fn a_file_zeroed_since_arrives_with_holes_byte_for_byte() {
    // Written whole first, then mostly overwritten with zeros at the
    // source: pushed again with -S, the new version lands with holes.
    let s = Scratch::new();
    let src = s.path("src/f");
    std::fs::create_dir_all(s.path("src")).unwrap();
    std::fs::write(&src, vec![7u8; 12 << 20]).unwrap();
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let from = format!("{}/", s.path("src").display());
    let mut c = haul(&s.path("config"));
    c.args(["push", "-S", "--token", "t", &from])
        .arg(node.url("in"));
    ok(&run(c, T));
    // Now mostly zeros, same size; pushed again with -S.
    let f = std::fs::OpenOptions::new().write(true).open(&src).unwrap();
    f.write_all_at(&vec![0u8; 10 << 20], 1 << 20).unwrap();
    f.set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    let mut c = haul(&s.path("config"));
    c.args(["push", "-S", "--token", "t", &from])
        .arg(node.url("in"));
    ok(&run(c, T));
    assert_eq!(b3(&s.path("node/in/f")), b3(&src));
    assert!(allocated(&s.path("node/in/f")) < 4 << 20);
}

/// A hostile client claims zeros it has no right to: a chunk of zeros (a
/// header alone) past the file's end, one longer than its chunk, and one
/// whose digest is of other bytes. Each is refused or found bad; nothing
/// is written under the file's name, and the node goes on serving.
#[test]
fn a_hostile_peers_claims_of_holes_are_refused_or_found_out() {
    use haul_proto::{Attrs, ChunkHeader, Message};
    let s = Scratch::new();
    let node = crate::beneath::open_node(&s);
    let mut entry = crate::raw::file("f", 8 << 20);
    entry.attrs = Some(Box::new(Attrs {
        sparse: true,
        ..Attrs::default()
    }));
    let cs = entry.chunk_size;
    let zero = |index: u32, claimed: u32, digest| {
        Message::Chunk(ChunkHeader {
            packed: Some(claimed),
            from_record: false,
            id: 1,
            index,
            len: 0,
            digest,
            seal: None,
        })
    };
    let zeros = vec![0u8; cs as usize];
    let ones = vec![1u8; cs as usize];
    let digest = |data: &[u8], i| haul_engine::hash::chunk_digest(data, i, cs, entry.size);
    let offer = |raw: &mut crate::raw::Raw| {
        raw.send(&Message::Offer {
            content: None,
            id: 1,
            entry: entry.clone(),
            first: 0,
            end: 2,
            seal: None,
        });
        let need = raw.recv_skipping_keepalives();
        assert!(
            matches!(need, Some(Message::Need { skip: false, .. })),
            "{need:?}"
        );
    };
    // Past the end, and longer than its chunk: the session is refused.
    for (index, claimed) in [(2, cs), (7, cs), (0, 2 * cs), (1, cs + 1)] {
        let mut raw = crate::beneath::push_session(&node);
        offer(&mut raw);
        raw.send(&zero(index, claimed, digest(&zeros, index.min(1))));
        raw.send(&Message::RangeEnd { id: 1, chunks: 1 });
        let answer = raw.recv_skipping_keepalives();
        assert!(
            matches!(answer, None | Some(Message::FileError { .. })),
            "chunk {index} of {claimed} bytes: {answer:?}"
        );
    }
    // Zeros under the digest of other bytes: the chunk is bad, and a
    // commit of the file those bytes would make is refused.
    let mut raw = crate::beneath::push_session(&node);
    offer(&mut raw);
    raw.send(&zero(0, cs, digest(&ones, 0)));
    raw.send(&zero(1, cs, digest(&zeros, 1)));
    raw.send(&Message::RangeEnd { id: 1, chunks: 2 });
    let answer = raw.recv_skipping_keepalives();
    assert!(
        matches!(answer, Some(Message::RangeStatus { ref bad, .. }) if bad == &[0]),
        "{answer:?}"
    );
    let mut lie = ones.clone();
    lie.extend_from_slice(&zeros);
    raw.send(&Message::Commit {
        id: 1,
        root: crate::raw::file_root(&entry, &lie),
    });
    let done = raw.recv_skipping_keepalives();
    assert!(
        matches!(done, Some(Message::Done { ok: false, .. })),
        "{done:?}"
    );
    drop(raw);
    assert!(!s.path("node/f").exists(), "nothing under the file's name");
    // The node still serves an honest push of the same file.
    let mut raw = crate::beneath::push_session(&node);
    offer(&mut raw);
    raw.send(&zero(0, cs, digest(&zeros, 0)));
    raw.send(&zero(1, cs, digest(&zeros, 1)));
    raw.send(&Message::RangeEnd { id: 1, chunks: 2 });
    let answer = raw.recv_skipping_keepalives();
    assert!(
        matches!(answer, Some(Message::RangeStatus { ref bad, .. }) if bad.is_empty()),
        "{answer:?}"
    );
    let mut all = zeros.clone();
    all.extend_from_slice(&zeros);
    raw.send(&Message::Commit {
        id: 1,
        root: crate::raw::file_root(&entry, &all),
    });
    let done = raw.recv_skipping_keepalives();
    assert!(
        matches!(done, Some(Message::Done { ok: true, .. })),
        "{done:?}"
    );
    assert_eq!(std::fs::metadata(s.path("node/f")).unwrap().len(), 8 << 20);
    assert!(
        allocated(&s.path("node/f")) < 1 << 20,
        "the holes stay holes"
    );
}
