//! `haul daemon` and `haul catalog`: the config file → the daemon library
//! (`haul-daemon`) and the catalog (`haul-catalog`); signals → commands.

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{bail, Context, Result};
use haul_catalog::{Catalog, State};
use haul_daemon::{Board, Command, DaemonOptions, SourceFrom, SourceSpec};
use haul_remote::{RemoteUrl, Secret};
use haul_status::console::ConsoleKey;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::mpsc;

use crate::cli::{CatalogArgs, CatalogCommand, DaemonArgs, StatusArgs};
use crate::daemon_config::{self, DaemonConfig, SitePlan, SourcePlan};
use crate::location::NodeAt;
use crate::{exit, fetch, usage};

/// `haul daemon --check`: validates and prints each source's plan and next runs.
pub fn check(args: &DaemonArgs, json: bool) -> Result<u8> {
    let config = usage(daemon_config::load(&args.config))?;
    let now = SystemTime::now();
    let mut out = Vec::new();
    for s in &config.sources {
        let url = s.shown_url();
        let mut next = Vec::new();
        let mut t = s.schedule.first(now);
        for _ in 0..3 {
            next.push(t);
            t = s.schedule.next(t);
        }
        out.push((s, url, next));
    }
    if json {
        let sources: Vec<_> = out
            .iter()
            .map(|(s, url, next)| {
                serde_json::json!({
                    "name": s.name, "url": url, "dest": s.dest,
                    "schedule": s.schedule.describe(), "jitter_seconds": s.jitter.as_secs(),
                    "refetch": refetch_name(s.refetch), "rules": s.rules.iter().map(|(k, g)| format!("{k:?} {g}")).collect::<Vec<_>>(),
                    "next_runs": next.iter().map(|t| rfc3339(*t)).collect::<Vec<_>>(),
                    "deliver": s.deliver, "catch_up": catch_up_name(s.catch_up),
                    "keep": daemon_config::shown_keep(s.keep),
                    "plan": (!s.deliver.is_empty()).then(|| delivery_plan(&config.sites, &s.deliver)),
                })
            })
            .collect();
        crate::output::json_line(&serde_json::json!({
            "event": "check", "ok": true, "catalog": haul_catalog::shown_url(&config.catalog),
            "status": config.status.map(|a| a.to_string()), "worker": config.worker,
            "max_files": config.max_files, "max_files_per_host": config.max_files_per_host,
            "staging": config.staging.as_ref().map(|p| p.display().to_string()),
            "sites": config.sites.iter().map(|s| serde_json::json!({
                "name": s.name, "url": s.at.shown(), "via": s.via,
                "rate": s.rate, "transport": s.transfer.transport.as_deref().unwrap_or("tcp"),
            })).collect::<Vec<_>>(),
            "sources": sources,
        }));
        return Ok(exit::OK);
    }
    println!(
        "config {} is valid: {} source(s); catalog {}; status {}; worker {:?}; at most {} files at once ({} per host)",
        args.config.display(),
        config.sources.len(),
        haul_catalog::shown_url(&config.catalog),
        config
            .status
            .map_or_else(|| "off".to_string(), |a| format!("http://{a}/status")),
        config.worker,
        config.max_files,
        config.max_files_per_host,
    );
    if let Some(dir) = &config.staging {
        println!(
            "partial downloads staged in {}/NAME (same filesystem as every dest)",
            dir.display()
        );
    }
    for site in &config.sites {
        println!(
            "site {}: {} ({}{}{})",
            site.name,
            site.at.shown(),
            site.transfer.transport.as_deref().unwrap_or("tcp"),
            site.rate.map_or_else(String::new, |r| format!(
                ", uploads {}/s",
                crate::output::human_bytes(r as u64)
            )),
            site.via
                .as_ref()
                .map_or_else(String::new, |v| format!(", fed and reached through {v}"))
        );
    }
    for (s, url, next) in &out {
        println!("\n[{}] {url} -> {}", s.name, s.dest.display());
        let jitter = if s.jitter.is_zero() {
            String::new()
        } else {
            format!(" (+ up to {} jitter)", haul_time::format_duration(s.jitter))
        };
        println!("  schedule: {}{jitter}", s.schedule.describe());
        println!("  refetch:  {}", refetch_name(s.refetch));
        if !s.rules.is_empty() {
            let rules: Vec<String> = s.rules.iter().map(|(k, g)| format!("{k:?} {g}")).collect();
            println!("  filters:  {}", rules.join(", "));
        }
        println!(
            "  next runs: {}",
            next.iter()
                .map(|t| rfc3339(*t))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if !s.deliver.is_empty() {
            println!(
                "  deliver:  {} ({} first); {}",
                s.deliver.join(", "),
                catch_up_name(s.catch_up),
                delivery_plan(&config.sites, &s.deliver)
            );
            if !s.keep_local {
                println!(
                    "  keep_local: no — each file is removed here once every site confirmed it"
                );
            }
        }
        if let Some(kept) = daemon_config::shown_keep(s.keep) {
            println!("  keep:     {kept} (beyond mode and mtime)");
        }
    }
    Ok(exit::OK)
}

fn catch_up_name(c: haul_catalog::CatchUp) -> &'static str {
    match c {
        haul_catalog::CatchUp::Oldest => "oldest",
        haul_catalog::CatchUp::Newest => "newest",
    }
}

