//! A real PostgreSQL server for tests (cargo feature `test-server`).
//!
//! [`TestServer::start`] runs Debian's `initdb` into a fresh temp dir
//! (trust authentication, superuser `haul`) and `postgres` on a free
//! `127.0.0.1` port with its socket in that dir; it is stopped (SIGTERM,
//! SIGKILL after 5 s) and waited for on drop. The binaries are found under
//! `/usr/lib/postgresql/*/bin` (or `HAUL_PG_BIN`). As root, the server runs
//! as the `postgres` user (or `nobody`), since initdb refuses root.
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! let pg = haul_catalog::testserver::TestServer::start()?;
//! let url = pg.create_database("t1")?; // postgres://haul@127.0.0.1:PORT/t1
//! # let _ = url; Ok(()) }
//! ```

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What [`TestServer::start_with`] sets up beyond the defaults.
#[derive(Debug, Default, Clone)]
pub struct Setup {
    /// `ssl = on` with this certificate chain and key (PEM).
    pub tls: Option<(String, String)>,
    /// `pg_hba.conf` in place of initdb's (trust for everyone).
    pub hba: Option<String>,
}

/// A running PostgreSQL; stopped and reaped on drop.
pub struct TestServer {
    dir: tempfile::TempDir,
    port: u16,
    bin: PathBuf,
    uid: Option<(u32, u32)>,
    child: Option<Child>,
    /// More `postgres` arguments (`-c ssl=on`).
    extra: Vec<String>,
}

/// The directory of PostgreSQL's server binaries (the newest version installed).
fn pg_bin() -> io::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("HAUL_PG_BIN") {
        return Ok(dir.into());
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| {
            io::Error::other(format!(
                "PostgreSQL is not installed ({e}): apt-get install postgresql, or run scripts/test.sh"
            ))
        })?
        .filter_map(|d| d.ok())
        .filter_map(|d| {
            let version = d.file_name().to_str()?.parse().ok()?;
            let bin = d.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|f| f.1).ok_or_else(|| {
        io::Error::other("no /usr/lib/postgresql/*/bin/initdb: apt-get install postgresql")
    })
}

/// The uid and gid to run as when we are root: `postgres`, else `nobody`.
fn unprivileged() -> io::Result<Option<(u32, u32)>> {
    // SAFETY: getuid(2) has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return Ok(None);
    }
    for user in ["postgres", "nobody"] {
        let id = |flag: &str| -> Option<u32> {
            let out = Command::new("id").args([flag, user]).output().ok()?;
            String::from_utf8_lossy(&out.stdout).trim().parse().ok()
        };
        if let (Some(uid), Some(gid)) = (id("-u"), id("-g")) {
            return Ok(Some((uid, gid)));
        }
    }
    Err(io::Error::other(
        "running as root and no postgres or nobody user to run PostgreSQL as",
    ))
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

impl TestServer {
    /// Makes a cluster and starts it; waits (at most 30 s) until it accepts connections.
    pub fn start() -> io::Result<Self> {
        Self::start_with(&Setup::default())
    }

    /// [`TestServer::start`], with TLS and client authentication rules.
    /// The admin `psql` of this module connects as `haul` from 127.0.0.1:
    /// `hba` must let it in (`host all haul 127.0.0.1/32 trust`).
    pub fn start_with(setup: &Setup) -> io::Result<Self> {
        let bin = pg_bin()?;
        let uid = unprivileged()?;
        let dir = tempfile::Builder::new().prefix("haul-pg-").tempdir()?;
        if let Some((u, g)) = uid {
            std::os::unix::fs::chown(dir.path(), Some(u), Some(g))?;
        }
        let mut srv = Self {
            port: 0,
            bin,
            uid,
            child: None,
            dir,
            extra: Vec::new(),
        };
        let data = srv.dir.path().join("data");
        let mut initdb = srv.command("initdb");
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "haul", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null());
        let out = initdb.output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let own = |path: &std::path::Path| -> io::Result<()> {
            if let Some((u, g)) = uid {
                std::os::unix::fs::chown(path, Some(u), Some(g))?;
            }
            Ok(())
        };
        if let Some((cert, key)) = &setup.tls {
            use std::os::unix::fs::PermissionsExt;
            let (crt, k) = (data.join("server.crt"), data.join("server.key"));
            std::fs::write(&crt, cert)?;
            std::fs::write(&k, key)?;
            // PostgreSQL refuses a key others can read.
            std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o600))?;
            own(&crt)?;
            own(&k)?;
            srv.extra.extend(["-c".into(), "ssl=on".into()]);
        }
        if let Some(hba) = &setup.hba {
            let path = data.join("pg_hba.conf");
            std::fs::write(&path, hba)?;
            own(&path)?;
        }
        let mut last = None;
        // A free port may be taken before the server binds it: try again.
        for _ in 0..3 {
            srv.port = free_port()?;
            match srv.run() {
                Ok(()) => return Ok(srv),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("PostgreSQL did not start")))
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        cmd.stdin(Stdio::null()).current_dir(self.dir.path());
        if let Some((u, g)) = self.uid {
            cmd.uid(u).gid(g);
        }
        cmd
    }

    fn run(&mut self) -> io::Result<()> {
        let p = self.dir.path().to_path_buf();
        let log = std::fs::File::create(p.join("server.log"))?;
        if let Some((u, g)) = self.uid {
            std::os::unix::fs::chown(p.join("server.log"), Some(u), Some(g))?;
        }
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(p.join("data"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-k"])
            .arg(&p)
            .args(["-c", "fsync=off", "-c", "max_connections=50"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                && self.psql("postgres", "SELECT 1").is_ok()
            {
                return Ok(());
            }
            let exited = match self.child.as_mut() {
                Some(c) => c.try_wait()?.is_some(),
                None => true,
            };
            if exited || Instant::now() > deadline {
                self.stop();
                let log = std::fs::read_to_string(p.join("server.log")).unwrap_or_default();
                return Err(io::Error::other(format!("PostgreSQL did not start: {log}")));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `sql` in database `db` as the superuser `haul` (through `psql`).
    pub fn sql(&self, db: &str, sql: &str) -> io::Result<()> {
        self.psql(db, sql)
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    fn psql(&self, db: &str, sql: &str) -> io::Result<()> {
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "haul",
            ])
            .args(["-d", db, "-v", "ON_ERROR_STOP=1", "-q", "-c", sql])
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "psql {sql:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    /// Creates database `name` and returns its URL.
    pub fn create_database(&self, name: &str) -> io::Result<String> {
        self.psql("postgres", &format!("CREATE DATABASE \"{name}\""))?;
        Ok(self.url(name))
    }

    /// `postgres://haul@127.0.0.1:PORT/DB`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://haul@127.0.0.1:{}/{db}", self.port)
    }

    /// Starts the server again after [`TestServer::stop`], on the same
    /// port and data (a database restart as clients see it).
    pub fn start_again(&mut self) -> io::Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        self.run()
    }

    /// Stops the server (fast shutdown) and waits for it. Idempotent.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid; no memory involved.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() > deadline => {
                    // SAFETY: the group was created for this child (process_group(0)).
                    unsafe { libc::kill(-pid, libc::SIGKILL) };
                    let _ = child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}
