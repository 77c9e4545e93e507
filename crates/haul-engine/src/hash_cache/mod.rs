//! The content-hash cache: BLAKE3 per chunk and per file for files haul
//! read or wrote in full, keyed by the identity of the version hashed, so a
//! file hashed once is not read again to be hashed — by a second push, a
//! `-c` run, `haul check`, a node's listing with sums.
//!
//! Where a record lives: on the file itself as the extended attribute
//! [`XATTR`] (`user.haul.blake3`, a [`Record`] that embeds the identity it
//! was taken at, as XRootD's `user.XrdCks.*` do, so another tool or site can
//! trust it for this file and no other); where the filesystem keeps no user
//! attributes, the file is not haul's to change (another user's, read-only)
//! or the record does not fit, in the store, a directory of records named
//! by device and inode (`$XDG_CACHE_HOME/haul/hashes`, set by the binary
//! through [`configure`]). One store per user rather than one per tree: a
//! tree being sent may be read-only or shared, and haul writes nothing into
//! a source tree but the attribute.
//!
//! When a record is trusted ([`Record::describes`]): device, inode, size and
//! mtime as hashed, the ctime as hashed or the one its own write set
//! (`--ignore-ctime` drops the ctime test, for trees whose ctimes moved
//! while their content did not: restic's and borg's lesson), and git's racy
//! rule. A record is never the last word in a transfer: a receiver verifies
//! every chunk against what arrives, and a sender whose cached digest was
//! refused hashes the file from disk ([`crate::chunks::LocalFile`]). The
//! one place a transfer takes a record alone is the seals of a file a
//! fan-out's node skipped and relays from its own copy
//! ([`crate::ChunkSource::seal_digest`]): they let through one whole
//! version — the record's — or fail the file, as `check` trusts a record;
//! not under `--ignore-ctime`, nor for a striped file.
//!
//! Files smaller than [`MIN_SIZE`] are not cached: reading them costs about
//! what looking a record up does, and setting one moves their ctime.

mod reading;
mod record;
mod store;

use std::fs::File;
use std::path::PathBuf;
use std::sync::{mpsc, Mutex, OnceLock, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use haul_proto::Digest;
use haul_root::identity::TIMESTAMP_GRAIN;
use haul_root::FileIdentity;

pub use reading::{Answer, Finish, Reading};
pub use record::{Record, Stamp};

/// The extended attribute a record is kept in.
pub const XATTR: &str = "user.haul.blake3";

/// Files smaller than this are not cached.
pub const MIN_SIZE: u64 = 64 << 10;

/// The coarsest digests a record keeps: a fan-out's largest piece
/// ([`haul_plan::MAX_PIECE`]), so one record serves pushes (4 MiB chunks,
/// merged from these) and fan-outs of large files alike.
pub const FINE_PIECE: u32 = haul_plan::MAX_PIECE;

/// The deepest fan-out plan whose pieces a record serves: a fan-out cuts a
/// file smaller than `8 · depth` MiB finer than [`FINE_PIECE`]
/// ([`haul_plan::piece_size`]), so a record keeps such files in the pieces
/// a plan this deep would use (64 to 127 digests: a record of 2–4 KiB,
/// which ext4 keeps in the attribute up to about 120 digests, the store
/// beyond); a deeper plan's origin reads and hashes them.
pub const RECORD_DEPTH: usize = 8;

/// The piece size a file of `size` bytes read in `chunk_size` chunks is
/// kept at: the pieces of a fan-out [`RECORD_DEPTH`] hops deep (at most
/// [`FINE_PIECE`]; 64 KiB at least), coarser when a record would otherwise
/// hold more than [`record::MAX_DIGESTS`], never coarser than the chunks
/// read.
pub fn piece_for(size: u64, chunk_size: u32) -> u32 {
    let fewest = size
        .div_ceil(record::MAX_DIGESTS as u64)
        .next_power_of_two()
        .min(u64::from(u32::MAX)) as u32;
    haul_plan::piece_size(size, RECORD_DEPTH)
        .min(FINE_PIECE)
        .max(fewest)
        .min(chunk_size)
}

/// The longest a record's own write on a file may take: its ctime must
/// fall within this of the clock before the write, else the record is
/// taken off again. The record states this window, and a ctime in it counts
/// as the record's own: an edit within it (and the one timestamp tick a
/// coarse clock lags) that also sets the mtime back is not seen — an edit
/// that leaves its new mtime always is. The same kind of limit a coarse
/// timestamp clock puts on any stat-based check.
pub(crate) const STAMP_WINDOW: Duration = Duration::from_millis(5);

/// How the cache is used: the binary's `--no-hash-cache`,
/// `--ignore-ctime` and the store's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Records are looked up and written.
    pub enabled: bool,
    /// A record is trusted whatever the file's ctime.
    pub ignore_ctime: bool,
    /// Records may be set on files themselves (not on a `--read-only`
    /// node's: it writes nothing into its tree, the store only).
    pub on_files: bool,
    /// The store for files that cannot carry their record; none: such
    /// files are not cached.
    pub store: Option<PathBuf>,
}

