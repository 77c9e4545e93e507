//! A real OpenSSH `sshd` for tests (cargo feature `test-server`).
//!
//! [`TestServer::start`] makes a temp dir with a fresh ed25519 host key, an
//! ed25519 client key (in `authorized_keys`), a `known_hosts` file that
//! already trusts the host key, an `sshd_config` (127.0.0.1, a free port,
//! `internal-sftp`, password and public-key auth, `UsePAM no`, `StrictModes
//! no`, root login allowed, `SetEnv SHLVL=1`) and a fixture directory
//! [`TestServer::root`]
//! (world-readable, so the password user [`PASSWORD_USER`] can read it).
//! `SHLVL=1` keeps a session's bash from reading the user's `~/.bashrc`
//! (bash reads it for a command run by sshd only at shell level 1): a
//! developer's shell set-up — a `pyenv init` waiting on a stale lock, an
//! `echo` — is not part of what a test runs.
//! It runs `/usr/sbin/sshd -D -e -f CONF` as a child and waits (bounded)
//! for the SSH banner. Needs root (sshd privilege separation); creates
//! `/run/sshd` when missing. SFTP paths are real paths: there is no chroot.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use haul_sftp::testserver::TestServer;
//! let srv = TestServer::start()?;
//! std::fs::write(srv.root().join("a.txt"), b"hello")?;
//! let url = haul_remote::RemoteUrl::parse(&srv.url(&TestServer::key_user(), "/"))?;
//! let remote = haul_sftp::open(&url, &srv.key_options())?;
//! let mut session = remote.connect().await?;
//! let e = session.stat(&format!("{}/a.txt", srv.root().display())).await?;
//! assert_eq!(e.size, Some(5));
//! # Ok(()) }
//! ```
//!
//! Password logins use the system user [`PASSWORD_USER`] / [`PASSWORD`]
//! (shared with haul-ftp's tests), created on demand by
//! [`ensure_password_user`]. `Drop` kills sshd and its per-connection
//! processes.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use haul_remote::{RemoteOptions, Secret};

/// System user for password logins (shared with the FTP tests).
pub const PASSWORD_USER: &str = "hault";
/// Its password.
pub const PASSWORD: &str = "hault-pw-1";

/// A running sshd with its own keys and data; killed on drop.
pub struct TestServer {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    host_key: String,
}

fn run(cmd: &mut Command) -> io::Result<()> {
    let out = cmd.stdin(Stdio::null()).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn keygen(path: &Path, kind: &str) -> io::Result<()> {
    let mut cmd = Command::new("ssh-keygen");
    cmd.args(["-q", "-t", kind, "-N", "", "-C", "haul-test", "-f"])
        .arg(path);
    if kind == "rsa" {
        cmd.args(["-b", "2048"]);
    }
    run(&mut cmd)
}

/// `type base64` of a `.pub` file (no comment).
fn pub_key(path: &Path) -> io::Result<String> {
    let text = std::fs::read_to_string(path)?;
    let mut f = text.split_whitespace();
    match (f.next(), f.next()) {
        (Some(t), Some(k)) => Ok(format!("{t} {k}")),
        _ => Err(io::Error::other(format!(
            "{} is not a public key",
            path.display()
        ))),
    }
}

fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Creates the password user `hault` if missing and sets its password
/// (idempotent; tolerates a concurrent creation by another test binary).
pub fn ensure_password_user() -> io::Result<()> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let exists = Command::new("id")
            .arg("-u")
            .arg(PASSWORD_USER)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| e.to_string())?
            .success();
        if !exists {
            let st = Command::new("useradd")
                .args(["-m", "-s", "/bin/bash", PASSWORD_USER])
                .stderr(Stdio::null())
                .status()
                .map_err(|e| format!("useradd: {e}"))?;
            // 9: created meanwhile by someone else.
            if !(st.success() || st.code() == Some(9)) {
                return Err(format!("useradd {PASSWORD_USER} failed: {st}"));
            }
        }
        // chpasswd fails while another process holds /etc/shadow's lock.
        let mut last = String::new();
        for _ in 0..50 {
            let mut child = Command::new("chpasswd")
                .stdin(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("chpasswd: {e}"))?;
            if let Some(mut stdin) = child.stdin.take() {
                use std::io::Write;
                stdin
                    .write_all(format!("{PASSWORD_USER}:{PASSWORD}\n").as_bytes())
                    .map_err(|e| e.to_string())?;
            }
            let out = child.wait_with_output().map_err(|e| e.to_string())?;
            if out.status.success() {
                return Ok(());
            }
            last = String::from_utf8_lossy(&out.stderr).trim().to_string();
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!("chpasswd failed: {last}"))
    })
    .clone()
    .map_err(io::Error::other)
}

