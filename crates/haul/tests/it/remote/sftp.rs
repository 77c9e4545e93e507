//! SFTP sources (OpenSSH sshd).

use std::time::Duration;

use haul_sftp::testserver::{TestServer, PASSWORD, PASSWORD_USER};

use super::{all_output, assert_same_tree, fixture_tree, pull, FIXTURE_FILES};
use crate::harness::{haul, run, summary, Scratch};

fn server() -> TestServer {
    TestServer::start().expect("start sshd (apt-get install openssh-server; needs root)")
}

#[test]
fn sftp_key_login_tree() {
    let srv = server();
    let tree = srv.root().join("tree");
    fixture_tree(&tree);
    let s = Scratch::new();
    let key = srv.client_key();
    let kh = srv.known_hosts_file();
    let url = srv.url(&TestServer::key_user(), &format!("{}/", tree.display()));
    let out = pull(
        &s.path("cfg"),
        &[
            &url,
            s.path("dst").to_str().unwrap(),
            "--ssh-key",
            key.to_str().unwrap(),
            "--ssh-known-hosts",
            kh.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}\n{}", all_output(&out), srv.log());
    assert_same_tree(&tree, &s.path("dst"), &out);
    assert_eq!(summary(&out)["files_ok"], FIXTURE_FILES as u64);
}

#[test]
fn sftp_password_login_and_host_keys() {
    let srv = server();
    haul_sftp::testserver::ensure_password_user().unwrap();
    let tree = srv.root().join("pw");
    crate::harness::write_file(&tree.join("f.bin"), 6 << 20, 3);
    let s = Scratch::new();
    let url = srv.url(PASSWORD_USER, &format!("{}/", tree.display()));
    // An unknown host key is refused with a clear message and exit 1.
    let empty_kh = s.path("known_hosts");
    std::fs::write(&empty_kh, "").unwrap();
    let args = |dst: &str| -> Vec<String> {
        vec![
            "--json".into(),
            "pull".into(),
            url.clone(),
            s.path(dst).to_str().unwrap().into(),
            "--ssh-known-hosts".into(),
            empty_kh.to_str().unwrap().into(),
        ]
    };
    let mut cmd = haul(&s.path("cfg"));
    cmd.env("HAUL_PASSWORD", PASSWORD).args(args("d1"));
    let out = run(cmd, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("--accept-new-host-key"),
        "{}",
        all_output(&out)
    );
    assert!(!s.path("d1/f.bin").exists());
    // Accepted explicitly: recorded, and the password login works.
    let mut cmd = haul(&s.path("cfg"));
    cmd.env("HAUL_PASSWORD", PASSWORD)
        .args(args("d2"))
        .arg("--accept-new-host-key");
    let out = run(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}\n{}", all_output(&out), srv.log());
    assert_same_tree(&tree, &s.path("d2"), &out);
    assert!(std::fs::read_to_string(&empty_kh)
        .unwrap()
        .contains("127.0.0.1"));
    // Wrong password: refused, never printed.
    let mut cmd = haul(&s.path("cfg"));
    cmd.env("HAUL_PASSWORD", "Wrong-Pass-55").args(args("d3"));
    let out = run(cmd, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("authentication failed"),
        "{}",
        all_output(&out)
    );
    assert!(!all_output(&out).contains("Wrong-Pass-55"));
}
