//! Staging files of abandoned transfers, removed once nothing has touched
//! them for a while (`haul serve --partial-ttl`, `--prune-partials`, and
//! the daemon's `partial_ttl`).
//!
//! A staging directory holds `<id>.part` (the data) and `<id>.state` (its
//! resume log), `<id>` 32 hex digits ([`crate::partial`]). Only such names
//! are looked at: anything else in an operator's staging directory is
//! left alone. A `.part` is removed only when
//! - its writer's lock is free: writers hold `flock(LOCK_EX)` on it while
//!   they receive ([`crate::ReceiveError::Locked`]), so a file in use, by
//!   this process or another, is kept whatever its age;
//! - it and its log were last written at least the TTL ago;
//! - its name still names the file locked (a writer may have published it
//!   or started afresh meanwhile).
//!
//! The log goes first, then the data, both while the lock is held: a
//! writer opens the log only once it holds the data's lock, and a writer
//! waiting for that lock sees afterwards that the name it opened is gone
//! and opens it afresh (see `open_locked`). Every removal is an `unlinkat`
//! of one name relative to the held staging directory.
//!
//! A `.state` without its `.part` (a crash between a publish and the log's
//! removal) is removed on its age alone; a writer starting that very file
//! at that instant loses its resume log, never a verified byte.

use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use haul_proto::STATE_DIR;
use haul_root::{Dir, Meta, Root};

use crate::partial::lock_exclusive;

/// What a prune freed and what it kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Staging files (data and logs) removed.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Stale staging files kept because a writer holds their lock.
    pub in_use: u64,
}

impl Pruned {
    /// Adds another prune's counts.
    pub fn add(&mut self, other: Pruned) {
        self.files += other.files;
        self.bytes += other.bytes;
        self.in_use += other.in_use;
    }
}

/// The two files of a staged transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StagingKind {
    /// `<id>.part`: the data.
    Part,
    /// `<id>.state`: the resume log.
    State,
}

/// `<id>` and the kind of a staging file's name, `None` for any other name.
fn staging_name(name: &OsStr) -> Option<(&str, StagingKind)> {
    let name = name.to_str()?;
    let (id, kind) = match name.rsplit_once('.')? {
        (id, "part") => (id, StagingKind::Part),
        (id, "state") => (id, StagingKind::State),
        _ => return None,
    };
    let hex = id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then_some((id, kind))
}

/// The data file of staging id `id`.
fn part_of(id: &str) -> String {
    format!("{id}.part")
}

/// A file's modification time.
fn mtime_of(meta: &Meta) -> SystemTime {
    let nanos = Duration::new(0, meta.mtime_nsec.min(999_999_999));
    if meta.mtime >= 0 {
        UNIX_EPOCH + Duration::from_secs(meta.mtime.unsigned_abs()) + nanos
    } else {
        UNIX_EPOCH
    }
}

/// Whether a file last written at `newest` is at least `ttl` old at `now`
/// (a time in the future is not stale).
fn is_stale(newest: SystemTime, now: SystemTime, ttl: Duration) -> bool {
    now.duration_since(newest).is_ok_and(|age| age >= ttl)
}

/// What a staging directory holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Staged {
    /// Partial data files (`<id>.part`).
    pub files: u64,
    /// Their sizes.
    pub bytes: u64,
}

/// Counts the partial data files in the held staging `dir` and their
/// bytes (a file gone meanwhile is not counted).
pub fn staged(dir: &Dir) -> io::Result<Staged> {
    let mut staged = Staged::default();
    for name in dir.names()? {
        if !matches!(staging_name(&name), Some((_, StagingKind::Part))) {
            continue;
        }
        if let Some(meta) = dir.stat(&name)?.filter(Meta::is_file) {
            staged.files += 1;
            staged.bytes += meta.size;
        }
    }
    Ok(staged)
}

