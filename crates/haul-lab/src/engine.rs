//! The thin I/O driver around [`Link`]: builds the namespaces and TUN
//! devices, then moves packets between them in one `ppoll` loop.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::process::Child;
use std::time::Instant;

use crate::control::{self, Request, Response};
use crate::error::LabError;
use crate::lab::Dir;
use crate::link::{Link, Nanos};
use crate::netns;
use crate::packet::ipv4_dst;
use crate::profile::Profile;
use crate::state::{self, LabState};
use crate::stats::{HostStats, LabStats};
use crate::sys;

/// Longest sleep of the loop when nothing is due.
const MAX_WAIT: Nanos = 50_000_000;
/// Packets read from one TUN per wake-up before serving the others.
const READ_BATCH: usize = 64;
/// Largest number of hosts (one /24).
pub const MAX_HOSTS: usize = 250;

/// What to build.
#[derive(Debug, Clone)]
pub struct LabSpec {
    /// Lab name (namespaces are `hl-<name>-h<i>`).
    pub name: String,
    /// Number of hosts.
    pub hosts: usize,
    /// Profile of every host's egress (host to switch).
    pub egress: Profile,
    /// Profile of every host's ingress (switch to host).
    pub ingress: Profile,
    /// Seed of all random decisions.
    pub seed: u64,
    /// MTU of the hosts' interfaces.
    pub mtu: u32,
}

/// A built lab, ready to run.
pub struct Engine {
    name: String,
    tuns: Vec<OwnedFd>,
    /// Per host: [egress, ingress].
    links: Vec<[Link; 2]>,
    write_errors: Vec<u64>,
    unroutable: u64,
    /// Host pairs (lower index first) whose path is cut: packets between
    /// them are dropped, both ways; their other paths carry on.
    cut: Vec<(usize, usize)>,
    /// Packets dropped on a cut path.
    severed: u64,
    listener: UnixListener,
    signals: Option<OwnedFd>,
    started: Instant,
}

