//! Sessions over simulated streams in simulated time, in the spirit of
//! `quinn-proto`'s test `Pair`: every I/O a session asks for is done at
//! once on in-memory files ([`crate::memfs`]), every message travels a
//! [`Stream`] with a profile's delay and rate, and the clock jumps to the
//! next arrival or timer. A 256 MiB transfer over a 1 s link takes the
//! simulated seconds the link allows and a fraction of a second of CPU.
//!
//! A [`Sim`] holds one source tree, one destination and any number of
//! connections (several of them carry the ranges of one split file).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use haul_proto::{encode, ChunkHeader, ErrorCode, Message};
use haul_session::{
    ChunkAction, ChunkOutcome, Event, FetchJob, FileId, Job, Prepared, Receiver, ReceiverIo,
    SendJob, Sender, SenderIo, SessionConfig, SessionError, Transmit,
};

use crate::link::Nanos;
use crate::memfs::{MemDest, MemTree};
use crate::profile::Profile;
use crate::stream::Stream;

/// What travels a simulated stream.
#[derive(Debug, Clone)]
pub enum Wire {
    /// A control message.
    Message(Message),
    /// A chunk header and its payload.
    Chunk(ChunkHeader, Vec<u8>),
}

impl Wire {
    /// Bytes on the wire: the frame, plus the payload for a chunk.
    fn bytes(&self) -> u64 {
        let mut buf = Vec::new();
        match self {
            Wire::Message(m) => encode(m, &mut buf),
            Wire::Chunk(h, p) => {
                encode(&Message::Chunk(*h), &mut buf);
                return (buf.len() + p.len()) as u64;
            }
        }
        buf.len() as u64
    }
}

/// One side's session.
#[derive(Debug)]
pub enum Role {
    /// A sender; its jobs' source is the path in the [`MemTree`].
    Sender(Sender<String>),
    /// A receiver.
    Receiver(Receiver),
}

/// One end of a connection.
#[derive(Debug)]
pub struct Side {
    /// The session.
    pub role: Role,
    /// Chunk bytes read and not yet sent.
    held: HashMap<(FileId, u32), Vec<u8>>,
    /// Which file an id is (source path, or destination path).
    paths: HashMap<FileId, String>,
    /// Events the session reported.
    pub events: Vec<Event>,
    /// Chunks verified (file, index), as a relay would hear of them.
    pub verified: Vec<(String, u32)>,
    /// How it ended early, if it did.
    pub error: Option<SessionError>,
}

impl Side {
    fn new(role: Role) -> Self {
        Self {
            role,
            held: HashMap::new(),
            paths: HashMap::new(),
            events: Vec::new(),
            verified: Vec::new(),
            error: None,
        }
    }

    /// True once the session ended, cleanly or not.
    pub fn is_over(&self) -> bool {
        self.error.is_some()
            || match &self.role {
                Role::Sender(s) => s.is_finished(),
                Role::Receiver(r) => r.is_finished(),
            }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if self.is_over() {
            return None;
        }
        match &self.role {
            Role::Sender(s) => s.poll_timeout(),
            Role::Receiver(r) => r.poll_timeout(),
        }
    }
}

/// One connection: the connecting client and the serving node.
#[derive(Debug)]
pub struct Conn {
    /// The client (a pushing sender, or a pulling receiver).
    pub client: Side,
    /// The node.
    pub server: Side,
    up: Stream<Wire>,
    down: Stream<Wire>,
}

impl Conn {
    /// Stops delivery both ways (a cable cut; the sessions go on until their timers fire).
    pub fn stall(&mut self) {
        self.up.stall(true);
        self.down.stall(true);
    }

    /// Bytes sent client to node so far.
    pub fn bytes_up(&self) -> u64 {
        self.up.bytes
    }
}

/// Faults the simulation injects.
#[derive(Debug, Default, Clone)]
pub struct Faults {
    /// Chunks (path, index) whose payload gets a flipped bit in flight, once each.
    pub corrupt: Vec<(String, u32)>,
    /// Chunks (path, index) a lying relay alters once each: a flipped bit
    /// in the payload and the header's digest made to match it (only an
    /// origin seal tells).
    pub forge: Vec<(String, u32)>,
    /// After this many chunks delivered in all, every stream stalls (a cut).
    pub cut_after_chunks: Option<u64>,
}

