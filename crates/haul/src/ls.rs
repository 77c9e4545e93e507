//! `haul ls URL`: names, sizes and mtimes under a `haul://` URL, a local
//! path or a remote (FTP, SFTP, HTTP, S3) URL, with `-R` and the filters;
//! `--json` prints one `entry` event per line.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Result;

use crate::cli::{CheckArgs, LsArgs};
use crate::location::Location;
use crate::output::{json_line, Display, Mode};
use crate::{config, exit, fetch, usage, UsageError};

/// One line of the listing.
struct Line {
    path: String,
    kind: &'static str,
    size: Option<u64>,
    mtime: Option<SystemTime>,
    target: Option<String>,
}

/// Runs `haul ls`.
pub async fn run(mut args: LsArgs, mode: Mode) -> Result<u8> {
    let named = usage(crate::named_nodes::NamedNodes::load(&args.transfer))?;
    args.url = named.rewrite(&args.url);
    let opts = usage(config::filtered_client_options(
        &args.transfer,
        &args.filter,
    ))?;
    let opts = usage(named.options_for(&args.url, opts))?;
    let display = Arc::new(Display::new(mode));
    let (lines, errors): (Vec<Line>, u64) = match Location::parse(&args.url)? {
        Location::Node(at) => {
            let remote = at.node_path(&opts);
            let l = haul_node::ls_node(&remote, &opts, args.recursive, display.clone()).await?;
            (l.entries.into_iter().map(from_entry).collect(), l.errors)
        }
        Location::Remote(url) => {
            let ropts = usage(fetch::remote_options(&args.transfer, &args.remote))?;
            let filter = usage(config::filter(&args.filter))?;
            let remote = usage(fetch::open_remote(&url, &ropts))?;
            let listing = haul_fetch::listing::list_remote(
                remote,
                &url.path,
                args.recursive,
                Arc::new(filter),
            )
            .await
            .map_err(|e| anyhow::anyhow!("cannot list {url}: {e}"))?;
            for (path, error) in &listing.errors {
                eprintln!("error: {path}: {error}");
            }
            let lines: Vec<Line> = listing
                .entries
                .into_iter()
                .map(|l| Line {
                    path: l.path,
                    kind: match l.entry.kind {
                        haul_remote::EntryKind::Dir => "dir",
                        haul_remote::EntryKind::File => "file",
                        haul_remote::EntryKind::Other => "other",
                    },
                    size: l.entry.size,
                    mtime: l.entry.mtime,
                    target: None,
                })
                .collect();
            (lines, listing.errors.len() as u64)
        }
        Location::Local(path) => {
            usage(config::check_local_source(&path))?;
            let l = haul_node::ls_local(&path, &opts, args.recursive, display.clone())?;
            (l.entries.into_iter().map(from_entry).collect(), l.errors)
        }
    };
    display.finish();
    print(mode, &lines);
    Ok(if errors == 0 { exit::OK } else { exit::PARTIAL })
}

/// Runs `haul check SRC DST`: local trees and `haul://` paths by BLAKE3
/// (a node hashes its own files), an FTP, SFTP, HTTP or S3 SRC by the
/// checksums its server offers.
pub async fn check(mut args: CheckArgs, mode: Mode) -> Result<u8> {
    let named = usage(crate::named_nodes::NamedNodes::load(&args.transfer))?;
    args.src = named.rewrite(&args.src);
    args.dst = named.rewrite(&args.dst);
    let what = |side: &str| {
        UsageError(format!(
            "haul check compares local trees and haul:// paths (either side), or an FTP, SFTP, HTTP or S3 URL (SRC) with a local DST; not {side:?}"
        ))
    };
    let (src, dst) = (Location::parse(&args.src)?, Location::parse(&args.dst)?);
    if matches!((&src, &dst), (Location::Remote(_), Location::Local(_))) {
        return check_remote(args, mode).await;
    }
    let opts = usage(config::filtered_client_options(
        &args.transfer,
        &args.filter,
    ))?;
    let mut sides = Vec::new();
    for (text, side) in [(&args.src, src), (&args.dst, dst)] {
        match side {
            Location::Remote(_) => return Err(what(text).into()),
            Location::Node(at) => {
                let own = usage(named.options_for(text, opts.clone()))?;
                sides.push(haul_node::CheckSide::Node(at.node_path(&own)));
            }
            Location::Local(path) => {
                usage(config::check_local_source(&path))?;
                sides.push(haul_node::CheckSide::Local(path));
            }
        }
    }
    let display = Arc::new(Display::new(mode));
    let r = haul_node::check(&sides[0], &sides[1], &opts, display.as_ref()).await;
    display.finish();
    let r = r?;
    print_check(mode, &r)?;
    Ok(if r.matches() { exit::OK } else { exit::FAILED })
}

/// `haul check URL DIR`: by the checksums the server offers.
async fn check_remote(args: CheckArgs, mode: Mode) -> Result<u8> {
    let url = usage(haul_remote::RemoteUrl::parse(&args.src).map_err(anyhow::Error::from))?;
    usage(config::check_local_source(&args.dst))?;
    let ropts = usage(fetch::remote_options(&args.transfer, &args.remote))?;
    let filter = usage(config::filter(&args.filter))?;
    let remote = usage(fetch::open_remote(&url, &ropts))?;
    let r =
        haul_fetch::check::check_remote(remote, &url.path, std::path::Path::new(&args.dst), filter)
            .await
            .map_err(|e| anyhow::anyhow!("cannot check {url}: {e}"))?;
    print_check(mode, &r)?;
    Ok(if r.matches() { exit::OK } else { exit::FAILED })
}

