//! The sending role: offers entries, reads and sends the chunks the
//! receiver needs, commits each file.
//!
//! Each file's phase is explicit ([`Phase`]):
//!
//! ```text
//! (serve) Resolving ──▶ Offered ──Need{have}──▶ CheckingClaims ──▶ Sending ──▶ AwaitingStatus
//!                          │                                         ▲              │
//!                          │ Done (dirs, links, skip)                └── bad ───────┤ clean
//!                          ▼                                                        ▼
//!                        (gone)  ◀── Done ── Committed ◀── Commit ── Confirming ◀── (whole file, or last range)
//!                                            Parked ── Finish ──▶ Finishing ──▶ Confirming
//!                                    changed: Confirming ──▶ Settling ──▶ Reopening ──▶ Offered (a new id)
//! ```
//!
//! ## Only a version that existed
//! A file's hash is announced (`Commit`, or a range's digests handed to its
//! group) only after the driver confirmed that the source is still the
//! version it opened ([`SenderIo::Confirm`]: the file's identity from its
//! held descriptor, taken before the first read and again after the last).
//! A pushed file that changed meanwhile is dropped at the receiver
//! (`FileError`), left to settle for a moment ([`SessionConfig::settle`],
//! longer each time), opened again ([`SenderIo::Reopen`]) and offered from
//! scratch under a new id, up to [`SessionConfig::changed_retries`] times;
//! then it fails, saying it was not delivered. A range of a split file, a
//! stripe or a file a serving node sends fails at once (the version that
//! the other ranges, or the peer's listing, describe is gone).
//!
//! In a fan-out the same check is what the origin's seal of the file's root
//! stands for: `Vouched` goes out just before `Commit` (and before the seals
//! of a whole file the receiver skipped), so it is never given for a read a
//! writer tore. A relay's sender passes on the origin's; its driver's
//! confirmation waits until that seal reached the relay, or says the origin
//! dropped the version. That wait is bounded: a confirmation still open
//! after the idle limit fails the file here ([`SessionConfig::idle`]), and
//! nothing is committed downstream unvouched.
//!
//! A pushing client feeds jobs ([`Sender::push_job`]) while it has room; a
//! serving node gets them from the peer's `Want`s, which the driver resolves
//! beneath its root ([`SenderIo::Resolve`]).

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;
use std::time::Instant;

use haul_proto::digest::root_from_digests;
use haul_proto::{
    check_entry_path, ChunkHeader, ChunkSeal, Digest, Entry, EntryKind, ErrorCode, Message,
    MAX_SEALS,
};
use std::sync::Arc;

use crate::core::{protocol, Core};
use crate::groups::SendJob;
use crate::peer_text::without_root;
use crate::seals::{Sealer, NO_SEAL};
use crate::{FileId, SessionConfig, SessionError, Transmit};
use haul_run::{Event, FailKind};

mod confirm;
mod seal;

/// What a sender asks its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SenderIo {
    /// A serving node: open `path` (checked: relative, no `..`) beneath the
    /// root for the peer's `Want`, and answer [`Sender::resolved`] with the
    /// job (the entry named `dest`, chunks `first..end` clamped to the file).
    Resolve {
        /// The file's id on this connection.
        file: FileId,
        /// Path under the served root.
        path: String,
        /// The entry's name in the offer.
        dest: String,
        /// First chunk wanted.
        first: u32,
        /// One past the last chunk wanted (`u32::MAX`: to the end).
        end: u32,
    },
    /// Read and hash chunk `index` of `file` and hold its bytes (or file
    /// range) for the [`Transmit::Chunk`] that follows [`Sender::read_done`].
    Read {
        /// The file.
        file: FileId,
        /// The chunk.
        index: u32,
    },
    /// Hash chunks of `file` without sending them (the receiver's claims to
    /// check, the chunks of a file a fan-out's node skipped for the origin
    /// to seal, or the whole file for a `Finish`); answer
    /// [`Sender::hashed`].
    Hash {
        /// The file.
        file: FileId,
        /// The chunks, in order.
        indices: Vec<u32>,
        /// The digests seal the chunks a relay sends on from its own copy
        /// (a fan-out node skipped the file): the driver may take them
        /// from the file's hash-cache record (haul-engine's
        /// `ChunkSource::seal_digest` says when). Claims and a file's root
        /// are always hashed from the bytes: nothing checks them after.
        sealing: bool,
    },
    /// Every chunk of `file` was read: check its source is still the
    /// version it was when opened, before its hash is announced; answer
    /// [`Sender::confirmed`].
    Confirm {
        /// The file.
        file: FileId,
    },
    /// `file` changed while it was read and was left to settle: open its
    /// source again and answer [`Sender::reopened`] with its entry now.
    Reopen {
        /// The file.
        file: FileId,
    },
    /// Nothing more will be asked of `file` on this connection: drop its
    /// source and any bytes still held for it.
    Forget {
        /// The file.
        file: FileId,
    },
}