/// Removes the staging files in the held `dir` that nothing has written
/// for `ttl` and no writer holds (see the module docs).
pub fn prune_staging(dir: &Dir, ttl: Duration, now: SystemTime) -> io::Result<Pruned> {
    let mut pruned = Pruned::default();
    let names = dir.names()?;
    for name in &names {
        let Some((id, kind)) = staging_name(name) else {
            continue;
        };
        let state = format!("{id}.state");
        let result = match kind {
            StagingKind::Part => prune_part(dir, name, &state, ttl, now),
            StagingKind::State
                if names
                    .iter()
                    .any(|n| n.as_os_str() == OsStr::new(&part_of(id))) =>
            {
                continue
            }
            StagingKind::State => prune_orphan_log(dir, &state, ttl, now),
        };
        match result {
            Ok(p) => pruned.add(p),
            // Gone meanwhile (published, or another prune): nothing to do.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("cannot prune staging file {}: {e}", name.to_string_lossy()),
        }
    }
    Ok(pruned)
}

/// One `<id>.part` and its log: removed when stale and unlocked.
fn prune_part(
    dir: &Dir,
    part: &OsStr,
    state: &str,
    ttl: Duration,
    now: SystemTime,
) -> io::Result<Pruned> {
    let (file, held) = dir.open_regular(part)?;
    let log = dir.stat(state)?.filter(Meta::is_file);
    let newest = log
        .map(|l| mtime_of(&l))
        .map_or(mtime_of(&held), |l| l.max(mtime_of(&held)));
    if !is_stale(newest, now, ttl) {
        return Ok(Pruned::default());
    }
    match lock_exclusive(&file) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            return Ok(Pruned {
                in_use: 1,
                ..Pruned::default()
            })
        }
        // A filesystem without locks: its age alone decides.
        Err(_) => {}
    }
    // The name must still be the file locked: else a writer published it
    // (or started afresh) between the look and the lock.
    match dir.stat(part)? {
        Some(named) if (named.dev, named.ino) == (held.dev, held.ino) => {}
        _ => return Ok(Pruned::default()),
    }
    let mut pruned = Pruned::default();
    if let Some(log) = log {
        dir.unlink(state)?;
        pruned.files += 1;
        pruned.bytes += log.size;
    }
    dir.unlink(part)?;
    pruned.files += 1;
    pruned.bytes += held.size;
    // The lock goes with `file`, after both names are gone.
    drop(file);
    Ok(pruned)
}

/// A resume log whose data file is gone: removed when stale.
fn prune_orphan_log(dir: &Dir, state: &str, ttl: Duration, now: SystemTime) -> io::Result<Pruned> {
    let Some(meta) = dir.stat(state)?.filter(Meta::is_file) else {
        return Ok(Pruned::default());
    };
    if !is_stale(mtime_of(&meta), now, ttl) {
        return Ok(Pruned::default());
    }
    dir.unlink(state)?;
    Ok(Pruned {
        files: 1,
        bytes: meta.size,
        in_use: 0,
    })
}

