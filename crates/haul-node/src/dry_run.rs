//! `--dry-run`: what a push, pull or local copy would do (send, skip as up
//! to date, make, delete), found by reading both sides — a local walk
//! through held descriptors, a node's listing (`Request::List`, read-only
//! on the node) — and comparing them by rsync's quick check (size and
//! mtime). Nothing is written, created, deleted or locked on either side:
//! no `Destination` is opened, no staging file, no state directory.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use haul_engine::quick_check::{kept, Held};
use haul_engine::source::hash_local;
use haul_engine::{LocalTree, OneFile, Source as _, SourceEntry};
use haul_proto::{Digest, Entry, EntryKind, ErrorCode, Keep, Message, Request};
use haul_run::summary::DryRunReport;
use haul_session::{DryRunAction, Event, Observer};

use crate::client::ClientOptions;
use crate::dial::{Dialer, NodePath};
use crate::listing::{self, Listed};
use crate::NodeError;

/// One side of a comparison: its entries as the wire names them, and how
/// many could not be read.
#[derive(Debug, Default)]
pub(crate) struct Side {
    pub entries: Vec<Entry>,
    pub errors: u64,
    /// With a listing with sums: each readable file's BLAKE3 by path.
    pub sums: HashMap<String, Digest>,
    /// With a listing with sums: files the node could not read, and why.
    pub unreadable: Vec<(String, String)>,
    /// Entries the node said it skipped (special files, names that cannot
    /// travel).
    pub skipped: u64,
    /// A node's tree, pushed to: whether it keeps a directory's set-group-id
    /// bit is its operator's choice, unknown here.
    pub node: bool,
    /// A node's tree listed with owners: whether it sets owners and groups
    /// on what it receives (it said so).
    pub takes_owners: bool,
}

impl Side {
    /// Adds a walked entry; with `sums`, a file's BLAKE3 too (or why it
    /// could not be read).
    fn take(&mut self, src: SourceEntry, sums: bool) {
        if sums && src.entry.kind == EntryKind::File {
            match hash_local(&src) {
                Ok(h) => {
                    self.sums.insert(src.entry.path.clone(), *h.as_bytes());
                }
                Err(e) => self
                    .unreadable
                    .push((src.entry.path.clone(), e.to_string())),
            }
        }
        self.entries.push(src.entry);
    }

    /// The entry listed as `top` named `name` instead (one file whose DEST
    /// names it).
    fn renamed(mut self, top: &str, name: &str) -> Self {
        for e in &mut self.entries {
            if e.path == top {
                name.clone_into(&mut e.path);
            }
        }
        if let Some(sum) = self.sums.remove(top) {
            self.sums.insert(name.to_owned(), sum);
        }
        self
    }
}

/// A dry run of `haul push SOURCES REMOTE`.
pub async fn dry_run_push(
    sources: &[String],
    remote: &NodePath,
    opts: &ClientOptions,
    delete: bool,
    observer: Arc<dyn Observer>,
) -> Result<DryRunReport, NodeError> {
    let dest = remote.path.trim_matches('/').to_owned();
    haul_proto::validate_rel_path(&dest).map_err(|e| NodeError::Usage(e.to_string()))?;
    let named = crate::push::pushed_as(remote, sources, opts, observer.as_ref()).await?;
    let delete = delete && named.is_none();
    let dest = named.as_ref().map_or(dest, |(dir, _)| dir.clone());
    let named = named.map(|(_, name)| name);
    let mut report = DryRunReport::default();
    // (Each source on its own, as its destination is listed: a name of a
    // file in another source shows as a file to send.)
    for s in sources {
        let (source, top) =
            walk_local(s, named.as_deref(), opts, opts.checksum, observer.as_ref())?;
        let under = crate::mirror::under_dest(&dest, &top);
        let keep = compared(opts.keep);
        let theirs = list_node_with(
            &remote.dialer,
            &under,
            opts.checksum,
            keep,
            observer.as_ref(),
        )
        .await?;
        let mut theirs = dest_filtered(theirs, opts, &top);
        theirs.node = true;
        compare(source, theirs, delete, opts, observer.as_ref(), &mut report);
    }
    Ok(report)
}

