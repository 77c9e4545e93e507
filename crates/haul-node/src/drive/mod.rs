//! The drivers: they run [`haul_session`] sessions over a connection and do
//! their I/O. A session decides what happens next; a driver decides only
//! how (inline or on threads, `sendfile` or bytes, when commits group).

use std::sync::Arc;

use haul_engine::haul_root::{ResolveError, Root};
use haul_engine::{ChunkSource, LocalFile, SourceEntry};
use haul_proto::digest::chunk_size_for;
use haul_proto::{EntryKind, ErrorCode};

use crate::jobs::{SendJob, Source};
use crate::NodeError;

mod commit;
pub mod receive;
pub mod relay_hook;
pub mod send;

/// How a fan-out's sending edges are watched ([`haul_session::Heartbeat`]):
/// their sender says something every control heartbeat, and a receiver
/// tells its node when it heard nothing for
/// [`haul_plan::liveness::EDGE_QUIET`].
pub fn relayed_heartbeat() -> haul_session::Heartbeat {
    haul_session::Heartbeat {
        every: haul_plan::liveness::HEARTBEAT,
        quiet: haul_plan::liveness::EDGE_QUIET,
    }
}

/// A finished session's last words (its `Bye`) go out. A peer that left
/// first — one that handed its work back to a connection over another
/// transport says `Bye` and goes — is no failure: everything the session
/// held was done.
pub(crate) async fn finish(w: &mut dyn haul_transport::MessageWriter) -> Result<(), NodeError> {
    if let Err(e) = w.flush().await {
        tracing::debug!("the peer left before our goodbye: {e}");
    }
    Ok(())
}

/// How long a connection that broke before the peer said anything is
/// still read for the node's refusal (over QUIC a lost packet of it is
/// sent again; over TCP a node's reset may have cut it off).
const REFUSAL_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The reason a connection broke before the peer said anything: a node
/// that refused it closed it, and a write may fail before its refusal,
/// which came first, was read (a session's first words go out with
/// `Hello`). `first` reads the peer's first message; a refusal there,
/// within [`REFUSAL_WAIT`], is the error, else `error` is.
pub(crate) async fn refusal_or(
    error: NodeError,
    first: impl std::future::Future<Output = Option<haul_proto::Message>>,
) -> NodeError {
    let broken = matches!(&error, NodeError::Transport(t)
        if !t.is_timeout() && !matches!(t, haul_transport::TransportError::Superseded));
    if !broken {
        return error;
    }
    match tokio::time::timeout(REFUSAL_WAIT, first).await {
        Ok(Some(haul_proto::Message::Refused { code, message })) => {
            NodeError::Refused { code, message }
        }
        _ => error,
    }
}

/// Gives a connection's work back when `--transport auto` chose the other
/// transport for its node ([`haul_transport::MessageWriter::hand_back`]):
/// says `Bye` (called between messages: the peer ends its session quietly,
/// keeping what it verified for the connection that takes over) and ends
/// with the error that has its pool dial again.
pub(crate) async fn hand_back(w: &mut dyn haul_transport::MessageWriter) -> Result<(), NodeError> {
    if let Err(e) = w.hand_back() {
        let bye = w.send(&haul_proto::Message::Bye);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), bye).await;
        return Err(e.into());
    }
    Ok(())
}

/// How a session ended when its connection broke: the jobs it still held.
pub struct Interrupted<J> {
    /// What broke.
    pub error: NodeError,
    /// Jobs to give back to the queue.
    pub unfinished: Vec<J>,
}

/// Hands `session` jobs from `queue` while it has room (`hand` gives it
/// one); true when it waits for the queue (nothing to take yet, more may
/// come). A session asked to retire, or whose queue is drained, closes
/// once what it holds is done.
pub(crate) fn take_jobs<S: haul_session::Windowed, J: crate::jobs::Job>(
    session: &mut S,
    queue: &crate::jobs::WorkQueue<J>,
    mut hand: impl FnMut(&mut S, J),
) -> bool {
    if session.is_taking() && queue.should_retire() {
        // The pool has more connections than help: this one finishes what
        // it holds and closes.
        session.close_when_done();
        return false;
    }
    while session.room() > 0 {
        let busy = session.busy_groups();
        let Some(job) = queue.try_take(&busy) else {
            if queue.is_drained() {
                session.close_when_done();
                return false;
            }
            return session.in_flight() == 0;
        };
        hand(session, job);
    }
    false
}

/// Opens what a `Want` asks for, beneath the held `root`: no symlink
/// followed on the way or at the end, nothing but a regular file, described
/// from the opened file itself.
pub(crate) fn read_want(
    root: &Root,
    attrs: &haul_engine::attrs::AttrReader,
    path: &str,
    dest: &str,
    first: u32,
    end: u32,
) -> Result<(SendJob, Arc<dyn ChunkSource>), (ErrorCode, String)> {
    let bad = |e: String| (ErrorCode::BadPath, e);
    let comps = haul_proto::validate_entry_path(path).map_err(|e| bad(e.to_string()))?;
    let (last, parents) = comps.split_last().ok_or_else(|| bad("empty path".into()))?;
    let dir = root.open_dir(parents).map_err(|e| match e {
        ResolveError::NotFound(_) => (ErrorCode::NotFound, format!("{path}: no such file")),
        e => bad(e.to_string()),
    })?;
    let (file, meta) = dir.open_regular(last).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => (ErrorCode::NotFound, format!("{path}: no such file")),
        Some(libc::ELOOP) => bad(format!(
            "{path} is a symlink: a node never reads through a symlink"
        )),
        _ if e.kind() == std::io::ErrorKind::InvalidInput => {
            bad(format!("{path} is not a regular file"))
        }
        _ => (ErrorCode::Io, format!("cannot read {path}: {e}")),
    })?;
    // Owner, group and xattrs as the client keeps them, of the very file
    // opened (its own descriptor, never its name again).
    let kept = attrs
        .read(&meta, || haul_engine::haul_root::file_xattrs(&file))
        .map_err(|e| {
            (
                ErrorCode::Io,
                format!("cannot read the attributes of {path}: {e}"),
            )
        })?;
    // Described by the version it sends (see `LocalFile::open`).
    let file = LocalFile::open(file)
        .map_err(|e| (ErrorCode::Io, format!("cannot read {path}: {e}")))?
        .shown_as(path)
        .named(root, path);
    let now = *file.identity();
    let entry = haul_proto::Entry {
        attrs: kept,
        path: dest.to_owned(),
        kind: EntryKind::File,
        size: now.size,
        mode: meta.permissions(),
        mtime_sec: now.mtime.0,
        mtime_nsec: now.mtime.1,
        chunk_size: chunk_size_for(now.size),
    };
    let end = end.min(entry.chunk_count());
    let source: Arc<dyn ChunkSource> = Arc::new(file);
    let job = SendJob {
        content: None,
        entry,
        first,
        end,
        group: None,
        source: Source::Open(source.clone()),
    };
    Ok((job, source))
}

/// A send job for a local entry (the whole file).
pub fn local_job(src: SourceEntry) -> SendJob {
    let end = src.entry.chunk_count();
    SendJob {
        content: None,
        entry: src.entry,
        first: 0,
        end,
        group: None,
        source: Source::Path(src.local, src.data),
    }
}
