//! Where a running lab is recorded (`/run/haul-lab/<name>/`), how its
//! namespaces are named (`hl-<name>-h<i>`), and the sweep of dead labs.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::LabError;
use crate::netns;
use crate::sys;

/// Prefix of every namespace the lab creates.
pub const NETNS_PREFIX: &str = "hl-";

/// Root of the lab state directories.
pub fn state_root() -> PathBuf {
    PathBuf::from("/run/haul-lab")
}

/// The state directory of lab `name`.
pub fn state_dir(name: &str) -> PathBuf {
    state_root().join(name)
}

/// The control socket of lab `name`.
pub fn control_socket(name: &str) -> PathBuf {
    state_dir(name).join("ctl.sock")
}

/// The namespace of host `i` (1-based) of lab `name`.
pub fn netns_name(name: &str, i: usize) -> String {
    format!("{NETNS_PREFIX}{name}-h{i}")
}

/// The address of host `i` (1-based).
pub fn host_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, i as u8)
}

/// Checks a lab name: 1 to 16 of `[a-z0-9_]`, so namespace names stay sane.
pub fn check_name(name: &str) -> Result<(), LabError> {
    let ok = !name.is_empty()
        && name.len() <= 16
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(LabError::Usage(format!(
            "bad lab name {name:?}: use 1 to 16 characters of a-z, 0-9 and _"
        )))
    }
}

/// What a running lab records about itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabState {
    /// Lab name.
    pub name: String,
    /// Pid of the process running the emulator.
    pub pid: u32,
    /// Its start time, to detect a recycled pid.
    pub start_time: u64,
    /// Namespace of each host, in order (h1 first).
    pub netns: Vec<String>,
    /// MTU of the hosts' interfaces.
    pub mtu: u32,
    /// Seed of the impairments.
    pub seed: u64,
}

impl LabState {
    /// Whether the process that runs this lab is alive.
    pub fn alive(&self) -> bool {
        sys::process_start_time(self.pid) == Some(self.start_time)
    }

    /// Writes the state file, creating the directory.
    pub fn write(&self) -> Result<(), LabError> {
        let dir = state_dir(&self.name);
        std::fs::create_dir_all(&dir)
            .map_err(LabError::io(format!("creating {}", dir.display())))?;
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| LabError::Daemon(format!("encoding state: {e}")))?;
        let path = dir.join("state.json");
        std::fs::write(&path, text).map_err(LabError::io(format!("writing {}", path.display())))
    }

    /// Reads the state of lab `name`, if recorded.
    pub fn read(name: &str) -> Option<LabState> {
        check_name(name).ok()?;
        let text = std::fs::read_to_string(state_dir(name).join("state.json")).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// Removes the namespaces and state of a lab whose emulator is gone: only
/// the lab's own (`hl-<name>-hN`), and nothing for a name that is not a lab
/// name (it would be a path outside the state root).
pub fn remove(name: &str, known_netns: &[String]) {
    if check_name(name).is_err() {
        return;
    }
    let prefix = format!("{NETNS_PREFIX}{name}-h");
    let ours = |ns: &String| {
        ns.strip_prefix(&prefix)
            .is_some_and(|r| r.parse::<u32>().is_ok())
    };
    let mut all: Vec<String> = known_netns.iter().filter(|ns| ours(ns)).cloned().collect();
    for ns in netns::list() {
        if ns
            .strip_prefix(&prefix)
            .is_some_and(|r| r.parse::<u32>().is_ok())
            && !all.contains(&ns)
        {
            all.push(ns);
        }
    }
    for ns in &all {
        netns::delete(ns);
    }
    let _ = std::fs::remove_dir_all(state_dir(name));
}

/// Removes every lab whose emulator process is dead, and every `hl-*`
/// namespace that no recorded lab owns. Returns the names it removed.
pub fn sweep() -> Vec<String> {
    let mut removed = Vec::new();
    let mut live: Vec<String> = Vec::new();
    if let Ok(dir) = std::fs::read_dir(state_root()) {
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            match LabState::read(&name) {
                Some(st) if st.alive() => live.push(name),
                Some(st) => {
                    remove(&name, &st.netns);
                    removed.push(name);
                }
                None => {
                    // A lab being created writes its state before anything
                    // else; a directory without one that is older than a
                    // minute is debris.
                    let old = entry
                        .metadata()
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age.as_secs() > 60);
                    if old {
                        remove(&name, &[]);
                        removed.push(name);
                    } else {
                        live.push(name);
                    }
                }
            }
        }
    }
    for ns in netns::list() {
        let Some(rest) = ns.strip_prefix(NETNS_PREFIX) else {
            continue;
        };
        let Some((lab, _)) = rest.rsplit_once("-h") else {
            continue;
        };
        if !live.iter().any(|l| l == lab) {
            netns::delete(&ns);
            if !removed.iter().any(|r| r == lab) {
                removed.push(lab.to_string());
            }
        }
    }
    removed
}

#[cfg(test)]
mod name_tests {
    use super::*;

    #[test]
    fn a_name_that_is_a_path_removes_nothing() {
        let dir = tempfile::Builder::new()
            .prefix("haul-lab-victim")
            .tempdir_in("/tmp")
            .unwrap();
        std::fs::write(dir.path().join("keep"), b"x").unwrap();
        // The name resolves through the state root: make it exist, as after
        // any lab ran (on a fresh machine it does not yet).
        std::fs::create_dir_all(state_root()).unwrap();
        let name = format!(
            "../../tmp/{}",
            dir.path().file_name().unwrap().to_str().unwrap()
        );
        assert_eq!(
            state_dir(&name).canonicalize().unwrap(),
            dir.path().canonicalize().unwrap()
        );
        assert!(check_name(&name).is_err());
        remove(&name, &["not-ours".into()]);
        assert!(LabState::read(&name).is_none());
        assert!(dir.path().join("keep").exists());
    }
}
