//! Drives a [`Sender`] session over a connection: feeds it jobs (a pushing
//! client's queue) or answers its `Resolve`s (a serving node), reads and
//! hashes chunks (inline or on blocking threads), sends what it transmits,
//! owns its timer. Protocol decisions are the session's.

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use haul_engine::attrs::AttrReader;
use haul_engine::haul_root::Root;
use haul_engine::source::open_to_send;
use haul_engine::{ChunkRead, ChunkSource, Confirmation};
use haul_proto::{ChunkHeader, Digest, Entry, Message};
use haul_session::{Event, Observer};
use haul_session::{FileId, Sealer, Sender, SenderIo, SessionConfig, Transmit};
use haul_transport::{MessageReader, MessageWriter, Payload, TransportError};
use tokio::sync::mpsc;

use crate::buffers::{ChunkBuf, ChunkBuffers};
use crate::chunk_work::{ChunkWork, InlinePolicy};
use crate::drive::{read_want, Interrupted};
use crate::jobs::{SendJob, Source, WorkQueue};
use crate::stripe_vouch::{StripeSource, StripeVouchers};
use crate::NodeError;

/// Where a sender's jobs come from.
pub enum JobFeed {
    /// A pushing client's shared queue.
    Queue(Arc<WorkQueue<SendJob>>),
    /// A serving node: the peer's `Want`s name files under `root`.
    Wants {
        /// The served root, held.
        root: Root,
        /// What each offered entry carries beyond mode and mtime (the
        /// peer's `Fetch{keep}`).
        attrs: AttrReader,
    },
}

/// Settings of a sender.
#[derive(Clone)]
pub struct SenderCtx {
    /// Where events go.
    pub observer: Arc<dyn Observer>,
    /// Offers in flight at most.
    pub window: usize,
    /// Times a chunk range may fail verification before the file fails.
    pub max_retries: u32,
    /// Longest wait for the peer.
    pub idle: Duration,
    /// Where large chunks are read and hashed ([`ChunkWork::for_this_machine`]).
    pub chunk_work: ChunkWork,
    /// Chunk buffers, under the process's memory budget.
    pub buffers: Arc<ChunkBuffers>,
    /// Fan-out: what seals every offer and chunk ([`haul_session::seals`]).
    pub sealer: Option<Arc<dyn Sealer>>,
    /// Times a pushed file that changed while it was read is sent again
    /// (`--retries`).
    pub changed_retries: u32,
    /// A striped fan-out's client: the stripes of each file its sends
    /// share, vouched for once all held still (a stripe's source waits for
    /// the others: [`crate::stripe_vouch`]).
    pub stripes: Option<Arc<StripeVouchers>>,
    /// A fan-out's sending edge: kept alive every heartbeat, busy or not
    /// ([`super::relayed_heartbeat`]).
    pub heartbeat: Option<haul_session::Heartbeat>,
}

impl SenderCtx {
    /// A client's sender with `opts`' settings, reporting to `observer`.
    pub fn for_client(
        opts: &crate::ClientOptions,
        observer: &Arc<impl Observer + 'static>,
        buffers: Arc<ChunkBuffers>,
    ) -> Self {
        Self {
            observer: observer.clone(),
            window: opts.window,
            max_retries: opts.max_retries,
            idle: opts.timeouts.idle,
            chunk_work: opts.chunk_work,
            buffers,
            sealer: None,
            changed_retries: opts.retry.retries,
            stripes: None,
            heartbeat: None,
        }
    }

    /// The same, sealing with `sealer`, over a fan-out's sending edge (a
    /// fan-out's client or relay): kept alive every heartbeat.
    pub fn sealed(self, sealer: Arc<dyn Sealer>) -> Self {
        Self {
            sealer: Some(sealer),
            heartbeat: Some(super::relayed_heartbeat()),
            ..self
        }
    }
    /// A striped fan-out's client: sealing with `vouchers`, which vouch for
    /// each striped file once its stripes, across the client's sends, were
    /// all confirmed as one version.
    pub fn striped(self, vouchers: Arc<StripeVouchers>) -> Self {
        Self {
            sealer: Some(vouchers.clone()),
            stripes: Some(vouchers),
            heartbeat: Some(super::relayed_heartbeat()),
            ..self
        }
    }
}

