//! What rsync's `-o`, `-g`, `-X` and `-A` keep: an entry's [`Attrs`] read
//! at the source ([`AttrReader`]) and applied at the receiver as far as its
//! policy allows ([`AttrWriter`]).
//!
//! Owners and groups travel by name and number; the receiver maps a name to
//! its own number (rsync's default), or uses the number when the name is
//! unknown there or the sender sent none (`--numeric-ids`). Names are looked
//! up once each (NSS can be slow) and cached for the transfer.
//!
//! Everything an entry carries came from a peer. [`AttrPolicy`] says what a
//! receiver takes: owners and groups only when it runs as root (a node also
//! only when its operator passed `--keep-owners`), `user.*` attributes and
//! POSIX ACLs always, `trusted.*` and `security.*` only where owners are
//! taken. What it leaves out is said once per cause, never per file.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::itemize::InPlace;
use haul_proto::{Attrs, Keep, Principal, Xattr, MAX_XATTRS};
use haul_root::{Dir, Meta, Xattrs};

/// Most bytes of extended attributes (names and values) one entry carries:
/// an entry travels in one frame of at most 4 MiB.
const MAX_XATTR_BYTES: usize = 1 << 20;

/// The attributes ACLs are stored as.
const ACLS: [&str; 2] = ["system.posix_acl_access", "system.posix_acl_default"];

/// What `-X -A` keep: what a node, which asks nothing, takes at most.
const ALL_XATTRS: Keep = Keep {
    owner: false,
    group: false,
    xattrs: true,
    acls: true,
    numeric_ids: false,
    sparse: false,
    hard_links: false,
};

/// Whether `-X` (`xattrs`) or `-A` (`acls`) keeps the attribute `name`.
/// SELinux labels are left out: they belong to the receiving system's policy.
fn kept(name: &str, keep: Keep) -> bool {
    // The content-hash record describes this inode only (rsync so leaves
    // its own `user.rsync.%stat` out).
    if name == crate::hash_cache::XATTR {
        return false;
    }
    if ACLS.contains(&name) {
        return keep.acls;
    }
    keep.xattrs
        && (name.starts_with("user.")
            || name.starts_with("trusted.")
            || (name.starts_with("security.") && name != "security.selinux"))
}

/// Reads what a transfer keeps of each entry at the source.
#[derive(Debug, Default)]
pub struct AttrReader {
    keep: Keep,
    users: Mutex<HashMap<u32, String>>,
    groups: Mutex<HashMap<u32, String>>,
}

impl AttrReader {
    /// A reader for the flags `keep`.
    pub fn new(keep: Keep) -> Self {
        Self {
            keep,
            ..Self::default()
        }
    }

    /// What this reader keeps.
    pub fn keep(&self) -> Keep {
        self.keep
    }

    /// The name of uid or gid `id` (empty when it has none, or under
    /// `--numeric-ids`).
    fn name(&self, id: u32, group: bool) -> String {
        if self.keep.numeric_ids {
            return String::new();
        }
        let cache = if group { &self.groups } else { &self.users };
        let Ok(mut cache) = cache.lock() else {
            return String::new();
        };
        cache
            .entry(id)
            .or_insert_with(|| {
                let name = if group {
                    nix::unistd::Group::from_gid(id.into()).map(|g| g.map(|g| g.name))
                } else {
                    nix::unistd::User::from_uid(id.into()).map(|u| u.map(|u| u.name))
                };
                name.ok().flatten().unwrap_or_default()
            })
            .clone()
    }

