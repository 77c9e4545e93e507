//! Data transfers of a session: listing and reading over passive data
//! connections, and stopping a transfer early without losing the session.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use haul_remote::{within, ByteSink, ListSink, RemoteEntry, RemoteError};
use tokio::io::{AsyncReadExt, BufReader};

use crate::control::{read_line, Line, Reply, Stream, MAX_LINE};
use crate::data::open_passive;
use crate::listing::{parse_list_line, parse_mlsx};
use crate::session::{normalize, refused, unexpected, FtpSession};

/// Size of the buffer data is read into (and handed to the sink from).
const READ_BUF: usize = 256 * 1024;

impl FtpSession {
    /// Opens a data connection and starts `cmd` (after `REST offset` when
    /// nonzero). `Ok(Err(reply))` when the server refused the command.
    pub(crate) async fn start_transfer(
        &mut self,
        cmd: &str,
        offset: u64,
    ) -> Result<Result<BufReader<Stream>, Reply>, RemoteError> {
        let tcp = open_passive(&mut self.ctl, &mut self.feat.epsv).await?;
        if offset > 0 {
            let r = self.ctl.cmd(&format!("REST {offset}")).await?;
            if r.code != 350 {
                return Err(match r.code {
                    500..=504 => RemoteError::Unsupported(format!(
                        "the server cannot resume at an offset (REST: {})",
                        r.message()
                    )),
                    _ => unexpected("REST", &r),
                });
            }
        }
        let r = self.ctl.cmd(cmd).await?;
        if r.code != 150 && r.code != 125 {
            drop(tcp);
            return Ok(Err(r));
        }
        let stream = match &self.tls {
            Some((tls, name)) => {
                Stream::Plain(tcp)
                    .into_tls(
                        tls,
                        name.clone(),
                        self.cfg.timeout,
                        "TLS handshake on the data connection",
                    )
                    .await?
            }
            None => Stream::Plain(tcp),
        };
        Ok(Ok(BufReader::with_capacity(64 * 1024, stream)))
    }

    /// After the data connection reached its end: the transfer's final reply.
    pub(crate) async fn finish(&mut self, what: &str) -> Result<(), RemoteError> {
        let r = self.ctl.reply(what).await?;
        match r.code {
            226 | 250 => Ok(()),
            426 | 451 => Err(RemoteError::Connection(format!(
                "{what}: transfer aborted by the server ({})",
                r.message()
            ))),
            _ => Err(unexpected(what, &r)),
        }
    }

    /// Stops a transfer early: closes the data connection, then reads the
    /// transfer's final reply (426 "aborted" or 226 if it had all been sent),
    /// so the session stays usable.
    pub(crate) async fn abandon(
        &mut self,
        data: BufReader<Stream>,
        what: &str,
    ) -> Result<(), RemoteError> {
        drop(data);
        let r = self.ctl.reply(what).await?;
        match r.class() {
            2 | 4 if r.code != 421 => Ok(()),
            _ => Err(unexpected(what, &r)),
        }
    }

    pub(crate) async fn list_inner(
        &mut self,
        dir: &str,
        out: &ListSink,
    ) -> Result<(), RemoteError> {
        let dir = normalize(dir);
        let mlsd = self.feat.mlst;
        let mut data = if mlsd {
            match self.start_transfer(&format!("MLSD {dir}"), 0).await? {
                Ok(d) => d,
                Err(r) => return Err(refused(&dir, &r, false)),
            }
        } else {
            // CWD first: a clear answer for a missing directory, and LIST
            // without a path argument (which servers parse as options).
            if let Err(r) = self.cwd(&dir).await? {
                return Err(refused(&dir, &r, false));
            }
            match self.start_transfer("LIST -a", 0).await? {
                Ok(d) => d,
                Err(r) if r.class() == 5 && r.code != 530 => {
                    match self.start_transfer("LIST", 0).await? {
                        Ok(d) => d,
                        Err(r) => return Err(refused(&dir, &r, false)),
                    }
                }
                Err(r) => return Err(unexpected("LIST", &r)),
            }
        };
        let what = format!("listing {dir}");
        let now = SystemTime::now();
        let mut line = Vec::new();
        loop {
            let got = within(self.cfg.timeout, &what, async {
                read_line(&mut data, &mut line, MAX_LINE, true)
                    .await
                    .or_else(eof_ok)
                    .map_err(|e| RemoteError::Connection(format!("{what}: {e}")))
            })
            .await?;
            let text = match got {
                Line::Eof => break,
                Line::TooLong => {
                    tracing::warn!("{what}: skipped a line longer than {MAX_LINE} bytes");
                    continue;
                }
                Line::Done => String::from_utf8_lossy(&line),
            };
            let entry = if mlsd {
                parse_mlsx(&text)
            } else {
                parse_list_line(&text, now)
            };
            let Some(entry) = entry else {
                if !text.is_empty() && !text.starts_with("total ") {
                    tracing::debug!("{what}: skipped unparsed line {:?}", text);
                }
                continue;
            };
            if out.send(entry).await.is_err() {
                return self.abandon(data, &what).await;
            }
        }
        drop(data);
        self.finish(&what).await
    }

