//! Drives a [`Receiver`] session over a connection: prepares files in the
//! destination, reads each chunk's payload into a budgeted buffer and hands
//! it to the file's sink chain (verify, then write), commits files in
//! batches (one `syncfs` for many), owns the timer. A pulling client's
//! receiver also feeds the session the jobs it asks for.

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use haul_engine::backup::Backups;
use haul_engine::{Destination, PartialFile, Prepared as Staged, ReceiveError, VerifiedChunk};
use haul_proto::{ChunkHeader, Digest, Entry, EntryKind, ErrorCode, Message};
use haul_session::{
    ChunkAction, ChunkOutcome, FetchJob, FileId, Observer, Prepared, Receiver, ReceiverIo, Refusal,
    SessionConfig, Transmit,
};
use haul_transport::{MessageReader, MessageWriter, TransportError};
use tokio::sync::mpsc;

use super::commit::{commit_all, CommitItem};
use super::relay_hook::{Assembly, RelayHook, SUPERSEDED_QUIET};
use super::Interrupted;
use crate::buffers::{ChunkBuf, ChunkBuffers};
use crate::chunk_work::{ChunkWork, InlinePolicy};
use crate::jobs::WorkQueue;
use crate::NodeError;

/// Settings of a receiver.
#[derive(Clone)]
pub struct ReceiverCtx {
    /// Where events go.
    pub observer: Arc<dyn Observer>,
    /// The destination root.
    pub dest: Arc<Destination>,
    /// Prepended to every offered path (a push's destination directory).
    pub prefix: String,
    /// Wants in flight at most (pulling client).
    pub window: usize,
    /// The idle timeout (keepalives go out at a third of it during long work).
    pub idle: Duration,
    /// Where large chunks are verified and written ([`ChunkWork::for_this_machine`]).
    pub chunk_work: ChunkWork,
    /// Chunk buffers, under the process's memory budget.
    pub buffers: Arc<ChunkBuffers>,
    /// The fan-out transfer this push belongs to: every entry staged here
    /// is relayed downstream ([`crate::relay`]).
    pub relay: Option<Arc<dyn RelayHook>>,
    /// rsync's quick check, with the client's rule (`--ignore-existing`,
    /// `--size-only`, `-u`): a file in place that it keeps is up to date.
    /// `None` for `push --checksum` (the client compared contents already
    /// and offers only files that differ).
    pub quick_check: Option<haul_proto::SkipRule>,
    /// `--force` or `--delete`: a non-empty directory where the source has
    /// a file or symlink is removed to make room (an empty one always is).
    pub replace_dirs: bool,
    /// `--backup`: what a file or symlink received replaces is kept.
    pub backups: Option<Arc<Backups>>,
    /// A fan-out's relayed session: its sender keeps it alive every
    /// heartbeat, and a silence past the heartbeat's `quiet` (measured in
    /// bytes arriving, not frames) is told to `observer` as
    /// [`Event::PeerQuiet`] ([`super::relayed_heartbeat`]).
    pub heartbeat: Option<haul_session::Heartbeat>,
}

impl ReceiverCtx {
    /// A pulling client's receiver into `dest` with `opts`' settings,
    /// reporting to `observer`, with its own chunk buffers.
    pub fn for_client(
        opts: &crate::ClientOptions,
        observer: Arc<dyn Observer>,
        dest: Arc<Destination>,
    ) -> Self {
        Self {
            observer,
            dest,
            prefix: String::new(),
            window: opts.window,
            idle: opts.timeouts.idle,
            chunk_work: opts.chunk_work,
            buffers: ChunkBuffers::new(opts.chunk_memory),
            relay: None,
            quick_check: Some(opts.skip),
            replace_dirs: opts.replaces_dirs(),
            backups: None,
            heartbeat: None,
        }
    }

    /// Whether a non-empty directory in the way is removed: with `--force`
    /// or `--delete`, but not with `--backup`, which would lose what it
    /// holds (its file fails instead, saying a directory is in the way).
    fn replaces_dirs(&self) -> bool {
        self.replace_dirs && self.backups.is_none()
    }

