//! How a transfer shows itself: progress bars on a TTY, JSON lines for
//! scripts, nothing with `-q`.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;

use haul_node::Summary;
use haul_session::{Event, Observer};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Output mode chosen from the flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Bars and a human summary.
    Human,
    /// One JSON object per line on stdout.
    Json,
    /// Errors only.
    Quiet,
}

/// Prints one JSON line.
pub fn json_line(value: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, value);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// Observer for the chosen mode.
pub struct Display {
    mode: Mode,
    bars: Option<Bars>,
    /// `--json`: bytes moved so far, and when progress was last printed.
    json_progress: Mutex<JsonProgress>,
}

/// `--json` progress: one `progress` line at most every [`JSON_PROGRESS_EVERY`].
struct JsonProgress {
    started: std::time::Instant,
    last: std::time::Instant,
    bytes: u64,
}

/// How often `--json` prints a `progress` line while bytes move.
const JSON_PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

struct Bars {
    multi: MultiProgress,
    total: ProgressBar,
    files: Mutex<HashMap<String, ProgressBar>>,
    /// Fan-out: one bar per destination.
    nodes: Mutex<HashMap<String, ProgressBar>>,
}

impl Display {
    /// A display for `mode`; bars only when stderr is a terminal.
    pub fn new(mode: Mode) -> Self {
        let bars = (mode == Mode::Human && std::io::stderr().is_terminal()).then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let total = multi.add(ProgressBar::new(0));
            total.set_style(
                ProgressStyle::with_template(
                    "{prefix:>5} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}  {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            total.set_prefix("total");
            Bars {
                multi,
                total,
                files: Mutex::new(HashMap::new()),
                nodes: Mutex::new(HashMap::new()),
            }
        });
        let now = std::time::Instant::now();
        Self {
            mode,
            bars,
            json_progress: Mutex::new(JsonProgress {
                started: now,
                last: now,
                bytes: 0,
            }),
        }
    }

    /// `--json`: counts `bytes` and prints a `progress` line when one is due
    /// (bytes so far, seconds since the start, the rate).
    fn json_progress(&self, bytes: u64) {
        let Ok(mut p) = self.json_progress.lock() else {
            return;
        };
        p.bytes += bytes;
        let now = std::time::Instant::now();
        if now.duration_since(p.last) < JSON_PROGRESS_EVERY {
            return;
        }
        p.last = now;
        let secs = now.duration_since(p.started).as_secs_f64();
        json_line(&serde_json::json!({
            "event": "progress",
            "bytes": p.bytes,
            "seconds": (secs * 1000.0).round() / 1000.0,
            "bytes_per_second": (p.bytes as f64 / secs.max(1e-3)).round(),
        }));
    }

    /// Clears the bars.
    pub fn finish(&self) {
        if let Some(b) = &self.bars {
            b.total.finish_and_clear();
            let _ = b.multi.clear();
        }
    }
}

impl Observer for Display {
    fn event(&self, event: &Event) {
        match self.mode {
            Mode::Json => match event {
                Event::Progress { bytes, .. } => self.json_progress(*bytes),
                _ => {
                    if let Ok(v) = serde_json::to_value(event) {
                        json_line(&v);
                    }
                }
            },
            Mode::Quiet => {
                if let Event::FileError { path, error } = event {
                    eprintln!("error: {path}: {error}");
                }
            }
            Mode::Human => self.human(event),
        }
    }
}