/// What a wait ended with.
enum Picked {
    Msg(Option<Result<Message, TransportError>>),
    Done(Done),
    Timer,
    Queue,
}

/// Messages handled before pending I/O results and timers get a turn.
const BATCH: usize = 64;

/// A chunk read and hashed, waiting to go out.
enum Held {
    /// Its bytes.
    Bytes(ChunkBuf),
    /// A range of the source's file (sent without a copy).
    Range(Arc<dyn ChunkSource>, u64, usize),
}

/// A file open on this connection.
#[derive(Clone)]
struct OpenFile {
    entry: Entry,
    source: Arc<dyn ChunkSource>,
    /// Its local path, for messages (a node's texts to its peer drop the root).
    shown: std::path::PathBuf,
}

/// What a blocking task finished.
enum Done {
    Read(FileId, u32, Result<(ChunkRead, Held), String>),
    Hash(FileId, Result<Vec<(u32, Digest)>, String>),
    /// A source's chunk became ready (a file still being received).
    Ready,
}

/// Runs the sender until its work is done and the peer said `Bye`.
pub async fn run_sender(
    reader: Box<dyn MessageReader>,
    writer: Box<dyn MessageWriter>,
    feed: JobFeed,
    ctx: SenderCtx,
) -> Result<(), Interrupted<SendJob>> {
    let now = Instant::now();
    let root = match &feed {
        JobFeed::Wants { root, .. } => Some(root.path().display().to_string()),
        JobFeed::Queue(_) => None,
    };
    let cfg = SessionConfig {
        window: ctx.window,
        idle: ctx.idle,
        max_retries: ctx.max_retries,
        changed_retries: ctx.changed_retries,
        hide: root,
        heartbeat: ctx.heartbeat,
        ..SessionConfig::default()
    };
    let mut session = match feed {
        JobFeed::Queue(_) => Sender::push(cfg, now),
        JobFeed::Wants { .. } => Sender::serve(cfg, now),
    };
    if let Some(sealer) = &ctx.sealer {
        session.seal_with(sealer.clone());
    }
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let mut d = Driver {
        session,
        w: writer,
        reads: InlinePolicy::new(ctx.chunk_work),
        ctx,
        files: HashMap::default(),
        held: HashMap::default(),
        waiting: VecDeque::new(),
        hashes: Vec::new(),
        confirms: Vec::new(),
        running: 0,
        done_tx,
        woken: std::collections::HashSet::new(),
        now,
        heard: false,
    };
    let (tx, mut rx) = mpsc::channel(4096);
    let reader_task = AbortOnDrop(tokio::spawn(forward(reader, tx)));
    let result = match d.run(&feed, &mut rx, done_rx).await {
        Err(e) if !d.heard => {
            let first = async { rx.recv().await?.ok() };
            Err(super::refusal_or(e, first).await)
        }
        r => r,
    };
    drop(reader_task);
    // What the session learned before the connection ended (a `Done` read
    // just before it broke or was handed back) is told, not dropped with
    // it: that file is delivered, and it is no longer among the unfinished.
    while let Some(e) = d.session.poll_event() {
        d.ctx.observer.event(&e);
    }
    result.map_err(|error| Interrupted {
        error,
        unfinished: d.session.into_unfinished(),
    })
}

/// The connection's reader task, stopped however the send ends — also
/// when the send itself is dropped (a relay's forward re-routed away is
/// aborted): a reader left running would hold the connection open, and the
/// peer would wait out its idle limit in the middle of a chunk.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Reads the peer's messages and forwards them: neither side can then
/// block the other (the session's timer bounds every wait).
async fn forward(
    mut reader: Box<dyn MessageReader>,
    tx: mpsc::Sender<Result<Message, TransportError>>,
) {
    reader.set_idle(Duration::from_secs(24 * 3600));
    let mut batch = Vec::new();
    loop {
        let got = reader.recv_many(&mut batch, 256).await;
        for msg in batch.drain(..) {
            if tx.send(Ok(msg)).await.is_err() {
                return;
            }
        }
        if let Err(e) = got {
            let _ = tx.send(Err(e)).await;
            return;
        }
    }
}

