//! Connecting and accepting: TCP with tuned sockets, then TLS unless plaintext.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio::net::{TcpListener, TcpStream};
pub use tokio_rustls::TlsAcceptor;
use tokio_rustls::TlsConnector;

use crate::conn::{FrameReader, FrameWriter, Sink, Timeouts};
use crate::identity::ServerIdentity;
use crate::known_hosts::{KnownHosts, TrustDecision};
use crate::message::Connection;
use crate::pace::RateLimit;
use crate::tls::{client_config, server_config, PinVerifier};
use crate::TransportError;

/// How a client secures its connection.
#[derive(Debug, Clone)]
pub enum Security {
    /// No TLS (trusted networks; both sides must agree).
    Plaintext,
    /// TLS 1.3; the server key is pinned by `fingerprint` if given, else by
    /// `known_hosts` (trust on first use).
    Tls {
        /// Explicit pin (`--fingerprint`).
        fingerprint: Option<String>,
        /// The known-hosts file.
        known_hosts: KnownHosts,
    },
}

fn tune(stream: &TcpStream, buffer: Option<usize>) {
    let _ = stream.set_nodelay(true);
    if let Some(size) = buffer {
        let sock = socket2::SockRef::from(stream);
        let _ = sock.set_send_buffer_size(size);
        let _ = sock.set_recv_buffer_size(size);
    }
}

/// The key a TLS server presented.
#[derive(Debug)]
pub struct PeerKey {
    addr: String,
    /// Its fingerprint.
    pub fingerprint: String,
    /// Set on first use (no pin for the server): where to record it.
    first_use: Option<KnownHosts>,
}

impl PeerKey {
    /// Records a key met for the first time in the known-hosts file — to be
    /// called once the server has proved to speak haul, so that whatever
    /// else answers on a port is never pinned. Returns the file when this
    /// call recorded the key.
    pub fn trust(&self) -> Result<Option<&Path>, TransportError> {
        match &self.first_use {
            Some(kh) if kh.learn(&self.addr, &self.fingerprint)? => Ok(Some(kh.path())),
            _ => Ok(None),
        }
    }
}

/// What carries a client's connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Transport {
    /// TCP (plaintext or TLS).
    #[default]
    Tcp,
    /// QUIC over UDP, TLS inside ([`crate::quic`]): for lossy or long links.
    Quic,
    /// Both at first, then the one that moved more ([`crate::choice`]); a
    /// connection itself is always one of the other two.
    Auto,
}

impl Transport {
    /// As `--transport` spells it: `tcp`, `quic` or `auto`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Quic => "quic",
            Self::Auto => "auto",
        }
    }

    /// As a log line names it: `TCP`, `QUIC` or `auto`.
    pub fn shown(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Quic => "QUIC",
            Self::Auto => "auto",
        }
    }
}

/// How a connection's socket is set up.
#[derive(Debug, Clone)]
pub struct Tuning {
    /// Fixed socket buffers (default: the kernel's autotuning).
    pub socket_buffer: Option<usize>,
    /// Plaintext payloads from files with `sendfile(2)` (else from memory).
    pub zero_copy: bool,
    /// A byte rate shared by every connection of the transfer
    /// (`--max-rate`): reads and writes are paced to it.
    pub pace: Option<Arc<RateLimit>>,
    /// The transfer's path: the hint its data connections start at, and
    /// where its QUIC connections note what they saw.
    pub path: Option<Arc<crate::PathLearning>>,
    /// Where this one connection counts what it delivered (`--transport
    /// auto` compares them: [`crate::choice`]).
    pub meter: Option<Arc<crate::Meter>>,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            socket_buffer: None,
            zero_copy: true,
            pace: None,
            path: None,
            meter: None,
        }
    }
}

