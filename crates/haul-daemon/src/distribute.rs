//! Deliveries to sites: every file a source fetched goes to each site in
//! its `deliver` list, through the fan-out (`haul_node::push_fanout`).
//!
//! One distributor per source that delivers, for the daemon's life. Each
//! round it claims, per site, what the catalog says the source owes that
//! site (fetched files the site has not confirmed at their current BLAKE3;
//! see `haul_catalog`'s deliveries), takes the union, and sends it as one
//! fan-out to the sites that lack something: a relay plan among them, so
//! this host uploads each byte about once however many sites there are. A
//! site that already holds a file of the batch skips it (the node's quick
//! check) and still relays it to the others. Each site's part is recorded
//! from its own report: confirmed (the BLAKE3 the origin vouched for) or
//! failed with the site's error and a retry time.
//!
//! After a site confirmed files: the `on_deliver` hook per (file, site),
//! and with `keep_local = false` each file every site of the source has
//! confirmed is removed here (beneath the destination's held directories),
//! never one a site still lacks.
//!
//! A round starts when a run recorded new files (plus [`GATHER`], so a
//! burst goes as one batch), or every [`POLL`] for retries; at most
//! [`MAX_ROUNDS`] are in flight at once, none carrying a (file, site)
//! another carries. A site that
//! failed waits out its own backoff before it is claimed for again; the
//! others go on without it, and when it is back it catches up with what it
//! lacks, oldest (or newest, `catch_up`) first, [`BATCH`] files a round
//! (`deliver_batch`).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use haul_catalog::{Catalog, Owed};
use haul_node::dataset::Chosen;
use haul_node::FanoutOptions;

use crate::sites::SiteSpec;
use haul_plan::Shape;
use haul_run::backoff::Backoff;
use haul_run::event::{Event, Observer};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;

use crate::run::blocking;
use crate::{unix, SourceSpec};

/// How long after a run recorded new files the round starts, so a burst
/// goes out as one fan-out (files fetched while a round is on its way wait
/// for it, and go out together anyway).
pub const GATHER: Duration = Duration::from_millis(250);

/// How often a distributor looks for what is owed with no news (retries
/// that came due, another worker's ended leases).
pub const POLL: Duration = Duration::from_secs(10);

/// Files one round claims per site at most, unless the source says
/// (`deliver_batch`).
pub const BATCH: u32 = 1000;

/// The longest a site that keeps failing waits between attempts.
pub const MAX_SITE_WAIT: Duration = Duration::from_secs(600);

/// What a distributor shares with the daemon.
pub(crate) struct Distributor {
    pub catalog: Arc<dyn Catalog>,
    pub worker: String,
    pub lease: Duration,
    /// First wait after a site failed (doubling to [`MAX_SITE_WAIT`]).
    pub site_retry: Duration,
    /// Notified when a run of this source recorded fetched files.
    pub fetched: Arc<Notify>,
    /// Whether the catalog takes writes (no round starts while it does not).
    pub writes: Arc<crate::writes::CatalogWrites>,
    /// The transfer log: a `file_sent` line per file a site confirmed, a
    /// `file_failed` line per file that failed there.
    pub log: Option<Arc<haul_node::TransferLog>>,
}

/// The transfer log's `deliver` lines for `site`, if the daemon keeps one.
struct DeliveryLog<'a> {
    log: &'a haul_node::TransferLog,
    peer: String,
}

impl<'a> DeliveryLog<'a> {
    fn new(d: &'a Distributor, site: &SiteSpec) -> Option<Self> {
        Some(Self {
            log: d.log.as_deref()?,
            peer: site.at.shown(),
        })
    }

    fn line(
        &self,
        event: haul_node::transfer_log::LogEvent,
        path: &str,
    ) -> haul_node::transfer_log::LogRecord {
        let (peer, auth) = (self.peer.clone(), "daemon".to_owned());
        haul_node::transfer_log::LogRecord::now(event, peer, auth, "deliver", path.to_owned())
    }

    /// A `file_sent` line per file sent to the site and confirmed there
    /// (with its size and BLAKE3).
    fn sent(&self, owed: &[Owed], sent: &[(String, String)]) {
        for (path, hash) in sent {
            let mut r = self.line(haul_node::transfer_log::LogEvent::FileSent, path);
            r.bytes = owed.iter().find(|o| &o.path == path).map(|o| o.size);
            r.blake3 = Some(hash.clone());
            self.log.write(&r);
        }
    }

