//! `--ignore-existing`, `--size-only` and `-u` over a fan-out.
//!
//! A node keeps its own version of a file when the rule says so, and a
//! node that keeps its own version cannot relay the origin's to the nodes
//! below it. So the client decides, before anything moves, from every
//! node's listing (size and mtime, as the node's own quick check would
//! read them): a file no node keeps goes through the fan-out as usual (the
//! nodes' default quick check keeps less than any of these rules, so each
//! receives it); a file every node keeps is not sent; a file some nodes
//! keep and others lack is left out of the fan-out and sent by the client
//! itself, once the fan-out ended, to each node that lacks it — as a push
//! of its own (the node applying the rule too), never through the relays,
//! which would carry it on to nodes that keep their own.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use haul_engine::quick_check::{kept, Held};
use haul_proto::{EntryKind, SkipRule};
use haul_run::summary::Tally;

use super::{join_errors, NodeReport, Run};
use crate::checksum::SameContent;
use crate::dataset::{Dataset, Subset};
use crate::dial::{Dialer, NodePath};
use crate::{NodeError, NodeUrl};

/// What every admitted node keeps of the dataset by the rule.
#[derive(Debug, Default)]
pub(super) struct Kept {
    /// Files some node keeps (left out of the fan-out).
    kept_somewhere: HashSet<String>,
    /// By admitted node: the files of `kept_somewhere` it lacks (the
    /// client sends them to it itself).
    lacking: Vec<HashSet<String>>,
}

impl Kept {
    /// Lists every admitted node (`admitted`: its index in `dests` and its
    /// dialer) and reads the dataset once, deciding each file by `rule`.
    pub async fn listed(
        dataset: &dyn Dataset,
        dests: &[NodeUrl],
        admitted: &[(usize, Dialer)],
        rule: SkipRule,
    ) -> Result<Self, NodeError> {
        let quiet = Tally::new(Arc::new(haul_run::event::Quiet));
        let mut held: Vec<HashMap<String, Held>> = Vec::new();
        for (index, dialer) in admitted {
            let url = &dests[*index];
            let dest = url.path.trim_matches('/');
            let mut here = HashMap::new();
            for top in dataset.tops()? {
                let under = crate::mirror::under_dest(dest, &top);
                let unlisted = |why: String| {
                    NodeError::Usage(format!(
                        "{}: cannot list {under} there, and the skip rules decide from every node's listing: {why}",
                        url.addr
                    ))
                };
                let side = crate::dry_run::list_node(dialer, &under, quiet.as_ref())
                    .await
                    .map_err(|e| unlisted(e.to_string()))?;
                if side.errors > 0 {
                    return Err(unlisted(format!(
                        "{} entries could not be read",
                        side.errors
                    )));
                }
                for e in side.entries {
                    if e.kind == EntryKind::File {
                        here.insert(e.path.clone(), Held::listed(&e));
                    }
                }
            }
            held.push(here);
        }
        let mut out = Self {
            lacking: vec![HashSet::new(); held.len()],
            ..Self::default()
        };
        for item in dataset.entries()?.flatten() {
            if item.entry.kind != EntryKind::File {
                continue;
            }
            // Only another version matters: one the node's own quick check
            // finds up to date is safe in the relays (a relay forwards its
            // copy only where it matches the origin's seals).
            let keeps: Vec<bool> = held
                .iter()
                .map(|h| {
                    h.get(&item.entry.path).is_some_and(|&there| {
                        kept(there, &item.entry, rule)
                            && !kept(there, &item.entry, SkipRule::default())
                    })
                })
                .collect();
            if !keeps.iter().any(|&k| k) {
                continue;
            }
            out.kept_somewhere.insert(item.entry.path.clone());
            for (lacking, keeps) in out.lacking.iter_mut().zip(keeps) {
                if !keeps {
                    lacking.insert(item.entry.path.clone());
                }
            }
        }
        Ok(out)
    }

    /// The dataset the fan-out sends: every file no node keeps, and every
    /// other entry.
    pub fn relayed(self: &Arc<Self>, dataset: Arc<dyn Dataset>) -> Arc<dyn Dataset> {
        let kept = self.clone();
        Arc::new(Subset::taking(
            dataset,
            Arc::new(move |entry: &haul_proto::Entry| {
                entry.kind != EntryKind::File || !kept.kept_somewhere.contains(&entry.path)
            }),
        ))
    }

    /// Whether the client sends admitted node `node` files itself once the
    /// fan-out ended.
    pub fn lacks_any(&self, node: usize) -> bool {
        self.lacking.get(node).is_some_and(|l| !l.is_empty())
    }

    /// What the client sends admitted node `node` itself once the fan-out
    /// ended (`None`: nothing).
    pub fn lacked_by(
        self: &Arc<Self>,
        node: usize,
        dataset: Arc<dyn Dataset>,
    ) -> Option<Arc<dyn Dataset>> {
        if self.lacking.get(node).is_none_or(HashSet::is_empty) {
            return None;
        }
        let kept = self.clone();
        Some(Arc::new(Subset::taking(
            dataset,
            // Its files, and the directories above them (the relays made
            // every link and other entry already; -H links come after).
            Arc::new(move |entry: &haul_proto::Entry| match entry.kind {
                EntryKind::File => kept
                    .lacking
                    .get(node)
                    .is_some_and(|l| l.contains(&entry.path)),
                EntryKind::Dir => true,
                _ => false,
            }),
        )))
    }
}

