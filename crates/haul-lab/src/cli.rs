//! `haul lab ...`: the command-line front end.

use std::process::Command;

mod daemon;

use crate::control::{self, Request, Response};
use crate::engine::LabSpec;
use crate::error::LabError;
use crate::lab::{Dir, DEFAULT_MTU};
use crate::profile::{Profile, NAMED_PROFILES};
use crate::state::{self, LabState};
use crate::stats::LabStats;
use crate::sys;

/// `haul lab`: a userspace network emulator over network namespaces.
#[derive(Debug, clap::Args)]
pub struct LabArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: LabCommand,
    /// How to print (set from the binary's global `--json` and `-q`).
    #[arg(skip)]
    pub output: Output,
}

/// How `haul lab` prints: JSON lines instead of text, or only errors.
#[derive(Debug, Clone, Copy, Default)]
pub struct Output {
    /// One JSON object per line on stdout.
    pub json: bool,
    /// Nothing but errors.
    pub quiet: bool,
}

/// Which lab a command talks to.
#[derive(Debug, Clone, clap::Args)]
pub struct LabName {
    /// Lab name (several labs may run at once).
    #[arg(long = "name", env = "HAUL_LAB", default_value = "lab")]
    pub name: String,
}

/// Options of `haul lab up`.
#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub(crate) lab: LabName,
    /// Number of hosts (h1..hN, addresses 198.18.0.1..N).
    #[arg(long, default_value_t = 2)]
    pub(crate) hosts: usize,
    /// Profile of every host's egress: netem-like text or a name (see
    /// `haul lab profiles`). Host A to host B crosses A's egress, then B's
    /// ingress.
    #[arg(long, default_value = "clean")]
    pub(crate) link: String,
    /// Profile of every host's ingress.
    #[arg(long, default_value = "clean")]
    pub(crate) ingress: String,
    /// Seed of the random impairments (same seed, same decisions).
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// MTU of the hosts' interfaces.
    #[arg(long, default_value_t = DEFAULT_MTU)]
    pub(crate) mtu: u32,
    /// Run the emulator in this process until Ctrl-C instead of in the
    /// background.
    #[arg(long)]
    pub(crate) foreground: bool,
}

/// A link state for `haul lab link`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LinkState {
    /// Drop everything to and from the host, like a pulled cable.
    Down,
    /// Restore the link.
    Up,
}

