//! How a transfer shows itself: progress bars on a TTY, JSON lines for
//! scripts, nothing with `-q`.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::causes::{entry_error, Causes};
use haul_node::Summary;
use haul_run::rate::WindowedRate;
use haul_run::{Event, Observer};
use indicatif::style::ProgressTracker;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

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

/// `-v` given this many times (set once by main): from 1, each file sent
/// is named on stdout (rsync's `-v`); from 2, a dry run lists up-to-date
/// entries too.
static VERBOSITY: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Sets how many `-v` were given.
pub fn set_verbosity(v: u8) {
    VERBOSITY.store(v, std::sync::atomic::Ordering::Relaxed);
}

fn verbosity() -> u8 {
    VERBOSITY.load(std::sync::atomic::Ordering::Relaxed)
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
    /// What the transfer found and did so far (every mode: an interrupt
    /// says how far it got).
    totals: Arc<Mutex<Totals>>,
    /// False once interrupted: nothing more is shown. Events are shown
    /// under its read lock, so none is half shown when it turns false.
    open: RwLock<bool>,
    /// Failures so far by cause: only the first of each is shown as it
    /// happens (the summary counts the rest).
    causes: Mutex<Causes>,
    /// `-v`: each file is named on stdout when it verified.
    name_files: bool,
    /// `-i`: rsync's change string for each entry that changes, on stdout
    /// (`--json`: `itemized` events, otherwise left out); `Some(true)`
    /// for a push, whose strings say `<` (sent) where the receiver's say
    /// `>`.
    itemize: Option<bool>,
    /// `--log-file`: every event also goes to the transfer log.
    log: Option<Arc<dyn Observer>>,
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
    /// Whether the total bar shows a walk still running (no length).
    total_walking: Mutex<Option<bool>>,
    files: Mutex<HashMap<String, ProgressBar>>,
    /// Fan-out: one bar per destination.
    nodes: Mutex<HashMap<String, ProgressBar>>,
}

/// How often bars are redrawn when nothing happens (a stalled rate decays).
const TICK: Duration = Duration::from_millis(200);

impl Display {
    /// A display for `mode`; bars only when stderr is a terminal.
    pub fn new(mode: Mode) -> Self {
        let totals = Arc::new(Mutex::new(Totals::default()));
        let bars = (mode == Mode::Human && std::io::stderr().is_terminal()).then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            // Styled before it is added (and drawn): "starting" until the
            // first event says more.
            let total = multi.add(
                ProgressBar::new(0)
                    .with_style(
                        ProgressStyle::with_template("{prefix:>5} {totals}")
                            .unwrap_or_else(|_| ProgressStyle::default_bar())
                            .with_key("totals", TotalsKey(totals.clone())),
                    )
                    .with_prefix("total"),
            );
            Bars {
                multi,
                total,
                total_walking: Mutex::new(None),
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
            totals,
            open: RwLock::new(true),
            causes: Mutex::new(Causes::default()),
            name_files: mode == Mode::Human && verbosity() >= 1,
            itemize: None,
            log: None,
        }
    }

    /// The same, with `-i` (`sent`: a push, whose strings say `<`).
    pub fn itemizing(mut self, on: bool, sent: bool) -> Self {
        self.itemize = on.then_some(sent);
        self
    }

    /// The same, every event also given to `log` (`--log-file`).
    pub fn logging_to(mut self, log: Option<Arc<dyn Observer>>) -> Self {
        self.log = log;
        self
    }

    /// The line for entry `path` failed with `error`, if it is the first
    /// of its cause (repeats are counted, not shown).
    fn error_line(&self, path: &str, error: &str) -> Option<String> {
        let first = match self.causes.lock() {
            Ok(mut c) => c.add(path, error),
            Err(_) => true,
        };
        first.then(|| format!("error: {}", entry_error(path, error)))
    }

