//! The `haul` binary: flags → validated options → library calls. No transfer
//! logic lives here.

mod causes;
mod cli;
mod config;
mod daemon;
mod daemon_config;
mod demo;
mod fanout;
mod fetch;
mod location;
mod ls;
mod man;
mod output;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches};
use haul_node::{NodeError, NodePath, NodeUrl, ServeOptions, Server, Summary};
use haul_proto::ErrorCode;
use haul_transport::{Listener, ServerIdentity, Timeouts, TransportError};

use cli::{Cli, Command, PullArgs, PushArgs, ServeArgs};
use location::Location;
use output::{Display, Mode};

/// Exit code: every file verified.
const EXIT_OK: u8 = 0;
/// Exit code: some files failed (or the transfer could not run).
const EXIT_FAILED: u8 = 1;
/// Exit code: usage or configuration error.
const EXIT_USAGE: u8 = 2;
/// Exit code: interrupted (SIGINT, Ctrl-C), as shells and rsync report it.
const EXIT_INTERRUPTED: u8 = 130;

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match (&mut cli.command, matches.subcommand()) {
        (Command::Pull(args), Some(("pull", m))) => args.filter.rules = filter_rules_in_order(m),
        (Command::Push(args), Some(("push", m))) => args.filter.rules = filter_rules_in_order(m),
        (Command::Ls(args), Some(("ls", m))) => args.filter.rules = filter_rules_in_order(m),
        (Command::Check(args), Some(("check", m))) => args.filter.rules = filter_rules_in_order(m),
        _ => {}
    }
    let mode = if cli.json {
        Mode::Json
    } else if cli.quiet {
        Mode::Quiet
    } else {
        Mode::Human
    };
    init_logging(&cli);
    // The lab manages namespaces and its own daemon process: no async runtime.
    if let Command::Lab(mut args) = cli.command {
        args.output = haul_lab::cli::Output {
            json: cli.json,
            quiet: cli.quiet,
        };
        return match haul_lab::cli::run(args) {
            Ok(()) => ExitCode::from(EXIT_OK),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(EXIT_FAILED)
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let result = runtime.block_on(run(cli, mode));
    let code = match result {
        Ok(code) => code,
        Err(err) => {
            let code = exit_code_for(&err);
            if mode == Mode::Json {
                output::json_line(
                    &serde_json::json!({"event": "error", "message": chain_text(&err), "exit_code": code}),
                );
            } else if err.downcast_ref::<Interrupted>().is_some() {
                // Not an error of haul's: the one line says how far it got.
                eprintln!("{err}");
            } else {
                eprintln!("error: {}", chain_text(&err));
            }
            code
        }
    };
    runtime.shutdown_timeout(Duration::from_millis(200));
    ExitCode::from(code)
}

/// The source as it may be shown: a remote URL loses its password.
fn shown_source(source: &str) -> String {
    match haul_remote::RemoteUrl::parse(source) {
        Ok(url) => url.to_string(),
        Err(_) if haul_remote::RemoteUrl::is_remote_url(source) => "(unparsable URL)".into(),
        Err(_) => source.to_string(),
    }
}

/// `--include`, `--exclude` and `--filter-from` as given, interleaved in
/// command-line order (the first matching rule wins).
fn filter_rules_in_order(m: &clap::ArgMatches) -> Vec<cli::FilterRule> {
    let mut rules = Vec::new();
    for (id, kind) in [
        ("include", haul_fetch::RuleKind::Include),
        ("exclude", haul_fetch::RuleKind::Exclude),
    ] {
        if let (Some(values), Some(indices)) = (m.get_many::<String>(id), m.indices_of(id)) {
            for (value, index) in values.zip(indices) {
                rules.push((index, cli::FilterRule::Glob(kind, value.clone())));
            }
        }
    }
    if let (Some(files), Some(indices)) = (
        m.get_many::<std::path::PathBuf>("filter_from"),
        m.indices_of("filter_from"),
    ) {
        for (file, index) in files.zip(indices) {
            rules.push((index, cli::FilterRule::File(file.clone())));
        }
    }
    rules.sort_by_key(|r| r.0);
    rules.into_iter().map(|(_, rule)| rule).collect()
}

fn init_logging(cli: &Cli) {
    let default = match (cli.verbose, &cli.command) {
        (0, _) if cli.quiet => "error",
        (0, Command::Serve(_)) => "info",
        (0, Command::Daemon(_)) => "info",
        (0, _) => "warn",
        (1, _) => "info",
        (2, _) => "debug",
        _ => "trace",
    };
    // The SSH library logs its own opinions (a packet size it would not
    // choose, as an ERROR on every connection): heard from -vv up.
    let quiet_libraries = if cli.verbose < 2 {
        ",russh=off,russh_sftp=off"
    } else {
        ""
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("HAUL_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{default}{quiet_libraries}"))
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// Usage and configuration problems exit 2, an interrupt 130; everything
/// else 1.
fn exit_code_for(err: &anyhow::Error) -> u8 {
    if err.downcast_ref::<Interrupted>().is_some() {
        return EXIT_INTERRUPTED;
    }
    if let Some(e) = err.downcast_ref::<NodeError>() {
        return match e {
            NodeError::Usage(_) => EXIT_USAGE,
            NodeError::Refused {
                code:
                    ErrorCode::Unauthorized
                    | ErrorCode::BadPath
                    | ErrorCode::NotFound
                    | ErrorCode::Version,
                ..
            } => EXIT_USAGE,
            NodeError::Transport(TransportError::KeyChanged { .. }) => EXIT_USAGE,
            _ => EXIT_FAILED,
        };
    }
    if err.downcast_ref::<UsageError>().is_some() {
        return EXIT_USAGE;
    }
    EXIT_FAILED
}

/// An error in how haul was invoked.
#[derive(Debug)]
struct UsageError(String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A transfer stopped by SIGINT (Ctrl-C); its text says how far it got.
#[derive(Debug)]
struct Interrupted(String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

/// Runs `transfer` until it ends or SIGINT (Ctrl-C) arrives. Then the
/// transfer is dropped where it stands (its connections close; what
/// verified stays, staged files with their resume logs too), the bars are
/// cleared, and the error says how many files were verified.
async fn interruptible<T>(
    display: &Display,
    transfer: impl std::future::Future<Output = T>,
) -> Result<T> {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut sigint) = signal(SignalKind::interrupt()) else {
        return Ok(transfer.await);
    };
    tokio::select! {
        done = transfer => Ok(done),
        _ = sigint.recv() => Err(Interrupted(display.interrupt()).into()),
    }
}

fn usage<T>(r: Result<T>) -> Result<T> {
    r.map_err(|e| anyhow::Error::new(UsageError(chain_text(&e))))
}

/// An error and its causes, `outer: inner: ...`, leaving out a cause whose
/// words the text already holds (many errors repeat their source).
fn chain_text(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let words = cause.to_string();
        if text.contains(&words) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&words);
    }
    text
}

async fn run(cli: Cli, mode: Mode) -> Result<u8> {
    match cli.command {
        Command::Serve(args) => serve(args, mode).await,
        Command::Push(args) => push(*args, mode).await,
        Command::Pull(args) => pull(*args, mode).await,
        Command::Demo(args) => demo::run(args, mode).await,
        Command::Lab(_) => Ok(EXIT_USAGE),
        Command::Ls(args) => ls::run(*args, mode).await,
        Command::Check(args) => ls::check(*args, mode).await,
        Command::Man => {
            let mut page = Vec::new();
            man::render(&mut page)?;
            print_all(&page)
        }
        Command::Daemon(args) if args.check => daemon::check(&args, mode == Mode::Json),
        Command::Daemon(args) => daemon::run(&args).await,
        Command::Catalog(args) => daemon::catalog(&args, mode == Mode::Json).await,
        Command::Status(args) => daemon::status(&args, mode == Mode::Json).await,
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "haul", &mut script);
            print_all(&script)
        }
    }
}

