//! Where entries come from. [`Source`] is the abstraction every origin
//! implements (local trees today; FTP, SFTP, HTTP and S3 build on it);
//! [`LocalTree`] walks a local path.
//!
//! ## Tree rules (as rsync)
//! - `dir` sends the directory itself: entries are `dir/...`.
//! - `dir/` (trailing slash) sends its contents: entries are `...`.
//! - A file sends just the file, under its own name.
//! - Symlinks are sent as symlinks (never followed), under their own names —
//!   a symlink named as the source too (`link`); `link/` sends the contents
//!   of the directory it points to. The receiver recreates them only when
//!   their target stays inside the destination; a target that never can
//!   (absolute, or `..` after a name) is skipped here with a warning.
//! - Devices, FIFOs and sockets are skipped with a warning.
//! - Names must be UTF-8 (the wire carries UTF-8); others are skipped with a warning.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use haul_proto::{Entry, EntryKind};
use haul_root::walk::Walk;
use haul_root::{Dir, FileIdentity, Meta, ResolveError, Root};

use crate::attrs::AttrReader;
use crate::chunks::LocalFile;
use crate::content::ContentError;
use crate::filtered::EntryFilter;
use crate::hash::chunk_size_for;
use haul_filter::Filter;

/// An error from a source: the entry it concerns is skipped, the rest goes on.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The source path does not exist or cannot be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// Path concerned.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// A name that cannot travel (not UTF-8).
    #[error("skipping {0}: the name is not valid UTF-8")]
    BadName(String),
    /// A device, FIFO or socket.
    #[error("skipping {0}: special files (devices, FIFOs, sockets) are not transferred")]
    Special(String),
    /// A file that changed between the walk and the open, where the version
    /// listed is the one that must be sent (a range of a file split across
    /// connections).
    #[error("{path} changed {when} ({change})")]
    Changed {
        /// The file.
        path: String,
        /// How it changed.
        change: String,
        /// When, and what follows.
        when: &'static str,
    },
    /// A symlink whose target no receiver recreates.
    #[error(
        "skipping symlink {path} -> {target}: its target is absolute or climbs out of the tree"
    )]
    UnsafeLink {
        /// The link.
        path: String,
        /// Where it points.
        target: String,
    },
}

impl SourceError {
    /// True for entries skipped by policy (special files, names that cannot
    /// travel, unsafe symlinks): a warning, not a failure.
    pub fn is_skip(&self) -> bool {
        !matches!(self, Self::Io { .. } | Self::Changed { .. })
    }

    /// What kind of failure it is: a file gone since it was listed has
    /// vanished (rsync's exit 24), one that changed under the read changed.
    pub fn fail_kind(&self) -> haul_run::FailKind {
        match self {
            Self::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                haul_run::FailKind::Vanished
            }
            Self::Changed { .. } => haul_run::FailKind::Changed,
            _ => haul_run::FailKind::Error,
        }
    }

    /// The path the error concerns, as shown in the message.
    pub fn path(&self) -> &str {
        match self {
            Self::Io { path, .. } | Self::UnsafeLink { path, .. } => path,
            Self::Changed { path, .. } => path,
            Self::BadName(path) | Self::Special(path) => path,
        }
    }
}

/// One entry found by a source: the wire [`Entry`] plus how to read it.
#[derive(Debug, Clone)]
pub struct SourceEntry {
    /// The entry as offered to a receiver.
    pub entry: Entry,
    /// Local path of the entry, as errors show it.
    pub local: PathBuf,
    /// Where a regular file's data is opened from.
    pub data: Option<LocalData>,
}

/// A local file as the walk found it: its name in the directory the walk
/// held. Opening it never resolves a path again, so a directory on the way
/// swapped for a symlink since cannot lead the open elsewhere.
#[derive(Debug, Clone)]
pub struct LocalData {
    parent: Arc<Dir>,
    name: OsString,
    /// What the walk saw.
    listed: FileIdentity,
    /// Its hard links as the walk saw them.
    links: u64,
}

impl LocalData {
    /// Opens the data for reading: a symlink put there since fails, and
    /// nothing waits on a FIFO.
    pub fn open(&self) -> std::io::Result<File> {
        self.parent.open_read(&self.name)
    }

    /// The file's identity when the walk listed it.
    pub fn listed(&self) -> &FileIdentity {
        &self.listed
    }

    /// How many names the file had when the walk listed it.
    pub fn links(&self) -> u64 {
        self.links
    }
}

/// A stream of entries from a source.
pub type EntryIter = Box<dyn Iterator<Item = Result<SourceEntry, SourceError>> + Send>;