impl TestServer {
    /// Generates keys and config in a temp dir and starts sshd.
    pub fn start() -> io::Result<Self> {
        Self::start_with_env("")
    }

    /// [`TestServer::start`] with more variables a session sees
    /// (`NAME=value` words, such as `PATH=/usr/bin:/bin`; sshd reads one
    /// `SetEnv` line only, so they join its `SHLVL=1`).
    pub fn start_with_env(env: &str) -> io::Result<Self> {
        std::fs::create_dir_all("/run/sshd")?;
        let dir = tempfile::Builder::new().prefix("haul-sftp-").tempdir()?;
        let d = dir.path();
        set_mode(d, 0o755)?;
        keygen(&d.join("host_ed25519"), "ed25519")?;
        keygen(&d.join("client_ed25519"), "ed25519")?;
        let host_key = pub_key(&d.join("host_ed25519.pub"))?;
        std::fs::write(
            d.join("authorized_keys"),
            pub_key(&d.join("client_ed25519.pub"))? + "\n",
        )?;
        let root = d.join("data");
        std::fs::create_dir(&root)?;
        set_mode(&root, 0o755)?;
        let port = free_port()?;
        let conf = format!(
            "ListenAddress 127.0.0.1\n\
             Port {port}\n\
             HostKey {d}/host_ed25519\n\
             PidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\n\
             StrictModes no\n\
             UsePAM no\n\
             PasswordAuthentication yes\n\
             PermitEmptyPasswords no\n\
             KbdInteractiveAuthentication no\n\
             PubkeyAuthentication yes\n\
             PermitRootLogin yes\n\
             MaxAuthTries 10\n\
             MaxStartups 100\n\
             UseDNS no\n\
             PrintMotd no\n\
             PrintLastLog no\n\
             X11Forwarding no\n\
             AllowTcpForwarding no\n\
             Subsystem sftp internal-sftp\n\
             SetEnv SHLVL=1 {env}\n",
            d = d.display()
        );
        std::fs::write(d.join("sshd_config"), conf)?;
        std::fs::write(
            d.join("known_hosts"),
            format!("[127.0.0.1]:{port} {host_key}\n"),
        )?;
        let mut srv = Self {
            dir,
            port,
            child: None,
            host_key,
        };
        srv.start_again()?;
        Ok(srv)
    }

