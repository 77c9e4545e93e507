//! Fan-out on a node: tickets, the entries of a transfer, and the forwards
//! that relay them downstream.
//!
//! A client admits a node to a transfer over a control connection
//! (`Admit`, authenticated by the node's token) and gets a [`Ticket`]
//! back: whoever presents it (the client, or the relay upstream of this
//! node) may push into the transfer's destination while that control
//! connection lives. The client then names the node's children
//! (`Forward`: address, pinned key, their tickets).
//!
//! A relay is not a loop of its own: the receiving driver tells the
//! [`Transfer`] each entry it staged ([`Transfer::offered`]), and each
//! forward is an ordinary sending pool whose jobs' source is found when
//! they are offered ([`Opener`]): the staging file while it is still being
//! received (only verified chunks are ready; the sender waits for the
//! rest), the delivered file after. So a chunk goes downstream once it
//! verified here, never before. Every entry is logged, so a forward named
//! later (a re-route past a failed node) gets the whole transfer, and the
//! downstream's `Need{have}` says what it already holds.
//!
//! A striped plan: each upstream session carries one [`Stripe`] (as its
//! `Relayed` hello says) and each forward sends one stripe to its target
//! ([`Stripe::carries`] cuts each entry). A stripe's forwards close once
//! that stripe's upstream said `Bye`; the node holds everything once every
//! stripe did. A file whose stripes come over several sessions is put
//! together here ([`Transfer::assemble`]): committed by the session whose
//! stripe completes it, with the whole-file hash of digests the origin
//! sealed, and only if that is the root the origin vouched for (each
//! stripe's session asks only once its `Vouched` came).

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::{Arc, Mutex, Weak};

use haul_engine::chunks::LocalFile;
use haul_engine::{ChunkSource, Confirmation, Destination, PartialFile};
use haul_proto::digest::root_from_digests;
use haul_proto::seal::entry_hash;
use haul_proto::{Digest, Entry, OriginKey, RelayTarget, Stripe, Ticket};
use haul_run::summary::Tally;
use haul_session::Sealer;
use haul_session::{Event, Observer};
use haul_transport::Transport;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::drive::relay_hook::{Assembly, RelayHook};
use crate::jobs::{OpenSource, SendJob, Source, WorkQueue};
pub use crate::seal_book::{SealBook, Vouch};

/// What a node admitted to a fan-out was asked (`Request::Admit`, checked).
pub struct Admitted {
    /// Where its files go, beneath the root (validated).
    pub dest: String,
    /// The origin's key, which seals every entry and chunk.
    pub origin: OriginKey,
    /// `--checksum`: receive whatever is offered.
    pub checksum: bool,
    /// `--backup`: what a file relayed in replaces is kept as.
    pub backups: Option<Arc<haul_engine::backup::Backups>>,
    /// The transport its forwards use.
    pub transport: Transport,
}

/// The transfers a node was admitted to, by ticket.
#[derive(Default)]
pub struct Relays {
    transfers: Mutex<HashMap<Ticket, Arc<Transfer>>>,
    /// `-z` chunks forwarded as the frames received, in every transfer.
    frames_passed_on: Arc<std::sync::atomic::AtomicU64>,
    /// Bytes of frames kept across the transfers (one budget for all).
    frames_kept: Arc<std::sync::atomic::AtomicUsize>,
}