    /// With `--backup`: what it replaces is kept as `backups` says.
    pub fn keeping_backups(mut self, backups: Option<Arc<Backups>>) -> Self {
        self.backups = backups;
        self
    }
}

/// Large chunk writes that may overlap with receiving the next chunk.
const WRITES_IN_FLIGHT: usize = 2;
/// Batches of at least this many commits use one `syncfs(2)`.
pub(crate) const GROUP_COMMIT: usize = 8;
/// Chunks up to this size are verified and written inline.
const INLINE_WRITE: usize = 256 << 10;
/// Entries up to this size are prepared inline (a larger partial file is
/// re-verified when reopened: that runs on a blocking thread).
const INLINE_PREPARE: u64 = 256 << 10;

/// What a blocking task finished.
enum Done {
    Write(FileId, u32, ChunkOutcome),
    Prepare(FileId, u32, u32, Entry, Result<Staged, ReceiveError>),
    Commits(Vec<CommitItem>, Vec<Result<Digest, ReceiveError>>),
}

/// Runs the receiver until the sender says `Bye` (push) or, when `wants` is
/// given, until every job of the queue is done.
pub async fn run_receiver(
    reader: Box<dyn MessageReader>,
    writer: Box<dyn MessageWriter>,
    wants: Option<Arc<WorkQueue<FetchJob>>>,
    ctx: ReceiverCtx,
) -> Result<(), Interrupted<FetchJob>> {
    let now = Instant::now();
    let cfg = SessionConfig {
        window: ctx.window,
        idle: ctx.idle,
        hide: Some(ctx.dest.root().display().to_string()),
        heartbeat: ctx.heartbeat,
        ..SessionConfig::default()
    };
    let mut session = match wants {
        Some(_) => Receiver::for_pull(cfg, now),
        None => Receiver::for_push(cfg, ctx.prefix.clone(), now),
    };
    if let Some(transfer) = &ctx.relay {
        // A fan-out: only what the origin sealed is taken (and relayed).
        session.check_origin(transfer.seals());
    }
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let newer = ctx.relay.as_ref().and_then(|r| r.newer_upstreams());
    let arrivals = ctx.heartbeat.and_then(|_| reader.activity());
    let mut d = Driver {
        newer,
        arrivals,
        session,
        r: reader,
        w: writer,
        writes: InlinePolicy::new(ctx.chunk_work),
        ctx,
        parts: HashMap::default(),
        kept: Default::default(),
        writing: 0,
        commits: Vec::new(),
        committing: false,
        done_tx,
        done_rx,
        now,
        peer_gone: false,
        heard: false,
    };
    d.ctx.dest.session_started();
    let result = match d.run(wants.as_deref()).await {
        Err(e) if !d.heard => {
            let first = async { d.r.recv().await.ok() };
            Err(super::refusal_or(e, first).await)
        }
        r => r,
    };
    // A batch still committing (the connection broke) finishes its files,
    // and files whose Commit arrived are committed — they verified and the
    // sender asked for it; a retry then finds them in place — before the
    // session ends and directory metadata is applied.
    d.finish_commits().await;
    d.ctx.dest.session_ended();
    // What the session learned before the connection ended (and what the
    // commits above settled) is told, not dropped with it.
    while let Some(e) = d.session.poll_event() {
        d.ctx.observer.event(&e);
    }
    result.map_err(|error| Interrupted {
        error,
        unfinished: d.session.into_unfinished(),
    })
}

