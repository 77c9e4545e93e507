//! `--dry-run`: what a push, pull or local copy would do (send, skip as up
//! to date, make, delete), found by reading both sides — a local walk
//! through held descriptors, a node's listing (`Request::List`, read-only
//! on the node) — and comparing them by rsync's quick check (size and
//! mtime). Nothing is written, created, deleted or locked on either side:
//! no `Destination` is opened, no staging file, no state directory.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use haul_engine::haul_root::Root;
use haul_engine::{EntryFilter, LocalTree, Source as _};
use haul_proto::{Entry, EntryKind, ErrorCode, Message, Request};
use haul_session::summary::DryRunReport;
use haul_session::{DryRunAction, Event, Observer};

use crate::client::{open_session, ClientOptions};
use crate::{NodeError, NodeUrl};

/// One side of a comparison: its entries as the wire names them, and how
/// many could not be read.
#[derive(Debug, Default)]
pub(crate) struct Side {
    pub entries: Vec<Entry>,
    pub errors: u64,
}

/// A dry run of `haul push SOURCES REMOTE`.
pub async fn dry_run_push(
    sources: &[String],
    remote: &NodeUrl,
    opts: &ClientOptions,
    delete: bool,
    observer: Arc<dyn Observer>,
) -> Result<DryRunReport, NodeError> {
    let dest = remote.path.trim_matches('/').to_owned();
    haul_proto::validate_rel_path(&dest).map_err(|e| NodeError::Usage(e.to_string()))?;
    let mut report = DryRunReport::default();
    for s in sources {
        let (source, top) = walk_local(s, opts, observer.as_ref())?;
        let under = match (dest.is_empty(), top.is_empty()) {
            (true, _) => format!("{top}/"),
            (false, true) => format!("{dest}/"),
            (false, false) => format!("{dest}/{top}"),
        };
        let theirs = list_node(&remote.addr, opts, &under, observer.as_ref()).await?;
        let theirs = filtered(theirs, opts, &top);
        compare(source, theirs, delete, observer.as_ref(), &mut report);
    }
    Ok(report)
}

/// A dry run of `haul pull haul://NODE/PATH DEST`.
pub async fn dry_run_pull(
    remote: &NodeUrl,
    dest: &Path,
    opts: &ClientOptions,
    delete: bool,
    observer: Arc<dyn Observer>,
) -> Result<DryRunReport, NodeError> {
    if delete {
        crate::mirror::check_dest(dest)?;
    }
    let top = crate::client::list_top(&remote.path);
    let theirs = list_node(&remote.addr, opts, &remote.path, observer.as_ref()).await?;
    if theirs.entries.is_empty() && theirs.errors == 0 {
        return Err(NodeError::Refused {
            code: ErrorCode::NotFound,
            message: format!("{} is not on the node", remote.path),
        });
    }
    let source = filtered(theirs, opts, &top);
    let ours = filtered(walk_dest(dest, &top, observer.as_ref()), opts, &top);
    let mut report = DryRunReport::default();
    compare(source, ours, delete, observer.as_ref(), &mut report);
    Ok(report)
}

/// A dry run of `haul pull LOCAL... DEST` (a local copy).
pub fn dry_run_local(
    sources: &[String],
    dest: &Path,
    opts: &ClientOptions,
    delete: bool,
    observer: Arc<dyn Observer>,
) -> Result<DryRunReport, NodeError> {
    if delete {
        crate::mirror::check_dest(dest)?;
    }
    let mut report = DryRunReport::default();
    for s in sources {
        let (source, top) = walk_local(s, opts, observer.as_ref())?;
        let ours = filtered(walk_dest(dest, &top, observer.as_ref()), opts, &top);
        compare(source, ours, delete, observer.as_ref(), &mut report);
    }
    Ok(report)
}

/// A local source walked with the transfer's filter, and its top's name.
pub(crate) fn walk_local(
    source: &str,
    opts: &ClientOptions,
    observer: &dyn Observer,
) -> Result<(Side, String), NodeError> {
    let mut tree = LocalTree::new(source).map_err(|e| NodeError::Usage(e.to_string()))?;
    let top = tree.top_name().to_owned();
    if let Some(f) = &opts.filter {
        tree = tree.with_filter(f.clone());
    }
    let mut side = Side::default();
    for item in Box::new(tree).entries() {
        match item {
            Ok(src) => side.entries.push(src.entry),
            Err(e) if e.is_skip() => observer.event(&Event::Warning {
                message: e.to_string(),
            }),
            Err(e) => {
                side.errors += 1;
                observer.event(&Event::FileError {
                    path: e.path().to_owned(),
                    error: e.to_string(),
                });
            }
        }
    }
    Ok((side, top))
}

