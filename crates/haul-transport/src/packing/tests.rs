use super::*;
use crate::{memory_pair, Timeouts};

fn header(index: u32, len: usize) -> ChunkHeader {
    ChunkHeader {
        id: 1,
        index,
        len: len as u32,
        digest: [0; 32],
        seal: None,
        packed: None,
        from_record: false,
    }
}

/// Text-like data that compresses well, and bytes that do not.
fn text(len: usize) -> Vec<u8> {
    let line = b"2026-12-05T10:00:00Z,station-042,12.5,1013.2,ok\n";
    line.iter().cycle().take(len).copied().collect()
}

fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test]
async fn chunks_arrive_as_sent_and_only_compressible_ones_shrink_on_the_wire() {
    let ((_, w), (r, _)) = memory_pair(Timeouts::default());
    let mut w = Packing::new(w, DEFAULT_LEVEL).unwrap();
    let mut r = Unpacking::new(r);
    let chunks = [text(1 << 20), noise(1 << 20), text(100), text(4000)];
    for (i, c) in chunks.iter().enumerate() {
        let h = header(i as u32, c.len());
        if !w.push_chunk(&h, c) {
            w.send_chunk(&h, Payload::Bytes(c)).await.unwrap();
        }
    }
    w.flush().await.unwrap();
    for (i, c) in chunks.iter().enumerate() {
        let Message::Chunk(h) = r.recv().await.unwrap() else {
            panic!("not a chunk")
        };
        assert_eq!(
            (h.index, h.len as usize, h.packed),
            (i as u32, c.len(), None)
        );
        let mut out = Vec::new();
        if !r.try_read_payload(&h, &mut out) {
            r.read_payload(&h, &mut out).await.unwrap();
        }
        assert!(out == *c, "chunk {i} differs");
    }
    // What the wire carried: the text packed, the noise and the tiny chunk not.
    assert!(w.pack(&text(1 << 20)));
    assert!(w.packed.len() < (1 << 20) / 20, "{}", w.packed.len());
    assert!(!w.pack(&noise(1 << 20)));
    assert!(!w.pack(&text(100)));
}

#[tokio::test]
async fn a_packed_chunk_that_lies_about_its_length_is_refused() {
    let ((_, mut w), (r, _)) = memory_pair(Timeouts::default());
    let mut r = Unpacking::new(r);
    let data = text(64 << 10);
    let packed = zstd::bulk::compress(&data, 3).unwrap();
    // It says 1 KiB more than it holds, then 1 KiB less.
    for claim in [data.len() + 1024, data.len() - 1024] {
        let h = ChunkHeader {
            len: packed.len() as u32,
            packed: Some(claim as u32),
            ..header(0, 0)
        };
        w.send_chunk(&h, Payload::Bytes(&packed)).await.unwrap();
        w.flush().await.unwrap();
        let Message::Chunk(seen) = r.recv().await.unwrap() else {
            panic!("not a chunk")
        };
        assert_eq!(seen.len as usize, claim);
        let mut out = Vec::new();
        let e = r.read_payload(&seen, &mut out).await.unwrap_err();
        assert!(
            e.to_string().contains("compressed chunk 0 of file 1"),
            "{e}"
        );
        assert!(out.len() <= claim);
    }
    // Bytes that are no zstd frame at all.
    let h = ChunkHeader {
        len: 100,
        packed: Some(5000),
        ..header(1, 0)
    };
    w.send_chunk(&h, Payload::Bytes(&[7; 100])).await.unwrap();
    w.flush().await.unwrap();
    let Message::Chunk(seen) = r.recv().await.unwrap() else {
        panic!("not a chunk")
    };
    let mut out = Vec::new();
    assert!(r.read_payload(&seen, &mut out).await.is_err());
}

#[tokio::test]
async fn a_chunk_of_zeros_crosses_as_a_header_alone_even_without_compression() {
    let ((_, w), (r, _)) = memory_pair(Timeouts::default());
    let mut w = Packing::new(w, 0).unwrap();
    let mut r = Unpacking::new(r);
    let zero = vec![0u8; 4 << 20];
    let mut almost = zero.clone();
    almost[3 << 20] = 1;
    for (i, c) in [&zero, &almost, &text(8192)].into_iter().enumerate() {
        w.send_chunk(&header(i as u32, c.len()), Payload::Bytes(c))
            .await
            .unwrap();
    }
    w.flush().await.unwrap();
    for (i, c) in [&zero, &almost, &text(8192)].into_iter().enumerate() {
        let Message::Chunk(h) = r.recv().await.unwrap() else {
            panic!("not a chunk")
        };
        let mut out = Vec::new();
        r.read_payload(&h, &mut out).await.unwrap();
        assert!(out == *c, "chunk {i} differs");
    }
    // Level 0: zeros elided; a chunk mostly holes compressed (its zeros
    // cost next to nothing); data without holes, even compressible, not.
    assert!(w.pack(&zero) && w.packed.is_empty());
    assert!(
        w.pack(&almost) && w.packed.len() < 4096,
        "{}",
        w.packed.len()
    );
    assert!(!w.pack(&text(8192)));
    assert!(!w.pack(&text(4 << 20)));
}

#[test]
fn a_chunk_counts_as_holes_from_an_eighth_of_zeroed_blocks() {
    let block = 4096;
    let mut chunk = noise(64 * block);
    assert!(!holes(&chunk));
    // Seven zeroed blocks of 64: not yet an eighth.
    for b in 0..7 {
        chunk[b * block..(b + 1) * block].fill(0);
    }
    assert!(!holes(&chunk));
    // A block that starts with zeros but holds data is no hole.
    chunk[7 * block..8 * block - 1].fill(0);
    assert!(!holes(&chunk));
    chunk[8 * block - 1] = 0;
    assert!(holes(&chunk));
}
