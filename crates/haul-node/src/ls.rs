//! `haul ls` for `haul://` URLs and local paths: a node's listing
//! (`Request::List`, read-only) or a local walk, through the transfer's
//! filter, with paths relative to what was named (a directory's entries,
//! or a file by its name); without `recursive`, only the first level.

use std::sync::Arc;

use haul_proto::{Entry, EntryKind, ErrorCode};
use haul_session::Observer;

use crate::client::ClientOptions;
use crate::dial::NodePath;
use crate::dry_run::{filtered, list_node, walk_local, Side};
use crate::listing::list_top;
use crate::NodeError;

/// What a listing found: entries (paths relative to what was named) and
/// how many could not be read (reported to the observer).
#[derive(Debug, Default)]
pub struct Listing {
    /// Entries, parents first.
    pub entries: Vec<Entry>,
    /// Entries that could not be read.
    pub errors: u64,
}

/// Lists `remote` (a path on a node).
pub async fn ls_node(
    remote: &NodePath,
    opts: &ClientOptions,
    recursive: bool,
    observer: Arc<dyn Observer>,
) -> Result<Listing, NodeError> {
    let path = remote.path.trim_end_matches('/');
    let top = list_top(path);
    let side = list_node(&remote.dialer, path, observer.as_ref()).await?;
    if side.entries.is_empty() && side.errors == 0 {
        return Err(NodeError::Refused {
            code: ErrorCode::NotFound,
            message: format!("{path} is not on the node"),
        });
    }
    Ok(relative(filtered(side, opts, &top), &top, recursive))
}

/// Lists local `path`.
pub fn ls_local(
    path: &str,
    opts: &ClientOptions,
    recursive: bool,
    observer: Arc<dyn Observer>,
) -> Result<Listing, NodeError> {
    let trimmed = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    let (side, top) = walk_local(trimmed, None, opts, false, observer.as_ref())?;
    Ok(relative(side, &top, recursive))
}

/// `side`'s entries relative to the top: the top directory itself left
/// out, a top that is a file kept under its name.
fn relative(side: Side, top: &str, recursive: bool) -> Listing {
    let mut entries = Vec::new();
    for mut e in side.entries {
        if !top.is_empty() {
            if e.path == top {
                if e.kind == EntryKind::Dir {
                    continue;
                }
            } else if let Some(rel) = e.path.strip_prefix(top).and_then(|r| r.strip_prefix('/')) {
                e.path = rel.to_owned();
            }
        }
        if recursive || !e.path.contains('/') {
            entries.push(e);
        }
    }
    Listing {
        entries,
        errors: side.errors,
    }
}