struct Driver {
    session: Sender<Source>,
    w: Box<dyn MessageWriter>,
    reads: InlinePolicy,
    ctx: SenderCtx,
    /// Each file's entry and open source.
    files: HashMap<FileId, Arc<OpenFile>>,
    /// Chunks read, waiting to be sent: their bytes (or range), and
    /// whether their digest came from a hash-cache record (said on the
    /// wire, [`ChunkHeader::from_record`]).
    held: HashMap<(FileId, u32), (Held, bool)>,
    /// Reads waiting for a buffer.
    waiting: VecDeque<(FileId, u32)>,
    /// Hashes waiting for their chunks to be ready (a relay's file whose
    /// chunks or seals are still on the way).
    hashes: Vec<(FileId, Vec<u32>, bool)>,
    /// Confirmations waiting for a relay's staging file to be committed
    /// upstream.
    confirms: Vec<FileId>,
    /// Blocking tasks running.
    running: usize,
    done_tx: mpsc::UnboundedSender<Done>,
    /// Files whose source wakes this connection when chunks verify.
    woken: std::collections::HashSet<FileId>,
    /// The time, read once per step (sessions need it in every call).
    now: Instant,
    /// A message from the peer arrived (after it, none is its refusal).
    heard: bool,
}

impl Driver {
    async fn run(
        &mut self,
        feed: &JobFeed,
        rx: &mut mpsc::Receiver<Result<Message, TransportError>>,
        mut done_rx: mpsc::UnboundedReceiver<Done>,
    ) -> Result<(), NodeError> {
        let queue = match feed {
            JobFeed::Queue(q) => Some(q.as_ref()),
            JobFeed::Wants { .. } => None,
        };
        let root = match feed {
            JobFeed::Wants { root, attrs } => Some((root, attrs)),
            JobFeed::Queue(_) => None,
        };
        loop {
            self.now = Instant::now();
            super::hand_back(self.w.as_mut()).await?;
            let starved = match queue {
                Some(q) => self.take_jobs(q),
                None => false,
            };
            self.pump(root).await?;
            if self.session.is_finished() {
                return super::finish(self.w.as_mut()).await;
            }
            // Timers first: a flood of input must not keep them waiting.
            if self.session.poll_timeout().is_some_and(|t| t <= self.now) {
                self.session.handle_timeout(self.now)?;
            }
            // Answer what already arrived before writing (one write then
            // carries many small files), a bounded batch at a time so reads
            // and hashes that finished are not starved.
            let mut took = false;
            for _ in 0..BATCH {
                // The peer's goodbye may come in one burst with the last
                // verdicts, and its connection's end right after: nothing
                // is read past it.
                if self.session.is_finished() {
                    break;
                }
                match rx.try_recv() {
                    Ok(msg) => {
                        self.heard = true;
                        self.session.handle(self.now, msg?)?;
                        took = true;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        return Err(TransportError::Closed.into())
                    }
                    Err(mpsc::error::TryRecvError::Empty) => break,
                }
            }
            while let Ok(done) = done_rx.try_recv() {
                self.completed(done);
                took = true;
            }
            if took {
                continue;
            }
            self.w.flush().await?;
            self.now = Instant::now();
            self.session.flushed(self.now);
            let deadline = self.session.poll_timeout();
            let sleep = deadline.map(|t| tokio::time::sleep_until(t.into()));
            let picked = tokio::select! {
                msg = rx.recv() => Picked::Msg(msg),
                Some(done) = done_rx.recv() => Picked::Done(done),
                () = async { if let Some(s) = sleep { s.await } }, if deadline.is_some() => Picked::Timer,
                () = async { if let Some(q) = queue { q.wait().await } }, if starved => Picked::Queue,
            };
            self.now = Instant::now();
            match picked {
                Picked::Msg(msg) => match msg {
                    Some(msg) => {
                        self.heard = true;
                        self.session.handle(self.now, msg?)?
                    }
                    None => return Err(TransportError::Closed.into()),
                },
                Picked::Done(done) => self.completed(done),
                Picked::Timer => self.session.handle_timeout(self.now)?,
                Picked::Queue => {}
            }
        }
    }