struct Driver {
    session: Receiver,
    r: Box<dyn MessageReader>,
    w: Box<dyn MessageWriter>,
    writes: InlinePolicy,
    ctx: ReceiverCtx,
    /// Each file's staging (its sink chain: verified chunks are written there).
    parts: HashMap<FileId, Arc<PartialFile>>,
    /// Stripes of files kept for the stripes other sessions bring: let go
    /// without abandoning their staging.
    kept: rustc_hash::FxHashSet<FileId>,
    /// Chunk writes running on blocking threads.
    writing: usize,
    /// Files whose commit the session asked for, for the next batch.
    commits: Vec<CommitItem>,
    /// A batch is running (one at a time).
    committing: bool,
    done_tx: mpsc::UnboundedSender<Done>,
    done_rx: mpsc::UnboundedReceiver<Done>,
    /// The time, read once per step (sessions need it in every call).
    now: Instant,
    /// The sender said `Bye` and closed: nothing more to read.
    peer_gone: bool,
    /// A message from the peer arrived (after it, none is its refusal).
    heard: bool,
    /// A fan-out's relay: changes when another upstream session starts,
    /// which may take this one's place (until then, and after, `None`).
    newer: Option<tokio::sync::watch::Receiver<u64>>,
    /// A relayed session's connection: when its bytes last arrived (the
    /// sender's silence is measured in them: a large chunk's payload
    /// arrives between two frames).
    arrivals: Option<Arc<haul_transport::Activity>>,
}

impl Driver {
    async fn run(&mut self, wants: Option<&WorkQueue<FetchJob>>) -> Result<(), NodeError> {
        loop {
            self.now = Instant::now();
            super::hand_back(self.w.as_mut()).await?;
            let starved = match wants {
                Some(q) => self.take_jobs(q),
                None => false,
            };
            self.pump().await?;
            if self.session.is_finished() {
                return super::finish(self.w.as_mut()).await;
            }
            if self.session.poll_timeout().is_some_and(|t| t <= self.now) {
                self.timers()?;
            }
            if let Ok(done) = self.done_rx.try_recv() {
                self.completed(done);
                continue;
            }
            // Take what already arrived before writing anything.
            if let Some(msg) = self.r.try_recv()? {
                self.incoming(msg).await?;
                continue;
            }
            // Nothing buffered: commits that gathered meanwhile go as one
            // batch, while this connection goes on receiving.
            self.start_commits();
            self.w.flush().await?;
            self.now = Instant::now();
            self.session.flushed(self.now);
            let deadline = self.session.poll_timeout();
            let sleep = deadline.map(|t| tokio::time::sleep_until(t.into()));
            let newer = &mut self.newer;
            let watching = newer.is_some();
            tokio::select! {
                // What arrived first: a timer that is due as this driver
                // comes back from its own work must not call a sender silent
                // whose bytes wait unread.
                biased;
                // `recv` is cancel-safe: bytes already read stay buffered.
                // A pulling client waiting for its queue reads nothing: the
                // peer owes it nothing then (and the transport's idle limit
                // must not fire).
                msg = self.r.recv(), if !starved && !self.peer_gone => {
                    let msg = match msg {
                        // The sender said `Bye` and left: its commits end
                        // here all the same, and nothing more is read.
                        Err(TransportError::Closed) if self.session.peer_said_bye() => {
                            self.peer_gone = true;
                            continue;
                        }
                        msg => msg?,
                    };
                    self.now = Instant::now();
                    self.incoming(msg).await?;
                }
                Some(done) = self.done_rx.recv() => {
                    self.now = Instant::now();
                    self.completed(done);
                }
                () = async { if let Some(s) = sleep { s.await } }, if deadline.is_some() => {
                    self.now = Instant::now();
                    self.timers()?;
                    // It waited on the connection and nothing came.
                    self.session.tell_quiet(self.now);
                }
                () = async { if let Some(q) = wants { q.wait().await } }, if starved => {}
                changed = async {
                    match newer {
                        Some(w) => w.changed().await.is_ok(),
                        None => std::future::pending().await,
                    }
                }, if watching => {
                    self.now = Instant::now();
                    self.newer_upstream(changed)?;
                }
            }
        }
    }

    /// Another upstream session of this fan-out started (`alive`: the
    /// relay still watches): if it carries what this one does, this one
    /// ends once its sender is silent.
    fn newer_upstream(&mut self, alive: bool) -> Result<(), NodeError> {
        let superseded = self.ctx.relay.as_ref().is_some_and(|r| r.superseded());
        if !alive || superseded {
            self.newer = None;
        }
        if superseded {
            // Between messages, and in the middle of one: a sender that
            // stalls for the quiet limit ends the session.
            self.r.set_idle(SUPERSEDED_QUIET);
            self.session.superseded(self.now, SUPERSEDED_QUIET)?;
        }
        Ok(())
    }

