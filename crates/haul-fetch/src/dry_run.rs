//! `haul pull URL DEST --dry-run` for FTP, SFTP, HTTP and S3: the remote
//! tree listed through the filter ([`crate::listing`]) and each file
//! compared with what DEST holds, read-only (stats beneath DEST's held
//! descriptors; no `Destination`, no staging, no state directory). The
//! comparison is the pull's own: `--skip-existing` takes any file there; a
//! file of the same size is up to date when the source gives no mtime, or
//! when its mtime (stated first where the pull states it: sources that
//! want it, and large files from inexact listings) equals the local
//! file's.

use std::path::Path;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use haul_engine::haul_root::{Meta, Root};
use haul_remote::{EntryKind, Remote, RemoteEntry, RemoteError};
use haul_session::summary::DryRunReport;
use haul_session::{DryRunAction, Event, Observer};

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
    let listing = list_remote(remote.clone(), path, true, filter).await?;
    let mut report = DryRunReport::default();
    for (dir, error) in &listing.errors {
        report.errors += 1;
        observer.event(&Event::FileError {
            path: dir.clone(),
            error: format!("cannot list: {error}"),
        });
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
    for listed in listing.entries {
        let dest_rel = format!("{prefix}{}", listed.path);
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
                let size = listed.entry.size.unwrap_or(0);
                let action = match here.filter(Meta::is_file) {
                    None => DryRunAction::Send,
                    Some(_) if opts.skip_existing => DryRunAction::UpToDate,
                    Some(m) if listed.entry.size != Some(m.size) => DryRunAction::Send,
                    Some(m) => {
                        let mut entry = listed.entry.clone();
                        // Stated where the pull states it before reading.
                        let stated = remote.stat_before_read()
                            || (crate::download::resumable(&entry) && !remote.listing_is_exact());
                        if entry.mtime.is_some() && stated {
                            let s = match &mut session {
                                Some(s) => s,
                                None => session.insert(remote.connect().await?),
                            };
                            let remote_path = format!("{trimmed}/{}", listed.path);
                            let at = if single_file {
                                path
                            } else {
                                remote_path.as_str()
                            };
                            entry = s.stat(at).await.unwrap_or(entry);
                        }
                        if same_time(&entry, &m) {
                            DryRunAction::UpToDate
                        } else {
                            DryRunAction::Send
                        }
                    }
                };
                (action, size)
            }
        };
        report.count(action, size);
        observer.event(&Event::DryRun {
            path: dest_rel,
            size,
            action,
        });
    }
    Ok(report)
}

/// The pull's quick check on times: no remote mtime means the size decides;
/// else the whole seconds the server gives must be the local file's.
fn same_time(entry: &RemoteEntry, local: &Meta) -> bool {
    let Some(t) = entry.mtime else {
        return true;
    };
    let Ok(d) = t.duration_since(UNIX_EPOCH) else {
        return false;
    };
    local.mtime == d.as_secs() as i64 && local.mtime_nsec == d.subsec_nanos()
}

/// What is at `rel` beneath `root`, without following a symlink or
/// creating anything.
fn stat_beneath(root: &Root, rel: &str) -> Option<Meta> {
    let comps = haul_proto::validate_entry_path(rel).ok()?;
    let (last, parents) = comps.split_last()?;
    let dir = root.open_dir(parents).ok()?;
    dir.stat(last).ok()?
}
