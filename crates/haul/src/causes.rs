//! Failures grouped by cause: a directory the receiver cannot write, a
//! subtree the sender cannot read, fails every entry beneath it with the
//! same error. People see each cause once, with how many entries it
//! stopped, never a line per entry.
//!
//! Two failures have the same cause when their error texts are equal once
//! each entry's own path is taken out of its text (`create a/f1: denied`
//! and `create a/f2: denied` are one cause; `open a: denied` is the same
//! text for every entry beneath `a`).

use std::collections::HashMap;

use serde::Serialize;

/// What stands for an entry's own path in a cause's key.
const THIS_ENTRY: &str = "\u{0}";

/// One cause and the entries it stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cause {
    /// Entries it stopped.
    pub count: u64,
    /// The deepest directory holding them all (or the one entry itself);
    /// empty when they have none in common.
    pub under: String,
    /// The first entry it stopped.
    pub first: String,
    /// That entry's error, in full.
    pub error: String,
    /// Whether entries' texts differ by their own paths (`error` is the
    /// first's).
    #[serde(skip)]
    per_entry: bool,
}

/// Failures grouped by cause, in the order their causes first appeared.
#[derive(Debug, Default)]
pub struct Causes {
    causes: Vec<Cause>,
    /// A cause's key to its place in `causes`.
    index: HashMap<String, usize>,
}

impl Causes {
    /// Counts entry `path` failed with `error`; true when it is the first
    /// of its cause (to be shown; the others are only counted).
    pub fn add(&mut self, path: &str, error: &str) -> bool {
        // Which side said it is not the cause (a local copy's small files
        // fail in the receiver's words, its large ones in the copy's).
        let full = error;
        let error = without_side(full);
        let (key, named) = key_of(path, error);
        // The same text (a directory named in every entry's error, the
        // entry itself among them), else the same with each path out.
        let same = self.index.get(error).map(|i| (*i, false));
        let found = same.or_else(|| self.index.get(&key).map(|i| (*i, true)));
        if let Some((i, per_entry)) = found {
            if let Some(c) = self.causes.get_mut(i) {
                c.count += 1;
                c.under = common_dir(&c.under, path);
                c.per_entry |= per_entry;
                return false;
            }
        }
        let i = self.causes.len();
        self.index.insert(error.to_owned(), i);
        if named {
            self.index.entry(key).or_insert(i);
        }
        self.causes.push(Cause {
            count: 1,
            under: path.to_owned(),
            first: path.to_owned(),
            error: full.to_owned(),
            per_entry: false,
        });
        true
    }

    /// Groups `failures` (path, error) by cause.
    pub fn of<'a>(failures: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut causes = Self::default();
        for (path, error) in failures {
            causes.add(path, error);
        }
        causes
    }

    /// The causes, in the order they first appeared.
    pub fn list(&self) -> &[Cause] {
        &self.causes
    }

    /// A summary's lines: the first [`CAUSES_SHOWN`] causes' lines
    /// ([`Cause::line`]), then one line for the rest.
    pub fn summary_lines(&self) -> Vec<String> {
        let list = self.list();
        let mut lines: Vec<String> = list.iter().take(CAUSES_SHOWN).map(Cause::line).collect();
        if let Some(rest) = list.get(CAUSES_SHOWN..).filter(|r| !r.is_empty()) {
            let entries: u64 = rest.iter().map(|c| c.count).sum();
            lines.push(format!(
                "failed: {entries} more entr{} for {} other reason{} (--json lists each)",
                if entries == 1 { "y" } else { "ies" },
                rest.len(),
                if rest.len() == 1 { "" } else { "s" },
            ));
        }
        lines
    }
}

/// At most this many causes are listed in a summary (`--json` has all).
const CAUSES_SHOWN: usize = 20;

impl Cause {
    /// The summary's line for it (without indentation): the entry and its
    /// error when it stopped one, else how many and where.
    pub fn line(&self) -> String {
        if self.count == 1 {
            return format!("failed: {}", entry_error(&self.first, &self.error));
        }
        let under = if self.under.is_empty() {
            String::new()
        } else {
            format!(" under {}", self.under)
        };
        let such_as = if self.per_entry {
            format!(" (the first: {})", self.first)
        } else {
            String::new()
        };
        format!(
            "failed: {} entries{under}{such_as}: {}",
            self.count, self.error
        )
    }

