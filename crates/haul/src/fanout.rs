//! `haul push` to several destinations: flags → a fan-out, and its summary.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use haul_node::{FanoutOptions, FanoutSummary, NodeUrl};

use crate::location::NodeAt;
use crate::named_nodes::NamedNodes;
use haul_plan::Shape;

use crate::cli::PushArgs;
use crate::output::{self, human_bytes, Display, Mode};
use crate::{config, exit, usage, UsageError};

/// The destinations of a `--to-file`: one per line (`haul://` URLs and
/// `[user@]host:path` locations); blank lines and `#` comments skipped.
pub fn read_url_file(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --to-file {}", path.display()))?;
    let mut urls = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match crate::location::parse_node_at(line) {
            Some(Ok(_)) => {}
            Some(Err(e)) => bail!("{}:{}: {e}", path.display(), n + 1),
            None => bail!(
                "{}:{}: {line:?} is not a node (haul://HOST:PORT/DEST or [user@]host:DEST)",
                path.display(),
                n + 1
            ),
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
    named: &NamedNodes,
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
    let ats: Vec<NodeAt> = dests
        .iter()
        .map(|d| match crate::location::parse_node_at(d) {
            Some(at) => at,
            None => Err(UsageError(format!(
                "{d:?} is not a node (haul://HOST:PORT/DEST or [user@]host:DEST)"
            ))
            .into()),
        })
        .collect::<Result<_>>()?;
    let shape: Shape = usage(args.plan.parse().map_err(anyhow::Error::from))?;
    let mut rates = vec![None; ats.len()];
    for r in &args.rate {
        let Some((url, rate)) = r.rsplit_once('=') else {
            return Err(UsageError(format!(
                "--rate {r:?}: use URL=RATE, e.g. haul://b:7878/in=20mbit"
            ))
            .into());
        };
        let rate = usage(config::parse_rate(rate))?;
        let addr = NodeUrl::parse(&named.rewrite(url)).ok().map(|u| u.addr);
        let mut found = false;
        for (i, (at, shown)) in ats.iter().zip(&dests).enumerate() {
            let same = match at {
                NodeAt::Haul(u) => Some(&u.addr) == addr.as_ref(),
                NodeAt::Ssh(_) => shown == url,
            };
            if same {
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
    let mut opts = usage(config::filtered_client_options(
        &args.transfer,
        &args.filter,
    ))?;
    opts.keep = args.rsync.keep();
    if let Some(filter) = &opts.filter {
        usage(config::check_files_from(filter, &paths))?;
    }
    let log = usage(config::client_log(
        &args.transfer,
        "push",
        true,
        &paths.join(" "),
        &dests.join(" "),
    ))?;
    let display = Arc::new(
        Display::new(mode)
            .itemizing(args.transfer.itemize_changes, true)
            .logging_to(log),
    );
    if args.transfer.dry_run {
        // Each destination compared with the source on its own: what the
        // fan-out would deliver to it (nothing is relayed or admitted).
        let mut code = exit::OK;
        // --max-delete: a node over it keeps every node from pruning.
        let mut over = None;
        for (at, shown) in ats.iter().zip(&dests) {
            match mode {
                Mode::Json => {
                    output::json_line(&serde_json::json!({"event": "dry_run_node", "node": shown}))
                }
                Mode::Human => println!("{shown}:"),
                Mode::Quiet => {}
            }
            let node = at.node_path(&usage(named.options_for(shown, opts.clone()))?);
            let report =
                haul_node::dry_run_push(&paths, &node, &opts, opts.delete, display.clone()).await?;
            display.finish();
            output::print_dry_run_report(mode, &report);
            if report.errors > 0 {
                code = exit::PARTIAL;
            }
            if opts.max_delete.is_some_and(|n| report.delete > n) && over.is_none() {
                over = Some(shown.clone());
            }
        }
        if let (Some(node), true) = (over, opts.delete) {
            let message = format!(
                "--max-delete: {node} would lose more than allowed, so the run deletes nothing on any node (they stay alike)"
            );
            match mode {
                Mode::Json => {
                    output::json_line(&serde_json::json!({"event": "warning", "message": message}))
                }
                Mode::Human => eprintln!("warning: {message}"),
                Mode::Quiet => {}
            }
        }
        return Ok(code);
    }
    if mode == Mode::Json {
        output::json_line(&serde_json::json!({
            "event": "start", "command": "push", "sources": paths, "dests": dests
        }));
    }
    let Started {
        urls,
        rates,
        reach,
        unstarted,
        names,
    } = start_over_ssh(&ats, &dests, rates, &opts, args, mode).await?;
    let fan = FanoutOptions {
        shape,
        rates,
        reach: usage(named.reach(&opts, &urls, reach))?,
    };
    let dataset =
        Arc::new(haul_node::dataset::Walk::new(&paths, opts.filter.clone()).keeping(opts.keep));
    let summary = crate::interruptible(
        &display,
        haul_node::push_fanout(dataset, &urls, &opts, &fan, display.clone()),
    )
    .await?;
    display.finish();
    let mut summary = summary?;
    names.rename(&mut summary);
    print(mode, &summary);
    Ok(exit_code(&summary, unstarted))
}

/// A node that lacks something, or was never started: a partial transfer
/// (each node's own error is in the summary). Everything delivered past a
/// lying relay: said apart from a clean run.
fn exit_code(summary: &FanoutSummary, unstarted: usize) -> u8 {
    if !summary.all_ok() || unstarted > 0 {
        exit::PARTIAL
    } else if summary.evicted().next().is_some() {
        exit::EVICTED
    } else {
        // Every node holds the same: a limit reached (--max-delete 25,
        // --max-transfer 8) is all that may be left to say.
        exit::for_failures(&summary.sent.failures)
    }
}

/// The nodes a fan-out goes to, once those over ssh were started.
struct Started {
    /// Each node's `haul://` form (the offered address for one over ssh).
    urls: Vec<NodeUrl>,
    rates: Vec<Option<f64>>,
    /// Knows the tokens and keys of the nodes started over ssh.
    reach: Arc<dyn haul_node::Reach>,
    /// Destinations whose ssh failed.
    unstarted: usize,
    names: Names,
}

/// What the user called each node started over ssh, by its offered address.
#[derive(Default)]
struct Names(std::collections::HashMap<String, String>);

impl Names {
    /// The summary with the user's names for nodes started over ssh (it
    /// knows them by their offered addresses).
    fn rename(&self, summary: &mut FanoutSummary) {
        for n in &mut summary.nodes {
            if let Some(shown) = n
                .url
                .strip_prefix("haul://")
                .and_then(|rest| self.0.get(rest.split('/').next().unwrap_or("")))
            {
                n.url.clone_from(shown);
            }
            n.from = n
                .from
                .split(", ")
                .map(|f| self.0.get(f).map_or(f, String::as_str))
                .collect::<Vec<_>>()
                .join(", ");
        }
    }
}

/// Starts a node on every `host:path` destination over ssh (at most
/// `--ssh-parallel` at once); each host whose ssh failed is said by name
/// and left out, and the fan-out goes on with the others.
async fn start_over_ssh(
    ats: &[NodeAt],
    dests: &[String],
    rates: Vec<Option<f64>>,
    opts: &haul_node::ClientOptions,
    args: &PushArgs,
    mode: Mode,
) -> Result<Started> {
    let ssh: Vec<_> = ats
        .iter()
        .filter_map(|at| match at {
            NodeAt::Ssh(s) => Some(s.clone()),
            NodeAt::Haul(_) => None,
        })
        .collect();
    if ssh.is_empty() {
        let urls = ats
            .iter()
            .filter_map(|at| match at {
                NodeAt::Haul(u) => Some(u.clone()),
                NodeAt::Ssh(_) => None,
            })
            .collect();
        return Ok(Started {
            urls,
            rates,
            reach: Arc::new(haul_node::OverNetwork),
            unstarted: 0,
            names: Names::default(),
        });
    }
    let (fleet, mut started) =
        haul_node::ssh::fleet::Fleet::start(&ssh, opts, args.ssh_parallel).await;
    started.reverse();
    let (mut urls, mut kept, mut unstarted) = (Vec::new(), Vec::new(), 0);
    let mut names = Names::default();
    for ((at, shown), rate) in ats.iter().zip(dests).zip(rates) {
        let url = match at {
            NodeAt::Haul(u) => u.clone(),
            NodeAt::Ssh(_) => match started.pop() {
                Some(Ok(u)) => {
                    tracing::info!("{shown}: node started over ssh at {}", u.addr);
                    names.0.insert(u.addr.clone(), shown.clone());
                    u
                }
                Some(Err(e)) => {
                    unstarted += 1;
                    match mode {
                        Mode::Json => output::json_line(&serde_json::json!({
                            "event": "node_not_started", "node": shown, "error": e.to_string()
                        })),
                        _ => eprintln!("error: {shown}: {e} (the fan-out goes on without it)"),
                    }
                    continue;
                }
                None => continue,
            },
        };
        urls.push(url);
        kept.push(rate);
    }
    if urls.is_empty() {
        bail!("no destination could be reached: nothing was sent");
    }
    Ok(Started {
        urls,
        rates: kept,
        reach: fleet,
        unstarted,
        names,
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
            // -z: what went on the wire, packed.
            let wire = s
                .sent
                .bytes_on_wire
                .filter(|&w| w != s.sent.bytes_transferred)
                .map(|w| format!(" ({} on the wire)", human_bytes(w)))
                .unwrap_or_default();
            eprintln!(
                "{mark}: {} of {} nodes complete ({} plan), {}{wire} sent by this client, in {:.2}s",
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
                    } + &match &n.evicted {
                        Some(e) => format!("  EVICTED: relayed unsealed data to {}", e.by),
                        None => String::new(),
                    }
                );
            }
            crate::output::print_failures(&s.sent.failures);
            for n in s.evicted() {
                if let Some(e) = &n.evicted {
                    eprintln!("warning: {}", e.warning(&n.url));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use haul_node::fanout::Eviction;
    use haul_node::NodeReport;

    fn node(ok: bool, evicted: bool) -> NodeReport {
        NodeReport {
            url: "haul://h:1/in".into(),
            from: "client".into(),
            ok,
            entries_ok: 1,
            failed: u64::from(!ok),
            bytes: 1,
            seconds: 1.0,
            error: String::new(),
            repaired: 0,
            damaged: Vec::new(),
            deleted: 0,
            evicted: evicted.then(|| Eviction {
                by: "haul://g:1/in".into(),
                entries: 0,
                chunks: 1,
            }),
        }
    }

    fn summary(nodes: Vec<NodeReport>) -> FanoutSummary {
        let rates = haul_plan::Rates::unknown(nodes.len());
        FanoutSummary {
            plan: haul_plan::Plan::build(&rates, haul_plan::Shape::Chain, 1),
            nodes,
            sent: haul_node::Summary::default(),
            seconds: 1.0,
        }
    }

    #[test]
    fn an_evicted_relay_is_said_apart_from_a_clean_run_but_not_over_a_failure() {
        let clean = summary(vec![node(true, false), node(true, false)]);
        assert_eq!(exit_code(&clean, 0), exit::OK);
        assert_eq!(exit_code(&clean, 1), exit::PARTIAL, "a node never started");
        let evicted = summary(vec![node(true, true), node(true, false)]);
        assert_eq!(exit_code(&evicted, 0), exit::EVICTED);
        let both = summary(vec![node(true, true), node(false, false)]);
        assert_eq!(exit_code(&both, 0), exit::PARTIAL);
    }
}
