//! `haul daemon --config haul.toml`: the TOML file → validated settings.
//! Unknown keys are refused (`deny_unknown_fields`); every error names the
//! line it is about. Each source's settings are those of `haul pull`: they
//! become the same `RemoteArgs`/`TransferArgs` the flags fill, so the
//! daemon's filters, retries and options are `haul pull`'s own.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use haul_catalog::Refetch;
use haul_daemon::Schedule;
use haul_time::parse_duration;
use serde::Deserialize;
use toml::Spanned;

use crate::cli::{flag_defaults, FilterArgs, FilterRule, RemoteArgs, TransferArgs};
use crate::location::NodeAt;

mod keep;
mod node_keys;
mod sites;

pub(crate) use keep::shown as shown_keep;
use node_keys::{check_keys_fit, node_source};
use sites::{downstream_sites, site_plan, with_downstream};

/// How long an untouched partial download is kept by default: a week, as
/// `haul serve --partial-ttl`.
pub const DEFAULT_PARTIAL_TTL: Duration = Duration::from_secs(7 * 86_400);

/// The whole file, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `sqlite:PATH` or `postgres://…`.
    #[serde(default = "default_catalog")]
    pub catalog: Spanned<String>,
    /// Status listener address, or `"off"`.
    #[serde(default = "default_status")]
    pub status: Spanned<String>,
    /// The token the console's actions need (at least 16 characters);
    /// default: a new one printed at each start.
    pub status_token: Option<Spanned<String>>,
    /// A file holding that token (first line), instead of `status_token`.
    pub status_token_file: Option<Spanned<String>>,
    /// This worker's name (default: the host name).
    pub worker: Option<String>,
    /// Files in flight, all sources together.
    #[serde(default = "default_max_files")]
    pub max_files: usize,
    /// Files in flight from one host, all sources together.
    #[serde(default = "default_max_files_per_host")]
    pub max_files_per_host: usize,
    /// Claim lease (`5m`).
    pub lease: Option<Spanned<String>>,
    /// Grace for runs after SIGTERM (`20s`).
    pub grace: Option<Spanned<String>>,
    /// First retry of a source that is down (`30s`).
    pub down_retry: Option<Spanned<String>>,
    /// Longest wait between retries of a source that is down (`10m`).
    pub down_retry_max: Option<Spanned<String>>,
    /// First retry of a file that failed (`10s`, doubling per attempt).
    pub file_retry: Option<Spanned<String>>,
    /// How long a hook may run before it is killed (`60s`).
    pub hook_timeout: Option<Spanned<String>>,
    /// Where partial downloads are staged (each source in a directory of
    /// its own beneath it); on the filesystem of every `dest`. Default:
    /// each `dest`'s own `.haul/partial`.
    pub staging: Option<Spanned<String>>,
    /// Partial downloads no run has written for this long are removed, at
    /// start and hourly (`7d`, `12h`, or `off`; default `7d`).
    pub partial_ttl: Option<Spanned<String>>,
    /// The transfer log: a line per run and per file fetched, delivered or
    /// failed, appended to this file (created 0640).
    pub log_file: Option<Spanned<String>>,
    /// `text` (default) or `json` (one object per line).
    pub log_format: Option<Spanned<String>>,
    /// The sites deliveries go to.
    #[serde(default)]
    pub site: Vec<Spanned<SiteConfig>>,
    /// The sources.
    #[serde(default)]
    pub source: Vec<Spanned<SourceConfig>>,
}

