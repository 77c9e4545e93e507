//! A fan-out node nobody can reach at its port, fed through its ssh channel.
//!
//! A node started over ssh listens on a port of its own. When the client
//! cannot reach that port within [`Channelled::wait`] (a firewall between
//! them lets only ssh through; `--ssh-tunnel` does not try), its admission
//! fails — and a relay, further away still, could not reach it either. So
//! the client feeds it itself through its ssh channel, as `haul push DATA
//! host:/d --ssh-tunnel` would: a push of its own of the whole dataset
//! (`-c`'s listing and `-H`'s links as a push does them), verified by that
//! node as any push is, running while the fan-out goes on among the others.
//! It is never a relay. The output says so once, with the reason.
//!
//! What it receives is its own: its files and progress are shown (the
//! progress total counts its copy), its failures and bytes are in its
//! report, never the run's — the fan-out's own sends, their
//! `--max-transfer` cut and the daemon's run-wide view of failed files are
//! the relayed nodes'. `--max-transfer` cuts its push apart (a limit it
//! reaches is the run's to say); `--delete` prunes it with the others once
//! every push ended, alike or not at all.
//!
//! [`Channelled::wait`]: crate::dial::Channelled::wait

use std::sync::Arc;
use std::time::Instant;

use haul_run::summary::{Failure, Summary, Tally};
use haul_run::{FailKind, Observer};
use haul_session::Event;
use tokio::task::JoinSet;

use super::NodeReport;
use crate::buffers::ChunkBuffers;
use crate::dataset::Dataset;
use crate::dial::{Dialer, NodePath};
use crate::push::{push_whole, Whole};
use crate::{ClientOptions, NodeError, NodeUrl};

/// The nodes fed through their ssh channels, while their pushes run.
pub(super) struct ChannelFed {
    sends: JoinSet<(Summary, Option<NodeError>)>,
    /// Each push's task and its node (its index in the destinations).
    tasks: std::collections::HashMap<tokio::task::Id, usize>,
    /// Each node and its dialer (`--delete` prunes it with the others).
    pub dialers: Vec<(usize, Dialer)>,
}

/// What a node fed through its channel does, as the run shows it: all but
/// its walk's listing (the run's) and its failures (its report's).
struct ItsOwn(Arc<dyn Observer>);

impl Observer for ItsOwn {
    fn event(&self, event: &Event) {
        if !matches!(
            event,
            Event::ListingProgress { .. } | Event::ListingDone { .. } | Event::FileError { .. }
        ) {
            self.0.event(event);
        }
    }
}

impl ChannelFed {
    /// Starts a push to each of `fed` (its index in `dests`, its channel's
    /// dialer, why its port was not taken), telling `observer` why once
    /// and what each does (see [`ItsOwn`]); `started`: the fan-out's start.
    pub fn start(
        fed: Vec<(usize, Dialer, String)>,
        dataset: &Arc<dyn Dataset>,
        dests: &[NodeUrl],
        opts: &ClientOptions,
        observer: &Arc<dyn Observer>,
        started: Instant,
    ) -> Self {
        let mut sends = JoinSet::new();
        let (mut tasks, mut dialers) = (std::collections::HashMap::new(), Vec::new());
        // Pruned with the others once every push ended.
        let opts = ClientOptions {
            delete: false,
            ..opts.clone()
        };
        for (index, dialer, why) in fed {
            observer.event(&Event::Warning {
                message: format!(
                    "{}: {why}; fed through its ssh channel instead (slower, and no relay can reach it)",
                    dialer.name()
                ),
            });
            dialers.push((index, dialer.clone()));
            let remote = NodePath::new(dialer, dests[index].path.clone());
            let (dataset, opts) = (dataset.clone(), opts.clone());
            let node_tally = Tally::new(Arc::new(ItsOwn(observer.clone())));
            let task = sends.spawn(async move {
                let whole = Whole {
                    dataset: dataset.as_ref(),
                    mirror: None,
                    dest: remote.path.trim_matches('/').to_owned(),
                    buffers: ChunkBuffers::new(opts.chunk_memory),
                };
                let (workers, err) = match push_whole(whole, &remote, &opts, &node_tally).await {
                    Ok((workers, err)) => (workers, err),
                    Err(e) => (0, Some(e)),
                };
                // Its seconds count from the fan-out's start, as the others'.
                (node_tally.finish(started.elapsed(), workers), err)
            });
            tasks.insert(task.id(), index);
        }
        Self {
            sends,
            tasks,
            dialers,
        }
    }

    /// Waits for every push; each node's report says how it fared. The
    /// limits they reached (`--max-transfer`): the run's to say.
    pub async fn finish(mut self, nodes: &mut [NodeReport]) -> Vec<Failure> {
        let mut limits = Vec::new();
        while let Some(joined) = self.sends.join_next_with_id().await {
            let (id, outcome) = match joined {
                Ok((id, done)) => (id, Ok(done)),
                Err(e) => (e.id(), Err(e.to_string())),
            };
            let Some(node) = self.tasks.get(&id).and_then(|&i| nodes.get_mut(i)) else {
                continue;
            };
            node.from = "client (ssh channel)".into();
            let (summary, err) = match outcome {
                Ok(done) => done,
                Err(why) => {
                    node.error = format!("its push through its ssh channel ended: {why}");
                    continue;
                }
            };
            node.entries_ok = summary.entries_ok;
            node.bytes = summary.bytes_transferred;
            node.seconds = summary.seconds;
            // A limit reached is no failure of the node (as for the
            // others): the run says which.
            let (limit, failures): (Vec<Failure>, Vec<Failure>) = summary
                .failures
                .into_iter()
                .partition(|f| matches!(f.kind, FailKind::TransferLimit | FailKind::DeleteLimit));
            node.failed = summary.failed.saturating_sub(limit.len() as u64);
            limits.extend(limit);
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
        limits
    }
}
