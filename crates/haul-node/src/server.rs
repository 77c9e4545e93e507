//! `haul serve`: accepts pushes into its root and serves pulls from it.
//!
//! Each connection: (TLS) → `Hello` within the handshake timeout → version and
//! token checks → `Welcome` or `Refused` → the sender or receiver loop. A
//! connection that breaks the rules is closed; the others go on.

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use haul_engine::haul_root::ResolveError;
use haul_engine::source::hash_local;
use haul_engine::{Destination, LocalTree, Source};
use haul_proto::{
    EntryKind, ErrorCode, Message, RelayTarget, Request, Stripe, Ticket, PROTOCOL_VERSION,
};
use haul_session::peer_text::without_root;
use haul_transport::{
    Accepted, Connection, KnownHosts, Listener, MessageReader, MessageWriter, QuicAccepted,
    QuicListener, Security, Timeouts, Transport, TransportError,
};
use tokio::task::JoinSet;

use crate::buffers::ChunkBuffers;
use crate::chunk_work::ChunkWork;
use crate::counters::{refusal_cause, CountedSends, NodeCounters};
use crate::dial::{OverNetwork, Reach};
use crate::drive::receive::{run_receiver, ReceiverCtx};
use crate::drive::send::{run_sender, JobFeed, SenderCtx};
use crate::jobs::{SendJob, WorkQueue};
use crate::relay::{ForwardEnd, ForwardLog, Relays, SealBook, Transfer};
use crate::transfer_log::{token_id, TransferLog};
use crate::{ClientOptions, Concurrency, NodeError};

/// Most downstream nodes one relay forwards to.
pub const MAX_FORWARDS: usize = 64;

/// The highest rate a client's `Fetch{rate_hint}` starts this node's
/// sender at: 10 Gbit/s, in bytes per second.
pub const MAX_RATE_HINT: u64 = 1_250_000_000;

/// How a node serves.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The served root.
    pub root: PathBuf,
    /// Accepted tokens; empty means no token is needed (only with `open`).
    pub tokens: Vec<String>,
    /// Time limits.
    pub timeouts: Timeouts,
    /// Offers in flight per connection.
    pub window: usize,
    /// Resends of a failing range before its file fails.
    pub max_retries: u32,
    /// How long to let transfers finish after SIGINT/SIGTERM.
    pub grace: Duration,
    /// Bytes of chunk buffers across all connections ([`crate::buffers`]).
    pub chunk_memory: usize,
    /// The transfer log: a line per connection and per file.
    pub log: Arc<TransferLog>,
    /// Staging files no transfer has written for this long are removed,
    /// hourly while the node serves ([`Server::prune_partials`]); `None`:
    /// never.
    pub partial_ttl: Option<Duration>,
    /// Serve pulls, listings and checks only: pushes, fan-out admissions,
    /// relayed pushes and prunes are refused (`--read-only`).
    pub read_only: bool,
    /// `--keep-owners`: owners, groups and `trusted.*`/`security.*`
    /// attributes that clients send are applied (only when the node runs
    /// as root); otherwise they are ignored and the node says so once.
    pub keep_owners: bool,
    /// `--jump-to HOST:PORT`: the nodes this one passes a client's
    /// connection on to ([`Request::Jump`]: a site only this node reaches).
    pub jump_to: Vec<String>,
    /// `--watch`: journal what changes beneath the root (inotify), so a
    /// listing asked `since` a cursor names only that
    /// ([`haul_root::watch`]).
    pub watch: bool,
}

/// How often a serving node looks for abandoned staging files.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// A serving node.
pub struct Server {
    opts: ServeOptions,
    dest: Arc<Destination>,
    buffers: Arc<ChunkBuffers>,
    relays: Arc<Relays>,
    /// How this node's forwards reach their targets.
    reach: Arc<dyn Reach>,
    /// Connections being served now ([`Server::connections`]).
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    /// What it served since it started ([`Server::counters`]).
    counters: Arc<NodeCounters>,
    /// `--watch`: what changed beneath the root since a cursor.
    watch: Option<haul_root::watch::Watch>,
    /// The watch's failure was logged.
    watch_broken_said: std::sync::atomic::AtomicBool,
}

/// Counts a connection while it is served.
struct InFlight(Arc<std::sync::atomic::AtomicUsize>);

