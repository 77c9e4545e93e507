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
        srv.requests_matching("continuation-token=") >= 1,
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
    // (moto logs a request after answering it: wait, bounded, for the last lines.)
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while srv.requests_matching("\"GET /bkt/run/") < 1503 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(srv.requests_matching("\"HEAD /bkt/"), 0);
    let gets = srv.requests_matching("\"GET /bkt/run/");
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
    let gets = srv.requests_matching("GET /bkt/run/sub/b.bin");
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
