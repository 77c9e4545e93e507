//! The receiving side's filesystem: a root that nothing escapes, and
//! [`PartialFile`]s that become final files only once verified.
//!
//! Invariants:
//! - Every path is checked by [`haul_proto::validate_entry_path`] (the root
//!   itself is never an entry), then resolved beneath the root's held
//!   descriptor ([`haul_root`]): each directory on the way is opened relative
//!   to its parent with `O_NOFOLLOW`, and every later call names one component
//!   relative to a held directory. A symlink on the way is refused, and a
//!   directory swapped for one after it was opened is not followed either:
//!   nothing is created, written or changed outside the root.
//! - File data goes to `ROOT/.haul/partial/<id>.part` (or, for one-chunk
//!   files, an anonymous file in the final directory); a file appears under
//!   its final name only after every chunk and the whole-file hash verified,
//!   the data was fsynced, and the rename was atomic.
//! - Resume state (`<id>.state`) is an append-only log of verified chunks; it is
//!   re-verified against the partial data when reopened, so a log that got ahead
//!   of the data (a crash) costs a re-send, never a wrong byte.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use haul_proto::{
    validate_entry_path, validate_rel_path, validate_symlink_target, Entry, SkipRule, STATE_DIR,
};
use haul_root::{Dir, Meta, Root};

use crate::attrs::{AttrPolicy, AttrWriter, Target};
use crate::backup::{Backups, Kept};
use crate::dir_cache::{DirCache, HeldDir};
use crate::partial::{DirtyDirs, PartialFile, Place, Staging};
use known_dirs::KnownDirs;

mod known_dirs;

use crate::itemize::InPlace;
pub use crate::receive_error::ReceiveError;

/// What [`Destination::prepare_file`] found.
#[derive(Debug)]
pub enum Prepared {
    /// The same file (size and mtime) is already in place; `fixed`: what
    /// was brought in line on it (`-i` says `.f...p.....`, `.f....og...`).
    UpToDate {
        /// What differed and was set.
        fixed: InPlace,
    },
    /// Receive into this partial file.
    Receive(Arc<PartialFile>),
}

/// A directory whose mode and mtime are set once all its content is in place.
#[derive(Debug)]
struct PendingDir {
    rel: String,
    mode: u32,
    mtime: (i64, u32),
    /// The directory made (device, inode): a directory found under its
    /// name later but another (renamed in meanwhile) is left alone.
    id: (u64, u64),
}

/// How long after the last session ended a new one still counts as the same
/// transfer: directories set then are set again when it ends (see
/// [`DirMetadata`]). Covers a client's connections handing over (one ends
/// before the next registered) and its retries' backoff.
const SAME_TRANSFER: Duration = Duration::from_secs(60);

/// Directory metadata to set, and what was set when the node last went idle.
///
/// A node sets directory metadata whenever its last session ends, but one
/// push's connections need not overlap: the first may end while the next is
/// still shaking hands (or backing off before a retry), which then creates
/// entries in directories already set, changing their mtimes. Directories set
/// at most [`SAME_TRANSFER`] before a session starts are therefore set again
/// when the node next goes idle.
#[derive(Debug, Default)]
struct DirMetadata {
    pending: Vec<PendingDir>,
    applied: Vec<PendingDir>,
    applied_at: Option<std::time::Instant>,
}

/// The receiver's root directory, shared by every connection writing into it.
#[derive(Debug)]
pub struct Destination {
    root: Root,
    /// The root's path, shared by every [`Place`] for its messages.
    root_path: Arc<Path>,
    /// `ROOT/.haul/partial` or the directory given to [`Destination::open_staged`],
    /// held (made again if removed under a running node).
    staging: Mutex<Arc<Dir>>,
    /// The staging directory given apart from the root, if one was.
    staging_at: Option<PathBuf>,
    open: Mutex<HashMap<String, Weak<PartialFile>>>,
    pending_dirs: Mutex<DirMetadata>,
    sessions: Mutex<usize>,
    /// Which resolved directories this destination created, and the names
    /// handed out in those (see [`known_dirs`]).
    known_dirs: Mutex<KnownDirs>,
    /// Directories held open while sessions write (see [`dir_cache`]).
    dirs: DirCache,
    dirty_dirs: DirtyDirs,
    client_side: std::sync::atomic::AtomicBool,
    /// Entries' modes are made up (remote sources that carry none): a
    /// file found up to date keeps its own.
    keep_modes: std::sync::atomic::AtomicBool,
    /// `--checksum`: the sender already compared contents, so whatever it
    /// offers is received, same size and mtime or not.
    no_quick_check: std::sync::atomic::AtomicBool,
    /// A regular file where an entry's parent directory must be is
    /// replaced (a haul sender's tree has a directory there).
    replace_files_in_the_way: std::sync::atomic::AtomicBool,
    /// Applies entries' owners, groups and xattrs (`-o -g -X -A`) under
    /// this receiver's policy ([`Destination::set_attr_policy`]).
    attrs: Mutex<Arc<AttrWriter>>,
}

/// The name (without extension) of the staging and resume-state files of `rel`.
fn staging_id(rel: &str) -> String {
    blake3::hash(rel.as_bytes()).to_hex()[..32].to_string()
}

