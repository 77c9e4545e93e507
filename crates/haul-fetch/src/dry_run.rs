//! `haul pull URL DEST --dry-run` for FTP, SFTP, HTTP and S3: the remote
//! tree listed through the filter ([`crate::listing`]) and each file
//! compared with what DEST holds, read-only (stats beneath DEST's held
//! descriptors; no `Destination`, no staging, no state directory). The
//! comparison is the pull's own: `--skip-existing` takes any file there; a
//! file of the same size is up to date when the source gives no mtime, or
//! when the engine's quick check (`haul_engine::quick_check`, the pull's
//! own) finds the local file the version of the remote one, whose mtime is
//! stated first where the pull states it (sources that want it, and large
//! files from inexact listings).

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use haul_engine::haul_root::{Meta, Root};
use haul_engine::quick_check::{same_version, Held};
use haul_remote::{EntryKind, Remote, RemoteEntry, RemoteError};
use haul_run::summary::DryRunReport;
use haul_run::{DryRunAction, Event, Observer};

use crate::download::{engine_entry, merged, stated_before_reading};
use crate::listing::list_remote;
use crate::FetchOptions;

/// Lists `path` on `remote` and reports what a pull into `dest` would do.
pub async fn dry_run_fetch(
    remote: Arc<dyn Remote>,
    path: &str,
    dest: &Path,
    opts: &FetchOptions,
    observer: Arc<dyn Observer>,
) -> Result<DryRunReport, RemoteError> {
    let filter = Arc::new(opts.filter.clone());
    let mut listing = list_remote(remote.clone(), path, true, filter).await?;
    let mut report = DryRunReport::default();
    for (dir, error) in &listing.errors {
        report.errors += 1;
        observer.event(&Event::file_error(
            dir.clone(),
            format!("cannot list: {error}"),
        ));
    }
    // `--files-from`: each path named that a whole listing did not have
    // fails the run (exit 23), and is said here as it will be.
    if let (Some(only), true) = (&opts.filter.only, listing.errors.is_empty()) {
        for path in only.not_found(&listing.named, |p| opts.filter.looks_for(p)) {
            report.errors += 1;
            observer.event(&Event::file_error(
                path.to_owned(),
                haul_filter::NamedPaths::NOT_FOUND,
            ));
        }
    }
    // `URL/` puts the contents into DEST, `URL` (a directory) DEST/NAME.
    let trimmed = path.trim_end_matches('/');
    let name = trimmed.rsplit('/').next().unwrap_or("");
    let single_file = listing.entries.len() == 1
        && listing.entries[0].entry.kind == EntryKind::File
        && listing.entries[0].path == name;
    let prefix = if path.ends_with('/') || single_file || name.is_empty() {
        String::new()
    } else {
        format!("{name}/")
    };
    // One file, to a DEST that names it: compared with that file.
    let one = (single_file && opts.one_file_names && opts.rename.is_none())
        .then(|| haul_engine::OneFile::local(dest))
        .flatten();
    if let Some(one) = &one {
        one.name.clone_into(&mut listing.entries[0].path);
    }
    let dest = one.as_ref().map_or(dest, |one| one.dir.as_path());
    let root = match Root::open(dest) {
        Ok(root) => Some(root),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(RemoteError::Local(format!(
                "cannot read {}: {e}",
                dest.display()
            )))
        }
    };
    let mut session = None;
    // With --delete: every destination path the source has.
    let mut listed_paths = HashSet::new();
    if opts.delete && !prefix.is_empty() {
        listed_paths.insert(prefix.trim_end_matches('/').to_owned());
    }
    for listed in listing.entries {
        let dest_rel = format!("{prefix}{}", listed.path);
        if opts.delete {
            listed_paths.insert(dest_rel.clone());
        }
        let here = root.as_ref().and_then(|r| stat_beneath(r, &dest_rel));
        let (action, size) = match listed.entry.kind {
            EntryKind::Dir => {
                if here.as_ref().is_some_and(Meta::is_dir) {
                    continue;
                }
                (DryRunAction::Make, 0)
            }
            EntryKind::Other => continue,
            EntryKind::File => {
                let mut entry = listed.entry.clone();
                let action = match here.filter(Meta::is_file) {
                    None => DryRunAction::Send,
                    Some(_) if opts.skip_existing => DryRunAction::UpToDate,
                    Some(m) => {
                        // Stated where the pull states it before reading
                        // (`download::deliver`), and for `--checksum`.
                        let stated = stated_before_reading(&*remote, &entry);
                        if stated || (opts.checksum && root.is_some()) {
                            let s = match &mut session {
                                Some(s) => s,
                                None => session.insert(remote.connect().await?),
                            };
                            let at = if single_file {
                                path.to_owned()
                            } else {
                                format!("{trimmed}/{}", listed.path)
                            };
                            if let Ok(fresh) = s.stat(&at).await {
                                let checksums = if fresh.checksums.is_empty() {
                                    std::mem::take(&mut entry.checksums)
                                } else {
                                    fresh.checksums.clone()
                                };
                                if stated {
                                    entry = merged(&entry, fresh);
                                }
                                entry.checksums = checksums;
                            }
                        }
                        let by_content = match &root {
                            Some(root) if opts.checksum && entry.size == Some(m.size) => {
                                content_matches(root, &dest_rel, &entry.checksums)
                            }
                            _ => None,
                        };
                        decide(&entry, &m, by_content, opts, &dest_rel)
                    }
                };
                (action, entry.size.unwrap_or(0))
            }
        };
        report.count(action, size);
        observer.event(&Event::DryRun {
            path: dest_rel,
            size,
            action,
        });
    }
    // A one-file pull deletes nothing (as the pull itself).
    if opts.delete && !single_file {
        if report.errors > 0 {
            observer.event(&Event::Warning {
                message: "--delete: nothing would be deleted, because the listing was not complete"
                    .into(),
            });
        } else {
            would_delete(
                dest,
                prefix.trim_end_matches('/'),
                &listed_paths,
                opts,
                &*observer,
                &mut report,
            );
        }
    }
    Ok(report)
}