    /// The [`Attrs`] of an entry with `meta`, its attributes read by
    /// `xattrs` only when `-X` or `-A` asks; `None` when nothing is kept.
    /// An attribute whose name is not UTF-8 is left out.
    pub fn read(
        &self,
        meta: &Meta,
        xattrs: impl FnOnce() -> io::Result<Xattrs>,
    ) -> io::Result<Option<Box<Attrs>>> {
        if !self.keep.any() {
            return Ok(None);
        }
        let principal = |id, group| Principal {
            id,
            name: self.name(id, group),
        };
        // Whether the list holds every attribute kept (none past the
        // limit left out): a receiver then removes what the source lacks.
        let mut whole = true;
        let xattrs = if self.keep.xattrs || self.keep.acls {
            let mut list = Vec::new();
            let mut bytes = 0;
            for (name, value) in xattrs()? {
                let Ok(name) = String::from_utf8(name) else {
                    continue;
                };
                if !kept(&name, self.keep) {
                    continue;
                }
                if list.len() == MAX_XATTRS {
                    whole = false;
                    continue;
                }
                bytes += name.len() + value.len();
                list.push(Xattr { name, value });
            }
            // An entry travels in one frame (at most 4 MiB).
            if bytes > MAX_XATTR_BYTES {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("its extended attributes hold {bytes} bytes, more than the {MAX_XATTR_BYTES} one entry may carry"),
                ));
            }
            Some(list)
        } else {
            None
        };
        Ok(Some(Box::new(Attrs {
            owner: self.keep.owner.then(|| principal(meta.uid, false)),
            group: self.keep.group.then(|| principal(meta.gid, true)),
            xattrs,
            sparse: self.keep.sparse && meta.is_file(),
            linked: false,
            all_xattrs: self.keep.xattrs && whole,
            all_acls: self.keep.acls && whole,
            // Only one who sees trusted.* speaks for them.
            all_trusted: self.keep.xattrs && whole && haul_root::sees_trusted_xattrs(),
        })))
    }
}

/// What a receiver takes of what entries carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AttrPolicy {
    /// Owners and groups (and with them `trusted.*`, `security.*`).
    pub owners: bool,
    /// What this receiver asked for (a client's pull or local copy): a
    /// peer's owner, group or attribute it did not ask for is dropped.
    /// `None` (a node): the client that sends decides what it sends.
    pub asked: Option<Keep>,
    /// Why owners are not taken, for the one line that says so (empty:
    /// nothing is said).
    pub why_not: &'static str,
}

impl AttrPolicy {
    /// A local copy's or a client's pull: owners when running as root;
    /// otherwise they are left out without a word, as rsync `-a` leaves
    /// them for a user who could not set them anyway.
    pub fn here(asked: Keep) -> Self {
        Self {
            owners: haul_root::my_uid() == 0,
            asked: Some(asked),
            why_not: "",
        }
    }

    /// A node: owners only as root and when its operator allowed them.
    pub fn node(keep_owners: bool) -> Self {
        let root = haul_root::my_uid() == 0;
        Self {
            owners: root && keep_owners,
            asked: None,
            why_not: if root {
                "the node runs without --keep-owners"
            } else {
                "the node is not running as root"
            },
        }
    }
}

/// What an entry's attributes are applied to.
pub enum Target<'a> {
    /// A file being received, through its open descriptor.
    File(&'a File),
    /// A directory, held.
    Dir(&'a Dir),
    /// A symlink `name` in a held directory: its owner only.
    Link(&'a Dir, &'a str),
}

/// Applies entries' [`Attrs`] under one [`AttrPolicy`], mapping names to
/// this system's ids and saying once what it left out.
#[derive(Debug, Default)]
pub struct AttrWriter {
    policy: AttrPolicy,
    users: Mutex<HashMap<String, Option<u32>>>,
    groups: Mutex<HashMap<String, Option<u32>>>,
    said_owners: AtomicBool,
    said_privileged: AtomicBool,
    said_unsupported: AtomicBool,
}

/// How a file already in place differs from an entry in its extended
/// attributes: what to set and what to remove.
#[derive(Debug, Default)]
struct XattrChanges<'a> {
    set: Vec<&'a Xattr>,
    remove: Vec<Vec<u8>>,
}

impl XattrChanges<'_> {
    fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty()
    }

    /// Whether they change ACLs, and other attributes.
    fn kinds(&self) -> (bool, bool) {
        let names = self
            .set
            .iter()
            .map(|x| x.name.as_bytes())
            .chain(self.remove.iter().map(Vec::as_slice));
        let (mut acls, mut others) = (false, false);
        for n in names {
            match ACLS.iter().any(|a| a.as_bytes() == n) {
                true => acls = true,
                false => others = true,
            }
        }
        (acls, others)
    }
}

impl AttrWriter {
    /// A writer under `policy`.
    pub fn new(policy: AttrPolicy) -> Self {
        Self {
            policy,
            ..Self::default()
        }
    }

    /// This system's id for `p`: its name's, else its number.
    fn local_id(&self, p: &Principal, group: bool) -> u32 {
        if p.name.is_empty() {
            return p.id;
        }
        let cache = if group { &self.groups } else { &self.users };
        let Ok(mut cache) = cache.lock() else {
            return p.id;
        };
        cache
            .entry(p.name.clone())
            .or_insert_with(|| {
                if group {
                    nix::unistd::Group::from_name(&p.name)
                        .ok()
                        .flatten()
                        .map(|g| g.gid.as_raw())
                } else {
                    nix::unistd::User::from_name(&p.name)
                        .ok()
                        .flatten()
                        .map(|u| u.uid.as_raw())
                }
            })
            .unwrap_or(p.id)
    }