/// Connects to `addr` (host:port), returning the connection and, over
/// TLS, the server's key (not yet recorded if new: see [`PeerKey::trust`]).
pub async fn connect(
    addr: &str,
    security: &Security,
    timeouts: Timeouts,
    tuning: &Tuning,
) -> Result<(Connection, Option<PeerKey>), TransportError> {
    let stream = tcp_connect(addr, timeouts).await?;
    tune(&stream, tuning.socket_buffer);
    // Valid while the connection's writer holds the socket's write half.
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let pinning = match security {
        Security::Plaintext => {
            let (r, w) = stream.into_split();
            let mut writer = FrameWriter::new(Sink::Plain(w), timeouts.idle);
            writer.set_zero_copy(tuning.zero_copy);
            writer.set_pace(tuning.pace.clone());
            writer.set_tcp_meter(fd, tuning.meter.clone());
            let mut reader = FrameReader::new(Box::new(r), timeouts.idle);
            reader.set_pace(tuning.pace.clone());
            reader.set_meter(tuning.meter.clone());
            return Ok(((Box::new(reader), Box::new(writer)), None));
        }
        Security::Tls {
            fingerprint,
            known_hosts,
        } => Pinning::new(addr, fingerprint, known_hosts),
    };
    let (tls, key) = tls_handshake(read_buffered(stream), addr, pinning, timeouts).await?;
    let (r, w) = tokio::io::split(tls);
    let mut reader = FrameReader::new(Box::new(r), timeouts.idle);
    reader.set_pace(tuning.pace.clone());
    reader.set_meter(tuning.meter.clone());
    let mut writer = FrameWriter::new(Sink::Boxed(Box::new(w)), timeouts.idle);
    writer.set_pace(tuning.pace.clone());
    writer.set_tcp_meter(fd, tuning.meter.clone());
    Ok(((Box::new(reader), Box::new(writer)), Some(key)))
}

/// A byte stream both ways (a TCP connection, an in-memory pipe), for what
/// moves raw bytes rather than haul's frames.
pub trait ByteStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> ByteStream for T {}

/// A plain TCP connection to `addr` (`host:port`), within the connect
/// timeout, with no TLS and no framing: what a node that passes a client's
/// connection on (`Jump`) writes the client's bytes to.
pub async fn connect_bytes(
    addr: &str,
    timeouts: Timeouts,
) -> Result<Box<dyn ByteStream>, TransportError> {
    let stream = tcp_connect(addr, timeouts).await?;
    // Handshakes and heartbeats are small frames: no Nagle delay.
    tune(&stream, None);
    Ok(Box::new(stream))
}

/// The TCP connection to `addr` (`host:port`: resolved, then connected),
/// each within the connect timeout; what to check is said when it is not
/// answered.
async fn tcp_connect(addr: &str, timeouts: Timeouts) -> Result<TcpStream, TransportError> {
    let addrs = resolve(addr, timeouts).await?;
    match tokio::time::timeout(timeouts.connect, TcpStream::connect(&addrs[..])).await {
        Ok(r) => r.map_err(|source| TransportError::Connect {
            addr: addr.to_owned(),
            source,
        }),
        Err(_) => Err(TransportError::Unanswered {
            addr: addr.to_owned(),
            what: "the TCP connection",
            secs: timeouts.connect.as_secs(),
            hint: "is the host up, the address right, and the port open (no firewall dropping it)?",
        }),
    }
}

/// Connects to the node `addr` names over `stream`, a byte stream that
/// already reaches it (a connection another node passes on, `Jump`): TLS
/// with `security`'s pinning inside it, as [`connect`] over TCP, or frames
/// as they are in plaintext. Returns the server's key as [`connect`] does.
pub async fn connect_through<S>(
    stream: S,
    addr: &str,
    security: &Security,
    timeouts: Timeouts,
    tuning: &Tuning,
) -> Result<(Connection, Option<PeerKey>), TransportError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let pinning = match security {
        Security::Plaintext => {
            let (r, w) = tokio::io::split(stream);
            return Ok((paced(r, w, timeouts, tuning), None));
        }
        Security::Tls {
            fingerprint,
            known_hosts,
        } => Pinning::new(addr, fingerprint, known_hosts),
    };
    let (tls, key) = tls_handshake(stream, addr, pinning, timeouts).await?;
    let (r, w) = tokio::io::split(tls);
    Ok((paced(r, w, timeouts, tuning), Some(key)))
}

