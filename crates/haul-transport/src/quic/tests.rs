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
    // A hand-made peer: a control stream with one message, then a chunk
    // stream whose payload has one byte more than its header says.
    let (listener, addr, security) = node(tmp.path(), T.idle);
    let node = tokio::spawn(async move { listener.accept().await.unwrap().establish(T).await });
    let (conn, _endpoint) = raw_client(&addr, &security).await;
    let (mut r, _w) = accepted(node).await;
    let mut frame = Vec::new();
    haul_proto::encode(&Message::KeepAlive, &mut frame);
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

/// A hand-made client's QUIC connection to a node at `addr`, after its
/// first message.
async fn raw_client(addr: &str, security: &Security) -> (quinn::Connection, quinn::Endpoint) {
    let (conn, endpoint, _key) =
        quic_connection(addr, security, T, transport(T.idle, None, Arc::default()))
            .await
            .unwrap();
    let (mut control, _recv) = conn.open_bi().await.unwrap();
    let mut frame = Vec::new();
    haul_proto::encode(&Message::KeepAlive, &mut frame);
    control.write_all(&frame).await.unwrap();
    // Neither finished nor reset: the connection's end is the test's.
    std::mem::forget(control);
    (conn, endpoint)
}

/// A node whose QUIC idle limit is `idle`, its address, and how a client
/// pins it.
fn node(dir: &std::path::Path, idle: Duration) -> (QuicListener, String, Security) {
    let identity = ServerIdentity::generate().unwrap();
    let listener = QuicListener::bind("127.0.0.1:0".parse().unwrap(), &identity, idle).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let security = Security::Tls {
        fingerprint: Some(identity.fingerprint()),
        known_hosts: KnownHosts::new(dir.join("kh")),
    };
    (listener, addr, security)
}

/// The node's end of the next connection, once its first message came.
async fn accepted(node: tokio::task::JoinHandle<Result<Connection, TransportError>>) -> Connection {
    let (mut r, w) = node.await.unwrap().unwrap();
    assert!(matches!(r.recv().await.unwrap(), Message::KeepAlive));
    (r, w)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_closing_with_a_reason_is_reported_with_it_and_an_orderly_close_is_a_close() {
    let tmp = tempfile::tempdir().unwrap();
    for (code, reason) in [(7u32, &b"going away\nfor maintenance"[..]), (0, b"done")] {
        let (listener, addr, security) = node(tmp.path(), T.idle);
        let node = tokio::spawn(async move { listener.accept().await.unwrap().establish(T).await });
        let (conn, _endpoint) = raw_client(&addr, &security).await;
        let (mut r, _w) = accepted(node).await;
        conn.close(code.into(), reason);
        let err = tokio::time::timeout(T.idle, r.recv())
            .await
            .unwrap()
            .expect_err("the close must end the read");
        let text = err.to_string();
        if code == 0 {
            assert!(matches!(err, TransportError::Closed), "{text}");
        } else {
            assert!(matches!(err, TransportError::Lost(_)), "{text}");
            assert_eq!(
                text,
                "the QUIC connection was lost: the peer closed it: going away for maintenance (code 7)"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_gone_silent_is_a_timeout_not_a_close() {
    let tmp = tempfile::tempdir().unwrap();
    // The node's QUIC idle limit is short; its reader's own limit is set
    // longer below, so the error comes from QUIC's idle timer.
    let (listener, addr, security) = node(tmp.path(), Duration::from_secs(1));
    let node = tokio::spawn(async move { listener.accept().await.unwrap().establish(T).await });
    // The client lives on a runtime of its own, dropped without a word:
    // no close is ever sent, as when its process is killed.
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let held = client
        .spawn(async move { raw_client(&addr, &security).await })
        .await
        .unwrap();
    let (mut r, mut w) = accepted(node).await;
    r.set_idle(T.idle);
    std::mem::forget(held);
    client.shutdown_background();
    let began = std::time::Instant::now();
    let err = tokio::time::timeout(T.idle, r.recv())
        .await
        .expect("QUIC's idle timer ends the read before the reader's own limit")
        .expect_err("a silent peer must end the read");
    assert!(matches!(err, TransportError::QuicIdle { secs: 1 }), "{err}");
    assert!(
        began.elapsed() < Duration::from_secs(8),
        "{:?}",
        began.elapsed()
    );
    // The chunk streams' writer says the same.
    let data = body(1, 1 << 20);
    let err = w
        .send_chunk(&header(1, data.len()), Payload::Bytes(&data))
        .await
        .expect_err("nothing can be sent");
    assert!(matches!(err, TransportError::QuicIdle { .. }), "{err}");
}