    /// Quiet mode's line after the first entry (shown as it failed): how
    /// many more this cause stopped. `None` when it stopped one.
    pub fn more_line(&self) -> Option<String> {
        let more = self.count.checked_sub(1).filter(|m| *m > 0)?;
        let under = if self.under.is_empty() {
            String::new()
        } else {
            format!(" under {}", self.under)
        };
        Some(format!(
            "error: {more} more entr{}{under} failed the same way (not shown)",
            if more == 1 { "y" } else { "ies" }
        ))
    }
}

/// `PATH: ERROR`, or the error alone for an entry with no path (a node's
/// listing error names what it could not read in its text).
pub fn entry_error(path: &str, error: &str) -> String {
    if path.is_empty() {
        error.to_owned()
    } else {
        format!("{path}: {error}")
    }
}

/// `error` without the side that reported it (`receiver: `...).
fn without_side(error: &str) -> &str {
    ["receiver: ", "sender: "]
        .iter()
        .find_map(|side| error.strip_prefix(side))
        .unwrap_or(error)
}

/// The cause's key of `error` for entry `path`: the text with the entry's
/// own path taken out, and whether it was there.
fn key_of(path: &str, error: &str) -> (String, bool) {
    if path.is_empty() {
        return (error.to_owned(), false);
    }
    let mut key = String::with_capacity(error.len());
    let mut rest = error;
    let mut found = false;
    while let Some(at) = rest.find(path) {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + path.len()..];
        // Only where it is a whole path (`tree/f1` in `src/tree/f1:`, not
        // `a` in `Operation`, nor `f1` in `f10`).
        let whole = before.is_none_or(|c| !name_char(c)) && !continues_name(after);
        let end = if whole { at + path.len() } else { at + 1 };
        let end = (end..=rest.len())
            .find(|i| rest.is_char_boundary(*i))
            .unwrap_or(rest.len());
        if whole {
            key.push_str(&rest[..at]);
            key.push_str(THIS_ENTRY);
            found = true;
        } else {
            key.push_str(&rest[..end]);
        }
        rest = &rest[end..];
    }
    key.push_str(rest);
    (key, found)
}

/// A character that can be part of a name a path ends with.
fn name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// Whether `after` (what follows a match) goes on with the same name: a
/// name character, or a dot followed by one (`f1.txt`, not `f1.`).
fn continues_name(after: &str) -> bool {
    let mut chars = after.chars();
    match chars.next() {
        Some('.') => chars.next().is_some_and(name_char),
        Some(c) => name_char(c),
        None => false,
    }
}