/// A simulated transfer: one source, one destination, its connections.
#[derive(Debug)]
pub struct Sim {
    epoch: Instant,
    now: Nanos,
    /// The sender's files.
    pub src: MemTree,
    /// The receiver's files.
    pub dest: MemDest,
    /// The connections.
    pub conns: Vec<Conn>,
    push_jobs: VecDeque<SendJob<String>>,
    pull_jobs: VecDeque<FetchJob>,
    /// Faults to inject.
    pub faults: Faults,
    /// Chunks delivered to receivers so far.
    pub chunks_delivered: u64,
    cfg: SessionConfig,
    profile: Profile,
}

impl Sim {
    /// A simulation of `src` over links with `profile` (both directions).
    pub fn new(src: MemTree, dest: MemDest, profile: Profile, cfg: SessionConfig) -> Self {
        Self {
            epoch: Instant::now(),
            now: 0,
            src,
            dest,
            conns: Vec::new(),
            push_jobs: VecDeque::new(),
            pull_jobs: VecDeque::new(),
            faults: Faults::default(),
            chunks_delivered: 0,
            cfg,
            profile,
        }
    }

    /// The simulated time since the start.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.now)
    }

    fn instant(&self) -> Instant {
        self.epoch + Duration::from_nanos(self.now)
    }

    /// Queues a push of every entry of the source (whole files).
    pub fn push_all(&mut self) {
        for (path, (entry, _)) in &self.src.entries {
            self.push_jobs.push_back(SendJob {
                content: None,
                entry: entry.clone(),
                first: 0,
                end: entry.chunk_count(),
                group: None,
                source: path.clone(),
            });
        }
    }

    /// Queues a push job.
    pub fn push_job(&mut self, job: SendJob<String>) {
        self.push_jobs.push_back(job);
    }

    /// Queues a pull of every file of the source (asked for by path).
    pub fn pull_all(&mut self) {
        for (path, (entry, _)) in &self.src.entries {
            if entry.kind == haul_proto::EntryKind::File {
                self.pull_jobs.push_back(FetchJob {
                    path: path.clone(),
                    entry: entry.clone(),
                    first: 0,
                    end: u32::MAX,
                    group: None,
                });
            }
        }
    }

    /// Queues a pull job.
    pub fn pull_job(&mut self, job: FetchJob) {
        self.pull_jobs.push_back(job);
    }

    /// Opens a pushing connection.
    pub fn connect_push(&mut self) -> usize {
        let now = self.instant();
        let client = Role::Sender(Sender::push(self.cfg.clone(), now));
        let server = Role::Receiver(Receiver::for_push(self.cfg.clone(), String::new(), now));
        self.add(client, server)
    }

    /// Opens a pulling connection.
    pub fn connect_pull(&mut self) -> usize {
        let now = self.instant();
        let client = Role::Receiver(Receiver::for_pull(self.cfg.clone(), now));
        let server = Role::Sender(Sender::serve(self.cfg.clone(), now));
        self.add(client, server)
    }

    fn add(&mut self, client: Role, server: Role) -> usize {
        self.conns.push(Conn {
            client: Side::new(client),
            server: Side::new(server),
            up: Stream::new(&self.profile),
            down: Stream::new(&self.profile),
        });
        self.conns.len() - 1
    }

    /// Runs until every connection is over or nothing can happen any more,
    /// or `limit` of simulated time passed. Returns whether all ended.
    pub fn run(&mut self, limit: Duration) -> bool {
        let limit = self.now + limit.as_nanos() as Nanos;
        loop {
            self.settle();
            if self
                .conns
                .iter()
                .all(|c| c.client.is_over() && c.server.is_over())
            {
                return true;
            }
            let Some(next) = self.next_event() else {
                return false;
            };
            if next > limit {
                self.now = limit;
                return false;
            }
            self.now = self.now.max(next);
            self.timeouts();
        }
    }

    /// Does everything that can happen at the current instant.
    fn settle(&mut self) {
        loop {
            let mut moved = false;
            for c in 0..self.conns.len() {
                moved |= self.drive(c);
                moved |= self.deliver(c);
            }
            if !moved {
                return;
            }
        }
    }

    fn next_event(&self) -> Option<Nanos> {
        let at = |i: Instant| i.saturating_duration_since(self.epoch).as_nanos() as Nanos;
        self.conns
            .iter()
            .flat_map(|c| {
                [
                    c.up.next_due(),
                    c.down.next_due(),
                    c.client.poll_timeout().map(at),
                    c.server.poll_timeout().map(at),
                ]
            })
            .flatten()
            .min()
    }

    fn timeouts(&mut self) {
        let now = self.instant();
        for c in &mut self.conns {
            for side in [&mut c.client, &mut c.server] {
                if side.is_over() || side.poll_timeout().is_none_or(|t| t > now) {
                    continue;
                }
                let r = match &mut side.role {
                    Role::Sender(s) => s.handle_timeout(now),
                    Role::Receiver(r) => r.handle_timeout(now),
                };
                if let Err(e) = r {
                    side.error = Some(e);
                }
            }
        }
    }

    /// Feeds jobs, performs I/O, moves transmits onto the streams.
    fn drive(&mut self, c: usize) -> bool {
        let now = self.instant();
        let mut moved = false;
        let Sim {
            conns,
            src,
            dest,
            push_jobs,
            pull_jobs,
            faults,
            now: t,
            ..
        } = self;
        let conn = &mut conns[c];
        for (side, stream) in [
            (&mut conn.client, &mut conn.up),
            (&mut conn.server, &mut conn.down),
        ] {
            if side.error.is_some() {
                continue;
            }
            moved |= feed(side, push_jobs, pull_jobs, now);
            moved |= perform(side, src, dest, now);
            moved |= transmit(side, stream, faults, src, *t, now);
        }
        moved
    }

    /// Hands what arrived by now to the other side.
    fn deliver(&mut self, c: usize) -> bool {
        let now = self.instant();
        let t = self.now;
        let mut moved = false;
        let Sim {
            conns,
            dest,
            chunks_delivered,
            faults,
            ..
        } = self;
        let cut = |delivered: u64| faults.cut_after_chunks.is_some_and(|n| delivered >= n);
        if cut(*chunks_delivered) {
            conns.iter_mut().for_each(Conn::stall);
            return false;
        }
        let conn = &mut conns[c];
        'streams: for (stream, side) in [
            (&mut conn.up, &mut conn.server),
            (&mut conn.down, &mut conn.client),
        ] {
            while let Some(wire) = stream.poll(t) {
                moved = true;
                if side.error.is_some() {
                    continue;
                }
                let chunk = matches!(wire, Wire::Chunk(..));
                if let Err(e) = receive(side, dest, wire, now) {
                    side.error = Some(e);
                }
                if chunk {
                    *chunks_delivered += 1;
                    if cut(*chunks_delivered) {
                        break 'streams;
                    }
                }
            }
        }
        if cut(*chunks_delivered) {
            conns.iter_mut().for_each(Conn::stall);
        }
        moved
    }

    /// Events of every connection's client side.
    pub fn client_events(&self) -> Vec<&Event> {
        self.conns
            .iter()
            .flat_map(|c| c.client.events.iter())
            .collect()
    }

    /// Events of every connection's node side.
    pub fn server_events(&self) -> Vec<&Event> {
        self.conns
            .iter()
            .flat_map(|c| c.server.events.iter())
            .collect()
    }
}

