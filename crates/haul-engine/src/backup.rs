//! rsync's `--backup`, `--backup-dir` and `--suffix`: what a transfer
//! replaces (a file or symlink renamed over, a name made a hard link) or
//! `--delete` removes is kept under another name — beside it with the
//! suffix (`~` by default), or under the backup directory at the same path
//! relative to the transfer's destination — the receiver's side, for
//! pulls, local copies and a node's pushes alike.
//!
//! A replaced file is kept by a second name for it (`linkat` into place,
//! then `rename` over an older backup), made before the new file is renamed
//! over the old name: the final name never goes missing, and a backup is
//! one version that existed. Where the file system cannot link, the old
//! file is renamed away instead (the name is briefly missing, as with
//! rsync). A deletion is a rename. Directories are never backed up (a
//! directory `--delete` removes is empty by then: what it held was moved).
//!
//! Architecture Invariant: backups stay beneath the destination root. The
//! backup directory is a relative path checked as every peer path is
//! ([`haul_proto::Backup::check`]: no `..`, not absolute, never `.haul`),
//! made one component at a time beneath held directories, and every rename
//! and link names one component relative to a held directory. Tests: the
//! unit tests below and `crates/haul/tests/it/backup.rs`.

use std::sync::atomic::{AtomicU64, Ordering};

use haul_proto::{Backup, Entry};
use haul_root::{Dir, Root};

/// How [`Backups::keep_replaced`] kept a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Nothing was there to keep (no such name, or a directory).
    Nothing,
    /// A second name for it: the file is still under its own name too.
    Linked,
    /// Moved to its backup (no links here): if what was to replace it
    /// cannot, [`Backups::restore`] puts it back.
    Moved,
}

/// A destination's backup rule, and where its transfer's paths start.
#[derive(Debug, Clone)]
pub struct Backups {
    spec: Backup,
    /// The transfer's destination under the root (`""`: the root), which
    /// the backup directory and the kept paths are relative to.
    base: String,
    /// The destination root, held: backup directories are made beneath it.
    root: Root,
    /// No backup of a file replaced by the same content (`-c -b` in a
    /// fan-out: a node that holds a file whose content matches receives it
    /// again when another node lacks it; rsync would have left it alone).
    spare_same_content: bool,
}

impl Backups {
    /// The rule `spec` for a transfer into `base` (a path under `root`).
    pub fn new(spec: Backup, root: &Root, base: &str) -> Result<Self, String> {
        spec.check()?;
        let base = base.trim_matches('/');
        haul_proto::validate_rel_path(base).map_err(|e| e.to_string())?;
        Ok(Self {
            spec,
            base: base.to_owned(),
            root: root.clone(),
            spare_same_content: false,
        })
    }

    /// The same rule, keeping no backup of a file whose content is what
    /// replaces it (`-c`: such a file was not replaced in rsync's eyes).
    pub fn sparing_same_content(mut self) -> Self {
        self.spare_same_content = true;
        self
    }

    /// Whether a file replaced by the same content is kept no backup of.
    pub fn spares_same_content(&self) -> bool {
        self.spare_same_content
    }

