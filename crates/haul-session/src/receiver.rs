//! The receiving role: answers offers, says where each chunk goes, asks
//! for commits; a pulling client's receiver also asks for files (`Want`).
//!
//! Each file's phase is explicit ([`Phase`]):
//!
//! ```text
//! (pull) Wanted ──Offer──▶ Preparing ──Need──▶ Receiving ──(all counted chunks written)──▶ RangeStatus
//!                            │ (dirs, links: Making)  ▲                 │ bad: another round
//!                            ▼ up to date / refused   └─────────────────┤
//!                          (gone)                                       ▼ clean
//!                   (gone) ◀── Done ── Committing ◀── Commit ── AwaitingCommit  (or Release / Finish)
//! ```
//!
//! A round ends when the sender's `RangeEnd` has said how many chunks it
//! sent and that many have arrived and been written (or found bad): chunks
//! may arrive in any order, before or after their `RangeEnd`.

use rustc_hash::FxHashMap as HashMap;
use std::time::{Duration, Instant};

use haul_proto::{
    check_entry_path, validate_symlink_target, ChunkHeader, ChunkSeal, Digest, Entry, EntryKind,
    ErrorCode, Message, Seal,
};
use std::sync::Arc;

use crate::core::{protocol, Core};
use crate::groups::FetchJob;
use crate::peer_text::without_root;
use crate::seals::OriginCheck;
use crate::sender::hex;
use crate::{FileId, SessionConfig, SessionError, Transmit, MAX_OPEN};
use haul_run::{Event, FailKind};

mod seal;

/// What a receiver asks its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiverIo {
    /// Create the directory or symlink `entry` (path checked); answer
    /// [`Receiver::made`].
    Make {
        /// The entry's id.
        file: FileId,
        /// The entry, its path under the destination.
        entry: Entry,
    },
    /// Get ready to receive chunks `first..end` of `entry` (path checked):
    /// the quick check (the same file in place: [`Prepared::UpToDate`]), else
    /// open its staging and say which chunks of the range it holds verified.
    /// Answer [`Receiver::prepared`].
    Prepare {
        /// The file's id.
        file: FileId,
        /// The entry, its path under the destination.
        entry: Entry,
        /// First chunk offered.
        first: u32,
        /// One past the last.
        end: u32,
        /// `-c`, pushed: the sender's BLAKE3 of the file, which it found
        /// listed here. When the file at the entry's path still holds it
        /// (read now), bring its mtime, mode and attributes in line and
        /// answer [`Prepared::UpToDate`] (with [`Receiver::itemized`] for
        /// what was set); else prepare as usual.
        content: Option<Digest>,
    },
    /// Check the whole-file hash against `root`, make the data durable and
    /// give the file its final name; answer [`Receiver::committed`]. Drivers
    /// may gather several into one batch (group commit).
    Commit {
        /// The file.
        file: FileId,
        /// The sender's whole-file BLAKE3.
        root: Digest,
    },
    /// Fan-out, striped: a clean stripe of `file` arrived here, whose other
    /// stripes come from other senders, and the origin vouched for the
    /// file's root (`Vouched`, asked for only then; the driver's check can
    /// find that root where the check remembered it). If the file's staging
    /// now holds every chunk, verified and sealed by the origin, and those
    /// digests make the vouched root, commit it with that root and answer
    /// [`Receiver::committed`]; if chunks are still to come (or another
    /// session commits it), keep the staging for them and answer
    /// [`Receiver::assembled_elsewhere`].
    Assemble {
        /// The file.
        file: FileId,
    },
    /// Nothing more will come for `file` on this connection: drop what is
    /// held for it.
    Forget {
        /// The file.
        file: FileId,
    },
}

/// What the driver found when preparing a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// The same file (size and mtime) is in place: nothing is sent.
    UpToDate,
    /// Ready to receive; these chunks of the range are held and verified.
    Receive {
        /// Held chunks with their digests.
        have: Vec<(u32, Digest)>,
    },
}

/// Why the driver refused an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The class sent to the peer.
    pub code: ErrorCode,
    /// What went wrong (shown to the peer without the root).
    pub message: String,
}

/// Where the payload of a chunk whose header arrived goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkAction {
    /// Verify the payload against `digest` and, only if it matches, write
    /// it as chunk `index` of `file`; answer [`Receiver::chunk_done`].
    Write {
        /// The file.
        file: FileId,
        /// The chunk.
        index: u32,
        /// The digest it must have.
        digest: Digest,
    },
    /// Read the payload and drop it (its file failed or was dropped).
    Discard,
}

