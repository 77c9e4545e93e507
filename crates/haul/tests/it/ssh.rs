//! `host:path` over ssh with nothing running on the far side: a real OpenSSH
//! `sshd` on 127.0.0.1 (needs root), the system `ssh` as the user has it
//! (here with `-e` naming the test's key and known_hosts), and this build
//! of haul started there as `haul serve --stdio` (`--remote-haul`).

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
fn rsh(srv: &TestServer, known_hosts: &Path) -> String {
    format!(
        "ssh -i {} -o UserKnownHostsFile={} -o StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=10 -p {}",
        srv.client_key().display(),
        known_hosts.display(),
        srv.port()
    )
}

fn at(path: &Path) -> String {
    format!("{}@127.0.0.1:{}", TestServer::key_user(), path.display())
}

/// `haul ARGS… -e RSH --remote-haul BIN`, as JSON.
fn over_ssh(s: &Scratch, srv: &TestServer, args: &[&str]) -> Output {
    let mut c = haul(&s.path("config"));
    c.arg("--json")
        .args(args)
        .args(["-e", &rsh(srv, &srv.known_hosts_file())])
        .args(["--remote-haul", BIN]);
    run(c, T)
}

/// No `haul serve --stdio` for `root` left on the far side (waits a little:
/// sshd reaps its session after the client went).
fn nothing_left_running(root: &Path) {
    let pattern = format!("serve --stdio --root {}", root.display());
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
    // Nothing was delivered by either.
    assert!(!srv.root().join("one.txt").exists());
}
