//! What changed beneath a root since a moment (`haul serve --watch`): a
//! journal of the names created, written, truncated, renamed into place or
//! whose metadata changed, fed by inotify, so a node answers "what is new
//! since my last listing" (a downstream daemon's run) without walking its
//! tree.
//!
//! Every directory beneath the root is watched through a descriptor of its
//! own (`/proc/self/fd/N`, opened from the root one component at a time,
//! no symlink followed), the root's state directory (`.haul`, any case)
//! excepted. Each change gets the next
//! sequence number (a path changed again moves to the end: the journal
//! holds each path once); a [`Cursor`] is an epoch and a sequence number,
//! and [`Watch::since`] answers with the paths changed after it — or `None`
//! when it cannot be sure, and the caller walks the whole tree as it would
//! without a watch:
//! - the cursor is from another epoch: another run of this node (a random
//!   epoch each start), or one before the journal was reset (the kernel's
//!   event queue overflowed);
//! - the journal no longer reaches back to it (it keeps the [`KEEP`] paths
//!   changed last);
//! - the watch stopped: a directory could not be watched because the
//!   kernel's limit was reached (`fs.inotify.max_user_watches`), or its
//!   events could not be read. A directory that vanished before its watch,
//!   or that this user may not read, is left out as a walk would fail it.
//!
//! A directory that appears (made, or moved in from outside the root) is
//! watched first and then read, and everything in it is journaled: what was
//! written into it before its watch existed is not missed. A directory
//! renamed within the root keeps its watches under the new name and
//! everything beneath it is journaled under it; one moved out loses its
//! watches. Removals are not journaled (a listing of what changed names
//! what is there). The journal is advisory: the caller stats what it names,
//! as a walk would. What inotify does not see is not journaled: writes
//! through a memory mapping, and changes another machine makes on a
//! network filesystem; a daemon's hourly whole listing finds those.
//!
//! The watching thread holds the journal's lock only to add to it, never
//! while it reads a directory.
//!
//! inotify through `rustix` (already the crate's way to the kernel); the
//! `notify` crate would add a thread model and event debouncing haul does
//! not want, and it watches by path.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex, MutexGuard};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

use crate::dir::{errno, proc_fd};
use crate::{Dir, Root};

/// Paths the journal keeps; a cursor from before the oldest kept change is
/// answered with `None` (a whole listing).
pub const KEEP: usize = 1 << 18;

/// Directories watched at most before the watch stops (each is a kernel
/// watch, bounded by `fs.inotify.max_user_watches` too).
const MAX_DIRS: usize = 1 << 20;

/// A place in a watch's journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// Which run of the journal (another after a reset or a restart).
    pub epoch: u64,
    /// Changes up to and including this one are behind it.
    pub seq: u64,
}

/// What events a directory's watch reports (`MODIFY` too: a write that
/// leaves the file open, a truncation, an mtime set alone). Not
/// `DONT_FOLLOW`: the name watched is the descriptor's `/proc/self/fd`
/// link, which must be followed to the directory it holds.
const EVENTS: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::MODIFY)
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
    /// Cursors at or after this are answerable.
    first_kept: u64,
    /// Each path once, by the number of its last change.
    changes: BTreeMap<u64, String>,
    latest: HashMap<String, u64>,
    /// Why the watch stopped: then every answer is `None`.
    broken: Option<String>,
}

impl Journal {
    fn note(&mut self, path: String) {
        self.seq += 1;
        if let Some(old) = self.latest.insert(path.clone(), self.seq) {
            self.changes.remove(&old);
        }
        self.changes.insert(self.seq, path);
        while self.changes.len() > KEEP {
            if let Some((seq, p)) = self.changes.pop_first() {
                self.latest.remove(&p);
                self.first_kept = seq;
            }
        }
    }

