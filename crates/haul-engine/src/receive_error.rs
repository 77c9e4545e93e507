//! [`ReceiveError`]: why a receiver refused or failed an entry.

use std::io;
use std::path::Path;

use haul_proto::PathError;
use haul_root::ResolveError;

/// Why the receiver refused or failed an entry.
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    /// The peer named a path that breaks the rules.
    #[error(transparent)]
    BadPath(#[from] PathError),
    /// A directory on the way is a symlink: following it could leave the root.
    #[error("{0} is a symlink: haul never follows a symlink inside a path")]
    SymlinkInPath(String),
    /// A file stands where a directory is needed, or the reverse.
    #[error("{0} exists and is not a {1}")]
    WrongType(String, &'static str),
    /// A non-empty directory stands where the source has a file or symlink:
    /// replaced only when the transfer says so (`--force`, `--delete`).
    #[error("{0} is a non-empty directory where the source has a file or symlink: pass --force (or --delete) to replace it")]
    DirInTheWay(String),
    /// The peer's metadata is inconsistent (chunk size, ranges...).
    #[error("invalid offer: {0}")]
    BadOffer(String),
    /// Not every chunk was verified when the commit came.
    #[error("{0}: commit before every chunk was verified")]
    Incomplete(String),
    /// Whole-file hash differs from the sender's.
    #[error("{0}: whole-file BLAKE3 differs from the sender's (did the source change?); partial data discarded")]
    RootMismatch(String),
    /// Another version of the same file is being received right now.
    #[error("{0}: another transfer of a different version of this file is in progress; try again when it ends")]
    Busy(String),
    /// Another process holds the staging file (two pulls into one place).
    #[error("{0}: another haul process is receiving this file into the same place; try again when it ends")]
    Locked(String),
    /// The state directory (or a staging file in it) is not this user's
    /// alone: something planted there could redirect writes.
    #[error("{0} is not this user's alone (another user owns it or may write it): haul keeps its staging there; remove it, or give haul a root of its own")]
    ForeignState(String),
    /// A staging directory given apart from the root is on another
    /// filesystem: a verified file gets its name with `rename(2)`, which
    /// cannot cross filesystems (a copy would not be atomic).
    #[error("staging directory {staging} is on another filesystem than {root}: a verified file is moved into place with rename(2), which cannot cross filesystems; use a staging directory on the destination's filesystem")]
    StagingElsewhere {
        /// The staging directory.
        staging: String,
        /// The destination root.
        root: String,
    },
    /// Disk full: the partial file stays and the transfer resumes later.
    #[error(
        "disk full while writing {0}: free some space and run the same command again to resume"
    )]
    DiskFull(String),
    /// The receiver may not make or replace entries in a directory (its
    /// permissions, an immutable attribute, a read-only filesystem): every
    /// entry beneath it fails alike, so the text names the directory only.
    #[error("cannot write in {dir}: {source}; give the user haul runs as write permission there, or choose another destination")]
    NotWritable {
        /// The directory.
        dir: String,
        /// Underlying error (`EACCES`, `EPERM`, `EROFS`).
        source: io::Error,
    },
    /// Any other I/O error.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// Path concerned.
        path: String,
        /// Underlying error.
        source: io::Error,
    },
}

/// Operations that make, rename or remove an entry in its directory: refused
/// for want of permission, the directory is at fault, not the entry.
const WRITES_IN_DIR: &[&str] = &[
    "create",
    "create directory",
    "rename",
    "link",
    "symlink",
    "replace",
    "remove",
];

impl ReceiveError {
    pub(crate) fn io(op: &'static str, path: &Path, source: io::Error) -> Self {
        Self::io_at(op, path.display().to_string(), source)
    }

    pub(crate) fn io_at(op: &'static str, path: String, source: io::Error) -> Self {
        let errno = source.raw_os_error();
        if errno == Some(libc::ENOSPC) {
            return Self::DiskFull(path);
        }
        let denied = matches!(errno, Some(libc::EACCES | libc::EPERM | libc::EROFS));
        if denied && WRITES_IN_DIR.contains(&op) {
            let dir = match Path::new(&path).parent() {
                Some(d) if !d.as_os_str().is_empty() => d.display().to_string(),
                _ => ".".to_owned(),
            };
            return Self::NotWritable { dir, source };
        }
        Self::Io { op, path, source }
    }
}

impl From<ResolveError> for ReceiveError {
    fn from(e: ResolveError) -> Self {
        match e {
            ResolveError::Symlink(p) => Self::SymlinkInPath(p),
            ResolveError::NotDir(p) => Self::WrongType(p, "directory"),
            ResolveError::NotFound(p) => Self::io_at("open", p, io::ErrorKind::NotFound.into()),
            ResolveError::BadName(n) => Self::BadOffer(format!("{n:?} is not a plain file name")),
            ResolveError::Io { op, path, source } => Self::io_at(op, path, source),
        }
    }
}
