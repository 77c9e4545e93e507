//! Sparse files (`-S`): reading a file's holes without reading them, and
//! writing runs of zeros as holes.
//!
//! A hole reads as zeros, but reading it is not free: the kernel fills a
//! page of the page cache with zeros for every 4 KiB of it (on ext4 about
//! as slow as reading data from a fast disk, and it pushes real data out
//! of the cache). [`read_sparse_at`] asks the file where its next data is
//! (`lseek` with `SEEK_DATA`, as `cp` and `tar --sparse` do) and zero-fills
//! the hole before it in memory; from there it reads to the next 256 KiB
//! boundary and asks again. It never asks where a hole begins
//! (`SEEK_HOLE`): that walks every extent (on tmpfs every page) of the
//! data before it, and asked for every piece of a large file the walks add
//! up to more than reading it.
//!
//! What is read this way is hashed and sent like any other bytes, and a
//! write into a hole while it is read changes the file's mtime and ctime,
//! so the sender's identity check after the last read sees it as it sees
//! any other write. What it cannot see is a filesystem that says "hole"
//! where there is data (OpenZFS once did, for data not yet written out:
//! openzfs/zfs#15526, which broke `cp`): the zeros would be hashed and
//! sent as the file. So holes are asked for only on the filesystems whose
//! `SEEK_DATA` is the kernel's own and long exercised (ext2/3/4, XFS,
//! Btrfs, tmpfs); elsewhere the whole range is read.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use rustix::fs::SeekFrom;

/// How far past where data was found a read goes before asking again: the
/// granularity at which holes are skipped.
const STEP: u64 = 256 << 10;

/// Filesystems whose holes are asked for (`statfs`'s `f_type`): ext2/3/4,
/// XFS, Btrfs, tmpfs.
const ASKED: [i64; 4] = [0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994];

/// Whether `file`'s filesystem is one whose holes are asked for.
fn holes_known(file: &File) -> bool {
    rustix::fs::fstatfs(file).is_ok_and(|s| ASKED.contains(&{ s.f_type }))
}

/// Reads `buf.len()` bytes at `offset` of `file`, as `read_exact_at` does,
/// with the file's holes (from 256 KiB on, or any before data) zero-filled
/// instead of read. Returns how many of the bytes were holes. A filesystem
/// that cannot say where its holes are, or is not one asked, has them
/// read; a file shorter than the range fails as `read_exact_at` does.
/// `lseek` moves the descriptor's file offset: only positioned reads and
/// writes may share it.
pub fn read_sparse_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<u64> {
    let end = offset
        .checked_add(buf.len() as u64)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "range past 2^64"))?;
    if buf.is_empty() || !holes_known(file) {
        return file.read_exact_at(buf, offset).map(|()| 0);
    }
    let slice = |from: u64, to: u64| (from - offset) as usize..(to - offset) as usize;
    let mut at = offset;
    let mut holes = 0;
    while at < end {
        let data = match rustix::fs::seek(file, SeekFrom::Data(at)) {
            Ok(d) => d.clamp(at, end),
            // No data from `at` on: a hole to the end, where the file
            // still reaches that far (else the read says it ended early).
            Err(rustix::io::Errno::NXIO) if file.metadata()?.len() >= end => end,
            Err(_) => at,
        };
        buf[slice(at, data)].fill(0);
        holes += data - at;
        if data == end {
            break;
        }
        let stop = (data / STEP)
            .saturating_add(1)
            .saturating_mul(STEP)
            .min(end);
        file.read_exact_at(&mut buf[slice(data, stop)], data)?;
        at = stop;
    }
    Ok(holes)
}

