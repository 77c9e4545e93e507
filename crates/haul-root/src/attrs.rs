//! Owners and extended attributes, read and set through held descriptors
//! (rsync's `-o`, `-g`, `-X`, `-A`).
//!
//! The same rule as everywhere in this crate: an entry is named by one
//! plain component relative to a held [`Dir`], opened with `O_PATH |
//! O_NOFOLLOW`, and then reached through its own descriptor's `/proc` link
//! (a magic link to that inode, not a path), because Linux has no
//! `getxattrat` before 6.13 and `fgetxattr` refuses an `O_PATH` descriptor.
//! A symlink's own attributes are never read or set (`user.*` cannot be set
//! on a symlink, and following it is what this crate never does); its owner
//! is set with `AT_SYMLINK_NOFOLLOW`.
//!
//! Sizes are bounded by Linux's own limits: a name list of at most 64 KiB
//! (`XATTR_LIST_MAX`), each value at most 64 KiB (`XATTR_SIZE_MAX`); a value
//! that does not fit is an error, never a larger allocation.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;

use rustix::fs::{AtFlags, Gid, Mode, OFlags, Uid, XattrFlags, CWD};

use crate::dir::{errno, name_of, proc_fd, ProcLink};
use crate::Dir;

/// Extended attributes of one file: (name, value), in the order the
/// filesystem lists them.
pub type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// Linux's `XATTR_LIST_MAX` and `XATTR_SIZE_MAX`.
const LIMIT: usize = 64 << 10;

/// Reads every attribute through `list` and `get` (one of the path or
/// descriptor forms), each into a buffer of at most [`LIMIT`].
fn read_all(
    list: impl FnOnce(&mut [u8]) -> rustix::io::Result<usize>,
    mut get: impl FnMut(&[u8], &mut [u8]) -> rustix::io::Result<usize>,
) -> io::Result<Xattrs> {
    let mut names = vec![0u8; LIMIT];
    let n = match list(&mut names) {
        Ok(n) => n,
        // A filesystem without extended attributes has none to keep.
        Err(rustix::io::Errno::NOTSUP) => return Ok(Vec::new()),
        Err(e) => return Err(errno(e)),
    };
    names.truncate(n);
    let mut out = Vec::new();
    let mut value = vec![0u8; LIMIT];
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        match get(name, &mut value) {
            Ok(len) => out.push((name.to_vec(), value[..len].to_vec())),
            // Removed between the list and the read.
            Err(rustix::io::Errno::NODATA) => {}
            Err(e) => return Err(errno(e)),
        }
    }
    Ok(out)
}

/// The extended attributes of an open file.
pub fn file_xattrs(file: &File) -> io::Result<Xattrs> {
    read_all(
        |buf| rustix::fs::flistxattr(file, buf),
        |name, buf| rustix::fs::fgetxattr(file, name, buf),
    )
}

/// Sets extended attribute `name` of an open file.
pub fn file_set_xattr(file: &File, name: &[u8], value: &[u8]) -> io::Result<()> {
    rustix::fs::fsetxattr(file, name, value, XattrFlags::empty()).map_err(errno)
}

/// Reads extended attribute `name` of an open file into `buf`: its length,
/// or `None` when the file has no such attribute, the filesystem keeps
/// none, or the value does not fit `buf`.
pub fn file_get_xattr(file: &File, name: &[u8], buf: &mut [u8]) -> io::Result<Option<usize>> {
    match rustix::fs::fgetxattr(file, name, buf) {
        Ok(n) => Ok(Some(n)),
        Err(rustix::io::Errno::NODATA | rustix::io::Errno::NOTSUP | rustix::io::Errno::RANGE) => {
            Ok(None)
        }
        Err(e) => Err(errno(e)),
    }
}

/// Removes extended attribute `name` of an open file (none there is fine).
pub fn file_remove_xattr(file: &File, name: &[u8]) -> io::Result<()> {
    match rustix::fs::fremovexattr(file, name) {
        Ok(()) | Err(rustix::io::Errno::NODATA | rustix::io::Errno::NOTSUP) => Ok(()),
        Err(e) => Err(errno(e)),
    }
}

/// Sets the owner and group of an open file (`None` leaves one as it is).
pub fn file_set_owner(file: &File, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    rustix::fs::fchown(file, uid.map(Uid::from_raw), gid.map(Gid::from_raw)).map_err(errno)
}

fn read_at_path(path: &str) -> io::Result<Xattrs> {
    read_all(
        |buf| rustix::fs::listxattr(path, buf),
        |name, buf| rustix::fs::getxattr(path, name, buf),
    )
}

/// A file already in place, held by [`Dir::regular_file_if`]: its owner,
/// mode and attributes changed through that very inode.
impl ProcLink {
    /// Its extended attributes.
    pub fn xattrs(&self) -> io::Result<Xattrs> {
        read_at_path(self.as_str())
    }

    /// Sets its extended attribute `name`.
    pub fn set_xattr(&self, name: &[u8], value: &[u8]) -> io::Result<()> {
        rustix::fs::setxattr(self.as_str(), name, value, XattrFlags::empty()).map_err(errno)
    }

