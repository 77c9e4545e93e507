//! The store: records of files that cannot carry their own, one file per
//! record at `DIR/<device>/<inode>` (hexadecimal), written whole under a
//! temporary name and renamed into place, so a reader sees a whole record
//! or none. The directory is the user's own (`0700`); a record embeds the
//! identity it describes, so one left behind by a deleted file is never
//! trusted for the file that reuses its inode.
//!
//! Records left behind are pruned: a record's mtime says when it was last
//! used (moved forward when a trusted record is read and its mtime is more
//! than [`MARK_AFTER`] old, so a use costs a write at most once a day), and
//! at most once every [`PRUNE_EVERY`] a process removes the records unused
//! for [`UNUSED_FOR`] ([`prune_if_due`], on a thread of its own).

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use haul_root::FileIdentity;

use super::record::{Record, MAX_DIGESTS};

/// The largest record file read (a record of the most digests).
const MAX_RECORD: u64 = 116 + 32 * MAX_DIGESTS as u64;

fn place(dir: &Path, dev: u64, ino: u64) -> (PathBuf, PathBuf) {
    let sub = dir.join(format!("{dev:x}"));
    let file = sub.join(format!("{ino:x}"));
    (sub, file)
}

/// Records unused for this long are removed by [`prune`].
pub const UNUSED_FOR: Duration = Duration::from_secs(30 * 86_400);

/// A store is pruned at most this often (by any process of its user).
pub const PRUNE_EVERY: Duration = Duration::from_secs(86_400);

/// A used record's mtime is moved forward once it is this old.
pub const MARK_AFTER: Duration = Duration::from_secs(86_400);

/// The file whose mtime says when the store was last pruned.
const PRUNED: &str = ".pruned";

/// A temporary file older than this was left by a writer that died.
const TMP_LEFT: Duration = Duration::from_secs(3600);

/// The record kept for the file with `identity`'s device and inode, if
/// `trusted` takes it (it is then marked used).
pub fn read(
    dir: &Path,
    identity: &FileIdentity,
    trusted: impl Fn(&Record) -> bool,
) -> Option<Record> {
    let (_, path) = place(dir, identity.dev, identity.ino);
    let mut file = fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_RECORD + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    let record = Record::decode(&bytes).filter(|r| trusted(r))?;
    let now = SystemTime::now();
    let stale_mark = file
        .metadata()
        .and_then(|m| m.modified())
        .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > MARK_AFTER));
    if stale_mark {
        // The store's files are the user's own: setting a time needs no
        // write access to them.
        let _ = file.set_modified(now);
    }
    Some(record)
}

/// What [`prune`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    /// Records (and temporary files left by dead writers) removed.
    pub removed: u64,
    /// Records kept.
    pub kept: u64,
}

/// Whether `name` is one the store gives a record: a device or inode in
/// lowercase hexadecimal.
fn record_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `name` is a writer's temporary file (`.<inode>.<pid>-<n>.tmp`).
fn temporary_name(name: &str) -> bool {
    name.len() > 5 && name.starts_with('.') && name.ends_with(".tmp")
}

/// Removes the records in `dir` unused for `unused_for`, temporary files
/// left by writers that died, and device directories left empty. Only
/// names the store itself makes are touched, and only in a store that is a
/// real directory of this process's user (haul run as root with another
/// user's cache directory prunes nothing). An entry that is gone or cannot
/// be read is passed over: another process may be pruning or writing. A
/// record written or used between the look at its mtime and its removal
/// may go too: it costs one hashing of its file.
pub fn prune(dir: &Path, unused_for: Duration) -> io::Result<Pruned> {
    own_directory(dir)?;
    let now = SystemTime::now();
    let older_than = |meta: &fs::Metadata, limit: Duration| {
        meta.modified()
            .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > limit))
    };
    let mut done = Pruned::default();
    for sub in fs::read_dir(dir)?.flatten() {
        let name = sub.file_name();
        let is_dir = sub.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir || !name.to_str().is_some_and(record_name) {
            continue;
        }
        let Ok(entries) = fs::read_dir(sub.path()) else {
            continue;
        };
        let mut left = 0u64;
        for rec in entries.flatten() {
            let name = rec.file_name();
            let name = name.to_str().unwrap_or("");
            let Ok(meta) = rec.metadata() else {
                continue;
            };
            let record = record_name(name);
            let remove = meta.is_file()
                && ((record && older_than(&meta, unused_for))
                    || (temporary_name(name) && older_than(&meta, TMP_LEFT)));
            if remove && fs::remove_file(rec.path()).is_ok() {
                done.removed += 1;
                continue;
            }
            if record && meta.is_file() {
                done.kept += 1;
            }
            left += 1;
        }
        if left == 0 {
            // A writer may be creating a file in it right now: then it is
            // not empty and stays (and a writer that finds it gone makes
            // it again).
            let _ = fs::remove_dir(sub.path());
        }
    }
    Ok(done)
}

