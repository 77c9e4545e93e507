//! The Rust API for tests: build a lab, use its hosts, impair links at run
//! time, read counters; dropping the [`Lab`] tears everything down (also
//! when a test panics). If the process dies without unwinding, a helper
//! process removes the namespaces, and the next lab start sweeps leftovers.
//!
//! ```no_run
//! # fn main() -> Result<(), haul_lab::LabError> {
//! use haul_lab::{Dir, Lab};
//! let lab = Lab::builder().hosts(3).link("rate 200mbit delay 10ms").seed(1).start()?;
//! let out = lab.host(1).command("ping").args(["-c1", &lab.host(2).addr().to_string()]).output();
//! lab.set_profile(2, Dir::Egress, "loss 10%")?;
//! lab.link_down(3)?;
//! println!("{}", lab.stats()?.table());
//! # Ok(()) }
//! ```

use std::io;
use std::net::Ipv4Addr;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use crate::control::{self, Request, Response};
use crate::engine::{self, LabSpec};
use crate::error::LabError;
use crate::profile::Profile;
use crate::state;
use crate::stats::LabStats;
use crate::sys;

/// A direction of a host's link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    /// Host to switch: what the host sends.
    Egress,
    /// Switch to host: what the host receives.
    Ingress,
    /// Both directions.
    Both,
}

/// Default MTU of the hosts' interfaces.
pub const DEFAULT_MTU: u32 = 1500;

/// Builds a [`Lab`].
#[derive(Debug, Clone)]
pub struct LabBuilder {
    hosts: usize,
    egress: String,
    ingress: String,
    seed: u64,
    mtu: u32,
    name: Option<String>,
}

/// One host of a lab: a network namespace with one address.
#[derive(Debug, Clone)]
pub struct Host {
    index: usize,
    netns: String,
    addr: Ipv4Addr,
}

/// A running lab; dropping it removes every namespace and device.
pub struct Lab {
    name: String,
    hosts: Vec<Host>,
    engine: Option<JoinHandle<LabStats>>,
    reaper: Option<Child>,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl LabBuilder {
    /// Number of hosts (1 to 250).
    pub fn hosts(mut self, n: usize) -> Self {
        self.hosts = n;
        self
    }

    /// Profile of every host's egress (a name or netem-like text). A packet
    /// from host A to host B crosses A's egress, then B's ingress.
    pub fn link(mut self, profile: &str) -> Self {
        self.egress = profile.to_string();
        self
    }

    /// Profile of every host's ingress (clean unless set).
    pub fn ingress(mut self, profile: &str) -> Self {
        self.ingress = profile.to_string();
        self
    }

    /// Seed of all random decisions (default 1).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// MTU of the hosts' interfaces (default 1500).
    pub fn mtu(mut self, mtu: u32) -> Self {
        self.mtu = mtu;
        self
    }

    /// A fixed lab name instead of a unique one.
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    /// Builds the namespaces and devices and starts the emulator thread.
    pub fn start(self) -> Result<Lab, LabError> {
        let name = self.name.unwrap_or_else(|| {
            format!(
                "t{}_{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            )
        });
        let spec = LabSpec {
            name: name.clone(),
            hosts: self.hosts,
            egress: Profile::parse(&self.egress)?,
            ingress: Profile::parse(&self.ingress)?,
            seed: self.seed,
            mtu: self.mtu,
        };
        let (mut eng, reaper) = engine::create(&spec)?;
        let thread = std::thread::Builder::new()
            .name(format!("haul-lab-{name}"))
            .spawn(move || eng.run());
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                engine::finish_reaper(reaper);
                return Err(LabError::io("starting the emulator thread")(e));
            }
        };
        Ok(Lab {
            hosts: (1..=spec.hosts)
                .map(|i| Host {
                    index: i,
                    netns: state::netns_name(&name, i),
                    addr: state::host_addr(i),
                })
                .collect(),
            name,
            engine: Some(thread),
            reaper: Some(reaper),
        })
    }
}

impl Host {
    /// The host's name, `h1`, `h2`, ...
    pub fn name(&self) -> String {
        format!("h{}", self.index)
    }