impl Relays {
    /// No transfers.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// `-z` chunks this node's forwards sent as the frames it received
    /// ([`haul_transport::frames`]).
    pub fn frames_passed_on(&self) -> u64 {
        self.frames_passed_on
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Admits a transfer into `dest` (already validated) as `admitted`
    /// says: a fresh ticket.
    pub fn admit(
        &self,
        admitted: Admitted,
        root: Arc<Destination>,
        observer: Arc<dyn Observer>,
    ) -> std::io::Result<(Ticket, Arc<Transfer>)> {
        let mut ticket = [0u8; 32];
        getrandom::getrandom(&mut ticket).map_err(|e| std::io::Error::other(e.to_string()))?;
        let Admitted {
            dest,
            origin,
            checksum,
            backups,
            transport,
        } = admitted;
        let mut transfer = Transfer::new(dest, origin, root, observer, transport);
        transfer.frames = haul_transport::FrameCache::new(
            haul_transport::frames::DEFAULT_BUDGET,
            self.frames_kept.clone(),
            self.frames_passed_on.clone(),
        );
        transfer.checksum = checksum;
        transfer.backups = backups;
        let transfer = Arc::new(transfer);
        if let Ok(mut map) = self.transfers.lock() {
            map.insert(ticket, transfer.clone());
        }
        Ok((ticket, transfer))
    }

    /// The transfer `ticket` admits to, if it is still valid.
    pub fn get(&self, ticket: &Ticket) -> Option<Arc<Transfer>> {
        let map = self.transfers.lock().ok()?;
        // Looked up by value; the map's hash is not keyed by a secret, but
        // a guess must match all 32 random bytes.
        map.get(ticket).cloned()
    }

    /// Revokes `ticket` (its control connection ended) and stops its forwards.
    pub fn revoke(&self, ticket: &Ticket) {
        let gone = self
            .transfers
            .lock()
            .ok()
            .and_then(|mut m| m.remove(ticket));
        if let Some(t) = gone {
            t.stop();
        }
    }
}

/// One downstream node and the pool sending to it.
struct Forward {
    target: RelayTarget,
    queue: Arc<WorkQueue<SendJob>>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct State {
    /// Every entry offered here, in order (paths relative to the transfer's
    /// destination): what a forward named later is sent.
    entries: Vec<Entry>,
    /// The version (size, mtime) of each path offered.
    seen: HashMap<String, (u64, i64, u32)>,
    forwards: Vec<Forward>,
    /// Forwards that ended: address and how ([`ForwardEnd`]).
    ended: Vec<(String, ForwardEnd)>,
    /// An upstream session of the whole transfer ended with `Bye`: no more
    /// entries will come.
    upstream_done: bool,
    /// Upstream sessions running now (of the whole transfer or a stripe).
    upstreams: usize,
    /// Of those, the ones carrying the whole transfer.
    whole_running: usize,
    /// A striped plan's stripe count (0 until a striped upstream arrives).
    stripes: u32,
    /// Striped upstream sessions running, by stripe.
    stripe_running: HashMap<u32, usize>,
    /// Stripes whose upstream ended with `Bye`.
    stripes_done: HashSet<u32>,
    /// Staging of files whose stripes are still arriving (bounded:
    /// [`MAX_HELD`]), so a later stripe's session finds the same staging.
    held: HashMap<String, Arc<PartialFile>>,
    /// Files whose commit one session took on (the others release theirs).
    assembling: HashSet<String>,
    stopped: bool,
    /// Upstream sessions started so far (each one's generation).
    generation: u64,
    /// The newest upstream session of each stripe (`None`: the whole
    /// transfer), by generation.
    newest: HashMap<Option<u32>, u64>,
    /// What failed the origin's seal here, by the sending edge it came
    /// over: (entries, chunks) so far, and whether the client heard these
    /// counts.
    unsealed: HashMap<u64, Evidence>,
    /// Sending edges whose sender went quiet (`Event::PeerQuiet`): the
    /// silence in ms, not yet told to the client.
    quiet: HashMap<u64, u32>,
    /// Edges that went quiet at some time (each is logged once).
    ever_quiet: HashSet<u64>,
}

/// What arrived over one sending edge and failed the origin's seal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Evidence {
    /// Entries (offers, roots) refused for their seal.
    pub entries: u32,
    /// Chunks refused for their seal.
    pub chunks: u32,
    told: bool,
}

/// Most stagings a transfer holds open for stripes still to come (past it,
/// a later stripe reopens the staging and re-verifies what it holds).
const MAX_HELD: usize = 256;

impl State {
    /// Every upstream of stripe `s` (or of the whole transfer) ended, one
    /// cleanly: nothing more of that stripe will come.
    fn stripe_done(&self, s: Option<Stripe>) -> bool {
        let Some(s) = s else {
            return self.received();
        };
        self.whole_running == 0
            && self.stripe_running.get(&s.index).copied().unwrap_or(0) == 0
            && (self.upstream_done || self.stripes_done.contains(&s.index))
    }

    /// Every stripe (or the whole transfer) arrived, and no upstream runs.
    fn received(&self) -> bool {
        let striped = self.stripes > 0 && (0..self.stripes).all(|s| self.stripes_done.contains(&s));
        self.upstreams == 0 && (self.upstream_done || striped)
    }

