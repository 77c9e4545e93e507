//! [`Dir`]: one directory held open, and the calls that name one component
//! relative to it.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps, CWD, UTIME_OMIT};

/// What `fstat`/`fstatat` says about a file (never through a symlink).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// `st_mode`: file type and permission bits.
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
    /// Nanoseconds of the modification time (0..1e9).
    pub mtime_nsec: u32,
    /// Hard links.
    pub nlink: u64,
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Status-change time (`st_ctime`), seconds since the epoch: any write,
    /// truncation, `chmod` or `utimensat` moves it, and no caller can set it.
    pub ctime: i64,
    /// Nanoseconds of the status-change time (0..1e9).
    pub ctime_nsec: u32,
}

impl Meta {
    // The field types of `struct stat` differ between targets.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    pub(crate) fn from_stat(st: &rustix::fs::Stat) -> Self {
        Self {
            mode: st.st_mode as u32,
            size: st.st_size.max(0) as u64,
            mtime: st.st_mtime as i64,
            mtime_nsec: (st.st_mtime_nsec as u64).min(999_999_999) as u32,
            nlink: st.st_nlink as u64,
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            uid: st.st_uid as u32,
            gid: st.st_gid as u32,
            ctime: st.st_ctime as i64,
            ctime_nsec: (st.st_ctime_nsec as u64).min(999_999_999) as u32,
        }
    }

    fn file_type(&self) -> FileType {
        FileType::from_raw_mode(self.mode as rustix::fs::RawMode)
    }

    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.file_type() == FileType::Directory
    }

    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.file_type() == FileType::RegularFile
    }

    /// A symlink (never followed).
    pub fn is_symlink(&self) -> bool {
        self.file_type() == FileType::Symlink
    }

    /// The permission bits (with setuid, setgid and sticky).
    pub fn permissions(&self) -> u32 {
        self.mode & 0o7777
    }

    /// True when this process's user owns it.
    pub fn is_mine(&self) -> bool {
        self.uid == crate::my_uid()
    }
}

/// A directory held open with `O_PATH`. Every call names one plain component
/// relative to it and never follows a symlink there.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

/// True for one plain component: not empty, `.` or `..`, no `/` or NUL.
pub(crate) fn plain(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.iter().any(|&b| b == b'/' || b == 0)
}

pub(crate) fn name_of(name: &OsStr) -> io::Result<&OsStr> {
    if plain(name.as_bytes()) {
        Ok(name)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a plain file name"),
        ))
    }
}

pub(crate) fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

/// Set once `linkat(AT_EMPTY_PATH)` was refused (it needs
/// `CAP_DAC_READ_SEARCH` on older kernels): use `/proc/self/fd` from then on.
static EMPTY_PATH_REFUSED: AtomicBool = AtomicBool::new(false);

