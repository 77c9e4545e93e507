//! `host:path` over ssh with nothing running on the far side: a real OpenSSH
//! `sshd` on 127.0.0.1 (needs root), the system `ssh` as the user has it
//! (here with `-e` naming the test's key and known_hosts), and this build
//! of haul started there (`--remote-haul`) as `haul serve --ssh` (a direct
//! port) or `haul serve --stdio` (over the ssh channel).

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use haul_sftp::testserver::TestServer;

use crate::harness::*;

const T: Duration = Duration::from_secs(120);

fn server() -> TestServer {
    TestServer::start().expect("start sshd (apt-get install openssh-server; needs root)")
}

/// `-e`: the test's key, host key pinned, never a prompt.
pub(crate) fn rsh(srv: &TestServer, known_hosts: &Path) -> String {
    rsh_with(srv, &srv.client_key(), known_hosts)
}

/// [`rsh`] with another client key (only that key is offered).
fn rsh_with(srv: &TestServer, key: &Path, known_hosts: &Path) -> String {
    format!(
        "ssh -i {} -o IdentitiesOnly=yes -o UserKnownHostsFile={} -o StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=10 -p {}",
        key.display(),
        known_hosts.display(),
        srv.port()
    )
}

fn at(path: &Path) -> String {
    format!("{}@127.0.0.1:{}", TestServer::key_user(), path.display())
}

/// `haul -v ARGS… -e RSH --remote-haul BIN`, as JSON.
fn over_ssh(s: &Scratch, srv: &TestServer, args: &[&str]) -> Output {
    over_ssh_via(s, &rsh(srv, &srv.known_hosts_file()), BIN, args)
}

/// [`over_ssh`] with `-e RSH` and `--remote-haul REMOTE`.
fn over_ssh_via(s: &Scratch, rsh: &str, remote: &str, args: &[&str]) -> Output {
    let mut c = haul(&s.path("config"));
    c.args(["-v", "--json"])
        .args(args)
        .args(["-e", rsh])
        .args(["--remote-haul", remote]);
    run(c, T)
}

/// The `fanout` event of a `--json` fan-out's output.
fn fanout_summary(out: &Output) -> serde_json::Value {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "fanout")
        .expect("a fanout summary")
}

