//! `haul pull`: from a node, an FTP, SFTP, HTTP or S3 source, or a local
//! path (a local copy) into DEST; and its dry run.

use std::sync::Arc;

use anyhow::Result;
use haul_node::Summary;

use crate::cli::PullArgs;
use crate::location::Location;
use crate::named_nodes::NamedNodes;
use crate::output::{self, Display, Mode};
use crate::{config, dry_run_done, fetch, interruptible, report, shown_source, usage, UsageError};

/// Runs `haul pull`.
pub async fn run(mut args: PullArgs, mode: Mode) -> Result<u8> {
    let named = usage(NamedNodes::load(&args.transfer))?;
    args.source = named.rewrite(&args.source);
    let opts = usage(config::filtered_client_options(
        &args.transfer,
        &args.filter,
    ))?;
    let mut opts = usage(named.options_for(&args.source, opts))?;
    opts.keep = args.rsync.keep();
    let log = usage(config::client_log(
        &args.transfer,
        "pull",
        false,
        &args.source,
        &args.dest.display().to_string(),
    ))?;
    let display = Arc::new(
        Display::new(mode)
            .itemizing(args.transfer.itemize_changes, false)
            .logging_to(log),
    );
    if args.transfer.dry_run {
        return dry_run_pull(&args, &opts, mode, display).await;
    }
    if mode == Mode::Json {
        output::json_line(
            &serde_json::json!({"event": "start", "command": "pull", "source": shown_source(&args.source), "dest": args.dest}),
        );
    }
    let summary = interruptible(&display, pull_from(&args, &opts, display.clone())).await?;
    display.finish();
    Ok(report(mode, &display, &summary?))
}

/// Runs a pull from a node, a remote source or a local directory.
async fn pull_from(
    args: &PullArgs,
    opts: &haul_node::ClientOptions,
    display: Arc<Display>,
) -> Result<Summary> {
    match Location::parse(&args.source)? {
        Location::Node(at) => {
            let mut opts = opts.clone();
            let path = usage(crate::path_hint::prepare(
                &mut opts,
                args.transfer.rate_hint.as_deref(),
                &at,
                haul_transport::Flow::Pull,
            ))?;
            let remote = at.node_path(&opts);
            let mut summary = haul_node::pull(&remote, &args.dest, &opts, display.clone()).await?;
            crate::path_hint::remember(path.as_ref(), &opts, &summary);
            summary.transport = crate::path_hint::chosen(path.as_ref());
            Ok(summary)
        }
        Location::Remote(url) => {
            if args.transfer.delete || args.transfer.delete_excluded {
                usage(haul_engine::mirror::check_dest(&args.dest).map_err(anyhow::Error::msg))?;
            }
            let (ropts, fopts) = remote_pull_options(args)?;
            if ropts.insecure_tls {
                tracing::warn!("--insecure: TLS certificates are not checked");
            }
            let remote = usage(fetch::open_remote(&url, &ropts))?;
            haul_fetch::fetch(
                remote,
                &url.path,
                &args.dest,
                fopts,
                display.clone(),
                ropts.timeout,
            )
            .await
            .map_err(anyhow::Error::from)
        }
        Location::Local(source) => {
            usage(config::check_local_source(&source))?;
            if let Some(filter) = &opts.filter {
                usage(config::check_files_from(
                    filter,
                    std::slice::from_ref(&source),
                ))?;
            }
            Ok(haul_node::copy_local(
                std::slice::from_ref(&source),
                &args.dest,
                opts,
                display.clone(),
            )
            .await?)
        }
    }
}

/// An FTP, SFTP, HTTP or S3 pull's options from its flags (how to reach
/// the server; what to fetch).
fn remote_pull_options(
    args: &PullArgs,
) -> Result<(haul_remote::RemoteOptions, haul_fetch::FetchOptions)> {
    let ropts = usage(fetch::remote_options(&args.transfer, &args.remote))?;
    let filter = usage(config::filter(&args.filter))?;
    let fopts = usage(fetch::fetch_options(&args.transfer, &args.remote, filter))?;
    Ok((ropts, fopts))
}

/// `haul pull --dry-run`: a node's or a local source, compared with DEST.
async fn dry_run_pull(
    args: &PullArgs,
    opts: &haul_node::ClientOptions,
    mode: Mode,
    display: Arc<Display>,
) -> Result<u8> {
    let report = match Location::parse(&args.source)? {
        Location::Node(at) => {
            let remote = at.node_path(opts);
            haul_node::dry_run_pull(&remote, &args.dest, opts, opts.delete, display.clone()).await?
        }
        Location::Remote(url) => {
            let (ropts, fopts) = remote_pull_options(args)?;
            if fopts.rename.is_some() {
                return Err(UsageError(
                    "--dry-run of an FTP, SFTP, HTTP or S3 pull does not take --rename yet".into(),
                )
                .into());
            }
            let remote = usage(fetch::open_remote(&url, &ropts))?;
            haul_fetch::dry_run::dry_run_fetch(
                remote,
                &url.path,
                &args.dest,
                &fopts,
                display.clone(),
            )
            .await
            .map_err(|e| anyhow::anyhow!("cannot list {url}: {e}"))?
        }
        Location::Local(source) => {
            usage(config::check_local_source(&source))?;
            if let Some(filter) = &opts.filter {
                usage(config::check_files_from(
                    filter,
                    std::slice::from_ref(&source),
                ))?;
            }
            haul_node::dry_run_local(
                std::slice::from_ref(&source),
                &args.dest,
                opts,
                opts.delete,
                display.clone(),
            )?
        }
    };
    Ok(dry_run_done(mode, &display, &report))
}
