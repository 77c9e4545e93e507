//! Reaching a node: a [`Dialer`] turns "open a session for this request"
//! into an authenticated, message-level connection. Everything that talks to
//! a node — pools, re-listing, listings, prune, check, ls, fan-out admission
//! and a relay's forwards — takes a dialer, never an address and options.
//!
//! A dialer is a way to connect ([`Dial`]: TCP with TLS or plaintext, QUIC,
//! or a [`Server`] in this process over the in-memory transport) plus the
//! handshake every way shares: `Hello` with the token, then `Welcome` or
//! `Refused`, and trust on first use of the node's key once it answered in
//! haul. A new way to reach a node (SSH) is one more [`Dial`].
//!
//! Architecture Invariant: this module is a leaf of the client side; it
//! knows no pool, job or listing (tested through `tests/in_process.rs`).

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use haul_proto::{DecodeError, Message, Request, PROTOCOL_VERSION};
use haul_transport::{
    connect, connect_quic, faulty_memory_pair, memory_pair, Connection, FaultPlan, PeerKey,
    Security, Timeouts, Transport, TransportError, Tuning,
};

use crate::ssh::direct::SshDial;
use crate::ssh::SshLocation;
use crate::welcome::{pin_on_answer, Answer, AwaitingWelcome};
use crate::{ClientOptions, NodeError, NodeUrl, Server};

/// A path on a node and the way to reach it: where a node command goes.
#[derive(Debug, Clone)]
pub struct NodePath {
    /// How the node is reached.
    pub dialer: Dialer,
    /// Path under the node's root (may be empty; may end with `/`).
    pub path: String,
}

impl NodePath {
    /// The node `url` names, over the network as `opts` say.
    pub fn network(url: &NodeUrl, opts: &ClientOptions) -> Self {
        Self {
            dialer: Dialer::network(&url.addr, opts),
            path: url.path.clone(),
        }
    }

    /// The path `at` names on a host reached over ssh: a node started there
    /// for the transfer ([`crate::ssh`]), serving the directory the path is
    /// in, reached directly or over the ssh channel.
    pub fn ssh(at: &SshLocation, opts: &ClientOptions) -> Self {
        let (root, path) = at.root_and_path();
        let way = SshDial::new(at, root, opts);
        Self {
            dialer: Dialer::new(Arc::new(way), String::new(), opts.timeouts)
                .compressing(opts.packing())
                .learning(opts.tuning.path.clone()),
            path,
        }
    }

    /// `path` on the node `dialer` reaches.
    pub fn new(dialer: Dialer, path: impl Into<String>) -> Self {
        Self {
            dialer,
            path: path.into(),
        }
    }
}

/// A future a [`Dial`] returns.
pub type Dialing<'a> = Pin<Box<dyn Future<Output = Result<Reached, NodeError>> + Send + 'a>>;

/// A connection a [`Dial`] made, before the haul handshake.
pub struct Reached {
    /// The message-level connection.
    pub conn: Connection,
    /// The key the node presented (TLS, QUIC), to pin once it answered.
    pub key: Option<PeerKey>,
    /// How it is carried, for the log ("TLS 1.3", "plaintext").
    pub over: &'static str,
    /// The dialer reads the node's answer before a session speaks: over
    /// plaintext TCP (the answer may be TLS, from a node not run with
    /// `--plaintext`, and is told apart), and for the first connections of
    /// `--transport auto` (the other transport may take their place at
    /// once, and work a session handed back carries no report of what the
    /// node did with it).
    pub answer_first: bool,
    /// The token this way of reaching learned for the node (a node started
    /// over ssh offers its own), instead of the dialer's.
    pub token: Option<String>,
}

/// One way to connect to a node.
pub trait Dial: Send + Sync {
    /// Opens one connection (transport and TLS handshakes done).
    fn connect(&self) -> Dialing<'_>;
    /// The node as messages name it (`host:port`).
    fn name(&self) -> &str;
}

