//! HTTP(S) sources: nginx autoindex crawling, ranges, resume, errors.

use std::time::Duration;

use haul_http::testserver::{TestServer, PASSWORD, USER};

use super::{
    all_output, assert_same_tree, events, fixture_tree, pull, pull_through_restart, FIXTURE_FILES,
};
use crate::harness::{b3, summary, write_file, Scratch};

fn server() -> TestServer {
    TestServer::start().expect("start nginx (apt-get install nginx-light)")
}

#[test]
fn http_tree_then_quick_check() {
    let srv = server();
    fixture_tree(&srv.root().join("tree"));
    let s = Scratch::new();
    let url = srv.http_url("/tree/");
    let out = pull(
        &s.path("cfg"),
        &[&url, s.path("dst").to_str().unwrap(), "-j", "3"],
    );
    assert!(out.status.success(), "{}", all_output(&out));
    assert_same_tree(&srv.root().join("tree"), &s.path("dst"), &out);
    assert_eq!(summary(&out)["files_ok"], FIXTURE_FILES as u64);
    // New files are fetched with one GET each, no HEAD first (the one HEAD
    // before is the URL's own stat; the one after, of the one file of more
    // than a chunk, asks whether it changed while it was read); the index
    // pages are the GETs of `.../`.
    let log = settled_log(&srv);
    let (heads, file_gets) = requests(&log);
    assert_eq!((heads, file_gets), (2, FIXTURE_FILES), "{log}");
    // Again: everything is already there (same size and Last-Modified):
    // a HEAD per file for the quick check, no file fetched.
    let out = pull(&s.path("cfg"), &[&url, s.path("dst").to_str().unwrap()]);
    assert!(out.status.success(), "{}", all_output(&out));
    let sum = summary(&out);
    assert_eq!(sum["files_skipped"], FIXTURE_FILES as u64, "{sum}");
    assert_eq!(sum["bytes_transferred"], 0);
    let log = settled_log(&srv);
    let (heads_then, file_gets_then) = requests(&log);
    assert_eq!(
        (heads_then - heads, file_gets_then - file_gets),
        (1 + FIXTURE_FILES, 0),
        "{log}"
    );
    // `--skip-existing`: a file there is kept whatever it holds, and
    // nothing is asked about it.
    std::fs::write(s.path("dst").join("top.txt"), b"local edit").unwrap();
    let out = pull(
        &s.path("cfg"),
        &[&url, s.path("dst").to_str().unwrap(), "--skip-existing"],
    );
    assert!(out.status.success(), "{}", all_output(&out));
    assert_eq!(summary(&out)["files_skipped"], FIXTURE_FILES as u64);
    assert_eq!(
        std::fs::read(s.path("dst").join("top.txt")).unwrap(),
        b"local edit"
    );
    let log = settled_log(&srv);
    assert_eq!(requests(&log), (heads_then + 1, file_gets_then), "{log}");
}

