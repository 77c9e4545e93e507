//! `haul push`, `haul pull` and local copies: a pool of connections sharing
//! one work queue, with retries and the `auto` concurrency controller.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use haul_engine::haul_root::Root;
use haul_engine::one_file::{self, OneFile};
use haul_engine::{
    split_ranges, Destination, EntryFilter, EntryIter, Filter, LocalTree, Source as _, SourceEntry,
};
use haul_proto::{Digest, Entry, EntryKind, ErrorCode, Message, Request};
use haul_session::backoff::RetryPolicy;
use haul_session::concurrency::Concurrency;
use haul_session::summary::{Summary, Tally};
use haul_session::{Event, Observer};
use haul_transport::{memory_pair_paced, Connection, Security, Timeouts, Transport, Tuning};

use crate::buffers::ChunkBuffers;
use crate::chunk_work::ChunkWork;
use crate::dial::{Dialer, NodePath};
use crate::drive::receive::{run_receiver, ReceiverCtx};
use crate::drive::send::{run_sender, JobFeed, SenderCtx};
use crate::jobs::{FetchGroup, FetchJob, RangeGroup, SendJob, Source, WorkQueue};
use crate::listing::{self, Listed};
use crate::listing_resume::ResumePoint;
use crate::pool::{connection_backoff, open_first, relist, run_pool, with_retries};
use crate::walk_count::{Counted, WalkCount};
use crate::NodeError;

/// Files (offers or wants) in flight per connection by default.
pub const DEFAULT_WINDOW: usize = haul_session::DEFAULT_WINDOW;

/// Everything a client needs to know.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// TLS (with pinning) or plaintext.
    pub security: Security,
    /// Token presented to the node (empty: none).
    pub token: String,
    /// Time limits.
    pub timeouts: Timeouts,
    /// Connections (files in flight across connections).
    pub jobs: Concurrency,
    /// Connections that share one large file (`--streams`).
    pub streams: u32,
    /// Files at least this large are split across `streams` connections.
    pub split_min: u64,
    /// Offers or wants in flight per connection.
    pub window: usize,
    /// Resends of a failing range before its file fails.
    pub max_retries: u32,
    /// How a connection (or a listing) is tried again: `--retries`, the
    /// same policy as a remote pull's.
    pub retry: RetryPolicy,
    /// Socket buffers and zero copy.
    pub tuning: Tuning,
    /// TCP or QUIC.
    pub transport: Transport,
    /// Where connections read, hash, verify and write large chunks.
    pub chunk_work: ChunkWork,
    /// Bytes of chunk buffers across all connections ([`crate::buffers`]);
    /// a local copy gives this much to each of its two sides.
    pub chunk_memory: usize,
    /// What is taken from the source (`--include`, `--exclude`...): applied
    /// where the source is walked (push, local copy) or, for a pull, to the
    /// node's listing before anything is asked for.
    pub filter: Option<Arc<Filter>>,
    /// `--delete`: after a pull or local copy that failed nowhere, remove
    /// what DEST holds under the source's top that the source does not
    /// have ([`crate::mirror`]).
    pub delete: bool,
    /// `--checksum` (local copies): a file is up to date when its BLAKE3
    /// equals that of the file at DEST, whatever the sizes and mtimes say.
    pub checksum: bool,
    /// `--force`: a non-empty directory at DEST where the source has a file
    /// or symlink is removed to make room (as rsync's `--force`; `--delete`
    /// implies it).
    pub force: bool,
}

impl ClientOptions {
    /// Whether a non-empty directory in the way of a file or symlink is
    /// replaced (`--force`, or `--delete`, as rsync).
    pub fn replaces_dirs(&self) -> bool {
        self.force || self.delete
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            security: Security::Plaintext,
            token: String::new(),
            timeouts: Timeouts::default(),
            jobs: Concurrency::Auto { max: 16 },
            streams: 1,
            split_min: 64 << 20,
            window: DEFAULT_WINDOW,
            max_retries: 5,
            retry: RetryPolicy::default(),
            tuning: Tuning::default(),
            transport: Transport::Tcp,
            chunk_memory: crate::buffers::DEFAULT_BUDGET,
            chunk_work: ChunkWork::for_this_machine(),
            filter: None,
            delete: false,
            checksum: false,
            force: false,
        }
    }
}

