//! `--delete` (mirror) at a local destination: once a transfer delivered
//! everything and its source's listing was complete, what DEST holds under
//! the source's top that the source does not have is removed. Used by
//! pulls from a node, local copies and FTP/SFTP/HTTP/S3 pulls alike (a
//! node runs [`remove_beneath`] for `haul push --delete`).
//!
//! Safety rules: only beneath DEST, each removal naming one component
//! relative to a directory held open from DEST down ([`haul_root`]: no
//! symlink followed on the way); never haul's state directory (the walk of
//! DEST leaves `.haul` out, and paths naming it are refused); what the
//! filter leaves out is kept (rsync's default); a DEST that is a symlink
//! or holds `..` is refused before anything runs ([`check_dest`]);
//! nothing is removed when DEST could not be read in full.

use std::collections::HashSet;
use std::path::{Component, Path};
use std::sync::Arc;

use haul_filter::Filter;
use haul_proto::{Entry, EntryKind};
use haul_root::{ResolveError, Root};
use haul_run::{Event, Observer};

use crate::backup::Backups;
use crate::{EntryFilter, EntryIter, LocalTree, Source as _};

/// Refuses a DEST `--delete` must not work in: a symlink (the deletions
/// would land wherever it points), or a path with `..` in it.
pub fn check_dest(dest: &Path) -> Result<(), String> {
    if dest.components().any(|c| c == Component::ParentDir) {
        return Err(format!(
            "--delete refuses DEST {}: it holds `..`; give the path without it",
            dest.display()
        ));
    }
    if std::fs::symlink_metadata(dest).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(format!(
            "--delete refuses DEST {}: it is a symlink; give the directory it points to",
            dest.display()
        ));
    }
    Ok(())
}

/// What a local DEST holds where a source's top goes (`top` empty: DEST's
/// own contents, without haul's state directory), walked beneath a held
/// root: `Ok(None)` when DEST or the top does not exist (it holds nothing;
/// nothing is created), `Err` when DEST cannot be opened. Entries carry
/// what `keep` keeps: later names of a linked file as links (`-H`), owners
/// and attributes (a dry run's `-i`).
pub fn walk_dest(
    dest: &Path,
    top: &str,
    keep: haul_proto::Keep,
) -> Result<Option<EntryIter>, String> {
    let root = match Root::open(dest) {
        Ok(root) => root,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read the destination: {e}")),
    };
    match LocalTree::beneath(&root, top, top.is_empty()) {
        Ok(tree) => Ok(Some(Box::new(tree.keeping(keep)).entries())),
        Err(ResolveError::NotFound(_)) => Ok(None),
        Err(e) => Err(format!("cannot read the destination: {e}")),
    }
}

/// `entries` the filter takes (a destination's too: what the rules leave
/// out is never deleted, as rsync protects excluded files).
pub fn filtered(entries: Vec<Entry>, filter: Option<&Arc<Filter>>, top: &str) -> Vec<Entry> {
    filtered_and_unlisted(entries, filter, top).0
}

/// [`filtered`], and the paths `--files-from` names that `entries` lack
/// ([`EntryFilter::unlisted`]: meaningful for a whole listing).
pub fn filtered_and_unlisted(
    entries: Vec<Entry>,
    filter: Option<&Arc<Filter>>,
    top: &str,
) -> (Vec<Entry>, Vec<String>) {
    let Some(filter) = filter else {
        return (entries, Vec::new());
    };
    let mut chosen = EntryFilter::new(filter.clone(), top.to_owned());
    let taken = entries
        .into_iter()
        .flat_map(|e| chosen.offer(&e.clone(), e))
        .collect();
    (taken, chosen.unlisted())
}

/// The destination's entries the source does not have, deepest first (a
/// directory after what it holds).
pub fn deletions<'a>(dest: &'a [Entry], source: &HashSet<&str>) -> Vec<&'a Entry> {
    let mut gone: Vec<&Entry> = dest
        .iter()
        .filter(|e| !source.contains(e.path.as_str()))
        .collect();
    gone.sort_by(|a, b| b.path.cmp(&a.path));
    gone
}

/// `--max-delete MAX`: the failure to report when `count` deletions are
/// more than allowed (then none is made: which of them would go first is
/// no better a choice than the others; rsync deletes up to the limit).
pub fn over_delete_limit(count: usize, max: Option<u64>, under: &str) -> Option<Event> {
    let max = exceeded(count, max)?;
    Some(Event::file_failed(
        under,
        format!(
            "--delete would remove {count} entries, more than --max-delete {max}: nothing was \
             deleted (see them with --dry-run; raise --max-delete if that is meant)"
        ),
        haul_run::FailKind::DeleteLimit,
    ))
}

/// A dry run's word on `--max-delete MAX` when `count` deletions would be
/// more than allowed: the run would make none of those listed.
pub fn delete_limit_warning(count: usize, max: Option<u64>) -> Option<Event> {
    let max = exceeded(count, max)?;
    Some(Event::Warning {
        message: format!(
            "--max-delete {max}: the {count} deletions listed would all be held back; the run \
             would delete nothing and exit 25"
        ),
    })
}

/// The `--max-delete` limit that `count` deletions go beyond, if any: the
/// one test a run and its dry run share.
fn exceeded(count: usize, max: Option<u64>) -> Option<u64> {
    max.filter(|max| u64::try_from(count).unwrap_or(u64::MAX) > *max)
}

