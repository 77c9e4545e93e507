//! A whole fan-out in process: the client admits three real [`Server`]s
//! over the in-memory transport and the relays forward to one another
//! through the test's [`Directory`] — the plan, the relays' verified
//! forwarding and the nodes' reports, without a socket.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod test_node;

use std::sync::Arc;

use haul_node::dataset::Walk;
use haul_node::{FanoutOptions, NodeUrl};
use haul_plan::Shape;
use test_node::{options, pattern, write, Directory, Heard, TestNode, TOKEN};

/// A node for each of `names`, in one directory.
fn start_nodes(names: &[&str]) -> (Arc<Directory>, Vec<TestNode>) {
    let directory = Arc::new(Directory::default());
    let nodes = names
        .iter()
        .map(|n| TestNode::start_in(&directory, n))
        .collect();
    (directory, nodes)
}

/// Each node's `in/` as the fan-out's destinations, and the client's
/// options for them.
fn dests_and_options(names: &[&str], node: &TestNode) -> (Vec<NodeUrl>, haul_node::ClientOptions) {
    let dests = names
        .iter()
        .map(|n| NodeUrl {
            addr: (*n).to_owned(),
            path: "in/".into(),
        })
        .collect();
    let opts = haul_node::ClientOptions {
        token: TOKEN.into(),
        ..options(node, 2)
    };
    (dests, opts)
}

/// A dataset in a temporary directory: `set/big.bin` and `smalls` small
/// files, of patterns seeded so that a misplaced range shows.
struct Set {
    dir: tempfile::TempDir,
    big: Vec<u8>,
    smalls: usize,
    base: usize,
}

impl Set {
    fn new(big_len: usize, seed: u8, smalls: usize, base: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let big = pattern(big_len, seed);
        write(&dir.path().join("set/big.bin"), &big);
        for i in 0..smalls {
            write(
                &dir.path().join(format!("set/small/{i}.txt")),
                &pattern(base + i, i as u8),
            );
        }
        Self {
            dir,
            big,
            smalls,
            base,
        }
    }

    /// Pushes the set to every one of `names` (in `directory`) as `shape`
    /// plans it; the summary and every event of the run.
    async fn fan_out(
        &self,
        directory: &Arc<Directory>,
        names: &[&str],
        first: &TestNode,
        shape: Shape,
    ) -> (haul_node::FanoutSummary, Arc<Heard>) {
        let (dests, opts) = dests_and_options(names, first);
        let fan = FanoutOptions {
            shape,
            rates: vec![None; names.len()],
            reach: directory.clone(),
        };
        let sources = [self.dir.path().join("set").display().to_string()];
        let dataset = Arc::new(Walk::new(&sources, None));
        let heard = Arc::new(Heard::default());
        let summary = haul_node::push_fanout(dataset, &dests, &opts, &fan, heard.clone())
            .await
            .unwrap();
        (summary, heard)
    }