/// The directory of `comps` (all but the last component) and its relative path.
fn parent_rel(comps: &[&str]) -> String {
    comps[..comps.len().saturating_sub(1)].join("/")
}

impl Destination {
    /// Opens (creating if needed) a destination root; partial files are
    /// staged in `ROOT/.haul/partial`.
    pub fn open(root: &Path) -> Result<Arc<Self>, ReceiveError> {
        Self::open_staged(root, None)
    }

    /// Opens (creating if needed) a destination root whose partial files
    /// are staged in `staging` (made if missing, mode 0700) when given,
    /// else in `ROOT/.haul/partial`. `staging` must be this user's alone
    /// and on the root's filesystem ([`ReceiveError::StagingElsewhere`]),
    /// and must serve this root only: staging names come from the paths
    /// beneath the root.
    pub fn open_staged(root: &Path, staging: Option<&Path>) -> Result<Arc<Self>, ReceiveError> {
        fs::create_dir_all(root).map_err(|e| ReceiveError::io("create", root, e))?;
        let path = root
            .canonicalize()
            .map_err(|e| ReceiveError::io("resolve", root, e))?;
        let root = Root::open(&path).map_err(|e| ReceiveError::io("open", &path, e))?;
        let staging_at = staging.map(Path::to_path_buf);
        let staging = make_staging_for(&root, staging_at.as_deref())?;
        Ok(Arc::new(Self {
            root_path: Arc::from(root.path()),
            root,
            staging: Mutex::new(staging),
            staging_at,
            open: Mutex::new(HashMap::new()),
            pending_dirs: Mutex::new(DirMetadata::default()),
            sessions: Mutex::new(0),
            known_dirs: Mutex::new(KnownDirs::default()),
            dirs: DirCache::default(),
            dirty_dirs: Arc::new(Mutex::new(HashSet::new())),
            client_side: std::sync::atomic::AtomicBool::new(false),
            keep_modes: std::sync::atomic::AtomicBool::new(false),
            no_quick_check: std::sync::atomic::AtomicBool::new(false),
            replace_files_in_the_way: std::sync::atomic::AtomicBool::new(false),
            attrs: Mutex::new(Arc::new(AttrWriter::new(AttrPolicy::node(false)))),
        }))
    }

    /// What this receiver takes of the owners, groups and extended
    /// attributes entries carry (a node's default: no owners, see
    /// [`AttrPolicy::node`]; a local copy or a client's pull:
    /// [`AttrPolicy::here`]).
    pub fn set_attr_policy(&self, policy: AttrPolicy) {
        if let Ok(mut w) = self.attrs.lock() {
            *w = Arc::new(AttrWriter::new(policy));
        }
    }

    fn attr_writer(&self) -> Arc<AttrWriter> {
        match self.attrs.lock() {
            Ok(w) => w.clone(),
            Err(_) => Arc::new(AttrWriter::new(AttrPolicy::node(false))),
        }
    }