    /// Removes its extended attribute `name` (none there is fine).
    pub fn remove_xattr(&self, name: &[u8]) -> io::Result<()> {
        match rustix::fs::removexattr(self.as_str(), name) {
            Ok(()) | Err(rustix::io::Errno::NODATA) => Ok(()),
            Err(e) => Err(errno(e)),
        }
    }

    /// Sets its owner and group; `None` leaves one as it is.
    pub fn set_owner(&self, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        rustix::fs::chownat(
            CWD,
            self.as_str(),
            uid.map(Uid::from_raw),
            gid.map(Gid::from_raw),
            AtFlags::empty(),
        )
        .map_err(errno)
    }

    /// Sets its permission bits.
    pub fn set_mode(&self, mode: u32) -> io::Result<()> {
        rustix::fs::chmodat(
            CWD,
            self.as_str(),
            Mode::from_raw_mode(mode),
            AtFlags::empty(),
        )
        .map_err(errno)
    }

    /// Sets its mtime (its atime is left alone).
    pub fn set_mtime(&self, sec: i64, nsec: u32) -> io::Result<()> {
        let t = crate::dir::timestamps(sec, nsec, true);
        rustix::fs::utimensat(CWD, self.as_str(), &t, AtFlags::empty()).map_err(errno)
    }
}

/// Removes extended attribute `name` of a held directory (none there is
/// fine).
fn remove_at_path(path: &str, name: &[u8]) -> io::Result<()> {
    match rustix::fs::removexattr(path, name) {
        Ok(()) | Err(rustix::io::Errno::NODATA) => Ok(()),
        Err(e) => Err(errno(e)),
    }
}

impl Dir {
    /// Removes extended attribute `name` of this directory itself (none
    /// there is fine).
    pub fn remove_own_xattr(&self, name: &[u8]) -> io::Result<()> {
        remove_at_path(&proc_fd(self.fd()), name)
    }

    /// The extended attributes of the file or directory `name` here (none
    /// for a symlink: it is not followed).
    pub fn xattrs_of(&self, name: impl AsRef<OsStr>) -> io::Result<Xattrs> {
        let name = name_of(name.as_ref())?;
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(self.fd(), name, flags, Mode::empty()).map_err(errno)?;
        let st = rustix::fs::fstat(&fd).map_err(errno)?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink {
            return Ok(Vec::new());
        }
        read_at_path(&proc_fd(fd.as_fd()))
    }

    /// The extended attributes of this directory itself.
    pub fn own_xattrs(&self) -> io::Result<Xattrs> {
        read_at_path(&proc_fd(self.fd()))
    }

    /// Sets extended attribute `name` of this directory itself.
    pub fn set_own_xattr(&self, name: &[u8], value: &[u8]) -> io::Result<()> {
        rustix::fs::setxattr(
            proc_fd(self.fd()).as_str(),
            name,
            value,
            XattrFlags::empty(),
        )
        .map_err(errno)
    }

    /// Sets the owner and group of `name` here, a symlink's own (never its
    /// target's). `None` leaves one as it is.
    pub fn chown_nofollow(
        &self,
        name: impl AsRef<OsStr>,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> io::Result<()> {
        let name = name_of(name.as_ref())?;
        rustix::fs::chownat(
            self.fd(),
            name,
            uid.map(Uid::from_raw),
            gid.map(Gid::from_raw),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(errno)
    }

    /// Sets this directory's own owner and group.
    pub fn set_owner(&self, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        rustix::fs::chownat(
            CWD,
            proc_fd(self.fd()).as_str(),
            uid.map(Uid::from_raw),
            gid.map(Gid::from_raw),
            AtFlags::empty(),
        )
        .map_err(errno)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_attributes_are_read_and_set_through_held_descriptors() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), b"x").unwrap();
        std::os::unix::fs::symlink("f", t.path().join("l")).unwrap();
        let dir = Dir::open_path(t.path()).unwrap();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(t.path().join("f"))
            .unwrap();
        match file_set_xattr(&file, b"user.haul.test", b"v1") {
            Ok(()) => {}
            // tmpfs before 6.6 and some overlays take no user.* attributes.
            Err(e) if e.raw_os_error() == Some(95) || e.raw_os_error() == Some(1) => return,
            Err(e) => panic!("{e}"),
        }
        let got = dir.xattrs_of("f").unwrap();
        assert!(
            got.contains(&(b"user.haul.test".to_vec(), b"v1".to_vec())),
            "{got:?}"
        );
        assert_eq!(file_xattrs(&file).unwrap(), got);
        // A symlink is not followed to its target's attributes.
        assert!(dir.xattrs_of("l").unwrap().is_empty());
        dir.set_own_xattr(b"user.haul.dir", b"d").unwrap();
        assert!(dir
            .own_xattrs()
            .unwrap()
            .contains(&(b"user.haul.dir".to_vec(), b"d".to_vec())));
    }
}
