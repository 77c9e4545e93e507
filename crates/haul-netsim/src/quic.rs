//! Real QUIC (quinn-proto endpoints with haul's TLS identity and the
//! loss-tolerant controller) over simulated links, in simulated time: what
//! 30 % loss or a 1 s delay does to the transport, in seconds of wall time.
//!
//! A client opens one unidirectional stream and writes `size` bytes; the
//! server reads them in order and counts. Datagrams cross two [`Link`]s
//! (client → server with the profile, server → client clean or with its
//! own profile); every timer and every delivery happens at its simulated
//! time.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig,
    Event, ServerConfig, StreamEvent, StreamId,
};

use haul_congestion::quinn::transport_config;
use haul_congestion::RateConfig;
use haul_transport::{tls, ServerIdentity};

use crate::link::{Link, Nanos};
use crate::stats::LinkStats;
use crate::Profile;

const CLIENT: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 4433);
const SERVER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 7878);
const ALPN: &[u8] = b"haul";

/// One side: its endpoint and connection.
struct Side {
    endpoint: Endpoint,
    conn: Option<(ConnectionHandle, Connection)>,
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct QuicRun {
    /// Payload bytes the server read, as they arrived (out of order, as
    /// haul's transport reads its chunk streams: quinn keeps at most 1,024
    /// gaps a stream, and an ordered reader of one long lossy stream passed
    /// that and had the connection closed, `too many gaps in stream buffer`).
    pub received: u64,
    /// Simulated time from the first packet until the last byte was read
    /// (`None`: not all of it arrived within the limit).
    pub took: Option<Duration>,
    /// Payload bytes read that were not what the client wrote.
    pub corrupt: u64,
    /// The forward link's counters (what was sent, damaged, queued out).
    pub up: LinkStats,
    /// What the client's QUIC connection counted on its path, at the end.
    pub path: SenderPath,
}

/// quinn's own counters for the sender's path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderPath {
    /// Packets sent, resends included.
    pub sent: u64,
    /// Packets declared lost.
    pub lost: u64,
    /// The datagram size it ended with (MTU discovery's result).
    pub mtu: u16,
    /// Packets declared lost and acknowledged afterwards: late, not lost
    /// (counted by the workspace's patched quinn-proto).
    pub spurious: u64,
    /// Packets the receiver discarded as duplicates of ones it had.
    pub duplicates: u64,
}

impl QuicRun {
    /// Packets the forward link dropped (loss, and a full queue).
    pub fn dropped(&self) -> u64 {
        self.up.dropped + self.up.queue_drops
    }
}

/// A client pushing bytes to a server over simulated links.
pub struct QuicSim {
    epoch: Instant,
    now: Nanos,
    client: Side,
    server: Side,
    up: Link,
    down: Link,
    stream: Option<StreamId>,
    size: u64,
    written: u64,
    received: u64,
    corrupt: u64,
    pattern: u8,
    buf: Vec<u8>,
}

/// Setting up the simulation failed (crypto configuration).
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the QUIC simulation: {0}")]
pub struct SetupError(String);

fn setup<E: std::fmt::Display>(e: E) -> SetupError {
    SetupError(e.to_string())
}

