//! The messages peers exchange (see the crate docs for the flow).

/// Protocol version spoken by this build. A peer with another version is refused.
///
/// Version 2: `RangeEnd` counts the chunks sent in its round, so chunks may
/// arrive in any order (a transport may carry each on its own stream).
/// Version 3: fan-out (`Admit`, `Relayed`, `Ticket`, `Forward`, `Report`).
/// Version 4: fan-out seals: the origin's key in `Admit`, a seal on every
/// relayed `Offer` and chunk, `Sealed` for chunks a node already holds.
/// Version 5: `Prune` and `Remove` (`haul push --delete`).
/// Version 6: `--checksum`: `List{sums}` answered with `Hashed` after each
/// file, and `Push{checksum}`/`Admit{checksum}` (no file skipped for its
/// size and mtime).
/// Version 7: striped fan-out: `Relayed{stripe}` and `Forward` targets
/// with a [`Stripe`] each; a receiver assembles a file from the stripes of
/// several senders (a clean stripe is answered with `Done` by the session
/// whose stripe completed the file, `Release` by the others).
/// Version 8: `Push{replace_dirs}` (`--force`, `--delete`): the byte that
/// carried `checksum` is a set of flags (bit 0 `checksum`, bit 1
/// `replace_dirs`); a sender confirms that a file did not change while it
/// was read before it sends `Commit` (no wire change: a changed file is a
/// `FileError` and, pushed, a new `Offer`).
/// Version 9: [`Message::Vouched`]: in a fan-out the origin seals a file's
/// root (its whole-file BLAKE3) once it confirmed the file held still while
/// read, and a receiver commits a relayed file only under a root so sealed
/// (a torn read at the origin is never committed downstream).
/// Version 10: `Push{skip}`: bits 2–4 of `Push`'s flags byte carry the
/// client's [`SkipRule`] (`--ignore-existing`, `--size-only`, `-u`), so the
/// node skips what the client's rule skips; a version 9 node would have
/// ignored them and overwritten, hence the new version.
/// Version 12: `-S`: a packed chunk with no payload is a chunk of zeros,
/// `Keep` bit 5 and an entry's attribute bit 3 ask for holes (a version 11
/// build of this same stop would read a chunk of zeros as a bad zstd frame).
/// Version 11: `-z`: a chunk's payload may be zstd-compressed
/// ([`ChunkHeader::packed`], bit 1 of its seal byte), and `Fetch` asks the
/// node to compress what it sends. An [`Entry`] may carry [`Attrs`] (owner, group, extended
/// attributes and POSIX ACLs: rsync's `-o`, `-g`, `-X`, `-A`) after its
/// chunk size, and `List` and `Fetch` say which of them the client keeps
/// ([`Keep`]; `List`'s flag byte carries it in bits 1–7, which it fills).
/// Version 13: `-H`: [`EntryKind::HardLink`] in listings (asked for by
/// `Keep` bit 6), and [`Request::Link`] with [`Message::Link`]: the links
/// a push makes once every file verified.
/// Version 14: [`ChunkHeader::from_record`] (bit 2 of a chunk's seal byte):
/// the sender took the chunk's digest from its hash cache, hashing nothing.
/// Version 15: every fan-out sending edge has a name the client picked
/// ([`RelayTarget::edge`], carried in `Relayed`), and a node names the edge
/// whose data failed the origin's seal in [`Message::Unsealed`]: the
/// client evicts the relay that sent it. `Report` names the forwards that
/// ended with entries failed (`short`).
/// Version 16: a fan-out's sending edges carry a keepalive at least every
/// 250 ms whatever the sender is doing, and a node that hears nothing over
/// one for two seconds tells the client [`Message::Quiet`]: the client
/// moves it off that sender when the sender itself still answers (a link
/// cut between two live nodes). A version 15 client would refuse `Quiet`.
/// Version 17: `Fetch{rate_hint}` and `Push{rate_hint}`: the goodput the
/// client remembers of the path (or `--rate-hint`): a fetching node's QUIC
/// controller starts at it, and a pushed-to node opens its QUIC receive
/// window for it at once; 0 for none.
/// Version 18: [`Attrs::all_xattrs`] and [`Attrs::all_acls`] (bits 5 and 6
/// of an entry's attribute flags): a receiver brings the attributes and
/// ACLs of a file already up to date in line with the source's, removing
/// those the source lacks. `Admit{backup}`: `-b` for fan-outs, each node
/// keeping what the relayed push replaces there.
/// Version 19: `Offer{content}`: a pushing `-c` sender that found the
/// receiver listing a file of the same size and BLAKE3 offers it with that
/// BLAKE3; a receiver whose file there still hashes to it brings its
/// mtime, mode and attributes in line and answers `Need{skip}` (rsync's
/// `-c`), else receives it as usual. Direct pushes only: a relayed or
/// served offer with one is a protocol error. [`Attrs::all_trusted`] (bit
/// 7 of an entry's attribute flags): only a source that could read
/// `trusted.*` has a receiver remove those it lacks.
/// Version 20: [`Message::Takes`]: a node's listing asked for owners,
/// groups or extended attributes starts by saying whether that node sets
/// owners (and `trusted.*`/`security.*`) on what it receives (root and
/// `--keep-owners`): a push's dry run itemizes as it would.
/// Version 21: [`Request::Jump`] and [`Message::Piped`]: a node its
/// operator allowed (`haul serve --jump-to ADDR`) passes a connection on to
/// another node, the bytes of the client's own TLS session with that node
/// carried as `Piped` messages (a site the client cannot reach itself).
/// Version 22: `List{since}` and [`Message::Cursor`]: a node that watches
/// its root (`haul serve --watch`) lists only what changed after the
/// client's cursor, and ends every listing asked with one by a new cursor
/// (a downstream daemon's runs list what is new without a tree walk).
/// Version 23: a closing sender says `Bye` as soon as every file it holds
/// is committed, before their `Done`s (the receiver ends those commits,
/// answers each, then says `Bye`); a client's session speaks right after
/// its `Hello` (a push's offers, a pull's wants) and reads the node's
/// `Welcome` or `Refused` first — each saves a round trip.
pub const PROTOCOL_VERSION: u16 = 23;

