//! A file being received: verified chunks, resume log, commit.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use haul_proto::{Digest, Entry};
use haul_root::{Dir, Meta};

use crate::attrs::{AttrWriter, Target};
use crate::backup::{Backups, Kept};
use crate::chunks::{read_file_chunk, ChunkSink, ChunkSource, VerifiedChunk};
use crate::dir_cache::DirId;
use crate::hash::{chunk_digest, root_from_digests, valid_chunk_size, PieceHasher, MAX_CHUNKS};
use crate::receive_error::ReceiveError;

const MAGIC: &[u8; 8] = b"HAULPRT1";
const HEADER_LEN: usize = 8 + 8 + 4 + 8 + 4 + 32;
const RECORD_LEN: usize = 36;

/// What happened to one received chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkVerdict {
    /// Digest matched; written and logged.
    Good,
    /// Digest did not match; nothing was written. Ask for it again.
    Bad,
}

#[derive(Debug)]
struct State {
    /// Resume log; `None` for single-chunk files, which simply start over.
    log: Option<File>,
    digests: Vec<Option<Digest>>,
    /// Each chunk's pieces' digests ([`PartialFile::piece`]), for the
    /// content-hash record; not logged (a resumed file's record is kept at
    /// its chunk size).
    pieces: Vec<Option<Vec<Digest>>>,
}

/// Directories whose entries changed (renames into them), by path relative
/// to the root, fsynced in one pass when the last session on the destination ends.
pub(crate) type DirtyDirs = Arc<Mutex<HashSet<String>>>;

/// Where a received file goes: its directory, held (resolved beneath the
/// root), and its name there.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    pub(crate) dir: Arc<Dir>,
    pub(crate) dir_id: DirId,
    /// The directory's path relative to the root (`""`: the root).
    pub(crate) dir_rel: String,
    pub(crate) name: OsString,
    /// The root's path, for messages only.
    pub(crate) root_path: Arc<Path>,
}

impl Place {
    /// The final path, for messages only (made when one is needed).
    pub(crate) fn shown(&self) -> PathBuf {
        let mut p = self.root_path.to_path_buf();
        if !self.dir_rel.is_empty() {
            p.push(&self.dir_rel);
        }
        p.push(&self.name);
        p
    }
}

/// Where a multi-chunk file stages: `<id>.part` and its resume log
/// `<id>.state` in the held `ROOT/.haul/partial`.
#[derive(Debug, Clone)]
pub(crate) struct Staging {
    pub(crate) dir: Arc<Dir>,
    pub(crate) part: String,
    pub(crate) state: String,
    /// The staging directory's path, for messages only.
    pub(crate) shown: PathBuf,
}

/// A file being received into its staging name.
#[derive(Debug)]
pub struct PartialFile {
    entry: Entry,
    place: Place,
    /// The named staging file (its directory and name); `None` for an
    /// anonymous `O_TMPFILE`, which has no name until published.
    staged_as: Option<(Arc<Dir>, OsString)>,
    /// The resume log's directory and name (multi-chunk files).
    log_at: Option<(Arc<Dir>, String)>,
    part: File,
    state: Mutex<State>,
    resumed_bytes: u64,
    dirty: DirtyDirs,
    /// Applies the entry's owner, group and xattrs at commit.
    attrs: Arc<AttrWriter>,
    /// Renamed into place: a later offer of the same path starts afresh.
    published: AtomicBool,
    /// The rename (or link) into place succeeded.
    in_place: AtomicBool,
    /// Held while publishing: a session racing the publish waits for its
    /// outcome instead of seeing it half done.
    publishing: Mutex<()>,
    /// Device of the staged data, recorded by `seal` (`u64::MAX`: not yet).
    device: AtomicU64,
    /// Called when a chunk verifies (readers of a file still being received).
    wakers: Wakers,
    /// Its session let it go unfinished (the sender failed it): readers
    /// waiting for chunks that will not come get an error instead.
    abandoned: AtomicBool,
    /// What was at its final name when it was prepared (`-i`).
    replaced: std::sync::OnceLock<Meta>,
}

/// Callbacks for readers waiting on chunks still to verify.
#[derive(Default)]
struct Wakers(Mutex<Vec<Arc<dyn Fn() + Send + Sync>>>);

impl std::fmt::Debug for Wakers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().map(|w| w.len()).unwrap_or(0);
        write!(f, "{n} waker(s)")
    }
}

/// `.NAME.<pid>-<n>.haul`: a name beside `name` that no other transfer
/// uses (the name part is shortened to keep within `NAME_MAX`).
fn unique_sibling(name: &std::ffi::OsStr) -> OsString {
    let n = STAGING_SEQ.fetch_add(1, Ordering::Relaxed);
    let name = name.to_string_lossy();
    let mut short = String::new();
    for c in name.chars() {
        if short.len() + c.len_utf8() > 200 {
            break;
        }
        short.push(c);
    }
    OsString::from(format!(".{short}.{}-{n}.haul", std::process::id()))
}