impl QuicSim {
    /// `size` bytes from client to server; `up` impairs client → server,
    /// `down` server → client; `rate` configures the client's controller
    /// (`None`: quinn's default, CUBIC, for comparison).
    pub fn new(
        size: u64,
        up: &Profile,
        down: &Profile,
        rate: Option<RateConfig>,
        seed: u64,
    ) -> Result<Self, SetupError> {
        let identity = ServerIdentity::generate().map_err(setup)?;
        let mut server_tls = (*tls::server_config(&identity).map_err(setup)?).clone();
        server_tls.alpn_protocols = vec![ALPN.to_vec()];
        let server_crypto = QuicServerConfig::try_from(server_tls).map_err(setup)?;
        let mut server_config = ServerConfig::with_crypto(Arc::new(server_crypto));
        let idle = Duration::from_secs(60);
        server_config.transport_config(Arc::new(transport_config(
            RateConfig::default(),
            idle,
            None,
        )));
        let verifier = tls::PinVerifier::new(Some(identity.fingerprint()));
        let mut client_tls = (*tls::client_config(verifier).map_err(setup)?).clone();
        client_tls.alpn_protocols = vec![ALPN.to_vec()];
        let client_crypto = QuicClientConfig::try_from(client_tls).map_err(setup)?;
        let mut client_config = ClientConfig::new(Arc::new(client_crypto));
        let mut transport = transport_config(rate.unwrap_or_default(), idle, None);
        if rate.is_none() {
            transport.congestion_controller_factory(Arc::new(
                quinn_proto::congestion::CubicConfig::default(),
            ));
        }
        client_config.transport_config(Arc::new(transport));
        let endpoint_config = Arc::new(EndpointConfig::default());
        let mut seed_bytes = [0u8; 32];
        seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
        let mut client = Endpoint::new(endpoint_config.clone(), None, true, Some(seed_bytes));
        seed_bytes[8] = 1;
        let server = Endpoint::new(
            endpoint_config,
            Some(Arc::new(server_config)),
            true,
            Some(seed_bytes),
        );
        let epoch = Instant::now();
        let conn = client
            .connect(epoch, client_config, SERVER, "haul")
            .map_err(setup)?;
        Ok(Self {
            epoch,
            now: 0,
            client: Side {
                endpoint: client,
                conn: Some(conn),
            },
            server: Side {
                endpoint: server,
                conn: None,
            },
            up: Link::new(up.clone(), seed),
            down: Link::new(down.clone(), seed ^ 0x5eed),
            stream: None,
            size,
            written: 0,
            received: 0,
            corrupt: 0,
            pattern: (seed % 251) as u8,
            buf: Vec::new(),
        })
    }

    fn at(&self) -> Instant {
        self.epoch + Duration::from_nanos(self.now)
    }

    /// Runs until every byte was read or `limit` of simulated time passed.
    pub fn run(&mut self, limit: Duration) -> QuicRun {
        let end = limit.as_nanos() as Nanos;
        let mut done_at = None;
        while self.now <= end {
            self.step();
            if self.received >= self.size {
                done_at = Some(Duration::from_nanos(self.now));
                break;
            }
            let Some(next) = self.next_event() else {
                break;
            };
            self.now = next.max(self.now + 1);
        }
        let duplicates = self
            .server
            .conn
            .as_mut()
            .map_or(0, |(_, c)| c.stats().path.duplicate_packets);
        QuicRun {
            received: self.received,
            took: done_at,
            corrupt: self.corrupt,
            up: self.up.stats().clone(),
            path: self
                .client
                .conn
                .as_mut()
                .map_or(SenderPath::default(), |(_, c)| {
                    let p = c.stats().path;
                    SenderPath {
                        sent: p.sent_packets,
                        lost: p.lost_packets,
                        mtu: p.current_mtu,
                        spurious: p.spurious_lost_packets,
                        duplicates,
                    }
                }),
        }
    }