/// Hands queued jobs to a client session with room for them.
fn feed(
    side: &mut Side,
    push_jobs: &mut VecDeque<SendJob<String>>,
    pull_jobs: &mut VecDeque<FetchJob>,
    now: Instant,
) -> bool {
    let mut moved = false;
    match &mut side.role {
        Role::Sender(s) => {
            while s.room() > 0 {
                let busy = s.busy_groups();
                let Some(pos) = push_jobs
                    .iter()
                    .position(|j| j.group_key().is_none_or(|k| !busy.contains(&k)))
                else {
                    break;
                };
                let Some(job) = push_jobs.remove(pos) else {
                    break;
                };
                let source = job.source.clone();
                let id = s.push_job(now, job);
                side.paths.insert(id, source);
                moved = true;
            }
            if push_jobs.is_empty() && s.room() > 0 {
                s.close_when_done();
            }
        }
        Role::Receiver(r) => {
            while r.room() > 0 {
                let busy = r.busy_groups();
                let Some(pos) = pull_jobs
                    .iter()
                    .position(|j| j.group_key().is_none_or(|k| !busy.contains(&k)))
                else {
                    break;
                };
                let Some(job) = pull_jobs.remove(pos) else {
                    break;
                };
                let path = job.entry.path.clone();
                let id = r.want(now, job);
                side.paths.insert(id, path);
                moved = true;
            }
            if pull_jobs.is_empty() && r.room() > 0 {
                r.close_when_done();
            }
        }
    }
    moved
}