/// `--delete` in a dry run: what DEST holds under `top` that the source
/// (`listed`, destination paths) does not have.
fn would_delete(
    dest: &Path,
    top: &str,
    listed: &HashSet<String>,
    opts: &FetchOptions,
    observer: &dyn Observer,
    report: &mut DryRunReport,
) {
    let mut entries = Vec::new();
    match haul_engine::mirror::walk_dest(dest, top, haul_proto::Keep::default()) {
        Ok(None) => return,
        Ok(Some(walk)) => {
            for item in walk {
                match item {
                    Ok(src) => entries.push(src.entry),
                    Err(e) if e.is_skip() => {}
                    Err(e) => {
                        report.errors += 1;
                        observer.event(&Event::file_error(e.path().to_owned(), e.to_string()));
                        return;
                    }
                }
            }
        }
        Err(error) => {
            report.errors += 1;
            observer.event(&Event::file_error(dest.display().to_string(), error));
            return;
        }
    }
    let filter = Arc::new(opts.filter.clone());
    let entries = match opts.delete_excluded {
        true => entries,
        false => haul_engine::mirror::filtered(entries, Some(&filter), top),
    };
    // Backups are never deleted (as the real run's prune keeps them).
    let entries = haul_engine::backup::Backups::unprotected(opts.backup.as_ref(), entries);
    let source: HashSet<&str> = listed.iter().map(String::as_str).collect();
    let gone = haul_engine::mirror::deletions(&entries, &source);
    if let Some(w) = haul_engine::mirror::delete_limit_warning(gone.len(), opts.max_delete) {
        observer.event(&w);
    }
    for e in gone {
        let size = if e.kind == haul_proto::EntryKind::File {
            e.size
        } else {
            0
        };
        report.count(DryRunAction::Delete, size);
        observer.event(&Event::DryRun {
            path: e.path.clone(),
            size,
            action: DryRunAction::Delete,
        });
    }
}

/// The pull's decision for a remote file `entry` (as listed, or stated
/// where the pull states it) and the local file `held` at its place:
/// another size is sent; `--checksum` decides by content where the source
/// offers checksums; otherwise the engine's quick check on the entry the
/// pull would receive (no remote mtime: the equal sizes decide).
fn decide(
    entry: &RemoteEntry,
    held: &Meta,
    by_content: Option<bool>,
    opts: &FetchOptions,
    dest_rel: &str,
) -> DryRunAction {
    if entry.size != Some(held.size) {
        return DryRunAction::Send;
    }
    let up_to_date = match (by_content, entry.mtime) {
        (Some(same), _) => same,
        (None, _) if !opts.quick_check => false,
        (None, None) => true,
        (None, Some(t)) => same_version(
            Held::stat(held),
            &engine_entry(dest_rel.to_owned(), held.size, t),
        ),
    };
    if up_to_date {
        DryRunAction::UpToDate
    } else {
        DryRunAction::Send
    }
}

/// `--checksum`: whether the local file at `rel` matches every checksum
/// the source offers; `None` when it offers none (the quick check decides).
fn content_matches(root: &Root, rel: &str, sums: &[haul_remote::Checksum]) -> Option<bool> {
    if sums.is_empty() {
        return None;
    }
    let comps = haul_proto::validate_entry_path(rel).ok()?;
    let (last, parents) = comps.split_last()?;
    let file = root.open_dir(parents).ok()?.open_regular(last).ok()?.0;
    Some(crate::verify::file_matches(file, sums).unwrap_or(false))
}

/// What is at `rel` beneath `root`, without following a symlink or
/// creating anything.
fn stat_beneath(root: &Root, rel: &str) -> Option<Meta> {
    let comps = haul_proto::validate_entry_path(rel).ok()?;
    let (last, parents) = comps.split_last()?;
    let dir = root.open_dir(parents).ok()?;
    dir.stat(last).ok()?
}