    /// A pulling client's session asks for jobs while it has room.
    fn take_jobs(&mut self, queue: &WorkQueue<FetchJob>) -> bool {
        super::take_jobs(&mut self.session, queue, |s, job| {
            s.want(self.now, job);
        })
    }

    /// Sends what the session transmits and does the I/O it asks for.
    async fn pump(&mut self) -> Result<(), NodeError> {
        loop {
            let now = self.now;
            if let Some(t) = self.session.poll_transmit(now) {
                match t {
                    Transmit::Message(m) => {
                        self.w.push(&m);
                        if self.w.batch_full() {
                            self.w.flush().await?;
                        }
                    }
                    Transmit::Chunk(_) => {
                        return Err(NodeError::Internal("a receiver sends no chunks".into()))
                    }
                }
                continue;
            }
            while let Some(e) = self.session.poll_event() {
                self.ctx.observer.event(&e);
            }
            // Verified chunks: the seam a relay forwards from.
            while self.session.poll_verified().is_some() {}
            let Some(io) = self.session.poll_io() else {
                return Ok(());
            };
            self.perform(io);
        }
    }

    fn perform(&mut self, io: ReceiverIo) {
        let now = self.now;
        match io {
            ReceiverIo::Make { file, entry } => {
                let dest = &self.ctx.dest;
                // -i: what changes about it (asked before it is made).
                let change = dest.making_change(&entry);
                let made = match entry.kind {
                    EntryKind::File => Err(Refusal {
                        code: ErrorCode::Protocol,
                        message: format!("{} is not a directory or symlink", entry.path),
                    }),
                    _ => replacing(dest, self.ctx.replaces_dirs(), &entry.path, || {
                        dest.make_dir_or_link(&entry, self.ctx.backups.as_deref())
                            .unwrap_or(Ok(()))
                    })
                    .map_err(refusal),
                };
                if let (Some(relay), Ok(())) = (&self.ctx.relay, &made) {
                    relay.offered(&entry, None);
                }
                if let (Some(code), Ok(())) = (change, &made) {
                    self.session.itemized(file, code);
                }
                self.session.made(now, file, made);
            }
            ReceiverIo::Prepare {
                file,
                entry,
                first,
                end,
                content,
            } => {
                // The quick check applies to a range too: a split file already
                // in place is skipped range by range (the sender reports it once).
                let dest = self.ctx.dest.clone();
                let (quick_check, replace) = (self.ctx.quick_check, self.ctx.replaces_dirs());
                let prepare = move |dest: &Destination, entry: &Entry| {
                    // -c: the content the sender found listed here, still
                    // here (read again now), is brought in line, not sent.
                    let same = content
                        .filter(|_| dest.existing_file_size(&entry.path) == Some(entry.size));
                    if let Some(fixed) = same.and_then(|d| dest.same_content_fixing(entry, &d)) {
                        return Ok(Staged::UpToDate { fixed });
                    }
                    replacing(dest, replace, &entry.path, || {
                        dest.prepare_file(entry, quick_check)
                    })
                };
                if entry.size <= INLINE_PREPARE {
                    let staged = prepare(&dest, &entry);
                    self.prepared(file, first, end, &entry, staged);
                } else {
                    // Reopening a large partial re-verifies what it holds:
                    // it may take longer than the peer's idle timeout (the
                    // session sends keepalives meanwhile).
                    let tx = self.done_tx.clone();
                    tokio::task::spawn_blocking(move || {
                        let staged = prepare(&dest, &entry);
                        let _ = tx.send(Done::Prepare(file, first, end, entry, staged));
                    });
                }
            }
            ReceiverIo::Commit { file, root } => {
                let part = self.parts.get(&file).cloned();
                self.commits.push((file, part, root));
            }
            ReceiverIo::Assemble { file } => {
                let part = self.parts.get(&file).cloned();
                match (part, &self.ctx.relay) {
                    (Some(part), Some(relay)) => match relay.assemble(&part) {
                        Assembly::Complete(root) => self.commits.push((file, Some(part), root)),
                        Assembly::Later => {
                            self.kept.insert(file);
                            self.session.assembled_elsewhere(now, file);
                        }
                        Assembly::Damaged(e) => self.session.committed(now, file, Err(e)),
                    },
                    _ => self.session.committed(
                        now,
                        file,
                        Err("a stripe outside a fan-out, or of a file not staged".into()),
                    ),
                }
            }
            ReceiverIo::Forget { file } => {
                // Let go unfinished (failed, refused): a relay's forwards
                // waiting for its chunks give up on it. A stripe kept for
                // the others is not given up.
                let kept = self.kept.remove(&file)
                    || self.ctx.relay.as_ref().is_some_and(|r| r.is_striped());
                if let Some(part) = self.parts.remove(&file) {
                    if !part.is_published() && !kept {
                        part.abandon();
                    }
                }
            }
        }
    }

