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

/// Removes the records in `dir` unused for `unused_for`, temporary files
/// left by writers that died, and directories left empty. Only names the
/// store itself makes are touched (hexadecimal devices and inodes, and
/// its `.…tmp` files); anything else is left as it is.
pub fn prune(dir: &Path, unused_for: Duration) -> io::Result<Pruned> {
    let now = SystemTime::now();
    let older_than = |meta: &fs::Metadata, limit: Duration| {
        meta.modified()
            .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > limit))
    };
    let hex = |name: &str| !name.is_empty() && name.bytes().all(|b| b.is_ascii_hexdigit());
    let mut done = Pruned::default();
    for sub in fs::read_dir(dir)? {
        let sub = sub?;
        let Some(name) = sub.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !hex(&name) || !sub.file_type()?.is_dir() {
            continue;
        }
        let mut left = 0u64;
        for rec in fs::read_dir(sub.path())? {
            let rec = rec?;
            let name = rec.file_name();
            let Some(name) = name.to_str() else {
                left += 1;
                continue;
            };
            let meta = rec.metadata()?;
            let tmp = name.starts_with('.') && name.ends_with(".tmp");
            let remove = meta.is_file()
                && ((hex(name) && older_than(&meta, unused_for))
                    || (tmp && older_than(&meta, TMP_LEFT)));
            if remove && fs::remove_file(rec.path()).is_ok() {
                done.removed += 1;
                continue;
            }
            if hex(name) {
                done.kept += 1;
            }
            left += 1;
        }
        if left == 0 {
            // Another process may be writing into it right now: then it
            // is not empty and stays.
            let _ = fs::remove_dir(sub.path());
        }
    }
    Ok(done)
}

/// [`prune`] with [`UNUSED_FOR`], if the store was not pruned in the last
/// [`PRUNE_EVERY`] (a stamp file in it says when it was; set first, so
/// processes starting together do not all prune). `None` when not due or
/// the store does not exist.
pub fn prune_if_due(dir: &Path) -> Option<io::Result<Pruned>> {
    let stamp = dir.join(PRUNED);
    let due = match fs::metadata(&stamp) {
        Ok(meta) => meta.modified().is_ok_and(|t| {
            SystemTime::now()
                .duration_since(t)
                .is_ok_and(|age| age > PRUNE_EVERY)
        }),
        Err(_) => dir.is_dir(),
    };
    if !due {
        return None;
    }
    let marked = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&stamp)
        .and_then(|f| f.set_modified(SystemTime::now()));
    if let Err(e) = marked {
        return Some(Err(e));
    }
    Some(prune(dir, UNUSED_FOR))
}

/// Keeps `record` for its file.
pub fn write(dir: &Path, record: &Record) -> io::Result<()> {
    let (sub, path) = place(dir, record.identity.dev, record.identity.ino);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&sub)?;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let tmp = sub.join(format!(
        ".{:x}.{}-{}.tmp",
        record.identity.ino,
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
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
    }
}
