//! Raw flags → validated options for the library.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use haul_node::{ClientOptions, Concurrency};
use haul_transport::{KnownHosts, Security, Timeouts};

use crate::cli::{FilterArgs, FilterRule, TransferArgs};

/// Parses `123`, `64K`, `16M`, `2G` (binary units).
pub fn parse_size(s: &str) -> Result<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => bail!("unknown size suffix in {s:?} (use K, M, G or T)"),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .with_context(|| format!("{s:?} is not a size (e.g. 64M)"))?;
    n.checked_mul(mult)
        .with_context(|| format!("{s:?} is too large"))
}

/// Parses a rate: bytes per second (`25M`, binary units) or bits per
/// second with `kbit`, `mbit`, `gbit` (decimal, as tc writes them).
pub fn parse_rate(s: &str) -> Result<f64> {
    let lower = s.trim().to_ascii_lowercase();
    for (suffix, mult) in [("kbit", 1e3), ("mbit", 1e6), ("gbit", 1e9), ("bit", 1.0)] {
        if let Some(num) = lower.strip_suffix(suffix) {
            let n: f64 = num
                .trim()
                .parse()
                .with_context(|| format!("{s:?} is not a rate (e.g. 20mbit or 25M)"))?;
            if !(n.is_finite() && n > 0.0) {
                bail!("{s:?}: a rate must be above zero");
            }
            return Ok(n * mult / 8.0);
        }
    }
    let n =
        parse_size(&lower).with_context(|| format!("{s:?} is not a rate (e.g. 20mbit or 25M)"))?;
    if n == 0 {
        bail!("{s:?}: a rate must be above zero");
    }
    Ok(n as f64)
}

/// `--max-rate` (`--bwlimit`) in bytes per second. A bare number is
/// refused: rsync reads it as KiB/s, rclone as bytes, so it says which.
pub fn max_rate(s: &str) -> Result<u64> {
    if s.trim().chars().all(|c| c.is_ascii_digit() || c == '.') {
        bail!(
            "--max-rate {s}: give a unit: {s}K (KiB/s, what rsync's --bwlimit {s} means), {s}M (MiB/s), or bits as {s}mbit"
        );
    }
    let r = parse_rate(s)?;
    if r < 1024.0 {
        bail!("--max-rate {s} is below 1K per second");
    }
    Ok(r as u64)
}

/// `--rate-hint` in bytes per second (units as `--max-rate`).
pub fn rate_hint(s: &str) -> Result<u64> {
    if s.trim().chars().all(|c| c.is_ascii_digit() || c == '.') {
        bail!("{s}: give a unit: {s}mbit, or bytes per second as {s}M");
    }
    let r = parse_rate(s)?;
    if r < 1024.0 {
        bail!("{s} is below 1K per second");
    }
    Ok(r as u64)
}

/// Reads a token from `--token`/`HAUL_TOKEN` or the first line of `--token-file`.
pub fn token(token: &Option<String>, file: &Option<std::path::PathBuf>) -> Result<Option<String>> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read token file {}", path.display()))?;
        let line = text.lines().next().unwrap_or("").trim().to_owned();
        if line.is_empty() {
            bail!("token file {} is empty", path.display());
        }
        // ssh's StrictModes habit: a secret others can read is worth a word.
        if let Ok(meta) = std::fs::metadata(path) {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                tracing::warn!(
                    "token file {} can be read by other users (mode {mode:03o}): chmod 600 {}",
                    path.display(),
                    path.display()
                );
            }
        }
        return Ok(Some(line));
    }
    Ok(token.clone().filter(|t| !t.is_empty()))
}

