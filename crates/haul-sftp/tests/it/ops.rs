//! stat / list / read / delete.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use haul_remote::collect::{list_all, read_all};
use haul_remote::{EntryKind, RemoteError};
use haul_sftp::testserver::{self, TestServer, PASSWORD_USER};

use crate::{key_session, p, pattern, remote, MAX_READ};

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs()
}

#[tokio::test]
async fn lists_nested_tree_with_spaces_unicode_and_empty_file() {
    let srv = TestServer::start().unwrap();
    let root = srv.root();
    let d = root.join("dir with space");
    std::fs::create_dir_all(d.join("süb dïr")).unwrap();
    std::fs::write(root.join("empty.bin"), b"").unwrap();
    std::fs::write(d.join("ünï cødé 文件.txt"), b"unicode!").unwrap();
    std::fs::write(d.join("süb dïr").join("deep.txt"), b"deep").unwrap();
    std::os::unix::fs::symlink("empty.bin", root.join("link")).unwrap();

    let mut s = key_session(&srv).await;
    let top = list_all(s.as_mut(), &p(&root)).await.unwrap();
    let names: Vec<(&str, EntryKind, Option<u64>)> = top
        .iter()
        .map(|e| (e.name.as_str(), e.kind, e.size))
        .collect();
    assert_eq!(
        names,
        vec![
            ("dir with space", EntryKind::Dir, None),
            ("empty.bin", EntryKind::File, Some(0)),
            ("link", EntryKind::Other, None),
        ]
    );
    let local_mtime = std::fs::metadata(root.join("empty.bin"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(secs(top[1].mtime.unwrap()), secs(local_mtime));

    let mid = list_all(s.as_mut(), &p(&d)).await.unwrap();
    let names: Vec<(&str, EntryKind)> = mid.iter().map(|e| (e.name.as_str(), e.kind)).collect();
    assert_eq!(
        names,
        vec![
            ("süb dïr", EntryKind::Dir),
            ("ünï cødé 文件.txt", EntryKind::File)
        ]
    );
    let deep = list_all(s.as_mut(), &p(&d.join("süb dïr"))).await.unwrap();
    assert_eq!(deep.len(), 1);
    assert_eq!((deep[0].name.as_str(), deep[0].size), ("deep.txt", Some(4)));

    // stat follows symlinks; names are the last component.
    let st = s.stat(&p(&root.join("link"))).await.unwrap();
    assert_eq!(
        (st.name.as_str(), st.kind, st.size),
        ("link", EntryKind::File, Some(0))
    );
    let st = s.stat(&p(&d)).await.unwrap();
    assert_eq!(
        (st.name.as_str(), st.kind),
        ("dir with space", EntryKind::Dir)
    );
    let f = d.join("ünï cødé 文件.txt");
    let st = s.stat(&p(&f)).await.unwrap();
    assert_eq!(
        read_all(s.as_mut(), &p(&f), 0, None, &st, MAX_READ)
            .await
            .unwrap(),
        b"unicode!"
    );
    let empty = s.stat(&p(&root.join("empty.bin"))).await.unwrap();
    assert!(read_all(
        s.as_mut(),
        &p(&root.join("empty.bin")),
        0,
        None,
        &empty,
        MAX_READ
    )
    .await
    .unwrap()
    .is_empty());
}

#[tokio::test]
async fn big_directory_streams_in_batches_and_stops_when_receiver_goes() {
    let srv = TestServer::start().unwrap();
    let d = srv.root().join("many");
    std::fs::create_dir(&d).unwrap();
    for i in 0..750 {
        std::fs::write(d.join(format!("f{i:04}")), b"x").unwrap();
    }
    let mut s = key_session(&srv).await;
    let all = list_all(s.as_mut(), &p(&d)).await.unwrap();
    assert_eq!(all.len(), 750);
    assert_eq!(all[749].name, "f0749");

    // A receiver that leaves after 3 entries: list returns Ok, session usable.
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    let taker = tokio::spawn(async move {
        for _ in 0..3 {
            rx.recv().await.unwrap();
        }
    });
    let r = tokio::time::timeout(Duration::from_secs(10), s.list(&p(&d), &tx))
        .await
        .unwrap();
    taker.await.unwrap();
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(s.stat(&p(&d)).await.unwrap().kind, EntryKind::Dir);
}

#[tokio::test]
async fn ranged_reads() {
    let srv = TestServer::start().unwrap();
    let data = pattern(5 * 1024 * 1024 + 123);
    let f = srv.root().join("big.bin");
    std::fs::write(&f, &data).unwrap();
    let mut s = key_session(&srv).await;
    let e = s.stat(&p(&f)).await.unwrap();
    let got = read_all(s.as_mut(), &p(&f), 300_001, Some(1_500_000), &e, MAX_READ)
        .await
        .unwrap();
    assert!(got == data[300_001..1_800_001], "middle range");
    let got = read_all(s.as_mut(), &p(&f), 4_000_000, None, &e, MAX_READ)
        .await
        .unwrap();
    assert!(got == data[4_000_000..], "to the end");
    assert!(read_all(s.as_mut(), &p(&f), 10, Some(0), &e, MAX_READ)
        .await
        .unwrap()
        .is_empty());
    let got = read_all(s.as_mut(), &p(&f), 0, None, &e, MAX_READ)
        .await
        .unwrap();
    assert!(got == data, "whole file");
    // Past the end: the file is not what the caller thinks.
    let err = read_all(
        s.as_mut(),
        &p(&f),
        data.len() as u64 - 5,
        Some(10),
        &e,
        MAX_READ,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, RemoteError::Changed(_)), "{err:?}");
    let err = read_all(
        s.as_mut(),
        &p(&f),
        data.len() as u64 + 1,
        None,
        &e,
        MAX_READ,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, RemoteError::Changed(_)), "{err:?}");
    assert!(
        read_all(s.as_mut(), &p(&f), data.len() as u64, None, &e, MAX_READ)
            .await
            .unwrap()
            .is_empty()
    );
    // A sink error stops the read and comes back as is.
    let mut n = 0;
    let mut sink = |b: &[u8]| {
        n += b.len();
        Err(RemoteError::Local("disk full".into()))
    };
    let err = s.read(&p(&f), 0, None, &e, &mut sink).await.unwrap_err();
    assert!(
        matches!(err, RemoteError::Local(ref m) if m == "disk full"),
        "{err:?}"
    );
    assert!(n > 0 && n <= 256 * 1024);
    // The session is still fine after an aborted pipelined read.
    let got = read_all(s.as_mut(), &p(&f), 7, Some(9), &e, MAX_READ)
        .await
        .unwrap();
    assert_eq!(got, &data[7..16]);
}

