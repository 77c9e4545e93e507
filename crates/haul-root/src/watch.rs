//! What changed beneath a root since a moment (`haul serve --watch`): a
//! journal of the names created, written, renamed into place or whose
//! metadata changed, fed by inotify, so a node answers "what is new since
//! my last listing" (a downstream daemon's run) without walking its tree.
//!
//! Every directory beneath the root is watched through its own held
//! descriptor (`/proc/self/fd/N`, never a path from the top), the root's
//! state directory (`.haul`) excepted. Each change gets the next sequence
//! number; a [`Cursor`] is an epoch and a sequence number, and
//! [`Watch::since`] answers with the names changed after it — or `None`
//! when it cannot be sure, and the caller walks the whole tree as it would
//! without a watch:
//! - the cursor is from another epoch: another run of this node, or one
//!   before the journal was reset (the kernel's event queue overflowed, a
//!   directory was renamed — every name under it moved —, a watch could not
//!   be added: `fs.inotify.max_user_watches`);
//! - the journal no longer reaches back to it (it keeps the last
//!   [`KEEP`] changes).
//!
//! A directory that appears is watched first and then read, and everything
//! in it is journaled: what was written into it before its watch existed
//! is not missed. Removals are not journaled (a listing of what changed
//! names what is there). The journal is advisory: the caller stats what it
//! names, as a walk would.
//!
//! inotify through `rustix` (already the crate's way to the kernel); the
//! `notify` crate would add a thread model and event debouncing haul does
//! not want, and it watches by path.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex, MutexGuard};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

use crate::dir::{errno, proc_fd};
use crate::{Dir, Root};

/// Changes the journal keeps; a cursor older than the last `KEEP` is
/// answered with `None` (a whole listing).
pub const KEEP: usize = 1 << 20;

/// Directories watched at most before the journal gives up (each is a
/// kernel watch, bounded by `fs.inotify.max_user_watches` too).
const MAX_DIRS: usize = 1 << 20;

/// A place in a watch's journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// Which run of the journal (another after a reset or a restart).
    pub epoch: u64,
    /// Changes up to and including this one are behind it.
    pub seq: u64,
}

/// What events a directory's watch reports. (Not `DONT_FOLLOW`: the
/// name watched is the descriptor's `/proc/self/fd` link, which must be
/// followed to the directory it holds.)
const EVENTS: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR)
    .union(WatchFlags::EXCL_UNLINK);

struct Journal {
    epoch: u64,
    /// The last change's number.
    seq: u64,
    /// The oldest change kept is `first_kept + 1`… (cursors at or after
    /// `first_kept` are answerable).
    first_kept: u64,
    changes: VecDeque<(u64, String)>,
    /// Each watched directory's path beneath the root ("" for the root).
    dirs: HashMap<i32, String>,
    /// Why the journal stopped (a watch could not be added): then every
    /// answer is `None`.
    broken: Option<String>,
}

impl Journal {
    fn note(&mut self, path: String) {
        self.seq += 1;
        self.changes.push_back((self.seq, path));
        while self.changes.len() > KEEP {
            if let Some((seq, _)) = self.changes.pop_front() {
                self.first_kept = seq;
            }
        }
    }

    /// Forgets everything: no cursor handed out so far is answered.
    fn reset(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        self.first_kept = self.seq;
        self.changes.clear();
    }
}

/// A root watched; cheap to clone (the watching thread holds its own).
#[derive(Clone)]
pub struct Watch {
    journal: Arc<Mutex<Journal>>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").finish_non_exhaustive()
    }
}

