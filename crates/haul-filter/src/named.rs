//! `--files-from`: a list of the only paths a transfer takes (rsync's),
//! relative to the source's top. A directory named takes everything
//! beneath it; the directories above a named path are entered (and made)
//! only to reach it.

use std::collections::HashSet;

/// A path of the list that cannot name anything beneath the source.
#[derive(Debug, thiserror::Error)]
#[error("line {line} of the --files-from list: {path:?} climbs out of the source (no `..`)")]
pub struct ClimbsOut {
    /// 1-based line (or NUL-separated item) number.
    pub line: usize,
    /// The path as written.
    pub path: String,
}

/// The paths of a `--files-from` list.
#[derive(Debug, Clone, Default)]
pub struct NamedPaths {
    /// As listed, without `./`, leading or trailing `/`.
    named: HashSet<String>,
    /// Every directory above a named path.
    above: HashSet<String>,
}

impl NamedPaths {
    /// The paths in `text`, one a line (or NUL-separated with `nul`, as
    /// rsync's `-0`); blank lines and lines starting with `#` or `;` are
    /// ignored (not with `nul`: there every item is a name).
    pub fn parse(text: &str, nul: bool) -> Result<Self, ClimbsOut> {
        let items: Vec<&str> = if nul {
            text.split('\0').collect()
        } else {
            text.lines()
                .map(|l| l.trim_end_matches('\r'))
                .map(|l| match l.trim_start().starts_with(['#', ';']) {
                    true => "",
                    false => l,
                })
                .collect()
        };
        let mut paths = Self::default();
        for (i, item) in items.into_iter().enumerate() {
            let mut path = item.trim_matches('/');
            while let Some(rest) = path.strip_prefix("./") {
                path = rest.trim_start_matches('/');
            }
            if path.is_empty() || path == "." {
                continue;
            }
            if path.split('/').any(|c| c == "..") {
                return Err(ClimbsOut {
                    line: i + 1,
                    path: item.to_owned(),
                });
            }
            let path = path
                .split('/')
                .filter(|c| !c.is_empty() && *c != ".")
                .collect::<Vec<_>>()
                .join("/");
            let mut at = path.as_str();
            while let Some((parent, _)) = at.rsplit_once('/') {
                paths.above.insert(parent.to_owned());
                at = parent;
            }
            paths.named.insert(path);
        }
        Ok(paths)
    }

    /// The paths named, as normalised.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.named.iter().map(String::as_str)
    }

    /// How many paths are named.
    pub fn len(&self) -> usize {
        self.named.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.named.is_empty()
    }

    /// What a path named that the source lacks fails with (rsync's
    /// "link_stat failed"; exit 23), in every kind of pull and its dry run.
    pub const NOT_FOUND: &'static str = "named by --files-from, but the source does not have it";

    /// The paths named that `found` lacks (those `keep` still wants
    /// reported), sorted: what a whole listing did not have.
    pub fn not_found<'a>(
        &'a self,
        found: &HashSet<String>,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<&'a str> {
        let mut missing: Vec<&str> = self
            .paths()
            .filter(|p| !found.contains(*p) && keep(p))
            .collect();
        missing.sort_unstable();
        missing
    }

    /// Whether `rel` is one of the paths named (not one beneath them).
    pub fn names(&self, rel: &str) -> bool {
        self.named.contains(rel)
    }

    /// Whether file `rel` is taken: named, or beneath a named directory.
    pub fn takes(&self, rel: &str) -> bool {
        self.named.contains(rel) || self.beneath_named(rel)
    }

    /// Whether directory `rel` is entered: on the way to a named path,
    /// named itself, or beneath a named directory.
    pub fn enters(&self, rel: &str) -> bool {
        self.above.contains(rel) || self.takes(rel)
    }

    fn beneath_named(&self, rel: &str) -> bool {
        rel.match_indices('/')
            .any(|(i, _)| self.named.contains(&rel[..i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_paths_take_themselves_what_is_beneath_and_the_way_there() {
        let p = NamedPaths::parse("a/x.nc\n./b/\n# note\n\n/c//d\n", false).unwrap();
        assert_eq!(p.len(), 3);
        assert!(p.takes("a/x.nc") && !p.takes("a/y.nc"));
        assert!(p.enters("a") && !p.takes("a"));
        assert!(p.enters("b") && p.takes("b/deep/z") && p.enters("b/deep"));
        assert!(p.takes("c/d") && p.enters("c") && !p.takes("c/e"));
        assert!(!p.enters("e"));
        let p = NamedPaths::parse("one\0two words\0", true).unwrap();
        assert!(p.takes("two words") && p.takes("one"));
        let e = NamedPaths::parse("ok\n../up\n", false).unwrap_err();
        assert_eq!(e.line, 2);
    }
}