    /// A `file_failed` line per file that failed for a reason of its own.
    fn failed(&self, bad: &[(String, String)]) {
        for (path, error) in bad {
            let mut r = self.line(haul_node::transfer_log::LogEvent::FileFailed, path);
            r.error = Some(error.clone());
            self.log.write(&r);
        }
    }

    /// One `file_failed` line for a site that failed as a whole, naming
    /// the first file it waits for: not one per file (a site down for a
    /// day must not write a line per file per retry).
    fn site_failed(&self, bad: &[(String, String)], error: &str) {
        let Some((first, _)) = bad.first() else {
            return;
        };
        let mut r = self.line(haul_node::transfer_log::LogEvent::FileFailed, first);
        r.error = Some(match bad.len() {
            1 => error.to_owned(),
            n => format!("{n} files wait, this one among them: {error}"),
        });
        self.log.write(&r);
    }
}

/// What the origin's own sends saw of each file (by its path under DEST):
/// sent or found up to date there (with the BLAKE3 it went out with, when
/// it was read), or failed here (why). A file with neither was never
/// offered (it could not be read here): it is confirmed nowhere.
struct Seen {
    /// DEST, to name a failure by its path under it (errors reading a local
    /// file name its full path).
    dest: std::path::PathBuf,
    done: Mutex<HashMap<String, String>>,
    failed: Mutex<HashMap<String, String>>,
}

impl Seen {
    fn new(dest: &Path) -> Self {
        Self {
            dest: dest.to_path_buf(),
            done: Mutex::default(),
            failed: Mutex::default(),
        }
    }

    /// `path` as a path under DEST.
    fn rel(&self, path: &str) -> String {
        Path::new(path)
            .strip_prefix(&self.dest)
            .ok()
            .and_then(|r| r.to_str())
            .map_or_else(|| path.to_owned(), str::to_owned)
    }
}

impl Observer for Seen {
    fn event(&self, event: &Event) {
        match event {
            Event::FileDone { path, blake3, .. } => {
                if let Ok(mut m) = self.done.lock() {
                    let known = m.entry(path.clone()).or_default();
                    if !blake3.is_empty() {
                        blake3.clone_into(known);
                    }
                }
            }
            Event::FileError { path, error, .. } => {
                if let Ok(mut m) = self.failed.lock() {
                    m.insert(self.rel(path), error.clone());
                }
            }
            // What the fan-out warns of (a site fed through its ssh
            // channel, deletions left undone) is the operator's to read.
            Event::Warning { message } => tracing::warn!("delivery: {message}"),
            _ => {}
        }
    }
}

/// A site's turn: its backoff, and when it may be tried again.
struct Turn {
    backoff: Backoff,
    not_before: Option<Instant>,
}

/// Rounds in flight per source at once. Two were measured
/// (`bench/distribute.sh`, docs/BENCHMARKS.md): concurrent fan-outs through
/// the same sites share their uplinks and this host's cores, and files
/// reached the last site later (median 8.0–9.6 s instead of 6.0–6.7 s with
/// 4 sites); files fetched during a round go out together in the next.
pub const MAX_ROUNDS: usize = 1;

/// What the rounds of one distributor share.
#[derive(Default)]
struct Rounds {
    /// Each site's turn.
    turns: HashMap<String, Turn>,
    /// (site, path) a round in flight carries: not claimed into another.
    in_flight: HashSet<(String, String)>,
}

/// One round's claims: each site with what it lacks.
type Batch = Vec<(Arc<SiteSpec>, Vec<Owed>)>;

/// Runs the distributor of one source until `spec` has no sender left (the
/// source was removed) or `stop` says so (rounds in flight finish, within
/// the daemon's grace). The source's spec is read afresh each round (a
/// reload changes its sites).
pub(crate) async fn distribute(
    d: Distributor,
    mut spec: watch::Receiver<Arc<SourceSpec>>,
    mut stop: watch::Receiver<bool>,
) {
    let d = Arc::new(d);
    let shared = Arc::new(Mutex::new(Rounds::default()));
    let mut rounds: JoinSet<()> = JoinSet::new();
    loop {
        if *stop.borrow() {
            break;
        }
        let current = spec.borrow().clone();
        if !current.deliver.is_empty() && rounds.len() < MAX_ROUNDS && !d.writes.refusing() {
            if let Some(batch) = claim(&d, &current, &shared).await {
                let (d, shared) = (d.clone(), shared.clone());
                rounds.spawn(async move { send(&d, &current, batch, &shared).await });
                // More may be owed (a batch's worth was claimed): look again.
                continue;
            }
        }
        tokio::select! {
            () = d.fetched.notified() => tokio::time::sleep(GATHER).await,
            () = tokio::time::sleep(POLL) => {}
            Some(_) = rounds.join_next(), if !rounds.is_empty() => {}
            changed = spec.changed() => if changed.is_err() { break },
            _ = stop.changed() => break,
        }
    }
    while rounds.join_next().await.is_some() {}
}