    fn say_once(&self, flag: &AtomicBool, what: &str) {
        if !self.policy.why_not.is_empty() && !flag.swap(true, Ordering::Relaxed) {
            tracing::warn!("{what} not kept: {}", self.policy.why_not);
        }
    }

    /// Whether `entry` is written with holes (`-S`): the peer asked for it,
    /// and this receiver (a client) asked for it too.
    pub fn sparse(&self, entry: &haul_proto::Entry) -> bool {
        entry.attrs.as_ref().is_some_and(|a| a.sparse) && self.policy.asked.is_none_or(|k| k.sparse)
    }

    /// The owner and group of `attrs` this receiver applies: what the peer
    /// sent, less what this receiver did not ask for; `None` each when
    /// owners are not taken here.
    fn owners_of(&self, attrs: &Attrs) -> (Option<u32>, Option<u32>) {
        if !self.policy.owners {
            return (None, None);
        }
        let asked = self.policy.asked;
        let uid = attrs
            .owner
            .as_ref()
            .filter(|_| asked.is_none_or(|k| k.owner))
            .map(|p| self.local_id(p, false));
        let gid = attrs
            .group
            .as_ref()
            .filter(|_| asked.is_none_or(|k| k.group))
            .map(|p| self.local_id(p, true));
        (uid, gid)
    }

    /// The owner and group `entry` gets here: `None` for one not taken
    /// (not kept, or this receiver takes no owners).
    pub fn ids_of(&self, entry: &haul_proto::Entry) -> (Option<u32>, Option<u32>) {
        entry
            .attrs
            .as_deref()
            .map_or((None, None), |a| self.owners_of(a))
    }

    /// What a receiver under this policy would set on `found` (a dry run's
    /// listing of what is there) to give it `entry`'s owner, group,
    /// extended attributes and ACLs: `-i`'s `o`, `g`, `a` and `x`, as
    /// [`AttrWriter::refresh`] would say them. Only what both sides listed
    /// is compared.
    pub fn would_set(&self, entry: &haul_proto::Entry, found: &haul_proto::Entry) -> InPlace {
        let (Some(want), Some(there)) = (entry.attrs.as_deref(), found.attrs.as_deref()) else {
            return InPlace::default();
        };
        let (uid, gid) = self.owners_of(want);
        let differs = |w: Option<u32>, t: &Option<Principal>| {
            w.zip(t.as_ref()).is_some_and(|(w, t)| w != t.id)
        };
        let (acls, xattrs) = match &there.xattrs {
            Some(listed) => {
                let have: Xattrs = listed
                    .iter()
                    .map(|x| (x.name.clone().into_bytes(), x.value.clone()))
                    .collect();
                self.xattr_changes(want, &have).kinds()
            }
            None => (false, false),
        };
        let (owner, group) = (differs(uid, &there.owner), differs(gid, &there.group));
        // `chown` takes a file's capability away: set again, it counts.
        let capability = (owner || group)
            && want
                .xattrs
                .iter()
                .flatten()
                .any(|x| x.name == "security.capability" && self.takes(&x.name));
        InPlace {
            owner,
            group,
            acls,
            xattrs: xattrs || capability,
            ..InPlace::default()
        }
    }

    /// Whether the ACLs, and the other extended attributes, of `name` in
    /// `dir` differ from those `entry` carries, as far as this receiver
    /// takes them (`-i` for a directory already there).
    pub fn xattrs_differ(
        &self,
        dir: &Dir,
        name: &std::ffi::OsStr,
        entry: &haul_proto::Entry,
    ) -> (bool, bool) {
        // Not on a filesystem that keeps none (they would differ forever).
        if self.said_unsupported.load(Ordering::Relaxed) {
            return (false, false);
        }
        match (entry.attrs.as_deref(), dir.xattrs_of(name)) {
            (Some(attrs), Ok(have)) => self.xattr_changes(attrs, &have).kinds(),
            _ => (false, false),
        }
    }

    /// The permission bits of `entry` a file here gets: the set-user-id
    /// bit only when the entry's owner is applied, set-group-id only when
    /// its group is (never a peer's set-id bits on a file owned by whoever
    /// runs this).
    pub fn mode_of(&self, entry: &haul_proto::Entry) -> u32 {
        let (uid, gid) = self.ids_of(entry);
        let mask = 0o1777
            | if uid.is_some() { 0o4000 } else { 0 }
            | if gid.is_some() { 0o2000 } else { 0 };
        entry.mode & mask
    }