/// Expands a source entry into send jobs (one per range when split).
fn send_jobs(src: SourceEntry, streams: u32, split_min: u64) -> Vec<SendJob> {
    let count = src.entry.chunk_count();
    if src.entry.kind != EntryKind::File || streams < 2 || src.entry.size < split_min || count < 2 {
        return vec![crate::drive::local_job(src)];
    }
    let ranges = split_ranges(count, streams);
    let group = RangeGroup::new(src.entry.clone(), ranges.len() as u32);
    ranges
        .into_iter()
        .map(|(first, end)| SendJob {
            entry: src.entry.clone(),
            first,
            end,
            group: Some(group.clone()),
            source: Source::Path(src.local.clone(), src.data.clone()),
        })
        .collect()
}

/// The send jobs of `sources`, walked lazily. For a fan-out `depth` hops
/// deep, files use the smaller chunks [`haul_plan::piece_size`] gives (a
/// relay forwards a chunk once it verified it: the chunk is the latency
/// each hop adds); a striped fan-out's send carries one stripe of each entry.
pub(crate) fn send_queue(
    sources: &[String],
    named: Option<&str>,
    opts: &ClientOptions,
    tally: &Arc<Tally>,
    fanout: Option<FanoutJobs>,
    seen: Option<Arc<Mutex<HashSet<String>>>>,
    same: Option<Arc<SameContent>>,
) -> Result<Arc<WorkQueue<SendJob>>, NodeError> {
    let mut iters: Vec<EntryIter> = Vec::new();
    for s in sources {
        let mut tree = LocalTree::new(s).map_err(|e| NodeError::Usage(e.to_string()))?;
        if let Some(name) = named {
            tree = tree.named(name);
        }
        if let Some(filter) = &opts.filter {
            tree = tree.with_filter(filter.clone());
        }
        iters.push(Box::new(tree).entries());
    }
    let observer = tally.clone();
    let (streams, split_min) = (opts.streams, opts.split_min);
    let walk = iters.into_iter().flatten();
    // The walk's progress, and its end (the total is known then). A
    // fan-out's sends each walk the sources again (one per stripe, and
    // repairs): its coordinator says what the dataset is, once.
    let walk: Box<dyn Iterator<Item = Result<SourceEntry, haul_engine::SourceError>> + Send> =
        match fanout {
            Some(_) => Box::new(walk),
            None => Box::new(Counted::new(
                walk,
                |item: &Result<SourceEntry, haul_engine::SourceError>| match item {
                    Ok(src) if src.entry.kind == EntryKind::File => Some(src.entry.size),
                    _ => None,
                },
                WalkCount::start(tally.clone()),
            )),
        };
    let feed = walk.flat_map(move |item| match item {
        Ok(mut src) => {
            if let Some(seen) = &seen {
                if let Ok(mut seen) = seen.lock() {
                    seen.insert(src.entry.path.clone());
                }
            }
            if let Some(same) = &same {
                if src.entry.kind == EntryKind::File && same.holds(&src) {
                    observer.event(&Event::up_to_date(src.entry.path.clone(), src.entry.size));
                    return Vec::new();
                }
            }
            let Some(fan) = fanout else {
                return send_jobs(src, streams, split_min);
            };
            if src.entry.kind == EntryKind::File {
                src.entry.chunk_size = haul_plan::piece_size(src.entry.size, fan.depth);
            }
            let Some(stripe) = fan.stripe else {
                return send_jobs(src, streams, split_min);
            };
            // One stripe of each entry (the rest go to other nodes).
            let Some((first, end)) = stripe.carries(&src.entry) else {
                return Vec::new();
            };
            vec![SendJob {
                first,
                end,
                ..crate::drive::local_job(src)
            }]
        }
        Err(e) if e.is_skip() => {
            observer.event(&Event::Warning {
                message: e.to_string(),
            });
            Vec::new()
        }
        Err(e) => {
            observer.event(&Event::FileError {
                path: e.path().to_owned(),
                error: e.to_string(),
            });
            Vec::new()
        }
    });
    Ok(WorkQueue::fed_by(feed))
}

/// How a fan-out cuts the jobs of a send: chunk sizes for the plan's
/// depth, and the one stripe a striped plan's connection carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FanoutJobs {
    /// Hops of the plan ([`haul_plan::piece_size`]).
    pub depth: usize,
    /// The stripe this send carries (`None`: every entry whole).
    pub stripe: Option<haul_proto::Stripe>,
}