/// Whether `/proc/self/fd` exists (needed to link an `O_TMPFILE` into place).
static PROC_FD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Makes single-chunk staging names unique within this process.
static STAGING_SEQ: AtomicU64 = AtomicU64::new(0);

impl PartialFile {
    /// A single-chunk file: no resume log, no sharing. Staged as an anonymous
    /// `O_TMPFILE` in the final directory, or where that is unavailable under
    /// a name unique to this transfer beside the final name, created with `O_EXCL`.
    pub(crate) fn open_small(
        entry: Entry,
        place: Place,
        dirty: DirtyDirs,
        attrs: Arc<AttrWriter>,
    ) -> Result<Self, ReceiveError> {
        if !valid_chunk_size(entry.chunk_size) || entry.chunk_count() > 1 {
            return Err(ReceiveError::BadOffer(format!(
                "{}: bad chunk size {}",
                entry.path, entry.chunk_size
            )));
        }
        // Created with its final permission bits: no chmod at commit when
        // the umask leaves them alone (nothing reopens this file).
        let mode = (entry.mode & 0o777) | 0o200;
        // Best: an anonymous file in the final directory (O_TMPFILE), linked
        // into place at publish. Nothing is ever visible before it verified,
        // and a crash leaves nothing behind.
        let anonymous = PROC_FD
            .get_or_init(|| Path::new("/proc/self/fd").is_dir())
            .then(|| place.dir.tmpfile(mode));
        if let Some(Ok(part)) = anonymous {
            sized(&part, &entry, &attrs, &place.shown())?;
            return Ok(Self::small(entry, place, part, dirty, attrs, None));
        }
        let (part, name) = loop {
            let candidate = unique_sibling(&place.name);
            match place.dir.create_new(&candidate, mode) {
                Ok(f) => break (f, candidate),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(ReceiveError::io("create", &place.shown(), e)),
            }
        };
        sized(&part, &entry, &attrs, &place.shown())?;
        let dir = place.dir.clone();
        Ok(Self::small(
            entry,
            place,
            part,
            dirty,
            attrs,
            Some((dir, name)),
        ))
    }

    fn small(
        entry: Entry,
        place: Place,
        part: File,
        dirty: DirtyDirs,
        attrs: Arc<AttrWriter>,
        staged_as: Option<(Arc<Dir>, OsString)>,
    ) -> Self {
        let count = entry.chunk_count() as usize;
        Self {
            entry,
            place,
            staged_as,
            log_at: None,
            part,
            state: Mutex::new(State {
                log: None,
                digests: vec![None; count],
                pieces: vec![None; count],
            }),
            resumed_bytes: 0,
            dirty,
            attrs,
            published: AtomicBool::new(false),
            in_place: AtomicBool::new(false),
            publishing: Mutex::new(()),
            replaced: std::sync::OnceLock::new(),
            device: AtomicU64::new(u64::MAX),
            wakers: Wakers::default(),
            abandoned: AtomicBool::new(false),
        }
    }

    pub(crate) fn open(
        entry: Entry,
        version: &str,
        place: Place,
        staging: Staging,
        dirty: DirtyDirs,
        attrs: Arc<AttrWriter>,
    ) -> Result<Self, ReceiveError> {
        if !valid_chunk_size(entry.chunk_size) {
            return Err(ReceiveError::BadOffer(format!(
                "chunk size {} is not a power of two between 1 KiB and 64 MiB",
                entry.chunk_size
            )));
        }
        if entry.size.div_ceil(u64::from(entry.chunk_size)) > MAX_CHUNKS * 16 {
            return Err(ReceiveError::BadOffer(format!(
                "{} bytes in {}-byte chunks is too many chunks",
                entry.size, entry.chunk_size
            )));
        }
        let count = entry.chunk_count() as usize;
        // Messages name the file it becomes, never haul's staging directory
        // (except where that directory itself is at fault: ForeignState).
        let part_path = place.shown();
        let part = open_locked(&staging, &staging.part, &part_path, &entry.path)?;
        let existing_len = part
            .metadata()
            .map_err(|e| ReceiveError::io("stat", &part_path, e))?
            .len();
        let mut digests = vec![None; count];
        let mut resumed_bytes = 0;
        let log = if count <= 1 {
            // Nothing worth resuming: one chunk is sent whole or not at all.
            if existing_len > 0 {
                part.set_len(0)
                    .map_err(|e| ReceiveError::io("truncate", &part_path, e))?;
                let _ = staging.dir.unlink(&staging.state);
            }
            None
        } else {
            let (log, resumed) =
                open_log(&entry, version, &part, &staging, &part_path, &mut digests)?;
            resumed_bytes = resumed;
            if resumed_bytes == 0 && existing_len > 0 {
                part.set_len(0)
                    .map_err(|e| ReceiveError::io("truncate", &part_path, e))?;
            }
            Some(log)
        };
        sized(&part, &entry, &attrs, &part_path)?;
        let log_at = log
            .is_some()
            .then(|| (staging.dir.clone(), staging.state.clone()));
        Ok(Self {
            entry,
            place,
            staged_as: Some((staging.dir.clone(), OsString::from(&staging.part))),
            log_at,
            part,
            state: Mutex::new(State {
                log,
                pieces: vec![None; digests.len()],
                digests,
            }),
            resumed_bytes,
            dirty,
            attrs,
            published: AtomicBool::new(false),
            in_place: AtomicBool::new(false),
            publishing: Mutex::new(()),
            replaced: std::sync::OnceLock::new(),
            device: AtomicU64::new(u64::MAX),
            wakers: Wakers::default(),
            abandoned: AtomicBool::new(false),
        })
    }