    /// The total bar as [`Totals`] has it now: while a walk runs, what it
    /// found (no length, no percentage, no ETA); then a bar.
    fn show_total(&self) {
        let Some(b) = &self.bars else {
            return;
        };
        // Read and let go first: drawing locks the totals again.
        let (length, position) = match self.totals.lock() {
            Ok(t) => (t.length(), t.position()),
            Err(_) => return,
        };
        let walking = length.is_none();
        if let Ok(mut shown) = b.total_walking.lock() {
            if *shown != Some(walking) {
                if shown.is_none() {
                    // Drawn from the first event on, also while nothing
                    // moves (a stalled rate decays to zero).
                    b.total.enable_steady_tick(TICK);
                }
                *shown = Some(walking);
                let template = if walking {
                    "{prefix:>5} {totals}"
                } else {
                    "{prefix:>5} [{bar:30}] {bytes}/{total_bytes} {totals}"
                };
                b.total.set_style(
                    ProgressStyle::with_template(template)
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .with_key("totals", TotalsKey(self.totals.clone()))
                        .progress_chars("=> "),
                );
            }
        }
        if let Some(length) = length {
            b.total.set_length(length);
        }
        b.total.set_position(position);
    }

    /// Ctrl-C: shows nothing more, clears the bars, and says how far the
    /// transfer got (the one line to print).
    pub fn interrupt(&self) -> String {
        if let Ok(mut open) = self.open.write() {
            *open = false;
        }
        self.finish();
        let (verified, known) = self
            .totals
            .lock()
            .map(|t| (t.verified(), t.known_files()))
            .unwrap_or_default();
        interrupted_text(verified, known)
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
            for map in [&b.files, &b.nodes] {
                if let Ok(mut bars) = map.lock() {
                    for (_, bar) in bars.drain() {
                        bar.finish_and_clear();
                    }
                }
            }
            b.total.finish_and_clear();
            let _ = b.multi.clear();
        }
    }
}

impl Observer for Display {
    fn event(&self, event: &Event) {
        if let Some(log) = &self.log {
            log.event(event);
        }
        let open = self.open.read();
        if !open.as_deref().is_ok_and(|open| *open) {
            return;
        }
        // Whether this event verified a file the totals had not counted
        // (a striped fan-out ends one file once per stripe).
        let (redraw, newly_verified) = match self.totals.lock() {
            Ok(mut t) => {
                let before = t.verified;
                let redraw = t.apply(event, Instant::now());
                (redraw, t.verified > before)
            }
            Err(_) => (false, false),
        };
        if redraw {
            self.show_total();
        }
        match self.mode {
            Mode::Json => match event {
                Event::Progress { bytes, .. } => self.json_progress(*bytes),
                // Which fields changed, named (with -i or without).
                Event::Itemized { code, .. } => {
                    if let Ok(mut v) = serde_json::to_value(event) {
                        v["fields"] = serde_json::json!(haul_engine::itemize::fields(code));
                        json_line(&v);
                    }
                }
                _ => {
                    if let Ok(v) = serde_json::to_value(event) {
                        json_line(&v);
                    }
                }
            },
            Mode::Quiet => {
                if let Event::FileError { path, error, .. } = event {
                    if let Some(line) = self.error_line(path, error) {
                        eprintln!("{line}");
                    }
                }
            }
            Mode::Human => {
                if let Some(line) = self.itemized_line(event) {
                    if let Some(line) = line {
                        match &self.bars {
                            Some(b) => b.multi.suspend(|| println!("{line}")),
                            None => println!("{line}"),
                        }
                    }
                    return;
                }
                if let (Event::Deleted { path, .. }, true) = (event, self.name_files) {
                    // rsync's -v: `deleting PATH`, on stdout with the names sent.
                    let line = format!("deleting {path}");
                    match &self.bars {
                        Some(b) => b.multi.suspend(|| println!("{line}")),
                        None => println!("{line}"),
                    }
                    return;
                }
                if newly_verified && self.itemize.is_none() {
                    self.name_sent(event);
                }
                self.human(event);
            }
        }
    }
}

impl Display {
    /// `-i`: the line `event` shows (`Some(None)`: none, in place of what
    /// it would show otherwise); `None` when `-i` has nothing to say of it.
    fn itemized_line(&self, event: &Event) -> Option<Option<String>> {
        let sent = self.itemize?;
        match event {
            Event::Itemized { path, code } => {
                let code = match (sent, code.strip_prefix('>')) {
                    (true, Some(rest)) => format!("<{rest}"),
                    _ => code.clone(),
                };
                // rsync shows a directory with its trailing slash.
                let slash = if code.get(1..2) == Some("d") { "/" } else { "" };
                Some(Some(format!("{code} {path}{slash}")))
            }
            Event::Deleted { path, .. }
            | Event::DryRun {
                path,
                action: haul_run::DryRunAction::Delete,
                ..
            } => Some(Some(haul_engine::itemize::deleting(path))),
            // What would be sent or made is itemized by its own event.
            Event::DryRun {
                action: haul_run::DryRunAction::Send | haul_run::DryRunAction::Make,
                ..
            } => Some(None),
            _ => None,
        }
    }