/// A dry run of `haul pull haul://NODE/PATH DEST`.
pub async fn dry_run_pull(
    remote: &NodePath,
    dest: &Path,
    opts: &ClientOptions,
    delete: bool,
    observer: Arc<dyn Observer>,
) -> Result<DryRunReport, NodeError> {
    let top = crate::listing::list_top(&remote.path);
    let theirs = list_node_with(
        &remote.dialer,
        &remote.path,
        opts.checksum,
        compared(opts.keep),
        observer.as_ref(),
    )
    .await?;
    if theirs.entries.is_empty() && theirs.errors == 0 {
        return Err(NodeError::Refused {
            code: ErrorCode::NotFound,
            message: format!("{} is not on the node", remote.path),
        });
    }
    // One file, to a DEST that names it: compared with that file.
    let one = match theirs.entries.as_slice() {
        [e] if e.path == top && e.kind != EntryKind::Dir => OneFile::local(dest),
        _ => None,
    };
    let delete = delete && one.is_none();
    if delete {
        crate::mirror::check_dest(dest)?;
    }
    let whole = theirs.errors == 0 && theirs.skipped == 0;
    let (entries, unlisted) =
        haul_engine::mirror::filtered_and_unlisted(theirs.entries, opts.filter.as_ref(), &top);
    let mut source = Side { entries, ..theirs };
    // As the pull would: a path the list names that a whole listing lacks
    // fails (rsync's "link_stat failed").
    if whole {
        for path in unlisted {
            source.errors += 1;
            observer.event(&Event::file_error(
                path,
                haul_engine::haul_filter::NamedPaths::NOT_FOUND,
            ));
        }
    }
    let (source, dest, top) = match &one {
        Some(one) => (
            source.renamed(&top, &one.name),
            one.dir.as_path(),
            one.name.clone(),
        ),
        None => (source, dest, top),
    };
    let ours = walk_dest(
        dest,
        &top,
        opts.checksum,
        compared(opts.keep),
        observer.as_ref(),
    );
    let ours = dest_filtered(ours, opts, &top);
    let mut report = DryRunReport::default();
    compare(source, ours, delete, opts, observer.as_ref(), &mut report);
    Ok(report)
}

/// A dry run of `haul pull LOCAL... DEST` (a local copy).
pub fn dry_run_local(
    sources: &[String],
    dest: &Path,
    opts: &ClientOptions,
    delete: bool,
    observer: Arc<dyn Observer>,
) -> Result<DryRunReport, NodeError> {
    let one = crate::local_copy::copied_as(sources, dest);
    let delete = delete && one.is_none();
    if delete {
        crate::mirror::check_dest(dest)?;
    }
    let named = one.as_ref().map(|one| one.name.as_str());
    let dest = one.as_ref().map_or(dest, |one| one.dir.as_path());
    let mut report = DryRunReport::default();
    for s in sources {
        let (source, top) = walk_local(s, named, opts, opts.checksum, observer.as_ref())?;
        let ours = walk_dest(
            dest,
            &top,
            opts.checksum,
            compared(opts.keep),
            observer.as_ref(),
        );
        let ours = dest_filtered(ours, opts, &top);
        compare(source, ours, delete, opts, observer.as_ref(), &mut report);
    }
    Ok(report)
}

/// What a dry run's listings keep: what it compares beyond size, mtime,
/// mode and symlink targets — hard links, and the owners, groups,
/// extended attributes and ACLs the transfer keeps (`-i`'s `o`, `g`, `x`,
/// `a`); never holes.
fn compared(keep: Keep) -> Keep {
    Keep {
        sparse: false,
        ..keep
    }
}

