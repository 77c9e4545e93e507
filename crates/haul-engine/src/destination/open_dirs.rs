//! Open directories of the receiving side, so that the per-file system calls
//! of many small files (stat, create, link) name one path component relative
//! to an open directory instead of walking the whole path from `/` each time.
//!
//! A cached descriptor stays valid if the directory is renamed meanwhile, so
//! the cache lives only while sessions are writing (cleared with the
//! destination's checked-directory cache when the last one ends).

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// At most this many directories stay open (files of one directory usually
/// arrive together, so a small cache keeps nearly every hit).
const CAPACITY: usize = 64;

/// A cache of open directory descriptors by path.
#[derive(Debug, Default)]
pub(crate) struct OpenDirs {
    dirs: Mutex<HashMap<PathBuf, Arc<OwnedFd>>>,
}

impl OpenDirs {
    /// The open directory at `path` (already checked to be a real directory
    /// under the root). The last component is opened with `O_NOFOLLOW`, and
    /// with `O_PATH`: a directory one may write into but not list works too.
    pub(crate) fn get(&self, path: &Path) -> io::Result<Arc<OwnedFd>> {
        if let Some(fd) = self.dirs.lock().ok().and_then(|d| d.get(path).cloned()) {
            return Ok(fd);
        }
        let c = cstring(path.as_os_str().as_bytes())?;
        // SAFETY: `c` is NUL-terminated and outlives the call.
        let raw = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor we just opened and own.
        let fd = Arc::new(unsafe { OwnedFd::from_raw_fd(raw) });
        if let Ok(mut d) = self.dirs.lock() {
            if d.len() >= CAPACITY {
                d.clear();
            }
            d.insert(path.to_path_buf(), fd.clone());
        }
        Ok(fd)
    }

    /// Closes every cached directory.
    pub(crate) fn clear(&self) {
        if let Ok(mut d) = self.dirs.lock() {
            d.clear();
        }
    }
}

/// What `fstatat` says about a name (without following a symlink there).
pub(crate) struct NameStat {
    /// `st_mode`.
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Modification time: seconds and nanoseconds.
    pub mtime: (i64, i64),
    /// Hard links to the file.
    pub nlink: u64,
}

impl NameStat {
    pub(crate) fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }

    pub(crate) fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
pub(crate) fn stat_at(dir: &OwnedFd, name: &CStr) -> io::Result<NameStat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `name` is NUL-terminated, `st` is valid for writes of a `stat`.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatat succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Ok(NameStat {
        mode: st.st_mode,
        size: st.st_size as u64,
        mtime: (st.st_mtime, st.st_mtime_nsec),
        // `nlink_t` is u64 here, u32 on some targets.
        #[allow(clippy::unnecessary_cast)]
        nlink: st.st_nlink as u64,
    })
}

/// An anonymous file (`O_TMPFILE`) in `dir`, read-write, with permission bits `mode`.
pub(crate) fn tmpfile_in(dir: &OwnedFd, mode: u32) -> io::Result<File> {
    // SAFETY: the path is a NUL-terminated literal.
    let raw = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c".".as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor we just opened and own.
    Ok(unsafe { File::from_raw_fd(raw) })
}

/// Set once `linkat(AT_EMPTY_PATH)` was refused (it needs
/// `CAP_DAC_READ_SEARCH` on older kernels): use `/proc/self/fd` from then on.
static EMPTY_PATH_REFUSED: AtomicBool = AtomicBool::new(false);

/// Gives the anonymous `file` the name `name` in `dir` (fails with
/// `AlreadyExists` if the name is taken).
pub(crate) fn link_at(file: &File, dir: &OwnedFd, name: &CStr) -> io::Result<()> {
    if !EMPTY_PATH_REFUSED.load(Ordering::Relaxed) {
        // SAFETY: both strings are NUL-terminated; both descriptors are open.
        let rc = unsafe {
            libc::linkat(
                file.as_raw_fd(),
                c"".as_ptr(),
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::EPERM) | Some(libc::EINVAL) => {
                EMPTY_PATH_REFUSED.store(true, Ordering::Relaxed)
            }
            _ => return Err(e),
        }
    }
    let src = cstring(format!("/proc/self/fd/{}", file.as_raw_fd()).as_bytes())?;
    // SAFETY: both strings are NUL-terminated; `dir` is open.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            src.as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `renameat(dir, from, dir, to)`.
pub(crate) fn rename_at(dir: &OwnedFd, from: &CStr, to: &CStr) -> io::Result<()> {
    // SAFETY: both strings are NUL-terminated; `dir` is open.
    let rc =
        unsafe { libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `unlinkat(dir, name, 0)`.
pub(crate) fn unlink_at(dir: &OwnedFd, name: &CStr) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated; `dir` is open.
    let rc = unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A C string from bytes (a NUL inside is an invalid-input error; validated
/// paths never hold one).
pub(crate) fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn staged(dirs: &OpenDirs, root: &Path, body: &[u8]) -> (Arc<OwnedFd>, File) {
        let dir = dirs.get(root).unwrap();
        let mut f = tmpfile_in(&dir, 0o644).unwrap();
        f.write_all(body).unwrap();
        (dir, f)
    }

    #[test]
    fn anonymous_files_are_linked_by_name_and_never_over_an_existing_one() {
        let t = tempfile::tempdir().unwrap();
        let dirs = OpenDirs::default();
        let (dir, f) = staged(&dirs, t.path(), b"one");
        // Nothing is visible before the link.
        assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 0);
        link_at(&f, &dir, c"a").unwrap();
        assert_eq!(std::fs::read(t.path().join("a")).unwrap(), b"one");
        let st = stat_at(&dir, c"a").unwrap();
        assert!(st.is_file() && st.size == 3);
        assert!(stat_at(&dir, c"missing").is_err());
        // The name is taken: refused, the first file is untouched.
        let (_, g) = staged(&dirs, t.path(), b"two");
        let e = link_at(&g, &dir, c"a").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(t.path().join("a")).unwrap(), b"one");
        // Link under another name, then rename over: atomic replacement.
        link_at(&g, &dir, c"b").unwrap();
        rename_at(&dir, c"b", c"a").unwrap();
        assert_eq!(std::fs::read(t.path().join("a")).unwrap(), b"two");
        unlink_at(&dir, c"a").unwrap();
        assert!(!t.path().join("a").exists());
    }

    #[test]
    fn the_proc_fallback_links_too() {
        let t = tempfile::tempdir().unwrap();
        let dirs = OpenDirs::default();
        let (dir, f) = staged(&dirs, t.path(), b"via proc");
        // As when linkat(AT_EMPTY_PATH) is refused (no CAP_DAC_READ_SEARCH).
        EMPTY_PATH_REFUSED.store(true, Ordering::Relaxed);
        link_at(&f, &dir, c"p").unwrap();
        assert_eq!(std::fs::read(t.path().join("p")).unwrap(), b"via proc");
    }

    #[test]
    fn a_symlink_is_never_opened_as_a_directory() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("real")).unwrap();
        std::os::unix::fs::symlink(t.path().join("real"), t.path().join("link")).unwrap();
        let dirs = OpenDirs::default();
        assert!(dirs.get(&t.path().join("real")).is_ok());
        assert!(dirs.get(&t.path().join("link")).is_err());
        // Cached: the same descriptor comes back until cleared.
        let a = dirs.get(&t.path().join("real")).unwrap();
        let b = dirs.get(&t.path().join("real")).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        dirs.clear();
        let c = dirs.get(&t.path().join("real")).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
    }
}