/// Refuses a store that is a symlink or not this process's user's.
fn own_directory(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is not a directory of this user's", dir.display()),
        ));
    }
    Ok(())
}

/// [`prune`] with [`UNUSED_FOR`], if the store was not pruned in the last
/// [`PRUNE_EVERY`] (a stamp file in it says when it was; a stamp in the
/// future is not believed). The stamp is a lease: set first to an hour
/// before the prune is due again, so a process that is cut off while it
/// prunes leaves the rest to one an hour or more later, and to now once
/// the prune is done. `None` when not due or there is no store.
pub fn prune_if_due(dir: &Path) -> Option<io::Result<Pruned>> {
    let stamp = dir.join(PRUNED);
    let now = SystemTime::now();
    let due = match fs::symlink_metadata(&stamp).and_then(|m| m.modified()) {
        Ok(t) => match now.duration_since(t) {
            Ok(age) => age > PRUNE_EVERY,
            Err(ahead) => ahead.duration() > TMP_LEFT,
        },
        Err(_) => dir.is_dir(),
    };
    if !due {
        return None;
    }
    if let Err(e) = own_directory(dir) {
        return Some(Err(e));
    }
    let lease = now.checked_sub(PRUNE_EVERY).map_or(now, |t| t + TMP_LEFT);
    if let Err(e) = set_stamp(&stamp, lease) {
        return Some(Err(e));
    }
    let pruned = prune(dir, UNUSED_FOR);
    if pruned.is_ok() {
        let _ = set_stamp(&stamp, SystemTime::now());
    }
    Some(pruned)
}

fn set_stamp(stamp: &Path, at: SystemTime) -> io::Result<()> {
    create_private(stamp)?.set_modified(at)
}

