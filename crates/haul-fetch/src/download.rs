//! Downloads one file: quick check, resume from the verified chunks, ranged
//! reads over one or more sessions, whole-file checks, then the atomic
//! rename. Every failure is classified: retried with backoff, or reported.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use haul_engine::hash::chunk_size_for;
use haul_engine::{PartialFile, Prepared, ReceiveError};
use haul_proto::{Entry, EntryKind as ProtoKind, SkipRule};
use haul_remote::{Checksum, Remote, RemoteEntry, RemoteError};
use haul_run::{Event, Observer};

use crate::crawl::FileJob;
use crate::retry::Backoff;
use crate::sessions::Lease;
use crate::Ctx;
use haul_remote::gate::GateOutcome;

mod described;
mod ranged;

/// Permission bits of downloaded files (remote modes are not carried over).
const FILE_MODE: u32 = 0o644;

/// What became of one file.
enum Outcome {
    Delivered { root: String, fetched: u64 },
    UpToDate,
}

/// Downloads `job` (see [`deliver`]), within the gate's caps when the
/// fetch has a gate, and tells the gate the outcome.
pub(crate) async fn download(ctx: Arc<Ctx>, job: FileJob) {
    let Some(gate) = ctx.opts.gate.clone() else {
        deliver(&ctx, job).await;
        return;
    };
    let file = job.gate_file();
    let Some(permit) = gate.0.start(&file).await else {
        return;
    };
    let job = FileJob {
        // `--skip-existing` takes any file there: none of those is adopted.
        adopt: !ctx.opts.skip_existing && gate.0.adopt_existing(&file),
        ..job
    };
    let outcome = deliver(&ctx, job).await;
    drop(permit);
    gate.0.settled(&file, outcome).await;
}

/// Downloads `job`, retrying what is worth retrying; reports the result.
async fn deliver(ctx: &Arc<Ctx>, mut job: FileJob) -> GateOutcome {
    if job.needs_mtime {
        match stated_job(ctx, &job).await {
            Ok(Some(stated)) => job = stated,
            // Left out by --newer-than, or refused by --rename.
            Ok(None) => return GateOutcome::Dropped,
            Err(e) => {
                let error = format!("{e}{}", hint_for(&e));
                ctx.tally.event(&Event::file_failed(
                    job.dest_rel.clone(),
                    error.clone(),
                    fail_kind(&e),
                ));
                let unreachable = unreachable(&e);
                return GateOutcome::Failed { error, unreachable };
            }
        }
    }
    ctx.tally.event(&Event::FileStart {
        path: job.dest_rel.clone(),
        size: job.entry.size.unwrap_or(0),
    });
    let mut backoff = Backoff::new(ctx.opts.retry);
    let mut restat = job.entry.size.is_none()
        || (!job.stated && stated_before_reading(&**ctx.pool.remote(), &job.entry));
    if restat && known_up_to_date(ctx, &job) {
        if let Some(outcome) = up_to_date(ctx, &mut job).await {
            return outcome;
        }
    }
    // Bytes of this file verified chunk by chunk, over all attempts.
    let progress = Arc::new(AtomicU64::new(0));
    loop {
        let progress_before = progress.load(Ordering::Relaxed);
        match attempt(ctx, &mut job, restat, &progress).await {
            Ok(Outcome::UpToDate) => match up_to_date(ctx, &mut job).await {
                Some(outcome) => return outcome,
                None => continue, // fetched after all
            },
            Ok(Outcome::Delivered { root, fetched }) => {
                let size = job.entry.size.unwrap_or(0);
                ctx.tally.event(&Event::FileDone {
                    path: job.dest_rel.clone(),
                    size,
                    blake3: root.clone(),
                    sent: fetched,
                    skipped: false,
                });
                if ctx.opts.delete_source {
                    let name = job.remote_path.rsplit('/').next().unwrap_or_default();
                    if ctx.opts.verify_sidecar && crate::verify::is_sidecar(name) {
                        // It may cover a file not delivered (yet): deleting
                        // it would let that file through unverified later.
                        tracing::info!("{}: a checksum file, kept at the source", job.dest_rel);
                        ctx.kept_sidecars.fetch_add(1, Ordering::Relaxed);
                    } else {
                        delete_source(ctx, &job).await;
                    }
                }
                return GateOutcome::Delivered {
                    blake3: root,
                    size,
                    fetched,
                };
            }
            Err(e) => {
                // A broken connection that still moved data does not use up
                // the budget (a flaky link that makes progress is not given
                // up on); a file that keeps failing its checks does.
                let transport = unreachable(&e);
                if transport && progress.load(Ordering::Relaxed) > progress_before {
                    backoff.progress_made();
                }
                // A file that changed is stated afresh before the next attempt.
                restat = restat || matches!(e, RemoteError::Changed(_) | RemoteError::Mismatch(_));
                match backoff.next(&e) {
                    Some(wait) => {
                        ctx.tally.event(&Event::Warning {
                            message: format!(
                                "{}: {e}; retry {}/{} in {:.1}s",
                                job.dest_rel,
                                backoff.attempts(),
                                ctx.opts.retry.retries,
                                wait.as_secs_f64()
                            ),
                        });
                        tokio::time::sleep(wait).await;
                    }
                    None => {
                        let hint = hint_for(&e);
                        let error = format!(
                            "{} ({}): {e}{hint}",
                            job.remote_path,
                            ctx.pool.remote().display()
                        );
                        ctx.tally.event(&Event::file_failed(
                            job.dest_rel.clone(),
                            error.clone(),
                            fail_kind(&e),
                        ));
                        return GateOutcome::Failed {
                            error,
                            unreachable: transport,
                        };
                    }
                }
            }
        }
    }
}

