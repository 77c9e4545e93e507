//! `haul pull URL DEST` for FTP, FTPS, SFTP, HTTP(S) and S3: flags →
//! [`haul_fetch::FetchOptions`] and [`haul_remote::RemoteOptions`] → the
//! driver.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};
use haul_fetch::{FetchOptions, Filter, RenameTemplate, RuleKind};
use haul_remote::{Remote, RemoteOptions, RemoteUrl, Scheme, Secret};

use crate::cli::{RemoteArgs, TransferArgs};
use crate::config::{client_options, parse_size};

/// Opens the remote named by `url` with the protocol's crate.
pub fn open_remote(url: &RemoteUrl, opts: &RemoteOptions) -> Result<Arc<dyn Remote>> {
    let remote = match url.scheme {
        Scheme::Ftp | Scheme::FtpsExplicit | Scheme::FtpsImplicit => haul_ftp::open(url, opts),
        Scheme::Sftp => haul_sftp::open(url, opts),
        Scheme::Http | Scheme::Https => haul_http::open(url, opts),
        Scheme::S3 => haul_s3::open(url, opts),
    };
    remote.with_context(|| format!("cannot use {url}"))
}

/// Remote options from the flags (and `HAUL_PASSWORD`).
pub fn remote_options(t: &TransferArgs, r: &RemoteArgs) -> Result<RemoteOptions> {
    let password = match &r.password_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read password file {}", path.display()))?;
            Some(Secret::new(text.lines().next().unwrap_or("").to_string()))
        }
        None => std::env::var("HAUL_PASSWORD")
            .ok()
            .filter(|p| !p.is_empty())
            .map(Secret::new),
    };
    Ok(RemoteOptions {
        timeout: Duration::from_secs(t.timeout.max(1)),
        user: r.user.clone(),
        password,
        ca_cert: r.ca_cert.clone(),
        insecure_tls: r.insecure,
        ssh_keys: r.ssh_key.clone(),
        known_hosts: r.ssh_known_hosts.clone(),
        accept_new_host_key: r.accept_new_host_key,
        s3_endpoint: r.s3_endpoint.clone(),
        s3_region: r.s3_region.clone(),
        s3_path_style: r.s3_path_style,
    })
}

/// Fetch options from the flags; `rules` are the `--include`/`--exclude`
/// globs in command-line order.
pub fn fetch_options(
    t: &TransferArgs,
    r: &RemoteArgs,
    rules: &[(RuleKind, String)],
) -> Result<FetchOptions> {
    let client = client_options(t)?;
    let mut filter = Filter::default();
    for (kind, glob) in rules {
        filter.add_glob(*kind, glob)?;
    }
    if let Some(re) = &r.regex {
        filter.set_regex(re)?;
    }
    if let Some(spec) = &r.dir_struct {
        filter.set_dir_struct(spec)?;
    }
    filter.min_size = r.min_size.as_deref().map(parse_size).transpose()?;
    filter.max_size = r.max_size.as_deref().map(parse_size).transpose()?;
    filter.newer_than = r.newer_than.as_deref().map(parse_when).transpose()?;
    filter.max_depth = r.max_depth;
    if r.max_conn_per_host == 0 {
        bail!("--max-conn-per-host must be at least 1");
    }
    if t.max_rate.is_some() {
        bail!("--max-rate (--bwlimit) caps haul:// and local transfers; FTP, SFTP, HTTP and S3 pulls do not take it yet");
    }
    Ok(FetchOptions {
        jobs: client.jobs,
        streams: t.streams.max(1),
        split_min: parse_size(&t.split_min)?,
        max_conn_per_host: r.max_conn_per_host,
        retries: t.retries,
        retry_base: Duration::from_millis(r.retry_base_ms.max(1)),
        quick_check: true,
        skip_existing: r.skip_existing,
        filter,
        rename: r.rename.as_deref().map(RenameTemplate::parse).transpose()?,
        verify_sidecar: r.verify_sidecar,
        delete_source: r.delete_source,
        dest_prefix: String::new(),
        gate: None,
    })
}

/// Parses `--newer-than`: `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM:SSZ` (UTC), or an
/// age `N` + `s`/`m`/`h`/`d`/`w` before now.
pub fn parse_when(s: &str) -> Result<SystemTime> {
    let s = s.trim();
    if let Some((num, unit)) = s.split_at_checked(s.len().saturating_sub(1)) {
        if let (Ok(n), Some(secs)) = (
            num.parse::<u64>(),
            match unit {
                "s" => Some(1),
                "m" => Some(60),
                "h" => Some(3600),
                "d" => Some(86_400),
                "w" => Some(604_800),
                _ => None,
            },
        ) {
            let age = Duration::from_secs(n.saturating_mul(secs));
            return SystemTime::now()
                .checked_sub(age)
                .with_context(|| format!("--newer-than {s:?} is too far back"));
        }
    }
    let bad = || {
        format!("--newer-than takes 2024-03-01, 2024-03-01T12:00:00Z or an age like 7d, not {s:?}")
    };
    let (date, time) = match s.split_once('T') {
        Some((d, t)) => (d, t.trim_end_matches('Z')),
        None => (s, "00:00:00"),
    };
    let num = |v: Option<&str>| -> Result<i64> { v.and_then(|v| v.parse().ok()).with_context(bad) };
    let mut d = date.split('-');
    let (y, m, day) = (num(d.next())?, num(d.next())?, num(d.next())?);
    let mut t = time.split(':');
    let (hh, mm, ss) = (
        num(t.next())?,
        num(t.next().or(Some("0")))?,
        num(t.next().or(Some("0")))?,
    );
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        bail!(bad());
    }
    // Days from civil (Howard Hinnant), UTC.
    let yy = if m <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy.rem_euclid(400);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    let base = SystemTime::UNIX_EPOCH;
    Ok(if secs >= 0 {
        base + Duration::from_secs(secs as u64)
    } else {
        base - Duration::from_secs(secs.unsigned_abs())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when() {
        let t = parse_when("2024-03-15").unwrap();
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            1_710_460_800
        );
        let t = parse_when("2024-03-15T01:02:03Z").unwrap();
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            1_710_464_523
        );
        let two_hours_ago = parse_when("2h").unwrap();
        let age = SystemTime::now().duration_since(two_hours_ago).unwrap();
        assert!(age >= Duration::from_secs(7200) && age < Duration::from_secs(7300));
        assert!(parse_when("yesterday").is_err());
        assert!(parse_when("2024-13-01").is_err());
    }
}
