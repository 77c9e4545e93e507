//! # The haul wire protocol
//!
//! This crate is haul's protocol with no I/O in it (like `quinn-proto`): typed
//! [`Message`]s, the byte framing that carries them ([`frame`]), and the rules a
//! receiver applies to every path a peer names ([`path`]). It has no tokio, no
//! sockets and no clock, so every rule here is tested and fuzzed on plain bytes.
//!
//! ## Goals
//! - Move files and trees so that nothing wrong or partial is ever delivered:
//!   every chunk carries a BLAKE3 digest checked on receipt, every file ends with
//!   a whole-file BLAKE3 hash checked before the file gets its final name.
//! - Resume: a receiver says which chunks it already holds (with their digests),
//!   the sender sends only the rest.
//! - No round trip per file: a sender keeps a window of files in flight.
//! - Zero copy: chunk payloads are raw bytes after a small header, so a sender
//!   can `sendfile(2)` them and a receiver can read them in one large read.
//! - Bounded: every length on the wire is checked against a limit before
//!   anything is allocated.
//!
//! ## Non-goals
//! - Encryption and server identity: the transport (TLS 1.3) provides them.
//! - Delta transfer inside changed files (rsync's rolling checksum).
//!
//! ## Framing
//! Every message is a frame: `len: u32 BE | kind: u8 | body[len - 1]`, with
//! `len <= MAX_FRAME_LEN`. Integers are big-endian; strings are `u32 BE length`
//! + UTF-8; digests are 32 raw bytes. A [`Message::Chunk`] frame is followed by
//!   exactly `len` raw payload bytes that are *not* part of the frame.
//!
//! ## Digests
//! A file is cut into chunks of `chunk_size` bytes (a power of two, at least
//! 1 KiB; the last chunk may be shorter). A chunk's digest is its BLAKE3
//! *chaining value* at its offset in the file, and the file hash is the
//! ordinary BLAKE3 hash of the whole file (what `b3sum` prints), computed from
//! the chunk chaining values by merging them up the BLAKE3 tree. A file of one
//! chunk uses its root hash as the chunk digest. So each byte is hashed once on
//! each side, and the file hash is checked without reading the file again.
//!
//! ## Message flow
//! ```text
//! client                                   server
//!   Hello{version, token, Push{dest}} ->
//!                                       <- Welcome{version}      (or Refused, then close)
//! v23: a session that speaks first (a push's offers, a pull's wants) does
//!       so right after Hello, over TLS and QUIC (plaintext TCP waits, so a
//!       TLS node's answer is told apart, and so do `--transport auto`'s
//!       racing first connections); the node reads them only once it
//!       welcomed the request, and the client reads Welcome or Refused first.
//! push: the client is the *sender*, the server the *receiver*.
//! pull: Hello{.., List{path, sums}} -> Listing{entry}... Bye   (one connection lists;
//!       v22: List{.., since: cursor} -> only what changed after the cursor where the
//!       node watches its root (`haul serve --watch`) and the cursor is its journal's,
//!       else everything; Cursor{cursor, changes_only} comes first, and counts for
//!       the client only once the listing reached Bye)
//!       with sums (v6, `--checksum`, `haul check`) each file's Listing is
//!       followed by Hashed{root}, its BLAKE3, or by FileError{Io}; v20:
//!       asked for owners, groups or xattrs, Takes{owners} comes first:
//!       whether the node sets owners and trusted.* on what it receives)
//!       Hello{.., Fetch{keep}} on each worker connection (v11: `keep` says
//!       which of owner, group, xattrs and ACLs its offers carry; v17:
//!       `rate_hint`, the rate the node's QUIC sender starts at, from the
//!       client's memory of the path or `--rate-hint`); the server
//!       is the sender:
//!       Want{id, path, dest, a..b} ->      (a window of wants ahead)
//!                                   <- Offer{id, ...} and the flow below
//! push --checksum (v6): the client first lists DEST with sums, offers only
//!       files whose BLAKE3 differs, in Hello{.., Push{dest, checksum: true}}:
//!       the receiver then skips nothing for its size and mtime (v19: and
//!       files of the same content with other metadata, as Offer{content},
//!       below).
//! push --ignore-existing / --size-only / -u (v10): Push{.., skip} carries the
//!       client's SkipRule; the receiver keeps what the rule keeps (the
//!       quick check otherwise), as the client's own dry run decides.
//! push --backup (v13): Push{.., backup} (bit 5 of its flags byte, then the
//!       backup directory and suffix), Prune{dest, backup} and
//!       Link{dest, backup, skip}: what the node replaces or removes under
//!       dest is kept as rsync's -b, --backup-dir and --suffix say.
//! push -c (v19): a file the node's listing with sums showed with the
//!       source's size and BLAKE3, whose mtime or mode differ there (or
//!       whose attributes are kept), is offered whole with
//!       Offer{.., content: BLAKE3}; the node reads its file again and, if it
//!       still holds that content, sets its mtime, mode and attributes in
//!       place and answers Need{skip} and Done{message: what it set}; if not,
//!       Need as for any offer. Relayed and served offers never carry it.
//! push --delete, after a push that failed nowhere (v5):
//!       Hello{.., Prune{dest}} -> then, one at a time,
//!       Remove{path} ->  <- Done{ok, message}   (path under dest; never .haul)
//!       ... Bye
//! push -H, after the push (v13), for the further names its walk listed as
//!       HardLink entries (no data sent) whose file verified:
//!       Hello{.., Link{dest}} -> then, a window ahead, answered in order,
//!       Link{path, target} ->  <- Done{ok, root[0] = 1 if already linked, message}
//!       ... Bye             (both under dest; target a regular file, beneath the root)
//! jump (v21), to a node the client cannot reach itself, through one its
//!       operator allowed to reach it (`haul serve --jump-to HOST:PORT`):
//!       Hello{.., Jump{to: "host:port"}} ->
//!                                       <- Welcome   (once its TCP connection to `to` is up;
//!                                                     Refused: not allowed, or unreachable)
//!       Piped{bytes} ->  <- Piped{bytes}   (each way, in order, at most 64 KiB each: the
//!                                          client's own TLS session with `to`, handshake,
//!                                          token and all, which this node cannot read)
//!       Bye ->  <- Bye                      (a direction ended; both: the node closes)
//!
//! sender                                   receiver
//!   Offer{id, entry, chunks a..b}   ->                 (up to a window of offers ahead;
//!                                                      v11: entry.attrs, see below)
//!                                   <- Need{id, have[(index, digest)], skip}
//!   Chunk{id, i, len, digest}+bytes ->                 (each chunk not held, any order)
//!   RangeEnd{id, chunks}            ->                 (how many chunks this round sent)
//!                                   <- RangeStatus{id, bad[]}   (bad chunks are sent again)
//!   Commit{id, root}                ->                 (sender knows every chunk digest)
//!                                   <- Done{id, ok, root, message}
//!   ... more offers ...
//!   Bye                             ->                 (v23: as soon as every file in
//!                                                      flight is committed, before their Done)
//!                                   <- Done...  Bye    (the verdicts still owed, then goodbye)
//! ```
//! A closing sender says `Bye` once nothing it holds waits for more than
//! its `Done` (v23); the receiver ends the commits under way — those whose
//! writes were still outstanding too — answers each, and then says `Bye`.
//! The goodbye so costs no round trip of its own.
//! The receiver answers `RangeStatus` once `RangeEnd` arrived and as many
//! chunks as it counts arrived and were checked: chunks may arrive in any
//! order, before or after their `RangeEnd`, so a transport may carry each
//! chunk on a stream of its own. Messages of one file otherwise follow
//! cause and effect (a `Need` after its `Offer`, a `Commit` after a clean
//! `RangeStatus`), so only the order of control messages is relied on.
//!
//! A directory or symlink offer is answered by `Done` at once. A range offer
//! (`a..b` not the whole file, used by `--streams`) ends at a clean
//! `RangeStatus`; the side that drives the transfer then asks for the commit on
//! the connection whose range finished last (`Finish{id}` from a fetching
//! receiver, answered by a `Commit` computed by reading the whole file; a
//! pushing sender sends `Commit` itself once all its ranges are clean) and
//! sends `Release{id}` for the other ranges, so the peer can forget them.
//!
//! ## Owners, groups, xattrs and ACLs (v11)
//! An `Entry` ends with a flag byte: 0 when it carries nothing beyond mode
//! and mtime, else bit 0 an owner and bit 1 a group (`u32 id | str name`,
//! the name empty under `--numeric-ids`), bit 2 extended attributes
//! (`u16 count | (str name | u32 len | value)*`, at most 1024 of them, names
//! of 1–255 bytes, values of at most 64 KiB: Linux's own limits). POSIX ACLs
//! travel as their `system.posix_acl_access`/`_default` attributes. A pushing
//! client puts in what its flags keep; a fetching one asks in `Fetch{keep}`.
//! The receiver applies them to the staged file before it gets its name
//! (`chown` before `chmod`, so set-id bits survive), and only as far as its
//! own policy allows: owners and groups when it runs as root (a node also
//! only with `--keep-owners`), `user.*` and ACLs always, `trusted.*` and
//! `security.*` only where owners are allowed. What it left out is said
//! once in the `Done` of the first entry it touched (`ok` with a message).
//! In a fan-out the entry's seal covers all of it, so no relay can change an
//! owner on the way. Bit 3 marks a sparse file (`-S`), bit 4 a first name
//! of hard links (`-H`, v13); v18: bit 5 says the attributes list every one
//! `-X` keeps, bit 6 every ACL (`-A`) — a receiver removes the others of
//! those kinds, as rsync does, from a file already up to date, a directory
//! already there and a new file (which may have inherited a default ACL);
//! v19: bit 7 says that list speaks for `trusted.*` too (the source could
//! see them: `CAP_SYS_ADMIN` in the initial user namespace) — without it a
//! receiver removes none of those.
//!
//! ## Compressed chunks (v11, `-z`)
//! A `Chunk` header's flag byte (after the digest) has bit 0 for a seal and
//! bit 1 for a packed payload: then a `u32` follows, the chunk's own length,
//! and the `len` payload bytes (fewer than that) are one zstd frame that
//! decompresses to exactly that many (at most `MAX_CHUNK_LEN`). Version 12:
//! no payload at all (`len` 0) is a chunk of that many zeros (`-S`, any
//! chunk of zeros from a packing sender, and every relay's); an entry's
//! attribute byte has bit 3 for `-S`: the receiver writes its zeros as
//! holes where it asked for them too. Digests and seals are of
//! the chunk itself. Only the connection's compression layer
//! (`haul_transport::packing`) reads the bit: a pushing client packs when
//! asked, a node packs what it sends for `Fetch{compress}` (the level,
//! 1–22; 0 for none), and every reader unpacks whatever comes packed.
//!
//! ## Fan-out
//! ```text
//! client → every node (control, token-authenticated):
//!   Hello{.., Admit{dest, origin, checksum, backup}} ->  (v18: `backup`, `-b` on each node)
//!                          <- Welcome, Ticket{ticket}      (valid while this connection lives)
//!   Forward{[(addr, fingerprint, ticket, edge)...]} ->     (the node's children in the plan)
//!                          <- KeepAlive, Progress{bytes, entries} ... Report{ok, failed, bytes, message, lost}
//!                          <- Unsealed{edge, entries, chunks}   (v15: evidence against a sender)
//!                          <- Quiet{edge, millis}              (v16: nothing came over an edge)
//!   Bye ->                                                 (the ticket is revoked)
//! client → its children, relay → its children (data, TLS pinned to the fingerprint):
//!   Hello{token "", Relayed{ticket, stripe, edge}} -> then the push flow above
//! ```
//! A relay offers downstream each entry it was offered, as soon as it has
//! staged it, and sends each chunk only after it verified it (its staging
//! file is the source); it sends `Bye` downstream after its upstream did.
//!
//! Liveness: a node sends `Progress` or `KeepAlive` on its control
//! connection at least every 250 ms (`Progress` at most once a second), so
//! the client suspects a node silent for about two seconds
//! (`haul_plan::Liveness`) and routes around it without waiting out the
//! idle timeout; a suspect is sent `Forward{[]}` (its children went
//! elsewhere) and keeps its ticket, so it can rejoin if it speaks again. A
//! node refuses a `Forward` that names itself (by its ticket). A relayed
//! session superseded by a newer one of the same stripe ends once its
//! sender has been silent for two seconds, releasing the files it held.
//!
//! Cut links (v16): the sender of every relayed session sends something at
//! least every 250 ms, busy or not (a keepalive when it has nothing else),
//! so a receiver that hears nothing over its edge for two seconds knows
//! the path is gone. It tells the client `Quiet{edge, millis}` (again every
//! half second while the silence lasts); the client moves the node off
//! that sender when the sender's own control connection was heard
//! throughout (a link cut between two live nodes; a silent sender is
//! routed around as above).
//!
//! Lying relays (v15): the client names every sending edge it sets up (a
//! random `edge` in each `Forward` target and in its own `Relayed`), and
//! the relay presents it in its `Relayed`. A node that refuses something
//! arriving over an edge for a bad seal (an entry, a chunk, a chunk seal
//! in `Sealed`, a root seal in `Vouched`) tells the client `Unsealed{edge,
//! ..}`: honest relays pass on only what verified against the origin's
//! seals, so that is evidence against the sender (or the link to it). The
//! client evicts that relay — its children go elsewhere, it is fed on as
//! a leaf — and reports it. An edge the client never named (a replayed
//! ticket) implicates nobody.
//!
//! Striped plans (v7): each data connection carries one [`Stripe`]
//! (`Relayed{ticket, stripe}`; `Forward` targets name theirs), and
//! [`Stripe::carries`] says which part of every entry that is: directories
//! in every stripe, a file of at least `count` chunks as one of `count`
//! contiguous chunk ranges, smaller files and symlinks whole in one stripe
//! (by a hash of the path). So a node gets each large file's ranges from
//! several senders, none of which can make the whole-file `Commit`. The
//! receiver puts the file together instead:
//! ```text
//!   Offer{id, entry, a..b, seal} ... RangeEnd ->   <- RangeStatus{id, []}
//!                                   <- Done{id, ok, root}   (this stripe completed the file:
//!                                                             committed with the root of the
//!                                                             digests the origin sealed)
//!                                   <- Release{id}          (other stripes still to come)
//! ```
//! A relay's forwards of stripe `s` say `Bye` once its upstream of stripe
//! `s` did; a node holds everything once every stripe's upstream did.
//!
//! Seals ([`seal`]): `Admit` carries the public key the client made for this
//! transfer. On every relayed connection each `Offer` carries the origin's
//! seal of its entry and each `Chunk` the origin's seal of its digest,
//! passed on unchanged by relays; a receiver refuses an unsealed entry
//! (`FileError{Unsealed}`) and answers an unsealed chunk as bad. Chunks the
//! receiver already holds get their seals in `Sealed` (after `Need{have}`;
//! after `Need{skip}` for every chunk of the range, and the receiver sends
//! `Done` once all were named), so it can relay them in turn.
//! ```text
//!   Offer{id, entry, a..b, seal}      ->
//!                                   <- Need{id, skip, have}
//!   Sealed{id, [(i, digest, seal)]}   ->               (held chunks, or all of a skipped file)
//!   Chunk{id, i, len, digest, seal}+bytes ->
//!   ... RangeStatus{id, []} ...
//!   Vouched{id, root, seal}           ->               (v9: the origin's seal of the root)
//!   Commit{id, root}                  ->
//! ```
//! Chunk seals say each chunk is one the origin read; they do not say the
//! chunks are one version (a writer may change the file while the origin
//! reads it). So the origin seals the file's root too (v9, `Vouched`), and
//! only after it confirmed the file held still while read: a receiver in a
//! fan-out commits a whole file only under a root the origin vouched for,
//! and a relay's `Commit` downstream waits until the origin's `Vouched`
//! reached it (and fails the file downstream if the origin dropped that
//! version instead). A skipped whole file gets its `Vouched` before its
//! `Sealed`, so the node can relay it. A stripe of a striped plan (a range
//! with no `Commit`: the receiver puts the file together from every
//! stripe's sender) gets `Vouched` for the whole file's root after its
//! clean `RangeStatus`, once the origin confirmed every stripe of the file
//! held still at one identity; the receiver assembles the file only then,
//! and only if its chunks make that root.
//!
//! A side busy for long (re-verifying a large partial file, hashing a whole
//! file, syncing a batch) sends `KeepAlive` every third of the idle timeout,
//! so the other side's timeouts catch only real silence.
//!
//! A peer that breaks a rule gets `Refused`/`FileError` with a reason and, for
//! framing errors, the connection is closed; other connections go on.

pub mod digest;
pub mod frame;
pub mod message;
pub mod path;
pub mod seal;

pub use frame::{decode_frame, encode, DecodeError, Decoded, MAX_FRAME_LEN};
pub use message::{
    Attrs, Backup, ChunkHeader, ChunkSeal, Cursor, Digest, Entry, EntryKind, ErrorCode, Keep,
    Message, OriginKey, Principal, RelayTarget, Request, Seal, SkipRule, Stripe, Ticket, Xattr,
    MAX_PIPED, MAX_SEALS, MAX_STRIPES, MAX_XATTRS, MAX_XATTR_NAME, MAX_XATTR_VALUE,
    PROTOCOL_VERSION,
};
pub use path::{
    check_entry_path, is_state_dir, symlink_target_refused_anywhere, validate_entry_path,
    validate_rel_path, validate_symlink_target, PathError, MAX_NAME_LEN, MAX_PATH_LEN, STATE_DIR,
};

/// Largest chunk a peer may announce (payload bytes after a [`Message::Chunk`]).
pub const MAX_CHUNK_LEN: u32 = 64 << 20;
/// Smallest chunk size (one BLAKE3 chunk).
pub const MIN_CHUNK_SIZE: u32 = 1024;
