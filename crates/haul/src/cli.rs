//! Raw command-line flags (clap). `config.rs` turns them into validated options.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// A group of flags as the command line takes them when none is given, and
/// with no environment read (`HAUL_TOKEN`, `HAUL_TRANSPORT`): each default
/// lives in its flag's definition only, and the daemon starts every source
/// from these before applying its TOML keys.
pub fn flag_defaults<T: Args + clap::FromArgMatches>() -> Result<T, clap::Error> {
    let cmd = T::augment_args(clap::Command::new("defaults")).mut_args(|a| a.env(None));
    T::from_arg_matches(&cmd.try_get_matches_from(["defaults"])?)
}

/// haul moves large datasets between sites: verified with BLAKE3, resumable,
/// concurrent, over TLS 1.3 with pinned server keys.
#[derive(Debug, Parser)]
#[command(name = "haul", version, propagate_version = true)]
pub struct Cli {
    /// Print one JSON event per line on stdout instead of progress bars.
    #[arg(long, global = true)]
    pub json: bool,
    /// Only print errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Name each file sent and each entry deleted (`deleting PATH`) on
    /// stdout, as rsync's -v; more logging on stderr (-v info, -vv debug,
    /// -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Neither use nor keep content hashes: read every file whose hash is
    /// needed (see README, "The hash cache").
    #[arg(long, global = true)]
    pub no_hash_cache: bool,
    /// Trust a cached content hash whatever the file's ctime (for trees
    /// whose ctimes moved while their content did not, as after a restore).
    #[arg(long, global = true)]
    pub ignore_ctime: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The command line haul parses: [`Cli`] with its examples and the exit
/// codes ([`crate::exit::TABLE`]) after the help, flags also read from
/// `HAUL_<FLAG>` ([`from_env`]).
pub fn command() -> clap::Command {
    from_env(bare_command())
}

/// The command line for this process's `args`: [`command`], but a node
/// started over ssh (`serve --ssh`, `--stdio`, `--restrict`, or anything
/// under a forced command, where `SSH_ORIGINAL_COMMAND` is set) reads no
/// variable at all: it does what its command line — the client's
/// bootstrap, the operator's forced command — says, never what an ssh
/// login's environment sets.
pub fn command_for(args: &[std::ffi::OsString]) -> clap::Command {
    let over_ssh = std::env::var_os("SSH_ORIGINAL_COMMAND").is_some()
        || args.iter().filter_map(|a| a.to_str()).any(|a| {
            matches!(a, "--ssh" | "--stdio" | "--restrict") || a.starts_with("--restrict=")
        });
    match over_ssh {
        true => without_env(bare_command()),
        false => command(),
    }
}

fn bare_command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().after_help(format!("{EXAMPLES}\n\n{}", crate::exit::help_text()))
}

/// `cmd` with no flag reading a variable (`HAUL_TOKEN` included).
fn without_env(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| a.env(None)).mut_subcommands(without_env)
}

/// Flags never read from the environment, and why (besides those in a
/// conflict: see [`from_env`]).
pub const NOT_FROM_ENV: &[(&str, &str)] = &[
    ("include", FILTER_ORDER),
    ("exclude", FILTER_ORDER),
    ("filter-from", FILTER_ORDER),
    ("include-from", FILTER_ORDER),
    ("exclude-from", FILTER_ORDER),
    (
        "config",
        "the client's config for transfers, the daemon's for daemon, catalog and status",
    ),
    ("delete", REMOVES),
    ("delete-excluded", REMOVES),
    ("delete-source", REMOVES),
    ("force", REMOVES),
    (
        "all",
        "catalog forget --all and lab down --all: only when typed",
    ),
    (
        "to-file",
        "adds destinations to every push: only when typed",
    ),
    (
        "check",
        "haul daemon --check checks and exits: a service must not stop running on a variable",
    ),
    ("open", WEAKENS),
    ("insecure", WEAKENS),
    ("accept-new-host-key", WEAKENS),
    ("keep-owners", WEAKENS),
    ("create-root", WEAKENS),
    ("plaintext", WEAKENS),
    (
        "token-file",
        "a token file beats --token: a variable must not beat a typed token",
    ),
    (
        "suffix",
        "needs -b; a variable must not fail the transfers that have none",
    ),
    (
        "from0",
        "needs --files-from; a variable must not fail the commands that have none",
    ),
];

const FILTER_ORDER: &str = "filter rules apply in the order the command line gives them";
const REMOVES: &str = "removes files: only when typed";
const WEAKENS: &str = "weakens a safeguard: only when typed";

/// Variables haul or its tools set or read with a meaning of their own
/// (besides the hooks' [`haul_daemon::HOOK_VARIABLES`]): no flag is read
/// from one.
pub const OWN_VARIABLES: &[&str] = &[
    "HAUL_CONFIG_DIR",
    "HAUL_LOG",
    "HAUL_PASSWORD",
    "HAUL_LAB_HOST",
    "HAUL_TEST_TRANSPORT",
    "HAUL_TESTSERVER_ADDR",
    "HAUL_PG_BIN",
    "HAUL_BIN",
    "HAUL_ARGS",
];

/// `HAUL_<FLAG>` for a long flag: `max-rate` gives `HAUL_MAX_RATE`.
pub fn env_name(long: &str) -> String {
    format!("HAUL_{}", long.to_uppercase().replace('-', "_"))
}