/// What kind of failure `e` is for the file it stopped: a file the
/// server no longer has vanished, one that kept changing changed.
pub(crate) fn fail_kind(e: &RemoteError) -> haul_run::FailKind {
    match e {
        RemoteError::Timeout(_) => haul_run::FailKind::Timeout,
        RemoteError::Connection(_) => haul_run::FailKind::Unreachable,
        RemoteError::NotFound(_) => haul_run::FailKind::Vanished,
        RemoteError::Changed(_) => haul_run::FailKind::Changed,
        _ => haul_run::FailKind::Error,
    }
}

/// Whether `e` says the source could not be reached (rather than that
/// this file failed).
fn unreachable(e: &RemoteError) -> bool {
    matches!(e, RemoteError::Timeout(_) | RemoteError::Connection(_))
}

/// Reports `job` up to date at the destination; a copy the gate adopts is
/// hashed there first (on a blocking thread, beneath the held root).
/// `None`: the adopted copy could not be read as one version, so it is not
/// adopted (`job.adopt` turned off) and the file is fetched.
async fn up_to_date(ctx: &Arc<Ctx>, job: &mut FileJob) -> Option<GateOutcome> {
    let size = job.entry.size.unwrap_or(0);
    let blake3 = if job.adopt {
        let (c, rel) = (ctx.clone(), job.dest_rel.clone());
        let hashed = tokio::task::spawn_blocking(move || c.dest.hash_existing(&rel))
            .await
            .ok()
            .flatten();
        let Some(hash) = hashed else {
            job.adopt = false;
            return None;
        };
        Some(hash.to_hex().to_string())
    } else {
        None
    };
    ctx.tally
        .event(&Event::up_to_date(job.dest_rel.clone(), size));
    Some(GateOutcome::UpToDate { size, blake3 })
}

/// States a job whose listing gave no mtime (retrying what is worth it),
/// then filters and names it with the mtime known (`None`: the filter
/// leaves it out).
async fn stated_job(ctx: &Arc<Ctx>, job: &FileJob) -> Result<Option<FileJob>, RemoteError> {
    let mut backoff = Backoff::new(ctx.opts.retry);
    let fresh = loop {
        let stat = async {
            let mut lease = ctx.pool.take().await?;
            let fresh = lease.session().stat(&job.remote_path).await?;
            ctx.pool.give_back(lease);
            Ok::<_, RemoteError>(fresh)
        };
        match stat.await {
            Ok(fresh) => break fresh,
            Err(e) => match backoff.next(&e) {
                Some(wait) => tokio::time::sleep(wait).await,
                None => return Err(e),
            },
        }
    };
    let entry = merged(&job.entry, fresh);
    if entry.mtime.is_none() {
        ctx.tally.event(&Event::Warning {
            message: format!(
                "{}: the server tells no modification time; --newer-than and {{mtime}} cannot apply to it",
                job.rel
            ),
        });
    }
    Ok(ctx
        .job_decided(job.remote_path.clone(), job.rel.clone(), entry)
        .map(|j| FileJob {
            stated: true,
            adopt: job.adopt,
            ..j
        }))
}

