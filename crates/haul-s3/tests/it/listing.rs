use haul_remote::collect::{list_all, read_all};
use haul_remote::{EntryKind, RemoteError};
use haul_s3::testserver::MotoServer;

use crate::{session, MAX_READ};

#[tokio::test]
async fn nested_keys_spaces_unicode_empty() {
    // Without auth: moto's own signature check fails for these keys and for
    // listings with a `/` in the query (botocore's requests too), see testserver docs.
    let moto = MotoServer::start().await.unwrap();
    moto.create_bucket("nest").await.unwrap();
    let objects: &[(&str, &[u8])] = &[
        ("top.txt", b"top"),
        ("x+y z.txt", b"plus and space"),
        ("dir one/", b""), // directory marker
        ("dir one/a b.txt", b"hello spaces"),
        ("dir one/ünï cødé €.bin", "unicode ✓".as_bytes()),
        ("dir one/empty", b""),
        ("dir one/sub/deep.txt", b"deep"),
        ("only/prefix/file", b"f"),
    ];
    for (k, v) in objects {
        moto.put_object("nest", k, v).await.unwrap();
    }
    let mut s = session(&moto, "nest").await;

    let root = list_all(s.as_mut(), "/").await.unwrap();
    let names: Vec<(&str, EntryKind)> = root.iter().map(|e| (e.name.as_str(), e.kind)).collect();
    assert_eq!(
        names,
        [
            ("dir one", EntryKind::Dir),
            ("only", EntryKind::Dir),
            ("top.txt", EntryKind::File),
            ("x+y z.txt", EntryKind::File)
        ]
    );

    let d = list_all(s.as_mut(), "/dir one").await.unwrap();
    let names: Vec<&str> = d.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a b.txt", "empty", "sub", "ünï cødé €.bin"]);
    assert_eq!(d[1].size, Some(0));
    assert_eq!(d[2].kind, EntryKind::Dir);
    assert_eq!(d[3].size, Some("unicode ✓".len() as u64));
    assert!(d[3].mtime.is_some() && d[3].version.is_some());
    assert!(
        d[3].checksums.is_empty(),
        "listings carry no checksums (stat does): {:?}",
        d[3].checksums
    );
    // Same listing with a trailing slash.
    assert_eq!(list_all(s.as_mut(), "/dir one/").await.unwrap(), d);

    // Prefixes are directories, with or without a marker object.
    for p in ["/dir one", "/dir one/", "/only", "/only/prefix", "/"] {
        assert_eq!(s.stat(p).await.unwrap().kind, EntryKind::Dir, "{p}");
    }
    let f = s.stat("/dir one/ünï cødé €.bin").await.unwrap();
    assert_eq!(
        read_all(s.as_mut(), "/dir one/ünï cødé €.bin", 0, None, &f, MAX_READ)
            .await
            .unwrap(),
        "unicode ✓".as_bytes()
    );
    let e = s.stat("/dir one/empty").await.unwrap();
    assert_eq!((e.kind, e.size), (EntryKind::File, Some(0)));
    assert!(
        read_all(s.as_mut(), "/dir one/empty", 0, None, &e, MAX_READ)
            .await
            .unwrap()
            .is_empty()
    );
    let p = s.stat("/x+y z.txt").await.unwrap();
    assert_eq!(
        read_all(s.as_mut(), "/x+y z.txt", 5, Some(3), &p, MAX_READ)
            .await
            .unwrap(),
        b"and"
    );
    assert!(list_all(s.as_mut(), "/nothing here")
        .await
        .unwrap()
        .is_empty());

    // Missing bucket.
    let mut nob = session(&moto, "no-such-bucket").await;
    let err = list_all(nob.as_mut(), "/").await.unwrap_err();
    assert!(matches!(err, RemoteError::NotFound(_)), "{err}");
}

#[tokio::test]
async fn listing_paginates_1500_objects() {
    let moto = MotoServer::start().await.unwrap();
    moto.create_bucket("many").await.unwrap();
    let moto = std::sync::Arc::new(moto);
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let moto = moto.clone();
        tasks.spawn(async move {
            for i in (worker..1500).step_by(8) {
                moto.put_object("many", &format!("big/f{i:05}"), b"x")
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    moto.put_object("many", "big/sub/inner", b"y")
        .await
        .unwrap();
    let mut s = session(&moto, "many").await;
    let before = moto.requests_matching("GET /many/?continuation-token=");

    // A channel of 1 and a slow reader: pages are sent as they come.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<haul_remote::RemoteEntry>(1);
    let reader = tokio::spawn(async move {
        let mut names = Vec::new();
        while let Some(e) = rx.recv().await {
            names.push(e.name);
        }
        names
    });
    s.list("/big", &tx).await.unwrap();
    drop(tx);
    let mut names = reader.await.unwrap();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 1501);
    assert_eq!(names[0], "f00000");
    assert_eq!(names[1499], "f01499");
    assert_eq!(names[1500], "sub");
    let pages = moto.requests_at_least(
        "GET /many/?continuation-token=",
        before + 1,
        std::time::Duration::from_secs(10),
    ) - before;
    assert!(
        pages >= 1,
        "expected a second page to be requested, saw {pages}"
    );

    // A receiver that goes away stops the listing quietly.
    let (tx, rx) = tokio::sync::mpsc::channel::<haul_remote::RemoteEntry>(1);
    drop(rx);
    s.list("/big", &tx).await.unwrap();
}