/// The relative path under DEST a fetched file lies at (its `local_path`
/// less DEST; a `--rename`d file keeps its new name).
fn rel_in(dest: &Path, owed: &Owed) -> Option<String> {
    let rel = Path::new(&owed.local_path).strip_prefix(dest).ok()?;
    let rel = rel.to_str()?.to_owned();
    (!rel.is_empty()).then_some(rel)
}

/// Claims what each site whose turn it is lacks and no round in flight
/// carries; `None` when nothing is owed.
async fn claim(d: &Distributor, spec: &SourceSpec, shared: &Mutex<Rounds>) -> Option<Batch> {
    let now = Instant::now();
    let mut claimed: Batch = Vec::new();
    for site in &spec.deliver {
        let waiting = match shared.lock() {
            Ok(mut r) => r
                .turns
                .entry(site.name.clone())
                .or_insert_with(|| Turn {
                    backoff: Backoff::new(
                        u32::MAX,
                        d.site_retry,
                        MAX_SITE_WAIT,
                        Backoff::fresh_seed(),
                    ),
                    not_before: None,
                })
                .not_before
                .is_some_and(|t| t > now),
            Err(_) => true,
        };
        if waiting {
            continue;
        }
        let (source, name, worker) = (spec.name.clone(), site.name.clone(), d.worker.clone());
        let (until, at) = (unix(SystemTime::now() + d.lease), unix(SystemTime::now()));
        let (order, batch) = (spec.catch_up, spec.deliver_batch.max(1));
        match blocking(&d.catalog, move |c| {
            c.claim_deliveries(&source, &name, &worker, until, at, order, batch)
        })
        .await
        {
            Ok(owed) => {
                let Ok(mut r) = shared.lock() else {
                    continue;
                };
                let fresh: Vec<Owed> = owed
                    .into_iter()
                    .filter(|o| r.in_flight.insert((site.name.clone(), o.path.clone())))
                    .collect();
                if !fresh.is_empty() {
                    claimed.push((site.clone(), fresh));
                }
            }
            Err(e) => {
                if !d.writes.refusing() {
                    tracing::debug!(
                        "{}: cannot claim deliveries to {}: {e}",
                        spec.name,
                        site.name
                    );
                }
                d.writes.refused(&e);
                break;
            }
        }
    }
    (!claimed.is_empty()).then_some(claimed)
}

/// Sends `claimed` as one fan-out, records each site's part, and lets go
/// of the round's (site, path) pairs.
async fn send(d: &Distributor, spec: &SourceSpec, claimed: Batch, shared: &Mutex<Rounds>) {
    deliver(d, spec, &claimed, shared).await;
    if let Ok(mut r) = shared.lock() {
        for (site, owed) in &claimed {
            for o in owed {
                r.in_flight.remove(&(site.name.clone(), o.path.clone()));
            }
        }
    }
}

