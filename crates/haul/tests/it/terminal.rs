//! Progress on a real terminal: haul run under a pseudo-terminal
//! (`script(1)` from util-linux allocates it) draws bars with a rate and an
//! ETA; with pipes instead, no bar, no colour, no carriage return.

use std::process::Command;
use std::time::Duration;

use crate::harness::*;

const T: Duration = Duration::from_secs(60);

/// A local copy of 12 MiB at 6 MiB/s: two seconds of bars.
fn copy_args(s: &Scratch, dst: &str) -> Vec<String> {
    vec![
        BIN.to_owned(),
        "pull".into(),
        s.path("src").display().to_string(),
        s.path(dst).display().to_string(),
        "--bwlimit".into(),
        "6M".into(),
    ]
}

fn quoted(args: &[String]) -> String {
    args.iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn bars_with_rate_and_eta_on_a_terminal_and_none_on_pipes() {
    let s = Scratch::new();
    write_file(&s.path("src/big.bin"), 12 << 20, 1);

    // Under a pty: stdout and stderr are the terminal script(1) made.
    let mut c = Command::new("script");
    c.args([
        "-q",
        "-e",
        "-c",
        &quoted(&copy_args(&s, "tty")),
        "/dev/null",
    ])
    .env("TERM", "xterm-256color")
    .env("HAUL_CONFIG_DIR", s.path("config"));
    let out = run(c, T);
    let drawn = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "script(1) from util-linux: {drawn}"
    );
    assert!(drawn.contains("total ["), "no bar drawn: {drawn:?}");
    assert!(drawn.contains("ETA"), "no ETA: {drawn:?}");
    assert!(drawn.contains("MiB/s"), "no rate: {drawn:?}");
    assert!(
        drawn.contains('\r') || drawn.contains("\x1b["),
        "nothing redrawn: {drawn:?}"
    );
    assert_eq!(b3(&s.path("src/big.bin")), b3(&s.path("tty/src/big.bin")));

    // Pipes: the summary only.
    let mut c = haul(&s.path("config"));
    c.args(&copy_args(&s, "piped")[1..]);
    let out = run(c, T);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(!all.contains('\r') && !all.contains('\x1b'), "{all:?}");
    assert!(!all.contains("ETA") && !all.contains("total ["), "{all:?}");
    assert!(all.contains("ok: 1 file"), "{all:?}");
}