pub(crate) fn proc_fd(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// An `O_PATH` descriptor held open with its `/proc/self/fd` link, which
/// names that very inode for calls that take no descriptor (its owner,
/// mode and extended attributes: see `attrs`).
pub struct ProcLink {
    _fd: OwnedFd,
    link: String,
}

impl ProcLink {
    pub(crate) fn as_str(&self) -> &str {
        &self.link
    }
}

const DIR_PATH: OFlags = OFlags::PATH
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

impl Dir {
    /// Opens the directory at `path` (an operator's path: symlinks in it are
    /// followed, as with any command line).
    pub fn open_path(path: &std::path::Path) -> io::Result<Self> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(CWD, path, flags, Mode::empty()).map_err(errno)?;
        Ok(Self { fd })
    }

    /// Opens the directory at `path`, refusing a symlink as its last component.
    pub fn open_path_nofollow(path: &std::path::Path) -> io::Result<Self> {
        let fd = rustix::fs::openat(CWD, path, DIR_PATH, Mode::empty()).map_err(errno)?;
        Ok(Self { fd })
    }

    pub(crate) fn from_fd(fd: OwnedFd) -> Self {
        Self { fd }
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Another descriptor of this same directory.
    pub fn reopen(&self) -> io::Result<Dir> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, ".", flags, Mode::empty()).map_err(errno)?;
        Ok(Self { fd })
    }

    /// The directory itself opened for reading (listing, `fsync`, `fchmod`).
    fn readable(&self) -> io::Result<OwnedFd> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        rustix::fs::openat(&self.fd, ".", flags, Mode::empty()).map_err(errno)
    }

    /// What this directory is (device, inode, mode...).
    pub fn meta(&self) -> io::Result<Meta> {
        rustix::fs::fstat(&self.fd)
            .map(|st| Meta::from_stat(&st))
            .map_err(errno)
    }

    /// What `name` is, without following a symlink; `None` when nothing is there.
    pub fn stat(&self, name: impl AsRef<OsStr>) -> io::Result<Option<Meta>> {
        let name = name_of(name.as_ref())?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(Meta::from_stat(&st))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(errno(e)),
        }
    }

    /// The subdirectory `name`; a symlink or a non-directory there fails
    /// (`ENOTDIR`).
    pub fn subdir(&self, name: impl AsRef<OsStr>) -> io::Result<Dir> {
        let name = name_of(name.as_ref())?;
        let fd = rustix::fs::openat(&self.fd, name, DIR_PATH, Mode::empty()).map_err(errno)?;
        Ok(Self { fd })
    }

    /// The subdirectory `name`, created with `mode` if missing. Also says
    /// whether this call created it.
    pub fn subdir_or_create(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<(Dir, bool)> {
        let name = name_of(name.as_ref())?;
        match self.subdir(name) {
            Ok(d) => return Ok((d, false)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let created = match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode)) {
            Ok(()) => true,
            // Another writer made it meanwhile.
            Err(rustix::io::Errno::EXIST) => false,
            Err(e) => return Err(errno(e)),
        };
        // Opened again with O_NOFOLLOW: a symlink put there since fails.
        Ok((self.subdir(name)?, created))
    }

    /// Creates directory `name` with `mode` (fails if anything is there).
    pub fn mkdir(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<()> {
        let name = name_of(name.as_ref())?;
        rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode)).map_err(errno)
    }

    fn open_flags(&self, name: &OsStr, flags: OFlags, mode: u32) -> io::Result<File> {
        let name = name_of(name)?;
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd =
            rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode)).map_err(errno)?;
        Ok(File::from(fd))
    }

    /// Opens file `name` for reading (a symlink there fails: `ELOOP`), never
    /// waiting on a FIFO put there.
    pub fn open_read(&self, name: impl AsRef<OsStr>) -> io::Result<File> {
        let flags = OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK;
        self.open_flags(name.as_ref(), flags, 0)
    }

    /// Opens the regular file `name` for reading, with what it is: a symlink
    /// there fails (`ELOOP`), and so does anything but a regular file —
    /// looked at through an `O_PATH` descriptor first, so a device or FIFO
    /// there is never opened (and no open waits on one).
    pub fn open_regular(&self, name: impl AsRef<OsStr>) -> io::Result<(File, Meta)> {
        let (path, meta) = self.open_inode(name.as_ref())?;
        let name = name_of(name.as_ref())?;
        // Reopened for reading through its own descriptor (the /proc link
        // names the inode looked at, not a path); without /proc, by name
        // again and checked to be the same file.
        let read = OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let file =
            match rustix::fs::openat(CWD, proc_fd(path.as_fd()).as_str(), read, Mode::empty()) {
                Ok(fd) => File::from(fd),
                Err(_) => self.open_flags(name, read, 0)?,
            };
        let now = rustix::fs::fstat(&file)
            .map(|st| Meta::from_stat(&st))
            .map_err(errno)?;
        if (now.dev, now.ino) != (meta.dev, meta.ino) {
            return Err(io::Error::other("the file changed while it was opened"));
        }
        Ok((file, now))
    }

    /// The regular file `name` as an `O_PATH` descriptor (it need not be
    /// readable), with what it is: a symlink or anything but a regular file
    /// there fails. What [`Dir::link_file`] gives another name (`-H`).
    pub fn open_inode(&self, name: impl AsRef<OsStr>) -> io::Result<(File, Meta)> {
        let name = name_of(name.as_ref())?;
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::empty()).map_err(errno)?;
        let meta = rustix::fs::fstat(&fd)
            .map(|st| Meta::from_stat(&st))
            .map_err(errno)?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok((File::from(fd), meta))
    }

    /// Opens file `name` for reading and writing, creating it (with `mode`)
    /// if missing; never truncates, never waits on a FIFO there.
    pub fn open_rw(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<File> {
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NONBLOCK;
        self.open_flags(name.as_ref(), flags, mode)
    }

    /// Opens the existing file `name` for appending.
    pub fn open_append(&self, name: impl AsRef<OsStr>) -> io::Result<File> {
        self.open_flags(name.as_ref(), OFlags::WRONLY | OFlags::APPEND, 0)
    }

    /// Creates file `name`, which must not exist (`O_EXCL`), read-write.
    pub fn create_new(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<File> {
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL;
        self.open_flags(name.as_ref(), flags, mode)
    }

    /// An anonymous file (`O_TMPFILE`) in this directory, read-write.
    pub fn tmpfile(&self, mode: u32) -> io::Result<File> {
        let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
        let fd =
            rustix::fs::openat(&self.fd, ".", flags, Mode::from_raw_mode(mode)).map_err(errno)?;
        Ok(File::from(fd))
    }

    /// Gives the anonymous `file` the name `name` here (`AlreadyExists` if
    /// the name is taken).
    pub fn link_file(&self, file: &File, name: impl AsRef<OsStr>) -> io::Result<()> {
        let name = name_of(name.as_ref())?;
        if !EMPTY_PATH_REFUSED.load(Ordering::Relaxed) {
            match rustix::fs::linkat(file, "", &self.fd, name, AtFlags::EMPTY_PATH) {
                Ok(()) => return Ok(()),
                Err(
                    rustix::io::Errno::NOENT | rustix::io::Errno::PERM | rustix::io::Errno::INVAL,
                ) => EMPTY_PATH_REFUSED.store(true, Ordering::Relaxed),
                Err(e) => return Err(errno(e)),
            }
        }
        rustix::fs::linkat(
            CWD,
            proc_fd(file.as_fd()).as_str(),
            &self.fd,
            name,
            AtFlags::SYMLINK_FOLLOW,
        )
        .map_err(errno)
    }

    /// Gives what is at `name` here (a file, or a symlink itself: never
    /// followed) the further name `to` in `to_dir` (`AlreadyExists` if taken).
    pub fn link_name(
        &self,
        name: impl AsRef<OsStr>,
        to_dir: &Dir,
        to: impl AsRef<OsStr>,
    ) -> io::Result<()> {
        let (name, to) = (name_of(name.as_ref())?, name_of(to.as_ref())?);
        rustix::fs::linkat(&self.fd, name, &to_dir.fd, to, AtFlags::empty()).map_err(errno)
    }

    /// Renames `from` here to `to` in `to_dir` (atomic; replaces a file there).
    pub fn rename(
        &self,
        from: impl AsRef<OsStr>,
        to_dir: &Dir,
        to: impl AsRef<OsStr>,
    ) -> io::Result<()> {
        let (from, to) = (name_of(from.as_ref())?, name_of(to.as_ref())?);
        rustix::fs::renameat(&self.fd, from, &to_dir.fd, to).map_err(errno)
    }

    /// Removes the file (or symlink) `name`.
    pub fn unlink(&self, name: impl AsRef<OsStr>) -> io::Result<()> {
        let name = name_of(name.as_ref())?;
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()).map_err(errno)
    }

    /// Removes the empty directory `name`.
    pub fn remove_dir(&self, name: impl AsRef<OsStr>) -> io::Result<()> {
        let name = name_of(name.as_ref())?;
        rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR).map_err(errno)
    }

    /// Removes directory `name` with everything beneath it, each entry by
    /// one component relative to its held parent (never a path; a symlink
    /// inside is removed, not followed; `name` itself must be a directory).
    /// Returns the bytes of the files removed. Each level holds one
    /// descriptor while its subtree goes.
    pub fn remove_tree(&self, name: impl AsRef<OsStr>) -> io::Result<u64> {
        let name = name.as_ref();
        let sub = self.subdir(name)?;
        let mut freed = 0;
        for child in sub.names()? {
            match sub.stat(&child)? {
                Some(m) if m.is_dir() => freed += sub.remove_tree(&child)?,
                Some(m) => {
                    if m.is_file() {
                        freed += m.size;
                    }
                    sub.unlink(&child)?;
                }
                None => {}
            }
        }
        drop(sub);
        self.remove_dir(name)?;
        Ok(freed)
    }

    /// Creates symlink `name -> target`.
    pub fn symlink(&self, target: impl AsRef<OsStr>, name: impl AsRef<OsStr>) -> io::Result<()> {
        let name = name_of(name.as_ref())?;
        rustix::fs::symlinkat(target.as_ref(), &self.fd, name).map_err(errno)
    }

    /// The target of symlink `name`.
    pub fn read_link(&self, name: impl AsRef<OsStr>) -> io::Result<OsString> {
        let name = name_of(name.as_ref())?;
        let target = rustix::fs::readlinkat(&self.fd, name, Vec::new()).map_err(errno)?;
        Ok(OsString::from_vec(target.into_bytes()))
    }

    /// Sets the mtime of `name` itself (a symlink's own time, not its target's).
    pub fn set_times_nofollow(
        &self,
        name: impl AsRef<OsStr>,
        sec: i64,
        nsec: u32,
    ) -> io::Result<()> {
        let name = name_of(name.as_ref())?;
        let t = timestamps(sec, nsec, false);
        rustix::fs::utimensat(&self.fd, name, &t, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)
    }

    /// Sets the permission bits of the regular file `name` — through an
    /// `O_PATH` descriptor of that very file, never through a symlink — if
    /// `allow` accepts what it is. Returns whether the mode was set.
    pub fn chmod_file_if(
        &self,
        name: impl AsRef<OsStr>,
        mode: u32,
        allow: impl FnOnce(&Meta) -> bool,
    ) -> io::Result<bool> {
        let Some(file) = self.regular_file_if(name.as_ref(), allow)? else {
            return Ok(false);
        };
        // An O_PATH descriptor takes no fchmod: its /proc link names the
        // file itself (a magic link to the inode, not a path).
        rustix::fs::chmodat(
            CWD,
            file.as_str(),
            Mode::from_raw_mode(mode),
            AtFlags::empty(),
        )
        .map_err(errno)?;
        Ok(true)
    }

    /// The `/proc` link of the regular file `name` here — opened with
    /// `O_PATH | O_NOFOLLOW`, so never a symlink's target — when `allow`
    /// accepts what it is; the descriptor stays open with the link.
    pub fn regular_file_if(
        &self,
        name: &OsStr,
        allow: impl FnOnce(&Meta) -> bool,
    ) -> io::Result<Option<ProcLink>> {
        let name = name_of(name)?;
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::empty()).map_err(errno)?;
        let meta = rustix::fs::fstat(&fd)
            .map(|st| Meta::from_stat(&st))
            .map_err(errno)?;
        if !meta.is_file() || !allow(&meta) {
            return Ok(None);
        }
        let link = proc_fd(fd.as_fd());
        Ok(Some(ProcLink { _fd: fd, link }))
    }

    /// Sets this directory's own permission bits.
    pub fn set_mode(&self, mode: u32) -> io::Result<()> {
        match self.readable() {
            Ok(fd) => rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(errno),
            // A directory one may write into but not list.
            Err(_) => rustix::fs::chmodat(
                CWD,
                proc_fd(self.fd.as_fd()).as_str(),
                Mode::from_raw_mode(mode),
                AtFlags::empty(),
            )
            .map_err(errno),
        }
    }

    /// Sets this directory's own mtime (its atime is left alone).
    pub fn set_mtime(&self, sec: i64, nsec: u32) -> io::Result<()> {
        let t = timestamps(sec, nsec, true);
        match self.readable() {
            Ok(fd) => rustix::fs::futimens(&fd, &t).map_err(errno),
            Err(_) => {
                rustix::fs::utimensat(CWD, proc_fd(self.fd.as_fd()).as_str(), &t, AtFlags::empty())
                    .map_err(errno)
            }
        }
    }

    /// Makes this directory's entries durable (`fsync`).
    pub fn sync(&self) -> io::Result<()> {
        rustix::fs::fsync(self.readable()?).map_err(errno)
    }

    /// `syncfs(2)`: makes everything on this directory's filesystem durable.
    pub fn sync_filesystem(&self) -> io::Result<()> {
        rustix::fs::syncfs(self.readable()?).map_err(errno)
    }

    /// The names in this directory (without `.` and `..`), sorted bytewise.
    pub fn names(&self) -> io::Result<Vec<OsString>> {
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::new(self.readable()?).map_err(errno)? {
            let entry = entry.map_err(errno)?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(OsString::from_vec(name.to_vec()));
            }
        }
        names.sort();
        Ok(names)
    }
}

pub(crate) fn timestamps(sec: i64, nsec: u32, omit_atime: bool) -> Timestamps {
    let m = Timespec {
        tv_sec: sec,
        tv_nsec: i64::from(nsec.min(999_999_999)) as _,
    };
    Timestamps {
        last_access: if omit_atime {
            Timespec {
                tv_sec: 0,
                tv_nsec: UTIME_OMIT,
            }
        } else {
            m
        },
        last_modification: m,
    }
}