impl Settings {
    /// On, records on files where they can be, no store.
    pub const DEFAULT: Self = Self {
        enabled: true,
        ignore_ctime: false,
        on_files: true,
        store: None,
    };
}

static SETTINGS: RwLock<Settings> = RwLock::new(Settings::DEFAULT);

/// Sets how the cache is used, for the whole process (one command's flags).
pub fn configure(settings: Settings) {
    if let Ok(mut s) = SETTINGS.write() {
        *s = settings;
    }
}

/// How the cache is used now.
pub fn settings() -> Settings {
    SETTINGS.read().map(|s| s.clone()).unwrap_or(Settings {
        enabled: false,
        ..Settings::DEFAULT
    })
}

fn now() -> Stamp {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (
        i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        d.subsec_nanos(),
    )
}

fn plus((s, ns): Stamp, d: Duration) -> Stamp {
    let total = u64::from(ns) + u64::from(d.subsec_nanos());
    let s = s
        .saturating_add(i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .saturating_add(i64::try_from(total / 1_000_000_000).unwrap_or(0));
    (s, (total % 1_000_000_000) as u32)
}

/// The record for `file` (read through its held descriptor), whose identity
/// now is `identity`, if one is kept and describes it.
pub fn look_up(file: &File, identity: &FileIdentity) -> Option<Record> {
    let settings = settings();
    if !settings.enabled || identity.size < MIN_SIZE {
        return None;
    }
    let trusted = |r: &Record| r.describes(identity, settings.ignore_ctime);
    let mut buf = vec![0u8; 64 << 10];
    let on_file = match haul_root::file_get_xattr(file, XATTR.as_bytes(), &mut buf) {
        Ok(Some(n)) => buf.get(..n).and_then(Record::decode).filter(trusted),
        _ => None,
    };
    // A record on the file as fine as records are kept is the answer;
    // one coarser (set before records kept finer pieces) may have a finer
    // one beside it in the store (too big for the attribute): the finer.
    if on_file
        .as_ref()
        .is_some_and(|r| r.chunk_size <= piece_for(identity.size, u32::MAX))
    {
        return on_file;
    }
    let stored = settings
        .store
        .as_deref()
        .and_then(|dir| store::read(dir, identity, trusted));
    match (on_file, stored) {
        (Some(a), Some(b)) if b.chunk_size < a.chunk_size => Some(b),
        (a, b) => a.or(b),
    }
}

/// Whether `before` → `after` (identities of `file`) is only a record being
/// set on the file by haul: nothing but its ctime moved, and the record on
/// it now was taken at `before` and set then.
pub fn explains(file: &File, before: &FileIdentity, after: &FileIdentity) -> bool {
    if before.ctime == after.ctime || before.size < MIN_SIZE {
        return false;
    }
    let mut buf = vec![0u8; 64 << 10];
    match haul_root::file_get_xattr(file, XATTR.as_bytes(), &mut buf) {
        Ok(Some(n)) => buf
            .get(..n)
            .and_then(Record::decode)
            .is_some_and(|r| r.explains(before, after)),
        _ => false,
    }
}

/// Keeps `root` and the `chunks` digests (`chunk_size` chunks; all of them,
/// or none for a file of one chunk) of `file`, hashed whole at `identity`.
/// Nothing is written when the cache is off, the file is small, it changed
/// since, it is too new to be trusted (racy), or a record that describes it
/// already says the same (a stale one is replaced).
///
/// On the file when it is the caller's own (its owner is this process's
/// user: a node running as root does not write onto its users' files) and
/// the settings allow ([`Settings::on_files`]); else, and where the
/// filesystem refuses, in the store.
pub fn fill(
    file: &File,
    identity: &FileIdentity,
    chunk_size: u32,
    root: Digest,
    chunks: Vec<Digest>,
) {
    let settings = settings();
    if !settings.enabled || identity.size < MIN_SIZE {
        return;
    }
    let count = identity.size.div_ceil(u64::from(chunk_size));
    let chunks = if count <= 1 { Vec::new() } else { chunks };
    if count > 1 && chunks.len() as u64 != count {
        return;
    }
    if plus(identity.mtime, TIMESTAMP_GRAIN) >= now() {
        return;
    }
    if look_up(file, identity).is_some_and(|r| r.chunk_size <= chunk_size && r.root == root) {
        return;
    }
    let mut record = Record {
        chunk_size,
        identity: *identity,
        written: now(),
        stamped: None,
        root,
        chunks,
    };
    if settings.on_files && owned(file) {
        match set_on_file(file, &mut record) {
            Setting::Set | Setting::Changed => return,
            Setting::Refused => {}
            // Kept in the store at the identity its own write left.
            Setting::Slow(after) => record.identity = after,
        }
    }
    record.stamped = None;
    let Ok(current) = FileIdentity::of(file) else {
        return;
    };
    if current != record.identity {
        return;
    }
    if let Some(dir) = &settings.store {
        if let Err(e) = store::write(dir, &record) {
            tracing::debug!("hash cache: cannot write {}: {e}", dir.display());
        }
    }
}

/// Whether `file` belongs to this process's user.
fn owned(file: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    file.metadata()
        .is_ok_and(|m| m.uid() == nix::unistd::geteuid().as_raw())
}

/// How setting a record on the file went.
enum Setting {
    /// It is there, and its write fell in the window it states.
    Set,
    /// The filesystem or the file's permissions refused it.
    Refused,
    /// It is there, but its write was slow (preempted): the ctime it left
    /// is outside the window it states, so it counts only with
    /// `--ignore-ctime` — and, at the identity it left, in the store.
    /// Left in place: taking it off would move the ctime again, under
    /// every reader that has the file open.
    Slow(FileIdentity),
    /// The file changed before the record was set: nothing kept.
    Changed,
}

/// Sets `record` on the file, stating the window its own write falls in:
/// from the clock just before it (less a coarse clock's tick) to
/// [`STAMP_WINDOW`] after.
fn set_on_file(file: &File, record: &mut Record) -> Setting {
    match FileIdentity::of(file) {
        Ok(now) if now == record.identity => {}
        _ => return Setting::Changed,
    }
    record.written = now();
    record.stamped = Some(plus(record.written, STAMP_WINDOW));
    let name = XATTR.as_bytes();
    if haul_root::file_set_xattr(file, name, &record.encode()).is_err() {
        return Setting::Refused;
    }
    let Ok(after) = FileIdentity::of(file) else {
        return Setting::Changed;
    };
    // A coarse clock may leave the ctime where it was (the same tick): the
    // record then describes the file as hashed.
    if after == record.identity || record.explains(&record.identity, &after) {
        return Setting::Set;
    }
    let mut same = after;
    same.ctime = record.identity.ctime;
    if same == record.identity {
        Setting::Slow(after)
    } else {
        Setting::Changed
    }
}

/// Work the cache does off the caller's thread: records kept when a file
/// is closed (a sender's file is often closed on an async task, and a
/// stale record means reading the file whole again).
type Job = Box<dyn FnOnce() + Send>;

fn worker() -> Option<&'static Mutex<mpsc::Sender<Job>>> {
    static WORKER: OnceLock<Option<Mutex<mpsc::Sender<Job>>>> = OnceLock::new();
    WORKER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("haul-hash-cache".into())
                .spawn(move || {
                    for job in rx {
                        job();
                    }
                })
                .ok()
                .map(|_| Mutex::new(tx))
        })
        .as_ref()
}

