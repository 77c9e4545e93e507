//! Texts a node sends its peer never show where the node keeps its files:
//! a path under the served root is shown relative to it.

use std::path::Path;

/// `text` with every mention of `root` made relative: `ROOT/a/b` becomes
/// `a/b` and `ROOT` alone becomes `.`.
pub fn without_root(root: Option<&Path>, text: String) -> String {
    let Some(root) = root.and_then(Path::to_str) else {
        return text;
    };
    let root = root.trim_end_matches('/');
    if root.is_empty() || !text.contains(root) {
        return text;
    }
    text.replace(&format!("{root}/"), "").replace(root, ".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_under_the_root_are_shown_relative() {
        let root = Some(Path::new("/srv/data"));
        assert_eq!(
            without_root(root, "stat /srv/data/a/b: No such file".into()),
            "stat a/b: No such file"
        );
        assert_eq!(
            without_root(root, "cannot write /srv/data".into()),
            "cannot write ."
        );
        assert_eq!(without_root(root, "other /srv/x".into()), "other /srv/x");
        assert_eq!(
            without_root(None, "stat /srv/data/a".into()),
            "stat /srv/data/a"
        );
    }
}