    /// Every one of `nodes` (named `names`) holds the set under `in/`.
    fn assert_on(&self, nodes: &[TestNode], names: &[&str], summary: &haul_node::FanoutSummary) {
        for (node, name) in nodes.iter().zip(names) {
            assert_eq!(
                std::fs::read(node.file("in/set/big.bin"))
                    .unwrap_or_else(|e| panic!("{name}: {e}: {:#?}", summary.nodes)),
                self.big,
                "{name}"
            );
            for i in 0..self.smalls {
                let got = std::fs::read(node.file(&format!("in/set/small/{i}.txt"))).unwrap();
                assert_eq!(got, pattern(self.base + i, i as u8), "{name}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_three_relays_delivers_the_same_files_to_every_node() {
    let names = ["node-a:1", "node-b:1", "node-c:1"];
    let (directory, nodes) = start_nodes(&names);
    let set = Set::new(9 << 20, 3, 5, 1000);
    let (summary, _) = set
        .fan_out(&directory, &names, &nodes[0], Shape::Chain)
        .await;
    assert!(summary.all_ok(), "{:#?}", summary.nodes);
    // A chain: the client feeds the first node, each node the next.
    let from: Vec<&str> = summary.nodes.iter().map(|n| n.from.as_str()).collect();
    assert_eq!(from, ["client", "node-a:1", "node-b:1"]);
    set.assert_on(&nodes, &names, &summary);
    // The client sent the data once, to the head of the chain (repairs
    // would add to it).
    assert!(
        summary.sent.bytes_transferred < 2 * set.big.len() as u64,
        "the client sent {} bytes",
        summary.sent.bytes_transferred
    );
}

/// A fan-out to `a, b, c, d` in which `b` forges every chunk it relays
/// (bytes and digest rewritten, the origin's seal passed on): the node it
/// relays to refuses the first, names the edge it came over, and the
/// client evicts `b` — its children are fed from elsewhere, `b` waits and
/// is completed by the client once the others are done, and the run names
/// `b` once, as the node that received its data says.
async fn past_a_lying_relay(shape: Shape) -> haul_node::FanoutSummary {
    let directory = Arc::new(Directory::default());
    let names = ["node-a:1", "node-b:1", "node-c:1", "node-d:1"];
    let nodes: Vec<TestNode> = names
        .iter()
        .map(|n| match *n {
            "node-b:1" => TestNode::start_forging_in(&directory, n),
            _ => TestNode::start_in(&directory, n),
        })
        .collect();
    let set = Set::new(6 << 20, 7, 4, 3000);
    let (summary, heard) = set.fan_out(&directory, &names, &nodes[0], shape).await;
    assert!(summary.all_ok(), "{:#?}", summary.nodes);
    // Every node holds the origin's bytes, the liar too.
    set.assert_on(&nodes, &names, &summary);
    // The liar is named, by a node it relayed to; nobody else is.
    let evicted: Vec<&str> = summary.evicted().map(|n| n.url.as_str()).collect();
    assert_eq!(evicted, ["haul://node-b:1/in"], "{:#?}", summary.nodes);
    let e = summary.nodes[1].evicted.as_ref().unwrap();
    assert!(e.chunks + e.entries >= 1, "{e:?}");
    // Nobody receives from it at the end; the client completed it. (In
    // striped trees a stripe its parent finished before the eviction
    // stays that parent's: seen once in 13 CI runs, `node-a:1, client`.)
    for n in &summary.nodes {
        assert!(!n.from.contains("node-b"), "{:#?}", summary.nodes);
    }
    assert!(
        summary.nodes[1].from.split(", ").any(|f| f == "client"),
        "{:#?}",
        summary.nodes
    );
    // One `relay_evicted`, one `node_done` per node.
    let events = heard.events();
    let evictions: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            haul_run::event::Event::RelayEvicted { node, by, .. } => Some((node, by)),
            _ => None,
        })
        .collect();
    assert_eq!(evictions.len(), 1, "{evictions:?}");
    assert_eq!(evictions[0].0, "haul://node-b:1/in");
    assert_eq!(*evictions[0].1, e.by);
    for name in names {
        let url = format!("haul://{name}/in");
        let done = events
            .iter()
            .filter(|e| matches!(e, haul_run::event::Event::NodeDone { node, ok: true, .. } if *node == url))
            .count();
        assert_eq!(done, 1, "node_done of {url}");
    }
    summary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_relay_in_a_chain_is_evicted_and_its_child_fed_by_its_parent() {
    let summary = past_a_lying_relay(Shape::Chain).await;
    assert_eq!(
        summary.nodes[1].evicted.as_ref().unwrap().by,
        "haul://node-c:1/in"
    );
    let from: Vec<&str> = summary.nodes.iter().map(|n| n.from.as_str()).collect();
    assert_eq!(from, ["client", "client", "node-a:1", "node-c:1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_relay_in_striped_trees_is_evicted_from_every_stripe() {
    past_a_lying_relay(Shape::Stripes(2)).await;
}

/// A chain `a → b → c → d` in which the path from `b` to `c` fails after
/// a few chunks while both go on answering the client (a link cut between
/// two live nodes: `b` neither hears `c` nor gets through to it). `c`
/// hears nothing from `b` for two seconds and says so; the client, still
/// hearing `b`, moves `c` to `a` — long before the 30 s idle limit these
/// nodes have — and every node ends with the origin's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_cut_between_two_live_relays_moves_the_child_in_seconds() {
    let directory = Arc::new(Directory::default());
    let names = ["node-a:1", "node-b:1", "node-c:1", "node-d:1"];
    let timeouts = haul_transport::Timeouts {
        idle: std::time::Duration::from_secs(30),
        ..test_node::TIMEOUTS
    };
    let nodes: Vec<TestNode> = names
        .iter()
        .map(|n| {
            let reach: Arc<dyn haul_node::Reach> = match *n {
                "node-b:1" => Arc::new(haul_node::cutting::Cutting::new(
                    directory.clone(),
                    "node-c:1",
                    4,
                )),
                _ => directory.clone(),
            };
            TestNode::start_reaching_in(&directory, n, reach, timeouts)
        })
        .collect();
    let set = Set::new(8 << 20, 11, 4, 5000);
    let started = std::time::Instant::now();
    let (summary, heard) = set
        .fan_out(&directory, &names, &nodes[0], Shape::Chain)
        .await;
    let took = started.elapsed();
    assert!(summary.all_ok(), "{:#?}", summary.nodes);
    set.assert_on(&nodes, &names, &summary);
    // `c` moved to `a`; `d` stayed with `c`; nobody was evicted or failed.
    let from: Vec<&str> = summary.nodes.iter().map(|n| n.from.as_str()).collect();
    assert_eq!(
        from,
        ["client", "node-a:1", "node-a:1", "node-c:1"],
        "{:#?}",
        summary.nodes
    );
    assert_eq!(summary.evicted().count(), 0);
    // Said once, naming both ends.
    let warnings: Vec<String> = heard
        .events()
        .iter()
        .filter_map(|e| match e {
            haul_run::event::Event::Warning { message } => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("haul://node-c:1/in heard nothing from haul://node-b:1/in")
            && warnings[0].contains("fed by haul://node-a:1/in now"),
        "{warnings:?}"
    );
    // In seconds: not the idle limit.
    assert!(took < std::time::Duration::from_secs(15), "took {took:?}");
}

/// `--max-transfer` over a fan-out, in a plan whose client sends to two
/// nodes itself (a tree of two, and two stripes): every node ends with the
/// same files, the first ones of the walk, and the run says it was cut;
/// the next run without the limit completes every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_transfer_cuts_every_node_at_the_same_file() {
    for shape in [Shape::Tree(2), Shape::Stripes(2)] {
        let names = ["node-a:1", "node-b:1", "node-c:1"];
        let (directory, nodes) = start_nodes(&names);
        let src = tempfile::tempdir().unwrap();
        let files = 12;
        for i in 0..files {
            write(
                &src.path().join(format!("set/f{i:02}.bin")),
                &pattern(1 << 20, i as u8),
            );
        }
        let (dests, opts) = dests_and_options(&names, &nodes[0]);
        let fan = FanoutOptions {
            shape,
            rates: vec![None; names.len()],
            reach: directory.clone(),
        };
        let sources = [src.path().join("set").display().to_string()];
        let run = |max_transfer: Option<u64>| {
            let (dests, fan, sources) = (dests.clone(), &fan, sources.clone());
            let mut opts = opts.clone();
            opts.max_transfer = max_transfer;
            // As the binary sets it under the flag: two files ahead.
            opts.window = 2;
            async move {
                let dataset = Arc::new(Walk::new(&sources, None));
                let heard = Arc::new(Heard::default());
                haul_node::push_fanout(dataset, &dests, &opts, fan, heard)
                    .await
                    .unwrap()
            }
        };
        let summary = run(Some(3 << 20)).await;
        assert!(summary.all_ok(), "{shape:?}: {:#?}", summary.nodes);
        let cut: Vec<_> = summary
            .sent
            .failures
            .iter()
            .filter(|f| f.kind == haul_run::FailKind::TransferLimit)
            .collect();
        assert_eq!(cut.len(), 1, "{shape:?}: {:?}", summary.sent.failures);
        let held = |node: &TestNode| -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(node.file("in/set"))
                .map(|d| {
                    d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            names
        };
        let first = held(&nodes[0]);
        assert!(
            !first.is_empty() && first.len() < files,
            "{shape:?}: {first:?}"
        );
        // The first files of the walk, the same on every node.
        let walked: Vec<String> = (0..first.len()).map(|i| format!("f{i:02}.bin")).collect();
        assert_eq!(first, walked, "{shape:?}");
        for node in &nodes[1..] {
            assert_eq!(held(node), first, "{shape:?}");
        }
        // The next run sends the rest.
        let summary = run(None).await;
        assert!(summary.all_ok(), "{shape:?}: {:#?}", summary.nodes);
        for node in &nodes {
            assert_eq!(held(node).len(), files, "{shape:?}");
        }
    }
}

/// `--delete --max-delete N` over a fan-out: the nodes are pruned alike —
/// when one would lose more than N entries, none loses any (and the run
/// says which limit held it back); within the limit, every node is pruned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_delete_prunes_every_node_or_none() {
    let names = ["node-a:1", "node-b:1"];
    let (directory, nodes) = start_nodes(&names);
    let set = Set::new(1 << 20, 5, 2, 100);
    // One extra entry on a, three on b.
    write(&nodes[0].file("in/set/extra0"), b"x");
    for i in 0..3 {
        write(&nodes[1].file(&format!("in/set/extra{i}")), b"x");
    }
    let (dests, opts) = dests_and_options(&names, &nodes[0]);
    let fan = FanoutOptions {
        shape: Shape::Chain,
        rates: vec![None; names.len()],
        reach: directory.clone(),
    };
    let sources = [set.dir.path().join("set").display().to_string()];
    let run = |max_delete: u64| {
        let mut opts = opts.clone();
        opts.delete = true;
        opts.max_delete = Some(max_delete);
        let (dests, fan, sources) = (dests.clone(), &fan, sources.clone());
        async move {
            let dataset = Arc::new(Walk::new(&sources, None));
            let heard = Arc::new(Heard::default());
            haul_node::push_fanout(dataset, &dests, &opts, fan, heard)
                .await
                .unwrap()
        }
    };
    let summary = run(2).await;
    assert!(summary.all_ok(), "{:#?}", summary.nodes);
    assert!(
        summary
            .sent
            .failures
            .iter()
            .any(|f| f.kind == haul_run::FailKind::DeleteLimit),
        "{:?}",
        summary.sent.failures
    );
    assert!(
        nodes[0].file("in/set/extra0").exists(),
        "a was pruned alone"
    );
    assert!(nodes[1].file("in/set/extra2").exists());
    set.assert_on(&nodes, &names, &summary);
    let summary = run(3).await;
    assert!(summary.all_ok(), "{:#?}", summary.nodes);
    assert!(
        summary.sent.failures.is_empty(),
        "{:?}",
        summary.sent.failures
    );
    assert!(!nodes[0].file("in/set/extra0").exists());
    assert!((0..3).all(|i| !nodes[1].file(&format!("in/set/extra{i}")).exists()));
    assert_eq!(summary.nodes.iter().map(|n| n.deleted).sum::<u64>(), 4);
}

/// `-c -b` over a fan-out: a node whose copy matches the source's content
/// receives the file again (another node lacks it) but keeps no backup of
/// it; a node whose copy differs keeps its old copy as the backup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_b_keeps_a_backup_only_of_what_changed() {
    let names = ["node-a:1", "node-b:1", "node-c:1"];
    let (directory, nodes) = start_nodes(&names);
    let set = Set::new(3 << 20, 9, 1, 500);
    // a holds the same big.bin (another mtime), b another content of the
    // same size, c nothing.
    write(&nodes[0].file("in/set/big.bin"), &set.big);
    write(&nodes[1].file("in/set/big.bin"), &pattern(3 << 20, 10));
    let (dests, mut opts) = dests_and_options(&names, &nodes[0]);
    opts.checksum = true;
    opts.backup = Some(haul_proto::Backup {
        dir: String::new(),
        suffix: "~".into(),
    });
    let fan = FanoutOptions {
        shape: Shape::Chain,
        rates: vec![None; names.len()],
        reach: directory.clone(),
    };
    let sources = [set.dir.path().join("set").display().to_string()];
    let dataset = Arc::new(Walk::new(&sources, None));
    let heard = Arc::new(Heard::default());
    let summary = haul_node::push_fanout(dataset, &dests, &opts, &fan, heard)
        .await
        .unwrap();
    assert!(summary.all_ok(), "{:#?}", summary.nodes);
    set.assert_on(&nodes, &names, &summary);
    assert!(
        !nodes[0].file("in/set/big.bin~").exists(),
        "a backup of the same content"
    );
    assert_eq!(
        std::fs::read(nodes[1].file("in/set/big.bin~")).unwrap(),
        pattern(3 << 20, 10)
    );
    assert!(!nodes[2].file("in/set/big.bin~").exists());
}

/// `-c` over a fan-out: a file every node holds with the source's content
/// is not sent, and each node whose copy has another mtime or mode brings
/// it in line, as `haul push -c` does (the client offers each the content
/// it listed; no data moves for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_brings_what_every_node_holds_in_line() {
    use std::os::unix::fs::PermissionsExt;
    let names = ["node-a:1", "node-b:1"];
    let (directory, nodes) = start_nodes(&names);
    let set = Set::new(3 << 20, 9, 2, 500);
    let big = set.dir.path().join("set/big.bin");
    let past = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
    let set_mtime = |p: &std::path::Path, t| {
        let f = std::fs::File::options().write(true).open(p).unwrap();
        f.set_modified(t).unwrap();
    };
    set_mtime(&big, past);
    // a holds big.bin with another mtime, b with another mode.
    let (at_a, at_b) = (
        nodes[0].file("in/set/big.bin"),
        nodes[1].file("in/set/big.bin"),
    );
    write(&at_a, &set.big);
    set_mtime(&at_a, past - std::time::Duration::from_secs(60));
    write(&at_b, &set.big);
    set_mtime(&at_b, past);
    std::fs::set_permissions(&at_b, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (dests, mut opts) = dests_and_options(&names, &nodes[0]);
    opts.checksum = true;
    let fan = FanoutOptions {
        shape: Shape::Chain,
        rates: vec![None; names.len()],
        reach: directory.clone(),
    };
    let sources = [set.dir.path().join("set").display().to_string()];
    let dataset = Arc::new(Walk::new(&sources, None));
    let heard = Arc::new(Heard::default());
    let summary = haul_node::push_fanout(dataset, &dests, &opts, &fan, heard.clone())
        .await
        .unwrap();
    assert!(summary.all_ok(), "{:#?}", summary.nodes);
    set.assert_on(&nodes, &names, &summary);
    // Each node is announced done once its copy was brought in line (the
    // pass's -i lines come first), and big.bin was counted once.
    let events = heard.events();
    let last_change = events
        .iter()
        .rposition(|e| matches!(e, haul_run::event::Event::Itemized { .. }))
        .expect("the in-line pass says what it set");
    let first_done = events
        .iter()
        .position(|e| matches!(e, haul_run::event::Event::NodeDone { .. }))
        .expect("node_done");
    assert!(first_done > last_change, "{events:#?}");
    let big_done = events
        .iter()
        .filter(|e| matches!(e, haul_run::event::Event::FileDone { path, .. } if path.ends_with("big.bin")))
        .count();
    assert_eq!(big_done, 1, "{events:#?}");
    let meta = |p: &std::path::Path| std::fs::metadata(p).unwrap();
    let want = meta(&big);
    for at in [&at_a, &at_b] {
        let got = meta(at);
        assert_eq!(got.modified().unwrap(), past, "{}", at.display());
        assert_eq!(
            got.permissions().mode() & 0o7777,
            want.permissions().mode() & 0o7777,
            "{}",
            at.display()
        );
    }
    assert!(
        summary.sent.bytes_transferred < 1 << 20,
        "big.bin was sent: {:?}",
        summary.sent
    );
}

/// A fan-out whose every file is gone by the time it is read (a daemon's
/// acquired files removed meanwhile) ends, each file failed once, in
/// bounded time: there is nothing to relay and nothing to wait for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_whose_files_all_vanished_ends() {
    let names = ["node-a:1", "node-b:1"];
    let (directory, nodes) = start_nodes(&names);
    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(src.path().join("d")).unwrap();
    let (dests, opts) = dests_and_options(&names, &nodes[0]);
    let fan = FanoutOptions {
        shape: Shape::Chain,
        rates: vec![None; names.len()],
        reach: directory.clone(),
    };
    let files = vec!["d/gone1".to_owned(), "d/gone2".to_owned()];
    let dataset = Arc::new(haul_node::dataset::Chosen::new(
        src.path().to_owned(),
        files,
    ));
    let heard = Arc::new(Heard::default());
    let run = haul_node::push_fanout(dataset, &dests, &opts, &fan, heard);
    let summary = tokio::time::timeout(std::time::Duration::from_secs(20), run)
        .await
        .expect("the fan-out ended")
        .unwrap();
    assert_eq!(summary.sent.failed, 2, "{:?}", summary.sent.failures);
}

/// `--ignore-existing` and `--size-only` over a fan-out: each node keeps
/// what the rule keeps there, and gets what it lacks, even when the node
/// it is relayed from keeps a version of its own (the client sends it
/// that file itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_rules_keep_each_nodes_own_version_and_fill_in_the_rest() {
    for rule in ["ignore-existing", "size-only"] {
        let names = ["node-a:1", "node-b:1", "node-c:1"];
        let (directory, nodes) = start_nodes(&names);
        let src = tempfile::tempdir().unwrap();
        let (f, g, h) = (pattern(2 << 20, 1), pattern(1 << 20, 2), pattern(5000, 3));
        write(&src.path().join("set/f"), &f);
        write(&src.path().join("set/g"), &g);
        write(&src.path().join("set/h"), &h);
        // -H too: a second name of g, linked on every node afterwards (a
        // node's fill-in carries no links).
        std::fs::hard_link(src.path().join("set/g"), src.path().join("set/g2")).unwrap();
        // a (the head of the chain) and c hold f of their own (the same
        // size, other bytes and mtime); b lacks it. Every node holds h of
        // its own, the same size.
        let own_f = pattern(2 << 20, 40);
        for i in [0, 2] {
            write(&nodes[i].file("in/set/f"), &own_f);
        }
        for node in &nodes {
            write(&node.file("in/set/h"), &pattern(5000, 50));
        }
        let (dests, mut opts) = dests_and_options(&names, &nodes[0]);
        opts.skip = match rule {
            "ignore-existing" => haul_proto::SkipRule {
                ignore_existing: true,
                ..Default::default()
            },
            _ => haul_proto::SkipRule {
                size_only: true,
                ..Default::default()
            },
        };
        opts.keep.hard_links = true;
        let fan = FanoutOptions {
            shape: Shape::Chain,
            rates: vec![None; names.len()],
            reach: directory.clone(),
        };
        let sources = [src.path().join("set").display().to_string()];
        let dataset = Arc::new(Walk::new(&sources, None).keeping(opts.keep));
        let heard = Arc::new(Heard::default());
        let summary = haul_node::push_fanout(dataset, &dests, &opts, &fan, heard)
            .await
            .unwrap();
        assert!(summary.all_ok(), "{rule}: {:#?}", summary.nodes);
        for node in &nodes {
            use std::os::unix::fs::MetadataExt;
            let ino = |n: &str| {
                std::fs::metadata(node.file(&format!("in/set/{n}")))
                    .unwrap()
                    .ino()
            };
            assert_eq!(ino("g"), ino("g2"), "{rule}: g2 a link of g");
        }
        let read =
            |i: usize, name: &str| std::fs::read(nodes[i].file(&format!("in/set/{name}"))).unwrap();
        assert_eq!(read(0, "f"), own_f, "{rule}: a keeps its f");
        assert_eq!(read(1, "f"), f, "{rule}: b gets f, though a keeps its own");
        assert_eq!(read(2, "f"), own_f, "{rule}: c keeps its f");
        for i in 0..3 {
            assert_eq!(read(i, "g"), g, "{rule}");
            assert_eq!(read(i, "h"), pattern(5000, 50), "{rule}");
        }
    }
}

/// The client's reach when some nodes' ports cannot be reached from it
/// (every connection to them is cut at once), though their other way —
/// their "ssh channel", here the in-memory transport — can.
#[derive(Debug)]
struct Walled {
    directory: Arc<Directory>,
    walled: Vec<&'static str>,
    /// Their other way is cut too.
    shut: bool,
}

/// A dialer to `addr` in `directory` whose every connection is cut at once.
fn cut_off(
    directory: &Directory,
    addr: &str,
    opts: &haul_node::ClientOptions,
) -> haul_node::Dialer {
    let cut = haul_transport::Fault::cut(haul_transport::Direction::Outbound, 0);
    haul_node::Dialer::with_faults(
        directory.server(addr),
        &opts.token,
        opts.timeouts,
        haul_transport::FaultPlan::new(std::iter::repeat_n(Some(cut), 1000)),
    )
}

impl haul_node::Reach for Walled {
    fn dialer(&self, addr: &str, opts: &haul_node::ClientOptions) -> haul_node::Dialer {
        if !self.walled.contains(&addr) {
            return self.directory.dialer(addr, opts);
        }
        cut_off(&self.directory, addr, opts)
    }