/// The plan a delivery to `names` starts with when every site lacks the
/// batch (a 64 MiB file; `auto` weighs the sites' rates and depth).
fn delivery_plan(sites: &[SitePlan], names: &[String]) -> String {
    let rates: Vec<Option<f64>> = names
        .iter()
        .map(|n| sites.iter().find(|s| &s.name == n).and_then(|s| s.rate))
        .collect();
    let rates = haul_plan::Rates {
        client: None,
        nodes: rates,
        delay: 0.0,
    };
    // A site fed through another hangs beneath it.
    let fixed: Vec<Option<haul_plan::Parent>> = names
        .iter()
        .map(|n| {
            let via = sites.iter().find(|s| &s.name == n)?.via.as_ref()?;
            Some(match names.iter().position(|m| m == via) {
                Some(j) => haul_plan::Parent::Node(j),
                None => haul_plan::Parent::Client,
            })
        })
        .collect();
    let plan = haul_plan::Plan::build_fixed(
        &rates,
        haul_plan::Shape::Auto,
        64 << 20,
        haul_plan::Candidates::All,
        &fixed,
    );
    let order: Vec<String> = plan
        .parents
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let from = match p {
                haul_plan::Parent::Client => "daemon".to_owned(),
                haul_plan::Parent::Node(j) => names.get(*j).cloned().unwrap_or_default(),
            };
            format!("{from} -> {}", names.get(i).map_or("?", String::as_str))
        })
        .collect();
    format!(
        "one fan-out per batch, plan {}: {}",
        plan.shape,
        order.join(", ")
    )
}

fn refetch_name(r: haul_catalog::Refetch) -> &'static str {
    match r {
        haul_catalog::Refetch::Never => "never",
        haul_catalog::Refetch::IfChanged => "if-changed",
    }
}

/// A time as `2026-12-02T12:40:00Z`.
fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    unix_text(i64::try_from(secs).unwrap_or(0))
}

/// Unix seconds as `2026-12-02T12:40:00Z`.
pub fn unix_text(secs: i64) -> String {
    let t = u64::try_from(secs)
        .ok()
        .and_then(|s| SystemTime::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(s)));
    t.and_then(|t| haul_time::strftime_utc(t, "%Y-%m-%dT%H:%M:%SZ").ok())
        .unwrap_or_else(|| secs.to_string())
}

/// Opens the catalog on a blocking thread (PostgreSQL's client blocks).
async fn open_catalog(url: &str) -> Result<Arc<dyn Catalog>> {
    let u = url.to_string();
    let catalog = tokio::task::spawn_blocking(move || haul_catalog::open(&u))
        .await
        .context("catalog task failed")?
        .with_context(|| format!("cannot open the catalog {}", haul_catalog::shown_url(url)))?;
    Ok(Arc::from(catalog))
}