/// Frames over a stream's two halves at `tuning`'s pace (`--max-rate`).
fn paced(
    r: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    w: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
    timeouts: Timeouts,
    tuning: &Tuning,
) -> Connection {
    let mut reader = FrameReader::new(Box::new(r), timeouts.idle);
    reader.set_pace(tuning.pace.clone());
    let mut writer = FrameWriter::new(Sink::Boxed(Box::new(w)), timeouts.idle);
    writer.set_pace(tuning.pace.clone());
    (Box::new(reader), Box::new(writer))
}

/// The client's TLS handshake over `stream` with the node `addr` names,
/// its key checked as `pinning` says, within the handshake timeout.
async fn tls_handshake<S>(
    stream: S,
    addr: &str,
    pinning: Pinning,
    timeouts: Timeouts,
) -> Result<(tokio_rustls::client::TlsStream<S>, PeerKey), TransportError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let cfg = client_config(pinning.verifier.clone()).map_err(|e| TransportError::Tls {
        host: addr.to_owned(),
        source: std::io::Error::other(e),
    })?;
    let name = ServerName::try_from("haul").map_err(|e| TransportError::Tls {
        host: addr.to_owned(),
        source: std::io::Error::other(e),
    })?;
    let handshake = TlsConnector::from(cfg).connect(name, stream);
    let tls = match tokio::time::timeout(timeouts.handshake, handshake).await {
        Err(_) => {
            return Err(TransportError::Timeout {
                what: "the TLS handshake",
                secs: timeouts.handshake.as_secs(),
            })
        }
        Ok(Err(e)) => return Err(pinning.failed(e)),
        Ok(Ok(tls)) => tls,
    };
    Ok((tls, pinning.accepted()?))
}

/// The addresses `addr` (host:port) names, within the connect timeout.
pub(crate) async fn resolve(
    addr: &str,
    timeouts: Timeouts,
) -> Result<Vec<SocketAddr>, TransportError> {
    let resolve = tokio::time::timeout(timeouts.connect, tokio::net::lookup_host(addr));
    match resolve.await {
        Ok(Ok(found)) => Ok(found.collect()),
        Ok(Err(source)) => Err(TransportError::Resolve {
            addr: addr.to_owned(),
            source,
        }),
        Err(_) => Err(TransportError::Timeout {
            what: "the host name to resolve",
            secs: timeouts.connect.as_secs(),
        }),
    }
}

/// What a client expects of a server's key (an explicit pin, or its
/// known-hosts line), and how it decides once the handshake is done: the
/// same for TCP and QUIC.
pub(crate) struct Pinning {
    addr: String,
    /// Checks the key during the handshake.
    pub(crate) verifier: Arc<PinVerifier>,
    /// The key expected, and where it came from (empty: known_hosts).
    pinned: Option<(String, String)>,
    explicit: bool,
    known_hosts: KnownHosts,
}

impl Pinning {
    pub(crate) fn new(addr: &str, fingerprint: &Option<String>, known_hosts: &KnownHosts) -> Self {
        let pinned = fingerprint
            .clone()
            .map(|fp| (fp, "(from --fingerprint)".to_owned()))
            .or_else(|| known_hosts.lookup(addr).map(|fp| (fp, String::new())));
        Self {
            addr: addr.to_owned(),
            verifier: PinVerifier::new(pinned.as_ref().map(|(fp, _)| fp.clone())),
            pinned,
            explicit: fingerprint.is_some(),
            known_hosts: known_hosts.clone(),
        }
    }

    /// The handshake failed with `e`: a changed key says so.
    pub(crate) fn failed(&self, e: std::io::Error) -> TransportError {
        if let (Some(got), Some((expected, hint))) = (self.verifier.seen(), &self.pinned) {
            if got != *expected {
                return TransportError::KeyChanged {
                    host: self.addr.clone(),
                    got,
                    expected: expected.clone(),
                    hint: if hint.is_empty() {
                        String::new()
                    } else {
                        format!(" {hint}")
                    },
                    file: if hint.is_empty() {
                        self.known_hosts.path().display().to_string()
                    } else {
                        String::new()
                    },
                };
            }
        }
        TransportError::Tls {
            host: self.addr.clone(),
            source: e,
        }
    }