/// A place in a watching node's journal of changes ([`Request::List`]'s
/// `since`, [`Message::Cursor`]): opaque to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// Which run of the node's journal.
    pub epoch: u64,
    /// The last change behind it.
    pub seq: u64,
}

/// Most bytes one [`Message::Piped`] carries.
pub const MAX_PIPED: usize = 64 << 10;

/// Which metadata beyond mode, mtime and symlinks a transfer keeps:
/// rsync's `-o`, `-g`, `-X` and `-A` (and `--numeric-ids`). A sender puts
/// only these in each [`Entry`]'s [`Attrs`]; a receiver applies what an
/// entry carries as far as its own policy allows (version 11).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keep {
    /// `-o`/`--owner`: the owner, by name (and id).
    pub owner: bool,
    /// `-g`/`--group`: the group, by name (and id).
    pub group: bool,
    /// `-X`/`--xattrs`: extended attributes (other than ACLs).
    pub xattrs: bool,
    /// `-A`/`--acls`: POSIX ACLs, as their `system.posix_acl_*` attributes.
    pub acls: bool,
    /// `--numeric-ids`: owners and groups by number only (no names sent).
    pub numeric_ids: bool,
    /// `-S`/`--sparse`: chunks of zeros are not sent ([`ChunkHeader::packed`]
    /// with no payload) and files are written with holes ([`Attrs::sparse`]).
    pub sparse: bool,
    /// `-H`/`--hard-links`: a listing names a file's further names as
    /// [`EntryKind::HardLink`] (version 13).
    pub hard_links: bool,
}

impl Keep {
    /// Whether anything beyond haul's defaults is kept.
    pub fn any(self) -> bool {
        self.owner || self.group || self.xattrs || self.acls || self.sparse
    }

    /// Whether owners, groups, attributes or ACLs are kept (what a listing
    /// of sizes, mtimes and modes does not show).
    pub fn owners_or_attributes(self) -> bool {
        self.owner || self.group || self.xattrs || self.acls
    }

    /// The flag bits on the wire.
    pub fn bits(self) -> u8 {
        u8::from(self.owner)
            | (u8::from(self.group) << 1)
            | (u8::from(self.xattrs) << 2)
            | (u8::from(self.acls) << 3)
            | (u8::from(self.numeric_ids) << 4)
            | (u8::from(self.sparse) << 5)
            | (u8::from(self.hard_links) << 6)
    }

    /// From the flag byte (`None` when a bit this version does not know is set).
    pub fn from_bits(b: u8) -> Option<Self> {
        (b < 128).then_some(Self {
            owner: b & 1 != 0,
            group: b & 2 != 0,
            xattrs: b & 4 != 0,
            acls: b & 8 != 0,
            numeric_ids: b & 16 != 0,
            sparse: b & 32 != 0,
            hard_links: b & 64 != 0,
        })
    }
}

/// An owner or a group as a sender names it: its number, and its name
/// when it has one and names are sent (a receiver maps the name to its own
/// number, as rsync does without `--numeric-ids`; an unknown name falls
/// back to the number).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The sender's uid or gid.
    pub id: u32,
    /// Its name on the sender (empty: none, or `--numeric-ids`).
    pub name: String,
}

/// One extended attribute: its full name (`user.x`, `system.posix_acl_access`…)
/// and its value, both bounded on the wire ([`MAX_XATTR_NAME`], [`MAX_XATTR_VALUE`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xattr {
    /// The name with its namespace.
    pub name: String,
    /// The raw value.
    pub value: Vec<u8>,
}

