//! The protocol over the ssh channel itself (rsync's way): each connection
//! is one ssh session running `haul serve --stdio`, which prints the
//! [`banner_line`](super::banner_line) and then serves that one connection
//! on its stdin and stdout. The ssh login is the authentication.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use haul_transport::{stream_connection, Timeouts};
use tokio::io::{AsyncRead, BufReader, ReadBuf};
use tokio::process::{Child, ChildStdout};

use super::channel::{self, quoted};
use super::{is_banner, SshLocation, SshOptions};
use crate::dial::{Dial, Dialing, Reached};
use crate::NodeError;

/// A node started over ssh for each connection, serving `root`.
pub(crate) struct SshTunnel {
    pub(crate) at: SshLocation,
    pub(crate) root: String,
    pub(crate) ssh: SshOptions,
    pub(crate) timeouts: Timeouts,
    pub(crate) name: String,
}

impl SshTunnel {
    /// The far side's command line for `mode` (`--stdio`, `--ssh`).
    pub(crate) fn remote(&self, remote_haul: &str, mode: &str) -> Result<String, NodeError> {
        Ok(format!(
            "{remote_haul} -q serve {mode} --root {}",
            quoted(&self.root)?
        ))
    }

    /// One connection over its own ssh session.
    pub(crate) async fn connect_with(&self, remote_haul: &str) -> Result<Reached, NodeError> {
        let remote = self.remote(remote_haul, "--stdio")?;
        let ch = channel::open(&self.at, &self.ssh, &remote, self.timeouts, &self.name).await?;
        if !is_banner(&ch.first) {
            return Err(channel::not_haul(&self.name, &ch.first));
        }
        let reader = Tunnelled {
            stdout: ch.stdout,
            _ssh: ch.ssh,
        };
        Ok(Reached {
            conn: stream_connection(reader, ch.stdin, self.timeouts),
            key: None,
            over: "the ssh channel",
            answer_first: false,
            token: None,
        })
    }
}

impl Dial for SshTunnel {
    fn connect(&self) -> Dialing<'_> {
        Box::pin(self.connect_with(&self.ssh.remote_haul))
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// The ssh channel's stdout, owning the ssh process (killed when the
/// connection is dropped).
struct Tunnelled {
    stdout: BufReader<ChildStdout>,
    _ssh: Child,
}

impl AsyncRead for Tunnelled {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stdout).poll_read(cx, buf)
    }
}