    /// The permission bits of directory `entry` here: with its
    /// set-group-id bit (new files in it take its group: no privilege), as
    /// `rsync -p` keeps it — except on a node that takes no owners, which
    /// takes no peer's set-id bit at all (see [`AttrWriter::mode_of`]).
    pub fn dir_mode(&self, entry: &haul_proto::Entry) -> u32 {
        let setgid = self.policy.owners || self.policy.asked.is_some();
        // The owner can always enter, list and write it: a later run, or a
        // resumed one, must be able to (as on a file's way in).
        entry.mode & (0o1777 | if setgid { 0o2000 } else { 0 }) | 0o700
    }

    /// For a file already up to date at `name` in `dir` (found as `st`):
    /// brings its owner and group, and its extended attributes and ACLs,
    /// in line with the entry's, as rsync does: through a descriptor of
    /// that very file and only while it is still the file checked with no
    /// other links (they may be outside the root). The set-id bits and
    /// `security.capability` that `chown` clears are set again. Says what
    /// it changed (`-i`); `None` when something differs and could not be
    /// set (the file is then sent again and renamed over).
    pub fn refresh(
        &self,
        dir: &Dir,
        name: &std::ffi::OsStr,
        st: &Meta,
        entry: &haul_proto::Entry,
    ) -> Option<InPlace> {
        let Some(attrs) = entry.attrs.as_deref() else {
            return Some(InPlace::default());
        };
        let (uid, gid) = self.owners_of(attrs);
        let owner = uid.is_some_and(|u| u != st.uid);
        let group = gid.is_some_and(|g| g != st.gid);
        let changes = match (&attrs.xattrs, dir.xattrs_of(name)) {
            (None, _) => XattrChanges::default(),
            (Some(_), Ok(have)) => self.xattr_changes(attrs, &have),
            (Some(_), Err(_)) => return None,
        };
        if !owner && !group && changes.is_empty() {
            return Some(InPlace::default());
        }

        let same = |m: &Meta| m.nlink == 1 && (m.dev, m.ino, m.size) == (st.dev, st.ino, st.size);
        let Ok(Some(file)) = dir.regular_file_if(name, same) else {
            return None;
        };
        if owner || group {
            file.set_owner(uid, gid).ok()?;
            let mode = self.mode_of(entry);
            if mode & 0o6000 != 0 {
                file.set_mode(mode).ok()?;
            }
        }
        // Looked at again through the file checked (and `chown` took
        // `security.capability` away).
        let changes = match (&attrs.xattrs, file.xattrs()) {
            (None, _) => XattrChanges::default(),
            (Some(_), Ok(have)) => self.xattr_changes(attrs, &have),
            (Some(_), Err(_)) => return None,
        };
        // What is set (`-i`; a capability `chown` took away counts, as
        // rsync says).
        let (acls, xattrs) = changes.kinds();
        let set = changes
            .set
            .iter()
            .map(|x| file.set_xattr(x.name.as_bytes(), &x.value));
        let removed = changes.remove.iter().map(|n| file.remove_xattr(n));
        self.make(set.chain(removed)).ok()?;
        // Said only where they are kept (else they would differ forever).
        let kept = !self.said_unsupported.load(Ordering::Relaxed);
        Some(InPlace {
            owner,
            group,
            acls: acls && kept,
            xattrs: xattrs && kept,
            ..InPlace::default()
        })
    }