/// Longest extended attribute name accepted (Linux's `XATTR_NAME_MAX`).
pub const MAX_XATTR_NAME: usize = 255;
/// Largest extended attribute value accepted (Linux's `XATTR_SIZE_MAX`).
pub const MAX_XATTR_VALUE: usize = 64 << 10;
/// Most extended attributes one entry may carry.
pub const MAX_XATTRS: usize = 1024;

/// What an entry carries beyond mode and mtime when its transfer keeps it
/// ([`Keep`]). Everything here comes from a peer: a receiver bounds it
/// (the decoder does), and applies an owner or a privileged namespace only
/// when its own policy says so.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attrs {
    /// The owner (`-o`).
    pub owner: Option<Principal>,
    /// The group (`-g`).
    pub group: Option<Principal>,
    /// Extended attributes and ACLs (`-X`, `-A`); `None` when not kept (a
    /// kept but empty set is `Some` and empty).
    pub xattrs: Option<Vec<Xattr>>,
    /// `-S`: the receiver writes this file's runs of zeros as holes.
    pub sparse: bool,
    /// `-H` (version 13): the listing names this file again later, as
    /// [`EntryKind::HardLink`]s to this entry's path (a first name).
    pub linked: bool,
    /// Version 18: `xattrs` lists every attribute `-X` keeps that the
    /// source has (none was left out): a receiver bringing a file already
    /// there in line removes the others of those namespaces, as rsync
    /// `-X` does.
    pub all_xattrs: bool,
    /// Version 18: as `all_xattrs`, for the ACLs (`-A`): an ACL the source
    /// has none of is removed at the receiver.
    pub all_acls: bool,
    /// Version 19: with `all_xattrs`, the list speaks for `trusted.*` too:
    /// the source could read them (it holds `CAP_SYS_ADMIN` in the initial
    /// user namespace). A source that cannot see them never has a receiver
    /// remove them.
    pub all_trusted: bool,
}

/// Which files already at the destination are left as they are, as
/// rsync's flags say; the default is the quick check (same size and
/// mtime). A receiver applies it to every file offered (version 10).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SkipRule {
    /// `--ignore-existing`: any regular file already there is kept.
    pub ignore_existing: bool,
    /// `--size-only`: a file of the same size is kept, whatever its mtime.
    pub size_only: bool,
    /// `-u`/`--update`: a file newer there than the source's is kept.
    pub update: bool,
}

impl SkipRule {
    /// The flag bits on the wire (bits 2, 3 and 4 of `Push`'s byte).
    pub fn bits(self) -> u8 {
        (u8::from(self.ignore_existing) << 2)
            | (u8::from(self.size_only) << 3)
            | (u8::from(self.update) << 4)
    }

    /// From the flag byte.
    pub fn from_bits(b: u8) -> Self {
        Self {
            ignore_existing: b & 4 != 0,
            size_only: b & 8 != 0,
            update: b & 16 != 0,
        }
    }
}

/// rsync's `--backup`, `--backup-dir` and `--suffix` (version 13): a file
/// (or symlink) a transfer replaces or `--delete` removes is kept under
/// another name instead — its name with `suffix` beside it, or under `dir`
/// (relative to the transfer's destination) at the same relative path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Backup {
    /// `--backup-dir`, relative to the destination (empty: beside the file).
    pub dir: String,
    /// `--suffix` (rsync's `~` without a directory, nothing with one).
    pub suffix: String,
}

impl Backup {
    /// The name a file `name` is kept under.
    pub fn name_for(&self, name: &str) -> String {
        format!("{name}{}", self.suffix)
    }

    /// True for a destination entry `--delete` leaves alone because it is
    /// a backup: beneath the backup directory, or (without one) named with
    /// the suffix (rsync's protect rule `P *~`). `path` is relative to the
    /// transfer's destination.
    pub fn protects(&self, path: &str) -> bool {
        if self.dir.is_empty() {
            return path
                .rsplit('/')
                .next()
                .is_some_and(|name| name.ends_with(self.suffix.as_str()));
        }
        path == self.dir
            || path
                .strip_prefix(self.dir.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    }

    /// Checks what a peer sent (and what a user gave): a suffix that is a
    /// part of one name (no `/`, NUL, at most 64 bytes), not empty without a
    /// directory, and a directory path as [`crate::validate_rel_path`] allows.
    pub fn check(&self) -> Result<(), String> {
        if self.suffix.len() > 64 || self.suffix.contains(['/', '\\', '\0']) {
            return Err(format!(
                "--suffix {:?}: give at most 64 bytes without / (a part of a name)",
                self.suffix
            ));
        }
        if self.dir.is_empty() && self.suffix.is_empty() {
            return Err("--suffix cannot be empty without --backup-dir (the backup would be the file itself)".into());
        }
        crate::validate_rel_path(&self.dir)
            .map(|_| ())
            .map_err(|e| format!("--backup-dir {:?}: {e}", self.dir))
    }
}

/// A credential one node issues for one fan-out transfer: whoever presents
/// it may push into that transfer's destination, while the client that
/// asked for it stays connected. 32 random bytes.
pub type Ticket = [u8; 32];

/// A 32-byte BLAKE3 hash or chaining value.
pub type Digest = [u8; 32];

/// An Ed25519 signature by a fan-out's origin (see [`crate::seal`]).
pub type Seal = [u8; 64];

/// The Ed25519 public key of a fan-out's origin, one per transfer.
pub type OriginKey = [u8; 32];

/// Most chunk seals one [`Message::Sealed`] carries (100 bytes each).
pub const MAX_SEALS: usize = 16384;

/// The origin's seal of one chunk, for a chunk the receiver already holds
/// (in [`Message::Sealed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSeal {
    /// Chunk index in the file.
    pub index: u32,
    /// The chunk's digest at the origin.
    pub digest: Digest,
    /// The origin's signature of it.
    pub seal: Seal,
}