    fn next_event(&mut self) -> Option<Nanos> {
        let epoch = self.epoch;
        let timer = |s: &mut Side| {
            s.conn
                .as_mut()
                .and_then(|(_, c)| c.poll_timeout())
                .map(|t| t.saturating_duration_since(epoch).as_nanos() as Nanos)
        };
        [
            self.up.next_due(),
            self.down.next_due(),
            timer(&mut self.client),
            timer(&mut self.server),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn step(&mut self) {
        let now = self.at();
        for side in [&mut self.client, &mut self.server] {
            if let Some((_, c)) = side.conn.as_mut() {
                if c.poll_timeout().is_some_and(|t| t <= now) {
                    c.handle_timeout(now);
                }
            }
        }
        self.deliver(true);
        self.deliver(false);
        self.client_app();
        self.server_app();
        self.flush(true);
        self.flush(false);
    }

    /// Datagrams due on the link towards the server (`to_server`) or the client.
    fn deliver(&mut self, to_server: bool) {
        let now = self.at();
        loop {
            let (link, side, from) = if to_server {
                (&mut self.up, &mut self.server, CLIENT)
            } else {
                (&mut self.down, &mut self.client, SERVER)
            };
            let Some((_, pkt)) = link.poll(self.now) else {
                break;
            };
            let data = BytesMut::from(&pkt[..]);
            match side
                .endpoint
                .handle(now, from, None, None, data, &mut self.buf)
            {
                Some(DatagramEvent::ConnectionEvent(ch, ev)) => {
                    if let Some((h, c)) = side.conn.as_mut() {
                        if *h == ch {
                            c.handle_event(ev);
                        }
                    }
                }
                Some(DatagramEvent::NewConnection(incoming)) if side.conn.is_none() => {
                    if let Ok(conn) = side.endpoint.accept(incoming, now, &mut self.buf, None) {
                        side.conn = Some(conn);
                    }
                }
                Some(DatagramEvent::NewConnection(incoming)) => side.endpoint.ignore(incoming),
                Some(DatagramEvent::Response(t)) => {
                    let pkt = self.buf[..t.size].to_vec();
                    let back = if to_server {
                        &mut self.down
                    } else {
                        &mut self.up
                    };
                    back.push(self.now, pkt);
                }
                None => {}
            }
        }
    }

    /// Sends what a side's connection has to send, and its endpoint events.
    fn flush(&mut self, client: bool) {
        let now = self.at();
        let (side, link) = if client {
            (&mut self.client, &mut self.up)
        } else {
            (&mut self.server, &mut self.down)
        };
        let Some((ch, conn)) = side.conn.as_mut() else {
            return;
        };
        while let Some(ev) = conn.poll_endpoint_events() {
            if let Some(ce) = side.endpoint.handle_event(*ch, ev) {
                conn.handle_event(ce);
            }
        }
        self.buf.clear();
        while let Some(t) = conn.poll_transmit(now, 1, &mut self.buf) {
            link.push(self.now, self.buf[..t.size].to_vec());
            self.buf.clear();
        }
    }

    fn client_app(&mut self) {
        let Some((_, conn)) = self.client.conn.as_mut() else {
            return;
        };
        while conn.poll().is_some() {}
        if self.stream.is_none() && !conn.is_handshaking() {
            self.stream = conn.streams().open(Dir::Uni);
        }
        let Some(id) = self.stream else {
            return;
        };
        let chunk = vec![self.pattern; 64 << 10];
        let mut send = conn.send_stream(id);
        while self.written < self.size {
            let n = (self.size - self.written).min(chunk.len() as u64) as usize;
            match send.write(&chunk[..n]) {
                Ok(0) | Err(_) => break,
                Ok(w) => self.written += w as u64,
            }
        }
        if self.written >= self.size {
            let _ = send.finish();
        }
    }

    fn server_app(&mut self) {
        let Some((_, conn)) = self.server.conn.as_mut() else {
            return;
        };
        while let Some(ev) = conn.poll() {
            if let Event::Stream(StreamEvent::Opened { dir: Dir::Uni }) = ev {
                while conn.streams().accept(Dir::Uni).is_some() {}
            }
        }
        let Some(id) = self.stream else {
            return;
        };
        let mut recv = conn.recv_stream(id);
        let Ok(mut chunks) = recv.read(false) else {
            return;
        };
        while let Ok(Some(chunk)) = chunks.next(usize::MAX) {
            // Every byte is the client's pattern: nothing damaged got through.
            let bad = chunk.bytes.iter().filter(|&&b| b != self.pattern).count();
            self.corrupt += bad as u64;
            self.received += chunk.bytes.len() as u64;
        }
        let _ = chunks.finalize();
    }
}
