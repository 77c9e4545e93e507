//! Walks the remote tree with one session, streaming the files the filter
//! takes to the download workers as directories are listed.

use std::collections::HashSet;
use std::sync::Arc;

use haul_remote::{join, EntryKind, RemoteEntry, RemoteError};
use haul_run::{Event, Observer};
use tokio::sync::mpsc;

use crate::rename::RenameInput;
use crate::retry::Backoff;
use crate::Ctx;
use haul_remote::gate::GateFile;

/// One file to download.
#[derive(Debug, Clone)]
pub(crate) struct FileJob {
    /// Absolute remote path.
    pub remote_path: String,
    /// Path under the destination.
    pub dest_rel: String,
    /// Metadata as listed.
    pub entry: RemoteEntry,
    /// The server ignores ranges: read the file whole.
    pub no_ranges: bool,
    /// `entry` comes from a stat made just now (not from a listing): no
    /// need to state the file again before its first attempt.
    pub stated: bool,
    /// Path relative to the source.
    pub rel: String,
    /// The listing gave no mtime but `--newer-than` or an `{mtime}` in
    /// `--rename` needs one: the file is stated first, then filtered and
    /// named ([`Ctx::job_for`] again).
    pub needs_mtime: bool,
    /// The gate adopts a copy already at the destination: the quick check
    /// runs for this file even when the fetch's is off, and an up-to-date
    /// copy is hashed there ([`FileGate::adopt_existing`](crate::FileGate::adopt_existing)).
    pub adopt: bool,
}

impl FileJob {
    /// The job as a [`FileGate`](crate::FileGate) sees it.
    pub(crate) fn gate_file(&self) -> GateFile {
        GateFile {
            rel: self.rel.clone(),
            remote_path: self.remote_path.clone(),
            dest_rel: self.dest_rel.clone(),
            entry: self.entry.clone(),
        }
    }

    /// Whether the fetch's gate (if any) lets this file be fetched.
    pub(crate) async fn admitted(&self, ctx: &Ctx) -> bool {
        match &ctx.opts.gate {
            Some(gate) => gate.0.admit(&self.gate_file()).await,
            None => true,
        }
    }
}

/// Bound on listing entries parsed ahead of the crawl's filtering.
const LIST_AHEAD: usize = 256;

impl Ctx {
    /// The job for file `rel` (if the filter takes it).
    pub(crate) fn job_for(
        &self,
        remote_path: String,
        rel: String,
        entry: RemoteEntry,
    ) -> Option<FileJob> {
        let needs_mtime = entry.mtime.is_none()
            && (self.opts.filter.newer_than.is_some()
                || self.opts.filter.older_than.is_some()
                || self.opts.rename.as_ref().is_some_and(|t| t.uses_mtime()));
        if needs_mtime {
            // Only the filter's other rules now; the rest once stated.
            self.opts.filter.take_file(&rel, entry.size, entry.mtime)?;
            return Some(FileJob {
                remote_path,
                dest_rel: join_rel(&self.opts.dest_prefix, &rel),
                entry,
                no_ranges: false,
                stated: false,
                rel,
                adopt: false,
                needs_mtime,
            });
        }
        self.job_decided(remote_path, rel, entry)
    }

    /// The job for file `rel` with what `entry` tells (an mtime it lacks is
    /// taken as unknown: `--newer-than` lets the file through, `{mtime}`
    /// names it by the transfer time).
    pub(crate) fn job_decided(
        &self,
        remote_path: String,
        rel: String,
        entry: RemoteEntry,
    ) -> Option<FileJob> {
        let caps = self.opts.filter.take_file(&rel, entry.size, entry.mtime)?;
        let dest_rel = match &self.opts.rename {
            None => join_rel(&self.opts.dest_prefix, &rel),
            Some(t) => {
                let renamed = t.render(&RenameInput {
                    path: &rel,
                    host: &self.host,
                    now: self.started,
                    mtime: entry.mtime,
                    captures: &caps,
                });
                let dest_rel = join_rel(&self.opts.dest_prefix, &renamed);
                // Two files renamed onto one name: the later one is refused
                // (never fetched, never deleted at the source), so neither
                // is lost by being written over.
                if let Some(first) = self.claim(&dest_rel, &remote_path) {
                    self.tally.event(&Event::file_error(rel.clone(), format!(
                            "--rename makes {remote_path} and {first} both {dest_rel}: not fetched (make the template tell them apart, e.g. with {{dir}} or {{path}})"
                        )));
                    return None;
                }
                dest_rel
            }
        };
        Some(FileJob {
            remote_path,
            dest_rel,
            entry,
            no_ranges: false,
            stated: false,
            rel,
            adopt: false,
            needs_mtime: false,
        })
    }
}

impl Ctx {
    /// Claims destination `dest_rel` for `remote_path`; returns the remote
    /// path that claimed it first, if another did.
    fn claim(&self, dest_rel: &str, remote_path: &str) -> Option<String> {
        let mut claimed = self.renamed.lock().unwrap_or_else(|e| e.into_inner());
        match claimed.get(dest_rel) {
            Some(first) if first != remote_path => Some(first.clone()),
            Some(_) => None,
            None => {
                claimed.insert(dest_rel.to_owned(), remote_path.to_owned());
                None
            }
        }
    }
}

/// `prefix/rel` without empty components.
pub(crate) fn join_rel(prefix: &str, rel: &str) -> String {
    if prefix.is_empty() {
        rel.to_string()
    } else if rel.is_empty() {
        prefix.to_string()
    } else {
        format!("{prefix}/{rel}")
    }
}