/// Writes `bytes` to stdout. A reader that stopped reading (`haul man |
/// head`) is no error: the rest is not wanted.
fn print_all(bytes: &[u8]) -> Result<u8> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(EXIT_OK),
    }
}

fn report(mode: Mode, display: &Display, summary: &Summary) -> u8 {
    display.finish();
    output::print_summary(mode, summary);
    if summary.failed == 0 {
        EXIT_OK
    } else {
        EXIT_FAILED
    }
}

async fn push(args: PushArgs, mode: Mode) -> Result<u8> {
    let (mut dests, mut paths): (Vec<String>, Vec<String>) = args
        .paths
        .iter()
        .cloned()
        .partition(|p| NodeUrl::is_remote(p));
    if let Some(file) = &args.to_file {
        dests.extend(usage(fanout::read_url_file(file))?);
    }
    if dests.len() > 1 || args.to_file.is_some() {
        return fanout::push(paths, dests, &args, mode).await;
    }
    let target = dests
        .pop()
        .unwrap_or_else(|| paths.pop().unwrap_or_default());
    if !NodeUrl::is_remote(&target) {
        return Err(UsageError(format!("the last argument of push must be haul://HOST:PORT/DEST, not {target:?} (for a local copy use `haul pull SRC DEST`)")).into());
    }
    let url = NodeUrl::parse(&target)?;
    for p in &paths {
        usage(config::check_local_source(p))?;
    }
    let opts = usage(config::filtered_client_options(
        &args.transfer,
        &args.filter,
    ))?;
    let remote = NodePath::network(&url, &opts);
    let display = Arc::new(Display::new(mode));
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
    Ok(report(mode, &display, &summary?))
}