    fn prepared(
        &mut self,
        file: FileId,
        first: u32,
        end: u32,
        entry: &Entry,
        staged: Result<Staged, ReceiveError>,
    ) {
        let now = self.now;
        let (answer, part) = match staged {
            Ok(Staged::UpToDate { fixed }) => {
                if let Some(code) = haul_engine::itemize::in_place(entry, fixed) {
                    self.session.itemized(file, code);
                }
                (Ok(Prepared::UpToDate), None)
            }
            Ok(Staged::Receive(part)) => {
                let by_content =
                    self.ctx.quick_check.is_none() || self.ctx.dest.receives_everything_offered();
                let code = haul_engine::itemize::received(entry, part.replaced(), by_content);
                self.session.itemized(file, code);
                let have = part.have(first, end);
                (Ok(Prepared::Receive { have }), Some(part))
            }
            Err(e) => (Err(refusal(e)), None),
        };
        // Kept only while the session still wants the file (one released
        // while it was prepared must not hold its staging and lock).
        if self.session.prepared(now, file, answer) {
            if let Some(relay) = &self.ctx.relay {
                relay.offered(entry, part.as_ref());
            }
            if let Some(part) = part {
                self.parts.insert(file, part);
            }
        }
    }

    /// The session's timers at `self.now`; a relayed session is told first
    /// when its bytes last arrived. (A sender's silence is told only where
    /// this driver waits on the connection: [`Receiver::tell_quiet`].)
    fn timers(&mut self) -> Result<(), NodeError> {
        if let Some(a) = &self.arrivals {
            self.session.arrived(a.last());
        }
        self.session.handle_timeout(self.now)?;
        Ok(())
    }

    async fn incoming(&mut self, msg: Message) -> Result<(), NodeError> {
        self.heard = true;
        let now = self.now;
        let Message::Chunk(h) = msg else {
            self.session.handle(now, msg)?;
            return Ok(());
        };
        match self.session.handle_chunk(now, h)? {
            ChunkAction::Discard => {
                let stale = stale(&self.newer, self.ctx.relay.as_deref());
                let watch = Watch {
                    session: &mut self.session,
                    arrivals: self.arrivals.as_deref(),
                    observer: &*self.ctx.observer,
                };
                watch.wait(self.r.skip_payload(&h), stale).await?;
                self.now = Instant::now();
            }
            ChunkAction::Write {
                file,
                index,
                digest,
            } => {
                // Charged to the budget before any payload byte is read
                // (this task holds no buffer while it waits); filled as the
                // bytes arrive.
                let mut buf = self.ctx.buffers.take(h.len as usize).await;
                if !self.r.try_read_payload(&h, buf.vec()) {
                    let stale = stale(&self.newer, self.ctx.relay.as_deref());
                    let watch = Watch {
                        session: &mut self.session,
                        arrivals: self.arrivals.as_deref(),
                        observer: &*self.ctx.observer,
                    };
                    watch
                        .wait(self.r.read_payload(&h, buf.vec()), stale)
                        .await?;
                    self.now = Instant::now();
                }
                self.write(file, &h, index, digest, buf).await;
            }
        }
        Ok(())
    }