/// How a client reaches one node; cheap to clone.
#[derive(Clone)]
pub struct Dialer {
    way: Arc<dyn Dial>,
    token: String,
    timeouts: Timeouts,
    /// `-z`: the zstd level chunks this side sends are compressed at.
    compress: Option<i32>,
    /// The transfer's path: the rate its data connections start at.
    path: Option<Arc<haul_transport::PathLearning>>,
    /// A relay's: compressed frames received, sent again as they came.
    frames: Option<haul_transport::FrameCache>,
    /// Payload bytes `-z` (and `-S`) kept off the wire, both ways, on every
    /// connection this dialer and its clones made.
    kept_off_wire: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("node", &self.way.name())
            .finish_non_exhaustive()
    }
}

impl Dialer {
    /// A dialer over `way`, presenting `token`, with `timeouts` for the
    /// handshake and the session.
    pub fn new(way: Arc<dyn Dial>, token: String, timeouts: Timeouts) -> Self {
        Self {
            way,
            token,
            timeouts,
            compress: None,
            path: None,
            frames: None,
            kept_off_wire: Arc::default(),
        }
    }

    /// Payload bytes packing kept off the wire so far, both ways, on the
    /// connections this dialer and its clones made: a run's bytes on the
    /// wire are its payload bytes less these.
    pub fn kept_off_wire(&self) -> u64 {
        self.kept_off_wire
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The same, sending a chunk that came to this node compressed as the
    /// frame that came ([`haul_transport::frames`]; a relay's forwards),
    /// the others packed at its `-z` level or, without one, level 0.
    pub fn reusing(mut self, frames: haul_transport::FrameCache) -> Self {
        self.frames = Some(frames);
        self
    }

    /// The same, compressing the chunks it sends at zstd `level` (`-z`);
    /// a pull asks the node for it in its `Fetch`.
    pub fn compressing(mut self, level: Option<i32>) -> Self {
        self.compress = level;
        self
    }

    /// The node at `addr` (`host:port`) over the network, as `opts` say:
    /// TCP or QUIC, TLS with pinning or plaintext, socket tuning, token.
    pub fn network(addr: &str, opts: &ClientOptions) -> Self {
        let way = Network {
            addr: addr.to_owned(),
            security: opts.security.clone(),
            transport: opts.transport,
            timeouts: opts.timeouts,
            tuning: opts.tuning.clone(),
        };
        Self::new(way.into_dial(), opts.token.clone(), opts.timeouts)
            .compressing(opts.packing())
            .learning(opts.tuning.path.clone())
    }

    /// `server`, in this process, over the in-memory transport: local
    /// copies and tests. Each connection is served as a network one would be.
    pub fn in_process(server: Arc<Server>, token: &str, timeouts: Timeouts) -> Self {
        Self::with_faults(server, token, timeouts, FaultPlan::new([]))
    }

    /// [`Dialer::in_process`] whose connections break as `faults` plans.
    pub fn with_faults(
        server: Arc<Server>,
        token: &str,
        timeouts: Timeouts,
        faults: Arc<FaultPlan>,
    ) -> Self {
        let way = InProcess {
            server,
            timeouts,
            faults,
        };
        Self::new(Arc::new(way), token.to_owned(), timeouts)
    }

    /// The same node, reached through the way `wrap` makes of this one's
    /// (a layer over its connections: [`crate::forging`]).
    pub fn over(mut self, wrap: impl FnOnce(Arc<dyn Dial>) -> Arc<dyn Dial>) -> Self {
        self.way = wrap(self.way);
        self
    }

    /// The same, its data connections starting at the hint `path` holds
    /// (the network dialer takes it from the client's tuning).
    pub fn learning(mut self, path: Option<Arc<haul_transport::PathLearning>>) -> Self {
        self.path = path;
        self
    }

    /// The node as messages name it.
    pub fn name(&self) -> &str {
        self.way.name()
    }

    /// Opens a session for `request`.
    pub async fn open(&self, request: Request) -> Result<Connection, NodeError> {
        Ok(self.open_keyed(request).await?.0)
    }

    /// [`Dialer::open`], also returning the fingerprint of the key the node
    /// presented (`None` in plaintext and in process).
    pub async fn open_keyed(
        &self,
        request: Request,
    ) -> Result<(Connection, Option<String>), NodeError> {
        Ok(self.open_answered(request).await?.0)
    }

    /// [`Dialer::open_keyed`], also returning the node's [`Answer`] to the
    /// `Hello`: read already, or still to come to a session that speaks
    /// first (`welcome.rs`).
    pub(crate) async fn open_answered(
        &self,
        mut request: Request,
    ) -> Result<((Connection, Option<String>), Answer), NodeError> {
        let name = self.way.name();
        // Each data connection starts at the path's hint: a push's sender
        // is this side's controller, a pull's the node's.
        let flow = match request {
            Request::Push { .. } => Some(haul_transport::Flow::Push),
            Request::Fetch { .. } => Some(haul_transport::Flow::Pull),
            _ => None,
        };
        let hint = flow.and(self.path.as_ref()).and_then(|p| p.start());
        // The hint goes to the node in the request: a fetching node's
        // sender starts at it, a pushed-to node's receive window opens for it.
        if let (Request::Fetch { rate_hint, .. } | Request::Push { rate_hint, .. }, Some(h)) =
            (&mut request, hint)
        {
            *rate_hint = h.rate;
        }
        let push_hint = hint.filter(|_| flow == Some(haul_transport::Flow::Push));
        let pull_hint = hint.filter(|_| flow == Some(haul_transport::Flow::Pull));
        // A sender's chunks go compressed with -z; whatever comes back
        // compressed (a node's answer to `Fetch{compress}`) is unpacked.
        let packs = match request {
            Request::Push { .. } | Request::Relayed { .. } => {
                self.compress.or(self.frames.as_ref().map(|_| 0))
            }
            _ => None,
        };
        let Reached {
            conn: (mut r, mut w),
            key,
            over,
            answer_first,
            token,
        } = self.way.connect().await?;
        match &key {
            Some(k) => tracing::info!(
                "connected to {name} over {over}, server key {}",
                k.fingerprint
            ),
            None => tracing::info!("connected to {name} ({over})"),
        }
        // A session that speaks first (a push's offers, a pull's wants)
        // says it right after `Hello`: the node's answer is read in front
        // of the session's reader (`welcome.rs`). Plaintext TCP waits, so
        // a TLS node's answer is told apart.
        let speaks_first = matches!(request, Request::Push { .. } | Request::Fetch { .. });
        let pipelined = speaks_first && !answer_first;
        w.send(&Message::Hello {
            version: PROTOCOL_VERSION,
            token: token.unwrap_or_else(|| self.token.clone()),
            request,
        })
        .await?;
        r.set_idle(self.timeouts.handshake);
        let fingerprint = key.as_ref().map(|k| k.fingerprint.clone());
        let (mut r, answer) = if pipelined {
            let (r, answer) = AwaitingWelcome::new(r, key, name, self.timeouts.idle);
            (
                Box::new(r) as Box<dyn haul_transport::MessageReader>,
                answer,
            )
        } else {
            self.answered(&mut r, key).await?;
            (r, Answer::welcomed())
        };
        if let Some(h) = pull_hint {
            r.expect_rate(h.rate);
        }
        let kept_off = self.kept_off_wire.clone();
        let r: Box<dyn haul_transport::MessageReader> =
            Box::new(haul_transport::Unpacking::new(r).counting(kept_off.clone()));
        let mut w: Box<dyn haul_transport::MessageWriter> = match packs {
            Some(level) => {
                let packing = haul_transport::Packing::new(w, level)?.counting(kept_off);
                Box::new(match &self.frames {
                    Some(f) => packing.reusing(f.clone()),
                    None => packing,
                })
            }
            None => w,
        };
        if let Some(h) = push_hint {
            w.start_at(h);
        }
        Ok((((r, w), fingerprint), answer))
    }

    /// Reads the node's answer to `Hello` on `r`: `Ok` once it welcomed
    /// the request; the key it presented pinned if met for the first time
    /// once it answered in haul, whatever the answer.
    async fn answered(
        &self,
        r: &mut Box<dyn haul_transport::MessageReader>,
        key: Option<PeerKey>,
    ) -> Result<(), NodeError> {
        let name = self.way.name();
        let answer = match r.recv().await {
            Ok(answer) => answer,
            Err(TransportError::Decode(DecodeError::BadLength(len))) if looks_like_tls(len) => {
                return Err(NodeError::Usage(format!(
                    "the node at {name} answered in TLS: it does not run with --plaintext, so drop --plaintext here"
                )))
            }
            Err(e) => return Err(e.into()),
        };
        r.set_idle(self.timeouts.idle);
        if let (Some(k), Message::Welcome { .. } | Message::Refused { .. }) = (&key, &answer) {
            pin_on_answer(k, name)?;
        }
        match answer {
            Message::Welcome { .. } => Ok(()),
            Message::Refused { code, message } => Err(NodeError::Refused { code, message }),
            other => Err(NodeError::Protocol(format!(
                "expected Welcome, got {other:?}"
            ))),
        }
    }
}

/// Whether a frame length prefix is really the start of a TLS record
/// (content type 20–23, then major version 3): a TLS node's answer, most
/// likely an alert, to a plaintext `Hello`.
fn looks_like_tls(len: u32) -> bool {
    let [kind, major, ..] = len.to_be_bytes();
    (20..=23).contains(&kind) && major == 3
}

/// A node over the network.
#[derive(Clone)]
pub(crate) struct Network {
    pub(crate) addr: String,
    pub(crate) security: Security,
    pub(crate) transport: Transport,
    pub(crate) timeouts: Timeouts,
    pub(crate) tuning: Tuning,
}

impl Network {
    /// The way to connect: over its transport, or over whichever serves
    /// the node better (`--transport auto`, [`crate::auto_dial`]; plaintext
    /// has TCP only).
    pub(crate) fn into_dial(self) -> Arc<dyn Dial> {
        let plaintext = matches!(self.security, Security::Plaintext);
        match self.transport {
            Transport::Auto if plaintext => Arc::new(Network {
                transport: Transport::Tcp,
                ..self
            }),
            Transport::Auto => Arc::new(crate::auto_dial::AutoDial::new(self)),
            _ => Arc::new(self),
        }
    }
}

impl Dial for Network {
    fn connect(&self) -> Dialing<'_> {
        Box::pin(async move {
            let (conn, key, over) = match self.transport {
                Transport::Tcp | Transport::Auto => {
                    let (conn, key) =
                        connect(&self.addr, &self.security, self.timeouts, &self.tuning).await?;
                    let over = if key.is_some() {
                        "TLS 1.3"
                    } else {
                        "plaintext"
                    };
                    (conn, key, over)
                }
                Transport::Quic => {
                    let (conn, key) =
                        connect_quic(&self.addr, &self.security, self.timeouts, &self.tuning)
                            .await?;
                    (conn, Some(key), "QUIC (TLS 1.3)")
                }
            };
            Ok(Reached {
                answer_first: key.is_none(),
                conn,
                key,
                over,
                token: None,
            })
        })
    }