/// The daemon's options from a validated config (opening each remote).
fn daemon_options(config: &DaemonConfig) -> Result<DaemonOptions> {
    // A site's `via` first (the config has no loops: each round builds
    // at least one).
    let mut built: Vec<Option<Arc<haul_daemon::SiteSpec>>> = vec![None; config.sites.len()];
    while built.iter().any(Option::is_none) {
        let before = built.iter().flatten().count();
        for (i, s) in config.sites.iter().enumerate() {
            let via = match &s.via {
                None => None,
                Some(up) => match built.iter().flatten().find(|b| &b.name == up) {
                    Some(b) => Some(b.clone()),
                    None => continue,
                },
            };
            if built[i].is_none() {
                built[i] = Some(Arc::new(haul_daemon::SiteSpec {
                    name: s.name.clone(),
                    at: s.at.clone(),
                    rate: s.rate,
                    client: s.client.clone(),
                    via,
                }));
            }
        }
        if built.iter().flatten().count() == before {
            bail!("the sites' downstream lists form a loop");
        }
    }
    let sites: Vec<Arc<haul_daemon::SiteSpec>> = built.into_iter().flatten().collect();
    let sources = config
        .sources
        .iter()
        .map(|s| {
            let mut spec = source_spec(s, config.hook_timeout)?;
            spec.deliver = s
                .deliver
                .iter()
                .filter_map(|name| sites.iter().find(|site| &site.name == name).cloned())
                .collect();
            spec.catch_up = s.catch_up;
            Ok(spec)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(DaemonOptions {
        worker: config.worker.clone(),
        max_files: config.max_files,
        max_files_per_host: config.max_files_per_host,
        lease: config.lease,
        grace: config.grace,
        down_retry: config.down_retry,
        down_retry_max: config.down_retry_max,
        file_retry: config.file_retry,
        sources,
        partial_ttl: config.partial_ttl,
        // Opened once, at start (`open_transfer_log`); a reload keeps it.
        log: None,
    })
}

/// The daemon's transfer log (`log_file`), opened once at start.
fn open_transfer_log(config: &DaemonConfig) -> Result<Option<Arc<haul_node::TransferLog>>> {
    let Some((path, format)) = &config.log else {
        return Ok(None);
    };
    let log = haul_node::TransferLog::file_only(*format, path)
        .with_context(|| format!("log_file: cannot open {}", path.display()))?;
    Ok(Some(Arc::new(log)))
}

fn source_spec(plan: &SourcePlan, hook_timeout: std::time::Duration) -> Result<SourceSpec> {
    let (from, url, host, timeout) = match &plan.node {
        Some(node) => node_source(plan, node),
        None => remote_source(plan)?,
    };
    Ok(SourceSpec {
        name: plan.name.clone(),
        url,
        host,
        from,
        dest: plan.dest.clone(),
        schedule: plan.schedule.clone(),
        jitter: plan.jitter,
        refetch: plan.refetch,
        timeout,
        sidecar: plan.sidecar,
        on_file: plan.on_file.clone(),
        on_run: plan.on_run.clone(),
        hook_timeout,
        staging: plan.staging.clone(),
        deliver: Vec::new(),
        catch_up: plan.catch_up,
        keep_local: plan.keep_local,
        keep: plan.keep,
        on_deliver: plan.on_deliver.clone(),
        deliver_batch: plan.deliver_batch,
    })
}

/// Where a source's files come from, as messages show it, the host its
/// caps count against, and its network timeout.
type SourceOrigin = (SourceFrom, String, String, std::time::Duration);

/// A haul node source: each run reaches the node afresh (over ssh, a new
/// node for the run) with the source's filter as of that run.
fn node_source(plan: &SourcePlan, node: &daemon_config::NodeSource) -> SourceOrigin {
    let host = match &node.at {
        NodeAt::Haul(url) => url.addr.clone(),
        // The host's caps, whoever logs in there.
        NodeAt::Ssh(at) => at.host.clone(),
    };
    let (at, client, filter, remote_args) = (
        node.at.clone(),
        node.client.clone(),
        plan.filter.clone(),
        plan.remote.clone(),
    );
    // Kept from run to run: a node that watches its root (`--watch`) then
    // lists only what changed since the last run that handled everything.
    let cursor = Arc::new(haul_node::ListCursor::default());
    let from = SourceFrom::Node(Arc::new(move || {
        let filter =
            daemon_config::node_filter(&filter, &remote_args).map_err(|e| format!("{e:#}"))?;
        let mut opts = client.clone();
        opts.filter = Some(Arc::new(filter));
        opts.list_cursor = Some(cursor.clone());
        Ok((at.node_path(&opts), opts))
    }));
    (from, plan.shown_url(), host, node.client.timeouts.idle)
}

/// A source haul-fetch reads (FTP, FTPS, SFTP, HTTP(S), S3).
fn remote_source(plan: &SourcePlan) -> Result<SourceOrigin> {
    let context = || format!("source {:?}", plan.name);
    let url = RemoteUrl::parse(&plan.url).with_context(context)?;
    let mut ropts = fetch::remote_options(&plan.transfer, &plan.remote).with_context(context)?;
    if plan.remote.password_file.is_none() {
        // Each source names its own secret: HAUL_PASSWORD is not shared by all.
        ropts.password = match &plan.password_env {
            Some(var) => Some(Secret::new(std::env::var(var).with_context(|| {
                format!("source {:?}: password_env: ${var} is not set", plan.name)
            })?)),
            None => None,
        };
    }
    let remote = fetch::open_remote(&url, &ropts).with_context(context)?;
    let (transfer, remote_args, filter) = (
        plan.transfer.clone(),
        plan.remote.clone(),
        plan.filter.clone(),
    );
    let from = SourceFrom::Remote {
        remote,
        path: url.path.clone(),
        options: Arc::new(move || {
            crate::config::filter(&filter)
                .and_then(|f| fetch::fetch_options(&transfer, &remote_args, f))
                .map_err(|e| format!("{e:#}"))
        }),
    };
    let host = format!("{}:{}", url.host, url.port);
    Ok((from, url.to_string(), host, ropts.timeout))
}

/// `haul daemon --config FILE`: runs until SIGTERM or SIGINT; SIGHUP reloads.
pub async fn run(args: &DaemonArgs) -> Result<u8> {
    let config = usage(daemon_config::load(&args.config))?;
    let catalog = open_catalog(&config.catalog).await?;
    let mut opts = usage(daemon_options(&config))?;
    opts.log = usage(open_transfer_log(&config))?;
    let started = i64::try_from(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    )
    .unwrap_or(0);
    let board = Arc::new(Board::new(&config.worker, started));
    tracing::info!(
        "haul daemon: worker {:?}, {} source(s), catalog {}",
        config.worker,
        opts.sources.len(),
        haul_catalog::shown_url(&config.catalog)
    );
    let (tx, rx) = mpsc::channel(4);
    if let Some(addr) = config.status {
        let listener = usage(
            haul_daemon::StatusListener::bind(addr)
                .await
                .with_context(|| format!("status = \"{addr}\": cannot listen there (another daemon? use another port, or status = \"off\")")),
        )?;
        let bound = listener.local_addr()?;
        let key = match &config.status_token {
            Some(token) => ConsoleKey::new(token, bound.port())?,
            None => {
                let key = ConsoleKey::generate(bound.port())?;
                tracing::info!(
                    "console actions: open http://{bound}/?token={} once (a new token at each start; status_token in the config keeps one)",
                    key.token()
                );
                key
            }
        };
        tracing::info!("status: console at http://{bound}/, and /status, /metrics, /healthz");
        let routes =
            haul_daemon::DaemonRoutes::new(board.clone(), catalog.clone(), tx.clone(), key);
        tokio::spawn(listener.serve(Arc::new(routes)));
    }
    let path = args.config.clone();
    // Registered before anything runs: SIGHUP's default action ends the process.
    let handlers = (
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
        signal(SignalKind::hangup())?,
    );
    let kept = (config.catalog.clone(), config.log.clone());
    let signals = tokio::spawn(signals(handlers, path, kept, opts.log.clone(), tx));
    crate::notify::ready(&format!("{} source(s)", opts.sources.len()));
    let result = haul_daemon::run(catalog, board, opts, rx).await;
    signals.abort();
    result?;
    tracing::info!("haul daemon: stopped");
    Ok(exit::OK)
}

/// SIGTERM/SIGINT → stop; SIGHUP → reload `path` (a config that does not
/// validate is reported and the running one kept).
async fn signals(
    (mut term, mut int, mut hup): (Signal, Signal, Signal),
    path: std::path::PathBuf,
    (catalog, log): (String, Option<(std::path::PathBuf, haul_node::LogFormat)>),
    transfer_log: Option<Arc<haul_node::TransferLog>>,
    tx: mpsc::Sender<Command>,
) -> Result<()> {
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => {
                reopen(transfer_log.as_deref());
                match reload(&path, &catalog, &log) {
                    Ok(opts) => {
                        let _ = tx.send(Command::Reload(opts)).await;
                    }
                    Err(e) => tracing::error!("SIGHUP: keeping the running configuration: {e:#}"),
                }
            }
        }
    }
    tracing::info!("haul daemon: stopping");
    crate::notify::notify("STOPPING=1");
    let _ = tx.send(Command::Stop).await;
    Ok(())
}