/// Prunes the store of records unused for a month, at most once a day
/// (`store::prune_if_due`), on a thread of its own that looks again every
/// few hours (a node or daemon runs for months; a command that ends first
/// leaves the rest to a process an hour or more later).
pub fn prune_store_in_background() {
    let settings = settings();
    if !settings.enabled {
        return;
    }
    let Some(dir) = settings.store else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("haul-hash-prune".into())
        .spawn(move || loop {
            match store::prune_if_due(&dir) {
                Some(Ok(p)) if p.removed > 0 => tracing::debug!(
                    "hash cache: removed {} unused records from {} ({} kept)",
                    p.removed,
                    dir.display(),
                    p.kept
                ),
                Some(Err(e)) => {
                    tracing::debug!("hash cache: cannot prune {}: {e}", dir.display())
                }
                _ => {}
            }
            std::thread::sleep(store::PRUNE_EVERY / 4);
        });
}

/// [`fill`] on the cache's own thread: for a caller on an async task (the
/// sender of a striped fan-out's origin, which learns a file's digests only
/// once every stripe of it was sent and confirmed).
pub fn fill_later(
    file: &File,
    identity: &FileIdentity,
    chunk_size: u32,
    root: Digest,
    chunks: Vec<Digest>,
) {
    if !settings().enabled || identity.size < MIN_SIZE {
        return;
    }
    let Ok(file) = file.try_clone() else {
        return;
    };
    let identity = *identity;
    later(Box::new(move || {
        fill(&file, &identity, chunk_size, root, chunks);
    }));
}

/// Runs `job` on the cache's thread (here, if it cannot start).
pub(crate) fn later(job: Job) {
    let job = match worker().and_then(|w| w.lock().ok()) {
        Some(tx) => match tx.send(job) {
            Ok(()) => return,
            Err(mpsc::SendError(job)) => job,
        },
        None => job,
    };
    job();
}

/// Waits (at most `limit`) until every record queued so far is kept: a
/// command calls it before it exits.
pub fn flush(limit: Duration) {
    let (tx, rx) = mpsc::channel();
    later(Box::new(move || {
        let _ = tx.send(());
    }));
    let _ = rx.recv_timeout(limit);
}

/// Hashes for `file` at `identity`: the cached record's, or none. For a
/// caller about to read the file anyway.
pub fn digests(file: &File, identity: &FileIdentity, chunk_size: u32) -> Option<Vec<Digest>> {
    look_up(file, identity)?.digests_for(chunk_size)
}

#[cfg(test)]
mod tests;