    /// Forgets everything: no cursor handed out so far is answered.
    fn reset(&mut self) {
        self.epoch = self.epoch.wrapping_add(1) | 1;
        self.first_kept = self.seq;
        self.changes.clear();
        self.latest.clear();
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

/// A random epoch for a journal that starts (never 0: a node without a
/// watch hands out epoch 0).
fn random_epoch() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish() | 1
}

impl Watch {
    /// Watches every directory beneath `root` but `skip` (its state
    /// directory's name, any case), on a thread of its own for the
    /// process's life.
    pub fn start(root: &Root, skip: &str) -> io::Result<Watch> {
        let fd = inotify::init(CreateFlags::CLOEXEC).map_err(errno)?;
        let journal = Arc::new(Mutex::new(Journal {
            epoch: random_epoch(),
            seq: 0,
            first_kept: 0,
            changes: BTreeMap::new(),
            latest: HashMap::new(),
            broken: None,
        }));
        let mut watcher = Watcher {
            fd,
            root: root.dir().reopen()?,
            skip: skip.to_owned(),
            journal: journal.clone(),
            dirs: HashMap::new(),
            paths: HashMap::new(),
            touched: Default::default(),
            moved_from: None,
        };
        watcher
            .add_tree(String::new(), None)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot watch it: {e}")))?;
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

    /// The paths (beneath the root, each once, in the order they last
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
        let answerable = j.broken.is_none()
            && cursor.epoch == j.epoch
            && cursor.seq >= j.first_kept
            && cursor.seq <= j.seq;
        let changed = answerable.then(|| {
            j.changes
                .range(cursor.seq.saturating_add(1)..)
                .map(|(_, p)| p.clone())
                .collect()
        });
        (changed, now)
    }

    /// Why the watch stopped, if it did (said once by the caller).
    pub fn broken(&self) -> Option<String> {
        lock(&self.journal).broken.clone()
    }
}

fn lock(j: &Mutex<Journal>) -> MutexGuard<'_, Journal> {
    j.lock().unwrap_or_else(|e| e.into_inner())
}

/// The watching thread's own state.
struct Watcher {
    fd: OwnedFd,
    root: Dir,
    skip: String,
    journal: Arc<Mutex<Journal>>,
    /// Each watched directory's path beneath the root ("" for the root).
    dirs: HashMap<i32, String>,
    /// The same the other way.
    paths: HashMap<String, i32>,
    /// The watches a walk set (a rename's two walks: what neither found
    /// again is dropped).
    touched: std::collections::HashSet<i32>,
    /// A directory just moved away (its cookie and path): the next event
    /// says where to, or that it left the root.
    moved_from: Option<(u32, String)>,
}

fn joined(dir: &str, name: &OsStr) -> Option<String> {
    let name = std::str::from_utf8(name.as_bytes()).ok()?;
    Some(match dir.is_empty() {
        true => name.to_owned(),
        false => format!("{dir}/{name}"),
    })
}

/// Whether `path` is `dir` or beneath it.
fn within(path: &str, dir: &str) -> bool {
    path == dir || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

/// Errors that leave a directory out (as a walk would fail it) rather than
/// stop the watch: it vanished, this user may not read it, or it is no
/// directory any more.
fn left_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied | io::ErrorKind::NotADirectory
    )
}

impl Watcher {
    fn is_state_dir(&self, dir: &str, name: &OsStr) -> bool {
        dir.is_empty() && name.as_bytes().eq_ignore_ascii_case(self.skip.as_bytes())
    }