/// SIGHUP opens the transfer log file again (logrotate's `postrotate`:
/// `systemctl reload haul-daemon`), whether or not the config reloads.
fn reopen(log: Option<&haul_node::TransferLog>) {
    if let Some(log) = log {
        match log.reopen() {
            Ok(_) => tracing::info!("SIGHUP: the transfer log file reopened"),
            Err(e) => tracing::warn!(
                "SIGHUP: cannot reopen the transfer log file: {e} (lines go on to the old one)"
            ),
        }
    }
}

fn reload(
    path: &Path,
    catalog: &str,
    log: &Option<(std::path::PathBuf, haul_node::LogFormat)>,
) -> Result<DaemonOptions> {
    let config = daemon_config::load(path)?;
    if config.catalog != catalog {
        tracing::warn!("SIGHUP: a new catalog takes a restart; the sources are reloaded");
    }
    if &config.log != log {
        tracing::warn!(
            "SIGHUP: a new log_file or log_format takes a restart; the sources are reloaded"
        );
    }
    daemon_options(&config)
}

/// `haul catalog list|show|forget`.
pub async fn catalog(args: &CatalogArgs, json: bool) -> Result<u8> {
    let config = match &args.config {
        Some(path) => Some(usage(daemon_config::load(path))?),
        None => None,
    };
    let url = match (&args.catalog, &config) {
        (Some(url), _) => url.clone(),
        (None, Some(config)) => config.catalog.clone(),
        (None, None) => {
            return Err(crate::UsageError(
                "haul catalog needs --config haul.toml or --catalog URL".into(),
            )
            .into())
        }
    };
    let catalog = open_catalog(&url).await?;
    let cmd = args.command.clone();
    // The sources that deliver to each site, when the config says.
    let delivering: Vec<(String, Vec<String>)> = config
        .map(|c| {
            c.sources
                .iter()
                .map(|s| (s.name.clone(), s.deliver.clone()))
                .collect()
        })
        .unwrap_or_default();
    tokio::task::spawn_blocking(move || catalog_command(catalog.as_ref(), &cmd, &delivering, json))
        .await
        .context("catalog task failed")?
}

