//! FTP and FTPS sources (vsftpd).

use haul_ftp::testserver::{FtpServer, Mode, PASSWORD, USER};

use super::{
    all_output, assert_same_tree, fixture_tree, pull, pull_through_restart, FIXTURE_FILES,
};
use crate::harness::{haul, run, summary, write_file, Scratch};

fn server(mode: Mode) -> FtpServer {
    FtpServer::start(mode).expect("start vsftpd (apt-get install vsftpd; needs root)")
}

#[test]
fn ftp_anonymous_tree_with_streams() {
    let srv = server(Mode::Plain);
    let tree = srv.root().join("tree");
    fixture_tree(&tree);
    write_file(&tree.join("big.bin"), 40 << 20, 9);
    let s = Scratch::new();
    let out = pull(
        &s.path("cfg"),
        &[
            &srv.url("/tree/"),
            s.path("dst").to_str().unwrap(),
            "--streams",
            "3",
            "--split-min",
            "16M",
        ],
    );
    assert!(out.status.success(), "{}\n{}", all_output(&out), srv.log());
    assert_same_tree(&tree, &s.path("dst"), &out);
    assert_eq!(summary(&out)["files_ok"], FIXTURE_FILES as u64 + 1);
    // REST was used for the ranges after the first.
    assert!(srv.log().contains("REST"), "no REST in the vsftpd log");
}

#[test]
fn ftps_explicit_and_implicit_with_user_login() {
    for mode in [Mode::ExplicitTls, Mode::ImplicitTls] {
        let srv = server(mode);
        let tree = srv.root().join("in");
        write_file(&tree.join("x/one.bin"), 5 << 20, 1);
        write_file(&tree.join("two.txt"), 10, 2);
        let s = Scratch::new();
        let ca = srv.ca_cert().unwrap();
        let mut cmd = haul(&s.path("cfg"));
        cmd.env("HAUL_PASSWORD", PASSWORD).args([
            "--json",
            "pull",
            &srv.user_url("/in/"),
            s.path("dst").to_str().unwrap(),
            "--ca-cert",
            ca.to_str().unwrap(),
        ]);
        let out = run(cmd, std::time::Duration::from_secs(60));
        assert!(
            out.status.success(),
            "{mode:?}: {}\n{}",
            all_output(&out),
            srv.log()
        );
        assert_same_tree(&tree, &s.path("dst"), &out);
    }
}

