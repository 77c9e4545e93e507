//! The sending half of a transfer on one connection.
//!
//! Jobs come from a shared [`WorkQueue`] (a pushing client) or from the
//! peer's `Want`s (a node serving a pull). Up to `window` offers are in flight
//! so small files do not pay a round trip each. A reader task drains the
//! peer's messages so neither side can block the other.

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use haul_engine::hash::root_from_digests;
use haul_engine::{Event, Observer};
use haul_proto::{ChunkHeader, Digest, EntryKind, ErrorCode, Message};
use haul_transport::{FrameReader, FrameWriter, TransportError};
use tokio::sync::mpsc;

use crate::chunk_work::{ChunkWork, InlinePolicy};
use crate::jobs::{SendJob, WorkQueue};
use crate::peer_text::without_root;

mod read;
use crate::buffers::{ChunkBuf, ChunkBuffers};
use crate::keepalive;
use crate::NodeError;
use read::{hash_job, read_and_hash, read_chunk, want_job, HASH_PIECE};

/// Where a sender's jobs come from.
pub enum JobFeed {
    /// A pushing client's shared queue.
    Queue(Arc<WorkQueue<SendJob>>),
    /// A serving node: the peer's `Want`s name files under `root`.
    Wants {
        /// The served root, held.
        root: haul_engine::haul_root::Root,
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
}

/// The buffer a chunk of `len` bytes is read through: the whole chunk when
/// its bytes are sent from memory (`keep`), else one hashing piece.
fn read_buffer_len(len: usize, keep: bool) -> usize {
    if keep {
        len
    } else {
        len.min(HASH_PIECE)
    }
}

struct Flight {
    job: SendJob,
    file: Option<Arc<File>>,
    digests: Vec<Option<Digest>>,
    retries: u32,
    sent: u64,
}

/// How a sender ended when its connection broke: the jobs it still held.
pub struct Interrupted {
    /// What broke.
    pub error: NodeError,
    /// Jobs to give back to the queue.
    pub unfinished: Vec<SendJob>,
}

/// Runs the sender until its work is done and the peer said `Bye`.
pub async fn run_sender(
    reader: FrameReader,
    mut writer: FrameWriter,
    feed: JobFeed,
    ctx: SenderCtx,
) -> Result<(), Interrupted> {
    let mut s = Sender {
        inflight: HashMap::new(),
        parked: HashMap::new(),
        next_id: 1,
        reads: InlinePolicy::new(ctx.chunk_work),
        root: match &feed {
            JobFeed::Wants { root } => Some(root.path().to_path_buf()),
            JobFeed::Queue(_) => None,
        },
        ctx,
    };
    let (tx, mut rx) = mpsc::channel(4096);
    let reader_task = tokio::spawn(read_messages(reader, tx));
    let result = s.run(&mut writer, &feed, &mut rx).await;
    reader_task.abort();
    result.map_err(|error| Interrupted {
        error,
        unfinished: s
            .inflight
            .into_values()
            .chain(s.parked.into_values())
            .map(|f| f.job)
            .collect(),
    })
}

async fn read_messages(mut reader: FrameReader, tx: mpsc::Sender<Result<Message, TransportError>>) {
    // The main loop bounds every wait; this task only forwards.
    reader.set_idle(Duration::from_secs(24 * 3600));
    loop {
        let msg = reader.recv().await;
        let stop = msg.is_err();
        if tx.send(msg).await.is_err() || stop {
            return;
        }
    }
}

struct Sender {
    inflight: HashMap<u32, Flight>,
    /// Ranges verified on a fetching peer, kept in case it asks to `Finish`.
    parked: HashMap<u32, Flight>,
    next_id: u32,
    /// Whether large chunks are read and hashed inline or on threads.
    reads: InlinePolicy,
    /// A serving node's root, never named to the peer.
    root: Option<PathBuf>,
    ctx: SenderCtx,
}

impl Sender {
    async fn run(
        &mut self,
        w: &mut FrameWriter,
        feed: &JobFeed,
        rx: &mut mpsc::Receiver<Result<Message, TransportError>>,
    ) -> Result<(), NodeError> {
        let mut retiring = false;
        loop {
            if let JobFeed::Queue(queue) = feed {
                if !retiring && queue.should_retire() {
                    // The pool has more connections than help: this one stops
                    // taking work and closes once its files are done.
                    retiring = true;
                }
                while !retiring && self.inflight.len() < self.ctx.window {
                    let busy: Vec<usize> = self
                        .inflight
                        .values()
                        .filter_map(|f| f.job.group.as_ref().map(|g| Arc::as_ptr(g) as usize))
                        .collect();
                    let Some(job) = queue.try_take(&busy) else {
                        break;
                    };
                    let id = self.next_id;
                    self.next_id += 1;
                    self.offer(w, id, job).await?;
                }
                if self.inflight.is_empty() {
                    if retiring || queue.is_drained() {
                        w.send(&Message::Bye).await?;
                        return self.await_bye(rx).await;
                    }
                    queue.wait().await;
                    continue;
                }
            }
            // Answer everything that already arrived before writing: one
            // write carries many small files.
            let msg = match rx.try_recv() {
                Ok(m) => m?,
                Err(_) => {
                    w.flush().await?;
                    match tokio::time::timeout(self.ctx.idle, rx.recv()).await {
                        Err(_) => {
                            return Err(NodeError::Transport(TransportError::Timeout {
                                what: "the receiver's answer",
                                secs: self.ctx.idle.as_secs(),
                            }))
                        }
                        Ok(None) => return Err(NodeError::Transport(TransportError::Closed)),
                        Ok(Some(m)) => m?,
                    }
                }
            };
            if self.handle(w, feed, msg).await? {
                return Ok(());
            }
        }
    }