/// Anything haul can read entries from.
pub trait Source: Send {
    /// Human-readable description (never containing credentials).
    fn describe(&self) -> String;
    /// Every entry, parents before children, in a stable order, streamed.
    fn entries(self: Box<Self>) -> EntryIter;
}

/// What a tree starts with, opened when the tree was made.
#[derive(Debug)]
enum Top {
    /// The operator's path, opened when the tree is walked.
    Path { contents: bool },
    /// A directory, held: walked (after itself, unless only its contents).
    Dir {
        dir: Dir,
        meta: Meta,
        contents: bool,
    },
    /// One entry that is not a directory, in its held parent.
    One {
        meta: Meta,
        link: Option<OsString>,
        data: LocalData,
    },
}

/// A local file or directory tree, walked through directory descriptors
/// ([`haul_root::walk`]): each directory is opened relative to its parent
/// with `O_NOFOLLOW`, so a directory swapped for a symlink during the walk
/// is reported, never walked into.
#[derive(Debug)]
pub struct LocalTree {
    naming: Naming,
    top: Top,
    /// Leaves out `.haul` at the top (a node's own state directory).
    skip_state_dir: bool,
    /// What the walk takes (`--include`, `--exclude`...): excluded
    /// directories are not even entered.
    filter: Option<Arc<Filter>>,
    /// `-H`: later names of a multiply linked file are listed as links to
    /// its first ([`crate::hard_links::FirstNames`]).
    hard_links: bool,
    /// `-H` over several trees of one transfer: the first names they
    /// share (a file's names in two sources are joined, as rsync joins
    /// them); else the walk keeps its own.
    first_names: Option<Arc<std::sync::Mutex<crate::hard_links::FirstNames>>>,
}

/// How a tree's entries are named: on the wire, locally, and in errors.
#[derive(Debug)]
struct Naming {
    /// The top's local path.
    path: PathBuf,
    /// The wire path of the top (empty: its contents have bare names).
    prefix: String,
    /// Errors name paths relative to this (a node never shows its root).
    shown_from: Option<PathBuf>,
    /// Owners, groups, xattrs and ACLs kept (`-o -g -X -A`), if any.
    attrs: Option<Arc<AttrReader>>,
}

