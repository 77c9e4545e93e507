//! QUIC: haul's messages over QUIC (quinn 0.11), for links that lose,
//! delay or damage packets.
//!
//! - The same node identity, fingerprint, `known_hosts` pinning and token
//!   as TCP: TLS 1.3 runs inside QUIC with the node's key
//!   ([`crate::tls`]), ALPN `haul`. There is no plaintext form.
//! - Rate control is `haul-congestion`'s loss-tolerant controller, with
//!   stream and connection windows for 1 Gbit/s × 2 s
//!   ([`haul_congestion::quinn::transport_config`]).
//! - A node listens on UDP at the port number of its TCP listener.
//! - A haul connection is one QUIC connection whose first bidirectional
//!   stream carries the framed messages, as a TCP connection's bytes do,
//!   and whose chunks larger than [`INLINE_CHUNK`] travel on streams of
//!   their own ([`reader`] has the layout), so that a lost packet delays
//!   only its chunk; sessions take chunks in any order.
//! - Windows grow with the path ([`windows`]): a few round trips of data on
//!   a long fat link, little on a LAN.
//! - UDP socket buffers are asked large ([`UDP_BUFFER`]); what the kernel
//!   granted is logged.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use haul_congestion::quinn::HintSlot;
use haul_congestion::RateConfig;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

mod lost;
mod reader;
mod windows;
mod writer;

pub use windows::{ReceiveWindow, INITIAL_RECEIVE_WINDOW, MIN_SEND_WINDOW};

use crate::conn::{FrameWriter, Sink, Timeouts};
use crate::identity::ServerIdentity;
use crate::message::Connection;
use crate::pace::RateLimit;
use crate::path::PathLearning;
use crate::socket::{resolve, PeerKey, Pinning, Security, Tuning};
use crate::tls::{client_config, server_config};
use crate::TransportError;

/// The ALPN protocol name haul speaks inside QUIC.
pub const ALPN: &[u8] = b"haul";

/// UDP socket buffers asked for (the kernel may grant less; as root, haul
/// asks past `net.core.rmem_max`).
pub const UDP_BUFFER: usize = 32 << 20;

/// Chunks up to this size ride on the control stream with their header
/// (as on TCP, many small files' chunks in one write); larger ones get a
/// stream of their own.
pub const INLINE_CHUNK: usize = 64 << 10;

/// How long a closing side waits for the peer to acknowledge what it sent.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

