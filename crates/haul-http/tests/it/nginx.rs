//! Against a real nginx.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, UNIX_EPOCH};

use haul_http::testserver::{TestServer, PASSWORD, USER};
use haul_remote::collect::{list_all, read_all, read_described_all};
use haul_remote::{join, Checksum, EntryKind, RemoteError, Secret};

use crate::{any, opts, session, MAX_READ};

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

fn server() -> TestServer {
    TestServer::start().expect("start nginx")
}

#[tokio::test]
async fn crawls_nested_tree() {
    let srv = server();
    let t = srv.root().join("tree");
    std::fs::create_dir_all(t.join("a b/deep ünï")).unwrap();
    std::fs::create_dir_all(t.join("empty dir")).unwrap();
    std::fs::write(t.join("top.txt"), b"top").unwrap();
    std::fs::write(t.join("a b/ünï ©.txt"), b"unicode!").unwrap();
    std::fs::write(t.join("a b/deep ünï/zero"), b"").unwrap();
    std::fs::write(t.join("a b/x&y #1?.bin"), data(1000)).unwrap();
    let mut s = session(&srv.http_url("/tree/"), &opts()).await;
    let mut found = BTreeSet::new();
    let mut todo = vec!["/tree/".to_string()];
    while let Some(dir) = todo.pop() {
        for e in list_all(s.as_mut(), &dir).await.unwrap() {
            assert!(!e.name.contains('/') && e.name != ".." && e.name != ".");
            let p = join(&dir, &e.name);
            if e.kind == EntryKind::Dir {
                todo.push(format!("{p}/"));
            }
            found.insert((p, format!("{:?}", e.kind), e.size));
        }
    }
    let want: BTreeSet<_> = [
        ("/tree/top.txt", EntryKind::File, Some(3)),
        ("/tree/a b", EntryKind::Dir, None),
        ("/tree/empty dir", EntryKind::Dir, None),
        ("/tree/a b/ünï ©.txt", EntryKind::File, Some(8)),
        ("/tree/a b/x&y #1?.bin", EntryKind::File, Some(1000)),
        ("/tree/a b/deep ünï", EntryKind::Dir, None),
        ("/tree/a b/deep ünï/zero", EntryKind::File, Some(0)),
    ]
    .into_iter()
    .map(|(p, k, s)| (p.to_string(), format!("{k:?}"), s))
    .collect();
    assert_eq!(found, want);
    // Reading the odd names back works too.
    let got = read_all(
        s.as_mut(),
        "/tree/a b/x&y #1?.bin",
        0,
        None,
        &any("x"),
        MAX_READ,
    )
    .await
    .unwrap();
    assert_eq!(got, data(1000));
    let zero = s.stat("/tree/a b/deep ünï/zero").await.unwrap();
    assert_eq!(zero.size, Some(0));
    assert_eq!(
        read_all(
            s.as_mut(),
            "/tree/a b/deep ünï/zero",
            0,
            None,
            &zero,
            MAX_READ
        )
        .await
        .unwrap(),
        b""
    );
}

#[tokio::test]
async fn stats_files_and_dirs() {
    let srv = server();
    std::fs::create_dir(srv.root().join("d")).unwrap();
    let f = srv.root().join("d/file.bin");
    std::fs::write(&f, data(4321)).unwrap();
    let mtime = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    std::fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let mut s = session(&srv.http_url("/"), &opts()).await;
    let e = s.stat("/d/file.bin").await.unwrap();
    assert_eq!(
        (e.name.as_str(), e.kind, e.size),
        ("file.bin", EntryKind::File, Some(4321))
    );
    assert_eq!(e.mtime, Some(mtime));
    let tag = e.version.unwrap();
    assert!(
        tag.starts_with('"') && tag.ends_with('"') && tag.len() > 2,
        "{tag}"
    );
    // Directory with and without the slash (nginx redirects the latter), and the root.
    for p in ["/d/", "/d", "/"] {
        assert_eq!(s.stat(p).await.unwrap().kind, EntryKind::Dir, "{p}");
    }
    // Checksum headers.
    let c = s.stat("/checksums/hello.txt").await.unwrap();
    assert!(c
        .checksums
        .contains(&Checksum::from_hex("md5", "b1946ac92492d2347c6235b4d2611184").unwrap()));
    let sha = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";
    assert!(
        c.checksums
            .contains(&Checksum::from_hex("sha256", sha).unwrap()),
        "{:?}",
        c.checksums
    );
}