impl Watch {
    /// Watches every directory beneath `root` but `skip` (its state
    /// directory's name), on a thread of its own for the process's life.
    pub fn start(root: &Root, skip: &str) -> io::Result<Watch> {
        let fd = inotify::init(CreateFlags::CLOEXEC).map_err(errno)?;
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()) << 32
            // Never 0: a node without a watch hands out epoch 0.
            | 1;
        let journal = Arc::new(Mutex::new(Journal {
            epoch,
            seq: 0,
            first_kept: 0,
            changes: VecDeque::new(),
            dirs: HashMap::new(),
            broken: None,
        }));
        let top = root.dir().reopen()?;
        let watcher = Watcher {
            fd,
            root: top,
            skip: skip.to_owned(),
            journal: journal.clone(),
        };
        {
            let mut j = lock(&journal);
            if let Err(e) = watcher.add_tree(&mut j, &watcher.root.reopen()?, String::new(), false)
            {
                return Err(io::Error::new(e.kind(), format!("cannot watch it: {e}")));
            }
        }
        std::thread::Builder::new()
            .name("haul-watch".into())
            .spawn(move || watcher.run())?;
        Ok(Watch { journal })
    }

    /// Where the journal is now: a listing taken from here on sees every
    /// change before it.
    pub fn cursor(&self) -> Cursor {
        let j = lock(&self.journal);
        Cursor {
            epoch: j.epoch,
            seq: j.seq,
        }
    }

    /// The paths (beneath the root, each once, in the order they first
    /// changed) that changed after `cursor`; `None` when that cannot be
    /// told (see the module docs).
    pub fn since(&self, cursor: Cursor) -> Option<Vec<String>> {
        self.since_and_cursor(cursor).0
    }

    /// [`Watch::since`] and [`Watch::cursor`] at one moment: a listing of
    /// those paths, handed out with that cursor, misses no change.
    pub fn since_and_cursor(&self, cursor: Cursor) -> (Option<Vec<String>>, Cursor) {
        let j = lock(&self.journal);
        let now = Cursor {
            epoch: j.epoch,
            seq: j.seq,
        };
        (Self::changed(&j, cursor), now)
    }

    fn changed(j: &Journal, cursor: Cursor) -> Option<Vec<String>> {
        if j.broken.is_some()
            || cursor.epoch != j.epoch
            || cursor.seq < j.first_kept
            || cursor.seq > j.seq
        {
            return None;
        }
        let mut seen = std::collections::HashSet::new();
        Some(
            j.changes
                .iter()
                .filter(|(seq, _)| *seq > cursor.seq)
                .filter(|(_, p)| seen.insert(p.as_str()))
                .map(|(_, p)| p.clone())
                .collect(),
        )
    }

    /// Why the journal stopped, if it did (said once by the caller).
    pub fn broken(&self) -> Option<String> {
        lock(&self.journal).broken.clone()
    }
}

fn lock(j: &Mutex<Journal>) -> MutexGuard<'_, Journal> {
    j.lock().unwrap_or_else(|e| e.into_inner())
}

struct Watcher {
    fd: OwnedFd,
    root: Dir,
    skip: String,
    journal: Arc<Mutex<Journal>>,
}

fn joined(dir: &str, name: &OsStr) -> Option<String> {
    let name = std::str::from_utf8(name.as_bytes()).ok()?;
    Some(match dir.is_empty() {
        true => name.to_owned(),
        false => format!("{dir}/{name}"),
    })
}

