//! `haul push`: local files or trees to one node, or to many through a
//! fan-out (`fanout.rs`).

use std::sync::Arc;

use anyhow::Result;

use crate::cli::PushArgs;
use crate::named_nodes::NamedNodes;
use crate::output::{self, Display, Mode};
use crate::{config, dry_run_done, fanout, interruptible, report, usage, UsageError};

/// Runs `haul push`.
pub async fn run(args: PushArgs, mode: Mode) -> Result<u8> {
    let (mut dests, mut paths): (Vec<String>, Vec<String>) = args
        .paths
        .iter()
        .cloned()
        .partition(|p| crate::location::parse_node_at(p).is_some());
    if let Some(file) = &args.to_file {
        dests.extend(usage(fanout::read_url_file(file))?);
    }
    let named = usage(NamedNodes::load(&args.transfer))?;
    let mut dests: Vec<String> = dests.iter().map(|d| named.rewrite(d)).collect();
    if dests.len() > 1 || args.to_file.is_some() {
        return fanout::push(paths, dests, &args, &named, mode).await;
    }
    let target = dests
        .pop()
        .unwrap_or_else(|| paths.pop().unwrap_or_default());
    let Some(at) = crate::location::parse_node_at(&target) else {
        return Err(UsageError(format!("the last argument of push must be haul://HOST:PORT/DEST or [user@]host:DEST, not {target:?} (for a local copy use `haul pull SRC DEST`)")).into());
    };
    let at = at?;
    for p in &paths {
        usage(config::check_local_source(p))?;
    }
    let opts = usage(config::filtered_client_options(
        &args.transfer,
        &args.filter,
    ))?;
    let mut opts = usage(named.options_for(&target, opts))?;
    opts.keep = args.rsync.keep();
    if let Some(filter) = &opts.filter {
        usage(config::check_files_from(filter, &paths))?;
    }
    let path = if args.transfer.dry_run {
        None
    } else {
        usage(crate::path_hint::prepare(
            &mut opts,
            args.transfer.rate_hint.as_deref(),
            &at,
            haul_transport::Flow::Push,
        ))?
    };
    let remote = at.node_path(&opts);
    let log = usage(config::client_log(
        &args.transfer,
        "push",
        true,
        &paths.join(" "),
        &target,
    ))?;
    let display = Arc::new(
        Display::new(mode)
            .itemizing(args.transfer.itemize_changes, true)
            .logging_to(log),
    );
    if args.transfer.dry_run {
        let report =
            haul_node::dry_run_push(&paths, &remote, &opts, opts.delete, display.clone()).await?;
        return Ok(dry_run_done(mode, &display, &report));
    }
    if mode == Mode::Json {
        output::json_line(
            &serde_json::json!({"event": "start", "command": "push", "sources": paths, "dest": target}),
        );
    }
    let summary = interruptible(
        &display,
        haul_node::push(&paths, &remote, &opts, display.clone()),
    )
    .await?;
    display.finish();
    let mut summary = summary?;
    crate::path_hint::remember(path.as_ref(), &opts, &summary);
    summary.transport = crate::path_hint::chosen(path.as_ref());
    Ok(report(mode, &display, &summary))
}