fn io_error(path: &Path, source: std::io::Error) -> SourceError {
    SourceError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Whether nothing is at `rel` beneath `root` now (or a directory on the
/// way is gone).
fn gone(root: &Root, rel: &str) -> bool {
    let comps: Vec<&str> = rel.split('/').collect();
    let Some((last, parents)) = comps.split_last() else {
        return false;
    };
    match root.open_dir(parents) {
        Err(haul_root::ResolveError::NotFound(_)) => true,
        Err(_) => false,
        Ok(dir) => matches!(dir.stat(last), Ok(None)),
    }
}

/// Opens the operator's `path` as the top of a tree.
fn open_path_top(path: &Path, contents: bool) -> Result<Top, SourceError> {
    let err = |e| io_error(path, e);
    if !contents {
        if let (Some(parent), Some(name)) = (path.parent(), path.file_name()) {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            let held = Dir::open_path(parent).map_err(err)?;
            return open_top(held, name, path, false);
        }
    }
    // `dir/` (following a symlink given so), or `.`, `..`, `/`.
    let dir = Dir::open_path(path).map_err(err)?;
    let meta = dir.meta().map_err(err)?;
    Ok(Top::Dir {
        dir,
        meta,
        contents,
    })
}

/// What `name` in `parent` is, opened as the top of a tree.
fn open_top(
    parent: Dir,
    name: &std::ffi::OsStr,
    shown: &Path,
    contents: bool,
) -> Result<Top, SourceError> {
    let missing = || io_error(shown, std::io::ErrorKind::NotFound.into());
    let meta = parent
        .stat(name)
        .map_err(|e| io_error(shown, e))?
        .ok_or_else(missing)?;
    if meta.is_dir() {
        let dir = parent.subdir(name).map_err(|e| io_error(shown, e))?;
        return Ok(Top::Dir {
            dir,
            meta,
            contents,
        });
    }
    if contents {
        return Err(io_error(
            shown,
            std::io::Error::from_raw_os_error(libc::ENOTDIR),
        ));
    }
    let link = if meta.is_symlink() {
        Some(parent.read_link(name).map_err(|e| io_error(shown, e))?)
    } else {
        None
    };
    let data = LocalData {
        parent: Arc::new(parent),
        name: name.to_owned(),
        listed: FileIdentity::from(&meta),
        links: meta.nlink,
    };
    Ok(Top::One { meta, link, data })
}

impl LocalTree {
    /// A tree rooted at `path`; a trailing `/` in `path` means "its contents".
    /// `path` itself is the operator's: `link/` walks the directory a symlink
    /// points to, `link` sends the link.
    pub fn new(path: &str) -> Result<Self, SourceError> {
        let contents = path.ends_with('/') && path.len() > 1;
        let pb = PathBuf::from(path);
        // Checked now, opened when walked (a command with thousands of
        // sources holds no descriptor per source meanwhile).
        std::fs::symlink_metadata(&pb).map_err(|e| io_error(&pb, e))?;
        let prefix = if contents {
            String::new()
        } else {
            // The name as given — a symlink keeps its own name — except for
            // `.`, `..` and the like, which name the directory they resolve to.
            let name = pb
                .file_name()
                .map(|n| n.to_owned())
                .or_else(|| {
                    pb.canonicalize()
                        .ok()
                        .and_then(|c| c.file_name().map(|n| n.to_owned()))
                })
                .unwrap_or_default();
            name.into_string()
                .map_err(|n| SourceError::BadName(format!("{n:?}")))?
        };
        Ok(Self {
            naming: Naming {
                path: pb,
                prefix,
                shown_from: None,
                attrs: None,
            },
            top: Top::Path { contents },
            skip_state_dir: false,
            filter: None,
            hard_links: false,
            first_names: None,
        })
    }

    /// The tree at `rel` beneath a held `root` (a serving node's listing):
    /// no symlink is followed on the way or at the end, the root's own `.haul`
    /// is left out, and errors name paths relative to the root. With
    /// `contents` (or an empty `rel`: the root) only what is inside is listed.
    pub fn beneath(root: &Root, rel: &str, contents: bool) -> Result<Self, ResolveError> {
        let comps =
            haul_proto::validate_rel_path(rel).map_err(|e| ResolveError::BadName(e.to_string()))?;
        let path = root.path().join(rel);
        let Some((last, parents)) = comps.split_last() else {
            let dir = root.open_dir(&[])?;
            let meta = dir.meta().map_err(|source| ResolveError::Io {
                op: "stat",
                path: root.show(&[]),
                source,
            })?;
            return Ok(Self {
                naming: Naming {
                    path,
                    prefix: String::new(),
                    shown_from: Some(root.path().to_path_buf()),
                    attrs: None,
                },
                top: Top::Dir {
                    dir,
                    meta,
                    contents: true,
                },
                skip_state_dir: true,
                filter: None,
                hard_links: false,
                first_names: None,
            });
        };
        let parent = root.open_dir(parents)?;
        let shown = root.show(&comps);
        let io = |source| ResolveError::Io {
            op: "stat",
            path: shown.clone(),
            source,
        };
        let meta = parent
            .stat(last)
            .map_err(io)?
            .ok_or_else(|| ResolveError::NotFound(shown.clone()))?;
        if meta.is_symlink() {
            return Err(ResolveError::Symlink(shown));
        }
        if contents && !meta.is_dir() {
            return Err(ResolveError::NotDir(shown));
        }
        let top =
            open_top(parent, std::ffi::OsStr::new(last), &path, contents).map_err(|e| match e {
                SourceError::Io { source, .. } => io(source),
                other => io(std::io::Error::other(other.to_string())),
            })?;
        Ok(Self {
            naming: Naming {
                path,
                prefix: if contents {
                    String::new()
                } else {
                    (*last).to_owned()
                },
                shown_from: Some(root.path().to_path_buf()),
                attrs: None,
            },
            top,
            skip_state_dir: false,
            filter: None,
            hard_links: false,
            first_names: None,
        })
    }

    /// The one entry at `rel` beneath a held `root`, named `rel` — a
    /// directory without what it holds, a file opened as a walk would open
    /// it: what a dataset of chosen files (a daemon's deliveries) sends for
    /// each file and each directory above it, carrying what `attrs` reads
    /// (`-o`, `-g`, `-X`, `-A`, `-S`). No symlink is followed on the way.
    pub fn entry_beneath(
        root: &Root,
        rel: &str,
        attrs: Option<&Arc<AttrReader>>,
    ) -> Result<SourceEntry, SourceError> {
        let path = root.path().join(rel);
        let comps =
            haul_proto::validate_rel_path(rel).map_err(|_| SourceError::BadName(rel.to_owned()))?;
        let Some((last, parents)) = comps.split_last() else {
            return Err(SourceError::BadName(rel.to_owned()));
        };
        let parent = root
            .open_dir(parents)
            .map_err(|e| io_error(&path, std::io::Error::other(e.to_string())))?;
        let naming = Naming {
            path: path.clone(),
            prefix: rel.to_owned(),
            shown_from: Some(root.path().to_path_buf()),
            attrs: attrs.cloned(),
        };
        match open_top(parent, std::ffi::OsStr::new(last), &path, false)? {
            Top::Dir { meta, dir, .. } => naming.make(Path::new(""), &meta, None, None, Some(&dir)),
            Top::One { meta, link, data } => {
                naming.make(Path::new(""), &meta, link, Some(data), None)
            }
            Top::Path { .. } => Err(SourceError::BadName(rel.to_owned())),
        }
    }

    /// What a listing of `base` beneath `root` (its contents with
    /// `contents`, as [`LocalTree::beneath`]) holds of `changed` — paths
    /// beneath the root, from a watch's journal (`haul serve --watch`) —,
    /// with the directories above each up to `base`: each entry as the
    /// whole listing would name it, parents first, each once. A path no
    /// longer there is left out (a listing names what is there).
    pub fn changed_beneath(
        root: Root,
        changed: Vec<String>,
        base: String,
        contents: bool,
        keep: haul_proto::Keep,
    ) -> EntryIter {
        let attrs = keep.any().then(|| Arc::new(AttrReader::new(keep)));
        // (wire name, path beneath the root), in walk order.
        let mut wanted: std::collections::BTreeMap<Vec<String>, String> = Default::default();
        let top = base.rsplit('/').next().unwrap_or_default().to_owned();
        for path in changed {
            let inner = match base.is_empty() {
                true => Some(path.as_str()),
                false if path == base => (!contents).then_some(""),
                false => path.strip_prefix(&format!("{base}/")),
            };
            let Some(inner) = inner else { continue };
            let comps: Vec<&str> = inner.split('/').filter(|c| !c.is_empty()).collect();
            // Each directory on the way, then the path itself.
            let first = usize::from(contents || base.is_empty());
            for n in first..=comps.len() {
                let rel = comps[..n.min(comps.len())].join("/");
                let wire: Vec<String> = match contents || base.is_empty() {
                    true => comps[..n].iter().map(|c| (*c).to_owned()).collect(),
                    false => std::iter::once(top.clone())
                        .chain(comps[..n].iter().map(|c| (*c).to_owned()))
                        .collect(),
                };
                let beneath = match (base.is_empty(), rel.is_empty()) {
                    (true, _) => rel,
                    (false, true) => base.clone(),
                    (false, false) => format!("{base}/{rel}"),
                };
                if !wire.is_empty() {
                    wanted.entry(wire).or_insert(beneath);
                }
            }
        }
        Box::new(wanted.into_iter().filter_map(move |(wire, beneath)| {
            match Self::entry_beneath(&root, &beneath, attrs.as_ref()) {
                Ok(mut src) => {
                    src.entry.path = wire.join("/");
                    Some(Ok(src))
                }
                // Removed since it changed: nothing to list.
                Err(_) if gone(&root, &beneath) => None,
                Err(e) => Some(Err(e)),
            }
        }))
    }

    /// The wire name of the tree's top: its entries are `TOP/...`, or bare
    /// names when empty (a source given as `dir/`).
    pub fn top_name(&self) -> &str {
        &self.naming.prefix
    }

    /// Sends the top under `name` instead of its own (one file whose DEST
    /// names it: [`crate::one_file`]). A tree of contents (`dir/`) has no
    /// top to name and is left as it is.
    pub fn named(mut self, name: &str) -> Self {
        if !self.naming.prefix.is_empty() {
            name.clone_into(&mut self.naming.prefix);
        }
        self
    }

    /// Walks only what `filter` takes (see [`crate::filtered`]); a filter
    /// that takes everything costs nothing.
    pub fn with_filter(mut self, filter: Arc<Filter>) -> Self {
        self.filter = (!filter.takes_everything()).then_some(filter);
        self
    }

    /// Puts in each entry what `keep` keeps beyond mode and mtime (owner,
    /// group, xattrs, ACLs: rsync's `-o -g -X -A`), and lists later names of
    /// linked files as links (`-H`).
    pub fn keeping(mut self, keep: haul_proto::Keep) -> Self {
        self.naming.attrs = keep.any().then(|| Arc::new(AttrReader::new(keep)));
        self.hard_links = keep.hard_links;
        self
    }

    /// Shares `names` with the other trees of the transfer (`-H` across
    /// sources; the trees must be walked one after the other).
    pub fn sharing_first_names(
        mut self,
        names: Arc<std::sync::Mutex<crate::hard_links::FirstNames>>,
    ) -> Self {
        self.first_names = Some(names);
        self
    }

    /// Names paths in errors relative to `base` (`.` for `base` itself).
    pub fn showing_paths_from(mut self, base: PathBuf) -> Self {
        self.naming.shown_from = Some(base);
        self
    }
}

impl Naming {
    fn shown(&self, local: &Path) -> String {
        match self.shown_from.as_deref().map(|b| local.strip_prefix(b)) {
            Some(Ok(rel)) if rel.as_os_str().is_empty() => ".".to_owned(),
            Some(Ok(rel)) => rel.display().to_string(),
            _ => local.display().to_string(),
        }
    }

    /// The entry for what is at `rel` (relative to the top; empty for the top).
    fn make(
        &self,
        rel: &Path,
        meta: &Meta,
        link: Option<OsString>,
        data: Option<LocalData>,
        top: Option<&Dir>,
    ) -> Result<SourceEntry, SourceError> {
        let local = if rel.as_os_str().is_empty() {
            self.path.clone()
        } else {
            self.path.join(rel)
        };
        let attrs = match &self.attrs {
            None => None,
            Some(reader) => reader
                .read(meta, || match (top, &data) {
                    (Some(dir), _) => dir.own_xattrs(),
                    (None, Some(d)) => d.parent.xattrs_of(&d.name),
                    (None, None) => Ok(Vec::new()),
                })
                .map_err(|e| io_error(&local, e))?,
        };
        let rel_str = rel
            .to_str()
            .ok_or_else(|| SourceError::BadName(self.shown(&local)))?;
        let path = match (self.prefix.is_empty(), rel_str.is_empty()) {
            (true, _) => rel_str.to_owned(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{}", self.prefix, rel_str),
        };
        let kind = if meta.is_dir() {
            EntryKind::Dir
        } else if meta.is_file() {
            EntryKind::File
        } else if let Some(target) = link {
            let target = target
                .into_string()
                .map_err(|_| SourceError::BadName(self.shown(&local)))?;
            if haul_proto::symlink_target_refused_anywhere(&target) {
                return Err(SourceError::UnsafeLink {
                    path: self.shown(&local),
                    target,
                });
            }
            EntryKind::Symlink { target }
        } else {
            return Err(SourceError::Special(self.shown(&local)));
        };
        let is_file = kind == EntryKind::File;
        let size = if is_file { meta.size } else { 0 };
        Ok(SourceEntry {
            entry: Entry {
                attrs,
                path,
                kind,
                size,
                mode: meta.permissions(),
                mtime_sec: meta.mtime,
                mtime_nsec: meta.mtime_nsec,
                chunk_size: chunk_size_for(size),
            },
            local,
            data: data.filter(|_| is_file),
        })
    }
}

impl Source for LocalTree {
    fn describe(&self) -> String {
        self.naming.path.display().to_string()
    }

    fn entries(self: Box<Self>) -> EntryIter {
        let LocalTree {
            naming,
            top,
            skip_state_dir,
            filter,
            hard_links,
            first_names,
        } = *self;
        let walked = Self::walk(naming, top, skip_state_dir, filter);
        if !hard_links {
            return walked;
        }
        let names = first_names.unwrap_or_default();
        Box::new(walked.map(move |item| {
            item.map(|src| match names.lock() {
                Ok(mut names) => names.name(src),
                // A walk that panicked holding it: names stay files.
                Err(_) => src,
            })
        }))
    }
}

impl LocalTree {
    /// The entries of a tree's parts, chosen by `filter`.
    fn walk(
        naming: Naming,
        top: Top,
        skip_state_dir: bool,
        filter: Option<Arc<Filter>>,
    ) -> EntryIter {
        let top = match top {
            Top::Path { contents } => match open_path_top(&naming.path, contents) {
                Ok(top) => top,
                Err(e) => return Box::new(std::iter::once(Err(e))),
            },
            top => top,
        };
        let mut chosen = filter
            .clone()
            .map(|f| EntryFilter::new(f, naming.prefix.clone()));
        let choose = move |item: Result<SourceEntry, SourceError>| match (&mut chosen, item) {
            (Some(chosen), Ok(src)) => {
                let entry = src.entry.clone();
                chosen.offer(&entry, src).into_iter().map(Ok).collect()
            }
            (_, item) => vec![item],
        };
        match top {
            Top::Path { .. } => Box::new(std::iter::empty()),
            Top::One { meta, link, data } => Box::new(
                std::iter::once(naming.make(Path::new(""), &meta, link, Some(data), None))
                    .flat_map(choose),
            ),
            Top::Dir {
                dir,
                meta,
                contents,
            } => {
                let first =
                    (!contents).then(|| naming.make(Path::new(""), &meta, None, None, Some(&dir)));
                let mut walk = Walk::new(dir);
                if skip_state_dir || filter.is_some() {
                    walk = walk.pruning(Box::new(move |rel| {
                        let Some(rel) = rel.to_str() else {
                            return false;
                        };
                        (skip_state_dir && haul_proto::is_state_dir(rel))
                            || filter.as_ref().is_some_and(|f| !f.enter_dir(rel))
                    }));
                }
                let rest = walk.map(move |item| match item {
                    Ok(e) => {
                        let data = LocalData {
                            parent: e.parent,
                            name: e.name,
                            listed: FileIdentity::from(&e.meta),
                            links: e.meta.nlink,
                        };
                        naming.make(&e.rel, &e.meta, e.link, Some(data), None)
                    }
                    Err(e) => Err(SourceError::Io {
                        path: naming.shown(&naming.path.join(&e.rel)),
                        source: e.source,
                    }),
                });
                Box::new(first.into_iter().chain(rest).flat_map(choose))
            }
        }
    }
}

/// Opens a local entry's data for reading: the file the walk found, by
/// its name in the directory the walk held (see [`LocalData`]).
pub fn open_local(entry: &SourceEntry) -> Result<File, SourceError> {
    open_data(&entry.local, entry.data.as_ref())
}

/// The BLAKE3 of a local entry's data, read through the directory the walk
/// held (`--checksum`, `haul check`).
///
/// The hash is of one version that existed: a file that changed while it
/// was read fails ([`SourceError::Changed`]).
pub fn hash_local(entry: &SourceEntry) -> Result<blake3::Hash, SourceError> {
    hash_open(entry).map(|(_, hash)| hash)
}

/// [`hash_local`], of the version the walk listed only: `Ok(None)` when
/// the file changed since (or the walk kept no identity of it), so that a
/// claim about its content (`-c`'s content offer) is never made for
/// another version than the one [`open_to_send`] checks.
pub fn hash_listed(entry: &SourceEntry) -> Result<Option<blake3::Hash>, SourceError> {
    let (file, hash) = hash_open(entry)?;
    Ok(is_listed_version(&file, entry.data.as_ref()).then_some(hash))
}

/// Opens `entry`'s file and hashes it whole, as one version.
fn hash_open(entry: &SourceEntry) -> Result<(LocalFile, blake3::Hash), SourceError> {
    let io = |source| SourceError::Io {
        path: entry.local.display().to_string(),
        source,
    };
    let file = LocalFile::open(open_local(entry)?)
        .map_err(io)?
        .shown_as(&entry.local);
    let hash = crate::content::whole_file(&file).map_err(|e| match e {
        ContentError::Io(e) => io(e),
        ContentError::Changed(change) => SourceError::Changed {
            path: entry.local.display().to_string(),
            change,
            when: "while it was being read",
        },
    })?;
    Ok((file, hash))
}

/// Whether `file`, open now, is the version the walk listed (`data`): the
/// same identity, or one whose ctime moved only for a content-hash record
/// set on it since (`-c` hashed it). `false` without `data`.
pub fn is_listed_version(file: &LocalFile, data: Option<&LocalData>) -> bool {
    let Some(d) = data else {
        return false;
    };
    let now = *file.identity();
    d.listed.change_to(&now).is_none()
        || crate::ChunkSource::file(file)
            .is_some_and(|f| crate::hash_cache::explains(f, &d.listed, &now))
}

/// Opens a walked file to send it as `entry`, and fixes which version goes:
/// the one open now, whose identity [`LocalFile`] keeps for the check after
/// the last read. A whole file that changed since the walk is sent as it is
/// now (`entry` takes its size, mtime and chunk size); a `range` of a file
/// split across connections must be the version the walk listed, which
/// every other range also checks against, so a change fails it
/// ([`SourceError::Changed`]).
pub fn open_to_send(
    entry: &mut Entry,
    local: &Path,
    data: Option<&LocalData>,
    range: bool,
) -> Result<LocalFile, SourceError> {
    let file = open_data(local, data)?;
    let file = LocalFile::open(file)
        .map_err(|source| SourceError::Io {
            path: local.display().to_string(),
            source,
        })?
        .shown_as(local);
    let now = *file.identity();
    if range {
        let change = data
            .filter(|_| !is_listed_version(&file, data))
            .and_then(|d| d.listed.change_to(&now));
        if let Some(change) = change {
            return Err(SourceError::Changed {
                path: local.display().to_string(),
                change: change.to_string(),
                when: "since it was listed; it was not delivered",
            });
        }
    } else if (now.size, now.mtime) != (entry.size, (entry.mtime_sec, entry.mtime_nsec)) {
        entry.size = now.size;
        (entry.mtime_sec, entry.mtime_nsec) = now.mtime;
        entry.chunk_size = chunk_size_for(now.size);
    }
    Ok(file)
}

/// Opens the data of the local file shown as `local` (see [`open_local`]).
pub fn open_data(local: &Path, data: Option<&LocalData>) -> Result<File, SourceError> {
    let io = |source| SourceError::Io {
        path: local.display().to_string(),
        source,
    };
    let data = data.ok_or_else(|| {
        io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ))
    })?;
    data.open().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_dir_and_contents() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("data");
        std::fs::create_dir_all(d.join("sub/empty")).unwrap();
        std::fs::write(d.join("a b.txt"), b"hello").unwrap();
        std::fs::write(d.join("sub/ü"), b"").unwrap();
        std::os::unix::fs::symlink("a b.txt", d.join("link")).unwrap();

        let tree = Box::new(LocalTree::new(d.to_str().unwrap()).unwrap());
        let names: Vec<String> = tree.entries().map(|e| e.unwrap().entry.path).collect();
        assert_eq!(
            names,
            [
                "data",
                "data/a b.txt",
                "data/link",
                "data/sub",
                "data/sub/empty",
                "data/sub/ü"
            ]
        );

        let tree = Box::new(LocalTree::new(&format!("{}/", d.display())).unwrap());
        let entries: Vec<Entry> = tree.entries().map(|e| e.unwrap().entry).collect();
        assert_eq!(entries[0].path, "a b.txt");
        assert_eq!(entries[0].size, 5);
        assert_eq!(
            entries[1].kind,
            EntryKind::Symlink {
                target: "a b.txt".into()
            }
        );

        let file = Box::new(LocalTree::new(d.join("a b.txt").to_str().unwrap()).unwrap());
        let names: Vec<String> = file.entries().map(|e| e.unwrap().entry.path).collect();
        assert_eq!(names, ["a b.txt"]);
    }

    /// `-c`'s content claim is of the version walked: a file written to
    /// since its walk (same size) hashes to nothing to claim, and a send
    /// that opens another version than the walk's knows it.
    #[test]
    fn only_the_version_walked_is_hashed_for_a_claim() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("f");
        std::fs::write(&f, b"one").unwrap();
        let walked = walk(f.to_str().unwrap()).pop().unwrap().unwrap();
        assert_eq!(
            hash_listed(&walked).unwrap(),
            Some(blake3::hash(b"one")),
            "still the version walked"
        );
        let file = open_to_send(
            &mut walked.entry.clone(),
            &walked.local,
            walked.data.as_ref(),
            false,
        )
        .unwrap();
        assert!(is_listed_version(&file, walked.data.as_ref()));
        // Rewritten in place, the same size (its ctime moves).
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&f, b"two").unwrap();
        assert_eq!(hash_listed(&walked).unwrap(), None);
        let file = open_to_send(
            &mut walked.entry.clone(),
            &walked.local,
            walked.data.as_ref(),
            false,
        )
        .unwrap();
        assert!(!is_listed_version(&file, walked.data.as_ref()));
    }

    #[test]
    fn missing_path_is_an_error() {
        assert!(LocalTree::new("/definitely/not/here").is_err());
    }

    fn walk(path: &str) -> Vec<Result<SourceEntry, SourceError>> {
        Box::new(LocalTree::new(path).unwrap()).entries().collect()
    }

    #[test]
    fn a_symlink_named_as_the_source_is_sent_as_itself() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::create_dir(d.join("dir")).unwrap();
        std::fs::write(d.join("dir/f"), b"x").unwrap();
        std::fs::write(d.join("target.txt"), b"t").unwrap();
        std::os::unix::fs::symlink("target.txt", d.join("mylink")).unwrap();
        std::os::unix::fs::symlink("dir", d.join("dirlink")).unwrap();

        // A link to a file: the link, under its own name (not the target's).
        let got = walk(d.join("mylink").to_str().unwrap());
        let entries: Vec<Entry> = got.into_iter().map(|e| e.unwrap().entry).collect();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].path, "mylink");
        assert_eq!(
            entries[0].kind,
            EntryKind::Symlink {
                target: "target.txt".into()
            }
        );

        // A link to a directory: the link alone, nothing walked through it.
        let got = walk(d.join("dirlink").to_str().unwrap());
        let entries: Vec<Entry> = got.into_iter().map(|e| e.unwrap().entry).collect();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].path, "dirlink");
        assert_eq!(
            entries[0].kind,
            EntryKind::Symlink {
                target: "dir".into()
            }
        );

        // `dirlink/`: what it points to, as rsync does.
        let got = walk(&format!("{}/", d.join("dirlink").display()));
        let names: Vec<String> = got.into_iter().map(|e| e.unwrap().entry.path).collect();
        assert_eq!(names, ["f"]);

        // `.` still names the directory it stands for.
        let tree = LocalTree::new(&format!("{}/dir/.", d.display())).unwrap();
        assert_eq!(tree.naming.prefix, "dir");
    }

    #[test]
    fn special_files_and_unsafe_links_are_skipped_with_their_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("t");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("ok"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("abs")).unwrap();
        std::os::unix::fs::symlink("ok/../../x", d.join("climb")).unwrap();
        std::os::unix::fs::symlink("../t/ok", d.join("up")).unwrap();
        let fifo = std::ffi::CString::new(d.join("fifo").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);

        let tree = LocalTree::new(d.to_str().unwrap())
            .unwrap()
            .showing_paths_from(tmp.path().to_path_buf());
        let mut sent = Vec::new();
        let mut skipped = Vec::new();
        for item in Box::new(tree).entries() {
            match item {
                Ok(e) => sent.push(e.entry.path),
                Err(e) => {
                    assert!(e.is_skip(), "{e}");
                    skipped.push(e.path().to_owned());
                }
            }
        }
        // A leading `..` may stay inside the destination: the receiver decides.
        assert_eq!(sent, ["t", "t/ok", "t/up"]);
        assert_eq!(skipped, ["t/abs", "t/climb", "t/fifo"]);
    }
}