    /// Makes the staged data durable (fsync).
    pub fn sync(&self) -> Result<(), ReceiveError> {
        self.part
            .sync_all()
            .map_err(|e| ReceiveError::io("fsync", &self.shown_path(), e))
    }

    /// The path errors name: the file it will become (the user's path,
    /// never where haul stages it).
    fn shown_path(&self) -> PathBuf {
        self.place.shown()
    }

    /// Removes the staging file and resume log (nothing is left of an
    /// anonymous file once it is closed).
    fn remove_staged(&self) {
        if let Some((dir, name)) = &self.log_at {
            let _ = dir.unlink(name);
        }
        if let Some((dir, name)) = &self.staged_as {
            let _ = dir.unlink(name);
        }
    }

    /// Its receiving session let it go unfinished: a relay's readers
    /// waiting for its chunks fail instead of waiting for ever.
    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::Release);
        let wakers = self.wakers.0.lock().map(|w| w.clone()).unwrap_or_default();
        for wake in wakers {
            wake();
        }
    }

    /// A session receives it again after one abandoned it.
    pub(crate) fn reclaim(&self) {
        self.abandoned.store(false, Ordering::Release);
    }

    /// True once [`PartialFile::abandon`] was called (and not reclaimed).
    pub fn is_abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Acquire)
    }

    /// True once renamed into place.
    pub fn is_published(&self) -> bool {
        self.published.load(Ordering::Acquire)
    }

    /// Device of the staged data (group commit syncs one filesystem only).
    pub fn device(&self) -> Option<u64> {
        match self.device.load(Ordering::Relaxed) {
            u64::MAX => {
                use std::os::unix::fs::MetadataExt;
                self.part.metadata().ok().map(|m| m.dev())
            }
            dev => Some(dev),
        }
    }

    /// The entry being received.
    pub fn entry(&self) -> &Entry {
        &self.entry
    }

    /// Bytes that were already verified when this file was (re)opened.
    pub fn resumed_bytes(&self) -> u64 {
        self.resumed_bytes
    }

    /// Verified chunks within `first..end`, with their digests.
    pub fn have(&self, first: u32, end: u32) -> Vec<(u32, Digest)> {
        let Ok(state) = self.state.lock() else {
            return Vec::new();
        };
        (first..end)
            .filter_map(|i| {
                state
                    .digests
                    .get(i as usize)
                    .copied()
                    .flatten()
                    .map(|d| (i, d))
            })
            .collect()
    }

    /// Verifies `data` as chunk `index` against `digest`; writes it only if good.
    pub fn write_chunk(
        &self,
        index: u32,
        data: &[u8],
        digest: &Digest,
    ) -> Result<ChunkVerdict, ReceiveError> {
        if index >= self.entry.chunk_count() || data.len() != self.entry.chunk_len(index) as usize {
            return Err(ReceiveError::BadOffer(format!(
                "chunk {index} of {} has the wrong index or length",
                self.entry.path
            )));
        }
        let mut pieces = Vec::new();
        let piece = self.piece();
        match VerifiedChunk::check_keeping(&self.entry, index, data, digest, piece, &mut pieces) {
            Some(chunk) => self
                .put_keeping(&chunk, pieces)
                .map(|()| ChunkVerdict::Good),
            None => Ok(ChunkVerdict::Bad),
        }
    }

    /// The piece size its chunks' digests are kept at for the content-hash
    /// record ([`crate::hash_cache::piece_for`]; the chunk size for a file
    /// too small to be cached).
    pub fn piece(&self) -> u32 {
        if self.entry.size < crate::hash_cache::MIN_SIZE {
            return self.entry.chunk_size;
        }
        crate::hash_cache::piece_for(self.entry.size, self.entry.chunk_size)
    }

    /// [`ChunkSink::put`], keeping the chunk's `pieces` digests (from
    /// [`VerifiedChunk::check_keeping`] at [`PartialFile::piece`]).
    pub fn put_keeping(
        &self,
        chunk: &VerifiedChunk<'_>,
        pieces: Vec<Digest>,
    ) -> Result<(), ReceiveError> {
        self.put(chunk)?;
        self.keep_pieces(chunk.index(), pieces);
        Ok(())
    }

    fn keep_pieces(&self, index: u32, pieces: Vec<Digest>) {
        if let Ok(mut state) = self.state.lock() {
            if let Some(slot) = state.pieces.get_mut(index as usize) {
                *slot = Some(pieces);
            }
        }
    }

    /// Writes chunk `index` of a source that sends no digests (FTP, HTTP,
    /// S3...): its digest is computed here, logged for resume, and becomes
    /// part of the file's BLAKE3. Returns the digest.
    pub fn write_received_chunk(&self, index: u32, data: &[u8]) -> Result<Digest, ReceiveError> {
        if index >= self.entry.chunk_count() || data.len() != self.entry.chunk_len(index) as usize {
            return Err(ReceiveError::BadOffer(format!(
                "chunk {index} of {} has the wrong index or length",
                self.entry.path
            )));
        }
        let (cs, size) = (self.entry.chunk_size, self.entry.size);
        let mut hasher = PieceHasher::new(index, cs, size, self.piece());
        hasher.update(data);
        let (digest, pieces) = hasher.finalize();
        self.store_chunk(index, data, digest)?;
        self.keep_pieces(index, pieces);
        Ok(digest)
    }

    /// Writes part of chunk `index` (`at` bytes into the chunk) for a source
    /// that sends no digests, without logging it: call
    /// [`PartialFile::finish_chunk`] once every byte of the chunk is written.
    pub fn write_piece(&self, index: u32, at: u32, data: &[u8]) -> Result<(), ReceiveError> {
        let end = u64::from(at) + data.len() as u64;
        if index >= self.entry.chunk_count() || end > u64::from(self.entry.chunk_len(index)) {
            return Err(ReceiveError::BadOffer(format!(
                "piece of chunk {index} of {} goes past the chunk",
                self.entry.path
            )));
        }
        let offset = u64::from(index) * u64::from(self.entry.chunk_size) + u64::from(at);
        self.part
            .write_all_at(data, offset)
            .map_err(|e| ReceiveError::io("write", &self.shown_path(), e))
    }

    /// Records chunk `index`, whose bytes [`PartialFile::write_piece`] wrote,
    /// with the digests computed as they arrived
    /// ([`crate::hash::PieceHasher`] at [`PartialFile::piece`]): the chunk's
    /// is logged for resume and becomes part of the file's BLAKE3, its
    /// pieces' go into the file's content-hash record.
    pub fn finish_chunk(
        &self,
        index: u32,
        (digest, pieces): (Digest, Vec<Digest>),
    ) -> Result<(), ReceiveError> {
        if index >= self.entry.chunk_count() {
            return Err(ReceiveError::BadOffer(format!(
                "chunk {index} of {} does not exist",
                self.entry.path
            )));
        }
        self.log_chunk(index, digest)?;
        self.keep_pieces(index, pieces);
        Ok(())
    }

    /// Reads staged bytes at `offset` (to verify a whole-file checksum).
    pub fn read_staged_at(&self, buf: &mut [u8], offset: u64) -> Result<(), ReceiveError> {
        self.part
            .read_exact_at(buf, offset)
            .map_err(|e| ReceiveError::io("read", &self.shown_path(), e))
    }

    /// Throws the staged data and its resume log away (the source changed or
    /// failed a whole-file check): the next attempt starts from zero.
    pub fn discard(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.digests.iter_mut().for_each(|d| *d = None);
            state.pieces.iter_mut().for_each(|p| *p = None);
        }
        self.remove_staged();
    }

    fn store_chunk(&self, index: u32, data: &[u8], actual: Digest) -> Result<(), ReceiveError> {
        let offset = u64::from(index) * u64::from(self.entry.chunk_size);
        if self.attrs.sparse(&self.entry) {
            // A staging file not resumed holds nothing where no chunk was
            // written yet: its zeros need no write; a resumed one may hold
            // an earlier try's bytes, so they are punched.
            let punch = self.resumed_bytes > 0;
            haul_root::write_sparse_at(&self.part, data, offset, punch)
        } else {
            self.part.write_all_at(data, offset)
        }
        .map_err(|e| ReceiveError::io("write", &self.shown_path(), e))?;
        self.log_chunk(index, actual)
    }

    fn log_chunk(&self, index: u32, actual: Digest) -> Result<(), ReceiveError> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| ReceiveError::BadOffer("internal lock poisoned".into()))?;
        if let Some(log) = state.log.as_mut() {
            let mut rec = [0u8; RECORD_LEN];
            rec[..4].copy_from_slice(&index.to_be_bytes());
            rec[4..].copy_from_slice(&actual);
            log.write_all(&rec)
                .map_err(|e| ReceiveError::io("write", &self.shown_path(), e))?;
        }
        state.digests[index as usize] = Some(actual);
        drop(state);
        let wakers = self.wakers.0.lock().map(|w| w.clone()).unwrap_or_default();
        for wake in wakers {
            wake();
        }
        Ok(())
    }

    /// Checks the whole-file hash against `sender_root`, then sets mode and
    /// mtime, fsyncs, and renames into place. Returns the file's BLAKE3.
    pub fn commit(&self, sender_root: &Digest) -> Result<Digest, ReceiveError> {
        self.commit_keeping(sender_root, None)
    }

    /// [`PartialFile::commit`], keeping what it replaces as `backups` say.
    pub fn commit_keeping(
        &self,
        sender_root: &Digest,
        backups: Option<&Backups>,
    ) -> Result<Digest, ReceiveError> {
        let root = self.seal(sender_root)?;
        self.part
            .sync_all()
            .map_err(|e| ReceiveError::io("fsync", &self.shown_path(), e))?;
        self.publish_keeping(backups)?;
        Ok(root)
    }

    /// First half of a commit: checks the whole-file hash against the
    /// sender's and sets mode and mtime. The data still has to be made durable
    /// (fsync, or one `syncfs` for a batch) before [`PartialFile::publish`].
    pub fn seal(&self, sender_root: &Digest) -> Result<Digest, ReceiveError> {
        self.seal_checked(Some(sender_root))
    }

    /// [`PartialFile::seal`] for a source that offers no BLAKE3: the root is
    /// computed from the chunks as received (the caller verifies the size
    /// and any checksum the source offers before publishing).
    pub fn seal_received(&self) -> Result<Digest, ReceiveError> {
        self.seal_checked(None)
    }

    fn seal_checked(&self, sender_root: Option<&Digest>) -> Result<Digest, ReceiveError> {
        if self.is_published() {
            // Wait for a publish in progress to end either way (before the
            // state lock: `publish` takes the two in that order).
            drop(self.publishing.lock());
        }
        let state = self
            .state
            .lock()
            .map_err(|_| ReceiveError::BadOffer("internal lock poisoned".into()))?;
        let digests: Option<Vec<Digest>> = state.digests.iter().copied().collect();
        let Some(digests) = digests else {
            return Err(ReceiveError::Incomplete(self.entry.path.clone()));
        };
        let root = root_from_digests(&digests, self.entry.chunk_size, self.entry.size)
            .ok_or_else(|| ReceiveError::Incomplete(self.entry.path.clone()))?;
        // Committed already by another session sharing this staging (a
        // resumed transfer racing the one it resumes): the same verified
        // file is in place, so this commit succeeds too.
        if self.in_place.load(Ordering::Acquire) && sender_root.is_none_or(|r| *r == root) {
            return Ok(root);
        }
        if sender_root.is_some_and(|r| *r != root) {
            self.remove_staged();
            return Err(ReceiveError::RootMismatch(self.entry.path.clone()));
        }
        let p = || self.shown_path();
        // The staged file must hold exactly the verified bytes.
        let meta = self
            .part
            .metadata()
            .map_err(|e| ReceiveError::io("stat", &p(), e))?;
        if meta.len() != self.entry.size || self.is_published() {
            return Err(ReceiveError::Incomplete(self.entry.path.clone()));
        }
        {
            use std::os::unix::fs::MetadataExt;
            self.device.store(meta.dev(), Ordering::Relaxed);
        }
        // Owner and group first: chown clears set-id bits, which the chmod
        // below then sets — only when the owner is the sender's too (never
        // a peer's set-id bits on a file owned by whoever runs this).
        self.attrs
            .apply(self.entry.attrs.as_deref(), Target::File(&self.part))
            .map_err(|e| ReceiveError::io("set owner or attributes of", &p(), e))?;
        // Small files are created with their mode already (see `open_small`).
        let mode = self.attrs.mode_of(&self.entry);
        if mode & 0o6000 != 0 || meta.permissions().mode() & 0o7777 != mode {
            self.part
                .set_permissions(fs::Permissions::from_mode(mode))
                .map_err(|e| ReceiveError::io("chmod", &p(), e))?;
        }
        self.part
            .set_modified(self.entry.mtime())
            .map_err(|e| ReceiveError::io("set mtime", &p(), e))?;
        Ok(root)
    }

    /// Notes what was at its final name when it was prepared.
    pub(crate) fn note_replaced(&self, found: Option<Meta>) {
        if let Some(m) = found {
            let _ = self.replaced.set(m);
        }
    }

    /// What was at its final name when it was prepared (`None`: nothing):
    /// what `-i` compares it with.
    pub fn replaced(&self) -> Option<&Meta> {
        self.replaced.get()
    }

    /// Second half of a commit, once the data is durable: the atomic rename
    /// to the final name.
    /// Once in place, publishing again is a no-op (see `seal`).
    pub fn publish(&self) -> Result<(), ReceiveError> {
        self.publish_keeping(None)
    }

    /// [`PartialFile::publish`], keeping what it replaces as `backups` say
    /// (`--backup`: the committing session's own rule, since sessions may
    /// share one staging file).
    pub fn publish_keeping(&self, backups: Option<&Backups>) -> Result<(), ReceiveError> {
        let _one_at_a_time = self.publishing.lock();
        if self.published.swap(true, Ordering::AcqRel) {
            if self.in_place.load(Ordering::Acquire) {
                return Ok(());
            }
            return Err(ReceiveError::Incomplete(self.entry.path.clone()));
        }
        let name = self.place.name.to_str().unwrap_or_default();
        let kept = match backups {
            None => Kept::Nothing,
            Some(b) if b.spares_same_content() && self.replaces_same_content() => Kept::Nothing,
            Some(b) => b
                .keep_replaced(&self.place.dir, name, &self.entry.path)
                .map_err(|e| {
                    ReceiveError::io("back up", &self.place.shown(), std::io::Error::other(e))
                })?,
        };
        // Renamed or linked into the directory held since the offer: one
        // swapped for a symlink meanwhile is not followed.
        let placed = match &self.staged_as {
            None => self.link_into_place(),
            Some((dir, name)) => dir
                .rename(name, &self.place.dir, &self.place.name)
                .map_err(|e| ReceiveError::io("rename", &self.place.shown(), e)),
        };
        if let (Err(_), Kept::Moved, Some(b)) = (&placed, kept, backups) {
            // The old file was moved to its backup: back under its name.
            b.restore(&self.place.dir, name, &self.entry.path);
        }
        placed?;
        self.in_place.store(true, Ordering::Release);
        // The new name becomes durable with the next directory sync. A crash
        // before it loses the name, never integrity: the file is sent again.
        if let Ok(mut dirty) = self.dirty.lock() {
            dirty.insert(self.place.dir_rel.clone());
        }
        if let Some((dir, name)) = &self.log_at {
            let _ = dir.unlink(name);
        }
        self.keep_hashes();
        Ok(())
    }

    /// Whether the regular file at the final name holds exactly what this
    /// staging verified (its size, then its BLAKE3 of one version read now).
    fn replaces_same_content(&self) -> bool {
        let Ok((file, st)) = self.place.dir.open_regular(&self.place.name) else {
            return false;
        };
        if st.size != self.entry.size {
            return false;
        }
        let root = self.state.lock().ok().and_then(|state| {
            let digests: Option<Vec<Digest>> = state.digests.iter().copied().collect();
            root_from_digests(&digests?, self.entry.chunk_size, self.entry.size)
        });
        let Some(root) = root else {
            return false;
        };
        crate::LocalFile::open(file)
            .ok()
            .and_then(|f| crate::content::whole_file(&f).ok())
            .is_some_and(|h| *h.as_bytes() == root)
    }

    /// Keeps the digests every chunk verified against as the file's
    /// content-hash record ([`crate::hash_cache`]): a node so answers a
    /// listing with sums, a `check` or a pull of what it received without
    /// reading it again.
    fn keep_hashes(&self) {
        if self.entry.size < crate::hash_cache::MIN_SIZE {
            return;
        }
        // The pieces' digests when every chunk's are known (none resumed),
        // else the chunks'.
        let (size, digests) = match self.state.lock() {
            Ok(state) => {
                let fine: Option<Vec<Digest>> =
                    state.pieces.iter().try_fold(Vec::new(), |mut all, p| {
                        all.extend_from_slice(p.as_deref()?);
                        Some(all)
                    });
                match fine {
                    Some(fine) => (self.piece(), Some(fine)),
                    None => (
                        self.entry.chunk_size,
                        state.digests.iter().copied().collect::<Option<Vec<_>>>(),
                    ),
                }
            }
            Err(_) => return,
        };
        let Some(digests) = digests else {
            return;
        };
        let Some(root) = root_from_digests(&digests, size, self.entry.size) else {
            return;
        };
        if let Ok(identity) = haul_root::FileIdentity::of(&self.part) {
            crate::hash_cache::fill(&self.part, &identity, size, root, digests);
        }
    }
}