    fn name(&self) -> &str {
        &self.addr
    }
}

/// A [`Server`] of this process, over the in-memory transport.
struct InProcess {
    server: Arc<Server>,
    timeouts: Timeouts,
    faults: Arc<FaultPlan>,
}

/// The peer address an in-process connection is logged with.
const IN_PROCESS_PEER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

impl Dial for InProcess {
    fn connect(&self) -> Dialing<'_> {
        Box::pin(async move {
            let (client, node) = match self.faults.next() {
                Some(fault) => faulty_memory_pair(self.timeouts, fault),
                None => memory_pair(self.timeouts),
            };
            let server = self.server.clone();
            tokio::spawn(async move {
                if let Err(e) = server
                    .serve_connection(node, IN_PROCESS_PEER, Transport::Tcp)
                    .await
                {
                    tracing::warn!("in-process connection: {e}");
                }
            });
            Ok(Reached {
                conn: client,
                key: None,
                over: "in process",
                answer_first: false,
                token: None,
            })
        })
    }

    fn name(&self) -> &str {
        "in-process node"
    }
}

/// How this process reaches a node named by its address (`host:port`): a
/// fan-out's admissions and a relay's forwards dial through it. Over the
/// network ([`OverNetwork`]) in a real run; a test maps addresses to nodes
/// in its own process, so a whole fan-out — admissions, relays, re-routing
/// — runs over the in-memory transport.
pub trait Reach: Send + Sync + std::fmt::Debug {
    /// A dialer for the node at `addr`, as `opts` say (security, token).
    fn dialer(&self, addr: &str, opts: &ClientOptions) -> Dialer;

