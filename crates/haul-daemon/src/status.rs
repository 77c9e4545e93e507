//! What the daemon is doing, kept in memory as it happens: per source, its
//! runs, files and bytes fetched, failures, files in flight, next run. The
//! status listener (`/status`, `/metrics`) reads snapshots of it.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

/// One source's counters since the daemon started.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SourceStatus {
    /// The source's URL, without secrets.
    pub url: String,
    /// Its schedule as written.
    pub schedule: String,
    /// A run is going on.
    pub running: bool,
    /// Runs ended.
    pub runs: u64,
    /// Runs that could not list the source.
    pub runs_failed: u64,
    /// Consecutive runs that could not list the source.
    pub down_for: u32,
    /// Files delivered.
    pub files_fetched: u64,
    /// Their bytes.
    pub bytes_fetched: u64,
    /// Bytes that came over the network (less than fetched when resumed).
    pub bytes_transferred: u64,
    /// Files that failed.
    pub files_failed: u64,
    /// Files downloading now.
    pub in_flight: i64,
    /// Hooks that failed or timed out, and sidecars not written.
    pub hook_failures: u64,
    /// Duration of the last run (seconds).
    pub last_run_seconds: f64,
    /// Durations of all runs (seconds), for the metric's sum.
    pub run_seconds_total: f64,
    /// When the last run ended (Unix seconds).
    pub last_run_end: Option<i64>,
    /// When a run last listed the source without error.
    pub last_success: Option<i64>,
    /// Why the last run failed, if it did.
    pub last_error: Option<String>,
    /// When the next run is due.
    pub next_run: Option<i64>,
    /// The sites its files go to.
    pub sites: Vec<String>,
    /// Paused from the console: no run starts until it is resumed (or the
    /// daemon restarts).
    pub paused: bool,
}

/// What one source owes one site, from the catalog (for `/status`,
/// `/metrics` and `haul status`).
#[derive(Debug, Clone, Serialize)]
pub struct SiteRow {
    /// The source.
    pub source: String,
    /// The site.
    pub site: String,
    /// Its totals.
    #[serde(skip)]
    pub totals: haul_catalog::SiteTotals,
}

impl SiteRow {
    /// Seconds since the oldest file the site lacks was fetched (0: none).
    pub fn lag(&self, now: i64) -> i64 {
        self.totals
            .oldest_pending
            .map_or(0, |t| now.saturating_sub(t).max(0))
    }

    /// As `/status` shows it.
    pub fn json(&self, now: i64) -> serde_json::Value {
        let t = &self.totals;
        serde_json::json!({
            "source": self.source, "site": self.site,
            "lag_seconds": self.lag(now),
            "files_pending": t.pending_files, "bytes_pending": t.pending_bytes,
            "files_delivered": t.delivered_files, "bytes_delivered": t.delivered_bytes,
            "files_failed": t.failed_files, "last_delivered": t.last_delivered,
            "last_error": t.last_error,
        })
    }
}

/// The daemon's state for people and scrapers.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Snapshot {
    /// This worker's name.
    pub worker: String,
    /// When the daemon started (Unix seconds).
    pub started: i64,
    /// The sources by name.
    pub sources: BTreeMap<String, SourceStatus>,
    /// Why the catalog refuses writes, while it does (the daemon claims
    /// nothing new and holds what it delivered until it takes them again).
    pub catalog_error: Option<String>,
    /// Since when (Unix seconds).
    pub catalog_error_since: Option<i64>,
    /// Delivered files whose record waits for the catalog.
    pub unrecorded_files: u64,
    /// Bytes fetched since start, all sources (never less: a source
    /// removed by a reload keeps its bytes here).
    pub bytes_fetched: u64,
}

/// The live board every run writes to.
#[derive(Debug, Default)]
pub struct Board {
    inner: Mutex<Snapshot>,
    /// [`Snapshot::bytes_fetched`] over the last hour, for the console.
    history: haul_status::console::History,
}

impl Board {
    /// A board for `worker`, started at `started`.
    pub fn new(worker: &str, started: i64) -> Self {
        Self {
            inner: Mutex::new(Snapshot {
                worker: worker.into(),
                started,
                ..Snapshot::default()
            }),
            history: haul_status::console::History::starting(started, 0),
        }
    }

