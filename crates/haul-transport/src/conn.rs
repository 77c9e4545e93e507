//! A framed connection: [`FrameReader`] turns bytes into messages and chunk
//! payloads, [`FrameWriter`] batches messages and sends payloads (with
//! `sendfile(2)` on plaintext TCP). Every wait is bounded by a timeout.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use haul_proto::{decode_frame, encode, ChunkHeader, Decoded, Message, MAX_CHUNK_LEN};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;

use crate::message::{MessageReader, MessageWriter, Payload};
use crate::pace::{RateLimit, SLICE};
use crate::Activity;
use crate::TransportError;
use std::sync::Arc;

/// Time limits for every network wait.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// TCP connect.
    pub connect: Duration,
    /// TLS and protocol handshake.
    pub handshake: Duration,
    /// Longest silence while a read or write is pending.
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            handshake: Duration::from_secs(15),
            idle: Duration::from_secs(60),
        }
    }
}

pub(crate) type BoxRead = Box<dyn AsyncRead + Unpin + Send>;
pub(crate) type BoxWrite = Box<dyn AsyncWrite + Unpin + Send>;

async fn within<T>(
    limit: Duration,
    what: &'static str,
    fut: impl std::future::Future<Output = io::Result<T>>,
) -> Result<T, TransportError> {
    match tokio::time::timeout(limit, fut).await {
        // A TLS peer gone without close_notify is a closed connection (its
        // rustls message points at rustls's manual).
        Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Err(TransportError::Closed),
        Ok(r) => r.map_err(TransportError::from),
        Err(_) => Err(TransportError::Timeout {
            what,
            secs: limit.as_secs(),
        }),
    }
}

/// Reads messages and payloads from one connection.
///
/// Memory grows only with bytes that arrived: a frame or chunk header that
/// announces a large length reserves address space, never zero-filled
/// pages, so a peer that announces much and sends little costs little.
pub struct FrameReader {
    inner: BoxRead,
    /// Bytes read and not yet consumed are `buf[start..]`.
    buf: Vec<u8>,
    start: usize,
    idle: Duration,
    /// Bytes consumed so far (messages decoded, payloads taken or skipped).
    consumed: u64,
    /// A cap on the bytes read per second (`--max-rate`).
    pace: Option<Arc<RateLimit>>,
    /// When bytes last arrived.
    activity: Arc<Activity>,
    /// Counts what arrived, for `--transport auto`.
    meter: Option<Arc<crate::Meter>>,
}

/// The read buffer's usual capacity (a large control frame grows it for a
/// while; it shrinks back once that frame is consumed).
const READ_BUF: usize = 256 << 10;

impl FrameReader {
    pub(crate) fn new(inner: BoxRead, idle: Duration) -> Self {
        Self {
            inner,
            buf: Vec::with_capacity(READ_BUF),
            start: 0,
            idle,
            consumed: 0,
            pace: None,
            activity: Activity::new(),
            meter: None,
        }
    }

    /// Counts the bytes that arrive into `meter` from now on.
    pub(crate) fn set_meter(&mut self, meter: Option<Arc<crate::Meter>>) {
        self.meter = meter;
    }

    /// Reads at most `pace`'s rate from now on.
    pub(crate) fn set_pace(&mut self, pace: Option<Arc<RateLimit>>) {
        self.pace = pace;
    }

    /// Touches `activity` from now on (a connection whose bytes arrive
    /// over several streams keeps one clock).
    pub(crate) fn share_activity(&mut self, activity: Arc<Activity>) {
        self.activity = activity;
    }

    /// When bytes last arrived on this connection.
    pub fn activity(&self) -> Arc<Activity> {
        self.activity.clone()
    }