/// Lists `root` (a directory) depth-first, sending taken files to `jobs`.
/// A directory that cannot be listed after the retries is reported and
/// skipped; the crawl goes on.
pub(crate) async fn crawl(ctx: Arc<Ctx>, root: String, jobs: mpsc::Sender<FileJob>) {
    let mut stack: Vec<(String, String)> = vec![(root, String::new())];
    // `--files-from`: the paths it names that were listed, and whether
    // every listing was whole (else a path not found may be in the
    // directory that could not be listed).
    let mut named = Named::default();
    while let Some((dir, rel)) = stack.pop() {
        let mut backoff = Backoff::new(ctx.opts.retry);
        // Names handled in this directory: a retried listing skips them.
        let mut seen = HashSet::new();
        loop {
            let lists = list_one(&ctx, &dir, &rel, &mut seen, &mut stack, &jobs);
            match lists.await {
                Ok(()) => break,
                Err(e) => {
                    if let Some(wait) = backoff.next(&e) {
                        ctx.tally.event(&Event::Warning {
                            message: format!(
                                "listing {dir}: {e}; retrying in {:.1}s",
                                wait.as_secs_f64()
                            ),
                        });
                        tokio::time::sleep(wait).await;
                    } else {
                        ctx.tally.event(&Event::file_failed(
                            if rel.is_empty() {
                                dir.clone()
                            } else {
                                rel.clone()
                            },
                            format!("cannot list {dir}: {e}"),
                            crate::download::fail_kind(&e),
                        ));
                        named.incomplete = true;
                        break;
                    }
                }
            }
        }
        if jobs.is_closed() {
            return;
        }
        if let Some(only) = &ctx.opts.filter.only {
            named.found.extend(
                seen.iter()
                    .map(|name| join_rel(&rel, name))
                    .filter(|p| only.names(p)),
            );
        }
    }
    named.say_unlisted(&ctx);
}

/// `--files-from` over a crawl: which named paths the listings had.
#[derive(Default)]
struct Named {
    found: HashSet<String>,
    incomplete: bool,
}

impl Named {
    /// rsync's "link_stat failed": each path the list names that a whole
    /// crawl did not find fails (exit 23).
    fn say_unlisted(&self, ctx: &Ctx) {
        let Some(only) = &ctx.opts.filter.only else {
            return;
        };
        if self.incomplete {
            return;
        }
        let missing = only.not_found(&self.found, |p| ctx.opts.filter.looks_for(p));
        for path in missing {
            ctx.tally.event(&Event::file_failed(
                path,
                haul_filter::NamedPaths::NOT_FOUND,
                haul_run::FailKind::Error,
            ));
        }
    }
}

/// Lists one directory; entries already handled before a failure are not
/// sent twice (a retry skips names it has seen).
async fn list_one(
    ctx: &Arc<Ctx>,
    dir: &str,
    rel: &str,
    seen: &mut HashSet<String>,
    stack: &mut Vec<(String, String)>,
    jobs: &mpsc::Sender<FileJob>,
) -> Result<(), RemoteError> {
    let mut lease = ctx.pool.take().await?;
    tracing::debug!("listing {dir}");
    let (tx, mut rx) = mpsc::channel(LIST_AHEAD);
    let lister = async {
        let r = lease.session().list(dir, &tx).await;
        drop(tx);
        r
    };
    let consumer = async {
        while let Some(entry) = rx.recv().await {
            if seen.insert(entry.name.clone()) {
                handle_entry(ctx, dir, rel, entry, stack, jobs).await;
            }
        }
    };
    let (listed, ()) = tokio::join!(lister, consumer);
    listed?;
    tracing::debug!("listed {dir}");
    ctx.pool.give_back(lease);
    if seen.is_empty() {
        make_empty_dir(ctx, rel);
    }
    Ok(())
}

/// Recreates an empty remote directory at the destination, as rsync and
/// lftp's mirror do. Only a directory with no entries at all: one whose files
/// were all filtered out is not created (rsync's `--prune-empty-dirs`), and
/// none is with `--rename` (which maps files, not directories) or with a
/// rule that picks files (`--include`, `--regex`, sizes...: nothing in an
/// empty directory was asked for).
fn make_empty_dir(ctx: &Ctx, rel: &str) {
    let target = join_rel(&ctx.opts.dest_prefix, rel);
    if target.is_empty() || ctx.opts.rename.is_some() || ctx.opts.filter.picks_files() {
        return;
    }
    if let Err(e) = ctx.dest.ensure_dir(&target) {
        ctx.tally.event(&Event::Warning {
            message: format!("cannot create the empty directory {target}: {e}"),
        });
    }
}

async fn handle_entry(
    ctx: &Arc<Ctx>,
    dir: &str,
    rel: &str,
    entry: RemoteEntry,
    stack: &mut Vec<(String, String)>,
    jobs: &mpsc::Sender<FileJob>,
) {
    if entry.name.is_empty() || entry.name == "." || entry.name == ".." || entry.name.contains('/')
    {
        return;
    }
    let child_rel = join_rel(rel, &entry.name);
    let remote = join(dir, &entry.name);
    match entry.kind {
        EntryKind::Dir => {
            if ctx.opts.filter.enter_dir(&child_rel) {
                stack.push((format!("{remote}/"), child_rel));
            }
        }
        EntryKind::File => {
            if let Some(job) = ctx.job_for(remote, child_rel, entry) {
                if job.admitted(ctx).await {
                    let _ = jobs.send(job).await;
                }
            }
        }
        EntryKind::Other => {
            tracing::debug!("skipping {child_rel}: neither a file nor a directory");
        }
    }
}