/// Where one file is on this connection.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// A `Want` being resolved by the driver.
    Resolving,
    /// Offered; waiting for `Need` (or `Done`, `FileError`).
    Offered,
    /// Checking the chunks the receiver claims to hold.
    CheckingClaims(Vec<(u32, Digest)>),
    /// Fan-out: hashing a file the receiver skipped, to send it the
    /// origin's seals of every chunk (it answers `Done` once it has them).
    Sealing,
    /// Reading and sending chunks.
    Sending(Round),
    /// `RangeEnd` sent; waiting for `RangeStatus`.
    AwaitingStatus,
    /// A clean range a fetching receiver may ask to `Finish`.
    Parked,
    /// Hashing the whole file for a `Finish`.
    Finishing,
    /// A fan-out stripe: the receiver puts the file together from every
    /// stripe's sender; `Done` (this stripe completed it) or `Release`
    /// (another sender's will) comes next.
    Assembling,
    /// Waiting for `Done`: the receiver skipped the file, or it is being
    /// sealed or confirmed.
    AwaitingDone,
    /// `Commit` sent: only the receiver's verdict (`Done`, `FileError`)
    /// comes back, and a closing sender may say `Bye` already (v23).
    Committed,
    /// Read in full: the driver checks the source did not change, then
    /// what [`Confirmed`] says follows.
    Confirming(Confirmed),
    /// It changed while it was read: offered again from scratch at this time.
    Settling(Instant),
    /// Its source being opened again.
    Reopening,
}

/// What follows once the source is confirmed unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Confirmed {
    /// `Commit` with this root.
    Commit(Digest),
    /// A clean range: commit the file, hand its digests to its group, or park.
    RangeClean,
    /// Fan-out, a whole file the receiver skipped, hashed for its seals:
    /// `Vouched` for its root, then the seals of every chunk.
    Seal,
    /// Fan-out, a stripe the receiver skipped, hashed for its seals:
    /// `Vouched` for the whole file's root, then the stripe's seals.
    SealStripe,
    /// A chunk could not be read: the file fails with this error. (A file
    /// cut short while it was sent fails its reads past the new end; that
    /// is a change, and is answered as one.)
    ReadFailed(String),
}

/// One round of chunks: those still to read, reads outstanding, chunks sent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Round {
    todo: VecDeque<u32>,
    reading: usize,
    sent: u32,
    /// Its source could not give a chunk yet ([`Sender::read_not_ready`]):
    /// no reads until [`Sender::sources_ready`].
    unready: bool,
}

#[derive(Debug)]
struct Flight<S> {
    /// The job; `None` while a `Want` is resolved.
    job: Option<SendJob<S>>,
    phase: Phase,
    digests: Vec<Option<Digest>>,
    retries: u32,
    /// Times it changed while it was read.
    changes: u32,
    /// Payload bytes sent for it on this connection.
    sent: u64,
    /// Fan-out: when a confirmation asked for ([`SenderIo::Confirm`]) is
    /// overdue. A relay's confirmation waits for the origin's `Vouched`,
    /// which may never come (its upstream was lost): the file then fails
    /// here instead of keeping the connection busy for ever.
    confirm_by: Option<Instant>,
}

/// Where a sender's jobs come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    /// A pushing client: [`Sender::push_job`].
    Push,
    /// A serving node: the peer's `Want`s.
    Serve,
}

/// How the conversation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Running,
    /// No more jobs: `Bye` once everything in flight is committed.
    Closing,
    /// `Bye` sent; waiting for the verdicts still owed, then the peer's.
    ByeSent,
    Finished,
}

/// The sending side of one connection.
#[derive(Debug)]
pub struct Sender<S> {
    core: Core<SenderIo>,
    cfg: SessionConfig,
    feed: Feed,
    flights: HashMap<FileId, Flight<S>>,
    next_id: FileId,
    stage: Stage,
    /// Reads outstanding across files.
    reading: usize,
    /// Files with chunks still to read, in the order they asked.
    sending: VecDeque<FileId>,
    /// Flights that are ranges of a split file.
    grouped: usize,
    /// Fan-out: seals every offer and chunk.
    sealer: Option<Arc<dyn Sealer>>,
    /// The time of the latest call that passed one in.
    now: Instant,
    /// Confirmations that were overdue: counted as answered already, so a
    /// late answer is ignored.
    overdue: rustc_hash::FxHashSet<FileId>,
}

impl<S> Sender<S> {
    /// A pushing client's sender.
    pub fn push(cfg: SessionConfig, now: Instant) -> Self {
        Self::new(cfg, Feed::Push, now)
    }

    /// A serving node's sender (jobs come from the peer's `Want`s).
    pub fn serve(cfg: SessionConfig, now: Instant) -> Self {
        Self::new(cfg, Feed::Serve, now)
    }

    fn new(cfg: SessionConfig, feed: Feed, now: Instant) -> Self {
        Self {
            core: Core::new(cfg.idle, cfg.heartbeat, now),
            cfg,
            feed,
            flights: HashMap::default(),
            next_id: 1,
            stage: Stage::Running,
            reading: 0,
            sending: VecDeque::new(),
            grouped: 0,
            sealer: None,
            now,
            overdue: Default::default(),
        }
    }