    async fn await_bye(
        &mut self,
        rx: &mut mpsc::Receiver<Result<Message, TransportError>>,
    ) -> Result<(), NodeError> {
        loop {
            match tokio::time::timeout(self.ctx.idle, rx.recv()).await {
                Ok(Some(Ok(Message::KeepAlive))) => continue,
                Ok(Some(Ok(Message::Bye))) => return Ok(()),
                Ok(Some(Ok(other))) => {
                    return Err(NodeError::Protocol(format!("expected Bye, got {other:?}")))
                }
                Ok(Some(Err(e))) => return Err(e.into()),
                Ok(None) => return Err(TransportError::Closed.into()),
                Err(_) => {
                    return Err(TransportError::Timeout {
                        what: "the receiver's goodbye",
                        secs: self.ctx.idle.as_secs(),
                    }
                    .into())
                }
            }
        }
    }

    /// Queues an offer for `job`; a job whose file cannot be opened fails alone.
    async fn offer(&mut self, w: &mut FrameWriter, id: u32, job: SendJob) -> Result<(), NodeError> {
        let entry = &job.src.entry;
        let file = match (&entry.kind, &job.opened) {
            (EntryKind::File, Some(opened)) => Some(opened.clone()),
            (EntryKind::File, None) => match haul_engine::source::open_local(&job.src) {
                Ok(f) => Some(Arc::new(f)),
                Err(e) => {
                    self.fail_local(w, id, &entry.path.clone(), e.to_string())
                        .await?;
                    return Ok(());
                }
            },
            _ => None,
        };
        w.queue(&Message::Offer {
            id,
            entry: entry.clone(),
            first: job.first,
            end: job.end,
        })
        .await?;
        if job.first == 0 {
            self.ctx.observer.event(&Event::FileStart {
                path: entry.path.clone(),
                size: entry.size,
            });
        }
        let digests = vec![None; entry.chunk_count() as usize];
        self.inflight.insert(
            id,
            Flight {
                job,
                file,
                digests,
                retries: 0,
                sent: 0,
            },
        );
        Ok(())
    }