/// The sources whose deliveries to `site` a command is about: `--source`,
/// or those of the config that deliver there.
fn sources_of_site(
    site: &str,
    source: Option<&String>,
    delivering: &[(String, Vec<String>)],
) -> Result<Vec<String>> {
    if let Some(s) = source {
        return Ok(vec![s.clone()]);
    }
    if delivering.is_empty() {
        return Err(crate::UsageError(format!(
            "--site {site}: name the source (--source NAME), or give --config so haul knows which sources deliver there"
        ))
        .into());
    }
    let found: Vec<String> = delivering
        .iter()
        .filter(|(_, sites)| sites.iter().any(|s| s == site))
        .map(|(name, _)| name.clone())
        .collect();
    if found.is_empty() {
        return Err(crate::UsageError(format!(
            "--site {site}: no source of the config delivers to it (deliver = [\"{site}\"])"
        ))
        .into());
    }
    Ok(found)
}

/// `haul catalog list --site`: each fetched file's delivery to the site.
fn list_deliveries(
    c: &dyn Catalog,
    sources: &[String],
    site: &str,
    state: Option<&str>,
    limit: u32,
    json: bool,
) -> Result<u8> {
    if matches!(state, Some("new" | "fetched")) {
        return Err(crate::UsageError(
            "with --site, --state is pending, claimed, delivered or failed".into(),
        )
        .into());
    }
    let mut shown = 0;
    for source in sources {
        for d in c.deliveries(source, site, state, limit)? {
            shown += 1;
            if json {
                crate::output::json_line(&serde_json::json!({
                    "source": source, "site": site, "path": d.path, "size": d.size,
                    "state": d.state, "attempts": d.attempts, "error": d.error,
                    "next_retry": d.next_retry.map(unix_text),
                    "delivered_at": d.delivered_at.map(unix_text), "blake3": d.blake3,
                }));
                continue;
            }
            let detail = match d.state.as_str() {
                "failed" => format!(
                    "  {} attempt(s), next {}: {}",
                    d.attempts,
                    d.next_retry.map_or_else(|| "now".into(), unix_text),
                    d.error.unwrap_or_default()
                ),
                "delivered" => format!("  {}", d.delivered_at.map(unix_text).unwrap_or_default()),
                _ => String::new(),
            };
            println!(
                "{:<9} {source} -> {site}  {}  {}{detail}",
                d.state, d.path, d.size
            );
        }
    }
    if !json && shown == 0 {
        eprintln!("no deliveries");
    }
    Ok(exit::OK)
}