/// `haul check`'s report, however it compared: each finding on a line of
/// its own, then one summary (`check_summary` with `--json`).
fn print_check(mode: Mode, r: &haul_run::check::CheckReport) -> Result<()> {
    use haul_run::check::CheckMethod;
    let items = [
        ("differs", &r.differ),
        ("only_in_src", &r.only_in_src),
        ("only_in_dst", &r.only_in_dst),
        ("unverifiable", &r.unverifiable),
    ];
    print_items(mode, &items, &r.unreadable);
    let checksums: Vec<&str> = r.checksums.iter().copied().collect();
    match mode {
        Mode::Json => {
            json_line(&serde_json::json!({
                "event": "check_summary", "match": r.matches(), "method": r.method,
                "checksums": checksums, "same": r.same, "same_bytes": r.same_bytes,
                "differ": r.differ.len(), "only_in_src": r.only_in_src.len(),
                "only_in_dst": r.only_in_dst.len(), "unverifiable": r.unverifiable.len(),
                "unreadable": r.unreadable.len(),
            }));
        }
        Mode::Quiet => {}
        Mode::Human => {
            let plural = if r.same == 1 { "" } else { "s" };
            let how = match r.method {
                CheckMethod::Blake3 => format!(
                    "identical by BLAKE3 ({})",
                    crate::output::human_bytes(r.same_bytes)
                ),
                CheckMethod::RemoteChecksums => format!(
                    "identical by the server's checksums ({}), not downloaded",
                    if checksums.is_empty() {
                        "none".to_owned()
                    } else {
                        checksums.join(", ")
                    }
                ),
            };
            let unverifiable = match r.method {
                CheckMethod::Blake3 => String::new(),
                CheckMethod::RemoteChecksums => format!(
                    ", {} without a checksum (comparing them would mean downloading)",
                    r.unverifiable.len()
                ),
            };
            println!(
                "{}: {} file{plural} {how}; {} differ, {} only in SRC, {} only in DST{unverifiable}, {} unreadable",
                if r.matches() { "match" } else { "DIFFER" },
                r.same,
                r.differ.len(),
                r.only_in_src.len(),
                r.only_in_dst.len(),
                r.unreadable.len()
            );
        }
    }
    Ok(())
}

/// `haul check`'s findings, one per line: `check_item` events (`--json`)
/// or `STATUS: PATH` lines for people; nothing with `--quiet`.
fn print_items(mode: Mode, items: &[(&str, &Vec<String>)], unreadable: &[(String, String)]) {
    for (status, paths) in items {
        for path in paths.iter() {
            match mode {
                Mode::Json => json_line(
                    &serde_json::json!({"event": "check_item", "path": path, "status": status}),
                ),
                Mode::Human => {
                    let word = match *status {
                        "only_in_src" => "only in SRC",
                        "only_in_dst" => "only in DST",
                        other => other,
                    };
                    println!("{word}: {path}");
                }
                Mode::Quiet => {}
            }
        }
    }
    for (path, error) in unreadable {
        match mode {
            Mode::Json => json_line(
                &serde_json::json!({"event": "check_item", "path": path, "status": "unreadable", "error": error}),
            ),
            Mode::Human => println!("unreadable: {path}: {error}"),
            Mode::Quiet => {}
        }
    }
}

fn from_entry(e: haul_proto::Entry) -> Line {
    let mtime = (e.mtime_sec >= 0).then(|| {
        SystemTime::UNIX_EPOCH + Duration::new(e.mtime_sec as u64, e.mtime_nsec.min(999_999_999))
    });
    let (kind, target) = match e.kind {
        haul_proto::EntryKind::File => ("file", None),
        haul_proto::EntryKind::Dir => ("dir", None),
        haul_proto::EntryKind::Symlink { target } => ("symlink", Some(target)),
        haul_proto::EntryKind::HardLink { target } => ("hardlink", Some(target)),
    };
    Line {
        path: e.path,
        kind,
        size: (kind == "file").then_some(e.size),
        mtime,
        target,
    }
}

fn print(mode: Mode, lines: &[Line]) {
    for l in lines {
        let secs = l
            .mtime
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_secs());
        match mode {
            Mode::Json => json_line(&serde_json::json!({
                "event": "entry", "path": l.path, "kind": l.kind, "size": l.size,
                "mtime": secs, "target": l.target,
            })),
            _ => {
                let size = l.size.map(|s| s.to_string()).unwrap_or_else(|| "-".into());
                let when = l
                    .mtime
                    .and_then(|t| haul_time::strftime_utc(t, "%Y-%m-%d %H:%M:%S").ok())
                    .unwrap_or_else(|| "-".into());
                let suffix = match (l.kind, &l.target) {
                    ("dir", _) => "/".to_owned(),
                    (_, Some(t)) => format!(" -> {t}"),
                    _ => String::new(),
                };
                println!("{size:>14}  {when:<19}  {}{suffix}", l.path);
            }
        }
    }
}
