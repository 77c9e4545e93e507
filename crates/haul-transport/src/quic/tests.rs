//! Two real QUIC endpoints on loopback: messages and chunk streams arrive
//! whole, every chunk after the control messages sent before it, and a
//! chunk stream that breaks its layout fails the connection.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use haul_proto::{ChunkHeader, Message};

use super::*;
use crate::message::Payload;
use crate::KnownHosts;

const T: Timeouts = Timeouts {
    connect: Duration::from_secs(5),
    handshake: Duration::from_secs(5),
    idle: Duration::from_secs(10),
};

/// A client connection and the node's end of it (the client's first
/// message opens the stream the node waits for).
async fn pair(dir: &std::path::Path, first: &Message) -> (Connection, Connection, QuicListener) {
    let identity = ServerIdentity::generate().unwrap();
    let listener = QuicListener::bind("127.0.0.1:0".parse().unwrap(), &identity, T.idle).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let security = Security::Tls {
        fingerprint: Some(identity.fingerprint()),
        known_hosts: KnownHosts::new(dir.join("known_hosts")),
    };
    let node = tokio::spawn(async move {
        let conn = listener.accept().await.unwrap().establish(T).await;
        (conn, listener)
    });
    let (mut client, _key) = connect_quic(&addr, &security, T, &Tuning::default())
        .await
        .unwrap();
    client.1.send(first).await.unwrap();
    let (server, listener) = node.await.unwrap();
    (client, server.unwrap(), listener)
}

fn want(id: u32) -> Message {
    Message::Want {
        id,
        path: format!("f{id}"),
        dest: String::new(),
        first: 0,
        end: 1,
    }
}

fn header(id: u32, len: usize) -> ChunkHeader {
    ChunkHeader {
        packed: None,
        from_record: false,
        id,
        index: 0,
        len: len as u32,
        digest: [id as u8; 32],
        seal: None,
    }
}

fn body(id: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32 * 7 + id) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_come_whole_and_after_the_messages_sent_before_them() {
    let tmp = tempfile::tempdir().unwrap();
    let ((_cr, mut cw), (mut sr, _sw), _node) = pair(tmp.path(), &Message::KeepAlive).await;
    assert!(matches!(sr.recv().await.unwrap(), Message::KeepAlive));
    // Large chunks on streams of their own, small ones inline, each
    // after the message that names it.
    let sizes = [3 << 20, 100, INLINE_CHUNK + 1, 1 << 20, 64 << 10, 2 << 20];
    let sender = tokio::spawn(async move {
        for (i, &len) in sizes.iter().enumerate() {
            let id = i as u32;
            cw.queue(&want(id)).await.unwrap();
            let data = body(id, len);
            cw.send_chunk(&header(id, len), Payload::Bytes(&data))
                .await
                .unwrap();
        }
        cw.send(&Message::KeepAlive).await.unwrap();
        cw
    });
    let mut named = std::collections::HashSet::new();
    let mut chunks = 0;
    let mut buf = Vec::new();
    while chunks < sizes.len() || !named.contains(&u32::MAX) {
        match tokio::time::timeout(T.idle, sr.recv())
            .await
            .unwrap()
            .unwrap()
        {
            Message::Want { id, .. } => {
                named.insert(id);
            }
            Message::Chunk(h) => {
                assert!(named.contains(&h.id), "chunk {} before its message", h.id);
                sr.read_payload(&h, &mut buf).await.unwrap();
                assert_eq!(buf, body(h.id, h.len as usize), "chunk {}", h.id);
                chunks += 1;
            }
            Message::KeepAlive => {
                named.insert(u32::MAX);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    sender.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_stream_longer_than_its_header_fails_the_connection() {
    let tmp = tempfile::tempdir().unwrap();
    let identity = ServerIdentity::generate().unwrap();
    let listener = QuicListener::bind("127.0.0.1:0".parse().unwrap(), &identity, T.idle).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let security = Security::Tls {
        fingerprint: Some(identity.fingerprint()),
        known_hosts: KnownHosts::new(tmp.path().join("kh")),
    };
    // A hand-made peer: a control stream with one message, then a chunk
    // stream whose payload has one byte more than its header says.
    let node = tokio::spawn(async move {
        let conn = listener.accept().await.unwrap().establish(T).await;
        (conn, listener)
    });
    let (conn, _endpoint, _key) =
        quic_connection(&addr, &security, T, transport(T.idle, None, Arc::default()))
            .await
            .unwrap();
    let (mut control, _recv) = conn.open_bi().await.unwrap();
    let mut frame = Vec::new();
    haul_proto::encode(&Message::KeepAlive, &mut frame);
    control.write_all(&frame).await.unwrap();
    let (established, _listener) = node.await.unwrap();
    let (mut r, _w) = established.unwrap();
    assert!(matches!(r.recv().await.unwrap(), Message::KeepAlive));
    let mut s = conn.open_uni().await.unwrap();
    let mut prefix = (frame.len() as u64).to_le_bytes().to_vec();
    haul_proto::encode(&Message::Chunk(header(1, 100_000)), &mut prefix);
    s.write_all(&prefix).await.unwrap();
    s.write_all(&vec![1u8; 100_001]).await.unwrap();
    s.finish().unwrap();
    let err = tokio::time::timeout(T.idle, r.recv()).await.unwrap();
    let msg = format!("{}", err.expect_err("the extra byte must fail it"));
    assert!(msg.contains("longer than its header"), "{msg}");
}