/// What became of a chunk's payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkOutcome {
    /// It matched its digest and was written.
    Good,
    /// It did not match: nothing was written; it is asked for again.
    Bad,
    /// Writing failed (disk full...): the file fails at its `RangeEnd`.
    Failed(String),
}

/// Where one file is on this connection.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// A pulling client asked for it (`Want`); no `Offer` yet.
    Wanted,
    /// A directory or symlink being made.
    Making,
    /// Quick check and staging being prepared.
    Preparing,
    /// `Need` sent; chunks arriving.
    Receiving(Round),
    /// A clean range: the commit (or a `Release`) comes next.
    AwaitingCommit,
    /// The commit is running.
    Committing,
    /// Fan-out: up to date here; waiting for the origin's seals of this
    /// many more chunks (to relay them), then `Done`.
    AwaitingSeals(u32),
}

/// One round of chunks of a file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Round {
    /// Chunks the sender says it sent (from `RangeEnd`).
    expected: Option<u32>,
    /// Chunk headers that arrived.
    arrived: u32,
    /// Their indices (a chunk arrives once per round): the first, then a
    /// set once there are more (one-chunk files need none).
    first_seen: Option<u32>,
    seen: Option<std::collections::HashSet<u32>>,
    /// Writes the driver has not answered yet (their digests are in the
    /// receiver's `pending`).
    writing: u32,
    bad: Vec<u32>,
    error: Option<String>,
    /// A `Commit` that came while writes were outstanding.
    commit: Option<Digest>,
}

/// A fan-out's origin check, and a file whose entry it sealed.
type SealedFile<'a> = (Arc<dyn OriginCheck>, &'a mut File);

#[derive(Debug)]
struct File {
    phase: Phase,
    entry: Entry,
    first: u32,
    end: u32,
    /// Payload bytes received for it on this connection.
    received: u64,
    /// The pulling client's job (`None` on a push).
    job: Option<FetchJob>,
    /// Fan-out: the entry as offered (its path under the transfer's
    /// destination) and its hash, which its chunks' seals cover.
    sealed: Option<(Entry, Digest)>,
    /// Fan-out: the root the origin vouched for (`Vouched`): the only one
    /// a `Commit` of the whole file may name.
    vouched: Option<Digest>,
    /// What changes here when it lands (`-i`: [`Receiver::itemized`]).
    changes: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Running,
    /// Pull: no more wants; `Bye` once nothing is asked.
    Closing,
    /// Pull: `Bye` sent; waiting for the peer's.
    ByeSent,
    /// Push: the sender said `Bye`; answer it once commits are done.
    PeerSaidBye,
    Finished,
}

/// The receiving side of one connection.
#[derive(Debug)]
pub struct Receiver {
    core: Core<ReceiverIo>,
    cfg: SessionConfig,
    /// Prepended to every offered path (a push's destination directory).
    prefix: String,
    /// A pulling client: it sends `Want`s and accepts only what it asked for.
    fetching: bool,
    files: HashMap<FileId, File>,
    next_id: FileId,
    /// Ids settled lately (bounded): chunks still on the way for them are
    /// dropped, where a chunk for an id never seen is a protocol error.
    settled: std::collections::VecDeque<FileId>,
    /// Digests of the chunk writes the driver has not answered yet.
    pending: HashMap<(FileId, u32), Digest>,
    /// Fan-out: chunks whose bytes failed their sealed digest once (a
    /// second failure of the same chunk is evidence against the sender).
    failed_once: std::collections::HashSet<(FileId, u32)>,
    /// Files asked for and not offered yet (pull).
    wanted: usize,
    stage: Stage,
    verified: std::collections::VecDeque<(FileId, u32, Digest)>,
    /// Fan-out: every entry and chunk must carry the origin's seal.
    origin: Option<Arc<dyn OriginCheck>>,
}

impl Receiver {
    /// The receiver of a push, writing under `prefix` (empty: the root).
    pub fn for_push(cfg: SessionConfig, prefix: String, now: Instant) -> Self {
        Self::new(cfg, prefix, false, now)
    }

    /// A pulling client's receiver: it asks for files with [`Receiver::want`].
    pub fn for_pull(cfg: SessionConfig, now: Instant) -> Self {
        Self::new(cfg, String::new(), true, now)
    }

    fn new(cfg: SessionConfig, prefix: String, fetching: bool, now: Instant) -> Self {
        Self {
            core: Core::new(cfg.idle, cfg.heartbeat, now),
            cfg,
            prefix,
            fetching,
            files: HashMap::default(),
            next_id: 1,
            settled: std::collections::VecDeque::new(),
            pending: HashMap::default(),
            failed_once: std::collections::HashSet::default(),
            wanted: 0,
            stage: Stage::Running,
            verified: std::collections::VecDeque::new(),
            origin: None,
        }
    }

