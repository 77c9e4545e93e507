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
    assert!(w.pack(&header(0, 1 << 20), &text(1 << 20)));
    assert!(w.packed.len() < (1 << 20) / 20, "{}", w.packed.len());
    assert!(!w.pack(&header(0, 1 << 20), &noise(1 << 20)));
    assert!(!w.pack(&header(0, 100), &text(100)));
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
    assert!(w.pack(&header(0, 0), &zero) && w.packed.is_empty());
    assert!(
        w.pack(&header(0, 0), &almost) && w.packed.len() < 4096,
        "{}",
        w.packed.len()
    );
    assert!(!w.pack(&header(0, 0), &text(8192)));
    assert!(!w.pack(&header(0, 0), &text(4 << 20)));
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

/// What one chunk crosses a connection as: its header and payload on the wire.
async fn on_the_wire(
    w: &mut Packing,
    r: &mut Box<dyn MessageReader>,
    h: &ChunkHeader,
    data: &[u8],
) -> (ChunkHeader, Vec<u8>) {
    w.send_chunk(h, Payload::Bytes(data)).await.unwrap();
    w.flush().await.unwrap();
    let Message::Chunk(wire) = r.recv().await.unwrap() else {
        panic!("not a chunk")
    };
    let mut bytes = Vec::new();
    r.read_payload(&wire, &mut bytes).await.unwrap();
    (wire, bytes)
}

#[tokio::test]
async fn a_relay_forwards_the_frames_it_received_and_never_one_that_differs() {
    let frames = FrameCache::new(1 << 20, Default::default(), Default::default());
    frames.set_forwarding(true);
    // Origin -> relay: level 19, the relay keeping what it decompressed.
    let ((_, w), (r, _)) = memory_pair(Timeouts::default());
    let mut origin = Packing::new(w, 19).unwrap();
    let mut relay_in = Unpacking::new(r).keeping(frames.clone());
    let data = text(256 << 10);
    let h = ChunkHeader {
        digest: [7; 32],
        ..header(0, data.len())
    };
    origin.send_chunk(&h, Payload::Bytes(&data)).await.unwrap();
    origin.flush().await.unwrap();
    let Message::Chunk(got) = relay_in.recv().await.unwrap() else {
        panic!("not a chunk")
    };
    let mut staged = Vec::new();
    relay_in.read_payload(&got, &mut staged).await.unwrap();
    assert!(staged == data);

    // Relay -> child at level 0: the level-19 frame, as it came.
    let ((_, w), (mut child, _)) = memory_pair(Timeouts::default());
    let mut relay_out = Packing::new(w, 0).unwrap().reusing(frames.clone());
    let (wire, bytes) = on_the_wire(&mut relay_out, &mut child, &h, &staged).await;
    assert_eq!(wire.packed, Some(data.len() as u32));
    assert_eq!(bytes, zstd::bulk::compress(&data, 19).unwrap());
    assert_eq!(frames.reused(), 1);

    // A frame kept under a digest whose chunk here holds other bytes (a
    // lying upstream, a chunk the session refused) is not passed on: the
    // chunk goes as level 0 sends it.
    let mut other = data.clone();
    other[1000] ^= 1;
    let (wire, bytes) = on_the_wire(&mut relay_out, &mut child, &h, &other).await;
    assert_eq!(wire.packed, None);
    assert!(bytes == other);
    // Nor is one kept for another length.
    let short = &data[..data.len() - 1];
    let h_short = header(0, short.len());
    let (wire, _) = on_the_wire(
        &mut relay_out,
        &mut child,
        &ChunkHeader {
            digest: [7; 32],
            ..h_short
        },
        short,
    )
    .await;
    assert_eq!(wire.packed, None);
    assert_eq!(frames.reused(), 1);
}
