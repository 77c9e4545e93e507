//! A remote file that changes while it is downloaded (written in place on
//! the server's disk) is never delivered as a mix of two versions: DEST
//! holds nothing under its name, or one version that existed.

use std::time::Duration;

use super::{all_output, pull};
use crate::changing::Changing;
use crate::harness::Scratch;

const MIB: u64 = 1 << 20;

/// Pulls `url` (one 24 MiB file, changed in place at 0.9 s) at 8 MiB/s.
fn pull_while_it_changes(file: &Changing, url: &str, extra: &[&str]) {
    let s = Scratch::new();
    let writer = file.change(Duration::from_millis(900));
    let dst = s.path("dst");
    std::fs::create_dir_all(&dst).expect("mkdir DEST");
    let mut args = vec![url, dst.to_str().unwrap(), "--bwlimit", "8M"];
    args.extend_from_slice(extra);
    let out = pull(&s.path("cfg"), &args);
    writer.join().expect("writer");
    let name = file.path.file_name().unwrap();
    match file.delivered(&dst.join(name), &out) {
        Some(_) => assert_eq!(out.status.code(), Some(0), "{}", all_output(&out)),
        None => assert_eq!(out.status.code(), Some(1), "{}", all_output(&out)),
    }
}

#[test]
fn http_file_changed_mid_download_is_never_stitched() {
    let srv = haul_http::testserver::TestServer::start().expect("nginx");
    let file = Changing::new(&srv.root().join("grow.bin"), 24 * MIB);
    pull_while_it_changes(&file, &srv.http_url("/grow.bin"), &[]);
}

#[test]
fn ftp_file_changed_mid_download_is_never_stitched() {
    use haul_ftp::testserver::{FtpServer, Mode};
    let srv = FtpServer::start(Mode::Plain).expect("vsftpd");
    let file = Changing::new(&srv.root().join("grow.bin"), 24 * MIB);
    pull_while_it_changes(&file, &srv.url("/grow.bin"), &[]);
}

#[test]
fn sftp_file_changed_mid_download_is_never_stitched() {
    use haul_sftp::testserver::TestServer;
    let srv = TestServer::start().expect("sshd");
    let file = Changing::new(&srv.root().join("grow.bin"), 24 * MIB);
    let url = srv.url(
        &TestServer::key_user(),
        &srv.root().join("grow.bin").display().to_string(),
    );
    let (key, kh) = (srv.client_key(), srv.known_hosts_file());
    let extra = [
        "--ssh-key",
        key.to_str().unwrap(),
        "--ssh-known-hosts",
        kh.to_str().unwrap(),
    ];
    pull_while_it_changes(&file, &url, &extra);
}