/// `--checksum`: what each file to send is compared with; a file whose
/// content is already there is up to date and not offered.
pub(crate) enum SameContent {
    /// A local destination (a local copy), read through held descriptors.
    At(Arc<Root>),
    /// What the node holds, by wire path: size and BLAKE3 (its listing
    /// with sums, `Request::List{sums}`).
    Listed(HashMap<String, (u64, Digest)>),
}

impl SameContent {
    /// Whether the destination holds `src`'s content under its path.
    fn holds(&self, src: &SourceEntry) -> bool {
        match self {
            Self::At(root) => same_content(src, root),
            Self::Listed(sums) => match sums.get(&src.entry.path) {
                Some((size, digest)) if *size == src.entry.size => {
                    haul_engine::source::hash_local(src).is_ok_and(|h| h.as_bytes() == digest)
                }
                _ => false,
            },
        }
    }

    /// What the node holds under `dest` for each of `sources` (the push's
    /// wire paths), hashed by the node.
    pub(crate) async fn listed(
        remote: &NodePath,
        dest: &str,
        sources: &[String],
        named: Option<&str>,
        tally: &Tally,
    ) -> Result<Self, NodeError> {
        let mut sums = HashMap::new();
        for source in sources {
            let top = LocalTree::new(source)
                .map(|t| named.unwrap_or(t.top_name()).to_owned())
                .map_err(|e| NodeError::Usage(e.to_string()))?;
            let under = crate::mirror::under_dest(dest, &top);
            let side = crate::dry_run::list_node_with(&remote.dialer, &under, true, tally).await?;
            for (path, why) in side.unreadable {
                tally.event(&Event::Warning {
                    message: format!("--checksum: {path} is sent again: {why}"),
                });
            }
            for e in side.entries {
                if let Some(d) = side.sums.get(&e.path) {
                    sums.insert(e.path, (e.size, *d));
                }
            }
        }
        Ok(Self::Listed(sums))
    }
}