/// The long flags of `cmd` and its subcommands also read from
/// `HAUL_<FLAG>`, as rclone reads `RCLONE_<FLAG>`: the command line beats
/// the environment, which beats a config file and the default. A flag that
/// names its own variable keeps it (`--token`: `HAUL_TOKEN`); a switch takes
/// `1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`; the values of secrets
/// (tokens, passwords) are not shown in `--help`. Not read: [`NOT_FROM_ENV`];
/// a flag in a conflict with another (clap counts a variable as given, so
/// `HAUL_CHECKSUM=0` would refuse a typed `--size-only`); and a flag whose
/// variable would be one the daemon sets for its hooks or one haul reads
/// with a meaning of its own ([`OWN_VARIABLES`]): a `haul` a hook runs must
/// not take `HAUL_SIZE` as `demo --size`.
pub fn from_env(cmd: clap::Command) -> clap::Command {
    use clap::ArgAction;
    let in_conflict: std::collections::HashSet<String> = cmd
        .get_arguments()
        .filter(|a| !a.is_global_set())
        .flat_map(|a| {
            let others = cmd.get_arg_conflicts_with(a);
            let mine = (!others.is_empty()).then(|| a.get_id().to_string());
            mine.into_iter()
                .chain(others.into_iter().map(|o| o.get_id().to_string()))
        })
        .collect();
    cmd.mut_args(|a| {
        if in_conflict.contains(a.get_id().as_str()) {
            return a;
        }
        let Some(long) = a.get_long().map(str::to_owned) else {
            return a;
        };
        let meta = matches!(
            a.get_action(),
            ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
        );
        let name = env_name(&long);
        let reserved = OWN_VARIABLES.contains(&name.as_str())
            || haul_daemon::HOOK_VARIABLES.contains(&name.as_str());
        if meta || reserved || a.get_env().is_some() || NOT_FROM_ENV.iter().any(|(l, _)| *l == long)
        {
            return a;
        }
        let a = match a.get_action() {
            ArgAction::SetTrue => a.value_parser(clap::builder::BoolishValueParser::new()),
            _ => a,
        };
        let secret = ["token", "password", "secret"]
            .iter()
            .any(|s| long.contains(s));
        a.env(name).hide_env_values(secret)
    })
    .mut_subcommands(from_env)
}

/// `e` with a tip naming the variable a bad value came from, when the flag
/// it names is not on the command line (`args`) and its `HAUL_<FLAG>` is
/// set: a value the user did not type must not be a puzzle.
pub fn name_the_variable(mut e: clap::Error, args: &[std::ffi::OsString]) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return e;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return e;
    };
    let Some(long) = arg
        .split([' ', '='])
        .next()
        .and_then(|f| f.strip_prefix("--"))
    else {
        return e;
    };
    let typed = args.iter().filter_map(|a| a.to_str()).any(|a| {
        a.strip_prefix("--")
            .is_some_and(|a| a == long || a.starts_with(&format!("{long}=")))
    });
    let name = env_name(long);
    if typed || std::env::var_os(&name).is_none() {
        return e;
    }
    let tip = format!("the value came from the environment: {name} (fix it, or unset it)");
    e.insert(
        ContextKind::Suggested,
        ContextValue::StyledStrs(vec![clap::builder::StyledStr::from(tip)]),
    );
    e
}

/// The flags this run took from the environment: (`--flag`, variable).
static FROM_ENV: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();

