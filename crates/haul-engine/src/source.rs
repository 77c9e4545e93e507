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

use std::fs::{File, Metadata};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use haul_proto::{Entry, EntryKind};

use crate::hash::chunk_size_for;

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
        !matches!(self, Self::Io { .. })
    }

    /// The path the error concerns, as shown in the message.
    pub fn path(&self) -> &str {
        match self {
            Self::Io { path, .. } | Self::UnsafeLink { path, .. } => path,
            Self::BadName(path) | Self::Special(path) => path,
        }
    }
}

/// One entry found by a source: the wire [`Entry`] plus how to read it.
#[derive(Debug, Clone)]
pub struct SourceEntry {
    /// The entry as offered to a receiver.
    pub entry: Entry,
    /// Local path of the data (for local sources).
    pub local: PathBuf,
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

/// A local file or directory tree.
#[derive(Debug, Clone)]
pub struct LocalTree {
    path: PathBuf,
    prefix: String,
    exclude: Option<PathBuf>,
    /// Errors name paths relative to this (a node never shows its root).
    shown_from: Option<PathBuf>,
}

impl LocalTree {
    /// A tree rooted at `path`; a trailing `/` in `path` means "its contents".
    pub fn new(path: &str) -> Result<Self, SourceError> {
        let contents_only = path.ends_with('/') && path.len() > 1;
        let pb = PathBuf::from(path);
        std::fs::symlink_metadata(&pb).map_err(|source| SourceError::Io {
            path: path.to_owned(),
            source,
        })?;
        let prefix = if contents_only {
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
            path: pb,
            prefix,
            exclude: None,
            shown_from: None,
        })
    }

    /// Names paths in errors relative to `base` (`.` for `base` itself).
    pub fn showing_paths_from(mut self, base: PathBuf) -> Self {
        self.shown_from = Some(base);
        self
    }

    fn shown(&self, local: &Path) -> String {
        match self.shown_from.as_deref().map(|b| local.strip_prefix(b)) {
            Some(Ok(rel)) if rel.as_os_str().is_empty() => ".".to_owned(),
            Some(Ok(rel)) => rel.display().to_string(),
            _ => local.display().to_string(),
        }
    }

    /// Leaves out the subtree at `path` (a node's own `.haul` state directory).
    pub fn excluding(mut self, path: PathBuf) -> Self {
        self.exclude = Some(path);
        self
    }

    /// A tree whose entries are named `prefix/...` (empty prefix: bare names).
    pub fn with_prefix(path: PathBuf, prefix: String) -> Self {
        Self {
            path,
            prefix,
            exclude: None,
            shown_from: None,
        }
    }

    fn make(&self, local: &Path, rel: &Path, meta: &Metadata) -> Result<SourceEntry, SourceError> {
        let rel_str = rel
            .to_str()
            .ok_or_else(|| SourceError::BadName(self.shown(local)))?;
        let path = match (self.prefix.is_empty(), rel_str.is_empty()) {
            (true, _) => rel_str.to_owned(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{}", self.prefix, rel_str),
        };
        let ft = meta.file_type();
        let kind = if ft.is_dir() {
            EntryKind::Dir
        } else if ft.is_file() {
            EntryKind::File
        } else if ft.is_symlink() {
            let target = std::fs::read_link(local).map_err(|source| SourceError::Io {
                path: self.shown(local),
                source,
            })?;
            let target = target
                .into_os_string()
                .into_string()
                .map_err(|_| SourceError::BadName(self.shown(local)))?;
            if haul_proto::symlink_target_refused_anywhere(&target) {
                return Err(SourceError::UnsafeLink {
                    path: self.shown(local),
                    target,
                });
            }
            EntryKind::Symlink { target }
        } else {
            return Err(SourceError::Special(self.shown(local)));
        };
        let size = if kind == EntryKind::File {
            meta.len()
        } else {
            0
        };
        Ok(SourceEntry {
            entry: Entry {
                path,
                kind,
                size,
                mode: meta.permissions().mode() & 0o7777,
                mtime_sec: meta.mtime(),
                mtime_nsec: meta.mtime_nsec().clamp(0, 999_999_999) as u32,
                chunk_size: chunk_size_for(size),
            },
            local: local.to_path_buf(),
        })
    }
}

impl Source for LocalTree {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn entries(self: Box<Self>) -> EntryIter {
        let contents_only = self.prefix.is_empty();
        // `link/` walks what the link points to; `link` is the link itself.
        let walker = walkdir::WalkDir::new(&self.path)
            .follow_links(false)
            .follow_root_links(contents_only)
            .sort_by_file_name()
            .into_iter();
        let exclude = self.exclude.clone();
        let walker = walker.filter_entry(move |e| exclude.as_deref() != Some(e.path()));
        Box::new(walker.filter_map(move |item| {
            let item = match item {
                Ok(item) => item,
                Err(e) => {
                    let path = e.path().map(|p| self.shown(p)).unwrap_or_default();
                    let source = e
                        .into_io_error()
                        .unwrap_or_else(|| std::io::Error::other("filesystem loop"));
                    return Some(Err(SourceError::Io { path, source }));
                }
            };
            // With "contents only", the top directory itself is not an entry.
            if item.depth() == 0 && contents_only && item.file_type().is_dir() {
                return None;
            }
            let rel = item
                .path()
                .strip_prefix(&self.path)
                .unwrap_or(Path::new(""));
            let rel = if item.depth() == 0 && !item.file_type().is_dir() && contents_only {
                // `file/` is not meaningful; treat as the file under its own name.
                Path::new(item.file_name())
            } else {
                rel
            };
            let meta = match item.metadata() {
                Ok(m) => m,
                Err(e) => {
                    return Some(Err(SourceError::Io {
                        path: self.shown(item.path()),
                        source: e
                            .into_io_error()
                            .unwrap_or_else(|| std::io::Error::other("stat")),
                    }))
                }
            };
            Some(self.make(item.path(), rel, &meta))
        }))
    }
}

/// Opens a local entry's data for reading.
pub fn open_local(entry: &SourceEntry) -> Result<File, SourceError> {
    File::open(&entry.local).map_err(|source| SourceError::Io {
        path: entry.local.display().to_string(),
        source,
    })
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
        assert_eq!(tree.prefix, "dir");
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