fn catalog_command(
    c: &dyn Catalog,
    cmd: &CatalogCommand,
    delivering: &[(String, Vec<String>)],
    json: bool,
) -> Result<u8> {
    match cmd {
        CatalogCommand::List {
            source,
            site: Some(site),
            state,
            limit,
        } => {
            let sources = sources_of_site(site, source.as_ref(), delivering)?;
            return list_deliveries(c, &sources, site, state.as_deref(), *limit, json);
        }
        CatalogCommand::Retry { source, site } => {
            let n = c.retry_deliveries(source, site)?;
            if json {
                crate::output::json_line(&serde_json::json!({"event": "retry", "source": source, "site": site, "files": n}));
            } else {
                println!("{n} failed deliver(ies) of {source} to {site} are due now: a running daemon sends them at its next attempt at {site} (after a run of failures that may be up to 10 minutes away; restart the daemon to try at once)");
            }
        }
        CatalogCommand::Forget {
            source,
            path,
            all,
            site: Some(site),
        } => {
            if path.is_none() && !all {
                return Err(crate::UsageError(
                    "haul catalog forget SOURCE PATH --site NAME forgets PATH's deliveries there; --all all of them".into(),
                )
                .into());
            }
            let n = c.forget_site(source, site, path.as_deref())?;
            if json {
                crate::output::json_line(&serde_json::json!({"event": "forgot", "source": source, "site": site, "files": n}));
            } else {
                println!("forgot {n} deliver(ies) of {source} to {site}: they are delivered again");
            }
        }
        CatalogCommand::List {
            source,
            site: None,
            state,
            limit,
        } => {
            if matches!(state.as_deref(), Some("pending" | "delivered")) {
                return Err(crate::UsageError(
                    "--state pending and delivered are states of deliveries: add --site NAME".into(),
                )
                .into());
            }
            let files = c.files(source.as_deref(), state.as_deref(), *limit)?;
            for f in &files {
                if json {
                    crate::output::json_line(&file_json(f));
                } else {
                    println!(
                        "{:<8} {}  {}  {}",
                        f.state.name(),
                        f.source,
                        f.seen.path,
                        f.seen.size.map_or_else(|| "?".into(), |s| s.to_string())
                    );
                }
            }
            if !json && files.is_empty() {
                eprintln!("no files");
            }
        }
        CatalogCommand::Show { source, path } => match c.file(source, path)? {
            None => {
                return Err(crate::UsageError(format!(
                    "{source}: {path} is not in the catalog (haul catalog list --source {source} shows what is)"
                ))
                .into())
            }
            Some(f) if json => crate::output::json_line(&file_json(&f)),
            Some(f) => {
                let j = file_json(&f);
                if let Some(obj) = j.as_object() {
                    for (k, v) in obj {
                        println!("{k:<12} {}", v.as_str().map_or_else(|| v.to_string(), str::to_string));
                    }
                }
            }
        },
        CatalogCommand::Forget {
            source,
            path,
            all,
            site: None,
        } => {
            if path.is_none() && !all {
                return Err(crate::UsageError(
                    "haul catalog forget SOURCE PATH forgets PATH (and what is under it); --all forgets the whole source".into(),
                )
                .into());
            }
            let n = c.forget(source, path.as_deref())?;
            if json {
                crate::output::json_line(&serde_json::json!({"event": "forgot", "source": source, "files": n}));
            } else {
                println!("forgot {n} file(s) of {source}: the next run fetches them again");
            }
        }
        CatalogCommand::Runs { source, limit } => {
            for r in c.runs(source.as_deref(), *limit)? {
                if json {
                    crate::output::json_line(&serde_json::json!({
                        "id": r.id, "source": r.source, "worker": r.worker,
                        "started": unix_text(r.started), "ended": r.ended.map(unix_text),
                        "listed": r.counts.listed, "claimed": r.counts.claimed,
                        "fetched": r.counts.fetched, "failed": r.counts.failed,
                        "bytes": r.counts.bytes, "error": r.error, "abandoned": r.abandoned,
                        "hook_failure": r.hook_failure.as_ref().map(|h| h.error.clone()),
                    }));
                } else {
                    println!(
                        "#{} {} {} {}{}: {} listed, {} claimed, {} fetched ({} bytes), {} failed{}{}",
                        r.id,
                        r.source,
                        r.worker,
                        unix_text(r.started),
                        if r.ended.is_none() { " (running)" } else { "" },
                        r.counts.listed,
                        r.counts.claimed,
                        r.counts.fetched,
                        r.counts.bytes,
                        r.counts.failed,
                        r.error.map(|e| format!(" — {e}")).unwrap_or_default(),
                        r.hook_failure
                            .map(|h| format!(" — {}", h.error))
                            .unwrap_or_default()
                    );
                }
            }
        }
    }
    Ok(exit::OK)
}