    /// For sources whose entries carry no real mode (FTP, HTTP, S3...): a
    /// file found up to date keeps the permission bits it has here.
    pub fn keep_modes(&self) {
        self.keep_modes
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// `--checksum`: no file offered is skipped for its size and mtime (the
    /// sender offers only files whose BLAKE3 differs).
    pub fn receive_everything_offered(&self) {
        self.no_quick_check
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether it receives every file offered (`-c`: the sender compared
    /// contents and offers only files that differ).
    pub fn receives_everything_offered(&self) -> bool {
        self.no_quick_check
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// For entries from a haul sender (a tree walked at the source): a
    /// regular file standing where an entry's parent directory must be is
    /// replaced by the directory, as that directory's own entry replaces it
    /// (which another connection may not have done yet). Not for remote
    /// sources, whose listings may name both `foo` and `foo/bar`.
    pub fn replace_files_in_the_way(&self) {
        self.replace_files_in_the_way
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

    /// The canonical root path (for messages: nothing is reached through it).
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// The root, held.
    pub fn held_root(&self) -> &Root {
        &self.root
    }

    /// The held directory `comps` beneath the root, created if missing (from
    /// the nearest directory already held), refusing symlinks on the way.
    fn dir(&self, comps: &[&str]) -> Result<HeldDir, ReceiveError> {
        let rel = comps.join("/");
        if let Some(held) = self.dirs.get(&rel) {
            return Ok(held);
        }
        let (mut start, mut base) = (0, None);
        for k in (1..comps.len()).rev() {
            if let Some(held) = self.dirs.get(&comps[..k].join("/")) {
                (start, base) = (k, Some(held.dir));
                break;
            }
        }
        let base = base.unwrap_or_else(|| self.root.dir().clone());
        // Held while directories are made and recorded: `-i` on another
        // connection never sees one made here before it is known as such.
        let mut known = self.known_dirs.lock();
        let mut levels = Vec::new();
        let mut made = self.root.make_dirs_from(
            &base,
            &comps[..start],
            &comps[start..],
            0o755,
            &mut |i, dir, created| levels.push((start + i, dir.meta().ok(), created)),
        );
        // A file where a haul sender's tree has a directory (it names an
        // entry beneath it): replaced, as the directory's own entry replaces
        // it — which another connection may not have done yet. Once per
        // component at most.
        let replacing = self
            .replace_files_in_the_way
            .load(std::sync::atomic::Ordering::Relaxed);
        for _ in start..comps.len() {
            if !replacing || !matches!(made, Err(haul_root::ResolveError::NotDir(_))) {
                break;
            }
            if !replace_non_dir_on_the_way(&base, &comps[start..]) {
                break;
            }
            levels.clear();
            made = self.root.make_dirs_from(
                &base,
                &comps[..start],
                &comps[start..],
                0o755,
                &mut |i, dir, created| levels.push((start + i, dir.meta().ok(), created)),
            );
        }
        let last = made?;
        let last = Arc::new(last);
        let mut id = (0, 0);
        if let Ok(known) = &mut known {
            for (i, meta, created) in levels {
                if let Some(m) = meta {
                    known.insert((m.dev, m.ino), created, Some(m));
                    if i + 1 == comps.len() {
                        id = (m.dev, m.ino);
                    }
                }
            }
        }
        drop(known);
        if comps.is_empty() {
            id = self
                .root
                .dir()
                .meta()
                .map(|m| (m.dev, m.ino))
                .unwrap_or_default();
        }
        let held = HeldDir { dir: last, id };
        self.dirs.insert(rel, held.clone());
        Ok(held)
    }

    /// Resolves entry path `rel` (checked) beneath the root: its directory
    /// held (missing parents created, symlinks refused) and its name there.
    pub(crate) fn resolve(&self, rel: &str) -> Result<Place, ReceiveError> {
        let comps = validate_entry_path(rel)?;
        let parents = &comps[..comps.len() - 1];
        let held = self.dir(parents)?;
        Ok(Place {
            dir: held.dir,
            dir_id: held.id,
            dir_rel: parent_rel(&comps),
            name: OsString::from(comps[comps.len() - 1]),
            root_path: self.root_path.clone(),
        })
    }

    /// Creates directory `rel` (idempotent) with default permissions and no
    /// metadata to apply later: an empty directory of a remote source, which
    /// tells neither mode nor (always) mtime.
    pub fn ensure_dir(&self, rel: &str) -> Result<(), ReceiveError> {
        let comps = validate_entry_path(rel)?;
        self.dir(&comps).map(|_| ())
    }

    /// Creates directory `entry.path` (idempotent); its mode and mtime are
    /// applied when the last session on this destination ends.
    /// A file or symlink in its place is replaced (as rsync does).
    pub fn make_dir(&self, entry: &Entry) -> Result<(), ReceiveError> {
        let comps = validate_entry_path(&entry.path)?;
        let place = self.resolve(&entry.path)?;
        if let Ok(Some(meta)) = place.dir.stat(&place.name) {
            if !meta.is_dir() {
                place
                    .dir
                    .unlink(&place.name)
                    .map_err(|e| ReceiveError::io("replace", &place.shown(), e))?;
            }
        }
        let held = self.dir(&comps)?;
        self.attr_writer()
            .apply(entry.attrs.as_deref(), Target::Dir(&held.dir))
            .map_err(|e| ReceiveError::io("set owner or attributes of", &place.shown(), e))?;
        if let Ok(mut meta) = self.pending_dirs.lock() {
            meta.pending.push(PendingDir {
                rel: entry.path.clone(),
                mode: self.attr_writer().dir_mode(entry),
                mtime: (entry.mtime_sec, entry.mtime_nsec.min(999_999_999)),
                id: held.id,
            });
        }
        Ok(())
    }

    /// Creates symlink `entry.path -> target` if the target stays inside the root.
    pub fn make_symlink(
        &self,
        entry: &Entry,
        target: &str,
        backups: Option<&Backups>,
    ) -> Result<(), ReceiveError> {
        validate_entry_path(&entry.path)?;
        validate_symlink_target(&entry.path, target)?;
        let place = self.resolve(&entry.path)?;
        let io = |op, e| ReceiveError::io(op, &place.shown(), e);
        if let Ok(Some(meta)) = place.dir.stat(&place.name) {
            if meta.is_dir() {
                clear_empty_dir(&place, &entry.path)?;
            }
        }
        // A name of its own per link (connections make links side by side);
        // one taken (by an entry of that very name) is never removed: the
        // next number is tried.
        let tmp = loop {
            let n = LINK_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tmp = format!(".haul-link-{}-{n}", std::process::id());
            match place.dir.symlink(target, &tmp) {
                Ok(()) => break tmp,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io("symlink", e)),
            }
        };
        // The link's own mtime (best effort: not every filesystem keeps one).
        let _ = place
            .dir
            .set_times_nofollow(&tmp, entry.mtime_sec, entry.mtime_nsec);
        if let Err(e) = self
            .attr_writer()
            .apply(entry.attrs.as_deref(), Target::Link(&place.dir, &tmp))
        {
            let _ = place.dir.unlink(&tmp);
            return Err(io("set owner of", e));
        }
        // A backup of what it replaces, unless that is this very link.
        let same_link = place
            .dir
            .read_link(&place.name)
            .is_ok_and(|t| t == std::ffi::OsStr::new(target));
        let name = place.name.to_str().unwrap_or_default();
        let kept = match (backups, same_link) {
            (Some(b), false) => match b.keep_replaced(&place.dir, name, &entry.path) {
                Ok(kept) => kept,
                Err(e) => {
                    let _ = place.dir.unlink(&tmp);
                    return Err(io("back up", io::Error::other(e)));
                }
            },
            _ => Kept::Nothing,
        };
        if let Err(e) = place.dir.rename(&tmp, &place.dir, &place.name) {
            let _ = place.dir.unlink(&tmp);
            if let (Kept::Moved, Some(b)) = (kept, backups) {
                b.restore(&place.dir, name, &entry.path);
            }
            return Err(io("rename", e));
        }
        Ok(())
    }

    /// Removes the directory at `rel` with everything beneath it, so a file
    /// or symlink of the source can take its place (`--force`, `--delete`;
    /// see [`ReceiveError::DirInTheWay`]): each entry by one component
    /// beneath held directories. The bytes freed.
    pub fn replace_dir(&self, rel: &str) -> Result<u64, ReceiveError> {
        let place = self.resolve(rel)?;
        place
            .dir
            .remove_tree(&place.name)
            .map_err(|e| ReceiveError::io("remove", &place.shown(), e))
    }

    /// Creates a directory or symlink entry; `None` for files (which need a
    /// transfer) and hard links (made once their file verified:
    /// [`crate::hard_links::link_beneath`]).
    /// With `backups`, a file or another symlink the symlink replaces is kept.
    pub fn make_dir_or_link(
        &self,
        entry: &Entry,
        backups: Option<&Backups>,
    ) -> Option<Result<(), ReceiveError>> {
        match &entry.kind {
            haul_proto::EntryKind::Dir => Some(self.make_dir(entry)),
            haul_proto::EntryKind::Symlink { target } => {
                Some(self.make_symlink(entry, target, backups))
            }
            haul_proto::EntryKind::File | haul_proto::EntryKind::HardLink { .. } => None,
        }
    }

    /// What `-i` says of directory or symlink `entry` when it is made now
    /// ([`crate::itemize::made`]): `None` when it is there already as the
    /// entry says. Asked before making it.
    pub fn making_change(&self, entry: &Entry) -> Option<String> {
        let place = self.resolve(&entry.path).ok()?;
        let writer = self.attr_writer();
        let here = |xattrs| crate::itemize::Here {
            mode: writer.dir_mode(entry),
            ids: writer.ids_of(entry),
            xattrs,
        };
        if entry.kind != haul_proto::EntryKind::Dir {
            let there = place.dir.stat(&place.name).ok().flatten();
            let target = match &there {
                Some(m) if m.is_symlink() => place.dir.read_link(&place.name).ok(),
                _ => None,
            };
            let target = target.as_ref().map(|t| t.to_string_lossy());
            let found = there.map(|m| crate::itemize::Found::stat(&m, target.as_deref()));
            return crate::itemize::made(entry, found, here((false, false)));
        }
        // A directory: looked at under the lock its making holds, compared
        // as it was when this transfer first came to it (files renamed into
        // it since changed its mtime, not the source), said once however
        // many sessions make it (stripes, connections).
        let mut known = self.known_dirs.lock().ok()?;
        let there = place.dir.stat(&place.name).ok().flatten();
        // `None`: new (nothing there, another kind, or made by this transfer).
        let first = match &there {
            Some(m) if m.is_dir() => match known.seen((m.dev, m.ino)) {
                Some((true, _)) => None,
                Some((false, first)) => Some(first.copied().unwrap_or(*m)),
                None => Some(*m),
            },
            _ => None,
        };
        let code = match first {
            None => crate::itemize::made(entry, None, here((false, false))),
            Some(first) => {
                let xattrs = match &entry.attrs {
                    Some(a) if a.xattrs.is_some() => {
                        writer.xattrs_differ(&place.dir, place.name.as_ref(), entry)
                    }
                    _ => (false, false),
                };
                let found = crate::itemize::Found::stat(&first, None);
                crate::itemize::made(entry, Some(found), here(xattrs))
            }
        };
        code.filter(|_| known.say_once(&entry.path))
    }

    /// True when the final file already exists with this size and mtime
    /// (rsync's quick check), or is kept by `rule`: nothing needs sending.
    /// Its permission bits, owner, group, extended attributes and ACLs are
    /// brought in line with the entry's ([`Destination::quick_check_fixing`]).
    pub fn quick_check(&self, entry: &Entry, rule: SkipRule) -> bool {
        self.quick_check_fixing(entry, rule).is_some()
    }

    /// [`Destination::quick_check`], saying what was brought in line on
    /// the file (`-i`): `None` when it is not up to date.
    pub fn quick_check_fixing(&self, entry: &Entry, rule: SkipRule) -> Option<InPlace> {
        let place = self.resolve(&entry.path).ok()?;
        let found = self.look_up(&place);
        self.up_to_date(found.as_ref(), &place, entry, rule)
    }

    /// Whether `st`, found where `entry` goes, is the same version but for
    /// permission bits that [`Destination::up_to_date`] would set in place.
    fn perms_differ(&self, st: &Meta, entry: &Entry, rule: SkipRule) -> bool {
        self.sync_modes()
            && !rule.ignore_existing
            && same_file(st, entry)
            && st.permissions() != self.attr_writer().mode_of(entry)
    }

    /// [`up_to_date`], and a file found the same first gets the entry's
    /// owner and group (`-o -g`, as rsync fixes them) where this receiver
    /// takes owners, and its extended attributes and ACLs (`-X -A`), then
    /// its mode (set-id bits only with the owner and group). What was set
    /// in place, when up to date.
    fn up_to_date(
        &self,
        found: Option<&Meta>,
        place: &Place,
        entry: &Entry,
        rule: SkipRule,
    ) -> Option<InPlace> {
        let writer = self.attr_writer();
        let refreshed = match found {
            Some(st) if !rule.ignore_existing && same_file(st, entry) => {
                writer.refresh(&place.dir, place.name.as_ref(), st, entry)?
            }
            _ => InPlace::default(),
        };
        let perms = found.is_some_and(|st| self.perms_differ(st, entry, rule));
        let mode = writer.mode_of(entry);
        up_to_date(found, place, entry, self.sync_modes(), rule, mode)
            .then_some(InPlace { perms, ..refreshed })
    }

    /// True when nothing is at `rel` yet — no file (nor anything else) under
    /// the final name and no resume state — so there is nothing to
    /// quick-check or resume against. Creates missing parent directories,
    /// as receiving the file would.
    pub fn is_new(&self, rel: &str) -> bool {
        let Ok(place) = self.resolve(rel) else {
            return false;
        };
        if self.look_up(&place).is_some() {
            return false;
        }
        let state = format!("{}.state", staging_id(rel));
        matches!(self.staging_dir().stat(state), Ok(None))
    }

    /// The size of the regular file at `rel`, if one is there (nothing is
    /// created on the way).
    pub fn existing_file_size(&self, rel: &str) -> Option<u64> {
        let comps = validate_entry_path(rel).ok()?;
        let dir = self.root.open_dir(&comps[..comps.len() - 1]).ok()?;
        let meta = dir.stat(comps[comps.len() - 1]).ok()??;
        meta.is_file().then_some(meta.size)
    }

    /// The BLAKE3 of the regular file at `rel`, if one is there and can be
    /// read (opened beneath the held root, no symlink followed; nothing is
    /// created on the way). `--checksum` compares it with the source's.
    pub fn hash_existing(&self, rel: &str) -> Option<blake3::Hash> {
        let file = crate::LocalFile::open(self.open_existing(rel)?).ok()?;
        crate::content::whole_file(&file).ok()
    }

    /// `-c`: when the regular file at `entry`'s path holds `digest` (its
    /// size and BLAKE3, read now), brings its mtime, permission bits,
    /// owner, group, extended attributes and ACLs in line with the entry's
    /// as rsync does, through descriptors of that very file, and says what
    /// it set (`-i`). `None` when the content differs or cannot be read, or
    /// when something differs that cannot be set in place (a file with
    /// other links is never changed in place): then it is received again.
    pub fn same_content_fixing(&self, entry: &Entry, digest: &[u8; 32]) -> Option<InPlace> {
        let place = self.resolve(&entry.path).ok()?;
        let (file, st) = place.dir.open_regular(&place.name).ok()?;
        if st.size != entry.size {
            return None;
        }
        let file = crate::LocalFile::open(file).ok()?;
        let hash = crate::content::whole_file(&file).ok()?;
        if hash.as_bytes() != digest {
            return None;
        }
        let writer = self.attr_writer();
        let mode = writer.mode_of(entry);
        let nsec = entry.mtime_nsec.min(999_999_999);
        let time = (st.mtime, st.mtime_nsec) != (entry.mtime_sec, nsec);
        let perms = self.sync_modes() && st.permissions() != mode;
        // A file with other links is not changed in place (they may be
        // outside the root): received again and renamed over.
        if (time || perms) && st.nlink > 1 {
            return None;
        }
        let refreshed = writer.refresh(&place.dir, place.name.as_ref(), &st, entry)?;
        // Still the version hashed (written to meanwhile, its mtime moved),
        // with no other name.
        let same = |m: &Meta| {
            m.nlink == 1
                && (m.dev, m.ino, m.size, m.mtime, m.mtime_nsec)
                    == (st.dev, st.ino, st.size, st.mtime, st.mtime_nsec)
        };
        if perms {
            let held = place.dir.regular_file_if(&place.name, same).ok()??;
            held.set_mode(mode).ok()?;
        }
        if time {
            let held = place.dir.regular_file_if(&place.name, same).ok()??;
            held.set_mtime(entry.mtime_sec, nsec).ok()?;
        }
        Some(InPlace {
            perms,
            time,
            ..refreshed
        })
    }

    /// Opens the regular file at `rel` for reading, if one is there
    /// (beneath the held root, no symlink followed, nothing created).
    pub fn open_existing(&self, rel: &str) -> Option<std::fs::File> {
        let comps = validate_entry_path(rel).ok()?;
        let (last, parents) = comps.split_last()?;
        let dir = self.root.open_dir(parents).ok()?;
        dir.open_regular(last).ok().map(|(file, _)| file)
    }

    /// What is at `place` now (not following a symlink) — unless its
    /// directory was created here and the name is used in it for the first
    /// time: then nothing can be there ([`known_dirs`]).
    fn look_up(&self, place: &Place) -> Option<Meta> {
        let unused = self
            .known_dirs
            .lock()
            .map(|mut k| k.first_use_in_created(place.dir_id, &place.name))
            .unwrap_or(false);
        if unused {
            return None;
        }
        // A name that cannot be looked at is taken for free: receiving
        // then never replaces anything silently (see `PartialFile::publish`).
        place.dir.stat(&place.name).ok().flatten()
    }

    /// Opens the partial file for `entry` (shared with other connections that
    /// carry other ranges of it), reloading and re-verifying resume state.
    pub fn begin_file(&self, entry: &Entry) -> Result<Arc<PartialFile>, ReceiveError> {
        match self.prepare_file(entry, None)? {
            Prepared::Receive(part) => Ok(part),
            Prepared::UpToDate { .. } => {
                Err(ReceiveError::BadOffer("unreachable quick check".into()))
            }
        }
    }

    /// Resolves and checks `entry`'s final path once: with `quick_check`, a
    /// file already there that its rule keeps (by default: the same size
    /// and mtime) is [`Prepared::UpToDate`]; otherwise (and with `None`,
    /// `--checksum`'s "receive whatever is offered") its partial file is
    /// opened.
    pub fn prepare_file(
        &self,
        entry: &Entry,
        quick_check: Option<SkipRule>,
    ) -> Result<Prepared, ReceiveError> {
        self.prepare_file_version(entry, "", quick_check)
    }

    /// [`Destination::prepare_file`] for a source whose files carry a version
    /// token (an HTTP or S3 ETag): resume state recorded for another version
    /// is discarded, so two versions are never spliced.
    pub fn prepare_file_version(
        &self,
        entry: &Entry,
        version: &str,
        quick_check: Option<SkipRule>,
    ) -> Result<Prepared, ReceiveError> {
        let place = self.resolve(&entry.path)?;
        let found = self.look_up(&place);
        if let Some(st) = &found {
            if st.is_dir() {
                clear_empty_dir(&place, &entry.path)?;
                return self.prepare_file_version(entry, version, quick_check);
            }
            let quick_check = quick_check.filter(|_| {
                !self
                    .no_quick_check
                    .load(std::sync::atomic::Ordering::Relaxed)
            });
            if let Some(rule) = quick_check {
                if let Some(fixed) = self.up_to_date(found.as_ref(), &place, entry, rule) {
                    return Ok(Prepared::UpToDate { fixed });
                }
            }
        }
        if entry.chunk_count() <= 1 {
            // One chunk: nothing to share between connections or to resume;
            // stage in the final directory, so the link or rename stays there.
            let part = PartialFile::open_small(
                entry.clone(),
                place,
                self.dirty_dirs.clone(),
                self.attr_writer(),
            )?;
            part.note_replaced(found);
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
                    // Received again (a session let it go before): readers wait again.
                    existing.reclaim();
                    return Ok(Prepared::Receive(existing));
                }
                // Two different versions at once would share one staging file.
                return Err(ReceiveError::Busy(entry.path.clone()));
            }
        }
        let id = staging_id(&entry.path);
        let open_part = |dir: Arc<Dir>| {
            let staging = Staging {
                dir,
                part: format!("{id}.part"),
                state: format!("{id}.state"),
                shown: self.staging_shown().into(),
            };
            PartialFile::open(
                entry.clone(),
                version,
                place.clone(),
                staging,
                self.dirty_dirs.clone(),
                self.attr_writer(),
            )
        };
        let part = match open_part(self.staging_dir()) {
            // The state directory was removed under a running node: make it
            // again (what was staged in it is gone; transfers start over).
            Err(ReceiveError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                let fresh = make_staging_for(&self.root, self.staging_at.as_deref())?;
                if let Ok(mut s) = self.staging.lock() {
                    *s = fresh.clone();
                }
                open_part(fresh)?
            }
            other => other?,
        };
        part.note_replaced(found);
        let part = Arc::new(part);
        open.insert(entry.path.clone(), Arc::downgrade(&part));
        Ok(Prepared::Receive(part))
    }

    /// The staging directory's path, for messages.
    fn staging_shown(&self) -> String {
        match &self.staging_at {
            Some(p) => p.display().to_string(),
            None => self.root.show(&[STATE_DIR, "partial"]),
        }
    }

    fn staging_dir(&self) -> Arc<Dir> {
        match self.staging.lock() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Marks a session (connection) as writing into this destination.
    pub fn session_started(&self) {
        let first = match self.sessions.lock() {
            Ok(mut n) => {
                *n += 1;
                *n == 1
            }
            Err(_) => false,
        };
        if first {
            if let Ok(mut meta) = self.pending_dirs.lock() {
                let recent = meta
                    .applied_at
                    .is_some_and(|at| at.elapsed() < SAME_TRANSFER);
                let applied = std::mem::take(&mut meta.applied);
                if recent {
                    meta.pending.extend(applied);
                }
            }
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
            // Directories may be changed while the node idles: resolve afresh.
            if let Ok(mut k) = self.known_dirs.lock() {
                k.clear();
            }
            self.dirs.clear();
        }
    }

    /// Makes all data written under the root durable with one `syncfs(2)`:
    /// much cheaper than an fsync per file for a batch of small files.
    pub fn sync_filesystem(&self) -> Result<(), ReceiveError> {
        let shown = self.staging_shown();
        self.staging_dir()
            .sync_filesystem()
            .map_err(|e| ReceiveError::io_at("syncfs", shown, e))
    }

    /// Device of the partial directory (what [`Destination::sync_filesystem`] covers).
    pub fn device(&self) -> Option<u64> {
        self.staging_dir().meta().ok().map(|m| m.dev)
    }

    /// Makes the renames so far durable: one fsync per directory touched,
    /// each resolved beneath the root again (an fsync changes nothing, but
    /// nothing outside the root is even opened).
    pub fn sync_dirs(&self) {
        let dirs: Vec<String> = match self.dirty_dirs.lock() {
            Ok(mut d) => d.drain().collect(),
            Err(_) => return,
        };
        for rel in dirs {
            let Ok(comps) = validate_rel_path(&rel) else {
                continue;
            };
            if let Ok(dir) = self.root.open_dir(&comps) {
                let _ = dir.sync();
            }
        }
    }

    /// Sets the mode and mtime of every directory created so far, deepest
    /// first, and syncs the directories renames went into. Each directory is
    /// resolved beneath the root again and changed through its descriptor:
    /// one swapped for a symlink meanwhile is left alone (and named in a
    /// warning), never followed.
    pub fn apply_dir_metadata(&self) {
        self.sync_dirs();
        let Ok(mut meta) = self.pending_dirs.lock() else {
            return;
        };
        let mut pending = std::mem::take(&mut meta.pending);
        // The last record of a directory wins (a later session may have
        // made it again); then deepest first.
        pending.reverse();
        let mut seen = HashSet::new();
        pending.retain(|d| seen.insert(d.rel.clone()));
        pending.sort_by_key(|d| std::cmp::Reverse(d.rel.split('/').count()));
        meta.applied_at = Some(std::time::Instant::now());
        let mut applied = Vec::with_capacity(pending.len());
        for d in pending {
            let dir = validate_entry_path(&d.rel)
                .map_err(ReceiveError::from)
                .and_then(|comps| self.root.open_dir(&comps).map_err(ReceiveError::from));
            let dir = match dir {
                Ok(dir) => dir,
                Err(e) => {
                    tracing::warn!("cannot set the mode and mtime of {}: {e}", d.rel);
                    continue;
                }
            };
            if dir.meta().map(|m| (m.dev, m.ino)).ok() != Some(d.id) {
                tracing::warn!(
                    "{} is not the directory made there any more: its mode and mtime are left alone",
                    d.rel
                );
                continue;
            }
            if let Err(e) = dir.set_mode(d.mode | 0o700) {
                tracing::warn!("cannot set mode of {}: {e}", d.rel);
            }
            if let Err(e) = dir.set_mtime(d.mtime.0, d.mtime.1) {
                tracing::warn!("cannot set mtime of {}: {e}", d.rel);
            }
            applied.push(d);
        }
        meta.applied = applied;
    }

    /// Removes the staging files that no transfer has written for `ttl` and
    /// no writer holds ([`crate::prune`]); the staging directory is the
    /// held one this destination writes into.
    pub fn prune_partials(
        &self,
        ttl: Duration,
        now: SystemTime,
    ) -> Result<crate::prune::Pruned, ReceiveError> {
        crate::prune::prune_staging(&self.staging_dir(), ttl, now)
            .map_err(|e| ReceiveError::io_at("prune", self.staging_shown(), e))
    }

    /// The partial files in the staging directory now, and their bytes.
    pub fn staged(&self) -> Result<crate::prune::Staged, ReceiveError> {
        crate::prune::staged(&self.staging_dir())
            .map_err(|e| ReceiveError::io_at("count", self.staging_shown(), e))
    }

    /// Removes `ROOT/.haul/partial` and `ROOT/.haul` if nothing is left in
    /// them (a staging directory given apart is left as it is).
    pub fn tidy_state_dir(&self) {
        if self.staging_at.is_some() {
            return;
        }
        if let Ok(state) = self.root.dir().subdir(STATE_DIR) {
            let _ = state.remove_dir("partial");
            let _ = self.root.dir().remove_dir(STATE_DIR);
        }
    }
}

/// The staging directory: `at` (see [`make_staging_at`]) or `ROOT/.haul/partial`.
fn make_staging_for(root: &Root, at: Option<&Path>) -> Result<Arc<Dir>, ReceiveError> {
    match at {
        Some(at) => make_staging_at(root, at),
        None => make_staging(root),
    }
}

/// Opens (making it if missing, mode 0700) a staging directory apart from
/// the root: the operator's path (symlinks on the way are followed, not
/// the last component), this user's alone, on the root's filesystem.
fn make_staging_at(root: &Root, at: &Path) -> Result<Arc<Dir>, ReceiveError> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(at)
        .map_err(|e| ReceiveError::io("create", at, e))?;
    let dir = Dir::open_path_nofollow(at).map_err(|e| ReceiveError::io("open", at, e))?;
    let meta = dir.meta().map_err(|e| ReceiveError::io("stat", at, e))?;
    let shown = || at.display().to_string();
    if !meta.is_mine() {
        return Err(ReceiveError::ForeignState(shown()));
    }
    if meta.permissions() & 0o077 != 0 && dir.set_mode(0o700).is_err() {
        return Err(ReceiveError::ForeignState(shown()));
    }
    let root_meta = root
        .dir()
        .meta()
        .map_err(|e| ReceiveError::io("stat", root.path(), e))?;
    if meta.dev != root_meta.dev {
        return Err(ReceiveError::StagingElsewhere {
            staging: shown(),
            root: root.path().display().to_string(),
        });
    }
    Ok(Arc::new(dir))
}

/// Removes the first component of `comps` beneath `base` that is there and
/// is a regular file (nothing is followed); whether one was removed. A
/// directory that took its place meanwhile stays.
fn replace_non_dir_on_the_way(base: &Dir, comps: &[&str]) -> bool {
    let mut held: Option<Dir> = None;
    for c in comps {
        let dir = held.as_ref().unwrap_or(base);
        match dir.stat(c) {
            Ok(Some(m)) if m.is_dir() => match dir.subdir(c) {
                Ok(next) => held = Some(next),
                Err(_) => return false,
            },
            Ok(Some(m)) if m.is_file() => {
                return dir.unlink(c).is_ok() || matches!(dir.stat(c), Ok(Some(m)) if m.is_dir());
            }
            // A symlink stays (it may be the operator's, to another disk)
            // and the entry fails, naming it.
            Ok(Some(_) | None) | Err(_) => return false,
        }
    }
    false
}

/// Opens (making it if missing) `ROOT/.haul/partial` beneath the root.
/// Both must be this user's and nobody else's to write: in a root others
/// can write (a shared upload area, a DEST under `/tmp`), a `.haul` planted
/// beforehand could hold hard links or FIFOs under the staging names.
fn make_staging(root: &Root) -> Result<Arc<Dir>, ReceiveError> {
    let mut foreign = None;
    let dir = root.make_dirs_from(
        root.dir(),
        &[],
        &[STATE_DIR, "partial"],
        0o700,
        &mut |i, dir, _| match dir.meta() {
            // Ours: made private if an older run left it open.
            Ok(m) if m.is_mine() => {
                if m.permissions() & 0o077 != 0 && dir.set_mode(0o700).is_err() {
                    foreign.get_or_insert(i);
                }
            }
            _ => {
                foreign.get_or_insert(i);
            }
        },
    )?;
    if let Some(i) = foreign {
        let comps = [STATE_DIR, "partial"];
        return Err(ReceiveError::ForeignState(root.show(&comps[..=i])));
    }
    Ok(Arc::new(dir))
}

/// Numbers the temporary names of links being made.
static LINK_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The quick check of what `found` holds at `place`: the same file (size and
/// mtime), with the entry's permission bits `mode` applied (with `sync_mode`) when only they differ
/// (as `rsync -a`: a mode tightened at the source must not stay loose here);
/// a file whose mode cannot be set is not up to date (it is sent again).
fn up_to_date(
    found: Option<&Meta>,
    place: &Place,
    entry: &Entry,
    sync_mode: bool,
    rule: SkipRule,
    mode: u32,
) -> bool {
    match found {
        // `--ignore-existing`: whatever is there is left exactly as it is
        // (not even its mode is touched), as the dry run says.
        Some(st) if rule.ignore_existing && st.is_file() => true,
        Some(st) if same_file(st, entry) => {
            // As for a received file: set-id bits only with the owner or
            // group they go with (`AttrWriter::mode_of`).
            // A file with other hard links is not changed in place (they
            // may be outside the root): it is sent again and renamed over.
            // The mode is set on the very file that was checked again.
            !sync_mode
                || st.permissions() == mode
                || place
                    .dir
                    .chmod_file_if(&place.name, mode, |m| m.nlink == 1 && same_file(m, entry))
                    .unwrap_or(false)
        }
        // Another version, kept by the client's rule (`--ignore-existing`,
        // `--size-only`, `-u`): left exactly as it is.
        Some(st) => {
            st.is_file()
                && crate::quick_check::kept(crate::quick_check::Held::stat(st), entry, rule)
        }
        _ => false,
    }
}

/// rsync's quick check: a regular file with the entry's size and mtime.
fn same_file(st: &Meta, entry: &Entry) -> bool {
    st.is_file() && crate::quick_check::same_version(crate::quick_check::Held::stat(st), entry)
}

#[cfg(test)]
mod tests;

/// A directory where the source has a file or symlink: removed when empty
/// (as rsync does); a non-empty one is [`ReceiveError::DirInTheWay`].
fn clear_empty_dir(place: &Place, rel: &str) -> Result<(), ReceiveError> {
    match place.dir.remove_dir(&place.name) {
        Ok(()) => Ok(()),
        Err(e)
            if e.raw_os_error() == Some(libc::ENOTEMPTY)
                || e.raw_os_error() == Some(libc::EEXIST) =>
        {
            Err(ReceiveError::DirInTheWay(rel.to_owned()))
        }
        Err(e) => Err(ReceiveError::io("replace", &place.shown(), e)),
    }
}
