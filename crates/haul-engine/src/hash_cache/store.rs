//! The store: records of files that cannot carry their own, one file per
//! record at `DIR/<device>/<inode>` (hexadecimal), written whole under a
//! temporary name and renamed into place, so a reader sees a whole record
//! or none. The directory is the user's own (`0700`); a record embeds the
//! identity it describes, so one left behind by a deleted file is never
//! trusted for the file that reuses its inode.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use haul_root::FileIdentity;

use super::record::{Record, MAX_DIGESTS};

/// The largest record file read (a record of the most digests).
const MAX_RECORD: u64 = 116 + 32 * MAX_DIGESTS as u64;

fn place(dir: &Path, dev: u64, ino: u64) -> (PathBuf, PathBuf) {
    let sub = dir.join(format!("{dev:x}"));
    let file = sub.join(format!("{ino:x}"));
    (sub, file)
}

/// The record kept for the file with `identity`'s device and inode.
pub fn read(dir: &Path, identity: &FileIdentity) -> Option<Record> {
    let (_, path) = place(dir, identity.dev, identity.ino);
    let file = fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_RECORD + 1).read_to_end(&mut bytes).ok()?;
    Record::decode(&bytes)
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