/// Does the I/O a session asked for, at once.
fn perform(side: &mut Side, src: &MemTree, dest: &mut MemDest, now: Instant) -> bool {
    let mut moved = false;
    loop {
        let done = match &mut side.role {
            Role::Sender(s) => {
                let Some(io) = s.poll_io() else { break };
                sender_io(s, io, &mut side.held, &mut side.paths, src, now);
                true
            }
            Role::Receiver(r) => {
                let Some(io) = r.poll_io() else { break };
                receiver_io(r, io, &mut side.paths, dest, now);
                true
            }
        };
        moved |= done;
    }
    moved
}

fn sender_io(
    s: &mut Sender<String>,
    io: SenderIo,
    held: &mut HashMap<(FileId, u32), Vec<u8>>,
    paths: &mut HashMap<FileId, String>,
    src: &MemTree,
    now: Instant,
) {
    match io {
        SenderIo::Resolve {
            file,
            path,
            dest,
            first,
            end,
        } => match src.get(&path) {
            Some((entry, _)) if entry.kind == haul_proto::EntryKind::File => {
                let entry = haul_proto::Entry {
                    path: dest,
                    ..entry.clone()
                };
                let end = end.min(entry.chunk_count());
                paths.insert(file, path.clone());
                let job = SendJob {
                    content: None,
                    entry,
                    first,
                    end,
                    group: None,
                    source: path,
                };
                s.resolved(now, file, Ok(job));
            }
            _ => s.resolved(
                now,
                file,
                Err((ErrorCode::NotFound, format!("{path}: no such file"))),
            ),
        },
        SenderIo::Read { file, index } => {
            let read = paths
                .get(&file)
                .and_then(|p| src.get(p))
                .and_then(|(e, d)| src.chunk(e, d, index));
            match read {
                Some((bytes, digest)) => {
                    held.insert((file, index), bytes);
                    s.read_done(now, file, index, Ok(digest));
                }
                None => s.read_done(now, file, index, Err("no such chunk".into())),
            }
        }
        SenderIo::Hash { file, indices, .. } => {
            let source = paths.get(&file).and_then(|p| src.get(p));
            let hashed = indices
                .into_iter()
                .map(|i| {
                    let (e, d) = source.ok_or_else(|| "gone".to_string())?;
                    src.chunk(e, d, i)
                        .map(|(_, digest)| (i, digest))
                        .ok_or_else(|| "no such chunk".to_string())
                })
                .collect();
            s.hashed(now, file, hashed);
        }
        // Files in memory never change while they are read.
        SenderIo::Confirm { file } => s.confirmed(now, file, Ok(())),
        SenderIo::Reopen { file } => {
            let path = paths.get(&file).cloned();
            let entry = path
                .as_ref()
                .and_then(|p| src.get(p))
                .map(|(e, _)| e.clone());
            let reopened =
                entry.ok_or_else(|| (haul_session::FailKind::Vanished, "gone".to_string()));
            if let (Some(id), Some(path)) = (s.reopened(now, file, reopened), path) {
                paths.insert(id, path);
            }
        }
        SenderIo::Forget { file } => {
            held.retain(|(f, _), _| *f != file);
            paths.remove(&file);
        }
    }
}