    /// Another way to the node at `addr` than its port, for when the client
    /// cannot reach that (a node started over ssh: its ssh channel). `None`:
    /// there is none.
    fn channel(&self, _addr: &str, _opts: &ClientOptions) -> Option<Channelled> {
        None
    }

    /// The node (`host:port`) through which the node at `addr` is reached
    /// ([`crate::jump`]): a fan-out plans it as that node's child. `None`:
    /// it is reached directly.
    fn via(&self, _addr: &str) -> Option<String> {
        None
    }
}

/// A node's other way ([`Reach::channel`]).
#[derive(Debug, Clone)]
pub struct Channelled {
    /// Reaches the node that way (a session of its own per connection).
    pub dialer: Dialer,
    /// How long a direct connection may take before that way is taken
    /// (zero: it is taken at once, `--ssh-tunnel`).
    pub wait: std::time::Duration,
}

/// Each node known by its address dialled with its own options (its token,
/// key, transport: a daemon's sites, a client's named nodes); any other as
/// `otherwise` reaches it.
#[derive(Debug)]
pub struct ByAddress {
    /// Options by `host:port`.
    pub options: std::collections::HashMap<String, ClientOptions>,
    /// How the others are reached.
    pub otherwise: Arc<dyn Reach>,
    /// Nodes reached through another (`host:port` → the node in between,
    /// itself reached as this says): a daemon's downstream sites.
    pub via: std::collections::HashMap<String, String>,
}

