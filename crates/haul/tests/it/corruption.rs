//! Bytes flipped on the wire: the chunk is fetched again, the file is right.

use std::time::Duration;

use crate::harness::*;
use crate::proxy::{plaintext_node_behind, Faults, Proxy};

const SIZE: u64 = 16 << 20;
const T: Duration = Duration::from_secs(120);

#[test]
fn a_corrupted_pushed_chunk_is_sent_again() {
    let s = Scratch::new();
    write_file(&s.path("src/f"), SIZE, 1);
    let (_node, proxy) = plaintext_node_behind(
        &s,
        Faults {
            flip_up_at: Some(6 << 20),
            ..Faults::default()
        },
    );
    let mut c = haul(&s.path("config"));
    c.args(["push", "--json", "--plaintext", "-j", "1"])
        .arg(s.path("src/f"))
        .arg(proxy.url(""));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sum = summary(&out);
    assert!(
        sum["bytes_transferred"].as_u64().expect("n") >= SIZE + (4 << 20),
        "the bad chunk was re-sent: {sum}"
    );
    assert_eq!(b3(&s.path("node/f")), b3(&s.path("src/f")));
}

#[test]
fn a_corrupted_pulled_chunk_is_fetched_again() {
    let s = Scratch::new();
    write_file(&s.path("node/f"), SIZE, 2);
    let (_node, proxy) = plaintext_node_behind(
        &s,
        Faults {
            flip_down_at: Some(9 << 20),
            ..Faults::default()
        },
    );
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--json", "--plaintext", "-j", "1"])
        .arg(proxy.url("f"))
        .arg(format!("{}/", s.path("dst").display()));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(summary(&out)["bytes_transferred"].as_u64().expect("n") > SIZE);
    assert_eq!(b3(&s.path("dst/f")), b3(&s.path("node/f")));
}

#[test]
fn corruption_under_tls_breaks_the_connection_and_the_retry_resumes() {
    let s = Scratch::new();
    write_file(&s.path("src/f"), SIZE, 3);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let proxy = Proxy::start(
        &node.addr,
        Faults {
            flip_up_at: Some(10 << 20),
            ..Faults::default()
        },
    );
    let mut c = haul(&s.path("config"));
    c.args(["push", "--json", "-j", "1"])
        .arg(s.path("src/f"))
        .arg(proxy.url(""));
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).is_empty() || !stderr(&out).contains("error"),
        "{}",
        stderr(&out)
    );
    assert_eq!(b3(&s.path("node/f")), b3(&s.path("src/f")));
}
