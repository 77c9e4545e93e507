//! rsync's `-i`/`--itemize-changes`: what changed about an entry, as
//! rsync's eleven-character string `YXcstpoguax` — `Y` what happens (`>`
//! received, `<` sent, `c` made here, `h` a hard link, `.` attributes
//! only, `*` a message such as `*deleting`), `X` the kind (`f` file, `d`
//! directory, `L` symlink), then one letter per attribute that differs
//! (`c` content by checksum, `s` size, `t` mtime, `p` permissions, `o`
//! owner, `g` group; `u`, `a`, `x` are not compared) or `.` — all `+` for
//! a new entry. One function for a receiver (what its `stat` found) and
//! one for a dry run (what a listing found), so both say the same.

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
        "{y}{x}.{}{}{}{}{}...",
        flag(d.size, 's'),
        flag(d.time, 't'),
        flag(d.perms, 'p'),
        flag(d.owner, 'o'),
        flag(d.group, 'g'),
    )
}

/// The change string of `entry` received over what a `stat` found at its
/// name (`None`: nothing was there). Owners and groups count only when the
/// entry carries them (`-o`, `-g`).
pub fn received(entry: &Entry, there: Option<&Meta>) -> String {
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
    };
    string(y, x, false, d)
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

/// The change string of a file found up to date whose permission bits
/// were set in place (rsync's `.f...p.....`: attributes only).
pub fn perms_fixed(entry: &Entry) -> String {
    let (_, x) = letters(entry);
    string(
        '.',
        x,
        false,
        Differs {
            perms: true,
            ..Differs::default()
        },
    )
}

/// The line `-i` shows for a deletion (rsync's).
pub fn deleting(path: &str) -> String {
    format!("*deleting   {path}")
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