    /// A fan-out sender: every offer and chunk carries a seal from `sealer`,
    /// and chunks the receiver already holds get theirs in `Sealed`.
    pub fn seal_with(&mut self, sealer: Arc<dyn Sealer>) {
        self.sealer = Some(sealer);
    }

    /// Jobs a pushing client may hand over now (the window's free room).
    pub fn room(&self) -> usize {
        if self.feed != Feed::Push || self.stage != Stage::Running {
            return 0;
        }
        self.cfg.window.saturating_sub(self.flights.len())
    }

    /// Groups (split files) with a range in flight here: a connection never
    /// holds two ranges of one file.
    pub fn busy_groups(&self) -> Vec<usize> {
        if self.grouped == 0 {
            return Vec::new();
        }
        self.flights
            .values()
            .filter_map(|f| f.job.as_ref()?.group.as_ref())
            .map(|g| std::sync::Arc::as_ptr(g) as usize)
            .collect()
    }

    /// Offers `job` (its source is open): returns its id.
    pub fn push_job(&mut self, _now: Instant, job: SendJob<S>) -> FileId {
        let id = self.next_id;
        self.next_id += 1;
        self.offer(id, job);
        id
    }

    /// No more jobs: say `Bye` once everything in flight is committed
    /// (its verdict may still come after it).
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

    /// True while it takes jobs (not closing).
    pub fn is_taking(&self) -> bool {
        self.stage == Stage::Running
    }

    /// The driver finished writing what was transmitted (the peer's
    /// silence counts from then at the earliest).
    pub fn flushed(&mut self, now: Instant) {
        self.core.flushed(now);
    }

    /// Files in flight now.
    pub fn in_flight(&self) -> usize {
        self.flights.len()
    }

    /// The jobs not finished (to give back when the connection broke).
    pub fn into_unfinished(self) -> Vec<SendJob<S>> {
        self.flights.into_values().filter_map(|f| f.job).collect()
    }

    fn offer(&mut self, id: FileId, job: SendJob<S>) {
        self.offer_again(id, job, 0);
    }

    /// Offers `job` as file `id`, a file that changed `changes` times so far.
    fn offer_again(&mut self, id: FileId, job: SendJob<S>, changes: u32) {
        let entry = &job.entry;
        let seal = self.sealer.as_ref().and_then(|s| {
            // Unsealed, the receiver refuses it and says why.
            s.entry(entry)
                .map_err(|e| tracing::warn!("{}: {e}", entry.path))
                .ok()
        });
        self.core.send(Message::Offer {
            id,
            entry: entry.clone(),
            first: job.first,
            end: job.end,
            // Never through a relay: only the origin could vouch for it.
            content: job.content.filter(|_| self.sealer.is_none()).map(Box::new),
            seal,
        });
        if job.first == 0 {
            self.core.event(Event::FileStart {
                path: entry.path.clone(),
                size: entry.size,
            });
        }
        let digests = vec![None; entry.chunk_count() as usize];
        if job.group.is_some() {
            self.grouped += 1;
        }
        self.flights.insert(
            id,
            Flight {
                job: Some(job),
                phase: Phase::Offered,
                digests,
                retries: 0,
                changes,
                sent: 0,
                confirm_by: None,
            },
        );
    }

    fn peer_text(&self, text: String) -> String {
        without_root(self.cfg.hide.as_deref().map(std::path::Path::new), text)
    }

    /// A message from the receiver.
    pub fn handle(&mut self, now: Instant, msg: Message) -> Result<(), SessionError> {
        self.core.check()?;
        self.core.received(now, true);
        self.now = now;
        let r = self.dispatch(msg);
        if let Err(e) = r {
            return self.core.fail(e);
        }
        self.maybe_bye();
        Ok(())
    }

    fn dispatch(&mut self, msg: Message) -> Result<(), SessionError> {
        if self.stage == Stage::ByeSent {
            // After our goodbye, the verdicts on the files committed
            // before it (v23), then the peer's.
            match msg {
                Message::KeepAlive => return Ok(()),
                // A receiver's goodbye comes after every verdict it owes:
                // files without one go back to be sent again.
                Message::Bye if !self.flights.is_empty() => {
                    return Err(protocol(format!(
                        "the receiver said Bye without its verdict on {} committed file(s)",
                        self.flights.len()
                    )))
                }
                Message::Bye => {
                    self.stage = Stage::Finished;
                    return Ok(());
                }
                Message::Done { .. } | Message::FileError { .. } if !self.flights.is_empty() => {}
                // A node that refused the connection, answering `Hello`,
                // after a session that had nothing to say said `Bye`.
                Message::Refused { code, message } => {
                    return Err(SessionError::Refused { code, message })
                }
                other => return Err(protocol(format!("expected Bye, got {other:?}"))),
            }
        }
        match msg {
            Message::Need { id, skip: true, .. } if !self.flights.contains_key(&id) => Ok(()),
            Message::Need { id, skip, have } => self.need(id, skip, have),
            Message::RangeStatus { id, bad } => self.range_status(id, bad),
            Message::Finish { id } => self.finish(id),
            Message::Release { id } => {
                if self.flights.get(&id).is_some_and(|f| {
                    matches!(
                        f.phase,
                        Phase::Parked
                            | Phase::Assembling
                            | Phase::Confirming(Confirmed::RangeClean)
                    )
                }) {
                    self.forget(id);
                }
                Ok(())
            }
            Message::KeepAlive => Ok(()),
            Message::Done {
                id,
                ok,
                root,
                message,
            } => {
                self.done(id, ok, root, message);
                Ok(())
            }
            Message::FileError { id, message, .. } => {
                if let Some(job) = self.forget(id) {
                    self.core.event(Event::file_error(
                        job.entry.path,
                        format!("receiver: {message}"),
                    ));
                }
                Ok(())
            }
            Message::Want {
                id,
                path,
                dest,
                first,
                end,
            } => self.want(id, path, dest, first, end),
            Message::Bye => match (self.feed, self.stage) {
                (Feed::Serve, _) => {
                    self.core.send(Message::Bye);
                    self.stage = Stage::Finished;
                    Ok(())
                }
                (Feed::Push, _) => Err(protocol("receiver said Bye with files in flight")),
            },
            Message::Refused { code, message } => Err(SessionError::Refused { code, message }),
            other => Err(protocol(format!("unexpected {other:?} at the sender"))),
        }
    }

