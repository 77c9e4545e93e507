//! What a send reads: a [`Dataset`] hands out its entries — each with how
//! to read it — afresh for every send of it. A push walks its sources once;
//! a fan-out sends one dataset to several nodes (once per stripe, again to
//! repair a node), and its coordinator takes a dataset, not paths, so
//! entries that come from elsewhere (files a daemon has just delivered)
//! go out through the same fan-out as a walked tree.
//!
//! [`Walk`] is the dataset of local source paths, walked through the
//! filter (`LocalTree`: every file opened beneath held descriptors).

use std::sync::Arc;

use haul_engine::Filter;
use haul_engine::{EntryIter, LocalTree, Source as _};

use crate::NodeError;

/// Entries to send, as many times as asked.
pub trait Dataset: Send + Sync {
    /// Its entries in order (directories before what they hold), afresh.
    fn entries(&self) -> Result<EntryIter, NodeError>;

    /// The top-level names its entries' paths begin with (what a node is
    /// asked to list under DEST for `--checksum`).
    fn tops(&self) -> Result<Vec<String>, NodeError>;

    /// The local directory a `--delete` mirrors: a dataset of exactly one
    /// walked source has one; anything else has nothing to mirror.
    fn mirrored(&self) -> Option<&str>;
}

/// Local source paths, each walked through the filter; `named` renames the
/// top entry (one file pushed to a path that names it).
#[derive(Debug, Clone)]
pub struct Walk {
    sources: Vec<String>,
    named: Option<String>,
    filter: Option<Arc<Filter>>,
}

impl Walk {
    /// The dataset of `sources` (paths as given) through `filter`.
    pub fn new(sources: &[String], filter: Option<Arc<Filter>>) -> Self {
        Self {
            sources: sources.to_vec(),
            named: None,
            filter,
        }
    }

    /// The same, with the top entry of each source named `name`.
    pub fn named(mut self, name: Option<&str>) -> Self {
        self.named = name.map(str::to_owned);
        self
    }

    fn trees(&self) -> Result<Vec<LocalTree>, NodeError> {
        self.sources
            .iter()
            .map(|s| {
                let mut tree = LocalTree::new(s).map_err(|e| NodeError::Usage(e.to_string()))?;
                if let Some(name) = &self.named {
                    tree = tree.named(name);
                }
                if let Some(filter) = &self.filter {
                    tree = tree.with_filter(filter.clone());
                }
                Ok(tree)
            })
            .collect()
    }
}

impl Dataset for Walk {
    fn entries(&self) -> Result<EntryIter, NodeError> {
        let walks: Vec<EntryIter> = self
            .trees()?
            .into_iter()
            .map(|t| Box::new(t).entries())
            .collect();
        Ok(Box::new(walks.into_iter().flatten()))
    }

    fn tops(&self) -> Result<Vec<String>, NodeError> {
        Ok(self
            .trees()?
            .iter()
            .map(|t| {
                self.named
                    .clone()
                    .unwrap_or_else(|| t.top_name().to_owned())
            })
            .collect())
    }

    fn mirrored(&self) -> Option<&str> {
        match self.sources.as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_hands_out_its_entries_afresh_for_every_send() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("set")).unwrap();
        std::fs::write(dir.path().join("set/a"), b"a").unwrap();
        std::fs::write(dir.path().join("set/b"), b"bb").unwrap();
        let src = dir.path().join("set").display().to_string();
        let walk = Walk::new(std::slice::from_ref(&src), None);
        let paths = |d: &dyn Dataset| -> Vec<String> {
            d.entries()
                .unwrap()
                .map(|e| e.unwrap().entry.path)
                .collect()
        };
        let first = paths(&walk);
        assert_eq!(first, ["set", "set/a", "set/b"]);
        // A second send (another stripe, a repair) sees the same entries.
        assert_eq!(paths(&walk), first);
        assert_eq!(walk.tops().unwrap(), ["set"]);
        assert_eq!(walk.mirrored(), Some(src.as_str()));
        let renamed = walk.clone().named(Some("other"));
        assert_eq!(renamed.tops().unwrap(), ["other"]);
        // Two sources mirror nothing.
        let two = Walk::new(&[src.clone(), src], None);
        assert_eq!(two.mirrored(), None);
    }
}