/// Removes `path` (a file, link or empty directory) beneath `root`, naming
/// only its last component relative to its held parent.
pub fn remove_beneath(root: &Root, path: &str, backups: Option<&Backups>) -> Result<(), String> {
    let comps = haul_proto::validate_entry_path(path).map_err(|e| e.to_string())?;
    let Some((last, parents)) = comps.split_last() else {
        return Err("the destination itself is never deleted".into());
    };
    let dir = root.open_dir(parents).map_err(|e| e.to_string())?;
    if let Some(b) = backups {
        if b.keep_deleted(&dir, last, path)? {
            return Ok(());
        }
    }
    match dir.stat(last).map_err(|e| e.to_string())? {
        None => Ok(()),
        Some(m) if m.is_dir() => dir.remove_dir(last).map_err(|e| e.to_string()),
        Some(_) => dir.unlink(last).map_err(|e| e.to_string()),
    }
}

/// One outcome of [`prune`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pruned {
    /// Removed (its size, for files).
    Deleted {
        /// Path under DEST.
        path: String,
        /// Bytes, for a file; 0 otherwise.
        size: u64,
    },
    /// Could not be removed.
    Failed {
        /// Path under DEST.
        path: String,
        /// Why.
        error: String,
    },
}

/// Removes what DEST holds under `top` that is not in `source` (wire
/// paths) and that `filter` takes, telling `on` each outcome. `Err` (and
/// nothing removed) when DEST could not be read in full; `Ok(Some(event))`
/// (and nothing removed) when more would go than `max_delete` allows. With
/// `backup`, what goes is moved to its backup, and backups are left alone.
pub fn prune(
    dest: &Path,
    top: &str,
    source: &HashSet<String>,
    filter: Option<&Arc<Filter>>,
    max_delete: Option<u64>,
    backup: Option<&haul_proto::Backup>,
    on: &mut dyn FnMut(Pruned),
) -> Result<Option<Event>, String> {
    let mut entries = Vec::new();
    if let Some(walk) = walk_dest(dest, top, haul_proto::Keep::default())? {
        for item in walk {
            match item {
                Ok(src) => entries.push(src.entry),
                // What cannot travel is not the source's: left alone.
                Err(e) if e.is_skip() => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }
    let root = Root::open(dest).map_err(|e| format!("cannot open the destination: {e}"))?;
    let backups = backup
        .map(|b| Backups::new(b.clone(), &root, ""))
        .transpose()?;
    let entries = Backups::unprotected(backup, filtered(entries, filter, top));
    let source: HashSet<&str> = source.iter().map(String::as_str).collect();
    let gone = deletions(&entries, &source);
    if let Some(refused) = over_delete_limit(gone.len(), max_delete, top) {
        return Ok(Some(refused));
    }
    for entry in gone {
        let size = if entry.kind == EntryKind::File {
            entry.size
        } else {
            0
        };
        on(match remove_beneath(&root, &entry.path, backups.as_ref()) {
            Ok(()) => Pruned::Deleted {
                path: entry.path.clone(),
                size,
            },
            Err(error) => Pruned::Failed {
                path: entry.path.clone(),
                error,
            },
        });
    }
    Ok(None)
}

/// The one warning of a `--delete` that deleted nothing, with why (a
/// failure, a listing that was not complete) and what to do.
pub fn nothing_deleted(why: &str) -> Event {
    Event::Warning {
        message: format!("--delete: nothing deleted, because {why}; fix that and run again"),
    }
}

/// [`prune`], its outcomes told to `observer`: each removal
/// ([`Event::Deleted`]), each path that could not be removed, and a
/// destination that could not be read in full (then nothing was removed).
/// Node pulls, local copies and FTP/SFTP/HTTP/S3 pulls report alike.
pub fn prune_reported(
    dest: &Path,
    top: &str,
    source: &HashSet<String>,
    filter: Option<&Arc<Filter>>,
    max_delete: Option<u64>,
    backup: Option<&haul_proto::Backup>,
    observer: &dyn Observer,
) {
    let mut on = |p: Pruned| match p {
        Pruned::Deleted { path, size } => observer.event(&Event::Deleted { path, size }),
        Pruned::Failed { path, error } => observer.event(&Event::file_error(
            path,
            format!("--delete could not remove it: {error}"),
        )),
    };
    match prune(dest, top, source, filter, max_delete, backup, &mut on) {
        Ok(None) => {}
        Ok(Some(refused)) => observer.event(&refused),
        Err(e) => observer.event(&nothing_deleted(&format!(
            "the destination could not be read in full ({e})"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use haul_run::event::Recording;

    #[test]
    fn prune_reports_each_removal_and_keeps_what_the_source_has() {
        let dest = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for name in ["top/keep", "top/extra", "top/old/deep"] {
            let p = dest.path().join(name);
            std::fs::create_dir_all(p.parent().unwrap_or(dest.path())).unwrap_or_default();
            std::fs::write(&p, b"x").unwrap_or_default();
        }
        let source: HashSet<String> = ["top", "top/keep"].map(String::from).into();
        let heard = Recording::default();
        prune_reported(dest.path(), "top", &source, None, None, None, &heard);
        let mut deleted: Vec<String> = heard
            .events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Deleted { path, .. } => Some(path),
                _ => None,
            })
            .collect();
        deleted.sort();
        assert_eq!(deleted, ["top/extra", "top/old", "top/old/deep"]);
        assert!(dest.path().join("top/keep").is_file());
        assert!(!dest.path().join("top/old").exists());
    }

    #[test]
    fn nothing_deleted_says_why_and_what_to_do() {
        let Event::Warning { message } = nothing_deleted("2 entries failed") else {
            panic!("a warning");
        };
        assert_eq!(
            message,
            "--delete: nothing deleted, because 2 entries failed; fix that and run again"
        );
    }
}