    fn want(
        &mut self,
        id: FileId,
        path: String,
        dest: String,
        first: u32,
        end: u32,
    ) -> Result<(), SessionError> {
        if self.feed != Feed::Serve {
            return Err(protocol("Want on a push connection"));
        }
        if self.flights.len() >= 4 * self.cfg.window {
            return Err(protocol("too many files asked for at once"));
        }
        if self.flights.contains_key(&id) {
            return Err(protocol(format!("Want reuses id {id} still in flight")));
        }
        // Paths are checked here, before the driver touches anything.
        let bad = check_entry_path(&path)
            .err()
            .or_else(|| check_entry_path(&dest).err());
        if let Some(e) = bad {
            self.core.send(Message::FileError {
                id,
                code: ErrorCode::BadPath,
                message: e.to_string(),
            });
            return Ok(());
        }
        self.flights.insert(
            id,
            Flight {
                job: None,
                phase: Phase::Resolving,
                digests: Vec::new(),
                retries: 0,
                changes: 0,
                sent: 0,
                confirm_by: None,
            },
        );
        self.core.request(SenderIo::Resolve {
            file: id,
            path,
            dest,
            first,
            end,
        });
        Ok(())
    }

    /// The driver resolved a `Want`: the job to offer, or why not.
    pub fn resolved(
        &mut self,
        now: Instant,
        file: FileId,
        result: Result<SendJob<S>, (ErrorCode, String)>,
    ) {
        self.core.io_done(now);
        if !self
            .flights
            .get(&file)
            .is_some_and(|f| f.phase == Phase::Resolving)
        {
            return;
        }
        self.flights.remove(&file);
        let result = result.map(|mut job| {
            // `end` is `u32::MAX` for "to the end".
            job.end = job.end.min(job.entry.chunk_count());
            job
        });
        match result {
            Ok(job) if job.first <= job.end => self.offer(file, job),
            Ok(job) => {
                self.core.tell(SenderIo::Forget { file });
                let message = format!("range {}..{} is empty", job.first, job.end);
                self.core.send(Message::FileError {
                    id: file,
                    code: ErrorCode::Protocol,
                    message,
                });
            }
            Err((code, message)) => {
                self.core.tell(SenderIo::Forget { file });
                let message = self.peer_text(message);
                self.core.send(Message::FileError {
                    id: file,
                    code,
                    message,
                });
            }
        }
        self.maybe_bye();
    }

    fn need(
        &mut self,
        id: FileId,
        skip: bool,
        have: Vec<(u32, Digest)>,
    ) -> Result<(), SessionError> {
        let Some(f) = self.flights.get_mut(&id) else {
            return Err(protocol(format!("Need for unknown file id {id}")));
        };
        let Some((first, end)) = f.job.as_ref().map(|j| (j.first, j.end)) else {
            return Err(protocol(format!("Need for file id {id} not offered yet")));
        };
        if f.phase != Phase::Offered {
            return Err(protocol(format!("a second Need for file id {id}")));
        }
        if skip {
            if self.sealer.is_some() && first < end {
                f.phase = Phase::Sealing;
                let indices = (first..end).collect();
                self.core.request(SenderIo::Hash {
                    file: id,
                    indices,
                    sealing: true,
                });
            } else {
                f.phase = Phase::AwaitingDone;
            }
            return Ok(());
        }
        if have.is_empty() {
            self.start_round(id, (first..end).collect());
            return Ok(());
        }
        let mut seen = vec![false; (end - first) as usize];
        let mut claimed = Vec::with_capacity(have.len());
        for (i, d) in have {
            if i < first || i >= end {
                return Err(protocol(format!(
                    "Need names chunk {i} outside {first}..{end}"
                )));
            }
            if !std::mem::replace(&mut seen[(i - first) as usize], true) {
                claimed.push((i, d));
            }
        }
        if claimed.is_empty() {
            self.start_round(id, (first..end).collect());
        } else {
            // Trust a held chunk only if it matches our data now.
            let indices = claimed.iter().map(|(i, _)| *i).collect();
            f.phase = Phase::CheckingClaims(claimed);
            self.core.request(SenderIo::Hash {
                file: id,
                indices,
                sealing: false,
            });
        }
        Ok(())
    }