impl InFlight {
    fn new(count: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A connection on its way in, before its handshake.
enum Arrival {
    Tcp(Accepted),
    Quic(Box<QuicAccepted>),
}

impl Arrival {
    fn peer(&self) -> std::net::SocketAddr {
        match self {
            Arrival::Tcp(a) => a.peer(),
            Arrival::Quic(a) => a.peer(),
        }
    }
}

/// What a request asks for, as the transfer log names it, and its path.
fn request_of(request: &Request) -> (&'static str, &str) {
    match request {
        Request::Push { dest, .. } => ("push", dest),
        Request::Admit { dest, .. } => ("relay", dest),
        Request::Relayed { .. } => ("relay", ""),
        Request::List { path, .. } => ("list", path),
        Request::Prune { dest, .. } => ("prune", dest),
        Request::Link { dest, .. } => ("link", dest),
        Request::Fetch { .. } => ("fetch", ""),
        Request::Jump { to } => ("jump", to),
    }
}

/// Compares without leaking the position of the first difference.
fn token_matches(given: &str, accepted: &[String]) -> bool {
    accepted.iter().any(|t| {
        let (a, b) = (t.as_bytes(), given.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    })
}

impl Server {
    /// A node serving `opts.root` (created if missing).
    pub fn new(opts: ServeOptions) -> Result<Arc<Self>, NodeError> {
        Self::reaching(opts, Arc::new(OverNetwork))
    }

    /// A node whose relay forwards reach their targets through `reach`
    /// (tests: other nodes in this process).
    pub fn reaching(opts: ServeOptions, reach: Arc<dyn Reach>) -> Result<Arc<Self>, NodeError> {
        // Only in test builds: a node that lies as a relay, when asked.
        let reach = crate::forging::from_env(reach);
        let dest = Destination::open(&opts.root)?;
        dest.replace_files_in_the_way();
        dest.set_attr_policy(haul_engine::attrs::AttrPolicy::node(opts.keep_owners));
        let buffers = ChunkBuffers::new(opts.chunk_memory);
        let watch = match opts.watch {
            false => None,
            true => match haul_root::watch::Watch::start(dest.held_root(), haul_proto::STATE_DIR) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(
                        "--watch: {}: {e}; listings walk the whole tree instead",
                        opts.root.display()
                    );
                    None
                }
            },
        };
        Ok(Arc::new(Self {
            opts,
            dest,
            buffers,
            relays: Relays::new(),
            reach,
            in_flight: Arc::default(),
            counters: Arc::default(),
            watch,
            watch_broken_said: Default::default(),
        }))
    }

    /// Accepts connections until `shutdown` resolves, then lets transfers in
    /// flight finish for up to the grace period — or until `hurry` resolves
    /// (a second signal) — and stops. Their progress is on disk either way,
    /// so an interrupted transfer resumes.
    pub async fn serve(
        self: Arc<Self>,
        listener: Listener,
        quic: Option<QuicListener>,
        shutdown: impl std::future::Future<Output = ()>,
        hurry: impl std::future::Future<Output = ()>,
    ) {
        let mut conns = JoinSet::new();
        tokio::pin!(shutdown);
        // Abandoned staging files go hourly (the caller pruned at start).
        let pruner = self.opts.partial_ttl.map(|_| {
            let me = self.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(PRUNE_EVERY).await;
                    let me = me.clone();
                    if let Ok(Err(e)) =
                        tokio::task::spawn_blocking(move || me.prune_partials()).await
                    {
                        tracing::warn!("cannot prune partial files: {e}");
                    }
                }
            })
        });
        let next_quic = || async {
            match &quic {
                Some(q) => q.accept().await,
                None => std::future::pending().await,
            }
        };
        loop {
            let arrival = tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => Arrival::Tcp(accepted),
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                Some(accepted) = next_quic() => Arrival::Quic(Box::new(accepted)),
                Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            };
            let me = self.clone();
            conns.spawn(async move {
                let peer = arrival.peer();
                if let Err(e) = me.connection(arrival).await {
                    tracing::warn!("connection from {peer}: {e}");
                }
            });
        }
        if let Some(p) = pruner {
            p.abort();
        }
        if let Some(q) = &quic {
            q.close();
        }
        if !conns.is_empty() {
            tracing::info!(
                "shutting down: waiting up to {:?} for {} connection(s)",
                self.opts.grace,
                conns.len()
            );
            let drain = async { while conns.join_next().await.is_some() {} };
            tokio::select! {
                drained = tokio::time::timeout(self.opts.grace, drain) => {
                    if drained.is_err() {
                        tracing::info!("grace period over; partial files stay resumable");
                    }
                }
                () = hurry => {
                    tracing::info!("stopping now; partial files stay resumable");
                }
            }
            conns.abort_all();
        }
        self.dest.apply_dir_metadata();
    }

    /// Whether the root's path still names the directory the node holds
    /// (not deleted, moved, replaced or unmounted): `/healthz`'s check,
    /// by name on purpose — nothing is opened or written through it.
    pub fn root_in_place(&self) -> Result<(), String> {
        use std::os::unix::fs::MetadataExt;
        let held = self.root_identity().map_err(|e| e.to_string())?;
        let named = std::fs::metadata(&self.opts.root).map_err(|e| {
            format!(
                "{}: {e}: the node's root is gone (moved or unmounted?): restart the node",
                self.opts.root.display()
            )
        })?;
        if (named.dev(), named.ino()) != held {
            return Err(format!(
                "{} is no longer the directory the node serves (moved, replaced or unmounted): restart the node",
                self.opts.root.display()
            ));
        }
        Ok(())
    }

    /// The served root's device and inode, from its held descriptor.
    pub fn root_identity(&self) -> std::io::Result<(u64, u64)> {
        let meta = self.dest.held_root().dir().meta()?;
        Ok((meta.dev, meta.ino))
    }

    /// What the node served since it started.
    pub fn counters(&self) -> &Arc<NodeCounters> {
        &self.counters
    }

    /// `-z` chunks this node's relay forwards sent as the compressed frames
    /// it received ([`haul_transport::frames`]).
    pub fn frames_passed_on(&self) -> u64 {
        self.relays.frames_passed_on()
    }

    /// Bytes of chunk buffers now: in use by transfers, kept for reuse,
    /// and the budget (`--chunk-memory`).
    pub fn chunk_memory(&self) -> (usize, usize, usize) {
        let (charged, kept) = (self.buffers.charged(), self.buffers.kept());
        (charged.saturating_sub(kept), kept, self.buffers.budget())
    }

    /// Files and bytes in the staging directory (`.haul/partial`): what
    /// transfers in flight or abandoned hold on disk.
    pub fn partials(&self) -> Result<haul_engine::prune::Staged, NodeError> {
        Ok(self.dest.staged()?)
    }

    /// How many connections are being served now (an idle node started for
    /// one transfer exits when this stays 0).
    pub fn connections(&self) -> usize {
        self.in_flight.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Removes the staging files no transfer has written for the TTL
    /// (none without one) and says what it freed in the log.
    pub fn prune_partials(&self) -> Result<haul_engine::prune::Pruned, NodeError> {
        let Some(ttl) = self.opts.partial_ttl else {
            return Ok(Default::default());
        };
        let pruned = self
            .dest
            .prune_partials(ttl, std::time::SystemTime::now())?;
        if pruned.files > 0 || pruned.in_use > 0 {
            tracing::info!(
                "partial files untouched for {}s: removed {} ({} bytes), kept {} in use",
                ttl.as_secs(),
                pruned.files,
                pruned.bytes,
                pruned.in_use
            );
        }
        Ok(pruned)
    }

    async fn connection(&self, arrival: Arrival) -> Result<(), NodeError> {
        let t = self.opts.timeouts;
        let peer = arrival.peer();
        // A relay forwards over the transport its client chose.
        let established = match arrival {
            Arrival::Tcp(a) => a.establish(t).await.map(|c| (Transport::Tcp, c)),
            Arrival::Quic(a) => a.establish(t).await.map(|c| (Transport::Quic, c)),
        };
        let (over, conn) = established.inspect_err(|_| self.counters.connection_failed())?;
        self.serve_connection(conn, peer, over).await
    }

    /// Refuses with `code` and `message`, counting the refusal under the
    /// code's cause, and ends the connection.
    async fn refuse(
        &self,
        writer: &mut Box<dyn MessageWriter>,
        code: ErrorCode,
        message: String,
    ) -> Result<(), NodeError> {
        self.refuse_as(refusal_cause(code), writer, code, message)
            .await
    }

    /// Refuses as [`Server::refuse`], counted under `cause` (none: not
    /// counted). Always `Err(Refused)`, whether or not the peer heard it:
    /// a refusal is counted once, never also as a connection error.
    async fn refuse_as(
        &self,
        cause: Option<&'static str>,
        writer: &mut Box<dyn MessageWriter>,
        code: ErrorCode,
        message: String,
    ) -> Result<(), NodeError> {
        if let Some(cause) = cause {
            self.counters.refused(cause);
        }
        match refuse(writer, code, message.clone()).await {
            Err(e @ NodeError::Refused { .. }) => Err(e),
            _ => Err(NodeError::Refused { code, message }),
        }
    }

    /// Serves one connection however it was made — accepted from the
    /// network, or one end of an in-memory pair ([`crate::Dialer::in_process`]):
    /// the `Hello` within the handshake timeout, the version and token
    /// checks, `Welcome` or `Refused`, then the request's session. `peer`
    /// names it in the log; `over` is the transport its relay forwards use.
    pub async fn serve_connection(
        &self,
        conn: Connection,
        peer: std::net::SocketAddr,
        over: Transport,
    ) -> Result<(), NodeError> {
        let (mut reader, writer) = conn;
        reader.set_idle(self.opts.timeouts.handshake);
        let hello = match reader.recv().await {
            // Opened and closed unused, or left silent by a client that
            // then exited: `--transport auto` races TCP and QUIC and keeps
            // one (a port check does the same). Nothing to serve, nothing
            // failed, never counted as open.
            Err(e) if e.is_timeout() || matches!(e, TransportError::Closed) => {
                tracing::debug!("{peer} said no hello: {e}");
                return Ok(());
            }
            hello => hello,
        };
        let _counted = InFlight::new(&self.in_flight);
        let served = self
            .serve_request((reader, writer), hello, peer, over)
            .await;
        if let Err(e) = &served {
            if !matches!(e, NodeError::Refused { .. }) {
                self.counters.connection_failed();
            }
        }
        served
    }

    async fn serve_request(
        &self,
        conn: Connection,
        hello: Result<Message, TransportError>,
        peer: std::net::SocketAddr,
        over: Transport,
    ) -> Result<(), NodeError> {
        let t = self.opts.timeouts;
        let (mut reader, mut writer) = conn;
        let hello = hello?;
        reader.set_idle(t.idle);
        let Message::Hello {
            version,
            token,
            request,
        } = hello
        else {
            return self
                .refuse(&mut writer, ErrorCode::Protocol, "expected Hello".into())
                .await;
        };
        if version != PROTOCOL_VERSION {
            let msg = format!("protocol version {version} is not supported (this node speaks {PROTOCOL_VERSION}); upgrade the older side");
            return self.refuse(&mut writer, ErrorCode::Version, msg).await;
        }
        // A relayed push presents the transfer's ticket instead of a token.
        let relayed = matches!(request, Request::Relayed { .. });
        // Chunks a client compressed (`-z`) are unpacked whatever it asks
        // (and a fan-out's kept, to be forwarded as they came); a `Fetch`
        // that asks for it gets them compressed.
        let unpacking = haul_transport::Unpacking::new(reader);
        let frames = match &request {
            Request::Relayed { ticket, .. } => self.relays.get(ticket).map(|t| t.frames.clone()),
            _ => None,
        };
        let mut reader: Box<dyn haul_transport::MessageReader> = match frames {
            Some(frames) => Box::new(unpacking.keeping(frames)),
            None => Box::new(unpacking),
        };
        let mut writer = match request {
            Request::Fetch { compress, keep, .. } if compress > 0 || keep.sparse => {
                // A client's level is capped at 19: zstd's 20-22 take
                // hundreds of MB per connection and crawl.
                Box::new(haul_transport::Packing::new(
                    writer,
                    i32::from(compress.min(19)),
                )?) as Box<dyn haul_transport::MessageWriter>
            }
            _ => writer,
        };
        let auth = if relayed {
            "ticket".to_owned()
        } else if self.opts.tokens.is_empty() {
            "open".to_owned()
        } else if token_matches(&token, &self.opts.tokens) {
            token_id(&token)
        } else {
            "refused".to_owned()
        };
        let (asked, path) = request_of(&request);
        // Listed among the connections open until this function returns.
        let counted_as = match request {
            Request::Admit { .. } => "fanout",
            _ => asked,
        };
        let registered =
            self.counters
                .heard(peer.to_string(), auth.clone(), counted_as, path.to_owned());
        let log = self
            .opts
            .log
            .connection(peer, auth.clone(), asked, path, &registered);
        if auth == "refused" {
            tracing::warn!("refused a client with a wrong or missing token");
            let msg = "wrong or missing token: pass --token, HAUL_TOKEN or --token-file with the node's token".into();
            return self.refuse(&mut writer, ErrorCode::Unauthorized, msg).await;
        }
        let writes = matches!(
            request,
            Request::Push { .. }
                | Request::Admit { .. }
                | Request::Relayed { .. }
                | Request::Prune { .. }
                | Request::Link { .. }
        );
        if writes && self.opts.read_only {
            tracing::warn!("refused a {asked} to {path:?}: this node is read-only");
            let msg = format!("this node is read-only (--read-only): it serves pulls, ls and check, not a {asked}");
            let code = ErrorCode::Unauthorized;
            return self
                .refuse_as(Some("read_only"), &mut writer, code, msg)
                .await;
        }
        match request {
            Request::Push {
                dest,
                checksum,
                replace_dirs,
                skip,
                backup,
                rate_hint,
            } => {
                // The client's sender starts at the path's remembered rate:
                // the receive window opens for it now, not as data arrives.
                if rate_hint > 0 {
                    reader.expect_rate(rate_hint.min(MAX_RATE_HINT));
                }
                let backups = self.welcome_into(&mut writer, &dest, backup).await?;
                let ctx = ReceiverCtx {
                    observer: log.clone(),
                    dest: self.dest.clone(),
                    prefix: dest,
                    window: self.opts.window,
                    idle: t.idle,
                    chunk_work: ChunkWork::for_this_machine(),
                    buffers: self.buffers.clone(),
                    relay: None,
                    quick_check: (!checksum).then_some(skip),
                    replace_dirs,
                    backups,
                    heartbeat: None,
                };
                run_receiver(reader, writer, None, ctx)
                    .await
                    .map_err(|i| i.error)
            }
            Request::Admit {
                dest,
                origin,
                checksum,
                backup,
            } => {
                let backups = match self.backups_for(&dest, backup) {
                    Ok(b) => b,
                    Err(e) => return self.refuse(&mut writer, ErrorCode::BadPath, e).await,
                };
                // -c: a file here of the same content is received again
                // when another node lacks it; it is no change to keep.
                let backups = match checksum {
                    true => backups.map(|b| Arc::new((*b).clone().sparing_same_content())),
                    false => backups,
                };
                let admitted = crate::relay::Admitted {
                    dest,
                    origin,
                    checksum,
                    backups,
                    transport: over,
                };
                self.admit(reader, writer, admitted, log).await
            }
            Request::Relayed {
                ticket,
                stripe,
                edge,
            } => self.relayed(reader, writer, &ticket, stripe, edge).await,
            Request::List {
                path,
                sums,
                keep,
                since,
            } => self.list(reader, writer, &path, sums, keep, since).await,
            Request::Prune { dest, backup } => {
                let backups = self.welcome_into(&mut writer, &dest, backup).await?;
                // As a push's session: the mtimes of directories it removes
                // entries from are set again once the node is idle.
                self.dest.session_started();
                let pruned = self
                    .prune(reader, writer, &dest, backups.as_deref(), log.as_ref())
                    .await;
                self.dest.session_ended();
                pruned
            }
            Request::Link { dest, backup, skip } => {
                let backups = self.welcome_into(&mut writer, &dest, backup).await?;
                // As a push's session: directories' mtimes the links change
                // are set again once the node is idle.
                self.dest.session_started();
                let rules = haul_engine::hard_links::LinkRules {
                    skip,
                    backups: backups.as_deref(),
                };
                let linked = crate::hard_links::serve_links(
                    self.dest.held_root(),
                    reader,
                    writer,
                    &dest,
                    &rules,
                )
                .await;
                self.dest.session_ended();
                linked
            }
            Request::Jump { to } => {
                let stream = match crate::jump::onward(&to, &self.opts.jump_to, t).await {
                    Ok(stream) => stream,
                    Err((code, msg)) => return self.refuse(&mut writer, code, msg).await,
                };
                writer
                    .send(&Message::Welcome {
                        version: PROTOCOL_VERSION,
                    })
                    .await?;
                crate::jump::pipe((reader, writer), stream, t.idle).await
            }
            Request::Fetch {
                keep, rate_hint, ..
            } => {
                // The client remembers what a pull over this path settled
                // at: this side's QUIC sender starts there (capped; the
                // controller's window bounds one round's sending anyway).
                if rate_hint > 0 {
                    writer.start_at(haul_transport::PathHint {
                        rate: rate_hint.min(MAX_RATE_HINT),
                        loss: 0.0,
                    });
                }
                writer
                    .send(&Message::Welcome {
                        version: PROTOCOL_VERSION,
                    })
                    .await?;
                let ctx = SenderCtx {
                    observer: log.clone(),
                    window: self.opts.window,
                    max_retries: self.opts.max_retries,
                    idle: t.idle,
                    chunk_work: ChunkWork::for_this_machine(),
                    buffers: self.buffers.clone(),
                    sealer: None,
                    // A file the peer asked for that changed fails at once:
                    // the version its listing named is gone.
                    changed_retries: 0,
                    stripes: None,
                    heartbeat: None,
                };
                let feed = JobFeed::Wants {
                    root: self.dest.held_root().clone(),
                    attrs: haul_engine::attrs::AttrReader::new(keep),
                };
                run_sender(reader, writer, feed, ctx)
                    .await
                    .map_err(|i| i.error)
            }
        }
    }

    /// A fan-out control connection: issues the ticket, starts the
    /// forwards the client names, reports when this node's part is done.
    /// The ticket dies with the connection.
    async fn admit(
        &self,
        mut reader: Box<dyn MessageReader>,
        mut writer: Box<dyn MessageWriter>,
        admitted: crate::relay::Admitted,
        observer: Arc<crate::transfer_log::ConnectionLog>,
    ) -> Result<(), NodeError> {
        let (ticket, transfer) = self
            .relays
            .admit(admitted, self.dest.clone(), observer)
            .map_err(|e| NodeError::Internal(format!("no random bytes for a ticket: {e}")))?;
        // The ticket is revoked however this ends (a client gone before it
        // heard the ticket too).
        let result = async {
            writer
                .send(&Message::Welcome {
                    version: PROTOCOL_VERSION,
                })
                .await?;
            writer.send(&Message::Ticket { ticket }).await?;
            tracing::info!("admitted to a fan-out into {:?}", transfer.dest);
            self.counters.fanouts.fetch_add(1, Relaxed);
            self.control(&mut reader, &mut writer, &transfer, &ticket)
                .await
        }
        .await;
        self.relays.revoke(&ticket);
        result
    }

    async fn control(
        &self,
        reader: &mut Box<dyn MessageReader>,
        writer: &mut Box<dyn MessageWriter>,
        transfer: &Arc<Transfer>,
        ticket: &Ticket,
    ) -> Result<(), NodeError> {
        let started = std::time::Instant::now();
        // Something at least every heartbeat, so that the client tells a
        // silent node from a slow one in seconds (`haul_plan::Liveness`):
        // progress at most once a second, keepalives between.
        let tick = (self.opts.timeouts.idle / 3).min(haul_plan::liveness::HEARTBEAT);
        let progress_every = Duration::from_secs(1);
        let mut next_tick = tokio::time::Instant::now() + tick;
        let mut next_progress = tokio::time::Instant::now();
        let mut next_evidence = tokio::time::Instant::now();
        let mut last_moved = 0;
        let mut reported = false;
        let mut complete = false;
        loop {
            let changed = transfer.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !complete && transfer.received() {
                complete = true;
                writer
                    .send(&Message::Progress {
                        bytes: transfer.tally.moved(),
                        entries: transfer.tally.entries_ok(),
                        complete,
                    })
                    .await?;
            }
            // Evidence of unsealed data at once, its growing counts at most
            // every heartbeat (a liar's every chunk is no message each).
            let evidence = match tokio::time::Instant::now() >= next_evidence {
                true => transfer.untold_evidence(),
                false => Vec::new(),
            };
            if !evidence.is_empty() {
                next_evidence = tokio::time::Instant::now() + tick;
            }
            for (edge, e) in evidence {
                writer
                    .send(&Message::Unsealed {
                        edge,
                        entries: e.entries,
                        chunks: e.chunks,
                    })
                    .await?;
            }
            // An upstream gone quiet, as its session tells it (about every
            // half second while it lasts).
            for (edge, millis) in transfer.untold_quiet() {
                writer.send(&Message::Quiet { edge, millis }).await?;
            }
            if !reported {
                if let Some(done) = transfer.finished() {
                    let s = transfer.tally.finish(started.elapsed(), 0);
                    writer
                        .send(&Message::Report {
                            ok: s.entries_ok,
                            failed: s.failed,
                            bytes: s.bytes_transferred,
                            message: done.failures,
                            lost: done.lost,
                            damaged: transfer.book.damaged(),
                            short: done.short,
                        })
                        .await?;
                    reported = true;
                }
            }
            tokio::select! {
                msg = reader.recv() => match msg? {
                    Message::Forward { targets } if targets.iter().any(|t| t.ticket == *ticket) => {
                        // It would wait for itself until the run ends.
                        let msg = "a forward to this node itself".to_owned();
                        return self.refuse(writer, ErrorCode::Protocol, msg).await;
                    }
                    Message::Forward { targets } if targets.len() <= MAX_FORWARDS => {
                        // New children: a report again once they are served.
                        self.forward(transfer, targets);
                        reported = false;
                    }
                    Message::Forward { targets } => {
                        let msg = format!("{} forwards asked; at most {MAX_FORWARDS}", targets.len());
                        return self.refuse(writer, ErrorCode::Protocol, msg).await;
                    }
                    Message::KeepAlive => {}
                    Message::Bye => return Ok(()),
                    other => {
                        let msg = format!("unexpected {other:?} on a fan-out control connection");
                        return self.refuse(writer, ErrorCode::Protocol, msg).await;
                    }
                },
                () = &mut changed => {}
                () = tokio::time::sleep_until(next_tick) => {
                    let now = tokio::time::Instant::now();
                    next_tick = now + tick;
                    let moved = transfer.tally.moved();
                    if moved != last_moved && !reported && now >= next_progress {
                        last_moved = moved;
                        next_progress = now + progress_every;
                        let entries = transfer.tally.entries_ok();
                        writer.send(&Message::Progress { bytes: moved, entries, complete }).await?;
                    } else {
                        writer.send(&Message::KeepAlive).await?;
                    }
                }
            }
        }
    }

    /// Starts (or re-routes) this node's forwards: one sending pool per
    /// target, its TLS key pinned to what the client saw, the target's
    /// ticket as the credential.
    fn forward(&self, transfer: &Arc<Transfer>, targets: Vec<RelayTarget>) {
        let t = self.opts.timeouts;
        let base = ClientOptions {
            token: String::new(),
            timeouts: t,
            jobs: Concurrency::Fixed(1),
            streams: 1,
            window: self.opts.window,
            max_retries: self.opts.max_retries,
            chunk_memory: self.opts.chunk_memory,
            // Chunks that came compressed pass on as the frames that came
            // (`frames`), chunks of zeros as headers alone, and chunks
            // partly holes at zstd's fastest level, whatever the origin
            // asked: a relay does not spend its cores compressing again.
            compress: Some(0),
            ..ClientOptions::default()
        };
        let buffers = self.buffers.clone();
        let reach = self.reach.clone();
        let counters = self.counters.clone();
        let me = transfer.clone();
        transfer.forward(targets, move |target, queue| {
            let security = if target.fingerprint.is_empty() {
                Security::Plaintext
            } else {
                Security::Tls {
                    fingerprint: Some(target.fingerprint.clone()),
                    known_hosts: KnownHosts::default_file(),
                }
            };
            let opts = ClientOptions {
                security,
                transport: me.transport,
                ..base.clone()
            };
            let (buffers, transfer, reach) = (buffers.clone(), me.clone(), reach.clone());
            let (counters, frames) = (counters.clone(), me.frames.clone());
            counters.forwards.fetch_add(1, Relaxed);
            tokio::spawn(async move {
                let book = transfer.book.clone();
                let dialer = reach.dialer(&target.addr, &opts).reusing(frames);
                let sends = ForwardSends {
                    buffers,
                    book,
                    counters: counters.clone(),
                };
                let error = run_forward(&target, &dialer, queue, &opts, sends).await;
                if let ForwardEnd::Failures(e) | ForwardEnd::GaveUp(e) = &error {
                    counters.forwards_failed.fetch_add(1, Relaxed);
                    tracing::warn!("forward to {} failed: {e}", target.addr);
                }
                transfer.forward_ended(&target, error);
            })
        });
    }

    /// A push into a fan-out transfer, authenticated by its ticket; what
    /// it stages is relayed.
    async fn relayed(
        &self,
        reader: Box<dyn MessageReader>,
        mut writer: Box<dyn MessageWriter>,
        ticket: &Ticket,
        stripe: Option<Stripe>,
        edge: u64,
    ) -> Result<(), NodeError> {
        let Some(transfer) = self.relays.get(ticket) else {
            tracing::warn!("refused a relayed push with an unknown or expired ticket");
            let msg = "unknown or expired relay ticket: a ticket is valid only on the node that issued it, while its fan-out runs".into();
            return self.refuse(&mut writer, ErrorCode::Unauthorized, msg).await;
        };
        writer
            .send(&Message::Welcome {
                version: PROTOCOL_VERSION,
            })
            .await?;
        let Some(upstream) = transfer.upstream_started(stripe, edge) else {
            let msg = "a stripe of another plan than this transfer's".into();
            return self.refuse(&mut writer, ErrorCode::Protocol, msg).await;
        };
        let upstream = Arc::new(upstream);
        let t = self.opts.timeouts;
        let ctx = ReceiverCtx {
            // The tally, through the session's edge (seal failures).
            observer: upstream.clone(),
            dest: self.dest.clone(),
            prefix: transfer.dest.clone(),
            window: self.opts.window,
            idle: t.idle,
            chunk_work: ChunkWork::for_this_machine(),
            buffers: self.buffers.clone(),
            relay: Some(upstream.clone()),
            quick_check: (!transfer.checksum).then_some(haul_proto::SkipRule::default()),
            // A fan-out does not replace directories (yet): one in the way
            // fails its file, named in the summary.
            replace_dirs: false,
            backups: transfer.backups.clone(),
            // Its sender says something every heartbeat: a silence is a
            // path gone, told to the client long before `idle`.
            heartbeat: Some(crate::drive::relayed_heartbeat()),
        };
        let result = run_receiver(reader, writer, None, ctx).await;
        upstream.ended(result.is_ok());
        result.map_err(|i| i.error)
    }

    /// The backups a request writing into `dest` keeps under its
    /// `--backup` rule, both checked (`dest` a path under the root): why
    /// not, when either is bad.
    fn backups_for(
        &self,
        dest: &str,
        backup: Option<haul_proto::Backup>,
    ) -> Result<Option<Arc<haul_engine::backup::Backups>>, String> {
        haul_proto::validate_rel_path(dest).map_err(|e| e.to_string())?;
        backup
            .map(|b| haul_engine::backup::Backups::new(b, self.dest.held_root(), dest))
            .transpose()
            .map(|b| b.map(Arc::new))
    }

    /// Welcomes a request that writes into `dest` (a path under the root)
    /// with its `--backup` rule, checked; refuses it (`Err`) when either is
    /// bad. The backups to keep, if any.
    async fn welcome_into(
        &self,
        writer: &mut Box<dyn MessageWriter>,
        dest: &str,
        backup: Option<haul_proto::Backup>,
    ) -> Result<Option<Arc<haul_engine::backup::Backups>>, NodeError> {
        let backups = match self.backups_for(dest, backup) {
            Ok(b) => b,
            Err(e) => {
                return Err(self
                    .refuse(writer, ErrorCode::BadPath, e.clone())
                    .await
                    .err()
                    .unwrap_or(NodeError::Protocol(e)))
            }
        };
        writer
            .send(&Message::Welcome {
                version: PROTOCOL_VERSION,
            })
            .await?;
        Ok(backups)
    }

    /// `haul push --delete`: removes each entry the client names under
    /// `dest`, beneath the held root (never the state directory: entry
    /// paths naming it are refused), answering each with `Done`. Texts sent
    /// back name only the client's own path; details go to the node's log.
    async fn prune(
        &self,
        mut reader: Box<dyn MessageReader>,
        mut writer: Box<dyn MessageWriter>,
        dest: &str,
        backups: Option<&haul_engine::backup::Backups>,
        log: &crate::transfer_log::ConnectionLog,
    ) -> Result<(), NodeError> {
        loop {
            let path = match reader.recv().await? {
                Message::Remove { path } => path,
                Message::Bye => return Ok(()),
                Message::KeepAlive => continue,
                other => {
                    return Err(NodeError::Protocol(format!(
                        "expected Remove or Bye, got {other:?}"
                    )))
                }
            };
            let full = match dest.is_empty() {
                true => path.clone(),
                false => format!("{dest}/{path}"),
            };
            let result = haul_proto::validate_entry_path(&path)
                .map_err(|e| e.to_string())
                .and_then(|_| {
                    haul_engine::mirror::remove_beneath(self.dest.held_root(), &full, backups)
                });
            let message = match &result {
                Ok(()) => {
                    tracing::info!("removed {dest}/{path} (push --delete)");
                    haul_session::Observer::event(
                        log,
                        &haul_session::Event::Deleted {
                            path: full.clone(),
                            size: 0,
                        },
                    );
                    String::new()
                }
                Err(e) => {
                    tracing::warn!("push --delete: cannot remove {dest}/{path}: {e}");
                    format!("the node cannot remove {path} (its log says why)")
                }
            };
            writer
                .send(&Message::Done {
                    id: 0,
                    ok: result.is_ok(),
                    root: [0; 32],
                    message,
                })
                .await?;
        }
    }

    /// Lists `path` (read-only); with `sums`, each file's `Listing` is
    /// followed by its BLAKE3 (`Hashed`), or by `FileError{Io}` when it
    /// cannot be read, with keepalives while large files are hashed.
    async fn list(
        &self,
        mut reader: Box<dyn MessageReader>,
        mut writer: Box<dyn MessageWriter>,
        path: &str,
        sums: bool,
        keep: haul_proto::Keep,
        since: Option<haul_proto::Cursor>,
    ) -> Result<(), NodeError> {
        let trimmed = path.trim_end_matches('/');
        if let Err(e) = haul_proto::validate_rel_path(trimmed) {
            return self
                .refuse(&mut writer, ErrorCode::BadPath, format!("{path}: {e}"))
                .await;
        }
        let contents = path.ends_with('/') || trimmed.is_empty();
        let tree = match LocalTree::beneath(self.dest.held_root(), trimmed, contents) {
            Ok(t) => t.keeping(keep),
            Err(e) => {
                let (code, msg) = match e {
                    ResolveError::NotFound(_) => (
                        ErrorCode::NotFound,
                        format!("{path}: no such file or directory on the node"),
                    ),
                    e => {
                        let e = without_root(Some(self.dest.root()), e.to_string());
                        (ErrorCode::BadPath, format!("{path}: {e}"))
                    }
                };
                return self.refuse(&mut writer, code, msg).await;
            }
        };
        writer
            .send(&Message::Welcome {
                version: PROTOCOL_VERSION,
            })
            .await?;
        // What a push's dry run needs to itemize as this node would.
        if keep.owner || keep.group || keep.xattrs {
            let owners = haul_engine::attrs::AttrPolicy::node(self.opts.keep_owners).owners;
            writer.send(&Message::Takes { owners }).await?;
        }
        // Asked since a cursor: what changed after it, where the journal
        // can tell, and the cursor this listing began at — said first, so
        // a listing that breaks and is listed again keeps this one.
        let (changed, cursor) = self.changed_since(since, keep).await;
        if let Some(msg) = cursor {
            writer.send(&msg).await?;
        }
        let items: haul_engine::EntryIter = match changed {
            Some(paths) => {
                let root = self.dest.held_root().clone();
                let (base, contents) = (trimmed.to_owned(), contents);
                haul_engine::LocalTree::changed_beneath(root, paths, base, contents, keep)
            }
            None => Box::new(tree).entries(),
        };
        // The walk is blocking filesystem work: run it on a blocking thread
        // and stream entries through a bounded channel.
        let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
        let root = self.dest.root().to_owned();
        let walker = tokio::task::spawn_blocking(move || {
            for item in items {
                let (listed, hashed) = match item {
                    Ok(src) => {
                        let hashed = (sums && src.entry.kind == EntryKind::File)
                            .then(|| hashed_message(&src, &root));
                        (Message::Listing { entry: src.entry }, hashed)
                    }
                    Err(e) => {
                        let code = if e.is_skip() {
                            ErrorCode::Skipped
                        } else {
                            ErrorCode::Io
                        };
                        let message = e.to_string();
                        (
                            Message::FileError {
                                id: 0,
                                code,
                                message,
                            },
                            None,
                        )
                    }
                };
                if tx.blocking_send(listed).is_err() {
                    return;
                }
                if let Some(h) = hashed {
                    if tx.blocking_send(h).is_err() {
                        return;
                    }
                }
            }
        });
        // Hashing a large file takes long: the client hears keepalives.
        let beat = (self.opts.timeouts.idle / 3).max(Duration::from_millis(100));
        loop {
            match tokio::time::timeout(beat, rx.recv()).await {
                Ok(Some(msg)) => writer.queue(&msg).await?,
                Ok(None) => break,
                Err(_) => writer.send(&Message::KeepAlive).await?,
            }
        }
        // A walk that ended abnormally ends no listing: without `Bye` the
        // client sees it broken, never complete.
        walker.await.map_err(|e| {
            NodeError::Internal(format!("the listing's walk ended abnormally: {e}"))
        })?;
        writer.send(&Message::Bye).await?;
        match reader.recv().await {
            Ok(Message::Bye) | Err(_) => Ok(()),
            Ok(other) => Err(NodeError::Protocol(format!(
                "expected Bye after listing, got {other:?}"
            ))),
        }
    }

    /// For a listing asked `since` a cursor: the paths changed after it
    /// (`None`: list everything — no watch, another epoch, `-H`'s listing
    /// of links, which needs every name) and the `Cursor` message that
    /// starts the listing (`None`: not asked).
    async fn changed_since(
        &self,
        since: Option<haul_proto::Cursor>,
        keep: haul_proto::Keep,
    ) -> (Option<Vec<String>>, Option<Message>) {
        let Some(asked) = since else {
            return (None, None);
        };
        let Some(watch) = &self.watch else {
            let none = haul_proto::Cursor { epoch: 0, seq: 0 };
            return (
                None,
                Some(Message::Cursor {
                    cursor: none,
                    changes_only: false,
                }),
            );
        };
        let c = haul_root::watch::Cursor {
            epoch: asked.epoch,
            seq: asked.seq,
        };
        // The journal's lock is short, but the copy may be long: not on
        // the runtime's threads.
        let w = watch.clone();
        let Ok((changed, now, broken)) = tokio::task::spawn_blocking(move || {
            let (changed, now) = w.since_and_cursor(c);
            (changed, now, w.broken())
        })
        .await
        else {
            return (None, None);
        };
        if let Some(why) = broken {
            if !self
                .watch_broken_said
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::warn!("--watch stopped: {why}; listings walk the whole tree");
            }
        }
        let changed = changed.filter(|_| !keep.hard_links);
        let msg = Message::Cursor {
            cursor: haul_proto::Cursor {
                epoch: now.epoch,
                seq: now.seq,
            },
            changes_only: changed.is_some(),
        };
        (changed, Some(msg))
    }
}

