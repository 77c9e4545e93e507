//! `haul check SRC DST`: two local trees compared by BLAKE3 without
//! copying. One flipped byte in a 1 GiB tree (size and mtime kept, so a
//! quick check would miss it) is found; exit 0 only when they match.

use std::io::{Seek, SeekFrom, Write};
use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::harness::*;

const T: Duration = Duration::from_secs(300);

/// `(status, path)` of every `check_item` event, sorted.
pub fn items(out: &Output) -> Vec<(String, String)> {
    let mut v: Vec<_> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "check_item")
        .map(|v| {
            (
                v["status"].as_str().unwrap().to_owned(),
                v["path"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn check_finds_one_flipped_byte_in_a_gibibyte() {
    let s = Scratch::new();
    for i in 0..4 {
        write_file(&s.path(&format!("a/run/part{i}.bin")), 256 << 20, i);
    }
    write_file(&s.path("a/run/small/x.txt"), 10, 9);
    // The copy: the same bytes and mtimes, made without haul.
    let status = std::process::Command::new("cp")
        .args(["-a"])
        .arg(s.path("a"))
        .arg(s.path("b"))
        .status()
        .unwrap();
    assert!(status.success());
    let check = |extra: &[&str]| {
        let mut c = haul(&s.path("config"));
        c.args(["--json", "check"])
            .arg(s.path("a/run"))
            .arg(s.path("b/run"))
            .args(extra);
        run(c, T)
    };
    let out = check(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(items(&out).is_empty());

    // One byte flipped deep in part2, its size and mtime put back.
    let victim = s.path("b/run/part2.bin");
    let mtime = std::fs::metadata(&victim).unwrap().modified().unwrap();
    let mut f = std::fs::File::options()
        .read(true)
        .write(true)
        .open(&victim)
        .unwrap();
    f.seek(SeekFrom::Start(200_000_123)).unwrap();
    let mut byte = [0u8; 1];
    std::io::Read::read_exact(&mut f, &mut byte).unwrap();
    f.seek(SeekFrom::Start(200_000_123)).unwrap();
    f.write_all(&[byte[0] ^ 0x01]).unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    write_file(&s.path("b/run/extra.txt"), 5, 10);
    std::fs::remove_file(s.path("b/run/small/x.txt")).unwrap();

    let out = check(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        items(&out),
        [
            ("differs".to_owned(), "part2.bin".to_owned()),
            ("only_in_dst".to_owned(), "extra.txt".to_owned()),
            ("only_in_src".to_owned(), "small/x.txt".to_owned()),
        ]
    );
    // Filters narrow what is compared: without part2 and the small files,
    // what is left matches.
    let out = check(&["--exclude", "part2.bin", "--exclude", "*.txt"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