    /// The driver hashed chunks (claims to check, or a whole file).
    pub fn hashed(
        &mut self,
        now: Instant,
        file: FileId,
        result: Result<Vec<(u32, Digest)>, String>,
    ) {
        self.core.io_done(now);
        self.now = now;
        self.hashed_inner(file, result);
        self.maybe_bye();
    }

    fn hashed_inner(&mut self, file: FileId, result: Result<Vec<(u32, Digest)>, String>) {
        let Some(f) = self.flights.get_mut(&file) else {
            return;
        };
        let Some((first, end, chunk_size, size)) = f
            .job
            .as_ref()
            .map(|j| (j.first, j.end, j.entry.chunk_size, j.entry.size))
        else {
            return;
        };
        let mine = match result {
            Ok(d) => d,
            Err(e) => return self.fail_local(file, e),
        };
        match std::mem::replace(&mut f.phase, Phase::AwaitingDone) {
            Phase::CheckingClaims(claimed) => {
                let mut held = vec![false; (end - first) as usize];
                for ((i, theirs), (j, ours)) in claimed.iter().zip(&mine) {
                    if i == j && theirs == ours {
                        f.digests[*i as usize] = Some(*ours);
                        held[(*i - first) as usize] = true;
                    }
                }
                let todo = (first..end)
                    .filter(|i| !held[(*i - first) as usize])
                    .collect();
                let held: Vec<(u32, Digest)> = claimed
                    .iter()
                    .filter(|(i, _)| held[(*i - first) as usize])
                    .copied()
                    .collect();
                self.send_seals(file, &held);
                self.start_round(file, todo);
            }
            Phase::Sealing if first == 0 && end as usize == f.digests.len() => {
                // A whole file: vouched for once confirmed, so the receiver
                // can relay it.
                for (i, d) in &mine {
                    if let Some(slot) = f.digests.get_mut(*i as usize) {
                        *slot = Some(*d);
                    }
                }
                self.confirm(file, Confirmed::Seal);
            }
            Phase::Sealing => {
                // A stripe the receiver skipped: it relays it too, so it
                // gets `Vouched` for the whole file's root (before the
                // seals, after which it lets the stripe go). The digests
                // go to the sealer first: the origin's makes the root of
                // every stripe's, once all were confirmed.
                for (i, d) in &mine {
                    if let Some(slot) = f.digests.get_mut(*i as usize) {
                        *slot = Some(*d);
                    }
                    if let (Some(sealer), Some(job)) = (&self.sealer, &f.job) {
                        let _ = sealer.chunk(&job.entry, *i, d);
                    }
                }
                self.confirm(file, Confirmed::SealStripe);
            }
            Phase::Finishing => {
                let digests: Vec<Digest> = mine.into_iter().map(|(_, d)| d).collect();
                match root_from_digests(&digests, chunk_size, size) {
                    Some(root) => self.confirm(file, Confirmed::Commit(root)),
                    None => self.fail_local(file, "cannot compute the file's hash".into()),
                }
            }
            other => f.phase = other,
        }
    }

    fn start_round(&mut self, id: FileId, todo: VecDeque<u32>) {
        let Some(f) = self.flights.get_mut(&id) else {
            return;
        };
        f.phase = Phase::Sending(Round {
            todo,
            ..Round::default()
        });
        self.sending.push_back(id);
        self.pump();
    }

    /// Issues reads while fewer than `reads_ahead` are outstanding, and ends
    /// the rounds whose chunks all went out.
    fn pump(&mut self) {
        let mut idx = 0;
        while idx < self.sending.len() {
            let id = self.sending[idx];
            let Some(f) = self.flights.get_mut(&id) else {
                self.sending.remove(idx);
                continue;
            };
            let Phase::Sending(round) = &mut f.phase else {
                self.sending.remove(idx);
                continue;
            };
            if round.unready {
                idx += 1;
                continue;
            }
            while self.reading < self.cfg.reads_ahead.max(1) {
                let Some(index) = round.todo.pop_front() else {
                    break;
                };
                round.reading += 1;
                self.reading += 1;
                self.core.request(SenderIo::Read { file: id, index });
            }
            if round.todo.is_empty() && round.reading == 0 {
                let chunks = round.sent;
                f.phase = Phase::AwaitingStatus;
                self.core.send(Message::RangeEnd { id, chunks });
                self.sending.remove(idx);
                continue;
            }
            if self.reading >= self.cfg.reads_ahead.max(1) {
                break;
            }
            idx += 1;
        }
    }

