//! Ranged reads of the chunks not yet verified — over one session, or for a
//! large file with `--streams`, several — and the writer that stores and
//! hashes the byte stream chunk by chunk.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use haul_engine::hash::PieceHasher;
use haul_engine::PartialFile;
use haul_remote::{RemoteEntry, RemoteError};
use haul_run::{Event, Observer};

use super::local;
use crate::crawl::FileJob;
use crate::sessions::Lease;
use crate::Ctx;

/// Fetches every chunk not yet verified, over one session or, for a large
/// file with `--streams`, several. Returns the bytes fetched.
pub(super) async fn receive(
    ctx: &Arc<Ctx>,
    job: &FileJob,
    part: &Arc<PartialFile>,
    lease: Lease,
    progress: &Arc<AtomicU64>,
) -> Result<u64, RemoteError> {
    let count = part.entry().chunk_count();
    let done: std::collections::HashSet<u32> =
        part.have(0, count).into_iter().map(|(i, _)| i).collect();
    let missing: Vec<u32> = (0..count).filter(|i| !done.contains(i)).collect();
    if !done.is_empty() {
        ctx.tally.event(&Event::Warning {
            message: format!(
                "{}: resuming, {} of {} chunks already verified",
                job.dest_rel,
                done.len(),
                count
            ),
        });
    }
    let size = part.entry().size;
    let ranges = ctx.pool.remote().supports_ranges() && !job.no_ranges;
    let streams = if size >= ctx.opts.split_min && ranges {
        ctx.opts.streams.max(1) as usize
    } else {
        1
    };
    let groups = split_runs(&missing, streams);
    let target = Arc::new(FileTarget {
        part: part.clone(),
        remote_path: job.remote_path.clone(),
        expect: job.entry.clone(),
        progress: progress.clone(),
    });
    let mut lease = Some(lease);
    let mut tasks = Vec::new();
    for group in groups {
        let ctx = ctx.clone();
        let target = target.clone();
        let first = lease.take();
        tasks.push(tokio::spawn(async move {
            let mut lease = match first {
                Some(l) => l,
                None => ctx.pool.take().await?,
            };
            let mut fetched = 0;
            for (start, end) in group {
                fetched += read_run(&ctx, &mut lease, &target, start, end).await?;
            }
            ctx.pool.give_back(lease);
            Ok::<u64, RemoteError>(fetched)
        }));
    }
    if let Some(lease) = lease {
        // Nothing was missing (every chunk resumed): keep the session.
        ctx.pool.give_back(lease);
    }
    let mut fetched = 0;
    let mut first_err = None;
    for t in tasks {
        match t.await {
            Ok(Ok(n)) => fetched += n,
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(RemoteError::Local(format!("download task failed: {e}")));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(fetched),
    }
}

/// Splits the missing chunks into at most `parts` groups of contiguous runs
/// `(first, end)`, balanced by chunk count.
pub(crate) fn split_runs(missing: &[u32], parts: usize) -> Vec<Vec<(u32, u32)>> {
    if missing.is_empty() {
        return Vec::new();
    }
    let parts = parts.clamp(1, missing.len());
    let per = missing.len().div_ceil(parts);
    missing
        .chunks(per)
        .map(|slice| {
            let mut runs: Vec<(u32, u32)> = Vec::new();
            for &i in slice {
                match runs.last_mut() {
                    Some((_, end)) if *end == i => *end = i + 1,
                    _ => runs.push((i, i + 1)),
                }
            }
            runs
        })
        .collect()
}

/// What the range readers of one file share.
struct FileTarget {
    part: Arc<PartialFile>,
    remote_path: String,
    /// The version being read.
    expect: RemoteEntry,
    /// Bytes of this file in verified chunks, across attempts.
    progress: Arc<AtomicU64>,
}

/// Reads chunks `first..end` in one ranged read, writing each chunk as it
/// completes (its BLAKE3 digest goes to the resume log).
async fn read_run(
    ctx: &Arc<Ctx>,
    lease: &mut Lease,
    target: &FileTarget,
    first: u32,
    end: u32,
) -> Result<u64, RemoteError> {
    let path = target.remote_path.as_str();
    let entry = target.part.entry();
    let cs = u64::from(entry.chunk_size);
    let offset = u64::from(first) * cs;
    let stop = (u64::from(end) * cs).min(entry.size);
    let len = stop - offset;
    let whole = offset == 0 && stop == entry.size;
    let mut writer = ChunkWriter::new(ctx, &target.part, &target.progress, first, end);
    let mut sink = |data: &[u8]| writer.accept(data);
    let got = lease
        .session()
        .read(
            path,
            offset,
            if whole { None } else { Some(len) },
            &target.expect,
            &mut sink,
        )
        .await?;
    if got != len || writer.next != end {
        return Err(RemoteError::Connection(format!(
            "{path}: the server sent {got} of {len} bytes from offset {offset}"
        )));
    }
    Ok(got)
}

/// Writes the byte stream in place as it arrives, hashing each chunk on the
/// way; a chunk is logged (and counts for resume) once all its bytes are
/// written.
pub(super) struct ChunkWriter {
    pub(super) part: Arc<PartialFile>,
    file_progress: Arc<AtomicU64>,
    /// The chunk being written; `end` once every chunk asked for is in.
    pub(super) next: u32,
    pub(super) end: u32,
    /// Bytes of chunk `next` written so far.
    filled: u32,
    hasher: PieceHasher,
    ctx: Arc<Ctx>,
    /// The path under the destination (for events).
    path: String,
}

impl ChunkWriter {
    /// A writer for chunks `first..end` of `part`.
    pub(super) fn new(
        ctx: &Arc<Ctx>,
        part: &Arc<PartialFile>,
        file_progress: &Arc<AtomicU64>,
        first: u32,
        end: u32,
    ) -> Self {
        let e = part.entry();
        Self {
            part: part.clone(),
            file_progress: file_progress.clone(),
            next: first,
            end,
            filled: 0,
            hasher: PieceHasher::new(first, e.chunk_size, e.size, part.piece()),
            ctx: ctx.clone(),
            path: e.path.clone(),
        }
    }

    /// Stores the next bytes of the stream.
    pub(super) fn accept(&mut self, mut data: &[u8]) -> Result<(), RemoteError> {
        while !data.is_empty() {
            if self.next >= self.end {
                return Err(RemoteError::Protocol(format!(
                    "{}: the server sent more bytes than asked",
                    self.path
                )));
            }
            let entry = self.part.entry();
            let want = entry.chunk_len(self.next);
            let take = ((want - self.filled) as usize).min(data.len());
            let (piece, rest) = data.split_at(take);
            self.part
                .write_piece(self.next, self.filled, piece)
                .map_err(local)?;
            self.hasher.update(piece);
            self.ctx.received.fetch_add(take as u64, Ordering::Relaxed);
            self.filled += take as u32;
            data = rest;
            if self.filled == want {
                let next = PieceHasher::new(
                    self.next + 1,
                    entry.chunk_size,
                    entry.size,
                    self.part.piece(),
                );
                let done = std::mem::replace(&mut self.hasher, next);
                self.part
                    .finish_chunk(self.next, done.finalize())
                    .map_err(local)?;
                self.file_progress
                    .fetch_add(u64::from(want), Ordering::Relaxed);
                self.ctx.tally.event(&Event::Progress {
                    path: self.path.clone(),
                    bytes: u64::from(want),
                });
                self.next += 1;
                self.filled = 0;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::split_runs;

    #[test]
    fn runs_are_balanced_and_contiguous() {
        assert_eq!(split_runs(&[], 4), Vec::<Vec<(u32, u32)>>::new());
        assert_eq!(split_runs(&[0, 1, 2, 3], 1), vec![vec![(0, 4)]]);
        assert_eq!(
            split_runs(&[0, 1, 2, 3], 2),
            vec![vec![(0, 2)], vec![(2, 4)]]
        );
        assert_eq!(
            split_runs(&[0, 2, 3, 7], 1),
            vec![vec![(0, 1), (2, 4), (7, 8)]]
        );
        assert_eq!(split_runs(&[5], 4), vec![vec![(5, 6)]]);
    }
}