impl Run {
    /// Pushes each node the files some other node keeps and it lacks, once
    /// the fan-out ended: a push of its own to each (all at once), so no
    /// relay carries them on to a node that keeps its own.
    pub(super) async fn fill_in_kept(&mut self, dests: &[NodeUrl], nodes: &mut [NodeReport]) {
        let Some((kept, whole)) = self.kept.clone() else {
            return;
        };
        let pushes = (0..self.targets.len())
            .filter_map(|node| {
                let dataset = kept.lacked_by(node, whole.clone())?;
                Some(NodePush {
                    node,
                    dataset,
                    same: None,
                })
            })
            .collect();
        let observer = Arc::new(NoListing(self.tally.clone()));
        self.push_each(dests, nodes, pushes, observer, "the files other nodes keep")
            .await;
    }

    /// `-c`: offers each node the files every node held with the source's
    /// content whose metadata differs there, once the fan-out ended, so it
    /// brings them in line (see `in_line`). Files it finds in line there
    /// were counted up to date already: only what changes is told.
    pub(super) async fn bring_in_line(&mut self, dests: &[NodeUrl], nodes: &mut [NodeReport]) {
        let Some(every) = self.every_node.clone() else {
            return;
        };
        let pushes = (0..self.targets.len())
            .filter_map(|node| {
                let (dataset, same) = every.for_node(node)?;
                Some(NodePush {
                    node,
                    dataset,
                    same: Some(Arc::new(same)),
                })
            })
            .collect();
        let observer = Arc::new(ChangesOnly(self.tally.clone()));
        self.push_each(dests, nodes, pushes, observer, "the files brought in line")
            .await;
    }

    /// Pushes each admitted node its dataset, all at once, telling `observer`; a node lost for
    /// good is not fed, and what fails marks the node, naming `what`.
    async fn push_each(
        &mut self,
        dests: &[NodeUrl],
        nodes: &mut [NodeReport],
        pushes: Vec<NodePush>,
        observer: Arc<dyn haul_session::Observer>,
        what: &'static str,
    ) {
        let mut sends = tokio::task::JoinSet::new();
        for NodePush {
            node: i,
            dataset,
            same,
        } in pushes
        {
            // As the repair: a node lost for good is not fed.
            let alive = self.routing.is_alive(i) || self.routing.is_done(i);
            if !alive || !nodes[self.index[i]].ok {
                continue;
            }
            let url = &dests[self.index[i]];
            let node = NodePath::new(self.dialers[i].clone(), url.path.clone());
            let dest = url.path.trim_matches('/').to_owned();
            // The run was not cut (or this is not called): these pushes
            // are what the limit let through. Their walks are the run's,
            // not a listing of their own to show.
            let mut opts = self.opts.clone();
            opts.max_transfer = None;
            let node_tally = Tally::new(observer.clone());
            let buffers = self.buffers.clone();
            sends.spawn(async move {
                let along = crate::push::Along {
                    same,
                    ..Default::default()
                };
                let sent = crate::push::push_entries(
                    dataset.as_ref(),
                    &node,
                    dest,
                    &opts,
                    &node_tally,
                    along,
                    buffers,
                )
                .await;
                let err = match sent {
                    Ok(p) => p.err,
                    Err(e) => Some(e),
                };
                (i, node_tally.finish(std::time::Duration::ZERO, 0), err)
            });
        }
        while let Some(joined) = sends.join_next().await {
            let Ok((i, summary, err)) = joined else {
                continue;
            };
            let node = &mut nodes[self.index[i]];
            node.entries_ok += summary.files_ok;
            node.failed += summary.failed;
            // Which, and why (the first few): its own report came before.
            let which: Vec<String> = summary
                .failures
                .iter()
                .take(3)
                .map(|f| format!("{}: {}", f.path, f.error))
                .collect();
            let why = match (&err, summary.failed) {
                (Some(e), _) => Some(format!("{what} could not be sent to it: {e}")),
                (None, 0) => None,
                (None, n) => Some(format!("{n} of {what} failed there ({})", which.join("; "))),
            };
            if let Some(why) = why {
                node.ok = false;
                node.error = join_errors(&node.error, &why);
            }
        }
    }
}

/// A push of its own to one admitted node once the fan-out ended.
struct NodePush {
    /// The admitted node.
    node: usize,
    /// What it gets.
    dataset: Arc<dyn Dataset>,
    /// How `-c` compares there (`None`: as the run's options say).
    same: Option<Arc<SameContent>>,
}

/// An observer that passes on what a push brought in line (`-i`) and its
/// warnings only: the files were counted by the fan-out already, and what
/// fails is the node's (its report says so).
struct ChangesOnly(Arc<Tally>);

impl haul_session::Observer for ChangesOnly {
    fn event(&self, event: &haul_session::Event) {
        use haul_session::Event;
        if matches!(event, Event::Itemized { .. } | Event::Warning { .. }) {
            self.0.event(event);
        }
    }
}

/// An observer that passes on all but a walk's listing events (a fill-in
/// walks the run's own dataset again: its totals are the run's).
struct NoListing(Arc<Tally>);

impl haul_session::Observer for NoListing {
    fn event(&self, event: &haul_session::Event) {
        use haul_session::Event;
        if !matches!(
            event,
            Event::ListingProgress { .. } | Event::ListingDone { .. }
        ) {
            self.0.event(event);
        }
    }
}
