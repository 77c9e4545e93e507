//! `haul pull` from a node: the listing read (and read again after a
//! break, from where it stopped) while a pool of connections fetches what
//! it queued, one file to a DEST that names it, `--delete` at the end.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use haul_engine::backup::Backups;
use haul_engine::one_file::OneFile;
use haul_engine::{split_ranges, Destination, EntryFilter};
use haul_proto::{Digest, Entry, EntryKind, ErrorCode, Message, Request};
use haul_run::summary::{Summary, Tally};
use haul_session::{Event, Observer};

use crate::client::{check_dest_dir, fail_leftovers, finish, ClientOptions};
use crate::dial::NodePath;
use crate::drive::receive::{run_receiver, ReceiverCtx};
use crate::hard_links::{link_here, Firsts, Links};
use crate::jobs::{FetchGroup, FetchJob, WorkQueue};
use crate::listing::list_top;
use crate::listing::{self, Listed};
use crate::listing_resume::ResumePoint;
use crate::pool::{connection_backoff, open_first, relist, run_pool, with_retries};
use crate::pull_gate::{AdmittedFile, Gated};
use crate::walk_count::WalkCount;
use crate::NodeError;

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
    // A gate (the daemon's catalog) hears each started file's outcome
    // from the pull's own events.
    let gated = opts.gate.clone().map(Gated::new);
    let observer = match &gated {
        Some(g) => g.watching(observer),
        None => observer,
    };
    let tally = Tally::new(observer);
    let list_request = Request::List {
        path: remote.path.clone(),
        sums: opts.checksum,
        keep: opts.keep,
        // Never for --delete: what a listing of changes leaves out is no
        // file to remove.
        since: opts
            .list_cursor
            .as_ref()
            .filter(|_| !opts.delete)
            .map(|c| c.asked()),
    };
    let (mut lr, mut lw) =
        open_first(&remote.dialer, opts, list_request.clone(), tally.as_ref()).await?;
    let mut pending = None;
    let mut renamed = None;
    if let Some(one) = one {
        // What the node sets when it receives is no pull's business.
        let first = loop {
            match listing::next(&mut lr, opts.checksum).await? {
                Some(Listed::Takes { .. }) => continue,
                Some(cursor @ Listed::Cursor { .. }) => cursor.offer_to(&opts.list_cursor),
                other => break other,
            }
        };
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
    let destination = Destination::open_staged(dest, opts.staging.as_deref())?;
    let backups = opts.backups_at(destination.held_root())?;
    destination.replace_files_in_the_way();
    destination.set_attr_policy(haul_engine::attrs::AttrPolicy::here(opts.keep));
    if opts.checksum || gated.is_some() {
        // Files were compared by content while listed, or the gate chose
        // them: none is skipped for its size and mtime.
        destination.receive_everything_offered();
    }
    destination.apply_dir_metadata_at_end();
    let queue: Arc<WorkQueue<FetchJob>> = WorkQueue::open();
    opts.limit(&queue, &tally);
    let links = Arc::new(Links::default());
    let lister = {
        let (queue, tally, destination, opts, links, backups) = (
            queue.clone(),
            tally.clone(),
            destination.clone(),
            opts.clone(),
            links.clone(),
            backups.clone(),
        );
        let (top, dialer, gated) = (top.clone(), remote.dialer.clone(), gated.clone());
        tokio::spawn(async move {
            // Files a gate admitted wait here for its start.
            let (admitted, mut to_start) = match gated {
                Some(_) => {
                    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                    (Some(tx), Some(rx))
                }
                None => (None, None),
            };
            let starting = async {
                let (Some(gated), Some(rx)) = (&gated, &mut to_start) else {
                    return;
                };
                while let Some(file) = rx.recv().await {
                    if let Some(file) = gated.start(file, &destination).await {
                        let backups = backups.as_deref();
                        take_listed(
                            file.entry,
                            file.served,
                            &queue,
                            &tally,
                            &destination,
                            backups,
                            &opts,
                        );
                    }
                }
            };
            // A listing that breaks off is opened again and goes on after
            // the last entry taken (`--retries` times, with backoff).
            let listing = async {
                let admitted = admitted;
                let mut state = ListingState {
                    resume: ResumePoint::default(),
                    chosen: opts
                        .filter
                        .clone()
                        .map(|f| EntryFilter::new(f, top.clone())),
                    listed: HashSet::new(),
                    count: WalkCount::start(tally.clone()),
                    pending,
                    firsts: Firsts::default(),
                    had_errors: false,
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
                        links: &links,
                        backups: backups.as_deref(),
                        gated: gated.as_deref().zip(admitted.as_ref()),
                    };
                    let r = read_listing(&mut lr, &got, &mut state).await;
                    let _ = lw.send(&Message::Bye).await;
                    let Err(e) = r else {
                        state.count.done();
                        // rsync's "link_stat failed": a path the list names
                        // that the source does not have fails (exit 23).
                        // (Not when the node skipped or could not read some
                        // entries: a path named may be one of them.)
                        let unlisted = match (&state.chosen, state.had_errors) {
                            (Some(c), false) => c.unlisted(),
                            _ => Vec::new(),
                        };
                        for path in unlisted {
                            tally.event(&Event::file_failed(
                                path,
                                haul_engine::haul_filter::NamedPaths::NOT_FOUND,
                                haul_session::FailKind::Error,
                            ));
                        }
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
                // The last admitted file is started once the listing ended.
                drop(admitted);
                r
            };
            let (r, ()) = tokio::join!(listing, starting);
            queue.close();
            r
        })
    };
    let ctx = ReceiverCtx::for_client(opts, tally.clone(), destination.clone())
        .keeping_backups(backups.clone());
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
                        .open(Request::Fetch {
                            keep: opts.keep,
                            compress: opts.compress.map_or(0, |l| l.clamp(1, 22) as u8),
                            // The dialer fills it in from the path.
                            rate_hint: 0,
                        })
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
    if queue.was_cut() || (gated.is_some() && err.is_some()) {
        // --max-transfer: the rest of the listing would only be left. A
        // gate's pull whose connections all gave up: nothing would fetch
        // what is still to start, and a start may wait for the very caps
        // the files started before hold until they are settled (below).
        lister.abort();
    }
    let broke = match lister.await {
        Ok(Ok(paths)) => {
            listed = paths;
            None
        }
        Err(e) if e.is_cancelled() => None,
        Ok(Err(e)) => Some(e),
        Err(e) => Some(NodeError::Internal(format!("lister stopped: {e}"))),
    };
    if let Some(e) = broke {
        // What the listing never reached was never queued: nothing else
        // counts it, so the pull must not end as if it were whole.
        tally.event(&Event::file_failed(
            remote.path.clone(),
            format!(
                "the node's listing broke off ({e}): what it listed before is here, verified; \
                 run the pull again for the rest"
            ),
            e.fail_kind(),
        ));
        err = Some(e);
    }
    // Told to the gate before the queue's leftovers are failed below.
    if let Some(gated) = &gated {
        // Connections that all gave up (retries spent, a node that refused
        // us, an ssh that failed): the source, not the file, is the cause.
        let (why, unreachable) = match &err {
            Some(e) => (format!("not fetched: {e}"), true),
            None => ("not fetched: the pull ended before it".to_owned(), false),
        };
        gated.finish(&why, unreachable).await;
    }
    fail_leftovers(&queue, &tally, &err, |j| j.entry.path.clone());
    let root = destination.held_root();
    let complete = err.is_none() && !queue.was_cut();
    link_here(root, backups.as_deref(), &links, opts, &tally, complete);
    if delete {
        crate::mirror::delete_extraneous(dest, &top, &listed, opts, &tally, err.as_ref());
    }
    destination.apply_dir_metadata();
    destination.tidy_state_dir();
    finish(&tally, started, workers, err)
        .map(|s| crate::client::with_wire(s, [&remote.dialer], opts))
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
    /// `-H`: the further names listed, linked once the pull ended.
    links: &'a Links,
    /// `--backup`: what a symlink made replaces is kept.
    backups: Option<&'a Backups>,
    /// A gate's pull: listed files go to the gate, and those it admits
    /// to this channel, to wait for their start.
    gated: Option<(
        &'a Gated,
        &'a tokio::sync::mpsc::UnboundedSender<AdmittedFile>,
    )>,
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
    /// `-H`: which first names this pull takes.
    firsts: Firsts,
    /// The node said of some entry that it skipped it or could not read it.
    had_errors: bool,
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
        firsts,
        had_errors,
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
            None => {
                if let Some(c) = &opts.list_cursor {
                    c.listed_to_the_end();
                }
                return Ok(());
            }
            Some(Listed::Entry { entry, sum }) => (entry, sum),
            Some(Listed::Takes { .. }) => continue,
            Some(cursor @ Listed::Cursor { .. }) => {
                cursor.offer_to(&opts.list_cursor);
                continue;
            }
            Some(Listed::Error { .. }) if resume.catching_up() => continue,
            Some(Listed::Error {
                code: ErrorCode::Skipped,
                message,
            }) => {
                *had_errors = true;
                tally.event(&Event::Warning {
                    message: format!("node: {message}"),
                });
                continue;
            }
            Some(Listed::Error { message, .. }) => {
                *had_errors = true;
                tally.event(&Event::file_error(
                    String::new(),
                    format!("node: {message}"),
                ));
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
            let entry = match entry.kind {
                EntryKind::HardLink { .. } => match firsts.further(entry, sink.links) {
                    Some(entry) => entry,
                    None => continue,
                },
                EntryKind::File if opts.keep.hard_links => {
                    firsts.file(&entry);
                    entry
                }
                _ => entry,
            };

            if entry.kind == EntryKind::File {
                count.found(entry.size);
            }
            if opts.checksum && entry.kind == EntryKind::File {
                if let Some(fixed) = holds_content(dest, &entry, sum).await {
                    if let Some(code) = haul_engine::itemize::in_place(&entry, fixed) {
                        tally.event(&Event::Itemized {
                            path: entry.path.clone(),
                            code,
                        });
                    }
                    tally.event(&Event::up_to_date(entry.path.clone(), entry.size));
                    continue;
                }
            }
            if let (Some((gated, admitted)), EntryKind::File) = (sink.gated, &entry.kind) {
                // A name the node should never have listed is refused before
                // the gate (the catalog) hears of it.
                if let Err(e) = haul_proto::validate_entry_path(&entry.path) {
                    tally.event(&Event::file_error(entry.path.clone(), e.to_string()));
                    continue;
                }
                let file = Gated::file(&entry, &served);
                if gated.admit(&file).await {
                    let file = AdmittedFile {
                        entry,
                        served,
                        file,
                    };
                    if admitted.send(file).is_err() {
                        return Ok(());
                    }
                }
                continue;
            }
            take_listed(entry, served, queue, tally, dest, sink.backups, opts);
        }
    }
}

