//! A lying relay, for tests: [`Forging`] makes a node's forwards rewrite
//! every chunk they send — its bytes changed, its digest made again to
//! match them, the origin's seal passed on as it came. Such a chunk is
//! well-formed and only that seal can tell it from the origin's (as a relay
//! that lies on purpose would do it: re-signing needs the origin's key).
//!
//! A fan-out must evict such a relay (`fanout`, "Lies"): the in-process
//! tests use [`Forging`] around their directory of nodes; a `haul serve`
//! built with the `test-doubles` feature (only test builds enable it) lies
//! so when `HAUL_TEST_FORGE_FORWARDS=1` is in its environment
//! ([`from_env`]), for the end-to-end and lab tests. Nothing else uses it.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use haul_proto::{ChunkHeader, Message};
use haul_transport::{MessageWriter, Payload, TransportError};

use crate::dial::{Dial, Dialer, Dialing, Reach};
use crate::ClientOptions;

/// How a lying node reaches the others: as `inner` does, every
/// connection's chunks forged on the way out.
#[derive(Debug)]
pub struct Forging(pub Arc<dyn Reach>);

impl Reach for Forging {
    fn dialer(&self, addr: &str, opts: &ClientOptions) -> Dialer {
        self.0
            .dialer(addr, opts)
            .over(|way| Arc::new(ForgingDial { way }))
    }
}

/// `reach`, forging when the environment asks (`HAUL_TEST_FORGE_FORWARDS=1`)
/// in a build with the `test-doubles` feature; `reach` itself otherwise.
pub fn from_env(reach: Arc<dyn Reach>) -> Arc<dyn Reach> {
    if cfg!(feature = "test-doubles")
        && std::env::var_os("HAUL_TEST_FORGE_FORWARDS").is_some_and(|v| v == "1")
    {
        tracing::warn!("HAUL_TEST_FORGE_FORWARDS=1: this node forges what it relays (a test)");
        return Arc::new(Forging(reach));
    }
    reach
}

struct ForgingDial {
    way: Arc<dyn Dial>,
}

impl Dial for ForgingDial {
    fn connect(&self) -> Dialing<'_> {
        Box::pin(async move {
            let mut reached = self.way.connect().await?;
            let (r, w) = reached.conn;
            reached.conn = (r, Box::new(Forger::new(w)));
            Ok(reached)
        })
    }

    fn name(&self) -> &str {
        self.way.name()
    }
}

/// Rewrites every chunk it sends (bytes and digest); everything else goes
/// as it is. It learns each file's chunk size from its `Offer`.
pub struct Forger {
    inner: Box<dyn MessageWriter>,
    /// File id → (chunk size, file size).
    files: HashMap<u32, (u32, u64)>,
    bytes: Vec<u8>,
}

impl Forger {
    /// Forges what goes out through `inner`.
    pub fn new(inner: Box<dyn MessageWriter>) -> Self {
        Self {
            inner,
            files: HashMap::new(),
            bytes: Vec::new(),
        }
    }

    fn learn(&mut self, msg: &Message) {
        if let Message::Offer { id, entry, .. } = msg {
            self.files.insert(*id, (entry.chunk_size, entry.size));
        }
    }

    /// Changes `self.bytes`; the header whose digest matches them.
    fn forge(&mut self, header: &ChunkHeader) -> ChunkHeader {
        if let Some(b) = self.bytes.first_mut() {
            *b ^= 0x5a;
        }
        let mut forged = *header;
        if let Some(&(chunk_size, size)) = self.files.get(&header.id) {
            forged.digest =
                haul_proto::digest::chunk_digest(&self.bytes, header.index, chunk_size, size);
        }
        forged
    }
}

#[async_trait::async_trait]
impl MessageWriter for Forger {
    fn push(&mut self, msg: &Message) {
        self.learn(msg);
        self.inner.push(msg);
    }

    fn batch_full(&self) -> bool {
        self.inner.batch_full()
    }

    async fn send_chunk(
        &mut self,
        header: &ChunkHeader,
        payload: Payload<'_>,
    ) -> Result<(), TransportError> {
        if header.packed.is_some() {
            return self.inner.send_chunk(header, payload).await;
        }
        self.bytes.clear();
        match payload {
            Payload::Bytes(b) => self.bytes.extend_from_slice(b),
            Payload::File { file, offset, len } => {
                self.bytes.resize(len, 0);
                file.read_exact_at(&mut self.bytes, offset)?;
            }
        }
        let forged = self.forge(header);
        let bytes = std::mem::take(&mut self.bytes);
        let sent = self.inner.send_chunk(&forged, Payload::Bytes(&bytes)).await;
        self.bytes = bytes;
        sent
    }

    fn push_chunk(&mut self, header: &ChunkHeader, bytes: &[u8]) -> bool {
        if header.packed.is_some() {
            return self.inner.push_chunk(header, bytes);
        }
        self.bytes.clear();
        self.bytes.extend_from_slice(bytes);
        let forged = self.forge(header);
        let bytes = std::mem::take(&mut self.bytes);
        let pushed = self.inner.push_chunk(&forged, &bytes);
        self.bytes = bytes;
        pushed
    }

    async fn flush(&mut self) -> Result<(), TransportError> {
        self.inner.flush().await
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        self.inner.close().await
    }

    fn sends_file_ranges(&self, _len: usize) -> bool {
        false
    }
}
