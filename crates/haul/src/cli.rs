//! Raw command-line flags (clap). `config.rs` turns them into validated options.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// haul moves large datasets between sites: verified with BLAKE3, resumable,
/// concurrent, over TLS 1.3 with pinned server keys.
#[derive(Debug, Parser)]
#[command(name = "haul", version, propagate_version = true, after_help = EXAMPLES)]
pub struct Cli {
    /// Print one JSON event per line on stdout instead of progress bars.
    #[arg(long, global = true)]
    pub json: bool,
    /// Only print errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// More logging on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

const EXAMPLES: &str = "\
Examples:
  haul demo                                   # see it all work on loopback
  haul serve --root /data --token-file ~/.haul-token
  haul push ./run42 haul://archive:7878/incoming --token-file ~/.haul-token
  haul pull haul://archive:7878/incoming/run42 ./local -j auto --streams 4
  haul pull /mnt/src/ /mnt/dst                 # local copy, same verification

Exit codes: 0 all verified, 1 some files failed, 2 usage or configuration error.";

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a node that accepts pushes into DIR and serves pulls from it.
    Serve(ServeArgs),
    /// Send local files or trees to a node: PATH... haul://HOST:PORT/DEST.
    Push(PushArgs),
    /// Fetch from a node (haul://HOST:PORT/PATH) or a local path into DEST.
    Pull(PullArgs),
    /// Start a node on loopback, push a sample dataset, pull it back, verify.
    Demo(DemoArgs),
    /// Network lab: hosts in network namespaces joined by a userspace netem (root only).
    Lab(haul_lab::cli::LabArgs),
    /// Print shell completions.
    Completions {
        /// Shell to generate for.
        shell: clap_complete::Shell,
    },
}

/// `haul serve`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  haul serve --root /data --listen 0.0.0.0:7878 --token-file /etc/haul/token"
)]
pub struct ServeArgs {
    /// Directory to serve; pushes land under it, pulls read from it.
    #[arg(long)]
    pub root: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:7878")]
    pub listen: String,
    /// Token clients must present.
    #[arg(long, env = "HAUL_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// File holding the token (first line).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Run without any authentication (trusted networks only).
    #[arg(long)]
    pub open: bool,
    /// No TLS: plaintext TCP with sendfile(2) (trusted networks; clients pass --plaintext too).
    #[arg(long)]
    pub plaintext: bool,
    /// Directory of the node's TLS identity (created on first start).
    #[arg(long)]
    pub identity: Option<PathBuf>,
    /// Seconds of silence before a connection is dropped.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Seconds transfers may take to finish after SIGINT/SIGTERM.
    #[arg(long, default_value_t = 20)]
    pub grace: u64,
}

/// Flags shared by push and pull.
#[derive(Debug, Args, Clone)]
pub struct TransferArgs {
    /// Connections (files in flight): a number or `auto`.
    #[arg(short = 'j', long = "jobs", default_value = "auto")]
    pub jobs: String,
    /// Connections sharing one large file (files >= --split-min are split).
    #[arg(long, default_value_t = 1)]
    pub streams: u32,
    /// Smallest file split across --streams connections (bytes, or with K/M/G suffix).
    #[arg(long, default_value = "64M")]
    pub split_min: String,
    /// Token for the node.
    #[arg(long, env = "HAUL_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// File holding the token (first line).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Plaintext TCP (the node must run with --plaintext).
    #[arg(long)]
    pub plaintext: bool,
    /// Pin the node's key (SHA256:... as `haul serve` prints it).
    #[arg(long)]
    pub fingerprint: Option<String>,
    /// Known-hosts file for trust on first use.
    #[arg(long)]
    pub known_hosts: Option<PathBuf>,
    /// Seconds of silence before a connection is dropped and retried.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Reconnects per connection before giving up.
    #[arg(long, default_value_t = 5)]
    pub retries: u32,
    /// Socket buffer size (default: kernel autotuning), e.g. 16M for long fat links.
    #[arg(long)]
    pub socket_buffer: Option<String>,
    /// Write payloads from memory instead of sendfile(2) (plaintext only).
    #[arg(long, hide = true)]
    pub no_zero_copy: bool,
}

/// `haul push`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  haul push ./data haul://node:7878/incoming   # creates incoming/data/...\n  haul push ./data/ haul://node:7878/incoming  # the contents of data go into incoming/"
)]
pub struct PushArgs {
    /// Local files or directories, then the haul://HOST:PORT/DEST URL.
    #[arg(required = true, num_args = 2..)]
    pub paths: Vec<String>,
    /// Transfer settings.
    #[command(flatten)]
    pub transfer: TransferArgs,
}

/// `haul pull`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  haul pull haul://node:7878/incoming/data ./here   # creates ./here/data/...\n  haul pull /mnt/a/ /mnt/b                          # local copy"
)]
pub struct PullArgs {
    /// haul://HOST:PORT/PATH or a local path.
    pub source: String,
    /// Local destination directory (created if missing).
    pub dest: PathBuf,
    /// Transfer settings.
    #[command(flatten)]
    pub transfer: TransferArgs,
}

/// `haul demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Size of the large sample file in MiB.
    #[arg(long, default_value_t = 256)]
    pub size: u64,
    /// Keep the demo directory instead of removing it.
    #[arg(long)]
    pub keep: bool,
}
