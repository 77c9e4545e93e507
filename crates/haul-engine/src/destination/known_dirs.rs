//! What a [`super::Destination`] remembers of the directories it resolved,
//! by identity (device and inode, never by name), until its sessions all
//! end: whether it created each, and for the ones it created, which names
//! it has handed out in them.
//!
//! A directory this destination created was empty then. A name in it that
//! the destination has not handed out yet can only be there if another
//! program put it there since — so receiving a file into a new tree needs no
//! look at the name first (no quick check can match, nothing is resumable
//! under it), which saves a system call per file. Linking the verified file
//! in still never replaces anything silently: a name that appeared meanwhile
//! is renamed over, as an out-of-date file would be, and a directory there
//! makes the link fail.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};

use haul_root::Meta;

use crate::dir_cache::DirId;

/// At most this many directories are remembered (then they are checked again).
const MAX_DIRS: usize = 100_000;
/// At most this many names are remembered across created directories; past
/// it, every name is looked at again (memory stays bounded on huge trees).
const MAX_NAMES: usize = 1_000_000;

/// What is known of one directory.
#[derive(Debug)]
struct Known {
    /// This destination created it.
    created: bool,
    /// For one created here, the names handed out in it (`None` past
    /// [`MAX_NAMES`]: every name is looked at again).
    names: Option<HashSet<OsString>>,
    /// How it was when first resolved (for `-i`: what the transfer's own
    /// files, renamed into it meanwhile, did to its mtime is not a change
    /// the source asked for).
    first: Option<Meta>,
}

/// Directories resolved under a destination's root.
#[derive(Debug, Default)]
pub(crate) struct KnownDirs {
    dirs: HashMap<DirId, Known>,
    /// Names held in all the sets.
    names: usize,
    /// Directories `-i` spoke of, by path: said once however many sessions
    /// (stripes, connections) make them.
    said: HashSet<String>,
}

impl KnownDirs {
    #[cfg(test)]
    pub(crate) fn contains(&self, dir: DirId) -> bool {
        self.dirs.contains_key(&dir)
    }

    /// Remembers that `dir` is a real directory, `created` (empty) by this
    /// destination, found as `meta`. The first report of a directory wins:
    /// of two sessions racing to create it, the one that found it existing
    /// must not make it look empty.
    pub(crate) fn insert(&mut self, dir: DirId, created: bool, meta: Option<Meta>) {
        if self.dirs.len() < MAX_DIRS && !self.dirs.contains_key(&dir) {
            let known = Known {
                created,
                names: created.then(HashSet::new),
                first: meta,
            };
            self.dirs.insert(dir, known);
        }
    }

    /// True when `name` in `dir` cannot exist but by another program's hand:
    /// `dir` was created here and `name` was not handed out in it before.
    /// Hands `name` out.
    pub(crate) fn first_use_in_created(&mut self, dir: DirId, name: &OsStr) -> bool {
        let Some(Known {
            names: Some(names), ..
        }) = self.dirs.get_mut(&dir)
        else {
            return false;
        };
        if self.names >= MAX_NAMES {
            for known in self.dirs.values_mut() {
                known.names = None;
            }
            self.names = 0;
            return false;
        }
        let first = names.insert(name.to_os_string());
        self.names += usize::from(first);
        first
    }

    /// Whether `dir` was created by this destination (while its sessions
    /// run), and how it was when first resolved.
    pub(crate) fn seen(&self, dir: DirId) -> Option<(bool, Option<&Meta>)> {
        self.dirs.get(&dir).map(|k| (k.created, k.first.as_ref()))
    }

    /// Whether `-i` speaks of directory `rel` now: the first time only.
    pub(crate) fn say_once(&mut self, rel: &str) -> bool {
        if self.said.len() >= MAX_DIRS {
            return !self.said.contains(rel);
        }
        self.said.insert(rel.to_owned())
    }

    /// Forgets everything (directories may change while no session runs).
    pub(crate) fn clear(&mut self) {
        self.dirs.clear();
        self.names = 0;
        self.said.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_new_once_and_only_in_a_created_directory() {
        let (made, found, other) = ((1, 10), (1, 11), (1, 12));
        let mut k = KnownDirs::default();
        k.insert(made, true, None);
        k.insert(found, false, None);
        // A later report of the same directory does not change it.
        k.insert(found, true, None);
        assert!(k.contains(made) && k.contains(found));
        assert!(k.first_use_in_created(made, OsStr::new("a")));
        assert!(!k.first_use_in_created(made, OsStr::new("a")));
        assert!(k.first_use_in_created(made, OsStr::new("b")));
        assert!(!k.first_use_in_created(found, OsStr::new("c")));
        assert!(!k.first_use_in_created(other, OsStr::new("c")));
        // -i speaks of a directory once.
        assert!(k.say_once("d") && !k.say_once("d"));
        k.clear();
        assert!(k.say_once("d"));
        assert!(!k.contains(made));
        assert!(!k.first_use_in_created(made, OsStr::new("z")));
    }

    #[test]
    fn past_the_name_limit_every_name_is_looked_at() {
        let made = (1, 10);
        let mut k = KnownDirs::default();
        k.insert(made, true, None);
        k.names = MAX_NAMES;
        assert!(!k.first_use_in_created(made, OsStr::new("a")));
        // Every name is looked at again, and the directory is still one
        // created here.
        assert!(!k.first_use_in_created(made, OsStr::new("b")));
        assert!(k.seen(made).is_some_and(|(created, _)| created));
    }
}