/// The fan-out of one round and what each site's report says.
async fn deliver(d: &Distributor, spec: &SourceSpec, claimed: &Batch, shared: &Mutex<Rounds>) {
    let t0 = Instant::now();
    let mut files: Vec<String> = Vec::new();
    let mut unplaced: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for (site, owed) in claimed {
        let mut bad = Vec::new();
        for o in owed {
            match rel_in(&spec.dest, o) {
                Some(rel) => files.push(rel),
                None => bad.push((
                    o.path.clone(),
                    format!("{} is not under {}", o.local_path, spec.dest.display()),
                )),
            }
        }
        if !bad.is_empty() {
            unplaced.push((site.name.clone(), bad));
        }
    }
    // Files that cannot be read here are failed now, never offered: a
    // fan-out whose every entry fails to open does not end (noted for the
    // fan-out), and a site must never be said to hold what was not sent.
    let (dest, keep) = (spec.dest.clone(), spec.keep);
    let probe = files.clone();
    let unreadable: HashMap<String, String> =
        tokio::task::spawn_blocking(move || unreadable_beneath(&dest, &probe, keep))
            .await
            .unwrap_or_default();
    if !unreadable.is_empty() {
        files.retain(|f| !unreadable.contains_key(f));
        for (site, owed) in claimed {
            let bad: Vec<(String, String)> = owed
                .iter()
                .filter_map(|o| {
                    let rel = rel_in(&spec.dest, o)?;
                    let e = unreadable.get(&rel)?;
                    Some((o.path.clone(), format!("{rel} was not sent: {e}")))
                })
                .collect();
            unplaced.push((site.name.clone(), bad));
        }
    }
    for (site, bad) in unplaced {
        if let Some((p, e)) = bad.first() {
            tracing::warn!(
                "{} → {site}: {} file(s) not delivered, e.g. {p}: {e}; trying again in {:.0}s",
                spec.name,
                bad.len(),
                d.site_retry.as_secs_f64()
            );
        }
        let at = spec.deliver.iter().find(|s| s.name == site);
        if let Some(log) = at.and_then(|s| DeliveryLog::new(d, s)) {
            log.failed(&bad);
        }
        record_failed(d, spec, &site, bad, d.site_retry).await;
    }
    if files.is_empty() {
        return;
    }
    let dataset = Arc::new(Chosen::new(spec.dest.clone(), files.clone()).keeping(spec.keep));
    // Each site by its address, with its own options (token, transport);
    // one over ssh with the node started for this round.
    let sites: Vec<&SiteSpec> = claimed.iter().map(|(s, _)| s.as_ref()).collect();
    let reached = crate::sites::reach(&sites).await;
    let mut rates = vec![None; reached.urls.len()];
    for (site, place) in sites.iter().zip(&reached.placed) {
        if let Ok(i) = place {
            rates[*i] = site.rate;
        }
    }
    let fan = FanoutOptions {
        shape: Shape::Auto,
        rates,
        reach: reached.reach.clone(),
    };
    // The fan-out's own options (timeouts, transport) from a site it
    // reaches; each site's token and key come from the reach.
    let mut opts = claimed
        .iter()
        .zip(&reached.placed)
        .find(|(_, place)| place.is_ok())
        .map_or_else(
            || claimed[0].0.client.clone(),
            |((s, _), _)| s.client.clone(),
        );
    // What the source keeps, on every site.
    opts.keep = spec.keep;
    // That site's pin is no other site's: each site's own options (its
    // key, token) come from the reach, and an admitted site's key is
    // pinned by the fan-out itself.
    opts.unpin();
    let seen = Arc::new(Seen::new(&spec.dest));
    let names: Vec<&str> = claimed.iter().map(|(s, _)| s.name.as_str()).collect();
    let unique: HashSet<&String> = files.iter().collect();
    tracing::info!(
        "{}: delivering {} file(s) to {}",
        spec.name,
        unique.len(),
        names.join(", ")
    );
    let result = match reached.urls.is_empty() {
        true => Err(haul_node::NodeError::Usage(
            "no site could be reached".into(),
        )),
        false => haul_node::push_fanout(dataset, &reached.urls, &opts, &fan, seen.clone()).await,
    };
    // The nodes started over ssh for this round end with it, before the
    // catalog writes and hooks below.
    drop(fan);
    let placed = reached.end();
    let mut confirmed_paths: Vec<String> = Vec::new();
    let done = seen.done.lock().map(|m| m.clone()).unwrap_or_default();
    let failed_here = seen.failed.lock().map(|m| m.clone()).unwrap_or_default();
    for (i, (site, owed)) in claimed.iter().enumerate() {
        let report = match &placed[i] {
            Ok(j) => result
                .as_ref()
                .map(|s| s.nodes.get(*j))
                .map_err(ToString::to_string),
            Err(e) => Err(e.clone()),
        };
        let site_error = match &report {
            Ok(Some(n)) if n.ok => None,
            Ok(Some(n)) if !n.error.is_empty() => Some(n.error.clone()),
            Ok(Some(n)) => Some(format!("{} of its files failed there", n.failed)),
            Ok(None) => Some("no report from the fan-out".to_owned()),
            Err(e) => Some(e.clone()),
        };
        let (mut good, mut bad) = (Vec::new(), Vec::new());
        // The files this round's fan-out read and carried (not found up to
        // date): what the transfer log calls sent.
        let mut sent_now = std::collections::HashSet::new();
        for o in owed {
            let Some(rel) = rel_in(&spec.dest, o) else {
                continue;
            };
            // Failed before the fan-out (unreadable here): recorded once, above.
            if unreadable.contains_key(&rel) {
                continue;
            }
            if let Some(e) = failed_here.get(&rel) {
                bad.push((o.path.clone(), e.clone()));
            } else if let Some(e) = &site_error {
                bad.push((o.path.clone(), e.clone()));
            } else if let Some(hash) = done.get(&rel) {
                // Read and sent (its BLAKE3), or up to date there by size
                // and mtime (the version the catalog holds).
                if !hash.is_empty() {
                    sent_now.insert(o.path.clone());
                }
                let hash = if hash.is_empty() { &o.blake3 } else { hash };
                good.push((o.path.clone(), hash.clone()));
            } else {
                bad.push((
                    o.path.clone(),
                    format!(
                        "{rel} was not sent: it could not be read under {}",
                        spec.dest.display()
                    ),
                ));
            }
        }
        let log = DeliveryLog::new(d, site);
        if let Some(log) = &log {
            match &site_error {
                Some(e) => log.site_failed(&bad, e),
                None => log.failed(&bad),
            }
        }
        if !good.is_empty() {
            let bytes: u64 = owed
                .iter()
                .filter(|o| good.iter().any(|(p, _)| p == &o.path))
                .map(|o| o.size)
                .sum();
            tracing::info!(
                "{} → {}: {} file(s) delivered ({bytes} bytes) in {:.1}s",
                spec.name,
                site.name,
                good.len(),
                t0.elapsed().as_secs_f64()
            );
            let (source, name, at) = (
                spec.name.clone(),
                site.name.clone(),
                unix(SystemTime::now()),
            );
            let confirmed = good.clone();
            match blocking(&d.catalog, move |c| c.delivered(&source, &name, &good, at)).await {
                Ok(()) => {
                    if let Some(log) = &log {
                        let sent: Vec<_> = confirmed
                            .iter()
                            .filter(|(p, _)| sent_now.contains(p))
                            .cloned()
                            .collect();
                        log.sent(owed, &sent);
                    }
                    confirmed_paths.extend(confirmed.iter().map(|(p, _)| p.clone()));
                    if let Some(cmd) = &spec.on_deliver {
                        on_deliver(d, spec, site, cmd, &confirmed, at).await;
                    }
                }
                Err(e) => tracing::error!(
                    "{}: cannot record deliveries to {} in the catalog: {e}",
                    spec.name,
                    site.name
                ),
            }
        }
        let waits = shared.lock().ok().and_then(|mut r| {
            let turn = r.turns.get_mut(&site.name)?;
            Some(match &site_error {
                None => {
                    turn.backoff.progress_made();
                    turn.not_before = None;
                    Duration::ZERO
                }
                Some(_) => {
                    let wait = turn.backoff.next_wait().unwrap_or(MAX_SITE_WAIT);
                    turn.not_before = Some(Instant::now() + wait);
                    wait
                }
            })
        });
        match (site_error, waits) {
            (None, _) | (Some(_), None) => {}
            (Some(e), Some(wait)) => {
                tracing::warn!(
                    "{} → {}: {e}; {} file(s) wait, trying again in {:.0}s",
                    spec.name,
                    site.name,
                    bad.len(),
                    wait.as_secs_f64()
                );
                record_failed(d, spec, &site.name, std::mem::take(&mut bad), wait).await;
            }
        }
        if let Some((p, e)) = bad.first() {
            // Files that could not be read here, the site itself fine: one
            // line for them all.
            tracing::warn!(
                "{} → {}: {} file(s) not delivered, e.g. {p}: {e}; trying again in {:.0}s",
                spec.name,
                site.name,
                bad.len(),
                d.site_retry.as_secs_f64()
            );
            record_failed(d, spec, &site.name, bad, d.site_retry).await;
        }
    }
    if !spec.keep_local && !confirmed_paths.is_empty() {
        let locals: HashMap<String, (String, String)> = claimed
            .iter()
            .flat_map(|(_, owed)| owed.iter())
            .filter_map(|o| {
                rel_in(&spec.dest, o).map(|rel| (o.path.clone(), (rel, o.blake3.clone())))
            })
            .collect();
        release_local(d, spec, confirmed_paths, &locals).await;
    }
}