/// The deepest directory `a` and `b` both are or lie beneath, by whole
/// components (`a/b` and `a/bc` share `a`).
fn common_dir(a: &str, b: &str) -> String {
    let mut common = Vec::new();
    for (x, y) in a.split('/').zip(b.split('/')) {
        if x != y || x.is_empty() {
            break;
        }
        common.push(x);
    }
    common.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thousand_entries_under_one_unwritable_directory_are_one_cause() {
        // The directory's own error names it as the entries' errors do.
        let error = "receiver: cannot create directory in/sub/tree: Permission denied";
        let mut c = Causes::default();
        assert!(c.add("tree", error), "the first is shown");
        for i in 0..1000 {
            assert!(!c.add(&format!("tree/f{i}"), error), "repeats are not");
        }
        let [cause] = c.list() else {
            panic!("one cause: {:?}", c.list());
        };
        assert_eq!(cause.count, 1001);
        assert_eq!(cause.under, "tree");
        assert_eq!(
            cause.line(),
            format!("failed: 1001 entries under tree: {error}")
        );
        assert_eq!(
            cause.more_line().as_deref(),
            Some("error: 1000 more entries under tree failed the same way (not shown)")
        );
    }

    #[test]
    fn texts_that_name_each_entry_group_without_it() {
        let mut c = Causes::default();
        assert!(c.add("t/a/f1", "create t/a/f1: Permission denied"));
        assert!(!c.add("t/a/f2", "create t/a/f2: Permission denied"));
        assert!(!c.add("t/b/f3", "create t/b/f3: Permission denied"));
        // Another error, another cause; and the same error on another
        // operation is another cause too.
        assert!(c.add("t/a/f4", "disk full while writing t/a/f4"));
        assert!(c.add("t/big", "rename t/big: Permission denied"));
        // Which side said it does not make it another cause.
        assert!(!c.add("t/c/f5", "receiver: create t/c/f5: Permission denied"));
        let causes = c.list();
        assert_eq!(causes.len(), 3);
        assert_eq!((causes[0].count, causes[0].under.as_str()), (4, "t"));
        assert_eq!(
            causes[0].line(),
            "failed: 4 entries under t (the first: t/a/f1): create t/a/f1: Permission denied"
        );
        assert_eq!(
            causes[1].line(),
            "failed: t/a/f4: disk full while writing t/a/f4"
        );
        assert_eq!(causes[1].more_line(), None);
    }

    #[test]
    fn entries_with_nothing_in_common_and_without_a_path() {
        let c = Causes::of([("a", "x"), ("b", "x"), ("", "node: cannot list d")]);
        let causes = c.list();
        assert_eq!(causes[0].line(), "failed: 2 entries: x");
        assert_eq!(causes[1].line(), "failed: node: cannot list d");
        assert_eq!(
            Causes::of([("", "y"), ("", "y")]).list()[0].line(),
            "failed: 2 entries: y"
        );
    }

    #[test]
    fn an_entry_is_taken_out_only_where_its_whole_path_stands() {
        // `a` is in `Operation`, `f1` in `f10` and `f1.txt`: not the entry.
        assert!(!key_of("a", "Operation not permitted").1);
        assert_eq!(
            key_of("b", "Operation not permitted"),
            key_of("a", "Operation not permitted")
        );
        assert!(!key_of("t/f1", "read t/f10: x, t/f1.txt").1);
        assert_eq!(
            key_of("t/f1", "cannot read src/t/f1: denied."),
            (format!("cannot read src/{THIS_ENTRY}: denied."), true)
        );
        assert_eq!(
            key_of("f1", "f1. and f1"),
            (format!("{THIS_ENTRY}. and {THIS_ENTRY}"), true)
        );
        assert_eq!(key_of("é", "xé é").0, format!("xé {THIS_ENTRY}"));
    }

    #[test]
    fn the_summary_lists_causes_not_entries() {
        let mut list: Vec<(String, String)> = (0..1000)
            .map(|i| {
                (
                    format!("t/f{i}"),
                    "receiver: cannot write in in/sub: denied".into(),
                )
            })
            .collect();
        let lines = |list: &[(String, String)]| {
            Causes::of(list.iter().map(|(p, e)| (p.as_str(), e.as_str()))).summary_lines()
        };
        assert_eq!(
            lines(&list),
            ["failed: 1000 entries under t: receiver: cannot write in in/sub: denied"]
        );
        // Past 20 causes, one line for the others.
        list.extend((0..25).map(|i| (format!("u{i}"), format!("error {i}"))));
        list.push(("u0b".into(), "error 24".into()));
        let shown = lines(&list);
        assert_eq!(shown.len(), CAUSES_SHOWN + 1);
        assert_eq!(shown[1], "failed: u0: error 0");
        assert_eq!(
            shown[CAUSES_SHOWN],
            "failed: 7 more entries for 6 other reasons (--json lists each)"
        );
    }

    #[test]
    fn common_directories_are_whole_components() {
        assert_eq!(common_dir("a/b", "a/bc"), "a");
        assert_eq!(common_dir("a/b/c", "a/b/d"), "a/b");
        assert_eq!(common_dir("a", "a/b"), "a");
        assert_eq!(common_dir("a", "b"), "");
        assert_eq!(common_dir("", "a"), "");
    }
}