    /// The driver cannot read chunk `index` of `file` yet: its source (a
    /// relay's file still being received) has not verified that chunk. The
    /// read is given back and the file's reads wait for
    /// [`Self::sources_ready`], while other files' reads go ahead — a
    /// relay's small files still to come must not hold back a large one
    /// already arriving. Keepalives go out meanwhile.
    pub fn read_not_ready(&mut self, now: Instant, file: FileId, index: u32) {
        self.now = now;
        self.core.io_pending = self.core.io_pending.saturating_sub(1);
        let Some(f) = self.flights.get_mut(&file) else {
            return;
        };
        let Phase::Sending(round) = &mut f.phase else {
            return;
        };
        round.reading = round.reading.saturating_sub(1);
        self.reading = self.reading.saturating_sub(1);
        let at = round.todo.iter().position(|&i| i > index);
        round.todo.insert(at.unwrap_or(round.todo.len()), index);
        if !round.unready {
            round.unready = true;
            self.core.waiting += 1;
        }
        self.pump();
    }

    /// A source may have chunks ready now: parked files read again (one
    /// still not ready is parked again).
    pub fn sources_ready(&mut self) {
        for f in self.flights.values_mut() {
            if let Phase::Sending(round) = &mut f.phase {
                if std::mem::take(&mut round.unready) {
                    self.core.waiting = self.core.waiting.saturating_sub(1);
                }
            }
        }
        self.pump();
    }

    /// The driver read and hashed chunk `index` of `file` and holds its
    /// bytes: the chunk goes out next. Every `Read` asked for is answered,
    /// also one the driver dropped (with an `Err`).
    pub fn read_done(
        &mut self,
        now: Instant,
        file: FileId,
        index: u32,
        result: Result<Digest, String>,
    ) {
        self.core.io_done(now);
        self.read_done_inner(file, index, result);
        self.maybe_bye();
    }

    fn read_done_inner(&mut self, file: FileId, index: u32, result: Result<Digest, String>) {
        let Some(f) = self.flights.get_mut(&file) else {
            return;
        };
        let Phase::Sending(round) = &mut f.phase else {
            return;
        };
        round.reading = round.reading.saturating_sub(1);
        self.reading = self.reading.saturating_sub(1);
        let Some(job) = &f.job else { return };
        let sealed = |digest: Digest| match &self.sealer {
            None => Ok((digest, None)),
            Some(s) => s
                .chunk(&job.entry, index, &digest)
                .map(|s| (digest, Some(s))),
        };
        let digest = match result {
            Ok(d) => d,
            Err(e) => {
                // Reads still outstanding will come back to a file no
                // longer sending.
                self.reading = self.reading.saturating_sub(round.reading);
                if round.unready {
                    self.core.waiting = self.core.waiting.saturating_sub(1);
                }
                f.phase = Phase::Confirming(Confirmed::ReadFailed(e));
                self.core.request(SenderIo::Confirm { file });
                self.pump();
                return;
            }
        };
        let (digest, seal) = match sealed(digest) {
            Ok(d) => d,
            Err(e) => {
                self.fail_local(file, e);
                self.pump();
                return;
            }
        };
        round.sent += 1;
        let len = job.entry.chunk_len(index);
        if let Some(slot) = f.digests.get_mut(index as usize) {
            *slot = Some(digest);
        }
        f.sent += u64::from(len);
        if let Some(group) = &job.group {
            group.add_sent(u64::from(len));
        }
        let path = job.entry.path.clone();
        self.core.transmits.push_back(Transmit::Chunk(ChunkHeader {
            packed: None,
            from_record: false,
            id: file,
            index,
            len,
            digest,
            seal,
        }));
        self.core.event(Event::Progress {
            path,
            bytes: u64::from(len),
        });
        self.pump();
    }

    fn range_status(&mut self, id: FileId, bad: Vec<u32>) -> Result<(), SessionError> {
        let max_retries = self.cfg.max_retries;
        let Some(f) = self.flights.get_mut(&id) else {
            return Err(protocol(format!("RangeStatus for unknown file id {id}")));
        };
        let Some(job) = &f.job else {
            return Err(protocol(format!(
                "RangeStatus for file id {id} not offered yet"
            )));
        };
        if f.phase != Phase::AwaitingStatus {
            return Err(protocol(format!(
                "RangeStatus for file id {id} before its RangeEnd"
            )));
        }
        let (first, end, path) = (job.first, job.end, job.entry.path.clone());
        if !bad.is_empty() {
            f.retries += 1;
            if bad.iter().any(|i| *i < first || *i >= end) {
                return Err(protocol("RangeStatus names a chunk outside the range"));
            }
            if f.retries > max_retries {
                let msg = format!(
                    "chunks kept failing verification after {max_retries} resends (corrupting link?)"
                );
                self.fail_local(id, msg);
                return Ok(());
            }
            tracing::debug!("resending {} chunk(s) of {path}", bad.len());
            self.start_round(id, bad.into_iter().collect());
            return Ok(());
        }
        self.confirm(id, Confirmed::RangeClean);
        Ok(())
    }

