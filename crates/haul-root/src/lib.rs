//! File-system roots that nothing escapes: every path is resolved beneath a
//! held directory descriptor, one component at a time, and no symlink is
//! ever followed on the way.
//!
//! ## Why
//! A path checked by name and then used by name can be raced: between the
//! check ("`d` is a real directory") and the use (`open("d/e/file")`), a
//! local user who can write inside the root swaps `d` for a symlink to
//! `/etc`, and the write lands there. This is the class of rsync's
//! CVE-2024-12087/12088 and the reason Go added `os.Root` and the Bytecode
//! Alliance keeps `cap-std`.
//!
//! ## How
//! - A [`Root`] holds the root directory open. A [`Dir`] is a directory held
//!   open (`O_PATH`): every operation on it names **one plain component**
//!   relative to its descriptor (`openat`, `mkdirat`, `renameat`, `linkat`,
//!   `symlinkat`, `unlinkat`, `fstatat`...), always with `O_NOFOLLOW` or
//!   `AT_SYMLINK_NOFOLLOW`. A name with a `/`, `.`, `..` or NUL is refused, so
//!   a component can never smuggle in a walk of its own.
//! - A path of several components is resolved from a held directory either
//!   with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//!   RESOLVE_NO_MAGICLINKS)` where the kernel has it, or component by
//!   component with `O_NOFOLLOW | O_DIRECTORY` (the fallback, and the path
//!   taken to name the failing component in an error).
//! - Metadata is set on descriptors (`fchmod`, `futimens` on the directory
//!   reopened through its own descriptor) or on relative names with
//!   `AT_SYMLINK_NOFOLLOW`; the mode of a file is set through an `O_PATH`
//!   descriptor of that very file, checked to be a regular file.
//! - A directory swapped for a symlink after it was opened does not matter:
//!   the held descriptor still names the directory that was checked (now
//!   elsewhere inside the root, or wherever its owner moved it), never what
//!   the name points to now.
//!
//! `cap-std` was considered: it resolves symlinks that stay inside its
//! sandbox, where haul refuses every symlink on the way, and it has no
//! `O_TMPFILE`, `linkat(AT_EMPTY_PATH)` or `renameat` between two held
//! directories, which haul's staging needs. `rustix` gives those calls
//! without `unsafe` here.
//!
//! [`walk`] walks a tree the same way (each directory opened relative to its
//! parent's descriptor), for serving a root and for reading local trees;
//! [`watch`] journals what changes beneath a root (inotify, each directory
//! watched through its own descriptor).

mod attrs;
mod dir;
pub mod identity;
mod sparse;
pub mod walk;
pub mod watch;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub use attrs::{
    file_get_xattr, file_remove_xattr, file_set_owner, file_set_xattr, file_xattrs, Xattrs,
};
pub use dir::{Dir, Meta, ProcLink};
pub use identity::FileIdentity;
use rustix::fs::{Mode, OFlags, ResolveFlags};
pub use sparse::{read_sparse_at, write_sparse_at};

/// Why a path could not be resolved beneath a root.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// A component on the way is a symlink.
    #[error("{0} is a symlink: haul never follows a symlink inside a path")]
    Symlink(String),
    /// A component on the way exists and is not a directory.
    #[error("{0} exists and is not a directory")]
    NotDir(String),
    /// A component on the way does not exist (and was not to be created).
    #[error("{0}: no such file or directory")]
    NotFound(String),
    /// A component is not a plain name (empty, `.`, `..`, with `/` or NUL).
    #[error("{0:?} is not a plain file name")]
    BadName(String),
    /// Any other system error.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path concerned (the root's path joined with the components).
        path: String,
        /// The system's error.
        source: io::Error,
    },
}

impl ResolveError {
    /// The system error behind this one, if any (`ENOSPC`, `EACCES`...).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Self::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// A root directory held open; paths beneath it are resolved from its
/// descriptor, never from its name.
#[derive(Debug, Clone)]
pub struct Root {
    dir: Arc<Dir>,
    path: PathBuf,
}

/// Set once `openat2` was refused (an old kernel, or a seccomp filter):
/// resolve component by component from then on.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Paths nested deeper than this are refused (a bounded walk; haul's wire
/// paths are at most 4096 bytes anyway).
pub const MAX_DEPTH: usize = 1024;

impl Root {
    /// Opens the directory at `path` as a root. `path` is the operator's own
    /// choice (symlinks in it are followed, as any command line's path is);
    /// nothing beneath it is ever followed.
    pub fn open(path: &Path) -> io::Result<Self> {
        Ok(Self {
            dir: Arc::new(Dir::open_path(path)?),
            path: path.to_path_buf(),
        })
    }

    /// The root's path, for messages only (never used to reach a file).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The root directory itself.
    pub fn dir(&self) -> &Arc<Dir> {
        &self.dir
    }

    /// `comps` joined under the root's path, for messages.
    pub fn show(&self, comps: &[&str]) -> String {
        let mut p = self.path.clone();
        p.extend(comps);
        p.display().to_string()
    }

    /// Opens the existing directory `comps` (relative to `base`, itself at
    /// `base_comps` beneath the root; `base` is the root for none). No
    /// symlink is followed anywhere on the way.
    pub fn open_dir_from(
        &self,
        base: &Dir,
        base_comps: &[&str],
        comps: &[&str],
    ) -> Result<Dir, ResolveError> {
        self.resolve_dir(base, base_comps, comps, !NO_OPENAT2.load(Ordering::Relaxed))
    }