/// Splits chunks `0..count` into at most `parts` contiguous, near-equal ranges.
pub fn split_ranges(count: u32, parts: u32) -> Vec<(u32, u32)> {
    let parts = parts.clamp(1, count.max(1));
    let base = count / parts;
    let extra = count % parts;
    let mut out = Vec::with_capacity(parts as usize);
    let mut start = 0;
    for p in 0..parts {
        let len = base + u32::from(p < extra);
        out.push((start, start + len));
        start += len;
    }
    out
}

#[cfg(test)]
mod split_tests {
    #[test]
    fn ranges_cover_everything() {
        assert_eq!(super::split_ranges(10, 3), [(0, 4), (4, 7), (7, 10)]);
        assert_eq!(super::split_ranges(2, 4), [(0, 1), (1, 2)]);
        assert_eq!(super::split_ranges(0, 4), [(0, 0)]);
    }
}

#[cfg(test)]
mod swap_tests {
    use super::*;

    #[test]
    fn a_directory_swapped_since_the_walk_never_leads_the_open_elsewhere() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::create_dir_all(d.join("tree/sub")).unwrap();
        std::fs::write(d.join("tree/sub/f"), b"decoy").unwrap();
        std::fs::create_dir_all(d.join("secret")).unwrap();
        std::fs::write(d.join("secret/f"), b"s3cret").unwrap();
        let tree = Box::new(LocalTree::new(d.join("tree").to_str().unwrap()).unwrap());
        let f = tree
            .entries()
            .map(|e| e.unwrap())
            .find(|e| e.entry.path == "tree/sub/f")
            .unwrap();
        // After the walk, `sub` becomes a symlink to a look-alike elsewhere:
        // the open still finds the file the walk found, in its old directory.
        std::fs::rename(d.join("tree/sub"), d.join("tree/sub.old")).unwrap();
        std::os::unix::fs::symlink(d.join("secret"), d.join("tree/sub")).unwrap();
        let mut got = String::new();
        std::io::Read::read_to_string(&mut open_local(&f).unwrap(), &mut got).unwrap();
        assert_eq!(got, "decoy");
    }
}

