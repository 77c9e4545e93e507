use haul_remote::collect::{read_all, read_described_all};
use haul_remote::{Checksum, EntryKind, RemoteError};
use haul_s3::testserver::MotoServer;
use md5::{Digest, Md5};

use crate::{content, session, MAX_READ};

#[tokio::test]
async fn stat_read_changed_delete_checksum_restart() {
    let mut moto = MotoServer::start().await.unwrap();
    moto.create_bucket("obj").await.unwrap();
    let data = content(300_000, 7);
    let etag = moto.put_object("obj", "d/f.bin", &data).await.unwrap();
    let mut s = session(&moto, "obj").await;

    let st = s.stat("/d/f.bin").await.unwrap();
    assert_eq!(
        (st.kind, st.name.as_str(), st.size),
        (EntryKind::File, "f.bin", Some(300_000))
    );
    assert_eq!(st.version.as_deref(), Some(etag.as_str()));
    assert!(st.mtime.is_some());
    let md5: [u8; 16] = Md5::digest(&data).into();
    assert_eq!(st.checksums, vec![Checksum::Md5(md5)]);

    // Ranged reads.
    assert_eq!(
        read_all(s.as_mut(), "/d/f.bin", 1000, Some(5000), &st, MAX_READ)
            .await
            .unwrap(),
        &data[1000..6000]
    );
    assert_eq!(
        read_all(s.as_mut(), "/d/f.bin", 299_990, None, &st, MAX_READ)
            .await
            .unwrap(),
        &data[299_990..]
    );
    assert_eq!(
        read_all(s.as_mut(), "/d/f.bin", 0, None, &st, MAX_READ)
            .await
            .unwrap(),
        data
    );
    assert!(
        read_all(s.as_mut(), "/d/f.bin", 300_000, None, &st, MAX_READ)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(read_all(s.as_mut(), "/d/f.bin", 5, Some(0), &st, MAX_READ)
        .await
        .unwrap()
        .is_empty());

    // A sink error stops the read and comes back as is.
    let mut calls = 0;
    let mut sink = |_: &[u8]| {
        calls += 1;
        Err(RemoteError::Local("disk full".into()))
    };
    let err = s
        .read("/d/f.bin", 0, None, &st, &mut sink)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::Local(_)), "{err}");
    assert_eq!(calls, 1);

    // Wrong expected size (ETag unknown) → Changed.
    let mut other = st.clone();
    other.version = None;
    other.size = Some(12);
    let err = read_all(s.as_mut(), "/d/f.bin", 0, Some(10), &other, MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::Changed(_)), "{err}");

    // Overwritten: the old ETag no longer matches → Changed (retryable).
    let data2 = content(300_000, 9);
    moto.put_object("obj", "d/f.bin", &data2).await.unwrap();
    let err = read_all(s.as_mut(), "/d/f.bin", 100, Some(100), &st, MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::Changed(_)), "{err}");
    assert!(err.is_retryable());
    let st2 = s.stat("/d/f.bin").await.unwrap();
    assert_ne!(st2.version, st.version);
    assert_eq!(
        read_all(s.as_mut(), "/d/f.bin", 100, Some(100), &st2, MAX_READ)
            .await
            .unwrap(),
        &data2[100..200]
    );

    // Missing key.
    let err = s.stat("/d/nope").await.unwrap_err();
    assert!(matches!(err, RemoteError::NotFound(_)), "{err}");
    let err = read_all(
        s.as_mut(),
        "/d/nope",
        0,
        None,
        &haul_remote::RemoteEntry::file("nope", None),
        MAX_READ,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, RemoteError::NotFound(_)), "{err}");

    // x-amz-checksum-sha256 stored at PUT comes back from HEAD.
    let small = b"checksum me".to_vec();
    moto.put_object_with_sha256("obj", "sum.txt", &small)
        .await
        .unwrap();
    let st = s.stat("/sum.txt").await.unwrap();
    let sha: [u8; 32] = sha2_digest(&small);
    assert!(
        st.checksums.contains(&Checksum::Sha256(sha)),
        "{:?}",
        st.checksums
    );
    let md5: [u8; 16] = Md5::digest(&small).into();
    assert!(
        st.checksums.contains(&Checksum::Md5(md5)),
        "{:?}",
        st.checksums
    );

    // A described read: one GET whose headers say what HEAD says (the
    // stored checksum included), then the body.
    let (told, bytes) = read_described_all(s.as_mut(), "/sum.txt", MAX_READ)
        .await
        .unwrap();
    assert_eq!((told, bytes), (st, small));
    let err = read_described_all(s.as_mut(), "/d/nope", MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::NotFound(_)), "{err}");

    // Delete.
    s.delete("/d/f.bin").await.unwrap();
    let err = s.stat("/d/f.bin").await.unwrap_err();
    assert!(matches!(err, RemoteError::NotFound(_)), "{err}");

    // Server gone: a retryable connection error; restarted moto is empty.
    moto.stop();
    let err = s.stat("/sum.txt").await.unwrap_err();
    assert!(
        matches!(err, RemoteError::Connection(_) | RemoteError::Timeout(_)),
        "{err}"
    );
    assert!(err.is_retryable());
    moto.start_again().await.unwrap();
    moto.create_bucket("obj").await.unwrap();
    let mut s = session(&moto, "obj").await;
    let err = s.stat("/sum.txt").await.unwrap_err();
    assert!(matches!(err, RemoteError::NotFound(_)), "{err}");
}

fn sha2_digest(b: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(b).into()
}
