//! The contract between haul's download driver (`haul-fetch`) and every remote
//! source: FTP/FTPS (`haul-ftp`), SFTP (`haul-sftp`), HTTP(S) (`haul-http`) and
//! S3-compatible stores (`haul-s3`).
//!
//! A [`Remote`] is a configured endpoint (URL, credentials, options); it opens
//! [`Session`]s — one logged-in connection each — that list directories, stat
//! paths, read byte ranges and delete files. The driver owns everything else:
//! crawling, filtering, concurrency, resume, staging, verification.
//!
//! [`gate`] is the other side of a pull: a caller's say over each listed
//! file (the daemon's catalog), taken by haul-fetch's driver and by a
//! node pull alike.
//!
//! Rules every implementation keeps:
//! - **Paths** given to a session are absolute remote paths, `/`-separated and
//!   percent-decoded (`/pub/data/a b.txt`; for S3 the key with a leading `/`).
//!   Entries carry only their `name`; the driver joins paths.
//! - **Never hang**: every network wait is bounded by [`RemoteOptions::timeout`].
//! - **Credentials never leak**: errors, logs and [`Remote::display`] never
//!   contain a password, secret key or token.
//! - A session that returned an error is dropped by the driver, never reused;
//!   one that succeeded is reused for the next operation (connection reuse).
//! - [`Session::read`] must fail with [`RemoteError::Changed`] when it can tell
//!   the file is no longer the version described by `expect` (size, ETag or
//!   mtime differ), so that two versions are never spliced.

pub mod collect;
mod entry;
mod error;
pub mod gate;
mod url;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use entry::{Checksum, EntryKind, RemoteEntry};
pub use error::RemoteError;
pub use url::{RemoteUrl, Scheme};

/// Receives listing entries as they arrive (bounded: a full channel makes the
/// lister wait, so a 100,000-entry directory never sits in memory).
pub type ListSink = tokio::sync::mpsc::Sender<RemoteEntry>;

/// Receives the bytes of a read, in order. Returning an error stops the read.
pub type ByteSink<'a> = &'a mut (dyn FnMut(&[u8]) -> Result<(), RemoteError> + Send);

/// Where a [`Session::read_described`] goes: first what the server tells
/// about the file, then its bytes.
pub trait DescribedSink: Send {
    /// Called once, before any byte, with the file's metadata as the server
    /// tells it now. `Ok(false)` declines the body: the read returns `Ok(0)`.
    fn describe(&mut self, entry: &RemoteEntry) -> Result<bool, RemoteError>;

    /// The next bytes of the file, in order. An error stops the read.
    fn accept(&mut self, data: &[u8]) -> Result<(), RemoteError>;
}

/// A configured remote endpoint: opens sessions.
#[async_trait::async_trait]
pub trait Remote: Send + Sync + 'static {
    /// The endpoint for people: scheme, user, host, port — never a secret.
    fn display(&self) -> String;

    /// The host (used to cap connections per host).
    fn host(&self) -> String;

    /// Whether ranged reads are possible (resume and `--streams`).
    fn supports_ranges(&self) -> bool {
        true
    }

    /// Whether listings lack what a stat tells (S3: checksums, encryption):
    /// the driver then stats each file before reading it — or, for a file
    /// with nothing of it at the destination, reads it with
    /// [`Session::read_described`], whose answer tells the same.
    fn stat_before_read(&self) -> bool {
        false
    }

    /// Whether listed sizes and modification times are exact to the second,
    /// as a stat would tell them (S3's listings): the driver then skips a file
    /// the listing shows already at the destination (rsync's quick check)
    /// without stating it first.
    fn listing_is_exact(&self) -> bool {
        false
    }

    /// Whether a file, once written, is never changed in place (S3: a
    /// `PUT` replaces an object whole, and a `GET` under way goes on
    /// reading the version it began with). Elsewhere a server reads a file
    /// as it sends it, so the driver asks again after a long read whether
    /// the file is still the version it began with.
    fn files_are_immutable(&self) -> bool {
        false
    }

    /// Opens one new logged-in session.
    async fn connect(&self) -> Result<Box<dyn Session>, RemoteError>;
}

/// One logged-in connection to a remote.
#[async_trait::async_trait]
pub trait Session: Send {
    /// Metadata of `path`; [`RemoteError::NotFound`] when it does not exist.
    /// For a directory, `kind` is [`EntryKind::Dir`].
    async fn stat(&mut self, path: &str) -> Result<RemoteEntry, RemoteError>;

    /// Sends the entries of directory `dir` (not recursive; no `.` or `..`)
    /// to `out` as they are parsed. Stops quietly if `out` is closed.
    async fn list(&mut self, dir: &str, out: &ListSink) -> Result<(), RemoteError>;

