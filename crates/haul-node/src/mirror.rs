//! `--delete` (mirror) for pulls from a node and local copies: once every
//! file verified and the source's listing was complete, what DEST holds
//! under the source's top that the source does not have is removed.
//!
//! Safety rules: nothing is deleted when anything failed or the transfer
//! stopped (a warning says so); only beneath DEST, each removal naming one
//! component relative to a directory held open from DEST down
//! (`haul-root`: no symlink followed on the way); never haul's state
//! directory (the walk of DEST leaves `.haul` out, and entry paths naming
//! it are refused); what the filter leaves out is kept (rsync's default);
//! a DEST that is a symlink or holds `..` is refused before anything runs.

use std::collections::HashSet;
use std::path::{Component, Path};

use haul_engine::haul_root::Root;
use haul_engine::LocalTree;
use haul_proto::{EntryKind, Message, Request};
use haul_session::summary::Tally;
use haul_session::{Event, Observer};

use crate::client::{open_session, ClientOptions};
use crate::dry_run::{deletions, filtered, list_node, walk_dest};
use crate::{NodeError, NodeUrl};

/// `haul push --delete`: once the push failed nowhere, what the node holds
/// under DEST/TOP (its read-only listing, filtered like the source) that
/// the source did not send is removed by the node (`Request::Prune`), one
/// `Remove` at a time, each answered.
pub(crate) async fn prune_node(
    remote: &NodeUrl,
    dest: &str,
    source: &str,
    sent: &HashSet<String>,
    opts: &ClientOptions,
    tally: &Tally,
    stopped: Option<&NodeError>,
) {
    if !nothing_failed(tally, stopped) {
        return;
    }
    let top = LocalTree::new(source)
        .map(|t| t.top_name().to_owned())
        .unwrap_or_default();
    let under = match (dest.is_empty(), top.is_empty()) {
        (true, _) => format!("{top}/"),
        (false, true) => format!("{dest}/"),
        (false, false) => format!("{dest}/{top}"),
    };
    let side = match list_node(&remote.addr, opts, &under, tally).await {
        Ok(side) if side.errors == 0 => side,
        Ok(_) => {
            tally.event(&Event::Warning {
                message: "--delete: nothing deleted, because the node's listing was not complete"
                    .into(),
            });
            return;
        }
        Err(e) => {
            tally.event(&Event::FileError {
                path: under,
                error: format!("--delete cannot list the destination: {e}"),
            });
            return;
        }
    };
    let side = filtered(side, opts, &top);
    let gone = deletions(&side.entries, &sent.iter().map(String::as_str).collect());
    if gone.is_empty() {
        return;
    }
    let request = Request::Prune {
        dest: dest.to_owned(),
    };
    let (mut r, mut w) = match open_session(&remote.addr, opts, request).await {
        Ok(conn) => conn,
        Err(e) => {
            tally.event(&Event::FileError {
                path: under,
                error: format!("--delete: {e}"),
            });
            return;
        }
    };
    for entry in gone {
        let size = if entry.kind == EntryKind::File {
            entry.size
        } else {
            0
        };
        let answer = async {
            w.send(&Message::Remove {
                path: entry.path.clone(),
            })
            .await?;
            r.recv().await
        }
        .await;
        match answer {
            Ok(Message::Done { ok: true, .. }) => tally.event(&Event::Deleted {
                path: entry.path.clone(),
                size,
            }),
            Ok(Message::Done { message, .. }) => tally.event(&Event::FileError {
                path: entry.path.clone(),
                error: format!("--delete: {message}"),
            }),
            Ok(other) => {
                tally.event(&Event::FileError {
                    path: entry.path.clone(),
                    error: format!("--delete: the node answered {other:?}"),
                });
                return;
            }
            Err(e) => {
                tally.event(&Event::FileError {
                    path: entry.path.clone(),
                    error: format!("--delete: {e}"),
                });
                return;
            }
        }
    }
    let _ = w.send(&Message::Bye).await;
}

/// True when nothing failed and nothing stopped the transfer; else a
/// warning says why nothing will be deleted.
fn nothing_failed(tally: &Tally, stopped: Option<&NodeError>) -> bool {
    let failed = tally.failed();
    if stopped.is_none() && failed == 0 {
        return true;
    }
    let why = match stopped {
        Some(e) => format!("the transfer stopped ({e})"),
        None => format!(
            "{failed} entr{} failed",
            if failed == 1 { "y" } else { "ies" }
        ),
    };
    tally.event(&Event::Warning {
        message: format!("--delete: nothing deleted, because {why}; fix that and run again"),
    });
    false
}

/// Refuses a DEST `--delete` must not work in: a symlink (the deletions
/// would land wherever it points), or a path with `..` in it.
pub fn check_dest(dest: &Path) -> Result<(), NodeError> {
    if dest.components().any(|c| c == Component::ParentDir) {
        return Err(NodeError::Usage(format!(
            "--delete refuses DEST {}: it holds `..`; give the path without it",
            dest.display()
        )));
    }
    if std::fs::symlink_metadata(dest).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(NodeError::Usage(format!(
            "--delete refuses DEST {}: it is a symlink; give the directory it points to",
            dest.display()
        )));
    }
    Ok(())
}

/// Deletes what DEST holds under `top` (empty: DEST's contents) that is not
/// in `source`, unless anything failed (`stopped`, or failures counted by
/// `tally`): then nothing, and a warning says why.
pub(crate) fn delete_extraneous(
    dest: &Path,
    top: &str,
    source: &HashSet<String>,
    opts: &ClientOptions,
    tally: &Tally,
    stopped: Option<&NodeError>,
) {
    if !nothing_failed(tally, stopped) {
        return;
    }
    let side = walk_dest(dest, top, tally);
    if side.errors > 0 {
        tally.event(&Event::Warning {
            message: "--delete: nothing deleted, because the destination could not be read in full"
                .into(),
        });
        return;
    }
    let side = filtered(side, opts, top);
    let root = match Root::open(dest) {
        Ok(root) => root,
        Err(e) => {
            tally.event(&Event::FileError {
                path: dest.display().to_string(),
                error: format!("--delete cannot open the destination: {e}"),
            });
            return;
        }
    };
    for entry in deletions(&side.entries, &source.iter().map(String::as_str).collect()) {
        let size = if entry.kind == EntryKind::File {
            entry.size
        } else {
            0
        };
        match remove_beneath(&root, &entry.path) {
            Ok(()) => tally.event(&Event::Deleted {
                path: entry.path.clone(),
                size,
            }),
            Err(e) => tally.event(&Event::FileError {
                path: entry.path.clone(),
                error: format!("--delete could not remove it: {e}"),
            }),
        }
    }
}

/// Removes `path` (a file, link or empty directory) beneath `root`, naming
/// only its last component relative to its held parent.
pub(crate) fn remove_beneath(root: &Root, path: &str) -> Result<(), String> {
    let comps = haul_proto::validate_entry_path(path).map_err(|e| e.to_string())?;
    let Some((last, parents)) = comps.split_last() else {
        return Err("the destination itself is never deleted".into());
    };
    let dir = root.open_dir(parents).map_err(|e| e.to_string())?;
    match dir.stat(last).map_err(|e| e.to_string())? {
        None => Ok(()),
        Some(m) if m.is_dir() => dir.remove_dir(last).map_err(|e| e.to_string()),
        Some(_) => dir.unlink(last).map_err(|e| e.to_string()),
    }
}