/// Notes which flags `matches` (parsed by `cmd`) took from the
/// environment, for [`variable_tip`].
pub fn note_variables_used(cmd: &clap::Command, matches: &clap::ArgMatches) {
    fn walk(cmd: &clap::Command, m: &clap::ArgMatches, out: &mut Vec<(String, String)>) {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            let from_env = matches!(
                m.try_contains_id(id).map(|_| m.value_source(id)),
                Ok(Some(clap::parser::ValueSource::EnvVariable))
            );
            if let (true, Some(long), Some(var)) = (from_env, arg.get_long(), arg.get_env()) {
                out.push((format!("--{long}"), var.to_string_lossy().into_owned()));
            }
        }
        if let Some((name, sub)) = m.subcommand() {
            if let Some(c) = cmd.find_subcommand(name) {
                walk(c, sub, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(cmd, matches, &mut out);
    let _ = FROM_ENV.set(out);
}

/// For an error whose text names a flag this run took from the
/// environment: the tip that says which variable (a value the user did not
/// type must not be a puzzle).
pub fn variable_tip(text: &str) -> Option<String> {
    let used = FROM_ENV.get()?;
    let (flag, var) = used.iter().find(|(flag, _)| {
        text.match_indices(flag.as_str()).any(|(i, _)| {
            let next = text[i + flag.len()..].chars().next();
            !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
        })
    })?;
    Some(format!(
        "{flag} came from the environment: {var} (fix it, or unset it)"
    ))
}

/// A `HAUL_<FLAG>` variable set in this process's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetVariable {
    /// Its name.
    pub name: String,
    /// Its value, or `(set)` for a secret's.
    pub shown: String,
    /// The flags it gives a value to (`push --jobs`).
    pub flags: Vec<String>,
}

/// The variables set now that flags read (`haul config show`).
pub fn variables_set() -> Vec<SetVariable> {
    let mut by_name: std::collections::BTreeMap<String, SetVariable> = Default::default();
    each_variable(&command(), "haul", &mut |path, arg, name| {
        let Some(value) = std::env::var_os(name) else {
            return;
        };
        let var = by_name
            .entry(name.to_owned())
            .or_insert_with(|| SetVariable {
                name: name.to_owned(),
                shown: match arg.is_hide_env_values_set() {
                    true => "(set)".to_owned(),
                    false => value.to_string_lossy().into_owned(),
                },
                flags: Vec::new(),
            });
        let flag = format!("{path} --{}", arg.get_long().unwrap_or_default());
        if !var.flags.contains(&flag) {
            var.flags.push(flag);
        }
    });
    by_name.into_values().collect()
}

/// Calls `f(command path, flag, variable)` for every flag of `cmd` and its
/// subcommands that reads a variable.
fn each_variable(cmd: &clap::Command, path: &str, f: &mut dyn FnMut(&str, &clap::Arg, &str)) {
    for arg in cmd.get_arguments() {
        if let Some(name) = arg.get_env().and_then(|n| n.to_str()) {
            f(path, arg, name);
        }
    }
    for sub in cmd.get_subcommands() {
        each_variable(sub, &format!("{path} {}", sub.get_name()), f);
    }
}

const EXAMPLES: &str = "\
Examples:
  haul demo                                   # see it all work on loopback
  haul serve --root /data --token-file ~/.haul-token
  haul push ./run42 haul://archive:7878/incoming --token-file ~/.haul-token
  haul pull haul://archive:7878/incoming/run42 ./local -j auto --streams 4
  haul pull /mnt/src/ /mnt/dst                 # local copy, same verification";

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a node that accepts pushes into DIR and serves pulls from it.
    Serve(ServeArgs),
    /// Send local files or trees to a node: PATH... haul://HOST:PORT/DEST.
    Push(Box<PushArgs>),
    /// Fetch from a node (haul://HOST:PORT/PATH) or a local path into DEST.
    Pull(Box<PullArgs>),
    /// Start a node on loopback, push a sample dataset, pull it back, verify.
    Demo(DemoArgs),
    /// Network lab: hosts in network namespaces joined by a userspace netem (root only).
    Lab(haul_lab::cli::LabArgs),
    /// List names, sizes and mtimes under a URL (haul://, local, ftp(s),
    /// sftp, http(s), s3), with -R and the same filters as pull.
    Ls(Box<LsArgs>),
    /// Compare two trees without copying: local and haul:// ones by BLAKE3
    /// (a node hashes its own files), a remote one by the checksums its
    /// server offers; what differs, is missing on either side, or cannot
    /// be read; exit 0 only if they match.
    Check(Box<CheckArgs>),
    /// Print the BLAKE3 of each file as b3sum does (directories walked),
    /// from and into the hash cache; with --check, verify such a list.
    Hash(HashArgs),
    /// Print the manual page (roff): `haul man | man -l -`.
    Man,
    /// Watch remote sources on schedules and fetch every new file, with a
    /// persistent catalog of what was fetched (runs in the foreground).
    Daemon(DaemonArgs),
    /// Read and edit the daemon's catalog: list, show, forget (fetch again), runs.
    Catalog(CatalogArgs),
    /// Print a running daemon's status (its sources, runs, files in flight).
    Status(StatusArgs),
    /// What `--ssh-install` runs on the copy it sent: exit 0 only when
    /// this binary's own file has BLAKE3 HASH.
    #[command(hide = true)]
    SelfCheck {
        /// The expected BLAKE3, hex.
        blake3: String,
    },
    /// The client's configuration: `haul config show` prints the config
    /// file and each named node with the token, key and transport it is
    /// reached with (flags and environment beat the file).
    Config {
        /// What to do.
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Print shell completions.
    Completions {
        /// Shell to generate for.
        shell: clap_complete::Shell,
    },
}

/// `haul config ...`.
#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Print the config file and each named node as the flags given here
    /// would reach it.
    Show {
        /// Connection flags, as push and pull take them.
        #[command(flatten)]
        transfer: Box<TransferArgs>,
    },
}

/// `haul serve`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  haul serve --root /data --listen 0.0.0.0:7878 --token-file /etc/haul/token"
)]
pub struct ServeArgs {
    /// Directory to serve; pushes land under it, pulls read from it. It
    /// must exist (a mistyped mount point must not become a new directory),
    /// unless --create-root.
    #[arg(long, required_unless_present = "restrict")]
    pub root: Option<PathBuf>,
    /// Create --root (and its parents) when it does not exist.
    #[arg(long)]
    pub create_root: bool,
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
    /// Implies --no-quic (QUIC has no plaintext form).
    #[arg(long)]
    pub plaintext: bool,
    /// Do not accept QUIC (by default a node also listens on UDP at the
    /// port number of --listen, for clients with --transport quic).
    #[arg(long)]
    pub no_quic: bool,
    /// Directory of the node's TLS identity (created on first start).
    #[arg(long)]
    pub identity: Option<PathBuf>,
    /// Seconds of silence before a connection is dropped.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Seconds transfers may take to finish after SIGINT/SIGTERM (a second
    /// signal stops at once; partial files stay resumable either way).
    #[arg(long, default_value_t = 20)]
    pub grace: u64,
    /// Memory for chunk buffers across all connections (at least 64M); past
    /// it, connections wait for each other instead of growing the node.
    #[arg(long, default_value = "256M")]
    pub chunk_memory: String,
    /// Also append the transfer log (a line per connection and per file
    /// received or sent) to this file, created with mode 0640.
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    /// Transfer log lines as `text` or `json` (one object per line).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// Serve the node's status over HTTP at ADDR:PORT: /metrics
    /// (Prometheus), /status (JSON: counters and the connections open),
    /// /healthz. Read only, unauthenticated: keep it on 127.0.0.1 or a
    /// monitoring network.
    #[arg(long, value_name = "ADDR:PORT", conflicts_with_all = ["stdio", "ssh", "restrict", "prune_partials"])]
    pub status: Option<String>,
    /// Staging files (ROOT/.haul/partial) no transfer has written for this
    /// long are removed at start and hourly (`12h`, `7d`, `off`); a staging
    /// file a transfer holds is never removed.
    #[arg(long, default_value = "7d")]
    pub partial_ttl: String,
    /// Remove the staging files older than --partial-ttl now, say what was
    /// freed, and exit without serving.
    #[arg(long)]
    pub prune_partials: bool,
    /// Serve one connection on stdin and stdout, then exit: what a client
    /// starts over ssh for a `host:path` location (the ssh login is the
    /// authentication: no token, no listener, no TLS of its own).
    #[arg(long, conflicts_with_all = ["token", "token_file", "open", "plaintext", "no_quic", "identity", "prune_partials", "create_root"])]
    pub stdio: bool,
    /// A node for one transfer, started over ssh for a `host:path`
    /// location: listens on an ephemeral TCP and UDP port at the address
    /// the ssh connection arrived at, with a fresh key and a one-time token
    /// it prints on one line; exits when stdin (the ssh channel) closes or
    /// after --timeout with no connection.
    #[arg(long, conflicts_with_all = ["stdio", "token", "token_file", "open", "plaintext", "no_quic", "identity", "prune_partials", "create_root", "listen"])]
    pub ssh: bool,
    /// As a forced command in authorized_keys (`command="haul serve --ssh
    /// --restrict /data/incoming"`): serve only what the ssh client asks
    /// for beneath DIR (rrsync's job); any other command is refused.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["token", "token_file", "open", "plaintext", "identity", "prune_partials", "create_root", "listen"])]
    pub restrict: Option<PathBuf>,
    /// Serve pulls, ls and check only: pushes, fan-out relays and prunes
    /// are refused.
    #[arg(long)]
    pub read_only: bool,
    /// Apply the owners and groups clients send (`push -a`, `-o`, `-g`) and
    /// their trusted.* and security.* attributes; needs root. Without it
    /// they are ignored (the node logs so once); user.* attributes and ACLs
    /// are always kept.
    #[arg(long)]
    pub keep_owners: bool,
    /// Pass connections of this node's clients (those it accepts: its token,
    /// or anyone's with --open) on to the node at HOST:PORT, which they
    /// cannot reach themselves: a daemon's site downstream of this one
    /// (`downstream = [..]` in its config). No other address is reached. The
    /// client's TLS session with that node runs inside, which this node
    /// cannot read. Repeatable.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "stdio")]
    pub jump_to: Vec<String>,
    /// Watch the root for changes (inotify: one watch per directory) and
    /// keep a journal of them, so a downstream daemon's runs list only what
    /// is new since its last one instead of walking the whole tree (an
    /// unwatchable tree — fs.inotify.max_user_watches — is walked as before,
    /// said once).
    #[arg(long, conflicts_with_all = ["stdio", "ssh", "restrict"])]
    pub watch: bool,
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
    /// The client's config file with named nodes ([node.NAME]: url,
    /// token_file, fingerprint, transport; haul://NAME/PATH then names one)
    /// [default: $HAUL_CONFIG_DIR/config.toml, ~/.config/haul/config.toml,
    /// if it exists].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Token for the node.
    #[arg(long, env = "HAUL_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// File holding the token (first line).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Plaintext TCP (the node must run with --plaintext).
    #[arg(long)]
    pub plaintext: bool,
    /// `auto`: TCP and QUIC at once, then the one that moves more (`-v`
    /// says which and why); `tcp`; or `quic` for lossy or long links (UDP
    /// to the node's port; TLS 1.3 inside, the same key and pinning as TCP).
    /// [default: auto (TCP with --plaintext), or a named node's own]
    #[arg(long, env = "HAUL_TRANSPORT", value_parser = ["auto", "tcp", "quic"])]
    pub transport: Option<String>,
    /// Pin the node's key (SHA256:... as `haul serve` prints it).
    #[arg(long)]
    pub fingerprint: Option<String>,
    /// The remote shell for `host:path` locations, as rsync's -e (default
    /// `ssh`; `ssh -p 2222 -i KEY` takes options).
    #[arg(short = 'e', long = "rsh", env = "HAUL_RSH")]
    pub rsh: Option<String>,
    /// haul on the far side of `host:path`, as a command for its shell
    /// (rsync's --rsync-path: `/opt/haul/bin/haul`, `sudo haul`).
    #[arg(long, default_value = "haul")]
    pub remote_haul: String,
    /// For `host:path`: run over the ssh channel itself (rsync's way)
    /// without first trying the direct port the far side offers.
    #[arg(long)]
    pub ssh_tunnel: bool,
    /// For `host:path`: run this build of haul there, copied once (when
    /// that host's `uname -sm` matches) into ~/.cache/haul/bin and checked
    /// by BLAKE3; later runs reuse the copy. Instead of --remote-haul.
    #[arg(long, conflicts_with = "remote_haul")]
    pub ssh_install: bool,
    /// Known-hosts file for trust on first use.
    #[arg(long)]
    pub known_hosts: Option<PathBuf>,
    /// Seconds of silence before a connection is dropped and retried.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Seconds a node may take to answer a new connection at all (the TCP
    /// connection, or QUIC's first handshake packets; at most --timeout).
    /// Nothing answering is not retried: the host is down, the address
    /// wrong, or a firewall drops the packets.
    #[arg(long, default_value_t = 10)]
    pub connect_timeout: u64,
    /// Reconnects per connection before giving up.
    #[arg(long, default_value_t = 5)]
    pub retries: u32,
    /// First retry wait in milliseconds (doubles each retry, with jitter,
    /// up to 30 s): nodes and remote servers alike.
    #[arg(long, default_value_t = 500, hide = true)]
    pub retry_base_ms: u64,
    /// Socket buffer size (default: kernel autotuning), e.g. 16M for long fat links.
    #[arg(long)]
    pub socket_buffer: Option<String>,
    /// Cap on the whole transfer's rate, across all connections, paced:
    /// `50mbit`, or bytes per second with K/M/G (`10M` as rclone, `500K`).
    /// Also spelled --bwlimit (rsync's name); FTP, SFTP, HTTP and S3 pulls too.
    #[arg(long, visible_alias = "bwlimit", value_name = "RATE")]
    pub max_rate: Option<String>,
    /// Over QUIC, start at RATE rather than finding the rate from nothing
    /// (`200mbit`, or bytes per second with K/M/G): what the path is known
    /// to carry. Without it, a transfer with a node it moved data with
    /// before (the same way, within 30 days, long enough to have found the
    /// rate) starts at the rate it reached then, kept in
    /// ~/.cache/haul/paths; `none` uses neither. The first round trips
    /// check that the rate holds and fall back to what gets through.
    #[arg(long, value_name = "RATE")]
    pub rate_hint: Option<String>,
    /// Append a line per file sent, received or failed (and one for the
    /// transfer) to FILE, as a node's transfer log (rsync's --log-file).
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// --log-file lines as `text` or `json` (one object per line).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// Compress chunks on the wire with zstd (rsync's -z): each chunk on its
    /// own, sent compressed only when that saves at least 1/32 of it, so
    /// data that does not shrink costs almost nothing. Pushes compress here,
    /// pulls from a node there, and a fan-out's relays pass on the frames
    /// they received; digests are of the data itself. Rates and --bwlimit
    /// count the bytes on the wire.
    #[arg(short = 'z', long)]
    pub compress: bool,
    /// zstd level for -z, 1 (fastest) to 19 (smallest); 0 turns -z off.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub compress_level: i32,
    /// Show what would be sent, skipped as up to date, made and deleted,
    /// with sizes and totals; nothing is written, created, deleted or
    /// locked on either side.
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Mirror (push, pull from a node, local copy): once every file verified
    /// and the source was listed in full, delete what DEST holds under the
    /// source's top that the source does not have. Nothing is deleted when
    /// anything failed; files the filters leave out are kept.
    #[arg(long)]
    pub delete: bool,
    /// With --delete: when more than N entries would be deleted, delete
    /// none and say so (exit 25) — a guard against a source that came up
    /// empty. rsync deletes up to N; haul picks none of them.
    #[arg(long, value_name = "N")]
    pub max_delete: Option<u64>,
    /// --delete, and also delete at DEST what the filters leave out
    /// (rsync's --delete-excluded; without it excluded files are kept).
    #[arg(long)]
    pub delete_excluded: bool,
    /// Keep what the transfer replaces or --delete removes at DEST: renamed
    /// with --suffix (default `~`) beside it, or moved under --backup-dir
    /// (push, pull, local copy, fan-out; rsync's -b). Backups are never
    /// deleted by --delete.
    #[arg(short = 'b', long)]
    pub backup: bool,
    /// With -b: keep backups under DIR (relative to DEST, made if missing)
    /// at their path relative to DEST; implies -b.
    #[arg(long, value_name = "DIR")]
    pub backup_dir: Option<String>,
    /// With -b: the suffix backups get (default `~`, or none with
    /// --backup-dir).
    #[arg(long, value_name = "SUFFIX")]
    pub suffix: Option<String>,
    /// Print rsync's change string for each entry that changes, on stdout:
    /// `>f+++++++++` a new file received (`<` sent by a push), `>f.st......`
    /// its size and mtime changed, `cd+++++++++` a directory made,
    /// `hf+++++++++` a hard link, `*deleting`; `.f...pog..x` what was set in
    /// place on a file up to date, `.d..t......` a directory's mtime,
    /// `cLc.t......` a symlink pointing elsewhere (--json carries
    /// `itemized` events with their `fields` with or without -i). With -n,
    /// what would change.
    #[arg(short = 'i', long)]
    pub itemize_changes: bool,
    /// Once SIZE bytes moved (K/M/G suffixes), start no further file: those
    /// in flight finish (each connection holds at most two files ahead under
    /// this flag), the rest is left for the next run; exit 8 (rclone's
    /// --max-transfer with its soft cutoff). Push, pull (from a node or an
    /// FTP/SFTP/HTTP/S3 server), local copy, and fan-outs (the client's own
    /// bytes count — in a tree where it feeds k nodes, each byte k times —
    /// and every node is cut after the same file).
    #[arg(long, value_name = "SIZE")]
    pub max_transfer: Option<String>,
    /// Replace a non-empty directory at DEST where the source has a file or
    /// symlink (rsync's --force; --delete implies it). An empty directory,
    /// a file where the source has a directory and any other type change
    /// are replaced without it.
    #[arg(long)]
    pub force: bool,
    /// Decide "up to date" by content instead of size and mtime: BLAKE3 of
    /// both files for haul:// (the node hashes its own) and local copies;
    /// for FTP, SFTP, HTTP and S3 pulls, the checksums the server offers
    /// (size and mtime where it offers none). Only files that differ move;
    /// a local copy, a pull from a node, a push and a fan-out set the
    /// mtime, mode and kept attributes of a file whose content matches, as
    /// rsync -c does.
    #[arg(short = 'c', long)]
    pub checksum: bool,
    /// Keep every regular file DEST already has, whatever its size and
    /// mtime: send only what is missing (rsync's --ignore-existing; FTP,
    /// SFTP, HTTP and S3 pulls: as --skip-existing).
    #[arg(long, conflicts_with = "checksum")]
    pub ignore_existing: bool,
    /// Keep a file DEST has with the source's size, whatever its mtime
    /// (rsync's --size-only).
    #[arg(long, conflicts_with = "checksum")]
    pub size_only: bool,
    /// Keep a file that is newer at DEST than at the source (rsync's
    /// -u/--update); the others by the usual size and mtime check.
    #[arg(short = 'u', long, conflicts_with = "checksum")]
    pub update: bool,
    /// Write payloads from memory instead of sendfile(2) (plaintext only).
    #[arg(long, hide = true)]
    pub no_zero_copy: bool,
    /// Memory for chunk buffers across all connections (at least 64M).
    #[arg(long, default_value = "256M")]
    pub chunk_memory: String,
}

