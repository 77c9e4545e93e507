//! A file's identity: which version of which file a descriptor reads.
//!
//! A sender hashes what it reads, chunk by chunk, so a file overwritten
//! while it is read would arrive as a mix of two versions with hashes that
//! match what was sent. haul takes the identity of the file from the held
//! descriptor before the first read ([`FileIdentity::settled`]) and again
//! after the last ([`FileIdentity::of`]): device, inode, size, mtime and
//! ctime in nanoseconds. Any write, truncation or `utimensat` moves ctime,
//! which no caller can set back, so two equal identities mean no byte
//! changed in between — with one exception that [`FileIdentity::settled`]
//! removes: the kernel stamps times from a coarse clock (one tick, 1–10 ms),
//! so a write in the very tick of the first look would leave ctime as it
//! was. A file changed that recently is looked at again once its tick is
//! over; from then on every write shows.
//!
//! A file replaced by a rename keeps being read through the descriptor that
//! was opened: that version stays whole, and is what is sent.

use std::fmt;
use std::io;
use std::os::fd::AsFd;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::dir::Meta;

/// How long a timestamp tick may last: a write this close after a file's
/// ctime may not have moved it.
pub const TIMESTAMP_GRAIN: Duration = Duration::from_millis(20);

/// Looks a recently changed file takes at most before it counts as settled.
const SETTLE_LOOKS: u32 = 4;

/// Device, inode, size, mtime and ctime of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileIdentity {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time: seconds and nanoseconds since the epoch.
    pub mtime: (i64, u32),
    /// Status-change time: seconds and nanoseconds since the epoch.
    pub ctime: (i64, u32),
}

impl From<&Meta> for FileIdentity {
    fn from(m: &Meta) -> Self {
        Self {
            dev: m.dev,
            ino: m.ino,
            size: m.size,
            mtime: (m.mtime, m.mtime_nsec),
            ctime: (m.ctime, m.ctime_nsec),
        }
    }
}

impl FileIdentity {
    /// The identity of the file `fd` reads, now (`fstat`).
    pub fn of(fd: impl AsFd) -> io::Result<Self> {
        let st = rustix::fs::fstat(fd).map_err(io::Error::from)?;
        Ok(Self::from(&Meta::from_stat(&st)))
    }

    /// The identity of the file `fd` reads, taken once no write can go
    /// unseen: a file whose ctime is within [`TIMESTAMP_GRAIN`] of now is
    /// looked at again after its tick (a few times at most; a file still
    /// changing then is caught by the check after the last read).
    pub fn settled(fd: impl AsFd) -> io::Result<Self> {
        let fd = fd.as_fd();
        let mut id = Self::of(fd)?;
        for _ in 0..SETTLE_LOOKS {
            let Some(wait) = id.unsettled_for(SystemTime::now()) else {
                break;
            };
            std::thread::sleep(wait);
            let again = Self::of(fd)?;
            let same = again == id;
            id = again;
            if same {
                break;
            }
        }
        Ok(id)
    }

    /// How long until a write could no longer share this identity's ctime
    /// tick, seen at `now`; `None` when that is already so. A ctime far in
    /// the future (another host's clock, on a network filesystem) is not
    /// waited for.
    fn unsettled_for(&self, now: SystemTime) -> Option<Duration> {
        let ctime = UNIX_EPOCH
            .checked_add(Duration::new(self.ctime.0.try_into().ok()?, self.ctime.1))?
            .checked_add(TIMESTAMP_GRAIN)?;
        let wait = ctime.duration_since(now).ok()?;
        (wait <= TIMESTAMP_GRAIN * 2).then_some(wait.max(Duration::from_millis(1)))
    }

    /// What differs between this identity (taken first) and `now`, in
    /// words; `None` when they are the same version.
    pub fn change_to(&self, now: &Self) -> Option<Change> {
        if (self.dev, self.ino) != (now.dev, now.ino) {
            return Some(Change::Replaced);
        }
        if self.size != now.size {
            return Some(Change::Resized {
                from: self.size,
                to: now.size,
            });
        }
        (self.mtime != now.mtime || self.ctime != now.ctime).then_some(Change::Modified)
    }
}

/// How a file differs from the version first seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Another file is under the name now.
    Replaced,
    /// It grew or shrank.
    Resized {
        /// Size first seen.
        from: u64,
        /// Size now.
        to: u64,
    },
    /// Written to (or its times set) with its size kept.
    Modified,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Replaced => f.write_str("replaced"),
            Self::Resized { from, to } if to > from => write!(f, "grew from {from} to {to} bytes"),
            Self::Resized { from, to } => write!(f, "shrank from {from} to {to} bytes"),
            Self::Modified => f.write_str("modified"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, std::fs::File) {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, bytes).unwrap();
        (tmp, std::fs::File::open(path).unwrap())
    }

    #[test]
    fn a_write_after_the_settled_look_always_shows() {
        // The write lands right after the first look: in the same tick, it
        // would keep ctime as it was, unless the look waited out the tick.
        for _ in 0..20 {
            let (tmp, file) = file_with(b"0123456789");
            let before = FileIdentity::settled(&file).unwrap();
            let w = std::fs::OpenOptions::new()
                .write(true)
                .open(tmp.path().join("f"))
                .unwrap();
            w.write_all_at(b"x", 3).unwrap();
            let after = FileIdentity::of(&file).unwrap();
            assert_eq!(before.change_to(&after), Some(Change::Modified));
        }
    }

    #[test]
    fn size_and_replacement_are_named() {
        let (tmp, file) = file_with(b"abc");
        let before = FileIdentity::settled(&file).unwrap();
        assert_eq!(before.change_to(&FileIdentity::of(&file).unwrap()), None);
        let mut w = std::fs::OpenOptions::new()
            .append(true)
            .open(tmp.path().join("f"))
            .unwrap();
        w.write_all(b"def").unwrap();
        let grown = FileIdentity::of(&file).unwrap();
        let change = before.change_to(&grown).unwrap();
        assert_eq!(change.to_string(), "grew from 3 to 6 bytes");

        std::fs::write(tmp.path().join("g"), b"new").unwrap();
        std::fs::rename(tmp.path().join("g"), tmp.path().join("f")).unwrap();
        let other = std::fs::File::open(tmp.path().join("f")).unwrap();
        let replaced = FileIdentity::of(&other).unwrap();
        assert_eq!(before.change_to(&replaced), Some(Change::Replaced));
    }

    #[test]
    fn a_file_changed_long_ago_is_not_waited_for() {
        let id = FileIdentity {
            dev: 1,
            ino: 2,
            size: 3,
            mtime: (1_000, 0),
            ctime: (1_000, 0),
        };
        let now = UNIX_EPOCH + Duration::from_secs(2_000);
        assert_eq!(id.unsettled_for(now), None);
        let just = UNIX_EPOCH + Duration::new(1_000, 5_000_000);
        assert_eq!(id.unsettled_for(just), Some(Duration::from_millis(15)));
        // A clock far ahead on another host is not waited out.
        let far = FileIdentity {
            ctime: (3_000, 0),
            ..id
        };
        assert_eq!(far.unsettled_for(now), None);
    }
}
