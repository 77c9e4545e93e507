//! `haul serve`: a node on its listeners until a signal, with its transfer
//! log, and `--prune-partials`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use haul_node::{ServeOptions, Server};
use haul_transport::{Listener, ServerIdentity, Timeouts};

use crate::cli::ServeArgs;
use crate::output::{self, Mode};
use crate::{config, exit, usage, UsageError};

/// Runs `haul serve` (or `--prune-partials` alone).
pub async fn run(args: ServeArgs, mode: Mode) -> Result<u8> {
    let partial_ttl = usage(config::partial_ttl(&args.partial_ttl).context("--partial-ttl"))?;
    if args.stdio || args.ssh || args.restrict.is_some() {
        return crate::serve_ssh::run(&args, partial_ttl).await;
    }
    let Some(root) = args.root.clone() else {
        return Err(UsageError("haul serve needs --root DIR".into()).into());
    };
    if args.prune_partials {
        return prune_partials(&root, partial_ttl, mode);
    }
    let token = usage(config::token(&args.token, &args.token_file))?;
    if token.is_none() && !args.open {
        return Err(UsageError("haul serve needs a token (--token, HAUL_TOKEN or --token-file) or --open to run without authentication".into()).into());
    }
    if token.is_some() && args.open {
        return Err(UsageError("--open (no authentication) and a token (--token, HAUL_TOKEN or --token-file) exclude each other: pass one".into()).into());
    }
    let root_is_new = std::fs::symlink_metadata(&root).is_err();
    if root_is_new && !args.create_root {
        return Err(UsageError(format!(
            "--root {} does not exist (a mistyped mount point must not become a new directory): create it first, or pass --create-root",
            root.display()
        ))
        .into());
    }
    let addr: SocketAddr = usage(
        args.listen
            .parse()
            .with_context(|| format!("--listen {:?} is not ADDR:PORT", args.listen)),
    )?;
    let identity = if args.plaintext {
        None
    } else {
        let dir = args
            .identity
            .clone()
            .unwrap_or_else(|| haul_transport::config_dir().join("identity"));
        Some(
            ServerIdentity::load_or_create(&dir)
                .context("cannot load or create the node's TLS identity (pass --identity DIR)")?,
        )
    };
    let idle = Duration::from_secs(args.timeout.max(1));
    let opts = serve_options(&args, &root, token.into_iter().collect(), idle, partial_ttl)?;
    let server = Server::new(opts)
        .with_context(|| format!("cannot use {} as the node's root", root.display()))?;
    // Staging files of transfers abandoned while the node was down.
    if let Err(e) = server.prune_partials() {
        tracing::warn!("cannot prune partial files: {e}");
    }
    // QUIC on UDP at the same port number, unless turned off (or
    // plaintext). A port the system picked (`:0`) is free for TCP only:
    // when another socket holds that UDP port, a new pair is picked (a few
    // times); a port given is used as given.
    let mut tries = 0;
    let (listener, local, quic) = loop {
        tries += 1;
        let listener = Listener::bind(addr, identity.as_ref(), None)
            .await
            .map_err(|e| UsageError(e.to_string()))?;
        let local = listener.local_addr()?;
        let quic = match (&identity, args.no_quic) {
            (Some(id), false) => match haul_transport::QuicListener::bind(local, id, idle) {
                Ok(q) => Some(q),
                Err(_) if addr.port() == 0 && tries < 8 => continue,
                Err(e) => {
                    let e = format!("{e} (UDP; pass --no-quic to serve TCP only)");
                    return Err(UsageError(e).into());
                }
            },
            _ => None,
        };
        break (listener, local, quic);
    };
    let status = match &args.status {
        Some(addr) => Some(status_listener(addr, &server).await?),
        None => None,
    };
    let fingerprint = identity.as_ref().map(|i| i.fingerprint());
    match mode {
        Mode::Json => output::json_line(&serde_json::json!({
            "event": "listening", "addr": local.to_string(), "fingerprint": fingerprint,
            "root": root, "root_created": root_is_new, "tls": !args.plaintext, "auth": !args.open,
            "quic": quic.is_some(), "status": status.map(|a| a.to_string()),
        })),
        _ => {
            println!("haul node listening on {local}");
            match &fingerprint {
                Some(fp) => println!("fingerprint {fp}"),
                None => println!("fingerprint none (plaintext: trusted networks only)"),
            }
            let created = if root_is_new {
                " (created: it did not exist)"
            } else {
                ""
            };
            println!("root {}{created}", root.display());
            if args.open {
                println!("auth none (--open: anyone who can connect may push and pull)");
            } else {
                println!("auth token");
            }
            match &quic {
                Some(_) => println!("quic on UDP {local} (clients: --transport quic)"),
                None => println!("quic off"),
            }
            if let Some(addr) = status {
                println!("status http://{addr}/metrics, /status, /healthz, and the console at http://{addr}/");
            }
        }
    }
    crate::notify::ready(&format!("serving {} on {local}", root.display()));
    // Signals counted: the first finishes transfers in flight, a second
    // stops at once.
    let (signals_tx, signals) = tokio::sync::watch::channel(0u32);
    tokio::spawn(async move {
        shutdown_signal().await;
        crate::notify::notify("STOPPING=1");
        tracing::info!("signal received: finishing transfers in flight (signal again to stop now)");
        signals_tx.send_modify(|n| *n += 1);
        shutdown_signal().await;
        signals_tx.send_modify(|n| *n += 1);
    });
    let nth = |n: u32| {
        let mut rx = signals.clone();
        async move {
            let _ = rx.wait_for(|got| *got >= n).await;
        }
    };
    server.serve(listener, quic, nth(1), nth(2)).await;
    tracing::info!("stopped");
    Ok(exit::OK)
}

