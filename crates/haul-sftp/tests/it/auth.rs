//! Authentication and host-key checking.

use std::time::Duration;

use haul_remote::collect::{list_all, read_all};
use haul_remote::{RemoteError, RemoteOptions, RemoteUrl, Secret};
use haul_sftp::testserver::{self, TestServer, PASSWORD, PASSWORD_USER};

use crate::{key_session, p, remote, MAX_READ};

#[tokio::test]
async fn password_auth_reads_a_file() {
    testserver::ensure_password_user().unwrap();
    let srv = TestServer::start().unwrap();
    let data = crate::pattern(3 * 1024 * 1024 + 17);
    std::fs::write(srv.root().join("pw.bin"), &data).unwrap();
    let r = remote(&srv, PASSWORD_USER, &srv.password_options());
    let mut s = r
        .connect()
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", srv.log()));
    let path = p(&srv.root().join("pw.bin"));
    let e = s.stat(&path).await.unwrap();
    assert_eq!(e.size, Some(data.len() as u64));
    assert!(
        read_all(s.as_mut(), &path, 0, None, &e, MAX_READ)
            .await
            .unwrap()
            == data
    );

    // Password in the URL, no options password; Display hides it.
    let url = RemoteUrl::parse(&format!(
        "sftp://{PASSWORD_USER}:{PASSWORD}@127.0.0.1:{}/",
        srv.port()
    ))
    .unwrap();
    let opts = RemoteOptions {
        known_hosts: Some(srv.known_hosts_file()),
        timeout: Duration::from_secs(10),
        ..Default::default()
    };
    let r = haul_sftp::open(&url, &opts).unwrap();
    assert!(!r.display().contains(PASSWORD));
    let mut s = r.connect().await.unwrap();
    assert_eq!(s.stat(&path).await.unwrap().size, Some(data.len() as u64));
}

#[tokio::test]
async fn wrong_password_is_auth_error_without_the_password() {
    testserver::ensure_password_user().unwrap();
    let srv = TestServer::start().unwrap();
    let mut opts = srv.password_options();
    opts.password = Some(Secret::new("not-the-pw-42"));
    // A key that is not authorized must be tried first and listed too.
    let other = tempfile::tempdir().unwrap();
    let key = other.path().join("k");
    std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&key)
        .status()
        .unwrap();
    opts.ssh_keys = vec![key];
    let err = remote(&srv, PASSWORD_USER, &opts)
        .connect()
        .await
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(matches!(err, RemoteError::Auth(_)), "{err:?}");
    assert!(!err.is_retryable());
    assert!(msg.contains("password") && msg.contains("key "), "{msg}");
    assert!(!msg.contains("not-the-pw-42"), "{msg}");
    assert!(!format!("{err:?} {opts:?}").contains("not-the-pw-42"));
}

#[tokio::test]
async fn rsa_key_auth() {
    let srv = TestServer::start().unwrap();
    let mut opts = srv.key_options();
    opts.ssh_keys = vec![srv.add_rsa_client_key().unwrap()];
    let mut s = remote(&srv, &TestServer::key_user(), &opts)
        .connect()
        .await
        .unwrap();
    assert_eq!(
        s.stat(&p(&srv.root())).await.unwrap().kind,
        haul_remote::EntryKind::Dir
    );
}

#[tokio::test]
async fn passphrase_key_is_skipped_with_a_note() {
    let srv = TestServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("locked");
    std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "secret-phrase", "-f"])
        .arg(&key)
        .status()
        .unwrap();
    let mut opts = srv.key_options();
    opts.ssh_keys = vec![key];
    let err = remote(&srv, &TestServer::key_user(), &opts)
        .connect()
        .await
        .err()
        .unwrap();
    assert!(matches!(err, RemoteError::Auth(_)), "{err:?}");
    assert!(err.to_string().contains("passphrase-protected"), "{err}");
}