/// One `[[site]]`: a node every file of the sources that name it goes to.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct SiteConfig {
    /// The name sources' `deliver` lists give (the catalog's key).
    pub name: String,
    /// `haul://HOST:PORT/DIR`: the node, and the directory under its root
    /// deliveries go under; or `[user@]host:DIR` (`ssh://…`): a node
    /// started over ssh for each round, serving DIR.
    pub url: Spanned<String>,
    /// File holding the node's token (first line), as `--token-file`.
    pub token_file: Option<PathBuf>,
    /// Its upload rate when known (`100mbit`, `20MB/s`): places it in the
    /// relay plan (slow uploaders at the leaves).
    pub rate: Option<Spanned<String>>,
    /// `tcp` (default) or `quic`, as `--transport`.
    pub transport: Option<Spanned<String>>,
    /// Pin the node's key (`SHA256:…` as `haul serve` prints it).
    pub fingerprint: Option<String>,
    /// Known-hosts file for trust on first use (default: the user's).
    pub known_hosts: Option<PathBuf>,
    /// Plaintext TCP (the node runs with `--plaintext`).
    #[serde(default)]
    pub plaintext: bool,
    /// Seconds of silence before a connection is dropped, as `--timeout`.
    pub timeout: Option<u64>,
    /// Cap on what the daemon itself sends this site (`50mbit`, `10M`), as
    /// `--max-rate`; relays between sites are not capped by it.
    pub max_rate: Option<String>,
    /// An ssh site: the remote shell, as `--rsh` (default `ssh`).
    pub rsh: Option<String>,
    /// An ssh site: haul on the far side, as `--remote-haul`.
    pub remote_haul: Option<String>,
    /// Refused on a site (its node is reached port to port by the other
    /// sites' relays, never over ssh's channel): kept to say so.
    #[serde(default)]
    pub ssh_tunnel: bool,
    /// An ssh site: copy this build there once, as `--ssh-install`.
    #[serde(default)]
    pub ssh_install: bool,
    /// Sites fed through this one (a distribution tree: LDM's downstream
    /// sites): every file delivered here goes on to them, this site
    /// relaying it, and the daemon reaches them only through this site's
    /// node (`haul serve --jump-to HOST:PORT` there, for each).
    #[serde(default)]
    pub downstream: Vec<String>,
}

/// The console's token, from `status_token` or `status_token_file`.
fn status_token(
    file: &FileConfig,
    at: impl Fn(std::ops::Range<usize>) -> String,
) -> Result<Option<String>> {
    let (token, span) = match (&file.status_token, &file.status_token_file) {
        (Some(_), Some(f)) => bail!(
            "{}: status_token and status_token_file both set: keep one",
            at(f.span())
        ),
        (Some(t), None) => (t.get_ref().clone(), t.span()),
        (None, Some(f)) => {
            let text = std::fs::read_to_string(f.get_ref()).with_context(|| {
                format!(
                    "{}: status_token_file = {:?}: cannot read it",
                    at(f.span()),
                    f.get_ref()
                )
            })?;
            (
                text.lines().next().unwrap_or_default().trim().to_owned(),
                f.span(),
            )
        }
        (None, None) => return Ok(None),
    };
    if token.chars().count() < 16 || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        bail!(
            "{}: the console's token must be at least 16 characters without spaces \
             (make one with: head -c 16 /dev/urandom | xxd -p)",
            at(span)
        );
    }
    Ok(Some(token))
}

fn default_catalog() -> Spanned<String> {
    Spanned::new(0..0, "sqlite:/var/lib/haul/catalog.db".into())
}
fn default_status() -> Spanned<String> {
    Spanned::new(0..0, "127.0.0.1:9464".into())
}
fn default_max_files() -> usize {
    16
}
fn default_max_files_per_host() -> usize {
    8
}

