//! Starting the emulator: in the foreground, or as a background daemon
//! that `up` starts by re-executing this program.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use super::{print_stats, spec_of, UpArgs};
use crate::engine::{self, LabSpec};
use crate::error::LabError;
use crate::state::{self, LabState};
use crate::sys;

pub(super) fn summary(spec: &LabSpec) -> String {
    let mut s = format!(
        "lab {} up: {} hosts, egress '{}', ingress '{}', seed {}, mtu {}\n",
        spec.name, spec.hosts, spec.egress, spec.ingress, spec.seed, spec.mtu
    );
    for i in 1..=spec.hosts {
        s.push_str(&format!(
            "  h{i}  {}  (netns {})\n",
            state::host_addr(i),
            state::netns_name(&spec.name, i)
        ));
    }
    s.push_str(&format!(
        "run `haul lab exec --name {0} h1 -- CMD`; stop with `haul lab down --name {0}`",
        spec.name
    ));
    s
}

pub(super) fn foreground(up: &UpArgs) -> Result<(), LabError> {
    let spec = spec_of(up)?;
    let signals = sys::termination_signalfd().map_err(LabError::io("blocking signals"))?;
    let (eng, reaper) = engine::create(&spec)?;
    println!(
        "{}\n(foreground: Ctrl-C stops and cleans up)",
        summary(&spec)
    );
    let mut eng = eng.with_signals(signals);
    let st = eng.run();
    drop(eng);
    engine::finish_reaper(reaper);
    print_stats(&st, false);
    Ok(())
}

/// `up`: re-executes this program as the background emulator and waits
/// until it reports that the lab is ready.
pub(super) fn start_daemon(up: &UpArgs, output: super::Output) -> Result<(), LabError> {
    let spec = spec_of(up)?;
    crate::engine::check_spec(&spec)?;
    if LabState::read(&spec.name).is_some_and(|s| s.alive()) {
        return Err(LabError::AlreadyRunning(spec.name));
    }
    let exe = std::env::current_exe().map_err(LabError::io("finding this program"))?;
    let mut child = Command::new(exe)
        .args([
            "lab",
            "__daemon",
            "--name",
            &up.lab.name,
            "--hosts",
            &up.hosts.to_string(),
            "--link",
            &up.link,
            "--ingress",
            &up.ingress,
            "--seed",
            &up.seed.to_string(),
            "--mtu",
            &up.mtu.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(LabError::io("starting the emulator"))?;
    let out = child
        .stdout
        .take()
        .ok_or_else(|| LabError::Daemon("no pipe to the emulator".into()))?;
    let mut line = String::new();
    let _ = BufReader::new(out).read_line(&mut line);
    let line = line.trim();
    if line == "ready" {
        if output.json {
            let hosts: Vec<_> = (1..=spec.hosts)
                .map(|i| {
                    serde_json::json!({"host": format!("h{i}"), "addr": state::host_addr(i).to_string(),
                        "netns": state::netns_name(&spec.name, i)})
                })
                .collect();
            let line = serde_json::json!({"event": "lab_up", "name": spec.name, "egress": up.link,
                "ingress": up.ingress, "seed": spec.seed, "mtu": spec.mtu, "hosts": hosts});
            println!("{line}");
        } else if !output.quiet {
            println!("{}", summary(&spec));
        }
        Ok(())
    } else {
        let _ = child.wait();
        Err(LabError::Daemon(
            if let Some(e) = line.strip_prefix("error: ") {
                e.to_string()
            } else {
                "the emulator stopped while starting (see the messages above)".into()
            },
        ))
    }
}

/// The background emulator: builds the lab, reports `ready` on stdout,
/// then forwards until `down` or a termination signal.
pub(super) fn daemon(up: &UpArgs) -> Result<(), LabError> {
    sys::setsid();
    let signals = sys::termination_signalfd().map_err(LabError::io("blocking signals"))?;
    let spec = spec_of(up)?;
    let (eng, reaper) = match engine::create(&spec) {
        Ok(x) => x,
        Err(e) => {
            println!("error: {e}");
            return Err(e);
        }
    };
    let mut stdout = std::io::stdout();
    // If `up` was interrupted (Ctrl-C) its end of the pipe is gone: undo.
    if writeln!(stdout, "ready")
        .and_then(|_| stdout.flush())
        .is_err()
    {
        drop(eng);
        engine::finish_reaper(reaper);
        return Ok(());
    }
    quiet_stdio();
    let mut eng = eng.with_signals(signals);
    eng.run();
    drop(eng);
    engine::finish_reaper(reaper);
    Ok(())
}

/// Points stdout and stderr at /dev/null so nothing blocks on a closed
/// terminal or pipe.
pub(super) fn quiet_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        use std::os::fd::AsRawFd;
        // SAFETY: dup2 onto the standard descriptors of this process.
        unsafe {
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(null.as_raw_fd(), 2);
        }
    }
}