    async fn fail_local(
        &mut self,
        w: &mut FrameWriter,
        id: u32,
        path: &str,
        error: String,
    ) -> Result<(), NodeError> {
        self.ctx.observer.event(&Event::FileError {
            path: path.to_owned(),
            error: error.clone(),
        });
        if self.inflight.remove(&id).is_some() || self.parked.remove(&id).is_some() {
            w.queue(&Message::FileError {
                id,
                code: ErrorCode::Io,
                message: without_root(self.root.as_deref(), error),
            })
            .await?;
        }
        Ok(())
    }

    /// Handles one message; true when the conversation is over.
    async fn handle(
        &mut self,
        w: &mut FrameWriter,
        feed: &JobFeed,
        msg: Message,
    ) -> Result<bool, NodeError> {
        match msg {
            Message::Need { id, skip, have } => {
                if !skip {
                    self.send_range(w, id, &have).await?;
                }
            }
            Message::RangeStatus { id, bad } => self.range_status(w, id, bad).await?,
            Message::Finish { id } => self.finish(w, id).await?,
            Message::Release { id } => {
                self.parked.remove(&id);
            }
            Message::KeepAlive => {}
            Message::Done {
                id,
                ok,
                root,
                message,
            } => {
                if let Some(f) = self.inflight.remove(&id) {
                    let e = &f.job.src.entry;
                    if ok {
                        let is_file = e.kind == EntryKind::File;
                        let skipped = is_file && root == [0; 32];
                        // A split file is reported once: when its commit is
                        // done, or when every range was skipped.
                        let group = f.job.group.as_ref();
                        if skipped && group.is_some_and(|g| !g.range_skipped(f.job.first)) {
                            return Ok(false);
                        }
                        self.ctx.observer.event(&Event::FileDone {
                            path: e.path.clone(),
                            size: e.size,
                            blake3: if is_file && !skipped {
                                hex::encode(root)
                            } else {
                                String::new()
                            },
                            sent: group.map_or(f.sent, |g| g.sent()),
                            skipped,
                        });
                    } else {
                        self.ctx.observer.event(&Event::FileError {
                            path: e.path.clone(),
                            error: message,
                        });
                    }
                }
            }
            Message::FileError { id, message, .. } => {
                if let Some(f) = self
                    .inflight
                    .remove(&id)
                    .or_else(|| self.parked.remove(&id))
                {
                    self.ctx.observer.event(&Event::FileError {
                        path: f.job.src.entry.path.clone(),
                        error: format!("receiver: {message}"),
                    });
                }
            }
            Message::Want {
                id,
                path,
                dest,
                first,
                end,
            } => {
                let JobFeed::Wants { root } = feed else {
                    return Err(NodeError::Protocol("Want on a push connection".into()));
                };
                if self.inflight.len() + self.parked.len() >= 4 * self.ctx.window {
                    return Err(NodeError::Protocol(
                        "too many files asked for at once".into(),
                    ));
                }
                match want_job(root, &path, &dest, first, end) {
                    Ok(job) => self.offer(w, id, job).await?,
                    Err((code, message)) => {
                        let message = without_root(Some(root.path()), message);
                        w.queue(&Message::FileError { id, code, message }).await?;
                    }
                }
            }
            Message::Bye => {
                if matches!(feed, JobFeed::Wants { .. }) {
                    w.send(&Message::Bye).await?;
                    return Ok(true);
                }
                return Err(NodeError::Protocol(
                    "receiver said Bye with files in flight".into(),
                ));
            }
            Message::Refused { code, message } => return Err(NodeError::Refused { code, message }),
            other => {
                return Err(NodeError::Protocol(format!(
                    "unexpected {other:?} at the sender"
                )))
            }
        }
        Ok(false)
    }

