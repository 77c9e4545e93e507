//! What a send reads: a [`Dataset`] hands out its entries — each with how
//! to read it — afresh for every send of it. A push walks its sources once;
//! a fan-out sends one dataset to several nodes (once per stripe, again to
//! repair a node), and its coordinator takes a dataset, not paths, so
//! entries that come from elsewhere (files a daemon has just delivered)
//! go out through the same fan-out as a walked tree.
//!
//! [`Walk`] is the dataset of local source paths, walked through the
//! filter (`LocalTree`: every file opened beneath held descriptors);
//! [`Chosen`] is a list of files beneath one directory (what a daemon owes
//! its sites), each opened beneath the directory's held descriptor;
//! [`Subset`] is the entries of another dataset a predicate takes (a
//! fan-out's files some nodes keep, or bring in line, sent apart).

use std::sync::Arc;

use std::collections::BTreeSet;
use std::path::PathBuf;

use haul_engine::Filter;
use haul_engine::{EntryIter, LocalTree, Source as _, SourceEntry};
use haul_root::Root;

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
    keep: haul_proto::Keep,
}

impl Walk {
    /// The dataset of `sources` (paths as given) through `filter`.
    pub fn new(sources: &[String], filter: Option<Arc<Filter>>) -> Self {
        Self {
            sources: sources.to_vec(),
            named: None,
            filter,
            keep: haul_proto::Keep::default(),
        }
    }

    /// The same, each entry carrying what `keep` keeps (owner, group,
    /// xattrs, ACLs).
    pub fn keeping(mut self, keep: haul_proto::Keep) -> Self {
        self.keep = keep;
        self
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
                Ok(tree.keeping(self.keep))
            })
            .collect()
    }
}

