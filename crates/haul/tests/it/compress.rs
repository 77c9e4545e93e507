//! `-z`: chunks compressed on the wire with zstd, for a push (the client
//! compresses) and a pull (the node does, asked in `Fetch`), counted by an
//! in-test TCP proxy between them: compressible data crosses in a fraction
//! of its size, random data in about its own, and both arrive byte for byte
//! (real `haul serve` nodes on 127.0.0.1, plaintext so the proxy can count).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::harness::*;
use crate::proxy::{plaintext_node_behind, Faults};

const T: Duration = Duration::from_secs(120);

/// CSV-like lines: what -z is for.
fn csv(path: &std::path::Path, rows: usize) {
    let mut text = String::from("time,station,temp,pressure,flag\n");
    for i in 0..rows {
        text.push_str(&format!(
            "2026-12-05T{:02}:{:02}:{:02}Z,st{:03},{}.{},{},ok\n",
            i / 3600 % 24,
            i / 60 % 60,
            i % 60,
            i % 97,
            10 + i % 17,
            i % 10,
            990 + i % 40
        ));
    }
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn z_sends_compressible_chunks_compressed_and_random_ones_as_they_are() {
    let s = Scratch::new();
    let src = s.path("src");
    csv(&src.join("table.csv"), 200_000); // ~9 MiB: three chunks
    write_file(&src.join("random.bin"), 6 << 20, 7);
    let text = std::fs::metadata(src.join("table.csv")).unwrap().len();
    let (_node, proxy) = plaintext_node_behind(&s, Faults::default());
    let from = format!("{}/", src.display());

    let mut c = haul(&s.path("config"));
    c.args(["push", "--plaintext", "-z", "-j", "1", "--json", &from])
        .arg(proxy.url("in"));
    let out = run(c, T);
    ok(&out);
    for f in ["table.csv", "random.bin"] {
        assert_eq!(
            b3(&s.path(&format!("node/in/{f}"))),
            b3(&src.join(f)),
            "{f}"
        );
    }
    let up = proxy.up_bytes.load(Ordering::Relaxed);
    // The random file as it is, the text in a fraction of its size.
    assert!(up > 6 << 20, "{up}");
    assert!(up < (6 << 20) + text / 4, "{up} bytes for {text} of text");
    // The summary says what went on the wire: the payload the proxy
    // counted (its headers and handshakes aside), less than the data.
    let on_wire = |out: &std::process::Output, counted: u64| {
        let sum = summary(out);
        let wire = sum["bytes_on_wire"].as_u64().expect("bytes_on_wire");
        let data = sum["bytes_transferred"].as_u64().unwrap_or(0);
        assert!(
            wire < data && wire <= counted,
            "{wire} of {data}, {counted} counted"
        );
        assert!(
            counted - wire < 256 << 10,
            "{wire} on the wire, {counted} counted"
        );
    };
    on_wire(&out, up);

    // A pull: the node compresses.
    let down_before = proxy.down_bytes.load(Ordering::Relaxed);
    let mut c = haul(&s.path("config"));
    c.args([
        "pull",
        "--plaintext",
        "--compress",
        "--compress-level",
        "9",
        "--json",
    ])
    .arg(proxy.url("in/"))
    .arg(s.path("back"));
    let out = run(c, T);
    ok(&out);
    for f in ["table.csv", "random.bin"] {
        assert_eq!(b3(&s.path(&format!("back/{f}"))), b3(&src.join(f)), "{f}");
    }
    let down = proxy.down_bytes.load(Ordering::Relaxed) - down_before;
    assert!(down > 6 << 20, "{down}");
    assert!(
        down < (6 << 20) + text / 4,
        "{down} bytes for {text} of text"
    );
    on_wire(&out, down);

    // Without -z, the text crosses whole: the comparison above can fail.
    let up_before = proxy.up_bytes.load(Ordering::Relaxed);
    let mut c = haul(&s.path("config"));
    c.args(["push", "--plaintext", "-j", "1", &from])
        .arg(proxy.url("plain"));
    ok(&run(c, T));
    let plain = proxy.up_bytes.load(Ordering::Relaxed) - up_before;
    assert!(plain > (6 << 20) + text, "{plain}");
}

#[test]
fn z_over_quic_and_through_a_fan_out_arrives_byte_for_byte() {
    let s = Scratch::new();
    let src = s.path("src");
    csv(&src.join("a/table.csv"), 150_000);
    csv(&src.join("small.csv"), 20);
    write_file(&src.join("a/random.bin"), 5 << 20, 3);
    let one = Node::start(&s.path("one"), &s.path("config"), &["--token", "t"]);
    let two = Node::start(&s.path("two"), &s.path("config"), &["--token", "t"]);
    let from = format!("{}/", src.display());
    // Over QUIC (TLS; the default transport), the client compressing...
    let mut c = haul(&s.path("config"));
    c.args(["push", "-z", "--transport", "quic", "--token", "t", &from])
        .arg(one.url("in"));
    ok(&run(c, T));
    // ...and the node compressing what a pull asks for.
    let mut c = haul(&s.path("config"));
    c.args(["pull", "-z", "--transport", "quic", "--token", "t"])
        .arg(format!("{}/", one.url("in")))
        .arg(s.path("back"));
    ok(&run(c, T));
    // A fan-out: the first hop compressed, the relay passing it on.
    let mut c = haul(&s.path("config"));
    c.args(["push", "-z", "--token", "t", &from])
        .arg(one.url("fan"))
        .arg(two.url("fan"));
    ok(&run(c, T));
    for f in ["a/table.csv", "small.csv", "a/random.bin"] {
        let want = b3(&src.join(f));
        for got in ["one/in", "back", "one/fan", "two/fan"] {
            assert_eq!(b3(&s.path(&format!("{got}/{f}"))), want, "{got}/{f}");
        }
    }
}

/// Each hop of a fan-out passes on the compressed frames it received:
/// counted on the wire into the second node (a relay's forward), the text
/// crosses in a fraction of its size there too, though a relay compresses
/// nothing itself (it packs at level 0: without the frames it received,
/// the text would cross whole).
#[test]
fn z_through_a_fan_out_each_relay_forwards_the_frames_it_received() {
    let s = Scratch::new();
    let src = s.path("src");
    csv(&src.join("table.csv"), 200_000);
    write_file(&src.join("random.bin"), 4 << 20, 5);
    let text = std::fs::metadata(src.join("table.csv")).unwrap().len();
    let open = ["--open", "--plaintext"];
    let one = Node::start(
        &s.path("one"),
        &s.path("config"),
        &["--open", "--plaintext", "--status", "127.0.0.1:0"],
    );
    let two = Node::start(&s.path("two"), &s.path("config"), &open);
    let (to_one, to_two) = (
        crate::proxy::Proxy::start(&one.addr, Faults::default()),
        crate::proxy::Proxy::start(&two.addr, Faults::default()),
    );
    let from = format!("{}/", src.display());
    let mut c = haul(&s.path("config"));
    c.args([
        "push",
        "--plaintext",
        "-z",
        "--plan",
        "chain",
        "--json",
        &from,
    ])
    .arg(to_one.url("fan"))
    .arg(to_two.url("fan"));
    let out = run(c, T);
    ok(&out);
    // What the client sent, as it went on the wire (its proxy counted the
    // payload, headers and handshakes too).
    let fanout = crate::remote::events(&out)
        .into_iter()
        .find(|e| e["event"] == "fanout")
        .expect("a fanout event");
    let wire = fanout["sent"]["bytes_on_wire"]
        .as_u64()
        .expect("bytes_on_wire");
    let counted = to_one.up_bytes.load(Ordering::Relaxed);
    assert!(
        wire <= counted && counted - wire < 256 << 10,
        "{wire} of {counted}: {}",
        fanout["sent"]
    );
    for f in ["table.csv", "random.bin"] {
        let want = b3(&src.join(f));
        for node in ["one", "two"] {
            assert_eq!(b3(&s.path(&format!("{node}/fan/{f}"))), want, "{node}/{f}");
        }
    }
    // The relay said so.
    let port = one.status.expect("the node's status address");
    let (_, status) = http_get(port, "/status");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let passed_on = &status["relay_forwards"]["frames_passed_on"];
    assert!(passed_on.as_u64().is_some_and(|n| n > 0), "{status}");
    for (hop, proxy) in [("origin to one", &to_one), ("one to two", &to_two)] {
        let up = proxy.up_bytes.load(Ordering::Relaxed);
        assert!(up > 4 << 20, "{hop}: {up}");
        assert!(
            up < (4 << 20) + text / 4,
            "{hop}: {up} bytes for {text} of text"
        );
    }
}
