use haul_remote::collect::read_all;
use haul_remote::{EntryKind, RemoteEntry, RemoteError, Secret};
use haul_s3::testserver::MotoServer;
use haul_s3::S3Credentials;

use crate::{remote, session, MAX_READ};

/// moto with authentication on verifies signatures of object requests
/// (not of listings with a `/` in the query: see the testserver docs).
#[tokio::test]
async fn signatures_are_checked_and_bad_keys_are_auth_errors() {
    let moto = MotoServer::start_with_auth().await.unwrap();
    moto.create_bucket("auth").await.unwrap();
    moto.put_object("auth", "d/with space ~.txt", b"spaced")
        .await
        .unwrap();

    // The right key: signed HEAD and ranged GET pass moto's check.
    let mut s = session(&moto, "auth").await;
    let st = s.stat("/d/with space ~.txt").await.unwrap();
    assert_eq!((st.kind, st.size), (EntryKind::File, Some(6)));
    assert_eq!(
        read_all(s.as_mut(), "/d/with space ~.txt", 1, None, &st, MAX_READ)
            .await
            .unwrap(),
        b"paced"
    );

    // A wrong secret: HEAD says only 403, the probe GET tells the code.
    let secret = "not-the-secret";
    let wrong = S3Credentials::new(moto.credentials().access_key_id, Secret::new(secret));
    let mut bad = remote(&moto, "auth", Some(wrong)).connect().await.unwrap();
    let err = bad.stat("/d/with space ~.txt").await.unwrap_err();
    assert!(matches!(err, RemoteError::Auth(_)), "{err}");
    assert!(err.to_string().contains("SignatureDoesNotMatch"), "{err}");
    assert!(!err.is_retryable());
    assert!(!format!("{err} {err:?}").contains(secret));
    let err = read_all(bad.as_mut(), "/d/with space ~.txt", 0, None, &st, MAX_READ)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::Auth(_)), "{err}");

    // An access key moto does not know.
    let unknown = S3Credentials::new("AKIANOSUCHKEY0000000", Secret::new("x"));
    let mut bad = remote(&moto, "auth", Some(unknown))
        .connect()
        .await
        .unwrap();
    let err = read_all(
        bad.as_mut(),
        "/d/with space ~.txt",
        0,
        None,
        &RemoteEntry::file("x", None),
        MAX_READ,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, RemoteError::Auth(_)), "{err}");
    assert!(err.to_string().contains("InvalidAccessKeyId"), "{err}");
}
