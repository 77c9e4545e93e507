//! The receiving half of a haul QUIC connection.
//!
//! Control messages come on the connection's first bidirectional stream,
//! in order. A chunk of more than [`super::INLINE_CHUNK`] bytes comes on a
//! unidirectional stream of its own:
//!
//! ```text
//! after: u64 LE | Chunk frame (as on the control stream) | payload
//! ```
//!
//! `after` is how many control-stream bytes the sender had written when it
//! opened the chunk's stream. A chunk is handed to the session only once
//! the control stream was read that far, so it never overtakes a message
//! sent before it (an offer, a need), while chunks overtake each other
//! freely: a lost packet delays only its own chunk.
//!
//! Each chunk stream is read by a task of its own into a buffer as its
//! bytes arrive. The buffers of a connection hold at most its receive
//! window ([`super::windows::ReceiveWindow`]): a stream past it waits, its
//! bytes staying in quinn, whose flow control then stops the peer.

use crate::Activity;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use haul_proto::{decode_frame, ChunkHeader, Decoded, Message, MAX_CHUNK_LEN};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::windows::ReceiveWindow;
use crate::conn::FrameReader;
use crate::message::MessageReader;
use crate::pace::RateLimit;
use crate::TransportError;

/// Largest chunk header frame on a chunk stream.
const MAX_HEADER_FRAME: usize = 4 << 10;

/// How often the receive window is reconsidered.
const WINDOW_TICK: Duration = Duration::from_millis(50);

/// How long chunks took to arrive whole once their reading began (their
/// share of the window taken), summed since the window was last tuned.
#[derive(Default)]
struct ReadTimes {
    micros: AtomicU64,
    chunks: AtomicU64,
}

impl ReadTimes {
    fn record(&self, took: Duration) {
        self.micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        self.chunks.fetch_add(1, Ordering::Relaxed);
    }

    /// The mean since the last call (`None`: no chunk finished).
    fn take_mean(&self) -> Option<Duration> {
        let n = self.chunks.swap(0, Ordering::Relaxed);
        let us = self.micros.swap(0, Ordering::Relaxed);
        (n > 0).then(|| Duration::from_micros(us / n))
    }
}

/// A chunk read whole from its stream.
struct Arrived {
    after: u64,
    header: ChunkHeader,
    payload: Vec<u8>,
    /// Its bytes' share of the connection's receive window.
    _window: OwnedSemaphorePermit,
}

type Delivery = Result<Arrived, TransportError>;

/// Reads control messages and chunk streams (see the module docs).
pub(super) struct QuicReader {
    control: FrameReader,
    arrived: mpsc::UnboundedReceiver<Delivery>,
    /// Chunks that came before the control bytes sent ahead of them.
    early: Vec<Arrived>,
    /// The chunk whose header was handed out last (`None`: it came on the
    /// control stream, whose reader holds its payload).
    current: Option<Arrived>,
    streams_open: bool,
    window: Arc<Semaphore>,
    activity: Arc<Activity>,
    idle: Duration,
    accept: tokio::task::JoinHandle<()>,
    /// The rate the peer's sender starts at, if told (0: not told): the
    /// window task opens the receive window for it.
    expected: Arc<AtomicU64>,
}

/// Idle limit of the control stream's own reads: the connection's idle
/// limit counts any stream's bytes (a long chunk-only stretch leaves the
/// control stream silent).
const CONTROL_IDLE: Duration = Duration::from_secs(365 * 24 * 3600);

impl QuicReader {
    /// Reads `control` and the chunk streams `conn` accepts.
    pub(super) fn new(
        conn: quinn::Connection,
        control: quinn::RecvStream,
        activity: Arc<Activity>,
        idle: Duration,
        (pace, meter): (Option<Arc<RateLimit>>, Option<Arc<crate::Meter>>),
    ) -> Self {
        let window = Arc::new(Semaphore::new(ReceiveWindow::new().get() as usize));
        let (tx, arrived) = mpsc::unbounded_channel();
        let expected = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn(accept_chunks(
            conn,
            tx,
            window.clone(),
            (activity.clone(), idle),
            (pace.clone(), meter.clone()),
            expected.clone(),
        ));
        let read = super::QuicRead {
            recv: control,
            idle,
        };
        let mut control = FrameReader::new(Box::new(read), CONTROL_IDLE);
        control.set_pace(pace);
        control.set_meter(meter);
        // A control frame's bytes arriving count on the connection's one
        // clock, as the chunk streams' do.
        control.share_activity(activity.clone());
        Self {
            control,
            arrived,
            early: Vec::new(),
            current: None,
            streams_open: true,
            window,
            activity,
            idle,
            accept,
            expected,
        }
    }