/// nginx's access log once it stops growing (it logs a request just after
/// answering it, so the last line can trail the client by a moment).
fn settled_log(srv: &TestServer) -> String {
    let read = || std::fs::read_to_string(srv.access_log()).unwrap_or_default();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut last = read();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = read();
        if now == last || std::time::Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// `HEAD` requests and `GET`s of files (not index pages) in an access log.
fn requests(log: &str) -> (usize, usize) {
    let method_and_uri = |l: &str| {
        let mut f = l.split(' ').skip(2);
        (
            f.next().unwrap_or("").to_string(),
            f.next().unwrap_or("").to_string(),
        )
    };
    let lines: Vec<(String, String)> = log.lines().map(method_and_uri).collect();
    let heads = lines.iter().filter(|(m, _)| m == "HEAD").count();
    let file_gets = lines
        .iter()
        .filter(|(m, uri)| m == "GET" && !uri.ends_with('/'))
        .count();
    (heads, file_gets)
}

#[test]
fn https_single_file_without_trailing_slash_and_streams() {
    let srv = server();
    write_file(&srv.root().join("big/large.bin"), 200 << 20, 7);
    let s = Scratch::new();
    let ca = srv.ca_cert();
    let dst = s.path("dst");
    let out = pull(
        &s.path("cfg"),
        &[
            &srv.https_url("/big"),
            dst.to_str().unwrap(),
            "--streams",
            "4",
            "--split-min",
            "16M",
            "--ca-cert",
            ca.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", all_output(&out));
    // No trailing slash: the directory itself is created (rsync's rule).
    assert_eq!(
        b3(&dst.join("big/large.bin")),
        b3(&srv.root().join("big/large.bin"))
    );
    let log = settled_log(&srv);
    let ranged = log
        .lines()
        .filter(|l| l.contains("/big/large.bin") && l.contains("range=bytes="))
        .count();
    assert!(ranged >= 4, "4 range streams expected:\n{log}");
    // Without the CA the certificate is refused with a clear error.
    let out = pull(
        &s.path("cfg"),
        &[&srv.https_url("/big/"), s.path("dst2").to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("not trusted"),
        "{}",
        all_output(&out)
    );
}

#[test]
fn http_server_killed_mid_download_resumes_from_verified_chunks() {
    let mut srv = server();
    let size: u64 = 48 << 20;
    write_file(&srv.root().join("slow/big.bin"), size, 8);
    let s = Scratch::new();
    let dst = s.path("dst");
    // Stop nginx once a few chunks are verified (8 MB/s: about 2 s), restart it a second later.
    let out = pull_through_restart(
        &s.path("cfg"),
        // A directory URL: the file is new, so its first attempt is one GET
        // described by its headers; the resume must find the chunks that
        // GET's ETag keyed.
        &srv.http_url("/slow/"),
        &dst,
        12 << 20,
        &mut srv,
        TestServer::stop,
        |srv| srv.start_again().unwrap(),
    );
    assert!(out.status.success(), "{}", all_output(&out));
    assert_eq!(
        b3(&dst.join("big.bin")),
        b3(&srv.root().join("slow/big.bin"))
    );
    // The second request asked for a range starting at a chunk boundary past 0.
    let log = settled_log(&srv);
    let resumed: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("/slow/big.bin"))
        .filter_map(|l| l.split("range=bytes=").nth(1))
        .filter_map(|r| r.split('-').next()?.parse().ok())
        .collect();
    assert!(
        resumed.iter().any(|&o| o >= 8 << 20 && o % (4 << 20) == 0),
        "no resumed range in {log}"
    );
    // Bytes fetched: the file once, plus at most the chunk in flight when the server died.
    let fetched = summary(&out)["bytes_transferred"].as_u64().unwrap();
    assert!(fetched <= size, "{fetched} > {size}");
    assert!(
        events(&out)
            .iter()
            .any(|e| e["event"] == "warning"
                && e["message"].as_str().unwrap_or("").contains("resuming")),
        "{}",
        all_output(&out)
    );
}

#[test]
fn http_errors_are_per_file_and_never_show_the_password() {
    let srv = server();
    let tree = srv.root().join("mixed");
    write_file(&tree.join("ok1.txt"), 10, 1);
    write_file(&tree.join("ok2.txt"), 20, 2);
    write_file(&tree.join("secret.txt"), 30, 3);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        tree.join("secret.txt"),
        std::fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    let s = Scratch::new();
    let out = pull(
        &s.path("cfg"),
        &[
            &srv.http_url("/mixed/"),
            s.path("dst").to_str().unwrap(),
            "--retries",
            "1",
        ],
    );
    assert_eq!(out.status.code(), Some(23), "{}", all_output(&out));
    let sum = summary(&out);
    assert_eq!(sum["files_ok"], 2, "{sum}");
    let err = sum["failures"][0]["error"].as_str().unwrap();
    assert!(err.contains("permission denied"), "{err}");
    assert!(!s.path("dst/secret.txt").exists());
    // Missing path: exit 1, a clear message.
    let out = pull(
        &s.path("cfg"),
        &[&srv.http_url("/nope/"), s.path("dst3").to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("not found"),
        "{}",
        all_output(&out)
    );
    // Wrong password (in the URL): refused, and the password is printed nowhere.
    write_file(&srv.root().join("private/p.txt"), 10, 4);
    let bad = srv
        .http_url("/private/")
        .replace("http://", &format!("http://{USER}:WrongPw-77@"));
    let out = pull(
        &s.path("cfg"),
        &[&bad, s.path("dst4").to_str().unwrap(), "-v"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("authentication failed"),
        "{}",
        all_output(&out)
    );
    assert!(
        !all_output(&out).contains("WrongPw-77"),
        "{}",
        all_output(&out)
    );
    // The right one, from HAUL_PASSWORD.
    let mut cmd = crate::harness::haul(&s.path("cfg"));
    cmd.env("HAUL_PASSWORD", PASSWORD).args([
        "--json",
        "pull",
        "--user",
        USER,
        &srv.http_url("/private/"),
        s.path("dst5").to_str().unwrap(),
    ]);
    let out = crate::harness::run(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", all_output(&out));
    assert!(s.path("dst5/p.txt").is_file());
}

#[test]
fn http_filters_rename_and_sidecars() {
    let srv = server();
    let tree = srv.root().join("sci");
    write_file(&tree.join("2024/03/sst.nc"), 100, 1);
    write_file(&tree.join("2024/03/notes.txt"), 10, 2);
    write_file(&tree.join("2024/13/bad.nc"), 10, 3);
    write_file(&tree.join("tmp/x.nc"), 10, 4);
    write_file(&tree.join("2024/03/wrong.nc"), 50, 5);
    // A sidecar list: right for sst.nc, wrong for wrong.nc.
    let sha = |p: &std::path::Path| {
        use std::process::Command;
        let o = Command::new("sha256sum").arg(p).output().unwrap();
        String::from_utf8(o.stdout)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    let good = sha(&tree.join("2024/03/sst.nc"));
    std::fs::write(
        tree.join("2024/03/SHA256SUMS"),
        format!("{good}  sst.nc\n{}  wrong.nc\n", "0".repeat(64)),
    )
    .unwrap();
    let s = Scratch::new();
    let dst = s.path("dst");
    let out = pull(
        &s.path("cfg"),
        &[
            &srv.http_url("/sci/"),
            dst.to_str().unwrap(),
            "--dir-struct",
            r"(20[0-9]{2})/(0[1-9]|1[0-2])/.*",
            "--include",
            "*.nc",
            "--rename",
            "{1}-{2}/{stem}.{ext}",
            "--verify-sidecar",
            "--retries",
            "1",
            "--retry-base-ms",
            "50",
        ],
    );
    assert_eq!(out.status.code(), Some(23), "{}", all_output(&out));
    assert!(dst.join("2024-03/sst.nc").is_file(), "{}", all_output(&out));
    assert!(
        !dst.join("2024-03/wrong.nc").exists(),
        "a checksum mismatch is never delivered"
    );
    assert!(!dst.join("2024-03/notes.txt").exists());
    assert!(!dst.join("2024-13").exists() && !dst.join("tmp").exists());
    let sum = summary(&out);
    assert_eq!(sum["files_ok"], 1, "{sum}");
    let err = sum["failures"][0]["error"].as_str().unwrap();
    assert!(err.contains("sha256"), "{err}");
}

/// rsync's `--files-from` over HTTP: only the paths listed arrive, and
/// one the server does not have fails (exit 23) once the crawl was whole.
#[test]
fn http_files_from_takes_the_paths_listed_and_names_the_missing_one() {
    let srv = server();
    let tree = srv.root().join("ff");
    for p in ["a/x.nc", "a/y.nc", "b/deep/z", "c", "skip/me"] {
        write_file(&tree.join(p), 10, p.len() as u64);
    }
    let s = Scratch::new();
    let list = s.path("list");
    // `skip/me` is there, in a directory the crawl is kept out of: not
    // looked for, so not called missing.
    std::fs::write(&list, "a/x.nc\nb\nnot/there\nskip/me\n").unwrap();
    let dst = s.path("dst");
    // Its dry run says so first, as the run will (and fetches nothing).
    let out = pull(
        &s.path("cfg"),
        &[
            &srv.http_url("/ff/"),
            dst.to_str().unwrap(),
            "-n",
            "--files-from",
            list.to_str().unwrap(),
            "--exclude",
            "skip/",
        ],
    );
    assert_eq!(out.status.code(), Some(23), "{}", all_output(&out));
    let said = all_output(&out);
    assert!(said.contains("not/there"), "{said}");
    assert!(!said.contains("skip/me"), "{said}");
    assert!(!dst.exists(), "{said}");
    let out = pull(
        &s.path("cfg"),
        &[
            &srv.http_url("/ff/"),
            dst.to_str().unwrap(),
            "--files-from",
            list.to_str().unwrap(),
            "--exclude",
            "skip/",
        ],
    );
    assert_eq!(out.status.code(), Some(23), "{}", all_output(&out));
    for (p, taken) in [
        ("a/x.nc", true),
        ("a/y.nc", false),
        ("b/deep/z", true),
        ("c", false),
    ] {
        assert_eq!(dst.join(p).exists(), taken, "{p}: {}", all_output(&out));
    }
    let sum = summary(&out);
    assert_eq!(sum["failed"], 1, "{sum}");
    assert_eq!(sum["failures"][0]["path"], "not/there", "{sum}");
}

/// rsync's `-b` for an HTTP pull: what the pull replaces, or `--delete`
/// removes, is kept beside it (and under `--backup-dir`), and a second run
/// deletes no backup.
#[test]
fn http_backup_keeps_what_a_pull_replaces_or_deletes() {
    let srv = server();
    let tree = srv.root().join("bk");
    write_file(&tree.join("a"), 100, 1);
    write_file(&tree.join("sub/b"), 100, 2);
    let s = Scratch::new();
    for (dst, flags) in [
        (s.path("beside"), &["-b", "--delete"][..]),
        (s.path("dir"), &["--backup-dir", "old", "--delete"][..]),
    ] {
        std::fs::create_dir_all(dst.join("sub")).unwrap();
        std::fs::write(dst.join("a"), "old a").unwrap();
        std::fs::write(dst.join("sub/b"), "old b").unwrap();
        std::fs::write(dst.join("gone"), "gone").unwrap();
        let url = srv.http_url("/bk/");
        let mut args = vec![url.as_str(), dst.to_str().unwrap()];
        args.extend_from_slice(flags);
        for _ in 0..2 {
            let out = pull(&s.path("cfg"), &args);
            assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
        }
        assert_eq!(b3(&dst.join("a")), b3(&tree.join("a")));
        assert!(!dst.join("gone").exists());
        let kept = |p: &str| std::fs::read_to_string(dst.join(p)).unwrap();
        if flags[0] == "-b" {
            assert_eq!(
                (kept("a~"), kept("sub/b~"), kept("gone~")),
                ("old a".into(), "old b".into(), "gone".into())
            );
        } else {
            assert_eq!(
                (kept("old/a"), kept("old/sub/b"), kept("old/gone")),
                ("old a".into(), "old b".into(), "gone".into())
            );
        }
    }
}

/// `--max-transfer` on an HTTP pull: rclone's soft cutoff, as for a node
/// (twelve 1 MiB files, a 3 MiB limit, one at a time: a few land, the run
/// says once what is left and exits 8; the next run fetches the rest).
#[test]
fn http_max_transfer_starts_no_download_after_its_limit() {
    let srv = server();
    let tree = srv.root().join("mt");
    for i in 0..12 {
        write_file(&tree.join(format!("f{i:02}")), 1 << 20, i);
    }
    let s = Scratch::new();
    let dst = s.path("dst");
    let url = srv.http_url("/mt/");
    let args = [url.as_str(), dst.to_str().unwrap(), "-j", "1"];
    let mut limited = args.to_vec();
    limited.extend(["--max-transfer", "3M"]);
    let out = pull(&s.path("cfg"), &limited);
    assert_eq!(out.status.code(), Some(8), "{}", all_output(&out));
    let landed = std::fs::read_dir(&dst)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name() != ".haul")
        .count();
    assert!((3..=6).contains(&landed), "{landed} files landed");
    let sum = summary(&out);
    let failures = sum["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "one line for what is left: {failures:?}");
    assert_eq!(failures[0]["kind"], "transfer_limit");
    let out = pull(&s.path("cfg"), &args);
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    assert_eq!(b3(&dst.join("f11")), b3(&tree.join("f11")));
}

#[test]
fn http_checksum_headers_are_verified() {
    let srv = server();
    let s = Scratch::new();
    let dst = s.path("dst");
    let out = pull(
        &s.path("cfg"),
        &[
            &srv.http_url("/checksums/"),
            dst.to_str().unwrap(),
            "--retries",
            "1",
            "--retry-base-ms",
            "50",
        ],
    );
    assert_eq!(out.status.code(), Some(23), "{}", all_output(&out));
    // Content-MD5, Digest and Repr-Digest all match: delivered.
    assert_eq!(std::fs::read(dst.join("hello.txt")).unwrap(), b"hello\n");
    // A body that does not match its Content-MD5 is never delivered.
    assert!(!dst.join("tampered.txt").exists());
    let sum = summary(&out);
    let err = sum["failures"][0]["error"].as_str().unwrap();
    assert!(err.contains("md5") && err.contains("tampered.txt"), "{err}");
}

#[test]
fn http_max_conn_per_host_caps_connections() {
    let srv = server();
    let tree = srv.root().join("many");
    for i in 0..24 {
        write_file(&tree.join(format!("f{i:02}.bin")), 300_000, i);
    }
    let s = Scratch::new();
    let out = pull(
        &s.path("cfg"),
        &[
            &srv.http_url("/many/"),
            s.path("dst").to_str().unwrap(),
            "-j",
            "8",
            "--max-conn-per-host",
            "2",
        ],
    );
    assert!(out.status.success(), "{}", all_output(&out));
    assert_eq!(summary(&out)["files_ok"], 24);
    assert!(
        summary(&out)["connections"].as_u64().unwrap() <= 2,
        "{}",
        summary(&out)
    );
    // nginx saw at most two TCP connections for the whole pull.
    let log = settled_log(&srv);
    let conns: std::collections::BTreeSet<&str> =
        log.lines().filter_map(|l| l.split(' ').next()).collect();
    assert!(conns.len() <= 2, "{} connections: {log}", conns.len());
}

/// A server that streams GET bodies without a length (chunked) but tells
/// the length to HEAD, as some dynamic servers do (nginx cannot be made to):
/// the one-GET read of a new file cannot size it, so haul states the file
/// and reads it again, as it would a file begun before.
#[test]
fn http_streamed_body_without_length_is_stated_first() {
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};

    let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let (served, log) = (body.clone(), seen.clone());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { break };
            let mut head = Vec::new();
            let mut b = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&b[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let line: Vec<&str> = head.lines().next().unwrap_or("").split(' ').collect();
            let (method, path) = (line[0], line.get(1).copied().unwrap_or(""));
            log.lock().unwrap().push(format!("{method} {path}"));
            let date = "Last-Modified: Mon, 02 Nov 2026 10:00:00 GMT";
            let mut out = Vec::new();
            match path {
                "/d/" => {
                    let page = b"<html><body><a href=\"f.bin\">f.bin</a></body></html>";
                    let h = format!("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n", page.len());
                    out.extend_from_slice(h.as_bytes());
                    if method == "GET" {
                        out.extend_from_slice(page);
                    }
                }
                "/d/f.bin" if method == "HEAD" => {
                    let h = format!("HTTP/1.1 200 OK\r\nConnection: close\r\n{date}\r\nContent-Length: {}\r\n\r\n", served.len());
                    out.extend_from_slice(h.as_bytes());
                }
                "/d/f.bin" => {
                    let h = format!("HTTP/1.1 200 OK\r\nConnection: close\r\n{date}\r\nTransfer-Encoding: chunked\r\n\r\n");
                    out.extend_from_slice(h.as_bytes());
                    for piece in served.chunks(30_000) {
                        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                        out.extend_from_slice(piece);
                        out.extend_from_slice(b"\r\n");
                    }
                    out.extend_from_slice(b"0\r\n\r\n");
                }
                _ => out.extend_from_slice(
                    b"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                ),
            }
            let _ = s.write_all(&out);
        }
    });
    let s = Scratch::new();
    let dst = s.path("dst");
    let out = pull(
        &s.path("cfg"),
        &[
            &format!("http://127.0.0.1:{port}/d/"),
            dst.to_str().unwrap(),
            "--retries",
            "1",
        ],
    );
    assert!(out.status.success(), "{}", all_output(&out));
    assert_eq!(std::fs::read(dst.join("f.bin")).unwrap(), body);
    let seen = seen.lock().unwrap().clone();
    let file: Vec<&str> = seen
        .iter()
        .map(String::as_str)
        .filter(|r| r.ends_with("/d/f.bin"))
        .collect();
    assert_eq!(
        file,
        ["GET /d/f.bin", "HEAD /d/f.bin", "GET /d/f.bin"],
        "{seen:?}"
    );
}

#[test]
fn http_mtime_filters_collisions_and_unusable_checksums() {
    let srv = server();
    let tree = srv.root().join("m");
    let old = std::time::UNIX_EPOCH + Duration::from_secs(1_577_934_245); // 2020-01-02T03:04:05Z
    for (name, seed) in [("a/data.nc", 1), ("b/data.nc", 2), ("old.txt", 3)] {
        write_file(&tree.join(name), 100, seed);
        let f = std::fs::File::options()
            .write(true)
            .open(tree.join(name))
            .unwrap();
        f.set_modified(old).unwrap();
    }
    write_file(&tree.join("checked.dat"), 10, 4);
    std::fs::write(tree.join("checked.dat.sha256"), "00\n").unwrap();
    let s = Scratch::new();
    let url = srv.http_url("/m/");

    // The index tells no usable times: --newer-than states each file.
    let out = pull(
        &s.path("cfg"),
        &[
            &url,
            s.path("newer").to_str().unwrap(),
            "--newer-than",
            "2021-01-01",
        ],
    );
    assert!(out.status.success(), "{}", all_output(&out));
    assert!(!s.path("newer/old.txt").exists(), "{}", all_output(&out));
    assert!(s.path("newer/checked.dat").is_file());
    // {mtime} names a file by its own time, not the transfer's.
    let out = pull(
        &s.path("cfg"),
        &[
            &url,
            s.path("named").to_str().unwrap(),
            "--include",
            "old.txt",
            "--rename",
            "{mtime:%Y%m%d-%H%M%S}_{name}",
        ],
    );
    assert!(out.status.success(), "{}", all_output(&out));
    assert!(
        s.path("named/20200102-030405_old.txt").is_file(),
        "{}",
        all_output(&out)
    );

    // Two files renamed onto one name: the second is refused, not written over.
    let out = pull(
        &s.path("cfg"),
        &[
            &url,
            s.path("clash").to_str().unwrap(),
            "--include",
            "*.nc",
            "--rename",
            "{name}",
        ],
    );
    assert_eq!(out.status.code(), Some(23), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("both data.nc"),
        "{}",
        all_output(&out)
    );
    let got = b3(&s.path("clash/data.nc"));
    assert!(got == b3(&tree.join("a/data.nc")) || got == b3(&tree.join("b/data.nc")));
    assert_eq!(summary(&out)["files_ok"], 1);

    // A checksum file made for a file that gives no checksum fails it.
    let out = pull(
        &s.path("cfg"),
        &[
            &url,
            s.path("side").to_str().unwrap(),
            "--include",
            "checked.dat",
            "--verify-sidecar",
        ],
    );
    assert_eq!(out.status.code(), Some(23), "{}", all_output(&out));
    assert!(!s.path("side/checked.dat").exists());
    assert!(
        all_output(&out).contains("gives no sha256 checksum"),
        "{}",
        all_output(&out)
    );
}

/// Issue 18: `--newer-than` takes RFC 3339 offsets (they used to be
/// refused) and refuses dates that do not exist (`2024-02-31` used to be
/// read as 2 March).
#[test]
fn http_newer_than_offsets_and_impossible_dates() {
    let srv = server();
    let tree = srv.root().join("when");
    // 09:00Z is before 12:00+02:00 (= 10:00Z); 11:00Z is after it.
    let base = std::time::UNIX_EPOCH + Duration::from_secs(1_709_251_200); // 2024-03-01T00:00Z
    for (name, hour) in [("nine.txt", 9), ("eleven.txt", 11)] {
        write_file(&tree.join(name), 10, hour);
        std::fs::File::options()
            .write(true)
            .open(tree.join(name))
            .unwrap()
            .set_modified(base + Duration::from_secs(hour * 3600))
            .unwrap();
    }
    let s = Scratch::new();
    let url = srv.http_url("/when/");
    let out = pull(
        &s.path("cfg"),
        &[
            &url,
            s.path("dst").to_str().unwrap(),
            "--newer-than",
            "2024-03-01T12:00:00+02:00",
        ],
    );
    assert!(out.status.success(), "{}", all_output(&out));
    assert!(s.path("dst/eleven.txt").is_file(), "{}", all_output(&out));
    assert!(!s.path("dst/nine.txt").exists(), "{}", all_output(&out));

    let out = pull(
        &s.path("cfg"),
        &[
            &url,
            s.path("dst2").to_str().unwrap(),
            "--newer-than",
            "2024-02-31",
        ],
    );
    assert!(!out.status.success(), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("2024-02-31"),
        "{}",
        all_output(&out)
    );
    assert!(!s.path("dst2/eleven.txt").exists());
}