    /// [`Root::open_dir_from`] with `openat2` as a fast path (`fast`) or
    /// component by component only.
    fn resolve_dir(
        &self,
        base: &Dir,
        base_comps: &[&str],
        comps: &[&str],
        fast: bool,
    ) -> Result<Dir, ResolveError> {
        if fast
            && !comps.is_empty()
            && comps.len() <= MAX_DEPTH
            && comps.iter().all(|c| dir::plain(c.as_bytes()))
        {
            let joined = comps.join("/");
            let how =
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
            match rustix::fs::openat2(base.fd(), joined.as_str(), flags, Mode::empty(), how) {
                Ok(fd) => return Ok(Dir::from_fd(fd)),
                Err(e) if e == rustix::io::Errno::NOSYS || e == rustix::io::Errno::PERM => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                }
                // Anything else (a symlink, a missing name, a race with a
                // rename: EAGAIN): the component walk below says which.
                Err(_) => {}
            }
        }
        self.walk_down(base, base_comps, comps, |dir, c, _| dir.subdir(c))
    }

    /// Opens the existing directory `comps` beneath the root.
    pub fn open_dir(&self, comps: &[&str]) -> Result<Dir, ResolveError> {
        self.open_dir_from(&self.dir, &[], comps)
    }

    /// Opens directory `comps` beneath `base` (at `base_comps`), creating
    /// missing components with `mode`. `made` hears of each component: its
    /// index in `comps`, its directory, and whether this call created it.
    pub fn make_dirs_from(
        &self,
        base: &Dir,
        base_comps: &[&str],
        comps: &[&str],
        mode: u32,
        made: &mut dyn FnMut(usize, &Dir, bool),
    ) -> Result<Dir, ResolveError> {
        let mut i = 0;
        self.walk_down(base, base_comps, comps, |dir, c, op| {
            let (next, created) = dir.subdir_or_create(c, mode).inspect_err(|_| {
                // Still missing: making it failed (not opening it).
                if matches!(dir.stat(c), Ok(None)) {
                    *op = "create directory";
                }
            })?;
            made(i, &next, created);
            i += 1;
            Ok(next)
        })
    }

    /// Goes down `comps` from `base` one component at a time with `step`
    /// (each a plain name, at most [`MAX_DEPTH`] of them); `base` itself,
    /// reopened, for none. A step that fails may say what it was doing
    /// (its third argument; "open" unless it says otherwise).
    fn walk_down(
        &self,
        base: &Dir,
        base_comps: &[&str],
        comps: &[&str],
        mut step: impl FnMut(&Dir, &str, &mut &'static str) -> io::Result<Dir>,
    ) -> Result<Dir, ResolveError> {
        for c in comps {
            check_name(c)?;
        }
        if comps.len() > MAX_DEPTH {
            let too_long = rustix::io::Errno::NAMETOOLONG.raw_os_error();
            return Err(self.io(
                "open",
                base_comps,
                comps,
                io::Error::from_raw_os_error(too_long),
            ));
        }
        let mut held: Option<Dir> = None;
        for (i, c) in comps.iter().enumerate() {
            let dir = held.as_ref().unwrap_or(base);
            let mut op = "open";
            let next = step(dir, c, &mut op)
                .map_err(|e| self.step_error(e, op, dir, c, base_comps, &comps[..=i]))?;
            held = Some(next);
        }
        match held {
            Some(dir) => Ok(dir),
            None => base
                .reopen()
                .map_err(|e| self.io("open", base_comps, &[], e)),
        }
    }

    /// Classifies a failed step into `name` of `dir` (for the message only:
    /// the step already failed safely).
    fn step_error(
        &self,
        e: io::Error,
        op: &'static str,
        dir: &Dir,
        name: &str,
        base: &[&str],
        comps: &[&str],
    ) -> ResolveError {
        let shown = || {
            let mut all: Vec<&str> = base.to_vec();
            all.extend_from_slice(comps);
            self.show(&all)
        };
        match e.raw_os_error().map(rustix::io::Errno::from_raw_os_error) {
            Some(rustix::io::Errno::NOTDIR) | Some(rustix::io::Errno::LOOP) => {
                match dir.stat(name) {
                    Ok(Some(m)) if m.is_symlink() => ResolveError::Symlink(shown()),
                    _ => ResolveError::NotDir(shown()),
                }
            }
            Some(rustix::io::Errno::NOENT) => ResolveError::NotFound(shown()),
            _ => self.io(op, base, comps, e),
        }
    }

    fn io(
        &self,
        op: &'static str,
        base: &[&str],
        comps: &[&str],
        source: io::Error,
    ) -> ResolveError {
        let mut all: Vec<&str> = base.to_vec();
        all.extend_from_slice(comps);
        ResolveError::Io {
            op,
            path: self.show(&all),
            source,
        }
    }
}

/// This process's effective user id (what owns what haul creates).
pub fn my_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Whether this process sees `trusted.*` attributes: the kernel shows
/// them only to a holder of `CAP_SYS_ADMIN` in the initial user namespace,
/// so root in a container of its own namespace does not (its lists lack
/// them, though it runs as uid 0). Read once from `/proc/self`.
pub fn sees_trusted_xattrs() -> bool {
    static SEES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SEES.get_or_init(|| {
        const CAP_SYS_ADMIN: u32 = 21;
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let effective = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0);
        // The initial user namespace's inode is fixed (PROC_USER_INIT_INO).
        let ns = std::fs::read_link("/proc/self/ns/user").unwrap_or_default();
        let initial = ns.as_os_str() == "user:[4026531837]";
        effective & (1 << CAP_SYS_ADMIN) != 0 && initial
    })
}

/// Checks that `name` is one plain component: not empty, not `.` or `..`,
/// without `/` or NUL.
pub fn check_name(name: &str) -> Result<(), ResolveError> {
    if dir::plain(name.as_bytes()) {
        Ok(())
    } else {
        Err(ResolveError::BadName(name.to_owned()))
    }
}

#[cfg(test)]
mod tests;
