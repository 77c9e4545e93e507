//! `haul push` to several destinations: flags → a fan-out, and its summary.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use haul_node::{FanoutOptions, FanoutSummary, NodeUrl};
use haul_plan::Shape;

use crate::cli::PushArgs;
use crate::output::{self, human_bytes, Display, Mode};
use crate::{config, usage, UsageError, EXIT_FAILED, EXIT_OK};

/// The URLs of a `--to-file`: one per line; blank lines and `#` comments skipped.
pub fn read_url_file(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --to-file {}", path.display()))?;
    let mut urls = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !NodeUrl::is_remote(line) {
            bail!(
                "{}:{}: {line:?} is not a haul://HOST:PORT/DEST URL",
                path.display(),
                n + 1
            );
        }
        urls.push(line.to_owned());
    }
    Ok(urls)
}

/// Runs a fan-out push of `paths` to `dests`.
pub async fn push(
    paths: Vec<String>,
    dests: Vec<String>,
    args: &PushArgs,
    mode: Mode,
) -> Result<u8> {
    if paths.is_empty() {
        return Err(UsageError(
            "push needs at least one local file or directory before the haul:// URLs".into(),
        )
        .into());
    }
    if dests.is_empty() {
        return Err(UsageError(
            "no destinations: give haul:// URLs or a --to-file that lists some".into(),
        )
        .into());
    }
    for p in &paths {
        usage(config::check_local_source(p))?;
    }
    if args.transfer.fingerprint.is_some() && dests.len() > 1 {
        return Err(UsageError("--fingerprint pins one key, and a fan-out has several nodes: drop it (each node's key is pinned in known_hosts, trust on first use) or push to one node".into()).into());
    }
    if let Some(d) = dests.iter().find(|d| !NodeUrl::is_remote(d)) {
        return Err(UsageError(format!(
            "{d:?}: a fan-out reaches its nodes at haul:// addresses (relays dial each other directly); over ssh, push to one host:path at a time for now"
        ))
        .into());
    }
    let urls: Vec<NodeUrl> = dests
        .iter()
        .map(|d| NodeUrl::parse(d))
        .collect::<Result<_, _>>()?;
    let shape: Shape = usage(args.plan.parse().map_err(anyhow::Error::from))?;
    let mut rates = vec![None; urls.len()];
    for r in &args.rate {
        let Some((url, rate)) = r.rsplit_once('=') else {
            return Err(UsageError(format!(
                "--rate {r:?}: use URL=RATE, e.g. haul://b:7878/in=20mbit"
            ))
            .into());
        };
        let rate = usage(config::parse_rate(rate))?;
        let at = NodeUrl::parse(url)?;
        let mut found = false;
        for (i, u) in urls.iter().enumerate() {
            if u.addr == at.addr {
                rates[i] = Some(rate);
                found = true;
            }
        }
        if !found {
            return Err(UsageError(format!(
                "--rate {r:?}: {url} is not one of the destinations"
            ))
            .into());
        }
    }
    let opts = usage(config::filtered_client_options(
        &args.transfer,
        &args.filter,
    ))?;
    let display = Arc::new(Display::new(mode));
    if args.transfer.dry_run {
        // Each destination compared with the source on its own: what the
        // fan-out would deliver to it (nothing is relayed or admitted).
        let mut code = EXIT_OK;
        for (url, shown) in urls.iter().zip(&dests) {
            match mode {
                Mode::Json => {
                    output::json_line(&serde_json::json!({"event": "dry_run_node", "node": shown}))
                }
                Mode::Human => println!("{shown}:"),
                Mode::Quiet => {}
            }
            let node = haul_node::NodePath::network(url, &opts);
            let report =
                haul_node::dry_run_push(&paths, &node, &opts, false, display.clone()).await?;
            display.finish();
            output::print_dry_run_report(mode, &report);
            if report.errors > 0 {
                code = EXIT_FAILED;
            }
        }
        return Ok(code);
    }
    if mode == Mode::Json {
        output::json_line(&serde_json::json!({
            "event": "start", "command": "push", "sources": paths, "dests": dests
        }));
    }
    let fan = FanoutOptions {
        shape,
        rates,
        reach: Arc::new(haul_node::OverNetwork),
    };
    let dataset = Arc::new(haul_node::dataset::Walk::new(&paths, opts.filter.clone()));
    let summary = crate::interruptible(
        &display,
        haul_node::push_fanout(dataset, &urls, &opts, &fan, display.clone()),
    )
    .await?;
    display.finish();
    let summary = summary?;
    print(mode, &summary);
    Ok(if summary.all_ok() {
        EXIT_OK
    } else {
        EXIT_FAILED
    })
}

fn print(mode: Mode, s: &FanoutSummary) {
    match mode {
        Mode::Json => {
            if let Ok(mut v) = serde_json::to_value(s) {
                if let Some(o) = v.as_object_mut() {
                    o.insert("event".into(), "fanout".into());
                }
                output::json_line(&v);
            }
        }
        Mode::Quiet => {}
        Mode::Human => {
            let failed = s.nodes.iter().filter(|n| !n.ok).count();
            let mark = if s.all_ok() { "ok" } else { "FAILED" };
            eprintln!(
                "{mark}: {} of {} nodes complete ({} plan), {} sent by this client, in {:.2}s",
                s.nodes.len() - failed,
                s.nodes.len(),
                s.plan.shape,
                human_bytes(s.sent.bytes_transferred),
                s.seconds
            );
            eprintln!(
                "  {:<40} {:<22} {:>8} {:>7} {:>10} {:>8}",
                "node", "received from", "entries", "failed", "bytes", "time"
            );
            for n in &s.nodes {
                eprintln!(
                    "  {:<40} {:<22} {:>8} {:>7} {:>10} {:>7.2}s{}",
                    n.url,
                    n.from,
                    n.entries_ok,
                    n.failed,
                    human_bytes(n.bytes),
                    n.seconds,
                    match (n.error.is_empty(), n.deleted) {
                        (true, 0) => String::new(),
                        (true, d) => format!("  {d} deleted"),
                        (false, _) => format!("  {}", n.error),
                    }
                );
            }
            crate::output::print_failures(&s.sent.failures);
        }
    }
}