#[tokio::test]
async fn ranged_reads() {
    let srv = server();
    let body = data(200_000);
    std::fs::write(srv.root().join("big.bin"), &body).unwrap();
    let mut s = session(&srv.http_url("/"), &opts()).await;
    let e = s.stat("/big.bin").await.unwrap();
    let got = read_all(s.as_mut(), "/big.bin", 1000, Some(5000), &e, MAX_READ)
        .await
        .unwrap();
    assert_eq!(got, &body[1000..6000]);
    let got = read_all(s.as_mut(), "/big.bin", 150_000, None, &e, MAX_READ)
        .await
        .unwrap();
    assert_eq!(got, &body[150_000..]);
    let got = read_all(s.as_mut(), "/big.bin", 0, None, &e, MAX_READ)
        .await
        .unwrap();
    assert_eq!(got, body);
    let got = read_all(s.as_mut(), "/big.bin", 0, Some(1), &e, MAX_READ)
        .await
        .unwrap();
    assert_eq!(got, &body[..1]);
    // At the very end: nothing left (416 from the server) is a 0-byte read.
    assert_eq!(
        read_all(s.as_mut(), "/big.bin", 200_000, None, &e, MAX_READ)
            .await
            .unwrap(),
        b""
    );
    // A sink error stops the read and is returned.
    let mut sink = |_: &[u8]| Err(RemoteError::Local("disk full".into()));
    let err = s
        .read("/big.bin", 0, None, &e, &mut sink)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::Local(_)), "{err:?}");
}

#[tokio::test]
async fn rewritten_file_is_changed() {
    let srv = server();
    let f = srv.root().join("v.bin");
    std::fs::write(&f, data(10_000)).unwrap();
    let mut s = session(&srv.http_url("/"), &opts()).await;
    let old = s.stat("/v.bin").await.unwrap();
    // Same size, new content and mtime: only the ETag / Last-Modified tell.
    std::fs::write(&f, vec![1u8; 10_000]).unwrap();
    let later = old.mtime.unwrap() + Duration::from_secs(10);
    std::fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(later)
        .unwrap();
    for (off, len) in [(5000, None), (100, Some(100)), (0, None)] {
        let err = read_all(s.as_mut(), "/v.bin", off, len, &old, MAX_READ)
            .await
            .unwrap_err();
        assert!(
            matches!(err, RemoteError::Changed(_)),
            "{off} {len:?}: {err:?}"
        );
        assert!(err.is_retryable());
    }
    // A listed entry (size only) that no longer matches.
    let listed = haul_remote::RemoteEntry::file("v.bin", Some(9_999));
    let err = read_all(s.as_mut(), "/v.bin", 10, Some(10), &listed, MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::Changed(_)), "{err:?}");
    // The new version reads fine.
    let new = s.stat("/v.bin").await.unwrap();
    assert_ne!(new.version, old.version);
    assert_eq!(
        read_all(s.as_mut(), "/v.bin", 9_990, None, &new, MAX_READ)
            .await
            .unwrap(),
        vec![1u8; 10]
    );
}

#[tokio::test]
async fn not_found() {
    let srv = server();
    let mut s = session(&srv.http_url("/"), &opts()).await;
    let e = s.stat("/nope.txt").await.unwrap_err();
    assert!(matches!(e, RemoteError::NotFound(_)), "{e:?}");
    let e = read_all(s.as_mut(), "/nope.txt", 0, None, &any("nope.txt"), MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(e, RemoteError::NotFound(_)), "{e:?}");
    let e = list_all(s.as_mut(), "/nodir/").await.unwrap_err();
    assert!(matches!(e, RemoteError::NotFound(_)), "{e:?}");
    assert!(!e.is_retryable());
}