impl Dataset for Walk {
    fn entries(&self) -> Result<EntryIter, NodeError> {
        // `-H`: one map of first names for every source (walked in turn),
        // so that names of one file in two sources are joined.
        let names = Arc::new(std::sync::Mutex::new(
            haul_engine::hard_links::FirstNames::default(),
        ));
        let walks: Vec<EntryIter> = self
            .trees()?
            .into_iter()
            .map(|t| Box::new(t.sharing_first_names(names.clone())).entries())
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

/// Chosen files beneath one directory, sent under the same relative paths
/// (each preceded by the directories above it, once): nothing else under
/// the directory is looked at.
#[derive(Debug, Clone)]
pub struct Chosen {
    root: PathBuf,
    files: Vec<String>,
    /// What each entry carries beyond mode and mtime.
    attrs: Option<Arc<haul_engine::attrs::AttrReader>>,
}

impl Chosen {
    /// The dataset of `files` (paths relative to `root`).
    pub fn new(root: PathBuf, mut files: Vec<String>) -> Self {
        files.sort();
        files.dedup();
        Self {
            root,
            files,
            attrs: None,
        }
    }

    /// The same, each entry carrying what `keep` keeps (owner, group,
    /// attributes, ACLs, holes; a chosen file's further names are not
    /// looked for: `-H` is not for chosen files).
    pub fn keeping(mut self, keep: haul_proto::Keep) -> Self {
        self.attrs = keep
            .any()
            .then(|| Arc::new(haul_engine::attrs::AttrReader::new(keep)));
        self
    }
}

impl Dataset for Chosen {
    fn entries(&self) -> Result<EntryIter, NodeError> {
        let root = Root::open(&self.root)
            .map_err(|e| NodeError::Usage(format!("cannot open {}: {e}", self.root.display())))?;
        let mut made: BTreeSet<String> = BTreeSet::new();
        let mut out = Vec::new();
        for file in &self.files {
            let mut dir = String::new();
            let comps: Vec<&str> = file.split('/').collect();
            for comp in comps.iter().take(comps.len().saturating_sub(1)) {
                if !dir.is_empty() {
                    dir.push('/');
                }
                dir.push_str(comp);
                if made.insert(dir.clone()) {
                    out.push(LocalTree::entry_beneath(&root, &dir, self.attrs.as_ref()));
                }
            }
            out.push(LocalTree::entry_beneath(&root, file, self.attrs.as_ref()));
        }
        Ok(Box::new(out.into_iter()))
    }

    fn tops(&self) -> Result<Vec<String>, NodeError> {
        let tops: BTreeSet<String> = self
            .files
            .iter()
            .filter_map(|f| f.split('/').next().map(str::to_owned))
            .collect();
        Ok(tops.into_iter().collect())
    }

    fn mirrored(&self) -> Option<&str> {
        None
    }
}

/// What a predicate over entries takes.
pub(crate) type Takes = Arc<dyn Fn(&haul_proto::Entry) -> bool + Send + Sync>;

/// The entries of a dataset a predicate takes (an entry that could not be
/// read goes on, for its send to fail it once).
pub(crate) struct Subset {
    inner: Arc<dyn Dataset>,
    takes: Takes,
    /// Whether an entry that could not be read goes on (to fail once).
    errors: bool,
}

impl Subset {
    /// The entries of `inner` that `takes` takes, and those it could not
    /// read.
    pub fn taking(inner: Arc<dyn Dataset>, takes: Takes) -> Self {
        Self {
            inner,
            takes,
            errors: true,
        }
    }

    /// Without the entries it could not read (told already).
    pub fn without_errors(self) -> Arc<dyn Dataset> {
        Arc::new(Self {
            errors: false,
            ..self
        })
    }
}

impl Dataset for Subset {
    fn entries(&self) -> Result<EntryIter, NodeError> {
        let (takes, errors) = (self.takes.clone(), self.errors);
        let walk = self.inner.entries()?;
        Ok(Box::new(walk.filter(move |item| match item {
            Ok(SourceEntry { entry, .. }) => takes(entry),
            Err(_) => errors,
        })))
    }

    fn tops(&self) -> Result<Vec<String>, NodeError> {
        self.inner.tops()
    }

    fn mirrored(&self) -> Option<&str> {
        self.inner.mirrored()
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

    #[test]
    fn chosen_files_come_with_the_directories_above_them_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("d/e")).unwrap();
        std::fs::write(dir.path().join("d/e/x"), b"x").unwrap();
        std::fs::write(dir.path().join("d/y"), b"yy").unwrap();
        std::fs::write(dir.path().join("top"), b"t").unwrap();
        std::fs::write(dir.path().join("left-out"), b"no").unwrap();
        let chosen = Chosen::new(
            dir.path().to_path_buf(),
            vec!["d/y".into(), "top".into(), "d/e/x".into()],
        );
        let got: Vec<(String, u64)> = chosen
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.entry.path, e.entry.size)
            })
            .collect();
        let want = [("d", 0), ("d/e", 0), ("d/e/x", 1), ("d/y", 2), ("top", 1)];
        let want: Vec<(String, u64)> = want.iter().map(|(p, s)| ((*p).to_owned(), *s)).collect();
        assert_eq!(got, want);
        assert_eq!(chosen.tops().unwrap(), ["d", "top"]);
        // A file gone since is an error for that file, the others still go.
        std::fs::remove_file(dir.path().join("d/y")).unwrap();
        let errors = chosen.entries().unwrap().filter(Result::is_err).count();
        assert_eq!(errors, 1);
        // A symlink on the way is not followed.
        std::fs::remove_dir_all(dir.path().join("d")).unwrap();
        std::fs::create_dir(dir.path().join("elsewhere")).unwrap();
        std::fs::write(dir.path().join("elsewhere/y"), b"secret").unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), dir.path().join("d")).unwrap();
        let one = Chosen::new(dir.path().to_path_buf(), vec!["d/y".into()]);
        let files: Vec<_> = one
            .entries()
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.entry.path == "d/y")
            .collect();
        assert!(files.is_empty());
    }
}
