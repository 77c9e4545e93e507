//! A fan-out node nobody can reach at its port, fed through its ssh channel.
//!
//! A node started over ssh listens on a port of its own. When the client
//! cannot reach that port within [`Channelled::wait`] (a firewall between
//! them lets only ssh through; `--ssh-tunnel` does not try), its admission
//! fails — and a relay, further away still, could not reach it either. So
//! the client feeds it itself through its ssh channel, as `haul push DATA
//! host:/d --ssh-tunnel` would: a push of its own of the whole dataset
//! (`-c`'s listing, `-H`'s links, `--delete`'s deletions, each as a push
//! does them), verified by that node as any push is, running while the
//! fan-out goes on among the others. It is never a relay. The output says
//! so once, with the reason.
//!
//! What it sends is what the client sent too: its files and bytes count in
//! the run's (a dataset pushed to two such nodes is counted three times
//! with the fan-out's own copy, and so is the progress total). Its limits
//! are its own push's: `--max-transfer` counts the bytes sent to it apart
//! from the fan-out's, and `--max-delete` its own deletions.

use std::sync::Arc;
use std::time::Instant;

use haul_run::summary::{Failure, Summary, Tally};
use haul_run::{FailKind, Observer};
use tokio::task::JoinSet;

use super::kept::NoListing;
use super::NodeReport;
use crate::buffers::ChunkBuffers;
use crate::dataset::Dataset;
use crate::dial::{Dialer, NodePath};
use crate::push::{push_whole, Whole};
use crate::{ClientOptions, NodeError, NodeUrl};

/// The nodes fed through their ssh channels, while their pushes run.
pub(super) struct ChannelFed {
    sends: JoinSet<(usize, Summary, Option<NodeError>)>,
    /// Their dialers (what packing kept off the wire on them counts too).
    pub dialers: Vec<Dialer>,
    /// The fan-out's start: a node's seconds count from there.
    started: Instant,
}

impl ChannelFed {
    /// Starts a push to each of `fed` (its index in `dests`, its channel's
    /// dialer, why its port was not taken), telling `tally` why once and
    /// all it does but its walk's listing (the run's).
    pub fn start(
        fed: Vec<(usize, Dialer, String)>,
        dataset: &Arc<dyn Dataset>,
        dests: &[NodeUrl],
        opts: &ClientOptions,
        tally: &Arc<Tally>,
        started: Instant,
    ) -> Self {
        let mut sends = JoinSet::new();
        let mut dialers = Vec::new();
        for (index, dialer, why) in fed {
            tally.event(&haul_session::Event::Warning {
                message: format!(
                    "{}: {why}; fed through its ssh channel instead (slower, and no relay can reach it)",
                    dialer.name()
                ),
            });
            dialers.push(dialer.clone());
            let remote = NodePath::new(dialer, dests[index].path.clone());
            let (dataset, opts) = (dataset.clone(), opts.clone());
            let node_tally = Tally::new(Arc::new(NoListing(tally.clone())));
            sends.spawn(async move {
                let whole = Whole {
                    dataset: dataset.as_ref(),
                    mirror: dataset.mirrored().filter(|_| opts.delete),
                    dest: remote.path.trim_matches('/').to_owned(),
                    buffers: ChunkBuffers::new(opts.chunk_memory),
                };
                let (workers, err) = match push_whole(whole, &remote, &opts, &node_tally).await {
                    Ok((workers, err)) => (workers, err),
                    Err(e) => (0, Some(e)),
                };
                (index, node_tally.finish(started.elapsed(), workers), err)
            });
        }
        Self {
            sends,
            dialers,
            started,
        }
    }

    /// Waits for every push; each node's report says how it fared (the
    /// run's tally heard all they did).
    pub async fn finish(mut self, nodes: &mut [NodeReport]) {
        while let Some(joined) = self.sends.join_next().await {
            let Ok((index, summary, err)) = joined else {
                continue;
            };
            let node = &mut nodes[index];
            node.from = "client (ssh channel)".into();
            node.entries_ok = summary.entries_ok;
            node.bytes = summary.bytes_transferred;
            node.deleted = summary.deleted;
            node.seconds = self.started.elapsed().as_secs_f64();
            // A limit reached is no failure of the node (as for the
            // others): the run says which.
            let (limits, failures): (Vec<Failure>, Vec<Failure>) = summary
                .failures
                .into_iter()
                .partition(|f| matches!(f.kind, FailKind::TransferLimit | FailKind::DeleteLimit));
            node.failed = summary.failed.saturating_sub(limits.len() as u64);
            let which: Vec<String> = failures
                .iter()
                .take(3)
                .map(|f| format!("{}: {}", f.path, f.error))
                .collect();
            node.error = match (&err, node.failed) {
                (Some(e), _) => format!("through its ssh channel: {e}"),
                (None, 0) => String::new(),
                (None, n) => format!("{n} failed there ({})", which.join("; ")),
            };
            node.ok = node.error.is_empty();
        }
    }
}
