//! The sending half of a haul QUIC connection: control messages on the
//! first bidirectional stream (at a higher priority than chunks, so a
//! message never waits behind megabytes of chunk data), each chunk of
//! more than [`super::INLINE_CHUNK`] bytes on a stream of its own (the
//! layout is in [`super::reader`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use haul_proto::{encode, ChunkHeader, Message};

use haul_congestion::quinn::HintSlot;

use super::windows::{send_window, LossEstimate};
use crate::conn::FrameWriter;
use crate::message::{MessageWriter, Payload};
use crate::pace::{RateLimit, SLICE};
use crate::TransportError;

/// How often the send window follows the congestion window.
const SEND_WINDOW_TICK: Duration = Duration::from_millis(100);

/// Writes control messages and chunk streams.
pub(super) struct QuicWriter {
    control: FrameWriter,
    conn: quinn::Connection,
    idle: Duration,
    window_checked: Option<Instant>,
    loss: LossEstimate,
    /// The largest chunk sent on a stream so far.
    chunk: u64,
    pace: Option<Arc<RateLimit>>,
    /// Where a hint for this connection's controller goes.
    slot: Arc<HintSlot>,
    /// Says when `--transport auto` chose TCP instead.
    meter: Option<Arc<crate::Meter>>,
}

impl QuicWriter {
    pub(super) fn new(
        control: FrameWriter,
        conn: quinn::Connection,
        idle: Duration,
        pace: Option<Arc<RateLimit>>,
        (slot, meter): (Arc<HintSlot>, Option<Arc<crate::Meter>>),
    ) -> Self {
        Self {
            slot,
            meter,
            control,
            conn,
            idle,
            window_checked: None,
            loss: LossEstimate::default(),
            chunk: 0,
            pace,
        }
    }

    /// Lets quinn hold a few congestion windows of unacknowledged data:
    /// enough to keep a long fat link full, little on a LAN, more on a
    /// lossy path (see [`send_window`]).
    fn follow_congestion_window(&mut self) {
        let now = Instant::now();
        if self
            .window_checked
            .is_some_and(|t| now.duration_since(t) < SEND_WINDOW_TICK)
        {
            return;
        }
        self.window_checked = Some(now);
        let stats = self.conn.stats();
        let loss = self.loss.sample(stats.path.lost_bytes, stats.udp_tx.bytes);
        let cwnd = self.conn.congestion_state().window();
        self.conn
            .set_send_window(send_window(cwnd, loss, self.chunk));
    }

    async fn chunk_stream(
        &mut self,
        header: &ChunkHeader,
        payload: &[u8],
    ) -> Result<(), TransportError> {
        // Every control byte queued before this chunk goes first, and the
        // chunk says how many there were.
        self.control.flush().await?;
        self.chunk = self.chunk.max(payload.len() as u64);
        self.follow_congestion_window();
        let mut prefix = self.control.sent().to_le_bytes().to_vec();
        encode(&Message::Chunk(*header), &mut prefix);
        let idle = self.idle;
        let timeout = |_| TransportError::Timeout {
            what: "the peer to accept data",
            secs: idle.as_secs(),
        };
        let mut s = tokio::time::timeout(idle, self.conn.open_uni())
            .await
            .map_err(timeout)?
            .map_err(|e| super::lost::connection(&e, idle))?;
        let pace = self.pace.clone();
        tokio::time::timeout(idle, s.write_all(&prefix))
            .await
            .map_err(timeout)?
            .map_err(|e| super::lost::write(&e, idle))?;
        let slice = if pace.is_some() {
            SLICE
        } else {
            payload.len().max(1)
        };
        for part in payload.chunks(slice) {
            if let Some(p) = &pace {
                p.take(part.len()).await;
            }
            tokio::time::timeout(idle, s.write_all(part))
                .await
                .map_err(timeout)?
                .map_err(|e| super::lost::write(&e, idle))?;
        }
        // Delivered in the background; the connection stays open until
        // the session's last message was acknowledged.
        let _ = s.finish();
        Ok(())
    }
}

#[async_trait::async_trait]
impl MessageWriter for QuicWriter {
    fn start_at(&mut self, hint: crate::PathHint) -> bool {
        tracing::debug!(
            rate = hint.rate,
            loss = hint.loss,
            "QUIC: the controller starts at the path's hinted rate"
        );
        self.slot.set(hint);
        true
    }

    fn push(&mut self, msg: &Message) {
        MessageWriter::push(&mut self.control, msg);
    }

    fn batch_full(&self) -> bool {
        MessageWriter::batch_full(&self.control)
    }

    async fn send_chunk(
        &mut self,
        header: &ChunkHeader,
        payload: Payload<'_>,
    ) -> Result<(), TransportError> {
        let len = payload.len();
        if len != header.len as usize {
            return Err(TransportError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("chunk of {} bytes given {len} bytes", header.len),
            )));
        }
        if len <= super::INLINE_CHUNK {
            return self.control.send_chunk(header, payload).await;
        }
        match payload {
            Payload::Bytes(b) => self.chunk_stream(header, b).await,
            Payload::File { file, offset, len } => {
                let mut data = vec![0; len];
                std::os::unix::fs::FileExt::read_exact_at(file, &mut data, offset)?;
                self.chunk_stream(header, &data).await
            }
        }
    }

    fn hand_back(&self) -> Result<(), TransportError> {
        self.meter.as_ref().map_or(Ok(()), |m| m.check())
    }

    fn push_chunk(&mut self, header: &ChunkHeader, bytes: &[u8]) -> bool {
        bytes.len() <= super::INLINE_CHUNK && self.control.push_chunk(header, bytes)
    }

    async fn flush(&mut self) -> Result<(), TransportError> {
        MessageWriter::flush(&mut self.control).await
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        MessageWriter::close(&mut self.control).await
    }

    fn sends_file_ranges(&self, _len: usize) -> bool {
        false
    }
}
