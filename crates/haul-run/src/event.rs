//! Events a transfer reports: the binary turns them into progress bars or
//! `--json` lines.

use serde::Serialize;

/// One thing that happened during a transfer.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// An entry starts moving.
    FileStart {
        /// Path relative to the destination.
        path: String,
        /// Size in bytes.
        size: u64,
    },
    /// Verified payload bytes moved for an entry.
    Progress {
        /// Path relative to the destination.
        path: String,
        /// Bytes moved since the last progress event for this path.
        bytes: u64,
    },
    /// An entry was delivered and verified (or already identical).
    FileDone {
        /// Path relative to the destination.
        path: String,
        /// Size in bytes.
        size: u64,
        /// BLAKE3 of the file, hex (empty for directories and symlinks).
        blake3: String,
        /// Bytes of it that crossed the network (sent on a push, received on
        /// a pull).
        sent: u64,
        /// True if it was already in place and nothing was sent.
        skipped: bool,
    },
    /// An entry failed; the others go on.
    FileError {
        /// Path relative to the destination (or the source path).
        path: String,
        /// What went wrong and what to do.
        error: String,
        /// What kind of failure (the exit code follows it).
        kind: FailKind,
    },
    /// Something worth knowing that is not a failure.
    Warning {
        /// The message.
        message: String,
    },
    /// `--dry-run`: what the transfer would do with an entry (nothing was done).
    DryRun {
        /// Path relative to the destination.
        path: String,
        /// Size in bytes (0 for directories and links).
        size: u64,
        /// What would be done.
        action: DryRunAction,
    },
    /// What changed about an entry the receiver is taking (rsync's `-i`
    /// string, `haul_engine::itemize`, from the receiver's side: `>` for
    /// a file received), told before the entry's `FileDone`.
    Itemized {
        /// Path relative to the destination.
        path: String,
        /// rsync's change string, such as `>f.st......` or `cd+++++++++`.
        code: String,
    },
    /// `--delete`: an entry the source does not have was removed from the
    /// destination.
    Deleted {
        /// Path relative to the destination.
        path: String,
        /// Size in bytes (0 for directories and links).
        size: u64,
    },
    /// A serving node found the file a peer's `Want` names.
    Resolved {
        /// The entry as the peer names it (the events that follow use it).
        path: String,
        /// The file's path relative to the node's root.
        source: String,
    },
    /// The walk of the source (push, local copy) or the node's listing
    /// (pull) is running: what it found so far. Sent when it starts and
    /// then now and then; until [`Event::ListingDone`] the transfer's total
    /// is not known.
    ListingProgress {
        /// Files found so far (after the filter).
        files: u64,
        /// Their bytes.
        bytes: u64,
    },
    /// The walk or listing ended: the transfer's total is known.
    ListingDone {
        /// Files found (after the filter), including those already up to
        /// date.
        files: u64,
        /// Their bytes.
        bytes: u64,
    },
    /// Fan-out: what one destination received so far (it reports about
    /// once a second).
    NodeProgress {
        /// The destination (`haul://HOST:PORT/DEST`).
        node: String,
        /// Payload bytes it received.
        bytes: u64,
        /// Bytes of the dataset.
        total: u64,
        /// Its receive rate averaged over the last few seconds
        /// ([`crate::rate::WindowedRate`]); `None` until its reports span
        /// enough time for one.
        bytes_per_second: Option<f64>,
    },
    /// Fan-out, on a node: something a relayed session carried failed the
    /// origin's seal and was refused — evidence against the session's
    /// sender, which the node reports to the client.
    SealFailed {
        /// The entry it concerned.
        path: String,
        /// The chunk whose digest or seal failed (`None`: the entry's own
        /// seal, or its root's).
        chunk: Option<u32>,
    },
    /// Fan-out, on a node: a relayed session's sender, which keeps it alive
    /// every heartbeat, has said nothing for this long
    /// (haul-session's `Heartbeat`) — the path to it is gone, or the
    /// sender froze. Told again while the silence grows; the node reports
    /// it to the client, which decides.
    PeerQuiet {
        /// The silence so far, in ms.
        millis: u64,
    },
    /// Fan-out, on the client: a relay sent data that failed the origin's
    /// seal, so it forwards nothing more in this transfer (its downstream
    /// went elsewhere; it is fed on as a leaf).
    RelayEvicted {
        /// The relay (`haul://HOST:PORT/DEST`).
        node: String,
        /// The node that received the data and refused it.
        by: String,
        /// Entries (offers, roots) whose seal failed there.
        entries: u32,
        /// Chunks whose seal failed there.
        chunks: u32,
        /// What happened and what to do, for people.
        message: String,
    },
    /// Fan-out: a destination is done, or failed.
    NodeDone {
        /// The destination (`haul://HOST:PORT/DEST`).
        node: String,
        /// It holds everything.
        ok: bool,
        /// Why not, empty when ok.
        error: String,
    },
}