/// `haul push`.
#[derive(Debug, Args)]
#[command(
    disable_help_flag = true,
    after_help = "Example:\n  haul push ./data haul://node:7878/incoming   # creates incoming/data/...\n  haul push ./data/ haul://node:7878/incoming  # the contents of data go into incoming/\n  haul push ./data haul://a:7878/in haul://b:7878/in haul://c:7878/in   # fan-out: a relays to b, b to c\n  haul push ./data --to-file nodes.txt --plan stripes:2 -v             # hundreds of nodes\n  haul push ./data alice@host:/srv/in/                                  # over ssh: nothing set up there but haul\n  haul push ./data n1:/srv/in/ n2:/srv/in/ n3:/srv/in/                  # a fan-out over ssh"
)]
pub struct PushArgs {
    /// Local files or directories, then one or more destinations —
    /// haul://HOST:PORT/DEST or [user@]host:DEST (several: a fan-out, the
    /// nodes relaying to each other).
    #[arg(required = true, num_args = 1..)]
    pub paths: Vec<String>,
    /// More destinations: a file with one per line, haul:// URLs and
    /// [user@]host:path locations mixed (`#` comments).
    #[arg(long, value_name = "FILE")]
    pub to_file: Option<PathBuf>,
    /// Nodes of a fan-out started over ssh at once (pdsh's fan-out).
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub ssh_parallel: usize,
    /// Fan-out plan: `chain` (each node relays to the next), `tree`,
    /// `tree:K` (K children per sender), `stripes`, `stripes:K` (each large
    /// file in K ranges, each down a tree of its own: every node uploads
    /// about one copy) or `auto` (the fastest by the model).
    #[arg(long, default_value = "chain", value_name = "PLAN")]
    pub plan: String,
    /// A destination's upload rate, URL=RATE (bytes/s with K/M/G, or
    /// 20mbit): slow uploaders become leaves of the plan (repeatable).
    #[arg(long, value_name = "URL=RATE")]
    pub rate: Vec<String>,
    /// Transfer settings.
    #[command(flatten)]
    pub transfer: TransferArgs,
    /// Which files are sent.
    #[command(flatten)]
    pub filter: FilterArgs,
    /// rsync's flags for what haul does anyway.
    #[command(flatten)]
    pub rsync: RsyncArgs,
}