fn link_seed(seed: u64, host: usize, dir: usize) -> u64 {
    seed ^ ((host as u64) << 1 | dir as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Closes the cleanup helper's stdin and waits until it has removed the
/// lab's namespaces and state.
pub fn finish_reaper(mut reaper: Child) {
    drop(reaper.stdin.take());
    let _ = reaper.wait();
}

/// Checks a lab's name, host count and MTU (before anything is built, or
/// a daemon started to build it).
pub fn check_spec(spec: &LabSpec) -> Result<(), LabError> {
    state::check_name(&spec.name)?;
    if spec.hosts == 0 || spec.hosts > MAX_HOSTS {
        return Err(LabError::Usage(format!(
            "--hosts must be between 1 and {MAX_HOSTS}"
        )));
    }
    if !(576..=65_535).contains(&spec.mtu) {
        return Err(LabError::Usage(
            "--mtu must be between 576 and 65535".into(),
        ));
    }
    Ok(())
}

/// Builds the namespaces and devices of a lab. The returned child is the
/// cleanup helper: hand it to [`finish_reaper`] after the engine is dropped
/// (it also cleans up by itself if this process dies).
pub fn create(spec: &LabSpec) -> Result<(Engine, Child), LabError> {
    if !sys::is_root() {
        return Err(LabError::NotRoot);
    }
    check_spec(spec)?;
    state::sweep();
    if let Some(st) = LabState::read(&spec.name) {
        if st.alive() {
            return Err(LabError::AlreadyRunning(spec.name.clone()));
        }
        state::remove(&spec.name, &st.netns);
    }
    let netns: Vec<String> = (1..=spec.hosts)
        .map(|i| state::netns_name(&spec.name, i))
        .collect();
    let pid = std::process::id();
    let st = LabState {
        name: spec.name.clone(),
        pid,
        start_time: sys::process_start_time(pid).unwrap_or(0),
        netns: netns.clone(),
        mtu: spec.mtu,
        seed: spec.seed,
    };
    st.write()?;
    let dir = state::state_dir(&spec.name);
    let reaper = match netns::reaper(&dir.to_string_lossy(), &netns) {
        Ok(r) => r,
        Err(e) => {
            state::remove(&spec.name, &netns);
            return Err(e);
        }
    };
    match build(spec, &netns) {
        Ok(engine) => Ok((engine, reaper)),
        Err(e) => {
            finish_reaper(reaper);
            Err(e)
        }
    }
}

fn build(spec: &LabSpec, netns: &[String]) -> Result<Engine, LabError> {
    let mut tuns = Vec::new();
    let mut links = Vec::new();
    for (i, ns) in netns.iter().enumerate() {
        netns::create(ns)?;
        let tun = sys::in_netns(ns, || {
            // Quiet hosts: no IPv6 chatter on the links (best effort).
            for f in ["all", "default", "lo"] {
                let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{f}/disable_ipv6"), "1");
            }
            sys::create_tun("eth0")
        })
        .map_err(LabError::io(format!("creating the TUN device of {ns}")))?;
        netns::configure(ns, &state::host_addr(i + 1).to_string(), spec.mtu)?;
        tuns.push(tun);
        links.push([
            Link::new(spec.egress.clone(), link_seed(spec.seed, i, 0)),
            Link::new(spec.ingress.clone(), link_seed(spec.seed, i, 1)),
        ]);
    }
    let sock = state::control_socket(&spec.name);
    let _ = std::fs::remove_file(&sock);
    let listener =
        UnixListener::bind(&sock).map_err(LabError::io(format!("binding {}", sock.display())))?;
    listener
        .set_nonblocking(true)
        .map_err(LabError::io("configuring the control socket"))?;
    Ok(Engine {
        name: spec.name.clone(),
        write_errors: vec![0; tuns.len()],
        tuns,
        links,
        unroutable: 0,
        cut: Vec::new(),
        severed: 0,
        listener,
        signals: None,
        started: Instant::now(),
    })
}

impl Engine {
    /// Also stops on SIGINT, SIGTERM or SIGHUP read from this signalfd.
    pub fn with_signals(mut self, fd: OwnedFd) -> Engine {
        self.signals = Some(fd);
        self
    }

    fn dest(&self, pkt: &[u8]) -> Option<usize> {
        let o = ipv4_dst(pkt)?.octets();
        let i = usize::from(o[3]);
        (o[..3] == [198, 18, 0] && i >= 1 && i <= self.tuns.len()).then(|| i - 1)
    }

    /// Whether the path between hosts `a` and `b` is cut.
    fn is_cut(&self, a: usize, b: usize) -> bool {
        self.cut.contains(&(a.min(b), a.max(b)))
    }

    /// Counters of every link.
    pub fn stats(&self) -> LabStats {
        LabStats {
            lab: self.name.clone(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            unroutable: self.unroutable,
            severed: self.severed,
            hosts: self
                .links
                .iter()
                .enumerate()
                .map(|(i, [e, g])| HostStats {
                    host: format!("h{}", i + 1),
                    addr: state::host_addr(i + 1).to_string(),
                    up: e.is_up(),
                    egress_profile: e.profile().to_string(),
                    ingress_profile: g.profile().to_string(),
                    egress: e.stats(),
                    ingress: g.stats(),
                    write_errors: self.write_errors[i],
                })
                .collect(),
        }
    }

    /// Moves packets until told to stop (`Down`, a signal); returns the
    /// final counters.
    pub fn run(&mut self) -> LabStats {
        sys::precise_timers();
        let t0 = Instant::now();
        let now_ns = || t0.elapsed().as_nanos() as Nanos;
        let k = self.tuns.len();
        let mut pfds: Vec<libc::pollfd> = self
            .tuns
            .iter()
            .map(|t| t.as_raw_fd())
            .chain([self.listener.as_raw_fd()])
            .chain(self.signals.as_ref().map(|s| s.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let mut buf = vec![0u8; 65_536];
        let mut moved: Vec<(usize, Nanos, Vec<u8>)> = Vec::new();
        loop {
            let now = now_ns();
            let next = self
                .links
                .iter()
                .flat_map(|l| l.iter())
                .filter_map(Link::next_due)
                .min();
            let timeout = next.map_or(MAX_WAIT, |t| t.saturating_sub(now).min(MAX_WAIT));
            for p in pfds.iter_mut() {
                p.revents = 0;
            }
            if sys::ppoll(&mut pfds, timeout).is_err() {
                break;
            }
            let now = now_ns();
            for (i, pfd) in pfds[..k].iter().enumerate() {
                if pfd.revents & libc::POLLIN == 0 {
                    continue;
                }
                for _ in 0..READ_BATCH {
                    match sys::read_packet(self.tuns[i].as_raw_fd(), &mut buf) {
                        Ok(Some(n)) => match self.dest(&buf[..n]) {
                            Some(j) if j != i && self.is_cut(i, j) => self.severed += 1,
                            Some(j) if j != i => self.links[i][0].push(now, buf[..n].to_vec()),
                            _ => self.unroutable += 1,
                        },
                        _ => break,
                    }
                }
            }
            self.forward(now, &mut moved);
            if pfds[k].revents & libc::POLLIN != 0 && self.serve_control() {
                break;
            }
            if pfds.len() > k + 1 && pfds[k + 1].revents & libc::POLLIN != 0 {
                break;
            }
        }
        self.stats()
    }

    fn forward(&mut self, now: Nanos, moved: &mut Vec<(usize, Nanos, Vec<u8>)>) {
        for i in 0..self.links.len() {
            while let Some((t, pkt)) = self.links[i][0].poll(now) {
                match self.dest(&pkt) {
                    Some(j) => moved.push((j, t, pkt)),
                    None => self.unroutable += 1,
                }
            }
        }
        for (j, t, pkt) in moved.drain(..) {
            self.links[j][1].push(t, pkt);
        }
        for j in 0..self.links.len() {
            let fd = self.tuns[j].as_raw_fd();
            while let Some((_, pkt)) = self.links[j][1].poll(now) {
                if !sys::write_packet(fd, &pkt) {
                    self.write_errors[j] += 1;
                }
            }
        }
    }

    /// Serves waiting control connections; `true` when told to stop.
    fn serve_control(&mut self) -> bool {
        let mut stop = false;
        while let Ok((stream, _)) = self.listener.accept() {
            let _ = stream.set_nonblocking(false);
            let resp = match control::read_request(&stream) {
                Ok(req) => {
                    if matches!(req, Request::Down) {
                        stop = true;
                    }
                    self.handle(req)
                }
                Err(message) => Response::Error { message },
            };
            control::write_response(&stream, &resp);
        }
        stop
    }

    fn handle(&mut self, req: Request) -> Response {
        let k = self.links.len();
        let bad_host = |h: usize| Response::Error {
            message: format!(
                "no host h{} in this lab (hosts are h1..h{k})",
                h.wrapping_add(1)
            ),
        };
        match req {
            Request::Set { host, dir, profile } => {
                if host >= k {
                    return bad_host(host);
                }
                match Profile::parse(&profile) {
                    Ok(p) => {
                        if matches!(dir, Dir::Egress | Dir::Both) {
                            self.links[host][0].set_profile(p.clone());
                        }
                        if matches!(dir, Dir::Ingress | Dir::Both) {
                            self.links[host][1].set_profile(p);
                        }
                        Response::Ok
                    }
                    Err(e) => Response::Error {
                        message: e.to_string(),
                    },
                }
            }
            Request::Link { host, up } => {
                if host >= k {
                    return bad_host(host);
                }
                for l in self.links[host].iter_mut() {
                    l.set_up(up);
                }
                Response::Ok
            }
            Request::Path { a, b, up } => {
                if a >= k {
                    return bad_host(a);
                }
                if b >= k {
                    return bad_host(b);
                }
                if a == b {
                    return Response::Error {
                        message: format!("h{} to itself is no path", a + 1),
                    };
                }
                let pair = (a.min(b), a.max(b));
                self.cut.retain(|p| *p != pair);
                if !up {
                    self.cut.push(pair);
                }
                Response::Ok
            }
            Request::Stats | Request::Down => Response::Stats {
                stats: self.stats(),
            },
        }
    }
}
