//! `haul daemon` and `haul catalog`: the config file → the daemon library
//! (`haul-daemon`) and the catalog (`haul-catalog`); signals → commands.

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context, Result};
use haul_catalog::{Catalog, State};
use haul_daemon::{Board, Command, DaemonOptions, SourceSpec};
use haul_remote::{RemoteUrl, Secret};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::mpsc;

use crate::cli::{CatalogArgs, CatalogCommand, DaemonArgs, StatusArgs};
use crate::daemon_config::{self, DaemonConfig, SourcePlan};
use crate::{fetch, usage, EXIT_OK};

/// `haul daemon --check`: validates and prints each source's plan and next runs.
pub fn check(args: &DaemonArgs, json: bool) -> Result<u8> {
    let config = usage(daemon_config::load(&args.config))?;
    let now = SystemTime::now();
    let mut out = Vec::new();
    for s in &config.sources {
        let url = usage(RemoteUrl::parse(&s.url).map_err(anyhow::Error::from))?;
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
                    "name": s.name, "url": url.to_string(), "dest": s.dest,
                    "schedule": s.schedule.describe(), "jitter_seconds": s.jitter.as_secs(),
                    "refetch": refetch_name(s.refetch), "rules": s.rules.iter().map(|(k, g)| format!("{k:?} {g}")).collect::<Vec<_>>(),
                    "next_runs": next.iter().map(|t| rfc3339(*t)).collect::<Vec<_>>(),
                })
            })
            .collect();
        crate::output::json_line(&serde_json::json!({
            "event": "check", "ok": true, "catalog": haul_catalog::shown_url(&config.catalog),
            "status": config.status.map(|a| a.to_string()), "worker": config.worker,
            "max_files": config.max_files, "max_files_per_host": config.max_files_per_host,
            "staging": config.staging.as_ref().map(|p| p.display().to_string()),
            "sources": sources,
        }));
        return Ok(EXIT_OK);
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
    }
    Ok(EXIT_OK)
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
    chrono::DateTime::from_timestamp(secs, 0).map_or_else(
        || secs.to_string(),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
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
    let sources = config
        .sources
        .iter()
        .map(|s| source_spec(s, config.hook_timeout))
        .collect::<Result<Vec<_>>>()?;
    Ok(DaemonOptions {
        worker: config.worker.clone(),
        max_files: config.max_files,
        max_files_per_host: config.max_files_per_host,
        lease: config.lease,
        grace: config.grace,
        down_retry: config.down_retry,
        sources,
        partial_ttl: config.partial_ttl,
    })
}

fn source_spec(plan: &SourcePlan, hook_timeout: std::time::Duration) -> Result<SourceSpec> {
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
    Ok(SourceSpec {
        name: plan.name.clone(),
        url: url.to_string(),
        host: format!("{}:{}", url.host, url.port),
        remote,
        path: url.path.clone(),
        dest: plan.dest.clone(),
        schedule: plan.schedule.clone(),
        jitter: plan.jitter,
        refetch: plan.refetch,
        timeout: ropts.timeout,
        options: Arc::new(move || {
            crate::config::filter(&filter)
                .and_then(|f| fetch::fetch_options(&transfer, &remote_args, f))
                .map_err(|e| format!("{e:#}"))
        }),
        sidecar: plan.sidecar,
        on_file: plan.on_file.clone(),
        on_run: plan.on_run.clone(),
        hook_timeout,
        staging: plan.staging.clone(),
    })
}

/// `haul daemon --config FILE`: runs until SIGTERM or SIGINT; SIGHUP reloads.
pub async fn run(args: &DaemonArgs) -> Result<u8> {
    let config = usage(daemon_config::load(&args.config))?;
    let catalog = open_catalog(&config.catalog).await?;
    let opts = usage(daemon_options(&config))?;
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
    if let Some(addr) = config.status {
        let listener = usage(
            haul_daemon::StatusListener::bind(addr)
                .await
                .with_context(|| format!("status = \"{addr}\": cannot listen there (another daemon? use another port, or status = \"off\")")),
        )?;
        let bound = listener.local_addr()?;
        tracing::info!("status: http://{bound}/status, /metrics, /healthz");
        tokio::spawn(listener.serve(board.clone(), catalog.clone()));
    }
    let (tx, rx) = mpsc::channel(4);
    let path = args.config.clone();
    // Registered before anything runs: SIGHUP's default action ends the process.
    let handlers = (
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
        signal(SignalKind::hangup())?,
    );
    let signals = tokio::spawn(signals(handlers, path, config.catalog.clone(), tx));
    let result = haul_daemon::run(catalog, board, opts, rx).await;
    signals.abort();
    result?;
    tracing::info!("haul daemon: stopped");
    Ok(EXIT_OK)
}

/// SIGTERM/SIGINT → stop; SIGHUP → reload `path` (a config that does not
/// validate is reported and the running one kept).
async fn signals(
    (mut term, mut int, mut hup): (Signal, Signal, Signal),
    path: std::path::PathBuf,
    catalog: String,
    tx: mpsc::Sender<Command>,
) -> Result<()> {
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => match reload(&path, &catalog) {
                Ok(opts) => {
                    let _ = tx.send(Command::Reload(opts)).await;
                }
                Err(e) => tracing::error!("SIGHUP: keeping the running configuration: {e:#}"),
            },
        }
    }
    tracing::info!("haul daemon: stopping");
    let _ = tx.send(Command::Stop).await;
    Ok(())
}

fn reload(path: &Path, catalog: &str) -> Result<DaemonOptions> {
    let config = daemon_config::load(path)?;
    if config.catalog != catalog {
        tracing::warn!("SIGHUP: a new catalog takes a restart; the sources are reloaded");
    }
    daemon_options(&config)
}

/// `haul catalog list|show|forget`.
pub async fn catalog(args: &CatalogArgs, json: bool) -> Result<u8> {
    let url = match (&args.catalog, &args.config) {
        (Some(url), _) => url.clone(),
        (None, Some(path)) => usage(daemon_config::load(path))?.catalog,
        (None, None) => {
            return Err(crate::UsageError(
                "haul catalog needs --config haul.toml or --catalog URL".into(),
            )
            .into())
        }
    };
    let catalog = open_catalog(&url).await?;
    let cmd = args.command.clone();
    tokio::task::spawn_blocking(move || catalog_command(catalog.as_ref(), &cmd, json))
        .await
        .context("catalog task failed")?
}

fn catalog_command(c: &dyn Catalog, cmd: &CatalogCommand, json: bool) -> Result<u8> {
    match cmd {
        CatalogCommand::List {
            source,
            state,
            limit,
        } => {
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
        CatalogCommand::Forget { source, path, all } => {
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
                        "bytes": r.counts.bytes, "error": r.error,
                        "hook_failure": r.hook_failure.as_ref().map(|h| h.error.clone()),
                    }));
                } else {
                    println!(
                        "#{} {} {} {}: {} listed, {} claimed, {} fetched ({} bytes), {} failed{}{}",
                        r.id,
                        r.source,
                        r.worker,
                        unix_text(r.started),
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
    Ok(EXIT_OK)
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
        return Ok(EXIT_OK);
    }
    let text = |v: &serde_json::Value| v.as_i64().map_or_else(|| "-".to_string(), unix_text);
    println!(
        "worker {} (since {})",
        status["worker"].as_str().unwrap_or("?"),
        text(&status["started"])
    );
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
    Ok(EXIT_OK)
}
