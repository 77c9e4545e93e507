//! `--ssh-install`: run this very build of haul on the far side, copied
//! there once. The far side's `uname -sm` must match this build's; the copy
//! goes to a per-user cache (`${XDG_CACHE_HOME:-~/.cache}/haul/bin/
//! haul-VERSION-HASH`, HASH from this binary's BLAKE3), is written under a
//! temporary name, checked by BLAKE3 there (the copy hashes its own file
//! and must match, [`self_check`]), and only then renamed into place.
//! Later runs find it and copy nothing.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use haul_transport::Timeouts;
use tokio::io::AsyncReadExt;

use super::channel::{self, quoted};
use super::{SshLocation, SshOptions};
use crate::NodeError;

/// This build, as the far side will know it.
struct ThisBuild {
    path: PathBuf,
    /// BLAKE3 of the binary, hex.
    hash: String,
}

impl ThisBuild {
    fn find() -> Result<Self, NodeError> {
        let path = std::env::current_exe()
            .map_err(|e| NodeError::Usage(format!("--ssh-install: cannot find this haul: {e}")))?;
        let hash = hash_file(&path).map_err(|e| {
            NodeError::Usage(format!(
                "--ssh-install: cannot read {}: {e}",
                path.display()
            ))
        })?;
        Ok(Self { path, hash })
    }

    /// The cached copy's file name.
    fn name(&self) -> String {
        format!("haul-{}-{}", env!("CARGO_PKG_VERSION"), &self.hash[..16])
    }
}

/// BLAKE3 of the file at `path`, hex.
fn hash_file(path: &std::path::Path) -> std::io::Result<String> {
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(std::fs::File::open(path)?)?;
    Ok(hasher.finalize().to_hex().to_string())
}