    /// `rel` (a path under the root) relative to the transfer's
    /// destination, when it is beneath it.
    fn relative<'a>(&self, rel: &'a str) -> Option<&'a str> {
        if self.base.is_empty() {
            return Some(rel);
        }
        rel.strip_prefix(self.base.as_str())?.strip_prefix('/')
    }

    /// The entries `--delete` may consider: with `backup`, backups left
    /// out ([`Backup::protects`]; paths relative to the destination).
    pub fn unprotected(backup: Option<&Backup>, entries: Vec<Entry>) -> Vec<Entry> {
        match backup {
            None => entries,
            Some(b) => entries
                .into_iter()
                .filter(|e| !b.protects(&e.path))
                .collect(),
        }
    }

    /// The directory (`None`: its own) and name the entry at `rel` (named
    /// `name`) is kept under; that directory made beneath the root if missing.
    fn place(&self, name: &str, rel: &str) -> Result<(Option<Dir>, String), String> {
        let kept = self.spec.name_for(name);
        let relative = self.relative(rel).unwrap_or(rel);
        let parent = relative.rsplit_once('/').map_or("", |(p, _)| p);
        // The whole path the backup takes, checked as a peer's path is: a
        // suffix can never make a name haul refuses (`.haul`, say).
        let full = match (self.spec.dir.is_empty(), rel.rsplit_once('/')) {
            (true, Some((p, _))) => format!("{p}/{kept}"),
            (true, None) => kept.clone(),
            (false, _) => [self.base.as_str(), self.spec.dir.as_str(), parent, &kept]
                .into_iter()
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .join("/"),
        };
        haul_proto::validate_entry_path(&full)
            .map_err(|e| format!("its backup {full:?} cannot be made: {e}"))?;
        if self.spec.dir.is_empty() {
            return Ok((None, kept));
        }
        let comps: Vec<&str> = [self.base.as_str(), self.spec.dir.as_str(), parent]
            .into_iter()
            .filter(|p| !p.is_empty())
            .flat_map(|p| p.split('/'))
            .collect();
        let root = &self.root;
        let target = root
            .make_dirs_from(root.dir(), &[], &comps, 0o755, &mut |_, _, _| {})
            .map_err(|e| format!("backup directory: {e}"))?;
        Ok((Some(target), kept))
    }

    /// Keeps the file or symlink at `name` in `dir` (the entry at `rel`
    /// under the root) before something is renamed over it.
    pub fn keep_replaced(&self, dir: &Dir, name: &str, rel: &str) -> Result<Kept, String> {
        match dir.stat(name).map_err(|e| e.to_string())? {
            None => return Ok(Kept::Nothing),
            Some(m) if m.is_dir() => return Ok(Kept::Nothing),
            Some(_) => {}
        }
        let (target, kept) = self.place(name, rel)?;
        let target = target.as_ref().unwrap_or(dir);
        let temp = temp_name();
        match dir.link_name(name, target, &temp) {
            Ok(()) => {
                let linked = target.stat(&temp).ok().flatten().map(|m| (m.dev, m.ino));
                let renamed = target.rename(&temp, target, &kept);
                // A rename between two names of one file does nothing (the
                // backup was already this very file): the temporary goes.
                if let Ok(Some(m)) = target.stat(&temp) {
                    if Some((m.dev, m.ino)) == linked {
                        let _ = target.unlink(&temp);
                    }
                }
                renamed.map_err(|e| format!("cannot keep a backup of it: {e}"))?;
                Ok(Kept::Linked)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Kept::Nothing),
            // No links here (or across): moved away instead.
            Err(_) => {
                dir.rename(name, target, &kept)
                    .map_err(|e| format!("cannot keep a backup of it: {e}"))?;
                Ok(Kept::Moved)
            }
        }
    }

    /// Puts back under `name` what [`Backups::keep_replaced`] moved away
    /// (`Kept::Moved`) when what was to replace it could not: the name is
    /// not left missing. Nothing is done if something is at `name` again.
    pub fn restore(&self, dir: &Dir, name: &str, rel: &str) {
        let Ok((target, kept)) = self.place(name, rel) else {
            return;
        };
        let target = target.as_ref().unwrap_or(dir);
        if matches!(dir.stat(name), Ok(None)) {
            if let Err(e) = target.rename(&kept, dir, name) {
                tracing::warn!("{rel}: its backup could not be put back: {e}");
            }
        }
    }

    /// Moves the file or symlink `--delete` removes at `name` in `dir` (the
    /// entry at `rel`) to its backup: `Ok(false)` when it is a directory,
    /// which is removed as it is.
    pub fn keep_deleted(&self, dir: &Dir, name: &str, rel: &str) -> Result<bool, String> {
        let id = match dir.stat(name).map_err(|e| e.to_string())? {
            None => return Ok(true),
            Some(m) if m.is_dir() => return Ok(false),
            Some(m) => (m.dev, m.ino),
        };
        let (target, kept) = self.place(name, rel)?;
        let target = target.as_ref().unwrap_or(dir);
        dir.rename(name, target, &kept)
            .map_err(|e| format!("cannot move it to its backup: {e}"))?;
        // The backup was already this very file (a rename between two of
        // its names does nothing): the name goes.
        if let Ok(Some(m)) = dir.stat(name) {
            if (m.dev, m.ino) == id {
                dir.unlink(name)
                    .map_err(|e| format!("cannot remove it after its backup: {e}"))?;
            }
        }
        Ok(true)
    }
}