fn file_json(f: &haul_catalog::FileRecord) -> serde_json::Value {
    let mut j = serde_json::json!({
        "source": f.source, "path": f.seen.path, "state": f.state.name(),
        "size": f.seen.size, "mtime": f.seen.mtime.map(unix_text), "etag": f.seen.etag,
        "checksums": f.seen.checksums.join(" "), "first_seen": unix_text(f.first_seen),
        "attempts": f.attempts,
    });
    if let Some(obj) = j.as_object_mut() {
        if let Some(h) = &f.hook_failure {
            obj.insert("hook_failure".into(), h.error.clone().into());
            obj.insert("hook_failed_at".into(), unix_text(h.at).into());
        }
        match &f.state {
            State::New => {}
            State::Claimed { by, until } => {
                obj.insert("claimed_by".into(), by.clone().into());
                obj.insert("claim_until".into(), unix_text(*until).into());
            }
            State::Fetched {
                blake3,
                local_path,
                at,
            } => {
                obj.insert("blake3".into(), blake3.clone().into());
                obj.insert("local_path".into(), local_path.clone().into());
                obj.insert("fetched_at".into(), unix_text(*at).into());
            }
            State::Failed {
                error, next_retry, ..
            } => {
                obj.insert("last_error".into(), error.clone().into());
                obj.insert("next_retry".into(), unix_text(*next_retry).into());
            }
        }
    }
    j
}

