//! Integration tests against a real moto_server (feature `test-server`).

#![cfg(feature = "test-server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod auth;
mod listing;
mod objects;

use std::sync::Arc;

use haul_remote::{Remote, RemoteEntry, RemoteError, RemoteUrl, Session};
use haul_s3::testserver::MotoServer;
use haul_s3::S3Credentials;

/// A remote for `s3://bucket/` on `moto` with the given credentials.
pub fn remote(moto: &MotoServer, bucket: &str, creds: Option<S3Credentials>) -> Arc<dyn Remote> {
    let url = RemoteUrl::parse(&format!("s3://{bucket}/")).unwrap();
    haul_s3::open_with_credentials(&url, &moto.options(), creds).unwrap()
}

/// A session with the server's credentials.
pub async fn session(moto: &MotoServer, bucket: &str) -> Box<dyn Session> {
    remote(moto, bucket, Some(moto.credentials()))
        .connect()
        .await
        .unwrap()
}

/// Lists `dir` through a small channel, sorted by name.
pub async fn list(s: &mut Box<dyn Session>, dir: &str) -> Result<Vec<RemoteEntry>, RemoteError> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let collect = tokio::spawn(async move {
        let mut v = Vec::new();
        while let Some(e) = rx.recv().await {
            v.push(e);
        }
        v
    });
    let r = s.list(dir, &tx).await;
    drop(tx);
    let mut v = collect.await.unwrap();
    r?;
    v.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(v)
}

/// Reads into a Vec.
pub async fn read(
    s: &mut Box<dyn Session>,
    path: &str,
    offset: u64,
    len: Option<u64>,
    expect: &RemoteEntry,
) -> Result<Vec<u8>, RemoteError> {
    let mut out = Vec::new();
    let mut sink = |b: &[u8]| {
        out.extend_from_slice(b);
        Ok(())
    };
    let n = s.read(path, offset, len, expect, &mut sink).await?;
    assert_eq!(n as usize, out.len());
    Ok(out)
}

/// Deterministic test content.
pub fn content(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0] ^ seed)
        .collect()
}