/// Writes `data` at `offset` of `file` with its runs of zeros (4 KiB at a
/// time) left as holes (`-S`). Where the file may hold other bytes there
/// (`punch`: a resumed staging file), a run of at least 64 KiB is punched
/// and a shorter one written, so whatever was there reads as zeros after;
/// where it holds nothing yet (a staging file made its full length as a
/// hole and never written there), zero runs are simply not written. A
/// filesystem that cannot punch holes gets the zeros written.
pub fn write_sparse_at(file: &File, data: &[u8], offset: u64, punch: bool) -> io::Result<()> {
    const BLOCK: usize = 4096;
    const SMALLEST_PUNCH: usize = 64 << 10;
    let zero = |at: usize| {
        let b = &data[at..(at + BLOCK).min(data.len())];
        let (words, rest) = b.split_at(b.len() - b.len() % 8);
        words
            .chunks_exact(8)
            .all(|w| u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]) == 0)
            && rest.iter().all(|x| *x == 0)
    };
    let mut at = 0;
    let mut hole = !data.is_empty() && zero(0);
    while at < data.len() {
        // The run of blocks like the first, and what the next block is.
        let mut end = (at + BLOCK).min(data.len());
        let mut next = hole;
        while end < data.len() {
            next = zero(end);
            if next != hole {
                break;
            }
            end = (end + BLOCK).min(data.len());
        }
        let (run, pos) = (&data[at..end], offset + at as u64);
        let done = hole
            && (!punch
                || (run.len() >= SMALLEST_PUNCH
                    && rustix::fs::fallocate(
                        file,
                        rustix::fs::FallocateFlags::PUNCH_HOLE
                            | rustix::fs::FallocateFlags::KEEP_SIZE,
                        pos,
                        run.len() as u64,
                    )
                    .is_ok()));
        if !done {
            file.write_all_at(run, pos)?;
        }
        at = end;
        hole = next;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sparse_file(path: &std::path::Path, len: u64, data: &[(u64, &[u8])]) -> File {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .unwrap();
        file.set_len(len).unwrap();
        for (at, bytes) in data {
            file.write_all_at(bytes, *at).unwrap();
        }
        file.sync_all().unwrap();
        file
    }

    #[test]
    fn holes_read_as_zeros_without_being_read_and_data_as_it_is() {
        let t = tempfile::tempdir().unwrap();
        let mib = 1u64 << 20;
        let (a, b) = (vec![1u8; 8192], vec![2u8; 100]);
        // 8 MiB: data at 1 MiB and just before 5 MiB, holes elsewhere
        // (a trailing one too).
        let file = sparse_file(
            &t.path().join("f"),
            8 * mib,
            &[(mib, &a), (5 * mib - 100, &b)],
        );
        let mut want = vec![0u8; 8 * mib as usize];
        want[mib as usize..mib as usize + a.len()].copy_from_slice(&a);
        want[(5 * mib - 100) as usize..5 * mib as usize].copy_from_slice(&b);
        // Every window, aligned or not, reads what a plain read reads.
        for (at, len) in [
            (0, 8 * mib),
            (0, mib),
            (mib - 10, 20),
            (mib + 4000, 3 * mib),
            (4 * mib, mib),
            (5 * mib, 3 * mib),
            (7 * mib + 3, mib - 3),
        ] {
            let mut got = vec![7u8; len as usize];
            let holes = read_sparse_at(&file, &mut got, at).unwrap();
            assert!(
                got[..] == want[at as usize..(at + len) as usize],
                "{at}+{len}"
            );
            assert!(holes <= len);
        }
        // On a filesystem that reports holes, nearly all of it was one.
        let mut all = vec![7u8; 8 * mib as usize];
        let holes = read_sparse_at(&file, &mut all, 0).unwrap();
        let reports = holes_known(&file)
            && rustix::fs::seek(&file, SeekFrom::Data(0)).is_ok_and(|d| d >= 4096);
        if reports {
            assert!(holes >= 7 * mib, "{holes} bytes of holes");
        }
    }

    #[test]
    fn a_file_without_holes_reads_whole_and_a_range_past_2_64_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8 | 1).collect();
        let file = sparse_file(&t.path().join("f"), 3 << 20, &[(0, &data)]);
        for (at, len) in [(0, 3 << 20), (100_000, 1 << 20), ((3 << 20) - 5, 5)] {
            let mut got = vec![0u8; len];
            assert_eq!(read_sparse_at(&file, &mut got, at as u64).unwrap(), 0);
            assert!(got[..] == data[at..at + len], "{at}+{len}");
        }
        let e = read_sparse_at(&file, &mut [0u8; 100], u64::MAX - 10).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(read_sparse_at(&file, &mut [], 1 << 40).unwrap(), 0);
    }

    #[test]
    fn a_file_shorter_than_the_range_fails_as_a_plain_read_does() {
        let t = tempfile::tempdir().unwrap();
        let file = sparse_file(&t.path().join("f"), 1 << 20, &[(10, b"x")]);
        let mut buf = vec![0u8; 2 << 20];
        for at in [0, 1 << 20, 3 << 20] {
            let e = read_sparse_at(&file, &mut buf, at).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "at {at}");
        }
    }

    #[test]
    fn sparse_writes_read_back_exactly_and_leave_holes() {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let t = tempfile::tempdir().unwrap();
        let mut data = vec![0u8; 1 << 20];
        data[5000] = 1; // one block of data, then zeros
        data[(1 << 20) - 1] = 2; // and the last byte
        for punch in [false, true] {
            let path = t.path().join(format!("f{punch}"));
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .unwrap();
            if punch {
                // Stale bytes where the zeros go: punched or overwritten.
                file.write_all_at(&vec![9u8; 1 << 20], 0).unwrap();
            } else {
                file.set_len(1 << 20).unwrap();
            }
            write_sparse_at(&file, &data, 0, punch).unwrap();
            let mut back = vec![7u8; 1 << 20];
            file.read_exact_at(&mut back, 0).unwrap();
            assert!(back == data, "punch {punch}");
            let blocks = std::fs::metadata(&path).unwrap().blocks() * 512;
            assert!(
                blocks < 256 << 10,
                "punch {punch}: {blocks} bytes allocated"
            );
        }
    }
}
