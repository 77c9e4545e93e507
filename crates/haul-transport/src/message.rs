//! The message-level transport interface: what a session's driver needs of
//! a connection, whatever carries it.
//!
//! - [`MessageReader`]: the next message, or chunk header, then that
//!   chunk's payload; cancel-safe, so a driver can wait on it beside timers.
//! - [`MessageWriter`]: queue messages (batched), send a chunk whose body is
//!   a file range or bytes, flush, close.
//!
//! TCP (plaintext or TLS) implements them with [`crate::FrameReader`] and
//! [`crate::FrameWriter`] and keeps `sendfile(2)` to itself; the in-memory
//! pair serves local copies and tests. A transport with streams (QUIC) may
//! carry each chunk on a stream of its own and hand headers over in any
//! order: sessions count a round's chunks, they do not rely on their order.

use std::fs::File;
use std::time::Duration;

use haul_proto::{ChunkHeader, Message};

use crate::TransportError;

/// The body of a chunk to send.
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    /// `len` bytes of `file` at `offset` (sent without passing through
    /// memory where the transport can: see [`MessageWriter::sends_file_ranges`]).
    File {
        /// The file.
        file: &'a File,
        /// Where the chunk starts.
        offset: u64,
        /// Its length.
        len: usize,
    },
    /// The bytes themselves.
    Bytes(&'a [u8]),
}

impl Payload<'_> {
    /// The payload's length.
    pub fn len(&self) -> usize {
        match self {
            Payload::File { len, .. } => *len,
            Payload::Bytes(b) => b.len(),
        }
    }

    /// True for an empty payload.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The receiving half of a connection.
#[async_trait::async_trait]
pub trait MessageReader: Send {
    /// The next message. A [`Message::Chunk`] header is followed by its
    /// payload: take it with [`MessageReader::read_payload`] or
    /// [`MessageReader::skip_payload`] before the next call. Cancel-safe:
    /// bytes read when the future is dropped stay for the next call. Waits
    /// at most the idle limit for bytes.
    async fn recv(&mut self) -> Result<Message, TransportError>;

    /// The next message if it is here already (no waiting).
    fn try_recv(&mut self) -> Result<Option<Message>, TransportError>;

    /// Reads the payload of `header` (just received) into `out`, which is
    /// cleared first; its memory is touched only as bytes arrive.
    async fn read_payload(
        &mut self,
        header: &ChunkHeader,
        out: &mut Vec<u8>,
    ) -> Result<(), TransportError>;

    /// Reads and drops the payload of `header`.
    async fn skip_payload(&mut self, header: &ChunkHeader) -> Result<(), TransportError>;

    /// Takes the payload of `header` into `out` if all of it is here
    /// already (no waiting); false when it is not (then call
    /// [`MessageReader::read_payload`]).
    fn try_read_payload(&mut self, _header: &ChunkHeader, _out: &mut Vec<u8>) -> bool {
        false
    }

    /// Waits for the next message, then takes every message already here
    /// too (up to `max` in all) into `out`: one wait for many small files.
    async fn recv_many(
        &mut self,
        out: &mut Vec<Message>,
        max: usize,
    ) -> Result<(), TransportError> {
        out.push(self.recv().await?);
        while out.len() < max {
            match self.try_recv()? {
                Some(m) => out.push(m),
                None => break,
            }
        }
        Ok(())
    }

    /// Changes the idle limit.
    fn set_idle(&mut self, idle: Duration);

    /// When bytes last arrived on this connection (`None`: not known).
    fn activity(&self) -> Option<std::sync::Arc<crate::Activity>> {
        None
    }

    /// The peer's sender starts at `rate` bytes per second (a path crossed
    /// before): a transport whose receive window grows with what arrived
    /// opens it for that rate now. Nothing elsewhere.
    fn expect_rate(&mut self, _rate: u64) {}
}

/// The sending half of a connection.
#[async_trait::async_trait]
pub trait MessageWriter: Send {
    /// Queues a message (no I/O): it leaves at the next flush. Flush when
    /// [`MessageWriter::batch_full`] says so.
    fn push(&mut self, msg: &Message);

    /// True when enough is queued that it should go out now.
    fn batch_full(&self) -> bool;

    /// Queues a message, and flushes when the batch is full.
    async fn queue(&mut self, msg: &Message) -> Result<(), TransportError> {
        self.push(msg);
        if self.batch_full() {
            self.flush().await?;
        }
        Ok(())
    }

    /// Sends a message now.
    async fn send(&mut self, msg: &Message) -> Result<(), TransportError> {
        self.push(msg);
        self.flush().await
    }

    /// Sends a chunk: its header, then `payload` (exactly `header.len` bytes).
    async fn send_chunk(
        &mut self,
        header: &ChunkHeader,
        payload: Payload<'_>,
    ) -> Result<(), TransportError>;

    /// Starts the connection's rate controller at `hint` (a path crossed
    /// before); false where the transport has no controller of its own to
    /// start (TCP's is the kernel's, memory has none).
    fn start_at(&mut self, _hint: crate::PathHint) -> bool {
        false
    }

    /// An error ([`TransportError::Superseded`]) once `--transport auto`
    /// chose the other transport for this connection's node
    /// ([`crate::choice`]): its driver gives its work back to the pool.
    fn hand_back(&self) -> Result<(), TransportError> {
        Ok(())
    }

    /// Queues a small chunk (header and bytes) with no I/O, as
    /// [`MessageWriter::push`] does a message; false when it is too large
    /// for that (then call [`MessageWriter::send_chunk`]).
    fn push_chunk(&mut self, _header: &ChunkHeader, _bytes: &[u8]) -> bool {
        false
    }

    /// Writes everything queued.
    async fn flush(&mut self) -> Result<(), TransportError>;

    /// Flushes and closes the sending side.
    async fn close(&mut self) -> Result<(), TransportError>;

    /// True when a [`Payload::File`] of `len` bytes goes out without passing
    /// through memory (`sendfile(2)`): a sender then need not keep a chunk's
    /// bytes after hashing them.
    fn sends_file_ranges(&self, len: usize) -> bool;
}

/// The two halves of a connection.
pub type Connection = (Box<dyn MessageReader>, Box<dyn MessageWriter>);