/// What a client asks of a server in its [`Message::Hello`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The client will send entries into `dest` (relative to the server root; empty = root).
    Push {
        /// Destination directory under the server root.
        dest: String,
        /// `--checksum`: the client already compared contents (by the
        /// node's `List{sums}`), so every file it offers is received —
        /// none is skipped for having the same size and mtime — but for
        /// an `Offer{content}` whose content is still there (version 19).
        checksum: bool,
        /// `--force`/`--delete`: a non-empty directory where the client
        /// has a file or symlink is removed to make room (version 8).
        replace_dirs: bool,
        /// Which files already there are kept (version 10).
        skip: SkipRule,
        /// `--backup`: what a file replaced is kept as (version 13).
        backup: Option<Backup>,
        /// The rate (bytes per second) the client's sender starts at
        /// (version 17): the node's QUIC receive window opens for it at
        /// once (up to 160 MiB) rather than growing with what arrived; 0:
        /// none.
        rate_hint: u64,
    },
    /// The client wants the listing of `path` (relative to the server root):
    /// the server answers with [`Message::Listing`]s, then [`Message::Bye`].
    List {
        /// Path under the server root; a trailing `/` means "its contents".
        path: String,
        /// `--checksum` and `haul check`: the server hashes every file it
        /// lists and follows its `Listing` with [`Message::Hashed`] (or
        /// with `FileError{Io}` when the file cannot be read).
        sums: bool,
        /// What each listed entry carries beyond mode and mtime (version
        /// 11): a pull makes directories and symlinks from the listing.
        keep: Keep,
        /// Version 22: list only what changed after this cursor, where the
        /// node can tell (it watches its root, and the cursor is from its
        /// journal's current run), else everything; either way the
        /// listing starts with [`Message::Cursor`]. `None`: everything,
        /// and no cursor.
        since: Option<Cursor>,
    },
    /// The client will ask for files with [`Message::Want`]; the server is the sender.
    Fetch {
        /// What each offered entry carries beyond mode and mtime (version 11).
        keep: Keep,
        /// `-z` (version 11): the zstd level the node compresses chunks at
        /// (1–22; 0: not compressed).
        compress: u8,
        /// The rate (bytes per second) the node's sender starts at over
        /// QUIC (version 17): what a pull over this path settled at before,
        /// as the client remembers it, or `--rate-hint`; 0: none, start up
        /// as usual. A hint is checked as the controller's first rounds
        /// run, and falls back to what the path delivers.
        rate_hint: u64,
    },
    /// Fan-out control: the client admits this node to a transfer into
    /// `dest`. The node answers `Welcome`, then [`Message::Ticket`]; the
    /// client may then send [`Message::Forward`]s; the node sends
    /// [`Message::Report`] when its part is done. The ticket lives as long
    /// as this connection.
    Admit {
        /// Destination directory under the server root.
        dest: String,
        /// The public key of this transfer's origin: every entry and chunk
        /// relayed into the transfer must carry its seal.
        origin: OriginKey,
        /// `--checksum`: the client compared contents with every node's
        /// (`List{sums}`): no file relayed into this transfer is skipped
        /// for its size and mtime.
        checksum: bool,
        /// `--backup` (version 18): what a file a relayed push replaces is
        /// kept as, on this node.
        backup: Option<Backup>,
    },
    /// Fan-out data: a push into the destination of the transfer that
    /// issued `ticket` (the Hello's token is empty: a node's token never
    /// travels to another node).
    Relayed {
        /// The ticket the node issued for this transfer.
        ticket: Ticket,
        /// A striped plan: the one stripe of the transfer this connection
        /// carries (`None`: all of it).
        stripe: Option<Stripe>,
        /// The sending edge, as the client named it ([`RelayTarget::edge`]).
        edge: u64,
    },
    /// `haul push --delete`: the client names, with [`Message::Remove`],
    /// entries under `dest` its source does not have; the node removes each
    /// (beneath its root, never its state directory) and answers each with
    /// [`Message::Done`] (`ok`, or why not), until [`Message::Bye`].
    Prune {
        /// Destination directory under the server root.
        dest: String,
        /// `--backup`: what is deleted is kept as this says (version 13).
        backup: Option<Backup>,
    },
    /// `haul push -H`, once every file verified: the client names, with
    /// [`Message::Link`], each further name of a file the push delivered;
    /// the node makes each a hard link to that file (both beneath `dest`,
    /// resolved beneath its root, the target a regular file) and answers
    /// each with [`Message::Done`] (`ok`, or why not), until [`Message::Bye`].
    Link {
        /// Destination directory under the server root.
        dest: String,
        /// `--backup`: what a link replaces is kept as this says.
        backup: Option<Backup>,
        /// `--ignore-existing`, `--size-only`, `-u`: a file already at a
        /// name that the rule keeps is left as it is.
        skip: SkipRule,
    },
    /// A connection passed on (version 21): the node connects to `to`
    /// (`host:port`, one its operator named with `haul serve --jump-to`)
    /// over TCP, answers `Welcome` once that connection is up (`Refused`
    /// when it may not or cannot), and from then on both sides send only
    /// [`Message::Piped`]: what the client sends is written to `to`, what
    /// `to` sends comes back, until either side sends [`Message::Bye`]
    /// (its direction ended). The client runs its own TLS session, token
    /// and all, with the node at `to` inside: this node sees only its
    /// ciphertext.
    Jump {
        /// The node to reach from here, `host:port`.
        to: String,
    },
}