/// Runs `on_deliver` for each of `files` (path, BLAKE3) `site` confirmed
/// at `at`, with the file's facts from the catalog.
async fn on_deliver(
    d: &Distributor,
    spec: &SourceSpec,
    site: &SiteSpec,
    cmd: &str,
    files: &[(String, String)],
    at: i64,
) {
    for (path, blake3) in files {
        let (source, p) = (spec.name.clone(), path.clone());
        let record = match blocking(&d.catalog, move |c| c.file(&source, &p)).await {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(
                    "{}: {path}: on_deliver: cannot read the catalog: {e}",
                    spec.name
                );
                continue;
            }
        };
        let (local_path, fetched_at) = match &record.state {
            haul_catalog::State::Fetched { local_path, at, .. } => (local_path.clone(), *at),
            _ => (String::new(), 0),
        };
        let rel = Path::new(&local_path)
            .strip_prefix(&spec.dest)
            .map_or_else(|_| path.clone(), |r| r.display().to_string());
        let facts = crate::delivery::FileFacts {
            event: "delivered",
            source: spec.name.clone(),
            url: format!("{}/{}", spec.url.trim_end_matches('/'), path),
            path: path.clone(),
            local_path,
            size: record.seen.size.unwrap_or(0),
            remote_mtime: record.seen.mtime,
            etag: record.seen.etag.clone(),
            checksums_verified: record.seen.checksums.clone(),
            blake3: blake3.clone(),
            fetched_at,
            worker: d.worker.clone(),
            site: Some(site.name.clone()),
            site_url: Some(site.url_of(&rel)),
            delivered_at: Some(at),
        };
        let json = serde_json::to_value(&facts).unwrap_or_default();
        let env = crate::delivery::file_env(&facts);
        if let Err(e) = crate::delivery::run_hook(cmd, &env, &json, spec.hook_timeout).await {
            tracing::warn!(
                "{} → {}: {path}: on_deliver hook {e} (the file stays delivered)",
                spec.name,
                site.name
            );
        }
    }
}