    /// The outcomes of changing attributes one at a time: one the
    /// filesystem does not support is said once and skipped (the others are
    /// still made); the first other error is returned, once every change
    /// was tried.
    fn make(&self, results: impl Iterator<Item = io::Result<()>>) -> io::Result<()> {
        let mut first = Ok(());
        for result in results {
            if let Err(e) = self.unsupported_is_said(result) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// Whether this receiver takes the attribute `name` a peer sent: never
    /// the hash cache's record (records are made here, by whoever hashed
    /// the file), only what it asked for, and `trusted.*`/`security.*`
    /// only where owners are taken (else said once).
    fn takes(&self, name: &str) -> bool {
        // A node (asked nothing) takes what either flag keeps: never an
        // SELinux label or the hash record, whatever a peer sends.
        if !kept(name, self.policy.asked.unwrap_or(ALL_XATTRS)) {
            return false;
        }
        let privileged = !(name.starts_with("user.") || ACLS.contains(&name));
        if privileged && !self.policy.owners {
            self.say_once(&self.said_privileged, "trusted.* and security.* attributes");
            return false;
        }
        true
    }

    /// Whether the attribute `name` found here is one `attrs` speaks for:
    /// of a kind the source listed whole and this receiver takes, so that
    /// the source lacking it means it goes.
    fn speaks_for(&self, attrs: &Attrs, name: &str) -> bool {
        let asked = self.policy.asked.unwrap_or(ALL_XATTRS);
        let listed = Keep {
            xattrs: attrs.all_xattrs && asked.xattrs,
            acls: attrs.all_acls && asked.acls,
            ..Keep::default()
        };
        let privileged = !(name.starts_with("user.") || ACLS.contains(&name));
        let unseen = name.starts_with("trusted.") && !attrs.all_trusted;
        kept(name, listed) && (!privileged || self.policy.owners) && !unseen
    }

    /// What differs between the attributes a file here has (`have`) and
    /// those `attrs` carries, as far as this receiver takes them.
    fn xattr_changes<'a>(&self, attrs: &'a Attrs, have: &Xattrs) -> XattrChanges<'a> {
        let Some(want) = &attrs.xattrs else {
            return XattrChanges::default();
        };
        let set = want
            .iter()
            .filter(|x| self.takes(&x.name))
            .filter(|x| {
                !have
                    .iter()
                    .any(|(n, v)| n == x.name.as_bytes() && *v == x.value)
            })
            .collect();
        let remove = have
            .iter()
            .filter(|(n, _)| {
                std::str::from_utf8(n)
                    .is_ok_and(|n| self.speaks_for(attrs, n) && !want.iter().any(|x| x.name == n))
            })
            .map(|(n, _)| n.clone())
            .collect();
        XattrChanges { set, remove }
    }

    /// A filesystem that keeps no extended attributes (or no ACLs) is said
    /// once, not failed: rsync warns and keeps the file too.
    fn unsupported_is_said(&self, result: io::Result<()>) -> io::Result<()> {
        match result {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                if !self.said_unsupported.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "extended attributes or ACLs not kept: the destination's filesystem does not support them ({e})"
                    );
                }
                Ok(())
            }
            other => other,
        }
    }

    /// Applies `attrs` to `target`: the owner and group first (a `chmod`
    /// after it sets the set-id bits `chown` cleared: see
    /// [`AttrWriter::mode_of`]), then the extended attributes this policy
    /// takes and this receiver asked for.
    pub fn apply(&self, attrs: Option<&Attrs>, target: Target<'_>) -> io::Result<()> {
        let Some(attrs) = attrs else {
            return Ok(());
        };
        if attrs.owner.is_some() || attrs.group.is_some() {
            let (uid, gid) = self.owners_of(attrs);
            if uid.is_some() || gid.is_some() {
                match target {
                    Target::File(f) => haul_root::file_set_owner(f, uid, gid)?,
                    Target::Dir(d) => d.set_owner(uid, gid)?,
                    Target::Link(d, name) => d.chown_nofollow(name, uid, gid)?,
                }
            } else if !self.policy.owners {
                self.say_once(&self.said_owners, "owners and groups");
            }
        }
        let Some(xattrs) = &attrs.xattrs else {
            return Ok(());
        };
        let set_one = |x: &Xattr| match target {
            Target::File(f) => haul_root::file_set_xattr(f, x.name.as_bytes(), &x.value),
            Target::Dir(d) => d.set_own_xattr(x.name.as_bytes(), &x.value),
            // A symlink's attributes are not set (see haul_root).
            Target::Link(..) => Ok(()),
        };
        self.make(xattrs.iter().filter(|x| self.takes(&x.name)).map(set_one))?;
        // What the source lacks goes: a directory already there may hold
        // anything, and a new file may have taken its directory's default
        // ACL as its own.
        if attrs.all_xattrs || attrs.all_acls {
            let have = match target {
                Target::File(f) => haul_root::file_xattrs(f)?,
                Target::Dir(d) => d.own_xattrs()?,
                Target::Link(..) => Vec::new(),
            };
            let remove_one = |n: &Vec<u8>| match target {
                Target::File(f) => haul_root::file_remove_xattr(f, n),
                Target::Dir(d) => d.remove_own_xattr(n),
                Target::Link(..) => Ok(()),
            };
            let gone = self.xattr_changes(attrs, &have).remove;
            self.make(gone.iter().map(remove_one))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
