//! `-H`/`--hard-links`: a file's further names found by a walk, and made
//! again as links at a destination.
//!
//! - A walk keeping hard links ([`FirstNames`]) lists the first name of each
//!   multiply linked regular file (walk order, after the filter) as the file
//!   it is, and every later name of the same inode (device and inode as the
//!   walk's `stat` saw them) as [`EntryKind::HardLink`] naming that first
//!   name. Only files with more than one link are remembered, so the memory
//!   is in proportion to the linked files, not to the tree. The trees of
//!   one transfer's sources share one map (`LocalTree::sharing_first_names`),
//!   so names of one inode in two sources are joined, as rsync joins them.
//! - A receiver sends no data for a further name: once the transfer ended
//!   and the first name verified (or was found up to date), it makes the
//!   link with [`link_beneath`] — locally for pulls and copies, on a node by
//!   `Request::Link` for pushes.
//!
//! Architecture Invariant: a link is only ever made to a regular file
//! beneath the destination root, each path resolved one component at a
//! time beneath held directories (no symlink followed, never `..`, never
//! `.haul`), and the file linked is the inode opened, not a name looked up
//! again (`O_PATH` descriptor, `linkat` of that descriptor). A name already
//! there is replaced in one `rename`, so a reader sees the old file or the
//! link, never neither. Tests: `link_beneath_*` below and
//! `crates/haul/tests/it/hard_links.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use haul_proto::{EntryKind, SkipRule};
use haul_root::Root;

use crate::backup::{Backups, Kept};
use crate::SourceEntry;

/// Names each multiply linked file's later names as links to its first,
/// and marks each first name ([`haul_proto::Attrs::linked`]: a pull keeps
/// only those names in mind, whatever the size of the tree).
#[derive(Debug, Default)]
pub struct FirstNames {
    /// (device, inode) of each file with more than one link seen so far, and
    /// the wire path of its first name.
    first: HashMap<(u64, u64), String>,
}

impl FirstNames {
    /// `src`, or a [`EntryKind::HardLink`] to the first name of its inode
    /// when the walk saw that name before. A further name keeps the file's
    /// size, mode and mtime (what filters and dry runs compare) but carries
    /// no data, no chunk size and no attributes (its first name has them).
    pub fn name(&mut self, mut src: SourceEntry) -> SourceEntry {
        let Some(data) = &src.data else {
            return src;
        };
        if src.entry.kind != EntryKind::File || data.links() < 2 {
            return src;
        }
        let id = (data.listed().dev, data.listed().ino);
        match self.first.get(&id) {
            None => {
                self.first.insert(id, src.entry.path.clone());
                src.entry.attrs.get_or_insert_default().linked = true;
            }
            // The same path again (one source given twice): no link to
            // itself.
            Some(first) if *first == src.entry.path => {}
            Some(first) => {
                src.entry.kind = EntryKind::HardLink {
                    target: first.clone(),
                };
                src.entry.chunk_size = 0;
                src.entry.attrs = None;
                src.data = None;
            }
        }
        src
    }
}

/// What [`link_beneath`] found or did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Linked {
    /// The name now links to the file (what was there before is replaced).
    Made,
    /// The name was already a link to that very file.
    AlreadyLinked,
    /// A file at the name is kept, as the transfer's skip rule says.
    Kept,
}

/// How [`link_beneath`] treats what is already at a name.
#[derive(Debug, Clone, Copy, Default)]
pub struct LinkRules<'a> {
    /// `--ignore-existing`, `--size-only`, `-u`: a file there that the rule
    /// keeps (compared with the file linked to) is left as it is. The
    /// default rule keeps none: a file of the same size and mtime is still
    /// made a link (rsync's `-H`).
    pub skip: SkipRule,
    /// `--backup`: what a link replaces is kept.
    pub backups: Option<&'a Backups>,
}

/// Makes `path` a hard link to the regular file at `target`, both paths
/// relative to `root` (see the module's invariant). A directory at `path`
/// is left alone and refused; anything else there is replaced (and kept as
/// `rules` say).
pub fn link_beneath(
    root: &Root,
    path: &str,
    target: &str,
    rules: &LinkRules,
) -> Result<Linked, String> {
    let comps = haul_proto::validate_entry_path(path).map_err(|e| e.to_string())?;
    let target_comps = haul_proto::validate_entry_path(target).map_err(|e| e.to_string())?;
    if path == target {
        return Err(format!("{path} cannot be a link to itself"));
    }
    let (Some((name, parents)), Some((target_name, target_parents))) =
        (comps.split_last(), target_comps.split_last())
    else {
        return Err("the destination itself is never a link".into());
    };
    let target_dir = root
        .open_dir(target_parents)
        .map_err(|e| format!("its file {target}: {e}"))?;
    let (file, meta) = target_dir
        .open_inode(target_name)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("its file {target} is not at the destination"),
            std::io::ErrorKind::InvalidInput => format!("its file {target} is not a regular file"),
            _ => format!("its file {target}: {e}"),
        })?;
    let dir = root.open_dir(parents).map_err(|e| e.to_string())?;
    match dir.stat(name).map_err(|e| e.to_string())? {
        Some(there) if (there.dev, there.ino) == (meta.dev, meta.ino) => {
            return Ok(Linked::AlreadyLinked)
        }
        Some(there) if there.is_dir() => {
            return Err(format!(
                "a directory is in the way of the link to {target}: remove it and run again"
            ))
        }
        Some(there)
            if rules.skip != SkipRule::default() && kept_there(&there, &meta, rules.skip) =>
        {
            return Ok(Linked::Kept)
        }
        _ => {}
    }
    let kept = match rules.backups {
        Some(b) => b.keep_replaced(&dir, name, path)?,
        None => Kept::Nothing,
    };
    // What was moved to its backup goes back if the link cannot be made.
    let restore = || {
        if let (Kept::Moved, Some(b)) = (kept, rules.backups) {
            b.restore(&dir, name, path);
        }
    };
    // A fresh name beside it, then one rename over what is there.
    let temp = temp_name();
    if let Err(e) = dir.link_file(&file, &temp) {
        restore();
        return Err(match e.kind() {
            std::io::ErrorKind::CrossesDevices => {
                format!("{target} is on another file system than {path}: a hard link cannot cross")
            }
            _ => format!("cannot link it to {target}: {e}"),
        });
    }
    if let Err(e) = dir.rename(&temp, &dir, name) {
        let _ = dir.unlink(&temp);
        restore();
        return Err(format!("cannot put the link to {target} in place: {e}"));
    }
    Ok(Linked::Made)
}

