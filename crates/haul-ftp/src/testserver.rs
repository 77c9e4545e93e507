//! A real vsftpd on 127.0.0.1 for tests (cargo feature `test-server`).
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! use haul_ftp::testserver::{FtpServer, Mode};
//! let server = FtpServer::start(Mode::Plain)?;          // needs root and vsftpd
//! std::fs::write(server.root().join("a.txt"), b"hello")?;
//! let url = haul_remote::RemoteUrl::parse(&server.url("/")).unwrap(); // anonymous
//! let remote = haul_ftp::open(&url, &server.options()).unwrap();
//! // ... or as the local user `hault`: server.user_url("/") / server.user_options()
//! # Ok(()) }
//! ```
//!
//! Each server has its own temp dir: `root/` (served: the anonymous root and
//! the local user's chroot), `empty/` (vsftpd's secure_chroot_dir), the
//! config, a log (`vsftpd.log`, every command and reply), and for the TLS
//! modes a self-signed certificate for `127.0.0.1`/`localhost` made with
//! `openssl req -x509` ([`FtpServer::ca_cert`]). Passive data ports are
//! chosen by the kernel (`pasv_min_port=0`), so parallel servers never
//! collide. [`FtpServer::stop`] kills vsftpd and all its session processes;
//! [`FtpServer::start_again`] restarts it on the same port and data.
//!
//! Files made in `root/` by the tests (running as root) must be readable by
//! `hault` (and world-readable for anonymous downloads); a directory where
//! `hault` deletes must be writable by it ([`FtpServer::writable_dir`]).
//! vsftpd runs the sessions of local users as `hault`, created by
//! [`ensure_user`] when missing (password [`PASSWORD`]). TLS sessions are
//! forced for the local user in [`Mode::ExplicitTls`]; `require_ssl_reuse`
//! is on (vsftpd's default), so data connections must resume the control
//! connection's TLS session.

use std::fs;
use std::io::{self, Read};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use haul_remote::{RemoteOptions, Secret};

/// The local FTP test user (shared with the SFTP tests).
pub const USER: &str = "hault";
/// Its password.
pub const PASSWORD: &str = "hault-pw-1";

/// How the server speaks TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Plain FTP (`ftp://`).
    Plain,
    /// `AUTH TLS` on the control connection (`ftps://`); TLS required for
    /// the local user's login and data.
    ExplicitTls,
    /// TLS from the first byte (`ftps-implicit://`).
    ImplicitTls,
}

/// A running vsftpd with its own directory; killed on drop.
pub struct FtpServer {
    mode: Mode,
    port: u16,
    /// Bytes per second per session (0: unlimited).
    max_rate: u64,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

/// Creates the user [`USER`] with password [`PASSWORD`] unless it exists
/// (idempotent; tolerates another test binary doing it at the same time).
pub fn ensure_user() -> io::Result<()> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| create_user().map_err(|e| e.to_string()))
        .clone()
        .map_err(io::Error::other)
}

fn create_user() -> io::Result<()> {
    if user_ids().is_err() {
        let st = Command::new("useradd")
            .args(["-m", "-s", "/bin/bash", USER])
            .status()?;
        // 9: created meanwhile by someone else.
        if !st.success() && st.code() != Some(9) {
            return Err(io::Error::other(format!("useradd {USER} failed: {st}")));
        }
    }
    // chpasswd may find the shadow file locked by a concurrent run: retry.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut child = Command::new("chpasswd").stdin(Stdio::piped()).spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write;
            stdin.write_all(format!("{USER}:{PASSWORD}\n").as_bytes())?;
        }
        if child.wait()?.success() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "chpasswd for {USER} keeps failing"
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The uid and gid of [`USER`], from /etc/passwd.
pub fn user_ids() -> io::Result<(u32, u32)> {
    let passwd = fs::read_to_string("/etc/passwd")?;
    for line in passwd.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() > 3 && f[0] == USER {
            if let (Ok(u), Ok(g)) = (f[2].parse(), f[3].parse()) {
                return Ok((u, g));
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("no user {USER}"),
    ))
}

fn has_user(name: &str) -> bool {
    fs::read_to_string("/etc/passwd")
        .map(|p| p.lines().any(|l| l.starts_with(&format!("{name}:"))))
        .unwrap_or(false)
}

/// The address the server listens on: `127.0.0.1`, or `HAUL_TESTSERVER_ADDR`
/// (an IPv4 address of this host, e.g. a lab host's, for benchmarks run
/// inside a `haul lab` namespace).
pub fn listen_ip() -> std::net::Ipv4Addr {
    std::env::var("HAUL_TESTSERVER_ADDR")
        .ok()
        .and_then(|a| a.parse().ok())
        .unwrap_or(std::net::Ipv4Addr::LOCALHOST)
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((listen_ip(), 0))?.local_addr()?.port())
}