fn tls_err(host: &str, e: impl std::fmt::Display) -> TransportError {
    TransportError::Tls {
        host: host.to_owned(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// A UDP socket bound to `addr` with large buffers; logs what was granted.
fn udp_socket(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let domain = socket2::Domain::for_address(addr);
    let sock = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    for (name, set, get) in [
        (
            "receive",
            socket2::Socket::set_recv_buffer_size as fn(&socket2::Socket, usize) -> _,
            socket2::Socket::recv_buffer_size as fn(&socket2::Socket) -> _,
        ),
        (
            "send",
            socket2::Socket::set_send_buffer_size,
            socket2::Socket::send_buffer_size,
        ),
    ] {
        let _ = set(&sock, UDP_BUFFER);
        let mut granted = get(&sock).unwrap_or(0);
        if granted < UDP_BUFFER {
            force_buffer(&sock, name == "receive");
            granted = get(&sock).unwrap_or(granted);
        }
        tracing::info!(
            "UDP {name} buffer on {addr}: asked {} KiB, granted {} KiB",
            UDP_BUFFER >> 10,
            granted >> 10
        );
    }
    sock.bind(&addr.into())?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}

/// As root, asks past the kernel's limit (`SO_RCVBUFFORCE`/`SO_SNDBUFFORCE`).
fn force_buffer(sock: &socket2::Socket, receive: bool) {
    use rustix::net::sockopt;
    let _ = if receive {
        sockopt::set_socket_recv_buffer_size_force(sock, UDP_BUFFER)
    } else {
        sockopt::set_socket_send_buffer_size_force(sock, UDP_BUFFER)
    };
}

/// The controller's cap for a payload cap of `max_rate` bytes/s: an eighth
/// above it. The payload pacer (`RateLimit`) holds the cap itself; the
/// controller counts wire bytes (QUIC headers and AEAD tags, 3-4 %, and
/// resends), and at exactly the cap its drain phase and a window of rate x
/// RTT left a push 10 % under a 50 Mbit/s `--bwlimit` in the lab.
fn controller_cap(max_rate: u64) -> u64 {
    max_rate.saturating_add(max_rate / 8)
}

/// A connection's transport settings; `slot` takes a hint for its
/// controller ([`crate::MessageWriter::start_at`]).
fn transport(
    idle: Duration,
    max_rate: Option<u64>,
    slot: Arc<HintSlot>,
) -> Arc<quinn::TransportConfig> {
    let rate = RateConfig {
        max_rate: max_rate.map(controller_cap),
        ..RateConfig::default()
    };
    let mut t = haul_congestion::quinn::transport_config(rate, idle, Some(slot));
    // Windows start small and grow with the path (`windows`); streams go
    // out in the order they were written (a chunk is sent whole before the
    // next, so chunks complete one after another, not all at the end).
    t.receive_window(quinn::VarInt::from_u32(INITIAL_RECEIVE_WINDOW as u32))
        .send_window(MIN_SEND_WINDOW)
        .send_fairness(false)
        .max_concurrent_uni_streams(quinn::VarInt::from_u32(MAX_CHUNK_STREAMS));
    Arc::new(t)
}

/// A node's endpoint settings: its stateless-reset key derived from the
/// node's persistent identity. A node killed and started again on the same
/// key answers a packet of a connection it no longer knows with a reset
/// the client can check (RFC 9000 §10.3), so the client's old connection
/// ends within a round trip and its retry resumes, instead of waiting out
/// its idle timeout (quinn's default key is random at every start, and its
/// resets fail the client's check).
///
/// The key is also the machine's (`/etc/machine-id`, the host name) and
/// the listening address's: nodes that share an identity file (two on one
/// host, or copies on several) must not mint each other's resets (RFC 9000
/// §21.11; copies cloned with the same machine ID and host name behind one
/// address would).
fn node_endpoint_config(identity: &ServerIdentity, addr: SocketAddr) -> quinn::EndpointConfig {
    let read = |path| std::fs::read_to_string(path).unwrap_or_default();
    let (machine, host) = (read("/etc/machine-id"), read("/proc/sys/kernel/hostname"));
    let purpose = format!(
        "quic stateless reset {} {} {addr}",
        machine.trim(),
        host.trim()
    );
    let secret = identity.derive_secret(&purpose);
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret);
    let mut config = quinn::EndpointConfig::new(Arc::new(key));
    // quinn's default connection IDs carry a hash under a key drawn at each
    // start, and a packet whose ID fails that check gets no reset: random
    // IDs (8 bytes, none ever guessed) let the restarted node answer its
    // predecessor's. Not the hashed IDs under a derived key: a stable key
    // for 2^24 IDs could be recovered from handshakes and every ID's reset
    // token collected, valid for good (RFC 9000 §10.3.2).
    config.cid_generator(|| Box::new(quinn_proto::RandomConnectionIdGenerator::default()));
    config
}

/// Chunk streams a peer may have open at once (1 Gbit/s × 2 s of 256 KiB
/// chunks; the receive window bounds the bytes).
const MAX_CHUNK_STREAMS: u32 = 1024;

/// A node's QUIC listener.
pub struct QuicListener {
    endpoint: quinn::Endpoint,
    /// What each connection is accepted with (its transport settings are
    /// the connection's own: a hint slot each).
    config: quinn::ServerConfig,
    idle: Duration,
}

impl QuicListener {
    /// Listens on UDP `addr` with the node's `identity`; `idle` is the
    /// longest silence of a connection.
    pub fn bind(
        addr: SocketAddr,
        identity: &ServerIdentity,
        idle: Duration,
    ) -> Result<Self, TransportError> {
        let host = addr.to_string();
        let mut tls = (*server_config(identity).map_err(|e| tls_err(&host, e))?).clone();
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let crypto = QuicServerConfig::try_from(tls).map_err(|e| tls_err(&host, e))?;
        let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        config.transport_config(transport(idle, None, Arc::default()));
        let listen_err = |source| TransportError::Listen {
            addr: host.clone(),
            source,
        };
        let socket = udp_socket(addr).map_err(listen_err)?;
        let endpoint = quinn::Endpoint::new(
            node_endpoint_config(identity, addr),
            Some(config.clone()),
            socket,
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(listen_err)?;
        Ok(Self {
            endpoint,
            config,
            idle,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    /// Waits for the next connection attempt (`None`: the endpoint closed).
    pub async fn accept(&self) -> Option<QuicAccepted> {
        let incoming = self.endpoint.accept().await?;
        Some(QuicAccepted {
            incoming,
            config: self.config.clone(),
            idle: self.idle,
        })
    }

    /// Stops accepting; connections in flight go on.
    pub fn close(&self) {
        self.endpoint.set_server_config(None);
    }
}

/// A QUIC connection attempt, before its handshake.
pub struct QuicAccepted {
    incoming: quinn::Incoming,
    config: quinn::ServerConfig,
    idle: Duration,
}

impl QuicAccepted {
    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.incoming.remote_address()
    }

    /// Runs the handshake and takes the client's message stream.
    pub async fn establish(self, timeouts: Timeouts) -> Result<Connection, TransportError> {
        let peer = self.peer().to_string();
        // The connection's idle limit is the listener's, on every reader.
        let timeouts = Timeouts {
            idle: self.idle,
            ..timeouts
        };
        let slot = Arc::new(HintSlot::default());
        let mut config = self.config;
        config.transport_config(transport(self.idle, None, slot.clone()));
        let setup = async {
            let connecting = self
                .incoming
                .accept_with(Arc::new(config))
                .map_err(|e| tls_err(&peer, e))?;
            let conn = connecting.await.map_err(|e| tls_err(&peer, e))?;
            let (send, recv) = conn.accept_bi().await.map_err(|e| tls_err(&peer, e))?;
            let ends = Ends {
                endpoint: None,
                pace: None,
                slot,
                learning: None,
                meter: None,
            };
            Ok::<_, TransportError>(halves(conn, send, recv, timeouts, ends))
        };
        match tokio::time::timeout(timeouts.handshake, setup).await {
            Ok(r) => r,
            Err(_) => Err(TransportError::Timeout {
                what: "the QUIC handshake",
                secs: timeouts.handshake.as_secs(),
            }),
        }
    }
}

/// Connects to `addr` (host:port) over QUIC, pinned as [`crate::connect`]
/// pins a TLS server (`security` must be TLS: QUIC has no plaintext form).
/// `tuning.pace` caps the rate (the controller's too).
pub async fn connect_quic(
    addr: &str,
    security: &Security,
    timeouts: Timeouts,
    tuning: &Tuning,
) -> Result<(Connection, PeerKey), TransportError> {
    let pace = tuning.pace.clone();
    let max_rate = pace.as_ref().map(|p| p.bytes_per_sec());
    let slot = Arc::new(HintSlot::default());
    let config = transport(timeouts.idle, max_rate, slot.clone());
    let (conn, endpoint, key) = quic_connection(addr, security, timeouts, config).await?;
    let (send, recv) = conn.open_bi().await.map_err(|e| tls_err(addr, e))?;
    let ends = Ends {
        endpoint: Some(endpoint),
        pace,
        slot,
        learning: tuning.path.clone(),
        meter: tuning.meter.clone(),
    };
    Ok((halves(conn, send, recv, timeouts, ends), key))
}

/// The QUIC connection of [`connect_quic`], before its streams.
async fn quic_connection(
    addr: &str,
    security: &Security,
    timeouts: Timeouts,
    transport: Arc<quinn::TransportConfig>,
) -> Result<(quinn::Connection, quinn::Endpoint, PeerKey), TransportError> {
    let Security::Tls {
        fingerprint,
        known_hosts,
    } = security
    else {
        return Err(TransportError::NoPlaintextQuic);
    };
    let remote =
        *resolve(addr, timeouts)
            .await?
            .first()
            .ok_or_else(|| TransportError::Resolve {
                addr: addr.to_owned(),
                source: std::io::Error::other("no address"),
            })?;
    let pinning = Pinning::new(addr, fingerprint, known_hosts);
    let mut tls = (*client_config(pinning.verifier.clone()).map_err(|e| tls_err(addr, e))?).clone();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = QuicClientConfig::try_from(tls).map_err(|e| tls_err(addr, e))?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(transport);
    let local: SocketAddr = if remote.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let connect_err = |source| TransportError::Connect {
        addr: addr.to_owned(),
        source,
    };
    let socket = udp_socket(local).map_err(connect_err)?;
    let endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        None,
        socket,
        Arc::new(quinn::TokioRuntime),
    )
    .map_err(connect_err)?;
    let connecting = endpoint
        .connect_with(config, remote, "haul")
        .map_err(|e| tls_err(addr, e))?;
    let unanswered = || {
        TransportError::Unanswered {
        addr: addr.to_owned(),
        what: "the QUIC handshake",
        secs: timeouts.connect.as_secs(),
        hint: "is the node running, with QUIC (not --no-quic or --plaintext)? is UDP to its port blocked on the way? try --transport tcp",
    }
    };
    // The handshake races a probe that hears a closed port at once (ICMP
    // port unreachable), as TCP hears a refused connection.
    let handshake = tokio::time::timeout(timeouts.connect, connecting);
    let conn = tokio::select! {
        done = handshake => match done {
            // quinn's own idle timeout can end an unanswered handshake first
            // (it is the same --timeout, once the probe timeouts are short).
            Err(_) | Ok(Err(quinn::ConnectionError::TimedOut)) => return Err(unanswered()),
            Ok(Err(e)) => return Err(pinning.failed(std::io::Error::other(e.to_string()))),
            Ok(Ok(c)) => c,
        },
        refused = port_closed(remote) => return Err(TransportError::Connect {
            addr: addr.to_owned(),
            source: refused,
        }),
    };
    let key = pinning.accepted()?;
    Ok((conn, endpoint, key))
}

/// Waits until `remote`'s UDP port is heard to be closed: a connected UDP
/// socket sends a one-byte datagram (too short to be QUIC: a node drops it)
/// and the kernel reports the ICMP port-unreachable answer as
/// `ECONNREFUSED`. Never returns otherwise (nothing answers, or a node
/// does: the handshake decides).
async fn port_closed(remote: SocketAddr) -> std::io::Error {
    let local: SocketAddr = if remote.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let probe = async {
        let socket = tokio::net::UdpSocket::bind(local).await.ok()?;
        socket.connect(remote).await.ok()?;
        let mut buf = [0u8; 64];
        // ICMP answers may be rate-limited or lost: asked three times.
        for wait in [300, 700, 2000] {
            let refused = |e: &std::io::Error| e.kind() == std::io::ErrorKind::ConnectionRefused;
            if let Err(e) = socket.send(&[0]).await {
                if refused(&e) {
                    return Some(());
                }
            }
            let heard = tokio::time::timeout(Duration::from_millis(wait), socket.recv(&mut buf));
            if let Ok(Err(e)) = heard.await {
                if refused(&e) {
                    return Some(());
                }
            }
        }
        None
    };
    if probe.await.is_none() {
        std::future::pending::<()>().await;
    }
    std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "its UDP port is closed (ICMP port unreachable): is the node running, with QUIC (not --no-quic or --plaintext)? or try --transport tcp",
    )
}

/// What a connection's halves hold beside the connection.
struct Ends {
    /// The client's own endpoint, closed with the connection.
    endpoint: Option<quinn::Endpoint>,
    pace: Option<Arc<RateLimit>>,
    slot: Arc<HintSlot>,
    /// Where the client notes what the connection saw of the path.
    learning: Option<Arc<PathLearning>>,
    /// Where the connection counts what it delivered (`--transport auto`).
    meter: Option<Arc<crate::Meter>>,
}

fn halves(
    conn: quinn::Connection,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    timeouts: Timeouts,
    ends: Ends,
) -> Connection {
    let Ends {
        endpoint,
        pace,
        slot,
        learning,
        meter,
    } = ends;
    // Control messages overtake chunk data queued before them.
    let _ = send.set_priority(1);
    let activity = crate::Activity::new();
    let read = reader::QuicReader::new(
        conn.clone(),
        recv,
        activity,
        timeouts.idle,
        (pace.clone(), meter.clone()),
    );
    let write = QuicWrite {
        send: Some(send),
        idle: timeouts.idle,
        conn: conn.clone(),
        endpoint,
        learning,
    };
    let mut control = FrameWriter::new(Sink::Boxed(Box::new(write)), timeouts.idle);
    control.set_pace(pace.clone());
    (
        Box::new(read),
        Box::new(writer::QuicWriter::new(
            control,
            conn,
            timeouts.idle,
            pace,
            (slot, meter),
        )),
    )
}

#[cfg(test)]
mod tests;

/// The control stream's receiving half.
struct QuicRead {
    recv: quinn::RecvStream,
    /// The connection's idle limit, for the error that says it ran out.
    idle: Duration,
}

impl AsyncRead for QuicRead {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let idle = self.idle;
        Pin::new(&mut self.recv)
            .poll_read(cx, buf)
            .map_err(|e| lost::into_io(e, idle))
    }
}

/// The message stream's sending half. Dropped, it finishes the stream and
/// closes the connection once the peer acknowledged everything (at most
/// [`CLOSE_WAIT`] later), so a last message is never cut off.
struct QuicWrite {
    send: Option<quinn::SendStream>,
    /// The connection's idle limit, for the error that says it ran out.
    idle: Duration,
    conn: quinn::Connection,
    endpoint: Option<quinn::Endpoint>,
    learning: Option<Arc<PathLearning>>,
}

impl AsyncWrite for QuicWrite {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let idle = self.idle;
        match self.send.as_mut() {
            Some(s) => Pin::new(s)
                .poll_write(cx, buf)
                .map_err(|e| lost::into_io(e.into(), idle)),
            None => Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let idle = self.idle;
        match self.send.as_mut() {
            Some(s) => Pin::new(s)
                .poll_flush(cx)
                .map_err(|e| lost::into_io(e, idle)),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let Self {
            send, conn, idle, ..
        } = &mut *self;
        match send.as_mut() {
            // A stream that cannot be finished says only that it is closed:
            // the connection says why.
            Some(s) => Pin::new(s)
                .poll_shutdown(cx)
                .map_err(|e| match conn.close_reason() {
                    Some(why) => std::io::Error::new(e.kind(), lost::connection(&why, *idle)),
                    None => lost::into_io(e, *idle),
                }),
            None => Poll::Ready(Ok(())),
        }
    }
}

/// What the connection's path did, at debug level (`HAUL_LOG=haul_transport=debug`,
/// on both ends): how a bad link was spent.
fn log_path_stats(conn: &quinn::Connection) {
    let p = conn.stats().path;
    tracing::debug!(
        peer = %conn.remote_address(),
        sent = p.sent_packets,
        lost = p.lost_packets,
        late = p.spurious_lost_packets,
        duplicates_discarded = p.duplicate_packets,
        rtt_ms = p.rtt.as_millis() as u64,
        mtu = p.current_mtu,
        "QUIC path: packets sent, declared lost (late: acknowledged after all), discarded as possible duplicates"
    );
}

impl Drop for QuicWrite {
    fn drop(&mut self) {
        let Some(mut send) = self.send.take() else {
            return;
        };
        if let Some(learning) = &self.learning {
            let p = self.conn.stats().path;
            let settled = haul_congestion::quinn::settled(self.conn.congestion_state())
                .filter(|s| s.settled)
                .map(|s| (s.rate, s.loss));
            learning.note(p.rtt, settled, p.sent_packets, p.spurious_lost_packets);
        }
        let _ = send.finish();
        let acked = send.stopped();
        let (conn, endpoint) = (self.conn.clone(), self.endpoint.take());
        let linger = async move {
            let _ = tokio::time::timeout(CLOSE_WAIT, acked).await;
            log_path_stats(&conn);
            conn.close(0u32.into(), b"done");
            if let Some(e) = endpoint {
                let _ = tokio::time::timeout(Duration::from_secs(1), e.wait_idle()).await;
            }
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(linger);
        }
    }
}
