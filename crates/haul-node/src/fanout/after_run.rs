//! What a fan-out does once every send ended: `-H` links on every node
//! that holds everything, and `--delete` on every node.

use std::sync::Arc;
use std::time::Duration;

use haul_run::summary::Tally;
use haul_session::{Event, Observer};

use super::{join_errors, NodeReport, Run};
use crate::dial::{Dialer, NodePath};
use crate::{NodeError, NodeUrl};

impl Run {
    /// `-H`, once every send ended: each node that received everything
    /// makes the dataset's further names links to their first names
    /// (`Request::Link`, as `haul push -H`); a node that lacks something
    /// makes none (one warning says so). No relay ever carries a further
    /// name: the sends leave them out, and this walk of the dataset finds
    /// them again.
    pub(super) async fn link(
        &self,
        dests: &[NodeUrl],
        nodes: &mut [NodeReport],
    ) -> Result<(), NodeError> {
        let links = crate::hard_links::Links::default();
        let walk = match self.dataset.entries() {
            Ok(walk) => walk,
            Err(e) => {
                self.tally.event(&Event::Warning {
                    message: format!(
                        "-H: no hard links made: the source could not be walked again ({e})"
                    ),
                });
                return Ok(());
            }
        };
        let mut unread = 0;
        for item in walk {
            match item {
                Ok(src) => {
                    let haul_proto::EntryKind::HardLink { target } = src.entry.kind else {
                        continue;
                    };
                    // A name whose file failed at the source fails here,
                    // once, and is linked on no node.
                    if self.tally.has_failed(&target) {
                        self.tally.event(&Event::file_error(
                            src.entry.path,
                            format!("not linked: its file {target} failed"),
                        ));
                    } else {
                        links.add(src.entry.path, target);
                    }
                }
                Err(_) => unread += 1,
            }
        }
        if unread > 0 {
            self.tally.event(&Event::Warning {
                message: format!(
                    "-H: {unread} entries could not be read again; any further names among them are not linked"
                ),
            });
        }
        for (i, dialer) in self.dialers.iter().enumerate() {
            // An evicted relay that reported holds what it reported.
            let evicted = nodes[self.index[i]].evicted.is_some() && self.routing.is_done(i);
            if !self.routing.is_alive(i) && !evicted {
                // Lost or silent: it lacks something and makes no links.
                continue;
            }
            let node = &mut nodes[self.index[i]];
            let url = NodePath::new(dialer.clone(), dests[self.index[i]].path.clone());
            let here = Tally::new(self.tally.clone());
            let complete = node.ok && node.failed == 0;
            let dest = url.path.trim_matches('/');
            crate::hard_links::link_on_node(&url, dest, &links, &self.opts, &here, complete).await;
            let failed = here.failed();
            if failed > 0 {
                node.failed += failed;
                node.ok = false;
                node.error = join_errors(
                    &node.error,
                    &format!("{failed} hard links could not be made there"),
                );
            }
        }
        Ok(())
    }

    /// `--delete`, once every node holds everything: each removes what it
    /// holds under DEST that the source does not have (`Request::Prune`,
    /// as `haul push --delete`); nothing anywhere when a node failed. The
    /// admitted nodes and `fed` (each node fed through its channel, by its
    /// index in `dests`).
    pub(super) async fn prune(
        &self,
        dests: &[NodeUrl],
        nodes: &mut [NodeReport],
        fed: &[(usize, Dialer)],
    ) -> Result<(), NodeError> {
        if let Some(n) = nodes.iter().find(|n| !n.ok || n.failed > 0) {
            self.tally.event(&Event::Warning {
                message: format!(
                    "--delete: nothing deleted on any node, because {} did not receive everything; fix that and run again",
                    n.url
                ),
            });
            return Ok(());
        }
        let Some(source) = self.dataset.mirrored() else {
            return Ok(());
        };
        let quiet = Tally::new(Arc::new(haul_run::event::Quiet));
        // Its paths only: no owner or attribute read for them.
        let mut opts = self.opts.clone();
        opts.keep = haul_proto::Keep {
            hard_links: opts.keep.hard_links,
            ..haul_proto::Keep::default()
        };
        let (side, _) = crate::dry_run::walk_local(source, None, &opts, false, quiet.as_ref())?;
        if side.errors > 0 {
            let why = "the source could not be read in full";
            self.tally.event(&haul_engine::mirror::nothing_deleted(why));
            return Ok(());
        }
        let sent = side.entries.into_iter().map(|e| e.path).collect();
        // Every node's deletions first: with --max-delete, the nodes are
        // pruned alike — all, or (one over the limit) none.
        let mut planned = Vec::new();
        let every = self.index.iter().copied().zip(self.dialers.iter().cloned());
        for (i, dialer) in every.chain(fed.iter().cloned()) {
            let url = NodePath::new(dialer, dests[i].path.clone());
            let here = Tally::new(self.tally.clone());
            let dest = url.path.trim_matches('/').to_owned();
            let gone =
                crate::mirror::node_deletions(&url, &dest, source, &sent, &self.opts, &here).await;
            planned.push((i, url, dest, here, gone));
        }
        // A node whose listing could not be read whole (it said why) is
        // pruned nowhere, and so no node is.
        if planned.iter().any(|(_, _, _, _, gone)| gone.is_err()) {
            self.tally.event(&haul_engine::mirror::nothing_deleted(
                "a node's listing could not be read whole, and the nodes are pruned alike",
            ));
            return Ok(());
        }
        let over: Vec<(usize, Event)> = planned
            .iter()
            .filter_map(|(i, _, _, _, gone)| {
                let refused = gone
                    .as_ref()
                    .ok()?
                    .as_ref()?
                    .over_limit(self.opts.max_delete)?;
                Some((*i, refused))
            })
            .collect();
        if !over.is_empty() {
            for (i, refused) in &over {
                self.tally.event(refused);
                nodes[*i].error = join_errors(
                    &nodes[*i].error,
                    "--max-delete: more would have been deleted there than allowed",
                );
            }
            self.tally.event(&Event::Warning {
                message: format!(
                    "--max-delete: nothing deleted on any node ({} would have gone beyond it), so that every node holds the same",
                    over.len()
                ),
            });
            return Ok(());
        }
        for (i, url, dest, here, gone) in planned {
            if let Ok(Some(gone)) = gone {
                crate::mirror::remove_on_node(&url, &dest, gone, &self.opts, &here).await;
            }
            nodes[i].deleted = here.finish(Duration::ZERO, 0).deleted;
        }
        Ok(())
    }
}
