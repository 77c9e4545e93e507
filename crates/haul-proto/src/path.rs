//! Rules for every path a peer names. A receiver applies them before it
//! touches the filesystem, so nothing can be created outside its root.

/// Longest path component in bytes (Linux `NAME_MAX`).
pub const MAX_NAME_LEN: usize = 255;
/// Longest relative path in bytes.
pub const MAX_PATH_LEN: usize = 4096;

/// Why a path is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Starts with `/`.
    #[error("absolute path {0:?} refused: paths must be relative to the destination")]
    Absolute(String),
    /// Has a `..` component.
    #[error("path {0:?} refused: `..` would leave the destination")]
    ParentDir(String),
    /// Has `.` or an empty component (`a//b`).
    #[error("path {0:?} refused: empty or `.` component")]
    EmptyComponent(String),
    /// Contains a NUL byte.
    #[error("path refused: it contains a NUL byte")]
    Nul,
    /// Contains a backslash (a Windows separator that could mean `..\`).
    #[error("path {0:?} refused: backslash in a name")]
    Backslash(String),
    /// A component is longer than [`MAX_NAME_LEN`].
    #[error("path refused: a name is longer than {MAX_NAME_LEN} bytes")]
    NameTooLong,
    /// The whole path is longer than [`MAX_PATH_LEN`].
    #[error("path refused: longer than {MAX_PATH_LEN} bytes")]
    PathTooLong,
    /// Empty: an entry naming the destination root itself.
    #[error("an empty path names the destination root itself, which is never an entry (its mode and times are the receiver's)")]
    Root,
    /// Names the receiver's private state directory.
    #[error("path {0:?} refused: `.haul` is reserved for haul's own state")]
    Reserved(String),
    /// A symlink target that is absolute or climbs out of the destination.
    #[error("symlink {link:?} -> {target:?} refused: it points outside the destination")]
    UnsafeLink {
        /// The link's path.
        link: String,
        /// Its target.
        target: String,
    },
}

/// The name of the receiver's private directory at the top of its root.
pub const STATE_DIR: &str = ".haul";

/// Checks a `/`-separated relative path and returns its components.
///
/// An empty path means the root itself and yields no components.
pub fn validate_rel_path(path: &str) -> Result<Vec<&str>, PathError> {
    let mut parts = Vec::new();
    walk_rel_path(path, |c| parts.push(c))?;
    Ok(parts)
}

/// The rules of [`validate_rel_path`], handing each component to `each`.
fn walk_rel_path<'a>(path: &'a str, mut each: impl FnMut(&'a str)) -> Result<(), PathError> {
    if path.contains('\0') {
        return Err(PathError::Nul);
    }
    if path.len() > MAX_PATH_LEN {
        return Err(PathError::PathTooLong);
    }
    if path.starts_with('/') {
        return Err(PathError::Absolute(path.to_owned()));
    }
    if path.is_empty() {
        return Ok(());
    }
    for comp in path.split('/') {
        match comp {
            "" | "." => return Err(PathError::EmptyComponent(path.to_owned())),
            ".." => return Err(PathError::ParentDir(path.to_owned())),
            c if c.len() > MAX_NAME_LEN => return Err(PathError::NameTooLong),
            c if c.contains('\\') => return Err(PathError::Backslash(path.to_owned())),
            c => each(c),
        }
    }
    if path.split('/').next().is_some_and(is_state_dir) {
        return Err(PathError::Reserved(path.to_owned()));
    }
    Ok(())
}

/// True for a name that is the receiver's state directory on some file
/// system: `.haul` in any letter case (vfat, exfat, CIFS and casefolded
/// ext4 fold case).
pub fn is_state_dir(name: &str) -> bool {
    name.eq_ignore_ascii_case(STATE_DIR)
}

/// [`validate_entry_path`] without collecting the components (a check only).
pub fn check_entry_path(path: &str) -> Result<(), PathError> {
    if path.is_empty() {
        return Err(PathError::Root);
    }
    walk_rel_path(path, |_| {})
}

/// Checks the path of an entry (a file, directory or symlink to create):
/// [`validate_rel_path`]'s rules, and never empty — the destination root
/// itself is not an entry, so no peer sets its mode or times.
pub fn validate_entry_path(path: &str) -> Result<Vec<&str>, PathError> {
    if path.is_empty() {
        return Err(PathError::Root);
    }
    validate_rel_path(path)
}