/// A local source walked with the transfer's filter (its top `named` so,
/// if given), and its top's name; with `sums`, each file hashed
/// ([`Side::sums`]).
pub(crate) fn walk_local(
    source: &str,
    named: Option<&str>,
    opts: &ClientOptions,
    sums: bool,
    observer: &dyn Observer,
) -> Result<(Side, String), NodeError> {
    let mut tree = LocalTree::new(source).map_err(|e| NodeError::Usage(e.to_string()))?;
    if let Some(name) = named {
        tree = tree.named(name);
    }
    let top = tree.top_name().to_owned();
    if let Some(f) = &opts.filter {
        tree = tree.with_filter(f.clone());
    }
    let tree = tree.keeping(compared(opts.keep));
    let mut side = Side::default();
    for item in Box::new(tree).entries() {
        match item {
            Ok(src) => side.take(src, sums),
            Err(e) if e.is_skip() => observer.event(&Event::Warning {
                message: e.to_string(),
            }),
            Err(e) => {
                side.errors += 1;
                observer.event(&Event::file_error(e.path().to_owned(), e.to_string()));
            }
        }
    }
    Ok((side, top))
}

/// What a local DEST holds where the source's top would go (`top` empty:
/// DEST's own contents, without haul's state directory). A DEST that does
/// not exist holds nothing; nothing is created. With `sums`, each file is
/// hashed ([`Side::sums`]).
pub(crate) fn walk_dest(
    dest: &Path,
    top: &str,
    sums: bool,
    keep: Keep,
    observer: &dyn Observer,
) -> Side {
    let mut side = Side::default();
    let walk = match haul_engine::mirror::walk_dest(dest, top, keep) {
        Ok(Some(walk)) => walk,
        Ok(None) => return side,
        Err(error) => {
            side.errors += 1;
            observer.event(&Event::file_error(dest.display().to_string(), error));
            return side;
        }
    };
    for item in walk {
        match item {
            Ok(src) => side.take(src, sums),
            // What the destination holds that cannot travel is not the
            // source's: left alone, and not a failure.
            Err(e) if e.is_skip() => {}
            Err(e) => {
                side.errors += 1;
                observer.event(&Event::file_error(e.path().to_owned(), e.to_string()));
            }
        }
    }
    side
}

/// A node's listing of `path` (a trailing `/`: its contents); a path the
/// node does not have lists nothing.
pub(crate) async fn list_node(
    dialer: &Dialer,
    path: &str,
    observer: &dyn Observer,
) -> Result<Side, NodeError> {
    list_node_with(dialer, path, false, Keep::default(), observer).await
}

/// What the node has at `path` itself (a node's `stat`): the first entry
/// of its listing, or `None` when nothing is there. Only that entry is
/// read; the connection is closed after it.
pub(crate) async fn node_entry(
    dialer: &Dialer,
    opts: &ClientOptions,
    path: &str,
    observer: &dyn Observer,
) -> Result<Option<Entry>, NodeError> {
    let request = Request::List {
        path: path.into(),
        sums: false,
        keep: haul_proto::Keep::default(),
        since: None,
    };
    // As a transfer's first connection: a silent node is tried again.
    let (mut r, mut w) = match crate::pool::open_first(dialer, opts, request, observer).await {
        Ok(conn) => conn,
        Err(NodeError::Refused {
            code: ErrorCode::NotFound,
            ..
        }) => return Ok(None),
        Err(e) => return Err(e),
    };
    // What the node sets on what it receives is not this look's business.
    let first = loop {
        match listing::next(&mut r, false).await? {
            Some(Listed::Takes { .. }) => continue,
            other => break other,
        }
    };
    let entry = match first {
        Some(Listed::Entry { entry, .. }) => Some(entry),
        // The top itself could not be read: it is there.
        Some(Listed::Error { message, .. }) => {
            return Err(NodeError::Usage(format!("{path} on the node: {message}")))
        }
        Some(Listed::Takes { .. } | Listed::Cursor { .. }) | None => None,
    };
    let _ = w.send(&Message::Bye).await;
    Ok(entry)
}

