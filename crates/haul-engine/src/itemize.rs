//! rsync's `-i`/`--itemize-changes`: what changed about an entry, as
//! rsync's eleven-character string `YXcstpoguax` — `Y` what happens (`>`
//! received, `<` sent, `c` made here, `h` a hard link, `.` attributes
//! only, `*` a message such as `*deleting`), `X` the kind (`f` file, `d`
//! directory, `L` symlink), then one letter per attribute that differs
//! (`c` content by checksum or a symlink's target, `s` size, `t` mtime,
//! `p` permissions, `o` owner, `g` group, `a` ACLs, `x` other extended
//! attributes; `u` is not compared) or `.` — all `+` for a new entry. A
//! receiver says what its `stat` found and what it set in place; a dry run
//! says what its listings show, through the same functions.

use haul_proto::{Entry, EntryKind};
use haul_root::Meta;

/// What differs between an entry offered and what is at its name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Differs {
    size: bool,
    time: bool,
    perms: bool,
    owner: bool,
    group: bool,
    acls: bool,
    xattrs: bool,
}

/// The kind letter of `entry` (`f`, `d`, `L`), and `Y` when it is made
/// rather than received (`c` for directories and symlinks, `h` for a hard
/// link), from a receiver's point of view.
fn letters(entry: &Entry) -> (char, char) {
    match entry.kind {
        EntryKind::File => ('>', 'f'),
        EntryKind::Dir => ('c', 'd'),
        EntryKind::Symlink { .. } => ('c', 'L'),
        EntryKind::HardLink { .. } => ('h', 'f'),
    }
}

fn string(y: char, x: char, new: bool, d: Differs) -> String {
    if new {
        return format!("{y}{x}+++++++++");
    }
    let flag = |on: bool, c: char| if on { c } else { '.' };
    format!(
        "{y}{x}.{}{}{}{}{}.{}{}",
        flag(d.size, 's'),
        flag(d.time, 't'),
        flag(d.perms, 'p'),
        flag(d.owner, 'o'),
        flag(d.group, 'g'),
        flag(d.acls, 'a'),
        flag(d.xattrs, 'x'),
    )
}

/// The fields a change string says changed, by name, for `--json`: `new`
/// for a new entry, `deleted` for rsync's `*deleting`, else each of `content` (a file's, by
/// checksum), `target` (a symlink's), `size`, `mtime`, `perms`, `owner`,
/// `group`, `acls`, `xattrs` whose letter is set.
pub fn fields(code: &str) -> Vec<&'static str> {
    if code.starts_with("*deleting") {
        return vec!["deleted"];
    }
    let letters: Vec<char> = code.chars().collect();
    if letters.len() < 11 {
        return Vec::new();
    }
    if letters[2..].iter().all(|&c| c == '+') {
        return vec!["new"];
    }
    let names = [
        if letters[1] == 'L' {
            "target"
        } else {
            "content"
        },
        "size",
        "mtime",
        "perms",
        "owner",
        "group",
        "",
        "acls",
        "xattrs",
    ];
    letters[2..11]
        .iter()
        .zip(names)
        .filter(|(c, name)| !matches!(c, '.' | ' ') && !name.is_empty())
        .map(|(_, name)| name)
        .collect()
}