    fn close_finished_forwards(&self) {
        for f in &self.forwards {
            if self.stripe_done(f.target.stripe) {
                f.queue.close();
            }
        }
    }
}

/// One fan-out transfer on this node.
pub struct Transfer {
    /// The destination directory under the node's root.
    pub dest: String,
    /// What this node received (its `Report`).
    pub tally: Arc<Tally>,
    /// The origin's seals of what this node received: checked on the way
    /// in, passed on to its forwards.
    pub book: Arc<SealBook>,
    opener: Arc<Opener>,
    state: Mutex<State>,
    /// Something a control connection waits for changed.
    pub changed: Notify,
    /// How the client reached this node, and so how it forwards (TCP or
    /// QUIC).
    pub transport: Transport,
    /// `--checksum`: nothing relayed in is skipped for its size and mtime.
    pub checksum: bool,
    /// `--backup`: what a file relayed in replaces is kept as.
    pub backups: Option<Arc<haul_engine::backup::Backups>>,
    /// The newest upstream session's generation, watched by the older ones.
    newest_upstream: tokio::sync::watch::Sender<u64>,
    /// `-z`: the frames upstream sessions brought, kept while this node
    /// forwards, so that its forwards send them as they came.
    pub frames: haul_transport::FrameCache,
}

impl Transfer {
    fn new(
        dest: String,
        origin: OriginKey,
        root: Arc<Destination>,
        observer: Arc<dyn Observer>,
        transport: Transport,
    ) -> Self {
        let book = Arc::new(SealBook::new(origin));
        let opener = Arc::new(Opener {
            root: Some(root),
            dest: dest.clone(),
            book: Some(book.clone()),
            ..Opener::default()
        });
        Self {
            opener,
            dest,
            // What the node holds at the end: an entry a session failed
            // (cut off, re-routed away, an intruder's unsealed offer) and
            // another then delivered is no failure of the transfer.
            tally: Tally::recovering(observer),
            book,
            state: Mutex::default(),
            changed: Notify::new(),
            transport,
            checksum: false,
            backups: None,
            newest_upstream: tokio::sync::watch::Sender::new(0),
            frames: haul_transport::FrameCache::new(0, Arc::default(), Arc::default()),
        }
    }

    /// The receiving driver staged (or made, or found up to date) `entry`,
    /// whose path includes the destination: every forward gets it.
    pub fn offered(&self, entry: &Entry, staging: Option<&Arc<PartialFile>>) {
        let Some(rel) = self.relative(&entry.path) else {
            return;
        };
        if let Some(part) = staging {
            self.opener.staged(rel, part);
        }
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        // Each version once: a file that changed at the origin while it was
        // read is offered again as a new version, and forwarded again.
        let version = (entry.size, entry.mtime_sec, entry.mtime_nsec);
        if state.stopped || state.seen.insert(rel.to_owned(), version) == Some(version) {
            return;
        }
        let entry = Entry {
            path: rel.to_owned(),
            ..entry.clone()
        };
        state.entries.retain(|e| e.path != entry.path);
        for f in &state.forwards {
            if let Some(job) = self.job(&entry, f.target.stripe) {
                f.queue.push(job);
            }
        }
        state.entries.push(entry);
    }

    /// An upstream session into this transfer starts, carrying `stripe` of
    /// it (`None`: all of it): the session's hook, which tells it when a
    /// newer session took its place. `None` for a stripe of another plan
    /// than the stripes so far (the session is refused).
    pub fn upstream_started(
        self: &Arc<Self>,
        stripe: Option<Stripe>,
        edge: u64,
    ) -> Option<Upstream> {
        let mut state = self.state.lock().ok()?;
        match stripe {
            Some(s) if state.stripes != 0 && state.stripes != s.count => return None,
            Some(s) => {
                state.stripes = s.count;
                *state.stripe_running.entry(s.index).or_default() += 1;
            }
            None => state.whole_running += 1,
        }
        state.upstreams += 1;
        state.generation += 1;
        let generation = state.generation;
        state.newest.insert(stripe.map(|s| s.index), generation);
        // Every older session wakes up; this one's watch starts from here,
        // under the lock, so a session started right after is news to it.
        self.newest_upstream.send_replace(generation);
        let newer = self.newest_upstream.subscribe();
        drop(state);
        Some(Upstream {
            transfer: self.clone(),
            stripe,
            edge,
            generation,
            newer,
        })
    }