/// One `[[source]]`.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// The catalog's key for it.
    pub name: String,
    /// Any URL `haul pull` takes from a remote: ftp, ftps, sftp, http(s),
    /// s3; or a haul node: `haul://HOST:PORT/DIR`, `[user@]host:DIR` or
    /// `ssh://[user@]host[:port]/DIR` (a node started over ssh).
    pub url: Spanned<String>,
    /// Local destination directory.
    pub dest: PathBuf,
    /// `every 10m` or a cron expression.
    pub schedule: Spanned<String>,
    /// A random delay up to this after each scheduled time (`30s`).
    pub jitter: Option<Spanned<String>>,
    /// `never` (default) or `if-changed`.
    pub refetch: Option<Spanned<String>>,
    /// Globs of files to take (`--include`).
    #[serde(default)]
    pub include: Vec<String>,
    /// Globs of files or `DIR/` to skip (`--exclude`; checked before the includes).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// `--regex`.
    pub regex: Option<String>,
    /// `--dir-struct`.
    pub dir_struct: Option<String>,
    /// `--min-size`.
    pub min_size: Option<String>,
    /// `--max-size`.
    pub max_size: Option<String>,
    /// `--newer-than` (an age is taken from each run's start).
    pub newer_than: Option<String>,
    /// `--max-depth`.
    pub max_depth: Option<usize>,
    /// `--rename`.
    pub rename: Option<String>,
    /// `--verify-sidecar`.
    #[serde(default)]
    pub verify_sidecar: bool,
    /// `--delete-source`.
    #[serde(default)]
    pub delete_source: bool,
    /// `--max-conn-per-host`.
    pub max_conn: Option<u32>,
    /// `-j`: a number or `auto`.
    pub jobs: Option<JobsValue>,
    /// `--streams`.
    pub streams: Option<u32>,
    /// `--split-min`.
    pub split_min: Option<String>,
    /// `--timeout` in seconds.
    pub timeout: Option<u64>,
    /// `--retries`.
    pub retries: Option<u32>,
    /// `--user`.
    pub user: Option<String>,
    /// `--password-file`.
    pub password_file: Option<PathBuf>,
    /// The name of an environment variable holding the password.
    pub password_env: Option<String>,
    /// `--ssh-key` (several).
    #[serde(default)]
    pub ssh_key: Vec<PathBuf>,
    /// `--ssh-known-hosts`.
    pub ssh_known_hosts: Option<PathBuf>,
    /// `--accept-new-host-key`.
    #[serde(default)]
    pub accept_new_host_key: bool,
    /// `--ca-cert`.
    pub ca_cert: Option<PathBuf>,
    /// `--insecure`.
    #[serde(default)]
    pub insecure: bool,
    /// `--s3-endpoint`.
    pub s3_endpoint: Option<String>,
    /// `--s3-region`.
    pub s3_region: Option<String>,
    /// `--s3-path-style`.
    #[serde(default)]
    pub s3_path_style: bool,
    /// A node source: the file holding its token, as `--token-file`.
    pub token_file: Option<PathBuf>,
    /// A node source: pin its key (`SHA256:…`), as `--fingerprint`.
    pub fingerprint: Option<String>,
    /// A node source: known-hosts file for its key (default: the user's).
    pub known_hosts: Option<PathBuf>,
    /// A node source: `auto`, `tcp` or `quic`, as `--transport`.
    pub transport: Option<Spanned<String>>,
    /// A node source running with `--plaintext`.
    #[serde(default)]
    pub plaintext: bool,
    /// An ssh source: the remote shell, as `--rsh` (default `ssh`).
    pub rsh: Option<String>,
    /// An ssh source: haul on the far side, as `--remote-haul`.
    pub remote_haul: Option<String>,
    /// An ssh source: run over the ssh channel itself, as `--ssh-tunnel`.
    #[serde(default)]
    pub ssh_tunnel: bool,
    /// An ssh source: copy this build there once, as `--ssh-install`.
    #[serde(default)]
    pub ssh_install: bool,
    /// Write `NAME.haul.json` (the file's facts) beside each delivered file.
    #[serde(default)]
    pub sidecar: bool,
    /// Run `sh -c COMMAND` after each delivered file.
    pub on_file: Option<String>,
    /// Run `sh -c COMMAND` after each run.
    pub on_run: Option<String>,
    /// The `[[site]]`s every fetched file goes to.
    #[serde(default)]
    pub deliver: Vec<String>,
    /// `oldest` (default) or `newest`: what a site that is behind gets first.
    pub catch_up: Option<Spanned<String>>,
    /// `false`: remove each fetched file here once every site confirmed it.
    #[serde(default = "yes")]
    pub keep_local: bool,
    /// Run `sh -c COMMAND` after each file a site confirmed.
    pub on_deliver: Option<String>,
    /// Files one delivery round claims per site at most (default 1000):
    /// smaller shares a burst among workers on one PostgreSQL catalog.
    pub deliver_batch: Option<u32>,
    /// What its pulls from a node and its deliveries keep beyond mode and
    /// mtime: `owner`, `group`, `numeric-ids`, `xattrs`, `acls`, `sparse`
    /// (`archive`: owner and group), as `haul push`'s flags.
    pub keep: Option<Spanned<Vec<String>>>,
}

fn yes() -> bool {
    true
}

/// `jobs = 4` or `jobs = "auto"`.
#[derive(Debug, Deserialize, Clone)]
#[serde(untagged)]
pub enum JobsValue {
    /// A fixed number.
    Number(u32),
    /// `auto`, or a number as text.
    Text(String),
}

