//! A real nginx for tests (cargo feature `test-server`).
//!
//! [`TestServer::start`] writes a config into a fresh temp dir and runs
//! `nginx -p DIR -c DIR/nginx.conf -g 'daemon off;'` as a child. Everything
//! (pid, logs, temp paths, certificates) stays inside that dir. It serves
//! [`TestServer::root`] on `127.0.0.1`:
//! - over HTTP ([`TestServer::http_url`]) and HTTPS ([`TestServer::https_url`],
//!   a certificate for `127.0.0.1`/`localhost` signed by a throwaway CA at
//!   [`TestServer::ca_cert`]);
//! - with `autoindex on; autoindex_exact_size on;` (directories list);
//! - `/private/` needs basic auth ([`USER`] / [`PASSWORD`]);
//! - `/denied/` answers 403 (`deny all`);
//! - `/slow/` is sent at 8 MB/s per connection (`limit_rate`), to stop a
//!   server in the middle of a download;
//! - `/checksums/tampered.txt` (contents `hellO\n`) carries the Content-MD5
//!   of `hello\n`: a download that must fail verification;
//! - `/checksums/hello.txt` (contents `hello\n`, created at start) carries
//!   `Content-MD5`, `Digest` and `Repr-Digest` headers;
//! - the access log ([`TestServer::access_log`]) has lines
//!   `CONNECTION_SERIAL REQUEST_NUMBER_ON_CONNECTION METHOD URI STATUS range=RANGE
//!   sent=BODY_BYTES`, to check connection reuse and resumed ranges.
//!
//! Workers run as `nobody` (nginx's default when started as root), so a file
//! with mode 000 answers 403; the temp dir is made world-readable for that.
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! let srv = haul_http::testserver::TestServer::start()?;
//! std::fs::write(srv.root().join("a.txt"), b"hi")?;
//! let url = srv.http_url("/a.txt"); // http://127.0.0.1:PORT/a.txt
//! # let _ = url; Ok(()) }
//! ```

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// User name that `/private/` accepts.
pub const USER: &str = "haul-user";
/// Password that `/private/` accepts.
pub const PASSWORD: &str = "haul-pw-1";

/// A running nginx; killed (SIGTERM, then SIGKILL) and reaped on drop.
pub struct TestServer {
    dir: tempfile::TempDir,
    http_port: u16,
    https_port: u16,
    child: Option<Child>,
}