/// Prunes the staging directory of a destination that is not open: `staging`
/// when one is given apart (the daemon's `staging`), else `ROOT/.haul/partial`,
/// each opened without following a symlink. Nothing there yet is nothing
/// to prune.
pub fn prune_staging_of(
    root: &Path,
    staging: Option<&Path>,
    ttl: Duration,
    now: SystemTime,
) -> io::Result<Pruned> {
    let dir = match staging {
        Some(at) => Dir::open_path_nofollow(at),
        None => Root::open(root).and_then(|r| r.dir().subdir(STATE_DIR)?.subdir("partial")),
    };
    match dir {
        Ok(dir) => prune_staging(&dir, ttl, now),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Pruned::default()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    const ID: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn only_staging_names_are_considered() {
        let part = format!("{ID}.part");
        assert_eq!(
            staging_name(OsStr::new(&part)),
            Some((ID, StagingKind::Part))
        );
        let state = format!("{ID}.state");
        assert_eq!(
            staging_name(OsStr::new(&state)),
            Some((ID, StagingKind::State))
        );
        for other in [
            "notes.txt",
            "0123.part",
            "0123456789abcdef0123456789abcdeg.part",
            "0123456789abcdef0123456789abcdef.partial",
            ".part",
        ] {
            assert_eq!(staging_name(OsStr::new(other)), None, "{other}");
        }
    }

    #[test]
    fn stale_means_at_least_the_ttl_ago() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let ttl = Duration::from_secs(3600);
        assert!(is_stale(now - ttl, now, ttl));
        assert!(is_stale(now - ttl * 2, now, ttl));
        assert!(!is_stale(now - ttl + Duration::from_secs(1), now, ttl));
        assert!(!is_stale(now + ttl, now, ttl));
    }

    fn staged(dir: &Path, id: &str, len: usize, age: Duration) {
        for (ext, n) in [("part", len), ("state", 100)] {
            let path = dir.join(format!("{id}.{ext}"));
            std::fs::write(&path, vec![7u8; n]).unwrap();
            let f = File::options().write(true).open(&path).unwrap();
            f.set_modified(SystemTime::now() - age).unwrap();
        }
    }

    #[test]
    fn removes_stale_keeps_fresh_locked_and_foreign() {
        let tmp = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(7 * 86_400);
        let old = ttl + Duration::from_secs(60);
        let (stale, fresh, locked) = (
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
            "cccccccccccccccccccccccccccccccc",
        );
        staged(tmp.path(), stale, 5000, old);
        staged(tmp.path(), fresh, 5000, Duration::from_secs(60));
        staged(tmp.path(), locked, 5000, old);
        std::fs::write(tmp.path().join("notes.part.txt"), b"x").unwrap();
        let holder = File::open(tmp.path().join(format!("{locked}.part"))).unwrap();
        lock_exclusive(&holder).unwrap();
        let dir = Dir::open_path_nofollow(tmp.path()).unwrap();

        let pruned = prune_staging(&dir, ttl, SystemTime::now()).unwrap();
        assert_eq!(
            pruned,
            Pruned {
                files: 2,
                bytes: 5100,
                in_use: 1
            }
        );
        let mut left: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                format!("{fresh}.part"),
                format!("{fresh}.state"),
                format!("{locked}.part"),
                format!("{locked}.state"),
                "notes.part.txt".to_string(),
            ]
        );
        // Unlocked, it goes.
        drop(holder);
        let pruned = prune_staging(&dir, ttl, SystemTime::now()).unwrap();
        assert_eq!((pruned.files, pruned.in_use), (2, 0));
    }

    #[test]
    fn a_fresh_log_keeps_old_data_and_an_orphan_log_goes_on_its_age() {
        let tmp = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(3600);
        staged(tmp.path(), ID, 10, ttl * 2);
        let state = tmp.path().join(format!("{ID}.state"));
        File::options()
            .write(true)
            .open(&state)
            .unwrap()
            .set_modified(SystemTime::now())
            .unwrap();
        let dir = Dir::open_path_nofollow(tmp.path()).unwrap();
        assert_eq!(
            prune_staging(&dir, ttl, SystemTime::now()).unwrap(),
            Pruned::default()
        );
        std::fs::remove_file(tmp.path().join(format!("{ID}.part"))).unwrap();
        assert_eq!(
            prune_staging(&dir, ttl, SystemTime::now()).unwrap(),
            Pruned::default()
        );
        let later = SystemTime::now() + ttl;
        assert_eq!(prune_staging(&dir, ttl, later).unwrap().files, 1);
        assert!(!state.exists());
    }

    #[test]
    fn a_missing_staging_directory_is_nothing_to_prune() {
        let tmp = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(1);
        let none = prune_staging_of(tmp.path(), None, ttl, SystemTime::now()).unwrap();
        assert_eq!(none, Pruned::default());
        let apart = tmp.path().join("nope");
        let none = prune_staging_of(tmp.path(), Some(&apart), ttl, SystemTime::now()).unwrap();
        assert_eq!(none, Pruned::default());
    }
}