/// Creates (or truncates) a file only this user reads, never through a
/// symlink.
fn create_private(path: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Makes a device's directory (and the store), only this user's.
fn make_dir(sub: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(sub)
}

/// Keeps `record` for its file.
pub fn write(dir: &Path, record: &Record) -> io::Result<()> {
    let (sub, path) = place(dir, record.identity.dev, record.identity.ino);
    make_dir(&sub)?;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let tmp = sub.join(format!(
        ".{:x}.{}-{}.tmp",
        record.identity.ino,
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = match create_private(&tmp) {
            // A pruner removed the directory it found empty: once more.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                make_dir(&sub)?;
                create_private(&tmp)?
            }
            other => other?,
        };
        f.write_all(&record.encode())?;
        fs::rename(&tmp, &path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn record(ino: u64) -> Record {
        let data = vec![7u8; 100_000];
        Record {
            chunk_size: 1 << 20,
            identity: FileIdentity {
                dev: 0x801,
                ino,
                size: data.len() as u64,
                mtime: (1_700_000_000, 0),
                ctime: (1_700_000_000, 5),
            },
            written: (1_700_000_100, 0),
            stamped: None,
            root: *blake3::hash(&data).as_bytes(),
            chunks: Vec::new(),
        }
    }

    fn age(path: &Path, days: u64) {
        let then = SystemTime::now() - Duration::from_secs(days * 86_400);
        fs::File::open(path).unwrap().set_modified(then).unwrap();
    }

    fn mtime(path: &Path) -> SystemTime {
        fs::metadata(path).unwrap().modified().unwrap()
    }

    #[test]
    fn a_trusted_read_marks_a_record_used_at_most_once_a_day() {
        let tmp = tempfile::tempdir().unwrap();
        let r = record(0x10);
        write(tmp.path(), &r).unwrap();
        let (_, path) = place(tmp.path(), 0x801, 0x10);
        age(&path, 10);
        let old = mtime(&path);
        // Not trusted: not returned, not marked.
        assert!(read(tmp.path(), &r.identity, |_| false).is_none());
        assert_eq!(mtime(&path), old);
        assert_eq!(read(tmp.path(), &r.identity, |_| true), Some(r.clone()));
        let marked = mtime(&path);
        assert!(marked > old + Duration::from_secs(9 * 86_400));
        // Used again within the day: no write.
        age(&path, 0);
        let fresh = mtime(&path);
        assert!(read(tmp.path(), &r.identity, |_| true).is_some());
        assert_eq!(mtime(&path), fresh);
    }

    #[test]
    fn pruning_removes_unused_records_and_dead_writers_leftovers_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        for ino in [1, 2, 3] {
            write(dir, &record(ino)).unwrap();
        }
        let at = |ino: u64| place(dir, 0x801, ino).1;
        age(&at(1), 40);
        age(&at(2), 20);
        let sub = dir.join("801");
        fs::write(sub.join(".5.999-0.tmp"), b"cut").unwrap();
        age(&sub.join(".5.999-0.tmp"), 1);
        fs::write(sub.join(".6.999-1.tmp"), b"being written").unwrap();
        fs::write(sub.join("NOTES"), b"not ours").unwrap();
        age(&sub.join("NOTES"), 400);
        // A device whose every record is unused goes whole.
        let mut other = record(9);
        other.identity.dev = 0x802;
        write(dir, &other).unwrap();
        age(&place(dir, 0x802, 9).1, 31);

        let done = prune(dir, UNUSED_FOR).unwrap();
        assert_eq!(
            done,
            Pruned {
                removed: 3,
                kept: 2
            }
        );
        assert!(!at(1).exists() && at(2).exists() && at(3).exists());
        assert!(!sub.join(".5.999-0.tmp").exists());
        assert!(sub.join(".6.999-1.tmp").exists());
        assert!(sub.join("NOTES").exists());
        assert!(!dir.join("802").exists());
        assert_eq!(read(dir, &record(2).identity, |_| true), Some(record(2)));
    }

    #[test]
    fn a_store_is_pruned_at_most_once_a_day() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("hashes");
        assert!(prune_if_due(&dir).is_none(), "no store yet");
        write(&dir, &record(1)).unwrap();
        age(&place(&dir, 0x801, 1).1, 31);
        assert_eq!(
            prune_if_due(&dir).map(Result::unwrap),
            Some(Pruned {
                removed: 1,
                kept: 0
            })
        );
        write(&dir, &record(2)).unwrap();
        age(&place(&dir, 0x801, 2).1, 31);
        assert!(prune_if_due(&dir).is_none(), "pruned less than a day ago");
        age(&dir.join(PRUNED), 2);
        assert_eq!(
            prune_if_due(&dir).map(Result::unwrap),
            Some(Pruned {
                removed: 1,
                kept: 0
            })
        );
        // A stamp from a clock that was ahead is not believed.
        let ahead = SystemTime::now() + Duration::from_secs(10 * 86_400);
        set_stamp(&dir.join(PRUNED), ahead).unwrap();
        assert!(prune_if_due(&dir).is_some());
    }

    #[test]
    fn a_store_that_is_a_symlink_is_not_pruned() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        write(&real, &record(1)).unwrap();
        age(&place(&real, 0x801, 1).1, 40);
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(prune(&link, UNUSED_FOR).is_err());
        assert!(matches!(prune_if_due(&link), Some(Err(_))));
        assert!(place(&real, 0x801, 1).1.exists());
    }
}