/// [`list_node`], with `sums`: the node hashes every file it lists
/// ([`Side::sums`], [`Side::unreadable`]).
pub(crate) async fn list_node_with(
    dialer: &Dialer,
    path: &str,
    sums: bool,
    keep: Keep,
    observer: &dyn Observer,
) -> Result<Side, NodeError> {
    let request = Request::List {
        path: path.into(),
        sums,
        keep,
        since: None,
    };
    let (mut r, mut w) = match dialer.open(request).await {
        Ok(conn) => conn,
        Err(NodeError::Refused {
            code: ErrorCode::NotFound,
            ..
        }) => return Ok(Side::default()),
        Err(e) => return Err(e),
    };
    let mut side = Side::default();
    while let Some(listed) = listing::next(&mut r, sums).await? {
        match listed {
            Listed::Entry { entry, sum } => {
                haul_proto::validate_entry_path(&entry.path)
                    .map_err(|e| NodeError::Protocol(format!("listed {:?}: {e}", entry.path)))?;
                match sum {
                    Some(Ok(root)) => {
                        side.sums.insert(entry.path.clone(), root);
                    }
                    Some(Err(why)) => side.unreadable.push((entry.path.clone(), why)),
                    None => {}
                }
                side.entries.push(entry);
            }
            // First, or not at all (v20).
            Listed::Takes { owners } if side.entries.is_empty() && side.errors == 0 => {
                side.takes_owners = owners
            }
            Listed::Cursor { .. } => {}
            Listed::Takes { .. } => {
                return Err(NodeError::Protocol(
                    "the node said what it takes after its listing began".into(),
                ))
            }
            Listed::Error {
                code: ErrorCode::Skipped,
                ..
            } => side.skipped += 1,
            Listed::Error { message, .. } => {
                side.errors += 1;
                observer.event(&Event::file_error(
                    String::new(),
                    format!("node: {message}"),
                ));
            }
        }
    }
    let _ = w.send(&Message::Bye).await;
    Ok(side)
}

/// `side` with the transfer's filter applied (the destination's side too:
/// what the rules leave out is never deleted, as rsync protects excluded
/// files).
pub(crate) fn filtered(side: Side, opts: &ClientOptions, top: &str) -> Side {
    Side {
        entries: haul_engine::mirror::filtered(side.entries, opts.filter.as_ref(), top),
        ..side
    }
}

/// The destination's `side` as `--delete` sees it: filtered like the
/// source, so what the rules leave out is kept — unless
/// `--delete-excluded`, which deletes that too (rsync's).
pub(crate) fn dest_filtered(side: Side, opts: &ClientOptions, top: &str) -> Side {
    match opts.delete_excluded {
        true => side,
        false => filtered(side, opts, top),
    }
}