/// `keep_local = false`: removes the local copy of each of `paths` that
/// every site of the source has confirmed (`locals`: catalog path → path
/// under DEST and the BLAKE3 the sites confirmed), beneath the
/// destination's held directories, and only while it still holds that
/// content.
async fn release_local(
    d: &Distributor,
    spec: &SourceSpec,
    paths: Vec<String>,
    locals: &HashMap<String, (String, String)>,
) {
    let sites: Vec<String> = spec.deliver.iter().map(|s| s.name.clone()).collect();
    let source = spec.name.clone();
    let asked = paths.clone();
    let lacking: HashSet<String> =
        match blocking(&d.catalog, move |c| c.unconfirmed(&source, &sites, &asked)).await {
            Ok(l) => l.into_iter().collect(),
            Err(e) => {
                tracing::warn!(
                    "{}: keep_local = false: cannot ask the catalog: {e}",
                    spec.name
                );
                return;
            }
        };
    let done: Vec<(String, String)> = paths
        .into_iter()
        .filter(|p| !lacking.contains(p))
        .filter_map(|p| locals.get(&p).cloned())
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    if done.is_empty() {
        return;
    }
    let dest = spec.dest.clone();
    let removed = tokio::task::spawn_blocking(move || remove_beneath(&dest, &done)).await;
    match removed {
        Ok((n, kept)) => {
            if n > 0 {
                tracing::info!(
                    "{}: removed the local copy of {n} file(s) every site confirmed (keep_local = false)",
                    spec.name
                );
            }
            if let Some(e) = kept.first() {
                tracing::warn!(
                    "{}: keep_local = false: {} local copy(ies) kept, e.g. {e}",
                    spec.name,
                    kept.len()
                );
            }
        }
        Err(e) => tracing::warn!("{}: keep_local = false: {e}", spec.name),
    }
}

