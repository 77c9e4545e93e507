//! `-z`: chunk payloads compressed with zstd on the wire, as a layer over
//! any connection ([`Packing`] over a writer, [`Unpacking`] over a reader).
//!
//! A chunk is compressed on its own (one zstd frame) and sent compressed
//! only when that saves at least 1/32 of it, so data that does not shrink
//! (already compressed, random) costs one failed attempt and goes as it is.
//! A chunk of zeros (a sparse file's hole, `-S`) goes as a header with no
//! payload at all, whether or not it is compressed. Level 0 (`-S` alone,
//! and relays) compresses nothing else but a chunk that is partly holes —
//! at least 1/8 of it in zeroed 4 KiB blocks, found with a look at each
//! block's first word —, with zstd's fastest level: its zeros then cost a
//! few bytes, and its data goes through zstd's fast path for what does not
//! shrink. So a sparse file's data crosses, not its holes, with no data map
//! in the protocol: a hole is a run of zeros, found where it is read (the
//! sender does not even read it where `SEEK_DATA` can be trusted:
//! `haul_root::read_sparse_at`).
//! The header says so ([`ChunkHeader::packed`]: the chunk's own length);
//! transports carry the `len` compressed bytes like any payload, so TCP,
//! TLS and QUIC need nothing of their own, and every pace and rate limit
//! below this layer counts wire bytes. Digests are over the chunk as it is
//! (decompressed): sessions above never see a packed chunk.
//!
//! What a peer sends is bounded: a packed chunk must decompress to exactly
//! the length its header names (at most `MAX_CHUNK_LEN`, checked by the
//! decoder), into a buffer of that size and no more.
//!
//! The `zstd` crate (libzstd) does the compression; this module only frames
//! it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use haul_proto::{ChunkHeader, Message};

use crate::frames::FrameCache;
use crate::message::{MessageReader, MessageWriter, Payload};
use crate::TransportError;

/// Chunks smaller than this go as they are (a zstd frame's overhead is
/// most of what they could save).
const SMALLEST: usize = 512;

/// The default `--compress-level` (zstd's own default).
pub const DEFAULT_LEVEL: i32 = 3;

fn bad(what: String) -> TransportError {
    TransportError::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, what))
}

/// Compresses the chunks written through it.
pub struct Packing {
    inner: Box<dyn MessageWriter>,
    /// The zstd level; 0: chunks of zeros, and chunks partly holes at the
    /// fastest level.
    level: i32,
    zstd: zstd::bulk::Compressor<'static>,
    /// The chunk as read (a file range is read here: it must pass through
    /// memory to be compressed).
    raw: Vec<u8>,
    packed: Vec<u8>,
    /// A relay's frames received ([`crate::frames`]): one found for a chunk
    /// is sent in its place once checked against it.
    frames: Option<FrameCache>,
    unzstd: Option<zstd::bulk::Decompressor<'static>>,
    /// A kept frame decompressed, to be compared with the chunk.
    check: Vec<u8>,
    /// The chunk just packed is a kept frame.
    reused: bool,
    /// Payload bytes packing kept off the wire, added up here.
    saved: Option<Arc<AtomicU64>>,
}

impl Packing {
    /// `inner`, its chunks compressed at zstd `level` (1–19; negative
    /// levels are faster still; 0: none, only chunks of zeros elided).
    pub fn new(inner: Box<dyn MessageWriter>, level: i32) -> Result<Self, TransportError> {
        let zstd = zstd::bulk::Compressor::new(if level == 0 { HOLES_LEVEL } else { level })?;
        Ok(Self {
            inner,
            level,
            zstd,
            raw: Vec::new(),
            packed: Vec::new(),
            frames: None,
            unzstd: None,
            check: Vec::new(),
            reused: false,
            saved: None,
        })
    }

    /// The same, adding to `saved` the payload bytes each packed chunk
    /// kept off the wire (its length less what went): a run's bytes on
    /// the wire are its payload bytes less those.
    pub fn counting(mut self, saved: Arc<AtomicU64>) -> Self {
        self.saved = Some(saved);
        self
    }

    /// The same, sending a chunk as the frame `frames` kept for it when
    /// there is one that decompresses to exactly the chunk (a relay passing
    /// on what it received compressed).
    pub fn reusing(mut self, frames: FrameCache) -> Self {
        self.frames = Some(frames);
        self
    }

