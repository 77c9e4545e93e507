//! The rules: globs, regexes, PushPull-style per-component rules
//! ("DirStruct"), sizes, dates and depth. Paths are relative to the
//! source's top (for `dir` and `dir/` alike: `dir/a/b` is `a/b`).
//!
//! Rules, in the order they apply:
//! 1. `--max-depth N`: files deeper than N directories below the source are
//!    not taken (`--max-depth 0`: only the source's own files).
//! 2. `--dir-struct A/B/C`: each `/`-separated part is a regular expression
//!    that must match a whole path component at that depth. Directories are
//!    entered only when their name matches the part for their depth; files
//!    are taken only at the last depth, when their name matches the last part.
//!    Example: `--dir-struct '20[0-9]{2}/(0[1-9]|1[0-2])/.*\.nc'` takes
//!    `2024/03/sst.nc` but not `2024/13/sst.nc`, `2024/03/x/sst.nc` or
//!    `2024/sst.nc`, and never lists `tmp/`. Capture groups feed `--rename`.
//! 3. `--include` / `--exclude` globs, rsync-like: the first rule whose
//!    pattern matches decides. A pattern without `/` matches the file name at
//!    any depth; one with `/` matches the whole relative path (a leading `/`
//!    anchors it at the source); `*` stays within a component, `**` crosses
//!    them. A pattern ending in `/` matches directories and prunes them
//!    (`--exclude 'tmp/'`). When no rule matches, the file is taken — unless
//!    every rule given is an `--include`, in which case it is not
//!    (`--include '*.nc'` alone means "only .nc files").
//! 4. `--regex RE`: the file's relative path must contain a match of RE
//!    (anchor it with `^...$` for a whole-path match). Captures feed `--rename`.
//! 5. `--min-size`, `--max-size` (bytes, inclusive) and `--newer-than`
//!    (strictly newer mtime); a file whose size or mtime the source does not
//!    tell passes these tests and is checked again on download.

use std::time::SystemTime;

use globset::{Glob, GlobBuilder, GlobMatcher};
use regex::Regex;

/// A filter rule that could not be built.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// A glob did not parse.
    #[error("bad glob {pattern:?}: {reason}")]
    Glob {
        /// The pattern.
        pattern: String,
        /// Why.
        reason: String,
    },
    /// A line of a `--filter-from` file that is not a rule.
    #[error("line {line} of the filter file: {text:?} is not a rule (write `+ GLOB` to include, `- GLOB` to exclude, `#` for comments)")]
    Line {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// A regex did not parse.
    #[error("bad regular expression {pattern:?}: {reason}")]
    Regex {
        /// The pattern.
        pattern: String,
        /// Why.
        reason: String,
    },
}

/// Include or exclude.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleKind {
    /// Take what matches.
    Include,
    /// Skip what matches.
    Exclude,
}

#[derive(Debug, Clone)]
struct GlobRule {
    kind: RuleKind,
    matcher: GlobMatcher,
    /// Matches the whole relative path (else the last component).
    anchored: bool,
    /// Only matches directories.
    dir_only: bool,
}

/// A source's filter. `Default` takes everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    globs: Vec<GlobRule>,
    only_includes: bool,
    regex: Option<Regex>,
    dir_struct: Vec<Regex>,
    /// Smallest size taken.
    pub min_size: Option<u64>,
    /// Largest size taken.
    pub max_size: Option<u64>,
    /// Only files modified after this.
    pub newer_than: Option<SystemTime>,
    /// Only files modified before this.
    pub older_than: Option<SystemTime>,
    /// Deepest directory level entered below the source.
    pub max_depth: Option<usize>,
    /// `--files-from`: the only paths taken (the other rules still apply
    /// to them).
    pub only: Option<std::sync::Arc<crate::NamedPaths>>,
}

/// Capture groups gathered for `--rename` (`{1}`, `{2}`..., `{cap:NAME}`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captures {
    /// Numbered groups, in order (dir-struct parts first, then `--regex`).
    pub numbered: Vec<String>,
    /// Named groups.
    pub named: Vec<(String, String)>,
}

impl Captures {
    fn add(&mut self, re: &Regex, text: &str) -> bool {
        let Some(caps) = re.captures(text) else {
            return false;
        };
        for i in 1..caps.len() {
            self.numbered.push(
                caps.get(i)
                    .map(|m| m.as_str().to_string())
                    .unwrap_or_default(),
            );
        }
        for name in re.capture_names().flatten() {
            if let Some(m) = caps.name(name) {
                self.named.push((name.to_string(), m.as_str().to_string()));
            }
        }
        true
    }
}