    /// Reads `len` bytes of file `path` from `offset` (`None`: to the end) and
    /// passes them, in order, to `sink`. `expect` is the entry as listed or
    /// stated: its size, version (ETag) and mtime are what must still hold —
    /// fail with [`RemoteError::Changed`] when the server shows they do not.
    /// Returns the number of bytes passed to `sink`.
    async fn read(
        &mut self,
        path: &str,
        offset: u64,
        len: Option<u64>,
        expect: &RemoteEntry,
        sink: ByteSink<'_>,
    ) -> Result<u64, RemoteError>;

    /// Reads the whole of file `path` when its current metadata is not known
    /// yet: `sink.describe` gets the entry (size, mtime, version, checksums)
    /// before the first byte. The default states the file, then reads it;
    /// a source whose read answer carries that metadata (HTTP's GET headers)
    /// does both in one request — one round trip less per file.
    async fn read_described(
        &mut self,
        path: &str,
        sink: &mut dyn DescribedSink,
    ) -> Result<u64, RemoteError> {
        let entry = self.stat(path).await?;
        if entry.kind != EntryKind::File {
            return Err(RemoteError::NotFound(format!("{path} is no longer a file")));
        }
        if !sink.describe(&entry)? {
            return Ok(0);
        }
        let mut accept = |data: &[u8]| sink.accept(data);
        self.read(path, 0, None, &entry, &mut accept).await
    }

    /// Deletes file `path` (used by `--delete-source`, after verification).
    async fn delete(&mut self, path: &str) -> Result<(), RemoteError>;
}

/// A cap on the bytes read from remotes per second, shared by every session
/// of a pull (`--bwlimit`). A remote awaits [`ReadPace::take`] for each
/// piece it read before passing it to the sink, so it reads no faster than
/// the cap (while it waits, TCP's window closes and the server pauses).
#[async_trait::async_trait]
pub trait ReadPace: Send + Sync {
    /// Waits until `n` more bytes may be taken.
    async fn take(&self, n: usize);
}

/// Awaits `pace` (if any) for `n` bytes: what every remote calls before
/// passing `n` bytes it read to its sink.
pub async fn paced(pace: &Option<Arc<dyn ReadPace>>, n: usize) {
    if let Some(p) = pace {
        p.take(n).await;
    }
}

/// Options shared by every remote.
#[derive(Clone, Default)]
pub struct RemoteOptions {
    /// Bound on every network wait (connect, login, each read).
    pub timeout: Duration,
    /// User name, when not in the URL.
    pub user: Option<String>,
    /// Password (never printed).
    pub password: Option<Secret>,
    /// Extra CA certificate (PEM) to trust for TLS (FTPS, HTTPS, S3).
    pub ca_cert: Option<PathBuf>,
    /// Accept invalid TLS certificates (testing only; printed as a warning).
    pub insecure_tls: bool,
    /// SSH: private key files to try.
    pub ssh_keys: Vec<PathBuf>,
    /// SSH: known_hosts file (default `~/.ssh/known_hosts`).
    pub known_hosts: Option<PathBuf>,
    /// SSH: accept and record a host key seen for the first time.
    pub accept_new_host_key: bool,
    /// S3: endpoint URL (`http://127.0.0.1:9000`); `None` for AWS.
    pub s3_endpoint: Option<String>,
    /// S3: region (default from the environment, else `us-east-1`).
    pub s3_region: Option<String>,
    /// S3: path-style addressing (`endpoint/bucket/key`).
    pub s3_path_style: bool,
    /// The read rate cap (`--bwlimit`), shared by every session.
    pub pace: Option<Arc<dyn ReadPace>>,
}

impl std::fmt::Debug for RemoteOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteOptions")
            .field("timeout", &self.timeout)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("ca_cert", &self.ca_cert)
            .field("insecure_tls", &self.insecure_tls)
            .field("ssh_keys", &self.ssh_keys)
            .field("known_hosts", &self.known_hosts)
            .field("accept_new_host_key", &self.accept_new_host_key)
            .field("s3_endpoint", &self.s3_endpoint)
            .field("s3_region", &self.s3_region)
            .field("s3_path_style", &self.s3_path_style)
            .field("paced", &self.pace.is_some())
            .finish()
    }
}

/// A secret string: `Debug` and `Display` never show it.
#[derive(Clone)]
pub struct Secret(Arc<str>);

impl Secret {
    /// Wraps a secret.
    pub fn new(s: impl Into<Arc<str>>) -> Self {
        Self(s.into())
    }

    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<hidden>")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<hidden>")
    }
}

/// Joins a directory path and an entry name (`/a` + `b` → `/a/b`).
pub fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Runs `fut` with the options' timeout, mapping expiry to [`RemoteError::Timeout`].
pub async fn within<T>(
    timeout: Duration,
    what: &str,
    fut: impl std::future::Future<Output = Result<T, RemoteError>>,
) -> Result<T, RemoteError> {
    let limit = if timeout.is_zero() {
        Duration::from_secs(60)
    } else {
        timeout
    };
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => Err(RemoteError::Timeout(format!(
            "{what}: no answer within {} s",
            limit.as_secs()
        ))),
    }
}
