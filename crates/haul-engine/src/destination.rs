//! The receiving side's filesystem: a root that nothing escapes, and
//! [`PartialFile`]s that become final files only once verified.
//!
//! Invariants:
//! - Every path is checked by [`haul_proto::validate_rel_path`], and every
//!   directory on the way is a real directory (a symlink there is refused),
//!   so nothing is created or written outside the root.
//! - File data goes to `ROOT/.haul/partial/<id>.part`; a file appears under its
//!   final name only after every chunk and the whole-file hash verified, the
//!   data was fsynced, and the rename was atomic.
//! - Resume state (`<id>.state`) is an append-only log of verified chunks; it is
//!   re-verified against the partial data when reopened, so a log that got ahead
//!   of the data (a crash) costs a re-send, never a wrong byte.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use haul_proto::{validate_rel_path, validate_symlink_target, Entry, PathError, STATE_DIR};

use crate::partial::{DirtyDirs, PartialFile};
use known_dirs::KnownDirs;
use open_dirs::{NameStat, OpenDirs};

mod known_dirs;
pub(crate) mod open_dirs;

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
    /// Disk full: the partial file stays and the transfer resumes later.
    #[error(
        "disk full while writing {0}: free some space and run the same command again to resume"
    )]
    DiskFull(String),
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

impl ReceiveError {
    pub(crate) fn io(op: &'static str, path: &Path, source: io::Error) -> Self {
        if source.raw_os_error() == Some(libc::ENOSPC) {
            return Self::DiskFull(path.display().to_string());
        }
        Self::Io {
            op,
            path: path.display().to_string(),
            source,
        }
    }
}

/// What [`Destination::prepare_file`] found.
#[derive(Debug)]
pub enum Prepared {
    /// The same file (size and mtime) is already in place.
    UpToDate,
    /// Receive into this partial file.
    Receive(Arc<PartialFile>),
}

/// A directory whose mode and mtime are set once all its content is in place.
#[derive(Debug)]
struct PendingDir {
    path: PathBuf,
    mode: u32,
    mtime: SystemTime,
}

/// The receiver's root directory, shared by every connection writing into it.
#[derive(Debug)]
pub struct Destination {
    root: PathBuf,
    partial_dir: PathBuf,
    open: Mutex<HashMap<String, Weak<PartialFile>>>,
    pending_dirs: Mutex<Vec<PendingDir>>,
    sessions: Mutex<usize>,
    /// Directories already checked to be real directories under the root,
    /// and the names handed out in those it created (see [`known_dirs`]).
    known_dirs: Mutex<KnownDirs>,
    /// Directories kept open while sessions write (see [`open_dirs`]).
    open_dirs: OpenDirs,
    dirty_dirs: DirtyDirs,
    client_side: std::sync::atomic::AtomicBool,
    /// Entries' modes are made up (remote sources that carry none): a
    /// file found up to date keeps its own.
    keep_modes: std::sync::atomic::AtomicBool,
}

/// The name (without extension) of the staging and resume-state files of `rel`.
fn staging_id(rel: &str) -> String {
    blake3::hash(rel.as_bytes()).to_hex()[..32].to_string()
}