    /// A chunk whose control bytes were all read, if any.
    fn ready(&mut self) -> Option<ChunkHeader> {
        let read = self.control.consumed();
        let i = self.early.iter().position(|a| a.after <= read)?;
        let a = self.early.swap_remove(i);
        let header = a.header;
        self.current = Some(a);
        Some(header)
    }

    fn take_current(&mut self, header: &ChunkHeader) -> Option<Arrived> {
        match &self.current {
            Some(a) if a.header.id == header.id && a.header.index == header.index => {
                self.current.take()
            }
            _ => None,
        }
    }
}

impl Drop for QuicReader {
    fn drop(&mut self) {
        // Chunk tasks waiting for window room end; no new ones start.
        self.window.close();
        self.accept.abort();
    }
}

#[async_trait::async_trait]
impl MessageReader for QuicReader {
    async fn recv(&mut self) -> Result<Message, TransportError> {
        self.current = None;
        loop {
            if let Some(h) = self.ready() {
                return Ok(Message::Chunk(h));
            }
            let quiet_until = self.activity.last() + self.idle;
            tokio::select! {
                msg = self.control.recv() => {
                    self.activity.touch();
                    return msg;
                }
                got = self.arrived.recv(), if self.streams_open => match got {
                    Some(Ok(a)) => self.early.push(a),
                    Some(Err(e)) => return Err(e),
                    None => self.streams_open = false,
                },
                () = tokio::time::sleep_until(quiet_until.into()) => {
                    if self.activity.last() + self.idle <= Instant::now() {
                        return Err(TransportError::Timeout {
                            what: "data from the peer",
                            secs: self.idle.as_secs(),
                        });
                    }
                }
            }
        }
    }

    fn try_recv(&mut self) -> Result<Option<Message>, TransportError> {
        self.current = None;
        while let Ok(got) = self.arrived.try_recv() {
            self.early.push(got?);
        }
        if let Some(h) = self.ready() {
            return Ok(Some(Message::Chunk(h)));
        }
        self.control.try_buffered()
    }

    async fn read_payload(
        &mut self,
        header: &ChunkHeader,
        out: &mut Vec<u8>,
    ) -> Result<(), TransportError> {
        match self.take_current(header) {
            // The buffer changes hands; its window share is given back.
            Some(mut a) => {
                std::mem::swap(out, &mut a.payload);
                Ok(())
            }
            None => self.control.recv_payload(out, header.len as usize).await,
        }
    }

    async fn skip_payload(&mut self, header: &ChunkHeader) -> Result<(), TransportError> {
        match self.take_current(header) {
            Some(_) => Ok(()),
            None => self.control.skip(header.len as usize).await,
        }
    }

    fn try_read_payload(&mut self, header: &ChunkHeader, out: &mut Vec<u8>) -> bool {
        match self.take_current(header) {
            Some(mut a) => {
                std::mem::swap(out, &mut a.payload);
                true
            }
            None => self.control.try_read_payload(header, out),
        }
    }

    fn set_idle(&mut self, idle: Duration) {
        self.idle = idle;
    }

    fn activity(&self) -> Option<Arc<Activity>> {
        Some(self.activity.clone())
    }

    fn expect_rate(&mut self, rate: u64) {
        self.expected.store(rate, Ordering::Relaxed);
    }
}

/// Accepts the peer's chunk streams, each read by a task of its own, and
/// grows the receive window with the path.
async fn accept_chunks(
    conn: quinn::Connection,
    tx: mpsc::UnboundedSender<Delivery>,
    window: Arc<Semaphore>,
    (activity, idle): (Arc<Activity>, Duration),
    (pace, meter): (Option<Arc<RateLimit>>, Option<Arc<crate::Meter>>),
    expected: Arc<AtomicU64>,
) {
    let mut tune = ReceiveWindow::new();
    let times = Arc::new(ReadTimes::default());
    let mut tick = tokio::time::interval(WINDOW_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            stream = conn.accept_uni() => match stream {
                Ok(s) => {
                    let (tx, window, activity) = (tx.clone(), window.clone(), activity.clone());
                    let (pace, times, meter) = (pace.clone(), times.clone(), meter.clone());
                    tokio::spawn(async move {
                        let arrival = (&*activity, meter.as_deref());
                        if let Some(got) = read_chunk_stream(s, &window, arrival, pace.as_deref(), (&times, idle)).await {
                            let _ = tx.send(got);
                        }
                    });
                }
                // The connection ended: the control stream says how.
                Err(_) => return,
            },
            _ = tick.tick() => {
                if let Some(m) = &meter {
                    // What this side sent and was not declared lost; what
                    // arrived is counted as streams read it.
                    let stats = conn.stats();
                    m.sender_totals(
                        stats.udp_tx.bytes.saturating_sub(stats.path.lost_bytes),
                        stats.path.sent_packets,
                        stats.path.lost_packets,
                        stats.path.rtt,
                    );
                }
                let before = tune.get();
                let held = times.take_mean();
                let rate = expected.swap(0, Ordering::Relaxed);
                let grown = match rate {
                    0 => tune.on_sample(Instant::now(), conn.stats().udp_rx.bytes, conn.rtt(), held),
                    rate => tune.expect(rate, conn.rtt()),
                };
                if let Some(w) = grown {
                    if let Ok(v) = quinn::VarInt::from_u64(w) {
                        conn.set_receive_window(v);
                    }
                    window.add_permits((w - before) as usize);
                    tracing::debug!("QUIC receive window {} MiB (RTT {:?})", w >> 20, conn.rtt());
                }
            }
        }
    }
}