    /// Something that came over sending edge `edge` failed the origin's
    /// seal (`chunk`: `None` for an entry's or a root's seal): counted
    /// against that edge, for the control connection to tell the client.
    fn unsealed(&self, edge: u64, chunk: Option<u32>) {
        if let Ok(mut state) = self.state.lock() {
            let e = state.unsealed.entry(edge).or_default();
            match chunk {
                Some(_) => e.chunks = e.chunks.saturating_add(1),
                None => e.entries = e.entries.saturating_add(1),
            }
            e.told = false;
        }
        self.changed.notify_waiters();
    }

    /// Nothing came over sending edge `edge` for `millis` ms: for the
    /// control connection to tell the client (a link cut?).
    fn quiet(&self, edge: u64, millis: u64) {
        let millis = u32::try_from(millis).unwrap_or(u32::MAX);
        if let Ok(mut state) = self.state.lock() {
            if state.ever_quiet.insert(edge) {
                tracing::info!(
                    "nothing from an upstream (edge {edge:016x}) for {millis} ms: telling the client"
                );
            }
            let m = state.quiet.entry(edge).or_default();
            *m = (*m).max(millis);
        }
        self.changed.notify_waiters();
    }

    /// The quiet edges not told yet, with their silence in ms (taken).
    pub fn untold_quiet(&self) -> Vec<(u64, u32)> {
        let Ok(mut state) = self.state.lock() else {
            return Vec::new();
        };
        let mut quiet: Vec<(u64, u32)> = state.quiet.drain().collect();
        quiet.sort_unstable();
        quiet
    }

    /// The edges whose evidence the client has not heard in its present
    /// counts (each is marked told).
    pub fn untold_evidence(&self) -> Vec<(u64, Evidence)> {
        let Ok(mut state) = self.state.lock() else {
            return Vec::new();
        };
        let mut untold: Vec<(u64, Evidence)> = state
            .unsealed
            .iter_mut()
            .filter(|(_, e)| !e.told)
            .map(|(edge, e)| {
                e.told = true;
                (*edge, *e)
            })
            .collect();
        untold.sort_unstable_by_key(|(edge, _)| *edge);
        untold
    }

    /// A newer upstream session than `generation` carries `stripe` (or the
    /// whole transfer, which carries every stripe): the client routed
    /// around the older one's sender.
    fn superseded(&self, stripe: Option<Stripe>, generation: u64) -> bool {
        let Ok(state) = self.state.lock() else {
            return false;
        };
        let newer = |key: Option<u32>| state.newest.get(&key).is_some_and(|&g| g > generation);
        newer(stripe.map(|s| s.index)) || (stripe.is_some() && newer(None))
    }

    /// An upstream session ended; `clean`: with `Bye` (the upstream has
    /// nothing more of its stripe, or of the transfer, to offer). Forwards
    /// whose stripe is then complete close their queues, so they say `Bye`
    /// downstream when done.
    pub fn upstream_ended(&self, stripe: Option<Stripe>, clean: bool) {
        if let Ok(mut state) = self.state.lock() {
            state.upstreams = state.upstreams.saturating_sub(1);
            match stripe {
                Some(s) => {
                    if let Some(n) = state.stripe_running.get_mut(&s.index) {
                        *n = n.saturating_sub(1);
                    }
                    if clean {
                        state.stripes_done.insert(s.index);
                    }
                }
                None => {
                    state.whole_running = state.whole_running.saturating_sub(1);
                    state.upstream_done |= clean;
                }
            }
            state.close_finished_forwards();
        }
        self.changed.notify_waiters();
    }

