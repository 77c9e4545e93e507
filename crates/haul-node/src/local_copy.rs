//! Local copies (`haul pull SRC DEST` with a local SRC): the same sender
//! and receiver the network uses, over in-memory connections.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use haul_engine::one_file::{self, OneFile};
use haul_engine::{Destination, LocalTree};
use haul_run::summary::{Summary, Tally};
use haul_session::Observer;
use haul_transport::{memory_pair_paced, Timeouts};

use crate::buffers::ChunkBuffers;
use crate::checksum::SameContent;
use crate::client::{check_dest_dir, fail_leftovers, finish, ClientOptions};
use crate::dataset::Walk;
use crate::drive::receive::{run_receiver, ReceiverCtx};
use crate::drive::send::{run_sender, JobFeed, SenderCtx};
use crate::hard_links::{link_here, Links};
use crate::pool::run_pool;
use crate::push::send_queue;
use crate::NodeError;

/// A local copy of one file to a DEST that names it ([`OneFile`]).
pub(crate) fn copied_as(sources: &[String], dest: &Path) -> Option<OneFile> {
    match sources {
        [source] if one_file::is_one_local_file(source) => OneFile::local(dest),
        _ => None,
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
    // In process there is no transport to choose (`auto` would split
    // large files in two for its trial).
    let mut opts = opts.clone();
    if opts.transport == haul_transport::Transport::Auto {
        opts.transport = haul_transport::Transport::Tcp;
    }
    let opts = &opts;
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
    let backups = opts.backups_at(destination.held_root())?;
    destination.replace_files_in_the_way();
    destination.set_attr_policy(haul_engine::attrs::AttrPolicy::here(opts.keep));
    let same = if opts.checksum {
        destination.receive_everything_offered();
        Some(Arc::new(SameContent::At(destination.clone())))
    } else {
        None
    };
    let walk = Walk::new(sources, opts.filter.clone())
        .named(named)
        .keeping(opts.keep);
    let links = Arc::new(Links::default());
    let queue = send_queue(
        &walk,
        opts,
        &tally,
        None,
        seen.clone(),
        same,
        Some(links.clone()),
    )?;
    opts.limit(&queue, &tally);
    destination.apply_dir_metadata_at_end();
    let sctx = SenderCtx::for_client(opts, &tally, ChunkBuffers::new(opts.chunk_memory));
    // Its own chunk buffers: a sender holding buffers while it waits for
    // this receiver must never leave it without one.
    let quiet = Arc::new(haul_run::event::Quiet);
    let rctx =
        ReceiverCtx::for_client(opts, quiet, destination.clone()).keeping_backups(backups.clone());
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
    let root = destination.held_root();
    let complete = err.is_none() && !queue.was_cut();
    link_here(root, backups.as_deref(), &links, opts, &tally, complete);
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