/// `haul pull`.
#[derive(Debug, Args)]
#[command(disable_help_flag = true, after_help = PULL_EXAMPLES)]
pub struct PullArgs {
    /// haul://HOST:PORT/PATH, ftp://, ftps://, ftps-implicit://, sftp://,
    /// http://, https://, s3://BUCKET/PREFIX, or a local path.
    pub source: String,
    /// Local destination directory (created if missing); for one file, a
    /// DEST that does not exist and does not end in `/` is its new name.
    pub dest: PathBuf,
    /// Transfer settings.
    #[command(flatten)]
    pub transfer: TransferArgs,
    /// Which files are fetched.
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Settings for FTP, SFTP, HTTP and S3 sources.
    #[command(flatten)]
    pub remote: RemoteArgs,
    /// rsync's flags for what haul does anyway.
    #[command(flatten)]
    pub rsync: RsyncArgs,
}

const PULL_EXAMPLES: &str = "\
Examples:
  haul pull haul://node:7878/incoming/data ./here     # creates ./here/data/...
  haul pull /mnt/a/ /mnt/b                            # local copy
  haul pull ftp://ftp.example.org/pub/sst/ ./sst --include '*.nc' -j 4
  haul pull sftp://alice@host/data ./data --ssh-key ~/.ssh/id_ed25519
  haul pull https://host/files/ ./files --verify-sidecar
  haul pull s3://bucket/run42/ ./run42 --s3-endpoint http://127.0.0.1:9000
  haul pull ftp://host/in/ ./out --dir-struct '20[0-9]{2}/[0-9]{2}/.*\\.nc' \\
            --rename '{1}/{name}' --delete-source