    /// Sends every chunk of the offered range the receiver does not hold.
    async fn send_range(
        &mut self,
        w: &mut FrameWriter,
        id: u32,
        have: &[(u32, Digest)],
    ) -> Result<(), NodeError> {
        let Some(f) = self.inflight.get_mut(&id) else {
            return Err(NodeError::Protocol(format!(
                "Need for unknown file id {id}"
            )));
        };
        let (first, end) = (f.job.first, f.job.end);
        let mut held = vec![false; (end - first) as usize];
        let mut claimed: Vec<(u32, Digest)> = Vec::with_capacity(have.len());
        for (i, d) in have {
            if *i < first || *i >= end {
                return Err(NodeError::Protocol(format!(
                    "Need names chunk {i} outside {first}..{end}"
                )));
            }
            if !held[(*i - first) as usize] {
                held[(*i - first) as usize] = true;
                claimed.push((*i, *d));
            }
        }
        held.iter_mut().for_each(|h| *h = false);
        if !claimed.is_empty() {
            // Trust a held chunk only if it matches our data now. Hashing a
            // large resumed file takes a while: keep the peer informed.
            let indices: Vec<u32> = claimed.iter().map(|(i, _)| *i).collect();
            let job = hash_job(f, indices);
            let every = keepalive::interval(self.ctx.idle);
            let mine = match job {
                Ok(job) => keepalive::while_keeping_alive(w, every, job).await?,
                Err(e) => Err(e),
            };
            let Some(f) = self.inflight.get_mut(&id) else {
                return Ok(());
            };
            match mine {
                Ok(mine) => {
                    for ((i, theirs), (_, ours)) in claimed.iter().zip(mine) {
                        if *theirs == ours {
                            f.digests[*i as usize] = Some(ours);
                            held[(*i - first) as usize] = true;
                        }
                    }
                }
                Err(e) => {
                    let path = f.job.src.entry.path.clone();
                    return self.fail_local(w, id, &path, e).await;
                }
            }
        }
        let todo: Vec<u32> = (first..end)
            .filter(|i| !held[(*i - first) as usize])
            .collect();
        self.send_chunks(w, id, &todo).await
    }

    async fn send_chunks(
        &mut self,
        w: &mut FrameWriter,
        id: u32,
        chunks: &[u32],
    ) -> Result<(), NodeError> {
        let Some(f) = self.inflight.get(&id) else {
            return Ok(());
        };
        let first_len = chunks
            .first()
            .map_or(0, |&i| f.job.src.entry.chunk_len(i) as usize);
        let large = first_len > 256 << 10;
        if large && chunks.len() > 1 && !self.reads.inline(first_len) {
            return self.send_chunks_pipelined(w, id, chunks).await;
        }
        for &index in chunks {
            let Some(len) = self
                .inflight
                .get(&id)
                .map(|f| f.job.src.entry.chunk_len(index) as usize)
            else {
                return Ok(());
            };
            let keep = !w.sends_from_file(len);
            let mut buf = self.ctx.buffers.take(read_buffer_len(len, keep)).await;
            let Some(f) = self.inflight.get_mut(&id) else {
                return Ok(());
            };
            // Small reads are cheaper than handing the thread over to the runtime.
            let small = len <= 256 << 10;
            let read = if small {
                read_and_hash(f, index, buf.vec(), keep)
            } else if self.reads.inline(len) {
                let started = std::time::Instant::now();
                let read = read_and_hash(f, index, buf.vec(), keep);
                if self.reads.took(len, started.elapsed()) {
                    tracing::debug!(
                        "chunk reads are slow: reading on blocking threads from now on"
                    );
                }
                read
            } else {
                tokio::task::block_in_place(|| read_and_hash(f, index, buf.vec(), keep))
            };
            let digest = match read {
                Ok(d) => d,
                Err(e) => {
                    let path = f.job.src.entry.path.clone();
                    return self.fail_local(w, id, &path, e).await;
                }
            };
            self.send_one(w, id, index, digest, &buf).await?;
        }
        w.queue(&Message::RangeEnd { id }).await?;
        Ok(())
    }