    /// Watches the directory at `path` and every directory beneath it,
    /// adding to `found` (if given: a directory that just appeared) every
    /// path beneath it. Each directory is opened from the root when its turn
    /// comes (component by component, no symlink followed), so the walk
    /// holds a few descriptors, not one per pending directory. A directory
    /// that vanished or is no directory any more is skipped; one this user
    /// may not read is skipped until its mode changes (its `ATTRIB` event
    /// watches it then); anything else (the kernel's limit, out of
    /// descriptors) stops the watch.
    fn add_tree(&mut self, path: String, mut found: Option<&mut Vec<String>>) -> io::Result<()> {
        let mut stack = vec![path];
        while let Some(path) = stack.pop() {
            if self.dirs.len() >= MAX_DIRS {
                return Err(io::Error::other(format!(
                    "more than {MAX_DIRS} directories"
                )));
            }
            let dir = match self.open(&path)? {
                Some(dir) => dir,
                None if path.is_empty() => {
                    return Err(io::Error::other("the served directory itself is gone"))
                }
                None => continue,
            };
            let wd = match inotify::add_watch(&self.fd, proc_fd(dir.fd()), EVENTS) {
                Ok(wd) => wd,
                Err(e) => {
                    let e = errno(e);
                    if left_out(&e) && !path.is_empty() {
                        continue;
                    }
                    if e.raw_os_error() == Some(28) {
                        return Err(io::Error::other(
                            "the kernel's limit on watches was reached (raise the sysctl fs.inotify.max_user_watches)",
                        ));
                    }
                    return Err(e);
                }
            };
            // Watched only once it could be read: one that cannot be (no
            // search permission) is watched when its mode changes (its
            // parent's ATTRIB).
            let names = match dir.names() {
                Ok(names) => names,
                Err(e) if left_out(&e) && !path.is_empty() => {
                    if !self.dirs.contains_key(&wd) {
                        let _ = inotify::remove_watch(&self.fd, wd);
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.set_dir(wd, path.clone());
            for name in names {
                if self.is_state_dir(&path, &name) {
                    continue;
                }
                let Some(child) = joined(&path, &name) else {
                    continue;
                };
                if let Some(found) = found.as_deref_mut() {
                    found.push(child.clone());
                }
                if matches!(dir.stat(&name), Ok(Some(m)) if m.is_dir()) {
                    stack.push(child);
                }
            }
        }
        Ok(())
    }

    fn set_dir(&mut self, wd: i32, path: String) {
        self.touched.insert(wd);
        if let Some(old) = self.dirs.insert(wd, path.clone()) {
            if self.paths.get(&old) == Some(&wd) {
                self.paths.remove(&old);
            }
        }
        self.paths.insert(path, wd);
    }

    fn unset_dir(&mut self, wd: i32) {
        if let Some(old) = self.dirs.remove(&wd) {
            if self.paths.get(&old) == Some(&wd) {
                self.paths.remove(&old);
            }
        }
    }

    /// Drops the watches of `path` and every directory beneath it.
    fn drop_tree(&mut self, path: &str) {
        let gone: Vec<i32> = self
            .dirs
            .iter()
            .filter(|(_, p)| within(p, path))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            self.unset_dir(wd);
            let _ = inotify::remove_watch(&self.fd, wd);
        }
    }

    /// The directory at `path` beneath the root, if it is still there.
    /// `None` when it vanished or is no directory any more ([`left_out`]);
    /// any other failure (out of descriptors) is an error.
    fn open(&self, path: &str) -> io::Result<Option<Dir>> {
        let mut dir = self.root.reopen()?;
        for comp in path.split('/').filter(|c| !c.is_empty()) {
            dir = match dir.subdir(comp) {
                Ok(sub) => sub,
                Err(e) if left_out(&e) => return Ok(None),
                Err(e) => return Err(e),
            };
        }
        Ok(Some(dir))
    }

    fn stop(&self, why: String) {
        lock(&self.journal).broken = Some(why);
    }

    fn run(mut self) {
        let mut buf = vec![MaybeUninit::<u8>::uninit(); 64 << 10];
        let fd = match self.fd.try_clone() {
            Ok(fd) => fd,
            Err(e) => return self.stop(format!("cannot read its events: {e}")),
        };
        let mut reader = inotify::Reader::new(fd.as_fd(), &mut buf);
        loop {
            let (wd, events, cookie, name) = match reader.next() {
                Ok(event) => (
                    event.wd(),
                    event.events(),
                    event.cookie(),
                    event
                        .file_name()
                        .map(|n| OsStr::from_bytes(n.to_bytes()).to_owned()),
                ),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return self.stop(format!("reading its events failed: {e}")),
            };
            let mut found = Vec::new();
            let reset = match self.apply(wd, events, cookie, name, &mut found) {
                Ok(reset) => reset,
                Err(e) => return self.stop(e.to_string()),
            };
            let mut j = lock(&self.journal);
            // More than the journal keeps (a huge tree moved in): nothing
            // handed out can be answered; the next listings are whole.
            if reset || found.len() > KEEP {
                j.reset();
            } else {
                for path in found {
                    j.note(path);
                }
            }
        }
    }

    /// What one event means: the paths to journal (into `found`), and
    /// whether the journal must start again (`true`).
    fn apply(
        &mut self,
        wd: i32,
        events: ReadFlags,
        cookie: u32,
        name: Option<OsString>,
        found: &mut Vec<String>,
    ) -> io::Result<bool> {
        self.touched.clear();
        if events.contains(ReadFlags::QUEUE_OVERFLOW) {
            // Events were lost: nothing handed out can be answered, and a
            // directory made meanwhile may have no watch yet.
            // Watched again first (a directory still there keeps its
            // watch), then only what was not found again is removed:
            // removing every watch would queue an event each, enough to
            // overflow again.
            let before: Vec<i32> = self.dirs.keys().copied().collect();
            self.dirs.clear();
            self.paths.clear();
            self.moved_from = None;
            self.add_tree(String::new(), None)?;
            for wd in before {
                if !self.dirs.contains_key(&wd) {
                    let _ = inotify::remove_watch(&self.fd, wd);
                }
            }
            return Ok(true);
        }
        // A directory moved away whose next event is not its arrival left
        // the root.
        if let Some((c, from)) = self.moved_from.take() {
            let arrives = events.contains(ReadFlags::MOVED_TO | ReadFlags::ISDIR) && cookie == c;
            if !arrives {
                self.drop_tree(&from);
            } else {
                self.moved_from = Some((c, from));
            }
        }
        if events.intersects(ReadFlags::IGNORED | ReadFlags::UNMOUNT)
            && self.dirs.get(&wd).is_some_and(String::is_empty)
        {
            return Err(io::Error::other(
                "the served directory is no longer watched (its filesystem was unmounted?)",
            ));
        }
        if events.contains(ReadFlags::IGNORED) {
            self.unset_dir(wd);
            return Ok(false);
        }
        let Some(dir) = self.dirs.get(&wd).cloned() else {
            return Ok(false);
        };
        if events.intersects(ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF) {
            if dir.is_empty() {
                return Err(io::Error::other(
                    "the served directory itself was removed or moved",
                ));
            }
            return Ok(false);
        }
        let Some(name) = name else { return Ok(false) };
        if self.is_state_dir(&dir, &name) {
            return Ok(false);
        }
        let Some(path) = joined(&dir, &name) else {
            return Ok(false);
        };
        let is_dir = events.contains(ReadFlags::ISDIR);
        if is_dir && events.contains(ReadFlags::MOVED_FROM) {
            self.moved_from = Some((cookie, path));
            return Ok(false);
        }
        found.push(path.clone());
        if !is_dir {
            return Ok(false);
        }
        // A directory's mode changed: one this user could not read may be
        // readable now, and then it is watched and read.
        if events.contains(ReadFlags::ATTRIB) {
            if !self.paths.contains_key(&path) {
                self.add_tree(path, Some(found))?;
            }
            return Ok(false);
        }
        if !events.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO) {
            return Ok(false);
        }
        // Renamed within the root: walked again where it is now (a
        // directory already watched keeps its watch and takes its new
        // name; one made meanwhile is watched), and where it was, for an
        // exchange of two directories; what was beneath the old name and
        // is found nowhere now is dropped.
        if let Some((_, from)) = self.moved_from.take() {
            let before: Vec<i32> = self
                .dirs
                .iter()
                .filter(|(_, p)| within(p, &from))
                .map(|(wd, _)| *wd)
                .collect();
            self.touched.clear();
            self.add_tree(path, Some(&mut *found))?;
            self.add_tree(from, Some(&mut *found))?;
            for wd in before {
                if !self.touched.contains(&wd) {
                    self.unset_dir(wd);
                    let _ = inotify::remove_watch(&self.fd, wd);
                }
            }
            return Ok(false);
        }
        // Made, or moved in from outside: watched, then read.
        self.add_tree(path, Some(found))?;
        Ok(false)
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
    fn renamed_moved_in_and_moved_out_directories_are_followed() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("tree/a/b")).unwrap();
        std::fs::write(d.path().join("tree/a/b/old"), b"o").unwrap();
        std::fs::create_dir_all(outside.path().join("in/deep")).unwrap();
        std::fs::write(outside.path().join("in/deep/f"), b"f").unwrap();
        let root = Root::open(&d.path().join("tree")).unwrap();
        let w = Watch::start(&root, ".haul").unwrap();
        let c0 = w.cursor();
        // Renamed within the root: no reset, its contents under the new
        // name, and its watches follow it.
        std::fs::rename(d.path().join("tree/a"), d.path().join("tree/z")).unwrap();
        eventually(&w, c0, &["z", "z/b", "z/b/old"]);
        let c1 = w.cursor();
        std::fs::write(d.path().join("tree/z/b/new"), b"n").unwrap();
        assert_eq!(eventually(&w, c1, &["z/b/new"]), ["z/b/new"]);
        // Moved in from outside: watched, all of it journaled.
        std::fs::rename(outside.path().join("in"), d.path().join("tree/in")).unwrap();
        eventually(&w, c1, &["in", "in/deep", "in/deep/f"]);
        let c2 = w.cursor();
        std::fs::write(d.path().join("tree/in/deep/g"), b"g").unwrap();
        eventually(&w, c2, &["in/deep/g"]);
        // Moved out: no longer watched (what happens there is not ours).
        std::fs::rename(d.path().join("tree/in"), outside.path().join("back")).unwrap();
        std::fs::write(d.path().join("tree/marker"), b"m").unwrap();
        eventually(&w, c2, &["marker"]);
        std::fs::write(outside.path().join("back/deep/h"), b"h").unwrap();
        std::fs::write(d.path().join("tree/marker2"), b"m").unwrap();
        let after = eventually(&w, c2, &["marker2"]);
        assert!(!after.iter().any(|p| p.contains("deep/h")), "{after:?}");
        // A write that leaves the file open, and an mtime set alone.
        let c4 = w.cursor();
        let mut open = std::fs::OpenOptions::new()
            .append(true)
            .open(d.path().join("tree/z/b/old"))
            .unwrap();
        std::io::Write::write_all(&mut open, b"more").unwrap();
        eventually(&w, c4, &["z/b/old"]);
        let c5 = w.cursor();
        let t = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        std::fs::File::options()
            .write(true)
            .open(d.path().join("tree/marker"))
            .unwrap()
            .set_modified(t)
            .unwrap();
        eventually(&w, c5, &["marker"]);
        // The state directory in any case is nobody's business.
        std::fs::create_dir(d.path().join("tree/.HAUL")).unwrap();
        std::fs::write(d.path().join("tree/.HAUL/x"), b"x").unwrap();
        std::fs::write(d.path().join("tree/marker3"), b"m").unwrap();
        let last = eventually(&w, c5, &["marker3"]);
        assert!(
            !last.iter().any(|p| p.to_lowercase().starts_with(".haul")),
            "{last:?}"
        );
        assert!(w.broken().is_none());
    }

