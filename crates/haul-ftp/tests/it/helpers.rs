//! Shared helpers: sessions, listings and reads against a test server.

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use haul_ftp::testserver::{FtpServer, Mode};
use haul_remote::{RemoteError, RemoteOptions, RemoteUrl, Session};

/// Starts a server, panicking with the reason when it cannot.
pub fn server(mode: Mode) -> FtpServer {
    FtpServer::start(mode).expect("start vsftpd (needs root and vsftpd installed)")
}

/// Opens a session with `url` and `opts`.
pub async fn connect(url: &str, opts: &RemoteOptions) -> Result<Box<dyn Session>, RemoteError> {
    let url = RemoteUrl::parse(url)?;
    haul_ftp::open(&url, opts)?.connect().await
}

/// An anonymous session.
pub async fn anon(s: &FtpServer) -> Box<dyn Session> {
    connect(&s.url("/"), &s.options())
        .await
        .unwrap_or_else(|e| panic!("anonymous login: {e}\n{}", s.log()))
}

/// A session as the local user.
pub async fn user(s: &FtpServer) -> Box<dyn Session> {
    connect(&s.user_url("/"), &s.user_options())
        .await
        .unwrap_or_else(|e| panic!("user login: {e}\n{}", s.log()))
}

/// Cap on what one test read may hold in memory: far above any test file.
pub const MAX_READ: usize = 16 << 20;

/// Deterministic pseudo-random bytes.
pub fn bytes(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 8) as u8
        })
        .collect()
}

/// Writes a file with the given mtime.
pub fn write(path: &Path, data: &[u8], mtime: Option<SystemTime>) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(path, data).unwrap();
    if let Some(t) = mtime {
        fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
}

/// A time given as seconds since the epoch.
pub fn epoch(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}