/// Converts an entry's mtime to a `SystemTime`.
pub fn entry_mtime(entry: &Entry) -> SystemTime {
    let nanos = Duration::new(0, entry.mtime_nsec.min(999_999_999));
    if entry.mtime_sec >= 0 {
        UNIX_EPOCH + Duration::from_secs(entry.mtime_sec as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(entry.mtime_sec.unsigned_abs()) + nanos
    }
}

impl Destination {
    /// Opens (creating if needed) a destination root.
    pub fn open(root: &Path) -> Result<Arc<Self>, ReceiveError> {
        fs::create_dir_all(root).map_err(|e| ReceiveError::io("create", root, e))?;
        let root = root
            .canonicalize()
            .map_err(|e| ReceiveError::io("resolve", root, e))?;
        let partial_dir = root.join(STATE_DIR).join("partial");
        fs::create_dir_all(&partial_dir)
            .map_err(|e| ReceiveError::io("create", &partial_dir, e))?;
        Ok(Arc::new(Self {
            root,
            partial_dir,
            open: Mutex::new(HashMap::new()),
            pending_dirs: Mutex::new(Vec::new()),
            sessions: Mutex::new(0),
            known_dirs: Mutex::new(KnownDirs::default()),
            open_dirs: OpenDirs::default(),
            dirty_dirs: Arc::new(Mutex::new(HashSet::new())),
            client_side: std::sync::atomic::AtomicBool::new(false),
            keep_modes: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// For sources whose entries carry no real mode (FTP, HTTP, S3...): a
    /// file found up to date keeps the permission bits it has here.
    pub fn keep_modes(&self) {
        self.keep_modes
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn sync_modes(&self) -> bool {
        !self.keep_modes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Leaves directory metadata to an explicit [`Destination::apply_dir_metadata`]
    /// at the end (a client's pull or copy), instead of whenever no session is open.
    pub fn apply_dir_metadata_at_end(&self) {
        self.client_side
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves `rel` (checked) under the root, creating missing parent
    /// directories and refusing symlinks on the way. Returns the full path.
    pub fn resolve(&self, rel: &str) -> Result<PathBuf, ReceiveError> {
        let comps = validate_rel_path(rel)?;
        let mut dir = self.root.clone();
        let Some((last, parents)) = comps.split_last() else {
            return Ok(dir);
        };
        for comp in parents {
            dir.push(comp);
            let known = self
                .known_dirs
                .lock()
                .map(|k| k.contains(&dir))
                .unwrap_or(false);
            if !known {
                let created = ensure_real_dir(&dir, true)?;
                self.know_dir(&dir, created);
            }
        }
        dir.push(last);
        Ok(dir)
    }

    /// Remembers that `dir` is a real directory (`created` by this destination).
    fn know_dir(&self, dir: &Path, created: bool) {
        if let Ok(mut k) = self.known_dirs.lock() {
            k.insert(dir, created);
        }
    }

    /// Creates directory `rel` (idempotent) with default permissions and no
    /// metadata to apply later: an empty directory of a remote source, which
    /// tells neither mode nor (always) mtime.
    pub fn ensure_dir(&self, rel: &str) -> Result<(), ReceiveError> {
        let path = self.resolve(rel)?;
        let created = ensure_real_dir(&path, true)?;
        self.know_dir(&path, created);
        Ok(())
    }

    /// Creates directory `entry.path` (idempotent); its mode and mtime are
    /// applied when the last session on this destination ends.
    pub fn make_dir(&self, entry: &Entry) -> Result<(), ReceiveError> {
        let path = self.resolve(&entry.path)?;
        let created = ensure_real_dir(&path, true)?;
        self.know_dir(&path, created);
        if let Ok(mut pending) = self.pending_dirs.lock() {
            pending.push(PendingDir {
                path,
                mode: entry.mode & 0o1777,
                mtime: entry_mtime(entry),
            });
        }
        Ok(())
    }

    /// Creates symlink `entry.path -> target` if the target stays inside the root.
    pub fn make_symlink(&self, entry: &Entry, target: &str) -> Result<(), ReceiveError> {
        validate_symlink_target(&entry.path, target)?;
        let path = self.resolve(&entry.path)?;
        if let Ok(meta) = fs::symlink_metadata(&path) {
            if meta.is_dir() {
                return Err(ReceiveError::WrongType(entry.path.clone(), "symlink"));
            }
        }
        // A name of its own per link (connections make links side by side).
        let n = LINK_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_file_name(format!(".haul-link-{}-{n}", std::process::id()));
        let _ = fs::remove_file(&tmp);
        std::os::unix::fs::symlink(target, &tmp)
            .map_err(|e| ReceiveError::io("symlink", &tmp, e))?;
        // The link's own mtime (best effort: not every filesystem keeps one).
        let _ = set_link_mtime(&tmp, entry);
        if let Err(e) = fs::rename(&tmp, &path) {
            let _ = fs::remove_file(&tmp);
            return Err(ReceiveError::io("rename", &path, e));
        }
        Ok(())
    }

    /// Creates a directory or symlink entry; `None` for files (which need a transfer).
    pub fn make_dir_or_link(&self, entry: &Entry) -> Option<Result<(), ReceiveError>> {
        match &entry.kind {
            haul_proto::EntryKind::Dir => Some(self.make_dir(entry)),
            haul_proto::EntryKind::Symlink { target } => Some(self.make_symlink(entry, target)),
            haul_proto::EntryKind::File => None,
        }
    }

    /// True when the final file already exists with this size and mtime
    /// (rsync's quick check): nothing needs sending. Its permission bits are
    /// brought in line with the entry's when only they differ.
    pub fn quick_check(&self, entry: &Entry) -> bool {
        let Ok(path) = self.resolve(&entry.path) else {
            return false;
        };
        match self.look_up(&path) {
            Ok(found) => up_to_date(&found, &path, entry, self.sync_modes()),
            Err(_) => false,
        }
    }

    /// True when nothing is at `rel` yet — no file (nor anything else) under
    /// the final name and no resume state — so there is nothing to
    /// quick-check or resume against. Creates missing parent directories,
    /// as receiving the file would.
    pub fn is_new(&self, rel: &str) -> bool {
        let Ok(final_path) = self.resolve(rel) else {
            return false;
        };
        match self.look_up(&final_path) {
            Ok(found) => {
                found.stat.is_none()
                    && !self
                        .partial_dir
                        .join(format!("{}.state", staging_id(rel)))
                        .exists()
            }
            Err(_) => false,
        }
    }

    /// Opens the directory of `final_path` (cached) and stats the name in it
    /// — unless the directory was created here and the name is used in it
    /// for the first time: then nothing can be there ([`known_dirs`]).
    fn look_up(&self, final_path: &Path) -> Result<Found, ReceiveError> {
        let (Some(parent), Some(name)) = (final_path.parent(), final_path.file_name()) else {
            return Err(ReceiveError::WrongType(
                final_path.display().to_string(),
                "file",
            ));
        };
        let dir = self
            .open_dirs
            .get(parent)
            .map_err(|e| ReceiveError::io("open", parent, e))?;
        let unused = self
            .known_dirs
            .lock()
            .map(|mut k| k.first_use_in_created(parent, name))
            .unwrap_or(false);
        if unused {
            return Ok(Found { dir, stat: None });
        }
        use std::os::unix::ffi::OsStrExt;
        let name = open_dirs::cstring(name.as_bytes())
            .map_err(|e| ReceiveError::io("open", final_path, e))?;
        let stat = open_dirs::stat_at(&dir, &name).ok();
        Ok(Found { dir, stat })
    }

    /// Opens the partial file for `entry` (shared with other connections that
    /// carry other ranges of it), reloading and re-verifying resume state.
    pub fn begin_file(&self, entry: &Entry) -> Result<Arc<PartialFile>, ReceiveError> {
        match self.prepare_file(entry, false)? {
            Prepared::Receive(part) => Ok(part),
            Prepared::UpToDate => Err(ReceiveError::BadOffer("unreachable quick check".into())),
        }
    }

    /// Resolves and checks `entry`'s final path once: with `quick_check`, a
    /// file already there with the same size and mtime is [`Prepared::UpToDate`];
    /// otherwise its partial file is opened.
    pub fn prepare_file(&self, entry: &Entry, quick_check: bool) -> Result<Prepared, ReceiveError> {
        self.prepare_file_version(entry, "", quick_check)
    }

    /// [`Destination::prepare_file`] for a source whose files carry a version
    /// token (an HTTP or S3 ETag): resume state recorded for another version
    /// is discarded, so two versions are never spliced.
    pub fn prepare_file_version(
        &self,
        entry: &Entry,
        version: &str,
        quick_check: bool,
    ) -> Result<Prepared, ReceiveError> {
        let final_path = self.resolve(&entry.path)?;
        let found = self.look_up(&final_path)?;
        if let Some(st) = &found.stat {
            if st.is_dir() {
                return Err(ReceiveError::WrongType(entry.path.clone(), "file"));
            }
            if quick_check && up_to_date(&found, &final_path, entry, self.sync_modes()) {
                return Ok(Prepared::UpToDate);
            }
        }
        if entry.chunk_count() <= 1 {
            // One chunk: nothing to share between connections or to resume;
            // stage in the final directory, so the link or rename stays there.
            let part = PartialFile::open_small(
                entry.clone(),
                final_path,
                found.dir,
                self.dirty_dirs.clone(),
            )?;
            return Ok(Prepared::Receive(Arc::new(part)));
        }
        let mut open = self
            .open
            .lock()
            .map_err(|_| ReceiveError::BadOffer("internal lock poisoned".into()))?;
        open.retain(|_, weak| weak.strong_count() > 0);
        if let Some(existing) = open.get(&entry.path).and_then(Weak::upgrade) {
            if !existing.is_published() {
                if existing.entry() == entry {
                    return Ok(Prepared::Receive(existing));
                }
                // Two different versions at once would share one staging file.
                return Err(ReceiveError::Busy(entry.path.clone()));
            }
        }
        let id = staging_id(&entry.path);
        let open_part = || {
            PartialFile::open(
                entry.clone(),
                version,
                final_path.clone(),
                self.partial_dir.join(format!("{id}.part")),
                self.partial_dir.join(format!("{id}.state")),
                self.dirty_dirs.clone(),
            )
        };
        let part = match open_part() {
            // The state directory was removed under a running node: make it
            // again (what was staged in it is gone; transfers start over).
            Err(ReceiveError::Io { source, .. })
                if source.kind() == io::ErrorKind::NotFound && !self.partial_dir.is_dir() =>
            {
                fs::create_dir_all(&self.partial_dir)
                    .map_err(|e| ReceiveError::io("create", &self.partial_dir, e))?;
                open_part()?
            }
            other => other?,
        };
        let part = Arc::new(part);
        open.insert(entry.path.clone(), Arc::downgrade(&part));
        Ok(Prepared::Receive(part))
    }

    /// Marks a session (connection) as writing into this destination.
    pub fn session_started(&self) {
        if let Ok(mut n) = self.sessions.lock() {
            *n += 1;
        }
    }

    /// Marks a session as finished; the last one applies directory metadata.
    pub fn session_ended(&self) {
        let last = match self.sessions.lock() {
            Ok(mut n) => {
                *n = n.saturating_sub(1);
                *n == 0
            }
            Err(_) => false,
        };
        if last {
            // A client applies directory metadata itself once every
            // connection is done (its connections may drop to zero while
            // retrying); a node does it whenever it goes idle.
            if !self.client_side.load(std::sync::atomic::Ordering::Relaxed) {
                self.apply_dir_metadata();
            } else {
                self.sync_dirs();
            }
            // Directories may be removed while the node idles: check them afresh.
            if let Ok(mut k) = self.known_dirs.lock() {
                k.clear();
            }
            self.open_dirs.clear();
        }
    }

    /// Makes all data written under the root durable with one `syncfs(2)`:
    /// much cheaper than an fsync per file for a batch of small files.
    pub fn sync_filesystem(&self) -> Result<(), ReceiveError> {
        let dir = File::open(&self.partial_dir)
            .map_err(|e| ReceiveError::io("open", &self.partial_dir, e))?;
        // SAFETY: `dir` is an open descriptor for the duration of the call.
        let rc = unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&dir)) };
        if rc != 0 {
            return Err(ReceiveError::io(
                "syncfs",
                &self.partial_dir,
                io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// Device of the partial directory (what [`Destination::sync_filesystem`] covers).
    pub fn device(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(&self.partial_dir).ok().map(|m| m.dev())
    }

    /// Makes the renames so far durable: one fsync per directory touched.
    pub fn sync_dirs(&self) {
        let dirs: Vec<PathBuf> = match self.dirty_dirs.lock() {
            Ok(mut d) => d.drain().collect(),
            Err(_) => return,
        };
        for dir in dirs {
            if let Ok(f) = File::open(&dir) {
                let _ = f.sync_all();
            }
        }
    }

    /// Sets the mode and mtime of every directory created so far, deepest
    /// first, and syncs the directories renames went into.
    pub fn apply_dir_metadata(&self) {
        self.sync_dirs();
        let Ok(mut pending) = self.pending_dirs.lock() else {
            return;
        };
        pending.sort_by_key(|d| std::cmp::Reverse(d.path.components().count()));
        for d in pending.drain(..) {
            let mode = d.mode | 0o700;
            if let Err(e) = fs::set_permissions(&d.path, fs::Permissions::from_mode(mode)) {
                tracing::warn!("cannot set mode of {}: {e}", d.path.display());
            }
            if let Ok(f) = File::open(&d.path) {
                if let Err(e) = f.set_modified(d.mtime) {
                    tracing::warn!("cannot set mtime of {}: {e}", d.path.display());
                }
            }
        }
    }
}

/// A final path looked up in its open directory.
struct Found {
    dir: Arc<std::os::fd::OwnedFd>,
    /// What is there now, if anything.
    stat: Option<NameStat>,
}

/// Numbers the temporary names of links being made.
static LINK_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `fchmodat(dir, name, mode, AT_SYMLINK_NOFOLLOW)`: sets the permission
/// bits of the file named by `path`'s last component in `dir`, never
/// through a symlink (a name swapped for one since it was looked at fails;
/// the caller then sends the file again).
fn set_mode_at(dir: &std::os::fd::OwnedFd, path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("no file name"))?;
    let name = std::ffi::CString::new(name.as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: `dir` is an open directory and `name` a NUL-terminated string.
    let rc = unsafe {
        libc::fchmodat(
            dir.as_raw_fd(),
            name.as_ptr(),
            mode as libc::mode_t,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Sets a symlink's own mtime (and atime) to the entry's, not following it.
fn set_link_mtime(path: &Path, entry: &Entry) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    let t = libc::timespec {
        tv_sec: entry.mtime_sec as libc::time_t,
        tv_nsec: i64::from(entry.mtime_nsec.min(999_999_999)) as libc::c_long,
    };
    let times = [t, t];
    // SAFETY: `c` is NUL-terminated and `times` holds two timespecs.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The quick check of what `found` holds at `path`: the same file (size and
/// mtime), with the entry's permission bits applied (with `sync_mode`) when only they differ
/// (as `rsync -a`: a mode tightened at the source must not stay loose here);
/// a file whose mode cannot be set is not up to date (it is sent again).
fn up_to_date(found: &Found, path: &Path, entry: &Entry, sync_mode: bool) -> bool {
    match &found.stat {
        Some(st) if same_file(st, entry) => {
            // As for a received file: never setuid or setgid (a peer's bits).
            let mode = entry.mode & 0o1777;
            // A file with other hard links is not changed in place (they
            // may be outside the root): it is sent again and renamed over.
            !sync_mode
                || st.mode & 0o7777 == mode
                || (st.nlink == 1 && set_mode_at(&found.dir, path, mode).is_ok())
        }
        _ => false,
    }
}

/// rsync's quick check: a regular file with the entry's size and mtime.
fn same_file(st: &NameStat, entry: &Entry) -> bool {
    st.is_file()
        && st.size == entry.size
        && st.mtime
            == (
                entry.mtime_sec,
                i64::from(entry.mtime_nsec.min(999_999_999)),
            )
}

/// Makes sure `path` is a real directory (not a symlink), creating it if
/// asked. Returns whether it was created (by this call).
fn ensure_real_dir(path: &Path, create: bool) -> Result<bool, ReceiveError> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            Err(ReceiveError::SymlinkInPath(path.display().to_string()))
        }
        Ok(m) if m.is_dir() => Ok(false),
        Ok(_) => Err(ReceiveError::WrongType(
            path.display().to_string(),
            "directory",
        )),
        Err(e) if e.kind() == ErrorKind::NotFound && create => {
            match fs::DirBuilder::new().mode(0o755).create(path) {
                Ok(()) => Ok(true),
                // Another connection created it meanwhile.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => ensure_real_dir(path, false),
                Err(e) => Err(ReceiveError::io("create directory", path, e)),
            }
        }
        Err(e) => Err(ReceiveError::io("stat", path, e)),
    }
}

/// Opens a file for read+write without truncating, creating it if missing.
/// Never follows a symlink at the last component (the ones before are checked).
pub(crate) fn open_rw(path: &Path) -> Result<File, ReceiveError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| ReceiveError::io("open", path, e))
}

/// Creates a new file that did not exist (`O_EXCL` never follows a symlink).
/// Creates a new file with permission bits `mode` (minus the umask) that did
/// not exist (`O_EXCL` never follows a symlink). The owner can always write.
pub(crate) fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode | 0o200)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

#[cfg(test)]
mod tests;

/// Resolves an existing `rel` path under `root` for reading, refusing any
/// symlink on the way or at the end (a link must not lead a reader out of
/// the root).
pub fn resolve_existing(root: &Path, rel: &str) -> Result<PathBuf, ReceiveError> {
    let comps = validate_rel_path(rel)?;
    let mut path = root.to_path_buf();
    for comp in comps {
        path.push(comp);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(ReceiveError::SymlinkInPath(rel.to_owned()))
            }
            Ok(_) => {}
            Err(e) => return Err(ReceiveError::io("stat", &path, e)),
        }
    }
    Ok(path)
}

/// Removes `ROOT/.haul/partial` and `ROOT/.haul` if nothing is left in them.
pub fn tidy_state_dir(root: &Path) {
    let state = root.join(STATE_DIR);
    let _ = fs::remove_dir(state.join("partial"));
    let _ = fs::remove_dir(state);
}