    /// The handshake succeeded: the key the server showed, checked against
    /// known_hosts (trust on first use, recorded later by [`PeerKey::trust`]).
    pub(crate) fn accepted(self) -> Result<PeerKey, TransportError> {
        let seen = self.verifier.seen().unwrap_or_default();
        let mut first_use = None;
        if !self.explicit {
            match self.known_hosts.decide(&self.addr, &seen) {
                TrustDecision::Changed { expected } => {
                    return Err(TransportError::KeyChanged {
                        host: self.addr,
                        got: seen,
                        expected,
                        hint: String::new(),
                        file: self.known_hosts.path().display().to_string(),
                    })
                }
                TrustDecision::Learned => first_use = Some(self.known_hosts.clone()),
                TrustDecision::Known => {}
            }
        }
        Ok(PeerKey {
            addr: self.addr,
            fingerprint: seen,
            first_use,
        })
    }
}

/// A listening socket with its TLS acceptor (none when plaintext).
pub struct Listener {
    tcp: TcpListener,
    tls: Option<TlsAcceptor>,
    socket_buffer: Option<usize>,
}

impl Listener {
    /// Binds `addr`; `identity` is `None` for plaintext.
    pub async fn bind(
        addr: SocketAddr,
        identity: Option<&ServerIdentity>,
        socket_buffer: Option<usize>,
    ) -> Result<Self, TransportError> {
        let tcp = TcpListener::bind(addr)
            .await
            .map_err(|source| TransportError::Listen {
                addr: addr.to_string(),
                source,
            })?;
        let tls = match identity {
            Some(id) => Some(TlsAcceptor::from(server_config(id).map_err(|e| {
                TransportError::Tls {
                    host: addr.to_string(),
                    source: std::io::Error::other(e),
                }
            })?)),
            None => None,
        };
        Ok(Self {
            tcp,
            tls,
            socket_buffer,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Waits for the next connection; its handshake runs in
    /// [`Accepted::establish`] (on the connection's own task).
    pub async fn accept(&self) -> std::io::Result<Accepted> {
        let (stream, peer) = self.tcp.accept().await?;
        tune(&stream, self.socket_buffer);
        Ok(Accepted {
            stream,
            peer,
            tls: self.tls.clone(),
        })
    }
}

/// A connection accepted, before its handshake.
pub struct Accepted {
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
}

impl Accepted {
    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Runs the server side of TLS (if any) and gives the connection.
    pub async fn establish(self, timeouts: Timeouts) -> Result<Connection, TransportError> {
        accept_stream(self.stream, self.tls, timeouts).await
    }
}

/// Bytes read from the socket at once under TLS.
const TLS_READ_BUFFER: usize = 256 << 10;

/// The socket TLS runs over, with a read buffer: rustls asks for at most
/// 4 KiB per read, which would cost a system call per 4 KiB of file data
/// (measured: a TLS push of 1 GiB spent a fifth of the receiver's time in
/// `recv`). Writes pass straight through.
fn read_buffered(stream: TcpStream) -> tokio::io::BufReader<TcpStream> {
    tokio::io::BufReader::with_capacity(TLS_READ_BUFFER, stream)
}

/// Runs the server side of TLS (if any) on an accepted stream.
async fn accept_stream(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    timeouts: Timeouts,
) -> Result<Connection, TransportError> {
    let Some(acceptor) = tls else {
        let (r, w) = stream.into_split();
        return Ok((
            Box::new(FrameReader::new(Box::new(r), timeouts.idle)),
            Box::new(FrameWriter::new(Sink::Plain(w), timeouts.idle)),
        ));
    };
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let accept = acceptor.accept(read_buffered(stream));
    let tls = match tokio::time::timeout(timeouts.handshake, accept).await {
        Err(_) => {
            return Err(TransportError::Timeout {
                what: "the TLS handshake",
                secs: timeouts.handshake.as_secs(),
            })
        }
        Ok(r) => r.map_err(|source| TransportError::Tls { host: peer, source })?,
    };
    let (r, w) = tokio::io::split(tls);
    Ok((
        Box::new(FrameReader::new(Box::new(r), timeouts.idle)),
        Box::new(FrameWriter::new(Sink::Boxed(Box::new(w)), timeouts.idle)),
    ))
}

/// Shares a listener between tasks.
pub type SharedListener = Arc<Listener>;
