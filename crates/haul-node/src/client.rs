//! What every client command shares: [`ClientOptions`] and how a command
//! ends (what is left in a queue fails; the summary or the error). The
//! commands are modules of their own: [`crate::push`], [`crate::pull`],
//! [`crate::local_copy`], with `--checksum` in [`crate::checksum`]; reaching
//! a node is [`crate::dial`], the pool of connections `pool`.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use haul_engine::Filter;
use haul_run::backoff::RetryPolicy;
use haul_run::concurrency::Concurrency;
use haul_run::summary::{Summary, Tally};
use haul_session::{Event, Observer};
use haul_transport::{Security, Timeouts, Transport, Tuning};

use crate::chunk_work::ChunkWork;
use crate::jobs::WorkQueue;
use crate::NodeError;
/// Files (offers or wants) in flight per connection by default.
pub const DEFAULT_WINDOW: usize = haul_session::DEFAULT_WINDOW;

/// Everything a client needs to know.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// TLS (with pinning) or plaintext.
    pub security: Security,
    /// Token presented to the node (empty: none).
    pub token: String,
    /// Time limits.
    pub timeouts: Timeouts,
    /// Connections (files in flight across connections).
    pub jobs: Concurrency,
    /// Connections that share one large file (`--streams`).
    pub streams: u32,
    /// Files at least this large are split across `streams` connections.
    pub split_min: u64,
    /// Offers or wants in flight per connection.
    pub window: usize,
    /// Resends of a failing range before its file fails.
    pub max_retries: u32,
    /// How a connection (or a listing) is tried again: `--retries`, the
    /// same policy as a remote pull's.
    pub retry: RetryPolicy,
    /// Socket buffers and zero copy.
    pub tuning: Tuning,
    /// TCP or QUIC.
    pub transport: Transport,
    /// Where connections read, hash, verify and write large chunks.
    pub chunk_work: ChunkWork,
    /// Bytes of chunk buffers across all connections ([`crate::buffers`]);
    /// a local copy gives this much to each of its two sides.
    pub chunk_memory: usize,
    /// What is taken from the source (`--include`, `--exclude`...): applied
    /// where the source is walked (push, local copy) or, for a pull, to the
    /// node's listing before anything is asked for.
    pub filter: Option<Arc<Filter>>,
    /// `--delete`: after a pull or local copy that failed nowhere, remove
    /// what DEST holds under the source's top that the source does not
    /// have ([`crate::mirror`]).
    pub delete: bool,
    /// `--max-delete N`: with `--delete`, delete nothing when more than N
    /// entries would go (and say so; exit 25).
    pub max_delete: Option<u64>,
    /// `--delete-excluded`: `--delete` also removes what the filters leave
    /// out at the destination (rsync's).
    pub delete_excluded: bool,
    /// `--backup`: what the transfer replaces or deletes at the destination
    /// is kept as this says ([`haul_engine::backup`]).
    pub backup: Option<haul_proto::Backup>,
    /// `--max-transfer`: once this many bytes moved, no further file is
    /// started (rclone's soft cutoff; the run then exits 8).
    pub max_transfer: Option<u64>,
    /// Which files already at the destination are kept (rsync's
    /// `--ignore-existing`, `--size-only`, `-u`; default: the quick check).
    pub skip: haul_proto::SkipRule,
    /// What is kept beyond mode, mtime and symlinks: owners, groups, xattrs,
    /// ACLs (rsync's `-o -g -X -A`, `--numeric-ids`; `-a` adds `-o -g`).
    pub keep: haul_proto::Keep,
    /// `-z`: the zstd level chunks are compressed at on the wire (pushes:
    /// this side; pulls: the node, asked in `Fetch`); `None`: not.
    pub compress: Option<i32>,
    /// `--checksum` (local copies): a file is up to date when its BLAKE3
    /// equals that of the file at DEST, whatever the sizes and mtimes say.
    pub checksum: bool,
    /// `--force`: a non-empty directory at DEST where the source has a file
    /// or symlink is removed to make room (as rsync's `--force`; `--delete`
    /// implies it).
    pub force: bool,
    /// How `host:path` locations are reached (`--rsh`, `--remote-haul`).
    pub ssh: crate::ssh::SshOptions,
    /// A pull's gate (the daemon's catalog): which listed files are
    /// fetched, when, and what became of each ([`crate::pull_gate`]).
    pub gate: Option<haul_remote::gate::Gate>,
    /// A pull's place in the node's journal of changes (a daemon's node
    /// source): its listing names only what changed since, where the
    /// node watches its root ([`crate::ListCursor`]).
    pub list_cursor: Option<Arc<crate::listing::ListCursor>>,
    /// Where a pull stages its partial files (the daemon's `staging`, on
    /// DEST's filesystem); `None`: `DEST/.haul/partial`.
    pub staging: Option<std::path::PathBuf>,
}

impl ClientOptions {
    /// Drops a key pin these options carry (`--fingerprint`, or one a
    /// fan-out took at admission): options shared by many nodes must not
    /// pin one node's key on the others.
    pub fn unpin(&mut self) {
        if let haul_transport::Security::Tls { fingerprint, .. } = &mut self.security {
            *fingerprint = None;
        }
    }

    /// Connections one large file is split across: `--streams`, or two
    /// while `--transport auto` may still be measuring, so that a single
    /// large file is carried by both transports and the trial compares
    /// them ([`haul_transport::choice`]).
    pub fn file_streams(&self) -> u32 {
        match self.transport {
            Transport::Auto if self.streams == 1 => 2,
            _ => self.streams,
        }
    }