/// The daemon's settings, validated.
pub struct DaemonConfig {
    /// The catalog URL.
    pub catalog: String,
    /// Where `/metrics`, `/status`, `/healthz` listen, if anywhere.
    pub status: Option<SocketAddr>,
    /// The console's token (`None`: a new one at each start).
    pub status_token: Option<String>,
    /// This worker's name.
    pub worker: String,
    /// Global cap.
    pub max_files: usize,
    /// Per-host cap.
    pub max_files_per_host: usize,
    /// Claim lease.
    pub lease: Duration,
    /// Grace after SIGTERM.
    pub grace: Duration,
    /// First retry of a source that is down.
    pub down_retry: Duration,
    /// Longest wait between retries of a source that is down.
    pub down_retry_max: Duration,
    /// First retry of a file that failed.
    pub file_retry: Duration,
    /// Hook timeout.
    pub hook_timeout: Duration,
    /// The global staging directory, if set.
    pub staging: Option<PathBuf>,
    /// How old an untouched partial download gets before it is removed
    /// (`None`: never).
    pub partial_ttl: Option<Duration>,
    /// The transfer log's file and format, if one is kept.
    pub log: Option<(PathBuf, haul_node::LogFormat)>,
    /// The sites.
    pub sites: Vec<SitePlan>,
    /// The sources.
    pub sources: Vec<SourcePlan>,
}

/// One site, validated.
pub struct SitePlan {
    /// Name.
    pub name: String,
    /// The node and directory (over ssh: a node started each round).
    pub at: NodeAt,
    /// Upload rate, bytes per second.
    pub rate: Option<f64>,
    /// `haul push`'s flags for it (token file, transport, security).
    pub transfer: TransferArgs,
    /// Those flags as the client's options (the token read once).
    pub client: haul_node::ClientOptions,
    /// The site it is fed and reached through (whose `downstream` names
    /// it).
    pub via: Option<String>,
}

/// A source that is a haul node, validated.
pub struct NodeSource {
    /// The node, and the directory whose contents come to `dest`.
    pub at: NodeAt,
    /// `haul pull`'s options for it (the token read once; the filter is
    /// added at each run).
    pub client: haul_node::ClientOptions,
}

/// One source, validated: its flags as `haul pull` takes them.
pub struct SourcePlan {
    /// Name.
    pub name: String,
    /// URL as written (may hold a password: show it only through `RemoteUrl`).
    pub url: String,
    /// A haul node source (`None`: a remote haul-fetch reads).
    pub node: Option<NodeSource>,
    /// Destination.
    pub dest: PathBuf,
    /// Schedule.
    pub schedule: Schedule,
    /// Jitter.
    pub jitter: Duration,
    /// Refetch policy.
    pub refetch: Refetch,
    /// `haul pull`'s transfer flags.
    pub transfer: TransferArgs,
    /// `haul pull`'s remote flags.
    pub remote: RemoteArgs,
    /// Filter rules in order (as `--check` shows them).
    pub rules: Vec<(haul_fetch::RuleKind, String)>,
    /// `haul pull`'s filter flags.
    pub filter: FilterArgs,
    /// `password_env`.
    pub password_env: Option<String>,
    /// Metadata sidecars.
    pub sidecar: bool,
    /// `on_file` hook.
    pub on_file: Option<String>,
    /// `on_run` hook.
    pub on_run: Option<String>,
    /// Where this source's partial downloads are staged (`STAGING/NAME`),
    /// when the config sets `staging`.
    pub staging: Option<PathBuf>,
    /// The names of the sites its files go to.
    pub deliver: Vec<String>,
    /// What a site behind gets first.
    pub catch_up: haul_catalog::CatchUp,
    /// Keep fetched files once every site confirmed them.
    pub keep_local: bool,
    /// What its node pulls and its deliveries keep beyond mode and mtime.
    pub keep: haul_proto::Keep,
    /// `on_deliver` hook.
    pub on_deliver: Option<String>,
    /// Files a delivery round claims per site.
    pub deliver_batch: u32,
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset).map_or(0, |t| t.matches('\n').count()) + 1
}