impl Watcher {
    /// Watches `dir` (at `path`) and every directory beneath it; with
    /// `note`, journals every name found (a directory that just appeared).
    fn add_tree(&self, j: &mut Journal, dir: &Dir, path: String, note: bool) -> io::Result<()> {
        if j.dirs.len() >= MAX_DIRS {
            return Err(io::Error::other(format!(
                "more than {MAX_DIRS} directories"
            )));
        }
        let wd = inotify::add_watch(&self.fd, proc_fd(dir.fd()), EVENTS).map_err(|e| {
            let e = errno(e);
            match e.raw_os_error() {
                Some(28) => io::Error::other(
                    "the kernel's limit on watches was reached (raise the sysctl fs.inotify.max_user_watches)",
                ),
                _ => e,
            }
        })?;
        j.dirs.insert(wd, path.clone());
        for name in dir.names()? {
            if path.is_empty() && name.as_bytes() == self.skip.as_bytes() {
                continue;
            }
            let Some(child) = joined(&path, &name) else {
                continue;
            };
            if note {
                j.note(child.clone());
            }
            if let Ok(Some(meta)) = dir.stat(&name) {
                if meta.is_dir() {
                    // Gone or replaced meanwhile: its own events say so.
                    if let Ok(sub) = dir.subdir(&name) {
                        self.add_tree(j, &sub, child, note)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn run(self) {
        let mut buf = vec![MaybeUninit::<u8>::uninit(); 64 << 10];
        let mut reader = inotify::Reader::new(self.fd.as_fd(), &mut buf);
        loop {
            let (wd, events, name) = match reader.next() {
                Ok(event) => (
                    event.wd(),
                    event.events(),
                    event
                        .file_name()
                        .map(|n| OsStr::from_bytes(n.to_bytes()).to_owned()),
                ),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    lock(&self.journal).broken = Some(format!("reading its events failed: {e}"));
                    return;
                }
            };
            let mut j = lock(&self.journal);
            if j.broken.is_some() {
                return;
            }
            if let Err(e) = self.apply(&mut j, wd, events, name.as_deref()) {
                j.broken = Some(e.to_string());
                return;
            }
        }
    }

    fn apply(
        &self,
        j: &mut Journal,
        wd: i32,
        events: ReadFlags,
        name: Option<&OsStr>,
    ) -> io::Result<()> {
        if events.contains(ReadFlags::QUEUE_OVERFLOW) {
            // Events were lost: nothing handed out can be answered, and a
            // directory made meanwhile may have no watch yet.
            j.reset();
            j.dirs.clear();
            return self.add_tree(j, &self.root.reopen()?, String::new(), false);
        }
        if events.contains(ReadFlags::IGNORED) {
            j.dirs.remove(&wd);
            return Ok(());
        }
        let Some(dir) = j.dirs.get(&wd).cloned() else {
            return Ok(());
        };
        if events.intersects(ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF) {
            if dir.is_empty() {
                j.reset();
                j.broken = Some("the served directory itself was removed or moved".into());
            }
            return Ok(());
        }
        let Some(name) = name else { return Ok(()) };
        if dir.is_empty() && name.as_bytes() == self.skip.as_bytes() {
            return Ok(());
        }
        let Some(path) = joined(&dir, name) else {
            return Ok(());
        };
        let is_dir = events.contains(ReadFlags::ISDIR);
        if is_dir && events.intersects(ReadFlags::MOVED_FROM | ReadFlags::MOVED_TO) {
            // Every name beneath it moved: the watches' paths are stale.
            j.reset();
            j.dirs.clear();
            return self.add_tree(j, &self.root.reopen()?, String::new(), false);
        }
        if events.contains(ReadFlags::MOVED_FROM) {
            return Ok(());
        }
        j.note(path.clone());
        if is_dir && events.contains(ReadFlags::CREATE) {
            let Some(parent) = self.open(&dir)? else {
                return Ok(());
            };
            if let Ok(sub) = parent.subdir(name) {
                self.add_tree(j, &sub, path, true)?;
            }
        }
        Ok(())
    }

    /// The directory at `path` beneath the root, if it is still there.
    fn open(&self, path: &str) -> io::Result<Option<Dir>> {
        let mut dir = self.root.reopen()?;
        for comp in path.split('/').filter(|c| !c.is_empty()) {
            match dir.subdir(comp) {
                Ok(sub) => dir = sub,
                Err(_) => return Ok(None),
            }
        }
        Ok(Some(dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// `since(c)` once it holds `want` (events arrive on their own thread).
    fn eventually(w: &Watch, c: Cursor, want: &[&str]) -> Vec<String> {
        let started = Instant::now();
        loop {
            let got = w.since(c).expect("answerable");
            if want.iter().all(|p| got.iter().any(|g| g == p)) {
                return got;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{got:?}, want {want:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn names_what_changed_since_a_cursor_and_nothing_before_it() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("old/deep")).unwrap();
        std::fs::write(d.path().join("old/deep/a"), b"a").unwrap();
        std::fs::create_dir(d.path().join(".haul")).unwrap();
        let root = Root::open(d.path()).unwrap();
        let w = Watch::start(&root, ".haul").unwrap();
        let c0 = w.cursor();
        assert_eq!(w.since(c0), Some(vec![]));
        // A file written in a watched directory, one renamed into place.
        std::fs::write(d.path().join("old/deep/b"), b"b").unwrap();
        std::fs::write(d.path().join("old/.tmp"), b"c").unwrap();
        std::fs::rename(d.path().join("old/.tmp"), d.path().join("old/c")).unwrap();
        // A new directory tree made at once: all of it, its watch or not.
        std::fs::create_dir_all(d.path().join("new/x/y")).unwrap();
        std::fs::write(d.path().join("new/x/y/f"), b"f").unwrap();
        // The state directory is nobody's business.
        std::fs::write(d.path().join(".haul/part"), b"p").unwrap();
        let got = eventually(&w, c0, &["old/deep/b", "old/c", "new", "new/x/y/f"]);
        assert!(!got.iter().any(|p| p.starts_with(".haul")), "{got:?}");
        assert!(!got.iter().any(|p| p == "old/deep/a"), "{got:?}");
        // Each once, however often it changed.
        let before = w.cursor();
        std::fs::write(d.path().join("old/deep/b"), b"bb").unwrap();
        eventually(&w, before, &["old/deep/b"]);
        let c1 = w.cursor();
        std::fs::write(d.path().join("new/x/y/g"), b"g").unwrap();
        let after = eventually(&w, c1, &["new/x/y/g"]);
        assert_eq!(after, ["new/x/y/g"], "only what came after c1");
        let all = w.since(c0).unwrap();
        assert_eq!(all.iter().filter(|p| *p == "old/deep/b").count(), 1);
        // Another epoch, or a cursor from the future: not answerable.
        assert_eq!(
            w.since(Cursor {
                epoch: c0.epoch + 1,
                seq: 0
            }),
            None
        );
        assert_eq!(
            w.since(Cursor {
                epoch: c0.epoch,
                seq: u64::MAX
            }),
            None
        );
    }

    #[test]
    fn a_renamed_directory_resets_the_journal_and_keeps_watching() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        let root = Root::open(d.path()).unwrap();
        let w = Watch::start(&root, ".haul").unwrap();
        let c0 = w.cursor();
        std::fs::rename(d.path().join("a"), d.path().join("z")).unwrap();
        let started = Instant::now();
        while w.since(c0).is_some() {
            assert!(started.elapsed() < Duration::from_secs(10), "no reset");
            std::thread::sleep(Duration::from_millis(10));
        }
        // Watching again, under the new names.
        let c1 = w.cursor();
        std::fs::write(d.path().join("z/b/f"), b"f").unwrap();
        assert_eq!(eventually(&w, c1, &["z/b/f"]), ["z/b/f"]);
    }
}
