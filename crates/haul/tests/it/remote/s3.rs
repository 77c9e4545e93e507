//! S3-compatible sources (moto).

use std::time::Duration;

use haul_s3::testserver::MotoServer;

use super::{all_output, pull};
use crate::harness::{haul, run, summary, Scratch};

fn moto() -> (tokio::runtime::Runtime, MotoServer) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let srv = rt
        .block_on(MotoServer::start())
        .expect("start moto_server (pip install 'moto[server]')");
    (rt, srv)
}

/// `haul --json pull s3://bkt/run/ DST ARGS` against moto (path-style).
fn pull_bucket(srv: &MotoServer, s: &Scratch, args: &[&str]) -> std::process::Output {
    let mut cmd = haul(&s.path("cfg"));
    cmd.envs(srv.env())
        .args(["--json", "pull", "s3://bkt/run/"])
        .arg(s.path("dst"))
        .args(["--s3-endpoint", &srv.endpoint(), "--s3-path-style"])
        .args(args);
    run(cmd, Duration::from_secs(120))
}

#[test]
fn s3_many_objects_paginate_and_verify() {
    let (rt, srv) = moto();
    rt.block_on(async {
        srv.create_bucket("bkt").await.unwrap();
        for i in 0..1500 {
            srv.put_object(
                "bkt",
                &format!("run/obj-{i:04}.txt"),
                format!("object {i}\n").as_bytes(),
            )
            .await
            .unwrap();
        }
        srv.put_object("bkt", "run/sub dir/ünï.bin", &vec![7u8; 5 << 20])
            .await
            .unwrap();
        srv.put_object("bkt", "run/empty", b"").await.unwrap();
        srv.put_object_with_sha256("bkt", "run/sum.txt", b"checked\n")
            .await
            .unwrap();
    });
    let s = Scratch::new();
    let dst = s.path("dst");
    let out = pull_bucket(&srv, &s, &["-j", "8"]);
    assert!(out.status.success(), "{}", all_output(&out));
    let sum = summary(&out);
    assert_eq!(sum["files_ok"], 1503, "{}", all_output(&out));
    assert!(
        srv.requests_at_least("continuation-token=", 1, Duration::from_secs(10)) >= 1,
        "listing was not paginated"
    );
    assert_eq!(
        std::fs::read(dst.join("obj-0042.txt")).unwrap(),
        b"object 42\n"
    );
    assert_eq!(
        std::fs::read(dst.join("sub dir/ünï.bin")).unwrap(),
        vec![7u8; 5 << 20]
    );
    assert_eq!(std::fs::metadata(dst.join("empty")).unwrap().len(), 0);
    // New objects are fetched with one GET each (its headers describe the
    // object, checksums included): no HEAD.
    let gets = srv.requests_at_least("\"GET /bkt/run/", 1503, Duration::from_secs(10));
    assert_eq!(srv.requests_matching("\"HEAD /bkt/"), 0);
    assert_eq!(gets, 1503);
    // Again: the listing's exact sizes and times show every object is
    // there already, so nothing is asked per object.
    let out = pull_bucket(&srv, &s, &[]);
    assert!(out.status.success(), "{}", all_output(&out));
    assert_eq!(summary(&out)["files_skipped"], 1503, "{}", summary(&out));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(srv.requests_matching("\"HEAD /bkt/"), 0);
    assert_eq!(srv.requests_matching("\"GET /bkt/run/"), gets);
    // Missing prefix: exit 1 with a clear error.
    let out = pull(
        &s.path("cfg"),
        &[
            "s3://bkt/nothing-here",
            s.path("d2").to_str().unwrap(),
            "--s3-endpoint",
            &srv.endpoint(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    assert!(
        all_output(&out).contains("not found"),
        "{}",
        all_output(&out)
    );
    drop(srv);
}

/// Issue 18: a listing whose body ends early, in a well-framed answer (the
/// Content-Length says so: a gateway that cut it), used to read as a
/// complete, shorter listing. It must fail the pull (after the retries),
/// name the listing, and leave every object in place under --delete-source.
#[test]
fn s3_cut_listing_fails_the_pull_and_deletes_nothing() {
    let (rt, srv) = moto();
    rt.block_on(async {
        srv.create_bucket("bkt").await.unwrap();
        for name in ["a.txt", "b.txt", "c.txt"] {
            srv.put_object("bkt", &format!("run/{name}"), name.as_bytes())
                .await
                .unwrap();
        }
    });
    // Ends after the first object: the old parser listed just `a.txt`,
    // fetched it, and deleted it at the source.
    let proxy = CuttingProxy::start(srv.endpoint(), "</Contents>");
    let s = Scratch::new();
    let mut cmd = haul(&s.path("cfg"));
    cmd.envs(srv.env())
        .args(["--json", "pull", "s3://bkt/run/"])
        .arg(s.path("dst"))
        .args(["--s3-endpoint", &proxy.endpoint(), "--s3-path-style"])
        .args(["--delete-source", "--retries", "2", "--retry-base-ms", "10"]);
    let out = run(cmd, Duration::from_secs(60));
    let text = all_output(&out);
    assert_eq!(out.status.code(), Some(23), "{text}");
    assert!(text.contains("cannot list"), "{text}");
    assert!(text.contains("cut short"), "{text}");
    assert!(
        proxy.cut_count() >= 3,
        "the listing was not retried: {text}"
    );
    assert!(!s.path("dst/a.txt").exists(), "{text}");
    assert_eq!(srv.requests_matching("\"DELETE "), 0, "{text}");
    // Through moto directly the same pull works, and deletes the sources
    // (so the DELETE count above could have seen them).
    let out = pull_bucket(&srv, &s, &["--delete-source"]);
    assert!(out.status.success(), "{}", all_output(&out));
    assert_eq!(summary(&out)["files_ok"], 3, "{}", all_output(&out));
    let deletes = srv.requests_at_least("\"DELETE ", 3, Duration::from_secs(10));
    assert_eq!(deletes, 3);
}

/// An HTTP proxy in front of moto that answers each ListObjectsV2 request
/// with the body cut just after the first `cut_after`, and a Content-Length
/// that matches the cut body. One request per connection.
struct CuttingProxy {
    port: u16,
    cuts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl CuttingProxy {
    fn start(upstream: String, cut_after: &'static str) -> Self {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let upstream = upstream.trim_start_matches("http://").to_string();
        let cuts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = cuts.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let (upstream, counter) = (upstream.clone(), counter.clone());
                std::thread::spawn(move || {
                    if let Some(cut) = Self::serve(client, &upstream, cut_after) {
                        if cut {
                            counter.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        CuttingProxy { port, cuts }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn cut_count(&self) -> usize {
        self.cuts.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Forwards one request; `Some(true)` when its answer was cut.
    fn serve(mut client: std::net::TcpStream, upstream: &str, cut_after: &str) -> Option<bool> {
        use std::io::{Read, Write};
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .ok()?;
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            client.read_exact(&mut byte).ok()?;
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let request_line = head.lines().next()?.to_string();
        // haul's S3 requests (GET, HEAD, DELETE) carry no body.
        let mut lines: Vec<&str> = head
            .split("\r\n")
            .filter(|l| !l.to_ascii_lowercase().starts_with("connection:") && !l.is_empty())
            .collect();
        lines.push("Connection: close");
        let forwarded = format!("{}\r\n\r\n", lines.join("\r\n"));
        let mut up = std::net::TcpStream::connect(upstream).ok()?;
        up.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        up.write_all(forwarded.as_bytes()).ok()?;
        let mut answer = Vec::new();
        up.read_to_end(&mut answer).ok()?;
        let split = answer.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        let (resp_head, body) = answer.split_at(split);
        let listing = request_line.starts_with("GET ") && request_line.contains("list-type=2");
        let cut_at = String::from_utf8_lossy(body)
            .find(cut_after)
            .map(|i| i + cut_after.len());
        let (body, cut) = match (listing, cut_at) {
            (true, Some(n)) => (&body[..n], true),
            _ => (body, false),
        };
        let resp_head = String::from_utf8_lossy(resp_head);
        let mut out: Vec<String> = resp_head
            .split("\r\n")
            .filter(|l| {
                let l = l.to_ascii_lowercase();
                let dropped = l.is_empty()
                    || l.starts_with("connection:")
                    || (cut && l.starts_with("content-length:"));
                !dropped
            })
            .map(str::to_string)
            .collect();
        if cut {
            out.push(format!("Content-Length: {}", body.len()));
        }
        out.push("Connection: close".into());
        let mut bytes = format!("{}\r\n\r\n", out.join("\r\n")).into_bytes();
        bytes.extend_from_slice(body);
        client.write_all(&bytes).ok()?;
        Some(cut)
    }
}

/// `haul check s3://... DIR`: compared by the checksums S3 offers (the
/// single-part ETag is the MD5), nothing downloaded; one flipped byte with
/// the size kept is found.
#[test]
fn check_compares_an_s3_prefix_with_a_local_copy_by_its_checksums() {
    let (rt, srv) = moto();
    rt.block_on(async {
        srv.create_bucket("bkt").await.unwrap();
        srv.put_object("bkt", "run/a.txt", b"alpha\n")
            .await
            .unwrap();
        srv.put_object("bkt", "run/sub/b.bin", &vec![3u8; 3 << 20])
            .await
            .unwrap();
    });
    let s = Scratch::new();
    let out = pull_bucket(&srv, &s, &[]);
    assert!(out.status.success(), "{}", all_output(&out));
    let check = || {
        let mut cmd = haul(&s.path("cfg"));
        cmd.envs(srv.env())
            .args(["--json", "check", "s3://bkt/run/"])
            .arg(s.path("dst"))
            .args(["--s3-endpoint", &srv.endpoint(), "--s3-path-style"]);
        run(cmd, Duration::from_secs(60))
    };
    let gets = srv.requests_at_least("GET /bkt/run/sub/b.bin", 1, Duration::from_secs(10));
    assert!(gets > 0, "the pull's GET is in moto's log");
    let out = check();
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(r#""checksums":["md5"]"#), "{text}");
    assert!(text.contains(r#""same":2"#), "{text}");
    let mut bytes = std::fs::read(s.path("dst/sub/b.bin")).unwrap();
    bytes[1_000_000] ^= 1;
    std::fs::write(s.path("dst/sub/b.bin"), &bytes).unwrap();
    let out = check();
    assert_eq!(out.status.code(), Some(1), "{}", all_output(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(r#""path":"sub/b.bin","status":"differs""#),
        "{text}"
    );
    // Nothing was downloaded to compare.
    assert_eq!(srv.requests_matching("GET /bkt/run/sub/b.bin"), gets);
}

/// `--checksum` on an S3 pull: a local copy changed with its size and
/// mtime kept is fetched again (its MD5 differs from the ETag), the others
/// are not; `--delete` then mirrors the prefix (after a clean run only:
/// a failure anywhere deletes nothing), and `-n` shows both first.
#[test]
fn s3_checksum_refetches_only_a_changed_copy_and_delete_mirrors() {
    let (rt, srv) = moto();
    rt.block_on(async {
        srv.create_bucket("bkt").await.unwrap();
        srv.put_object("bkt", "run/a.txt", b"alpha\n")
            .await
            .unwrap();
        srv.put_object("bkt", "run/sub/b.bin", &vec![5u8; 2 << 20])
            .await
            .unwrap();
    });
    let s = Scratch::new();
    let dst = s.path("dst");
    let out = pull_bucket(&srv, &s, &[]);
    assert!(out.status.success(), "{}", all_output(&out));
    // The copy of b.bin changes, its size and mtime kept; DEST holds what
    // the prefix does not.
    let b = dst.join("sub/b.bin");
    let mtime = std::fs::metadata(&b).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&b).unwrap();
    bytes[1_000_000] ^= 1;
    std::fs::write(&b, &bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&b)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    crate::harness::write_file(&dst.join("stale.txt"), 10, 1);
    crate::harness::write_file(&dst.join("sub/old/x.txt"), 10, 2);
    let quick = summary(&pull_bucket(&srv, &s, &[]));
    assert_eq!(
        quick["files_ok"], 0,
        "the quick check cannot see it: {quick}"
    );

    let text = |out: &std::process::Output| String::from_utf8_lossy(&out.stdout).into_owned();
    let out = pull_bucket(&srv, &s, &["-c", "--delete", "-n"]);
    assert!(out.status.success(), "{}", all_output(&out));
    let mut planned: Vec<(String, String)> = text(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "dry_run" && v["action"] != "up_to_date")
        .map(|v| {
            let field = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
            (field("path"), field("action"))
        })
        .collect();
    planned.sort();
    let want = [
        ("stale.txt", "delete"),
        ("sub/b.bin", "send"),
        ("sub/old", "delete"),
        ("sub/old/x.txt", "delete"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(p, a)| (p.to_string(), a.to_string()))
        .collect();
    assert_eq!(planned, want, "{}", text(&out));
    assert!(dst.join("stale.txt").exists() && bytes == std::fs::read(&b).unwrap());

    // A failure (a directory where a.txt goes): nothing deleted.
    std::fs::remove_file(dst.join("a.txt")).unwrap();
    crate::harness::write_file(&dst.join("a.txt/inside"), 1, 3);
    let out = pull_bucket(&srv, &s, &["-c", "--delete"]);
    assert_eq!(out.status.code(), Some(23), "{}", all_output(&out));
    assert!(
        !text(&out).contains(r#""event":"deleted""#),
        "{}",
        text(&out)
    );
    assert!(dst.join("stale.txt").exists());
    std::fs::remove_dir_all(dst.join("a.txt")).unwrap();

    let gets_a = srv.requests_matching("GET /bkt/run/a.txt");
    let out = pull_bucket(&srv, &s, &["-c", "--delete"]);
    assert!(out.status.success(), "{}", all_output(&out));
    let sum = summary(&out);
    assert_eq!(sum["deleted"], 3, "{sum}");
    assert_eq!(std::fs::read(&b).unwrap(), vec![5u8; 2 << 20]);
    assert_eq!(std::fs::read(dst.join("a.txt")).unwrap(), b"alpha\n");
    assert!(!dst.join("stale.txt").exists() && !dst.join("sub/old").exists());
    // a.txt was missing, so fetched once more; nothing else of it.
    let wait = Duration::from_secs(10);
    assert_eq!(
        srv.requests_at_least("GET /bkt/run/a.txt", gets_a + 1, wait),
        gets_a + 1
    );
    // Run again: everything is the same by content, nothing moves.
    let sum = summary(&pull_bucket(&srv, &s, &["-c", "--delete"]));
    assert_eq!(
        (sum["files_ok"].as_u64(), sum["deleted"].as_u64()),
        (Some(0), Some(0)),
        "{sum}"
    );
}
