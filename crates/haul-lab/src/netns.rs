//! Network namespaces and interface set-up, through iproute2.

use std::process::{Command, Stdio};

use crate::error::LabError;

/// Runs `ip ARGS`, failing with its stderr.
pub fn ip(args: &[&str]) -> Result<(), LabError> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::Command {
            cmd: format!("ip {}", args.join(" ")),
            detail: e.to_string(),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(LabError::Command {
            cmd: format!("ip {}", args.join(" ")),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Creates a named network namespace.
pub fn create(netns: &str) -> Result<(), LabError> {
    ip(&["netns", "add", netns])
}

/// Kills what still runs in a namespace, then deletes it (quietly).
pub fn delete(netns: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "pids", netns]).output() {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Ok(pid) = pid.parse::<i32>() {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
    let _ = Command::new("ip")
        .args(["netns", "del", netns])
        .stderr(Stdio::null())
        .status();
}

/// Names of all named network namespaces.
pub fn list() -> Vec<String> {
    match std::fs::read_dir("/run/netns") {
        Ok(d) => d
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Brings up `lo` and `eth0` (address `addr/24`, `mtu`) in a namespace.
pub fn configure(netns: &str, addr: &str, mtu: u32) -> Result<(), LabError> {
    let mtu = mtu.to_string();
    let cidr = format!("{addr}/24");
    ip(&["-n", netns, "link", "set", "lo", "up"])?;
    ip(&["-n", netns, "addr", "add", &cidr, "dev", "eth0"])?;
    ip(&[
        "-n",
        netns,
        "link",
        "set",
        "eth0",
        "mtu",
        &mtu,
        "txqueuelen",
        "1000",
        "up",
    ])
}

/// A shell script that waits for its stdin to close, then removes the
/// given namespaces (killing what runs in them) and a state directory.
/// It ignores terminal signals, so it cleans up after a Ctrl-C or a crash
/// of the process that holds its stdin.
pub fn reaper(state_dir: &str, netns: &[String]) -> Result<std::process::Child, LabError> {
    use std::os::unix::process::CommandExt;
    let script = r#"trap '' INT TERM HUP QUIT
cat >/dev/null
dir="$1"; shift
for n in "$@"; do
  for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  ip netns del "$n" 2>/dev/null
done
rm -rf "$dir"
"#;
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("haul-lab-reaper")
        .arg(state_dir)
        .args(netns)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| LabError::Command {
            cmd: "sh (cleanup helper)".into(),
            detail: e.to_string(),
        })
}