    /// The host's address (198.18.0.i).
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// The host's network namespace.
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// A command that runs inside the host (`ip netns exec NS program`).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.netns, program]);
        c
    }

    /// Runs `f` on a thread inside the host's namespace: sockets it opens
    /// belong to the host, and keep doing so when moved to other threads.
    pub fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        sys::in_netns(&self.netns, f)
    }

    /// Like [`Host::run`] without waiting: the thread's handle.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> JoinHandle<io::Result<T>> {
        let ns = self.netns.clone();
        std::thread::spawn(move || {
            sys::enter_netns(&ns)?;
            f()
        })
    }
}

impl Lab {
    /// A builder: 2 hosts, clean links, seed 1, MTU 1500.
    pub fn builder() -> LabBuilder {
        LabBuilder {
            hosts: 2,
            egress: String::new(),
            ingress: String::new(),
            seed: 1,
            mtu: DEFAULT_MTU,
            name: None,
        }
    }

    /// The lab's name (namespaces are `hl-<name>-h<i>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// All hosts, h1 first.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// Host `i`, counting from 1 (`host(1)` is h1).
    ///
    /// # Panics
    /// If there is no such host (a bug in the calling test).
    #[allow(clippy::expect_used)]
    pub fn host(&self, i: usize) -> &Host {
        i.checked_sub(1)
            .and_then(|i| self.hosts.get(i))
            .expect("no such host in this lab (hosts count from 1)")
    }

    fn request(&self, req: Request) -> Result<Response, LabError> {
        control::request(&self.name, &req)
    }

    /// Replaces the profile of host `i` (from 1) in direction `dir`.
    pub fn set_profile(&self, i: usize, dir: Dir, profile: &str) -> Result<(), LabError> {
        Profile::parse(profile)?;
        self.request(Request::Set {
            host: i.wrapping_sub(1),
            dir,
            profile: profile.to_string(),
        })
        .map(drop)
    }

    /// Cuts host `i`'s link: every packet to or from it is dropped.
    pub fn link_down(&self, i: usize) -> Result<(), LabError> {
        self.request(Request::Link {
            host: i.wrapping_sub(1),
            up: false,
        })
        .map(drop)
    }

    /// Restores host `i`'s link.
    pub fn link_up(&self, i: usize) -> Result<(), LabError> {
        self.request(Request::Link {
            host: i.wrapping_sub(1),
            up: true,
        })
        .map(drop)
    }

    /// Cuts the path between hosts `a` and `b` (from 1), both ways: their
    /// packets to each other are dropped, everything else they send
    /// arrives (a link cut between two live hosts).
    pub fn path_down(&self, a: usize, b: usize) -> Result<(), LabError> {
        self.path(a, b, false)
    }

    /// Restores the path between hosts `a` and `b`.
    pub fn path_up(&self, a: usize, b: usize) -> Result<(), LabError> {
        self.path(a, b, true)
    }

    fn path(&self, a: usize, b: usize, up: bool) -> Result<(), LabError> {
        self.request(Request::Path {
            a: a.wrapping_sub(1),
            b: b.wrapping_sub(1),
            up,
        })
        .map(drop)
    }

    /// Counters of every host and direction.
    pub fn stats(&self) -> Result<LabStats, LabError> {
        match self.request(Request::Stats)? {
            Response::Stats { stats } => Ok(stats),
            other => Err(LabError::Daemon(format!("unexpected reply {other:?}"))),
        }
    }

    /// Tears the lab down now and returns the final counters.
    pub fn down(mut self) -> Result<LabStats, LabError> {
        self.teardown()
            .ok_or_else(|| LabError::Daemon("the emulator thread had stopped".into()))
    }

    fn teardown(&mut self) -> Option<LabStats> {
        let mut last = None;
        if let Some(t) = self.engine.take() {
            let _ = self.request(Request::Down);
            last = t.join().ok();
        }
        if let Some(r) = self.reaper.take() {
            engine::finish_reaper(r);
        }
        last
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.teardown();
    }
}
