//! Small helpers: temp trees, a node process, running the client.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_haul");

/// A running `haul serve`, killed and waited for on drop.
pub struct Node {
    pub child: Child,
    pub addr: String,
    pub fingerprint: Option<String>,
    /// The port of its status listener (`--status`), if it has one.
    pub status: Option<u16>,
}

impl Node {
    pub fn url(&self, path: &str) -> String {
        format!("haul://{}/{}", self.addr, path)
    }

    /// Starts a node; `extra` are more flags (e.g. --plaintext, --token T).
    pub fn start(root: &Path, config: &Path, extra: &[&str]) -> Node {
        Self::start_on(root, config, "127.0.0.1:0", extra)
    }

    pub fn start_on(root: &Path, config: &Path, listen: &str, extra: &[&str]) -> Node {
        Self::spawn(Command::new(BIN), root, config, listen, extra)
    }

    /// Starts a node whose log (info level) goes to `log`.
    pub fn start_logged(root: &Path, config: &Path, extra: &[&str], log: &Path) -> Node {
        let mut cmd = Command::new(BIN);
        cmd.env("HAUL_LOG", "info");
        Self::spawn_to(cmd, root, config, "127.0.0.1:0", extra, Some(log))
    }

    /// Starts a node whose log, filtered by `filter` (`HAUL_LOG`), goes to `log`.
    pub fn start_filtered(
        root: &Path,
        config: &Path,
        extra: &[&str],
        log: &Path,
        filter: &str,
    ) -> Node {
        let mut cmd = Command::new(BIN);
        cmd.env("HAUL_LOG", filter);
        Self::spawn_to(cmd, root, config, "127.0.0.1:0", extra, Some(log))
    }

    /// Starts a node with `cmd` as the program (e.g. `ip netns exec NS haul`).
    pub fn spawn(cmd: Command, root: &Path, config: &Path, listen: &str, extra: &[&str]) -> Node {
        Self::spawn_to(cmd, root, config, listen, extra, None)
    }

    fn spawn_to(
        mut cmd: Command,
        root: &Path,
        config: &Path,
        listen: &str,
        extra: &[&str],
        log: Option<&Path>,
    ) -> Node {
        // `--json`: the address and key come as the `listening` event,
        // not scraped from text meant for people.
        cmd.args(["--json", "serve", "--create-root", "--root"])
            .arg(root)
            .args(["--listen", listen, "--identity"]);
        cmd.arg(config.join("identity"));
        without_haul_variables(&mut cmd);
        cmd.args(extra)
            .env("HAUL_CONFIG_DIR", config)
            .env("XDG_CACHE_HOME", config.join("cache"));
        let stderr = match log {
            Some(p) => Stdio::from(std::fs::File::create(p).expect("node log")),
            None => Stdio::null(),
        };
        cmd.stdout(Stdio::piped()).stderr(stderr);
        let mut child = cmd.spawn().expect("spawn haul serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let listening = lines
            .by_ref()
            .map_while(Result::ok)
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
            .find(|v| v["event"] == "listening")
            .expect("serve ended before it said it was listening");
        let addr = listening["addr"].as_str().expect("addr").to_owned();
        let fingerprint = listening["fingerprint"].as_str().map(str::to_owned);
        let status = listening["status"]
            .as_str()
            .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
            .map(|a| a.port());
        // Keep draining stdout so the node never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Node {
            child,
            addr,
            fingerprint,
            status,
        }
    }