    fn channel(
        &self,
        addr: &str,
        opts: &haul_node::ClientOptions,
    ) -> Option<haul_node::Channelled> {
        let dialer = match self.shut {
            true => cut_off(&self.directory, addr, opts),
            false => haul_node::Dialer::in_process(
                self.directory.server(addr),
                &opts.token,
                opts.timeouts,
            ),
        };
        Some(haul_node::Channelled {
            dialer,
            wait: std::time::Duration::from_secs(1),
        })
    }
}

/// A fan-out to `names` (`walled` among them) with `--delete`.
async fn past_a_wall(
    set: &Set,
    directory: &Arc<Directory>,
    names: &[&str],
    walled: Vec<&'static str>,
    shut: bool,
    first: &TestNode,
) -> haul_node::FanoutSummary {
    let (dests, mut opts) = dests_and_options(names, first);
    opts.delete = true;
    let fan = FanoutOptions {
        shape: Shape::Chain,
        rates: vec![None; names.len()],
        reach: Arc::new(Walled {
            directory: directory.clone(),
            walled,
            shut,
        }),
    };
    let sources = [set.dir.path().join("set").display().to_string()];
    let dataset = Arc::new(Walk::new(&sources, None));
    haul_node::push_fanout(dataset, &dests, &opts, &fan, Arc::new(Heard::default()))
        .await
        .unwrap()
}

/// A node whose port the client cannot reach is fed through its other way
/// by a push of its own (its `--delete` too), never relays, and holds
/// nobody else back; with every node walled, each is fed that way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_the_client_cannot_reach_is_fed_through_its_channel() {
    let names = ["node-a:1", "node-w:1", "node-c:1"];
    let (directory, nodes) = start_nodes(&names);
    let set = Set::new(2 << 20, 6, 3, 300);
    for node in &nodes {
        write(&node.file("in/set/stale"), b"x");
    }
    let summary = past_a_wall(&set, &directory, &names, vec!["node-w:1"], false, &nodes[0]).await;
    assert!(summary.all_ok(), "{:#?}", summary.nodes);
    set.assert_on(&nodes, &names, &summary);
    let from: Vec<&str> = summary.nodes.iter().map(|n| n.from.as_str()).collect();
    assert_eq!(from, ["client", "client (ssh channel)", "node-a:1"]);
    assert!(nodes.iter().all(|n| !n.file("in/set/stale").exists()));
    assert_eq!(summary.nodes.iter().map(|n| n.deleted).sum::<u64>(), 3);
    // One copy to the chain; the walled node's own is in its report.
    let once = set.big.len() as u64;
    let sent = summary.sent.bytes_transferred;
    assert!(sent >= once && sent < 2 * once, "sent {sent}");
    assert!(summary.nodes[1].bytes >= once, "{:#?}", summary.nodes);
    // Every node walled: each fed through its channel, nothing relayed.
    let set = Set::new(1 << 20, 7, 2, 200);
    let walled = vec!["node-a:1", "node-w:1", "node-c:1"];
    let summary = past_a_wall(&set, &directory, &names, walled, false, &nodes[0]).await;
    assert!(summary.all_ok(), "{:#?}", summary.nodes);
    set.assert_on(&nodes, &names, &summary);
    assert!(summary
        .nodes
        .iter()
        .all(|n| n.from == "client (ssh channel)"));
}

/// A node fed through its channel that fails there is said in its report,
/// and keeps every other node from pruning (they stay alike).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_fails_through_its_channel_keeps_the_others_from_pruning() {
    let names = ["node-a:1", "node-w:1"];
    let (directory, nodes) = start_nodes(&names);
    let set = Set::new(1 << 20, 8, 2, 100);
    write(&nodes[0].file("in/set/stale"), b"x");
    let summary = past_a_wall(&set, &directory, &names, vec!["node-w:1"], true, &nodes[0]).await;
    assert!(!summary.all_ok(), "{:#?}", summary.nodes);
    assert!(summary.nodes[0].ok, "{:#?}", summary.nodes);
    set.assert_on(&nodes[..1], &names[..1], &summary);
    let w = &summary.nodes[1];
    assert!(
        !w.ok && w.error.contains("through its ssh channel"),
        "{w:#?}"
    );
    assert!(nodes[0].file("in/set/stale").exists(), "a was pruned alone");
}