/// Unlinks each of `files` (path under `dest`, BLAKE3) beneath `dest`'s held
/// directories (no symlink followed on the way) if it still holds that
/// content and that name is still the file read (a new version fetched
/// into its place since stays); returns how many, and why the others stayed.
fn remove_beneath(dest: &Path, files: &[(String, String)]) -> (usize, Vec<String>) {
    let root = match haul_root::Root::open(dest) {
        Ok(r) => r,
        Err(e) => return (0, vec![format!("{}: {e}", dest.display())]),
    };
    let (mut n, mut kept) = (0, Vec::new());
    for (rel, blake3) in files {
        let result =
            parent_of(&root, rel).and_then(|(dir, name)| remove_if_same(&dir, name, blake3));
        match result {
            Ok(()) => n += 1,
            Err(e) => kept.push(format!("{rel}: {e}")),
        }
    }
    (n, kept)
}

/// The held directory of `rel` (a path under `root`, no symlink followed
/// on the way) and its last component.
fn parent_of<'a>(
    root: &haul_root::Root,
    rel: &'a str,
) -> Result<(haul_root::Dir, &'a str), String> {
    let comps: Vec<&str> = rel.split('/').collect();
    let Some((name, parents)) = comps.split_last() else {
        return Err("an empty path".into());
    };
    root.open_dir(parents)
        .map(|dir| (dir, *name))
        .map_err(|e| e.to_string())
}

/// Unlinks `name` in `dir` if its content hashes to `blake3` and the name
/// still refers to the file hashed.
fn remove_if_same(dir: &haul_root::Dir, name: &str, blake3: &str) -> Result<(), String> {
    let (file, before) = dir.open_regular(name).map_err(|e| e.to_string())?;
    // Read from disk, never answered from the hash cache: a deletion is
    // decided on the bytes themselves.
    use haul_engine::content::ContentHasher as _;
    let file = haul_engine::LocalFile::open(file).map_err(|e| format!("cannot read it: {e}"))?;
    let hash = haul_engine::content::ReadEveryByte
        .whole_file(&file)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if hash.to_hex().as_str() != blake3 {
        return Err("its content is no longer what the sites confirmed".into());
    }
    match dir.stat(name) {
        Ok(Some(now)) if now.dev == before.dev && now.ino == before.ino => {
            dir.unlink(name).map_err(|e| e.to_string())
        }
        _ => Err("another file took its name meanwhile".into()),
    }
}

/// Those of `files` (paths under `dest`) that cannot be opened as regular
/// files beneath `dest`'s held directories, with why.
fn unreadable_beneath(
    dest: &Path,
    files: &[String],
    keep: haul_proto::Keep,
) -> HashMap<String, String> {
    let root = match haul_root::Root::open(dest) {
        Ok(r) => r,
        Err(e) => {
            let why = format!("cannot open {}: {e}", dest.display());
            return files.iter().map(|f| (f.clone(), why.clone())).collect();
        }
    };
    // With `keep`, read as the fan-out reads them: the file and each
    // directory above it with their owners and attributes.
    let attrs = keep
        .any()
        .then(|| std::sync::Arc::new(haul_engine::attrs::AttrReader::new(keep)));
    let as_sent = |rel: &str| -> Result<(), String> {
        let Some(attrs) = &attrs else {
            return Ok(());
        };
        let mut at = String::new();
        for comp in rel.split('/') {
            if !at.is_empty() {
                at.push('/');
            }
            at.push_str(comp);
            haul_engine::LocalTree::entry_beneath(&root, &at, Some(attrs))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    let mut out = HashMap::new();
    for rel in files {
        let opened = parent_of(&root, rel)
            .and_then(|(dir, name)| dir.open_regular(name).map_err(|e| e.to_string()))
            .and_then(|_| as_sent(rel));
        if let Err(e) = opened {
            out.insert(
                rel.clone(),
                format!("it cannot be read under {}: {e}", dest.display()),
            );
        }
    }
    out
}

/// Records `files` (path and error) as failed at `site`, due again after `wait`.
async fn record_failed(
    d: &Distributor,
    spec: &SourceSpec,
    site: &str,
    files: Vec<(String, String)>,
    wait: Duration,
) {
    if files.is_empty() {
        return;
    }
    let next = unix(SystemTime::now() + wait);
    let (source, name) = (spec.name.clone(), site.to_owned());
    if let Err(e) = blocking(&d.catalog, move |c| {
        c.delivery_failed(&source, &name, &files, next)
    })
    .await
    {
        tracing::error!(
            "{}: cannot record failed deliveries to {site} in the catalog: {e}",
            spec.name
        );
    }
}