/// rsync's `-b`, `--backup-dir` and `--suffix` as one rule (`None`: no
/// backups), checked as a node checks it.
fn backup(t: &TransferArgs) -> Result<Option<haul_proto::Backup>> {
    if !t.backup && t.backup_dir.is_none() {
        if t.suffix.is_some() {
            bail!("--suffix names backups: give -b/--backup (or --backup-dir) too");
        }
        return Ok(None);
    }
    let dir = t
        .backup_dir
        .as_deref()
        .unwrap_or_default()
        .trim_end_matches('/')
        .to_owned();
    if t.backup_dir.is_some() && dir.is_empty() {
        bail!("--backup-dir needs a directory beneath DEST (say --backup-dir old); for backups beside the files give -b alone");
    }
    let suffix = match (&t.suffix, dir.is_empty()) {
        (Some(s), _) => s.clone(),
        (None, true) => "~".to_owned(),
        (None, false) => String::new(),
    };
    let b = haul_proto::Backup { dir, suffix };
    if let Err(e) = b.check() {
        bail!("{e} (--backup-dir is relative to DEST and stays beneath it)");
    }
    Ok(Some(b))
}

/// Builds client options from the shared transfer flags.
pub fn client_options(t: &TransferArgs) -> Result<ClientOptions> {
    if t.max_delete.is_some() && !(t.delete || t.delete_excluded) {
        bail!(
            "--max-delete limits what --delete removes: give --delete (or --delete-excluded) too"
        );
    }
    let jobs = match t.jobs.as_str() {
        "auto" => Concurrency::Auto { max: 16 },
        n => {
            let n: u32 = n
                .parse()
                .with_context(|| format!("-j takes a number or `auto`, not {n:?}"))?;
            if n == 0 || n > 256 {
                bail!("-j must be between 1 and 256");
            }
            Concurrency::Fixed(n)
        }
    };
    if t.streams == 0 || t.streams > 64 {
        bail!("--streams must be between 1 and 64");
    }
    // More streams than connections would leave ranges waiting.
    let jobs = match jobs {
        Concurrency::Fixed(n) if n < t.streams => Concurrency::Fixed(t.streams),
        other => other,
    };
    if t.timeout == 0 {
        bail!("--timeout must be at least 1 second");
    }
    let security = if t.plaintext {
        Security::Plaintext
    } else {
        let known_hosts = match &t.known_hosts {
            Some(p) => KnownHosts::new(p.clone()),
            None => KnownHosts::default_file(),
        };
        if let Some(fp) = &t.fingerprint {
            if !fp.starts_with("SHA256:") {
                bail!("--fingerprint takes the SHA256:... value `haul serve` prints");
            }
        }
        Security::Tls {
            fingerprint: t.fingerprint.clone(),
            known_hosts,
        }
    };
    let transport = match t.transport.as_deref().unwrap_or("auto") {
        "quic" if t.plaintext => bail!(
            "--plaintext has no QUIC form (QUIC always encrypts, with TLS 1.3 inside): drop --plaintext, or use --transport tcp"
        ),
        "quic" => haul_transport::Transport::Quic,
        // Plaintext has TCP only.
        "auto" if !t.plaintext => haul_transport::Transport::Auto,
        _ => haul_transport::Transport::Tcp,
    };
    let idle = Duration::from_secs(t.timeout);
    Ok(ClientOptions {
        security,
        transport,
        token: token(&t.token, &t.token_file)?.unwrap_or_default(),
        timeouts: Timeouts {
            connect: idle.min(Duration::from_secs(t.connect_timeout.max(1))),
            handshake: idle.min(Duration::from_secs(15)),
            idle,
        },
        jobs,
        streams: t.streams,
        split_min: parse_size(&t.split_min).context("--split-min")?,
        tuning: haul_transport::Tuning {
            socket_buffer: t
                .socket_buffer
                .as_deref()
                .map(parse_size)
                .transpose()
                .context("--socket-buffer")?
                .map(|s| s as usize),
            zero_copy: !t.no_zero_copy,
            pace: t
                .max_rate
                .as_deref()
                .map(max_rate)
                .transpose()
                .context("--max-rate")?
                .map(|r| std::sync::Arc::new(haul_transport::RateLimit::new(r))),
            // Set per transfer (`path_hint`), once the node is known.
            path: None,
            // Set per connection by `--transport auto`.
            meter: None,
        },
        retry: haul_run::backoff::RetryPolicy {
            retries: t.retries,
            first_wait: Duration::from_millis(t.retry_base_ms.max(1)),
        },
        delete: t.delete || t.delete_excluded,
        max_delete: t.max_delete,
        delete_excluded: t.delete_excluded,
        backup: backup(t)?,
        max_transfer: t.max_transfer.as_deref().map(parse_size).transpose()?,
        // With --max-transfer, a connection holds at most two files ahead:
        // what is started after the limit is reached stays small.
        window: match t.max_transfer {
            Some(_) => 2,
            None => haul_node::client::DEFAULT_WINDOW,
        },
        skip: haul_proto::SkipRule {
            ignore_existing: t.ignore_existing,
            size_only: t.size_only,
            update: t.update,
        },
        force: t.force,
        compress: (t.compress && t.compress_level > 0).then_some(t.compress_level),
        checksum: t.checksum,
        chunk_memory: chunk_memory(&t.chunk_memory)?,
        ssh: ssh_options(t)?,
        ..ClientOptions::default()
    })
}