/// What a stat made just now says of a listed file; what it does not tell
/// (a server without `SIZE` or `MDTM`) is kept from the listing.
pub(crate) fn merged(listed: &RemoteEntry, fresh: RemoteEntry) -> RemoteEntry {
    RemoteEntry {
        name: listed.name.clone(),
        size: fresh.size.or(listed.size),
        mtime: fresh.mtime.or(listed.mtime),
        ..fresh
    }
}

/// Whether the pull states listed `entry` before reading it (the pull and
/// its dry run decide on what that stat says): a size the listing did not
/// tell, a source that wants it ([`Remote::stat_before_read`]), or a file
/// with resume state from a listing that may be imprecise.
pub(crate) fn stated_before_reading(remote: &dyn Remote, entry: &RemoteEntry) -> bool {
    entry.size.is_none()
        || remote.stat_before_read()
        || (resumable(entry) && !remote.listing_is_exact())
}

/// Whether `entry` is staged with resume state (more than one chunk). Such
/// a file is stated before it is read when listings may be imprecise (an FTP
/// `LIST` line tells the minute at best): its version — size and exact
/// mtime — decides whether a partial copy can be resumed, and a change
/// within the listed minute must start it over rather than splice two
/// versions. One more request for a file of over 4 MiB.
pub(crate) fn resumable(entry: &RemoteEntry) -> bool {
    entry
        .size
        .is_some_and(|size| size > u64::from(chunk_size_for(size)))
}

/// Whether `job` is known to be at the destination already without asking
/// the server: any file there under `--skip-existing`; otherwise, from a
/// source whose listings are exact (S3), a file with the listed size and
/// modification time (rsync's quick check). Delivered files carry the
/// server's `Last-Modified`, whole seconds: the listed time is compared so.
fn known_up_to_date(ctx: &Ctx, job: &FileJob) -> bool {
    if ctx.opts.skip_existing {
        return ctx.existing_size(&job.dest_rel).is_some();
    }
    let quick_check = ctx.opts.quick_check || job.adopt;
    if !quick_check || ctx.opts.checksum || !ctx.pool.remote().listing_is_exact() {
        return false;
    }
    let Some(Ok(since_epoch)) = job.entry.mtime.map(|t| t.duration_since(UNIX_EPOCH)) else {
        return false;
    };
    let listed = FileJob {
        entry: RemoteEntry {
            mtime: Some(UNIX_EPOCH + std::time::Duration::from_secs(since_epoch.as_secs())),
            ..job.entry.clone()
        },
        ..job.clone()
    };
    match proto_entry(ctx, &listed) {
        Ok((entry, _)) => ctx.dest.quick_check(&entry, SkipRule::default()),
        Err(_) => false,
    }
}

/// What `--checksum` found for a file at the destination.
enum Verdict {
    /// Every checksum the source offers matches the local file.
    Same,
    /// One differs, or the sizes do: fetched again.
    Differs,
    /// Nothing of the source's size is here: fetched.
    Absent,
    /// The source offers no checksum: the quick check decides.
    Unknown,
}

/// Compares the file at `rel` with the checksums the source offers for it
/// (read on a blocking thread, beneath the destination's held root).
async fn by_checksums(
    ctx: &Arc<Ctx>,
    rel: &str,
    size: u64,
    sums: &[haul_remote::Checksum],
) -> Verdict {
    if ctx.existing_size(rel) != Some(size) {
        return Verdict::Absent;
    }
    if sums.is_empty() {
        return Verdict::Unknown;
    }
    let (dest, rel, sums) = (ctx.dest.clone(), rel.to_owned(), sums.to_vec());
    let matched = tokio::task::spawn_blocking(move || {
        crate::verify::file_matches(dest.open_existing(&rel)?, &sums)
    })
    .await;
    match matched {
        Ok(Some(true)) => Verdict::Same,
        // Unreadable here: fetching it again writes a fresh copy.
        _ => Verdict::Differs,
    }
}