/// What kind of failure stopped an entry: what a script branches on (the
/// binary's exit code follows the kinds of a run's failures, with rsync's
/// numbers where the meaning is the same).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailKind {
    /// Anything else: a read or write error, a refusal, a bad hash.
    #[default]
    Error,
    /// The source file was gone when it was to be read (removed after
    /// it was listed): rsync's "vanished".
    Vanished,
    /// The source file changed while it was read, every time it was
    /// tried: no version of it held still long enough to be delivered.
    Changed,
    /// The peer stopped answering within the timeout.
    Timeout,
    /// The peer could not be reached (refused, no route, no such host).
    Unreachable,
    /// `--max-delete`: more would have been deleted than allowed, so
    /// nothing was.
    DeleteLimit,
    /// `--max-transfer`: the bytes allowed were moved, so no further file
    /// was started (rclone's "transfer limit reached").
    TransferLimit,
}

/// What a dry run found an entry would need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DryRunAction {
    /// A file that would be sent (missing or different at the destination).
    Send,
    /// A file already up to date: nothing would move.
    UpToDate,
    /// A directory or symlink that would be created.
    Make,
    /// An entry at the destination that `--delete` would remove.
    Delete,
}

impl DryRunAction {
    /// The word shown to people.
    pub fn word(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::UpToDate => "up to date",
            Self::Make => "make",
            Self::Delete => "delete",
        }
    }
}

impl Event {
    /// Entry `path` failed with `error` (of no particular kind).
    pub fn file_error(path: impl Into<String>, error: impl Into<String>) -> Self {
        Self::file_failed(path, error, FailKind::Error)
    }

    /// Entry `path` failed with `error`, of `kind`.
    pub fn file_failed(path: impl Into<String>, error: impl Into<String>, kind: FailKind) -> Self {
        Self::FileError {
            path: path.into(),
            error: error.into(),
            kind,
        }
    }

    /// `--max-transfer` stopped the transfer once `moved` bytes moved:
    /// one line for the `left` files not started (not one per file).
    pub fn transfer_limit(moved: u64, left: usize) -> Self {
        Self::file_failed(
            String::new(),
            format!(
                "--max-transfer reached ({moved} bytes moved): no file was started after it, and \
                 {} queued (and any the listing had not reached) are left; run again to send the rest",
                match left {
                    1 => "1 file".to_owned(),
                    n => format!("{n} files"),
                }
            ),
            FailKind::TransferLimit,
        )
    }

    /// A directory or symlink was created.
    pub fn made(path: String) -> Self {
        Self::FileDone {
            path,
            size: 0,
            blake3: String::new(),
            sent: 0,
            skipped: false,
        }
    }

    /// A file was already in place (same size and mtime): nothing was sent.
    pub fn up_to_date(path: String, size: u64) -> Self {
        Self::FileDone {
            path,
            size,
            blake3: String::new(),
            sent: 0,
            skipped: true,
        }
    }
}

/// Receives events; must be cheap and thread-safe.
pub trait Observer: Send + Sync {
    /// Called for every event.
    fn event(&self, event: &Event);
}

/// An observer that drops everything.
#[derive(Debug, Default)]
pub struct Quiet;

impl Observer for Quiet {
    fn event(&self, _event: &Event) {}
}

/// An observer that keeps every event, in order: for tests, and for a
/// caller that reads a run's events once it ended.
#[derive(Debug, Default)]
pub struct Recording(std::sync::Mutex<Vec<Event>>);

impl Recording {
    /// The events so far.
    pub fn events(&self) -> Vec<Event> {
        self.0.lock().map(|all| all.clone()).unwrap_or_default()
    }

    /// The warnings' texts so far.
    pub fn warnings(&self) -> Vec<String> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Warning { message } => Some(message),
                _ => None,
            })
            .collect()
    }
}

impl Observer for Recording {
    fn event(&self, event: &Event) {
        if let Ok(mut all) = self.0.lock() {
            all.push(event.clone());
        }
    }
}
