//! The receiving half of a transfer on one connection.
//!
//! A node receiving a push just answers offers. A pulling client also drives:
//! it sends `Want`s from a shared [`WorkQueue`], a window at a time, and asks
//! for the commit (`Finish`) when the last range of a split file verified.
//! Every chunk is verified before it is written; nothing gets its final name
//! before the whole-file hash matched.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use haul_engine::{
    ChunkVerdict, Destination, Event, Observer, PartialFile, Prepared, ReceiveError,
};
use haul_proto::{ChunkHeader, Entry, ErrorCode, Message};
use haul_transport::{FrameReader, FrameWriter};

use crate::buffers::ChunkBuffers;
use crate::jobs::{FetchJob, WorkQueue};

mod commit;
use crate::chunk_work::{ChunkWork, InlinePolicy};
use crate::keepalive;
use crate::peer_text::without_root;
use crate::NodeError;
use commit::{commit_all, CommitItem};

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
    pub idle: std::time::Duration,
    /// Where large chunks are verified and written ([`ChunkWork::for_this_machine`]).
    pub chunk_work: ChunkWork,
    /// Chunk buffers, under the process's memory budget.
    pub buffers: Arc<ChunkBuffers>,
}

/// Offers open at once on one connection, at most.
const MAX_OPEN: usize = 4096;
/// Large chunk writes that may overlap with receiving the next chunk.
const WRITES_IN_FLIGHT: usize = 2;
/// Batches of at least this many commits use one `syncfs(2)`.
const GROUP_COMMIT: usize = 8;
/// Chunks up to this size are verified and written inline.
const INLINE_WRITE: usize = 256 << 10;

/// A chunk write on a blocking thread: its file id, chunk index and verdict
/// (the buffer goes back to the pool from that thread).
type PendingWrite = tokio::task::JoinHandle<(u32, u32, Result<ChunkVerdict, ReceiveError>)>;

/// A batch of commits running on a blocking thread while the connection
/// goes on receiving: the batch, then each file's result.
type RunningCommit = tokio::task::JoinHandle<(Vec<CommitItem>, Vec<CommitResult>)>;
type CommitResult = Result<haul_proto::Digest, ReceiveError>;

struct Open {
    part: Option<Arc<PartialFile>>,
    entry: Entry,
    first: u32,
    end: u32,
    bad: Vec<u32>,
    error: Option<String>,
    /// Payload bytes received for it on this connection.
    received: u64,
}

/// How a fetching receiver ended when its connection broke.
pub struct Interrupted {
    /// What broke.
    pub error: NodeError,
    /// Jobs to give back to the queue.
    pub unfinished: Vec<FetchJob>,
}

/// Runs the receiver until the sender says `Bye` (push) or, when `wants` is
/// given, until every job of the queue is done.
pub async fn run_receiver(
    mut reader: FrameReader,
    mut writer: FrameWriter,
    wants: Option<Arc<WorkQueue<FetchJob>>>,
    ctx: ReceiverCtx,
) -> Result<(), Interrupted> {
    let mut r = Receiver {
        open: HashMap::new(),
        asked: HashMap::new(),
        next_id: 1,
        pending: VecDeque::new(),
        commits: Vec::new(),
        committing: None,
        fetching: wants.is_some(),
        writes: InlinePolicy::new(ctx.chunk_work),
        ctx,
    };
    r.ctx.dest.session_started();
    let result = r.run(&mut reader, &mut writer, wants.as_deref()).await;
    // A batch still committing (the connection broke) finishes its files,
    // and files whose Commit arrived are committed — they verified and the
    // sender asked for it; a retry then finds them in place — before the
    // session ends and directory metadata is applied.
    if let Some(running) = r.committing.take() {
        let _ = running.await;
    }
    if !r.commits.is_empty() {
        let (dest, batch) = (r.ctx.dest.clone(), std::mem::take(&mut r.commits));
        let _ = tokio::task::spawn_blocking(move || commit_all(&dest, &batch)).await;
    }
    r.ctx.dest.session_ended();
    result.map_err(|error| Interrupted {
        error,
        unfinished: r.asked.into_values().collect(),
    })
}

struct Receiver {
    open: HashMap<u32, Open>,
    /// Wants sent and not yet finished (pulling client).
    asked: HashMap<u32, FetchJob>,
    next_id: u32,
    /// Chunk writes running on blocking threads, oldest first.
    pending: VecDeque<PendingWrite>,
    /// True for a pulling client: it accepts only offers it asked for.
    fetching: bool,
    /// Files whose commit arrived, to run as the next batch.
    commits: Vec<CommitItem>,
    /// The batch being committed, if any (one at a time).
    committing: Option<RunningCommit>,
    /// Whether large chunks are written inline or on threads.
    writes: InlinePolicy,
    ctx: ReceiverCtx,
}