fn broken(what: impl std::fmt::Display) -> TransportError {
    TransportError::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("bad chunk stream from the peer: {what}"),
    ))
}

/// Reads one chunk stream whole. `None`: the reader is gone.
async fn read_chunk_stream(
    mut s: quinn::RecvStream,
    window: &Arc<Semaphore>,
    (activity, meter): (&Activity, Option<&crate::Meter>),
    pace: Option<&RateLimit>,
    (times, idle): (&ReadTimes, Duration),
) -> Option<Delivery> {
    let mut after = [0u8; 8];
    match s.read_exact(&mut after).await {
        Ok(()) => {}
        Err(quinn::ReadExactError::FinishedEarly(_)) => return Some(Err(broken("cut short"))),
        Err(quinn::ReadExactError::ReadError(e)) => return Some(Err(super::lost::read(&e, idle))),
    }
    let after = u64::from_le_bytes(after);
    let mut frame = Vec::with_capacity(64);
    let header = loop {
        match decode_frame(&frame) {
            Ok(Decoded::Message(Message::Chunk(h), used)) if used == frame.len() => break h,
            Ok(Decoded::Message(_, _)) => {
                return Some(Err(broken("a message where a chunk header belongs")))
            }
            Ok(Decoded::NeedMore(n)) if n <= MAX_HEADER_FRAME => {
                let have = frame.len();
                frame.resize(n, 0);
                match s.read_exact(&mut frame[have..]).await {
                    Ok(()) => {}
                    Err(quinn::ReadExactError::FinishedEarly(_)) => {
                        return Some(Err(broken("cut short")))
                    }
                    Err(quinn::ReadExactError::ReadError(e)) => {
                        return Some(Err(super::lost::read(&e, idle)))
                    }
                }
            }
            Ok(Decoded::NeedMore(n)) => return Some(Err(broken(format!("header of {n} bytes")))),
            Err(e) => return Some(Err(TransportError::Decode(e))),
        }
    };
    if header.len > MAX_CHUNK_LEN {
        return Some(Err(TransportError::ChunkTooLarge(header.len)));
    }
    let len = header.len as usize;
    // A chunk larger than the whole window takes all of it.
    let share = (len.max(1) as u64).min(ReceiveWindow::new().get()) as u32;
    let permit = window.clone().acquire_many_owned(share).await.ok()?;
    let began = Instant::now();
    // Read out of order as packets arrive: quinn keeps no gapped data of
    // ours (it takes at most 1024 gaps a stream, which a long lossy round
    // trip of one stream exceeds), and a retransmission fills its hole.
    let base = (8 + frame.len()) as u64;
    let end = base + len as u64;
    let mut payload = vec![0u8; len];
    let mut got = 0usize;
    loop {
        match s.read_chunk(len.max(1), false).await {
            Ok(Some(c)) => {
                let (from, to) = (c.offset, c.offset + c.bytes.len() as u64);
                if to > end {
                    return Some(Err(broken("longer than its header says")));
                }
                // Bytes of the prefix are never given again once read.
                let skip = base.saturating_sub(from).min(c.bytes.len() as u64) as usize;
                let at = (from.max(base) - base) as usize;
                let bytes = &c.bytes[skip..];
                payload[at..at + bytes.len()].copy_from_slice(bytes);
                got += bytes.len();
                activity.touch();
                if let Some(m) = meter {
                    m.received(bytes.len());
                }
                if let Some(p) = pace {
                    p.take(bytes.len()).await;
                }
            }
            Ok(None) if got == len => {
                times.record(began.elapsed());
                break;
            }
            Ok(None) => return Some(Err(broken("ended inside its payload"))),
            Err(e) => return Some(Err(super::lost::read(&e, idle))),
        }
    }
    Some(Ok(Arrived {
        after,
        header,
        payload,
        _window: permit,
    }))
}