/// Whether `rule` keeps the file `there` rather than making it a link to
/// the file `linked` (whose size and mtime are the source's).
fn kept_there(there: &haul_root::Meta, linked: &haul_root::Meta, rule: SkipRule) -> bool {
    let offered = haul_proto::Entry {
        path: String::new(),
        kind: EntryKind::File,
        size: linked.size,
        mode: 0,
        mtime_sec: linked.mtime,
        mtime_nsec: linked.mtime_nsec,
        chunk_size: 0,
        attrs: None,
    };
    there.is_file()
        && crate::quick_check::kept(crate::quick_check::Held::stat(there), &offered, rule)
}

/// A name for a link being made, unique in this process and unlikely to be
/// anyone else's.
fn temp_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(".haul-link.{}.{n}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Source as _;
    use std::os::unix::fs::MetadataExt;

    fn ino(p: &std::path::Path) -> u64 {
        std::fs::symlink_metadata(p).unwrap().ino()
    }

    #[test]
    fn link_beneath_makes_replaces_and_recognises_links() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("a"), b"data").unwrap();
        std::fs::write(d.path().join("sub/b"), b"old").unwrap();
        let root = Root::open(d.path()).unwrap();
        assert_eq!(
            link_beneath(&root, "sub/b", "a", &LinkRules::default()),
            Ok(Linked::Made)
        );
        assert_eq!(ino(&d.path().join("sub/b")), ino(&d.path().join("a")));
        assert_eq!(
            link_beneath(&root, "sub/b", "a", &LinkRules::default()),
            Ok(Linked::AlreadyLinked)
        );
        assert_eq!(
            link_beneath(&root, "c", "a", &LinkRules::default()),
            Ok(Linked::Made)
        );
        let left: Vec<_> = std::fs::read_dir(d.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("b")]);
    }

    #[test]
    fn link_beneath_refuses_what_is_not_a_file_beneath_the_root() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s").unwrap();
        std::fs::create_dir(d.path().join("dir")).unwrap();
        std::fs::write(d.path().join("a"), b"data").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), d.path().join("sym")).unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("out")).unwrap();
        let root = Root::open(d.path()).unwrap();
        for (path, target) in [
            ("x", "../secret"),
            ("x", "/etc/passwd"),
            ("x", "sym"),
            ("x", "out/secret"),
            ("x", "dir"),
            ("x", ".haul/partial"),
            ("out/x", "a"),
            ("../x", "a"),
            ("dir", "a"),
            ("a", "a"),
            ("x", "missing"),
        ] {
            assert!(
                link_beneath(&root, path, target, &LinkRules::default()).is_err(),
                "{path} -> {target} was linked"
            );
        }
        assert!(!d.path().join("x").exists());
        assert!(!outside.path().join("x").exists());
        assert_eq!(std::fs::read(outside.path().join("secret")).unwrap(), b"s");
        assert!(d.path().join("dir").is_dir());
    }

    #[test]
    fn a_walk_names_later_names_of_one_inode_as_links_to_the_first() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("t");
        std::fs::create_dir_all(t.join("z")).unwrap();
        std::fs::write(t.join("b"), b"one").unwrap();
        std::fs::hard_link(t.join("b"), t.join("a")).unwrap();
        std::fs::hard_link(t.join("b"), t.join("z/c")).unwrap();
        std::fs::write(t.join("solo"), b"two").unwrap();
        let keep = haul_proto::Keep {
            hard_links: true,
            ..Default::default()
        };
        let tree = crate::LocalTree::new(t.to_str().unwrap())
            .unwrap()
            .keeping(keep);
        let kinds: Vec<(String, EntryKind)> = Box::new(tree)
            .entries()
            .map(|e| e.unwrap().entry)
            .map(|e| (e.path, e.kind))
            .collect();
        let link = |t: &str| EntryKind::HardLink { target: t.into() };
        assert_eq!(
            kinds,
            vec![
                ("t".into(), EntryKind::Dir),
                ("t/a".into(), EntryKind::File),
                ("t/b".into(), link("t/a")),
                ("t/solo".into(), EntryKind::File),
                ("t/z".into(), EntryKind::Dir),
                ("t/z/c".into(), link("t/a")),
            ]
        );
    }
}
