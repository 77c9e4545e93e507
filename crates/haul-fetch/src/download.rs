//! Downloads one file: quick check, resume from the verified chunks, ranged
//! reads over one or more sessions, whole-file checks, then the atomic
//! rename. Every failure is classified: retried with backoff, or reported.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use haul_engine::hash::{chunk_size_for, ChunkHasher};
use haul_engine::{Event, Observer, PartialFile, Prepared, ReceiveError};
use haul_proto::{Entry, EntryKind as ProtoKind};
use haul_remote::{Checksum, RemoteEntry, RemoteError};

use crate::crawl::FileJob;
use crate::retry::Backoff;
use crate::sessions::Lease;
use crate::Ctx;

/// Permission bits of downloaded files (remote modes are not carried over).
const FILE_MODE: u32 = 0o644;

/// What became of one file.
enum Outcome {
    Delivered { root: String, fetched: u64 },
    UpToDate,
}

/// Downloads `job`, retrying what is worth retrying; reports the result.
pub(crate) async fn download(ctx: Arc<Ctx>, mut job: FileJob) {
    ctx.tally.event(&Event::FileStart {
        path: job.dest_rel.clone(),
        size: job.entry.size.unwrap_or(0),
    });
    let mut backoff = Backoff::with_base(ctx.opts.retries, ctx.opts.retry_base);
    let mut restat = job.entry.size.is_none() || ctx.pool.remote().stat_before_read();
    // Bytes of this file verified chunk by chunk, over all attempts.
    let progress = Arc::new(AtomicU64::new(0));
    loop {
        let progress_before = progress.load(Ordering::Relaxed);
        match attempt(&ctx, &mut job, restat, &progress).await {
            Ok(Outcome::UpToDate) => {
                let size = job.entry.size.unwrap_or(0);
                ctx.tally
                    .event(&Event::up_to_date(job.dest_rel.clone(), size));
                return;
            }
            Ok(Outcome::Delivered { root, fetched }) => {
                ctx.tally.event(&Event::FileDone {
                    path: job.dest_rel.clone(),
                    size: job.entry.size.unwrap_or(0),
                    blake3: root,
                    sent: fetched,
                    skipped: false,
                });
                if ctx.opts.delete_source {
                    delete_source(&ctx, &job).await;
                }
                return;
            }
            Err(e) => {
                // A broken connection that still moved data does not use up
                // the budget (a flaky link that makes progress is not given
                // up on); a file that keeps failing its checks does.
                let transport = matches!(e, RemoteError::Timeout(_) | RemoteError::Connection(_));
                if transport && progress.load(Ordering::Relaxed) > progress_before {
                    backoff.progress_made();
                }
                // A file that changed is stated afresh before the next attempt.
                restat = restat || matches!(e, RemoteError::Changed(_));
                match backoff.next(&e) {
                    Some(wait) => {
                        ctx.tally.event(&Event::Warning {
                            message: format!(
                                "{}: {e}; retry {}/{} in {:.1}s",
                                job.dest_rel,
                                backoff.attempts(),
                                ctx.opts.retries,
                                wait.as_secs_f64()
                            ),
                        });
                        tokio::time::sleep(wait).await;
                    }
                    None => {
                        let hint = hint_for(&e);
                        ctx.tally.event(&Event::FileError {
                            path: job.dest_rel.clone(),
                            error: format!(
                                "{} ({}): {e}{hint}",
                                job.remote_path,
                                ctx.pool.remote().display()
                            ),
                        });
                        return;
                    }
                }
            }
        }
    }
}

fn hint_for(e: &RemoteError) -> &'static str {
    match e {
        RemoteError::NotFound(_) => "; check the path",
        RemoteError::PermissionDenied(_) => "; the server refuses to let this user read it",
        RemoteError::Auth(_) => "; check the user name and password or key",
        RemoteError::Timeout(_) | RemoteError::Connection(_) => {
            "; gave up after the retries: run the same command again to resume"
        }
        _ => "",
    }
}

async fn delete_source(ctx: &Arc<Ctx>, job: &FileJob) {
    let result = async {
        let mut lease = ctx.pool.take().await?;
        lease.session().delete(&job.remote_path).await?;
        ctx.pool.give_back(lease);
        Ok::<(), RemoteError>(())
    }
    .await;
    if let Err(e) = result {
        ctx.tally.event(&Event::Warning {
            message: format!(
                "{}: delivered and verified, but deleting the source failed: {e}",
                job.dest_rel
            ),
        });
    }
}

fn local(e: ReceiveError) -> RemoteError {
    RemoteError::Local(e.to_string())
}

