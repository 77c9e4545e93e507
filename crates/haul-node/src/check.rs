//! `haul check SRC DST` for local trees (rclone's `check`): both walked
//! through held descriptors with the transfer's filter, every file present
//! on both sides compared by BLAKE3 (sizes first: a different size needs no
//! hashing), nothing copied or written. Reports what differs, what is only
//! on one side, and what could not be read.

use std::collections::BTreeMap;

use haul_engine::source::open_local;
use haul_engine::{LocalTree, Source as _, SourceEntry};
use haul_proto::EntryKind;
use serde::Serialize;

use crate::client::ClientOptions;
use crate::NodeError;

/// What `haul check` found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckReport {
    /// Files identical on both sides (same BLAKE3).
    pub same: u64,
    /// Bytes of those.
    pub same_bytes: u64,
    /// Files whose content differs.
    pub differ: Vec<String>,
    /// Entries only in SRC (missing from DST).
    pub only_in_src: Vec<String>,
    /// Entries only in DST.
    pub only_in_dst: Vec<String>,
    /// Entries that could not be read (on either side), with the reason.
    pub unreadable: Vec<(String, String)>,
    /// How contents were compared.
    pub method: &'static str,
}

impl CheckReport {
    /// True when the trees match: nothing differs, is missing or unreadable.
    pub fn matches(&self) -> bool {
        self.differ.is_empty()
            && self.only_in_src.is_empty()
            && self.only_in_dst.is_empty()
            && self.unreadable.is_empty()
    }
}

/// Compares local trees `src` and `dst` (each named as a transfer names a
/// source: `dir` and `dir/` alike compare what is inside).
pub fn check_local(src: &str, dst: &str, opts: &ClientOptions) -> Result<CheckReport, NodeError> {
    let mut report = CheckReport {
        method: "blake3",
        ..CheckReport::default()
    };
    let ours = walk(src, opts, &mut report)?;
    let theirs = walk(dst, opts, &mut report)?;
    for (path, a) in &ours {
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
            EntryKind::Dir | EntryKind::Symlink { .. } => {}
            EntryKind::File => {
                if a.entry.size != b.entry.size {
                    report.differ.push(path.clone());
                    continue;
                }
                match (hash(a), hash(b)) {
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
    Ok(report)
}

/// The tree at `path`, by path relative to its top (the top itself left
/// out unless it is a single file).
fn walk(
    path: &str,
    opts: &ClientOptions,
    report: &mut CheckReport,
) -> Result<BTreeMap<String, SourceEntry>, NodeError> {
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
                let rel = if e.entry.path == top {
                    if e.entry.kind == EntryKind::Dir {
                        continue;
                    }
                    top.clone()
                } else {
                    e.entry
                        .path
                        .strip_prefix(top.as_str())
                        .and_then(|r| r.strip_prefix('/'))
                        .unwrap_or(&e.entry.path)
                        .to_owned()
                };
                out.insert(rel, e);
            }
            Err(e) if e.is_skip() => {}
            Err(e) => report.unreadable.push((e.path().to_owned(), e.to_string())),
        }
    }
    Ok(out)
}

/// BLAKE3 of a walked file, read through the directory the walk held.
fn hash(e: &SourceEntry) -> Result<blake3::Hash, String> {
    let file = open_local(e).map_err(|e| e.to_string())?;
    let mut h = blake3::Hasher::new();
    h.update_reader(file)
        .map_err(|err| format!("cannot read {}: {err}", e.local.display()))?;
    Ok(h.finalize())
}
