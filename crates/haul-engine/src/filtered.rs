//! The transfer filters ([`haul_filter`]) applied to wire entries: a local
//! tree as it is walked ([`crate::LocalTree::with_filter`]) and a node's
//! listing as a pull reads it (`haul-node`'s client) name their entries
//! the same way, `TOP/...` or bare names for a source given with a trailing
//! `/`, so both go through [`EntryFilter`].

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use std::collections::HashSet;

use haul_filter::{Filter, NamedPaths, Node, TreeFilter};
use haul_proto::{Entry, EntryKind};

/// A filter over the entries of one source, streamed parents first.
#[derive(Debug)]
pub struct EntryFilter<T> {
    tree: TreeFilter<T>,
    /// The wire path of the source's top (empty: its contents have bare names).
    prefix: String,
    /// `--files-from`: the paths it names, and those of them offered so far.
    named: Option<(Arc<NamedPaths>, HashSet<String>)>,
}

impl<T> EntryFilter<T> {
    /// A filter for the entries of a source whose top is named `prefix`
    /// (empty when only its contents travel).
    pub fn new(filter: Arc<Filter>, prefix: String) -> Self {
        let named = filter.only.clone().map(|n| (n, HashSet::new()));
        Self {
            tree: TreeFilter::new(filter),
            prefix,
            named,
        }
    }

    /// `--files-from`: the paths it names that no entry offered had (the
    /// source lacks them), as wire paths, sorted; none without the list.
    /// Meaningful once the whole source was offered.
    pub fn unlisted(&self) -> Vec<String> {
        let Some((named, seen)) = &self.named else {
            return Vec::new();
        };
        named
            .not_found(seen, |_| true)
            .into_iter()
            .map(|p| match self.prefix.is_empty() {
                true => p.to_owned(),
                false => format!("{}/{p}", self.prefix),
            })
            .collect()
    }

    /// What to pass on, in order, now that `entry` came (see
    /// [`TreeFilter::offer`]): the rules see paths relative to the top, and
    /// a top that is a single file by its own name.
    pub fn offer(&mut self, entry: &Entry, item: T) -> Vec<T> {
        let rel = if self.prefix.is_empty() {
            entry.path.as_str()
        } else if entry.path == self.prefix {
            match entry.kind {
                EntryKind::Dir => "",
                _ => entry.path.as_str(),
            }
        } else {
            match entry
                .path
                .strip_prefix(self.prefix.as_str())
                .and_then(|r| r.strip_prefix('/'))
            {
                Some(rel) => rel,
                None => entry.path.as_str(),
            }
        };
        if let Some((named, seen)) = &mut self.named {
            if named.names(rel) {
                seen.insert(rel.to_owned());
            }
        }
        self.tree.offer(rel, node_of(entry), item)
    }
}

/// What the rules see of `entry`.
pub fn node_of(entry: &Entry) -> Node {
    match entry.kind {
        EntryKind::Dir => Node::Dir,
        EntryKind::File | EntryKind::HardLink { .. } => Node::File {
            size: Some(entry.size),
            mtime: Some(mtime_of(entry)),
        },
        EntryKind::Symlink { .. } => Node::Link,
    }
}

/// An entry's modification time.
pub fn mtime_of(entry: &Entry) -> SystemTime {
    let nanos = Duration::from_nanos(u64::from(entry.mtime_nsec));
    if entry.mtime_sec >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(entry.mtime_sec as u64) + nanos
    } else {
        (SystemTime::UNIX_EPOCH - Duration::from_secs(entry.mtime_sec.unsigned_abs())) + nanos
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use haul_filter::RuleKind;

    fn entry(path: &str, kind: EntryKind, size: u64) -> Entry {
        Entry {
            attrs: None,
            path: path.into(),
            kind,
            size,
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            chunk_size: 1 << 22,
        }
    }

    #[test]
    fn paths_are_relative_to_the_top() {
        let mut f = Filter::default();
        f.add_glob(RuleKind::Exclude, "/data").unwrap();
        f.add_glob(RuleKind::Exclude, "/big").unwrap();
        let f = Arc::new(f);
        // `data` (no slash): the top is always taken, `/data` anchors at
        // the top's contents, so `data/data` goes and `data/x/data` stays.
        let mut ef = EntryFilter::new(f.clone(), "data".into());
        let got: Vec<String> = [
            entry("data", EntryKind::Dir, 0),
            entry("data/data", EntryKind::File, 1),
            entry("data/x", EntryKind::Dir, 0),
            entry("data/x/data", EntryKind::File, 1),
        ]
        .iter()
        .flat_map(|e| ef.offer(e, e.path.clone()))
        .collect();
        assert_eq!(got, ["data", "data/x", "data/x/data"]);
        // A single file as the source: judged by its name.
        let mut ef = EntryFilter::new(f, "big".into());
        assert!(ef.offer(&entry("big", EntryKind::File, 9), ()).is_empty());
    }
}
