//! One ssh session running one far-side command: the command line (ssh's
//! options, `-p`, `-l`, the host, the command for the far shell), the first
//! line the far side prints, and — when ssh ends before it — why, in ssh's
//! own words.

use std::io;
use std::process::Stdio;
use std::time::Duration;

use haul_transport::Timeouts;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use super::{SshLocation, SshOptions};
use crate::NodeError;

/// An ssh session whose far command has printed its first line.
pub(crate) struct Channel {
    /// The ssh process (killed when dropped).
    pub(crate) ssh: Child,
    /// What the client writes to the far command.
    pub(crate) stdin: ChildStdin,
    /// What the far command prints after its first line.
    pub(crate) stdout: BufReader<ChildStdout>,
    /// The first line, without its newline.
    pub(crate) first: String,
}

/// The far shell's form of `path` (quoted; refused when it cannot be).
pub(crate) fn quoted(path: &str) -> Result<String, NodeError> {
    shlex::try_quote(path)
        .map(|q| q.into_owned())
        .map_err(|_| NodeError::Usage(format!("{path:?}: not a path ssh can pass")))
}

/// Runs `remote` (a command line for the far shell) on `at`'s host over
/// ssh and waits, within the timeouts, for its first line. Its stderr
/// becomes log lines named `name`.
pub(crate) async fn open(
    at: &SshLocation,
    ssh: &SshOptions,
    remote: &str,
    timeouts: Timeouts,
    name: &str,
) -> Result<Channel, NodeError> {
    let mut cmd = command(at, ssh, remote)?;
    let mut child = spawn(&mut cmd, ssh)?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(NodeError::Internal("ssh started without its pipes".into()));
    };
    let mut stdout = BufReader::new(stdout);
    // ssh's own handshake, then the far side's start.
    let wait = timeouts.connect + timeouts.handshake * 2;
    match tokio::time::timeout(wait, first_line(&mut stdout)).await {
        Ok(Ok(first)) => {
            let name = name.to_owned();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::warn!("{name}: {line}");
                }
            });
            Ok(Channel {
                ssh: child,
                stdin,
                stdout,
                first,
            })
        }
        Ok(Err(_)) => Err(failed(name, child, stderr).await),
        Err(_) => Err(NodeError::Usage(format!(
            "{name}: ssh did not start haul there within {}s",
            wait.as_secs()
        ))),
    }
}

/// ssh's command line: its options, `-p`, `-l`, the host, then `remote`
/// for the far shell; every stream piped, killed when dropped.
pub(crate) fn command(
    at: &SshLocation,
    ssh: &SshOptions,
    remote: &str,
) -> Result<Command, NodeError> {
    let (program, args) = ssh
        .rsh
        .split_first()
        .ok_or_else(|| NodeError::Usage("--rsh is empty".into()))?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    if let Some(port) = at.port {
        cmd.arg("-p").arg(port.to_string());
    }
    if let Some(user) = &at.user {
        cmd.arg("-l").arg(user);
    }
    cmd.arg(&at.host)
        .arg(remote)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    Ok(cmd)
}

/// Starts `cmd` (made by [`command`]); a missing ssh said so.
pub(crate) fn spawn(cmd: &mut Command, ssh: &SshOptions) -> Result<Child, NodeError> {
    cmd.spawn().map_err(|e| {
        NodeError::Usage(format!(
            "cannot run {:?}: {e} (is OpenSSH installed? --rsh or HAUL_RSH name another)",
            ssh.rsh.first().map_or("", String::as_str)
        ))
    })
}

/// The error for a far side whose first line is not what haul prints.
pub(crate) fn not_haul(name: &str, line: &str) -> NodeError {
    NodeError::Usage(format!(
        "{name}: something printed {line:?} before haul started; the far side's login scripts must not write to stdout (as for rsync)"
    ))
}

/// ssh ended before the far side printed a line: why, in ssh's words.
async fn failed(name: &str, mut child: Child, stderr: ChildStderr) -> NodeError {
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
    not_started(name, code, last)
}

/// The loader's words when a binary needs a newer C library than the
/// system has ("version `GLIBC_2.34' not found (required by …)"): what to
/// do instead. `None`: `last` is not that.
pub(super) fn too_new_for_libc(name: &str, last: &str) -> Option<NodeError> {
    (last.contains("version `GLIBC_") && last.contains("not found")).then(|| {
        NodeError::Usage(format!(
            "{name}: haul there cannot run: that system's C library is older than the build needs ({last}); put a build for older systems there (scripts/portable.sh links one against glibc 2.17), or run that build here with --ssh-install"
        ))
    })
}

/// Why the far side's haul did not start: its exit `code` and the last
/// line it (or ssh) said.
fn not_started(name: &str, code: Option<i32>, last: &str) -> NodeError {
    if let Some(e) = too_new_for_libc(name, last) {
        return e;
    }
    // The shell could not find it (127: "haul: not found", "command not
    // found", or a path that is not there).
    if code == Some(127) || last.contains("command not found") || last.ends_with(": not found") {
        return NodeError::Usage(format!(
            "{name}: no haul there ({last}): install it on that host, name it with --remote-haul PATH, or pass --ssh-install to copy this one there"
        ));
    }
    if code == Some(255) {
        return NodeError::Usage(format!("ssh {name} failed: {last}"));
    }
    let code = code.map_or_else(|| "no exit code".to_owned(), |c| format!("exit {c}"));
    NodeError::Usage(format!("{name}: haul did not start there ({code}): {last}"))
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

#[cfg(test)]
mod tests {
    use super::not_started;

    #[test]
    fn a_haul_too_new_for_the_far_sides_c_library_is_told_apart_from_no_haul() {
        let loader = "/home/u/.cache/haul/bin/haul-0.1.0-ab: /lib64/libc.so.6: version `GLIBC_2.34' not found (required by /home/u/.cache/haul/bin/haul-0.1.0-ab)";
        let e = not_started("u@old", Some(1), loader).to_string();
        assert!(
            e.contains("C library is older") && e.contains("portable.sh"),
            "{e}"
        );
        assert!(!e.contains("no haul there"), "{e}");
        let e = not_started("u@h", Some(127), "sh: 1: haul: not found").to_string();
        assert!(
            e.contains("no haul there") && e.contains("--ssh-install"),
            "{e}"
        );
        let e = not_started("u@h", Some(255), "Permission denied (publickey).").to_string();
        assert!(e.starts_with("ssh u@h failed"), "{e}");
        // A haul that ran and failed on a missing file of its own is there.
        let ran = "error: /srv/x: No such file or directory (os error 2)";
        let e = not_started("u@h", Some(2), ran).to_string();
        assert!(e.contains("haul did not start there (exit 2)"), "{e}");
    }
}