#[tokio::test]
async fn basic_auth() {
    let srv = server();
    std::fs::write(srv.root().join("private/secret.txt"), b"s3cret data").unwrap();
    let mut o = opts();
    o.user = Some(USER.into());
    o.password = Some(Secret::new(PASSWORD));
    let mut s = session(&srv.http_url("/private/"), &o).await;
    let e = s.stat("/private/secret.txt").await.unwrap();
    assert_eq!(
        read_all(s.as_mut(), "/private/secret.txt", 0, None, &e, MAX_READ)
            .await
            .unwrap(),
        b"s3cret data"
    );
    let names: Vec<_> = list_all(s.as_mut(), "/private/")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["secret.txt"]);
    // Credentials in the URL work the same.
    let url = format!(
        "http://{USER}:{PASSWORD}@127.0.0.1:{}/private/",
        srv.http_port()
    );
    let mut s = session(&url, &opts()).await;
    s.stat("/private/secret.txt").await.unwrap();
    // Wrong password, and none at all.
    o.password = Some(Secret::new("wrong-pw-9"));
    let mut s = session(&srv.http_url("/private/"), &o).await;
    let e = s.stat("/private/secret.txt").await.unwrap_err();
    assert!(matches!(e, RemoteError::Auth(_)), "{e:?}");
    assert!(!format!("{e} {e:?}").contains("wrong-pw-9"));
    let mut s = session(&srv.http_url("/private/"), &opts()).await;
    let e = read_all(
        s.as_mut(),
        "/private/secret.txt",
        0,
        None,
        &any("s"),
        MAX_READ,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, RemoteError::Auth(_)), "{e:?}");
    assert!(!e.is_retryable());
    let r = crate::remote(&url, &opts());
    assert!(!r.display().contains(PASSWORD), "{}", r.display());
}

#[tokio::test]
async fn permission_denied() {
    let srv = server();
    let f = srv.root().join("locked.bin");
    std::fs::write(&f, b"no").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o000)).unwrap();
    std::fs::write(srv.root().join("denied/x.txt"), b"x").unwrap();
    let mut s = session(&srv.http_url("/"), &opts()).await;
    // nginx workers run as nobody: a mode-000 file is 403.
    let e = read_all(
        s.as_mut(),
        "/locked.bin",
        0,
        None,
        &any("locked.bin"),
        MAX_READ,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, RemoteError::PermissionDenied(_)), "{e:?}");
    let e = s.stat("/denied/x.txt").await.unwrap_err();
    assert!(matches!(e, RemoteError::PermissionDenied(_)), "{e:?}");
    let e = list_all(s.as_mut(), "/denied/").await.unwrap_err();
    assert!(matches!(e, RemoteError::PermissionDenied(_)), "{e:?}");
}

#[tokio::test]
async fn https_with_and_without_ca() {
    let srv = server();
    std::fs::write(srv.root().join("t.txt"), b"over tls").unwrap();
    let mut o = opts();
    o.ca_cert = Some(srv.ca_cert());
    let mut s = session(&srv.https_url("/"), &o).await;
    let e = s.stat("/t.txt").await.unwrap();
    assert_eq!(
        read_all(s.as_mut(), "/t.txt", 5, None, &e, MAX_READ)
            .await
            .unwrap(),
        b"tls"
    );
    assert_eq!(list_all(s.as_mut(), "/").await.unwrap().len(), 4); // checksums/ denied/ private/ t.txt
                                                                   // Without the CA: a clear, non-retryable certificate error.
    let mut s = session(&srv.https_url("/"), &opts()).await;
    let err = s.stat("/t.txt").await.unwrap_err();
    assert!(matches!(err, RemoteError::HostKey(_)), "{err:?}");
    assert!(err.to_string().contains("certificate"), "{err}");
    assert!(!err.is_retryable());
    eprintln!("without CA: {err}");
    // insecure_tls accepts it.
    let mut o = opts();
    o.insecure_tls = true;
    let mut s = session(&srv.https_url("/"), &o).await;
    s.stat("/t.txt").await.unwrap();
}

#[tokio::test]
async fn single_file_url() {
    let srv = server();
    std::fs::create_dir(srv.root().join("pub")).unwrap();
    std::fs::write(srv.root().join("pub/one file.iso"), data(3000)).unwrap();
    let url = srv.http_url("/pub/one%20file.iso");
    let u = haul_remote::RemoteUrl::parse(&url).unwrap();
    let mut s = session(&url, &opts()).await;
    let e = s.stat(&u.path).await.unwrap();
    assert_eq!(
        (e.name.as_str(), e.kind, e.size),
        ("one file.iso", EntryKind::File, Some(3000))
    );
    assert_eq!(
        read_all(s.as_mut(), &u.path, 0, None, &e, MAX_READ)
            .await
            .unwrap(),
        data(3000)
    );
}