impl PartialFile {
    /// Gives an `O_TMPFILE` its final name: `linkat` when the name is free,
    /// else link under a unique name and rename over the old file (atomic).
    fn link_into_place(&self) -> Result<(), ReceiveError> {
        let io = |e| ReceiveError::io("link", &self.place.shown(), e);
        let (dir, name) = (&self.place.dir, &self.place.name);
        match dir.link_file(&self.part, name) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
        loop {
            let tmp = unique_sibling(name);
            match dir.link_file(&self.part, &tmp) {
                Ok(()) => {
                    return dir.rename(&tmp, dir, name).map_err(|e| {
                        let _ = dir.unlink(&tmp);
                        ReceiveError::io("rename", &self.place.shown(), e)
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io(e)),
            }
        }
    }
}

/// A sparse file's staging file made its full length up front (holes), so
/// chunks of zeros need no write at all and the length is right whatever
/// the last chunk holds.
fn sized(part: &File, entry: &Entry, attrs: &AttrWriter, shown: &Path) -> Result<(), ReceiveError> {
    if !attrs.sparse(entry) {
        return Ok(());
    }
    let len = part
        .metadata()
        .map_err(|e| ReceiveError::io("stat", shown, e))?
        .len();
    if len < entry.size {
        part.set_len(entry.size)
            .map_err(|e| ReceiveError::io("extend", shown, e))?;
    }
    Ok(())
}

/// `flock(LOCK_EX | LOCK_NB)`: `WouldBlock` while another holder has it.
pub(crate) fn lock_exclusive(file: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `file` is an open descriptor.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// How long [`open_locked`] waits for a holder that is finishing (about to
/// publish, or to drop a published file).
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);

/// Opens the staging file `name` in `dir` and locks it: one holder at a time
/// (another process, or a staging this process is publishing). The lock is
/// taken on what was opened, so the name is checked again afterwards: a
/// holder may have renamed that very file into place (published it) before
/// letting go — writing to it now would change a delivered file. Then the
/// name is opened afresh. A filesystem without locks is used without.
fn open_locked(
    staging: &Staging,
    name: &str,
    part_path: &Path,
    rel: &str,
) -> Result<File, ReceiveError> {
    let dir = &staging.dir;
    use std::os::unix::fs::MetadataExt;
    let deadline = std::time::Instant::now() + LOCK_PATIENCE;
    loop {
        let part = open_private(staging, name, part_path)?;
        match lock_exclusive(&part) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if std::time::Instant::now() >= deadline {
                    return Err(ReceiveError::Locked(rel.to_owned()));
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
            // ENOLCK, EOPNOTSUPP, ENOSYS...: no locks here.
            Err(_) => return Ok(part),
        }
        let held = part
            .metadata()
            .map_err(|e| ReceiveError::io("stat", part_path, e))?;
        match dir.stat(name) {
            Ok(Some(named)) if named.dev == held.dev() && named.ino == held.ino() => {
                return Ok(part)
            }
            // Renamed away (published) or replaced meanwhile: open the name again.
            _ if std::time::Instant::now() < deadline => continue,
            _ => return Err(ReceiveError::Locked(rel.to_owned())),
        }
    }
}

/// Opens (creating) a staging file of ours: a regular file with one link,
/// owned by this user (nothing planted: a hard link to a file elsewhere,
/// a FIFO, a device).
/// Errors name `shown` (the file it stages), or the staging file itself
/// when that is what must be removed.
fn open_private(staging: &Staging, name: &str, shown: &Path) -> Result<File, ReceiveError> {
    use std::os::unix::fs::MetadataExt;
    let file = staging
        .dir
        .open_rw(name, 0o600)
        .map_err(|e| ReceiveError::io("stage", shown, e))?;
    let meta = file
        .metadata()
        .map_err(|e| ReceiveError::io("stat", shown, e))?;
    if !meta.is_file() || meta.nlink() != 1 || meta.uid() != haul_root::my_uid() {
        let planted = staging.shown.join(name);
        return Err(ReceiveError::ForeignState(planted.display().to_string()));
    }
    Ok(file)
}

/// Opens the resume log, keeping the recorded chunks that still verify against
/// the partial data, and rewrites it compactly. Returns the log and the bytes kept.
fn open_log(
    entry: &Entry,
    version: &str,
    part: &File,
    staging: &Staging,
    state_path: &Path,
    digests: &mut [Option<Digest>],
) -> Result<(File, u64), ReceiveError> {
    let header = header_bytes(entry, version);
    let mut log = open_private(staging, &staging.state, state_path)?;
    let mut existing = Vec::new();
    log.read_to_end(&mut existing)
        .map_err(|e| ReceiveError::io("read", state_path, e))?;
    let mut resumed_bytes = 0;
    if existing.len() >= HEADER_LEN && existing[..HEADER_LEN] == header[..] {
        let mut buf = Vec::new();
        for rec in existing[HEADER_LEN..].chunks_exact(RECORD_LEN) {
            let index = u32::from_be_bytes([rec[0], rec[1], rec[2], rec[3]]);
            let Some(slot) = digests.get(index as usize) else {
                continue;
            };
            if slot.is_some() {
                continue;
            }
            let mut digest = [0u8; 32];
            digest.copy_from_slice(&rec[4..]);
            let len = entry.chunk_len(index) as usize;
            buf.resize(len, 0);
            let offset = u64::from(index) * u64::from(entry.chunk_size);
            // (A sparse file's staging file is mostly holes: not read.)
            if crate::chunks::read_at(part, entry, &mut buf, offset).is_ok()
                && chunk_digest(&buf, index, entry.chunk_size, entry.size) == digest
            {
                digests[index as usize] = Some(digest);
                resumed_bytes += len as u64;
            }
        }
    }
    let mut fresh = header.to_vec();
    for (i, d) in digests.iter().enumerate() {
        if let Some(d) = d {
            fresh.extend_from_slice(&(i as u32).to_be_bytes());
            fresh.extend_from_slice(d);
        }
    }
    log.set_len(0)
        .map_err(|e| ReceiveError::io("truncate", state_path, e))?;
    log.write_all_at(&fresh, 0)
        .map_err(|e| ReceiveError::io("write", state_path, e))?;
    let log = staging
        .dir
        .open_append(&staging.state)
        .map_err(|e| ReceiveError::io("stage", state_path, e))?;
    Ok((log, resumed_bytes))
}

/// The resume log's header: a log whose header differs (another size, mtime,
/// chunk size, path or source version such as an ETag) is started afresh.
fn header_bytes(entry: &Entry, version: &str) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&entry.size.to_be_bytes());
    h[16..20].copy_from_slice(&entry.chunk_size.to_be_bytes());
    h[20..28].copy_from_slice(&entry.mtime_sec.to_be_bytes());
    h[28..32].copy_from_slice(&entry.mtime_nsec.to_be_bytes());
    let mut id = blake3::Hasher::new();
    id.update(entry.path.as_bytes());
    if !version.is_empty() {
        id.update(b"\0");
        id.update(version.as_bytes());
    }
    h[32..].copy_from_slice(id.finalize().as_bytes());
    h
}