impl Receiver {
    async fn run(
        &mut self,
        rd: &mut FrameReader,
        w: &mut FrameWriter,
        wants: Option<&WorkQueue<FetchJob>>,
    ) -> Result<(), NodeError> {
        let mut retiring = false;
        loop {
            if self.committing.as_ref().is_some_and(|c| c.is_finished()) {
                self.finish_commits(w).await?;
            }
            if let Some(queue) = wants {
                if !retiring && queue.should_retire() {
                    retiring = true;
                }
                while !retiring && self.asked.len() < self.ctx.window {
                    let busy: Vec<usize> = self
                        .asked
                        .values()
                        .filter_map(|j| j.group.as_ref().map(|g| Arc::as_ptr(g) as usize))
                        .collect();
                    let Some(job) = queue.try_take(&busy) else {
                        break;
                    };
                    let id = self.next_id;
                    self.next_id += 1;
                    w.queue(&Message::Want {
                        id,
                        path: job.path.clone(),
                        dest: job.entry.path.clone(),
                        first: job.first,
                        end: job.end,
                    })
                    .await?;
                    self.asked.insert(id, job);
                }
                if self.asked.is_empty() {
                    if retiring || queue.is_drained() {
                        w.send(&Message::Bye).await?;
                        let mut last = rd.recv().await?;
                        while last == Message::KeepAlive {
                            last = rd.recv().await?;
                        }
                        return match last {
                            Message::Bye => Ok(()),
                            other => {
                                Err(NodeError::Protocol(format!("expected Bye, got {other:?}")))
                            }
                        };
                    }
                    w.flush().await?;
                    queue.wait().await;
                    continue;
                }
            }
            let msg = match rd.try_buffered()? {
                Some(m) => m,
                None => {
                    self.settle_all().await?;
                    self.start_commits();
                    w.flush().await?;
                    match self.next_message(rd, w).await? {
                        Some(m) => m,
                        // A batch committed: its window slots are free to refill.
                        None => continue,
                    }
                }
            };
            if self.handle(rd, w, msg).await? {
                return Ok(());
            }
        }
    }

    fn full_path(&self, path: &str) -> String {
        match (self.ctx.prefix.is_empty(), path.is_empty()) {
            (true, _) => path.to_owned(),
            (false, true) => self.ctx.prefix.clone(),
            (false, false) => format!("{}/{}", self.ctx.prefix, path),
        }
    }

    /// Ends an entry: reports it, forgets it, frees its Want slot.
    fn settle(&mut self, id: u32, event: Event) {
        self.open.remove(&id);
        self.asked.remove(&id);
        self.ctx.observer.event(&event);
    }

    async fn refuse_entry(
        &mut self,
        w: &mut FrameWriter,
        id: u32,
        path: &str,
        err: &ReceiveError,
    ) -> Result<(), NodeError> {
        let code = match err {
            ReceiveError::BadPath(_) | ReceiveError::SymlinkInPath(_) => ErrorCode::BadPath,
            _ => ErrorCode::Io,
        };
        tracing::debug!("refused {path:?}: {err}");
        w.queue(&Message::FileError {
            id,
            code,
            message: without_root(Some(self.ctx.dest.root()), err.to_string()),
        })
        .await?;
        self.settle(
            id,
            Event::FileError {
                path: path.to_owned(),
                error: err.to_string(),
            },
        );
        Ok(())
    }

