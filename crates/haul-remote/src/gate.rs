//! A caller's say over each listed file (`haul daemon`'s catalog): whether
//! it is fetched at all, when its download may start (caps shared with
//! other fetches), and what became of it.
//!
//! Both pull drivers take one: haul-fetch's (FTP, SFTP, HTTP, S3) and a
//! node pull's (`haul_node::pull`, for `haul://` and ssh sources), so the
//! daemon decides over a node's files as over any other source's.

use std::sync::Arc;

use crate::RemoteEntry;

/// A file the filter took, as the gate sees it.
#[derive(Debug, Clone)]
pub struct GateFile {
    /// Path relative to the source URL.
    pub rel: String,
    /// Absolute remote path.
    pub remote_path: String,
    /// Path under the destination.
    pub dest_rel: String,
    /// What the listing (or a stat) told.
    pub entry: RemoteEntry,
}

/// What became of an admitted file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateOutcome {
    /// Delivered and verified.
    Delivered {
        /// Whole-file BLAKE3 (hex).
        blake3: String,
        /// Its size.
        size: u64,
        /// Bytes that came over the network this time (less on resume).
        fetched: u64,
    },
    /// Already at the destination (quick check, `--skip-existing`).
    UpToDate {
        /// Its size.
        size: u64,
        /// The BLAKE3 of the copy found there, when the gate adopted it
        /// ([`FileGate::adopt_existing`]) and it could be read.
        blake3: Option<String>,
    },
    /// Failed after the retries.
    Failed {
        /// Why, as reported.
        error: String,
        /// The last attempt could not reach the source (a timeout or a
        /// connection that failed): the source, not the file, is the
        /// problem.
        unreachable: bool,
    },
    /// Left out after all (a filter that needed a stat, a `--rename` clash).
    Dropped,
}

/// Decides over the files of one fetch. Calls come from the crawl
/// ([`admit`](FileGate::admit), in listing order) and from the download
/// workers ([`start`](FileGate::start), then [`settled`](FileGate::settled)
/// exactly once per admitted file that started).
#[async_trait::async_trait]
pub trait FileGate: Send + Sync {
    /// Whether to fetch `file`.
    async fn admit(&self, file: &GateFile) -> bool;
    /// Waits until `file`'s download may start; the returned value is held
    /// until it ends (a permit of caps shared between fetches). `None`:
    /// not this file after all (another worker took it meanwhile); it is
    /// skipped and [`settled`](FileGate::settled) is not called.
    async fn start(&self, file: &GateFile) -> Option<Box<dyn Send>>;
    /// What became of `file`.
    async fn settled(&self, file: &GateFile, outcome: GateOutcome);
    /// Whether a copy of `file` already at the destination with the listed
    /// size and mtime (the quick check; never by size alone, so not when the
    /// source tells no mtime) counts as delivered even when the
    /// fetch's quick check is off: the daemon's file that was delivered
    /// before its record could be written. Such a copy settles as
    /// [`GateOutcome::UpToDate`] with the BLAKE3 read from it.
    fn adopt_existing(&self, _file: &GateFile) -> bool {
        false
    }
}

/// A [`FileGate`] as a fetch's options hold it: prints as its name.
#[derive(Clone)]
pub struct Gate(pub Arc<dyn FileGate>);

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gate")
    }
}