impl ChunkSink for PartialFile {
    /// Writes a verified chunk and logs it for resume.
    fn put(&self, chunk: &VerifiedChunk<'_>) -> Result<(), ReceiveError> {
        if chunk.index() >= self.entry.chunk_count()
            || chunk.data().len() != self.entry.chunk_len(chunk.index()) as usize
        {
            return Err(ReceiveError::BadOffer(format!(
                "chunk {} of {} has the wrong index or length",
                chunk.index(),
                self.entry.path
            )));
        }
        self.store_chunk(chunk.index(), chunk.data(), chunk.digest())
    }
}

/// A file still being received, as a source: its verified chunks are ready
/// (re-read and checked against their logged digests), the others wait.
impl ChunkSource for PartialFile {
    fn read_chunk(
        &self,
        _entry: &Entry,
        index: u32,
        buf: &mut Vec<u8>,
        keep: bool,
    ) -> std::io::Result<crate::ChunkRead> {
        let logged = self
            .state
            .lock()
            .ok()
            .and_then(|s| s.digests.get(index as usize).copied().flatten());
        let logged = match logged {
            Some(d) => d,
            None if self.is_abandoned() => {
                return Err(std::io::Error::other(format!(
                    "{} is no longer being received here (its upstream failed it)",
                    self.entry.path
                )))
            }
            None => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    "chunk not verified yet",
                ))
            }
        };
        let digest = read_file_chunk(&self.part, &self.entry, index, buf, keep)?;
        if digest != logged {
            return Err(std::io::Error::other(format!(
                "chunk {index} of {} changed on disk since it verified",
                self.entry.path
            )));
        }
        Ok(crate::ChunkRead::hashed(digest))
    }

    fn file(&self) -> Option<&File> {
        Some(&self.part)
    }

    /// Verified, or never to be: an abandoned file's readers go on (to an error).
    fn ready(&self, index: u32) -> bool {
        self.is_abandoned()
            || self
                .state
                .lock()
                .map(|s| s.digests.get(index as usize).copied().flatten().is_some())
                .unwrap_or(false)
    }

    fn on_ready(&self, wake: Arc<dyn Fn() + Send + Sync>) {
        if let Ok(mut w) = self.wakers.0.lock() {
            w.push(wake);
        }
    }

    fn abandoned(&self) -> bool {
        self.is_abandoned()
    }
}
