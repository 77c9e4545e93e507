//! Reaching a node over SSH with nothing set up on the far side but haul:
//! the system `ssh` (so `~/.ssh/config`, `ProxyJump`, the agent and
//! `ControlMaster` work as the user has them) runs `haul serve --stdio` in
//! the directory the location names, and the protocol flows over the ssh
//! channel, as rsync's does. Each connection of a pool is one ssh session
//! (cheap with `ControlMaster`).
//!
//! The far side first prints [`BANNER`] and its protocol version on a line
//! of its own; anything else on stdout before it (a login script that
//! prints) or an ssh that exits (host key, authentication, no haul there)
//! becomes one clear error with ssh's own words.
//!
//! Locations: `[user@]host:path` (rsync's single colon; `host:` is the
//! login directory, relative paths are relative to it) and
//! `ssh://[user@]host[:port]/path`. The far side serves the directory the
//! path is in ([`SshLocation::root_and_path`]).

use std::io;
use std::pin::Pin;
use std::process::Stdio;
use std::task::{Context, Poll};
use std::time::Duration;

use haul_proto::PROTOCOL_VERSION;
use haul_transport::{stream_connection, Timeouts};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader, ReadBuf};
use tokio::process::{Child, ChildStdout, Command};

use crate::dial::{Dial, Dialing, Reached};
use crate::NodeError;

/// What `haul serve --stdio` prints before anything else.
pub const BANNER: &str = "haul-stdio";

/// How ssh is run and where haul is on the far side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshOptions {
    /// The ssh command and its arguments (`-e`/`--rsh`, `HAUL_RSH`).
    pub rsh: Vec<String>,
    /// The far side's haul, as a command for its shell (`--remote-haul`,
    /// as rsync's `--rsync-path`: `sudo haul` works).
    pub remote_haul: String,
}

impl Default for SshOptions {
    fn default() -> Self {
        Self {
            rsh: vec!["ssh".into()],
            remote_haul: "haul".into(),
        }
    }
}

impl SshOptions {
    /// `-e CMD`: split as a shell would (quotes kept together).
    pub fn with_rsh(mut self, command: &str) -> Result<Self, String> {
        let words = shlex::split(command)
            .filter(|w| !w.is_empty())
            .ok_or_else(|| format!("--rsh {command:?}: unbalanced quotes"))?;
        self.rsh = words;
        Ok(self)
    }
}

/// A path on a host reached over ssh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshLocation {
    /// Login name (`user@`), else ssh's default.
    pub user: Option<String>,
    /// Host name or address, as ssh takes it (an alias from `~/.ssh/config` too).
    pub host: String,
    /// Port (`ssh://host:PORT/`), else ssh's default.
    pub port: Option<u16>,
    /// The path there; empty for the login directory.
    pub path: String,
}

impl SshLocation {
    /// `text` as an SSH location: `None` when it is not one (a local path,
    /// a URL of another scheme), an error when it is one but malformed.
    pub fn parse(text: &str) -> Option<Result<Self, String>> {
        if let Some(rest) = text.strip_prefix("ssh://") {
            return Some(Self::parse_url(text, rest));
        }
        if text.contains("://") {
            return None;
        }
        // rsync's rule: a colon before any slash names a host ([v6]:path too).
        let colon = match text.strip_prefix('[') {
            Some(rest) => rest.find("]:")? + 2,
            None => text.find(':')?,
        };
        if text[..colon].contains('/') {
            return None;
        }
        let (login, path) = (&text[..colon], &text[colon + 1..]);
        if path.starts_with(':') {
            return Some(Err(format!(
                "{text:?}: host::module is an rsync daemon's syntax; haul reaches hosts over ssh as host:path"
            )));
        }
        Some(Self::login(text, login).map(|(user, host)| Self {
            user,
            host,
            port: None,
            path: path.to_owned(),
        }))
    }

    fn parse_url(text: &str, rest: &str) -> Result<Self, String> {
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        // The port follows the host: after `]` for an IPv6 address.
        let host_at = match authority.rfind(']') {
            Some(i) => i + 1,
            None => authority.rfind('@').map_or(0, |i| i + 1),
        };
        let (login, port) = match authority[host_at..].find(':') {
            Some(j) => {
                let port = &authority[host_at + j + 1..];
                let port = port
                    .parse::<u16>()
                    .map_err(|_| format!("{text:?}: the port {port:?} is not a number"))?;
                (&authority[..host_at + j], Some(port))
            }
            None => (authority, None),
        };
        let (user, host) = Self::login(text, login)?;
        Ok(Self {
            user,
            host,
            port,
            path: path.to_owned(),
        })
    }

