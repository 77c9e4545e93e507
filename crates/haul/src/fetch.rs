//! `haul pull URL DEST` for FTP, FTPS, SFTP, HTTP(S) and S3: flags →
//! [`haul_fetch::FetchOptions`] and [`haul_remote::RemoteOptions`] → the
//! driver.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail, Context, Result};
use haul_fetch::{FetchOptions, Filter, RenameTemplate};
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
        pace: t
            .max_rate
            .as_deref()
            .map(crate::config::max_rate)
            .transpose()?
            .map(|r| haul_fetch::pace::read_pace(Arc::new(haul_transport::RateLimit::new(r)))),
    })
}

/// `filter` with `--regex` and `--dir-struct` (rules on a file's whole
/// path, for pulls from remotes and the daemon's node sources alike).
pub fn with_path_rules(mut filter: Filter, r: &RemoteArgs) -> Result<Filter> {
    if let Some(re) = &r.regex {
        filter.set_regex(re)?;
    }
    if let Some(spec) = &r.dir_struct {
        filter.set_dir_struct(spec)?;
    }
    Ok(filter)
}

/// Fetch options from the flags; `filter` is what the filter flags
/// describe ([`crate::config::filter`]), to which `--regex` and
/// `--dir-struct` are added here.
pub fn fetch_options(t: &TransferArgs, r: &RemoteArgs, filter: Filter) -> Result<FetchOptions> {
    let client = client_options(t)?;
    let filter = with_path_rules(filter, r)?;
    if r.max_conn_per_host == 0 {
        bail!("--max-conn-per-host must be at least 1");
    }
    if (t.delete || t.delete_excluded) && r.delete_source {
        bail!("--delete mirrors the source into DEST and --delete-source empties the source: together they would delete the copies too; use one");
    }
    if t.size_only || t.update {
        bail!("--size-only and -u/--update are for haul nodes and local copies; an FTP, SFTP, HTTP or S3 pull decides by size and mtime (or -c, or --ignore-existing)");
    }
    if (t.delete || t.delete_excluded) && r.rename.is_some() {
        bail!("--delete compares DEST with the source's own names: it does not take --rename");
    }
    Ok(FetchOptions {
        jobs: client.jobs,
        streams: t.streams.max(1),
        split_min: parse_size(&t.split_min)?,
        max_conn_per_host: r.max_conn_per_host,
        retry: client.retry,
        quick_check: true,
        skip_existing: r.skip_existing || t.ignore_existing,
        checksum: t.checksum,
        delete: t.delete || t.delete_excluded,
        max_delete: t.max_delete,
        delete_excluded: t.delete_excluded,
        filter,
        rename: r.rename.as_deref().map(RenameTemplate::parse).transpose()?,
        verify_sidecar: r.verify_sidecar,
        delete_source: r.delete_source,
        dest_prefix: String::new(),
        gate: None,
        staging: None,
        one_file_names: true,
        backup: client.backup,
        max_transfer: client.max_transfer,
    })
}

/// Parses `--newer-than`: `YYYY-MM-DD` (UTC), `YYYY-MM-DDTHH:MM:SS` with `Z`,
/// an offset (`+02:00`) or neither (UTC), or an age `N` + `s`/`m`/`h`/`d`/`w`
/// before now. Dates that do not exist (`2024-02-31`) are refused.
pub fn parse_when(s: &str) -> Result<SystemTime> {
    parse_when_for("--newer-than", s)
}

/// [`parse_when`] for `flag`, named in its error.
pub fn parse_when_for(flag: &str, s: &str) -> Result<SystemTime> {
    haul_time::parse_when(s, SystemTime::now()).map_err(|e| anyhow!("{flag}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node's connections and a remote pull's files back off on one
    /// schedule for the same flags (the default's and `--retries`').
    #[test]
    fn node_and_remote_pulls_retry_on_the_same_schedule() {
        use clap::Parser;
        for flags in [&[][..], &["--retries", "7", "--retry-base-ms", "250"][..]] {
            let mut argv = vec!["haul", "pull"];
            argv.extend_from_slice(flags);
            argv.extend(["ftp://h/x/", "dest"]);
            let cli = crate::cli::Cli::try_parse_from(&argv).unwrap();
            let crate::cli::Command::Pull(args) = cli.command else {
                panic!("not a pull");
            };
            let node = crate::config::client_options(&args.transfer).unwrap().retry;
            let remote = fetch_options(&args.transfer, &args.remote, Filter::default())
                .unwrap()
                .retry;
            assert_eq!(node, remote, "{flags:?}");
        }
    }

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
        assert!(parse_when("2024-02-31").is_err());
        let t = parse_when("2024-03-01T12:00:00+02:00").unwrap();
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            1_709_287_200
        );
    }
}