/// A node a relay forwards to, as the client tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayTarget {
    /// `host:port` of the downstream node.
    pub addr: String,
    /// The downstream's TLS key fingerprint the relay must see (empty:
    /// plaintext, only when the client itself pushes in plaintext).
    pub fingerprint: String,
    /// The ticket the downstream issued for this transfer.
    pub ticket: Ticket,
    /// A striped plan: the stripe sent to it (`None`: the whole transfer).
    pub stripe: Option<Stripe>,
    /// The name the client gave this sending edge (random, new for every
    /// forward it asks): the relay presents it in `Relayed`, and the
    /// downstream names it when what came over it failed the origin's seal
    /// ([`Message::Unsealed`]), so the client knows which relay sent it —
    /// and a replayed ticket, which knows no edge, implicates nobody.
    pub edge: u64,
}

/// One stripe of a striped fan-out: which part of every entry a connection
/// carries. The client and every relay cut entries the same way:
/// - a directory goes in every stripe (each stripe's files need it);
/// - a file of at least `count` chunks is cut into `count` contiguous chunk
///   ranges whose lengths differ by at most one, range `index` in stripe
///   `index`;
/// - a smaller file (and an empty one) and a symlink go whole in one stripe,
///   picked by a hash of the path, so many small files spread evenly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stripe {
    /// This stripe, `0..count`.
    pub index: u32,
    /// Stripes in the plan, `1..=MAX_STRIPES`.
    pub count: u32,
}

/// Most stripes a plan may have.
pub const MAX_STRIPES: u32 = 64;

impl Stripe {
    /// The chunks `first..end` of `entry` this stripe carries, or `None`
    /// when it carries none of it (for a directory: `0..0`).
    pub fn carries(&self, entry: &Entry) -> Option<(u32, u32)> {
        let k = self.count.max(1);
        let chunks = entry.chunk_count();
        match entry.kind {
            EntryKind::Dir => Some((0, 0)),
            EntryKind::File if chunks >= k => {
                let at = |s: u32| (u64::from(chunks) * u64::from(s) / u64::from(k)) as u32;
                Some((at(self.index), at(self.index + 1)))
            }
            _ => (path_hash(&entry.path) % u64::from(k) == u64::from(self.index))
                .then_some((0, chunks)),
        }
    }
}

/// FNV-1a over a path's bytes: stable across builds and machines.
fn path_hash(path: &str) -> u64 {
    path.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Kind of a tree entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory (created even when empty).
    Dir,
    /// A symbolic link with its target, recreated as a link.
    Symlink {
        /// The link target, as stored in the link.
        target: String,
    },
    /// `-H` (version 13): a further name of a regular file listed earlier
    /// in the same listing (the first of its names in walk order). No data
    /// is sent for it: once that file is delivered, the receiver makes this
    /// name a hard link to it. Only listings carry it; it is never offered.
    HardLink {
        /// The first name's path, in the same namespace as this entry's.
        target: String,
    },
}