    /// Hands a chunk's payload to the file's sink chain: verified first,
    /// then written (inline when cheap, else on a blocking thread while the
    /// next chunk arrives).
    async fn write(
        &mut self,
        file: FileId,
        h: &ChunkHeader,
        index: u32,
        digest: Digest,
        buf: ChunkBuf,
    ) {
        let Some(part) = self.parts.get(&file).cloned() else {
            self.session.chunk_done(
                self.now,
                file,
                index,
                ChunkOutcome::Failed("file not open".into()),
            );
            return;
        };
        let len = h.len as usize;
        if len <= INLINE_WRITE {
            let outcome = put(&part, index, &buf, &digest);
            drop(buf);
            self.session.chunk_done(self.now, file, index, outcome);
            return;
        }
        if self.writes.inline(len, h.from_record) {
            let started = Instant::now();
            let outcome = put(&part, index, &buf, &digest);
            if self.writes.took(len, started.elapsed()) {
                tracing::debug!("chunk writes are slow: writing on blocking threads from now on");
            }
            drop(buf);
            self.session.chunk_done(self.now, file, index, outcome);
            return;
        }
        while self.writing >= WRITES_IN_FLIGHT {
            match self.done_rx.recv().await {
                Some(done) => self.completed(done),
                None => break,
            }
        }
        self.writing += 1;
        let tx = self.done_tx.clone();
        tokio::task::spawn_blocking(move || {
            let outcome = put(&part, index, &buf, &digest);
            // The buffer goes back to the pool from this thread.
            drop(buf);
            let _ = tx.send(Done::Write(file, index, outcome));
        });
    }

    fn completed(&mut self, done: Done) {
        let now = self.now;
        match done {
            Done::Write(file, index, outcome) => {
                self.writing = self.writing.saturating_sub(1);
                self.session.chunk_done(now, file, index, outcome);
            }
            Done::Prepare(file, first, end, entry, staged) => {
                self.prepared(file, first, end, &entry, staged)
            }
            Done::Commits(batch, results) => {
                self.committing = false;
                for ((file, _, _), result) in batch.iter().zip(results) {
                    self.session
                        .committed(now, *file, result.map_err(|e| e.to_string()));
                }
                self.start_commits();
            }
        }
    }

    /// Starts committing the files whose `Commit` arrived, on a blocking
    /// thread, unless a batch is running already (then they wait for the
    /// next one): linking, setting metadata and syncing one batch overlaps
    /// with staging the next.
    fn start_commits(&mut self) {
        if self.committing || self.commits.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.commits);
        let dest = self.ctx.dest.clone();
        let backups = self.ctx.backups.clone();
        let tx = self.done_tx.clone();
        self.committing = true;
        tokio::task::spawn_blocking(move || {
            let results = commit_all(&dest, &batch, backups.as_deref());
            let _ = tx.send(Done::Commits(batch, results));
        });
    }

    /// After a broken connection: the running batch ends, and the commits
    /// asked for are made.
    async fn finish_commits(&mut self) {
        while let Some(io) = self.session.poll_io() {
            if let ReceiverIo::Commit { file, root } = io {
                let part = self.parts.get(&file).cloned();
                self.commits.push((file, part, root));
            }
        }
        while self.committing || self.writing > 0 {
            match self.done_rx.recv().await {
                Some(done) => self.completed(done),
                None => break,
            }
        }
        if !self.commits.is_empty() {
            let (dest, batch) = (self.ctx.dest.clone(), std::mem::take(&mut self.commits));
            let backups = self.ctx.backups.clone();
            let _ =
                tokio::task::spawn_blocking(move || commit_all(&dest, &batch, backups.as_deref()))
                    .await;
        }
    }
}

