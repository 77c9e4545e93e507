//! `haul check SRC DST` for local trees and `haul://` paths (rclone's
//! `check`): local sides walked through held descriptors with the
//! transfer's filter, a node's side listed with sums (the node hashes its
//! own files: nothing is downloaded), every file present on both sides
//! compared by BLAKE3 (sizes first: a different size needs no local
//! hashing), nothing copied or written. Reports what differs, what is only
//! on one side, and what could not be read.

use std::collections::BTreeMap;

use haul_engine::source::hash_local;
use haul_engine::{LocalTree, Source as _, SourceEntry};
use haul_proto::{Digest, Entry, EntryKind, ErrorCode};
use haul_session::Observer;

use crate::client::ClientOptions;
use crate::dial::NodePath;
use crate::dry_run::{filtered, list_node_with};
use crate::listing::list_top;
use crate::NodeError;

use haul_run::check::CheckMethod;
pub use haul_run::check::CheckReport;

/// One side of `haul check`: a local path, or a path on a node.
#[derive(Debug, Clone)]
pub enum CheckSide {
    /// A local file or directory (`dir` and `dir/` alike: what is inside).
    Local(String),
    /// A path on a node, hashed there (`Request::List{sums}`).
    Node(NodePath),
}

/// A side's entry and how its content is known.
enum Content {
    /// A local file: hashed when a comparison needs it.
    Local(SourceEntry),
    /// Hashed by the node when it listed it.
    Known(Digest),
    /// The node could not read it.
    Unreadable(String),
    /// A directory or symlink.
    NotAFile,
}

struct Item {
    entry: Entry,
    content: Content,
}

impl Item {
    fn digest(&self) -> Result<Digest, String> {
        match &self.content {
            Content::Local(e) => hash_local(e)
                .map(|h| *h.as_bytes())
                .map_err(|e| e.to_string()),
            Content::Known(d) => Ok(*d),
            Content::Unreadable(why) => Err(why.clone()),
            Content::NotAFile => Err("not a file".into()),
        }
    }
}

/// Compares local trees `src` and `dst` (each named as a transfer names a
/// source: `dir` and `dir/` alike compare what is inside).
pub fn check_local(src: &str, dst: &str, opts: &ClientOptions) -> Result<CheckReport, NodeError> {
    let mut report = CheckReport::by(CheckMethod::Blake3);
    let ours = walk(src, opts, &mut report)?;
    let theirs = walk(dst, opts, &mut report)?;
    compare(&ours, &theirs, &mut report);
    Ok(report)
}

/// Compares two sides, either of which may be on a node: each node hashes
/// its own files (nothing is downloaded), local files are hashed here.
pub async fn check(
    src: &CheckSide,
    dst: &CheckSide,
    opts: &ClientOptions,
    observer: &dyn Observer,
) -> Result<CheckReport, NodeError> {
    let mut report = CheckReport::by(CheckMethod::Blake3);
    let ours = side(src, opts, observer, &mut report).await?;
    let theirs = side(dst, opts, observer, &mut report).await?;
    // Local files are hashed on a blocking thread.
    tokio::task::spawn_blocking(move || {
        compare(&ours, &theirs, &mut report);
        report
    })
    .await
    .map_err(|e| NodeError::Internal(format!("check stopped: {e}")))
}

