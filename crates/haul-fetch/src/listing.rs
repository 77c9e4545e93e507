//! `haul ls URL` for remote sources: the entries under a URL (its own
//! directory's, or with `recursive` the whole tree, depth first in name
//! order), through the same filter as a pull. One session; every wait is
//! bounded by the remote's own timeout; a directory that cannot be listed
//! is reported in the result and the walk goes on.

use std::collections::HashSet;
use std::sync::Arc;

use haul_filter::{Filter, Node, TreeFilter};
use haul_remote::{EntryKind, Remote, RemoteEntry, RemoteError};
use tokio::sync::mpsc;

/// Most entries one listing holds (a server that never stops listing is
/// cut off with an error, not followed until memory runs out).
pub const MAX_ENTRIES: usize = 10_000_000;

/// One listed entry: its path relative to the URL and what the source told.
#[derive(Debug, Clone)]
pub struct Listed {
    /// Path relative to the URL (the file's name when the URL is a file).
    pub path: String,
    /// What the source said of it.
    pub entry: RemoteEntry,
}

/// A listing, with the directories that could not be listed.
#[derive(Debug, Default)]
pub struct Listing {
    /// Entries in walk order (parents first).
    pub entries: Vec<Listed>,
    /// `(path, error)` for each directory that could not be listed.
    pub errors: Vec<(String, String)>,
    /// `--files-from`: the paths it names that the source has.
    pub named: HashSet<String>,
}

/// Lists `path` on `remote` (a directory's entries; `recursive`: the tree).
pub async fn list_remote(
    remote: Arc<dyn Remote>,
    path: &str,
    recursive: bool,
    filter: Arc<Filter>,
) -> Result<Listing, RemoteError> {
    let mut session = remote.connect().await?;
    let top = session.stat(path).await?;
    let mut out = Listing::default();
    let mut chosen = TreeFilter::new(filter.clone());
    if top.kind != EntryKind::Dir {
        let name = path
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_owned();
        if filter.only.as_ref().is_some_and(|o| o.names(&name)) {
            out.named.insert(name.clone());
        }
        let node = node_of(&top);
        out.entries.extend(
            chosen
                .offer(&name, node, (name.clone(), top))
                .into_iter()
                .map(as_listed),
        );
        return Ok(out);
    }
    let base = format!("{}/", path.trim_end_matches('/'));
    // Directories to list, each offered to the filter when its turn comes
    // (depth first, as the filter wants them).
    let mut stack: Vec<(String, Option<RemoteEntry>)> = vec![(String::new(), None)];
    while let Some((rel, dir_entry)) = stack.pop() {
        if let Some(e) = dir_entry {
            out.entries.extend(
                chosen
                    .offer(&rel, Node::Dir, (rel.clone(), e))
                    .into_iter()
                    .map(as_listed),
            );
            if !recursive {
                continue;
            }
        }
        let (tx, rx) = mpsc::channel(256);
        let dir = format!("{base}{rel}");
        let lister = async {
            let r = session.list(&dir, &tx).await;
            drop(tx);
            r
        };
        let mut children = Vec::new();
        let mut held = out.entries.len();
        let consumer = async {
            // Owned here: returning drops it, which ends the lister's sends.
            let mut rx = rx;
            while let Some(e) = rx.recv().await {
                if held >= MAX_ENTRIES {
                    return;
                }
                held += 1;
                children.push(e);
            }
        };
        let (listed, ()) = tokio::join!(lister, consumer);
        if held >= MAX_ENTRIES {
            return Err(RemoteError::Protocol(format!(
                "the listing passed {MAX_ENTRIES} entries: list a part of it (a deeper URL, --max-depth or filters)"
            )));
        }
        if let Err(e) = listed {
            let shown = if rel.is_empty() { "." } else { rel.as_str() };
            out.errors.push((shown.to_owned(), e.to_string()));
            continue;
        }
        children.sort_by(|a, b| a.name.cmp(&b.name));
        let mut subdirs = Vec::new();
        for e in children {
            if e.name.is_empty() || e.name == "." || e.name == ".." || e.name.contains('/') {
                continue;
            }
            let child = if rel.is_empty() {
                e.name.clone()
            } else {
                format!("{rel}/{}", e.name)
            };
            if filter.only.as_ref().is_some_and(|o| o.names(&child)) {
                out.named.insert(child.clone());
            }
            if e.kind == EntryKind::Dir {
                if filter.enter_dir(&child) {
                    subdirs.push((child, Some(e)));
                }
                continue;
            }
            let node = node_of(&e);
            out.entries.extend(
                chosen
                    .offer(&child, node, (child.clone(), e))
                    .into_iter()
                    .map(as_listed),
            );
        }
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(out)
}

fn as_listed((path, entry): (String, RemoteEntry)) -> Listed {
    Listed { path, entry }
}

fn node_of(e: &RemoteEntry) -> Node {
    match e.kind {
        EntryKind::Dir => Node::Dir,
        EntryKind::File => Node::File {
            size: e.size,
            mtime: e.mtime,
        },
        EntryKind::Other => Node::Link,
    }
}