    /// A stripe of `part` arrived clean on one session: is the file
    /// complete here? Only one session is told [`Assembly::Complete`] (it
    /// commits); the others, and every stripe before the last, hear
    /// [`Assembly::Later`], and the staging is held for the stripes to
    /// come. Complete means every chunk verified here against a digest the
    /// origin sealed, and those digests make the root the origin vouched
    /// for (asked only once the session's `Vouched` came), so the file is
    /// one version of the origin's.
    pub fn assemble(&self, part: &Arc<PartialFile>) -> Assembly {
        let entry = part.entry();
        let Some(rel) = self.relative(&entry.path) else {
            return Assembly::Damaged(format!("{} is outside this transfer", entry.path));
        };
        let Ok(mut state) = self.state.lock() else {
            return Assembly::Later;
        };
        let count = entry.chunk_count();
        let have = part.have(0, count);
        if have.len() < count as usize || part.is_published() {
            if !part.is_published() && state.held.len() < MAX_HELD {
                state.held.insert(rel.to_owned(), part.clone());
            }
            return Assembly::Later;
        }
        if !state.assembling.insert(rel.to_owned()) {
            return Assembly::Later;
        }
        state.held.remove(rel);
        drop(state);
        let wire = Entry {
            path: rel.to_owned(),
            ..entry.clone()
        };
        let mut digests = Vec::with_capacity(have.len());
        for (i, d) in have {
            if let Err(e) = Sealer::chunk(&*self.book, &wire, i, &d) {
                return Assembly::Damaged(e);
            }
            digests.push(d);
        }
        let Some(root) = root_from_digests(&digests, entry.chunk_size, entry.size) else {
            return Assembly::Damaged(format!("{}: chunks do not make the file", entry.path));
        };
        // Each chunk sealed is not enough: a stripe torn at the origin is
        // sealed chunk by chunk too. Only the root the origin vouched for,
        // once every stripe held still there, is committed.
        match self.book.vouched_root(rel, &entry_hash(&wire)) {
            Some(vouched) if vouched == root => Assembly::Complete(root),
            Some(_) => Assembly::Damaged(format!(
                "{}: its stripes make another file than the one the origin vouched for: \
                 not committed",
                entry.path
            )),
            None => Assembly::Damaged(format!(
                "{}: the origin did not vouch for this version of it (it changed there while \
                 it was read): not committed",
                entry.path
            )),
        }
    }

    /// Replaces the forwards with `targets`: kept ones go on, dropped ones
    /// stop, new ones start with every entry so far (`spawn` runs the
    /// pool that sends a queue to a target).
    pub fn forward(
        self: &Arc<Self>,
        targets: Vec<RelayTarget>,
        spawn: impl Fn(RelayTarget, Arc<WorkQueue<SendJob>>) -> JoinHandle<()>,
    ) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if state.stopped {
            return;
        }
        let (kept, dropped): (Vec<Forward>, Vec<Forward>) = std::mem::take(&mut state.forwards)
            .into_iter()
            .partition(|f| targets.contains(&f.target));
        for f in dropped {
            f.task.abort();
        }
        state.forwards = kept;
        for target in targets {
            if state.forwards.iter().any(|f| f.target == target) {
                continue;
            }
            let queue = WorkQueue::open();
            for entry in &state.entries {
                if let Some(job) = self.job(entry, target.stripe) {
                    queue.push(job);
                }
            }
            if state.stripe_done(target.stripe) {
                queue.close();
            }
            let task = spawn(target.clone(), queue.clone());
            state.forwards.push(Forward {
                target,
                queue,
                task,
            });
        }
        self.frames.set_forwarding(!state.forwards.is_empty());
        drop(state);
        self.changed.notify_waiters();
    }

    /// A forward's pool ended, and how.
    pub fn forward_ended(&self, target: &RelayTarget, error: ForwardEnd) {
        if let Ok(mut state) = self.state.lock() {
            state.forwards.retain(|f| f.target != *target);
            state.ended.push((target.addr.clone(), error));
        }
        self.changed.notify_waiters();
    }

    /// The transfer's upstreams carry stripes: a file's staging is shared by
    /// several sessions, so one that breaks does not abandon it (the others
    /// still fill it, and a re-routed stripe resumes into it).
    pub fn is_striped(&self) -> bool {
        self.state.lock().map(|s| s.stripes > 0).unwrap_or(false)
    }

    /// This node holds everything: the upstreams of every stripe (or of
    /// the whole transfer) said `Bye` and none runs.
    pub fn received(&self) -> bool {
        self.state.lock().map(|s| s.received()).unwrap_or(false)
    }

    /// Once this node's part is done (its upstream said `Bye` and no
    /// forward is still running): how its forwards ended.
    pub fn finished(&self) -> Option<Finished> {
        let state = self.state.lock().ok()?;
        if !state.received() || !state.forwards.is_empty() {
            return None;
        }
        let mut failures = Vec::new();
        let mut done = Finished::default();
        for (addr, end) in &state.ended {
            let named = match end {
                ForwardEnd::Clean => continue,
                ForwardEnd::Failures(e) => {
                    failures.push(format!("forward to {addr}: {e}"));
                    &mut done.short
                }
                ForwardEnd::GaveUp(e) => {
                    failures.push(format!("forward to {addr}: {e}"));
                    &mut done.lost
                }
            };
            if !named.contains(addr) {
                named.push(addr.clone());
            }
        }
        done.failures = failures.join("; ");
        Some(done)
    }