fn hint_for(e: &RemoteError) -> &'static str {
    match e {
        RemoteError::NotFound(_) => "; check the path",
        RemoteError::PermissionDenied(_) => "; the server refuses to let this user read it",
        RemoteError::Auth(_) => "; check the user name and password or key",
        RemoteError::Changed(_) | RemoteError::Mismatch(_) => {
            "; it failed on every attempt: the server's copy or its checksum may be wrong"
        }
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
        // A move that left its source behind is a failure to report (exit
        // 1), though the copy is in place.
        ctx.tally.event(&Event::file_error(
            job.dest_rel.clone(),
            format!(
                "delivered and verified, but --delete-source could not delete {}: {e}",
                job.remote_path
            ),
        ));
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
    if restat && described::fits(ctx, job) {
        if let Some(outcome) = described::attempt(ctx, job, lease, progress).await? {
            return Ok(outcome);
        }
        lease = ctx.pool.take().await?;
    }
    if restat {
        let fresh = lease.session().stat(&job.remote_path).await?;
        if fresh.kind != haul_remote::EntryKind::File {
            return Err(RemoteError::NotFound(format!(
                "{} is no longer a file",
                job.remote_path
            )));
        }
        job.entry = merged(&job.entry, fresh);
    }
    let compare = ctx.opts.checksum && ctx.existing_size(&job.dest_rel).is_some();
    if compare && !restat && !job.stated && job.entry.checksums.is_empty() {
        // A stat may offer checksums the listing left out (its other facts
        // stay the listing's, which the quick check compares).
        if let Ok(fresh) = lease.session().stat(&job.remote_path).await {
            job.entry.checksums = fresh.checksums;
        }
    }
    let (entry, version) = proto_entry(ctx, job)?;
    let size = entry.size;
    // An adopted copy is compared by size and mtime, never by size alone.
    let mut quick_check = ctx.opts.quick_check || (job.adopt && job.entry.mtime.is_some());
    if ctx.opts.checksum && !ctx.opts.skip_existing {
        match by_checksums(ctx, &entry.path, size, &job.entry.checksums).await {
            Verdict::Same => {
                ctx.pool.give_back(lease);
                return Ok(Outcome::UpToDate);
            }
            Verdict::Differs | Verdict::Absent => quick_check = false,
            Verdict::Unknown => {
                ctx.unchecked.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    if quick_check && (ctx.opts.skip_existing || job.entry.mtime.is_none()) {
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
        .prepare_file_version(&entry, &version, quick_check.then_some(SkipRule::default()))
        .map_err(local)?;
    let part = match prepared {
        Prepared::UpToDate { .. } => {
            ctx.pool.give_back(lease);
            return Ok(Outcome::UpToDate);
        }
        Prepared::Receive(part) => part,
    };
    tracing::debug!("{}: prepared", job.dest_rel);
    let sidecar = sidecar_for(ctx, job, &mut lease).await?;
    let fetched = match ranged::receive(ctx, job, &part, lease, progress).await {
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
            if matches!(e, RemoteError::Changed(_) | RemoteError::Mismatch(_)) {
                part.discard();
            }
            return Err(e);
        }
    };
    finish(ctx, job, &part, sidecar, fetched).await
}

/// The engine's entry for `job` as it stands, and its version token (the
/// ETag when there is one; size and mtime are in the entry already).
fn proto_entry(ctx: &Ctx, job: &FileJob) -> Result<(Entry, String), RemoteError> {
    let size = job.entry.size.ok_or_else(|| {
        RemoteError::Unsupported(format!(
            "{}: the server does not tell the file's size",
            job.remote_path
        ))
    })?;
    let mtime = job.entry.mtime.unwrap_or(ctx.started);
    let entry = engine_entry(job.dest_rel.clone(), size, mtime);
    Ok((entry, job.entry.version.clone().unwrap_or_default()))
}

/// The engine's entry for a remote file of `size` bytes modified at
/// `mtime`, delivered to `rel`: what the pull receives against and what its
/// dry run quick-checks, so the two decide alike.
pub(crate) fn engine_entry(rel: String, size: u64, mtime: SystemTime) -> Entry {
    let entry = Entry {
        attrs: None,
        path: rel,
        kind: ProtoKind::File,
        size,
        mode: FILE_MODE,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size: chunk_size_for(size),
    };
    with_mtime(entry, mtime)
}

/// The sidecar checksum of `job` when `--verify-sidecar` asks for one (a
/// warning when there is none).
async fn sidecar_for(
    ctx: &Ctx,
    job: &FileJob,
    lease: &mut Lease,
) -> Result<Option<Checksum>, RemoteError> {
    if !ctx.opts.verify_sidecar {
        return Ok(None);
    }
    let sidecar = ctx
        .sidecars
        .lookup(lease.session(), &job.remote_path)
        .await?;
    if sidecar.is_none() && !crate::verify::is_sidecar(&job.entry.name) {
        // Said once at the end, with a few names: one warning per file
        // buries the ones that matter.
        tracing::debug!("{}: no sidecar checksum found", job.dest_rel);
        if let Ok(mut unchecked) = ctx.without_sidecar.lock() {
            unchecked.0 += 1;
            if unchecked.1.len() < 3 {
                unchecked.1.push(job.dest_rel.clone());
            }
        }
    }
    Ok(sidecar)
}

/// Seals the received file, checks every checksum the source offers over
/// the staged bytes and that the server still has the version it was read
/// at, then syncs and publishes it under its final name.
async fn finish(
    ctx: &Arc<Ctx>,
    job: &FileJob,
    part: &Arc<PartialFile>,
    sidecar: Option<Checksum>,
    fetched: u64,
) -> Result<Outcome, RemoteError> {
    tracing::debug!("{}: received {fetched} bytes", job.dest_rel);
    let size = part.entry().size;
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
            return Err(RemoteError::Mismatch(format!(
                "{}: {m} (corrupted in transit, or changed on the server)",
                job.remote_path
            )));
        }
    }
    if part.entry().chunk_count() > 1 && !ctx.pool.remote().files_are_immutable() {
        if let Err(e) = unchanged_on_server(ctx, job).await {
            part.discard();
            return Err(e);
        }
    }
    let (p, backups) = (part.clone(), ctx.backups.clone());
    tokio::task::spawn_blocking(move || {
        p.sync()
            .and_then(|()| p.publish_keeping(backups.as_deref()))
    })
    .await
    .map_err(|e| RemoteError::Local(format!("commit task failed: {e}")))?
    .map_err(local)?;
    Ok(Outcome::Delivered {
        root: hex::encode(root),
        fetched,
    })
}

/// Asks the server again for what it holds at `job`'s path after the bytes
/// arrived: a server reads a file as it sends it, so a file rewritten in
/// place meanwhile arrives as a mix of two versions whose every byte came
/// from the server (ranges carry `If-Range`/`If-Match`, but one response
/// is read over time too). A size, ETag or mtime other than the version
/// the download began with is [`RemoteError::Changed`]: the file is
/// fetched again from scratch (with the retries and backoff of any
/// failure), never delivered. Done for files of more than one chunk: a
/// smaller one is one short response. Timestamps are the server's (FTP
/// and SFTP to the second): a rewrite within the same second that keeps
/// the size is caught only by a checksum the server offers.
async fn unchanged_on_server(ctx: &Arc<Ctx>, job: &FileJob) -> Result<(), RemoteError> {
    let mut lease = ctx.pool.take().await?;
    let now = lease.session().stat(&job.remote_path).await?;
    ctx.pool.give_back(lease);
    let was = &job.entry;
    let change = if now.size != was.size {
        Some(format!(
            "its size went from {} to {}",
            was.size.unwrap_or(0),
            now.size.unwrap_or(0)
        ))
    } else if was.version.is_some() && now.version.is_some() && now.version != was.version {
        Some("its ETag changed".to_owned())
    } else if was.mtime.is_some() && now.mtime.is_some() && now.mtime != was.mtime {
        Some("its modification time changed".to_owned())
    } else {
        None
    };
    match change {
        None => Ok(()),
        Some(change) => Err(RemoteError::Changed(format!(
            "{} changed on the server while it was downloaded ({change}); what arrived was not delivered",
            job.remote_path
        ))),
    }
}

fn with_mtime(mut entry: Entry, t: SystemTime) -> Entry {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => {
            entry.mtime_sec = d.as_secs() as i64;
            entry.mtime_nsec = d.subsec_nanos();
        }
        Err(e) => {
            // Before the epoch: whole seconds down, nanoseconds up (as stat).
            let d = e.duration();
            let (sec, nsec) = (d.as_secs() as i64, d.subsec_nanos());
            entry.mtime_sec = if nsec > 0 { -sec - 1 } else { -sec };
            entry.mtime_nsec = if nsec > 0 { 1_000_000_000 - nsec } else { 0 };
        }
    }
    entry
}