/// `-e`/`--rsh` and `--remote-haul`: how `host:path` is reached.
fn ssh_options(t: &TransferArgs) -> Result<haul_node::ssh::SshOptions> {
    let mut ssh = haul_node::ssh::SshOptions {
        remote_haul: t.remote_haul.clone(),
        tunnel: t.ssh_tunnel,
        install: t.ssh_install,
        ..Default::default()
    };
    if let Some(rsh) = &t.rsh {
        ssh = ssh.with_rsh(rsh).map_err(anyhow::Error::msg)?;
    }
    Ok(ssh)
}

/// Client options with the filter flags: what push, node pulls and local
/// copies take from their sources.
pub fn filtered_client_options(t: &TransferArgs, f: &FilterArgs) -> Result<ClientOptions> {
    let mut opts = client_options(t)?;
    opts.filter = Some(std::sync::Arc::new(filter(f)?));
    Ok(opts)
}

/// The filter the flags describe (`haul-filter`: the same rules for every
/// source). `--newer-than` is read by [`crate::fetch::parse_when`].
pub fn filter(f: &FilterArgs) -> Result<haul_fetch::Filter> {
    let mut filter = haul_fetch::Filter::default();
    for rule in &f.rules {
        match rule {
            FilterRule::Glob(kind, glob) => filter.add_glob(*kind, glob)?,
            FilterRule::File(path) | FilterRule::Patterns(_, path) => {
                let flag = match rule {
                    FilterRule::Patterns(haul_fetch::RuleKind::Include, _) => "--include-from",
                    FilterRule::Patterns(haul_fetch::RuleKind::Exclude, _) => "--exclude-from",
                    _ => "--filter-from",
                };
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read {flag} {}", path.display()))?;
                let rules = match rule {
                    FilterRule::Patterns(kind, _) => {
                        haul_fetch::filter::parse_pattern_file(&text, *kind)
                    }
                    _ => haul_fetch::filter::parse_filter_file(&text)
                        .with_context(|| format!("in {flag} {}", path.display()))?,
                };
                for (kind, glob) in rules {
                    filter
                        .add_glob(kind, &glob)
                        .with_context(|| format!("in {flag} {}", path.display()))?;
                }
            }
        }
    }
    filter.min_size = f.min_size.as_deref().map(parse_size).transpose()?;
    filter.max_size = f.max_size.as_deref().map(parse_size).transpose()?;
    filter.newer_than = f
        .newer_than
        .as_deref()
        .map(crate::fetch::parse_when)
        .transpose()?;
    filter.older_than = f
        .older_than
        .as_deref()
        .map(|s| crate::fetch::parse_when_for("--older-than", s))
        .transpose()?;
    filter.max_depth = f.max_depth;
    if let Some(list) = &f.files_from {
        let text = if list.as_os_str() == "-" {
            // Read once: a remote pull builds its filter twice.
            static STDIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
            match STDIN.get() {
                Some(text) => text.clone(),
                None => {
                    let text = std::io::read_to_string(std::io::stdin())
                        .context("cannot read --files-from -")?;
                    STDIN.get_or_init(|| text).clone()
                }
            }
        } else {
            std::fs::read_to_string(list)
                .with_context(|| format!("cannot read --files-from {}", list.display()))?
        };
        let named = haul_fetch::filter::NamedPaths::parse(&text, f.from0)?;
        if named.is_empty() {
            bail!(
                "--files-from {} names no path: nothing would be sent",
                list.display()
            );
        }
        filter.only = Some(std::sync::Arc::new(named));
    }
    Ok(filter)
}