    fn stop(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.stopped = true;
            // Under the lock: no forward starts keeping them again.
            self.frames.set_forwarding(false);
            for f in state.forwards.drain(..) {
                f.task.abort();
            }
            state.entries = Vec::new();
            state.held.clear();
        }
        if let Ok(mut staged) = self.opener.staged.lock() {
            staged.clear();
        }
        if let Ok(mut waiting) = self.opener.waiting.lock() {
            waiting.clear();
        }
        self.book.clear();
        self.changed.notify_waiters();
    }

    /// What a forward of `stripe` (`None`: all) sends of `entry`, if anything.
    fn job(&self, entry: &Entry, stripe: Option<Stripe>) -> Option<SendJob> {
        let (first, end) = match stripe {
            Some(s) => s.carries(entry)?,
            None => (0, entry.chunk_count()),
        };
        Some(SendJob {
            content: None,
            entry: entry.clone(),
            first,
            end,
            group: None,
            source: Source::Lazy(self.opener.clone()),
        })
    }

    fn relative<'a>(&self, path: &'a str) -> Option<&'a str> {
        if self.dest.is_empty() {
            return Some(path);
        }
        path.strip_prefix(self.dest.as_str())?.strip_prefix('/')
    }
}

/// How a node's forwards ended, for its `Report`.
#[derive(Debug, Default)]
pub struct Finished {
    /// What failed, for people.
    pub failures: String,
    /// Forwards that gave up (the client re-routes past them).
    pub lost: Vec<String>,
    /// Forwards that ran to the end with entries failed (the client fills
    /// those nodes in).
    pub short: Vec<String>,
}

/// How a forward ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardEnd {
    /// Everything went.
    Clean,
    /// It ran to the end, but some entries failed there (the downstream
    /// reports them; the client fills them in).
    Failures(String),
    /// It gave up (the downstream is unreachable): the client re-routes past it.
    GaveUp(String),
}

/// Wakes a reader waiting for chunks.
type Waker = Arc<dyn Fn() + Send + Sync>;

/// Finds a relayed entry's bytes when it is offered downstream.
#[derive(Default)]
struct Opener {
    root: Option<Arc<Destination>>,
    dest: String,
    /// The origin's seals: a chunk is ready to relay only with its seal.
    book: Option<Arc<SealBook>>,
    /// Each file's newest staging here, by path under the destination.
    staged: Mutex<HashMap<String, Weak<PartialFile>>>,
    /// Readers waiting on a file, woken when a newer staging of it appears
    /// (its upstream session broke and another one staged it again).
    waiting: Mutex<HashMap<String, Vec<Waker>>>,
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opener").field("dest", &self.dest).finish()
    }
}

impl Opener {
    /// `part` is now where `rel` is received: readers waiting on an older
    /// staging move to it.
    fn staged(&self, rel: &str, part: &Arc<PartialFile>) {
        if let Ok(mut staged) = self.staged.lock() {
            staged.insert(rel.to_owned(), Arc::downgrade(part));
        }
        let wakers = self
            .waiting
            .lock()
            .ok()
            .and_then(|w| w.get(rel).cloned())
            .unwrap_or_default();
        for wake in wakers {
            wake();
        }
    }

    /// The newest source of `entry`: its staging while it is received,
    /// else the file in place (opened beneath the root, like everything a
    /// node reads).
    fn newest(&self, entry: &Entry) -> std::io::Result<Arc<dyn ChunkSource>> {
        let same = |e: &Entry| {
            e.size == entry.size
                && e.mtime_sec == entry.mtime_sec
                && e.mtime_nsec == entry.mtime_nsec
                && e.chunk_size == entry.chunk_size
        };
        let staged = self
            .staged
            .lock()
            .ok()
            .and_then(|s| s.get(&entry.path).and_then(Weak::upgrade));
        if let Some(part) = staged.filter(|p| same(p.entry()) && !p.is_published()) {
            return Ok(part);
        }
        let full = if self.dest.is_empty() {
            entry.path.clone()
        } else {
            format!("{}/{}", self.dest, entry.path)
        };
        let comps = haul_proto::validate_entry_path(&full)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let (Some((last, parents)), Some(root)) = (comps.split_last(), &self.root) else {
            return Err(std::io::ErrorKind::InvalidInput.into());
        };
        let dir = root
            .held_root()
            .open_dir(parents)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let (file, meta) = dir.open_regular(last)?;
        if meta.size != entry.size || meta.mtime != entry.mtime_sec {
            return Err(std::io::Error::other(format!(
                "{} changed here since it was received",
                entry.path
            )));
        }
        Ok(Arc::new(LocalFile::open(file)?))
    }
}