A URL with a trailing / puts the directory's contents into DEST; without it,
DEST/NAME/ is created (rsync's rule). One file to a DEST that does not exist
(or is a file) and does not end in / takes DEST as its name (scp's rule);
an existing directory or DEST/ gets DEST/NAME. Passwords: in the URL, --password-file
or HAUL_PASSWORD; S3 keys from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or
~/.aws/credentials. Secrets are never printed.";

/// rsync's flags, accepted so that `haul push -avP` does what `rsync -avP`
/// users expect: those whose meaning haul has without them, and what
/// `-a -o -g -X -A -S -H` keep beyond mode and mtime.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "rsync's flags")]
pub struct RsyncArgs {
    /// rsync's -rlptgoD: haul recurses and keeps symlinks, permissions and
    /// mtimes by default; -a adds owners and groups (-o -g), applied where
    /// the receiver runs as root. As in rsync, -a does not imply -H.
    #[arg(short = 'a', long)]
    pub archive: bool,
    /// Keep owners (by name; applied where the receiver runs as root, on a
    /// node only with `haul serve --keep-owners`).
    #[arg(short = 'o', long)]
    pub owner: bool,
    /// Keep groups (by name; applied as -o is).
    #[arg(short = 'g', long)]
    pub group: bool,
    /// Owners and groups by number, not by name.
    #[arg(long)]
    pub numeric_ids: bool,
    /// Keep extended attributes: user.* always; trusted.* and security.*
    /// where owners are applied (SELinux labels are not sent).
    #[arg(short = 'X', long)]
    pub xattrs: bool,
    /// Keep POSIX ACLs (as their system.posix_acl_* attributes).
    #[arg(short = 'A', long)]
    pub acls: bool,
    /// Hard links: a file's further names within the transfer are made
    /// links to its first again, its data sent once (push, pull, local
    /// copy, fan-out).
    #[arg(short = 'H', long)]
    pub hard_links: bool,
    /// Sparse files: chunks of zeros are not sent (and a file sent from
    /// ext4, XFS, Btrfs or tmpfs has its holes found with SEEK_DATA, not
    /// read), and runs of zeros are written as holes (rsync's -S; the
    /// file's BLAKE3 is of its bytes, zeros included).
    #[arg(short = 'S', long)]
    pub sparse: bool,
    /// Recurse into directories (always).
    #[arg(short = 'r', long)]
    pub recursive: bool,
    /// Keep mtimes (always).
    #[arg(short = 't', long)]
    pub times: bool,
    /// Keep permission bits (always).
    #[arg(short = 'p', long)]
    pub perms: bool,
    /// Send symlinks as symlinks (always).
    #[arg(short = 'l', long)]
    pub links: bool,
    /// rsync's --devices --specials: haul skips device and special files
    /// with a warning, whatever the flags.
    #[arg(short = 'D')]
    pub devices: bool,
    /// --progress and --partial.
    #[arg(short = 'P')]
    pub progress_partial: bool,
    /// Progress bars on a terminal (always; --json for scripts).
    #[arg(long)]
    pub progress: bool,
    /// Keep partial files to resume (always: under .haul/ beneath the
    /// destination, renamed into place only once verified).
    #[arg(long)]
    pub partial: bool,
    /// Totals at the end (always printed; --json for a summary object).
    #[arg(long)]
    pub stats: bool,
    /// Sizes for people (always). As in rsync, `-h` is this, not help:
    /// `haul push -avh` copies; --help prints help.
    #[arg(short = 'h', long)]
    pub human_readable: bool,
    /// Print help.
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

impl RsyncArgs {
    /// What these flags keep beyond mode, mtime and symlinks.
    pub fn keep(&self) -> haul_proto::Keep {
        haul_proto::Keep {
            owner: self.owner || self.archive,
            group: self.group || self.archive,
            xattrs: self.xattrs,
            sparse: self.sparse,
            acls: self.acls,
            numeric_ids: self.numeric_ids,
            hard_links: self.hard_links,
        }
    }
}

/// Which files a transfer takes: the same rules for push, pull from a
/// node, local copies and FTP/SFTP/HTTP/S3 pulls (`haul-filter`).
#[derive(Debug, Args, Clone, Default)]
pub struct FilterArgs {
    /// Take files matching this glob (repeatable; first matching rule wins).
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// Skip files matching this glob; `DIR/` skips a directory (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Read rules from FILE, one a line: `+ GLOB` includes, `- GLOB`
    /// excludes, `#` comments (in order with --include/--exclude).
    #[arg(long, value_name = "FILE")]
    pub filter_from: Vec<PathBuf>,
    /// Skip files matching any glob in FILE, one a line (rsync's
    /// --exclude-from; `#` and `;` comments).
    #[arg(long, value_name = "FILE")]
    pub exclude_from: Vec<PathBuf>,
    /// Take files matching any glob in FILE, one a line (rsync's
    /// --include-from).
    #[arg(long, value_name = "FILE")]
    pub include_from: Vec<PathBuf>,
    /// Only files at least this large (e.g. 10M).
    #[arg(long, value_name = "SIZE")]
    pub min_size: Option<String>,
    /// Only files at most this large.
    #[arg(long, value_name = "SIZE")]
    pub max_size: Option<String>,
    /// Only files modified after this: 2024-03-01, 2024-03-01T12:00:00Z, or an age like 7d, 12h, 30m.
    /// Also spelled --max-age (rclone's name).
    #[arg(long, value_name = "WHEN", visible_alias = "max-age")]
    pub newer_than: Option<String>,
    /// Only files modified before this: a date, or an age like 7d (files
    /// at least that old). Also spelled --min-age (rclone's name).
    #[arg(long, value_name = "WHEN", visible_alias = "min-age")]
    pub older_than: Option<String>,
    /// Take only the paths FILE lists, one a line, relative to the source's
    /// top (rsync's --files-from; a directory listed takes all beneath
    /// it; `-` reads standard input). The other rules still apply.
    #[arg(long, value_name = "FILE")]
    pub files_from: Option<PathBuf>,
    /// --files-from's names are separated by NUL bytes, not lines (as
    /// `find -print0` writes them).
    #[arg(short = '0', long, requires = "files_from")]
    pub from0: bool,
    /// Descend at most this many directory levels.
    #[arg(long, value_name = "N")]
    pub max_depth: Option<usize>,
    /// `--include`, `--exclude`, `--filter-from`, `--exclude-from` and
    /// `--include-from` in command-line order (filled in by main).
    #[arg(skip)]
    pub rules: Vec<FilterRule>,
}

/// One filter flag, in command-line order.
#[derive(Debug, Clone)]
pub enum FilterRule {
    /// `--include` or `--exclude`.
    Glob(haul_fetch::RuleKind, String),
    /// `--filter-from FILE`.
    File(PathBuf),
    /// `--exclude-from FILE` or `--include-from FILE`: globs of one kind.
    Patterns(haul_fetch::RuleKind, PathBuf),
}

/// Flags for remote (FTP, SFTP, HTTP, S3) sources.
#[derive(Debug, Args, Clone, Default)]
pub struct RemoteArgs {
    /// Only files whose relative path matches this regular expression.
    #[arg(long, value_name = "RE")]
    pub regex: Option<String>,
    /// Per-path-component regexes, `/`-separated (PushPull's DirStruct).
    #[arg(long, value_name = "RE/RE/...")]
    pub dir_struct: Option<String>,
    /// Skip files that already exist at the destination (whatever their size).
    #[arg(long)]
    pub skip_existing: bool,
    /// Destination path template: {path} {dir} {name} {stem} {ext} {host} {date:%Y%m%d} {mtime:FMT} {1} {cap:NAME}.
    #[arg(long, value_name = "TEMPLATE")]
    pub rename: Option<String>,
    /// Delete each remote file once its copy is verified.
    #[arg(long)]
    pub delete_source: bool,
    /// Verify files against NAME.sha256 / NAME.md5 / SHA256SUMS / MD5SUMS beside them.
    #[arg(long)]
    pub verify_sidecar: bool,
    /// Connections to the server at most.
    #[arg(long, default_value_t = 8)]
    pub max_conn_per_host: u32,
    /// User name (when not in the URL).
    #[arg(long)]
    pub user: Option<String>,
    /// File holding the password (or set HAUL_PASSWORD).
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// SSH private key to try (repeatable).
    #[arg(long, value_name = "FILE")]
    pub ssh_key: Vec<PathBuf>,
    /// SSH known_hosts file [default: ~/.ssh/known_hosts].
    #[arg(long, value_name = "FILE")]
    pub ssh_known_hosts: Option<PathBuf>,
    /// Accept and record an SSH host key seen for the first time.
    #[arg(long)]
    pub accept_new_host_key: bool,
    /// Extra CA certificate (PEM) to trust for FTPS, HTTPS and S3.
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Accept any TLS certificate (testing only: no protection against interception).
    #[arg(long)]
    pub insecure: bool,
    /// S3 endpoint URL (for S3-compatible stores), e.g. http://127.0.0.1:9000.
    #[arg(long, value_name = "URL")]
    pub s3_endpoint: Option<String>,
    /// S3 region [default: from AWS_REGION or ~/.aws/config, else us-east-1].
    #[arg(long)]
    pub s3_region: Option<String>,
    /// S3 path-style addressing (endpoint/bucket/key).
    #[arg(long)]
    pub s3_path_style: bool,
}

/// `haul ls`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  haul ls haul://node:7878/incoming -R --include '*.nc'\n  haul ls ftp://ftp.example.org/pub/ --json\n  haul ls ./data -R --max-depth 1"
)]
pub struct LsArgs {
    /// haul://HOST:PORT/PATH, a local path, or an ftp://, ftps://,
    /// ftps-implicit://, sftp://, http://, https:// or s3:// URL.
    pub url: String,
    /// The whole tree, not only the first level.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Which entries are listed.
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Connection settings (haul:// nodes).
    #[command(flatten)]
    pub transfer: TransferArgs,
    /// Settings for FTP, SFTP, HTTP and S3 sources.
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// `haul check`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  haul check /mnt/a/run42 /mnt/b/run42 --exclude '*.tmp'\n  haul check ./run42 haul://b:7878/in/run42   # the node hashes its copy: nothing is downloaded\n  haul check s3://bucket/run42/ ./run42   # by the checksums S3 offers (ETag MD5...)"
)]
pub struct CheckArgs {
    /// One tree: a local path, a haul:// path (hashed by the node), or an
    /// ftp://, sftp://, http(s):// or s3:// URL (compared by the checksums
    /// the server offers, never downloaded).
    pub src: String,
    /// The other: a local path or a haul:// path (with an FTP, SFTP,
    /// HTTP or S3 SRC: a local path).
    pub dst: String,
    /// Which files are compared.
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Connection settings (timeouts).
    #[command(flatten)]
    pub transfer: TransferArgs,
    /// Settings for FTP, SFTP, HTTP and S3 sources.
    #[command(flatten)]
    pub remote: RemoteArgs,
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

/// `haul daemon`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  haul daemon --check --config /etc/haul/haul.toml   # validate, print plans and next runs\n  haul daemon --config /etc/haul/haul.toml           # run (SIGHUP reloads, SIGTERM stops)"
)]
pub struct DaemonArgs {
    /// The daemon's TOML config.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Validate the config, print each source's plan and next runs, and exit.
    #[arg(long)]
    pub check: bool,
}