#[test]
fn ftp_wrong_password_missing_path_and_delete_source() {
    let srv = server(Mode::Plain);
    let box_dir = srv.writable_dir("outbox").unwrap();
    write_file(&box_dir.join("a.dat"), 1000, 1);
    write_file(&box_dir.join("b.dat"), 2000, 2);
    let (uid, gid) = haul_ftp::testserver::user_ids().unwrap();
    for f in ["a.dat", "b.dat"] {
        std::os::unix::fs::chown(box_dir.join(f), Some(uid), Some(gid)).unwrap();
    }
    let s = Scratch::new();
    // Wrong password: a clear error, exit 1, the password printed nowhere.
    let bad = srv
        .user_url("/outbox/")
        .replace(&format!("{USER}@"), &format!("{USER}:Nope-Secret-9@"));
    let out = pull(&s.path("cfg"), &[&bad, s.path("dst").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("authentication failed"),
        "{}",
        all_output(&out)
    );
    assert!(!all_output(&out).contains("Nope-Secret-9"));
    // Missing path.
    let out = pull(
        &s.path("cfg"),
        &[&srv.url("/no/such/dir/"), s.path("dst").to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("not found"),
        "{}",
        all_output(&out)
    );
    // --delete-source removes the remote files once their copies are in place.
    let mut cmd = haul(&s.path("cfg"));
    cmd.env("HAUL_PASSWORD", PASSWORD).args([
        "--json",
        "pull",
        &srv.user_url("/outbox/"),
        s.path("dst").to_str().unwrap(),
        "--delete-source",
    ]);
    let out = run(cmd, std::time::Duration::from_secs(60));
    assert!(out.status.success(), "{}\n{}", all_output(&out), srv.log());
    assert!(s.path("dst/a.dat").is_file() && s.path("dst/b.dat").is_file());
    assert!(
        !box_dir.join("a.dat").exists() && !box_dir.join("b.dat").exists(),
        "{}",
        srv.log()
    );
}

#[test]
fn ftp_server_killed_mid_download_resumes() {
    let mut srv = FtpServer::start_throttled(Mode::Plain, 8_000_000).unwrap();
    let size: u64 = 48 << 20;
    write_file(&srv.root().join("huge.bin"), size, 4);
    let s = Scratch::new();
    let dst = s.path("dst");
    let out = pull_through_restart(
        &s.path("cfg"),
        &srv.url("/huge.bin"),
        &dst,
        8 << 20,
        &mut srv,
        FtpServer::stop,
        |srv| srv.start_again().unwrap(),
    );
    assert!(out.status.success(), "{}\n{}", all_output(&out), srv.log());
    assert_eq!(
        crate::harness::b3(&dst.join("huge.bin")),
        crate::harness::b3(&srv.root().join("huge.bin"))
    );
    let sum = summary(&out);
    assert!(sum["bytes_transferred"].as_u64().unwrap() <= size, "{sum}");
    // The restarted server was asked to continue from a chunk boundary past 0.
    let log = srv.log();
    let rests: Vec<u64> = log
        .lines()
        .filter_map(|l| l.split("\"REST ").nth(1))
        .filter_map(|r| r.trim_end_matches('"').parse().ok())
        .collect();
    assert!(
        rests.iter().any(|&o| o >= 8 << 20 && o % (4 << 20) == 0),
        "no resumed REST: {rests:?}"
    );
    assert!(
        all_output(&out).contains("resuming"),
        "{}",
        all_output(&out)
    );
}

#[test]
fn ftp_file_changed_within_its_listed_minute_starts_over() {
    // vsftpd lists times to the minute (LIST): a file replaced by another
    // of the same size within that minute, while a download of it was cut
    // off, must be fetched anew, never spliced from the two versions.
    let mut srv = FtpServer::start_throttled(Mode::Plain, 8_000_000).unwrap();
    let size: u64 = 48 << 20;
    // In a directory: its LIST line is all that is known of the file.
    let path = srv.root().join("dir/huge.bin");
    let minute = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_040);
    write_file(&path, size, 4);
    let set_mtime = |secs: u64| {
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(minute + std::time::Duration::from_secs(secs))
            .unwrap();
    };
    set_mtime(1);
    let s = Scratch::new();
    let dst = s.path("dst");
    let out = pull_through_restart(
        &s.path("cfg"),
        &srv.url("/dir/"),
        &dst,
        8 << 20,
        &mut srv,
        FtpServer::stop,
        |srv| {
            write_file(&srv.root().join("dir/huge.bin"), size, 5);
            set_mtime(30);
            srv.start_again().unwrap()
        },
    );
    assert!(out.status.success(), "{}\n{}", all_output(&out), srv.log());
    assert_eq!(
        crate::harness::b3(&dst.join("huge.bin")),
        crate::harness::b3(&srv.root().join("dir/huge.bin")),
        "{}",
        all_output(&out)
    );
}

/// `--delete` mirrors an FTP tree (what DEST holds that the server does
/// not is removed after a clean run); `--checksum` against a server that
/// offers no checksums falls back to size and mtime, says so, and fetches
/// nothing again.
#[test]
fn ftp_delete_mirrors_and_checksum_without_server_sums_falls_back() {
    let srv = server(Mode::Plain);
    let tree = srv.root().join("m");
    write_file(&tree.join("a.txt"), 100, 1);
    write_file(&tree.join("sub/b.bin"), 3 << 20, 2);
    let s = Scratch::new();
    let dst = s.path("dst");
    let args = |extra: &[&str]| {
        let mut v = vec![srv.url("/m/"), dst.to_str().unwrap().to_owned()];
        v.extend(extra.iter().map(|x| x.to_string()));
        v
    };
    let go = |extra: &[&str]| {
        let a = args(extra);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        pull(&s.path("cfg"), &a)
    };
    let out = go(&[]);
    assert!(out.status.success(), "{}", all_output(&out));
    write_file(&dst.join("stale.txt"), 10, 3);
    write_file(&dst.join("old/x.txt"), 10, 4);
    let retrs = srv.log().matches("RETR").count();
    let plain = summary(&go(&[]));
    assert_eq!(plain["files_ok"], 0, "{plain}");
    let out = go(&["--delete", "--checksum"]);
    assert!(out.status.success(), "{}", all_output(&out));
    let sum = summary(&out);
    assert_eq!(
        (sum["files_ok"].as_u64(), sum["deleted"].as_u64()),
        (Some(0), Some(3)),
        "{sum}"
    );
    assert!(
        all_output(&out).contains("offers no checksum for 2 file(s)"),
        "{}",
        all_output(&out)
    );
    assert_eq!(
        srv.log().matches("RETR").count(),
        retrs,
        "nothing fetched again"
    );
    assert_same_tree(&tree, &dst, &out);
}
