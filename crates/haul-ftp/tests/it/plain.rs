//! Plain FTP: listing, stat, reads, errors, delete, session reuse.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, SystemTime};

use haul_ftp::testserver::{Mode, PASSWORD};
use haul_remote::collect::{list_all, read_all};
use haul_remote::{EntryKind, RemoteEntry, RemoteError};

use crate::helpers::*;

const OLD: u64 = 1_592_226_855; // 2020-06-15 13:14:15 UTC

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_lists_a_nested_tree() {
    let srv = server(Mode::Plain);
    let root = srv.root();
    write(&root.join("a b.txt"), b"hello world", Some(epoch(OLD)));
    write(&root.join("ünï cödé.txt"), b"unicode", None);
    write(&root.join("empty"), b"", None);
    write(
        &root.join("sub dir/nested/deep file.bin"),
        &bytes(3000, 1),
        None,
    );
    std::os::unix::fs::symlink("a b.txt", root.join("link")).unwrap();
    fs::write(root.join(".hidden"), b"h").unwrap();

    let mut s = anon(&srv).await;
    let top = list_all(s.as_mut(), "/").await.unwrap();
    let names: Vec<&str> = top.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            ".hidden",
            "a b.txt",
            "empty",
            "link",
            "sub dir",
            "ünï cödé.txt"
        ],
        "{}",
        srv.log()
    );
    let get = |n: &str| top.iter().find(|e| e.name == n).unwrap().clone();
    let ab = get("a b.txt");
    assert_eq!((ab.kind, ab.size), (EntryKind::File, Some(11)));
    // An old file lists with its year only: the date, at midnight UTC.
    assert_eq!(ab.mtime, Some(epoch(OLD - OLD % 86_400)));
    assert_eq!(
        (get("empty").kind, get("empty").size),
        (EntryKind::File, Some(0))
    );
    assert_eq!(get("link").kind, EntryKind::Other);
    assert_eq!(get("sub dir").kind, EntryKind::Dir);
    // A recent file lists with a time (year-less): to the minute.
    let recent = get("ünï cödé.txt").mtime.unwrap();
    let age = SystemTime::now().duration_since(recent).unwrap_or_default();
    assert!(age < Duration::from_secs(180), "recent mtime {recent:?}");

    let sub = list_all(s.as_mut(), "/sub dir").await.unwrap();
    assert_eq!(sub.len(), 1);
    assert_eq!(
        (sub[0].name.as_str(), sub[0].kind),
        ("nested", EntryKind::Dir)
    );
    let deep = list_all(s.as_mut(), "/sub dir/nested/").await.unwrap();
    assert_eq!(
        (deep[0].name.as_str(), deep[0].size),
        ("deep file.bin", Some(3000))
    );
    let e = deep[0].clone();
    let data = read_all(
        s.as_mut(),
        "/sub dir/nested/deep file.bin",
        0,
        None,
        &e,
        MAX_READ,
    )
    .await
    .unwrap();
    assert_eq!(data, bytes(3000, 1));
    // The 0-byte file reads as nothing.
    assert!(
        read_all(s.as_mut(), "/empty", 0, None, &get("empty"), MAX_READ)
            .await
            .unwrap()
            .is_empty()
    );
    let uni = read_all(
        s.as_mut(),
        "/ünï cödé.txt",
        0,
        None,
        &get("ünï cödé.txt"),
        MAX_READ,
    )
    .await
    .unwrap();
    assert_eq!(uni, b"unicode");
    // Empty directory.
    fs::create_dir(root.join("void")).unwrap();
    assert!(list_all(s.as_mut(), "/void").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_lists_stats_and_reads() {
    let srv = server(Mode::Plain);
    let data = bytes(300_000, 2);
    write(&srv.root().join("dir/f.bin"), &data, Some(epoch(OLD)));
    let mut s = user(&srv).await;
    let e = s.stat("/dir/f.bin").await.unwrap();
    assert_eq!(
        (e.name.as_str(), e.kind, e.size),
        ("f.bin", EntryKind::File, Some(300_000))
    );
    assert_eq!(e.mtime, Some(epoch(OLD)), "MDTM gives the exact second");
    let d = s.stat("/dir").await.unwrap();
    assert_eq!((d.name.as_str(), d.kind), ("dir", EntryKind::Dir));
    assert_eq!(s.stat("/").await.unwrap().kind, EntryKind::Dir);
    let listed = list_all(s.as_mut(), "/dir").await.unwrap();
    assert_eq!(listed[0].size, Some(300_000));
    assert_eq!(
        read_all(s.as_mut(), "/dir/f.bin", 0, None, &e, MAX_READ)
            .await
            .unwrap(),
        data
    );
    // The listed entry (minute/day precision) is a valid expectation too.
    assert_eq!(
        read_all(s.as_mut(), "/dir/f.bin", 0, None, &listed[0], MAX_READ)
            .await
            .unwrap(),
        data
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranged_reads_reuse_the_session() {
    let srv = server(Mode::Plain);
    let data = bytes(2 * 1024 * 1024 + 17, 3);
    write(&srv.root().join("big.bin"), &data, None);
    write(&srv.root().join("small.txt"), b"0123456789", None);
    let mut s = user(&srv).await;
    let e = s.stat("/big.bin").await.unwrap();
    // Middle ranges stop the transfer early; the session must stay in step.
    for (off, len) in [(1000u64, 5000u64), (0, 1), (1 << 20, 700_000), (12_345, 1)] {
        let got = read_all(s.as_mut(), "/big.bin", off, Some(len), &e, MAX_READ)
            .await
            .unwrap();
        assert_eq!(
            got,
            &data[off as usize..(off + len) as usize],
            "range {off}+{len}"
        );
    }
    // A range ending exactly at the end of the file, then the tail to EOF.
    let n = data.len() as u64;
    assert_eq!(
        read_all(s.as_mut(), "/big.bin", n - 10, Some(10), &e, MAX_READ)
            .await
            .unwrap(),
        &data[data.len() - 10..]
    );
    assert_eq!(
        read_all(s.as_mut(), "/big.bin", n - 3, None, &e, MAX_READ)
            .await
            .unwrap(),
        &data[data.len() - 3..]
    );
    assert_eq!(
        read_all(s.as_mut(), "/big.bin", 0, None, &e, MAX_READ)
            .await
            .unwrap(),
        data
    );
    let small = s.stat("/small.txt").await.unwrap();
    assert_eq!(
        read_all(s.as_mut(), "/small.txt", 4, Some(3), &small, MAX_READ)
            .await
            .unwrap(),
        b"456"
    );
    assert_eq!(list_all(s.as_mut(), "/").await.unwrap().len(), 2);
    // A sink error stops the read and comes back as is.
    let mut calls = 0;
    let mut sink = |_: &[u8]| {
        calls += 1;
        Err(RemoteError::Local("disk full".into()))
    };
    let err = s
        .read("/big.bin", 0, None, &e, &mut sink)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RemoteError::Local(ref m) if m == "disk full"),
        "{err}"
    );
    assert_eq!(calls, 1);
    // ...and the session is still in step.
    assert_eq!(
        read_all(s.as_mut(), "/small.txt", 0, None, &small, MAX_READ)
            .await
            .unwrap(),
        b"0123456789"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_files_are_detected() {
    let srv = server(Mode::Plain);
    let path = srv.root().join("c.txt");
    write(&path, b"version one", Some(epoch(OLD)));
    let mut s = user(&srv).await;
    let stated = s.stat("/c.txt").await.unwrap();
    let listed = list_all(s.as_mut(), "/").await.unwrap().remove(0);
    write(&path, b"version two, longer", Some(epoch(OLD)));
    for expect in [&stated, &listed] {
        let err = read_all(s.as_mut(), "/c.txt", 0, None, expect, MAX_READ)
            .await
            .unwrap_err();
        assert!(matches!(err, RemoteError::Changed(_)), "{err}");
        assert!(err.is_retryable());
    }
    // Same size, new mtime: seen through MDTM when the expectation has seconds.
    write(&path, b"version one", Some(epoch(OLD + 61)));
    let err = read_all(s.as_mut(), "/c.txt", 0, None, &stated, MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::Changed(_)), "{err}");
    // Asking past the end of a file that shrank.
    let unknown = RemoteEntry::file("c.txt", None);
    let err = read_all(s.as_mut(), "/c.txt", 5, Some(100), &unknown, MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::Changed(_)), "{err}");
    assert_eq!(
        read_all(s.as_mut(), "/c.txt", 0, None, &unknown, MAX_READ)
            .await
            .unwrap(),
        b"version one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_paths_are_not_found() {
    let srv = server(Mode::Plain);
    fs::create_dir(srv.root().join("d")).unwrap();
    let mut s = user(&srv).await;
    let any = RemoteEntry::file("x", None);
    for r in [
        s.stat("/nope").await.map(|_| ()),
        s.stat("/d/nope.txt").await.map(|_| ()),
        list_all(s.as_mut(), "/nope").await.map(|_| ()),
        read_all(s.as_mut(), "/nope/x", 0, None, &any, MAX_READ)
            .await
            .map(|_| ()),
        s.delete("/nope").await,
    ] {
        let err = r.unwrap_err();
        assert!(matches!(err, RemoteError::NotFound(_)), "{err}");
        assert!(!err.is_retryable());
    }
    assert_eq!(s.stat("/d").await.unwrap().kind, EntryKind::Dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_file_is_permission_denied() {
    let srv = server(Mode::Plain);
    let p = srv.root().join("secret.bin");
    write(&p, b"top secret", None);
    fs::set_permissions(&p, fs::Permissions::from_mode(0o000)).unwrap();
    write(&srv.root().join("ok.txt"), b"fine", None);
    let mut s = user(&srv).await;
    let e = s.stat("/secret.bin").await.unwrap();
    assert_eq!(e.size, Some(10));
    let err = read_all(s.as_mut(), "/secret.bin", 0, None, &e, MAX_READ)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RemoteError::PermissionDenied(_)),
        "{err}\n{}",
        srv.log()
    );
    let ok = s.stat("/ok.txt").await.unwrap();
    assert_eq!(
        read_all(s.as_mut(), "/ok.txt", 0, None, &ok, MAX_READ)
            .await
            .unwrap(),
        b"fine"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_auth_and_never_shown() {
    let srv = server(Mode::Plain);
    let mut opts = srv.user_options();
    opts.password = Some(haul_remote::Secret::new("wrong-Pa55word"));
    let err = connect(&srv.user_url("/"), &opts)
        .await
        .err()
        .expect("login must fail");
    assert!(matches!(err, RemoteError::Auth(_)), "{err}");
    assert!(!err.is_retryable());
    let shown = format!("{err} {err:?}");
    assert!(
        !shown.contains("wrong-Pa55word") && !shown.contains(PASSWORD),
        "{shown}"
    );
    // The password in the URL works too.
    let url = format!("ftp://hault:{PASSWORD}@127.0.0.1:{}/", srv.port());
    connect(&url, &srv.options()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_files() {
    let srv = server(Mode::Plain);
    let dir = srv.writable_dir("rw").unwrap();
    write(&dir.join("gone.txt"), b"bye", None);
    write(&srv.root().join("kept.txt"), b"stay", None);
    let mut s = user(&srv).await;
    s.delete("/rw/gone.txt").await.unwrap();
    assert!(!dir.join("gone.txt").exists());
    assert!(matches!(
        s.stat("/rw/gone.txt").await,
        Err(RemoteError::NotFound(_))
    ));
    // The root is not writable by the user: refused, and the file stays.
    let err = s.delete("/kept.txt").await.unwrap_err();
    assert!(matches!(err, RemoteError::PermissionDenied(_)), "{err}");
    assert!(srv.root().join("kept.txt").exists());
    // Anonymous users cannot delete.
    let mut a = anon(&srv).await;
    write(&dir.join("again.txt"), b"x", None);
    let err = a.delete("/rw/again.txt").await.unwrap_err();
    assert!(matches!(err, RemoteError::PermissionDenied(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_list_receiver_stops_quietly() {
    let srv = server(Mode::Plain);
    for i in 0..2000 {
        fs::write(
            srv.root()
                .join(format!("file-{i:05}-with-a-longish-name.txt")),
            b"",
        )
        .unwrap();
    }
    let mut s = user(&srv).await;
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    let taker = tokio::spawn(async move {
        let first = rx.recv().await;
        drop(rx);
        first
    });
    s.list("/", &tx).await.unwrap();
    assert!(taker.await.unwrap().is_some());
    assert_eq!(list_all(s.as_mut(), "/").await.unwrap().len(), 2000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_on_same_port() {
    let mut srv = server(Mode::Plain);
    write(&srv.root().join("f"), b"data", None);
    let port = srv.port();
    let mut s = user(&srv).await;
    let e = s.stat("/f").await.unwrap();
    srv.stop();
    let err = read_all(s.as_mut(), "/f", 0, None, &e, MAX_READ)
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(connect(&srv.user_url("/"), &srv.user_options())
        .await
        .is_err());
    srv.start_again().unwrap();
    assert_eq!(srv.port(), port);
    let mut s = user(&srv).await;
    assert_eq!(
        read_all(s.as_mut(), "/f", 0, None, &e, MAX_READ)
            .await
            .unwrap(),
        b"data"
    );
}