/// `haul self-check HASH` on the far side: whether this running binary's
/// own file has BLAKE3 `expected` (a copy that arrived whole).
pub fn self_check(expected: &str) -> Result<(), String> {
    let path = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let got = hash_file(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if got == expected {
        Ok(())
    } else {
        Err(format!(
            "{} has BLAKE3 {got}, not {expected}: the copy did not arrive whole",
            path.display()
        ))
    }
}

/// This machine as `uname -sm` names it.
fn this_machine() -> String {
    let os = match std::env::consts::OS {
        "linux" => "Linux",
        "macos" => "Darwin",
        "freebsd" => "FreeBSD",
        other => other,
    };
    format!("{os} {}", std::env::consts::ARCH)
}

/// Makes sure this build is cached on `at`'s host and returns the command
/// that runs it there.
pub(crate) async fn ensure(
    at: &SshLocation,
    ssh: &SshOptions,
    timeouts: Timeouts,
    name: &str,
) -> Result<String, NodeError> {
    let build = ThisBuild::find()?;
    let file = build.name();
    let dir = r#"${XDG_CACHE_HOME:-$HOME/.cache}/haul/bin"#;
    let probe = format!(
        r#"d="{dir}"; f="$d/{file}"; uname -sm; echo "$f"; if [ -x "$f" ]; then echo present; else echo missing; fi"#
    );
    let wait = timeouts.connect + timeouts.handshake * 2;
    let said = run(at, ssh, &sh(&probe)?, None, wait, name).await?;
    let mut lines = said.lines();
    let (Some(machine), Some(path), Some(state)) = (lines.next(), lines.next(), lines.next())
    else {
        return Err(NodeError::Usage(format!(
            "{name}: --ssh-install could not read the far side's answer: {said:?}"
        )));
    };
    let here = this_machine();
    if machine.trim() != here {
        return Err(NodeError::Usage(format!(
            "{name}: --ssh-install: that host is {}, this haul is built for {here}: install haul there (or name it with --remote-haul)",
            machine.trim()
        )));
    }
    let remote = quoted(path)?;
    if state.trim() == "present" {
        tracing::info!("{name}: running the copy of this haul cached at {path}");
        return Ok(remote);
    }
    let copy = format!(
        r#"set -e; d="{dir}"; mkdir -p "$d"; t="$d/.{file}.$$"; trap 'rm -f "$t"' EXIT; cat > "$t"; chmod 700 "$t"; "$t" -q self-check {hash}; mv -f "$t" "$d/{file}"; trap - EXIT"#,
        hash = build.hash
    );
    let size = std::fs::metadata(&build.path).map_or(0, |m| m.len());
    // The copy's own time: a few seconds per 100 MiB on slow links is fine.
    let copy_wait = wait + Duration::from_secs(60 + size / (1 << 20));
    run(at, ssh, &sh(&copy)?, Some(&build.path), copy_wait, name).await?;
    tracing::info!(
        "{name}: copied this haul ({} MiB, BLAKE3 checked there) to {path}",
        size >> 20
    );
    Ok(remote)
}

/// `script` for the far side's shell, whatever it is: run by `sh -c`.
fn sh(script: &str) -> Result<String, NodeError> {
    Ok(format!("sh -c {}", quoted(script)?))
}

/// Runs `remote` over ssh with `input`'s bytes on its stdin; its stdout,
/// or an error with its last stderr line.
async fn run(
    at: &SshLocation,
    ssh: &SshOptions,
    remote: &str,
    input: Option<&std::path::Path>,
    wait: Duration,
    name: &str,
) -> Result<String, NodeError> {
    let mut cmd = channel::command(at, ssh, remote)?;
    if input.is_none() {
        cmd.stdin(Stdio::null());
    }
    let mut child = channel::spawn(&mut cmd, ssh)?;
    let stdin = child.stdin.take();
    let feed = async {
        if let (Some(path), Some(mut stdin)) = (input, stdin) {
            let mut file = tokio::fs::File::open(path).await?;
            tokio::io::copy(&mut file, &mut stdin).await?;
        }
        Ok::<(), std::io::Error>(())
    };
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let work = async {
        let (fed, out, err) = tokio::join!(feed, read_all(&mut stdout), read_all(&mut stderr));
        let status = child.wait().await;
        (fed, out, err, status)
    };
    let Ok((fed, out, err, status)) = tokio::time::timeout(wait, work).await else {
        return Err(NodeError::Usage(format!(
            "{name}: --ssh-install did not finish within {}s",
            wait.as_secs()
        )));
    };
    let last = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_owned();
    let code = status.map(|s| s.code());
    // The copy arrived, and the loader there refused to run it.
    if !matches!(code, Ok(Some(0))) {
        if let Some(e) = channel::too_new_for_libc(name, &last) {
            return Err(e);
        }
    }
    match code {
        Ok(Some(0)) if fed.is_ok() => Ok(out),
        Ok(Some(255)) => Err(NodeError::Usage(format!("ssh {name} failed: {last}"))),
        Ok(code) => Err(NodeError::Usage(format!(
            "{name}: --ssh-install failed there ({}): {last}{}",
            code.map_or_else(|| "killed".to_owned(), |c| format!("exit {c}")),
            fed.err()
                .map(|e| format!(" (sending: {e})"))
                .unwrap_or_default()
        ))),
        Err(e) => Err(NodeError::Usage(format!("{name}: ssh: {e}"))),
    }
}

/// Everything `r` has, at most 64 KiB, as text.
async fn read_all(r: &mut Option<impl tokio::io::AsyncRead + Unpin>) -> String {
    let mut buf = Vec::new();
    if let Some(r) = r {
        let _ = r.take(64 << 10).read_to_end(&mut buf).await;
    }
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_build_checks_itself_and_names_its_machine_as_uname_does() {
        let build = ThisBuild::find().unwrap();
        assert!(self_check(&build.hash).is_ok());
        assert!(self_check(&"0".repeat(64))
            .unwrap_err()
            .contains("not arrive whole"));
        assert!(build.name().starts_with("haul-") && build.name().len() > 20);
        let out = std::process::Command::new("uname")
            .arg("-sm")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), this_machine());
    }
}
