//! A remote file that changes while it is downloaded is never delivered as
//! a mix of two versions: DEST holds nothing under its name, or one
//! version that existed, and a file that settled arrives by the same run
//! (the download starts over: `--retries`) or the next. The matrix of
//! `crate::changing`: every change at every moment, for each server. A
//! file on the server's disk is changed there (nginx, vsftpd and sshd read
//! it as they send it); an S3 object is replaced by a PUT.

use std::path::Path;
use std::process::Output;

use haul_s3::testserver::MotoServer;

use super::pull;
use crate::changing::{
    check_case, each_case_of, while_it_changes, Answer, Change, Changing, Moment, CHANGES, LEN,
    RATE,
};
use crate::harness::{haul, run, said, Scratch};

/// A case's file name on the server.
fn name(how: Change, when: Moment) -> String {
    format!("{how:?}-{when:?}.bin").to_lowercase()
}

/// Pulls `url` into a directory of its own while `file` changes `when`,
/// then again.
fn pull_case(proto: &str, file: &Changing, url: &str, extra: &[&str], when: Moment) {
    pull_case_with(
        proto,
        file,
        when,
        Answer::SendAgain,
        || file.apply(),
        |dst| {
            let mut args = vec![url, dst, "--bwlimit", RATE, "--retry-base-ms", "200"];
            args.extend_from_slice(extra);
            pull(&Path::new(dst).join("../cfg"), &args)
        },
    );
}

/// [`pull_case`] with the change and the pull given (`pull` gets DEST).
fn pull_case_with(
    proto: &str,
    file: &Changing,
    when: Moment,
    answer: Answer,
    change: impl FnOnce() + Send,
    pull: impl Fn(&str) -> Output,
) {
    let s = Scratch::new();
    let dst = s.path("dst");
    std::fs::create_dir_all(&dst).expect("mkdir");
    let to = format!("{}/", dst.display());
    let first = while_it_changes(when, std::slice::from_ref(&dst), change, || pull(&to));
    let dest = dst.join(file.path.file_name().expect("name"));
    let case = format!("{proto} {:?} {when:?}", file.how);
    check_case(&case, file, &dest, first, when, answer, || pull(&to));
}

#[test]
fn changing_matrix_http() {
    let srv = haul_http::testserver::TestServer::start().expect("nginx");
    each_case_of(&CHANGES, |how, when| {
        let file = Changing::with(&srv.root().join(name(how, when)), LEN, how);
        let url = srv.http_url(&format!("/{}", name(how, when)));
        pull_case("http", &file, &url, &[], when);
    });
}

#[test]
fn changing_matrix_ftp() {
    use haul_ftp::testserver::{FtpServer, Mode};
    let srv = FtpServer::start(Mode::Plain).expect("vsftpd");
    each_case_of(&CHANGES, |how, when| {
        let file = Changing::with(&srv.root().join(name(how, when)), LEN, how);
        let url = srv.url(&format!("/{}", name(how, when)));
        pull_case("ftp", &file, &url, &[], when);
    });
}

#[test]
fn changing_matrix_sftp() {
    use haul_sftp::testserver::TestServer;
    let srv = TestServer::start().expect("sshd");
    let (key, kh) = (srv.client_key(), srv.known_hosts_file());
    let extra = [
        "--ssh-key",
        key.to_str().unwrap(),
        "--ssh-known-hosts",
        kh.to_str().unwrap(),
    ];
    each_case_of(&CHANGES, |how, when| {
        let path = srv.root().join(name(how, when));
        let file = Changing::with(&path, LEN, how);
        let url = srv.url(&TestServer::key_user(), &path.display().to_string());
        pull_case("sftp", &file, &url, &extra, when);
    });
}

/// Sleeps into the next whole second (S3 tells times to the second).
fn next_second() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock");
    std::thread::sleep(std::time::Duration::from_millis(
        1050 - u64::from(now.subsec_millis()),
    ));
}

/// Puts `path`'s bytes as object `key` of bucket `bkt`.
fn put(srv: &MotoServer, key: &str, path: &Path) {
    let data = std::fs::read(path).expect("read");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(srv.put_object("bkt", key, &data))
        .expect("put");
}