    /// Hands the session jobs while it has room. A file's source is opened
    /// before it is offered: one that cannot be read fails alone, and
    /// nothing goes on the wire.
    fn take_jobs(&mut self, queue: &WorkQueue<SendJob>) -> bool {
        let (files, observer, stripes) = (&mut self.files, &self.ctx.observer, &self.ctx.stripes);
        super::take_jobs(&mut self.session, queue, |s, mut job| {
            let source: Option<Arc<dyn ChunkSource>> = match &job.source {
                _ if job.entry.kind != haul_proto::EntryKind::File => None,
                Source::Open(src) => Some(src.clone()),
                Source::Lazy(open) => match open.clone().open(&job.entry) {
                    Ok(src) => Some(src),
                    Err(e) => {
                        observer.event(&Event::file_error(job.entry.path.clone(), e.to_string()));
                        return;
                    }
                },
                Source::Path(path, data) => {
                    let whole =
                        job.group.is_none() && job.first == 0 && job.end == job.entry.chunk_count();
                    let opened = open_to_send(&mut job.entry, path, data.as_ref(), !whole);
                    match opened {
                        Ok(f) => {
                            // A whole file is sent as it is now.
                            if whole {
                                job.end = job.entry.chunk_count();
                            }
                            // -c's content claim is of the version walked
                            // and hashed: any other is sent as usual.
                            let listed =
                                || haul_engine::source::is_listed_version(&f, data.as_ref());
                            if job.content.is_some() && !listed() {
                                job.content = None;
                            }
                            match stripes {
                                // A stripe of the client's own: confirmed
                                // with the file's other stripes.
                                Some(v) if !whole && job.group.is_none() => {
                                    Some(Arc::new(StripeSource::new(
                                        f,
                                        v.clone(),
                                        job.entry.clone(),
                                        job.first,
                                        job.end,
                                    )))
                                }
                                _ => Some(Arc::new(f)),
                            }
                        }
                        Err(e) => {
                            observer.event(&Event::file_failed(
                                job.entry.path.clone(),
                                e.to_string(),
                                e.fail_kind(),
                            ));
                            return;
                        }
                    }
                }
            };
            let entry = job.entry.clone();
            let shown = match &job.source {
                Source::Path(path, _) => path.clone(),
                Source::Open(_) | Source::Lazy(_) => entry.path.clone().into(),
            };
            let id = s.push_job(self.now, job);
            if let Some(source) = source {
                files.insert(
                    id,
                    Arc::new(OpenFile {
                        entry,
                        source,
                        shown,
                    }),
                );
            }
        })
    }

    /// Does what the session asks: sends its transmits, performs its I/O,
    /// until it asks nothing more right now.
    async fn pump(&mut self, root: Option<(&Root, &AttrReader)>) -> Result<(), NodeError> {
        loop {
            let now = self.now;
            if let Some(t) = self.session.poll_transmit(now) {
                // Between messages, chunk after chunk: where a connection
                // whose transport lost learns it.
                super::hand_back(self.w.as_mut()).await?;
                self.transmit(t).await?;
                continue;
            }
            while let Some(e) = self.session.poll_event() {
                self.ctx.observer.event(&e);
            }
            if let Some(io) = self.session.poll_io() {
                self.perform(io, root).await;
                continue;
            }
            // Reads that waited for a buffer or a chunk may go now.
            if !self.waiting.is_empty() && self.retry_waiting().await {
                continue;
            }
            if !self.hashes.is_empty() && self.retry_hashes() {
                continue;
            }
            if !self.confirms.is_empty() && self.retry_confirms() {
                continue;
            }
            return Ok(());
        }
    }

    async fn transmit(&mut self, t: Transmit) -> Result<(), NodeError> {
        match t {
            Transmit::Message(m) => {
                self.w.push(&m);
                if self.w.batch_full() {
                    self.w.flush().await?;
                }
            }
            Transmit::Chunk(h) => {
                let Some((held, from_record)) = self.held.remove(&(h.id, h.index)) else {
                    return Err(NodeError::Internal(format!(
                        "chunk {} of file {} was not read",
                        h.index, h.id
                    )));
                };
                let h = ChunkHeader { from_record, ..h };
                self.send_chunk(&h, held).await?;
                self.now = Instant::now();
                self.session.flushed(self.now);
            }
        }
        Ok(())
    }