/// One attempt at one file.
async fn attempt(
    ctx: &Arc<Ctx>,
    job: &mut FileJob,
    restat: bool,
    progress: &Arc<AtomicU64>,
) -> Result<Outcome, RemoteError> {
    let mut lease = ctx.pool.take().await?;
    if restat {
        let fresh = lease.session().stat(&job.remote_path).await?;
        if fresh.kind != haul_remote::EntryKind::File {
            return Err(RemoteError::NotFound(format!(
                "{} is no longer a file",
                job.remote_path
            )));
        }
        job.entry = RemoteEntry {
            name: job.entry.name.clone(),
            ..fresh
        };
    }
    let size = job.entry.size.ok_or_else(|| {
        RemoteError::Unsupported(format!(
            "{}: the server does not tell the file's size",
            job.remote_path
        ))
    })?;
    let entry = Entry {
        path: job.dest_rel.clone(),
        kind: ProtoKind::File,
        size,
        mode: FILE_MODE,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size: chunk_size_for(size),
    };
    let entry = with_mtime(entry, job.entry.mtime.unwrap_or(ctx.started));
    let version = version_token(&job.entry);
    if ctx.opts.skip_existing || job.entry.mtime.is_none() {
        // Without a remote mtime the quick check can only compare sizes.
        if let Some(existing) = ctx.existing_size(&entry.path) {
            if ctx.opts.skip_existing || existing == size {
                ctx.pool.give_back(lease);
                return Ok(Outcome::UpToDate);
            }
        }
    }
    let prepared = ctx
        .dest
        .prepare_file_version(&entry, &version, ctx.opts.quick_check)
        .map_err(local)?;
    let part = match prepared {
        Prepared::UpToDate => {
            ctx.pool.give_back(lease);
            return Ok(Outcome::UpToDate);
        }
        Prepared::Receive(part) => part,
    };
    tracing::debug!("{}: prepared", job.dest_rel);
    let sidecar = if ctx.opts.verify_sidecar {
        ctx.sidecars
            .lookup(lease.session(), &job.remote_path)
            .await?
    } else {
        None
    };
    if sidecar.is_none() && ctx.opts.verify_sidecar && !crate::verify::is_sidecar(&job.entry.name) {
        ctx.tally.event(&Event::Warning {
            message: format!(
                "{}: no sidecar checksum found; verified by size only",
                job.dest_rel
            ),
        });
    }
    let fetched = match receive(ctx, job, &part, lease, progress).await {
        Ok(n) => n,
        Err(RemoteError::Unsupported(why)) if !job.no_ranges => {
            // The server ignores ranges: start over with one whole read.
            part.discard();
            job.no_ranges = true;
            return Err(RemoteError::Connection(format!(
                "{why}; fetching the whole file instead"
            )));
        }
        Err(e) => {
            if matches!(e, RemoteError::Changed(_)) {
                part.discard();
            }
            return Err(e);
        }
    };
    tracing::debug!("{}: received {fetched} bytes", job.dest_rel);
    let root = part.seal_received().map_err(local)?;
    let mut expected: Vec<Checksum> = job.entry.checksums.clone();
    expected.extend(sidecar);
    if !expected.is_empty() {
        let p = part.clone();
        let mismatches =
            tokio::task::spawn_blocking(move || crate::verify::check_staged(&p, size, &expected))
                .await
                .map_err(|e| RemoteError::Local(format!("checksum task failed: {e}")))?
                .map_err(local)?;
        if let Some(m) = mismatches.first() {
            part.discard();
            return Err(RemoteError::Changed(format!(
                "{}: {m} (corrupted in transit or changed on the server; fetching again)",
                job.remote_path
            )));
        }
    }
    let p = part.clone();
    tokio::task::spawn_blocking(move || p.sync().and_then(|()| p.publish()))
        .await
        .map_err(|e| RemoteError::Local(format!("commit task failed: {e}")))?
        .map_err(local)?;
    Ok(Outcome::Delivered {
        root: hex::encode(root),
        fetched,
    })
}

fn with_mtime(mut entry: Entry, t: SystemTime) -> Entry {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => {
            entry.mtime_sec = d.as_secs() as i64;
            entry.mtime_nsec = d.subsec_nanos();
        }
        Err(e) => {
            let d = e.duration();
            entry.mtime_sec = -(d.as_secs() as i64);
        }
    }
    entry
}

/// What identifies the remote version for resume: the ETag when there is
/// one (size and mtime are in the entry already).
fn version_token(e: &RemoteEntry) -> String {
    e.version.clone().unwrap_or_default()
}

/// Fetches every chunk not yet verified, over one session or, for a large
/// file with `--streams`, several. Returns the bytes fetched.
async fn receive(
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
        shown: job.dest_rel.clone(),
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
    /// The path under the destination (for events).
    shown: String,
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
    let mut writer = ChunkWriter::new(target, first, end, ctx);
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
struct ChunkWriter<'a> {
    part: &'a PartialFile,
    file_progress: &'a AtomicU64,
    next: u32,
    end: u32,
    /// Bytes of chunk `next` written so far.
    filled: u32,
    hasher: ChunkHasher,
    tally: &'a dyn Observer,
    received: &'a AtomicU64,
    path: &'a str,
}

impl<'a> ChunkWriter<'a> {
    fn new(target: &'a FileTarget, first: u32, end: u32, ctx: &'a Ctx) -> Self {
        let part = &*target.part;
        let path = target.shown.as_str();
        let e = part.entry();
        Self {
            part,
            file_progress: &target.progress,
            next: first,
            end,
            filled: 0,
            hasher: ChunkHasher::new(first, e.chunk_size, e.size),
            tally: &*ctx.tally,
            received: &ctx.received,
            path,
        }
    }

    fn accept(&mut self, mut data: &[u8]) -> Result<(), RemoteError> {
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
            self.received.fetch_add(take as u64, Ordering::Relaxed);
            self.filled += take as u32;
            data = rest;
            if self.filled == want {
                self.part
                    .finish_chunk(self.next, self.hasher.finalize())
                    .map_err(local)?;
                self.file_progress
                    .fetch_add(u64::from(want), Ordering::Relaxed);
                self.tally.event(&Event::Progress {
                    path: self.path.to_string(),
                    bytes: u64::from(want),
                });
                self.next += 1;
                self.filled = 0;
                self.hasher = ChunkHasher::new(self.next, entry.chunk_size, entry.size);
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