/// `--checksum` for a pull: whether DEST holds a file of `entry`'s size
/// whose BLAKE3 is the node's `digest` (hashed on a blocking thread), and
/// what was then set in place on it (its mtime, mode and attributes, as
/// rsync's `-c` brings them in line).
async fn holds_content(
    dest: &Arc<Destination>,
    entry: &Entry,
    digest: Option<Digest>,
) -> Option<haul_engine::itemize::InPlace> {
    let digest = digest?;
    if dest.existing_file_size(&entry.path) != Some(entry.size) {
        return None;
    }
    let (dest, entry) = (dest.clone(), entry.clone());
    tokio::task::spawn_blocking(move || dest.same_content_fixing(&entry, &digest))
        .await
        .ok()
        .flatten()
}

/// Makes a listed directory or link, or queues a listed file unless it
/// is up to date.
fn take_listed(
    entry: haul_proto::Entry,
    server_path: String,
    queue: &WorkQueue<FetchJob>,
    tally: &Tally,
    dest: &Destination,
    backups: Option<&Backups>,
    opts: &ClientOptions,
) {
    let path = entry.path.clone();
    let result = match &entry.kind {
        EntryKind::Dir | EntryKind::Symlink { .. } | EntryKind::HardLink { .. } => {
            // -i: what changes about it (asked before it is made).
            let change = match entry.kind {
                EntryKind::HardLink { .. } => None,
                _ => dest.making_change(&entry),
            };
            match dest.make_dir_or_link(&entry, backups) {
                Some(made) => made.map(|()| {
                    if let Some(code) = change {
                        tally.event(&Event::Itemized {
                            path: entry.named(),
                            code,
                        });
                    }
                    tally.event(&Event::made(path.clone()));
                }),
                None => Ok(()),
            }
        }
        EntryKind::File => {
            if let Err(e) = haul_proto::validate_entry_path(&entry.path) {
                Err(e.into())
            } else if let Some(fixed) = (!opts.checksum && opts.gate.is_none())
                .then(|| dest.quick_check_fixing(&entry, opts.skip))
                .flatten()
            {
                if let Some(code) = haul_engine::itemize::in_place(&entry, fixed) {
                    tally.event(&Event::Itemized {
                        path: path.clone(),
                        code,
                    });
                }
                tally.event(&Event::up_to_date(path.clone(), entry.size));
                Ok(())
            } else {
                let count = entry.chunk_count();
                let streams = opts.file_streams();
                if streams > 1 && entry.size >= opts.split_min && count >= 2 {
                    let ranges = split_ranges(count, streams);
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
        tally.event(&Event::file_error(path, e.to_string()));
    }
}