/// The subcommands of `haul lab`.
#[derive(Debug, clap::Subcommand)]
pub enum LabCommand {
    /// Build K hosts joined by the emulator (root only).
    Up(UpArgs),
    /// Run a command inside a host: `haul lab exec h3 -- iperf3 -s`.
    Exec {
        /// Which lab.
        #[command(flatten)]
        lab: LabName,
        /// Host (h3, 3 or 198.18.0.3).
        host: String,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Change a host's link profile at run time: `haul lab set h2 'loss 10%'`.
    Set {
        /// Which lab.
        #[command(flatten)]
        lab: LabName,
        /// Host (h2, 2 or 198.18.0.2).
        host: String,
        /// Direction to change.
        #[arg(long, value_enum, default_value = "both")]
        dir: Dir,
        /// Profile: netem-like text or a name.
        #[arg(required = true, num_args = 1..)]
        profile: Vec<String>,
    },
    /// Take a host's link down or bring it up: `haul lab link h2 down`;
    /// with `--peer`, only the path between two hosts: `haul lab link h2
    /// down --peer h3`.
    Link {
        /// Which lab.
        #[command(flatten)]
        lab: LabName,
        /// Host.
        host: String,
        /// down or up.
        #[arg(value_enum)]
        state: LinkState,
        /// Only the path between HOST and this host (both ways); the rest
        /// of their traffic flows.
        #[arg(long, value_name = "HOST")]
        peer: Option<String>,
    },
    /// Print per-link counters.
    Stats {
        /// Which lab.
        #[command(flatten)]
        lab: LabName,
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the hosts, their addresses and namespaces.
    Hosts {
        /// Which lab.
        #[command(flatten)]
        lab: LabName,
    },
    /// List the named profiles.
    Profiles,
    /// Stop the lab and remove its namespaces and devices (prints the final
    /// counters). Safe to repeat.
    Down {
        /// Which lab.
        #[command(flatten)]
        lab: LabName,
        /// Also remove every other lab and leftover.
        #[arg(long)]
        all: bool,
        /// Print the final counters as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Internal: the background emulator started by `up`.
    #[command(name = "__daemon", hide = true)]
    Daemon(UpArgs),
}

/// Runs a `haul lab` command.
pub fn run(args: LabArgs) -> Result<(), LabError> {
    // A lab's name becomes a path (`/run/haul-lab/<name>`) that `down`
    // removes: every command checks it first.
    match &args.command {
        LabCommand::Up(up) | LabCommand::Daemon(up) => state::check_name(&up.lab.name)?,
        LabCommand::Exec { lab, .. }
        | LabCommand::Set { lab, .. }
        | LabCommand::Link { lab, .. }
        | LabCommand::Stats { lab, .. }
        | LabCommand::Hosts { lab }
        | LabCommand::Down { lab, .. } => state::check_name(&lab.name)?,
        LabCommand::Profiles => {}
    }
    let out = args.output;
    if matches!(args.command, LabCommand::Profiles) {
        print_profiles(out);
        return Ok(());
    }
    if !sys::is_root() {
        return Err(LabError::NotRoot);
    }
    match args.command {
        LabCommand::Up(up) if up.foreground => daemon::foreground(&up),
        LabCommand::Up(up) => daemon::start_daemon(&up, out),
        LabCommand::Daemon(up) => daemon::daemon(&up),
        LabCommand::Exec { lab, host, cmd } => exec(&lab.name, &host, &cmd),
        LabCommand::Set {
            lab,
            host,
            dir,
            profile,
        } => {
            let profile = profile.join(" ");
            Profile::parse(&profile)?;
            let host = resolve_host(&lab.name, &host)?;
            control::request(&lab.name, &Request::Set { host, dir, profile }).map(drop)
        }
        LabCommand::Link {
            lab,
            host,
            state,
            peer,
        } => {
            let host = resolve_host(&lab.name, &host)?;
            let up = state == LinkState::Up;
            let req = match peer {
                Some(peer) => Request::Path {
                    a: host,
                    b: resolve_host(&lab.name, &peer)?,
                    up,
                },
                None => Request::Link { host, up },
            };
            control::request(&lab.name, &req).map(drop)
        }
        LabCommand::Stats { lab, json } => {
            let st = stats(&lab.name, Request::Stats)?;
            print_stats(&st, json || out.json);
            Ok(())
        }
        LabCommand::Hosts { lab } => {
            let st =
                LabState::read(&lab.name).ok_or_else(|| LabError::NotRunning(lab.name.clone()))?;
            for (i, ns) in st.netns.iter().enumerate() {
                let (host, addr) = (format!("h{}", i + 1), state::host_addr(i + 1));
                if out.json {
                    let line =
                        serde_json::json!({"host": host, "addr": addr.to_string(), "netns": ns});
                    println!("{line}");
                } else if !out.quiet {
                    println!("{host}\t{addr}\t{ns}");
                }
            }
            Ok(())
        }
        LabCommand::Down { lab, all, json } => down(
            &lab.name,
            all,
            Output {
                json: json || out.json,
                quiet: out.quiet,
            },
        ),
        LabCommand::Profiles => Ok(()),
    }
}

fn print_profiles(out: Output) {
    let width = NAMED_PROFILES
        .iter()
        .map(|n| n.spec.len())
        .max()
        .unwrap_or(0);
    for n in NAMED_PROFILES {
        if out.json {
            let line = serde_json::json!({"name": n.name, "spec": n.spec, "about": n.about});
            println!("{line}");
        } else if !out.quiet {
            println!("{:<24} {:<width$}  {}", n.name, n.spec, n.about);
        }
    }
}

pub(super) fn print_stats(st: &LabStats, json: bool) {
    if json {
        match serde_json::to_string_pretty(st) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("cannot encode counters: {e}"),
        }
    } else {
        print!("{}", st.table());
    }
}

fn stats(name: &str, req: Request) -> Result<LabStats, LabError> {
    match control::request(name, &req)? {
        Response::Stats { stats } => Ok(stats),
        other => Err(LabError::Daemon(format!("unexpected reply {other:?}"))),
    }
}

/// Host by `h3`, `3` or `198.18.0.3`, as a 0-based index.
fn resolve_host(name: &str, host: &str) -> Result<usize, LabError> {
    let st = LabState::read(name).ok_or_else(|| LabError::NotRunning(name.to_string()))?;
    let k = st.netns.len();
    let n = host
        .strip_prefix('h')
        .unwrap_or(host)
        .parse::<usize>()
        .ok()
        .or_else(|| (1..=k).find(|&i| state::host_addr(i).to_string() == host));
    match n {
        Some(i) if (1..=k).contains(&i) => Ok(i - 1),
        _ => Err(LabError::Usage(format!(
            "no host {host:?} in lab {name:?}: hosts are h1..h{k}"
        ))),
    }
}

pub(super) fn spec_of(up: &UpArgs) -> Result<LabSpec, LabError> {
    Ok(LabSpec {
        name: up.lab.name.clone(),
        hosts: up.hosts,
        egress: Profile::parse(&up.link)?,
        ingress: Profile::parse(&up.ingress)?,
        seed: up.seed,
        mtu: up.mtu,
    })
}

fn exec(name: &str, host: &str, cmd: &[String]) -> Result<(), LabError> {
    use std::os::unix::process::CommandExt;
    let i = resolve_host(name, host)?;
    let ns = state::netns_name(name, i + 1);
    let err = Command::new("ip")
        .args(["netns", "exec", &ns])
        .args(cmd)
        .env("HAUL_LAB_HOST", format!("h{}", i + 1))
        .exec();
    Err(LabError::Command {
        cmd: format!("ip netns exec {ns} {}", cmd.join(" ")),
        detail: err.to_string(),
    })
}

/// Waits (up to 10 s) for a process to exit.
fn wait_gone(st: &LabState) {
    for _ in 0..1000 {
        if !st.alive() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn down(name: &str, all: bool, out: Output) -> Result<(), LabError> {
    let say = |text: String| {
        if !out.quiet && !out.json {
            eprintln!("{text}");
        }
    };
    match LabState::read(name) {
        Some(st) if st.alive() => {
            match stats(name, Request::Down) {
                Ok(s) if out.json || !out.quiet => print_stats(&s, out.json),
                Ok(_) => {}
                Err(e) => eprintln!("could not get final counters: {e}"),
            }
            wait_gone(&st);
            if st.alive() {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe {
                    libc::kill(st.pid as i32, libc::SIGKILL);
                }
                wait_gone(&st);
            }
            state::remove(name, &st.netns);
        }
        Some(st) => {
            state::remove(name, &st.netns);
            say(format!(
                "lab {name:?} was not running; removed its leftovers"
            ));
        }
        None => {
            state::remove(name, &[]);
            if !all {
                say(format!("no lab {name:?} is running; nothing to do"));
            }
        }
    }
    if all {
        if let Ok(dir) = std::fs::read_dir(state::state_root()) {
            for e in dir.flatten() {
                let other = e.file_name().to_string_lossy().to_string();
                if let Some(st) = LabState::read(&other).filter(LabState::alive) {
                    let _ = control::request(&other, &Request::Down);
                    wait_gone(&st);
                }
            }
        }
        let removed = state::sweep();
        if !removed.is_empty() {
            say(format!("removed leftovers of: {}", removed.join(", ")));
        }
    }
    Ok(())
}