/// One file, directory or symlink offered by a sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path relative to the transfer destination, `/`-separated.
    pub path: String,
    /// Kind of entry.
    pub kind: EntryKind,
    /// Size in bytes (0 for non-files).
    pub size: u64,
    /// Unix permission bits (`0o7777` mask).
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds part.
    pub mtime_nsec: u32,
    /// Chunk size used for this file (power of two, >= 1 KiB).
    pub chunk_size: u32,
    /// Owner, group and extended attributes, when the transfer keeps them
    /// (version 11; `None` otherwise).
    pub attrs: Option<Box<Attrs>>,
}

impl Entry {
    /// Its name as `-i` and `-v` show it: a symlink's with ` -> TARGET`, a
    /// hard link's with ` => FIRST NAME` (rsync's `%n%L`).
    pub fn named(&self) -> String {
        match &self.kind {
            EntryKind::Symlink { target } => format!("{} -> {target}", self.path),
            EntryKind::HardLink { target } => format!("{} => {target}", self.path),
            _ => self.path.clone(),
        }
    }

    /// The modification time as a `SystemTime` (a peer's nanoseconds
    /// clamped to a valid value; times before 1970 kept).
    pub fn mtime(&self) -> std::time::SystemTime {
        use std::time::{Duration, UNIX_EPOCH};
        let nanos = Duration::new(0, self.mtime_nsec.min(999_999_999));
        if self.mtime_sec >= 0 {
            UNIX_EPOCH + Duration::from_secs(self.mtime_sec.unsigned_abs()) + nanos
        } else {
            UNIX_EPOCH - Duration::from_secs(self.mtime_sec.unsigned_abs()) + nanos
        }
    }

    /// Number of chunks of this entry (a 0-byte file has none).
    pub fn chunk_count(&self) -> u32 {
        if self.chunk_size == 0 {
            return 0;
        }
        let n = self.size.div_ceil(u64::from(self.chunk_size));
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Length of chunk `index` (the last one may be short).
    pub fn chunk_len(&self, index: u32) -> u32 {
        let start = u64::from(index) * u64::from(self.chunk_size);
        let len = self
            .size
            .saturating_sub(start)
            .min(u64::from(self.chunk_size));
        // Bounded by chunk_size, which is a u32.
        len as u32
    }
}

/// Header of one chunk; `len` raw payload bytes follow the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// File id from the [`Message::Offer`].
    pub id: u32,
    /// Chunk index in the file.
    pub index: u32,
    /// Payload length.
    pub len: u32,
    /// BLAKE3 chaining value of the payload at its offset (root hash for 1-chunk files).
    pub digest: Digest,
    /// The origin's seal of `digest` (fan-out only).
    pub seal: Option<Seal>,
    /// `-z` (version 11): the payload is one zstd frame of `len` bytes that
    /// decompresses to exactly this many, the chunk's own length; with no
    /// payload at all (`len` 0), the chunk is that many zeros (`-S`). Only a
    /// connection's compression layer sets or reads it (haul-transport's
    /// `packing`); transports carry `len` bytes whatever it says, and
    /// sessions see chunks as they are.
    pub packed: Option<u32>,
    /// Version 14: the sender took `digest` from its hash-cache record of
    /// the file and hashed nothing to send this chunk. Only a hint about
    /// the sender's work (the receiver verifies the chunk all the same): a
    /// receiver sharing the sender's cores may spend the one it leaves free
    /// (haul-node's chunk work).
    pub from_record: bool,
}

/// Why a peer refused a request or a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Token missing or wrong.
    Unauthorized,
    /// Protocol version not supported.
    Version,
    /// A path breaks the rules (escape, NUL, too long...).
    BadPath,
    /// The named path does not exist.
    NotFound,
    /// An I/O error on the peer (disk full, permission denied...).
    Io,
    /// The peer broke the protocol.
    Protocol,
    /// The peer is shutting down.
    ShuttingDown,
    /// An entry the peer left out by policy (a special file, a name that
    /// cannot travel, a symlink no receiver recreates): a warning, not a
    /// failure.
    Skipped,
    /// Fan-out: an entry or chunk without a valid seal of the transfer's
    /// origin (altered on the way, or by a relay).
    Unsealed,
    /// The source file changed while it was read, every time it was
    /// tried: no version held still long enough to be sent. (Added after
    /// version 9 without a new version: a build that does not know it reads
    /// [`ErrorCode::Other`], a failure like any other.)
    Changed,
    /// A code this build does not know.
    Other(u16),
}

impl ErrorCode {
    /// Wire value.
    pub fn to_u16(self) -> u16 {
        match self {
            Self::Unauthorized => 1,
            Self::Version => 2,
            Self::BadPath => 3,
            Self::NotFound => 4,
            Self::Io => 5,
            Self::Protocol => 6,
            Self::ShuttingDown => 7,
            Self::Skipped => 8,
            Self::Unsealed => 9,
            Self::Changed => 10,
            Self::Other(v) => v,
        }
    }

