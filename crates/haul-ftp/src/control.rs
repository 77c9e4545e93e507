//! The control connection: commands out, (multi-line) replies in, every wait
//! bounded by the timeout and every line by [`MAX_LINE`].

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use haul_remote::{within, RemoteError};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, ReadBuf,
};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

pub(crate) use crate::reply::{Reply, ReplyReader};

/// Longest control or listing line kept (longer ones are an error on the
/// control connection and skipped in listings).
pub(crate) const MAX_LINE: usize = 8192;

/// A TCP stream, plain or inside TLS.
pub(crate) enum Stream {
    /// No TLS.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<TlsStream<TcpStream>>),
    /// Placeholder while the stream is being upgraded to TLS.
    Closed,
}

impl Stream {
    /// Wraps `self` (which must be plain) in TLS.
    pub(crate) async fn into_tls(
        self,
        config: &Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
        timeout: Duration,
        what: &str,
    ) -> Result<Stream, RemoteError> {
        let tcp = match self {
            Stream::Plain(t) => t,
            _ => {
                return Err(RemoteError::Protocol(format!(
                    "{what}: TLS requested twice"
                )))
            }
        };
        let connector = tokio_rustls::TlsConnector::from(config.clone());
        let tls = within(timeout, what, async {
            connector
                .connect(name, tcp)
                .await
                .map_err(|e| tls_error(what, e))
        })
        .await?;
        Ok(Stream::Tls(Box::new(tls)))
    }
}

/// Maps a TLS handshake failure: certificate problems say how to fix them.
fn tls_error(what: &str, e: io::Error) -> RemoteError {
    let text = e.to_string();
    if text.contains("certificate") || text.contains("Certificate") {
        RemoteError::Connection(format!(
            "{what}: {text} (trust the server's CA with --ca-cert, or use --insecure for testing)"
        ))
    } else {
        RemoteError::Connection(format!("{what}: {text}"))
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::Closed => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::Closed => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::Closed => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Stream::Closed => Poll::Ready(Ok(())),
        }
    }
}

/// What [`read_line`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A line (without its CR LF) is in the buffer.
    Done,
    /// The line was longer than the cap: it was read through and dropped.
    TooLong,
    /// End of stream before any byte of a new line.
    Eof,
}

/// Reads one line into `out` (cleared first), keeping at most `cap` bytes.
/// A last line without a newline counts as a line. A longer line is read
/// through to its end when `skip_long` (listings), else given up on at once
/// (the control connection: the stream is then out of step anyway).
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    out: &mut Vec<u8>,
    cap: usize,
    skip_long: bool,
) -> io::Result<Line> {
    out.clear();
    let mut too_long = false;
    let mut seen = false;
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return Ok(match (seen, too_long) {
                (false, _) => Line::Eof,
                (true, true) => Line::TooLong,
                (true, false) => {
                    trim_eol(out);
                    Line::Done
                }
            });
        }
        seen = true;
        let (chunk, found) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !too_long {
            if out.len() + chunk.len() > cap {
                if !skip_long {
                    return Ok(Line::TooLong);
                }
                too_long = true;
                out.clear();
            } else {
                out.extend_from_slice(chunk);
            }
        }
        let used = found.unwrap_or(buf.len());
        r.consume(used);
        if found.is_some() {
            if too_long {
                return Ok(Line::TooLong);
            }
            trim_eol(out);
            return Ok(Line::Done);
        }
    }
}

fn trim_eol(v: &mut Vec<u8>) {
    while v.last() == Some(&b'\r') {
        v.pop();
    }
}

/// The control connection.
pub(crate) struct Control {
    reader: BufReader<Stream>,
    timeout: Duration,
    peer: SocketAddr,
    line: Vec<u8>,
}

impl Control {
    /// Connects to `host:port` (plain TCP).
    pub(crate) async fn connect(
        authority: &str,
        timeout: Duration,
    ) -> Result<Control, RemoteError> {
        let tcp = within(timeout, &format!("connecting to {authority}"), async {
            TcpStream::connect(authority)
                .await
                .map_err(|e| RemoteError::Connection(format!("cannot connect to {authority}: {e}")))
        })
        .await?;
        let _ = tcp.set_nodelay(true);
        let peer = tcp
            .peer_addr()
            .map_err(|e| RemoteError::Connection(format!("{authority}: {e}")))?;
        Ok(Control {
            reader: BufReader::new(Stream::Plain(tcp)),
            timeout,
            peer,
            line: Vec::new(),
        })
    }