/// `--checksum`: whether the file at `src`'s path beneath `root` has the
/// same size and BLAKE3 (both read through held descriptors).
fn same_content(src: &SourceEntry, root: &Root) -> bool {
    let Ok(comps) = haul_proto::validate_entry_path(&src.entry.path) else {
        return false;
    };
    let Some((last, parents)) = comps.split_last() else {
        return false;
    };
    let Ok(dir) = root.open_dir(parents) else {
        return false;
    };
    let Ok((theirs, meta)) = dir.open_regular(last) else {
        return false;
    };
    if meta.size != src.entry.size {
        return false;
    }
    let theirs = haul_engine::LocalFile::open(theirs)
        .ok()
        .and_then(|f| haul_engine::content::whole_file(&f).ok());
    match (haul_engine::source::hash_local(src).ok(), theirs) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// Fails whatever is left in a queue after every worker gave up.
fn fail_leftovers<J: crate::jobs::Job>(
    queue: &WorkQueue<J>,
    tally: &Tally,
    err: &Option<NodeError>,
    path_of: impl Fn(&J) -> String,
) {
    let reason = err
        .as_ref()
        .map(|e| e.to_string())
        .unwrap_or_else(|| "not transferred".into());
    while let Some(job) = queue.try_take(&[]) {
        tally.event(&Event::FileError {
            path: path_of(&job),
            error: format!("not transferred: {reason}"),
        });
    }
}

/// Pushes local `sources` into `remote` (a directory under the node's root).
pub async fn push(
    sources: &[String],
    remote: &NodePath,
    opts: &ClientOptions,
    observer: Arc<dyn Observer>,
) -> Result<Summary, NodeError> {
    let started = Instant::now();
    let dest = remote.path.trim_matches('/').to_owned();
    haul_proto::validate_rel_path(&dest).map_err(|e| NodeError::Usage(e.to_string()))?;
    if opts.delete && sources.len() != 1 {
        return Err(NodeError::Usage(
            "--delete mirrors one source into DEST: give one source".into(),
        ));
    }
    let tally = Tally::new(observer);
    // One file to a path that names it goes into that path's directory
    // under that name; a one-file tree has nothing for --delete to remove.
    let named = pushed_as(remote, sources, opts, tally.as_ref()).await?;
    let dest = named.as_ref().map_or(dest, |(dir, _)| dir.clone());
    let named = named.map(|(_, name)| name);
    let seen = (opts.delete && named.is_none()).then(|| Arc::new(Mutex::new(HashSet::new())));
    let same = match opts.checksum {
        true => Some(Arc::new(
            SameContent::listed(remote, &dest, sources, named.as_deref(), &tally).await?,
        )),
        false => None,
    };
    let queue = send_queue(
        sources,
        named.as_deref(),
        opts,
        &tally,
        None,
        seen.clone(),
        same,
    )?;
    // Fail fast on a wrong address, token or key before spawning workers.
    let request = Request::Push {
        dest,
        checksum: opts.checksum,
        replace_dirs: opts.replaces_dirs(),
    };
    let first = open_first(&remote.dialer, opts, request.clone(), tally.as_ref()).await?;
    let ctx = SenderCtx::for_client(opts, &tally, ChunkBuffers::new(opts.chunk_memory));
    let (workers, err) = send_all(
        &queue,
        &remote.dialer,
        request,
        Some(first),
        opts,
        &tally,
        ctx,
    )
    .await;
    fail_leftovers(&queue, &tally, &err, |j| j.entry.path.clone());
    if let (Some(seen), Some(source)) = (seen, sources.first()) {
        let sent = seen.lock().map(|s| s.clone()).unwrap_or_default();
        let dest = remote.path.trim_matches('/');
        crate::mirror::prune_node(remote, dest, source, &sent, opts, &tally, err.as_ref()).await;
    }
    finish(&tally, started, workers, err)
}

/// A push of one file to a node path that names it ([`OneFile`]: nothing
/// is there, or a regular file): the directory it goes into and its name
/// there. `None`: the push goes into `remote`'s path, as any other.
pub(crate) async fn pushed_as(
    remote: &NodePath,
    sources: &[String],
    opts: &ClientOptions,
    observer: &dyn Observer,
) -> Result<Option<(String, String)>, NodeError> {
    let [source] = sources else {
        return Ok(None);
    };
    let path = remote.path.trim_start_matches('/');
    let Some(named) = OneFile::remote(path).filter(|_| one_file::is_one_local_file(source)) else {
        return Ok(None);
    };
    Ok(
        match crate::dry_run::node_entry(&remote.dialer, opts, path, observer).await? {
            None => Some(named),
            Some(there) if there.kind == EntryKind::File => Some(named),
            Some(_) => None,
        },
    )
}

/// Sends every job of `queue` to the node `dialer` reaches over a pool of connections
/// (`first` already open) asking `request`, with retries; returns how many
/// connections ran and the error that stopped them, if any.
pub(crate) async fn send_all(
    queue: &Arc<WorkQueue<SendJob>>,
    dialer: &Dialer,
    request: Request,
    first: Option<Connection>,
    opts: &ClientOptions,
    tally: &Arc<Tally>,
    ctx: SenderCtx,
) -> (u32, Option<NodeError>) {
    let mut first = first;
    let retire = || queue.retire_one();
    run_pool(opts.jobs, tally, &retire, || {
        let (queue, tally, opts, ctx, dialer, request) = (
            queue.clone(),
            tally.clone(),
            opts.clone(),
            ctx.clone(),
            dialer.clone(),
            request.clone(),
        );
        let mut ready = first.take();
        async move {
            with_retries(&queue, &tally, &opts, || {
                let conn = ready.take();
                let (queue, tally, ctx, dialer, request) = (
                    queue.clone(),
                    tally.clone(),
                    ctx.clone(),
                    dialer.clone(),
                    request.clone(),
                );
                async move {
                    let (r, w) = match conn {
                        Some(c) => c,
                        // No connection for a queue with nothing left to take
                        // (one small file needs one connection, not four);
                        // an open queue (a relay's) may still get jobs.
                        None if !queue.has_waiting() && queue.is_drained() => return Ok(()),
                        None => dialer.open(request).await.map_err(|e| (e, Vec::new()))?,
                    };
                    let _counted = tally.connection();
                    run_sender(r, w, JobFeed::Queue(queue), ctx)
                        .await
                        .map_err(|i| (i.error, i.unfinished))
                }
            })
            .await
        }
    })
    .await
}

fn finish(
    tally: &Tally,
    started: Instant,
    workers: u32,
    err: Option<NodeError>,
) -> Result<Summary, NodeError> {
    let summary = tally.finish(started.elapsed(), workers);
    match err {
        Some(e) if summary.entries_ok == 0 && summary.failed == 0 => Err(e),
        Some(e) if e.is_permanent() => Err(e),
        _ => Ok(summary),
    }
}

/// Pulls `remote` (a path under the node's root) into local directory `dest`.
pub async fn pull(
    remote: &NodePath,
    dest: &Path,
    opts: &ClientOptions,
    observer: Arc<dyn Observer>,
) -> Result<Summary, NodeError> {
    let started = Instant::now();
    let base = list_base(&remote.path);
    let top = list_top(&remote.path);
    // A DEST that could name one file waits for the listing's first entry
    // to say whether the source is one.
    let one = (!top.is_empty()).then(|| OneFile::local(dest)).flatten();
    if one.is_none() {
        check_dest_dir(dest)?;
    }
    let tally = Tally::new(observer);
    let list_request = Request::List {
        path: remote.path.clone(),
        sums: opts.checksum,
    };
    let (mut lr, mut lw) =
        open_first(&remote.dialer, opts, list_request.clone(), tally.as_ref()).await?;
    let mut pending = None;
    let mut renamed = None;
    if let Some(one) = one {
        let first = listing::next(&mut lr, opts.checksum).await?;
        if matches!(&first, Some(Listed::Entry { entry, .. }) if entry.path == top && entry.kind != EntryKind::Dir)
        {
            renamed = Some(one);
        } else {
            check_dest_dir(dest)?;
        }
        pending = Some(first);
    }
    // One file named by DEST lands in DEST's directory; a one-file tree
    // has nothing for --delete to remove.
    let delete = opts.delete && renamed.is_none();
    if delete {
        crate::mirror::check_dest(dest)?;
    }
    let (dest, renamed) = match &renamed {
        Some(one) => (one.dir.as_path(), Some((top.clone(), one.name.clone()))),
        None => (dest, None),
    };
    // Only now that the node lists the path: a refused pull leaves no DEST.
    let destination = Destination::open(dest)?;
    if opts.checksum {
        // Files were compared by content while listed: none is skipped
        // for its size and mtime.
        destination.receive_everything_offered();
    }
    destination.apply_dir_metadata_at_end();
    let queue: Arc<WorkQueue<FetchJob>> = WorkQueue::open();
    let lister = {
        let (queue, tally, destination, opts) = (
            queue.clone(),
            tally.clone(),
            destination.clone(),
            opts.clone(),
        );
        let (top, dialer) = (top.clone(), remote.dialer.clone());
        tokio::spawn(async move {
            // A listing that breaks off is opened again and goes on after
            // the last entry taken (`--retries` times, with backoff).
            let mut state = ListingState {
                resume: ResumePoint::default(),
                chosen: opts
                    .filter
                    .clone()
                    .map(|f| EntryFilter::new(f, top.clone())),
                listed: HashSet::new(),
                count: WalkCount::start(tally.clone()),
                pending,
            };
            let mut backoff = connection_backoff(&opts);
            let r = loop {
                let got = ListingSink {
                    queue: &queue,
                    tally: &tally,
                    dest: &destination,
                    base: &base,
                    opts: &opts,
                    renamed: renamed.as_ref(),
                };
                let r = read_listing(&mut lr, &got, &mut state).await;
                let _ = lw.send(&Message::Bye).await;
                let Err(e) = r else {
                    state.count.done();
                    break Ok(state.listed);
                };
                match relist(
                    &dialer,
                    &opts,
                    list_request.clone(),
                    &tally,
                    &mut backoff,
                    e,
                )
                .await
                {
                    Ok((r, w)) => {
                        (lr, lw) = (r, w);
                        state.resume.restart();
                    }
                    Err(e) => break Err(e),
                }
            };
            queue.close();
            r
        })
    };
    let ctx = ReceiverCtx {
        observer: tally.clone(),
        dest: destination.clone(),
        prefix: String::new(),
        window: opts.window,
        idle: opts.timeouts.idle,
        chunk_work: opts.chunk_work,
        buffers: ChunkBuffers::new(opts.chunk_memory),
        relay: None,
        quick_check: true,
        replace_dirs: opts.replaces_dirs(),
    };
    let retire = || queue.retire_one();
    let (workers, mut err) = run_pool(opts.jobs, &tally, &retire, || {
        let (queue, tally, opts, ctx, dialer) = (
            queue.clone(),
            tally.clone(),
            opts.clone(),
            ctx.clone(),
            remote.dialer.clone(),
        );
        async move {
            with_retries(&queue, &tally, &opts, || {
                let (queue, tally, ctx, dialer) =
                    (queue.clone(), tally.clone(), ctx.clone(), dialer.clone());
                async move {
                    queue.wait().await;
                    if queue.is_drained() {
                        return Ok(());
                    }
                    let (r, w) = dialer
                        .open(Request::Fetch)
                        .await
                        .map_err(|e| (e, Vec::new()))?;
                    let _counted = tally.connection();
                    run_receiver(r, w, Some(queue), ctx)
                        .await
                        .map_err(|i| (i.error, i.unfinished))
                }
            })
            .await
        }
    })
    .await;
    let mut listed = HashSet::new();
    let broke = match lister.await {
        Ok(Ok(paths)) => {
            listed = paths;
            None
        }
        Ok(Err(e)) => Some(e),
        Err(e) => Some(NodeError::Internal(format!("lister stopped: {e}"))),
    };
    if let Some(e) = broke {
        // What the listing never reached was never queued: nothing else
        // counts it, so the pull must not end as if it were whole.
        tally.event(&Event::FileError {
            path: remote.path.clone(),
            error: format!(
                "the node's listing broke off ({e}): what it listed before is here, verified; \
                 run the pull again for the rest"
            ),
        });
        err = Some(e);
    }
    fail_leftovers(&queue, &tally, &err, |j| j.entry.path.clone());
    if delete {
        crate::mirror::delete_extraneous(dest, &top, &listed, opts, &tally, err.as_ref());
    }
    destination.apply_dir_metadata();
    destination.tidy_state_dir();
    finish(&tally, started, workers, err)
}

/// A local copy of one file to a DEST that names it ([`OneFile`]).
pub(crate) fn copied_as(sources: &[String], dest: &Path) -> Option<OneFile> {
    match sources {
        [source] if one_file::is_one_local_file(source) => OneFile::local(dest),
        _ => None,
    }
}

/// A destination must be a directory, or not exist yet.
fn check_dest_dir(dest: &Path) -> Result<(), NodeError> {
    match std::fs::metadata(dest) {
        Ok(meta) if !meta.is_dir() => Err(NodeError::Usage(format!(
            "{} exists and is not a directory: give a directory (made if missing) as DEST",
            dest.display()
        ))),
        _ => Ok(()),
    }
}

/// The wire name of a listing's top: the last component of `path`, or
/// nothing when only its contents are listed (a trailing `/`).
pub(crate) fn list_top(path: &str) -> String {
    if path.ends_with('/') || path.is_empty() {
        return String::new();
    }
    path.rsplit('/').next().unwrap_or_default().to_owned()
}

/// The server directory listing paths are relative to.
fn list_base(path: &str) -> String {
    if path.ends_with('/') || path.is_empty() {
        return path.trim_end_matches('/').to_owned();
    }
    match path.rfind('/') {
        Some(i) => path[..i].to_owned(),
        None => String::new(),
    }
}

/// Where a pull's listing hands its entries on.
struct ListingSink<'a> {
    queue: &'a WorkQueue<FetchJob>,
    tally: &'a Tally,
    dest: &'a Arc<Destination>,
    base: &'a str,
    opts: &'a ClientOptions,
    /// One file whose DEST names it: its listed name and the name it
    /// takes at DEST ([`OneFile`]).
    renamed: Option<&'a (String, String)>,
}