fn run(cmd: &mut Command) -> io::Result<Vec<u8>> {
    let out = cmd.stdin(Stdio::null()).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{:?} failed: {}",
            cmd.get_program(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(out.stdout)
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

impl TestServer {
    /// Writes config, certificates and htpasswd, starts nginx and waits (at
    /// most 10 s) until both ports accept connections.
    pub fn start() -> io::Result<Self> {
        let mut dir = tempfile::Builder::new().prefix("haul-nginx-").tempdir()?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        let p = dir.path();
        for d in [
            "root",
            "root/private",
            "root/denied",
            "root/checksums",
            "tmp",
            "logs",
        ] {
            std::fs::create_dir_all(p.join(d))?;
            std::fs::set_permissions(p.join(d), std::fs::Permissions::from_mode(0o755))?;
        }
        std::fs::write(p.join("root/checksums/hello.txt"), b"hello\n")?;
        std::fs::write(p.join("root/checksums/tampered.txt"), b"hellO\n")?;
        make_certs(p)?;
        let hash = run(Command::new("openssl").args(["passwd", "-apr1", PASSWORD]))?;
        let hash = String::from_utf8_lossy(&hash).trim().to_string();
        std::fs::write(p.join("htpasswd"), format!("{USER}:{hash}\n"))?;
        std::fs::set_permissions(p.join("htpasswd"), std::fs::Permissions::from_mode(0o644))?;
        let mut last_err = None;
        // A free port can be taken by someone else before nginx binds it: retry.
        for _ in 0..3 {
            let mut srv = Self {
                http_port: free_port()?,
                https_port: free_port()?,
                child: None,
                dir,
            };
            match srv.start_again() {
                Ok(()) => return Ok(srv),
                Err(e) => {
                    last_err = Some(e);
                    dir = std::mem::replace(&mut srv.dir, tempfile::tempdir()?);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("nginx did not start")))
    }

    /// Starts nginx again (after [`stop`](Self::stop)) on the same ports and data.
    pub fn start_again(&mut self) -> io::Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let p = self.dir.path().to_path_buf();
        std::fs::write(p.join("nginx.conf"), self.config())?;
        let _ = std::fs::remove_file(p.join("logs/error.log"));
        let child = Command::new("nginx")
            .arg("-p")
            .arg(&p)
            .arg("-c")
            .arg(p.join("nginx.conf"))
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let up = [self.http_port, self.https_port].iter().all(|port| {
                let addr = SocketAddr::from((listen_ip(), *port));
                TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
            });
            if up {
                return Ok(());
            }
            let exited = match self.child.as_mut() {
                Some(c) => c.try_wait()?.is_some(),
                None => true,
            };
            if exited || Instant::now() > deadline {
                let log = std::fs::read_to_string(p.join("logs/error.log")).unwrap_or_default();
                self.stop();
                return Err(io::Error::other(format!("nginx did not start: {log}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops nginx (fast shutdown: SIGTERM to the master, which ends its
    /// workers first; SIGKILL to its process group if still there after 5 s)
    /// and waits for it. Idempotent.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid; no memory involved.
        unsafe { libc::kill(pid, libc::SIGTERM) };
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

    /// Directory served at `/` (put fixture files here; make them readable by
    /// `nobody`: default umask 022 does).
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// `http://127.0.0.1:PORT` + `path` (`path` as given: encode it yourself).
    pub fn http_url(&self, path: &str) -> String {
        format!("http://{}:{}{path}", listen_ip(), self.http_port)
    }

    /// `https://127.0.0.1:PORT` + `path`.
    pub fn https_url(&self, path: &str) -> String {
        format!("https://{}:{}{path}", listen_ip(), self.https_port)
    }

    /// Port of the HTTP listener.
    pub fn http_port(&self) -> u16 {
        self.http_port
    }

    /// Port of the HTTPS listener.
    pub fn https_port(&self) -> u16 {
        self.https_port
    }

    /// PEM file of the CA that signed the HTTPS certificate.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The access log (see the module docs for its format).
    pub fn access_log(&self) -> PathBuf {
        self.dir.path().join("logs/access.log")
    }

    /// nginx's error log.
    pub fn error_log(&self) -> PathBuf {
        self.dir.path().join("logs/error.log")
    }

    fn config(&self) -> String {
        let p = self.dir.path().display();
        let (http, https) = (self.http_port, self.https_port);
        let addr = listen_ip();
        format!(
            r#"worker_processes 1;
pid {p}/nginx.pid;
error_log {p}/logs/error.log warn;
events {{ worker_connections 128; }}
http {{
    types {{ text/plain txt; text/html html; }}
    default_type application/octet-stream;
    charset utf-8;
    client_body_temp_path {p}/tmp/body;
    proxy_temp_path {p}/tmp/proxy;
    fastcgi_temp_path {p}/tmp/fastcgi;
    uwsgi_temp_path {p}/tmp/uwsgi;
    scgi_temp_path {p}/tmp/scgi;
    log_format haul '$connection $connection_requests $request_method $request_uri $status range=$http_range sent=$body_bytes_sent';
    access_log {p}/logs/access.log haul;
    server {{
        listen {addr}:{http};
        listen {addr}:{https} ssl;
        server_name localhost;
        ssl_certificate {p}/server.pem;
        ssl_certificate_key {p}/server.key;
        absolute_redirect off;
        root {p}/root;
        index index-haul-none.none;
        autoindex on;
        autoindex_exact_size on;
        location /private/ {{
            auth_basic "haul test";
            auth_basic_user_file {p}/htpasswd;
        }}
        location /denied/ {{ deny all; }}
        location /slow/ {{ limit_rate 8m; }}
        location = /checksums/tampered.txt {{
            add_header Content-MD5 "sZRqySSS0jR8YjW00mERhA==";
        }}
        location = /checksums/hello.txt {{
            add_header Content-MD5 "sZRqySSS0jR8YjW00mERhA==";
            add_header Digest "sha-256=WJG1tSLV3whtD/CxEPvZ0hu0/HFjrzTQgoai6Eb2vgM=";
            add_header Repr-Digest "sha-256=:WJG1tSLV3whtD/CxEPvZ0hu0/HFjrzTQgoai6Eb2vgM=:";
        }}
    }}
}}
"#
        )
    }
}

/// A throwaway CA (`ca.pem`) and a server certificate for 127.0.0.1 and
/// localhost signed by it (`server.pem`, `server.key`).
fn make_certs(p: &Path) -> io::Result<()> {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    run(Command::new("openssl")
        .args(["req", "-x509"])
        .args(ec)
        .args(["-days", "3", "-subj", "/CN=haul test CA"])
        .arg("-keyout")
        .arg(p.join("ca.key"))
        .arg("-out")
        .arg(p.join("ca.pem")))?;
    run(Command::new("openssl")
        .args(["req", "-new"])
        .args(ec)
        .args(["-subj", "/CN=127.0.0.1"])
        .arg("-keyout")
        .arg(p.join("server.key"))
        .arg("-out")
        .arg(p.join("server.csr")))?;
    std::fs::write(
        p.join("server.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n\
         subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )?;
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "2", "-set_serial", "2"])
        .arg("-in")
        .arg(p.join("server.csr"))
        .arg("-CA")
        .arg(p.join("ca.pem"))
        .arg("-CAkey")
        .arg(p.join("ca.key"))
        .arg("-extfile")
        .arg(p.join("server.ext"))
        .arg("-out")
        .arg(p.join("server.pem")))?;
    Ok(())
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}
