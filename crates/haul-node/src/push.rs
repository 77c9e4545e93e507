//! `haul push` to one node: the source walked into send jobs (split
//! across `--streams` when large), one file to a path that names it, and the
//! pool of connections that sends them (`pool::send_all`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use haul_engine::one_file::{self, OneFile};
use haul_engine::{split_ranges, SourceEntry};
use haul_proto::{EntryKind, Request};
use haul_run::summary::{Summary, Tally};
use haul_session::{Event, Observer};

use crate::buffers::ChunkBuffers;
use crate::checksum::{Held, SameContent};
use crate::client::{fail_leftovers, finish, ClientOptions};
use crate::dataset::{Dataset, Walk};
use crate::dial::NodePath;
use crate::drive::send::SenderCtx;
use crate::hard_links::{link_on_node, Links};
use crate::jobs::{RangeGroup, SendJob, Source, WorkQueue};
use crate::pool::open_first_answered;
use crate::pool::send_all;
use crate::walk_count::{Counted, WalkCount};
use crate::NodeError;

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
            content: None,
            entry: src.entry.clone(),
            first,
            end,
            group: Some(group.clone()),
            source: Source::Path(src.local.clone(), src.data.clone()),
        })
        .collect()
}

/// The send jobs of `dataset`'s entries, taken lazily. For a fan-out `depth` hops
/// deep, files use the smaller chunks [`haul_plan::piece_size`] gives (a
/// relay forwards a chunk once it verified it: the chunk is the latency
/// each hop adds); a striped fan-out's send carries one stripe of each entry.
pub(crate) fn send_queue(
    dataset: &dyn Dataset,
    opts: &ClientOptions,
    tally: &Arc<Tally>,
    fanout: Option<FanoutJobs>,
    seen: Option<Arc<Mutex<HashSet<String>>>>,
    same: Option<Arc<SameContent>>,
    links: Option<Arc<Links>>,
) -> Result<Arc<WorkQueue<SendJob>>, NodeError> {
    let walk = dataset.entries()?;
    let observer = tally.clone();
    let (streams, split_min) = (opts.file_streams(), opts.split_min);
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
            if let EntryKind::HardLink { target } = &src.entry.kind {
                // Linked once every file verified (-H); no data is sent.
                match (&links, fanout) {
                    (Some(links), _) => links.add(src.entry.path.clone(), target.clone()),
                    // A fan-out's coordinator links them on every node.
                    (None, Some(_)) => {}
                    (None, None) => observer.event(&Event::file_error(
                        src.entry.path.clone(),
                        "a hard link cannot be sent this way (-H is for push, pull and local copies)",
                    )),
                }
                return Vec::new();
            }
            if let Some(same) = &same {
                if src.entry.kind == EntryKind::File {
                    match same.holds(&src) {
                        Some(Held::InLine(fixed)) => {
                            if let Some(code) = haul_engine::itemize::in_place(&src.entry, fixed) {
                                observer.event(&Event::Itemized {
                                    path: src.entry.path.clone(),
                                    code,
                                });
                            }
                            observer
                                .event(&Event::up_to_date(src.entry.path.clone(), src.entry.size));
                            return Vec::new();
                        }
                        // The node brings it in line itself: offered whole,
                        // with the content it listed (no data unless it
                        // changed there meanwhile).
                        Some(Held::Offer(digest)) if fanout.is_none() => {
                            return vec![SendJob {
                                content: Some(digest),
                                ..crate::drive::local_job(src)
                            }];
                        }
                        Some(Held::Offer(_)) | None => {}
                    }
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
            observer.event(&Event::file_failed(
                e.path().to_owned(),
                e.to_string(),
                e.fail_kind(),
            ));
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
    let walk = Walk::new(sources, opts.filter.clone())
        .named(named.as_deref())
        .keeping(opts.keep);
    let mirror = sources.first().filter(|_| opts.delete && named.is_none());
    let whole = Whole {
        dataset: &walk,
        mirror: mirror.map(String::as_str),
        dest,
        buffers: ChunkBuffers::new(opts.chunk_memory),
    };
    let (workers, err) = push_whole(whole, remote, opts, &tally).await?;
    finish(&tally, started, workers, err)
        .map(|s| crate::client::with_wire(s, [&remote.dialer], opts))
}

/// What [`push_whole`] pushes.
pub(crate) struct Whole<'a> {
    /// The entries.
    pub dataset: &'a dyn Dataset,
    /// `--delete`: the one local directory DEST mirrors.
    pub mirror: Option<&'a str>,
    /// The directory beneath the node's root they go into.
    pub dest: String,
    pub buffers: Arc<ChunkBuffers>,
}

/// Everything a push does with a dataset: `-c`'s listing of the node, the
/// send, `-H`'s links and `--delete`'s deletions once it ended. The
/// connections it ran, and what stopped it.
pub(crate) async fn push_whole(
    whole: Whole<'_>,
    remote: &NodePath,
    opts: &ClientOptions,
    tally: &Arc<Tally>,
) -> Result<(u32, Option<NodeError>), NodeError> {
    let Whole {
        dataset,
        mirror,
        dest,
        buffers,
    } = whole;
    let seen = mirror.map(|_| Arc::new(Mutex::new(HashSet::new())));
    let same = match opts.checksum {
        true => Some(Arc::new(SameContent::Node {
            files: SameContent::listed(remote, &dest, dataset, tally).await?,
            unlisted_kept: opts.keep.owners_or_attributes(),
        })),
        false => None,
    };
    let links = Arc::new(Links::default());
    let dest_dir = dest.clone();
    let along = Along {
        seen: seen.clone(),
        same,
        links: Some(links.clone()),
    };
    let sent = push_entries(dataset, remote, dest, opts, tally, along, buffers).await?;
    let (workers, err) = (sent.workers, sent.err);
    link_on_node(remote, &dest_dir, &links, opts, tally, sent.complete).await;
    if let (Some(seen), Some(source)) = (seen, mirror) {
        let sent = seen.lock().map(|s| s.clone()).unwrap_or_default();
        let dest = &dest_dir;
        crate::mirror::prune_node(remote, dest, source, &sent, opts, tally, err.as_ref()).await;
    }
    Ok((workers, err))
}

/// What [`push_entries`] did.
pub(crate) struct Pushed {
    /// Connections it ran.
    pub workers: u32,
    /// What stopped it, if anything did.
    pub err: Option<NodeError>,
    /// Every entry went (nothing stopped it, `--max-transfer` cut nothing).
    pub complete: bool,
}

/// What a push's send queue does along the way, each when asked.
#[derive(Default)]
pub(crate) struct Along {
    /// `--delete`: notes the paths it sent.
    pub seen: Option<Arc<Mutex<HashSet<String>>>>,
    /// `-c`: leaves out what DEST holds already.
    pub same: Option<Arc<SameContent>>,
    /// `-H`: keeps further names, linked afterwards.
    pub links: Option<Arc<Links>>,
}

/// Pushes `dataset` into `dest` on the node `remote` reaches (a plain
/// `Request::Push`, the node deciding by `opts.skip` what it keeps), over a
/// pool of connections; every entry left over is failed once.
pub(crate) async fn push_entries(
    dataset: &dyn Dataset,
    remote: &NodePath,
    dest: String,
    opts: &ClientOptions,
    tally: &Arc<Tally>,
    Along { seen, same, links }: Along,
    buffers: Arc<ChunkBuffers>,
) -> Result<Pushed, NodeError> {
    let queue = send_queue(dataset, opts, tally, None, seen, same, links)?;
    opts.limit(&queue, tally);
    let request = Request::Push {
        dest,
        checksum: opts.checksum,
        replace_dirs: opts.replaces_dirs(),
        skip: opts.skip,
        backup: opts.backup.clone(),
        // The dialer fills it in from the path (`haul_transport::PathLearning`).
        rate_hint: 0,
    };
    // Fail fast on a wrong address or key before spawning workers (a wrong
    // token: the others wait for the first one's answer, `send_all`).
    let first = open_first_answered(&remote.dialer, opts, request.clone(), tally.as_ref()).await?;
    let ctx = SenderCtx::for_client(opts, tally, buffers);
    let (workers, err) = send_all(
        &queue,
        &remote.dialer,
        request,
        Some(first),
        opts,
        tally,
        ctx,
    )
    .await;
    fail_leftovers(&queue, tally, &err, |j| j.entry.path.clone());
    let complete = err.is_none() && !queue.was_cut();
    Ok(Pushed {
        workers,
        err,
        complete,
    })
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
