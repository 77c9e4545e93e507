//! A filter over a tree streamed parents first, depth first (a local walk,
//! a node's listing): directories the rules prune take their whole subtree
//! with them, and when the rules pick files, a directory is passed on only
//! once something inside it is taken (rsync's `--prune-empty-dirs`, as
//! remote pulls do).

use std::sync::Arc;
use std::time::SystemTime;

use crate::Filter;

/// What an entry of the tree is, as far as the rules care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// A directory.
    Dir,
    /// A regular file with its size and modification time (`None`: the
    /// source does not tell; the size or date rules let it through).
    File {
        /// Size in bytes.
        size: Option<u64>,
        /// Modification time.
        mtime: Option<SystemTime>,
    },
    /// A symlink: the globs and depth apply, sizes and dates do not.
    Link,
}

/// Applies a [`Filter`] to a depth-first stream of entries of any type
/// `T`, each given with its path relative to the source's top.
#[derive(Debug)]
pub struct TreeFilter<T> {
    filter: Arc<Filter>,
    /// Directories pruned, each an ancestor of the next (depth first).
    pruned: Vec<String>,
    /// Directories entered but not yet passed on (nothing taken in them yet).
    pending: Vec<(String, T)>,
}

impl<T> TreeFilter<T> {
    /// A tree filter applying `filter`.
    pub fn new(filter: Arc<Filter>) -> Self {
        Self {
            filter,
            pruned: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// The entry at `rel` (empty: the top itself, always taken): returns
    /// what to pass on now, in order (directories held back until
    /// something inside them was taken, then the entry).
    pub fn offer(&mut self, rel: &str, node: Node, item: T) -> Vec<T> {
        if rel.is_empty() {
            return vec![item];
        }
        while self.pruned.last().is_some_and(|p| !is_under(rel, p)) {
            self.pruned.pop();
        }
        if !self.pruned.is_empty() {
            return Vec::new();
        }
        while self.pending.last().is_some_and(|(p, _)| !is_under(rel, p)) {
            self.pending.pop();
        }
        let taken = match node {
            Node::Dir => {
                if !self.filter.enter_dir(rel) {
                    self.pruned.push(rel.to_owned());
                    return Vec::new();
                }
                if self.filter.picks_files() {
                    self.pending.push((rel.to_owned(), item));
                    return Vec::new();
                }
                true
            }
            Node::File { size, mtime } => self.filter.take_file(rel, size, mtime).is_some(),
            Node::Link => self.filter.take_file(rel, None, None).is_some(),
        };
        if !taken {
            return Vec::new();
        }
        let mut out: Vec<T> = self.pending.drain(..).map(|(_, t)| t).collect();
        out.push(item);
        out
    }
}

/// Whether `rel` lies strictly beneath directory `dir`.
fn is_under(rel: &str, dir: &str) -> bool {
    rel.strip_prefix(dir)
        .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RuleKind;

    fn run(filter: Filter, tree: &[(&str, Node)]) -> Vec<String> {
        let mut t = TreeFilter::new(Arc::new(filter));
        tree.iter()
            .flat_map(|(rel, node)| t.offer(rel, *node, rel.to_string()))
            .collect()
    }

    const TREE: &[(&str, Node)] = &[
        ("", Node::Dir),
        ("a", Node::Dir),
        (
            "a/x.nc",
            Node::File {
                size: Some(10),
                mtime: Some(SystemTime::UNIX_EPOCH),
            },
        ),
        ("a/tmp", Node::Dir),
        (
            "a/tmp/y.nc",
            Node::File {
                size: Some(10),
                mtime: Some(SystemTime::UNIX_EPOCH),
            },
        ),
        ("b", Node::Dir),
        (
            "b/z.txt",
            Node::File {
                size: Some(1000),
                mtime: Some(SystemTime::UNIX_EPOCH),
            },
        ),
        ("c", Node::Dir),
        ("top.nc", Node::Link),
    ];

    #[test]
    fn excluded_directories_take_their_subtree() {
        let mut f = Filter::default();
        f.add_glob(RuleKind::Exclude, "tmp/").unwrap();
        assert_eq!(
            run(f, TREE),
            ["", "a", "a/x.nc", "b", "b/z.txt", "c", "top.nc"]
        );
    }

    #[test]
    fn picking_files_leaves_out_directories_with_nothing_taken() {
        let mut f = Filter::default();
        f.add_glob(RuleKind::Include, "*.nc").unwrap();
        assert_eq!(
            run(f, TREE),
            ["", "a", "a/x.nc", "a/tmp", "a/tmp/y.nc", "top.nc"]
        );
        let mut f = Filter::default();
        f.min_size = Some(100);
        assert_eq!(run(f, TREE), ["", "b", "b/z.txt", "top.nc"]);
    }

    #[test]
    fn depth() {
        let mut f = Filter::default();
        f.max_depth = Some(0);
        assert_eq!(run(f, TREE), ["", "top.nc"]);
        assert_eq!(run(Filter::default(), TREE).len(), TREE.len());
    }
}