    /// `[user@]host` checked: a host that ssh could take for an option, or
    /// one with spaces, is refused.
    fn login(text: &str, login: &str) -> Result<(Option<String>, String), String> {
        let (user, host) = match login.rsplit_once('@') {
            Some((user, host)) => (Some(user.to_owned()), host),
            None => (None, login),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let bad = |s: &str| s.is_empty() || s.starts_with('-') || s.contains(char::is_whitespace);
        if bad(host) || user.as_deref().is_some_and(bad) {
            return Err(format!(
                "{text:?}: not a host to reach over ssh ([user@]host:path or ssh://[user@]host[:port]/path)"
            ));
        }
        Ok((user, host.to_owned()))
    }

    /// The directory the far side serves and the path under it: a path
    /// ending in `/` is served itself (its contents); otherwise its parent,
    /// so the last name can be a file or a directory, made or not, as for
    /// `haul://` paths; the login directory (`.`) for a relative path with
    /// no parent.
    pub fn root_and_path(&self) -> (String, String) {
        let p = self.path.as_str();
        if p.is_empty() {
            return (".".into(), String::new());
        }
        if p.ends_with('/') {
            let root = p.trim_end_matches('/');
            return (
                if root.is_empty() { "/" } else { root }.to_owned(),
                String::new(),
            );
        }
        match p.rsplit_once('/') {
            Some(("", name)) => ("/".into(), name.to_owned()),
            Some((dir, name)) => (dir.to_owned(), name.to_owned()),
            None => (".".into(), p.to_owned()),
        }
    }

    /// How messages name it: `[user@]host`.
    pub fn name(&self) -> String {
        match &self.user {
            Some(u) => format!("{u}@{}", self.host),
            None => self.host.clone(),
        }
    }
}

/// A node started over ssh for each connection, serving `root`.
pub(crate) struct SshTunnel {
    pub(crate) at: SshLocation,
    pub(crate) root: String,
    pub(crate) ssh: SshOptions,
    pub(crate) timeouts: Timeouts,
    pub(crate) name: String,
}

impl SshTunnel {
    /// The ssh command line: options, `-p`, `-l`, the host, then the far
    /// side's command (its root quoted for the remote shell).
    fn command(&self) -> Result<Command, NodeError> {
        let (program, args) = self
            .ssh
            .rsh
            .split_first()
            .ok_or_else(|| NodeError::Usage("--rsh is empty".into()))?;
        let root = shlex::try_quote(&self.root)
            .map_err(|_| NodeError::Usage(format!("{:?}: not a path ssh can pass", self.root)))?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        if let Some(port) = self.at.port {
            cmd.arg("-p").arg(port.to_string());
        }
        if let Some(user) = &self.at.user {
            cmd.arg("-l").arg(user);
        }
        cmd.arg(&self.at.host)
            .arg(format!(
                "{} -q serve --stdio --root {root}",
                self.ssh.remote_haul
            ))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        Ok(cmd)
    }
}

impl Dial for SshTunnel {
    fn connect(&self) -> Dialing<'_> {
        Box::pin(async move {
            let mut child = self.command()?.spawn().map_err(|e| {
                NodeError::Usage(format!(
                    "cannot run {:?}: {e} (is OpenSSH installed? --rsh or HAUL_RSH name another)",
                    self.ssh.rsh.first().map_or("", String::as_str)
                ))
            })?;
            let (Some(stdin), Some(stdout), Some(stderr)) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take())
            else {
                return Err(NodeError::Internal("ssh started without its pipes".into()));
            };
            let mut stdout = BufReader::new(stdout);
            // ssh's own handshake, then the far side's start.
            let wait = self.timeouts.connect + self.timeouts.handshake * 2;
            let banner = tokio::time::timeout(wait, first_line(&mut stdout)).await;
            match banner {
                Ok(Ok(line)) if is_banner(&line) => {}
                Ok(Ok(line)) => {
                    return Err(NodeError::Usage(format!(
                        "{}: something printed {line:?} before haul started; the far side's login scripts must not write to stdout (as for rsync)",
                        self.name
                    )))
                }
                Ok(Err(_)) => return Err(self.failed(child, stderr).await),
                Err(_) => {
                    return Err(NodeError::Usage(format!(
                        "{}: ssh did not start haul there within {}s",
                        self.name,
                        wait.as_secs()
                    )))
                }
            }
            let name = self.name.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::warn!("{name}: {line}");
                }
            });
            let reader = Tunnelled {
                stdout,
                _ssh: child,
            };
            Ok(Reached {
                conn: stream_connection(reader, stdin, self.timeouts),
                key: None,
                over: "ssh",
            })
        })
    }

    fn name(&self) -> &str {
        &self.name
    }
}