    /// A fan-out receiver: it refuses entries and chunks without a valid
    /// seal of the transfer's origin (`check` also remembers them, on a
    /// relay).
    pub fn check_origin(&mut self, check: Arc<dyn OriginCheck>) {
        self.origin = Some(check);
    }

    /// Files a pulling client may ask for now (the window's free room).
    pub fn room(&self) -> usize {
        if !self.fetching || self.stage != Stage::Running {
            return 0;
        }
        self.cfg.window.saturating_sub(self.files.len())
    }

    /// Groups (split files) with a range asked for here.
    pub fn busy_groups(&self) -> Vec<usize> {
        self.files
            .values()
            .filter_map(|f| f.job.as_ref()?.group.as_ref())
            .map(|g| std::sync::Arc::as_ptr(g) as usize)
            .collect()
    }

    /// Asks for `job` (`Want`); returns its id.
    pub fn want(&mut self, _now: Instant, job: FetchJob) -> FileId {
        let id = self.next_id;
        self.next_id += 1;
        self.core.send(Message::Want {
            id,
            path: job.path.clone(),
            dest: job.entry.path.clone(),
            first: job.first,
            end: job.end,
        });
        self.wanted += 1;
        self.files.insert(
            id,
            File {
                phase: Phase::Wanted,
                entry: job.entry.clone(),
                first: job.first,
                end: job.end,
                received: 0,
                job: Some(job),
                sealed: None,
                vouched: None,
                changes: None,
            },
        );
        id
    }

    /// Pull: no more wants; `Bye` once every file asked for is done.
    pub fn close_when_done(&mut self) {
        if self.stage == Stage::Running {
            self.stage = Stage::Closing;
        }
        self.maybe_bye();
    }

    /// True once both sides said `Bye`.
    pub fn is_finished(&self) -> bool {
        self.stage == Stage::Finished
    }

    /// True once the sender said `Bye` and this side has work of its own
    /// to end (commits under way): a sender that leaves then — one whose
    /// transport lost under `--transport auto` says `Bye` and goes — owes
    /// it nothing more.
    pub fn peer_said_bye(&self) -> bool {
        self.stage == Stage::PeerSaidBye
    }

    /// True while it takes jobs (a pulling client that is not closing).
    pub fn is_taking(&self) -> bool {
        self.fetching && self.stage == Stage::Running
    }

    /// The driver finished writing what was transmitted.
    pub fn flushed(&mut self, now: Instant) {
        self.core.flushed(now);
    }

    /// With a heartbeat: tells the observer ([`Event::PeerQuiet`]) when
    /// the sender has said nothing for its `quiet` (bytes that
    /// [`Receiver::arrived`] count). Call it only where the driver waited on
    /// the connection and nothing came: bytes that waited unread while it
    /// worked are no silence.
    pub fn tell_quiet(&mut self, now: Instant) {
        let expecting = self.expecting();
        self.core.tell_quiet(now, expecting);
    }

    /// Bytes from the peer arrived at `at` (its connection saw them; the
    /// frame they belong to may not be whole yet): it is not silent.
    pub fn arrived(&mut self, at: Instant) {
        self.core.arrived(at);
    }

    /// Files open or asked for on this connection.
    pub fn in_flight(&self) -> usize {
        self.files.len()
    }

    /// A pulling client's jobs not finished (to give back when the
    /// connection broke).
    pub fn into_unfinished(self) -> Vec<FetchJob> {
        self.files.into_values().filter_map(|f| f.job).collect()
    }

