//! `--delete` (mirror) for pushes to a node, pulls from a node and local
//! copies: once every file verified and the source's listing was
//! complete, what DEST holds under the source's top that the source does
//! not have is removed — locally through [`haul_engine::mirror`], on a node
//! by `Request::Prune`.
//!
//! Safety rules: nothing is deleted when anything failed or the transfer
//! stopped (a warning says so); the rest are [`haul_engine::mirror`]'s
//! (beneath held descriptors, never `.haul`, filtered entries kept, DEST
//! neither a symlink nor holding `..`).

use std::collections::HashSet;
use std::path::Path;

use haul_engine::backup::Backups;
use haul_engine::mirror::{deletions, nothing_deleted, over_delete_limit, prune_reported};
use haul_engine::LocalTree;
use haul_proto::{EntryKind, Message, Request};
use haul_run::summary::Tally;
use haul_session::{Event, Observer};

use crate::client::ClientOptions;
use crate::dial::NodePath;
use crate::dry_run::{dest_filtered, list_node};
use crate::NodeError;

/// `haul push --delete`: once the push failed nowhere, what the node holds
/// under DEST/TOP (its read-only listing, filtered like the source) that
/// the source did not send is removed by the node (`Request::Prune`), one
/// `Remove` at a time, each answered.
pub(crate) async fn prune_node(
    remote: &NodePath,
    dest: &str,
    source: &str,
    sent: &HashSet<String>,
    opts: &ClientOptions,
    tally: &Tally,
    stopped: Option<&NodeError>,
) {
    if !nothing_failed(tally, stopped) {
        return;
    }
    let Ok(Some(gone)) = node_deletions(remote, dest, source, sent, opts, tally).await else {
        return;
    };
    if let Some(refused) = gone.over_limit(opts.max_delete) {
        tally.event(&refused);
        return;
    }
    remove_on_node(remote, dest, gone, opts, tally).await;
}

/// What `--delete` would remove on one node.
pub(crate) struct NodeDeletions {
    /// What the node listed (DEST/TOP).
    under: String,
    gone: Vec<haul_proto::Entry>,
}

impl NodeDeletions {
    /// `--max-delete MAX`'s refusal, when more would go.
    pub fn over_limit(&self, max: Option<u64>) -> Option<Event> {
        over_delete_limit(self.gone.len(), max, &self.under)
    }
}

/// The node's listing could not be read whole (`tally` said so): nothing
/// may be deleted.
#[derive(Debug)]
pub(crate) struct Unlisted;

/// What the node holds under DEST/TOP (filtered like the source, backups
/// kept) that the source did not send (`None`: nothing).
pub(crate) async fn node_deletions(
    remote: &NodePath,
    dest: &str,
    source: &str,
    sent: &HashSet<String>,
    opts: &ClientOptions,
    tally: &Tally,
) -> Result<Option<NodeDeletions>, Unlisted> {
    let top = LocalTree::new(source)
        .map(|t| t.top_name().to_owned())
        .unwrap_or_default();
    let under = under_dest(dest, &top);
    let side = match list_node(&remote.dialer, &under, tally).await {
        Ok(side) if side.errors == 0 => side,
        Ok(_) => {
            tally.event(&nothing_deleted("the node's listing was not complete"));
            return Err(Unlisted);
        }
        Err(e) => {
            tally.event(&Event::file_error(
                under,
                format!("--delete cannot list the destination: {e}"),
            ));
            return Err(Unlisted);
        }
    };
    let side = dest_filtered(side, opts, &top);
    let entries = Backups::unprotected(opts.backup.as_ref(), side.entries);
    let gone = deletions(&entries, &sent.iter().map(String::as_str).collect());
    if gone.is_empty() {
        return Ok(None);
    }
    let gone = gone.into_iter().cloned().collect();
    Ok(Some(NodeDeletions { under, gone }))
}

/// Removes `gone` on the node, one `Remove` at a time, each answered.
pub(crate) async fn remove_on_node(
    remote: &NodePath,
    dest: &str,
    gone: NodeDeletions,
    opts: &ClientOptions,
    tally: &Tally,
) {
    let NodeDeletions { under, gone } = gone;
    let request = Request::Prune {
        dest: dest.to_owned(),
        backup: opts.backup.clone(),
    };
    let (mut r, mut w) = match remote.dialer.open(request).await {
        Ok(conn) => conn,
        Err(e) => {
            tally.event(&Event::file_error(under, format!("--delete: {e}")));
            return;
        }
    };
    for entry in gone {
        let size = if entry.kind == EntryKind::File {
            entry.size
        } else {
            0
        };
        let answer = async {
            w.send(&Message::Remove {
                path: entry.path.clone(),
            })
            .await?;
            r.recv().await
        }
        .await;
        match answer {
            Ok(Message::Done { ok: true, .. }) => tally.event(&Event::Deleted {
                path: entry.path.clone(),
                size,
            }),
            Ok(Message::Done { message, .. }) => tally.event(&Event::file_error(
                entry.path.clone(),
                format!("--delete: {message}"),
            )),
            Ok(other) => {
                tally.event(&Event::file_error(
                    entry.path.clone(),
                    format!("--delete: the node answered {other:?}"),
                ));
                return;
            }
            Err(e) => {
                tally.event(&Event::file_error(
                    entry.path.clone(),
                    format!("--delete: {e}"),
                ));
                return;
            }
        }
    }
    let _ = w.send(&Message::Bye).await;
}

/// What a node lists for a push of a source whose top is `top` into
/// `dest`: the entries named as the push names them.
pub(crate) fn under_dest(dest: &str, top: &str) -> String {
    // The top itself, not its contents (`top/`): a single file pushed to a
    // node's root is listed as that file, named as the push names it.
    match (dest.is_empty(), top.is_empty()) {
        (true, _) => top.to_owned(),
        (false, true) => format!("{dest}/"),
        (false, false) => format!("{dest}/{top}"),
    }
}

/// True when nothing failed and nothing stopped the transfer; else a
/// warning says why nothing will be deleted.
pub fn nothing_failed(tally: &Tally, stopped: Option<&NodeError>) -> bool {
    let failed = tally.failed();
    if stopped.is_none() && failed == 0 {
        return true;
    }
    let why = match stopped {
        Some(e) => format!("the transfer stopped ({e})"),
        None => format!(
            "{failed} entr{} failed",
            if failed == 1 { "y" } else { "ies" }
        ),
    };
    tally.event(&nothing_deleted(&why));
    false
}

/// Refuses a DEST `--delete` must not work in: a symlink (the deletions
/// would land wherever it points), or a path with `..` in it.
pub fn check_dest(dest: &Path) -> Result<(), NodeError> {
    haul_engine::mirror::check_dest(dest).map_err(NodeError::Usage)
}

/// Deletes what DEST holds under `top` (empty: DEST's contents) that is not
/// in `source`, unless anything failed (`stopped`, or failures counted by
/// `tally`): then nothing, and a warning says why.
pub(crate) fn delete_extraneous(
    dest: &Path,
    top: &str,
    source: &HashSet<String>,
    opts: &ClientOptions,
    tally: &Tally,
    stopped: Option<&NodeError>,
) {
    if !nothing_failed(tally, stopped) {
        return;
    }
    prune_reported(
        dest,
        top,
        source,
        opts.filter.as_ref().filter(|_| !opts.delete_excluded),
        opts.max_delete,
        opts.backup.as_ref(),
        tally,
    );
}