#[tokio::test]
async fn unknown_host_key_refused_then_accepted_and_recorded() {
    let srv = TestServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kh = dir.path().join("ssh/known_hosts");
    let mut opts = srv.key_options();
    opts.known_hosts = Some(kh.clone());
    let user = TestServer::key_user();

    let err = remote(&srv, &user, &opts).connect().await.err().unwrap();
    let msg = err.to_string();
    assert!(matches!(err, RemoteError::HostKey(_)), "{err:?}");
    assert!(msg.contains("unknown host key SHA256:"), "{msg}");
    assert!(
        msg.contains(&format!("[127.0.0.1]:{}", srv.port())),
        "{msg}"
    );
    assert!(msg.contains("--accept-new-host-key"), "{msg}");
    assert!(!kh.exists());

    opts.accept_new_host_key = true;
    let mut s = remote(&srv, &user, &opts).connect().await.unwrap();
    s.stat(&p(&srv.root())).await.unwrap();
    let recorded = std::fs::read_to_string(&kh).unwrap();
    assert_eq!(recorded.trim(), srv.known_hosts_line());

    opts.accept_new_host_key = false;
    let mut s = remote(&srv, &user, &opts).connect().await.unwrap();
    s.stat(&p(&srv.root())).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(&kh).unwrap(),
        recorded,
        "recorded once"
    );
}

#[tokio::test]
async fn changed_host_key_is_refused_even_with_accept_new() {
    let srv = TestServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kh = dir.path().join("known_hosts");
    // Another ed25519 key (the client's) recorded for this host:port.
    let other = std::fs::read_to_string(srv.client_key().with_extension("pub")).unwrap();
    let other: Vec<&str> = other.split_whitespace().take(2).collect();
    let content = format!(
        "# comment\n[127.0.0.1]:{} {}\n",
        srv.port(),
        other.join(" ")
    );
    std::fs::write(&kh, &content).unwrap();
    let mut opts = srv.key_options();
    opts.known_hosts = Some(kh.clone());
    opts.accept_new_host_key = true;
    let err = remote(&srv, &TestServer::key_user(), &opts)
        .connect()
        .await
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(matches!(err, RemoteError::HostKey(_)), "{err:?}");
    assert!(msg.contains("man-in-the-middle"), "{msg}");
    assert!(
        msg.contains("line 2") && msg.contains(&kh.display().to_string()),
        "{msg}"
    );
    assert_eq!(
        std::fs::read_to_string(&kh).unwrap(),
        content,
        "file untouched"
    );
}