impl SshTunnel {
    /// ssh ended before the far side started: why, in ssh's words.
    async fn failed(&self, mut child: Child, stderr: tokio::process::ChildStderr) -> NodeError {
        let mut said = Vec::new();
        let mut stderr = stderr.take(8 << 10);
        let _ = tokio::time::timeout(Duration::from_secs(2), stderr.read_to_end(&mut said)).await;
        let status = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
        let code = status.ok().and_then(Result::ok).and_then(|s| s.code());
        let said = String::from_utf8_lossy(&said);
        let last = said
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim();
        let name = &self.name;
        if code == Some(127) || last.contains("not found") || last.contains("No such file") {
            return NodeError::Usage(format!(
                "{name}: no haul there ({last}): install it on that host, or name it with --remote-haul PATH"
            ));
        }
        if code == Some(255) {
            return NodeError::Usage(format!("ssh {name} failed: {last}"));
        }
        let code = code.map_or_else(|| "no exit code".to_owned(), |c| format!("exit {c}"));
        NodeError::Usage(format!("{name}: haul did not start there ({code}): {last}"))
    }
}

/// The first line of `r`, at most 256 bytes; an error at end of input.
async fn first_line(r: &mut BufReader<ChildStdout>) -> io::Result<String> {
    let mut line = Vec::new();
    let n = (&mut *r).take(256).read_until(b'\n', &mut line).await?;
    if n == 0 || line.last() != Some(&b'\n') {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(String::from_utf8_lossy(&line).trim_end().to_owned())
}

/// Whether `line` is the far side's banner with this protocol version.
fn is_banner(line: &str) -> bool {
    line == banner_line().trim_end()
}

/// The banner line `haul serve --stdio` prints.
pub fn banner_line() -> String {
    format!("{BANNER} {PROTOCOL_VERSION}\n")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> SshLocation {
        SshLocation::parse(text).unwrap().unwrap()
    }

    #[test]
    fn scp_and_url_forms_parse_as_rsync_and_ssh_take_them() {
        let a = at("alice@host:/data/run");
        assert_eq!(
            (a.user.as_deref(), a.host.as_str(), a.port),
            (Some("alice"), "host", None)
        );
        assert_eq!(a.path, "/data/run");
        assert_eq!(at("host:").path, "");
        assert_eq!(at("host:rel/x").path, "rel/x");
        let u = at("ssh://bob@10.0.0.2:2222/srv/in/");
        assert_eq!(
            (u.user.as_deref(), u.host.as_str(), u.port),
            (Some("bob"), "10.0.0.2", Some(2222))
        );
        assert_eq!(u.path, "/srv/in/");
        assert_eq!(at("ssh://h").path, "");
        assert_eq!(at("[::1]:/x").host, "::1");
        // Not SSH: local paths (a slash before the colon), other schemes.
        for local in ["./a:b", "/abs/a:b", "plain", "haul://h:1/x", "sftp://h/x"] {
            assert!(SshLocation::parse(local).is_none(), "{local}");
        }
        // Malformed: an option for a host, rsync's daemon syntax, a bad port.
        for bad in [
            "-oProxyCommand=x:/p",
            "host::module",
            "ssh://h:port/x",
            ":path",
            "a b:/x",
        ] {
            assert!(matches!(SshLocation::parse(bad), Some(Err(_))), "{bad}");
        }
    }

    #[test]
    fn the_far_side_serves_the_directory_the_path_is_in() {
        let split = |p: &str| at(&format!("h:{p}")).root_and_path();
        let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(split("/d/x"), pair("/d", "x"));
        assert_eq!(split("/d/x/"), pair("/d/x", ""));
        assert_eq!(split("/x"), pair("/", "x"));
        assert_eq!(split("/"), pair("/", ""));
        assert_eq!(split(""), pair(".", ""));
        assert_eq!(split("file.bin"), pair(".", "file.bin"));
        assert_eq!(split("rel/x"), pair("rel", "x"));
    }

    #[test]
    fn rsh_is_split_as_a_shell_would() {
        let o = SshOptions::default()
            .with_rsh("ssh -i '/k ey' -p 22")
            .unwrap();
        assert_eq!(o.rsh, ["ssh", "-i", "/k ey", "-p", "22"]);
        assert!(SshOptions::default().with_rsh("ssh 'open").is_err());
        assert!(is_banner(banner_line().trim_end()));
        assert!(!is_banner("Welcome to host"));
    }
}