/// An S3 object is replaced whole (a PUT: a new ETag) while it is read:
/// never stitched. The GET under way goes on with the version it began on
/// (moto, as S3, answers it from that object), so that version arrives
/// whole, or the new one; a read resumed with a range carries `If-Match`.
/// (S3 has no rename: three changes, told by what the new object holds.)
#[test]
fn changing_matrix_s3() {
    let srv = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            let srv = MotoServer::start().await.expect("moto_server");
            srv.create_bucket("bkt").await.expect("bucket");
            srv
        });
    let changes = [Change::Overwrite, Change::Append, Change::Truncate];
    each_case_of(&changes, |how, when| {
        let s = Scratch::new();
        let key = format!("run/{}", name(how, when));
        let file = Changing::with(&s.path(&name(how, when)), LEN, how);
        put(&srv, &key, &file.path);
        // The new object must be of a later second than this one: a
        // destination holding the old version is told from the new one by
        // size and whole-second Last-Modified only (see
        // `s3_object_replaced_within_its_second_is_fetched_again`).
        next_second();
        let change = || {
            file.apply();
            put(&srv, &key, &file.path);
        };
        pull_case_with("s3", &file, when, Answer::Snapshot, change, |dst| {
            let mut cmd = haul(&s.path("cfg"));
            cmd.envs(srv.env())
                .args(["--json", "pull", &format!("s3://bkt/{key}"), dst])
                .args(["--s3-endpoint", &srv.endpoint(), "--s3-path-style"])
                .args(["--bwlimit", RATE, "--retry-base-ms", "200"]);
            run(cmd, std::time::Duration::from_secs(120))
        });
    });
}

/// Known bug (found by the matrix): an object replaced by one of the same
/// size within the second its old version was uploaded in is never fetched
/// again once the old version was delivered: the next pulls skip it, since
/// the quick check compares the listing's size and whole-second
/// LastModified with the delivered file's, and the ETag (which differs) is
/// not kept with the delivered file. `cargo test -p haul --test it
/// s3_object_replaced_within -- --ignored` shows it.
#[test]
#[ignore = "known bug: the quick check does not tell same-size versions of the same second apart"]
fn s3_object_replaced_within_its_second_is_fetched_again() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let srv = rt
        .block_on(async {
            let srv = MotoServer::start().await?;
            srv.create_bucket("bkt").await?;
            Ok::<_, std::io::Error>(srv)
        })
        .expect("moto_server");
    let s = Scratch::new();
    std::fs::create_dir_all(s.path("dst")).expect("mkdir");
    let pull = || {
        let mut cmd = haul(&s.path("cfg"));
        cmd.envs(srv.env())
            .args(["--json", "pull", "s3://bkt/run/f.bin"])
            .arg(format!("{}/", s.path("dst").display()))
            .args(["--s3-endpoint", &srv.endpoint(), "--s3-path-style"]);
        run(cmd, std::time::Duration::from_secs(60))
    };
    next_second();
    rt.block_on(srv.put_object("bkt", "run/f.bin", &[1u8; 65536]))
        .expect("put");
    let out = pull();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    rt.block_on(srv.put_object("bkt", "run/f.bin", &[2u8; 65536]))
        .expect("put");
    let out = pull();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        std::fs::read(s.path("dst/f.bin")).expect("read") == [2u8; 65536],
        "DEST still holds the old object: {}",
        said(&out)
    );
}

/// The same over HTTP (nginx): Last-Modified is whole seconds and nginx's
/// ETag is made of the mtime's second and the size, so a file rewritten
/// with its size kept within the second of the version delivered looks
/// the same to every later pull.
#[test]
#[ignore = "known bug: the quick check does not tell same-size versions of the same second apart"]
fn http_file_rewritten_within_its_second_is_fetched_again() {
    let srv = haul_http::testserver::TestServer::start().expect("nginx");
    let s = Scratch::new();
    std::fs::create_dir_all(s.path("dst")).expect("mkdir");
    let pull = || {
        let to = format!("{}/", s.path("dst").display());
        pull(&s.path("cfg"), &[&srv.http_url("/f.bin"), &to])
    };
    next_second();
    std::fs::write(srv.root().join("f.bin"), [1u8; 65536]).expect("write");
    let out = pull();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    std::fs::write(srv.root().join("f.bin"), [2u8; 65536]).expect("write");
    let out = pull();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        std::fs::read(s.path("dst/f.bin")).expect("read") == [2u8; 65536],
        "DEST still holds the old version: {}",
        said(&out)
    );
}