async fn pull(args: PullArgs, mode: Mode) -> Result<u8> {
    let opts = usage(config::filtered_client_options(
        &args.transfer,
        &args.filter,
    ))?;
    let display = Arc::new(Display::new(mode));
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
        Location::Node(url) => {
            let remote = NodePath::network(&url, opts);
            Ok(haul_node::pull(&remote, &args.dest, opts, display.clone()).await?)
        }
        Location::Remote(url) => {
            if args.transfer.delete {
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
        Location::Node(url) => {
            let remote = NodePath::network(&url, opts);
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

/// Prints a dry run's totals; exit 1 when something could not be read.
fn dry_run_done(mode: Mode, display: &Display, report: &haul_node::DryRunReport) -> u8 {
    display.finish();
    output::print_dry_run_report(mode, report);
    if report.errors == 0 {
        EXIT_OK
    } else {
        EXIT_FAILED
    }
}

async fn serve(args: ServeArgs, mode: Mode) -> Result<u8> {
    let partial_ttl = usage(config::partial_ttl(&args.partial_ttl).context("--partial-ttl"))?;
    if args.prune_partials {
        return prune_partials(&args, partial_ttl, mode);
    }
    let token = usage(config::token(&args.token, &args.token_file))?;
    if token.is_none() && !args.open {
        return Err(UsageError("haul serve needs a token (--token, HAUL_TOKEN or --token-file) or --open to run without authentication".into()).into());
    }
    if token.is_some() && args.open {
        return Err(UsageError("--open (no authentication) and a token (--token, HAUL_TOKEN or --token-file) exclude each other: pass one".into()).into());
    }
    let root_is_new = std::fs::symlink_metadata(&args.root).is_err();
    if root_is_new && !args.create_root {
        return Err(UsageError(format!(
            "--root {} does not exist (a mistyped mount point must not become a new directory): create it first, or pass --create-root",
            args.root.display()
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
    let opts = ServeOptions {
        root: args.root.clone(),
        tokens: token.into_iter().collect(),
        timeouts: Timeouts {
            idle,
            ..Timeouts::default()
        },
        window: haul_node::DEFAULT_WINDOW,
        max_retries: 5,
        grace: Duration::from_secs(args.grace),
        chunk_memory: usage(config::chunk_memory(&args.chunk_memory))?,
        log: Arc::new(transfer_log(&args)?),
        partial_ttl,
    };
    let server = Server::new(opts)
        .with_context(|| format!("cannot use {} as the node's root", args.root.display()))?;
    // Staging files of transfers abandoned while the node was down.
    if let Err(e) = server.prune_partials() {
        tracing::warn!("cannot prune partial files: {e}");
    }
    let listener = Listener::bind(addr, identity.as_ref(), None)
        .await
        .map_err(|e| UsageError(e.to_string()))?;
    let local = listener.local_addr()?;
    // QUIC on UDP at the same port number, unless turned off (or plaintext).
    let quic = match (&identity, args.no_quic) {
        (Some(id), false) => Some(
            haul_transport::QuicListener::bind(local, id, idle)
                .map_err(|e| UsageError(format!("{e} (UDP; pass --no-quic to serve TCP only)")))?,
        ),
        _ => None,
    };
    let fingerprint = identity.as_ref().map(|i| i.fingerprint());
    match mode {
        Mode::Json => output::json_line(&serde_json::json!({
            "event": "listening", "addr": local.to_string(), "fingerprint": fingerprint,
            "root": args.root, "root_created": root_is_new, "tls": !args.plaintext, "auth": !args.open,
            "quic": quic.is_some(),
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
            println!("root {}{created}", args.root.display());
            if args.open {
                println!("auth none (--open: anyone who can connect may push and pull)");
            } else {
                println!("auth token");
            }
            match &quic {
                Some(_) => println!("quic on UDP {local} (clients: --transport quic)"),
                None => println!("quic off"),
            }
        }
    }
    // Signals counted: the first finishes transfers in flight, a second
    // stops at once.
    let (signals_tx, signals) = tokio::sync::watch::channel(0u32);
    tokio::spawn(async move {
        shutdown_signal().await;
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
    Ok(EXIT_OK)
}

/// The node's transfer log: `--log-format`, `--log-file`.
fn transfer_log(args: &ServeArgs) -> Result<haul_node::TransferLog> {
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
fn prune_partials(args: &ServeArgs, ttl: Option<Duration>, mode: Mode) -> Result<u8> {
    let Some(ttl) = ttl else {
        return Err(UsageError("--prune-partials needs a --partial-ttl (not off)".into()).into());
    };
    if std::fs::symlink_metadata(&args.root).is_err() {
        return Err(UsageError(format!("--root {} does not exist", args.root.display())).into());
    }
    let pruned =
        haul_engine::prune::prune_staging_of(&args.root, None, ttl, std::time::SystemTime::now())
            .with_context(|| format!("cannot prune the partial files of {}", args.root.display()))?;
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
    Ok(EXIT_OK)
}

async fn shutdown_signal() {
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