    /// Compresses `data`, the chunk `header` names, into `self.packed`
    /// (nothing for a chunk of zeros); false when that would not save at
    /// least 1/32 of it (then it goes as it is).
    fn pack(&mut self, header: &ChunkHeader, data: &[u8]) -> bool {
        self.reused = false;
        if !data.is_empty() && zeros(data) {
            self.packed.clear();
            return true;
        }
        if self.reuse(header, data) {
            return true;
        }
        if data.len() < SMALLEST || (self.level == 0 && !holes(data)) {
            return false;
        }
        let room = data.len() - data.len() / 32;
        self.packed.clear();
        self.packed.reserve(room);
        // zstd writes into the spare capacity and fails when it runs out.
        self.zstd.compress_to_buffer(data, &mut self.packed).is_ok() && self.packed.len() <= room
    }

    /// Puts into `self.packed` the frame kept for `header`'s chunk when it
    /// decompresses to exactly `data`.
    fn reuse(&mut self, header: &ChunkHeader, data: &[u8]) -> bool {
        let Some(frames) = &self.frames else {
            return false;
        };
        let Some(frame) = frames.get(&header.digest, header.len) else {
            return false;
        };
        let unzstd = match &mut self.unzstd {
            Some(z) => z,
            None => match zstd::bulk::Decompressor::new() {
                Ok(z) => self.unzstd.insert(z),
                Err(_) => return false,
            },
        };
        // Only a frame that saves what packing here would have to (a
        // padded one is not passed on).
        if frame.len() > data.len() - data.len() / 32 {
            return false;
        }
        // One buffer of a chunk's size, kept: a relay checks every chunk.
        self.check.clear();
        self.check.reserve_exact(data.len());
        let same = matches!(unzstd.decompress_to_buffer(&frame[..], &mut self.check), Ok(n) if n == data.len())
            && self.check == data;
        if !same {
            return false;
        }
        self.packed.clear();
        self.packed.extend_from_slice(&frame);
        self.reused = true;
        true
    }

    /// Adds what packing `header`'s chunk into `wire_len` bytes kept off
    /// the wire to the count ([`Packing::counting`]).
    fn count_kept_off(&self, header: &ChunkHeader, wire_len: usize) {
        if let Some(saved) = &self.saved {
            let kept_off = u64::from(header.len).saturating_sub(wire_len as u64);
            saved.fetch_add(kept_off, Ordering::Relaxed);
        }
    }

    /// Counts the chunk just packed as a frame sent as received, if it was.
    fn count_reused(&mut self) {
        if std::mem::take(&mut self.reused) {
            if let Some(frames) = &self.frames {
                frames.count_reused();
            }
        }
    }
}

/// The zstd level a chunk that is partly holes is packed at, level 0 (its
/// fastest: zeros shrink to almost nothing, and data that does not shrink
/// passes through quickly).
const HOLES_LEVEL: i32 = 1;

/// The block a hole is counted in (a filesystem's block).
const HOLE_BLOCK: usize = 4096;

/// Whether at least 1/8 of `data` is in zeroed [`HOLE_BLOCK`]s (a sparse
/// file's holes, read as zeros). A block with data is told by its first
/// word almost always, so data without holes costs one load a block.
fn holes(data: &[u8]) -> bool {
    let blocks = data.len() / HOLE_BLOCK;
    let need = blocks.div_ceil(8).max(1);
    let mut found = 0;
    for (i, block) in data.chunks_exact(HOLE_BLOCK).enumerate() {
        if block[..8] == [0; 8] && zeros(block) {
            found += 1;
            if found >= need {
                return true;
            }
        }
        // Too few blocks left to reach it.
        if found + (blocks - i - 1) < need {
            return false;
        }
    }
    false
}

/// Whether `data` is all zeros (64 bytes at a time, which compilers turn
/// into wide loads).
fn zeros(data: &[u8]) -> bool {
    data.chunks(64)
        .all(|c| c.iter().fold(0u8, |a, b| a | b) == 0)
}

fn packed_header(header: &ChunkHeader, wire_len: usize) -> ChunkHeader {
    ChunkHeader {
        len: wire_len as u32,
        packed: Some(header.len),
        ..*header
    }
}