    /// Waits for the rate's room for `n` bytes just read (which arrived
    /// now).
    fn paced(&self, n: usize) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.activity.touch();
        if let Some(m) = &self.meter {
            m.received(n);
        }
        let pace = self.pace.clone();
        async move {
            if let Some(p) = pace {
                p.take(n).await;
            }
        }
    }

    /// Bytes of the stream consumed so far: what a QUIC chunk stream that
    /// was opened after them waits for.
    pub(crate) fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Changes the idle limit.
    pub fn set_idle(&mut self, idle: Duration) {
        self.idle = idle;
    }

    /// The next message. A malformed frame is an error; the caller closes.
    pub async fn recv(&mut self) -> Result<Message, TransportError> {
        loop {
            match decode_frame(&self.buf[self.start..])? {
                Decoded::Message(msg, used) => {
                    self.start += used;
                    self.consumed += used as u64;
                    return Ok(msg);
                }
                Decoded::NeedMore(n) => self.fill(n).await?,
            }
        }
    }

    /// The next message if it is already buffered, without reading the socket.
    pub fn try_buffered(&mut self) -> Result<Option<Message>, TransportError> {
        match decode_frame(&self.buf[self.start..])? {
            Decoded::Message(msg, used) => {
                self.start += used;
                self.consumed += used as u64;
                Ok(Some(msg))
            }
            Decoded::NeedMore(_) => Ok(None),
        }
    }

    async fn fill(&mut self, need: usize) -> Result<(), TransportError> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        if self.buf.capacity() > 4 * READ_BUF && need <= READ_BUF && self.buf.len() <= READ_BUF {
            // A large frame was consumed: give its memory back.
            self.buf.shrink_to(READ_BUF);
        }
        // `need` is bounded by MAX_FRAME_LEN + 4 by the decoder; what is
        // reserved is only touched as bytes arrive.
        self.buf.reserve(need.saturating_sub(self.buf.len()));
        while self.buf.len() < need {
            let n = within(
                self.idle,
                "data from the peer",
                self.inner.read_buf(&mut self.buf),
            )
            .await?;
            if n == 0 {
                return Err(TransportError::Closed);
            }
            self.paced(n).await;
        }
        Ok(())
    }

    /// Reads and drops `len` payload bytes.
    pub async fn skip(&mut self, len: usize) -> Result<(), TransportError> {
        self.consumed += len as u64;
        let buffered = (self.buf.len() - self.start).min(len);
        self.start += buffered;
        let mut left = len - buffered;
        let mut scratch = vec![0u8; left.min(64 << 10)];
        while left > 0 {
            let want = left.min(scratch.len());
            let n = within(
                self.idle,
                "chunk data from the peer",
                self.inner.read(&mut scratch[..want]),
            )
            .await?;
            if n == 0 {
                return Err(TransportError::Closed);
            }
            self.paced(n).await;
            left -= n;
        }
        Ok(())
    }

    /// Reads exactly `len` payload bytes (after a chunk header) into `out`,
    /// which is cleared first. Its memory is touched only as bytes arrive.
    pub async fn recv_payload(
        &mut self,
        out: &mut Vec<u8>,
        len: usize,
    ) -> Result<(), TransportError> {
        if len > MAX_CHUNK_LEN as usize {
            return Err(TransportError::ChunkTooLarge(len as u32));
        }
        out.clear();
        out.reserve(len);
        self.consumed += len as u64;
        let buffered = (self.buf.len() - self.start).min(len);
        out.extend_from_slice(&self.buf[self.start..self.start + buffered]);
        self.start += buffered;
        while out.len() < len {
            let left = (len - out.len()) as u64;
            let n = within(
                self.idle,
                "chunk data from the peer",
                (&mut self.inner).take(left).read_buf(out),
            )
            .await?;
            if n == 0 {
                return Err(TransportError::Closed);
            }
            self.paced(n).await;
        }
        Ok(())
    }
}

pub(crate) enum Sink {
    Plain(OwnedWriteHalf),
    Boxed(BoxWrite),
}

/// Writes messages and payloads to one connection.
pub struct FrameWriter {
    sink: Sink,
    buf: Vec<u8>,
    idle: Duration,
    zero_copy: bool,
    /// Bytes handed to the sink so far.
    sent: u64,
    /// A cap on the bytes written per second (`--max-rate`).
    pace: Option<Arc<RateLimit>>,
    /// What the peer acknowledged, for `--transport auto` (TCP only).
    tcp_meter: Option<crate::tcp_info::TcpMeter>,
}

/// A metered connection's large payloads go out in pieces of this size
/// (see `FrameWriter::write_payload`).
const METERED_PIECE: usize = 256 << 10;