    async fn send_chunk(&mut self, h: &ChunkHeader, held: Held) -> Result<(), NodeError> {
        match held {
            Held::Bytes(buf) if self.w.push_chunk(h, &buf) => {
                if self.w.batch_full() {
                    self.w.flush().await?;
                }
            }
            Held::Bytes(buf) => self.w.send_chunk(h, Payload::Bytes(&buf)).await?,
            Held::Range(source, offset, len) => {
                let Some(file) = source.file() else {
                    return Err(NodeError::Internal(
                        "a file range of a source without a file".into(),
                    ));
                };
                self.w
                    .send_chunk(h, Payload::File { file, offset, len })
                    .await?;
            }
        }
        Ok(())
    }

    async fn perform(&mut self, io: SenderIo, root: Option<(&Root, &AttrReader)>) {
        let now = self.now;
        match io {
            SenderIo::Resolve {
                file,
                path,
                dest,
                first,
                end,
            } => {
                let Some((root, attrs)) = root else {
                    self.session.resolved(
                        now,
                        file,
                        Err((haul_proto::ErrorCode::Protocol, "no root".into())),
                    );
                    return;
                };
                match read_want(root, attrs, &path, &dest, first, end) {
                    Ok((job, source)) => {
                        self.ctx.observer.event(&Event::Resolved {
                            path: job.entry.path.clone(),
                            source: path.clone(),
                        });
                        let open = OpenFile {
                            entry: job.entry.clone(),
                            source,
                            shown: root.path().join(&path),
                        };
                        self.files.insert(file, Arc::new(open));
                        self.session.resolved(now, file, Ok(job));
                    }
                    Err(e) => self.session.resolved(now, file, Err(e)),
                }
            }
            SenderIo::Confirm { file } => self.confirm(file),
            SenderIo::Reopen { file } => self.reopen(file),
            SenderIo::Read { file, index } => self.read(file, index).await,
            SenderIo::Hash {
                file,
                indices,
                sealing,
            } => self.hash(file, indices, sealing),
            SenderIo::Forget { file } => {
                self.files.remove(&file);
                self.woken.remove(&file);
                self.hashes.retain(|(f, _, _)| *f != file);
                self.confirms.retain(|f| *f != file);
                self.held.retain(|(f, _), _| *f != file);
                // Reads that waited are answered all the same: the session
                // counts every request it made until it hears back.
                let (dropped, kept): (VecDeque<_>, VecDeque<_>) =
                    self.waiting.drain(..).partition(|(f, _)| *f == file);
                self.waiting = kept;
                for (f, index) in dropped {
                    self.session.read_done(now, f, index, Err("dropped".into()));
                }
            }
        }
    }

    /// Opens a file that changed while it was read again, as it is now, for
    /// the session to offer from scratch. Only a local file of the client's
    /// own tree can be: an open source has no other version to go to.
    fn reopen(&mut self, file: FileId) {
        let Some(job) = self.session.job(file) else {
            self.session.reopened(
                self.now,
                file,
                Err((haul_run::FailKind::Error, "it is gone".into())),
            );
            return;
        };
        let mut entry = job.entry.clone();
        let Source::Path(path, data) = &job.source else {
            let e = "its source cannot be opened again".to_string();
            self.session
                .reopened(self.now, file, Err((haul_run::FailKind::Error, e)));
            return;
        };
        let shown = path.clone();
        match open_to_send(&mut entry, path, data.as_ref(), false) {
            Ok(source) => {
                let open = OpenFile {
                    entry: entry.clone(),
                    source: Arc::new(source),
                    shown,
                };
                if let Some(id) = self.session.reopened(self.now, file, Ok(entry)) {
                    self.files.insert(id, Arc::new(open));
                }
            }
            Err(e) => {
                self.session
                    .reopened(self.now, file, Err((e.fail_kind(), e.to_string())));
            }
        }
    }