impl OpenSource for Opener {
    fn open(self: Arc<Self>, entry: &Entry) -> std::io::Result<Arc<dyn ChunkSource>> {
        let current = self.newest(entry)?;
        Ok(Arc::new(RelaySource {
            opener: Arc::downgrade(&self),
            book: self.book.clone(),
            hash: haul_proto::seal::entry_hash(entry),
            entry: entry.clone(),
            current: Mutex::new(current),
            wakers: Mutex::default(),
        }))
    }
}

/// A relayed file's bytes: the staging it was offered from, switched to a
/// newer one when that one stalls (its upstream broke and the file is
/// staged again from another), or to the file in place once delivered.
/// Its chunks are ready only once verified here and sealed by the origin.
struct RelaySource {
    opener: Weak<Opener>,
    book: Option<Arc<SealBook>>,
    /// The entry's hash, which its seals cover.
    hash: Digest,
    entry: Entry,
    current: Mutex<Arc<dyn ChunkSource>>,
    wakers: Mutex<Vec<Waker>>,
}

impl std::fmt::Debug for RelaySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelaySource")
            .field("path", &self.entry.path)
            .finish()
    }
}

impl RelaySource {
    fn current(&self) -> Option<Arc<dyn ChunkSource>> {
        self.current.lock().ok().map(|c| c.clone())
    }

    /// Moves to the newest source when it differs; true if it did.
    fn refresh(&self) -> bool {
        let Some(opener) = self.opener.upgrade() else {
            return false;
        };
        let Ok(newest) = opener.newest(&self.entry) else {
            return false;
        };
        let Ok(mut current) = self.current.lock() else {
            return false;
        };
        if Arc::ptr_eq(&*current, &newest) {
            return false;
        }
        *current = newest.clone();
        drop(current);
        for wake in self.wakers.lock().map(|w| w.clone()).unwrap_or_default() {
            newest.on_ready(wake);
        }
        true
    }
}

impl ChunkSource for RelaySource {
    fn read_chunk(
        &self,
        entry: &Entry,
        index: u32,
        buf: &mut Vec<u8>,
        keep: bool,
    ) -> std::io::Result<haul_engine::ChunkRead> {
        let Some(current) = self.current() else {
            return Err(std::io::Error::other("relay source lock poisoned"));
        };
        match current.read_chunk(entry, index, buf, keep) {
            // Not verified yet, or abandoned: a newer staging may have it.
            Err(e) if self.refresh() => {
                let current = self.current().ok_or(e)?;
                current.read_chunk(entry, index, buf, keep)
            }
            other => other,
        }
    }

    fn hash_chunk(&self, entry: &Entry, index: u32, buf: &mut Vec<u8>) -> std::io::Result<Digest> {
        let Some(current) = self.current() else {
            return Err(std::io::Error::other("relay source lock poisoned"));
        };
        match current.hash_chunk(entry, index, buf) {
            Err(e) if self.refresh() => {
                let current = self.current().ok_or(e)?;
                current.hash_chunk(entry, index, buf)
            }
            other => other,
        }
    }

    /// None: the source may change under a reader, so payloads go from the
    /// bytes read (a relay's links are slower than a copy).
    fn file(&self) -> Option<&std::fs::File> {
        None
    }

    /// Verified here and sealed by the origin; or never to be (its
    /// staging was let go): the read then fails instead of waiting.
    fn ready(&self, index: u32) -> bool {
        // A version the origin dropped (it changed there while read; a
        // stripe of it is not sent again): its chunks still to come never
        // will. The read goes ahead and fails (unverified, or unsealed), so
        // the file fails downstream instead of keeping the forward waiting.
        let gone = self
            .book
            .as_ref()
            .is_some_and(|b| b.vouched(&self.entry.path, &self.hash) == Vouch::Gone);
        if gone {
            return true;
        }
        let ready = |s: Option<Arc<dyn ChunkSource>>| s.is_some_and(|s| s.ready(index));
        if !(ready(self.current()) || (self.refresh() && ready(self.current()))) {
            return false;
        }
        let sealed = self
            .book
            .as_ref()
            .is_none_or(|b| b.has(&self.entry.path, &self.hash, index));
        sealed || self.current().is_some_and(|c| c.abandoned())
    }

