//! A link cut, for tests: [`Cutting`] makes the connections a node dials to
//! one address fall silent once they carried a number of chunks — every
//! later write and read waits forever and a dial times out, as a TCP
//! connection's do when the path between two live hosts is cut (nothing
//! arrives; the send buffer fills; a SYN is never answered). Both hosts go
//! on answering everyone else.
//!
//! A fan-out must move that peer off this node within seconds (`fanout`,
//! "Silence"; `haul_plan::Routing::cut`): the in-process tests use
//! [`Cutting`] around their directory of nodes. The lab cuts real paths
//! (`haul lab link hA down --peer hB`). Nothing else uses it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use haul_proto::{ChunkHeader, Message};
use haul_transport::{Activity, MessageReader, MessageWriter, Payload, TransportError};

use crate::dial::{Dial, Dialer, Dialing, Reach};
use crate::ClientOptions;

/// How a node whose path to `to` fails reaches the others: as `inner`
/// does, except that its connections to `to` go silent, both ways, once
/// `after` chunks went out over them (all of them together).
#[derive(Debug)]
pub struct Cutting {
    /// How it reaches the others.
    pub inner: Arc<dyn Reach>,
    /// The address whose path fails.
    pub to: String,
    /// Chunks sent to `to` before the path fails.
    pub after: u32,
    sent: Arc<AtomicU32>,
}

impl Cutting {
    /// A path to `to` that fails after `after` chunks.
    pub fn new(inner: Arc<dyn Reach>, to: &str, after: u32) -> Self {
        Self {
            inner,
            to: to.to_owned(),
            after,
            sent: Arc::new(AtomicU32::new(0)),
        }
    }
}

impl Reach for Cutting {
    fn dialer(&self, addr: &str, opts: &ClientOptions) -> Dialer {
        let dialer = self.inner.dialer(addr, opts);
        if addr != self.to {
            return dialer;
        }
        let path = Path {
            after: self.after,
            sent: self.sent.clone(),
        };
        let connect = opts.timeouts.connect;
        dialer.over(|way| Arc::new(CutDial { way, path, connect }))
    }
}

/// The shared state of the path: chunks sent so far.
#[derive(Clone)]
struct Path {
    after: u32,
    sent: Arc<AtomicU32>,
}

impl Path {
    fn is_cut(&self) -> bool {
        self.sent.load(Ordering::Relaxed) >= self.after
    }

    /// Waits forever once the path is cut (the caller's own timeouts and
    /// aborts still apply).
    async fn hold_if_cut(&self) {
        if self.is_cut() {
            std::future::pending::<()>().await;
        }
    }
}

struct CutDial {
    way: Arc<dyn Dial>,
    path: Path,
    /// How long a dial waits for an answer.
    connect: Duration,
}

impl Dial for CutDial {
    fn connect(&self) -> Dialing<'_> {
        Box::pin(async move {
            if self.path.is_cut() {
                // Nothing answers: the dial times out as a real one would.
                tokio::time::sleep(self.connect).await;
                return Err(TransportError::Timeout {
                    what: "connecting",
                    secs: self.connect.as_secs(),
                }
                .into());
            }
            let mut reached = self.way.connect().await?;
            let (r, w) = reached.conn;
            let path = self.path.clone();
            reached.conn = (
                Box::new(CutReader {
                    inner: r,
                    path: path.clone(),
                }),
                Box::new(CutWriter { inner: w, path }),
            );
            Ok(reached)
        })
    }

    fn name(&self) -> &str {
        self.way.name()
    }
}

/// Reads nothing once the path is cut.
struct CutReader {
    inner: Box<dyn MessageReader>,
    path: Path,
}

#[async_trait::async_trait]
impl MessageReader for CutReader {
    async fn recv(&mut self) -> Result<Message, TransportError> {
        self.path.hold_if_cut().await;
        let msg = self.inner.recv().await;
        self.path.hold_if_cut().await;
        msg
    }

    fn try_recv(&mut self) -> Result<Option<Message>, TransportError> {
        match self.path.is_cut() {
            true => Ok(None),
            false => self.inner.try_recv(),
        }
    }

    async fn read_payload(
        &mut self,
        header: &ChunkHeader,
        out: &mut Vec<u8>,
    ) -> Result<(), TransportError> {
        self.path.hold_if_cut().await;
        self.inner.read_payload(header, out).await
    }

    async fn skip_payload(&mut self, header: &ChunkHeader) -> Result<(), TransportError> {
        self.path.hold_if_cut().await;
        self.inner.skip_payload(header).await
    }

    fn set_idle(&mut self, idle: Duration) {
        self.inner.set_idle(idle);
    }

    fn activity(&self) -> Option<Arc<Activity>> {
        self.inner.activity()
    }
}

/// Sends nothing once the path is cut; counts the chunks before.
struct CutWriter {
    inner: Box<dyn MessageWriter>,
    path: Path,
}

#[async_trait::async_trait]
impl MessageWriter for CutWriter {
    fn push(&mut self, msg: &Message) {
        if !self.path.is_cut() {
            self.inner.push(msg);
        }
    }

    fn batch_full(&self) -> bool {
        self.inner.batch_full()
    }

    async fn send_chunk(
        &mut self,
        header: &ChunkHeader,
        payload: Payload<'_>,
    ) -> Result<(), TransportError> {
        self.path.hold_if_cut().await;
        self.path.sent.fetch_add(1, Ordering::Relaxed);
        self.inner.send_chunk(header, payload).await
    }

    fn push_chunk(&mut self, header: &ChunkHeader, bytes: &[u8]) -> bool {
        if self.path.is_cut() {
            // Swallowed: queued for a path that carries nothing.
            return true;
        }
        let pushed = self.inner.push_chunk(header, bytes);
        if pushed {
            self.path.sent.fetch_add(1, Ordering::Relaxed);
        }
        pushed
    }

    async fn flush(&mut self) -> Result<(), TransportError> {
        self.path.hold_if_cut().await;
        self.inner.flush().await
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        self.path.hold_if_cut().await;
        self.inner.close().await
    }

    fn sends_file_ranges(&self, _len: usize) -> bool {
        false
    }
}