    fn full_path(&self, path: &str) -> String {
        match (self.prefix.is_empty(), path.is_empty()) {
            (true, _) => path.to_owned(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{}", self.prefix, path),
        }
    }

    fn peer_text(&self, text: String) -> String {
        without_root(self.cfg.hide.as_deref().map(std::path::Path::new), text)
    }

    /// A message from the sender (not a chunk: see [`Receiver::handle_chunk`]).
    pub fn handle(&mut self, now: Instant, msg: Message) -> Result<(), SessionError> {
        self.core.check()?;
        self.core.received(now, !matches!(msg, Message::KeepAlive));
        if let Err(e) = self.dispatch(msg) {
            return self.core.fail(e);
        }
        self.maybe_bye();
        Ok(())
    }

    fn dispatch(&mut self, msg: Message) -> Result<(), SessionError> {
        if self.stage == Stage::ByeSent {
            // After our goodbye, only the peer's is expected.
            return match msg {
                Message::KeepAlive => Ok(()),
                Message::Bye => {
                    self.stage = Stage::Finished;
                    Ok(())
                }
                // A node that refused the connection, answering `Hello`,
                // after a pull that had nothing to ask said `Bye`.
                Message::Refused { code, message } => Err(SessionError::Refused { code, message }),
                other => Err(protocol(format!("expected Bye, got {other:?}"))),
            };
        }
        match msg {
            Message::Offer {
                id,
                entry,
                first,
                end,
                seal,
                content,
            } => self.offer(id, entry, first, end, seal, content.map(|d| *d)),
            Message::Sealed { id, chunks } => self.sealed(id, chunks),
            Message::Vouched { id, root, seal } => self.vouched(id, root, seal),
            Message::Chunk(_) => Err(protocol("a chunk header handed over as a message")),
            Message::RangeEnd { id, chunks } => {
                let Some(f) = self.files.get_mut(&id) else {
                    return Err(protocol(format!("RangeEnd for unknown file id {id}")));
                };
                let Phase::Receiving(round) = &mut f.phase else {
                    return Err(protocol(format!("RangeEnd for file id {id} not receiving")));
                };
                if round.expected.is_some() || round.arrived > chunks {
                    return Err(protocol(format!(
                        "RangeEnd for file id {id} counts {chunks} chunks, {} arrived",
                        round.arrived
                    )));
                }
                round.expected = Some(chunks);
                self.end_round(id);
                Ok(())
            }
            Message::Commit { id, root } => {
                let Some(f) = self.files.get_mut(&id) else {
                    return Err(protocol(format!("Commit for unknown file id {id}")));
                };
                let vouch = self.origin.is_some() && f.entry.chunk_count() > 0;
                if vouch && f.vouched != Some(root) {
                    // Each chunk sealed, but not the whole: a read torn at
                    // the origin, or a relay's mix of versions.
                    let path = f.entry.path.clone();
                    self.drop_version(id);
                    let why = "its root was not vouched for by the transfer's origin (the file \
                               changed there while it was read, or a relay mixed versions): \
                               not committed";
                    self.refuse(id, &path, ErrorCode::Unsealed, why.into());
                    return Ok(());
                }
                match &mut f.phase {
                    Phase::Receiving(round) if round.writing > 0 => round.commit = Some(root),
                    Phase::Receiving(_) | Phase::AwaitingCommit => {
                        f.phase = Phase::Committing;
                        self.core.request(ReceiverIo::Commit { file: id, root });
                    }
                    _ => {
                        return Err(protocol(format!(
                            "Commit for file id {id} that is not being received"
                        )))
                    }
                }
                Ok(())
            }
            Message::FileError { id, code, message } => {
                self.drop_version(id);
                if let Some(f) = self.settle(id) {
                    let kind = match code {
                        ErrorCode::NotFound => FailKind::Vanished,
                        ErrorCode::Changed => FailKind::Changed,
                        _ => FailKind::Error,
                    };
                    self.core.event(Event::file_failed(
                        f.entry.path,
                        format!("sender: {message}"),
                        kind,
                    ));
                }
                Ok(())
            }
            // A serving sender never releases what a pulling client asked for.
            Message::Release { id } if self.fetching => Err(protocol(format!(
                "Release of file id {id} from a serving sender"
            ))),
            Message::Release { id } => {
                if self
                    .files
                    .get(&id)
                    .is_some_and(|f| f.phase != Phase::Committing)
                {
                    self.settle(id);
                }
                Ok(())
            }
            Message::KeepAlive => Ok(()),
            Message::Bye => {
                let asked = self.files.values().filter(|f| f.job.is_some()).count();
                if asked > 0 {
                    return Err(protocol(format!(
                        "the sender said Bye with {asked} file(s) still asked for"
                    )));
                }
                // Offers left half done are dropped; commits under way end
                // first, those waiting for their writes too (a sender says
                // `Bye` right after its last `Commit`, v23).
                let idle: Vec<FileId> = self
                    .files
                    .iter()
                    .filter(|(_, f)| match &f.phase {
                        Phase::Committing => false,
                        Phase::Receiving(round) => round.commit.is_none(),
                        _ => true,
                    })
                    .map(|(id, _)| *id)
                    .collect();
                for id in idle {
                    self.settle(id);
                }
                self.stage = Stage::PeerSaidBye;
                Ok(())
            }
            Message::Refused { code, message } => Err(SessionError::Refused { code, message }),
            other => Err(protocol(format!("unexpected {other:?} at the receiver"))),
        }
    }

    fn offer(
        &mut self,
        id: FileId,
        mut entry: Entry,
        first: u32,
        end: u32,
        seal: Option<Seal>,
        content: Option<Digest>,
    ) -> Result<(), SessionError> {
        // `-c`'s content offer: a direct push's whole file only (a relay
        // could not vouch for it, a serving node was asked for data).
        let whole = first == 0 && end == entry.chunk_count();
        if content.is_some()
            && (self.fetching || self.origin.is_some() || !whole || entry.kind != EntryKind::File)
        {
            return Err(protocol(format!(
                "offer {id} ({:?}) names its content where only a direct push's whole file may",
                entry.path
            )));
        }
        let open = self.files.len() - self.wanted;
        if open >= MAX_OPEN {
            return Err(protocol(format!(
                "more than {MAX_OPEN} files offered at once"
            )));
        }
        let job = if self.fetching {
            // A fetching receiver accepts only what it asked for.
            let asked = self.files.get(&id).filter(|f| f.phase == Phase::Wanted);
            let matches =
                asked.is_some_and(|f| f.entry.path == entry.path && entry.kind == EntryKind::File);
            if !matches {
                return Err(protocol(format!(
                    "offer {id} ({:?}) was not asked for",
                    entry.path
                )));
            }
            self.wanted = self.wanted.saturating_sub(1);
            self.files.remove(&id).and_then(|f| f.job)
        } else {
            if self.files.contains_key(&id) {
                return Err(protocol(format!("offer reuses file id {id}")));
            }
            None
        };
        let sealed = self.origin.as_ref().map(|check| {
            let hash = haul_proto::seal::entry_hash(&entry);
            let ok = check.entry(&entry, &hash, seal.as_ref());
            (ok, (entry.clone(), hash))
        });
        entry.path = self.full_path(&entry.path);
        let count = entry.chunk_count();
        let unsealed = sealed.as_ref().is_some_and(|(ok, _)| !ok);
        let file = |phase, entry: Entry| File {
            phase,
            entry,
            first,
            end,
            received: 0,
            job,
            sealed: sealed.map(|(_, s)| s),
            vouched: None,
            changes: None,
        };
        if unsealed {
            let path = entry.path.clone();
            // A seal that fails is evidence against the sender; none at all
            // is an honest relay's offer of a version it no longer holds
            // the seals of (dropped as changed at the origin): refused, no
            // more.
            if seal.is_some() {
                self.core.event(Event::SealFailed {
                    path: path.clone(),
                    chunk: None,
                });
            }
            self.files.insert(id, file(Phase::Making, entry));
            let why = "not sealed by this transfer's origin (altered by a relay, or not \
                       from the client that admitted this node): refused";
            self.refuse(id, &path, ErrorCode::Unsealed, why.into());
            return Ok(());
        }
        // Paths are checked here, before the driver touches anything.
        let checked = check_entry_path(&entry.path).and_then(|()| match &entry.kind {
            EntryKind::Symlink { target } => validate_symlink_target(&entry.path, target),
            _ => Ok(()),
        });
        if let Err(e) = checked {
            let path = entry.path.clone();
            self.files.insert(id, file(Phase::Making, entry));
            self.refuse(id, &path, ErrorCode::BadPath, e.to_string());
            return Ok(());
        }
        match entry.kind {
            EntryKind::HardLink { .. } => {
                // Listings carry further names; a sender links them after
                // the transfer (`Request::Link`, or the receiver's own).
                let path = entry.path.clone();
                self.files.insert(id, file(Phase::Making, entry));
                let why = "a hard link is made once its file verified, never offered";
                self.refuse(id, &path, ErrorCode::Protocol, why.into());
            }
            EntryKind::Dir | EntryKind::Symlink { .. } => {
                self.files.insert(id, file(Phase::Making, entry.clone()));
                self.core.request(ReceiverIo::Make { file: id, entry });
            }
            EntryKind::File => {
                if first > end || end > count {
                    return Err(protocol(format!(
                        "offer range {first}..{end} outside 0..{count}"
                    )));
                }
                self.files.insert(id, file(Phase::Preparing, entry.clone()));
                self.core.request(ReceiverIo::Prepare {
                    file: id,
                    entry,
                    first,
                    end,
                    content,
                });
            }
        }
        Ok(())
    }

    /// Refuses an entry: `FileError` to the peer, an event here.
    fn refuse(&mut self, id: FileId, path: &str, code: ErrorCode, message: String) {
        tracing::debug!("refused {path:?}: {message}");
        let shown = self.peer_text(message.clone());
        self.core.send(Message::FileError {
            id,
            code,
            message: shown,
        });
        self.settle(id);
        self.core.event(Event::file_error(path.to_owned(), message));
    }

    /// What will change here when `file` lands (rsync's `-i` string, from
    /// the driver's look at what is at its name): told to the observer
    /// before its `FileDone`, and to the sender in its `Done` (version 13).
    /// Call before [`Receiver::made`] or [`Receiver::prepared`].
    pub fn itemized(&mut self, file: FileId, code: String) {
        if let Some(f) = self.files.get_mut(&file) {
            f.changes = Some(code);
        }
    }

    /// The changes of `file` as its `Done` carries them, told here too.
    fn changes_of(&mut self, file: FileId) -> String {
        let Some(f) = self.files.get_mut(&file) else {
            return String::new();
        };
        let code = f.changes.take().unwrap_or_default();
        if !code.is_empty() {
            let path = f.entry.named();
            self.core.event(Event::Itemized {
                path,
                code: code.clone(),
            });
        }
        code
    }

    /// The driver made a directory or symlink.
    pub fn made(&mut self, now: Instant, file: FileId, result: Result<(), Refusal>) {
        self.core.io_done(now);
        let Some(path) = self
            .files
            .get(&file)
            .filter(|f| f.phase == Phase::Making)
            .map(|f| f.entry.path.clone())
        else {
            return;
        };
        match result {
            Ok(()) => {
                let message = self.changes_of(file);
                self.core.send(Message::Done {
                    id: file,
                    ok: true,
                    root: [0; 32],
                    message,
                });
                self.settle(file);
                self.core.event(Event::made(path));
            }
            Err(r) => self.refuse(file, &path, r.code, r.message),
        }
        self.maybe_bye();
    }

    /// The driver prepared a file. False when the file is no longer wanted
    /// here (released, or failed, meanwhile): the driver drops what it
    /// opened for it.
    pub fn prepared(
        &mut self,
        now: Instant,
        file: FileId,
        result: Result<Prepared, Refusal>,
    ) -> bool {
        self.core.io_done(now);
        let Some(f) = self
            .files
            .get_mut(&file)
            .filter(|f| f.phase == Phase::Preparing)
        else {
            return false;
        };
        let (path, size, first, end) = (f.entry.path.clone(), f.entry.size, f.first, f.end);
        match result {
            Ok(Prepared::UpToDate) if self.origin.is_some() && first < end => {
                // The sender sends the origin's seals of every chunk first.
                self.core.send(Message::Need {
                    id: file,
                    skip: true,
                    have: Vec::new(),
                });
                f.phase = Phase::AwaitingSeals(end - first);
            }
            Ok(Prepared::UpToDate) => {
                self.core.send(Message::Need {
                    id: file,
                    skip: true,
                    have: Vec::new(),
                });
                // -i: what was brought in line in place, if anything.
                let message = self.changes_of(file);
                self.core.send(Message::Done {
                    id: file,
                    ok: true,
                    root: [0; 32],
                    message,
                });
                self.settle(file);
                self.core.event(Event::up_to_date(path, size));
            }
            Ok(Prepared::Receive { have }) => {
                f.phase = Phase::Receiving(Round::default());
                let have = have
                    .into_iter()
                    .filter(|(i, _)| (first..end).contains(i))
                    .collect();
                self.core.send(Message::Need {
                    id: file,
                    skip: false,
                    have,
                });
                if first == 0 {
                    self.core.event(Event::FileStart { path, size });
                }
            }
            Err(r) => self.refuse(file, &path, r.code, r.message),
        }
        self.maybe_bye();
        true
    }

    /// A chunk header arrived: where its payload goes (read it before the
    /// next message). A header that breaks the rules ends the session.
    pub fn handle_chunk(
        &mut self,
        now: Instant,
        h: ChunkHeader,
    ) -> Result<ChunkAction, SessionError> {
        self.core.check()?;
        self.core.received(now, true);
        match self.chunk(h) {
            Ok(action) => Ok(action),
            Err(e) => self.core.fail(e),
        }
    }

    fn chunk(&mut self, h: ChunkHeader) -> Result<ChunkAction, SessionError> {
        let Some(f) = self.files.get_mut(&h.id) else {
            // A file settled meanwhile (it failed, or was released) may
            // still have chunks on the way: they are dropped.
            if self.settled.contains(&h.id) {
                return Ok(ChunkAction::Discard);
            }
            return Err(protocol(format!("chunk for unknown file id {}", h.id)));
        };
        let Phase::Receiving(round) = &mut f.phase else {
            return Err(protocol(format!(
                "chunk for file id {} that is not receiving",
                h.id
            )));
        };
        if h.index < f.first || h.index >= f.end || h.len != f.entry.chunk_len(h.index) {
            return Err(protocol(format!(
                "chunk {} ({} bytes) does not fit {} ({}..{})",
                h.index, h.len, f.entry.path, f.first, f.end
            )));
        }
        let again = match (round.first_seen, round.seen.as_mut()) {
            (None, _) => {
                round.first_seen = Some(h.index);
                false
            }
            (Some(first), None) => {
                let mut set = std::collections::HashSet::new();
                set.insert(first);
                let again = !set.insert(h.index);
                round.seen = Some(set);
                again
            }
            (Some(_), Some(set)) => !set.insert(h.index),
        };
        if again {
            return Err(protocol(format!(
                "chunk {} of {} sent twice in one round",
                h.index, f.entry.path
            )));
        }
        round.arrived += 1;
        if round.expected.is_some_and(|n| round.arrived > n) {
            return Err(protocol(format!(
                "more chunks of {} than its RangeEnd counted",
                f.entry.path
            )));
        }
        f.received += u64::from(h.len);
        // Every payload byte that crosses the network counts, good or bad.
        let path = f.entry.path.clone();
        let unsealed = match (&self.origin, &f.sealed) {
            (Some(check), Some((wire, hash))) => {
                !check.chunk(wire, hash, h.index, &h.digest, h.seal.as_ref())
            }
            (Some(_), None) => true,
            (None, _) => false,
        };
        let action = if round.error.is_some() {
            ChunkAction::Discard
        } else if unsealed {
            tracing::warn!(
                "chunk {} of {path} is not sealed by the transfer's origin; asking again",
                h.index
            );
            if h.seal.is_some() {
                self.core.event(Event::SealFailed {
                    path: path.clone(),
                    chunk: Some(h.index),
                });
            }
            round.bad.push(h.index);
            ChunkAction::Discard
        } else {
            round.writing += 1;
            self.pending.insert((h.id, h.index), h.digest);
            self.core.io_pending += 1;
            ChunkAction::Write {
                file: h.id,
                index: h.index,
                digest: h.digest,
            }
        };
        self.core.event(Event::Progress {
            path,
            bytes: u64::from(h.len),
        });
        if action == ChunkAction::Discard {
            self.end_round(h.id);
            self.maybe_bye();
        }
        Ok(action)
    }

    /// The driver verified (and wrote, or not) a chunk's payload.
    pub fn chunk_done(&mut self, now: Instant, file: FileId, index: u32, outcome: ChunkOutcome) {
        self.core.io_done(now);
        let Some(f) = self.files.get_mut(&file) else {
            return;
        };
        let Phase::Receiving(round) = &mut f.phase else {
            return;
        };
        let Some(digest) = self.pending.remove(&(file, index)) else {
            return;
        };
        round.writing = round.writing.saturating_sub(1);
        match outcome {
            ChunkOutcome::Good => self.verified.push_back((file, index, digest)),
            ChunkOutcome::Bad => {
                tracing::warn!(
                    "chunk {index} of {} failed verification; asking again",
                    f.entry.path
                );
                round.bad.push(index);
                // Its digest passed the origin's seal, its bytes do not
                // hash to it: not the origin's bytes. A relay sends the
                // bytes it hashed, so the same chunk failing twice is
                // evidence against the sender (or the link to it); once may
                // be a plaintext link's flipped bit, asked again. (The
                // client sends from its file, which may change under it:
                // evidence on its edges blames nobody.)
                if self.origin.is_some() && !self.failed_once.insert((file, index)) {
                    let path = f.entry.path.clone();
                    self.core.event(Event::SealFailed {
                        path,
                        chunk: Some(index),
                    });
                }
            }
            ChunkOutcome::Failed(e) => {
                round.error.get_or_insert(e);
            }
        }
        if round.writing == 0 {
            if let Some(root) = round.commit.take() {
                f.phase = Phase::Committing;
                self.core.request(ReceiverIo::Commit { file, root });
                return;
            }
        }
        self.end_round(file);
        self.maybe_bye();
    }

    /// Ends a round once its counted chunks all arrived and were written.
    fn end_round(&mut self, id: FileId) {
        let Some(f) = self.files.get_mut(&id) else {
            return;
        };
        let Phase::Receiving(round) = &mut f.phase else {
            return;
        };
        if round.expected != Some(round.arrived) || round.writing > 0 {
            return;
        }
        if let Some(error) = round.error.take() {
            let path = f.entry.path.clone();
            self.refuse(id, &path, ErrorCode::Io, error);
            return;
        }
        let bad = std::mem::take(&mut round.bad);
        let clean = bad.is_empty();
        self.core.send(Message::RangeStatus { id, bad });
        if !clean {
            f.phase = Phase::Receiving(Round::default());
            return;
        }
        let whole = f.first == 0 && f.end == f.entry.chunk_count();
        f.phase = Phase::AwaitingCommit;
        if whole {
            return;
        }
        // A clean range of a split file. When pulling, the last one asks
        // for the commit; the others are released. A pushed range waits for
        // the sender's `Commit` or `Release`; in a fan-out it is a stripe,
        // which this side puts together with the other senders' stripes.
        let first = f.first;
        match f.job.as_ref().and_then(|j| j.group.clone()) {
            Some(group) if group.finish_range(first) => self.core.send(Message::Finish { id }),
            Some(_) => {
                self.settle(id);
                self.core.send(Message::Release { id });
            }
            // Put together only under the root the origin vouched for: its
            // `Vouched` follows the sender's confirmation of the stripe.
            None if self.origin.is_some() && !self.fetching && f.vouched.is_some() => {
                f.phase = Phase::Committing;
                self.core.request(ReceiverIo::Assemble { file: id });
            }
            None => {}
        }
    }

    /// The driver committed a file (or could not).
    pub fn committed(&mut self, now: Instant, file: FileId, result: Result<Digest, String>) {
        self.core.io_done(now);
        let Some(f) = self
            .files
            .get(&file)
            .filter(|f| f.phase == Phase::Committing)
        else {
            return;
        };
        let (path, size, received) = (f.entry.path.clone(), f.entry.size, f.received);
        match result {
            Ok(root) => {
                let message = self.changes_of(file);
                self.core.send(Message::Done {
                    id: file,
                    ok: true,
                    root,
                    message,
                });
                tracing::debug!("received {path} ({size} bytes, blake3 {})", hex(&root));
                self.settle(file);
                self.core.event(Event::FileDone {
                    path,
                    size,
                    blake3: hex(&root),
                    sent: received,
                    skipped: false,
                });
            }
            Err(e) => {
                let message = self.peer_text(e.clone());
                self.core.send(Message::Done {
                    id: file,
                    ok: false,
                    root: [0; 32],
                    message,
                });
                self.settle(file);
                self.core.event(Event::file_error(path, e));
            }
        }
        self.maybe_bye();
    }

    /// A stripe of `file` is kept for the file's other stripes (another
    /// session commits it): `Release` to its sender.
    pub fn assembled_elsewhere(&mut self, now: Instant, file: FileId) {
        self.core.io_done(now);
        if self
            .files
            .get(&file)
            .is_some_and(|f| f.phase == Phase::Committing)
        {
            self.core.send(Message::Release { id: file });
            self.settle(file);
        }
        self.maybe_bye();
    }

    /// Drops `id` from this connection.
    fn settle(&mut self, id: FileId) -> Option<File> {
        let f = self.files.remove(&id)?;
        if f.phase == Phase::Wanted {
            self.wanted = self.wanted.saturating_sub(1);
        }
        if !self.pending.is_empty() {
            self.pending.retain(|(file, _), _| *file != id);
        }
        if !self.failed_once.is_empty() {
            self.failed_once.retain(|(file, _)| *file != id);
        }
        self.core.tell(ReceiverIo::Forget { file: id });
        if self.settled.len() >= 2 * MAX_OPEN {
            self.settled.pop_front();
        }
        self.settled.push_back(id);
        Some(f)
    }

    fn maybe_bye(&mut self) {
        match self.stage {
            Stage::Closing if self.files.is_empty() => {
                self.core.send(Message::Bye);
                self.stage = Stage::ByeSent;
            }
            Stage::PeerSaidBye if self.files.is_empty() => {
                self.core.send(Message::Bye);
                self.stage = Stage::Finished;
            }
            _ => {}
        }
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        self.core.poll_transmit(now)
    }

    /// The next I/O request.
    pub fn poll_io(&mut self) -> Option<ReceiverIo> {
        self.core.io.pop_front()
    }

    /// The next event for the observers.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.core.events.pop_front()
    }

    /// The next chunk verified (file, index, digest): what a relay forwards.
    pub fn poll_verified(&mut self) -> Option<(FileId, u32, Digest)> {
        self.verified.pop_front()
    }

    fn expecting(&self) -> bool {
        match self.stage {
            Stage::Finished => false,
            Stage::ByeSent => true,
            _ if self.fetching => !self.files.is_empty(),
            _ => true,
        }
    }

    /// When [`Receiver::handle_timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.core.poll_timeout(self.expecting())
    }

    /// A fan-out's relay: a newer upstream session carries what this one
    /// does. This one fails now if its sender has said nothing for `quiet`,
    /// else as soon as it has ([`SessionError::Superseded`]); its files'
    /// staging stays for the newer session to resume.
    pub fn superseded(&mut self, now: Instant, quiet: Duration) -> Result<(), SessionError> {
        self.core.superseded(now, quiet)
    }

    /// Acts on timers: a keepalive, or a peer silent for too long.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), SessionError> {
        let what = "data from the peer";
        let expecting = self.expecting();
        self.core.handle_timeout(now, expecting, what)
    }
}