#[async_trait::async_trait]
impl MessageWriter for Packing {
    fn push(&mut self, msg: &Message) {
        self.inner.push(msg);
    }

    fn start_at(&mut self, hint: crate::PathHint) -> bool {
        self.inner.start_at(hint)
    }

    fn batch_full(&self) -> bool {
        self.inner.batch_full()
    }

    async fn send_chunk(
        &mut self,
        header: &ChunkHeader,
        payload: Payload<'_>,
    ) -> Result<(), TransportError> {
        let packed = match payload {
            Payload::Bytes(b) => self.pack(header, b),
            Payload::File { file, offset, len } => {
                let mut raw = std::mem::take(&mut self.raw);
                raw.resize(len, 0);
                std::os::unix::fs::FileExt::read_exact_at(file, &mut raw, offset)?;
                let packed = self.pack(header, &raw);
                self.raw = raw;
                if !packed {
                    let raw = std::mem::take(&mut self.raw);
                    let sent = self.inner.send_chunk(header, Payload::Bytes(&raw)).await;
                    self.raw = raw;
                    return sent;
                }
                true
            }
        };
        if !packed {
            return self.inner.send_chunk(header, payload).await;
        }
        let packed = std::mem::take(&mut self.packed);
        let sent = self
            .inner
            .send_chunk(
                &packed_header(header, packed.len()),
                Payload::Bytes(&packed),
            )
            .await;
        if sent.is_ok() {
            self.count_reused();
            self.count_kept_off(header, packed.len());
        }
        self.packed = packed;
        sent
    }

    fn hand_back(&self) -> Result<(), TransportError> {
        self.inner.hand_back()
    }

    fn push_chunk(&mut self, header: &ChunkHeader, bytes: &[u8]) -> bool {
        if self.pack(header, bytes) {
            let packed = std::mem::take(&mut self.packed);
            let queued = self
                .inner
                .push_chunk(&packed_header(header, packed.len()), &packed);
            if queued {
                self.count_reused();
                self.count_kept_off(header, packed.len());
            }
            self.packed = packed;
            // Too large to queue even packed: the caller sends it (and it
            // is packed again there).
            return queued;
        }
        self.inner.push_chunk(header, bytes)
    }

    async fn flush(&mut self) -> Result<(), TransportError> {
        self.inner.flush().await
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        self.inner.close().await
    }

    fn sends_file_ranges(&self, _len: usize) -> bool {
        // Every chunk passes through memory to be compressed.
        false
    }
}

/// Decompresses the packed chunks read through it; others pass as they are.
pub struct Unpacking {
    inner: Box<dyn MessageReader>,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
    /// Packed chunks handed up and not yet read, by (file id, index): the
    /// header as it came (what the transport knows it by).
    pending: HashMap<(u32, u32), ChunkHeader>,
    wire: Vec<u8>,
    /// A relay's: each frame decompressed is kept to be forwarded as it
    /// came ([`crate::frames`]).
    frames: Option<FrameCache>,
    /// Payload bytes the peer's packing kept off the wire, added up here.
    saved: Option<Arc<AtomicU64>>,
}

impl Unpacking {
    /// `inner`, with packed chunks decompressed.
    pub fn new(inner: Box<dyn MessageReader>) -> Self {
        Self {
            inner,
            zstd: None,
            pending: HashMap::new(),
            wire: Vec::new(),
            frames: None,
            saved: None,
        }
    }

    /// The same, adding to `saved` the payload bytes each packed chunk
    /// read kept off the wire (as its header says: only a count).
    pub fn counting(mut self, saved: Arc<AtomicU64>) -> Self {
        self.saved = Some(saved);
        self
    }

    /// The same, keeping each frame it decompressed in `frames` (a relay's
    /// inbound connection: [`Packing::reusing`] passes them on).
    pub fn keeping(mut self, frames: FrameCache) -> Self {
        self.frames = Some(frames);
        self
    }

    /// A packed chunk's header as sessions see it: its own length.
    fn unpacked(&mut self, msg: Message) -> Message {
        match msg {
            Message::Chunk(h) if h.packed.is_some() => {
                let raw = h.packed.unwrap_or(h.len);
                if let Some(saved) = &self.saved {
                    saved.fetch_add(u64::from(raw.saturating_sub(h.len)), Ordering::Relaxed);
                }
                self.pending.insert((h.id, h.index), h);
                Message::Chunk(ChunkHeader {
                    len: raw,
                    packed: None,
                    ..h
                })
            }
            m => m,
        }
    }