#[tokio::test]
async fn read_of_a_changed_file_is_changed() {
    let srv = TestServer::start().unwrap();
    let f = srv.root().join("c.txt");
    std::fs::write(&f, b"version one").unwrap();
    let mut s = key_session(&srv).await;
    let e = s.stat(&p(&f)).await.unwrap();
    // Grows.
    std::fs::write(&f, b"version one, longer").unwrap();
    let err = read_all(s.as_mut(), &p(&f), 0, None, &e, MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::Changed(_)), "{err:?}");
    assert!(err.is_retryable());
    // Same size, other mtime.
    std::fs::write(&f, b"version two").unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
    file.set_modified(e.mtime.unwrap() + Duration::from_secs(100))
        .unwrap();
    drop(file);
    let err = read_all(s.as_mut(), &p(&f), 0, None, &e, MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::Changed(_)), "{err:?}");
    // Unknown expectations: reads whatever is there.
    let loose = haul_remote::RemoteEntry::file("c.txt", None);
    assert_eq!(
        read_all(s.as_mut(), &p(&f), 0, None, &loose, MAX_READ)
            .await
            .unwrap(),
        b"version two"
    );
}

#[tokio::test]
async fn missing_paths_are_not_found() {
    let srv = TestServer::start().unwrap();
    let mut s = key_session(&srv).await;
    let missing = p(&srv.root().join("nope/nothing.txt"));
    let e = haul_remote::RemoteEntry::file("nothing.txt", Some(3));
    for err in [
        s.stat(&missing).await.unwrap_err(),
        list_all(s.as_mut(), &missing).await.unwrap_err(),
        read_all(s.as_mut(), &missing, 0, None, &e, MAX_READ)
            .await
            .unwrap_err(),
        s.delete(&missing).await.unwrap_err(),
    ] {
        assert!(matches!(err, RemoteError::NotFound(_)), "{err:?}");
        assert!(err.to_string().contains("nothing.txt"), "{err}");
        assert!(!err.is_retryable());
    }
}