#[tokio::test]
async fn reuses_one_connection() {
    let srv = server();
    std::fs::write(srv.root().join("r.bin"), data(50_000)).unwrap();
    let r = crate::remote(&srv.http_url("/"), &opts());
    let mut s = r.connect().await.unwrap();
    let e = s.stat("/r.bin").await.unwrap();
    for i in 0..4u64 {
        read_all(s.as_mut(), "/r.bin", i * 1000, Some(1000), &e, MAX_READ)
            .await
            .unwrap();
    }
    // A second session is a connection of its own (so a cap on sessions
    // caps TCP connections), reused for all of its requests too.
    let mut s = r.connect().await.unwrap();
    read_all(s.as_mut(), "/r.bin", 0, None, &e, MAX_READ)
        .await
        .unwrap();
    list_all(s.as_mut(), "/").await.unwrap();
    // nginx writes the log line after sending the response: wait (bounded) for 7 lines.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let lines = loop {
        let log = std::fs::read_to_string(srv.access_log()).unwrap_or_default();
        let lines: Vec<String> = log.lines().map(str::to_string).collect();
        if lines.len() >= 7 || std::time::Instant::now() > deadline {
            break lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(lines.len(), 7, "{lines:?}");
    let conn = |l: &String| l.split(' ').next().unwrap_or_default().to_string();
    let first: BTreeSet<String> = lines[..5].iter().map(conn).collect();
    let second: BTreeSet<String> = lines[5..].iter().map(conn).collect();
    assert_eq!(first.len(), 1, "first session on one connection: {lines:?}");
    assert_eq!(
        second.len(),
        1,
        "second session on one connection: {lines:?}"
    );
    assert_ne!(first, second, "one connection per session: {lines:?}");
    // Request counters on each connection: 1..=5 then 1..=2 (keep-alive).
    assert!(
        lines[4].contains(" 5 ") && lines[6].contains(" 2 "),
        "{lines:?}"
    );
}

#[tokio::test]
async fn delete_unsupported_and_restart() {
    let mut srv = server();
    std::fs::write(srv.root().join("keep.txt"), b"k").unwrap();
    let mut s = session(&srv.http_url("/"), &opts()).await;
    let e = s.delete("/keep.txt").await.unwrap_err();
    assert!(matches!(e, RemoteError::Unsupported(_)), "{e:?}");
    srv.stop();
    let e = s.stat("/keep.txt").await.unwrap_err();
    assert!(
        matches!(e, RemoteError::Connection(_)) && e.is_retryable(),
        "{e:?}"
    );
    srv.start_again().unwrap();
    let mut s = session(&srv.http_url("/"), &opts()).await;
    assert_eq!(s.stat("/keep.txt").await.unwrap().size, Some(1));
}

/// One body-declining sink: describes, then wants no bytes.
struct Declining(Option<haul_remote::RemoteEntry>);

impl haul_remote::DescribedSink for Declining {
    fn describe(&mut self, entry: &haul_remote::RemoteEntry) -> Result<bool, RemoteError> {
        self.0 = Some(entry.clone());
        Ok(false)
    }

    fn accept(&mut self, _: &[u8]) -> Result<(), RemoteError> {
        panic!("bytes after declining");
    }
}

#[tokio::test]
async fn described_read_is_one_get() {
    let srv = server();
    std::fs::write(srv.root().join("d.bin"), data(70_000)).unwrap();
    std::fs::create_dir_all(srv.root().join("sub")).unwrap();
    let mut s = session(&srv.http_url("/"), &opts()).await;
    let (told, bytes) = read_described_all(s.as_mut(), "/d.bin", MAX_READ)
        .await
        .unwrap();
    assert_eq!(bytes, data(70_000));
    // The GET's headers told what a HEAD tells.
    let stated = s.stat("/d.bin").await.unwrap();
    assert_eq!(told, stated);
    assert!(stated.version.is_some() && stated.mtime.is_some());
    // A declined body: nothing passed on.
    let mut declined = Declining(None);
    assert_eq!(s.read_described("/d.bin", &mut declined).await.unwrap(), 0);
    assert_eq!(declined.0, Some(stated));
    // A directory and a missing path are not files.
    for path in ["/sub", "/missing.bin"] {
        let err = read_described_all(s.as_mut(), path, MAX_READ)
            .await
            .unwrap_err();
        assert!(matches!(err, RemoteError::NotFound(_)), "{path}: {err}");
    }
    // The first request was the GET itself, no HEAD before it.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let first = loop {
        let log = std::fs::read_to_string(srv.access_log()).unwrap_or_default();
        if let Some(l) = log.lines().next() {
            break l.to_string();
        }
        assert!(std::time::Instant::now() < deadline, "nothing logged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(first.contains(" GET /d.bin 200 "), "{first}");
}
