//! The `haul` binary: flags → validated options → library calls. No transfer
//! logic lives here.

mod causes;
mod cli;
mod config;
mod daemon;
mod daemon_config;
mod demo;
mod exit;
mod fanout;
mod fetch;
mod hash;
mod location;
mod ls;
mod man;
mod named_nodes;
mod notify;
mod output;
mod path_hint;
mod pull;
mod push;
mod rsync_flags;
mod serve;
mod serve_ssh;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::FromArgMatches;
use haul_node::{NodeError, Summary};

use cli::{Cli, Command};
use output::{Display, Mode};

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().collect();
    let cmd = cli::command_for(&args);
    let matches = match cmd.clone().try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) => cli::name_the_variable(rsync_flags::explain(e), &args).exit(),
    };
    cli::note_variables_used(&cmd, &matches);
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
    output::set_verbosity(cli.verbose);
    // The lab manages namespaces and its own daemon process: no async runtime.
    if let Command::Lab(mut args) = cli.command {
        args.output = haul_lab::cli::Output {
            json: cli.json,
            quiet: cli.quiet,
        };
        return match haul_lab::cli::run(args) {
            Ok(()) => ExitCode::from(exit::OK),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(exit::FAILED)
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
            return ExitCode::from(exit::FAILED);
        }
    };
    let result = runtime.block_on(run(cli, mode));
    // The records of files closed last are kept before the process ends.
    haul_engine::hash_cache::flush(Duration::from_secs(30));
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
                let text = chain_text(&err);
                eprintln!("error: {text}");
                if let Some(tip) = cli::variable_tip(&text) {
                    eprintln!("  tip: {tip}");
                }
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

/// `--include`, `--exclude`, `--filter-from`, `--exclude-from` and
/// `--include-from` as given, interleaved in command-line order (the first matching rule wins).
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
    for (id, kind) in [
        ("include_from", haul_fetch::RuleKind::Include),
        ("exclude_from", haul_fetch::RuleKind::Exclude),
    ] {
        if let (Some(files), Some(indices)) =
            (m.get_many::<std::path::PathBuf>(id), m.indices_of(id))
        {
            for (file, index) in files.zip(indices) {
                rules.push((index, cli::FilterRule::Patterns(kind, file.clone())));
            }
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
    // The daemon's deliveries are fan-outs every few seconds: each
    // connection's and plan's line is heard from -v up; the daemon's own
    // line per round and site, and every warning, always.
    let quiet_rounds = match (cli.verbose, &cli.command) {
        (0, Command::Daemon(_)) => ",haul_node=warn",
        _ => "",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("HAUL_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{default}{quiet_libraries}{quiet_rounds}"))
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// The exit code for an error that ended the command.
fn exit_code_for(err: &anyhow::Error) -> u8 {
    if err.downcast_ref::<Interrupted>().is_some() {
        return exit::INTERRUPTED;
    }
    if let Some(e) = err.chain().find_map(|c| c.downcast_ref::<NodeError>()) {
        return exit::for_node_error(e);
    }
    if let Some(e) = err
        .chain()
        .find_map(|c| c.downcast_ref::<haul_fetch::FetchError>())
    {
        match e.fail_kind() {
            haul_run::FailKind::Timeout => return exit::TIMEOUT,
            haul_run::FailKind::Unreachable => return exit::UNREACHABLE,
            _ => {}
        }
    }
    if err.downcast_ref::<UsageError>().is_some() {
        return exit::USAGE;
    }
    exit::FAILED
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

/// SIGUSR1 opens every transfer log file again (logrotate moved them;
/// nginx's signal for it), whatever the command: a node's `--log-file`,
/// the daemon's `log_file`, a client's `--log-file`. It never ends haul
/// (SIGHUP stays the end of a terminal session; the daemon's reloads).
fn reopen_logs_on_usr1() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut usr1) = signal(SignalKind::user_defined1()) else {
        return;
    };
    tokio::spawn(async move {
        while usr1.recv().await.is_some() {
            let (reopened, errors) = haul_node::transfer_log::reopen_all();
            if reopened > 0 {
                tracing::info!("SIGUSR1: {reopened} transfer log file(s) reopened");
            }
            for e in errors {
                tracing::warn!(
                    "SIGUSR1: cannot reopen the transfer log {e} (lines go on to the old file)"
                );
            }
        }
    });
}

fn usage<T>(r: Result<T>) -> Result<T> {
    r.map_err(|e| anyhow::Error::new(UsageError(chain_text(&e))))
}

/// An error and its causes, `outer: inner: ...`, leaving out a cause whose
/// words the text already holds (many errors repeat their source).
fn chain_text(err: &anyhow::Error) -> String {
    haul_run::error_text(err.as_ref())
}

async fn run(cli: Cli, mode: Mode) -> Result<u8> {
    reopen_logs_on_usr1();
    haul_engine::hash_cache::configure(haul_engine::hash_cache::Settings {
        enabled: !cli.no_hash_cache,
        ignore_ctime: cli.ignore_ctime,
        // A read-only node writes nothing into its tree.
        on_files: !matches!(&cli.command, Command::Serve(a) if a.read_only),
        store: dirs::cache_dir().map(|d| d.join("haul").join("hashes")),
    });
    haul_engine::hash_cache::prune_store_in_background();
    match cli.command {
        Command::Serve(args) => serve::run(args, mode).await,
        Command::Push(args) => push::run(*args, mode).await,
        Command::Pull(args) => pull::run(*args, mode).await,
        Command::Demo(args) => demo::run(args, mode).await,
        Command::Lab(_) => Ok(exit::USAGE),
        Command::Ls(args) => ls::run(*args, mode).await,
        Command::Check(args) => ls::check(*args, mode).await,
        Command::Hash(args) => hash::run(&args, mode),
        Command::Config {
            action: cli::ConfigAction::Show { transfer },
        } => {
            let named = usage(named_nodes::NamedNodes::load(&transfer))?;
            named.show(mode == Mode::Json);
            Ok(exit::OK)
        }
        Command::Man => {
            let mut page = Vec::new();
            man::render(&mut page)?;
            print_all(&page)
        }
        Command::Daemon(args) if args.check => daemon::check(&args, mode == Mode::Json),
        Command::Daemon(args) => daemon::run(&args).await,
        Command::Catalog(args) => daemon::catalog(&args, mode == Mode::Json).await,
        Command::Status(args) => daemon::status(&args, mode == Mode::Json).await,
        Command::SelfCheck { blake3 } => {
            haul_node::ssh::install::self_check(&blake3).map_err(anyhow::Error::msg)?;
            Ok(exit::OK)
        }
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cli::command(), "haul", &mut script);
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
        _ => Ok(exit::OK),
    }
}

fn report(mode: Mode, display: &Display, summary: &Summary) -> u8 {
    display.finish();
    output::print_summary(mode, summary);
    exit::for_failures(&summary.failures)
}

/// Prints a dry run's totals; exit 23 when something could not be read.
fn dry_run_done(mode: Mode, display: &Display, report: &haul_node::DryRunReport) -> u8 {
    display.finish();
    output::print_dry_run_report(mode, report);
    if report.errors == 0 {
        exit::OK
    } else {
        exit::PARTIAL
    }
}