impl Filter {
    /// Adds an `--include` or `--exclude` glob (order matters).
    pub fn add_glob(&mut self, kind: RuleKind, pattern: &str) -> Result<(), FilterError> {
        let dir_only = pattern.ends_with('/');
        let trimmed = pattern.trim_end_matches('/');
        let anchored = trimmed.contains('/');
        let body = trimmed.trim_start_matches('/');
        let glob: Glob = GlobBuilder::new(body)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| FilterError::Glob {
                pattern: pattern.to_string(),
                reason: e.kind().to_string(),
            })?;
        self.globs.push(GlobRule {
            kind,
            matcher: glob.compile_matcher(),
            anchored,
            dir_only,
        });
        self.only_includes = self.globs.iter().all(|g| g.kind == RuleKind::Include);
        Ok(())
    }

    /// Sets `--regex`.
    pub fn set_regex(&mut self, pattern: &str) -> Result<(), FilterError> {
        self.regex = Some(compile(pattern)?);
        Ok(())
    }

    /// Sets `--dir-struct` (`/`-separated per-component regexes).
    pub fn set_dir_struct(&mut self, spec: &str) -> Result<(), FilterError> {
        self.dir_struct = spec
            .trim_matches('/')
            .split('/')
            .map(|part| compile(&format!("^(?:{part})$")))
            .collect::<Result<_, _>>()?;
        Ok(())
    }

    /// Whether a walk looks for `rel` at all: it enters every directory on
    /// the way (a path beneath one `--exclude DIR/` or `--max-depth` keeps
    /// it out of is never looked for, so not missing when not found).
    pub fn looks_for(&self, rel: &str) -> bool {
        rel.match_indices('/')
            .all(|(i, _)| self.enter_dir(&rel[..i]))
    }

    /// Whether the crawl enters directory `rel` (relative path, `depth` ≥ 1
    /// components below the source).
    pub fn enter_dir(&self, rel: &str) -> bool {
        let depth = rel.split('/').count();
        if self.max_depth.is_some_and(|max| depth > max) {
            return false;
        }
        if self.only.as_ref().is_some_and(|o| !o.enters(rel)) {
            return false;
        }
        if !self.dir_struct.is_empty() {
            let Some(re) = self.dir_struct.get(depth - 1) else {
                return false;
            };
            if depth == self.dir_struct.len() || !re.is_match(last(rel)) {
                return false;
            }
        }
        for g in &self.globs {
            if g.kind == RuleKind::Exclude && g.dir_only && g.matches(rel) {
                return false;
            }
            if g.kind == RuleKind::Include && g.dir_only && g.matches(rel) {
                return true;
            }
        }
        true
    }

    /// Whether only some files are wanted (an `--include`, `--regex`,
    /// `--dir-struct`, size or age rule): then an empty directory is not
    /// recreated, as nothing in it was asked for (rsync's `--include` lists
    /// with `--prune-empty-dirs`).
    pub fn picks_files(&self) -> bool {
        self.globs
            .iter()
            .any(|g| g.kind == RuleKind::Include && !g.dir_only)
            || self.regex.is_some()
            || !self.dir_struct.is_empty()
            || self.min_size.is_some()
            || self.max_size.is_some()
            || self.newer_than.is_some()
            || self.older_than.is_some()
            || self.only.is_some()
    }

    /// Whether nothing is filtered (every entry taken).
    pub fn takes_everything(&self) -> bool {
        self.globs.is_empty()
            && self.regex.is_none()
            && self.dir_struct.is_empty()
            && self.min_size.is_none()
            && self.max_size.is_none()
            && self.newer_than.is_none()
            && self.older_than.is_none()
            && self.max_depth.is_none()
            && self.only.is_none()
    }

    /// Whether file `rel` (relative to the source) is taken, with the
    /// captures of its dir-struct parts and `--regex`. A `size` or `mtime`
    /// the source does not tell (`None`) passes the size and date rules.
    pub fn take_file(
        &self,
        rel: &str,
        size: Option<u64>,
        mtime: Option<SystemTime>,
    ) -> Option<Captures> {
        let depth = rel.split('/').count() - 1;
        if self.max_depth.is_some_and(|max| depth > max) {
            return None;
        }
        if self.only.as_ref().is_some_and(|o| !o.takes(rel)) {
            return None;
        }
        let mut caps = Captures::default();
        if !self.dir_struct.is_empty() {
            if depth + 1 != self.dir_struct.len() {
                return None;
            }
            for (re, comp) in self.dir_struct.iter().zip(rel.split('/')) {
                if !caps.add(re, comp) {
                    return None;
                }
            }
        }
        let mut decided = None;
        for g in self.globs.iter().filter(|g| !g.dir_only) {
            if g.matches(rel) {
                decided = Some(g.kind);
                break;
            }
        }
        match decided {
            Some(RuleKind::Exclude) => return None,
            None if self.only_includes && !self.globs.is_empty() => return None,
            _ => {}
        }
        if let Some(re) = &self.regex {
            if !caps.add(re, rel) {
                return None;
            }
        }
        if let Some(size) = size {
            if self.min_size.is_some_and(|m| size < m) || self.max_size.is_some_and(|m| size > m) {
                return None;
            }
        }
        if let (Some(limit), Some(mtime)) = (self.newer_than, mtime) {
            if mtime <= limit {
                return None;
            }
        }
        if let (Some(limit), Some(mtime)) = (self.older_than, mtime) {
            if mtime >= limit {
                return None;
            }
        }
        Some(caps)
    }
}