/// `Hashed` with the BLAKE3 of a listed file, or `FileError{Io}` naming
/// it (without the node's root) when it cannot be read.
fn hashed_message(src: &haul_engine::SourceEntry, root: &std::path::Path) -> Message {
    match hash_local(src) {
        Ok(h) => Message::Hashed {
            root: *h.as_bytes(),
        },
        Err(e) => Message::FileError {
            id: 0,
            code: ErrorCode::Io,
            message: without_root(Some(root), e.to_string()),
        },
    }
}

async fn refuse(
    writer: &mut Box<dyn MessageWriter>,
    code: ErrorCode,
    message: String,
) -> Result<(), NodeError> {
    writer
        .send(&Message::Refused {
            code,
            message: message.clone(),
        })
        .await?;
    let _ = writer.close().await;
    Err(NodeError::Refused { code, message })
}

/// What a forward's sends share with the node: its chunk buffers, the
/// transfer's seals, the node's counters (what it forwards counts as sent).
struct ForwardSends {
    buffers: Arc<ChunkBuffers>,
    book: Arc<SealBook>,
    counters: Arc<NodeCounters>,
}

/// Sends a forward's queue to its target (through `dialer`) until the queue is drained (the
/// upstream said `Bye` and every entry went); the error it gave up with.
async fn run_forward(
    target: &RelayTarget,
    dialer: &crate::Dialer,
    queue: Arc<WorkQueue<SendJob>>,
    opts: &ClientOptions,
    sends: ForwardSends,
) -> ForwardEnd {
    let ForwardSends {
        buffers,
        book,
        counters,
    } = sends;
    let log = CountedSends {
        counters,
        inner: ForwardLog(target.addr.clone()),
    };
    let tally = haul_run::summary::Tally::new(Arc::new(log));
    let request = Request::Relayed {
        ticket: target.ticket,
        stripe: target.stripe,
        edge: target.edge,
    };
    let mut ctx = SenderCtx::for_client(opts, &tally, buffers).sealed(book);
    // A relay's copy that changes is its upstream's to send again (a new
    // version, offered here and forwarded as such), never this relay's.
    ctx.changed_retries = 0;
    let (_, err) = crate::pool::send_all(&queue, dialer, request, None, opts, &tally, ctx).await;
    let summary = tally.finish(Duration::ZERO, 0);
    match err {
        Some(e) => ForwardEnd::GaveUp(e.to_string()),
        None if summary.failed > 0 => {
            ForwardEnd::Failures(format!("{} entries failed", summary.failed))
        }
        None => ForwardEnd::Clean,
    }
}