    #[test]
    fn the_journal_holds_each_path_once_at_its_last_change() {
        let d = tempfile::tempdir().unwrap();
        let root = Root::open(d.path()).unwrap();
        let w = Watch::start(&root, ".haul").unwrap();
        let c0 = w.cursor();
        for i in 0..50u8 {
            std::fs::write(d.path().join("a"), [i]).unwrap();
        }
        std::fs::write(d.path().join("b"), b"b").unwrap();
        std::fs::write(d.path().join("a"), b"last").unwrap();
        let got = eventually(&w, c0, &["a", "b"]);
        assert_eq!(got.iter().filter(|p| *p == "a").count(), 1, "{got:?}");
    }

    #[test]
    fn two_directories_exchanged_keep_their_names_apart() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("cur/x")).unwrap();
        std::fs::create_dir_all(d.path().join("next/y")).unwrap();
        let root = Root::open(d.path()).unwrap();
        let w = Watch::start(&root, ".haul").unwrap();
        let c0 = w.cursor();
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            d.path().join("cur"),
            rustix::fs::CWD,
            d.path().join("next"),
            rustix::fs::RenameFlags::EXCHANGE,
        )
        .unwrap();
        eventually(&w, c0, &["cur/y", "next/x"]);
        let c1 = w.cursor();
        // Each side's watches are named by where they are now.
        std::fs::write(d.path().join("cur/y/f"), b"f").unwrap();
        std::fs::write(d.path().join("next/x/g"), b"g").unwrap();
        let got = eventually(&w, c1, &["cur/y/f", "next/x/g"]);
        assert!(
            !got.iter().any(|p| p == "cur/x/g" || p == "next/y/f"),
            "{got:?}"
        );
    }
}