    /// `-v`: names on stdout the file `event` just sent and verified
    /// (rsync's `-v` names each file it transferred; one skipped as up to
    /// date is not named).
    fn name_sent(&self, event: &Event) {
        let Event::FileDone {
            path,
            skipped: false,
            ..
        } = event
        else {
            return;
        };
        if !self.name_files {
            return;
        }
        match &self.bars {
            Some(b) => b.multi.suspend(|| println!("{path}")),
            None => println!("{path}"),
        }
    }

    fn human(&self, event: &Event) {
        let Some(b) = &self.bars else {
            match event {
                Event::DryRun { .. } => print_dry_run(event),
                Event::Deleted { path, .. } => eprintln!("deleted: {path}"),
                Event::FileError { path, error, .. } => {
                    if let Some(line) = self.error_line(path, error) {
                        eprintln!("{line}");
                    }
                }
                Event::Warning { message } => eprintln!("warning: {message}"),
                _ => {}
            }
            return;
        };
        match event {
            Event::FileStart { path, size } => {
                if *size >= 8 << 20 {
                    let bar = b.multi.add(ProgressBar::new(*size));
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{prefix:>5} [{bar:30}] {bytes}/{total_bytes} {rate}  {msg}",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .with_key("rate", RateKey::default())
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
                    if let Some(line) = self.error_line(path, error) {
                        b.multi.suspend(|| eprintln!("{line}"));
                    }
                }
            }
            Event::Warning { message } => b.multi.suspend(|| eprintln!("warning: {message}")),
            Event::DryRun { .. } => b.multi.suspend(|| print_dry_run(event)),
            Event::Deleted { path, .. } => b.multi.suspend(|| eprintln!("deleted: {path}")),
            Event::NodeProgress {
                node,
                bytes,
                total,
                bytes_per_second,
            } => {
                let Ok(mut nodes) = b.nodes.lock() else {
                    return;
                };
                let bar = nodes.entry(node.clone()).or_insert_with(|| {
                    let bar = b.multi.add(ProgressBar::new(*total));
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{prefix:<32} [{bar:30}] {bytes}/{total_bytes} {msg}",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                    );
                    bar.set_prefix(node.clone());
                    bar
                });
                // The coordinator's rate, averaged over a few seconds.
                let left = total.saturating_sub(*bytes);
                let eta = bytes_per_second
                    .filter(|r| *r >= 1.0)
                    .and_then(|r| Duration::try_from_secs_f64(left as f64 / r).ok());
                bar.set_message(format!(
                    "{} {}",
                    rate_text(*bytes_per_second),
                    eta_text(eta)
                ));
                bar.set_length((*total).max(*bytes));
                bar.set_position(*bytes);
            }
            // An evicted relay is named once, under the summary table.
            Event::Resolved { .. }
            | Event::SealFailed { .. }
            | Event::PeerQuiet { .. }
            | Event::RelayEvicted { .. }
            | Event::ListingProgress { .. }
            | Event::ListingDone { .. }
            | Event::Itemized { .. } => {}
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
        // What would change; what is already up to date only with -vv
        // (rsync's and rclone's dry runs list changes only).
        if *action == haul_run::DryRunAction::UpToDate && verbosity() < 2 {
            return;
        }
        let size = match action {
            haul_run::DryRunAction::Make => String::new(),
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

pub use haul_status::console::human_bytes;

/// Prints the end-of-transfer summary in the chosen mode.
pub fn print_summary(mode: Mode, s: &Summary) {
    match mode {
        Mode::Json => {
            if let Ok(mut v) = serde_json::to_value(s) {
                if let Some(o) = v.as_object_mut() {
                    o.insert("event".into(), "summary".into());
                    let causes = Causes::of(failures(&s.failures));
                    if let Ok(causes) = serde_json::to_value(causes.list()) {
                        o.insert("causes".into(), causes);
                    }
                }
                json_line(&v);
            }
        }
        Mode::Quiet => {
            // Each cause's first entry was shown as it failed.
            for cause in Causes::of(failures(&s.failures)).list() {
                if let Some(line) = cause.more_line() {
                    eprintln!("{line}");
                }
            }
        }
        Mode::Human => {
            let mark = if s.failed == 0 { "ok" } else { "FAILED" };
            // -z: what went on the wire, packed.
            let wire = s
                .bytes_on_wire
                .filter(|&w| w != s.bytes_transferred)
                .map(|w| format!(" ({} on the wire)", human_bytes(w)))
                .unwrap_or_default();
            eprintln!(
                "{mark}: {} file{} ({}) verified, {} already up to date, {} failed; {}{wire} transferred in {:.2}s ({}/s, {} connection{})",
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
            print_failures(&s.failures);
        }
    }
}

/// The (path, error) pairs of `failures`.
fn failures(failures: &[haul_run::summary::Failure]) -> impl Iterator<Item = (&str, &str)> + '_ {
    failures.iter().map(|f| (f.path.as_str(), f.error.as_str()))
}

/// The summary's failure lines on stderr: one per cause, with how many
/// entries it stopped.
pub fn print_failures(list: &[haul_run::summary::Failure]) {
    for line in Causes::of(failures(list)).summary_lines() {
        eprintln!("  {line}");
    }
}

/// Where the walk that feeds a transfer is.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// No walk said it runs (a remote crawl, for one): the total is what
    /// has started so far, as before.
    #[default]
    Unannounced,
    /// A walk or listing runs: the total is not known yet.
    Running,
    /// It ended: the total is known.
    Done,
}

/// What the total line knows, gathered from events (no I/O: tested below).
#[derive(Debug, Default)]
struct Totals {
    walk: Walk,
    /// What the walk found so far (or in all, once it ended).
    found_files: u64,
    found_bytes: u64,
    /// Bytes of the files the transfer started or found up to date.
    seen_bytes: u64,
    /// Files now verified at the destination (sent, or already identical).
    verified: u64,
    /// Files in flight: their size, and how much of it is counted as done.
    flying: HashMap<String, (u64, u64)>,
    /// Bytes done: files ended (verified, up to date or failed) whole, and
    /// what moved of those in flight (at most their size).
    position: u64,
    /// Payload bytes moved, resends included: the rate is of these.
    moved: u64,
    rate: WindowedRate,
}

impl Totals {
    /// Takes in `event`; true when the total line changed.
    fn apply(&mut self, event: &Event, now: Instant) -> bool {
        match event {
            Event::ListingProgress { files, bytes } => {
                if self.walk != Walk::Done {
                    self.walk = Walk::Running;
                    self.found_files = *files;
                    self.found_bytes = *bytes;
                }
            }
            Event::ListingDone { files, bytes } => {
                self.walk = Walk::Done;
                self.found_files = *files;
                self.found_bytes = *bytes;
            }
            Event::FileStart { path, size } => {
                if !self.flying.contains_key(path) {
                    self.seen_bytes += size;
                    self.flying.insert(path.clone(), (*size, 0));
                }
            }
            Event::Progress { path, bytes } => {
                self.moved += bytes;
                self.rate.record(now, self.moved);
                if let Some((size, done)) = self.flying.get_mut(path) {
                    let add = (*bytes).min(*size - *done);
                    *done += add;
                    self.position += add;
                }
            }
            Event::FileDone {
                path,
                size,
                blake3,
                skipped,
                ..
            } => {
                let flew = self.settle(path);
                if *skipped && !flew {
                    // Found up to date before it started (a pull's quick check).
                    self.seen_bytes += size;
                    self.position += size;
                }
                // A file, verified: counted once (a striped fan-out's other
                // stripes end the same file again).
                if *skipped || (flew && !blake3.is_empty()) {
                    self.verified += 1;
                }
            }
            Event::FileError { path, .. } => {
                self.settle(path);
            }
            _ => return false,
        }
        true
    }

    /// A file in flight ended: all of it counts as done. False when it
    /// was not in flight.
    fn settle(&mut self, path: &str) -> bool {
        match self.flying.remove(path) {
            Some((size, done)) => {
                self.position += size - done;
                true
            }
            None => false,
        }
    }

    /// The total's length in bytes; `None` while a walk runs.
    fn length(&self) -> Option<u64> {
        match self.walk {
            Walk::Running => None,
            Walk::Done => Some(self.found_bytes.max(self.position)),
            Walk::Unannounced => Some(self.seen_bytes.max(self.position)),
        }
    }

    /// Bytes done.
    fn position(&self) -> u64 {
        self.position
    }

    /// Files verified so far (never more than are known).
    fn verified(&self) -> u64 {
        self.verified.min(self.known_files())
    }

    /// Files known: what the walk found, or (with no walk told) those that
    /// started or ended so far.
    fn known_files(&self) -> u64 {
        match self.walk {
            Walk::Unannounced => self.verified + self.flying.len() as u64,
            Walk::Running => self.found_files.max(self.verified),
            Walk::Done => self.found_files,
        }
    }

    /// The total line after its bar (if any): while walking, what was
    /// found, what is done and the rate; then the rate and an ETA.
    fn text(&self, now: Instant) -> String {
        if self.walk == Walk::Unannounced && self.seen_bytes == 0 && self.flying.is_empty() {
            return "starting".into();
        }
        let rate = self.rate.rate(now);
        match self.length() {
            None => walking_text(self.found_files, self.found_bytes, self.position, rate),
            Some(length) => {
                let left = length.saturating_sub(self.position);
                format!("{} {}", rate_text(rate), eta_text(self.rate.eta(now, left)))
            }
        }
    }
}

/// The `{totals}` key of the total bar: [`Totals::text`] when drawn.
#[derive(Clone)]
struct TotalsKey(Arc<Mutex<Totals>>);

impl ProgressTracker for TotalsKey {
    fn clone_box(&self) -> Box<dyn ProgressTracker> {
        Box::new(self.clone())
    }
    fn tick(&mut self, _: &ProgressState, _: Instant) {}
    fn reset(&mut self, _: &ProgressState, _: Instant) {}
    fn write(&self, _: &ProgressState, w: &mut dyn std::fmt::Write) {
        if let Ok(t) = self.0.lock() {
            let _ = w.write_str(&t.text(Instant::now()));
        }
    }
}

/// The `{rate}` key of a file's bar: its position's rate over a window.
#[derive(Clone, Default)]
struct RateKey(WindowedRate);

impl ProgressTracker for RateKey {
    fn clone_box(&self) -> Box<dyn ProgressTracker> {
        Box::new(self.clone())
    }
    fn tick(&mut self, state: &ProgressState, now: Instant) {
        self.0.record(now, state.pos());
    }
    fn reset(&mut self, _: &ProgressState, _: Instant) {
        self.0 = WindowedRate::default();
    }
    fn write(&self, _: &ProgressState, w: &mut dyn std::fmt::Write) {
        let _ = w.write_str(&rate_text(self.0.rate(Instant::now())));
    }
}

/// `12345` as `12,345`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What a walk still running found: `12,345 files found so far, 3.2 GiB`.
fn found_so_far(files: u64, bytes: u64) -> String {
    format!(
        "{} file{} found so far, {}",
        thousands(files),
        if files == 1 { "" } else { "s" },
        human_bytes(bytes)
    )
}

/// The total line while the walk runs: no percentage, no ETA.
fn walking_text(files: u64, bytes: u64, done: u64, rate: Option<f64>) -> String {
    format!(
        "{}; {} done, {}",
        found_so_far(files, bytes),
        human_bytes(done),
        rate_text(rate)
    )
}

/// A rate for people; `--/s` when there is none yet.
fn rate_text(rate: Option<f64>) -> String {
    match rate {
        Some(r) if r.is_finite() && r >= 0.0 => format!("{}/s", human_bytes(r as u64)),
        _ => "--/s".into(),
    }
}

/// `ETA 1m05s`; `ETA --` with no rate to tell.
fn eta_text(eta: Option<Duration>) -> String {
    let Some(eta) = eta else {
        return "ETA --".into();
    };
    let s = eta.as_secs();
    match s {
        0..60 => format!("ETA {s}s"),
        60..3600 => format!("ETA {}m{:02}s", s / 60, s % 60),
        _ => format!("ETA {}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// The one line an interrupted transfer prints.
pub fn interrupted_text(verified: u64, known: u64) -> String {
    format!(
        "interrupted: {verified} of {known} files verified; run the same command again to resume"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(t: &mut Totals, path: &str, size: u64) {
        t.apply(
            &Event::FileStart {
                path: path.into(),
                size,
            },
            Instant::now(),
        );
    }

    fn done(t: &mut Totals, path: &str, size: u64, skipped: bool) {
        t.apply(
            &Event::FileDone {
                path: path.into(),
                size,
                blake3: if skipped { String::new() } else { "ab".into() },
                sent: 0,
                skipped,
            },
            Instant::now(),
        );
    }

    #[test]
    fn numbers_for_people() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(12_345), "12,345");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(
            found_so_far(12_345, 3_435_973_837),
            "12,345 files found so far, 3.2 GiB"
        );
        assert_eq!(found_so_far(1, 10), "1 file found so far, 10 B");
        assert_eq!(rate_text(None), "--/s");
        assert_eq!(rate_text(Some(f64::INFINITY)), "--/s");
        assert_eq!(rate_text(Some(2.5 * 1048576.0)), "2.5 MiB/s");
        assert_eq!(eta_text(None), "ETA --");
        assert_eq!(eta_text(Some(Duration::from_secs(5))), "ETA 5s");
        assert_eq!(eta_text(Some(Duration::from_secs(65))), "ETA 1m05s");
        assert_eq!(eta_text(Some(Duration::from_secs(3720))), "ETA 1h02m");
        assert_eq!(
            interrupted_text(3, 7),
            "interrupted: 3 of 7 files verified; run the same command again to resume"
        );
    }

    #[test]
    fn while_the_walk_runs_the_total_has_no_length_nor_eta() {
        let mut t = Totals::default();
        let now = Instant::now();
        t.apply(&Event::ListingProgress { files: 0, bytes: 0 }, now);
        start(&mut t, "a", 1000);
        t.apply(
            &Event::Progress {
                path: "a".into(),
                bytes: 1000,
            },
            now,
        );
        t.apply(
            &Event::ListingProgress {
                files: 12_345,
                bytes: 3_435_973_837,
            },
            now,
        );
        // Everything started is done, and still no 100 %: the total is unknown.
        assert_eq!(t.length(), None);
        let text = t.text(now);
        assert!(
            text.starts_with("12,345 files found so far, 3.2 GiB; 1000 B done, "),
            "{text}"
        );
        assert!(!text.contains("ETA") && !text.contains('%'), "{text}");
        assert_eq!(t.known_files(), 12_345);

        // The walk ended: a length, and an ETA.
        t.apply(
            &Event::ListingDone {
                files: 12_346,
                bytes: 3_435_974_837,
            },
            now,
        );
        assert_eq!(t.length(), Some(3_435_974_837));
        assert!(t.text(now).contains("ETA"), "{}", t.text(now));
        assert_eq!(t.known_files(), 12_346);
    }

    #[test]
    fn done_counts_whole_files_once_whatever_moved() {
        let mut t = Totals::default();
        let now = Instant::now();
        t.apply(
            &Event::ListingDone {
                files: 4,
                bytes: 400,
            },
            now,
        );
        // Resumed: only half of it moves, then it is verified whole.
        start(&mut t, "resumed", 100);
        t.apply(
            &Event::Progress {
                path: "resumed".into(),
                bytes: 50,
            },
            now,
        );
        assert_eq!(t.position(), 50);
        done(&mut t, "resumed", 100, false);
        assert_eq!(t.position(), 100);
        // Resends past its size count once.
        start(&mut t, "resent", 100);
        for _ in 0..3 {
            t.apply(
                &Event::Progress {
                    path: "resent".into(),
                    bytes: 60,
                },
                now,
            );
        }
        assert_eq!(t.position(), 200);
        assert_eq!(t.moved, 230);
        done(&mut t, "resent", 100, false);
        // Up to date before it started (a pull's quick check), and failed.
        done(&mut t, "same", 100, true);
        start(&mut t, "bad", 100);
        t.apply(&Event::file_error("bad", "x"), now);
        assert_eq!(t.position(), 400);
        assert_eq!(t.length(), Some(400));
        assert_eq!((t.verified(), t.known_files()), (3, 4));
        // A striped fan-out's second stripe of a file ends it again.
        done(&mut t, "resumed", 100, false);
        assert_eq!(t.verified(), 3);
    }

    #[test]
    fn with_no_walk_told_the_total_is_what_started() {
        let mut t = Totals::default();
        start(&mut t, "a", 100);
        start(&mut t, "b", 50);
        assert_eq!(t.length(), Some(150));
        done(&mut t, "a", 100, false);
        assert_eq!((t.verified(), t.known_files()), (1, 2));
    }
}