    /// The file's `Commit` with `root`; in a fan-out preceded by the
    /// origin's seal of that root (`Vouched`), without which it fails here.
    fn commit(&mut self, id: FileId, root: Digest) {
        let Some(f) = self.flights.get_mut(&id) else {
            return;
        };
        // An empty file has nothing to tear: no root seal needed.
        let chunks = f.job.as_ref().map_or(0, |j| j.entry.chunk_count());
        if let (Some(sealer), Some(job), true) = (&self.sealer, &f.job, chunks > 0) {
            match sealer.root(&job.entry, &root) {
                Ok(seal) => self.core.send(Message::Vouched { id, root, seal }),
                Err(e) => return self.fail_local(id, e),
            }
        }
        f.phase = Phase::Committed;
        self.core.send(Message::Commit { id, root });
    }

    /// The job of `file` (a driver opening its source again).
    pub fn job(&self, file: FileId) -> Option<&SendJob<S>> {
        self.flights.get(&file)?.job.as_ref()
    }

    fn range_clean(&mut self, id: FileId) -> Result<(), SessionError> {
        let Some(f) = self.flights.get_mut(&id) else {
            return Ok(());
        };
        let Some(job) = &f.job else {
            return Ok(());
        };
        let (first, end, e) = (job.first, job.end, job.entry.clone());
        let group = job.group.clone();
        if first == 0 && end == e.chunk_count() {
            let all: Option<Vec<Digest>> = f.digests.iter().copied().collect();
            let Some(root) = all.and_then(|d| root_from_digests(&d, e.chunk_size, e.size)) else {
                return Err(protocol("range clean but chunks missing"));
            };
            self.commit(id, root);
            return Ok(());
        }
        let Some(group) = group else {
            f.phase = match self.feed {
                // A fetching receiver's range: it may ask to `Finish` here.
                Feed::Serve => Phase::Parked,
                // A pushed range with no group is a fan-out stripe.
                Feed::Push => Phase::Assembling,
            };
            if self.feed == Feed::Push {
                self.vouch_stripe(id, &e);
            }
            return Ok(());
        };
        match group.finish_range(first, &f.digests) {
            Some(root) => self.commit(id, root),
            None => {
                // Another connection commits this file; this range is done.
                self.forget(id);
                self.core.send(Message::Release { id });
                // Unless the others were skipped (the file was there): then
                // nothing commits, and the file is up to date.
                if group.settled_without_commit() {
                    self.core.event(Event::up_to_date(e.path, e.size));
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self, id: FileId) -> Result<(), SessionError> {
        let Some(f) = self.flights.get_mut(&id) else {
            return Err(protocol(format!("Finish for unknown file id {id}")));
        };
        let Some(count) = f.job.as_ref().map(|j| j.entry.chunk_count()) else {
            return Err(protocol(format!("Finish for file id {id} not offered yet")));
        };
        // A `Finish` may overtake the check of the range it follows: the
        // whole file is hashed and checked again anyway.
        if !matches!(
            f.phase,
            Phase::Offered
                | Phase::Parked
                | Phase::AwaitingStatus
                | Phase::AwaitingDone
                | Phase::Committed
                | Phase::Confirming(Confirmed::RangeClean)
        ) {
            return Err(protocol(format!(
                "Finish for file id {id} before its range ended"
            )));
        }
        f.phase = Phase::Finishing;
        self.core.request(SenderIo::Hash {
            file: id,
            indices: (0..count).collect(),
            sealing: false,
        });
        Ok(())
    }

    fn done(&mut self, id: FileId, ok: bool, root: Digest, message: String) {
        let Some(f) = self.flights.get(&id) else {
            return;
        };
        let sent = f.sent;
        let Some(job) = self.forget(id) else {
            return;
        };
        let e = &job.entry;
        if !ok {
            self.core.event(Event::file_error(e.path.clone(), message));
            return;
        }
        let is_file = e.kind == EntryKind::File;
        let skipped = is_file && root == [0; 32];
        // A split file is reported once: when its commit is done, or when
        // every range was skipped.
        let group = job.group.as_ref();
        // Version 13: what changed at the receiver (`-i`), when it says so
        // in rsync's form (nothing else from a peer is printed this way).
        // A range found up to date says what it set in place itself (only
        // one range of a file does); a received file, once, at its end.
        let change = is_change_string(&message).then_some(message);
        let itemize = |core: &mut Core<SenderIo>, code: String| {
            core.event(Event::Itemized {
                path: e.named(),
                code,
            })
        };
        if skipped && group.is_some() {
            if let Some(code) = change.clone() {
                itemize(&mut self.core, code);
            }
        }
        if skipped && group.is_some_and(|g| !g.range_skipped(job.first)) {
            return;
        }
        if let Some(code) = change.filter(|_| !(skipped && group.is_some())) {
            itemize(&mut self.core, code);
        }
        self.core.event(Event::FileDone {
            path: e.path.clone(),
            size: e.size,
            blake3: if is_file && !skipped {
                hex(&root)
            } else {
                String::new()
            },
            sent: group.map_or(sent, |g| g.sent()),
            skipped,
        });
    }

    /// A file failed here (a read, a check): the receiver hears of it too.
    fn fail_local(&mut self, id: FileId, error: String) {
        self.fail_local_as(id, error, FailKind::Error);
    }

    /// A file failed here with a failure of `kind`; the receiver hears of
    /// it under the code that says as much.
    fn fail_local_as(&mut self, id: FileId, error: String, kind: FailKind) {
        let Some(job) = self.forget(id) else {
            return;
        };
        self.core.event(Event::file_failed(
            job.entry.path.clone(),
            error.clone(),
            kind,
        ));
        let message = self.peer_text(error);
        let code = match kind {
            FailKind::Changed => ErrorCode::Changed,
            FailKind::Vanished => ErrorCode::NotFound,
            _ => ErrorCode::Io,
        };
        self.core.send(Message::FileError { id, code, message });
    }

    /// Drops file `id` from this connection; its job, if it had one.
    fn forget(&mut self, id: FileId) -> Option<SendJob<S>> {
        let f = self.flights.remove(&id)?;
        if f.job.as_ref().is_some_and(|j| j.group.is_some()) {
            self.grouped = self.grouped.saturating_sub(1);
        }
        match &f.phase {
            // Reads still outstanding will come back to a forgotten file.
            Phase::Sending(round) => {
                self.reading = self.reading.saturating_sub(round.reading);
                if round.unready {
                    self.core.waiting = self.core.waiting.saturating_sub(1);
                }
            }
            Phase::Settling(_) => self.core.waiting = self.core.waiting.saturating_sub(1),
            // A confirmation still to come (a relay's, waiting for the
            // origin's root seal) is dropped with the file: counted as
            // answered, and an answer that still comes is ignored.
            Phase::Confirming(_) => {
                self.core.io_done(self.now);
                self.overdue.insert(id);
            }
            _ => {}
        }
        self.core.tell(SenderIo::Forget { file: id });
        f.job
    }

    /// A closing sender says `Bye` once nothing it holds needs more than
    /// the receiver's verdict: every file committed (v23). The verdicts
    /// come before the receiver's own `Bye`, so the goodbye costs no
    /// round trip of its own.
    fn maybe_bye(&mut self) {
        let only_verdicts = self.flights.values().all(|f| f.phase == Phase::Committed);
        if self.stage == Stage::Closing && only_verdicts {
            self.core.send(Message::Bye);
            self.stage = Stage::ByeSent;
        }
    }

    /// The next message or chunk to send.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        self.core.poll_transmit(now)
    }

    /// The next I/O request.
    pub fn poll_io(&mut self) -> Option<SenderIo> {
        self.core.io.pop_front()
    }

    /// The next event for the observers.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.core.events.pop_front()
    }

    fn expecting(&self) -> bool {
        match self.stage {
            Stage::Finished => false,
            Stage::ByeSent => true,
            _ => {
                self.feed == Feed::Serve
                    || self
                        .flights
                        .values()
                        .any(|f| !matches!(f.phase, Phase::Settling(_)))
            }
        }
    }

    /// When [`Sender::handle_timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let timer = self.core.poll_timeout(self.expecting());
        let confirms = self.confirm_deadlines().min();
        if self.core.waiting == 0 {
            return timer.into_iter().chain(confirms).min();
        }
        let settle = self.flights.values().filter_map(|f| match f.phase {
            Phase::Settling(t) => Some(t),
            _ => None,
        });
        timer.into_iter().chain(settle).chain(confirms).min()
    }