/// Parses the rules of a filter file (`--filter-from`, rclone's and rsync's
/// syntax): one rule a line, `+ GLOB` (or `include GLOB`) takes, `- GLOB`
/// (or `exclude GLOB`) skips; blank lines and lines starting with `#` or
/// `;` are ignored. The rules keep their order.
pub fn parse_filter_file(text: &str) -> Result<Vec<(RuleKind, String)>, FilterError> {
    let mut rules = Vec::new();
    for (i, raw, line) in rule_lines(text) {
        let rule = [
            ("+ ", RuleKind::Include),
            ("- ", RuleKind::Exclude),
            ("include ", RuleKind::Include),
            ("exclude ", RuleKind::Exclude),
        ]
        .into_iter()
        .find_map(|(prefix, kind)| line.strip_prefix(prefix).map(|glob| (kind, glob)));
        match rule {
            Some((kind, glob)) if !glob.trim().is_empty() => rules.push((kind, glob.to_owned())),
            _ => {
                return Err(FilterError::Line {
                    line: i + 1,
                    text: raw.to_owned(),
                })
            }
        }
    }
    Ok(rules)
}

/// Parses a file of patterns of one `kind` (rsync's `--exclude-from` and
/// `--include-from`): one glob a line; a line starting `+ ` or `- ` is an
/// include or exclude whatever the flag, as rsync reads it; blank lines
/// and lines starting with `#` or `;` are ignored.
pub fn parse_pattern_file(text: &str, kind: RuleKind) -> Vec<(RuleKind, String)> {
    rule_lines(text)
        .map(|(_, _, line)| {
            let line = line.trim_end();
            match (line.strip_prefix("+ "), line.strip_prefix("- ")) {
                (Some(glob), _) => (RuleKind::Include, glob.to_owned()),
                (_, Some(glob)) => (RuleKind::Exclude, glob.to_owned()),
                _ => (kind, line.to_owned()),
            }
        })
        .filter(|(_, glob)| !glob.trim().is_empty())
        .collect()
}

/// The lines of a rules file that hold a rule: (index, as written, without
/// its leading blanks).
fn rule_lines(text: &str) -> impl Iterator<Item = (usize, &str, &str)> {
    text.lines().enumerate().filter_map(|(i, raw)| {
        let line = raw.trim_start();
        let skip = line.trim().is_empty() || line.starts_with('#') || line.starts_with(';');
        (!skip).then_some((i, raw, line))
    })
}

impl GlobRule {
    fn matches(&self, rel: &str) -> bool {
        if self.anchored {
            self.matcher.is_match(rel)
        } else {
            self.matcher.is_match(last(rel))
        }
    }
}

fn last(rel: &str) -> &str {
    rel.rsplit('/').next().unwrap_or(rel)
}