/// `haul status`: a running daemon's `/status`, for people (or `--json`).
pub async fn status(args: &StatusArgs, json: bool) -> Result<u8> {
    let addr = match &args.config {
        Some(path) => match usage(daemon_config::load(path))?.status {
            Some(a) => a.to_string(),
            None => {
                return Err(crate::UsageError(format!(
                    "{}: status = \"off\": the daemon has no status listener to ask",
                    path.display()
                ))
                .into())
            }
        },
        None => args.addr.clone(),
    };
    let status = haul_daemon::status::query(&addr, std::time::Duration::from_secs(10))
        .await
        .map_err(anyhow::Error::msg)?;
    if json {
        crate::output::json_line(&status);
        return Ok(exit::OK);
    }
    let text = |v: &serde_json::Value| v.as_i64().map_or_else(|| "-".to_string(), unix_text);
    println!(
        "worker {} (since {})",
        status["worker"].as_str().unwrap_or("?"),
        text(&status["started"])
    );
    if let Some(e) = status["catalog_error"].as_str() {
        println!(
            "DEGRADED since {}: the catalog refuses writes: {e} ({} delivered file(s) wait for their record; nothing new is claimed)",
            text(&status["catalog_error_since"]),
            status["unrecorded_files"].as_u64().unwrap_or(0)
        );
    }
    if let Some(sources) = status["sources"].as_object() {
        for (name, s) in sources {
            let state = if s["running"].as_bool() == Some(true) {
                "running".to_string()
            } else if s["down_for"].as_u64().unwrap_or(0) > 0 {
                format!("DOWN ({} runs)", s["down_for"])
            } else {
                "idle".to_string()
            };
            println!("\n[{name}] {} — {state}", s["url"].as_str().unwrap_or(""));
            println!(
                "  {} runs, {} files fetched ({} bytes), {} failed, {} in flight",
                s["runs"],
                s["files_fetched"],
                s["bytes_fetched"],
                s["files_failed"],
                s["in_flight"]
            );
            println!(
                "  last success {}, next run {}",
                text(&s["last_success"]),
                text(&s["next_run"])
            );
            if let Some(e) = s["last_error"].as_str() {
                println!("  last error: {e}");
            }
            if let Some(files) = status["catalog"][name]["files"].as_object() {
                let states: Vec<String> = files.iter().map(|(k, v)| format!("{v} {k}")).collect();
                println!("  catalog: {}", states.join(", "));
            }
        }
    }
    if let Some(rows) = status["deliveries"].as_array().filter(|r| !r.is_empty()) {
        print_deliveries(rows);
    }
    Ok(exit::OK)
}

/// The source × site table of `haul status`.
fn print_deliveries(rows: &[serde_json::Value]) {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    println!(
        "\n{:<16} {:<12} {:>9} {:>10} {:>9} {:>7} {:>8}  last error",
        "source", "site", "delivered", "pending", "bytes", "failed", "lag"
    );
    for r in rows {
        let lag = n(&r["lag_seconds"]);
        println!(
            "{:<16} {:<12} {:>9} {:>10} {:>9} {:>7} {:>8}  {}",
            r["source"].as_str().unwrap_or("?"),
            r["site"].as_str().unwrap_or("?"),
            n(&r["files_delivered"]),
            n(&r["files_pending"]),
            crate::output::human_bytes(n(&r["bytes_pending"])),
            n(&r["files_failed"]),
            if lag == 0 {
                "-".to_owned()
            } else {
                haul_time::format_duration(std::time::Duration::from_secs(lag))
            },
            r["last_error"].as_str().unwrap_or("")
        );
    }
}