/// Flush queued messages once this many bytes wait.
const BATCH: usize = 256 << 10;
/// Payloads up to this size are copied into the batch instead of sent on their own.
const INLINE_PAYLOAD: usize = 64 << 10;

impl FrameWriter {
    pub(crate) fn new(sink: Sink, idle: Duration) -> Self {
        let zero_copy = matches!(sink, Sink::Plain(_));
        Self {
            sink,
            buf: Vec::with_capacity(BATCH * 2),
            idle,
            zero_copy,
            sent: 0,
            pace: None,
            tcp_meter: None,
        }
    }

    /// Feeds `meter` from the TCP socket `fd` (which the sink writes to,
    /// and holds open) as it writes.
    pub(crate) fn set_tcp_meter(
        &mut self,
        fd: std::os::fd::RawFd,
        meter: Option<Arc<crate::Meter>>,
    ) {
        self.tcp_meter = meter.map(|m| crate::tcp_info::TcpMeter::new(fd, m));
    }

    /// Writes at most `pace`'s rate from now on.
    pub(crate) fn set_pace(&mut self, pace: Option<Arc<RateLimit>>) {
        self.pace = pace;
    }

    /// Bytes written to the connection so far (what is queued not counted).
    pub(crate) fn sent(&self) -> u64 {
        self.sent
    }

    /// True when payloads go out with `sendfile(2)`.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Turns `sendfile(2)` off (payloads are then written from memory).
    pub fn set_zero_copy(&mut self, on: bool) {
        self.zero_copy = on && matches!(self.sink, Sink::Plain(_));
    }

    /// Queues a message; it leaves at the next flush (or when the batch is full).
    pub async fn queue(&mut self, msg: &Message) -> Result<(), TransportError> {
        encode(msg, &mut self.buf);
        if self.buf.len() >= BATCH {
            self.flush().await?;
        }
        Ok(())
    }

    /// Sends a message now.
    pub async fn send(&mut self, msg: &Message) -> Result<(), TransportError> {
        encode(msg, &mut self.buf);
        self.flush().await
    }