#[cfg(test)]
mod changed_tests {
    use super::*;

    fn names(root: &Root, changed: &[&str], base: &str, contents: bool) -> Vec<(String, bool)> {
        let changed = changed.iter().map(|p| (*p).to_owned()).collect();
        LocalTree::changed_beneath(
            root.clone(),
            changed,
            base.to_owned(),
            contents,
            haul_proto::Keep::default(),
        )
        .map(|e| {
            let e = e.unwrap().entry;
            (e.path, e.kind == EntryKind::Dir)
        })
        .collect()
    }

    #[test]
    fn changed_paths_are_named_as_the_whole_listing_names_them_parents_first() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::create_dir_all(d.join("data/new/x")).unwrap();
        std::fs::write(d.join("data/new/x/f"), b"f").unwrap();
        std::fs::write(d.join("data/a"), b"a").unwrap();
        std::fs::write(d.join("other"), b"o").unwrap();
        let root = Root::open(d).unwrap();
        let changed = ["data/new/x/f", "data/a", "data/gone", "other", "data/a"];
        // `data/`: its contents, bare names, directories on the way first.
        assert_eq!(
            names(&root, &changed, "data", true),
            [
                ("a".into(), false),
                ("new".into(), true),
                ("new/x".into(), true),
                ("new/x/f".into(), false)
            ]
        );
        // `data`: under its own name, itself first.
        assert_eq!(
            names(&root, &changed, "data", false),
            [
                ("data".into(), true),
                ("data/a".into(), false),
                ("data/new".into(), true),
                ("data/new/x".into(), true),
                ("data/new/x/f".into(), false)
            ]
        );
        // The root: everything, by its path beneath it.
        let all = names(&root, &changed, "", true);
        assert_eq!(all.len(), 6, "{all:?}");
        assert!(all.contains(&("other".into(), false)));
    }
}