/// Reads and validates `path`.
pub fn load(path: &Path) -> Result<DaemonConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config {}", path.display()))?;
    parse(&text).with_context(|| format!("config {}", path.display()))
}

/// Validates a config's text.
pub fn parse(text: &str) -> Result<DaemonConfig> {
    // toml's errors say "TOML parse error at line N, column M" and show it.
    let file: FileConfig = toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let at = |span: std::ops::Range<usize>| format!("line {}", line_of(text, span.start));
    let duration =
        |v: &Option<Spanned<String>>, key: &str, default: Duration| -> Result<Duration> {
            match v {
                None => Ok(default),
                Some(s) => parse_duration(s.get_ref()).with_context(|| {
                    format!(
                        "{}: {key} = {:?}: use a duration like 30s, 10m or 2h",
                        at(s.span()),
                        s.get_ref()
                    )
                }),
            }
        };
    let status = match file.status.get_ref().as_str() {
        "off" | "" => None,
        addr => Some(addr.parse::<SocketAddr>().with_context(|| {
            format!(
                "{}: status = {addr:?}: use an address and port like 127.0.0.1:9464, or \"off\"",
                at(file.status.span())
            )
        })?),
    };
    let status_token = status_token(&file, at)?;
    let catalog = file.catalog.get_ref().clone();
    if !(catalog.starts_with("sqlite:")
        || catalog.starts_with("postgres://")
        || catalog.starts_with("postgresql://"))
    {
        bail!(
            "{}: catalog = {:?}: use sqlite:/path/to/catalog.db or postgres://user@host/db",
            at(file.catalog.span()),
            haul_catalog::shown_url(&catalog)
        );
    }
    if file.source.is_empty() {
        bail!("no [[source]]: add one with name, url, dest and schedule");
    }
    let staging = match &file.staging {
        None => None,
        Some(st) => {
            let path = PathBuf::from(st.get_ref());
            if !path.is_absolute() {
                bail!(
                    "{}: staging = {:?}: use an absolute path (a directory on the destinations' filesystem)",
                    at(st.span()),
                    st.get_ref()
                );
            }
            Some((path, at(st.span())))
        }
    };
    let mut sites = Vec::new();
    for site in &file.site {
        let line = at(site.span());
        let plan = site_plan(site.get_ref(), &at)
            .with_context(|| format!("[[site]] {:?} ({line})", site.get_ref().name))?;
        // A node's address; over ssh, the host and directory its node
        // serves (each round starts one for each site).
        let addr = |s: &SitePlan| match &s.at {
            NodeAt::Haul(url) => url.addr.clone(),
            ssh @ NodeAt::Ssh(_) => ssh.shown(),
        };
        if let Some((other, addr)) = sites
            .iter()
            .map(|s| (s, addr(s)))
            .find(|(_, a)| *a == addr(&plan))
        {
            bail!(
                "{line}: [[site]] {:?} is the node of [[site]] {:?} ({addr}): one site per node (a fan-out reaches each node once)",
                plan.name,
                other.name,
            );
        }
        if sites.iter().any(|s: &SitePlan| s.name == plan.name) {
            bail!(
                "{line}: two sites are named {:?}: names must differ (they key the catalog)",
                plan.name
            );
        }
        sites.push(plan);
    }
    downstream_sites(&file.site, &mut sites, &at)?;
    let mut names = std::collections::HashSet::new();
    let mut sources = Vec::new();
    for s in &file.source {
        let line = at(s.span());
        let s = s.get_ref();
        if !names.insert(s.name.clone()) {
            bail!(
                "{line}: two sources are named {:?}: names must differ (they key the catalog)",
                s.name
            );
        }
        let mut plan =
            source_plan(s, &at).with_context(|| format!("[[source]] {:?} ({line})", s.name))?;
        if let Some((dir, staging_line)) = &staging {
            let own = dir.join(staging_name(&plan.name));
            same_filesystem(&own, &plan.dest).with_context(|| {
                format!(
                    "{staging_line}: staging, for [[source]] {:?} ({line})",
                    s.name
                )
            })?;
            plan.staging = Some(own);
        }
        if !plan.keep_local && plan.deliver.is_empty() {
            bail!(
                "{line}: [[source]] {:?}: keep_local = false removes files once every site has them, and it delivers to no site: add deliver = [\"SITE\", …] or drop keep_local",
                s.name
            );
        }
        for d in &plan.deliver {
            if !sites.iter().any(|site| &site.name == d) {
                let known: Vec<&str> = sites.iter().map(|s| s.name.as_str()).collect();
                bail!(
                    "{line}: [[source]] {:?}: deliver names {d:?}, and no [[site]] has that name{}",
                    s.name,
                    if known.is_empty() {
                        " (add a [[site]] with name, url and token_file)".to_owned()
                    } else {
                        format!(" (the sites are {})", known.join(", "))
                    }
                );
            }
        }
        plan.deliver = with_downstream(&plan.deliver, &sites);
        sources.push(plan);
    }
    if file.max_files == 0 || file.max_files_per_host == 0 {
        bail!("max_files and max_files_per_host must be at least 1");
    }
    Ok(DaemonConfig {
        catalog,
        status,
        status_token,
        worker: file.worker.clone().unwrap_or_else(default_worker),
        max_files: file.max_files,
        max_files_per_host: file.max_files_per_host,
        lease: duration(&file.lease, "lease", Duration::from_secs(300))?,
        grace: duration(&file.grace, "grace", Duration::from_secs(20))?,
        down_retry: duration(&file.down_retry, "down_retry", Duration::from_secs(30))?,
        down_retry_max: duration(
            &file.down_retry_max,
            "down_retry_max",
            haul_daemon::DEFAULT_DOWN_RETRY_MAX,
        )?,
        file_retry: duration(
            &file.file_retry,
            "file_retry",
            haul_daemon::DEFAULT_FILE_RETRY,
        )?,
        hook_timeout: duration(&file.hook_timeout, "hook_timeout", Duration::from_secs(60))?,
        staging: staging.map(|(dir, _)| dir),
        partial_ttl: match &file.partial_ttl {
            None => Some(DEFAULT_PARTIAL_TTL),
            Some(v) => crate::config::partial_ttl(v.get_ref())
                .with_context(|| format!("{}: partial_ttl", at(v.span())))?,
        },
        log: match (&file.log_file, &file.log_format) {
            (None, None) => None,
            (None, Some(f)) => bail!("{}: log_format needs a log_file", at(f.span())),
            (Some(path), format) => {
                if !Path::new(path.get_ref()).is_absolute() {
                    bail!("{}: log_file must be an absolute path", at(path.span()));
                }
                let format = match format {
                    None => haul_node::LogFormat::Text,
                    Some(f) => f.get_ref().parse().map_err(|e: String| {
                        anyhow::anyhow!("{}: log_format: {e}", at(f.span()))
                    })?,
                };
                Some((PathBuf::from(path.get_ref()), format))
            }
        },
        sites,
        sources,
    })
}