impl ListingSink<'_> {
    /// `entry` as DEST names it, and the path the node serves it under.
    fn localised(&self, mut entry: Entry) -> (Entry, String) {
        let served = if self.base.is_empty() {
            entry.path.clone()
        } else {
            format!("{}/{}", self.base, entry.path)
        };
        if let Some((listed, name)) = self.renamed {
            if entry.path == *listed {
                name.clone_into(&mut entry.path);
            }
        }
        (entry, served)
    }
}

/// What a pull's listings carry from one to the next when one breaks off.
struct ListingState {
    /// Where the next listing goes on.
    resume: ResumePoint,
    /// `--filter`'s choice, which holds directories until it knows
    /// whether anything in them is taken.
    chosen: Option<EntryFilter<haul_proto::Entry>>,
    /// With `--delete`, what the source has (after the filter).
    listed: HashSet<String>,
    /// The files taken so far, told to the observer.
    count: WalkCount,
    /// What was read before the listing was handed on (its first item,
    /// which says whether the source is one file; `Some(None)`: its end).
    pending: Option<Option<Listed>>,
}

/// Reads one listing to its end, handing on what `state.resume` has not
/// seen.
async fn read_listing(
    rd: &mut Box<dyn haul_transport::MessageReader>,
    sink: &ListingSink<'_>,
    state: &mut ListingState,
) -> Result<(), NodeError> {
    let ListingState {
        resume,
        chosen,
        listed,
        count,
        pending,
    } = state;
    let ListingSink {
        queue,
        tally,
        dest,
        opts,
        ..
    } = *sink;
    let mut taken = Vec::new();
    // With --checksum: the node's BLAKE3 of each file it listed.
    let mut sums: HashMap<String, Digest> = HashMap::new();
    loop {
        let listed_now = match pending.take() {
            Some(read_before) => read_before,
            None => listing::next(rd, opts.checksum).await?,
        };
        let (entry, sum) = match listed_now {
            None => return Ok(()),
            Some(Listed::Entry { entry, sum }) => (entry, sum),
            Some(Listed::Error { .. }) if resume.catching_up() => continue,
            Some(Listed::Error {
                code: ErrorCode::Skipped,
                message,
            }) => {
                tally.event(&Event::Warning {
                    message: format!("node: {message}"),
                });
                continue;
            }
            Some(Listed::Error { message, .. }) => {
                tally.event(&Event::FileError {
                    path: String::new(),
                    error: format!("node: {message}"),
                });
                continue;
            }
        };
        if resume.seen(&entry.path) {
            continue;
        }
        // With --checksum: a file the node could not read is fetched (and
        // its fetch says why).
        if let Some(Ok(root)) = sum {
            sums.insert(entry.path.clone(), root);
        }
        match chosen {
            Some(chosen) => taken = chosen.offer(&entry.clone(), entry),
            None => taken.push(entry),
        }
        for entry in taken.drain(..) {
            let sum = sums.remove(&entry.path);
            let (entry, served) = sink.localised(entry);
            if opts.delete {
                listed.insert(entry.path.clone());
            }
            if entry.kind == EntryKind::File {
                count.found(entry.size);
            }
            if opts.checksum
                && entry.kind == EntryKind::File
                && holds_content(dest, &entry, sum).await
            {
                tally.event(&Event::up_to_date(entry.path.clone(), entry.size));
                continue;
            }
            take_listed(entry, served, queue, tally, dest, opts);
        }
    }
}

