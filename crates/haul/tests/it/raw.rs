//! A hand-built protocol peer for tests that play an untrusted client or
//! node: raw frames over a TCP stream, no haul code but the codec.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use haul_proto::{decode_frame, encode, Decoded, Entry, EntryKind, Message, Request};

/// A hand-built protocol client.
pub struct Raw {
    pub s: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    pub fn connect(addr: &str) -> Raw {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        Raw { s, buf: Vec::new() }
    }
    pub fn send(&mut self, m: &Message) {
        let mut b = Vec::new();
        encode(m, &mut b);
        self.s.write_all(&b).expect("write");
    }
    pub fn recv(&mut self) -> Option<Message> {
        loop {
            if let Ok(Decoded::Message(m, used)) = decode_frame(&self.buf) {
                self.buf.drain(..used);
                return Some(m);
            }
            let mut tmp = [0u8; 4096];
            match self.s.read(&mut tmp) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
            }
        }
    }
    pub fn hello(&mut self, request: Request) -> Message {
        self.send(&Message::Hello {
            version: haul_proto::PROTOCOL_VERSION,
            token: String::new(),
            request,
        });
        self.recv().expect("answer to hello")
    }
}

pub fn file(path: &str, size: u64) -> Entry {
    Entry {
        attrs: None,
        path: path.into(),
        kind: EntryKind::File,
        size,
        mode: 0o644,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size: 4 << 20,
    }
}

impl Raw {
    /// The peer on an accepted stream (a test playing the node).
    pub fn from_stream(s: TcpStream) -> Raw {
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        Raw { s, buf: Vec::new() }
    }

    /// Sends the next message that is not a keepalive.
    pub fn recv_skipping_keepalives(&mut self) -> Option<Message> {
        loop {
            match self.recv() {
                Some(Message::KeepAlive) => continue,
                other => return other,
            }
        }
    }

    /// A push's steps for one file: offer `entry`, and when asked, send
    /// every chunk of `data` and the range end. Returns the receiver's
    /// verdict on the range (`RangeStatus`), or its refusal.
    pub fn offer_and_send(&mut self, id: u32, entry: &Entry, data: &[u8]) -> Option<Message> {
        let count = data.len().div_ceil(entry.chunk_size as usize).max(1) as u32;
        self.send(&Message::Offer {
            content: None,
            id,
            entry: entry.clone(),
            first: 0,
            end: count,
            seal: None,
        });
        match self.recv_skipping_keepalives()? {
            Message::Need { skip: false, .. } => {}
            other => return Some(other),
        }
        let chunks = self.send_chunks(id, entry, data);
        self.send(&Message::RangeEnd { id, chunks });
        self.recv_skipping_keepalives()
    }

    /// Every chunk of `data` (as `entry` cuts it), headers and payloads;
    /// returns how many (what `RangeEnd` counts).
    pub fn send_chunks(&mut self, id: u32, entry: &Entry, data: &[u8]) -> u32 {
        let mut sent = 0;
        for (i, c) in data.chunks(entry.chunk_size as usize).enumerate() {
            sent += 1;
            let digest = haul_engine::hash::chunk_digest(c, i as u32, entry.chunk_size, entry.size);
            self.send(&Message::Chunk(haul_proto::ChunkHeader {
                packed: None,
                from_record: false,
                id,
                index: i as u32,
                len: c.len() as u32,
                digest,
                seal: None,
            }));
            self.s.write_all(c).expect("payload");
        }
        sent
    }
}

/// The whole-file BLAKE3 of `data` as `entry` cuts it (what `Commit` carries).
pub fn file_root(entry: &Entry, data: &[u8]) -> haul_proto::Digest {
    let digests: Vec<_> = data
        .chunks(entry.chunk_size as usize)
        .enumerate()
        .map(|(i, c)| haul_engine::hash::chunk_digest(c, i as u32, entry.chunk_size, entry.size))
        .collect();
    haul_engine::hash::root_from_digests(&digests, entry.chunk_size, entry.size).expect("root")
}