/// `haul catalog`.
/// `haul hash`.
#[derive(Debug, Args)]
pub struct HashArgs {
    /// Files and directories to hash (directories are walked; symlinks are
    /// not followed). With --check: the lists to verify (`-` is stdin).
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<String>,
    /// Read b3sum lines (`HASH  PATH`) from each PATH and verify them:
    /// `PATH: OK` or `PATH: FAILED`; exit 1 if any failed or a line is not one.
    #[arg(short, long)]
    pub check: bool,
}

#[derive(Debug, Args)]
pub struct CatalogArgs {
    /// The daemon's config (its `catalog` is used).
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// The catalog URL (sqlite:PATH or postgres://...) instead of --config.
    #[arg(long, value_name = "URL", global = true)]
    pub catalog: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: CatalogCommand,
}

/// `haul catalog` subcommands.
#[derive(Debug, Subcommand, Clone)]
pub enum CatalogCommand {
    /// List files (of a source, in a state), or with --site each fetched
    /// file's delivery to that site.
    List {
        /// Only this source.
        #[arg(long)]
        source: Option<String>,
        /// Deliveries to this site (of --source, or of every source of
        /// --config that delivers there).
        #[arg(long)]
        site: Option<String>,
        /// Only files in this state: new, claimed, fetched, failed; with
        /// --site: pending, claimed, delivered, failed.
        #[arg(long, value_parser = ["new", "claimed", "fetched", "failed", "pending", "delivered"])]
        state: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 1000)]
        limit: u32,
    },
    /// Show one file: its version, state, BLAKE3, local path, errors.
    Show {
        /// The source's name.
        source: String,
        /// The path relative to the source's URL.
        path: String,
    },
    /// Forget files so the next run fetches them again.
    Forget {
        /// The source's name.
        source: String,
        /// A path relative to the source's URL (a directory forgets what is under it).
        path: Option<String>,
        /// Forget every file of the source.
        #[arg(long)]
        all: bool,
        /// Forget only what this site confirmed (those files are delivered
        /// to it again; nothing is fetched again).
        #[arg(long)]
        site: Option<String>,
    },
    /// Try a site's failed deliveries again now rather than at their
    /// retry time.
    Retry {
        /// The source's name.
        source: String,
        /// The site.
        #[arg(long)]
        site: String,
    },
    /// The latest runs: start, worker, counts, errors.
    Runs {
        /// Only this source.
        #[arg(long)]
        source: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
}