/// A name for a backup being made, unique in this process.
fn temp_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(".haul-backup.{}.{n}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dir: &str, suffix: &str) -> Backup {
        Backup {
            dir: dir.into(),
            suffix: suffix.into(),
        }
    }

    #[test]
    fn a_replaced_file_is_kept_beside_it_or_under_the_backup_dir() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("in/sub")).unwrap();
        std::fs::write(d.path().join("in/sub/f"), b"v1").unwrap();
        let root = Root::open(d.path()).unwrap();
        let dir = root.open_dir(&["in", "sub"]).unwrap();
        let beside = Backups::new(spec("", "~"), &root, "in").unwrap();
        assert_eq!(
            beside.keep_replaced(&dir, "f", "in/sub/f"),
            Ok(Kept::Linked)
        );
        assert_eq!(std::fs::read(d.path().join("in/sub/f~")).unwrap(), b"v1");
        assert_eq!(std::fs::read(d.path().join("in/sub/f")).unwrap(), b"v1");
        let under = Backups::new(spec("bak", ""), &root, "in").unwrap();
        assert_eq!(under.keep_replaced(&dir, "f", "in/sub/f"), Ok(Kept::Linked));
        assert_eq!(std::fs::read(d.path().join("in/bak/sub/f")).unwrap(), b"v1");
        assert_eq!(
            under.keep_replaced(&dir, "nothing", "in/sub/nothing"),
            Ok(Kept::Nothing)
        );
        assert_eq!(under.keep_deleted(&dir, "f", "in/sub/f"), Ok(true));
        assert!(!d.path().join("in/sub/f").exists());
        let left: Vec<_> = std::fs::read_dir(d.path().join("in/sub"))
            .unwrap()
            .collect();
        assert_eq!(left.len(), 1, "only f~ is left, no temporary name");
    }

    #[test]
    fn backups_are_protected_from_delete_and_stay_beneath_the_root() {
        let d = tempfile::tempdir().unwrap();
        let root = Root::open(d.path()).unwrap();
        let beside = spec("", "~");
        assert!(beside.protects("a/b~") && !beside.protects("a~/b"));
        let under = spec("old/bak", "");
        assert!(under.protects("old/bak") && under.protects("old/bak/x"));
        assert!(!under.protects("old/bakery") && !under.protects("old"));
        for (dir, suffix) in [
            ("../out", ""),
            ("/abs", "~"),
            (".haul", "~"),
            ("", ""),
            ("", "a/b"),
        ] {
            assert!(
                Backups::new(spec(dir, suffix), &root, "").is_err(),
                "{dir:?} {suffix:?}"
            );
        }
        // A suffix never makes a name haul refuses (its state directory).
        std::fs::write(d.path().join(".ha"), b"x").unwrap();
        let state = Backups::new(spec("", "ul"), &root, "").unwrap();
        assert!(state.keep_deleted(root.dir(), ".ha", ".ha").is_err());
        assert!(state.keep_replaced(root.dir(), ".ha", ".ha").is_err());
        assert!(!d.path().join(".haul").exists());
        // A symlink on the way to the backup directory is not followed.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"v1").unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("bak")).unwrap();
        let b = Backups::new(spec("bak", ""), &root, "").unwrap();
        assert!(b.keep_replaced(root.dir(), "f", "f").is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