/// What a local DEST holds where the source's top would go (`top` empty:
/// DEST's own contents, without haul's state directory). A DEST that does
/// not exist holds nothing; nothing is created.
pub(crate) fn walk_dest(dest: &Path, top: &str, observer: &dyn Observer) -> Side {
    let mut side = Side::default();
    let root = match Root::open(dest) {
        Ok(root) => root,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return side,
        Err(e) => {
            side.errors += 1;
            observer.event(&Event::FileError {
                path: dest.display().to_string(),
                error: format!("cannot read the destination: {e}"),
            });
            return side;
        }
    };
    let tree = match LocalTree::beneath(&root, top, top.is_empty()) {
        Ok(tree) => tree,
        Err(haul_engine::haul_root::ResolveError::NotFound(_)) => return side,
        Err(e) => {
            side.errors += 1;
            observer.event(&Event::FileError {
                path: top.to_owned(),
                error: format!("cannot read the destination: {e}"),
            });
            return side;
        }
    };
    for item in Box::new(tree).entries() {
        match item {
            Ok(src) => side.entries.push(src.entry),
            // What the destination holds that cannot travel is not the
            // source's: left alone, and not a failure.
            Err(e) if e.is_skip() => {}
            Err(e) => {
                side.errors += 1;
                observer.event(&Event::FileError {
                    path: e.path().to_owned(),
                    error: e.to_string(),
                });
            }
        }
    }
    side
}

/// A node's listing of `path` (a trailing `/`: its contents); a path the
/// node does not have lists nothing.
pub(crate) async fn list_node(
    addr: &str,
    opts: &ClientOptions,
    path: &str,
    observer: &dyn Observer,
) -> Result<Side, NodeError> {
    let (mut r, mut w) = match open_session(addr, opts, Request::List { path: path.into() }).await {
        Ok(conn) => conn,
        Err(NodeError::Refused {
            code: ErrorCode::NotFound,
            ..
        }) => return Ok(Side::default()),
        Err(e) => return Err(e),
    };
    let mut side = Side::default();
    loop {
        match r.recv().await? {
            Message::Listing { entry } => {
                haul_proto::validate_entry_path(&entry.path)
                    .map_err(|e| NodeError::Protocol(format!("listed {:?}: {e}", entry.path)))?;
                side.entries.push(entry);
            }
            Message::FileError {
                code: ErrorCode::Skipped,
                ..
            } => {}
            Message::FileError { message, .. } => {
                side.errors += 1;
                observer.event(&Event::FileError {
                    path: String::new(),
                    error: format!("node: {message}"),
                });
            }
            Message::Bye => break,
            other => {
                return Err(NodeError::Protocol(format!(
                    "unexpected {other:?} in a listing"
                )))
            }
        }
    }
    let _ = w.send(&Message::Bye).await;
    Ok(side)
}

/// `side` with the transfer's filter applied (the destination's side too:
/// what the rules leave out is never deleted, as rsync protects excluded
/// files).
pub(crate) fn filtered(side: Side, opts: &ClientOptions, top: &str) -> Side {
    let Some(filter) = &opts.filter else {
        return side;
    };
    let mut chosen = EntryFilter::new(filter.clone(), top.to_owned());
    let entries = side
        .entries
        .into_iter()
        .flat_map(|e| chosen.offer(&e.clone(), e))
        .collect();
    Side {
        entries,
        errors: side.errors,
    }
}

/// Compares the source with the destination, reporting each entry that
/// would be sent, skipped, made or (with `delete`) deleted.
fn compare(
    source: Side,
    dest: Side,
    delete: bool,
    observer: &dyn Observer,
    report: &mut DryRunReport,
) {
    report.errors += source.errors + dest.errors;
    let theirs: HashMap<&str, &Entry> = dest.entries.iter().map(|e| (e.path.as_str(), e)).collect();
    let mut say = |entry: &Entry, action: DryRunAction| {
        let size = if entry.kind == EntryKind::File {
            entry.size
        } else {
            0
        };
        report.count(action, size);
        observer.event(&Event::DryRun {
            path: entry.path.clone(),
            size,
            action,
        });
    };
    for e in &source.entries {
        let there = theirs.get(e.path.as_str());
        let action = match (&e.kind, there.map(|t| &t.kind)) {
            (EntryKind::File, Some(EntryKind::File)) if there.is_some_and(|t| same_file(t, e)) => {
                DryRunAction::UpToDate
            }
            (EntryKind::File, _) => DryRunAction::Send,
            (EntryKind::Dir, Some(EntryKind::Dir)) => continue,
            (EntryKind::Symlink { target }, Some(EntryKind::Symlink { target: t }))
                if t == target =>
            {
                continue
            }
            _ => DryRunAction::Make,
        };
        say(e, action);
    }
    if delete {
        let ours: HashSet<&str> = source.entries.iter().map(|e| e.path.as_str()).collect();
        for e in deletions(&dest.entries, &ours) {
            say(e, DryRunAction::Delete);
        }
    }
}

/// The destination's entries the source does not have, deepest first (a
/// directory after what it holds).
pub(crate) fn deletions<'a>(dest: &'a [Entry], source: &HashSet<&str>) -> Vec<&'a Entry> {
    let mut gone: Vec<&Entry> = dest
        .iter()
        .filter(|e| !source.contains(e.path.as_str()))
        .collect();
    gone.sort_by(|a, b| b.path.cmp(&a.path));
    gone
}

/// rsync's quick check between two listed entries.
fn same_file(a: &Entry, b: &Entry) -> bool {
    a.size == b.size && (a.mtime_sec, a.mtime_nsec) == (b.mtime_sec, b.mtime_nsec)
}