async fn side(
    side: &CheckSide,
    opts: &ClientOptions,
    observer: &dyn Observer,
    report: &mut CheckReport,
) -> Result<BTreeMap<String, Item>, NodeError> {
    match side {
        CheckSide::Local(path) => walk(path, opts, report),
        CheckSide::Node(url) => {
            let path = url.path.trim_end_matches('/');
            let top = list_top(path);
            let listed = list_node_with(
                &url.dialer,
                path,
                true,
                haul_proto::Keep::default(),
                observer,
            )
            .await?;
            if listed.entries.is_empty() && listed.errors == 0 {
                return Err(NodeError::Refused {
                    code: ErrorCode::NotFound,
                    message: format!("{path} is not on the node"),
                });
            }
            if listed.errors > 0 {
                report
                    .unreadable
                    .push((url.path.clone(), "the node could not list all of it".into()));
            }
            let listed = filtered(listed, opts, &top);
            let mut unreadable: BTreeMap<String, String> = listed.unreadable.into_iter().collect();
            let mut out = BTreeMap::new();
            for entry in listed.entries {
                let Some(rel) = relative_to(&entry, &top) else {
                    continue;
                };
                let content = match (&entry.kind, listed.sums.get(&entry.path)) {
                    (EntryKind::File, Some(d)) => Content::Known(*d),
                    (EntryKind::File, None) => Content::Unreadable(
                        unreadable
                            .remove(&entry.path)
                            .unwrap_or_else(|| "the node did not hash it".into()),
                    ),
                    _ => Content::NotAFile,
                };
                out.insert(rel, Item { entry, content });
            }
            Ok(out)
        }
    }
}

/// `entry`'s path relative to the top that was named (`None` for the top
/// directory itself).
fn relative_to(entry: &Entry, top: &str) -> Option<String> {
    if top.is_empty() {
        return Some(entry.path.clone());
    }
    if entry.path == top {
        return (entry.kind != EntryKind::Dir).then(|| top.to_owned());
    }
    Some(
        entry
            .path
            .strip_prefix(top)
            .and_then(|r| r.strip_prefix('/'))
            .unwrap_or(&entry.path)
            .to_owned(),
    )
}

fn compare(
    ours: &BTreeMap<String, Item>,
    theirs: &BTreeMap<String, Item>,
    report: &mut CheckReport,
) {
    for (path, a) in ours {
        let Some(b) = theirs.get(path) else {
            report.only_in_src.push(path.clone());
            continue;
        };
        if a.entry.kind != b.entry.kind {
            report.differ.push(path.clone());
            continue;
        }
        match &a.entry.kind {
            // Same kind, and for links the same target.
            EntryKind::Dir | EntryKind::Symlink { .. } | EntryKind::HardLink { .. } => {}
            EntryKind::File => {
                if a.entry.size != b.entry.size {
                    report.differ.push(path.clone());
                    continue;
                }
                match (a.digest(), b.digest()) {
                    (Ok(x), Ok(y)) if x == y => {
                        report.same += 1;
                        report.same_bytes += a.entry.size;
                    }
                    (Ok(_), Ok(_)) => report.differ.push(path.clone()),
                    (Err(e), _) | (_, Err(e)) => report.unreadable.push((path.clone(), e)),
                }
            }
        }
    }
    for path in theirs.keys() {
        if !ours.contains_key(path) {
            report.only_in_dst.push(path.clone());
        }
    }
}

/// The tree at `path`, by path relative to its top (the top itself left
/// out unless it is a single file).
fn walk(
    path: &str,
    opts: &ClientOptions,
    report: &mut CheckReport,
) -> Result<BTreeMap<String, Item>, NodeError> {
    let trimmed = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    let mut tree = LocalTree::new(trimmed).map_err(|e| NodeError::Usage(e.to_string()))?;
    let top = tree.top_name().to_owned();
    if let Some(f) = &opts.filter {
        tree = tree.with_filter(f.clone());
    }
    let mut out = BTreeMap::new();
    for item in Box::new(tree).entries() {
        match item {
            Ok(e) => {
                let Some(rel) = relative_to(&e.entry, &top) else {
                    continue;
                };
                let content = match e.entry.kind {
                    EntryKind::File => Content::Local(e.clone()),
                    _ => Content::NotAFile,
                };
                out.insert(
                    rel,
                    Item {
                        entry: e.entry,
                        content,
                    },
                );
            }
            Err(e) if e.is_skip() => {}
            Err(e) => report.unreadable.push((e.path().to_owned(), e.to_string())),
        }
    }
    Ok(out)
}