    pub fn kill9(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes the `HAUL_*` variables the test inherited (flags read them)
/// but the log filter and the suites' transport, and those `cmd` set
/// itself: a developer's `HAUL_JSON` must not change what a test sees.
pub fn without_haul_variables(cmd: &mut Command) {
    let own: Vec<_> = cmd.get_envs().map(|(k, _)| k.to_owned()).collect();
    for (name, _) in std::env::vars_os() {
        if own.contains(&name) {
            continue;
        }
        let Some(text) = name.to_str() else { continue };
        if text.starts_with("HAUL_") && !matches!(text, "HAUL_LOG" | "HAUL_TEST_TRANSPORT") {
            cmd.env_remove(&name);
        }
    }
}

/// A client command with its own config dir (known hosts).
pub fn haul(config: &Path) -> Command {
    let mut c = Command::new(BIN);
    without_haul_variables(&mut c);
    // The hash cache's store (for files that cannot carry their record)
    // beside the config, not in the user's home.
    c.env("HAUL_CONFIG_DIR", config)
        .env("XDG_CACHE_HOME", config.join("cache"));
    c
}

/// With `HAUL_TEST_TRANSPORT=quic` in the test's environment, a push or
/// pull that names neither `--plaintext` nor `--transport` runs over that
/// transport: the same end-to-end suites for both transports
/// (`scripts/test.sh` runs them so). Every command that spawns a transfer
/// goes through this.
pub fn with_test_transport(cmd: &mut Command) {
    let Ok(t) = std::env::var("HAUL_TEST_TRANSPORT") else {
        return;
    };
    let args: Vec<_> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let transfer = args.iter().any(|a| a == "push" || a == "pull");
    if transfer
        && !args
            .iter()
            .any(|a| a == "--plaintext" || a == "--transport")
    {
        cmd.env("HAUL_TRANSPORT", t);
    }
}

/// Runs to completion with a deadline (tests never hang). Output is drained
/// while it runs, so a chatty child never blocks on a full pipe.
pub fn run(mut cmd: Command, limit: Duration) -> Output {
    with_test_transport(&mut cmd);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn haul");
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    );
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let (o, e) = (
                out.join().unwrap_or_default(),
                err.join().unwrap_or_default(),
            );
            panic!(
                "haul ran longer than {limit:?}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&o),
                String::from_utf8_lossy(&e)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// The `summary` event of a `--json` run.
/// Asserts the run exited 0, showing both streams when not.
pub fn ok(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(out)
    );
}

pub fn summary(out: &Output) -> serde_json::Value {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "summary")
        .unwrap_or_else(|| {
            panic!(
                "no summary; stdout {} stderr {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `rsync ARGS SOURCES... DEST` (the reference a test compares
/// haul's result with) and checks it succeeded; its output.
pub fn rsync(args: &[&str], sources: &[&Path], dest: &Path) -> Output {
    let out = Command::new("rsync")
        .args(args)
        .args(sources)
        .arg(dest)
        .output()
        .expect("rsync (apt-get install rsync; scripts/test.sh does)");
    assert!(
        out.status.success(),
        "rsync {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Waits (up to 10 s) until each of `dirs` that `dest` has has the mtime
/// it has under `src`: a node sets its directories' mtimes once it goes
/// idle, which may be just after the client exits.
pub fn dir_mtimes_settled(src: &Path, dest: &Path, dirs: &[&str]) {
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !dirs.iter().all(|d| {
        let there = mtime(&dest.join(d));
        there.is_none() || there == mtime(&src.join(d))
    }) {
        assert!(
            std::time::Instant::now() < deadline,
            "the node never set the mtimes of {dirs:?} in {}",
            dest.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a run printed on stdout, line by line.
pub fn stdout_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// What a failed run said, for an assertion's message: stderr, then the
/// end of stdout (where `--json` puts its error events).
pub fn said(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let cut = stdout.len().saturating_sub(4000);
    let tail = stdout.get(cut..).unwrap_or(&stdout);
    format!("{}\n-- stdout (end) --\n{tail}", stderr(out))
}

/// Whether a staging file of the node (or destination) at `root` holds at
/// least `bytes`: a transfer got that far.
pub fn staged(root: &Path, bytes: u64) -> bool {
    std::fs::read_dir(root.join(".haul/partial"))
        .map(|d| {
            d.flatten()
                .any(|e| e.metadata().map(|m| m.len() >= bytes).unwrap_or(false))
        })
        .unwrap_or(false)
}

/// Writes `len` pseudo-random bytes.
pub fn write_file(path: &Path, len: u64, seed: u64) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).expect("mkdir");
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let mut xof = blake3::Hasher::new()
        .update(&seed.to_le_bytes())
        .finalize_xof();
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        xof.fill(&mut buf[..n]);
        f.write_all(&buf[..n]).expect("write");
        left -= n as u64;
    }
}

/// Flips one byte of `path` at `at`, putting its mtime back: a change only
/// the content (and the ctime) shows.
pub fn flip_keeping_mtime(path: &Path, at: usize) {
    // Not within the few milliseconds after a content-hash record was set
    // on the file (by the run just before): an in-place edit that puts the
    // mtime back there is the one change a record cannot see (README, "The
    // hash cache"); a person's edit is never that quick.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mtime = std::fs::metadata(path)
        .expect("meta")
        .modified()
        .expect("mtime");
    let mut bytes = std::fs::read(path).expect("read");
    bytes[at] ^= 0x40;
    std::fs::write(path, &bytes).expect("write");
    std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open")
        .set_modified(mtime)
        .expect("set mtime");
}

pub fn b3(path: &Path) -> String {
    let mut h = blake3::Hasher::new();
    h.update_reader(std::fs::File::open(path).expect("open"))
        .expect("read");
    h.finalize().to_hex().to_string()
}

/// Every file, dir and link under `root` (relative), excluding haul's state dir.
pub fn listing(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let e = e.expect("entry");
            let rel = e
                .path()
                .strip_prefix(root)
                .expect("rel")
                .to_string_lossy()
                .into_owned();
            if rel == ".haul" {
                continue;
            }
            let ft = e.file_type().expect("ft");
            if ft.is_dir() {
                out.push(format!("{rel}/"));
                stack.push(e.path());
            } else if ft.is_symlink() {
                out.push(format!(
                    "{rel} -> {}",
                    std::fs::read_link(e.path()).expect("link").display()
                ));
            } else {
                out.push(format!("{rel} {}", b3(&e.path())));
            }
        }
    }
    out.sort();
    out
}

/// A scratch area with src/, node/, config/.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        Scratch {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }
    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
}

/// Waits until `f` is true or panics after `limit`.
pub fn wait_for(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        if start.elapsed() > limit {
            panic!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The lab's turn: held while a lab test runs, so that no two labs share
/// the machine's cores at once.
pub struct LabTurn(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

/// Lab tests take turns. Each lab forwards its links' packets in user
/// space on this machine's cores and the lab tests measure rates and
/// timeouts on those links: beside another lab (the fan-out test's six
/// hosts over QUIC) the `--bwlimit` test measured 44.95 Mbit/s against
/// its cap of 50 in a CI run, with nothing wrong in the pacer.
static LAB_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Waits for the lab's turn (the lab needs root: network namespaces and
/// TUN; its tests are ignored unless built with `root-tests`).
pub fn lab_root(what: &str) -> LabTurn {
    assert_root(what);
    // A lab test that failed poisoned the lock; the next one still runs.
    let turn = LAB_TURN.lock().unwrap_or_else(|e| e.into_inner());
    LabTurn(turn)
}

/// Fails a test that needs root when it is run without (never a silent
/// pass): such tests are ignored unless built with `root-tests`.
pub fn assert_root(what: &str) {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "{what} needs root; run it as root (scripts/test.sh does)"
    );
}

/// A file made immutable (`chattr +i`): as root, the one way to make a
/// removal fail for certain. Made mutable again on drop, so the scratch
/// directory can go.
pub struct Immutable(PathBuf);

impl Immutable {
    pub fn set(path: &Path) -> Immutable {
        let ok = Command::new("chattr")
            .arg("+i")
            .arg(path)
            .status()
            .expect("chattr (apt-get install e2fsprogs; scripts/test.sh does)");
        assert!(
            ok.success(),
            "chattr +i {} (needs ext4 or the like, and root)",
            path.display()
        );
        Immutable(path.to_owned())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

/// `GET path` from a status listener (a daemon's or a node's): (status line, body).
pub fn http_get(port: u16, path: &str) -> (String, String) {
    http_exchange(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    )
}

/// `POST path` of a form, with more `headers` (each ending in CRLF), to a
/// status listener: (status line, body).
pub fn http_post(port: u16, path: &str, headers: &str, form: &str) -> (String, String) {
    http_exchange(
        port,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{form}",
            form.len()
        ),
    )
}

/// Sends `request` to 127.0.0.1:`port`: (status line, body).
fn http_exchange(port: u16, request: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// Asserts that `promtool check metrics` accepts `metrics`.
pub fn promtool_check(metrics: &str) {
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/test.sh installs it)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(metrics.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}\n{metrics}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Drops every outgoing packet `rule` matches (an nftables match, such as
/// `ip daddr 127.0.0.7` or `udp dport 7878`) while it lives: a firewall on
/// the way. Root only (the tests that use it are).
pub struct Firewall(String);

impl Firewall {
    pub fn drop(rule: &str) -> Firewall {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let table = format!("haul_test_{}_{n}", std::process::id());
        let rules = format!(
            "table ip {table} {{\n chain out {{\n  type filter hook output priority 0;\n  {rule} drop\n }}\n}}\n"
        );
        let st = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                c.stdin.take().unwrap().write_all(rules.as_bytes())?;
                c.wait()
            })
            .expect("nft (apt-get install nftables)");
        assert!(st.success(), "nft refused the rules");
        Firewall(table)
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        let _ = Command::new("nft")
            .args(["delete", "table", "ip", &self.0])
            .status();
    }
}

/// How many lines of the JSON transfer log at `path` say `event` (such as
/// `file_received`, `file_sent`) with payload (`sent` > 0), by path.
pub fn logged_with_payload(path: &Path, event: &str) -> std::collections::HashMap<String, usize> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = std::collections::HashMap::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["event"] == event && v["sent"].as_u64().unwrap_or(0) > 0 {
            *out.entry(v["path"].as_str().unwrap_or("").to_owned())
                .or_default() += 1;
        }
    }
    out
}