    async fn handle(
        &mut self,
        rd: &mut FrameReader,
        w: &mut FrameWriter,
        msg: Message,
    ) -> Result<bool, NodeError> {
        if !matches!(msg, Message::Chunk(_)) {
            // Verdicts of chunks in flight must be known before any other step.
            self.settle_all().await?;
        }
        match msg {
            Message::Offer {
                id,
                mut entry,
                first,
                end,
            } => {
                if self.open.len() >= MAX_OPEN {
                    return Err(NodeError::Protocol(format!(
                        "more than {MAX_OPEN} files offered at once"
                    )));
                }
                if self.fetching {
                    // A fetching receiver accepts only what it asked for.
                    let asked = self.asked.get(&id);
                    let matches = asked.is_some_and(|j| {
                        j.entry.path == entry.path && entry.kind == haul_proto::EntryKind::File
                    });
                    if !matches {
                        return Err(NodeError::Protocol(format!(
                            "offer {id} ({:?}) was not asked for",
                            entry.path
                        )));
                    }
                }
                entry.path = self.full_path(&entry.path);
                self.offer(w, id, entry, first, end).await?;
            }
            Message::Chunk(h) => self.chunk(rd, h).await?,
            Message::RangeEnd { id } => self.range_end(w, id).await?,
            Message::Commit { id, root } => {
                let Some(o) = self.open.get(&id) else {
                    return Err(NodeError::Protocol(format!(
                        "Commit for unknown file id {id}"
                    )));
                };
                // Committed in a batch before the next blocking read, so the
                // fsyncs of many small files overlap.
                self.commits.push((id, o.part.clone(), root));
            }
            Message::FileError { id, message, .. } => {
                let path = self
                    .open
                    .get(&id)
                    .map(|o| o.entry.path.clone())
                    .or_else(|| self.asked.get(&id).map(|j| j.entry.path.clone()))
                    .unwrap_or_default();
                self.settle(
                    id,
                    Event::FileError {
                        path,
                        error: format!("sender: {message}"),
                    },
                );
            }
            Message::Release { id } => {
                self.open.remove(&id);
            }
            Message::KeepAlive => {}
            Message::Bye => {
                if !self.asked.is_empty() {
                    return Err(NodeError::Protocol(format!(
                        "the sender said Bye with {} file(s) still asked for",
                        self.asked.len()
                    )));
                }
                self.drain_commits(w).await?;
                w.send(&Message::Bye).await?;
                return Ok(true);
            }
            Message::Refused { code, message } => return Err(NodeError::Refused { code, message }),
            other => {
                return Err(NodeError::Protocol(format!(
                    "unexpected {other:?} at the receiver"
                )))
            }
        }
        Ok(false)
    }

    async fn offer(
        &mut self,
        w: &mut FrameWriter,
        id: u32,
        entry: Entry,
        first: u32,
        end: u32,
    ) -> Result<(), NodeError> {
        let path = entry.path.clone();
        if let Some(made) = self.ctx.dest.make_dir_or_link(&entry) {
            match made {
                Ok(()) => {
                    w.queue(&Message::Done {
                        id,
                        ok: true,
                        root: [0; 32],
                        message: String::new(),
                    })
                    .await?;
                    self.settle(id, Event::made(path));
                }
                Err(e) => self.refuse_entry(w, id, &path, &e).await?,
            }
            return Ok(());
        }
        let count = entry.chunk_count();
        if first > end || end > count {
            return Err(NodeError::Protocol(format!(
                "offer range {first}..{end} outside 0..{count}"
            )));
        }
        // The quick check applies to a range too: a split file already in
        // place is skipped range by range (the sender reports it once).
        let dest = self.ctx.dest.clone();
        let prepared = if entry.size <= INLINE_WRITE as u64 {
            dest.prepare_file(&entry, true)
        } else {
            // Reopening a large partial re-verifies what it holds: that can
            // take longer than the peer's idle timeout.
            let e = entry.clone();
            let every = keepalive::interval(self.ctx.idle);
            keepalive::while_keeping_alive(w, every, move || dest.prepare_file(&e, true)).await?
        };
        if let Ok(Prepared::UpToDate) = prepared {
            w.queue(&Message::Need {
                id,
                skip: true,
                have: Vec::new(),
            })
            .await?;
            w.queue(&Message::Done {
                id,
                ok: true,
                root: [0; 32],
                message: String::new(),
            })
            .await?;
            self.settle(id, Event::up_to_date(path, entry.size));
            return Ok(());
        }
        let opened = prepared.and_then(|p| match p {
            Prepared::Receive(part) => Ok(part),
            Prepared::UpToDate => Err(ReceiveError::BadOffer("unreachable".into())),
        });
        match opened {
            Ok(part) => {
                let have = part.have(first, end);
                w.queue(&Message::Need {
                    id,
                    skip: false,
                    have,
                })
                .await?;
                if first == 0 {
                    self.ctx.observer.event(&Event::FileStart {
                        path,
                        size: entry.size,
                    });
                }
                self.open.insert(
                    id,
                    Open {
                        part: Some(part),
                        entry,
                        first,
                        end,
                        bad: Vec::new(),
                        received: 0,
                        error: None,
                    },
                );
            }
            Err(e) => self.refuse_entry(w, id, &path, &e).await?,
        }
        Ok(())
    }