/// The change string of `entry` received over what a `stat` found at its
/// name (`None`: nothing was there). Owners and groups count only when the
/// entry carries them (`-o`, `-g`). `by_content`: the sender compared
/// contents (`-c`) and offers only files that differ, so one of the same
/// size differs in content (`c`, as rsync says).
pub fn received(entry: &Entry, there: Option<&Meta>, by_content: bool) -> String {
    let (y, x) = letters(entry);
    // Another kind there (a symlink where a file goes): new, as rsync says.
    let same_kind = |m: &&Meta| match entry.kind {
        EntryKind::File | EntryKind::HardLink { .. } => m.is_file(),
        EntryKind::Dir => m.is_dir(),
        EntryKind::Symlink { .. } => m.is_symlink(),
    };
    let Some(m) = there.filter(same_kind) else {
        return string(y, x, true, Differs::default());
    };
    let attrs = entry.attrs.as_deref();
    let d = Differs {
        size: entry.kind == EntryKind::File && m.size != entry.size,
        time: (m.mtime, m.mtime_nsec) != (entry.mtime_sec, entry.mtime_nsec),
        perms: m.permissions() != entry.mode & 0o7777,
        owner: attrs
            .and_then(|a| a.owner.as_ref())
            .is_some_and(|o| o.id != m.uid),
        group: attrs
            .and_then(|a| a.group.as_ref())
            .is_some_and(|g| g.id != m.gid),
        ..Differs::default()
    };
    let mut code = string(y, x, false, d);
    if by_content && entry.kind == EntryKind::File && m.size == entry.size {
        code.replace_range(2..3, "c");
    }
    code
}

/// The change string a dry run shows for `entry` against the entry listed
/// at its name (`None`: nothing there); `content` when `-c` found the
/// contents differ.
pub fn listed(entry: &Entry, there: Option<&Entry>, content: bool) -> String {
    let (y, x) = letters(entry);
    let Some(t) =
        there.filter(|t| std::mem::discriminant(&t.kind) == std::mem::discriminant(&entry.kind))
    else {
        return string(y, x, true, Differs::default());
    };
    let d = Differs {
        size: entry.kind == EntryKind::File && t.size != entry.size,
        time: (t.mtime_sec, t.mtime_nsec) != (entry.mtime_sec, entry.mtime_nsec),
        perms: t.mode & 0o7777 != entry.mode & 0o7777,
        ..Differs::default()
    };
    let mut code = string(y, x, false, d);
    if content {
        code.replace_range(2..3, "c");
    }
    code
}

/// What is at a directory's or symlink's name, as a receiver's `stat` or a
/// dry run's listing found it.
#[derive(Debug, Clone, Copy)]
pub struct Found<'a> {
    /// A directory (else a symlink, or another kind).
    pub dir: bool,
    /// A symlink, and where it points.
    pub target: Option<&'a str>,
    /// Its mtime.
    pub mtime: (i64, u32),
    /// Its permission bits.
    pub perms: u32,
    /// Its owner and group, each where known.
    pub ids: (Option<u32>, Option<u32>),
}

impl<'a> Found<'a> {
    /// What a `stat` found (`target`: a symlink's, read beside it).
    pub fn stat(m: &Meta, target: Option<&'a str>) -> Self {
        Self {
            dir: m.is_dir(),
            target: target.filter(|_| m.is_symlink()),
            mtime: (m.mtime, m.mtime_nsec),
            perms: m.permissions(),
            ids: (Some(m.uid), Some(m.gid)),
        }
    }

    /// What a listing found.
    pub fn listed(t: &'a Entry) -> Self {
        let attrs = t.attrs.as_deref();
        let ids = (
            attrs.and_then(|a| Some(a.owner.as_ref()?.id)),
            attrs.and_then(|a| Some(a.group.as_ref()?.id)),
        );
        Self {
            dir: t.kind == EntryKind::Dir,
            target: match &t.kind {
                EntryKind::Symlink { target } => Some(target),
                _ => None,
            },
            mtime: (t.mtime_sec, t.mtime_nsec),
            perms: t.mode & 0o7777,
            ids,
        }
    }
}

/// What a receiver gives a directory or symlink, against what is there.
#[derive(Debug, Clone, Copy, Default)]
pub struct Here {
    /// The permission bits it gives it.
    pub mode: u32,
    /// The owner and group it gives it, where it takes them.
    pub ids: (Option<u32>, Option<u32>),
    /// Whether the ACLs, and the other extended attributes, there differ
    /// from those it gives it.
    pub xattrs: (bool, bool),
}