/// `haul status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The daemon's config (its `status` address is asked).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The status listener's address instead of --config.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:9464")]
    pub addr: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_variables() -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        each_variable(&command(), "haul", &mut |path, arg, name| {
            let long = arg.get_long().unwrap_or_default().to_owned();
            out.push((path.to_owned(), long, name.to_owned()));
        });
        out
    }

    #[test]
    fn every_flag_reads_haul_flag_and_none_reads_a_hook_variable_or_one_of_hauls_own() {
        let vars = all_variables();
        assert!(vars.len() > 150, "{} flags read a variable", vars.len());
        for (path, long, name) in &vars {
            assert!(
                !haul_daemon::HOOK_VARIABLES.contains(&name.as_str())
                    && !OWN_VARIABLES.contains(&name.as_str()),
                "{path} --{long} would read {name}, which means something else"
            );
        }
        let reads = |path: &str, long: &str| {
            vars.iter()
                .find(|(p, l, _)| p == path && l == long)
                .map(|(_, _, n)| n.clone())
        };
        assert_eq!(reads("haul push", "jobs").as_deref(), Some("HAUL_JOBS"));
        assert_eq!(
            reads("haul pull", "max-rate").as_deref(),
            Some("HAUL_MAX_RATE")
        );
        assert_eq!(
            reads("haul serve", "chunk-memory").as_deref(),
            Some("HAUL_CHUNK_MEMORY")
        );
        assert_eq!(reads("haul push", "token").as_deref(), Some("HAUL_TOKEN"));
        assert_eq!(reads("haul", "json").as_deref(), Some("HAUL_JSON"));
        assert_eq!(reads("haul push", "exclude"), None);
        assert_eq!(reads("haul demo", "size"), None, "HAUL_SIZE is a hook's");
        assert_eq!(reads("haul push", "help"), None);
    }

    #[test]
    fn a_switch_reads_a_yes_or_no_and_a_flag_naming_its_own_variable_keeps_it() {
        let switch = |env: Option<&'static str>| {
            let arg = clap::Arg::new("s")
                .long("unit-test-switch")
                .action(clap::ArgAction::SetTrue);
            from_env(clap::Command::new("t").arg(match env {
                Some(e) => arg.env(e),
                None => arg,
            }))
        };
        let env_of = |c: &clap::Command| {
            let a = c
                .get_arguments()
                .next()
                .map(|a| a.get_env().map(|e| e.to_owned()));
            a.flatten()
        };
        assert_eq!(
            env_of(&switch(Some("HAUL_UNIT_TEST_OWN"))),
            Some("HAUL_UNIT_TEST_OWN".into())
        );
        let cmd = switch(None);
        assert_eq!(env_of(&cmd), Some("HAUL_UNIT_TEST_SWITCH".into()));
        // A switch's parser takes yes and no (HAUL_DRY_RUN=yes and =0 in
        // tests/it/env_flags.rs): clap's bool parser names only true/false.
        let arg = cmd.get_arguments().next().unwrap();
        let values: Vec<String> = arg
            .get_value_parser()
            .possible_values()
            .map(|v| v.map(|p| p.get_name().to_owned()).collect())
            .unwrap_or_default();
        assert!(
            values.contains(&"yes".to_owned()) && values.contains(&"off".to_owned()),
            "{values:?}"
        );
    }

    #[test]
    fn flags_in_a_conflict_or_that_remove_or_weaken_are_not_read_and_ssh_nodes_read_none() {
        let vars = all_variables();
        let reads = |path: &str, long: &str| vars.iter().any(|(p, l, _)| p == path && l == long);
        for (path, long) in [
            ("haul push", "checksum"),
            ("haul push", "size-only"),
            ("haul push", "delete"),
            ("haul push", "config"),
            ("haul serve", "open"),
            ("haul serve", "ssh"),
            ("haul serve", "status"),
            ("haul pull", "from0"),
        ] {
            assert!(!reads(path, long), "{path} --{long} reads a variable");
        }
        assert!(reads("haul serve", "chunk-memory"));
        let args: Vec<std::ffi::OsString> = ["haul", "serve", "--ssh", "--root", "x"]
            .iter()
            .map(Into::into)
            .collect();
        let mut any = Vec::new();
        each_variable(&command_for(&args), "haul", &mut |p, a, n| {
            any.push(format!("{p} --{} {n}", a.get_long().unwrap_or_default()))
        });
        assert!(any.is_empty(), "a node over ssh reads {any:?}");
    }
}