    async fn chunk(&mut self, rd: &mut FrameReader, h: ChunkHeader) -> Result<(), NodeError> {
        let Some(o) = self.open.get_mut(&h.id) else {
            return Err(NodeError::Protocol(format!(
                "chunk for unknown file id {}",
                h.id
            )));
        };
        if h.index < o.first || h.index >= o.end || h.len != o.entry.chunk_len(h.index) {
            return Err(NodeError::Protocol(format!(
                "chunk {} ({} bytes) does not fit {} ({}..{})",
                h.index, h.len, o.entry.path, o.first, o.end
            )));
        }
        // Charged to the budget before any payload byte is read; filled as
        // the bytes arrive.
        let mut buf = self.ctx.buffers.take(h.len as usize).await;
        rd.recv_payload(buf.vec(), h.len as usize).await?;
        o.received += u64::from(h.len);
        // Every payload byte that crossed the network counts, good or bad.
        self.ctx.observer.event(&Event::Progress {
            path: o.entry.path.clone(),
            bytes: u64::from(h.len),
        });
        let part = match (&o.error, &o.part) {
            (None, Some(part)) => part.clone(),
            _ => return Ok(()),
        };
        if buf.len() <= INLINE_WRITE {
            let verdict = part.write_chunk(h.index, &buf, &h.digest);
            drop(buf);
            self.apply(h.id, h.index, verdict);
            return Ok(());
        }
        if self.writes.inline(buf.len()) {
            let started = std::time::Instant::now();
            let verdict = part.write_chunk(h.index, &buf, &h.digest);
            if self.writes.took(buf.len(), started.elapsed()) {
                tracing::debug!("chunk writes are slow: writing on blocking threads from now on");
            }
            drop(buf);
            self.apply(h.id, h.index, verdict);
            return Ok(());
        }
        // Large chunks: verify and write on a blocking thread while the next
        // chunk arrives from the socket.
        while self.pending.len() >= WRITES_IN_FLIGHT {
            self.settle_one().await?;
        }
        let (id, index, digest) = (h.id, h.index, h.digest);
        self.pending.push_back(tokio::task::spawn_blocking(move || {
            let verdict = part.write_chunk(index, &buf, &digest);
            drop(buf);
            (id, index, verdict)
        }));
        Ok(())
    }