#[tokio::test]
async fn unreadable_file_is_permission_denied() {
    testserver::ensure_password_user().unwrap();
    let srv = TestServer::start().unwrap();
    let f = srv.root().join("secret.bin");
    std::fs::write(&f, b"top secret").unwrap();
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    let r = remote(&srv, PASSWORD_USER, &srv.password_options());
    let mut s = r
        .connect()
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", srv.log()));
    let e = s.stat(&p(&f)).await.unwrap();
    assert_eq!(e.size, Some(10));
    let err = read_all(s.as_mut(), &p(&f), 0, None, &e, MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::PermissionDenied(_)), "{err:?}");
    let err = s.delete(&p(&f)).await.unwrap_err();
    assert!(matches!(err, RemoteError::PermissionDenied(_)), "{err:?}");
    assert!(f.exists());
}

#[tokio::test]
async fn delete_removes_the_file() {
    let srv = TestServer::start().unwrap();
    let f = srv.root().join("gone soon.txt");
    std::fs::write(&f, b"bye").unwrap();
    let mut s = key_session(&srv).await;
    s.delete(&p(&f)).await.unwrap();
    assert!(!f.exists());
    assert!(matches!(
        s.stat(&p(&f)).await,
        Err(RemoteError::NotFound(_))
    ));
}

/// Throughput on loopback: `cargo test -p haul-sftp --features test-server
/// -- --ignored throughput --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: writes and reads a 200 MiB file"]
async fn throughput_200_mib() {
    let srv = TestServer::start().unwrap();
    let f = srv.root().join("big.bin");
    let size = 200 * 1024 * 1024;
    let mib = pattern(1024 * 1024);
    std::fs::write(&f, mib.repeat(200)).unwrap();
    let mut s = key_session(&srv).await;
    let e = s.stat(&p(&f)).await.unwrap();
    let mut n = 0u64;
    let mut sink = |b: &[u8]| {
        n += b.len() as u64;
        Ok(())
    };
    let t = Instant::now();
    let got = s.read(&p(&f), 0, None, &e, &mut sink).await.unwrap();
    let dt = t.elapsed().as_secs_f64();
    assert_eq!(got, size as u64);
    println!(
        "haul-sftp: read 200 MiB in {dt:.2} s: {:.0} MB/s",
        size as f64 / dt / 1e6
    );
    // Baseline: OpenSSH's own sftp client on the same file.
    let t = Instant::now();
    let mut child = std::process::Command::new("sftp")
        .args(["-q", "-b", "-", "-i"])
        .arg(srv.client_key())
        .arg("-o")
        .arg(format!(
            "UserKnownHostsFile={}",
            srv.known_hosts_file().display()
        ))
        .args(["-P", &srv.port().to_string()])
        .arg(format!("{}@127.0.0.1", TestServer::key_user()))
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "get {} /dev/null", p(&f)).unwrap();
    drop(stdin);
    assert!(child.wait().unwrap().success());
    let dt = t.elapsed().as_secs_f64();
    println!(
        "OpenSSH sftp: read 200 MiB in {dt:.2} s: {:.0} MB/s",
        size as f64 / dt / 1e6
    );
}