    /// One version only if the origin vouched for it: its root seal came
    /// (then the session commits downstream with that root, or fails the
    /// file if the chunks read make another), not yet (asked again when a
    /// seal arrives; the session's deadline bounds the wait), or never (the
    /// origin dropped that version as changed while read, or sent a newer
    /// one, or the transfer ended): not committed downstream.
    fn confirm(&self) -> Confirmation {
        let vouch = match &self.book {
            Some(book) if self.entry.chunk_count() > 0 => {
                book.vouched(&self.entry.path, &self.hash)
            }
            _ => Vouch::Yes,
        };
        match vouch {
            Vouch::Yes => self.current().map_or_else(
                || Confirmation::Changed("relay source lock poisoned".into()),
                |c| c.confirm(),
            ),
            Vouch::NotYet => Confirmation::Pending,
            Vouch::Gone => Confirmation::Changed(
                "the origin did not vouch for this version of it (it changed there while it \
                 was read, and is sent again as it is now)"
                    .into(),
            ),
        }
    }

    fn on_ready(&self, wake: Waker) {
        if let Ok(mut w) = self.wakers.lock() {
            w.push(wake.clone());
        }
        if let Some(book) = &self.book {
            book.on_sealed(&self.entry.path, wake.clone());
        }
        if let Some(opener) = self.opener.upgrade() {
            if let Ok(mut waiting) = opener.waiting.lock() {
                waiting
                    .entry(self.entry.path.clone())
                    .or_default()
                    .push(wake.clone());
            }
        }
        if let Some(current) = self.current() {
            current.on_ready(wake);
        }
    }
}

/// Counts what a forward delivered, for the node's log.
pub struct ForwardLog(pub String);

impl Observer for ForwardLog {
    fn event(&self, event: &Event) {
        if let Event::FileError { path, error, .. } = event {
            tracing::warn!("forward to {}: {path}: {error}", self.0);
        }
    }
}

/// One upstream session of a [`Transfer`]: what its receiving driver
/// tells the relay, and whether a newer session took its place.
///
/// Newer is by arrival, not by who the client made the parent: a relay
/// routed around that reconnects before its `Forward{[]}` arrives is
/// newest for a moment. The parent's session is then cut only if its
/// sender is quiet for [`crate::drive::relay_hook::SUPERSEDED_QUIET`], and
/// its pool connects again — newest once more — when it is.
pub struct Upstream {
    transfer: Arc<Transfer>,
    stripe: Option<Stripe>,
    /// The sending edge its `Relayed` named.
    edge: u64,
    generation: u64,
    /// Changes when a later upstream session starts.
    newer: tokio::sync::watch::Receiver<u64>,
}

impl Upstream {
    /// The session ended; `clean`: with `Bye`.
    pub fn ended(&self, clean: bool) {
        self.transfer.upstream_ended(self.stripe, clean);
    }
}

/// What the session reports goes to the transfer's tally; what failed
/// the origin's seal is counted against this session's edge too, and a
/// silence of its sender is told to the client (unless a newer session
/// took this one's place: the client moved on already).
impl Observer for Upstream {
    fn event(&self, event: &Event) {
        match event {
            Event::SealFailed { chunk, .. } => self.transfer.unsealed(self.edge, *chunk),
            Event::PeerQuiet { millis } => {
                if !self.superseded() {
                    self.transfer.quiet(self.edge, *millis);
                }
                return;
            }
            _ => {}
        }
        self.transfer.tally.event(event);
    }
}

impl RelayHook for Upstream {
    fn seals(&self) -> Arc<SealBook> {
        self.transfer.book.clone()
    }

    fn offered(&self, entry: &Entry, staging: Option<&Arc<PartialFile>>) {
        self.transfer.offered(entry, staging);
    }

    fn assemble(&self, part: &Arc<PartialFile>) -> Assembly {
        self.transfer.assemble(part)
    }

    fn is_striped(&self) -> bool {
        self.transfer.is_striped()
    }

    fn newer_upstreams(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.newer.clone())
    }

    fn superseded(&self) -> bool {
        self.transfer.superseded(self.stripe, self.generation)
    }
}