/// No far-side node for `root` left running (waits a little: sshd reaps
/// its session after the client went). A port belongs to a process, so
/// none is left listening either.
fn nothing_left_running(root: &Path) {
    let pattern = format!("serve --(ssh|stdio) --root {}", root.display());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = std::process::Command::new("pgrep")
            .args(["-f", &pattern])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !found {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "a far-side node is still running"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn push_pull_ls_and_check_over_ssh_with_nothing_running_there() {
    let srv = server();
    let s = Scratch::new();
    let src = s.path("src/set");
    write_file(&src.join("big.bin"), 6 << 20, 1);
    write_file(&src.join("a.txt"), 100, 2);
    write_file(&src.join("sub/b.txt"), 3000, 3);
    let far = srv.root().join("in");
    std::fs::create_dir_all(&far).unwrap();
    // A push into the far directory (its contents: a trailing slash).
    let dest = format!("{}/", at(&far));
    let out = over_ssh(&s, &srv, &["push", src.to_str().unwrap(), &dest]);
    ok(&out);
    assert_eq!(summary(&out)["files_ok"], 3);
    assert_eq!(listing(&far.join("set")), listing(&src));
    // Straight to the port the far side offered, its key pinned from the
    // ssh channel: nothing learned on first use.
    let err = stderr(&out);
    assert!(err.contains("connected directly to 127.0.0.1:"), "{err}");
    assert!(!err.contains("trusting"), "{err}");
    // Again: everything is up to date, nothing moves.
    let out = over_ssh(&s, &srv, &["push", src.to_str().unwrap(), &dest]);
    ok(&out);
    assert_eq!(summary(&out)["bytes_transferred"], 0, "{}", stderr(&out));
    // Back: a pull of the far `set` into a local directory.
    let back = s.path("back");
    let out = over_ssh(
        &s,
        &srv,
        &["pull", &at(&far.join("set")), back.to_str().unwrap()],
    );
    ok(&out);
    assert_eq!(listing(&back.join("set")), listing(&src));
    // ls and check see the same tree.
    let out = over_ssh(&s, &srv, &["ls", "-R", &at(&far.join("set"))]);
    ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("sub/b.txt"), "{text}");
    let out = over_ssh(
        &s,
        &srv,
        &["check", src.to_str().unwrap(), &at(&far.join("set"))],
    );
    ok(&out);
    // --delete: what the source no longer has goes there too.
    std::fs::remove_file(src.join("a.txt")).unwrap();
    let out = over_ssh(
        &s,
        &srv,
        &["push", "--delete", src.to_str().unwrap(), &dest],
    );
    ok(&out);
    assert!(!far.join("set/a.txt").exists());
    assert_eq!(listing(&far.join("set")), listing(&src));
    nothing_left_running(&far);
}

#[test]
fn ssh_and_far_side_failures_come_through_in_their_own_words_with_exit_2() {
    let srv = server();
    let s = Scratch::new();
    let src = s.path("src/one.txt");
    write_file(&src, 10, 1);
    let far = format!("{}/", at(&srv.root()));
    // No haul where --remote-haul says.
    let mut c = haul(&s.path("config"));
    c.args(["push", src.to_str().unwrap(), &far])
        .args(["-e", &rsh(&srv, &srv.known_hosts_file())])
        .args(["--remote-haul", "/nonexistent/haul"]);
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("no haul there") && err.contains("--remote-haul"),
        "{err}"
    );
    // A host key ssh does not know: ssh's refusal, once.
    let empty = s.path("empty_known_hosts");
    std::fs::write(&empty, "").unwrap();
    let mut c = haul(&s.path("config"));
    c.args(["push", src.to_str().unwrap(), &far])
        .args(["-e", &rsh(&srv, &empty)])
        .args(["--remote-haul", BIN]);
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("Host key verification failed"), "{err}");
    // A key the far side does not accept, and a host that does not exist.
    let stranger = s.path("stranger");
    let st = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&stranger)
        .status()
        .unwrap();
    assert!(st.success());
    let mut c = haul(&s.path("config"));
    c.args(["push", src.to_str().unwrap(), &far])
        .args(["-e", &rsh_with(&srv, &stranger, &srv.known_hosts_file())])
        .args(["--remote-haul", BIN]);
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );
    let mut c = haul(&s.path("config"));
    c.args([
        "push",
        src.to_str().unwrap(),
        "root@no-such-host.invalid:/x/",
    ])
    .args(["-e", &rsh(&srv, &srv.known_hosts_file())])
    .args(["--remote-haul", BIN]);
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("ssh root@no-such-host.invalid failed")
            && err.contains("no-such-host.invalid"),
        "{err}"
    );
    // Nothing was delivered by any.
    assert!(!srv.root().join("one.txt").exists());
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn the_ssh_channel_takes_over_when_the_direct_port_is_blocked_and_says_so() {
    let srv = server();
    let s = Scratch::new();
    let src = s.path("src/set");
    write_file(&src.join("a.bin"), 3 << 20, 4);
    write_file(&src.join("b.txt"), 500, 5);
    let far = srv.root().join("walled");
    std::fs::create_dir_all(&far).unwrap();
    // The far node listens where the ssh connection "arrived": an address
    // the firewall drops.
    let _wall = Firewall::drop("ip daddr 127.0.0.7");
    let remote = format!("env SSH_CONNECTION='127.0.0.1 1 127.0.0.7 22' {BIN}");
    let rsh = rsh(&srv, &srv.known_hosts_file());
    let dest = format!("{}/", at(&far));
    let started = Instant::now();
    let out = over_ssh_via(&s, &rsh, &remote, &["push", src.to_str().unwrap(), &dest]);
    ok(&out);
    assert_eq!(listing(&far.join("set")), listing(&src));
    let err = stderr(&out);
    assert!(
        err.contains("127.0.0.7")
            && err.contains("did not come up")
            && err.contains("over the ssh channel"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    // --ssh-tunnel goes there at once: no attempt, no waiting.
    std::fs::remove_dir_all(far.join("set")).unwrap();
    let out = over_ssh_via(
        &s,
        &rsh,
        &remote,
        &["push", "--ssh-tunnel", src.to_str().unwrap(), &dest],
    );
    ok(&out);
    assert_eq!(listing(&far.join("set")), listing(&src));
    let err = stderr(&out);
    assert!(!err.contains("did not come up"), "{err}");
    nothing_left_running(&far);
}

/// Kills (-9) the processes whose command line matches `pattern` once one
/// shows up; returns how many it killed.
fn kill9_when_seen(pattern: &str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let out = std::process::Command::new("pkill")
            .args(["-9", "-f", pattern])
            .status()
            .unwrap();
        if out.success() {
            return 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    0
}

#[test]
fn a_far_node_or_ssh_killed_mid_push_is_started_again_and_the_push_completes() {
    let srv = server();
    let s = Scratch::new();
    let src = s.path("src/big.bin");
    write_file(&src, 12 << 20, 6);
    for (victim, dir) in [("the far node", "far_node"), ("ssh", "ssh")] {
        let far = srv.root().join(dir);
        std::fs::create_dir_all(&far).unwrap();
        let pattern = match victim {
            "ssh" => format!("^ssh .*serve --ssh --root {}", far.display()),
            _ => format!("^{BIN} -q serve --ssh --root {}", far.display()),
        };
        let killer = std::thread::spawn(move || {
            // Let the first bytes land first.
            std::thread::sleep(Duration::from_millis(1500));
            kill9_when_seen(&pattern)
        });
        let dest = format!("{}/", at(&far));
        let out = over_ssh(
            &s,
            &srv,
            &[
                "push",
                "--max-rate",
                "3M",
                "--retry-base-ms",
                "200",
                src.to_str().unwrap(),
                &dest,
            ],
        );
        assert_eq!(killer.join().unwrap(), 1, "{victim} was never seen");
        ok(&out);
        assert_eq!(b3(&far.join("big.bin")), b3(&src), "after killing {victim}");
        // A killed node is started again; a killed ssh leaves its node to
        // finish the connections it has (or be started again after them).
        if victim == "the far node" {
            let err = stderr(&out);
            assert!(err.contains("starting the node again"), "{err}");
        }
        nothing_left_running(&far);
    }
}

#[test]
fn a_client_killed_mid_push_leaves_nothing_running_and_the_rerun_sends_only_the_rest() {
    let srv = server();
    let s = Scratch::new();
    let src = s.path("src/big.bin");
    let size = 12u64 << 20;
    write_file(&src, size, 13);
    let far = srv.root().join("client_killed");
    std::fs::create_dir_all(&far).unwrap();
    let dest = format!("{}/", at(&far));
    let mut c = haul(&s.path("config"));
    c.args([
        "-q",
        "push",
        "--max-rate",
        "3M",
        src.to_str().unwrap(),
        &dest,
    ])
    .args([
        "-e",
        &rsh(&srv, &srv.known_hosts_file()),
        "--remote-haul",
        BIN,
    ])
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    let mut client = c.spawn().unwrap();
    wait_for(Duration::from_secs(60), "a third of the file there", || {
        staged(&far, size / 3)
    });
    client.kill().unwrap(); // SIGKILL: no clean-up of its own
    client.wait().unwrap();
    // Its ssh saw the end of its input: the far node goes with the channel.
    nothing_left_running(&far);
    let out = over_ssh(&s, &srv, &["push", src.to_str().unwrap(), &dest]);
    ok(&out);
    assert_eq!(b3(&far.join("big.bin")), b3(&src));
    let sent = summary(&out)["bytes_transferred"].as_u64().unwrap();
    assert!(
        sent <= size - size / 3,
        "resumed, yet sent {sent} of {size} bytes"
    );
}

#[test]
fn a_forced_command_confines_the_key_to_its_directory_and_read_only_refuses_writes() {
    let srv = server();
    let s = Scratch::new();
    let src = s.path("src/set");
    write_file(&src.join("x.bin"), 70_000, 7);
    let incoming = srv.root().join("incoming");
    std::fs::create_dir_all(&incoming).unwrap();
    let elsewhere = srv.root().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let known = srv.known_hosts_file();
    let rw = srv
        .add_forced_key(
            "rw",
            &format!("{BIN} serve --ssh --restrict {}", incoming.display()),
        )
        .unwrap();
    let ro = srv
        .add_forced_key(
            "ro",
            &format!(
                "{BIN} serve --ssh --restrict {} --read-only",
                incoming.display()
            ),
        )
        .unwrap();
    let (rw, ro) = (rsh_with(&srv, &rw, &known), rsh_with(&srv, &ro, &known));
    // Inside DIR: the push lands (the client's --remote-haul is never run).
    let out = over_ssh_via(
        &s,
        &rw,
        "/nonexistent/haul",
        &[
            "push",
            src.to_str().unwrap(),
            &format!("{}/", at(&incoming)),
        ],
    );
    ok(&out);
    assert_eq!(listing(&incoming.join("set")), listing(&src));
    // Outside it: refused, nothing written.
    let out = over_ssh_via(
        &s,
        &rw,
        BIN,
        &[
            "push",
            src.to_str().unwrap(),
            &format!("{}/", at(&elsewhere)),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("outside"), "{}", said(&out));
    assert!(!elsewhere.join("set").exists());
    // Read-only: pulls and ls work, a push is refused.
    let back = s.path("back");
    let out = over_ssh_via(
        &s,
        &ro,
        BIN,
        &["pull", &at(&incoming.join("set")), back.to_str().unwrap()],
    );
    ok(&out);
    assert_eq!(listing(&back.join("set")), listing(&src));
    let out = over_ssh_via(
        &s,
        &ro,
        BIN,
        &[
            "push",
            src.to_str().unwrap(),
            &format!("{}/", at(&incoming.join("set"))),
        ],
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(said(&out).contains("read-only"), "{}", said(&out));
    assert!(!incoming.join("set/set").exists());
    // Any other command: refused with what was asked.
    let mut ssh = std::process::Command::new("sh");
    ssh.args([
        "-c",
        &format!("{ro} {}@127.0.0.1 cat /etc/passwd", TestServer::key_user()),
    ]);
    let out = run(ssh, T);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("haul transfers only"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());
    nothing_left_running(&incoming);
}

#[test]
fn no_haul_there_is_said_then_ssh_install_copies_this_build_once_and_reuses_it() {
    let cache = tempfile::tempdir().unwrap();
    // The sessions' PATH has no haul; the cache is this test's own.
    let srv = TestServer::start_with_env(&format!(
        "PATH=/usr/bin:/bin XDG_CACHE_HOME={}",
        cache.path().display()
    ))
    .expect("start sshd");
    let s = Scratch::new();
    let src = s.path("src/one.bin");
    write_file(&src, 200_000, 8);
    let far = srv.root().join("inst");
    std::fs::create_dir_all(&far).unwrap();
    let dest = format!("{}/", at(&far));
    let rsh = rsh(&srv, &srv.known_hosts_file());
    let push = |extra: &[&str]| {
        let mut c = haul(&s.path("config"));
        c.args(["-v", "push", src.to_str().unwrap(), &dest, "-e", &rsh])
            .args(extra);
        run(c, T)
    };
    let out = push(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    let err = stderr(&out);
    assert!(
        err.contains("no haul there") && err.contains("--ssh-install"),
        "{err}"
    );
    assert!(!far.join("one.bin").exists());
    // Copied, checked there, run.
    let out = push(&["--ssh-install"]);
    ok(&out);
    assert_eq!(b3(&far.join("one.bin")), b3(&src));
    assert!(
        stderr(&out).contains("copied this haul"),
        "{}",
        stderr(&out)
    );
    let bin = cache.path().join("haul/bin");
    let cached: Vec<_> = std::fs::read_dir(&bin).unwrap().flatten().collect();
    assert_eq!(cached.len(), 1, "one file, no temporary left: {cached:?}");
    assert_eq!(b3(&cached[0].path()), b3(Path::new(BIN)));
    let copied_at = cached[0].metadata().unwrap().modified().unwrap();
    // Again: the cached copy runs, nothing is copied.
    std::fs::remove_file(far.join("one.bin")).unwrap();
    let out = push(&["--ssh-install"]);
    ok(&out);
    assert_eq!(b3(&far.join("one.bin")), b3(&src));
    let err = stderr(&out);
    assert!(
        !err.contains("copied this haul") && err.contains("cached at"),
        "{err}"
    );
    let again = std::fs::read_dir(&bin).unwrap().flatten().next().unwrap();
    assert_eq!(again.metadata().unwrap().modified().unwrap(), copied_at);
    nothing_left_running(&far);
}

#[test]
fn a_fan_out_over_ssh_starts_every_node_and_names_a_host_it_cannot_reach() {
    let srv = server();
    let s = Scratch::new();
    let src = s.path("src/set");
    write_file(&src.join("big.bin"), 5 << 20, 9);
    write_file(&src.join("sub/small.txt"), 1000, 10);
    let fars: Vec<_> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| {
            let d = srv.root().join(n);
            std::fs::create_dir_all(&d).unwrap();
            d
        })
        .collect();
    // Three nodes over ssh, one per line in --to-file, and a host whose
    // sshd is not there at all.
    let list = s.path("hosts.txt");
    let mut text = String::from("# the far nodes\n");
    for d in &fars {
        text.push_str(&format!("{}/\n", at(d)));
    }
    text.push_str("ssh://root@127.0.0.1:1/nowhere/\n");
    std::fs::write(&list, text).unwrap();
    let out = over_ssh(
        &s,
        &srv,
        &[
            "push",
            src.to_str().unwrap(),
            "--to-file",
            list.to_str().unwrap(),
        ],
    );
    // One host missing: exit 1, named; the other three complete.
    assert_eq!(out.status.code(), Some(23), "{}", said(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("node_not_started") && stdout.contains("127.0.0.1:1/nowhere"),
        "{}",
        said(&out)
    );
    for d in &fars {
        assert_eq!(listing(&d.join("set")), listing(&src), "{}", d.display());
    }
    let fanout = fanout_summary(&out);
    let nodes = fanout["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    assert!(nodes.iter().all(|n| n["ok"] == true), "{fanout}");
    // Named as the user named them, relays too.
    for d in &fars {
        let name = format!("{}/", at(d));
        assert!(nodes.iter().any(|n| n["url"] == name.as_str()), "{fanout}");
    }
    assert!(
        nodes
            .iter()
            .any(|n| n["from"] == format!("{}/", at(&fars[0])).as_str()),
        "{fanout}"
    );
    // The chain relayed: the client sent one copy, not three.
    let sent = fanout["sent"]["bytes_transferred"].as_u64().unwrap();
    assert!(sent < 2 * (5 << 20), "the client sent {sent} bytes");
    for d in &fars {
        nothing_left_running(d);
    }
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn a_fan_out_feeds_a_walled_node_through_its_ssh_channel() {
    let srv = server();
    let s = Scratch::new();
    let src = s.path("src/set");
    write_file(&src.join("big.bin"), 4 << 20, 11);
    write_file(&src.join("sub/small.txt"), 700, 12);
    let fars: Vec<_> = ["n1", "walled", "n3"]
        .iter()
        .map(|n| {
            let d = srv.root().join(n);
            std::fs::create_dir_all(&d).unwrap();
            d
        })
        .collect();
    // What --delete removes there: the walled node's own push mirrors too.
    write_file(&fars[1].join("set/stale.txt"), 10, 13);
    // The middle node listens where its ssh connection "arrived": an
    // address the firewall drops. The others are reached at their ports.
    let _wall = Firewall::drop("ip daddr 127.0.0.7");
    let wrap = s.path("haul-wrap");
    std::fs::write(
        &wrap,
        format!(
            "#!/bin/sh\ncase \"$*\" in *walled*) export SSH_CONNECTION='127.0.0.1 1 127.0.0.7 22';; esac\nexec {BIN} \"$@\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrap, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let dests: Vec<String> = fars.iter().map(|d| format!("{}/", at(d))).collect();
    let mut args = vec!["push", "--delete", src.to_str().unwrap()];
    args.extend(dests.iter().map(String::as_str));
    let rsh = rsh(&srv, &srv.known_hosts_file());
    let out = over_ssh_via(&s, &rsh, wrap.to_str().unwrap(), &args);
    ok(&out);
    for d in &fars {
        assert_eq!(listing(&d.join("set")), listing(&src), "{}", d.display());
    }
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        all.contains("127.0.0.7")
            && all.contains("did not come up")
            && all.contains("fed through its ssh channel")
            && !all.contains("nothing deleted"),
        "{all}"
    );
    let fanout = fanout_summary(&out);
    let nodes = fanout["nodes"].as_array().unwrap();
    assert!(nodes.iter().all(|n| n["ok"] == true), "{fanout}");
    let walled = nodes
        .iter()
        .find(|n| n["url"] == dests[1].as_str())
        .expect("the walled node's report");
    assert_eq!(walled["from"], "client (ssh channel)", "{fanout}");
    assert_eq!(walled["deleted"], 1, "{fanout}");
    // The other two relayed: n3 from n1, never from the walled node.
    assert!(
        nodes.iter().all(|n| n["from"] != dests[1].as_str()),
        "{fanout}"
    );
    // The client sent one copy to the chain, and one through the channel
    // (in that node's report).
    let sent = fanout["sent"]["bytes_transferred"].as_u64().unwrap();
    assert!(sent < 2 * (4 << 20), "the client sent {sent} bytes");
    assert!(walled["bytes"].as_u64().unwrap() >= 4 << 20, "{fanout}");
    // Nothing moves on a second run, through the channel or the relays.
    let out = over_ssh_via(&s, &rsh, wrap.to_str().unwrap(), &args);
    ok(&out);
    let fanout = fanout_summary(&out);
    assert_eq!(fanout["sent"]["bytes_transferred"], 0, "{fanout}");
    for d in &fars {
        nothing_left_running(d);
    }
}