    /// Large chunks: the next chunk is read and hashed on a blocking thread
    /// while the current one goes out, so hashing and sending overlap — when
    /// the memory budget has a second buffer now. This task never waits for
    /// a buffer while it holds one.
    async fn send_chunks_pipelined(
        &mut self,
        w: &mut FrameWriter,
        id: u32,
        chunks: &[u32],
    ) -> Result<(), NodeError> {
        let Some(f) = self.inflight.get(&id) else {
            return Ok(());
        };
        let (entry, local) = (f.job.src.entry.clone(), f.job.src.local.clone());
        let Some(file) = f.file.clone() else {
            return Err(NodeError::Protocol("chunk of a non-file".into()));
        };
        let read = |index: u32, mut buf: ChunkBuf, keep: bool| {
            let (file, entry, local) = (file.clone(), entry.clone(), local.clone());
            tokio::task::spawn_blocking(move || {
                let offset = u64::from(index) * u64::from(entry.chunk_size);
                let digest = read_chunk(&file, &entry, index, buf.vec(), keep).map_err(|err| {
                    format!(
                        "cannot read {} at {offset}: {err} (did it shrink while sending?)",
                        local.display()
                    )
                });
                (buf, digest)
            })
        };
        // Keep a chunk's bytes only when they must be sent from memory.
        let keep: Vec<bool> = chunks
            .iter()
            .map(|&i| !w.sends_from_file(entry.chunk_len(i) as usize))
            .collect();
        let need = |k: usize| read_buffer_len(entry.chunk_len(chunks[k]) as usize, keep[k]);
        let buffers = self.ctx.buffers.clone();
        let mut next = Some(read(chunks[0], buffers.take(need(0)).await, keep[0]));
        for (k, &index) in chunks.iter().enumerate() {
            let Some(pending) = next.take() else { break };
            let (buf, digest) = pending
                .await
                .map_err(|e| NodeError::Internal(format!("chunk reader stopped: {e}")))?;
            let mut later = None;
            if let Some(&following) = chunks.get(k + 1) {
                match buffers.try_take(need(k + 1)) {
                    Some(b) => next = Some(read(following, b, keep[k + 1])),
                    None => later = Some(following),
                }
            }
            let digest = match digest {
                Ok(d) => d,
                Err(e) => return self.fail_local(w, id, &entry.path, e).await,
            };
            self.send_one(w, id, index, digest, &buf).await?;
            drop(buf);
            if let Some(following) = later {
                next = Some(read(
                    following,
                    buffers.take(need(k + 1)).await,
                    keep[k + 1],
                ));
            }
        }
        w.queue(&Message::RangeEnd { id }).await?;
        Ok(())
    }

    /// Sends one verified-on-read chunk: header, then payload.
    async fn send_one(
        &mut self,
        w: &mut FrameWriter,
        id: u32,
        index: u32,
        digest: Digest,
        data: &[u8],
    ) -> Result<(), NodeError> {
        let Some(f) = self.inflight.get_mut(&id) else {
            return Ok(());
        };
        f.digests[index as usize] = Some(digest);
        let len = f.job.src.entry.chunk_len(index);
        w.queue(&Message::Chunk(ChunkHeader {
            id,
            index,
            len,
            digest,
        }))
        .await?;
        let offset = u64::from(index) * u64::from(f.job.src.entry.chunk_size);
        let Some(file) = f.file.as_ref() else {
            return Err(NodeError::Protocol("chunk of a non-file".into()));
        };
        w.send_payload(file, offset, len as usize, data).await?;
        f.sent += u64::from(len);
        if let Some(group) = &f.job.group {
            group.add_sent(u64::from(len));
        }
        self.ctx.observer.event(&Event::Progress {
            path: f.job.src.entry.path.clone(),
            bytes: u64::from(len),
        });
        Ok(())
    }