/// The sink chain of a received chunk: verified, then written to staging.
/// Resolves with the session's end when a newer upstream session takes
/// this one's place while a chunk's payload is read, and the payload has
/// not come in full within [`SUPERSEDED_QUIET`] (a sender frozen or cut
/// off mid-chunk — or one so slow that a chunk takes longer: superseded,
/// it is cut all the same); never for a session that is not a relay's.
/// It watches a copy of the session's watch, so the main loop still hears
/// of the change when the payload came in time.
/// A payload being read (or skipped) on a relayed session: its timers
/// run meanwhile, and a sender silent past the heartbeat's `quiet` is told
/// — a link cut halfway through a chunk's payload — while the bytes that
/// do arrive keep it from being called silent.
struct Watch<'a> {
    session: &'a mut Receiver,
    arrivals: Option<&'a haul_transport::Activity>,
    observer: &'a dyn Observer,
}

impl Watch<'_> {
    /// Waits for `io` (the connection's reading first, then `stale`, then
    /// the timers: a timer due as the wait begins does not beat bytes
    /// already there).
    async fn wait(
        self,
        io: impl std::future::Future<Output = Result<(), haul_transport::TransportError>>,
        stale: impl std::future::Future<Output = NodeError>,
    ) -> Result<(), NodeError> {
        tokio::pin!(io, stale);
        let Some(arrivals) = self.arrivals else {
            return tokio::select! {
                got = &mut io => Ok(got?),
                e = &mut stale => Err(e),
            };
        };
        loop {
            let deadline = self.session.poll_timeout();
            let sleep = deadline.map(|t| tokio::time::sleep_until(t.into()));
            tokio::select! {
                biased;
                got = &mut io => return Ok(got?),
                e = &mut stale => return Err(e),
                () = async { if let Some(s) = sleep { s.await } }, if deadline.is_some() => {
                    let now = Instant::now();
                    self.session.arrived(arrivals.last());
                    self.session.handle_timeout(now)?;
                    self.session.tell_quiet(now);
                    while let Some(e) = self.session.poll_event() {
                        self.observer.event(&e);
                    }
                }
            }
        }
    }
}

async fn stale(
    newer: &Option<tokio::sync::watch::Receiver<u64>>,
    relay: Option<&dyn RelayHook>,
) -> NodeError {
    let (Some(watch), Some(relay)) = (newer, relay) else {
        return std::future::pending().await;
    };
    let mut watch = watch.clone();
    while !relay.superseded() {
        if watch.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
    tokio::time::sleep(SUPERSEDED_QUIET).await;
    NodeError::from(haul_session::SessionError::Superseded {
        millis: SUPERSEDED_QUIET.as_millis() as u64,
    })
}

fn put(part: &PartialFile, index: u32, data: &[u8], digest: &Digest) -> ChunkOutcome {
    let mut pieces = Vec::new();
    let piece = part.piece();
    match VerifiedChunk::check_keeping(part.entry(), index, data, digest, piece, &mut pieces) {
        None => ChunkOutcome::Bad,
        Some(chunk) => match part.put_keeping(&chunk, pieces) {
            Ok(()) => ChunkOutcome::Good,
            Err(e) => ChunkOutcome::Failed(e.to_string()),
        },
    }
}

/// What the peer hears of a refused entry.
fn refusal(e: ReceiveError) -> Refusal {
    let code = match e {
        ReceiveError::BadPath(_) | ReceiveError::SymlinkInPath(_) => ErrorCode::BadPath,
        _ => ErrorCode::Io,
    };
    Refusal {
        code,
        message: e.to_string(),
    }
}

/// Runs `op`; when a non-empty directory is in the way of `path` and the
/// transfer replaces directories (`--force`, `--delete`), removes it and
/// runs `op` once more.
fn replacing<T>(
    dest: &Destination,
    replace: bool,
    path: &str,
    op: impl Fn() -> Result<T, ReceiveError>,
) -> Result<T, ReceiveError> {
    match op() {
        Err(ReceiveError::DirInTheWay(_)) if replace => {
            dest.replace_dir(path)?;
            op()
        }
        other => other,
    }
}