/// `--checksum` for a pull: whether DEST holds a file of `entry`'s size
/// whose BLAKE3 is the node's `digest` (hashed on a blocking thread).
async fn holds_content(dest: &Arc<Destination>, entry: &Entry, digest: Option<Digest>) -> bool {
    let Some(digest) = digest else {
        return false;
    };
    if dest.existing_file_size(&entry.path) != Some(entry.size) {
        return false;
    }
    let (dest, path) = (dest.clone(), entry.path.clone());
    tokio::task::spawn_blocking(move || dest.hash_existing(&path))
        .await
        .ok()
        .flatten()
        .is_some_and(|h| *h.as_bytes() == digest)
}

/// Makes a listed directory or link, or queues a listed file unless it
/// is up to date.
fn take_listed(
    entry: haul_proto::Entry,
    server_path: String,
    queue: &WorkQueue<FetchJob>,
    tally: &Tally,
    dest: &Destination,
    opts: &ClientOptions,
) {
    let path = entry.path.clone();
    let result = match &entry.kind {
        EntryKind::Dir | EntryKind::Symlink { .. } => match dest.make_dir_or_link(&entry) {
            Some(made) => made.map(|()| tally.event(&Event::made(path.clone()))),
            None => Ok(()),
        },
        EntryKind::File => {
            if let Err(e) = haul_proto::validate_entry_path(&entry.path) {
                Err(e.into())
            } else if !opts.checksum && dest.quick_check(&entry) {
                tally.event(&Event::up_to_date(path.clone(), entry.size));
                Ok(())
            } else {
                let count = entry.chunk_count();
                if opts.streams > 1 && entry.size >= opts.split_min && count >= 2 {
                    let ranges = split_ranges(count, opts.streams);
                    let group = FetchGroup::new(ranges.len() as u32);
                    for (first, end) in ranges {
                        queue.push(FetchJob {
                            path: server_path.clone(),
                            entry: entry.clone(),
                            first,
                            end,
                            group: Some(group.clone()),
                        });
                    }
                } else {
                    queue.push(FetchJob {
                        path: server_path,
                        entry,
                        first: 0,
                        end: u32::MAX,
                        group: None,
                    });
                }
                Ok(())
            }
        }
    };
    if let Err(e) = result {
        tally.event(&Event::FileError {
            path,
            error: e.to_string(),
        });
    }
}