    /// From the wire value.
    pub fn from_u16(v: u16) -> Self {
        match v {
            1 => Self::Unauthorized,
            2 => Self::Version,
            3 => Self::BadPath,
            4 => Self::NotFound,
            5 => Self::Io,
            6 => Self::Protocol,
            7 => Self::ShuttingDown,
            8 => Self::Skipped,
            9 => Self::Unsealed,
            10 => Self::Changed,
            v => Self::Other(v),
        }
    }
}

/// Every message of the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Client's first message.
    Hello {
        /// Client protocol version.
        version: u16,
        /// Authentication token (empty when none).
        token: String,
        /// What the client wants.
        request: Request,
    },
    /// Server accepts the [`Message::Hello`].
    Welcome {
        /// Server protocol version.
        version: u16,
    },
    /// The peer refuses the whole connection; it closes after this.
    Refused {
        /// Reason class.
        code: ErrorCode,
        /// Human-readable reason.
        message: String,
    },
    /// Makes `path` a hard link to the regular file at `target`, both under
    /// a [`Request::Link`]'s destination (what was at `path` is replaced).
    Link {
        /// The new name, under the destination.
        path: String,
        /// The file it names, under the destination.
        target: String,
    },
    /// Removes the file, link or empty directory at `path` under a
    /// [`Request::Prune`]'s destination.
    Remove {
        /// Path under the destination.
        path: String,
    },
    /// One entry of a listing (answer to [`Request::List`]).
    Listing {
        /// The entry; its path is where it lands under the client's destination.
        entry: Entry,
    },
    /// In a listing with sums: the BLAKE3 of the file whose `Listing`
    /// came just before, read by the server when it listed it.
    Hashed {
        /// BLAKE3 of the whole file.
        root: Digest,
    },
    /// A fetching receiver asks for chunks `first..end` of `path`.
    Want {
        /// Id the sender's [`Message::Offer`] will use.
        id: u32,
        /// Path under the server root.
        path: String,
        /// Name the entry gets in the offer (its path under the destination).
        dest: String,
        /// First chunk wanted.
        first: u32,
        /// One past the last chunk wanted (`u32::MAX`: to the end).
        end: u32,
    },
    /// Sender offers an entry (and for files, chunks `first..end`).
    Offer {
        /// Connection-scoped id the rest of this file's messages use.
        id: u32,
        /// The entry.
        entry: Entry,
        /// First chunk this connection will carry.
        first: u32,
        /// One past the last chunk this connection will carry.
        end: u32,
        /// The origin's seal of the entry (fan-out only).
        seal: Option<Seal>,
        /// `-c`, pushed (version 19): the whole-file BLAKE3 the sender read
        /// and found the receiver listing under the entry's path, so a
        /// receiver still holding it brings the file's metadata in line
        /// instead of receiving it again. Whole-file offers of a direct
        /// push only. (Boxed: it would make every message larger.)
        content: Option<Box<Digest>>,
    },
    /// Fan-out, sender → receiver: the origin's seals of chunks the
    /// receiver holds (its `Need{have}`, or every chunk of a file it
    /// skipped, which it then answers with `Done` once every chunk of the
    /// range was named), so it can relay them. A chunk the sender cannot
    /// seal is named with 64 zero bytes.
    Sealed {
        /// File id.
        id: u32,
        /// Chunks in order, at most [`MAX_SEALS`] per message.
        chunks: Vec<ChunkSeal>,
    },
    /// Receiver tells what it already holds of the offered range.
    Need {
        /// File id.
        id: u32,
        /// The identical file is already in place: nothing to send.
        skip: bool,
        /// Chunks already verified on the receiver, with their digests.
        have: Vec<(u32, Digest)>,
    },
    /// A chunk header; the payload follows.
    Chunk(ChunkHeader),
    /// Sender has sent every chunk of the range the receiver needs: the
    /// round ends when this many chunks arrived, in whatever order.
    RangeEnd {
        /// File id.
        id: u32,
        /// Chunks sent in this round (since the `Need`, or the last
        /// `RangeStatus` that asked for resends).
        chunks: u32,
    },
    /// Receiver's verdict on the range: these chunks failed verification.
    RangeStatus {
        /// File id.
        id: u32,
        /// Chunks to send again.
        bad: Vec<u32>,
    },
    /// Receiver asks for the commit of a file whose ranges came over several connections.
    Finish {
        /// File id.
        id: u32,
    },
    /// Either side: this id needs nothing more on this connection (a clean
    /// range of a split file whose commit happens elsewhere). The peer forgets it.
    Release {
        /// File id.
        id: u32,
    },
    /// Fan-out, sender → receiver: the origin's seal of the whole file's
    /// root, given by the origin only after it confirmed the file did not
    /// change while it was read, and passed on unchanged by relays. Sent
    /// just before `Commit` (a receiver in a fan-out commits only the root
    /// sealed so), before the `Sealed` of a whole file the receiver
    /// skipped (so it can relay it in turn), and after a stripe's clean
    /// range (a striped file is assembled only under that root).
    Vouched {
        /// File id.
        id: u32,
        /// BLAKE3 of the whole file.
        root: Digest,
        /// The origin's seal of `root` for this entry ([`crate::seal`]).
        seal: Seal,
    },
    /// Sender's whole-file hash; the receiver checks it, then renames into place.
    Commit {
        /// File id.
        id: u32,
        /// BLAKE3 of the whole file.
        root: Digest,
    },
    /// Receiver's final word on an entry.
    Done {
        /// File id.
        id: u32,
        /// Delivered and verified (or already identical).
        ok: bool,
        /// BLAKE3 of the delivered file (zeros for non-files or failures).
        root: Digest,
        /// Why it failed, empty when ok.
        message: String,
    },
    /// Either side: this entry failed; the connection goes on.
    FileError {
        /// File id.
        id: u32,
        /// Reason class.
        code: ErrorCode,
        /// Human-readable reason.
        message: String,
    },
    /// No more offers (from the sender) / all done (from the receiver).
    Bye,
    /// Fan-out control, node → client: the ticket of this transfer.
    Ticket {
        /// The credential (see [`Ticket`]).
        ticket: Ticket,
    },
    /// Fan-out control, client → node: the nodes this node forwards every
    /// entry of the transfer to (replacing the previous list: a re-route
    /// after a node failed). Each new target gets the whole transfer.
    Forward {
        /// Downstream nodes.
        targets: Vec<RelayTarget>,
    },
    /// Fan-out control, node → client, about once a second while data
    /// arrives, and once when it holds everything: how far this node got.
    /// Between them the node sends `KeepAlive` so that something arrives
    /// at least every 250 ms (the client's liveness check).
    Progress {
        /// Payload bytes received so far.
        bytes: u64,
        /// Entries delivered so far.
        entries: u64,
        /// Its upstream said `Bye`: it holds everything (its forwards may
        /// still run; `Report` follows when they end).
        complete: bool,
    },
    /// Fan-out control, node → client: this node's part is done (its
    /// upstream said `Bye` and its forwards ended).
    Report {
        /// Entries delivered and verified (or already identical) here.
        ok: u64,
        /// Entries that failed here.
        failed: u64,
        /// Payload bytes received.
        bytes: u64,
        /// Forwards that failed, and why (empty when all went well).
        message: String,
        /// Addresses of the forwards that gave up (the client re-routes
        /// past them).
        lost: Vec<String>,
        /// Paths (under the destination) whose copy on this node turned out
        /// to differ from the origin's when it was to be relayed: this node
        /// holds them damaged, and relayed none of their bad bytes.
        damaged: Vec<String>,
        /// Addresses of the forwards that ran to the end with entries
        /// failed (v15): those nodes may lack them, whatever their own
        /// reports say (an entry this relay could not open was never
        /// offered there), so the client fills them in.
        short: Vec<String>,
    },
    /// Fan-out control, node → client: data that arrived over sending edge
    /// `edge` failed the origin's seal here (refused, asked again): the
    /// evidence against the relay that sent it. Sent when the counts
    /// change, at most every heartbeat; the counts are totals so far.
    Unsealed {
        /// The edge, as `Relayed` named it.
        edge: u64,
        /// Entries (offers, roots) whose seal failed.
        entries: u32,
        /// Chunks whose seal failed.
        chunks: u32,
    },
    /// Fan-out control, node → client (v16): nothing at all has come over
    /// sending edge `edge` for `millis` ms (its sender keeps it alive every
    /// 250 ms), though its session expects more. Sent again, with the
    /// silence grown, about every half second while it lasts.
    Quiet {
        /// The edge, as `Relayed` named it.
        edge: u64,
        /// How long it has been silent.
        millis: u32,
    },
    /// Either side, while busy for a long time (re-verifying a large partial
    /// file, hashing a whole file, syncing a batch): "still here". Ignored.
    KeepAlive,
    /// Node → client, first in its answer to a [`Request::List`] whose
    /// `keep` asked for owners, groups or extended attributes (version
    /// 20): whether this node
    /// sets owners and groups (and with them `trusted.*`/`security.*`) on
    /// what it receives — it runs as root and its operator said
    /// `--keep-owners`. A push's dry run says what that node would change.
    Takes {
        /// Owners and groups are set.
        owners: bool,
    },
    /// Bytes of a connection passed on ([`Request::Jump`], version 21), in
    /// order; at most [`MAX_PIPED`] at a time.
    Piped {
        /// The bytes.
        data: Vec<u8>,
    },
    /// Node → client, first in a listing asked with `since` (after
    /// `Takes`; version 22): where the node's journal stood when the
    /// listing began; the next `List{since}` names it once this listing
    /// reached its `Bye`.
    Cursor {
        /// The place.
        cursor: Cursor,
        /// The listing held only what changed after the cursor asked
        /// with (else it held everything).
        changes_only: bool,
    },
}