    pub(crate) async fn read_inner(
        &mut self,
        path: &str,
        offset: u64,
        len: Option<u64>,
        expect: &RemoteEntry,
        sink: ByteSink<'_>,
    ) -> Result<u64, RemoteError> {
        let path = normalize(path);
        let size = match self.size(&path).await? {
            Ok(s) => s,
            Err(r) => {
                let is_dir = self.cwd(&path).await?.is_ok();
                return Err(if is_dir {
                    RemoteError::NotFound(format!("{path} is a directory, not a file"))
                } else {
                    refused(&path, &r, false)
                });
            }
        };
        if let (Some(now), Some(was)) = (size, expect.size) {
            if now != was {
                return Err(RemoteError::Changed(format!(
                    "{path} is now {now} bytes, was {was}"
                )));
            }
        }
        if let Some(was) = expect.mtime.filter(|t| has_seconds(*t)) {
            if let Some(now) = self.mdtm(&path).await? {
                if whole_seconds(now) != whole_seconds(was) {
                    return Err(RemoteError::Changed(format!(
                        "{path} has a new modification time"
                    )));
                }
            }
        }
        if let Some(size) = size {
            let end = offset.saturating_add(len.unwrap_or(0));
            if offset > size || end > size {
                return Err(RemoteError::Changed(format!(
                    "{path} is {size} bytes, shorter than the range asked ({offset}..{end})"
                )));
            }
            if len.is_none() && offset == size {
                return Ok(0);
            }
        }
        if len == Some(0) {
            return Ok(0);
        }
        let what = format!("reading {path}");
        let mut data = match self.start_transfer(&format!("RETR {path}"), offset).await? {
            Ok(d) => d,
            Err(r) => return Err(refused(&path, &r, size.is_some())),
        };
        let mut buf = vec![0u8; READ_BUF];
        let mut total: u64 = 0;
        loop {
            let want = match len {
                Some(l) => (l - total).min(READ_BUF as u64) as usize,
                None => READ_BUF,
            };
            if want == 0 {
                // Asked range done. At the file's end the server finishes by
                // itself; anywhere else, stop the transfer.
                if size == Some(offset + total) {
                    let n = within(
                        self.cfg.timeout,
                        &what,
                        read_some(&mut data, &mut buf[..1], &what),
                    )
                    .await?;
                    if n == 0 {
                        break;
                    }
                }
                self.abandon(data, &what).await?;
                return Ok(total);
            }
            let n = within(
                self.cfg.timeout,
                &what,
                read_some(&mut data, &mut buf[..want], &what),
            )
            .await?;
            if n == 0 {
                break;
            }
            total += n as u64;
            haul_remote::paced(&self.cfg.pace, n).await;
            if let Err(e) = sink(&buf[..n]) {
                if self.abandon(data, &what).await.is_err() {
                    self.broken = true;
                }
                return Err(e);
            }
        }
        drop(data);
        self.finish(&what).await?;
        if let Some(l) = len {
            if total < l {
                return Err(RemoteError::Connection(format!(
                    "{what}: the data connection ended after {total} of {l} bytes"
                )));
            }
        } else if let Some(size) = size {
            if offset + total != size {
                return Err(RemoteError::Changed(format!(
                    "{path}: got {} bytes, SIZE said {size}",
                    offset + total
                )));
            }
        }
        Ok(total)
    }
}

/// Reads some bytes; a TLS stream that ends without close_notify counts as
/// the end (the final reply and the byte count still vouch for the data).
async fn read_some(
    data: &mut BufReader<Stream>,
    buf: &mut [u8],
    what: &str,
) -> Result<usize, RemoteError> {
    data.read(buf)
        .await
        .or_else(|e| eof_ok(e).map(|_| 0))
        .map_err(|e| RemoteError::Connection(format!("{what}: {e}")))
}

fn eof_ok(e: std::io::Error) -> std::io::Result<Line> {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        Ok(Line::Eof)
    } else {
        Err(e)
    }
}

/// True when `t` has a sub-minute part: such a time came from MDTM, MLSD or
/// MLST (UTC, to the second), not from a LIST line (minutes at best, and
/// maybe in the server's local time), so it can be compared with MDTM.
fn has_seconds(t: SystemTime) -> bool {
    !whole_seconds(t).is_multiple_of(60)
}

fn whole_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtime_precision() {
        assert!(!has_seconds(UNIX_EPOCH + Duration::from_secs(120)));
        assert!(has_seconds(UNIX_EPOCH + Duration::from_secs(121)));
    }
}