    /// How a sender's chunks are packed on the wire: zstd at `-z`'s level,
    /// or (`-S` alone) level 0, only chunks of zeros left out.
    pub fn packing(&self) -> Option<i32> {
        self.compress.or(self.keep.sparse.then_some(0))
    }

    /// `--max-transfer` on `queue`: cut off once `tally` moved the limit.
    pub(crate) fn limit<J: crate::jobs::Job>(&self, queue: &WorkQueue<J>, tally: &Arc<Tally>) {
        if let Some(max) = self.max_transfer {
            let tally = tally.clone();
            queue.stop_starting_when(Arc::new(move || tally.moved() >= max));
        }
    }

    /// `--backup` at a local destination held at `root`.
    pub fn backups_at(
        &self,
        root: &haul_engine::haul_root::Root,
    ) -> Result<Option<Arc<haul_engine::backup::Backups>>, NodeError> {
        self.backup
            .clone()
            .map(|b| haul_engine::backup::Backups::new(b, root, "").map(Arc::new))
            .transpose()
            .map_err(NodeError::Usage)
    }

    /// Whether a non-empty directory in the way of a file or symlink is
    /// replaced (`--force`, or `--delete`, as rsync).
    pub fn replaces_dirs(&self) -> bool {
        self.force || self.delete
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            security: Security::Plaintext,
            token: String::new(),
            timeouts: Timeouts::default(),
            jobs: Concurrency::Auto { max: 16 },
            streams: 1,
            split_min: 64 << 20,
            window: DEFAULT_WINDOW,
            max_retries: 5,
            retry: RetryPolicy::default(),
            tuning: Tuning::default(),
            transport: Transport::Tcp,
            chunk_memory: crate::buffers::DEFAULT_BUDGET,
            chunk_work: ChunkWork::for_this_machine(),
            filter: None,
            delete: false,
            max_delete: None,
            delete_excluded: false,
            backup: None,
            max_transfer: None,
            skip: haul_proto::SkipRule::default(),
            keep: haul_proto::Keep::default(),
            compress: None,
            checksum: false,
            force: false,
            ssh: crate::ssh::SshOptions::default(),
            gate: None,
            list_cursor: None,
            staging: None,
        }
    }
}

/// Fails whatever is left in a queue after every worker gave up.
pub(crate) fn fail_leftovers<J: crate::jobs::Job>(
    queue: &WorkQueue<J>,
    tally: &Tally,
    err: &Option<NodeError>,
    path_of: impl Fn(&J) -> String,
) {
    if queue.was_cut() {
        let left = queue.take_left();
        if let Some(e) = err {
            // The transfer stopped too: what is left failed with it.
            for job in &left {
                let why = format!("not transferred: {e}");
                tally.event(&Event::file_failed(path_of(job), why, e.fail_kind()));
            }
            return;
        }
        // One line for what --max-transfer left, not one per file.
        let left: std::collections::HashSet<String> = left.iter().map(&path_of).collect();
        tally.event(&Event::transfer_limit(tally.moved(), left.len()));
        return;
    }
    let nothing_done = tally.moved() == 0 && tally.entries_ok() == 0 && tally.failed() == 0;
    if err.as_ref().is_some_and(NodeError::is_permanent) && nothing_done {
        // A refusal of the whole transfer (a wrong token, a changed key)
        // before anything was done is its one line: the files a session
        // held when the node's answer came (its first words go with
        // `Hello`) are not listed one by one.
        while queue.try_take(&[]).is_some() {}
        return;
    }
    let (reason, kind) = err.as_ref().map_or_else(
        || ("not transferred".into(), haul_run::FailKind::Error),
        |e| (e.to_string(), e.fail_kind()),
    );
    while let Some(job) = queue.try_take(&[]) {
        tally.event(&Event::file_failed(
            path_of(&job),
            format!("not transferred: {reason}"),
            kind,
        ));
    }
}

pub(crate) fn finish(
    tally: &Tally,
    started: Instant,
    workers: u32,
    err: Option<NodeError>,
) -> Result<Summary, NodeError> {
    let summary = tally.finish(started.elapsed(), workers);
    match err {
        Some(e) if summary.entries_ok == 0 && summary.failed == 0 => Err(e),
        Some(e) if e.is_permanent() => Err(e),
        _ => Ok(summary),
    }
}

/// With `-z` or `-S`, `summary`'s bytes on the wire: its payload bytes
/// less what packing kept off the wire on `dialers`' connections.
pub(crate) fn with_wire<'a>(
    mut summary: Summary,
    dialers: impl IntoIterator<Item = &'a crate::dial::Dialer>,
    opts: &ClientOptions,
) -> Summary {
    if opts.packing().is_some() {
        let kept_off: u64 = dialers.into_iter().map(|d| d.kept_off_wire()).sum();
        let on_wire = summary.bytes_transferred.saturating_sub(kept_off);
        summary.bytes_on_wire = Some(on_wire);
    }
    summary
}

/// A destination must be a directory, or not exist yet.
pub(crate) fn check_dest_dir(dest: &Path) -> Result<(), NodeError> {
    match std::fs::metadata(dest) {
        Ok(meta) if !meta.is_dir() => Err(NodeError::Usage(format!(
            "{} exists and is not a directory: give a directory (made if missing) as DEST",
            dest.display()
        ))),
        _ => Ok(()),
    }
}
