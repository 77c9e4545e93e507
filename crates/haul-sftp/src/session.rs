//! One SFTP session: stat, streamed listing, pipelined ranged reads, delete.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::stream::{FuturesOrdered, StreamExt};
use haul_remote::{within, ByteSink, EntryKind, ListSink, RemoteEntry, RemoteError};
use russh_sftp::client::error::Error as SftpError;
use russh_sftp::client::RawSftpSession;
use russh_sftp::protocol::{FileAttributes, OpenFlags, StatusCode};

use crate::connect::Connected;

/// READ requests kept in flight per read (× read length ≈ 8 MiB with
/// OpenSSH's 255 KiB reads, under the 16 MiB SSH window).
const PIPELINE: usize = 32;

/// Maps an SFTP client error onto the driver's classes.
pub(crate) fn sftp_err(what: &str, e: SftpError) -> RemoteError {
    match e {
        SftpError::Status(s) => {
            let msg = if s.error_message.is_empty() {
                format!("{what}: {}", s.status_code)
            } else {
                format!("{what}: {}", s.error_message)
            };
            match s.status_code {
                StatusCode::NoSuchFile => RemoteError::NotFound(msg),
                StatusCode::PermissionDenied => RemoteError::PermissionDenied(msg),
                StatusCode::NoConnection | StatusCode::ConnectionLost => {
                    RemoteError::Connection(msg)
                }
                StatusCode::OpUnsupported => RemoteError::Unsupported(msg),
                _ => RemoteError::Protocol(msg),
            }
        }
        SftpError::Timeout => RemoteError::Timeout(format!("{what}: no SFTP answer in time")),
        SftpError::IO(m) => RemoteError::Connection(format!("{what}: {m}")),
        // "session closed", "sender dropped": the channel or connection ended.
        SftpError::UnexpectedBehavior(m) => {
            RemoteError::Connection(format!("{what}: SFTP session ended: {m}"))
        }
        SftpError::UnexpectedPacket => {
            RemoteError::Protocol(format!("{what}: unexpected SFTP reply"))
        }
        SftpError::Limited(m) => RemoteError::Protocol(format!("{what}: {m}")),
    }
}

fn is_eof(e: &SftpError) -> bool {
    matches!(e, SftpError::Status(s) if s.status_code == StatusCode::Eof)
}

fn kind_of(a: &FileAttributes) -> EntryKind {
    let t = a.file_type();
    if t.is_dir() {
        EntryKind::Dir
    } else if t.is_file() {
        EntryKind::File
    } else {
        EntryKind::Other
    }
}

fn entry(name: String, a: &FileAttributes) -> RemoteEntry {
    let kind = kind_of(a);
    RemoteEntry {
        name,
        kind,
        size: if kind == EntryKind::File {
            a.size
        } else {
            None
        },
        mtime: a
            .mtime
            .map(|s| UNIX_EPOCH + Duration::from_secs(u64::from(s))),
        version: None,
        checksums: Vec::new(),
    }
}

