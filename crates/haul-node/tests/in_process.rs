//! Driver tests in process: a real [`Server`] over the in-memory transport
//! ([`Dialer::in_process`]), with faults injected into chosen connections
//! ([`FaultPlan`]) — the driver-level twin of `haul-netsim`'s `Sim`. Pools,
//! re-listing, prune and admission are tested here without a socket, a
//! spawned binary or a second of wall time spent waiting for a network.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod test_node;

use std::sync::Arc;
use std::time::Duration;

use haul_node::{Dialer, NodeError};
use haul_proto::{ErrorCode, OriginKey, Request};
use haul_transport::{Direction, Fault};
use test_node::{options, pattern, write, Heard, TestNode, TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_cut_mid_file_resumes_on_a_new_connection() {
    let node = TestNode::start();
    let src = tempfile::tempdir().unwrap();
    let size = 24 << 20;
    let data = pattern(size, 7);
    write(&src.path().join("big.bin"), &data);
    // The first connection is cut when three quarters of the file went out.
    let cut = Fault::cut(Direction::Outbound, (size as u64) * 3 / 4);
    let remote = node.at("in/", [Some(cut)]);
    let heard = Arc::new(Heard::default());
    let sources = [src.path().join("big.bin").display().to_string()];
    let summary = haul_node::push(&sources, &remote, &options(&node, 1), heard.clone())
        .await
        .unwrap();
    assert_eq!(summary.failed, 0, "{summary:?}");
    assert_eq!(std::fs::read(node.file("in/big.bin")).unwrap(), data);
    let warnings = heard.warnings();
    assert!(
        warnings.iter().any(|w| w.contains("connection failed")),
        "the cut was retried: {warnings:?}"
    );
    // Resumed, not begun again: what was received before the cut stays.
    assert!(
        summary.bytes_transferred < (size as u64) * 3 / 2,
        "sent {} bytes for a file of {size}",
        summary.bytes_transferred
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_whose_listing_breaks_lists_again_from_where_it_stopped() {
    let node = TestNode::start();
    let files = 400;
    for i in 0..files {
        write(
            &node.file(&format!("tree/d{}/f{i:04}", i % 7)),
            &pattern(300 + i, i as u8),
        );
    }
    // The listing (the pull's first connection) breaks after a few entries.
    let remote = node.at("tree", [Some(Fault::cut(Direction::Inbound, 4 << 10))]);
    let dest = tempfile::tempdir().unwrap();
    let heard = Arc::new(Heard::default());
    let summary = haul_node::pull(&remote, dest.path(), &options(&node, 2), heard.clone())
        .await
        .unwrap();
    assert_eq!(summary.failed, 0, "{summary:?}");
    assert_eq!(summary.files_ok, files as u64, "{summary:?}");
    for i in 0..files {
        let rel = format!("tree/d{}/f{i:04}", i % 7);
        assert_eq!(
            std::fs::read(dest.path().join(&rel)).unwrap(),
            pattern(300 + i, i as u8),
            "{rel}"
        );
    }
    let warnings = heard.warnings();
    assert!(
        warnings.iter().any(|w| w.contains("listing broke off")),
        "{warnings:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_whose_data_connection_goes_silent_is_taken_up_by_another() {
    let node = TestNode::start();
    let data = pattern(6 << 20, 3);
    write(&node.file("quiet/a.bin"), &data);
    // Connection 1 lists; connection 2 fetches and stalls after 1 MiB: only
    // the idle limit ends it, and the file is taken up again.
    let stall = Fault::stall(Direction::Inbound, 1 << 20);
    let remote = node.at("quiet", [None, Some(stall)]);
    let dest = tempfile::tempdir().unwrap();
    let heard = Arc::new(Heard::default());
    let summary = haul_node::pull(&remote, dest.path(), &options(&node, 1), heard.clone())
        .await
        .unwrap();
    assert_eq!(summary.failed, 0, "{summary:?}");
    assert_eq!(
        std::fs::read(dest.path().join("quiet/a.bin")).unwrap(),
        data
    );
    let warnings = heard.warnings();
    assert!(
        warnings.iter().any(|w| w.contains("connection failed")),
        "{warnings:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_delete_prunes_on_the_node_only_what_the_source_lacks() {
    let node = TestNode::start();
    let src = tempfile::tempdir().unwrap();
    write(&src.path().join("set/keep.txt"), b"keep");
    write(&src.path().join("set/sub/also.txt"), b"also");
    write(&node.file("in/set/stale.txt"), b"stale");
    write(&node.file("in/set/sub/old/deep.txt"), b"deep");
    write(
        &node.file("in/elsewhere.txt"),
        b"not under the source's top",
    );
    let mut opts = options(&node, 1);
    opts.delete = true;
    let sources = [src.path().join("set").display().to_string()];
    let summary = haul_node::push(
        &sources,
        &node.at("in", []),
        &opts,
        Arc::new(Heard::default()),
    )
    .await
    .unwrap();
    assert_eq!(summary.failed, 0, "{summary:?}");
    assert_eq!(summary.deleted, 3, "{summary:?}");
    assert!(node.file("in/set/keep.txt").is_file());
    assert!(node.file("in/set/sub/also.txt").is_file());
    assert!(!node.file("in/set/stale.txt").exists());
    assert!(!node.file("in/set/sub/old").exists());
    assert!(node.file("in/elsewhere.txt").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_delete_deletes_nothing_when_the_push_broke() {
    let node = TestNode::start();
    let src = tempfile::tempdir().unwrap();
    write(&src.path().join("set/a.txt"), &pattern(256 << 10, 1));
    write(&node.file("in/set/stale.txt"), b"stale");
    let mut opts = options(&node, 1);
    opts.delete = true;
    opts.retry.retries = 0;
    // The push's one connection is cut once its Hello went through, with no
    // retry left; every later connection (a prune's listing) would work.
    let remote = node.at("in", [Some(Fault::cut(Direction::Outbound, 4 << 10))]);
    let sources = [src.path().join("set").display().to_string()];
    let heard = Arc::new(Heard::default());
    let outcome = haul_node::push(&sources, &remote, &opts, heard.clone()).await;
    let failed = outcome.as_ref().map_or(true, |s| s.failed > 0);
    assert!(failed, "the cut push must not succeed: {outcome:?}");
    assert!(!node.file("in/set/a.txt").exists());
    assert!(node.file("in/set/stale.txt").is_file());
}

#[tokio::test]
async fn admission_is_refused_for_a_bad_path_or_token() {
    let node = TestNode::start();
    let origin: OriginKey = [7; 32];
    let admit = |dest: &str| Request::Admit {
        dest: dest.into(),
        origin,
        checksum: false,
        backup: None,
    };
    let ok = Dialer::in_process(node.server.clone(), TOKEN, node.timeouts);
    match ok.open(admit("../escape")).await {
        Err(NodeError::Refused { code, .. }) => assert_eq!(code, ErrorCode::BadPath),
        Err(e) => panic!("refused for the wrong reason: {e}"),
        Ok(_) => panic!("a path out of the root was admitted"),
    }
    // A backup directory out of the destination, as a peer may name one.
    let backup_out = Request::Admit {
        dest: "fine".into(),
        origin,
        checksum: false,
        backup: Some(haul_proto::Backup {
            dir: "../up".into(),
            suffix: String::new(),
        }),
    };
    // (The node's decoder refuses it before the request is read: the
    // connection closes.)
    assert!(
        ok.open(backup_out).await.is_err(),
        "a backup directory out of the root was admitted"
    );
    let wrong = Dialer::in_process(node.server.clone(), "not-the-token", node.timeouts);
    match wrong.open(admit("fine")).await {
        Err(NodeError::Refused { code, message }) => {
            assert_eq!(code, ErrorCode::Unauthorized);
            assert!(message.contains("--token"), "says what to do: {message}");
        }
        Err(e) => panic!("refused for the wrong reason: {e}"),
        Ok(_) => panic!("a wrong token was admitted"),
    }
    assert!(ok.open(admit("fine")).await.is_ok());
}

#[tokio::test]
async fn a_node_that_never_answers_the_hello_times_out() {
    let node = TestNode::start();
    // The Hello itself never arrives: the client's wait ends at the
    // handshake limit, not never — for a request whose answer comes first
    // (a listing) and for a session whose first words go with the Hello
    // (a pull's worker).
    for request in [
        Request::List {
            path: "x".into(),
            sums: false,
            keep: Default::default(),
            since: None,
        },
        Request::Fetch {
            keep: Default::default(),
            compress: 0,
            rate_hint: 0,
        },
    ] {
        let remote = node.at("x", [Some(Fault::stall(Direction::Outbound, 0))]);
        let started = std::time::Instant::now();
        // (The Hello cannot be written, or the Welcome never comes.)
        let err = match remote.dialer.open(request).await {
            Ok((mut r, _w)) => r.recv().await.err().map(NodeError::from),
            Err(e) => Some(e),
        }
        .expect("a silent node cannot be reached");
        assert!(
            matches!(err, NodeError::Transport(ref t) if t.is_timeout()),
            "a timeout: {err}"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}

/// A session that speaks first says its first words with `Hello` (v23):
/// the dial returns before the node answered, the node's `Welcome` is
/// taken off the front of what the session reads, and a refusal reaches
/// the session as the message it ends with.
#[tokio::test]
async fn a_sessions_first_words_go_with_the_hello_and_the_answer_is_read_first() {
    let node = TestNode::start();
    let push = || Request::Push {
        dest: "in".into(),
        checksum: false,
        replace_dirs: false,
        skip: Default::default(),
        backup: None,
        rate_hint: 0,
    };
    // The node's answers never come back: a push's dial returns all the
    // same, and its first message is on its way.
    let remote = node.at("in", [Some(Fault::stall(Direction::Inbound, 0))]);
    let (_r, mut w) = tokio::time::timeout(Duration::from_secs(5), remote.dialer.open(push()))
        .await
        .expect("the dial does not wait for Welcome")
        .unwrap();
    w.send(&haul_proto::Message::KeepAlive).await.unwrap();
    // Welcomed: the session's reads start after the Welcome.
    let ok = Dialer::in_process(node.server.clone(), TOKEN, node.timeouts);
    let (mut r, mut w) = ok.open(push()).await.unwrap();
    w.send(&haul_proto::Message::Bye).await.unwrap();
    assert_eq!(r.recv().await.unwrap(), haul_proto::Message::Bye);
    // Refused: the refusal is what the session reads.
    let wrong = Dialer::in_process(node.server.clone(), "not-the-token", node.timeouts);
    let (mut r, _w) = wrong.open(push()).await.unwrap();
    match r.recv().await.unwrap() {
        haul_proto::Message::Refused { code, .. } => assert_eq!(code, ErrorCode::Unauthorized),
        other => panic!("{other:?}"),
    }
    // And a whole push with the wrong token ends as a refusal, exit code
    // and all, not as a protocol error or a file's failure.
    let src = tempfile::tempdir().unwrap();
    let mut sources = Vec::new();
    for name in ["f", "g", "h", "i", "j"] {
        write(&src.path().join(name), b"data");
        sources.push(src.path().join(name).display().to_string());
    }
    let mut opts = options(&node, 4);
    opts.token = "not-the-token".into();
    let at = haul_node::NodePath {
        dialer: Dialer::in_process(node.server.clone(), &opts.token, node.timeouts),
        path: "in/".into(),
    };
    let heard = Arc::new(Heard::default());
    match haul_node::push(&sources, &at, &opts, heard.clone()).await {
        Err(NodeError::Refused { code, .. }) => assert_eq!(code, ErrorCode::Unauthorized),
        other => panic!("{other:?}"),
    }
    assert!(heard.warnings().is_empty(), "{:?}", heard.warnings());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_with_jobs_auto_delivers_everything_within_its_maximum() {
    let node = TestNode::start();
    let src = tempfile::tempdir().unwrap();
    let files: Vec<Vec<u8>> = (0..32).map(|i| pattern(4 << 20, i)).collect();
    for (i, data) in files.iter().enumerate() {
        write(&src.path().join(format!("set/f{i:02}.bin")), data);
    }
    let remote = node.at("in/", []);
    let opts = haul_node::ClientOptions {
        jobs: haul_node::Concurrency::Auto { max: 8 },
        ..options(&node, 1)
    };
    let heard = Arc::new(Heard::default());
    let sources = [src.path().join("set").display().to_string()];
    let summary = haul_node::push(&sources, &remote, &opts, heard.clone())
        .await
        .unwrap();
    assert_eq!(summary.failed, 0, "{summary:?}");
    // The steered pool (haul_run::steer) never passes the maximum. (Over
    // memory the first connection's window takes every file before the
    // others have dialled: connections are opened only for work waiting.)
    assert!((1..=8).contains(&summary.connections), "{summary:?}");
    for (i, data) in files.iter().enumerate() {
        assert_eq!(
            &std::fs::read(node.file(&format!("in/set/f{i:02}.bin"))).unwrap(),
            data
        );
    }
}