    /// The server's address (data connections go to this IP).
    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The timeout for every wait.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Starts TLS on the connection (implicit TLS, or after `AUTH TLS`).
    pub(crate) async fn start_tls(
        &mut self,
        config: &Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
    ) -> Result<(), RemoteError> {
        if !self.reader.buffer().is_empty() {
            return Err(RemoteError::Protocol(
                "server sent data before the TLS handshake".into(),
            ));
        }
        let old = std::mem::replace(&mut self.reader, BufReader::new(Stream::Closed));
        let tls = old
            .into_inner()
            .into_tls(
                config,
                name,
                self.timeout,
                "TLS handshake on the control connection",
            )
            .await?;
        self.reader = BufReader::new(tls);
        Ok(())
    }

    /// Sends one command line. `shown` is what errors may show (never a password).
    pub(crate) async fn send(&mut self, cmd: &str, shown: &str) -> Result<(), RemoteError> {
        if cmd.contains(['\r', '\n']) {
            return Err(RemoteError::Unsupported(format!(
                "{shown}: FTP cannot send a path containing CR or LF"
            )));
        }
        let line = format!("{cmd}\r\n");
        let stream = self.reader.get_mut();
        within(self.timeout, &format!("sending {shown}"), async {
            let conn = |e: io::Error| RemoteError::Connection(format!("sending {shown}: {e}"));
            stream.write_all(line.as_bytes()).await.map_err(conn)?;
            stream.flush().await.map_err(conn)
        })
        .await
    }

    /// Sends a command and reads its reply.
    pub(crate) async fn cmd(&mut self, cmd: &str) -> Result<Reply, RemoteError> {
        let shown = shown_command(cmd);
        self.send(cmd, &shown).await?;
        self.reply(&shown).await
    }

    /// Reads one reply (all its lines).
    pub(crate) async fn reply(&mut self, what: &str) -> Result<Reply, RemoteError> {
        let timeout = self.timeout;
        within(
            timeout,
            &format!("waiting for the reply to {what}"),
            self.reply_inner(what),
        )
        .await
    }

    async fn reply_inner(&mut self, what: &str) -> Result<Reply, RemoteError> {
        let mut reader = ReplyReader::default();
        loop {
            let line = self.next_line(what).await?;
            match reader.push(&line) {
                Ok(Some(reply)) => return Ok(reply),
                Ok(None) => {}
                Err(e) => return Err(RemoteError::Protocol(format!("{what}: {e}"))),
            }
        }
    }

    async fn next_line(&mut self, what: &str) -> Result<String, RemoteError> {
        let mut line = std::mem::take(&mut self.line);
        let r = read_line(&mut self.reader, &mut line, MAX_LINE, false).await;
        let out = match r {
            Ok(Line::Done) => Ok(String::from_utf8_lossy(&line).into_owned()),
            Ok(Line::TooLong) => Err(RemoteError::Protocol(format!(
                "{what}: reply line longer than {MAX_LINE} bytes"
            ))),
            Ok(Line::Eof) => Err(RemoteError::Connection(format!(
                "{what}: the server closed the control connection"
            ))),
            Err(e) => Err(RemoteError::Connection(format!("{what}: {e}"))),
        };
        self.line = line;
        out
    }
}

/// A command as errors may show it: `PASS` never shows its argument.
pub(crate) fn shown_command(cmd: &str) -> String {
    if cmd.len() >= 4 && cmd[..4].eq_ignore_ascii_case("PASS") {
        "PASS".to_string()
    } else {
        cmd.chars().take(300).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown() {
        assert_eq!(shown_command("PASS hunter2"), "PASS");
        assert_eq!(shown_command("pass hunter2"), "PASS");
    }

    #[tokio::test]
    async fn capped_lines() {
        let data = b"short\r\nxxxxxxxxxxxxxxxxxxxx\nlast".to_vec();
        let mut r = BufReader::with_capacity(4, &data[..]);
        let mut out = Vec::new();
        assert_eq!(
            read_line(&mut r, &mut out, 10, true).await.unwrap(),
            Line::Done
        );
        assert_eq!(out, b"short");
        assert_eq!(
            read_line(&mut r, &mut out, 10, true).await.unwrap(),
            Line::TooLong
        );
        assert_eq!(
            read_line(&mut r, &mut out, 10, true).await.unwrap(),
            Line::Done
        );
        assert_eq!(out, b"last");
        assert_eq!(
            read_line(&mut r, &mut out, 10, true).await.unwrap(),
            Line::Eof
        );
        let mut r = BufReader::with_capacity(4, &data[..]);
        read_line(&mut r, &mut out, 10, false).await.unwrap();
        assert_eq!(
            read_line(&mut r, &mut out, 10, false).await.unwrap(),
            Line::TooLong
        );
    }
}