    fn take(&mut self, header: &ChunkHeader) -> Option<ChunkHeader> {
        self.pending.remove(&(header.id, header.index))
    }

    /// Lets go of a large compressed buffer once used: the driver's memory
    /// budget counts the chunk itself, not this copy of it on the wire.
    fn keep_small(&mut self) {
        if self.wire.capacity() > 1 << 20 {
            self.wire = Vec::new();
        }
    }

    /// Decompresses `self.wire` into `out`: exactly `header.len` bytes (all
    /// zeros when nothing came).
    fn inflate(&mut self, header: &ChunkHeader, out: &mut Vec<u8>) -> Result<(), TransportError> {
        if self.wire.is_empty() {
            out.clear();
            out.resize(header.len as usize, 0);
            return Ok(());
        }
        let zstd = match &mut self.zstd {
            Some(z) => z,
            None => self.zstd.insert(zstd::bulk::Decompressor::new()?),
        };
        let want = header.len as usize;
        out.clear();
        out.reserve_exact(want);
        let got = zstd
            .decompress_to_buffer(&self.wire[..], out)
            .map_err(|e| {
                bad(format!(
                    "compressed chunk {} of file {} does not decompress: {e}",
                    header.index, header.id
                ))
            })?;
        if got != want || out.len() != want {
            return Err(bad(format!(
                "compressed chunk {} of file {} holds {got} bytes, not {want}",
                header.index, header.id
            )));
        }
        if let Some(frames) = &self.frames {
            frames.keep(&header.digest, header.len, &self.wire);
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl MessageReader for Unpacking {
    fn expect_rate(&mut self, rate: u64) {
        self.inner.expect_rate(rate);
    }

    async fn recv(&mut self) -> Result<Message, TransportError> {
        let m = self.inner.recv().await?;
        Ok(self.unpacked(m))
    }

    fn try_recv(&mut self) -> Result<Option<Message>, TransportError> {
        Ok(self.inner.try_recv()?.map(|m| self.unpacked(m)))
    }

    async fn read_payload(
        &mut self,
        header: &ChunkHeader,
        out: &mut Vec<u8>,
    ) -> Result<(), TransportError> {
        let Some(wire) = self.take(header) else {
            return self.inner.read_payload(header, out).await;
        };
        let mut buf = std::mem::take(&mut self.wire);
        let read = self.inner.read_payload(&wire, &mut buf).await;
        self.wire = buf;
        read?;
        let inflated = self.inflate(header, out);
        self.keep_small();
        inflated
    }

    async fn skip_payload(&mut self, header: &ChunkHeader) -> Result<(), TransportError> {
        match self.take(header) {
            Some(wire) => self.inner.skip_payload(&wire).await,
            None => self.inner.skip_payload(header).await,
        }
    }

    fn try_read_payload(&mut self, header: &ChunkHeader, out: &mut Vec<u8>) -> bool {
        let Some(wire) = self.pending.get(&(header.id, header.index)).copied() else {
            return self.inner.try_read_payload(header, out);
        };
        let mut buf = std::mem::take(&mut self.wire);
        let here = self.inner.try_read_payload(&wire, &mut buf);
        self.wire = buf;
        if !here {
            return false;
        }
        self.pending.remove(&(header.id, header.index));
        // A chunk that does not decompress is handed up empty: its digest
        // fails and it is asked for again, as a corrupted one would be.
        if self.inflate(header, out).is_err() {
            out.clear();
        }
        self.keep_small();
        true
    }

    async fn recv_many(
        &mut self,
        out: &mut Vec<Message>,
        max: usize,
    ) -> Result<(), TransportError> {
        let from = out.len();
        self.inner.recv_many(out, max).await?;
        for m in &mut out[from..] {
            let taken = std::mem::replace(m, Message::Bye);
            *m = self.unpacked(taken);
        }
        Ok(())
    }

    fn set_idle(&mut self, idle: Duration) {
        self.inner.set_idle(idle);
    }

    fn activity(&self) -> Option<std::sync::Arc<crate::Activity>> {
        self.inner.activity()
    }
}

#[cfg(test)]
mod tests;