    /// (Re)starts sshd on the same port with the same keys and data.
    pub fn start_again(&mut self) -> io::Result<()> {
        self.stop();
        let d = self.dir.path();
        let log = std::fs::File::create(d.join("sshd.log"))?;
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> io::Result<()> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(st) = child.try_wait()? {
                    self.child = None;
                    return Err(io::Error::other(format!(
                        "sshd exited ({st}): {}",
                        self.log()
                    )));
                }
            }
            if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                s.set_read_timeout(Some(Duration::from_secs(2)))?;
                let mut banner = [0u8; 4];
                if s.read_exact(&mut banner).is_ok() && &banner == b"SSH-" {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(io::Error::other(format!(
                    "sshd did not answer within 15 s: {}",
                    self.log()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills sshd and every connection process it forked (clients see the
    /// connection drop). [`TestServer::start_again`] restarts it.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let mut pids = descendants(child.id());
        pids.push(child.id());
        for pid in pids {
            if let Ok(pid) = libc::pid_t::try_from(pid) {
                // SAFETY: plain kill(2) on a pid we found under our child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        let _ = child.wait();
    }

    /// The port sshd listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Fixture directory (mode 0755) to put files in; its absolute path is
    /// also the SFTP path.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The client's ed25519 private key (listed in `authorized_keys`).
    pub fn client_key(&self) -> PathBuf {
        self.dir.path().join("client_ed25519")
    }

    /// Generates an RSA client key, authorizes it and returns its path.
    pub fn add_rsa_client_key(&self) -> io::Result<PathBuf> {
        let path = self.dir.path().join("client_rsa");
        if !path.exists() {
            keygen(&path, "rsa")?;
            let line = pub_key(&self.dir.path().join("client_rsa.pub"))? + "\n";
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(self.dir.path().join("authorized_keys"))?;
            io::Write::write_all(&mut f, line.as_bytes())?;
        }
        Ok(path)
    }

    /// Generates a client key named `name` whose `authorized_keys` line
    /// runs `command` whatever the client asks (sshd's forced command, the
    /// asked-for command in `SSH_ORIGINAL_COMMAND`); returns its path.
    pub fn add_forced_key(&self, name: &str, command: &str) -> io::Result<PathBuf> {
        let path = self.dir.path().join(format!("client_{name}"));
        keygen(&path, "ed25519")?;
        let key = pub_key(&self.dir.path().join(format!("client_{name}.pub")))?;
        let line = format!(
            "command=\"{}\",restrict {key}\n",
            command.replace('"', "\\\"")
        );
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.path().join("authorized_keys"))?;
        io::Write::write_all(&mut f, line.as_bytes())?;
        Ok(path)
    }

    /// The server's host key as `type base64`.
    pub fn host_key(&self) -> &str {
        &self.host_key
    }

    /// A known_hosts line trusting this server: `[127.0.0.1]:PORT type base64`.
    pub fn known_hosts_line(&self) -> String {
        format!("[127.0.0.1]:{} {}", self.port, self.host_key)
    }

    /// A known_hosts file holding [`TestServer::known_hosts_line`].
    pub fn known_hosts_file(&self) -> PathBuf {
        self.dir.path().join("known_hosts")
    }

    /// `sftp://USER@127.0.0.1:PORT/PATH` (`path` used as given: encode
    /// special characters yourself).
    pub fn url(&self, user: &str, path: &str) -> String {
        format!("sftp://{user}@127.0.0.1:{}{path}", self.port)
    }

    /// The user for key logins: the current user (root in CI).
    pub fn key_user() -> String {
        let out = Command::new("id").arg("-un").output();
        match out {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
            _ => "root".to_string(),
        }
    }

    /// Options for a key login that trusts this server: the client key,
    /// [`TestServer::known_hosts_file`], a 10 s timeout.
    pub fn key_options(&self) -> RemoteOptions {
        RemoteOptions {
            timeout: Duration::from_secs(10),
            ssh_keys: vec![self.client_key()],
            known_hosts: Some(self.known_hosts_file()),
            ..Default::default()
        }
    }

    /// Options for a password login as [`PASSWORD_USER`] (no keys).
    pub fn password_options(&self) -> RemoteOptions {
        RemoteOptions {
            timeout: Duration::from_secs(10),
            user: Some(PASSWORD_USER.to_string()),
            password: Some(Secret::new(PASSWORD)),
            known_hosts: Some(self.known_hosts_file()),
            ..Default::default()
        }
    }

    /// sshd's log so far (stderr, `-e`), for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// All processes below `pid` (from /proc), children before grandchildren.
fn descendants(pid: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            // "pid (comm) state ppid ...": comm may contain spaces.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|s| s.parse::<u32>().ok());
            if let Some(pp) = ppid {
                parent_of.push((p, pp));
            }
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for &(c, pp) in &parent_of {
            if pp == p && !out.contains(&c) {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}