/// Binds `--status ADDR` and serves the node's status pages there.
async fn status_listener(addr: &str, server: &Arc<Server>) -> Result<SocketAddr> {
    let addr: SocketAddr = usage(
        addr.parse()
            .with_context(|| format!("--status {addr:?} is not ADDR:PORT")),
    )?;
    let listener = haul_status::StatusListener::bind(addr).await.map_err(|e| {
        UsageError(format!(
            "--status {addr}: cannot listen there: {e} (another node? pick another port)"
        ))
    })?;
    let bound = listener.local_addr()?;
    let routes = haul_node::NodeRoutes::new(server.clone());
    tokio::spawn(listener.serve(Arc::new(routes)));
    Ok(bound)
}

/// What the node is, whichever way it serves.
pub(crate) fn serve_options(
    args: &ServeArgs,
    root: &Path,
    tokens: Vec<String>,
    idle: Duration,
    partial_ttl: Option<Duration>,
) -> Result<ServeOptions> {
    Ok(ServeOptions {
        root: root.to_path_buf(),
        tokens,
        timeouts: Timeouts {
            idle,
            ..Timeouts::default()
        },
        window: haul_node::DEFAULT_WINDOW,
        max_retries: 5,
        grace: Duration::from_secs(args.grace),
        chunk_memory: usage(config::chunk_memory(&args.chunk_memory))?,
        log: Arc::new(transfer_log(args)?),
        partial_ttl,
        read_only: args.read_only,
        keep_owners: args.keep_owners,
        jump_to: args
            .jump_to
            .iter()
            .map(|a| jump_target(a))
            .collect::<Result<_>>()?,
        watch: args.watch,
    })
}

/// A `--jump-to` target: `HOST:PORT`, as the node dials it.
fn jump_target(addr: &str) -> Result<String> {
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Ok(addr.to_owned())
        }
        _ => Err(UsageError(format!(
            "--jump-to {addr:?}: give the node to pass connections on to as HOST:PORT"
        ))
        .into()),
    }
}

/// The node's transfer log: `--log-format`, `--log-file`.
pub(crate) fn transfer_log(args: &ServeArgs) -> Result<haul_node::TransferLog> {
    let format = usage(args.log_format.parse().map_err(anyhow::Error::msg))?;
    usage(
        haul_node::TransferLog::new(format, args.log_file.as_deref()).with_context(|| {
            let file = args.log_file.as_deref().unwrap_or(std::path::Path::new(""));
            format!("cannot open --log-file {}", file.display())
        }),
    )
}

/// `haul serve --prune-partials`: removes the staging files no transfer
/// has written for `--partial-ttl` (never one a transfer holds), says what
/// that freed, and exits.
fn prune_partials(root: &Path, ttl: Option<Duration>, mode: Mode) -> Result<u8> {
    let Some(ttl) = ttl else {
        return Err(UsageError("--prune-partials needs a --partial-ttl (not off)".into()).into());
    };
    if std::fs::symlink_metadata(root).is_err() {
        return Err(UsageError(format!("--root {} does not exist", root.display())).into());
    }
    let pruned =
        haul_engine::prune::prune_staging_of(root, None, ttl, std::time::SystemTime::now())
            .with_context(|| format!("cannot prune the partial files of {}", root.display()))?;
    match mode {
        Mode::Json => output::json_line(&serde_json::json!({
            "event": "pruned_partials", "files": pruned.files, "bytes": pruned.bytes,
            "in_use": pruned.in_use, "ttl_secs": ttl.as_secs(),
        })),
        Mode::Quiet => {}
        Mode::Human => {
            println!(
                "removed {} partial file(s), {} freed",
                pruned.files,
                output::human_bytes(pruned.bytes)
            );
            if pruned.in_use > 0 {
                println!(
                    "kept {} partial file(s) older than --partial-ttl: a transfer holds them",
                    pruned.in_use
                );
            }
        }
    }
    Ok(exit::OK)
}

pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
