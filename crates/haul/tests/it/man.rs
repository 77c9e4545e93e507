//! `haul man`: the page man-db renders without a warning, covering every
//! subcommand, the exit codes and the environment.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::*;

#[test]
fn the_man_page_renders_without_warnings() {
    let s = Scratch::new();
    let mut c = haul(&s.path("config"));
    c.arg("man");
    let page = run(c, Duration::from_secs(30));
    assert_eq!(page.status.code(), Some(0), "{}", stderr(&page));
    let mut man = Command::new("man")
        .args(["--warnings", "-E", "UTF-8", "-l", "-"])
        .env("MANWIDTH", "80")
        .env("MAN_KEEP_FORMATTING", "0")
        .env("PAGER", "cat")
        .env("MANPAGER", "cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("man (apt-get install man-db; scripts/test.sh does)");
    man.stdin.take().unwrap().write_all(&page.stdout).unwrap();
    let out = man.wait_with_output().unwrap();
    let warnings = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{warnings}");
    assert!(warnings.trim().is_empty(), "man -l warned:\n{warnings}");
    let text = plain(&String::from_utf8_lossy(&out.stdout));
    for want in [
        "HAUL PUSH",
        "HAUL PULL",
        "HAUL SERVE",
        "HAUL MAN",
        "--dry-run",
        "--exclude",
        "--bwlimit",
        "EXIT STATUS",
        "HAUL_TOKEN",
        "HAUL_PASSWORD",
        // Each flag's own variable, rendered by clap_mangen's `env`.
        "HAUL_JOBS",
    ] {
        assert!(text.contains(want), "the page lacks {want:?}:\n{text}");
    }
    assert!(
        text.lines().all(|l| l.chars().count() <= 80),
        "a line wider than MANWIDTH=80"
    );
}

/// Text without the overstrikes (`X\bX` bold, `_\bX` underline) that
/// man's formatter writes to a pipe.
fn plain(text: &str) -> String {
    let mut out: Vec<char> = Vec::with_capacity(text.len());
    for c in text.chars() {
        if c == '\u{8}' {
            out.pop();
        } else {
            out.push(c);
        }
    }
    // The letter after a backspace replaced the one before it.
    out.into_iter().collect()
}

/// `haul man | head` and `haul completions bash | head`: a reader that
/// stops early ends the output quietly (exit 0, nothing on stderr), never
/// with a panic or an error.
#[test]
fn a_closed_pipe_ends_man_and_completions_quietly() {
    let s = Scratch::new();
    for args in [&["man"][..], &["completions", "bash"]] {
        let mut c = haul(&s.path("config"));
        let mut child = c
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        // Read nothing: the reader is gone before haul writes.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(out.stderr.is_empty(), "{args:?}: {}", stderr(&out));
    }
}