/// The change string of `entry`, a directory or symlink, made where
/// `found` was (`None`: nothing): `cd+++++++++` or `cL+++++++++` when new,
/// `cLc.t......` for a symlink that points elsewhere now, `.d..t......`
/// when only attributes change (as `here` says) — and `None` when nothing
/// does (rsync prints nothing then, `-ii` aside). Symlinks' permission
/// bits are not compared (Linux has none).
pub fn made(entry: &Entry, found: Option<Found<'_>>, here: Here) -> Option<String> {
    let (y, x) = letters(entry);
    let target = match &entry.kind {
        EntryKind::Symlink { target } => Some(target.as_str()),
        _ => None,
    };
    let same_kind = |f: &Found<'_>| match target {
        Some(_) => f.target.is_some(),
        None => f.dir,
    };
    let Some(f) = found.filter(same_kind) else {
        return Some(string(y, x, true, Differs::default()));
    };
    let (uid, gid) = here.ids;
    let d = Differs {
        time: f.mtime != (entry.mtime_sec, entry.mtime_nsec),
        perms: target.is_none() && f.perms != here.mode & 0o7777,
        owner: uid.zip(f.ids.0).is_some_and(|(w, u)| w != u),
        group: gid.zip(f.ids.1).is_some_and(|(w, g)| w != g),
        acls: here.xattrs.0,
        xattrs: here.xattrs.1,
        size: false,
    };
    let retargeted = target.is_some() && f.target != target;
    if !retargeted && d == Differs::default() {
        return None;
    }
    let mut code = string(if retargeted { y } else { '.' }, x, false, d);
    if retargeted {
        code.replace_range(2..3, "c");
    }
    Some(code)
}

/// What was brought in line on a file found up to date (rsync's
/// attributes-only change: `.f...p.....`, `.f....og...`, `.f.......ax`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InPlace {
    /// Its mtime (`-c`: the same content, another mtime).
    pub time: bool,
    /// Its permission bits.
    pub perms: bool,
    /// Its owner.
    pub owner: bool,
    /// Its group.
    pub group: bool,
    /// Its ACLs.
    pub acls: bool,
    /// Its other extended attributes.
    pub xattrs: bool,
}