/// Checks that a symlink at `link` (a valid relative path) with `target` stays
/// inside the destination: the target is relative and never climbs above the root.
pub fn validate_symlink_target(link: &str, target: &str) -> Result<(), PathError> {
    let unsafe_link = || PathError::UnsafeLink {
        link: link.to_owned(),
        target: target.to_owned(),
    };
    if symlink_target_refused_anywhere(target) {
        return Err(unsafe_link());
    }
    // Leading `..`s climb real directories the receiver made: no higher
    // than the link's own depth.
    let leading_up = target
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .take_while(|c| *c == "..")
        .count();
    let depth = link.split('/').count() - 1;
    if leading_up > depth {
        return Err(unsafe_link());
    }
    // Nor into the state directory: where the link lands, lexically.
    let mut at: Vec<&str> = link.split('/').take(depth).collect();
    for c in target.split('/').filter(|c| !c.is_empty() && *c != ".") {
        if c == ".." {
            at.pop();
        } else {
            at.push(c);
        }
    }
    if at.first().is_some_and(|c| is_state_dir(c)) {
        return Err(unsafe_link());
    }
    Ok(())
}

/// True for a symlink target refused wherever the link sits: empty, with a
/// NUL, longer than [`MAX_PATH_LEN`], absolute, or with `..` after a name
/// (which would climb out of whatever that name really is on disk, possibly
/// another symlink, which no text check can see).
pub fn symlink_target_refused_anywhere(target: &str) -> bool {
    if target.is_empty() || target.contains('\0') || target.len() > MAX_PATH_LEN {
        return true;
    }
    if target.starts_with('/') {
        return true;
    }
    let mut seen_name = false;
    for comp in target.split('/') {
        match comp {
            "" | "." => {}
            ".." if seen_name => return true,
            ".." => {}
            _ => seen_name = true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_paths() {
        assert_eq!(
            validate_rel_path("a/b c/ü.txt").unwrap(),
            ["a", "b c", "ü.txt"]
        );
        assert!(validate_rel_path("").unwrap().is_empty());
        assert!(validate_rel_path("..hidden").is_ok());
    }

    #[test]
    fn the_check_agrees_with_the_validation() {
        for p in [
            "a/b", "", "../x", "/etc", "a//b", "a/./b", ".haul/x", ".HAUL", "a\\b", "a\0b",
            "ok/.haul",
        ] {
            assert_eq!(
                check_entry_path(p).is_ok(),
                validate_entry_path(p).is_ok(),
                "{p:?}"
            );
        }
    }

    #[test]
    fn an_entry_never_names_the_root() {
        assert_eq!(validate_entry_path(""), Err(PathError::Root));
        assert_eq!(validate_entry_path("a/b").unwrap(), ["a", "b"]);
        assert!(validate_entry_path("../x").is_err());
    }

    #[test]
    fn refuses_escapes() {
        assert!(matches!(
            validate_rel_path("../x"),
            Err(PathError::ParentDir(_))
        ));
        assert!(matches!(
            validate_rel_path("a/../../x"),
            Err(PathError::ParentDir(_))
        ));
        assert!(matches!(
            validate_rel_path("/etc/passwd"),
            Err(PathError::Absolute(_))
        ));
        assert!(matches!(
            validate_rel_path("a//b"),
            Err(PathError::EmptyComponent(_))
        ));
        assert!(matches!(
            validate_rel_path("a/./b"),
            Err(PathError::EmptyComponent(_))
        ));
        assert!(matches!(
            validate_rel_path("a/"),
            Err(PathError::EmptyComponent(_))
        ));
        assert_eq!(validate_rel_path("a\0b"), Err(PathError::Nul));
        assert!(matches!(
            validate_rel_path("..\\x"),
            Err(PathError::Backslash(_))
        ));
        assert_eq!(
            validate_rel_path(&"n".repeat(256)),
            Err(PathError::NameTooLong)
        );
        let long = vec!["d"; 2100].join("/");
        assert_eq!(validate_rel_path(&long), Err(PathError::PathTooLong));
        assert!(matches!(
            validate_rel_path(".haul/x"),
            Err(PathError::Reserved(_))
        ));
        // Case-folding file systems: `.HAUL` is the same directory there.
        assert!(matches!(
            validate_rel_path(".HAUL/partial/x"),
            Err(PathError::Reserved(_))
        ));
        assert!(validate_rel_path("a/.haul").is_ok());
    }

    #[test]
    fn symlink_targets() {
        assert!(validate_symlink_target("a/link", "target").is_ok());
        assert!(validate_symlink_target("a/link", "../b/target").is_ok());
        assert!(validate_symlink_target("a/link", "../../x").is_err());
        assert!(validate_symlink_target("link", "../x").is_err());
        assert!(validate_symlink_target("link", "/etc/passwd").is_err());
        // `..` after a name could climb out of a symlinked name: refused.
        assert!(validate_symlink_target("a/b/link", "c/../../x").is_err());
        assert!(validate_symlink_target("a/link", "s/../x").is_err());
        assert!(validate_symlink_target("a/b/link", "../../x/y").is_ok());
        assert!(validate_symlink_target("a/link", "").is_err());
        // Never into the receiver's state directory, in any case.
        assert!(validate_symlink_target("link", ".haul/partial").is_err());
        assert!(validate_symlink_target("a/link", "../.Haul").is_err());
        assert!(validate_symlink_target("a/link", ".haul").is_ok());
    }
}
