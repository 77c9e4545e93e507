//! A dry run and the real run agree on every entry — one table of cases,
//! three locations: a push to a node, a pull from a node (both in process,
//! `Dialer::in_process`) and a local copy. What the dry run says would be
//! sent, skipped as up to date, made or deleted is what the run then does,
//! with the quick check and with each of rsync's skip rules.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod test_node;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use haul_node::ClientOptions;
use haul_proto::SkipRule;
use haul_session::{DryRunAction, Event};
use test_node::{options, Heard, TestNode};

/// What happened (or would) to each path, in the dry run's words.
type Actions = BTreeMap<String, DryRunAction>;

/// What the dry run said it would do.
fn dry_run(heard: &Heard) -> Actions {
    let all = heard.events();
    all.iter()
        .filter_map(|e| match e {
            Event::DryRun { path, action, .. } => Some((path.clone(), *action)),
            _ => None,
        })
        .collect()
}

/// The real run's events as the dry run would have named them.
fn real_run(heard: &Heard) -> Actions {
    let all = heard.events();
    let mut out = Actions::new();
    for e in all.iter() {
        let (path, action) = match e {
            Event::FileDone {
                path,
                skipped: true,
                ..
            } => (path, DryRunAction::UpToDate),
            Event::FileDone { path, blake3, .. } if !blake3.is_empty() => {
                (path, DryRunAction::Send)
            }
            Event::FileDone { path, .. } => (path, DryRunAction::Make),
            Event::Deleted { path, .. } => (path, DryRunAction::Delete),
            Event::FileError { path, error, .. } => panic!("{path}: {error}"),
            _ => continue,
        };
        out.insert(path.clone(), action);
    }
    out
}

fn write(path: &Path, bytes: &[u8], mtime: SystemTime) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(mtime).unwrap();
}

/// The table: a source tree `set/` and what DEST already holds under
/// `set/`, with the action each path must get.
fn lay_out(src: &Path, dest: &Path) {
    let t = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
    let later = t + Duration::from_nanos(1);
    // Only at the source: sent.
    write(&src.join("set/new.txt"), b"new", t);
    // The same size and mtime on both sides: up to date.
    write(&src.join("set/same.txt"), b"same", t);
    write(&dest.join("set/same.txt"), b"same", t);
    // A different size: sent.
    write(&src.join("set/grown.txt"), b"grown!", t);
    write(&dest.join("set/grown.txt"), b"grown", t);
    // The same size, an mtime one nanosecond apart: sent.
    write(&src.join("set/touched.txt"), b"touch", later);
    write(&dest.join("set/touched.txt"), b"touch", t);
    // A directory only at the source: made, with what is in it.
    write(&src.join("set/sub/inner.txt"), b"inner", t);
    // A symlink only at the source: made.
    std::os::unix::fs::symlink("same.txt", src.join("set/link")).unwrap();
    // Only at DEST: deleted (with --delete).
    write(&dest.join("set/stale.txt"), b"stale", t);
}

/// rsync's rules besides the quick check (`SkipRule::default()`).
fn skip_rules() -> [SkipRule; 3] {
    let none = SkipRule::default();
    [
        SkipRule {
            ignore_existing: true,
            ..none
        },
        SkipRule {
            size_only: true,
            ..none
        },
        SkipRule {
            update: true,
            ..none
        },
    ]
}

fn expected(rule: SkipRule) -> Actions {
    use DryRunAction::*;
    // `--ignore-existing` keeps every file DEST has; `--size-only` the
    // one of the same size; `-u` none here (DEST is never newer).
    let kept = |p: &str| {
        (rule.ignore_existing && matches!(p, "set/grown.txt" | "set/touched.txt"))
            || (rule.size_only && p == "set/touched.txt")
    };
    [
        ("set/new.txt", Send),
        ("set/same.txt", UpToDate),
        ("set/grown.txt", Send),
        ("set/touched.txt", Send),
        ("set/sub", Make),
        ("set/sub/inner.txt", Send),
        ("set/link", Make),
        ("set/stale.txt", Delete),
    ]
    .into_iter()
    .map(|(p, a)| (p.to_owned(), if kept(p) { UpToDate } else { a }))
    .collect()
}

/// The dry run's actions match the table, and the real run's match those
/// (a real run also names `set` itself, which already exists: left out).
fn assert_agree(dry: &Heard, real: &Heard, rule: SkipRule) {
    let said = dry_run(dry);
    assert_eq!(said, expected(rule), "the dry run, {rule:?}");
    let mut done = real_run(real);
    done.remove("set");
    assert_eq!(done, said, "the real run did what the dry run said");
}

fn with_delete(node: &TestNode, skip: SkipRule) -> ClientOptions {
    ClientOptions {
        delete: true,
        skip,
        ..options(node, 1)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_to_a_node() {
    for rule in [SkipRule::default()].into_iter().chain(skip_rules()) {
        push_case(rule).await;
    }
}

async fn push_case(rule: SkipRule) {
    let (src, node) = (tempfile::tempdir().unwrap(), TestNode::start());
    lay_out(src.path(), &node.file("in"));
    let remote = node.at("in", []);
    let opts = with_delete(&node, rule);
    let sources = [src.path().join("set").display().to_string()];
    let (dry, real) = (Arc::new(Heard::default()), Arc::new(Heard::default()));
    haul_node::dry_run_push(&sources, &remote, &opts, true, dry.clone())
        .await
        .unwrap();
    haul_node::push(&sources, &remote, &opts, real.clone())
        .await
        .unwrap();
    assert_agree(&dry, &real, rule);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_from_a_node() {
    for rule in [SkipRule::default()].into_iter().chain(skip_rules()) {
        pull_case(rule).await;
    }
}

async fn pull_case(rule: SkipRule) {
    let (node, dest) = (TestNode::start(), tempfile::tempdir().unwrap());
    lay_out(&node.root, dest.path());
    let remote = node.at("set", []);
    let opts = with_delete(&node, rule);
    let (dry, real) = (Arc::new(Heard::default()), Arc::new(Heard::default()));
    haul_node::dry_run_pull(&remote, dest.path(), &opts, true, dry.clone())
        .await
        .unwrap();
    haul_node::pull(&remote, dest.path(), &opts, real.clone())
        .await
        .unwrap();
    assert_agree(&dry, &real, rule);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_copy() {
    for rule in [SkipRule::default()].into_iter().chain(skip_rules()) {
        local_case(rule).await;
    }
}

async fn local_case(rule: SkipRule) {
    let (src, dest) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    lay_out(src.path(), dest.path());
    let opts = with_delete(&TestNode::start(), rule);
    let sources = [src.path().join("set").display().to_string()];
    let (dry, real) = (Arc::new(Heard::default()), Arc::new(Heard::default()));
    haul_node::dry_run_local(&sources, dest.path(), &opts, true, dry.clone()).unwrap();
    haul_node::copy_local(&sources, dest.path(), &opts, real.clone())
        .await
        .unwrap();
    assert_agree(&dry, &real, rule);
}