#[tokio::test]
async fn hashed_known_hosts_entry_is_accepted() {
    let srv = TestServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kh = dir.path().join("known_hosts");
    std::fs::write(&kh, format!("{}\n", srv.known_hosts_line())).unwrap();
    let st = std::process::Command::new("ssh-keygen")
        .args(["-q", "-H", "-f"])
        .arg(&kh)
        .output()
        .unwrap();
    assert!(st.status.success());
    assert!(std::fs::read_to_string(&kh).unwrap().starts_with("|1|"));
    let mut opts = srv.key_options();
    opts.known_hosts = Some(kh);
    let mut s = remote(&srv, &TestServer::key_user(), &opts)
        .connect()
        .await
        .unwrap();
    assert!(list_all(s.as_mut(), &p(&srv.root()))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn silent_server_times_out() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hold = tokio::spawn(async move {
        let (sock, _) = listener.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(sock);
    });
    let url = RemoteUrl::parse(&format!("sftp://u:pw@127.0.0.1:{port}/")).unwrap();
    let opts = RemoteOptions {
        timeout: Duration::from_millis(500),
        ..Default::default()
    };
    let err = haul_sftp::open(&url, &opts)
        .unwrap()
        .connect()
        .await
        .err()
        .unwrap();
    assert!(matches!(err, RemoteError::Timeout(_)), "{err:?}");
    hold.abort();
}

#[tokio::test]
async fn session_survives_many_ops_on_one_connection() {
    let srv = TestServer::start().unwrap();
    std::fs::write(srv.root().join("a"), b"alpha").unwrap();
    let mut s = key_session(&srv).await;
    let path = p(&srv.root().join("a"));
    for _ in 0..5 {
        let e = s.stat(&path).await.unwrap();
        assert_eq!(
            read_all(s.as_mut(), &path, 1, Some(3), &e, MAX_READ)
                .await
                .unwrap(),
            b"lph"
        );
        assert_eq!(
            list_all(s.as_mut(), &p(&srv.root())).await.unwrap().len(),
            1
        );
    }
    assert!(matches!(
        s.stat(&format!("{path}x")).await,
        Err(RemoteError::NotFound(_))
    ));
    // Still usable after a NotFound (the driver may reuse a session that
    // answered an error cleanly).
    s.delete(&path).await.unwrap();
    let accepted = srv.log().matches("Accepted publickey").count();
    assert_eq!(accepted, 1, "one login for all operations:\n{}", srv.log());
    // Dropping the session closes the SSH connection (no leaked connections).
    drop(s);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !srv.log().contains("Disconnected from") && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(srv.log().contains("Disconnected from"), "{}", srv.log());
}

#[tokio::test]
async fn restart_breaks_sessions_and_new_ones_connect() {
    let mut srv = TestServer::start().unwrap();
    std::fs::write(srv.root().join("a"), b"alpha").unwrap();
    let path = p(&srv.root().join("a"));
    let mut s = key_session(&srv).await;
    s.stat(&path).await.unwrap();
    srv.stop();
    let err = s.stat(&path).await.err().unwrap();
    assert!(err.is_retryable(), "{err:?}");
    srv.start_again().unwrap();
    let mut s = key_session(&srv).await;
    assert_eq!(s.stat(&path).await.unwrap().size, Some(5));
}

/// The agent is found through `$SSH_AUTH_SOCK`; the environment is
/// process-wide, so the login runs in a child test process.
#[tokio::test]
async fn agent_auth() {
    use std::process::{Command, Stdio};
    let srv = TestServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("agent.sock");
    let mut agent = Command::new("ssh-agent")
        .arg("-D")
        .arg("-a")
        .arg(&sock)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !sock.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let added = Command::new("ssh-add")
        .arg(srv.client_key())
        .env("SSH_AUTH_SOCK", &sock)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(added.success());
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "auth::agent_auth_child",
            "--nocapture",
        ])
        .env("SSH_AUTH_SOCK", &sock)
        .env("HAUL_SFTP_AGENT_PORT", srv.port().to_string())
        .env("HAUL_SFTP_AGENT_KNOWN_HOSTS", srv.known_hosts_file())
        .env("HAUL_SFTP_AGENT_ROOT", srv.root())
        .output()
        .unwrap();
    let _ = agent.kill();
    let _ = agent.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
#[ignore = "run by agent_auth with SSH_AUTH_SOCK set"]
async fn agent_auth_child() {
    let Ok(port) = std::env::var("HAUL_SFTP_AGENT_PORT") else {
        return;
    };
    let url = RemoteUrl::parse(&format!(
        "sftp://{}@127.0.0.1:{port}/",
        TestServer::key_user()
    ))
    .unwrap();
    let opts = RemoteOptions {
        timeout: Duration::from_secs(10),
        known_hosts: std::env::var_os("HAUL_SFTP_AGENT_KNOWN_HOSTS").map(Into::into),
        ..Default::default()
    };
    let root = std::env::var("HAUL_SFTP_AGENT_ROOT").unwrap();
    let mut s = haul_sftp::open(&url, &opts)
        .unwrap()
        .connect()
        .await
        .unwrap();
    assert_eq!(
        s.stat(&root).await.unwrap().kind,
        haul_remote::EntryKind::Dir
    );
}