fn compile(pattern: &str) -> Result<Regex, FilterError> {
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| FilterError::Regex {
            pattern: pattern.to_string(),
            reason: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(f: &Filter, rel: &str, size: u64) -> Option<Captures> {
        f.take_file(rel, Some(size), None)
    }

    #[test]
    fn first_matching_glob_wins() {
        let mut f = Filter::default();
        f.add_glob(RuleKind::Include, "keep*.tmp").unwrap();
        f.add_glob(RuleKind::Exclude, "*.tmp").unwrap();
        assert!(take(&f, "a/keep1.tmp", 1).is_some());
        assert!(take(&f, "a/b.tmp", 1).is_none());
        assert!(take(&f, "a/b.nc", 1).is_some(), "no rule matched: taken");
    }

    #[test]
    fn only_includes_means_only_those() {
        let mut f = Filter::default();
        f.add_glob(RuleKind::Include, "*.nc").unwrap();
        assert!(take(&f, "deep/x/y.nc", 1).is_some());
        assert!(take(&f, "y.txt", 1).is_none());
    }

    #[test]
    fn anchored_and_dir_rules() {
        let mut f = Filter::default();
        f.add_glob(RuleKind::Exclude, "tmp/").unwrap();
        f.add_glob(RuleKind::Exclude, "/top/*.log").unwrap();
        f.add_glob(RuleKind::Include, "**/keep/*.log").unwrap();
        assert!(!f.enter_dir("a/tmp"));
        assert!(f.enter_dir("a/tmpx"));
        assert!(take(&f, "top/x.log", 1).is_none());
        assert!(take(&f, "other/top/x.log", 1).is_some());
        assert!(take(&f, "a/b/keep/x.log", 1).is_some());
    }

    #[test]
    fn dir_struct_per_component() {
        let mut f = Filter::default();
        f.set_dir_struct(r"(20[0-9]{2})/(0[1-9]|1[0-2])/(?P<var>[a-z]+)\.nc")
            .unwrap();
        assert!(f.enter_dir("2024"));
        assert!(f.enter_dir("2024/03"));
        assert!(!f.enter_dir("tmp"));
        assert!(!f.enter_dir("2024/13"));
        assert!(!f.enter_dir("2024/03/x"), "deeper than the structure");
        let caps = take(&f, "2024/03/sst.nc", 1).unwrap();
        assert_eq!(caps.numbered, ["2024", "03", "sst"]);
        assert_eq!(caps.named, [("var".to_string(), "sst".to_string())]);
        assert!(take(&f, "2024/sst.nc", 1).is_none());
        assert!(take(&f, "2024/03/SST.nc", 1).is_none());
    }

    #[test]
    fn regex_size_date_depth() {
        let mut f = Filter::default();
        f.set_regex(r"run(\d+)\.dat$").unwrap();
        f.min_size = Some(10);
        f.max_size = Some(100);
        f.max_depth = Some(1);
        let caps = take(&f, "a/run42.dat", 50).unwrap();
        assert_eq!(caps.numbered, ["42"]);
        assert!(take(&f, "a/run42.dat", 5).is_none());
        assert!(take(&f, "a/run42.dat", 500).is_none());
        assert!(take(&f, "a/b/run42.dat", 50).is_none());
        assert!(!f.enter_dir("a/b"));
        let at = |s| Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s));
        f.newer_than = at(100);
        assert!(f.take_file("run1.dat", Some(50), at(50)).is_none());
        assert!(f.take_file("run1.dat", Some(50), at(150)).is_some());
        assert!(
            f.take_file("run1.dat", Some(50), None).is_some(),
            "an unknown mtime passes"
        );
        f.older_than = at(200);
        assert!(f.take_file("run1.dat", Some(50), at(150)).is_some());
        assert!(f.take_file("run1.dat", Some(50), at(200)).is_none());
        assert!(f.take_file("run1.dat", Some(50), at(250)).is_none());
    }

    #[test]
    fn filter_files() {
        let rules = parse_filter_file("# keep the logs\n+ *.log\n\n- tmp/\nexclude *\n").unwrap();
        assert_eq!(
            rules,
            [
                (RuleKind::Include, "*.log".to_string()),
                (RuleKind::Exclude, "tmp/".to_string()),
                (RuleKind::Exclude, "*".to_string()),
            ]
        );
        let err = parse_filter_file("+ a\n*.log\n").unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
        assert!(parse_filter_file("- \n").is_err());
    }

    #[test]
    fn pattern_files_hold_globs_of_one_kind() {
        let text = "# made by hand\n*.tmp\n\n  cache/ \r\n; old\n+ keep\n";
        assert_eq!(
            parse_pattern_file(text, RuleKind::Exclude),
            [
                (RuleKind::Exclude, "*.tmp".to_string()),
                (RuleKind::Exclude, "cache/".to_string()),
                (RuleKind::Include, "keep".to_string()),
            ]
        );
    }

    #[test]
    fn bad_patterns_are_errors() {
        let mut f = Filter::default();
        assert!(f.set_regex("(").is_err());
        assert!(f.add_glob(RuleKind::Include, "a[").is_err());
    }
}