/// The `--chunk-memory` budget in bytes: at least one chunk of the largest size.
pub fn chunk_memory(s: &str) -> Result<usize> {
    let bytes = parse_size(s)?;
    let min = haul_node::buffers::MIN_BUDGET as u64;
    if bytes < min {
        bail!(
            "--chunk-memory {s} is below the smallest budget, 64M (one chunk of the largest size)"
        );
    }
    Ok(usize::try_from(bytes).unwrap_or(usize::MAX))
}

/// `--files-from` with local `sources`: every path listed must be beneath
/// one of them (relative to its top), else nothing is sent and the mistake
/// is named — a list written relative to another directory would otherwise
/// take nothing, and with `--delete-excluded` empty DEST.
pub fn check_files_from(filter: &haul_fetch::Filter, sources: &[String]) -> Result<()> {
    let Some(named) = &filter.only else {
        return Ok(());
    };
    let tops: Vec<&Path> = sources
        .iter()
        .map(|s| Path::new(s.as_str()))
        .filter(|p| p.is_dir())
        .collect();
    if tops.is_empty() {
        bail!(
            "--files-from lists paths beneath a source directory: give a directory as the source"
        );
    }
    let missing: Vec<&str> = named
        .paths()
        .filter(|p| !tops.iter().any(|t| t.join(p).symlink_metadata().is_ok()))
        .collect();
    if let Some(first) = missing.first() {
        bail!(
            "--files-from names {} path(s) the source does not have, first {first:?} (paths are relative to the source's top: {}); nothing was sent",
            missing.len(),
            tops[0].display()
        );
    }
    Ok(())
}

/// Checks a local source exists, with a helpful error.
pub fn check_local_source(path: &str) -> Result<()> {
    if std::fs::symlink_metadata(Path::new(path)).is_err() {
        bail!("source {path:?} does not exist (check the path; remote sources start with haul://)");
    }
    Ok(())
}

/// `--partial-ttl` (and the daemon's `partial_ttl`): an age as
/// `--newer-than` takes one (`12h`, `7d`), or `off` (never prune).
pub fn partial_ttl(s: &str) -> Result<Option<Duration>> {
    if s.trim() == "off" {
        return Ok(None);
    }
    haul_time::parse_age(s)
        .map(Some)
        .ok_or_else(|| anyhow::anyhow!("{s:?}: use an age like 12h or 7d, or off"))
}

/// `--log-file`: the transfer log a client's run appends to (a line for the
/// run, then one per file sent, received or failed), if asked.
pub fn client_log(
    t: &TransferArgs,
    request: &'static str,
    sends: bool,
    source: &str,
    dest: &str,
) -> Result<Option<std::sync::Arc<dyn haul_run::Observer>>> {
    let Some(path) = &t.log_file else {
        return Ok(None);
    };
    let format = t.log_format.parse().map_err(anyhow::Error::msg)?;
    let log = haul_node::TransferLog::file_only(format, path)
        .with_context(|| format!("cannot open --log-file {}", path.display()))?;
    Ok(Some(
        std::sync::Arc::new(log).client(request, sends, source, dest),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("10").unwrap(), 10);
        assert!(parse_size("1X").is_err());
        assert!(parse_size("M").is_err());
    }
}