fn secs(t: SystemTime) -> Option<u64> {
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

/// A logged-in SFTP session (one SSH connection).
pub(crate) struct SftpSession {
    conn: Connected,
    timeout: Duration,
    display: String,
    /// The read rate cap (`--bwlimit`).
    pace: Option<Arc<dyn haul_remote::ReadPace>>,
}

impl SftpSession {
    pub(crate) fn new(
        conn: Connected,
        timeout: Duration,
        display: String,
        pace: Option<Arc<dyn haul_remote::ReadPace>>,
    ) -> Self {
        Self {
            conn,
            timeout,
            display,
            pace,
        }
    }

    fn what(&self, op: &str, path: &str) -> String {
        format!("{op} {}{path}", self.display)
    }

    /// Closes a handle, bounded, ignoring the answer (cleanup only).
    async fn close_quietly(&self, handle: String) {
        let t = self
            .timeout
            .min(Duration::from_secs(5))
            .max(Duration::from_secs(1));
        let _ = tokio::time::timeout(t, self.conn.sftp.close(handle)).await;
    }

    async fn read_open(
        &self,
        handle: &str,
        path: &str,
        offset: u64,
        len: Option<u64>,
        expect: &RemoteEntry,
        sink: ByteSink<'_>,
    ) -> Result<u64, RemoteError> {
        let sftp = &self.conn.sftp;
        let what = self.what("read", path);
        let attrs = within(self.timeout, &what, async {
            sftp.fstat(handle).await.map_err(|e| sftp_err(&what, e))
        })
        .await?
        .attrs;
        if kind_of(&attrs) == EntryKind::Dir {
            return Err(RemoteError::Unsupported(format!("{what}: is a directory")));
        }
        if let (Some(want), Some(got)) = (expect.size, attrs.size) {
            if want != got {
                return Err(RemoteError::Changed(format!(
                    "{what}: size is now {got} bytes, was {want}"
                )));
            }
        }
        if let (Some(want), Some(got)) = (expect.mtime.and_then(secs), attrs.mtime) {
            if want != u64::from(got) {
                return Err(RemoteError::Changed(format!(
                    "{what}: modification time is now {got}, was {want} (seconds since 1970)"
                )));
            }
        }
        // End of the range: asked length, else the size fstat told, else EOF.
        let end = match (len, attrs.size) {
            (Some(l), size) => {
                let end = offset
                    .checked_add(l)
                    .ok_or_else(|| RemoteError::Protocol(format!("{what}: range overflows")))?;
                if let Some(size) = size.filter(|&s| end > s) {
                    return Err(RemoteError::Changed(format!(
                        "{what}: the file has {size} bytes, the range asks up to {end}"
                    )));
                }
                Some(end)
            }
            (None, Some(size)) if offset > size => {
                return Err(RemoteError::Changed(format!(
                    "{what}: the file has {size} bytes, the read starts at {offset}"
                )))
            }
            (None, size) => size,
        };
        self.pipelined(handle, &what, offset, end, sink).await
    }

    /// Reads [offset, end) (or to EOF when `end` is None) with up to
    /// `PIPELINE` READ requests in flight, delivering in order.
    async fn pipelined(
        &self,
        handle: &str,
        what: &str,
        offset: u64,
        end: Option<u64>,
        sink: ByteSink<'_>,
    ) -> Result<u64, RemoteError> {
        let sftp = &self.conn.sftp;
        let chunk = u64::from(self.conn.read_len.max(1));
        let shrank = |at: u64| {
            RemoteError::Changed(format!(
                "{what}: the file ended at byte {at} (it shrank while being read)"
            ))
        };
        let mut queue: FuturesOrdered<ReadFut<'_>> = FuturesOrdered::new();
        let mut next = offset; // next offset to request
        let mut delivered = offset; // next offset to deliver
        loop {
            while queue.len() < PIPELINE && end.is_none_or(|e| next < e) {
                let n = end.map_or(chunk, |e| (e - next).min(chunk));
                queue.push_back(issue(sftp, handle, next, n as u32));
                next += n;
            }
            let Some((off, n, r)) =
                within(self.timeout, what, async { Ok(queue.next().await) }).await?
            else {
                break;
            };
            let data = match r {
                Ok(d) => d,
                // Reading to EOF without a known size: later requests are
                // past the end too; they are dropped with the queue.
                Err(e) if is_eof(&e) && end.is_none() => break,
                Err(e) if is_eof(&e) => return Err(shrank(off)),
                Err(e) => return Err(sftp_err(what, e)),
            };
            if data.len() > n as usize {
                return Err(RemoteError::Protocol(format!(
                    "{what}: server sent {} bytes for a {n}-byte read",
                    data.len()
                )));
            }
            haul_remote::paced(&self.pace, data.len()).await;
            sink(&data)?;
            delivered += data.len() as u64;
            // Short read: fetch the rest of this request before delivering
            // the replies queued behind it.
            let mut left = n as usize - data.len();
            let mut at_eof = false;
            while left > 0 {
                let r = within(self.timeout, what, async {
                    Ok(sftp.read(handle, delivered, left as u32).await)
                })
                .await?;
                match r {
                    Ok(d) if d.data.len() > left => {
                        return Err(RemoteError::Protocol(format!(
                            "{what}: oversized READ reply"
                        )))
                    }
                    Ok(d) if !d.data.is_empty() => {
                        haul_remote::paced(&self.pace, d.data.len()).await;
                        sink(&d.data)?;
                        delivered += d.data.len() as u64;
                        left -= d.data.len();
                    }
                    Ok(_) => at_eof = true,
                    Err(e) if is_eof(&e) => at_eof = true,
                    Err(e) => return Err(sftp_err(what, e)),
                }
                if at_eof {
                    if end.is_some() {
                        return Err(shrank(delivered));
                    }
                    break;
                }
            }
            if at_eof {
                break;
            }
        }
        drop(queue);
        if let Some(e) = end {
            if delivered != e {
                return Err(RemoteError::Connection(format!(
                    "{what}: got {} of {} bytes",
                    delivered - offset,
                    e - offset
                )));
            }
        }
        Ok(delivered - offset)
    }
}

/// One READ in flight: (offset, length, reply).
type ReadFut<'s> =
    Pin<Box<dyn Future<Output = (u64, u32, Result<Vec<u8>, SftpError>)> + Send + 's>>;

fn issue<'s>(sftp: &'s RawSftpSession, handle: &str, off: u64, n: u32) -> ReadFut<'s> {
    let handle = handle.to_string();
    Box::pin(async move { (off, n, sftp.read(handle, off, n).await.map(|d| d.data)) })
}

