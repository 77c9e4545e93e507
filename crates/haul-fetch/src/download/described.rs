//! A file that is not at the destination yet, from a source whose listings
//! do not tell enough (HTTP, S3): one [`Session::read_described`] instead
//! of a stat and then a read. The answer's metadata (size, mtime, ETag,
//! checksums) is what the partial file is prepared and keyed with, before
//! the first byte is written — so an interrupted download resumes on the
//! next attempt exactly as one that was stated first.
//!
//! [`Session::read_described`]: haul_remote::Session::read_described

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use haul_engine::Prepared;
use haul_remote::{DescribedSink, RemoteEntry, RemoteError};

use super::ranged::ChunkWriter;
use super::{finish, local, proto_entry, sidecar_for, Outcome};
use crate::crawl::FileJob;
use crate::sessions::Lease;
use crate::Ctx;

/// True when `job` can be fetched with one described read: nothing of it is
/// at the destination (no file to quick-check, no chunks to resume), and it
/// will be read whole over one session (not split over `--streams`).
pub(super) fn fits(ctx: &Ctx, job: &FileJob) -> bool {
    let one_stream = ctx.opts.streams <= 1
        || job.no_ranges
        || !ctx.pool.remote().supports_ranges()
        || job.entry.size.is_some_and(|s| s < ctx.opts.split_min);
    one_stream && !ctx.opts.skip_existing && ctx.dest.is_new(&job.dest_rel)
}

/// One attempt at `job` with a described read. `None` when the answer did
/// not tell the file's size (a streamed body): the caller states the file
/// and reads it as one that was begun before.
pub(super) async fn attempt(
    ctx: &Arc<Ctx>,
    job: &mut FileJob,
    mut lease: Lease,
    progress: &Arc<AtomicU64>,
) -> Result<Option<Outcome>, RemoteError> {
    let mut read = DescribedRead {
        ctx,
        job: job.clone(),
        progress,
        writer: None,
    };
    let result = lease
        .session()
        .read_described(&job.remote_path, &mut read)
        .await;
    job.entry = read.job.entry;
    let got = result?;
    let Some(writer) = read.writer else {
        ctx.pool.give_back(lease);
        if job.entry.size.is_none() {
            return Ok(None);
        }
        // Already there, the same size and mtime (it arrived meanwhile).
        return Ok(Some(Outcome::UpToDate));
    };
    let sidecar = sidecar_for(ctx, job, &mut lease).await?;
    ctx.pool.give_back(lease);
    let size = writer.part.entry().size;
    if got != size || writer.next != writer.end {
        return Err(RemoteError::Connection(format!(
            "{}: the server sent {got} of {size} bytes",
            job.remote_path
        )));
    }
    finish(ctx, job, &writer.part, sidecar, got).await.map(Some)
}

/// The sink of a described read: prepares the partial file from the
/// description, then writes and hashes the bytes chunk by chunk.
struct DescribedRead<'a> {
    ctx: &'a Arc<Ctx>,
    /// The job, its entry replaced by the description.
    job: FileJob,
    progress: &'a Arc<AtomicU64>,
    /// Set once the file is prepared for receiving.
    writer: Option<ChunkWriter>,
}

impl DescribedSink for DescribedRead<'_> {
    fn describe(&mut self, entry: &RemoteEntry) -> Result<bool, RemoteError> {
        self.job.entry = RemoteEntry {
            name: self.job.entry.name.clone(),
            ..entry.clone()
        };
        if entry.size.is_none() {
            return Ok(false);
        }
        let (proto, version) = proto_entry(self.ctx, &self.job)?;
        let prepared = self
            .ctx
            .dest
            .prepare_file_version(
                &proto,
                &version,
                (self.ctx.opts.quick_check || (self.job.adopt && entry.mtime.is_some()))
                    .then_some(haul_proto::SkipRule::default()),
            )
            .map_err(local)?;
        match prepared {
            Prepared::UpToDate { .. } => Ok(false),
            Prepared::Receive(part) => {
                let end = part.entry().chunk_count();
                self.writer = Some(ChunkWriter::new(self.ctx, &part, self.progress, 0, end));
                Ok(true)
            }
        }
    }

    fn accept(&mut self, data: &[u8]) -> Result<(), RemoteError> {
        match self.writer.as_mut() {
            Some(w) => w.accept(data),
            None => Err(RemoteError::Protocol(format!(
                "{}: bytes arrived before the file was described",
                self.job.remote_path
            ))),
        }
    }
}