impl FtpServer {
    /// Starts vsftpd in `mode` on a free port and waits (at most 10 s) until
    /// it answers. Needs root (vsftpd starts as root) and creates the test
    /// user.
    pub fn start(mode: Mode) -> io::Result<FtpServer> {
        Self::start_throttled(mode, 0)
    }

    /// [`FtpServer::start`] with every data transfer limited to
    /// `bytes_per_sec` (vsftpd's `anon_max_rate`/`local_max_rate`; 0 for no
    /// limit), to stop the server in the middle of a download.
    pub fn start_throttled(mode: Mode, bytes_per_sec: u64) -> io::Result<FtpServer> {
        ensure_user()?;
        let dir = tempfile::Builder::new().prefix("haul-ftp-").tempdir()?;
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))?;
        for sub in ["root", "empty"] {
            fs::create_dir(dir.path().join(sub))?;
            fs::set_permissions(dir.path().join(sub), fs::Permissions::from_mode(0o755))?;
        }
        if mode != Mode::Plain {
            make_cert(dir.path())?;
        }
        let mut server = FtpServer {
            mode,
            port: 0,
            max_rate: bytes_per_sec,
            dir,
            child: None,
        };
        let mut last = None;
        for _ in 0..5 {
            server.port = free_port()?;
            server.write_config()?;
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("vsftpd did not start")))
    }

    /// The served directory: put fixture files here.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// Makes (if needed) `root/NAME`, owned by [`USER`] and writable, for
    /// delete tests; returns its path.
    pub fn writable_dir(&self, name: &str) -> io::Result<PathBuf> {
        let p = self.root().join(name);
        fs::create_dir_all(&p)?;
        let (uid, gid) = user_ids()?;
        std::os::unix::fs::chown(&p, Some(uid), Some(gid))?;
        Ok(p)
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The mode it was started in.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The self-signed certificate (PEM) to trust (`opts.ca_cert`), for the
    /// TLS modes.
    pub fn ca_cert(&self) -> Option<PathBuf> {
        (self.mode != Mode::Plain).then(|| self.dir.path().join("cert.pem"))
    }

    fn scheme(&self) -> &'static str {
        match self.mode {
            Mode::Plain => "ftp",
            Mode::ExplicitTls => "ftps",
            Mode::ImplicitTls => "ftps-implicit",
        }
    }

    /// An anonymous URL for `path` (which must start with `/`; spaces and
    /// other specials are percent-encoded).
    pub fn url(&self, path: &str) -> String {
        format!(
            "{}://{}:{}{}",
            self.scheme(),
            listen_ip(),
            self.port,
            encode_path(path)
        )
    }

    /// A URL for `path` with the user [`USER`] (the password goes in the
    /// options, see [`FtpServer::user_options`]).
    pub fn user_url(&self, path: &str) -> String {
        format!(
            "{}://{USER}@{}:{}{}",
            self.scheme(),
            listen_ip(),
            self.port,
            encode_path(path)
        )
    }

    /// Options for anonymous use: 10 s timeout, the CA certificate.
    pub fn options(&self) -> RemoteOptions {
        RemoteOptions {
            timeout: Duration::from_secs(10),
            ca_cert: self.ca_cert(),
            ..Default::default()
        }
    }

    /// [`FtpServer::options`] plus the user and password of [`USER`].
    pub fn user_options(&self) -> RemoteOptions {
        RemoteOptions {
            user: Some(USER.into()),
            password: Some(Secret::new(PASSWORD)),
            ..self.options()
        }
    }

    /// vsftpd's log so far (commands and replies), for failure messages.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("vsftpd.log")).unwrap_or_default()
    }

    /// Kills vsftpd and every session process it forked, and waits for it.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id() as i32;
        let family = descendants(pid);
        // SAFETY: plain kill(2) calls on pids/group we started.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
            for p in family {
                libc::kill(p, libc::SIGKILL);
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Starts vsftpd again after [`FtpServer::stop`], on the same port with
    /// the same files.
    pub fn start_again(&mut self) -> io::Result<()> {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn write_config(&self) -> io::Result<()> {
        let d = self.dir.path();
        let root = self.root();
        let anon = if has_user("ftp") { "ftp" } else { "nobody" };
        let mut conf = format!(
            "listen=YES\nlisten_ipv6=NO\nlisten_address={addr}\nlisten_port={port}\n\
             background=NO\nseccomp_sandbox=NO\nisolate=NO\nisolate_network=NO\n\
             secure_chroot_dir={empty}\n\
             anonymous_enable=YES\nanon_root={root}\nftp_username={anon}\nno_anon_password=YES\n\
             anon_upload_enable=NO\nanon_mkdir_write_enable=NO\nanon_other_write_enable=NO\n\
             local_enable=YES\nlocal_root={root}\nchroot_local_user=YES\nallow_writeable_chroot=YES\n\
             write_enable=YES\nlocal_umask=022\npam_service_name=vsftpd\nuserlist_enable=NO\n\
             tcp_wrappers=NO\npasv_enable=YES\npasv_min_port=0\npasv_max_port=0\n\
             connect_from_port_20=NO\nuse_localtime=NO\nhide_ids=NO\nutf8_filesystem=YES\n\
             dirmessage_enable=NO\ndelay_failed_login=0\nmax_per_ip=0\nmax_clients=0\n\
             xferlog_enable=YES\nvsftpd_log_file={log}\nlog_ftp_protocol=YES\n",
            port = self.port,
            addr = listen_ip(),
            empty = d.join("empty").display(),
            root = root.display(),
            log = d.join("vsftpd.log").display(),
        );
        if self.max_rate > 0 {
            conf.push_str(&format!(
                "anon_max_rate={r}\nlocal_max_rate={r}\n",
                r = self.max_rate
            ));
        }
        if self.mode != Mode::Plain {
            let forced = if self.mode == Mode::ExplicitTls {
                "YES"
            } else {
                "NO"
            };
            conf.push_str(&format!(
                "ssl_enable=YES\nrsa_cert_file={cert}\nrsa_private_key_file={key}\n\
                 allow_anon_ssl=YES\nforce_anon_logins_ssl=NO\nforce_anon_data_ssl=NO\n\
                 force_local_logins_ssl={forced}\nforce_local_data_ssl={forced}\n\
                 require_ssl_reuse=YES\nssl_request_cert=NO\nssl_ciphers=HIGH\n",
                cert = d.join("cert.pem").display(),
                key = d.join("key.pem").display(),
            ));
            if self.mode == Mode::ImplicitTls {
                conf.push_str("implicit_ssl=YES\n");
            }
        }
        fs::write(d.join("vsftpd.conf"), conf)
    }

    /// Spawns vsftpd and waits until its port accepts connections.
    fn spawn(&mut self) -> io::Result<()> {
        let d = self.dir.path();
        let exe = if Path::new("/usr/sbin/vsftpd").exists() {
            "/usr/sbin/vsftpd"
        } else {
            "vsftpd"
        };
        let stderr = fs::File::create(d.join("stderr.txt"))?;
        let mut child = Command::new(exe)
            .arg(d.join("vsftpd.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot run vsftpd ({exe}): {e}")))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let addr = std::net::SocketAddr::from((listen_ip(), self.port));
        loop {
            if let Some(st) = child.try_wait()? {
                let mut err = String::new();
                let _ = fs::File::open(d.join("stderr.txt"))
                    .and_then(|mut f| f.read_to_string(&mut err));
                return Err(io::Error::other(format!(
                    "vsftpd exited ({st}): {}",
                    err.trim()
                )));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "vsftpd did not listen within 10 s",
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for FtpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Percent-encodes what a URL path cannot hold as is.
fn encode_path(path: &str) -> String {
    let mut out = String::new();
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A self-signed certificate for 127.0.0.1 / localhost (not a CA, so
/// webpki accepts it as the server's own certificate).
fn make_cert(dir: &Path) -> io::Result<()> {
    let cnf = dir.join("openssl.cnf");
    fs::write(
        &cnf,
        "[req]\ndistinguished_name = dn\nx509_extensions = ext\nprompt = no\n\
         [dn]\nCN = localhost\n\
         [ext]\nbasicConstraints = critical, CA:FALSE\n\
         subjectAltName = IP:127.0.0.1, DNS:localhost\n\
         keyUsage = critical, digitalSignature, keyEncipherment\nextendedKeyUsage = serverAuth\n",
    )?;
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
        ])
        .arg("-config")
        .arg(&cnf)
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "openssl req failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

/// All processes descending from `pid` (read from /proc before killing, as
/// orphans are re-parented).
fn descendants(pid: i32) -> Vec<i32> {
    let mut parents: Vec<(i32, i32)> = Vec::new();
    if let Ok(rd) = fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(stat) = fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid ...: comm may hold spaces; split after ')'.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|s| s.parse::<i32>().ok());
            if let Some(pp) = ppid {
                parents.push((p, pp));
            }
        }
    }
    let mut out = vec![];
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for &(c, pp) in &parents {
            if pp == p && !out.contains(&c) {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}