    /// Starts committing the files whose `Commit` arrived, on a blocking
    /// thread, unless a batch is running already (then they wait for the
    /// next one). The connection goes on receiving meanwhile: linking,
    /// setting metadata and syncing one batch overlaps with staging the next.
    fn start_commits(&mut self) {
        if self.committing.is_some() || self.commits.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.commits);
        let dest = self.ctx.dest.clone();
        self.committing = Some(tokio::task::spawn_blocking(move || {
            let results = commit_all(&dest, &batch);
            (batch, results)
        }));
    }

    /// The next message from the peer, or `None` once the running commit
    /// batch finished first (its results are sent). While a batch runs,
    /// keepalives go out so a long sync does not trip the peer's idle limit.
    async fn next_message(
        &mut self,
        rd: &mut FrameReader,
        w: &mut FrameWriter,
    ) -> Result<Option<Message>, NodeError> {
        let Some(running) = self.committing.as_mut() else {
            return Ok(Some(rd.recv().await?));
        };
        let every = keepalive::interval(self.ctx.idle);
        let done = loop {
            // `recv` is cancel-safe: bytes already read stay buffered.
            tokio::select! {
                msg = rd.recv() => return Ok(Some(msg?)),
                done = &mut *running => break done,
                _ = tokio::time::sleep(every) => w.send(&Message::KeepAlive).await?,
            }
        };
        self.committing = None;
        self.report_commits(w, done).await?;
        Ok(None)
    }

    /// Waits for every commit, running or waiting, and sends the results.
    async fn drain_commits(&mut self, w: &mut FrameWriter) -> Result<(), NodeError> {
        let every = keepalive::interval(self.ctx.idle);
        loop {
            self.start_commits();
            let Some(running) = self.committing.as_mut() else {
                return Ok(());
            };
            let done = loop {
                tokio::select! {
                    done = &mut *running => break done,
                    _ = tokio::time::sleep(every) => w.send(&Message::KeepAlive).await?,
                }
            };
            self.committing = None;
            self.report_commits(w, done).await?;
        }
    }

    /// Takes the running batch's results (waiting for it if need be) and
    /// reports them.
    async fn finish_commits(&mut self, w: &mut FrameWriter) -> Result<(), NodeError> {
        let Some(running) = self.committing.take() else {
            return Ok(());
        };
        let done = running.await;
        self.report_commits(w, done).await
    }

    /// Starts the next batch, then answers `Done` for each file of the
    /// finished one.
    async fn report_commits(
        &mut self,
        w: &mut FrameWriter,
        done: Result<(Vec<CommitItem>, Vec<CommitResult>), tokio::task::JoinError>,
    ) -> Result<(), NodeError> {
        let (batch, results) =
            done.map_err(|e| NodeError::Internal(format!("commit worker stopped: {e}")))?;
        self.start_commits();
        for ((id, _, _), result) in batch.iter().zip(results) {
            self.report_commit(w, *id, result).await?;
        }
        Ok(())
    }

    /// Answers `Done` for one committed file and settles it.
    async fn report_commit(
        &mut self,
        w: &mut FrameWriter,
        id: u32,
        result: CommitResult,
    ) -> Result<(), NodeError> {
        let Some(o) = self.open.get(&id) else {
            return Ok(());
        };
        let (path, size, received) = (o.entry.path.clone(), o.entry.size, o.received);
        match result {
            Ok(root) => {
                w.queue(&Message::Done {
                    id,
                    ok: true,
                    root,
                    message: String::new(),
                })
                .await?;
                tracing::debug!(
                    "received {path} ({size} bytes, blake3 {})",
                    hex::encode(root)
                );
                let event = Event::FileDone {
                    path,
                    size,
                    blake3: hex::encode(root),
                    sent: received,
                    skipped: false,
                };
                self.settle(id, event);
            }
            Err(e) => {
                w.queue(&Message::Done {
                    id,
                    ok: false,
                    root: [0; 32],
                    message: without_root(Some(self.ctx.dest.root()), e.to_string()),
                })
                .await?;
                let event = Event::FileError {
                    path,
                    error: e.to_string(),
                };
                self.settle(id, event);
            }
        }
        Ok(())
    }

    /// Waits for the oldest chunk write and records its verdict.
    async fn settle_one(&mut self) -> Result<(), NodeError> {
        let Some(handle) = self.pending.pop_front() else {
            return Ok(());
        };
        let (id, index, verdict) = handle
            .await
            .map_err(|e| NodeError::Internal(format!("chunk writer stopped: {e}")))?;
        self.apply(id, index, verdict);
        Ok(())
    }

    async fn settle_all(&mut self) -> Result<(), NodeError> {
        while !self.pending.is_empty() {
            self.settle_one().await?;
        }
        Ok(())
    }

    fn apply(&mut self, id: u32, index: u32, verdict: Result<ChunkVerdict, ReceiveError>) {
        let Some(o) = self.open.get_mut(&id) else {
            return;
        };
        match verdict {
            Ok(ChunkVerdict::Good) => {}
            Ok(ChunkVerdict::Bad) => {
                tracing::warn!(
                    "chunk {index} of {} failed verification; asking again",
                    o.entry.path
                );
                o.bad.push(index);
            }
            Err(e) => o.error = Some(e.to_string()),
        }
    }

    async fn range_end(&mut self, w: &mut FrameWriter, id: u32) -> Result<(), NodeError> {
        let Some(o) = self.open.get_mut(&id) else {
            return Err(NodeError::Protocol(format!(
                "RangeEnd for unknown file id {id}"
            )));
        };
        if let Some(error) = o.error.take() {
            let path = o.entry.path.clone();
            w.queue(&Message::FileError {
                id,
                code: ErrorCode::Io,
                message: without_root(Some(self.ctx.dest.root()), error.clone()),
            })
            .await?;
            self.settle(id, Event::FileError { path, error });
            return Ok(());
        }
        let bad = std::mem::take(&mut o.bad);
        let clean = bad.is_empty();
        w.queue(&Message::RangeStatus { id, bad }).await?;
        let whole = o.first == 0 && o.end == o.entry.chunk_count();
        if !clean || whole {
            return Ok(());
        }
        // A clean range of a split file. When pulling, the last one asks for the commit.
        let first = o.first;
        match self.asked.get(&id).and_then(|j| j.group.clone()) {
            Some(group) if group.finish_range(first) => w.queue(&Message::Finish { id }).await?,
            Some(_) => {
                self.open.remove(&id);
                self.asked.remove(&id);
                w.queue(&Message::Release { id }).await?;
            }
            // Pushed range: the sender commits on whichever connection ends
            // last, and releases the others.
            None => {}
        }
        Ok(())
    }
}
