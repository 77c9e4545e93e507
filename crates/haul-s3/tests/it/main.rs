//! Integration tests against a real moto_server (feature `test-server`).

#![cfg(feature = "test-server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod auth;
mod listing;
mod objects;

use std::sync::Arc;

use haul_remote::{Remote, RemoteUrl, Session};
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

/// Cap on what one test read may hold in memory: far above any test file.
pub const MAX_READ: usize = 16 << 20;

/// Deterministic test content.
pub fn content(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0] ^ seed)
        .collect()
}
