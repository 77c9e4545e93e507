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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_three_relays_delivers_the_same_files_to_every_node() {
    let directory = Arc::new(Directory::default());
    let names = ["node-a:1", "node-b:1", "node-c:1"];
    let nodes: Vec<TestNode> = names
        .iter()
        .map(|n| TestNode::start_in(&directory, n))
        .collect();
    let src = tempfile::tempdir().unwrap();
    let big = pattern(9 << 20, 3);
    write(&src.path().join("set/big.bin"), &big);
    for i in 0..5 {
        write(
            &src.path().join(format!("set/small/{i}.txt")),
            &pattern(1000 + i, i as u8),
        );
    }
    let dests: Vec<NodeUrl> = names
        .iter()
        .map(|n| NodeUrl {
            addr: (*n).to_owned(),
            path: "in/".into(),
        })
        .collect();
    let opts = haul_node::ClientOptions {
        token: TOKEN.into(),
        ..options(&nodes[0], 2)
    };
    let fan = FanoutOptions {
        shape: Shape::Chain,
        rates: vec![None; names.len()],
        reach: directory.clone(),
    };
    let sources = [src.path().join("set").display().to_string()];
    let dataset = Arc::new(Walk::new(&sources, None));
    let heard = Arc::new(Heard::default());
    let summary = haul_node::push_fanout(dataset, &dests, &opts, &fan, heard.clone())
        .await
        .unwrap();
    assert!(summary.all_ok(), "{:#?}", summary.nodes);
    // A chain: the client feeds the first node, each node the next.
    let from: Vec<&str> = summary.nodes.iter().map(|n| n.from.as_str()).collect();
    assert_eq!(from, ["client", "node-a:1", "node-b:1"]);
    for node in &nodes {
        assert_eq!(std::fs::read(node.file("in/set/big.bin")).unwrap(), big);
        for i in 0..5 {
            let got = std::fs::read(node.file(&format!("in/set/small/{i}.txt"))).unwrap();
            assert_eq!(got, pattern(1000 + i, i as u8));
        }
    }
    // The client sent the data once, to the head of the chain (repairs
    // would add to it).
    assert!(
        summary.sent.bytes_transferred < 2 * big.len() as u64,
        "the client sent {} bytes",
        summary.sent.bytes_transferred
    );
}