/// Most nodes in between on the way to one (a distribution tree's depth).
pub const MAX_JUMPS: usize = 8;

impl ByAddress {
    fn dialer_within(&self, addr: &str, opts: &ClientOptions, jumps: usize) -> Dialer {
        let Some(between) = self.via.get(addr).filter(|_| jumps < MAX_JUMPS) else {
            return self.direct(addr, opts);
        };
        let own = self.own(addr, opts);
        // The node in between is pinned to its own key, never to the one
        // the caller pinned for this node.
        let mut theirs = opts.clone();
        theirs.unpin();
        // Nor its token: the node in between has its own options, or none.
        theirs.token = String::new();
        theirs.transport = Transport::Tcp;
        let way = crate::jump::Jumped {
            via: self.dialer_within(between, &theirs, jumps + 1),
            to: addr.to_owned(),
            security: own.security.clone(),
            timeouts: own.timeouts,
            tuning: own.tuning.clone(),
        };
        Dialer::new(way.into_dial(), own.token.clone(), own.timeouts)
            .compressing(own.packing())
            .learning(own.tuning.path.clone())
    }

    /// The options the node at `addr` is dialled with: its own, keeping a
    /// key the caller pinned (a fan-out's, from the node's admission) when
    /// its own pin none; the caller's for a node this map does not know.
    fn own(&self, addr: &str, opts: &ClientOptions) -> ClientOptions {
        let Some(own) = self.options.get(addr) else {
            return opts.clone();
        };
        let mut own = own.clone();
        if let (
            haul_transport::Security::Tls {
                fingerprint: Some(pinned),
                ..
            },
            haul_transport::Security::Tls { fingerprint, .. },
        ) = (&opts.security, &mut own.security)
        {
            if fingerprint.is_none() {
                *fingerprint = Some(pinned.clone());
            }
        }
        // A node left to `auto` goes as the caller goes (a fan-out: TCP).
        if own.transport == Transport::Auto {
            own.transport = opts.transport;
        }
        own
    }

    fn direct(&self, addr: &str, opts: &ClientOptions) -> Dialer {
        if !self.options.contains_key(addr) {
            return self.otherwise.dialer(addr, opts);
        }
        Dialer::network(addr, &self.own(addr, opts))
    }
}

impl Reach for ByAddress {
    fn dialer(&self, addr: &str, opts: &ClientOptions) -> Dialer {
        self.dialer_within(addr, opts, 0)
    }

    fn channel(&self, addr: &str, opts: &ClientOptions) -> Option<Channelled> {
        let own = self.options.get(addr).unwrap_or(opts);
        self.otherwise.channel(addr, own)
    }

    fn via(&self, addr: &str) -> Option<String> {
        self.via.get(addr).cloned()
    }
}

/// Every address is dialled over the network ([`Dialer::network`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct OverNetwork;

impl Reach for OverNetwork {
    fn dialer(&self, addr: &str, opts: &ClientOptions) -> Dialer {
        Dialer::network(addr, opts)
    }
}