impl Display {
    fn human(&self, event: &Event) {
        let Some(b) = &self.bars else {
            match event {
                Event::DryRun { .. } => print_dry_run(event),
                Event::Deleted { path, .. } => eprintln!("deleted: {path}"),
                Event::FileError { path, error } => eprintln!("error: {path}: {error}"),
                Event::Warning { message } => eprintln!("warning: {message}"),
                _ => {}
            }
            return;
        };
        match event {
            Event::FileStart { path, size } => {
                b.total.inc_length(*size);
                if *size >= 8 << 20 {
                    let bar = b.multi.add(ProgressBar::new(*size));
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{prefix:>5} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}  {msg}",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                    );
                    bar.set_prefix("file");
                    bar.set_message(path.clone());
                    if let Ok(mut f) = b.files.lock() {
                        f.insert(path.clone(), bar);
                    }
                }
            }
            Event::Progress { path, bytes } => {
                b.total.inc(*bytes);
                if let Ok(f) = b.files.lock() {
                    if let Some(bar) = f.get(path) {
                        bar.inc(*bytes);
                    }
                }
            }
            Event::FileDone { path, .. } | Event::FileError { path, .. } => {
                if let Ok(mut f) = b.files.lock() {
                    if let Some(bar) = f.remove(path) {
                        bar.finish_and_clear();
                    }
                }
                if let Event::FileError { error, .. } = event {
                    b.multi.suspend(|| eprintln!("error: {path}: {error}"));
                }
            }
            Event::Warning { message } => b.multi.suspend(|| eprintln!("warning: {message}")),
            Event::DryRun { .. } => b.multi.suspend(|| print_dry_run(event)),
            Event::Deleted { path, .. } => b.multi.suspend(|| eprintln!("deleted: {path}")),
            Event::NodeProgress { node, bytes, total } => {
                let Ok(mut nodes) = b.nodes.lock() else {
                    return;
                };
                let bar = nodes.entry(node.clone()).or_insert_with(|| {
                    let bar = b.multi.add(ProgressBar::new(*total));
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{msg:<32} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                    );
                    bar.set_message(node.clone());
                    bar
                });
                bar.set_length((*total).max(*bytes));
                bar.set_position(*bytes);
            }
            Event::NodeDone { node, ok, error } => {
                if let Ok(mut nodes) = b.nodes.lock() {
                    if let Some(bar) = nodes.remove(node) {
                        bar.finish_and_clear();
                    }
                }
                if !ok {
                    b.multi.suspend(|| eprintln!("failed: {node}: {error}"));
                }
            }
        }
    }
}

/// Prints one `--dry-run` line on stdout: what, where, how large.
fn print_dry_run(event: &Event) {
    if let Event::DryRun { path, size, action } = event {
        let size = match action {
            haul_session::DryRunAction::Make => String::new(),
            _ => format!("  {}", human_bytes(*size)),
        };
        println!("{:<10} {path}{size}", action.word());
    }
}

/// Prints the totals of a `--dry-run`.
pub fn print_dry_run_report(mode: Mode, r: &haul_node::DryRunReport) {
    match mode {
        Mode::Json => {
            if let Ok(mut v) = serde_json::to_value(r) {
                if let Some(o) = v.as_object_mut() {
                    o.insert("event".into(), "dry_run_summary".into());
                }
                json_line(&v);
            }
        }
        Mode::Quiet => {}
        Mode::Human => {
            println!(
                "dry run: would send {} file{} ({}), {} up to date ({}), make {}, delete {} ({}); {} error{}; nothing was changed",
                r.send_files,
                if r.send_files == 1 { "" } else { "s" },
                human_bytes(r.send_bytes),
                r.up_to_date_files,
                human_bytes(r.up_to_date_bytes),
                r.make,
                r.delete,
                human_bytes(r.delete_bytes),
                r.errors,
                if r.errors == 1 { "" } else { "s" },
            );
        }
    }
}

/// Formats bytes for people.
pub fn human_bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// Prints the end-of-transfer summary in the chosen mode.
pub fn print_summary(mode: Mode, s: &Summary) {
    match mode {
        Mode::Json => {
            if let Ok(mut v) = serde_json::to_value(s) {
                if let Some(o) = v.as_object_mut() {
                    o.insert("event".into(), "summary".into());
                }
                json_line(&v);
            }
        }
        Mode::Quiet => {}
        Mode::Human => {
            let mark = if s.failed == 0 { "ok" } else { "FAILED" };
            eprintln!(
                "{mark}: {} file{} ({}) verified, {} already up to date, {} failed; {} transferred in {:.2}s ({}/s, {} connection{})",
                s.files_ok,
                if s.files_ok == 1 { "" } else { "s" },
                human_bytes(s.bytes_verified),
                s.files_skipped,
                s.failed,
                human_bytes(s.bytes_transferred),
                s.seconds,
                human_bytes(if s.seconds > 0.0 { (s.bytes_transferred as f64 / s.seconds) as u64 } else { 0 }),
                s.connections,
                if s.connections == 1 { "" } else { "s" }
            );
            if s.deleted > 0 {
                eprintln!(
                    "  deleted {} entr{} the source does not have (--delete)",
                    s.deleted,
                    if s.deleted == 1 { "y" } else { "ies" }
                );
            }
            for f in &s.failures {
                eprintln!("  failed: {}: {}", f.path, f.error);
            }
        }
    }
}
