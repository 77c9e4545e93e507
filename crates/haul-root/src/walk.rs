//! A depth-first walk of a held directory, each subdirectory opened
//! relative to its parent's descriptor with `O_NOFOLLOW`: a directory
//! swapped for a symlink during the walk is reported, never entered.
//!
//! Order: names sorted bytewise; a directory comes before its contents (as
//! `walkdir` with `sort_by_file_name`). Symlinks are reported with their
//! targets, never followed.

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::{Dir, Meta, MAX_DEPTH};

/// One entry of a walk.
#[derive(Debug)]
pub struct Entry {
    /// Path relative to the walked directory.
    pub rel: PathBuf,
    /// What it is (not followed).
    pub meta: Meta,
    /// For a symlink, its target.
    pub link: Option<OsString>,
    /// The directory it is in, held: its data is opened from there by
    /// `name`, never by a path that could lead elsewhere since the walk.
    pub parent: Arc<Dir>,
    /// Its name in `parent`.
    pub name: OsString,
}

/// An entry that could not be read; the walk goes on with the next.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", rel.display())]
pub struct Error {
    /// Path relative to the walked directory.
    pub rel: PathBuf,
    /// The system's error.
    pub source: io::Error,
}

struct Frame {
    dir: Arc<Dir>,
    names: std::vec::IntoIter<OsString>,
    rel: PathBuf,
}

/// Decides whether a directory (by its relative path) is left out, contents and all.
pub type Prune = Box<dyn FnMut(&std::path::Path) -> bool + Send>;

/// A walk of a directory's contents (see the module docs).
pub struct Walk {
    stack: Vec<Frame>,
    /// An error to report before going on (a directory that could not be listed).
    pending: Option<Error>,
    prune: Option<Prune>,
}

impl Walk {
    /// Walks the contents of `dir` (not `dir` itself).
    pub fn new(dir: Dir) -> Self {
        let mut walk = Self {
            stack: Vec::new(),
            pending: None,
            prune: None,
        };
        match dir.names() {
            Ok(names) => walk.stack.push(Frame {
                dir: Arc::new(dir),
                names: names.into_iter(),
                rel: PathBuf::new(),
            }),
            Err(source) => {
                walk.pending = Some(Error {
                    rel: PathBuf::new(),
                    source,
                })
            }
        }
        walk
    }

    /// Leaves out every directory for which `prune` is true.
    pub fn pruning(mut self, prune: Prune) -> Self {
        self.prune = Some(prune);
        self
    }

    /// Opens and lists directory `name` of the top frame, to walk it next.
    fn descend(&mut self, name: &OsString, rel: &std::path::Path) {
        let Some(top) = self.stack.last() else {
            return;
        };
        if self.stack.len() >= MAX_DEPTH {
            self.pending = Some(Error {
                rel: rel.to_path_buf(),
                source: io::Error::other(format!("nested deeper than {MAX_DEPTH} directories")),
            });
            return;
        }
        match top.dir.subdir(name).and_then(|d| d.names().map(|n| (d, n))) {
            Ok((dir, names)) => self.stack.push(Frame {
                dir: Arc::new(dir),
                names: names.into_iter(),
                rel: rel.to_path_buf(),
            }),
            Err(source) => {
                self.pending = Some(Error {
                    rel: rel.to_path_buf(),
                    source,
                })
            }
        }
    }
}

impl Iterator for Walk {
    type Item = Result<Entry, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.pending.take() {
            return Some(Err(e));
        }
        loop {
            let top = self.stack.last_mut()?;
            let Some(name) = top.names.next() else {
                self.stack.pop();
                continue;
            };
            let rel = top.rel.join(&name);
            let meta = match top.dir.stat(&name) {
                Ok(Some(m)) => m,
                // Removed since the directory was listed.
                Ok(None) => continue,
                Err(source) => return Some(Err(Error { rel, source })),
            };
            let mut link = None;
            if meta.is_symlink() {
                match top.dir.read_link(&name) {
                    Ok(t) => link = Some(t),
                    Err(source) => return Some(Err(Error { rel, source })),
                }
            }
            let parent = top.dir.clone();
            if meta.is_dir() {
                if self.prune.as_mut().is_some_and(|p| p(&rel)) {
                    continue;
                }
                self.descend(&name, &rel);
            }
            return Some(Ok(Entry {
                rel,
                meta,
                link,
                parent,
                name,
            }));
        }
    }
}