    /// Reads chunk `index` of `file`: inline when cheap, else on a blocking
    /// thread. A read waits (it is retried) when no buffer is to be had
    /// without waiting while this connection holds others, or when the
    /// chunk of a file still being received has not verified yet.
    async fn read(&mut self, file: FileId, index: u32) {
        let Some(open) = self.files.get(&file).cloned() else {
            let e = format!("file {file} is not open");
            self.session.read_done(self.now, file, index, Err(e));
            return;
        };
        let (entry, source) = (&open.entry, &open.source);
        if !source.ready(index) {
            if self.woken.insert(file) {
                let tx = self.done_tx.clone();
                source.on_ready(Arc::new(move || {
                    let _ = tx.send(Done::Ready);
                }));
            }
            // Checked again: it may have verified meanwhile. If not, the
            // session reads other files' chunks until this one wakes.
            if !source.ready(index) {
                self.session.read_not_ready(self.now, file, index);
                return;
            }
        }
        let len = entry.chunk_len(index) as usize;
        let keep = !(source.file().is_some() && self.w.sends_file_ranges(len));
        let need = if keep {
            len
        } else {
            len.min(haul_engine::chunks::HASH_PIECE)
        };
        let holding = !self.held.is_empty() || self.running > 0;
        let buf = if holding {
            match self.ctx.buffers.try_take(need) {
                Some(b) => b,
                None => {
                    self.waiting.push_back((file, index));
                    return;
                }
            }
        } else {
            self.take_keeping_alive(need).await
        };
        let small = len <= 256 << 10;
        if small || self.reads.inline(len, false) {
            let started = Instant::now();
            let result = read_one(&open, index, buf, keep);
            if !small && self.reads.took(len, started.elapsed()) {
                tracing::debug!("chunk reads are slow: reading on blocking threads from now on");
            }
            self.finished(Done::Read(file, index, result));
            return;
        }
        self.running += 1;
        let tx = self.done_tx.clone();
        tokio::task::spawn_blocking(move || {
            let result = read_one(&open, index, buf, keep);
            let _ = tx.send(Done::Read(file, index, result));
        });
    }

    /// A buffer of `need` bytes from the process's budget, waited for as
    /// long as it takes; a fan-out's sending edge keeps its receiver
    /// hearing a keepalive every heartbeat meanwhile (the budget is shared
    /// with the relay's own upstream and its other forwards: a wait here is
    /// no silent path).
    async fn take_keeping_alive(&mut self, need: usize) -> ChunkBuf {
        let buffers = self.ctx.buffers.clone();
        let Some(beat) = self.ctx.heartbeat.map(|h| h.every) else {
            return buffers.take(need).await;
        };
        let take = buffers.take(need);
        tokio::pin!(take);
        loop {
            tokio::select! {
                biased;
                buf = &mut take => return buf,
                () = tokio::time::sleep(beat) => {
                    if self.w.send(&Message::KeepAlive).await.is_err() {
                        // The connection failed (a frame may be cut short):
                        // nothing more goes out on it; the main loop meets
                        // the error at its next write.
                        return take.await;
                    }
                }
            }
        }
    }

    /// Retries waiting reads; true if one went ahead.
    async fn retry_waiting(&mut self) -> bool {
        let before = self.waiting.len();
        for _ in 0..before {
            let Some((file, index)) = self.waiting.pop_front() else {
                break;
            };
            self.read(file, index).await;
        }
        self.waiting.len() < before
    }

    /// Answers the session's [`SenderIo::Confirm`] for `file`: one `fstat`
    /// on a local file's held descriptor (inline); a source that cannot tell
    /// yet ([`Confirmation::Pending`]) is asked again when it wakes.
    fn confirm(&mut self, file: FileId) {
        let Some(open) = self.files.get(&file).cloned() else {
            let e = format!("file {file} is not open");
            self.session
                .confirmed(self.now, file, Err((haul_run::FailKind::Error, e)));
            return;
        };
        let result = match open.source.confirm() {
            Confirmation::Unchanged => Ok(()),
            Confirmation::Changed(change) => Err((haul_run::FailKind::Changed, change)),
            Confirmation::Gone(how) => Err((haul_run::FailKind::Vanished, how)),
            Confirmation::Pending => {
                if self.woken.insert(file) {
                    let tx = self.done_tx.clone();
                    open.source.on_ready(Arc::new(move || {
                        let _ = tx.send(Done::Ready);
                    }));
                }
                // Asked again: it may have settled meanwhile.
                match open.source.confirm() {
                    Confirmation::Unchanged => Ok(()),
                    Confirmation::Changed(change) => Err((haul_run::FailKind::Changed, change)),
                    Confirmation::Gone(how) => Err((haul_run::FailKind::Vanished, how)),
                    Confirmation::Pending => {
                        // Asked again because it woke: what it waits for
                        // moved, so its deadline counts from now.
                        self.session.confirm_progressed(self.now, file);
                        self.confirms.push(file);
                        return;
                    }
                }
            }
        };
        self.session.confirmed(self.now, file, result);
    }