impl InPlace {
    /// Nothing was changed.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The change string of `entry`, up to date but for what `fixed` says was
/// set in place (`None` when nothing was).
pub fn in_place(entry: &Entry, fixed: InPlace) -> Option<String> {
    if fixed.is_empty() {
        return None;
    }
    let (_, x) = letters(entry);
    let d = Differs {
        time: fixed.time,
        perms: fixed.perms,
        owner: fixed.owner,
        group: fixed.group,
        acls: fixed.acls,
        xattrs: fixed.xattrs,
        ..Differs::default()
    };
    Some(string('.', x, false, d))
}

/// The line `-i` shows for a deletion (rsync's).
pub fn deleting(path: &str) -> String {
    format!("*deleting   {path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_name_each_letter_set() {
        assert_eq!(fields(">f.st......"), ["size", "mtime"]);
        assert_eq!(fields(">fc........"), ["content"]);
        assert_eq!(fields("cLc.t......"), ["target", "mtime"]);
        assert_eq!(
            fields(".f...pog.ax"),
            ["perms", "owner", "group", "acls", "xattrs"]
        );
        assert_eq!(fields("cd+++++++++"), ["new"]);
        assert_eq!(fields("*deleting  "), ["deleted"]);
        assert!(fields("bad").is_empty());
    }

    fn file(size: u64, mtime: i64, mode: u32) -> Entry {
        Entry {
            path: "f".into(),
            kind: EntryKind::File,
            size,
            mode,
            mtime_sec: mtime,
            mtime_nsec: 0,
            chunk_size: 1024,
            attrs: None,
        }
    }

    #[test]
    fn the_strings_are_rsyncs() {
        let new = file(10, 5, 0o644);
        assert_eq!(listed(&new, None, false), ">f+++++++++");
        assert_eq!(listed(&new, Some(&file(9, 5, 0o644)), false), ">f.s.......");
        assert_eq!(
            listed(&new, Some(&file(10, 4, 0o600)), false),
            ">f..tp....."
        );
        assert_eq!(listed(&new, Some(&file(10, 5, 0o644)), true), ">fc........");
        let dir = Entry {
            kind: EntryKind::Dir,
            ..file(0, 5, 0o755)
        };
        assert_eq!(listed(&dir, None, false), "cd+++++++++");
        assert_eq!(listed(&dir, Some(&new), false), "cd+++++++++");
        assert_eq!(deleting("x/y"), "*deleting   x/y");
    }

    #[test]
    fn a_file_brought_in_line_in_place_says_what_was_set() {
        let f = file(10, 5, 0o644);
        assert_eq!(in_place(&f, InPlace::default()), None);
        let fixed = |perms, owner, group, acls, xattrs| InPlace {
            time: false,
            perms,
            owner,
            group,
            acls,
            xattrs,
        };
        let said = |i: InPlace| in_place(&f, i).unwrap_or_default();
        assert_eq!(said(fixed(true, false, false, false, false)), ".f...p.....");
        assert_eq!(said(fixed(false, true, true, false, false)), ".f....og...");
        assert_eq!(said(fixed(false, false, false, true, true)), ".f.......ax");
        assert_eq!(said(fixed(true, false, true, false, true)), ".f...p.g..x");
    }

    fn here(mode: u32, ids: (Option<u32>, Option<u32>)) -> Here {
        Here {
            mode,
            ids,
            xattrs: (false, false),
        }
    }

    #[test]
    fn a_directory_or_symlink_already_there_says_only_what_changes() {
        let dir = Entry {
            kind: EntryKind::Dir,
            ..file(0, 5, 0o755)
        };
        let seen = |mtime: i64, perms: u32, target: Option<&'static str>| Found {
            dir: target.is_none(),
            target,
            mtime: (mtime, 0),
            perms,
            ids: (Some(0), Some(0)),
        };
        assert_eq!(
            made(&dir, None, here(0o755, (None, None))).as_deref(),
            Some("cd+++++++++")
        );
        assert_eq!(
            made(&dir, Some(seen(5, 0o755, None)), here(0o755, (None, None))),
            None
        );
        assert_eq!(
            made(&dir, Some(seen(4, 0o755, None)), here(0o755, (None, None))).as_deref(),
            Some(".d..t......")
        );
        assert_eq!(
            made(&dir, Some(seen(5, 0o700, None)), here(0o755, (None, None))).as_deref(),
            Some(".d...p.....")
        );
        // A symlink where the directory goes: made anew.
        assert_eq!(
            made(
                &dir,
                Some(seen(5, 0o777, Some("x"))),
                here(0o755, (None, None))
            )
            .as_deref(),
            Some("cd+++++++++")
        );
        let link = Entry {
            kind: EntryKind::Symlink { target: "a".into() },
            ..file(0, 5, 0o777)
        };
        assert_eq!(
            made(
                &link,
                Some(seen(5, 0o777, Some("a"))),
                here(0o777, (None, None))
            ),
            None
        );
        assert_eq!(
            made(
                &link,
                Some(seen(4, 0o777, Some("b"))),
                here(0o777, (None, None))
            )
            .as_deref(),
            Some("cLc.t......")
        );
        assert_eq!(
            made(
                &link,
                Some(seen(4, 0o777, Some("a"))),
                here(0o777, (None, None))
            )
            .as_deref(),
            Some(".L..t......")
        );
        // Owners count where this receiver gives them.
        assert_eq!(
            made(
                &dir,
                Some(seen(5, 0o755, None)),
                here(0o755, (Some(7), Some(0)))
            )
            .as_deref(),
            Some(".d....o....")
        );
    }
}