    async fn range_status(
        &mut self,
        w: &mut FrameWriter,
        id: u32,
        bad: Vec<u32>,
    ) -> Result<(), NodeError> {
        let Some(f) = self.inflight.get_mut(&id) else {
            return Err(NodeError::Protocol(format!(
                "RangeStatus for unknown file id {id}"
            )));
        };
        if !bad.is_empty() {
            f.retries += 1;
            if bad.iter().any(|i| *i < f.job.first || *i >= f.job.end) {
                return Err(NodeError::Protocol(
                    "RangeStatus names a chunk outside the range".into(),
                ));
            }
            if f.retries > self.ctx.max_retries {
                let path = f.job.src.entry.path.clone();
                let msg = format!(
                    "chunks kept failing verification after {} resends (corrupting link?)",
                    self.ctx.max_retries
                );
                return self.fail_local(w, id, &path, msg).await;
            }
            tracing::debug!(
                "resending {} chunk(s) of {}",
                bad.len(),
                f.job.src.entry.path
            );
            return self.send_chunks(w, id, &bad).await;
        }
        let count = f.job.src.entry.chunk_count();
        let whole = f.job.first == 0 && f.job.end == count;
        if whole {
            let all: Option<Vec<Digest>> = f.digests.iter().copied().collect();
            let root = all.and_then(|d| {
                root_from_digests(&d, f.job.src.entry.chunk_size, f.job.src.entry.size)
            });
            let Some(root) = root else {
                return Err(NodeError::Protocol("range clean but chunks missing".into()));
            };
            w.queue(&Message::Commit { id, root }).await?;
        } else if let Some(group) = f.job.group.clone() {
            match group.finish_range(f.job.first, &f.digests) {
                Some(root) => w.queue(&Message::Commit { id, root }).await?,
                None => {
                    // Another connection commits this file; this range is done.
                    let (path, size) = (f.job.src.entry.path.clone(), f.job.src.entry.size);
                    self.inflight.remove(&id);
                    w.queue(&Message::Release { id }).await?;
                    // Unless the others were skipped (the file was there):
                    // then nothing commits, and the file is up to date.
                    if group.settled_without_commit() {
                        self.ctx.observer.event(&Event::up_to_date(path, size));
                    }
                }
            }
        } else if let Some(f) = self.inflight.remove(&id) {
            self.parked.insert(id, f);
        }
        Ok(())
    }

    /// A fetching receiver verified every range: hash the whole file and commit.
    async fn finish(&mut self, w: &mut FrameWriter, id: u32) -> Result<(), NodeError> {
        let Some(f) = self
            .parked
            .remove(&id)
            .or_else(|| self.inflight.remove(&id))
        else {
            return Err(NodeError::Protocol(format!(
                "Finish for unknown file id {id}"
            )));
        };
        let count = f.job.src.entry.chunk_count();
        let every = keepalive::interval(self.ctx.idle);
        let hashed = match hash_job(&f, (0..count).collect()) {
            Ok(job) => keepalive::while_keeping_alive(w, every, job).await?,
            Err(e) => Err(e),
        };
        let digests: Vec<Digest> = match hashed {
            Ok(d) => d.into_iter().map(|(_, d)| d).collect(),
            Err(e) => {
                let path = f.job.src.entry.path.clone();
                self.inflight.insert(id, f);
                return self.fail_local(w, id, &path, e).await;
            }
        };
        let e = &f.job.src.entry;
        let Some(root) = root_from_digests(&digests, e.chunk_size, e.size) else {
            return Err(NodeError::Protocol("cannot compute file hash".into()));
        };
        w.queue(&Message::Commit { id, root }).await?;
        self.inflight.insert(id, f);
        Ok(())
    }
}