    /// Acts on timers: a file that settled is opened again, a keepalive
    /// goes out, or the peer was silent for too long.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), SessionError> {
        self.core.check()?;
        self.now = now;
        if self.core.waiting > 0 {
            self.settled(now);
        }
        self.overdue_confirms(now);
        self.maybe_bye();
        let what = match self.stage {
            Stage::ByeSent if self.flights.is_empty() => "the receiver's goodbye",
            _ => "the receiver's answer",
        };
        let expecting = self.expecting();
        self.core.handle_timeout(now, expecting, what)
    }
}

/// A digest in lowercase hex (as `b3sum` prints it).
pub(crate) fn hex(d: &Digest) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(64);
    for b in d {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 15)]);
    }
    // Only ASCII digits went in.
    String::from_utf8(out).unwrap_or_default()
}

/// Whether `s` is one of rsync's eleven-character change strings (`-i`):
/// what `Done` may carry when ok. Anything else a peer puts there (a
/// terminal escape, say) is never shown.
fn is_change_string(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 11
        && b"<>ch.*".contains(&b[0])
        && b"fdLSD".contains(&b[1])
        && b[2..].iter().all(|c| b".+cstpoguax".contains(c))
}

#[cfg(test)]
mod change_string_tests {
    #[test]
    fn only_rsyncs_change_strings_are_taken_from_a_peer() {
        for ok in [">f+++++++++", ">f.st......", "cd+++++++++", "hf+++++++++"] {
            assert!(super::is_change_string(ok), "{ok}");
        }
        for bad in [
            "",
            "done",
            ">f.st.....",
            "\x1b]52;c;cm0K\x07",
            ">f.st.....\r",
            "<f.st......x",
        ] {
            assert!(!super::is_change_string(bad), "{bad:?}");
        }
    }
}
