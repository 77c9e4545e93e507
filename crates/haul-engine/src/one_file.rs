//! scp's and rsync's rule for where one file goes.
//!
//! A transfer of **one file** (not a directory, not several sources) to a
//! `DEST` that does not exist and does not end in `/` names the file `DEST`:
//! `haul pull URL/app.log ./new.log` makes `./new.log`, as `scp` and
//! `rsync` do. A `DEST` that is a regular file already is replaced the same
//! way. An existing directory, or a `DEST` ending in `/`, keeps the rule for
//! everything else: the file goes *into* it under its own name.
//!
//! Each transfer learns whether its source is one file in its own way (a
//! local stat, a node's listing, a remote server's stat); this module holds
//! the half they share, what `DEST` says: [`OneFile::local`] for a local
//! `DEST`, [`OneFile::remote`] for a path on a node.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where one file goes when `DEST` names it: the directory it lands in and
/// the name it takes there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneFile {
    /// The directory the file lands in (`.` for a bare name).
    pub dir: PathBuf,
    /// The file's name in it.
    pub name: String,
}

impl OneFile {
    /// What a local `dest` (as the user typed it) says: `Some` when it
    /// names a file to create or replace — it does not end in `/`, its last
    /// component is a plain name, and nothing but a regular file is there.
    pub fn local(dest: &Path) -> Option<Self> {
        let name = last_name(dest.as_os_str().as_bytes())?;
        match std::fs::symlink_metadata(dest) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Ok(meta) if meta.is_file() => {}
            _ => return None,
        }
        let parent = dest.parent().unwrap_or(Path::new(""));
        let dir = if parent.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            parent.to_path_buf()
        };
        Some(Self {
            dir,
            name: name.to_owned(),
        })
    }

    /// What a path on a node says (relative to its root): `Some((dir,
    /// name))` when it could name one file — it does not end in `/` and
    /// its last component is a plain name. Whether something is there is
    /// the node's to say.
    pub fn remote(path: &str) -> Option<(String, String)> {
        let name = last_name(path.as_bytes())?;
        let dir = path[..path.len() - name.len()].trim_end_matches('/');
        Some((dir.to_owned(), name.to_owned()))
    }
}

/// The last component of `path` when it is a plain name (not `.`, `..`,
/// empty because of a trailing `/`, or not UTF-8).
fn last_name(path: &[u8]) -> Option<&str> {
    let last = path.rsplit(|b| *b == b'/').next()?;
    if last.is_empty() || last == b"." || last == b".." {
        return None;
    }
    OsStr::from_bytes(last).to_str()
}

/// Whether the local source `source` (as the user typed it) is one entry
/// that is not a directory: a file, or a symlink (sent as a link).
pub fn is_one_local_file(source: &str) -> bool {
    !source.ends_with('/') && std::fs::symlink_metadata(source).is_ok_and(|m| !m.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_dest_without_a_slash_names_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("new.log");
        assert_eq!(
            OneFile::local(&dest),
            Some(OneFile {
                dir: tmp.path().to_path_buf(),
                name: "new.log".into()
            })
        );
        assert_eq!(
            OneFile::local(Path::new("new.log")),
            Some(OneFile {
                dir: PathBuf::from("."),
                name: "new.log".into()
            })
        );
    }

    #[test]
    fn a_slash_a_directory_or_a_dot_keeps_into_the_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = format!("{}/new/", tmp.path().display());
        assert_eq!(OneFile::local(Path::new(&missing)), None);
        assert_eq!(OneFile::local(tmp.path()), None);
        assert_eq!(OneFile::local(Path::new(".")), None);
        assert_eq!(OneFile::local(Path::new("a/..")), None);
        std::os::unix::fs::symlink("nowhere", tmp.path().join("link")).unwrap();
        assert_eq!(OneFile::local(&tmp.path().join("link")), None);
    }

    #[test]
    fn an_existing_regular_file_is_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("old.log");
        std::fs::write(&dest, b"x").unwrap();
        assert_eq!(
            OneFile::local(&dest).map(|o| o.name),
            Some("old.log".into())
        );
    }

    #[test]
    fn node_paths() {
        assert_eq!(
            OneFile::remote("in/new.log"),
            Some(("in".into(), "new.log".into()))
        );
        assert_eq!(
            OneFile::remote("new.log"),
            Some((String::new(), "new.log".into()))
        );
        assert_eq!(OneFile::remote("in/"), None);
        assert_eq!(OneFile::remote(""), None);
        assert_eq!(OneFile::remote("a/.."), None);
    }

    #[test]
    fn one_local_file() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        assert!(is_one_local_file(f.to_str().unwrap()));
        assert!(!is_one_local_file(tmp.path().to_str().unwrap()));
        assert!(!is_one_local_file(&format!("{}/", f.display())));
        assert!(!is_one_local_file(&format!(
            "{}/none",
            tmp.path().display()
        )));
    }
}