    /// Asks again for the confirmations that waited; true if one settled.
    fn retry_confirms(&mut self) -> bool {
        let before = self.confirms.len();
        for file in std::mem::take(&mut self.confirms) {
            self.confirm(file);
        }
        self.confirms.len() < before
    }

    /// Retries hashes that waited for their chunks; true if one went ahead.
    fn retry_hashes(&mut self) -> bool {
        let before = self.hashes.len();
        for (file, indices, sealing) in std::mem::take(&mut self.hashes) {
            self.hash(file, indices, sealing);
        }
        self.hashes.len() < before
    }

    fn hash(&mut self, file: FileId, indices: Vec<u32>, sealing: bool) {
        let Some(open) = self.files.get(&file).cloned() else {
            let e = format!("file {file} is not open");
            self.session.hashed(self.now, file, Err(e));
            return;
        };
        if !indices.iter().all(|&i| open.source.ready(i)) {
            if self.woken.insert(file) {
                let tx = self.done_tx.clone();
                open.source.on_ready(Arc::new(move || {
                    let _ = tx.send(Done::Ready);
                }));
            }
            if !indices.iter().all(|&i| open.source.ready(i)) {
                self.hashes.push((file, indices, sealing));
                return;
            }
        }
        self.running += 1;
        let tx = self.done_tx.clone();
        tokio::task::spawn_blocking(move || {
            let mut buf = Vec::new();
            let result = indices
                .into_iter()
                .map(|i| {
                    let digest = if sealing {
                        open.source.seal_digest(&open.entry, i, &mut buf)
                    } else {
                        open.source.hash_chunk(&open.entry, i, &mut buf)
                    };
                    digest.map(|d| (i, d)).map_err(|e| {
                        let offset = u64::from(i) * u64::from(open.entry.chunk_size);
                        format!("cannot read {} at {offset}: {e}", open.shown.display())
                    })
                })
                .collect();
            let _ = tx.send(Done::Hash(file, result));
        });
    }

    /// A blocking task's result (or a wake-up) arrived.
    fn completed(&mut self, done: Done) {
        if !matches!(done, Done::Ready) {
            self.running = self.running.saturating_sub(1);
        }
        self.finished(done);
    }

    fn finished(&mut self, done: Done) {
        let now = self.now;
        match done {
            Done::Read(file, index, result) => {
                let digest = result.map(|(read, held)| {
                    // A file forgotten meanwhile: its bytes (and buffer) go.
                    if self.files.contains_key(&file) {
                        self.held.insert((file, index), (held, read.from_record));
                    }
                    read.digest
                });
                self.session.read_done(now, file, index, digest);
            }
            Done::Hash(file, result) => self.session.hashed(now, file, result),
            Done::Ready => self.session.sources_ready(),
        }
    }
}

fn read_one(
    open: &OpenFile,
    index: u32,
    mut buf: ChunkBuf,
    keep: bool,
) -> Result<(ChunkRead, Held), String> {
    let (entry, source) = (&open.entry, &open.source);
    let read = source
        .read_chunk(entry, index, buf.vec(), keep)
        .map_err(|e| read_error(entry, &open.shown, index, &e))?;
    let held = if keep {
        Held::Bytes(buf)
    } else {
        let offset = u64::from(index) * u64::from(entry.chunk_size);
        Held::Range(source.clone(), offset, entry.chunk_len(index) as usize)
    };
    Ok((read, held))
}

fn read_error(entry: &Entry, shown: &std::path::Path, index: u32, e: &std::io::Error) -> String {
    let offset = u64::from(index) * u64::from(entry.chunk_size);
    format!(
        "cannot read {} at {offset}: {e} (did it shrink while sending?)",
        shown.display()
    )
}