/// Compares the source with the destination, reporting each entry that
/// would be sent, skipped, made or (with `delete`) deleted.
/// `delete`: with `--delete`, and its `--max-delete`.
fn compare(
    source: Side,
    dest: Side,
    delete: bool,
    opts: &ClientOptions,
    observer: &dyn Observer,
    report: &mut DryRunReport,
) {
    let (checksum, skip) = (opts.checksum, opts.skip);
    let dest_is_node = dest.node;
    report.errors += source.errors + dest.errors;
    for (path, why) in source.unreadable.iter().chain(&dest.unreadable) {
        report.errors += 1;
        observer.event(&Event::file_error(
            path.clone(),
            format!("--checksum cannot read it: {why}"),
        ));
    }
    // rsync's quick check, or with `--checksum` size and BLAKE3.
    let same = |t: &Entry, e: &Entry| match checksum {
        false => kept(Held::listed(t), e, skip),
        true => {
            t.size == e.size
                && matches!((dest.sums.get(&t.path), source.sums.get(&e.path)), (Some(a), Some(b)) if a == b)
        }
    };
    let theirs: HashMap<&str, &Entry> = dest.entries.iter().map(|e| (e.path.as_str(), e)).collect();
    // What a receiver there would give each entry: here, as this process
    // applies it; a node as it said it does (`Takes`: root and
    // `--keep-owners`).
    let policy = match dest_is_node {
        false => haul_engine::attrs::AttrPolicy::here(opts.keep),
        true => haul_engine::attrs::AttrPolicy {
            owners: dest.takes_owners,
            asked: None,
            why_not: "",
        },
    };
    let modes = haul_engine::attrs::AttrWriter::new(policy);
    let mut say = |entry: &Entry, action: DryRunAction| {
        let size = if entry.kind == EntryKind::File {
            entry.size
        } else {
            0
        };
        report.count(action, size);
        observer.event(&Event::DryRun {
            path: entry.path.clone(),
            size,
            action,
        });
    };
    for e in &source.entries {
        let there = theirs.get(e.path.as_str());
        let action = match (&e.kind, there.map(|t| &t.kind)) {
            (EntryKind::File, Some(EntryKind::File)) if there.is_some_and(|t| same(t, e)) => {
                DryRunAction::UpToDate
            }
            (EntryKind::File, _) => DryRunAction::Send,
            (EntryKind::Dir, Some(EntryKind::Dir))
            | (EntryKind::Symlink { .. }, Some(EntryKind::Symlink { .. })) => {
                // -i: what the run would change about it — a directory's
                // mtime or mode, where a symlink points (it is made again).
                // Pushed to a node that takes no owners, a directory's
                // set-group-id bit is left out: it does not keep it.
                let setgid = if dest_is_node && !dest.takes_owners {
                    0o5777
                } else {
                    0o7777
                };
                let found = there.map(|t| haul_engine::itemize::Found {
                    perms: t.mode & setgid,
                    ..haul_engine::itemize::Found::listed(t)
                });
                let set = there.map(|t| modes.would_set(e, t)).unwrap_or_default();
                let here = haul_engine::itemize::Here {
                    mode: modes.dir_mode(e) & setgid,
                    ids: modes.ids_of(e),
                    xattrs: (set.acls, set.xattrs),
                };
                let Some(code) = haul_engine::itemize::made(e, found, here) else {
                    continue;
                };
                let again = code.starts_with('c');
                observer.event(&Event::Itemized {
                    path: e.named(),
                    code,
                });
                if again {
                    say(e, DryRunAction::Make);
                }
                continue;
            }
            (EntryKind::HardLink { target }, Some(EntryKind::HardLink { target: t }))
                if t == target =>
            {
                continue
            }
            _ => DryRunAction::Make,
        };
        // -i: a file up to date whose permission bits the run would set —
        // only the same version (one kept by a skip rule is left as it
        // is) — or, under -c, whose mtime and permission bits the run sets
        // on a file of the same content (a node sets them when offered the
        // content it listed, `Offer{content}`).
        let by_content = checksum;
        let up_to_date = action == DryRunAction::UpToDate && !skip.ignore_existing;
        let same_version = |t: &Entry| kept(Held::listed(t), e, haul_proto::SkipRule::default());
        let perms = up_to_date
            && there.is_some_and(|t| {
                t.mode & 0o7777 != modes.mode_of(e)
                    && (by_content || (!checksum && same_version(t)))
            });
        let time = up_to_date && by_content && there.is_some_and(|t| !same_version(t));
        // Owner, group, attributes and ACLs, as far as both sides listed
        // them (a file the run leaves as it is keeps its own).
        let set = there
            .filter(|&&t| up_to_date && (by_content || (!checksum && same_version(t))))
            .map(|t| modes.would_set(e, t))
            .unwrap_or_default();
        let fixed = haul_engine::itemize::InPlace { perms, time, ..set };
        if let Some(code) = haul_engine::itemize::in_place(e, fixed) {
            observer.event(&Event::Itemized {
                path: e.path.clone(),
                code,
            });
        }
        if action != DryRunAction::UpToDate {
            // -i: what would change, as the run's receiver would say it.
            let there = there.copied();
            let content = checksum && there.is_some_and(|t| t.size == e.size);
            let mut code = haul_engine::itemize::listed(e, there, content);
            let path = e.named();
            if code.starts_with('h') {
                code.replace_range(2.., "+++++++++");
            }
            observer.event(&Event::Itemized { path, code });
        }
        say(e, action);
    }
    if delete {
        let ours: HashSet<&str> = source.entries.iter().map(|e| e.path.as_str()).collect();
        // Backups are never deleted (`--backup`).
        let backup = opts.backup.as_ref();
        let theirs: Vec<Entry> = dest
            .entries
            .iter()
            .filter(|e| !backup.is_some_and(|b| b.protects(&e.path)))
            .cloned()
            .collect();
        let gone = haul_engine::mirror::deletions(&theirs, &ours);
        let held_back = haul_engine::mirror::delete_limit_warning(gone.len(), opts.max_delete);
        for e in gone {
            say(e, DryRunAction::Delete);
        }
        if let Some(w) = held_back {
            observer.event(&w);
        }
    }
}