/// Copies local `sources` into local directory `dest` through the same
/// sender and receiver the network uses (in-memory connections).
pub async fn copy_local(
    sources: &[String],
    dest: &Path,
    opts: &ClientOptions,
    observer: Arc<dyn Observer>,
) -> Result<Summary, NodeError> {
    let started = Instant::now();
    // One file to a DEST that names it: into DEST's directory, under that
    // name; a one-file tree has nothing for --delete to remove.
    let one = copied_as(sources, dest);
    let (dest, named) = match &one {
        Some(one) => (one.dir.as_path(), Some(one.name.as_str())),
        None => (dest, None),
    };
    check_dest_dir(dest)?;
    if opts.delete {
        if sources.len() != 1 {
            return Err(NodeError::Usage(
                "--delete mirrors one source into DEST: give one source".into(),
            ));
        }
        crate::mirror::check_dest(dest)?;
    }
    let tally = Tally::new(observer);
    let seen = (opts.delete && named.is_none()).then(|| Arc::new(Mutex::new(HashSet::new())));
    let destination = Destination::open(dest)?;
    let same = if opts.checksum {
        destination.receive_everything_offered();
        let root = Root::open(dest)
            .map_err(|e| NodeError::Usage(format!("cannot open {}: {e}", dest.display())))?;
        Some(Arc::new(SameContent::At(Arc::new(root))))
    } else {
        None
    };
    let queue = send_queue(sources, named, opts, &tally, None, seen.clone(), same)?;
    destination.apply_dir_metadata_at_end();
    let sctx = SenderCtx::for_client(opts, &tally, ChunkBuffers::new(opts.chunk_memory));
    let rctx = ReceiverCtx {
        observer: Arc::new(haul_session::event::Quiet),
        dest: destination.clone(),
        prefix: String::new(),
        window: opts.window,
        idle: opts.timeouts.idle,
        chunk_work: opts.chunk_work,
        // Its own pool: a sender holding buffers while it waits for this
        // receiver must never leave it without one.
        buffers: ChunkBuffers::new(opts.chunk_memory),
        relay: None,
        quick_check: true,
        replace_dirs: opts.replaces_dirs(),
    };
    let timeouts: Timeouts = opts.timeouts;
    let retire = || queue.retire_one();
    let (workers, err) = run_pool(opts.jobs, &tally, &retire, || {
        let (queue, sctx, rctx) = (queue.clone(), sctx.clone(), rctx.clone());
        let pace = opts.tuning.pace.clone();
        async move {
            let ((sr, sw), (rr, rw)) = memory_pair_paced(timeouts, pace);
            let receiver = tokio::spawn(run_receiver(rr, rw, None, rctx));
            let sent = run_sender(sr, sw, JobFeed::Queue(queue.clone()), sctx).await;
            let received = receiver.await;
            match (sent, received) {
                (Ok(()), Ok(Ok(()))) => Ok(()),
                (Err(i), _) => {
                    for j in i.unfinished {
                        queue.give_back(j);
                    }
                    Err(i.error)
                }
                (_, Ok(Err(i))) => Err(i.error),
                (_, Err(e)) => Err(NodeError::Internal(format!("receiver stopped: {e}"))),
            }
        }
    })
    .await;
    fail_leftovers(&queue, &tally, &err, |j| j.entry.path.clone());
    if let (Some(seen), Some(source)) = (seen, sources.first()) {
        let top = LocalTree::new(source)
            .map(|t| t.top_name().to_owned())
            .unwrap_or_default();
        let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
        crate::mirror::delete_extraneous(dest, &top, &seen, opts, &tally, err.as_ref());
    }
    destination.apply_dir_metadata();
    destination.tidy_state_dir();
    finish(&tally, started, workers, err)
}