/// A source's directory under the global staging: its name as one path
/// component (`/` and `%` escaped; `.` and `..` too).
fn staging_name(name: &str) -> String {
    let escaped = name.replace('%', "%25").replace('/', "%2F");
    match escaped.as_str() {
        "." => "%2E".into(),
        ".." => "%2E%2E".into(),
        _ => escaped,
    }
}

/// The device of `path`, or of its nearest ancestor that exists (a
/// directory made at the first run lands on that filesystem, unless a
/// mount point comes between: the run's own check refuses that then).
fn device_of(path: &Path) -> Result<(u64, PathBuf)> {
    use std::os::unix::fs::MetadataExt;
    let mut p = path;
    loop {
        match std::fs::metadata(p) {
            Ok(m) => return Ok((m.dev(), p.to_path_buf())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match p.parent() {
                Some(up) if !up.as_os_str().is_empty() => p = up,
                _ => return Err(e).with_context(|| format!("cannot stat {}", path.display())),
            },
            Err(e) => return Err(e).with_context(|| format!("cannot stat {}", p.display())),
        }
    }
}

/// Refuses a staging directory on another filesystem than `dest`: a
/// verified file gets its name with rename(2), which cannot cross
/// filesystems (copying it instead would make delivery neither atomic nor
/// cheap).
fn same_filesystem(staging: &Path, dest: &Path) -> Result<()> {
    let (s_dev, s_at) = device_of(staging)?;
    let (d_dev, d_at) = device_of(dest)?;
    if s_dev != d_dev {
        bail!(
            "{} (filesystem of {}) is not on the filesystem of dest {} (that of {}): a verified file is moved from staging into dest with rename(2), which cannot cross filesystems; put staging on the destinations' filesystem, or leave it out (each dest then stages in DEST/.haul/partial)",
            staging.display(),
            s_at.display(),
            dest.display(),
            d_at.display()
        );
    }
    Ok(())
}

/// The host name (the default worker name).
fn default_worker() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "haul".into())
}

