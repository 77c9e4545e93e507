//! Ctrl-C (SIGINT) during a transfer: the bars are cleared, one line says
//! how many files were verified, haul exits 130, and the same command run
//! again moves only the rest (`--json`: an `error` event with `exit_code`
//! 130).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::*;

const T: Duration = Duration::from_secs(60);

/// One file of 12 MiB (three chunks): six seconds at 2 MB/s.
fn source(s: &Scratch) -> u64 {
    write_file(&s.path("src/big"), 12 << 20, 9);
    12 << 20
}

/// The largest staging file on the node: how much of the file arrived.
fn staged(s: &Scratch) -> u64 {
    crate::resume::partial_bytes(&s.path("node"))
}

/// Waits until the node verified and wrote the file's first chunk (and,
/// a moment later, logged it for a resume).
fn first_chunk_staged(s: &Scratch) {
    wait_for(T, "the first chunk staged on the node", || {
        staged(s) >= 4 << 20
    });
    std::thread::sleep(Duration::from_millis(500));
}

fn push_args(s: &Scratch, node: &Node) -> Vec<String> {
    vec![
        "push".into(),
        "--bwlimit".into(),
        "2M".into(),
        s.path("src").display().to_string(),
        node.url("in"),
    ]
}

fn quoted(args: &[String]) -> String {
    args.iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn sigint(pid: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, libc::SIGINT) };
}

/// Waits for `child` to exit, with a deadline.
fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("haul did not exit within {limit:?} of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A terminal's output without escape sequences, cut into lines at
/// carriage returns and newlines.
fn screen_lines(raw: &str) -> Vec<String> {
    let mut text = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC [ params final-byte.
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        text.push(c);
    }
    text.split(['\r', '\n'])
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

/// `interrupted: N of M files verified; ...` → (N, M).
fn counts(line: &str) -> (u64, u64) {
    let rest = line
        .strip_prefix("interrupted: ")
        .and_then(|r| r.strip_suffix(" files verified; run the same command again to resume"))
        .unwrap_or_else(|| panic!("not the interrupt line: {line:?}"));
    let (n, m) = rest.split_once(" of ").expect("N of M");
    (n.parse().expect("N"), m.parse().expect("M"))
}

#[test]
fn ctrl_c_on_a_terminal_prints_one_line_exits_130_and_the_same_command_resumes() {
    let s = Scratch::new();
    let total = source(&s);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let args = push_args(&s, &node);
    let pidfile = s.path("haul.pid");

    // Under a pty (script(1)), as a person runs it; the shell execs haul
    // after writing its pid.
    let line = format!(
        "echo $$ > '{}'; exec {} {}",
        pidfile.display(),
        quoted(&[BIN.to_owned()]),
        quoted(&args)
    );
    let mut c = Command::new("script");
    c.args(["-q", "-e", "-c", &line, "/dev/null"])
        .env("TERM", "xterm-256color")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    without_haul_variables(&mut c);
    c.env("HAUL_CONFIG_DIR", s.path("config"));
    with_test_transport(&mut c);
    let mut child = c.spawn().expect("script(1) from util-linux");
    let mut out = child.stdout.take().expect("stdout");
    let drawn = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut v);
        String::from_utf8_lossy(&v).into_owned()
    });
    wait_for(T, "haul's pid", || {
        std::fs::read_to_string(&pidfile).is_ok_and(|p| p.trim().parse::<i32>().is_ok())
    });
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .expect("pid")
        .trim()
        .parse()
        .expect("pid");
    // The first of its three chunks is verified on the node.
    first_chunk_staged(&s);
    sigint(pid);
    let status = wait_exit(&mut child, T);
    let drawn = drawn.join().expect("output");
    let lines = screen_lines(&drawn);
    assert_eq!(status.code(), Some(130), "{lines:#?}");
    let shown: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("interrupted") || l.contains("error"))
        .collect();
    assert_eq!(shown.len(), 1, "one line, no errors: {lines:#?}");
    // It is the last thing on the screen: the bars were cleared before.
    assert_eq!(lines.last(), Some(shown[0]), "{lines:#?}");
    // The file is not whole yet: none of one verified.
    assert_eq!(counts(shown[0]), (0, 1), "{}", shown[0]);

    // The same command again (with --json to count what it moves): only
    // the rest crosses the network.
    let mut again = haul(&s.path("config"));
    again.args(&args).arg("--json");
    let out = run(again, T);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let sum = summary(&out);
    assert_eq!(sum["files_ok"], 1, "{sum}");
    let moved = sum["bytes_transferred"].as_u64().unwrap_or(u64::MAX);
    assert!(
        moved <= total - (4 << 20),
        "moved {moved} of {total} again: {sum}"
    );
    assert_eq!(listing(&s.path("src")), listing(&s.path("node/in/src")));
}

#[test]
fn ctrl_c_with_json_ends_with_an_error_event_of_exit_code_130() {
    let s = Scratch::new();
    source(&s);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--open"]);
    let mut c = haul(&s.path("config"));
    c.args(push_args(&s, &node))
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    with_test_transport(&mut c);
    let mut child = c.spawn().expect("spawn haul");
    let pid = child.id() as i32;
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    first_chunk_staged(&s);
    sigint(pid);
    let status = wait_exit(&mut child, T);
    reader.join().expect("reader");
    let seen: Vec<String> = rx.try_iter().collect();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    assert_eq!(status.code(), Some(130), "{seen:#?}\n{err}");
    let last: serde_json::Value =
        serde_json::from_str(seen.last().expect("a last line")).expect("JSON");
    assert_eq!(last["event"], "error", "{seen:#?}");
    assert_eq!(last["exit_code"], 130, "{last}");
    assert_eq!(
        counts(last["message"].as_str().unwrap_or_default()),
        (0, 1),
        "{last}"
    );
    assert!(
        !seen.iter().any(|l| l.contains("\"summary\"")),
        "no summary after an interrupt: {seen:#?}"
    );
    assert!(!err.contains("error"), "{err}");
}