#[async_trait::async_trait]
impl haul_remote::Session for SftpSession {
    async fn stat(&mut self, path: &str) -> Result<RemoteEntry, RemoteError> {
        let what = self.what("stat", path);
        let sftp = &self.conn.sftp;
        let attrs = within(self.timeout, &what, async {
            sftp.stat(path).await.map_err(|e| sftp_err(&what, e))
        })
        .await?
        .attrs;
        let name = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        let name = if name.is_empty() { "/" } else { name };
        Ok(entry(name.to_string(), &attrs))
    }

    async fn list(&mut self, dir: &str, out: &ListSink) -> Result<(), RemoteError> {
        let what = self.what("list", dir);
        let sftp = &self.conn.sftp;
        let handle = within(self.timeout, &what, async {
            sftp.opendir(dir).await.map_err(|e| sftp_err(&what, e))
        })
        .await?
        .handle;
        let result = async {
            loop {
                let batch = within(self.timeout, &what, async {
                    Ok(sftp.readdir(handle.as_str()).await)
                })
                .await?;
                let batch = match batch {
                    Ok(b) => b,
                    Err(e) if is_eof(&e) => return Ok(()),
                    Err(e) => return Err(sftp_err(&what, e)),
                };
                if batch.files.is_empty() {
                    return Ok(());
                }
                for f in batch.files {
                    if f.filename == "."
                        || f.filename == ".."
                        || f.filename.is_empty()
                        || f.filename.contains('/')
                    {
                        continue;
                    }
                    let e = entry(f.filename, &f.attrs);
                    if out.send(e).await.is_err() {
                        return Ok(()); // receiver gone
                    }
                }
            }
        }
        .await;
        self.close_quietly(handle).await;
        result
    }

    async fn read(
        &mut self,
        path: &str,
        offset: u64,
        len: Option<u64>,
        expect: &RemoteEntry,
        sink: ByteSink<'_>,
    ) -> Result<u64, RemoteError> {
        let what = self.what("read", path);
        let sftp = &self.conn.sftp;
        let handle = within(self.timeout, &what, async {
            sftp.open(path, OpenFlags::READ, FileAttributes::empty())
                .await
                .map_err(|e| sftp_err(&what, e))
        })
        .await?
        .handle;
        let r = self
            .read_open(&handle, path, offset, len, expect, sink)
            .await;
        self.close_quietly(handle).await;
        r
    }

    async fn delete(&mut self, path: &str) -> Result<(), RemoteError> {
        let what = self.what("delete", path);
        let sftp = &self.conn.sftp;
        within(self.timeout, &what, async {
            sftp.remove(path)
                .await
                .map(|_| ())
                .map_err(|e| sftp_err(&what, e))
        })
        .await
    }
}