fn source_plan(
    s: &SourceConfig,
    at: &dyn Fn(std::ops::Range<usize>) -> String,
) -> Result<SourcePlan> {
    if s.name.is_empty() || s.name.chars().any(char::is_control) {
        bail!("name must be a non-empty plain name");
    }
    let url = s.url.get_ref();
    let node_at = match crate::location::parse_node_at(url) {
        Some(parsed) => Some(parsed.with_context(|| format!("{}: url", at(s.url.span())))?),
        None => None,
    };
    if node_at.is_none() {
        if !haul_remote::RemoteUrl::is_remote_url(url) {
            bail!(
                "{}: url: {:?} is not an ftp://, ftps://, sftp://, http(s):// or s3:// URL, nor a haul node (haul://HOST:PORT/DIR, [user@]host:DIR)",
                at(s.url.span()),
                crate::shown_source(url)
            );
        }
        haul_remote::RemoteUrl::parse(url).with_context(|| format!("{}: url", at(s.url.span())))?;
    }
    check_keys_fit(s, node_at.as_ref())?;
    let schedule = Schedule::parse(s.schedule.get_ref())
        .with_context(|| format!("{}: schedule", at(s.schedule.span())))?;
    let jitter = match &s.jitter {
        None => Duration::ZERO,
        Some(j) => parse_duration(j.get_ref()).with_context(|| {
            format!(
                "{}: jitter = {:?}: use a duration like 30s",
                at(j.span()),
                j.get_ref()
            )
        })?,
    };
    let refetch = match s.refetch.as_ref().map(|r| (r.get_ref().as_str(), r.span())) {
        None | Some(("never", _)) => Refetch::Never,
        Some(("if-changed", _)) => Refetch::IfChanged,
        Some((other, span)) => {
            bail!(
                "{}: refetch = {other:?}: use \"never\" or \"if-changed\"",
                at(span)
            )
        }
    };
    if s.password_file.is_some() && s.password_env.is_some() {
        bail!("password_file and password_env: give one");
    }
    let jobs = match &s.jobs {
        None => None,
        Some(JobsValue::Number(n)) => Some(n.to_string()),
        Some(JobsValue::Text(t)) => Some(t.clone()),
    };
    // The flags' own defaults, then the keys this source sets.
    let defaults = || anyhow::anyhow!("the flags' defaults do not parse (a bug)");
    let mut transfer: TransferArgs = flag_defaults().map_err(|_| defaults())?;
    if let Some(jobs) = jobs {
        transfer.jobs = jobs;
    }
    transfer.streams = s.streams.unwrap_or(transfer.streams);
    if let Some(split_min) = &s.split_min {
        transfer.split_min.clone_from(split_min);
    }
    transfer.timeout = s.timeout.unwrap_or(transfer.timeout);
    transfer.retries = s.retries.unwrap_or(transfer.retries);
    let mut remote: RemoteArgs = flag_defaults().map_err(|_| defaults())?;
    remote.regex.clone_from(&s.regex);
    remote.dir_struct.clone_from(&s.dir_struct);
    remote.rename.clone_from(&s.rename);
    remote.delete_source = s.delete_source;
    remote.verify_sidecar = s.verify_sidecar;
    remote.max_conn_per_host = s.max_conn.unwrap_or(remote.max_conn_per_host);
    remote.user.clone_from(&s.user);
    remote.password_file.clone_from(&s.password_file);
    remote.ssh_key.clone_from(&s.ssh_key);
    remote.ssh_known_hosts.clone_from(&s.ssh_known_hosts);
    remote.accept_new_host_key = s.accept_new_host_key;
    remote.ca_cert.clone_from(&s.ca_cert);
    remote.insecure = s.insecure;
    remote.s3_endpoint.clone_from(&s.s3_endpoint);
    remote.s3_region.clone_from(&s.s3_region);
    remote.s3_path_style = s.s3_path_style;
    let mut rules: Vec<(haul_fetch::RuleKind, String)> = s
        .exclude
        .iter()
        .map(|g| (haul_fetch::RuleKind::Exclude, g.clone()))
        .collect();
    rules.extend(
        s.include
            .iter()
            .map(|g| (haul_fetch::RuleKind::Include, g.clone())),
    );
    let filter = FilterArgs {
        include: s.include.clone(),
        exclude: s.exclude.clone(),
        filter_from: Vec::new(),
        exclude_from: Vec::new(),
        include_from: Vec::new(),
        min_size: s.min_size.clone(),
        max_size: s.max_size.clone(),
        newer_than: s.newer_than.clone(),
        older_than: None,
        files_from: None,
        from0: false,
        max_depth: s.max_depth,
        rules: rules
            .iter()
            .map(|(k, g)| FilterRule::Glob(*k, g.clone()))
            .collect(),
    };
    let keep = match &s.keep {
        None => haul_proto::Keep::default(),
        Some(k) => {
            keep::parse(k.get_ref()).map_err(|e| anyhow::anyhow!("{}: keep: {e}", at(k.span())))?
        }
    };
    let kept = s.keep.as_ref().filter(|k| !k.get_ref().is_empty());
    if let (None, true, Some(k)) = (&node_at, s.deliver.is_empty(), kept) {
        bail!(
            "{}: keep: an FTP, SFTP, HTTP or S3 source carries no owners or attributes to keep; keep \
             is for haul:// and ssh node sources and for the deliveries to sites (add deliver = \
             [\"SITE\", …] or drop keep)",
            at(k.span())
        );
    }
    let node = match node_at {
        None => None,
        Some(node_at) => Some(node_source(s, node_at, &transfer, at)?),
    }
    .map(|mut n| {
        // What the pulls keep, as `haul pull -o -g -X -A -S` does.
        n.client.keep = keep;
        n
    });
    let plan = SourcePlan {
        name: s.name.clone(),
        url: url.clone(),
        node,
        dest: s.dest.clone(),
        schedule,
        jitter,
        refetch,
        transfer,
        remote,
        rules,
        filter,
        password_env: s.password_env.clone(),
        sidecar: s.sidecar,
        on_file: s.on_file.clone(),
        on_run: s.on_run.clone(),
        staging: None,
        deliver: {
            let mut seen = std::collections::HashSet::new();
            s.deliver
                .iter()
                .filter(|d| seen.insert(d.as_str()))
                .cloned()
                .collect()
        },
        keep_local: s.keep_local,
        keep,
        on_deliver: s.on_deliver.clone(),
        deliver_batch: match s.deliver_batch {
            None => haul_daemon::distribute::BATCH,
            Some(0) => bail!("deliver_batch must be at least 1"),
            Some(n) => n,
        },
        catch_up: match &s.catch_up {
            None => haul_catalog::CatchUp::Oldest,
            Some(c) => c
                .get_ref()
                .parse()
                .map_err(|e: String| anyhow::anyhow!("{}: {e}", at(c.span())))?,
        },
    };
    // Everything `haul pull` checks, checked now rather than at the first run.
    match &plan.node {
        None => {
            crate::fetch::fetch_options(
                &plan.transfer,
                &plan.remote,
                crate::config::filter(&plan.filter)?,
            )?;
        }
        Some(_) => {
            node_filter(&plan.filter, &plan.remote)?;
        }
    }
    Ok(plan)
}

impl SourcePlan {
    /// The source as messages show it: a remote's URL without its
    /// password, a node as written.
    pub fn shown_url(&self) -> String {
        match &self.node {
            Some(_) => self.url.clone(),
            None => crate::shown_source(&self.url),
        }
    }
}

/// A node source's filter for a run (`--newer-than` is relative to it):
/// its rules, with `regex` and `dir_struct` as a remote's fetch takes them.
pub fn node_filter(filter: &FilterArgs, remote: &RemoteArgs) -> Result<haul_fetch::Filter> {
    crate::fetch::with_path_rules(crate::config::filter(filter)?, remote)
}

#[cfg(test)]
mod tests;