    fn with(&self, name: &str, f: impl FnOnce(&mut SourceStatus)) {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(s.sources.entry(name.to_string()).or_default());
    }

    /// Makes the board's sources those of the config (keeping counters of
    /// sources still there).
    pub fn set_sources<'a>(
        &self,
        sources: impl Iterator<Item = (&'a str, String, String, Vec<String>)>,
    ) {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut kept = BTreeMap::new();
        for (name, url, schedule, sites) in sources {
            let mut st = s.sources.remove(name).unwrap_or_default();
            st.url = url;
            st.schedule = schedule;
            st.sites = sites;
            kept.insert(name.to_string(), st);
        }
        s.sources = kept;
    }

    /// A file started (`+1`) or ended (`-1`).
    pub fn in_flight(&self, name: &str, delta: i64) {
        self.with(name, |s| s.in_flight += delta);
    }

    /// A file was delivered.
    pub fn delivered(&self, name: &str, size: u64, transferred: u64, _at: i64) {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        s.bytes_fetched += size;
        let st = s.sources.entry(name.to_string()).or_default();
        st.files_fetched += 1;
        st.bytes_fetched += size;
        st.bytes_transferred += transferred;
    }

    /// Pauses or resumes `name` (as the console shows it).
    pub fn paused(&self, name: &str, paused: bool) {
        self.with(name, |s| s.paused = paused);
    }

    /// Samples the bytes fetched so far at `now`, for the chart.
    pub fn sample(&self, now: i64) {
        let total = self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .bytes_fetched;
        self.history.sample(now, total);
    }

    /// Bytes fetched in each of the last hour's minutes, oldest first.
    pub fn fetched_per_minute(&self, now: i64) -> Vec<u64> {
        self.sample(now);
        self.history.per_minute(now)
    }

    /// A file failed.
    pub fn failure(&self, name: &str) {
        self.with(name, |s| s.files_failed += 1);
    }

    /// A hook failed (or a sidecar could not be written).
    pub fn hook_failure(&self, name: &str) {
        self.with(name, |s| s.hook_failures += 1);
    }

    /// A run started.
    pub fn run_started(&self, name: &str) {
        self.with(name, |s| s.running = true);
    }

    /// A run ended after `seconds`, at `now`; `error` if it could not list.
    pub fn run_ended(&self, name: &str, seconds: f64, now: i64, error: Option<String>) {
        self.with(name, |s| {
            s.running = false;
            s.runs += 1;
            s.last_run_seconds = seconds;
            s.run_seconds_total += seconds;
            s.last_run_end = Some(now);
            match error {
                None => {
                    s.last_success = Some(now);
                    s.down_for = 0;
                    s.last_error = None;
                }
                Some(e) => {
                    s.runs_failed += 1;
                    s.down_for += 1;
                    s.last_error = Some(e);
                }
            }
        });
    }

    /// The catalog refuses writes since `since` because of `cause`
    /// (`None`: it takes them again); `unrecorded` delivered files wait.
    pub fn catalog_writes(&self, refused: Option<(String, i64)>, unrecorded: u64) {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        s.catalog_error_since = refused.as_ref().map(|r| r.1);
        s.catalog_error = refused.map(|r| r.0);
        s.unrecorded_files = unrecorded;
    }

    /// The next run of `name` is due at `at`.
    pub fn next_run(&self, name: &str, at: i64) {
        self.with(name, |s| s.next_run = Some(at));
    }

    /// A copy of the board.
    pub fn snapshot(&self) -> Snapshot {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Asks a running daemon's listener at `addr` for `/status` (for `haul status`).
pub async fn query(addr: &str, timeout: std::time::Duration) -> Result<serde_json::Value, String> {
    let client = haul_http::client_builder()
        .timeout(timeout)
        .build()
        .map_err(|e| e.to_string())?;
    let url = format!("http://{addr}/status");
    let answer = client.get(&url).send().await.map_err(|e| {
        format!("{url}: {e} (is `haul daemon` running with `status = \"{addr}\"`?)")
    })?;
    if !answer.status().is_success() {
        return Err(format!("{url}: {}", answer.status()));
    }
    let text = answer.text().await.map_err(|e| format!("{url}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("{url}: not haul's status: {e}"))
}