fn receiver_io(
    r: &mut Receiver,
    io: ReceiverIo,
    paths: &mut HashMap<FileId, String>,
    dest: &mut MemDest,
    now: Instant,
) {
    match io {
        ReceiverIo::Make { file, entry } => {
            dest.dirs.push(entry.path);
            r.made(now, file, Ok(()));
        }
        ReceiverIo::Prepare {
            file,
            entry,
            first,
            end,
            ..
        } => {
            paths.insert(file, entry.path.clone());
            let prepared = if dest.up_to_date(&entry) {
                Prepared::UpToDate
            } else {
                Prepared::Receive {
                    have: dest.prepare(&entry, first, end),
                }
            };
            r.prepared(now, file, Ok(prepared));
        }
        ReceiverIo::Commit { file, root } => {
            let result = match paths.get(&file) {
                Some(path) => dest.commit(path, &root),
                None => Err("unknown file".into()),
            };
            r.committed(now, file, result);
        }
        ReceiverIo::Assemble { file } => match paths.get(&file).map(|p| dest.assemble(p)) {
            Some(Ok(Some(root))) => r.committed(now, file, Ok(root)),
            Some(Ok(None)) => r.assembled_elsewhere(now, file),
            Some(Err(e)) => r.committed(now, file, Err(e)),
            None => r.committed(now, file, Err("unknown file".into())),
        },
        ReceiverIo::Forget { file } => {
            paths.remove(&file);
        }
    }
}

/// Moves a side's transmits onto its outgoing stream.
fn transmit(
    side: &mut Side,
    stream: &mut Stream<Wire>,
    faults: &mut Faults,
    src: &MemTree,
    t: Nanos,
    now: Instant,
) -> bool {
    let mut moved = false;
    loop {
        let next = match &mut side.role {
            Role::Sender(s) => s.poll_transmit(now),
            Role::Receiver(r) => r.poll_transmit(now),
        };
        let Some(tx) = next else { break };
        moved = true;
        let wire = match tx {
            Transmit::Message(m) => Wire::Message(m),
            Transmit::Chunk(h) => {
                let mut payload = side.held.remove(&(h.id, h.index)).unwrap_or_default();
                let path = side.paths.get(&h.id).cloned().unwrap_or_default();
                if let Some(pos) = faults
                    .corrupt
                    .iter()
                    .position(|(p, i)| *p == path && *i == h.index)
                {
                    faults.corrupt.remove(pos);
                    if let Some(b) = payload.first_mut() {
                        *b ^= 0x40;
                    }
                }
                let mut h = h;
                if let Some(pos) = faults
                    .forge
                    .iter()
                    .position(|(p, i)| *p == path && *i == h.index)
                {
                    faults.forge.remove(pos);
                    if let (Some(b), Some((e, _))) = (payload.first_mut(), src.get(&path)) {
                        *b ^= 0x40;
                        h.digest = haul_proto::digest::chunk_digest(
                            &payload,
                            h.index,
                            e.chunk_size,
                            e.size,
                        );
                    }
                }
                Wire::Chunk(h, payload)
            }
        };
        let bytes = wire.bytes();
        stream.send(t, wire, bytes);
    }
    drain_events(side);
    moved
}

fn drain_events(side: &mut Side) {
    loop {
        let event = match &mut side.role {
            Role::Sender(s) => s.poll_event(),
            Role::Receiver(r) => r.poll_event(),
        };
        let Some(e) = event else { break };
        side.events.push(e);
    }
}

/// Hands one arrival to a side.
fn receive(
    side: &mut Side,
    dest: &mut MemDest,
    wire: Wire,
    now: Instant,
) -> Result<(), SessionError> {
    match (&mut side.role, wire) {
        (Role::Sender(s), Wire::Message(m)) => s.handle(now, m),
        (Role::Sender(_), Wire::Chunk(..)) => {
            Err(SessionError::Protocol("a chunk at a sender".into()))
        }
        (Role::Receiver(r), Wire::Message(m)) => r.handle(now, m),
        (Role::Receiver(r), Wire::Chunk(h, payload)) => {
            match r.handle_chunk(now, h)? {
                ChunkAction::Write {
                    file,
                    index,
                    digest,
                } => {
                    let path = side.paths.get(&file).cloned().unwrap_or_default();
                    let outcome = if dest.write(&path, index, &payload, &digest) {
                        ChunkOutcome::Good
                    } else {
                        ChunkOutcome::Bad
                    };
                    r.chunk_done(now, file, index, outcome);
                    while let Some((f, i, _)) = r.poll_verified() {
                        let p = side.paths.get(&f).cloned().unwrap_or_default();
                        side.verified.push((p, i));
                    }
                }
                ChunkAction::Discard => {}
            }
            Ok(())
        }
    }
}