    /// Writes everything queued.
    pub async fn flush(&mut self) -> Result<(), TransportError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let buf = std::mem::take(&mut self.buf);
        let r = self.write_raw(&buf).await;
        self.buf = buf;
        self.buf.clear();
        r
    }

    async fn write_raw(&mut self, data: &[u8]) -> Result<(), TransportError> {
        match self.pace.clone() {
            None => self.write_slice(data).await,
            Some(pace) => {
                for slice in data.chunks(SLICE) {
                    pace.take(slice.len()).await;
                    self.write_slice(slice).await?;
                }
                Ok(())
            }
        }
    }

    async fn write_slice(&mut self, data: &[u8]) -> Result<(), TransportError> {
        self.sent += data.len() as u64;
        let written = match &mut self.sink {
            Sink::Plain(w) => within(self.idle, "the peer to accept data", w.write_all(data)).await,
            Sink::Boxed(w) => {
                within(self.idle, "the peer to accept data", async {
                    w.write_all(data).await?;
                    w.flush().await
                })
                .await
            }
        };
        if let Some(m) = &mut self.tcp_meter {
            m.note();
        }
        written
    }

    /// True when a payload of `len` bytes goes out straight from its file
    /// (`sendfile(2)`): the caller then need not hold the bytes in memory.
    pub fn sends_from_file(&self, len: usize) -> bool {
        self.zero_copy && len > INLINE_PAYLOAD
    }

    /// Sends a chunk payload: from a file range with `sendfile(2)` when
    /// [`FrameWriter::sends_from_file`], else from memory (a file range is
    /// read first).
    pub async fn send_payload(&mut self, payload: Payload<'_>) -> Result<(), TransportError> {
        let len = payload.len();
        let (file, offset) = match payload {
            Payload::Bytes(data) => return self.send_bytes(data).await,
            Payload::File { file, offset, .. } if self.sends_from_file(len) => (file, offset),
            Payload::File { file, offset, .. } => {
                let mut data = vec![0; len];
                std::os::unix::fs::FileExt::read_exact_at(file, &mut data, offset)?;
                return self.send_bytes(&data).await;
            }
        };
        self.flush().await?;
        let Sink::Plain(w) = &mut self.sink else {
            return Err(TransportError::Io(io::Error::other(
                "sendfile on a socket that has none",
            )));
        };
        let stream = w.as_ref();
        let mut off = offset;
        let mut left = len;
        // Bytes whose time at the `--max-rate` pace is already taken.
        let mut paid = 0;
        while left > 0 {
            let step = match &self.pace {
                Some(p) => {
                    if paid == 0 {
                        paid = left.min(SLICE);
                        p.take(paid).await;
                    }
                    paid
                }
                None => left,
            };
            within(self.idle, "the peer to accept data", stream.writable()).await?;
            let res = stream.try_io(tokio::io::Interest::WRITABLE, || {
                let mut o = off as libc::off_t;
                // SAFETY: both descriptors are open for the duration of the call;
                // `o` is a valid pointer to a local.
                let n =
                    unsafe { libc::sendfile(stream.as_raw_fd(), file.as_raw_fd(), &mut o, step) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match res {
                Ok(0) => {
                    return Err(TransportError::Io(io::Error::other(
                        "source file shrank while sending",
                    )))
                }
                Ok(n) => {
                    off += n as u64;
                    left -= n;
                    paid = paid.saturating_sub(n);
                    self.sent += n as u64;
                    if let Some(m) = &mut self.tcp_meter {
                        m.note();
                        m.check()?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(TransportError::Io(e)),
            }
        }
        Ok(())
    }

    /// A payload from memory: small ones ride in the batch with their
    /// headers (one write for many small files beats a call each).
    async fn send_bytes(&mut self, data: &[u8]) -> Result<(), TransportError> {
        if data.len() <= INLINE_PAYLOAD {
            self.buf.extend_from_slice(data);
            if self.buf.len() >= BATCH {
                self.flush().await?;
            }
            return Ok(());
        }
        self.flush().await?;
        self.write_payload(data).await
    }

    /// A large payload from memory: as [`FrameWriter::write_raw`], and on a
    /// connection `--transport auto` superseded, ended a piece at a time
    /// (a chunk's write on a crawling link lasts seconds; its driver hands
    /// the work back). Control messages are never cut: their driver hands
    /// back between them.
    async fn write_payload(&mut self, data: &[u8]) -> Result<(), TransportError> {
        if self.tcp_meter.is_none() || self.pace.is_some() {
            return self.write_raw(data).await;
        }
        for piece in data.chunks(METERED_PIECE) {
            self.write_slice(piece).await?;
            if let Some(m) = &self.tcp_meter {
                m.check()?;
            }
        }
        Ok(())
    }

    /// Flushes and shuts the write side down.
    pub async fn close(&mut self) -> Result<(), TransportError> {
        self.flush().await?;
        match &mut self.sink {
            Sink::Plain(w) => within(self.idle, "shutdown", w.shutdown()).await,
            Sink::Boxed(w) => within(self.idle, "shutdown", w.shutdown()).await,
        }
    }
}

/// A connection over any byte stream's two halves: a child process's pipes
/// (an ssh channel, `haul serve --stdio` on the far side) or this process's
/// stdin and stdout (that far side). Frames as over TCP; no TLS (the stream
/// is already authenticated and encrypted, or local).
pub fn stream_connection(
    reader: impl AsyncRead + Unpin + Send + 'static,
    writer: impl AsyncWrite + Unpin + Send + 'static,
    timeouts: Timeouts,
) -> crate::Connection {
    (
        Box::new(FrameReader::new(Box::new(reader), timeouts.idle)),
        Box::new(FrameWriter::new(
            Sink::Boxed(Box::new(writer)),
            timeouts.idle,
        )),
    )
}

/// Two connected in-memory ends (local copies through the same engine, and tests).
pub fn memory_pair(timeouts: Timeouts) -> (crate::Connection, crate::Connection) {
    memory_pair_paced(timeouts, None)
}

/// [`memory_pair`] whose first end writes at most `pace`'s rate (a local
/// copy with `--max-rate`).
pub fn memory_pair_paced(
    timeouts: Timeouts,
    pace: Option<Arc<RateLimit>>,
) -> (crate::Connection, crate::Connection) {
    pair_of(timeouts, pace, |w| Box::new(w), |w| Box::new(w))
}

/// Two connected in-memory ends whose write halves pass through `first`
/// and `second` (faults are injected there, [`crate::fault`]).
pub(crate) fn pair_of(
    timeouts: Timeouts,
    pace: Option<Arc<RateLimit>>,
    first: impl FnOnce(tokio::io::WriteHalf<tokio::io::DuplexStream>) -> BoxWrite,
    second: impl FnOnce(tokio::io::WriteHalf<tokio::io::DuplexStream>) -> BoxWrite,
) -> (crate::Connection, crate::Connection) {
    let (a, b) = tokio::io::duplex(8 << 20);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    let end = |r: BoxRead, w: BoxWrite, pace| -> crate::Connection {
        let mut writer = FrameWriter::new(Sink::Boxed(w), timeouts.idle);
        writer.set_pace(pace);
        (
            Box::new(FrameReader::new(r, timeouts.idle)),
            Box::new(writer),
        )
    };
    (
        end(Box::new(ar), first(aw), pace),
        end(Box::new(br), second(bw), None),
    )
}

#[async_trait::async_trait]
impl MessageReader for FrameReader {
    async fn recv(&mut self) -> Result<Message, TransportError> {
        FrameReader::recv(self).await
    }

    fn try_recv(&mut self) -> Result<Option<Message>, TransportError> {
        self.try_buffered()
    }

    async fn read_payload(
        &mut self,
        header: &ChunkHeader,
        out: &mut Vec<u8>,
    ) -> Result<(), TransportError> {
        self.recv_payload(out, header.len as usize).await
    }

    async fn skip_payload(&mut self, header: &ChunkHeader) -> Result<(), TransportError> {
        self.skip(header.len as usize).await
    }

    fn try_read_payload(&mut self, header: &ChunkHeader, out: &mut Vec<u8>) -> bool {
        let len = header.len as usize;
        if self.buf.len() - self.start < len {
            return false;
        }
        out.clear();
        out.extend_from_slice(&self.buf[self.start..self.start + len]);
        self.start += len;
        self.consumed += len as u64;
        true
    }

    fn set_idle(&mut self, idle: Duration) {
        FrameReader::set_idle(self, idle);
    }

    fn activity(&self) -> Option<Arc<Activity>> {
        Some(FrameReader::activity(self))
    }
}

#[async_trait::async_trait]
impl MessageWriter for FrameWriter {
    fn push(&mut self, msg: &Message) {
        encode(msg, &mut self.buf);
    }

    fn batch_full(&self) -> bool {
        self.buf.len() >= BATCH
    }

    fn hand_back(&self) -> Result<(), TransportError> {
        self.tcp_meter.as_ref().map_or(Ok(()), |m| m.check())
    }

    fn push_chunk(&mut self, header: &ChunkHeader, bytes: &[u8]) -> bool {
        if bytes.len() > INLINE_PAYLOAD || bytes.len() != header.len as usize {
            return false;
        }
        encode(&Message::Chunk(*header), &mut self.buf);
        self.buf.extend_from_slice(bytes);
        true
    }

    async fn send(&mut self, msg: &Message) -> Result<(), TransportError> {
        FrameWriter::send(self, msg).await
    }

    async fn send_chunk(
        &mut self,
        header: &ChunkHeader,
        payload: Payload<'_>,
    ) -> Result<(), TransportError> {
        if payload.len() != header.len as usize {
            return Err(TransportError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "chunk of {} bytes given {} bytes",
                    header.len,
                    payload.len()
                ),
            )));
        }
        FrameWriter::queue(self, &Message::Chunk(*header)).await?;
        self.send_payload(payload).await
    }

    async fn flush(&mut self) -> Result<(), TransportError> {
        FrameWriter::flush(self).await
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        FrameWriter::close(self).await
    }

    fn sends_file_ranges(&self, len: usize) -> bool {
        self.sends_from_file(len)
    }
}
