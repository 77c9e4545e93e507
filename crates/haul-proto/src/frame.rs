//! Bytes ↔ [`Message`]s. `len: u32 BE | kind: u8 | body`.
//!
//! [`decode_frame`] never allocates more than the frame it was given, and
//! rejects any length above its limit before looking further.

use crate::message::{
    Attrs, Backup, ChunkHeader, ChunkSeal, Cursor, Digest, Entry, EntryKind, ErrorCode, Keep,
    Message, Principal, RelayTarget, Request, Seal, Stripe, Xattr, MAX_PIPED, MAX_SEALS,
    MAX_STRIPES, MAX_XATTRS, MAX_XATTR_NAME, MAX_XATTR_VALUE,
};

/// Largest frame body accepted (kind byte included).
pub const MAX_FRAME_LEN: u32 = 4 << 20;
/// Largest string inside a frame.
const MAX_STRING: u32 = 64 << 10;

/// Why bytes could not be decoded. The connection that sent them is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The length prefix is 0 or above [`MAX_FRAME_LEN`].
    #[error("frame length {0} is outside 1..={MAX_FRAME_LEN}")]
    BadLength(u32),
    /// Unknown message kind byte.
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    /// The body ended early or has bytes left over.
    #[error("malformed {0} message")]
    Malformed(&'static str),
    /// A string is not UTF-8 or too long.
    #[error("bad string in {0} message")]
    BadString(&'static str),
}

/// Result of trying to decode from a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A whole message, and how many bytes it used.
    Message(Message, usize),
    /// More bytes are needed; at least this many in total.
    NeedMore(usize),
}

mod kind {
    pub const HELLO: u8 = 1;
    pub const WELCOME: u8 = 2;
    pub const REFUSED: u8 = 3;
    pub const OFFER: u8 = 4;
    pub const NEED: u8 = 5;
    pub const CHUNK: u8 = 6;
    pub const RANGE_END: u8 = 7;
    pub const RANGE_STATUS: u8 = 8;
    pub const FINISH: u8 = 9;
    pub const COMMIT: u8 = 10;
    pub const DONE: u8 = 11;
    pub const FILE_ERROR: u8 = 12;
    pub const BYE: u8 = 13;
    pub const LISTING: u8 = 14;
    pub const WANT: u8 = 15;
    pub const RELEASE: u8 = 16;
    pub const KEEPALIVE: u8 = 17;
    pub const TICKET: u8 = 18;
    pub const FORWARD: u8 = 19;
    pub const REPORT: u8 = 20;
    pub const PROGRESS: u8 = 21;
    pub const SEALED: u8 = 22;
    pub const REMOVE: u8 = 23;
    pub const HASHED: u8 = 24;
    pub const FORWARD_STRIPES: u8 = 25;
    pub const VOUCHED: u8 = 26;
    pub const LINK: u8 = 27;
    pub const UNSEALED: u8 = 28;
    pub const QUIET: u8 = 29;
    pub const TAKES: u8 = 30;
    pub const PIPED: u8 = 31;
    pub const CURSOR: u8 = 32;
}

/// Fewest bytes one encoded [`RelayTarget`] takes (two empty strings, a
/// ticket and an edge).
const TARGET_MIN: usize = 4 + 4 + 32 + 8;

/// Appends the frame for `msg` to `out`.
pub fn encode(msg: &Message, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    let mut w = Writer(out);
    match msg {
        Message::Hello {
            version,
            token,
            request,
        } => {
            w.u8(kind::HELLO);
            w.u16(*version);
            w.str(token);
            match request {
                Request::Push {
                    dest,
                    checksum,
                    replace_dirs,
                    skip,
                    backup,
                    rate_hint,
                } => {
                    w.u8(1);
                    w.str(dest);
                    w.u8(u8::from(*checksum)
                        | (u8::from(*replace_dirs) << 1)
                        | skip.bits()
                        | (u8::from(backup.is_some()) << 5));
                    if let Some(b) = backup {
                        w.backup_parts(b);
                    }
                    w.u64(*rate_hint);
                }
                Request::List {
                    path,
                    sums,
                    keep,
                    since,
                } => {
                    w.u8(2);
                    w.str(path);
                    w.u8(u8::from(*sums) | (keep.bits() << 1));
                    match since {
                        None => w.u8(0),
                        Some(c) => {
                            w.u8(1);
                            w.u64(c.epoch);
                            w.u64(c.seq);
                        }
                    }
                }
                Request::Fetch {
                    keep,
                    compress,
                    rate_hint,
                } => {
                    w.u8(3);
                    w.u8(keep.bits());
                    w.u8(*compress);
                    w.u64(*rate_hint);
                }
                Request::Admit {
                    dest,
                    origin,
                    checksum,
                    backup,
                } => {
                    w.u8(4);
                    w.str(dest);
                    w.0.extend_from_slice(origin);
                    // Bit 0 `--checksum`, bit 5 a backup rule (as `Push`'s).
                    w.u8(u8::from(*checksum) | (u8::from(backup.is_some()) << 5));
                    if let Some(b) = backup {
                        w.backup_parts(b);
                    }
                }
                Request::Relayed {
                    ticket,
                    stripe: None,
                    edge,
                } => {
                    w.u8(5);
                    w.0.extend_from_slice(ticket);
                    w.u64(*edge);
                }
                Request::Relayed {
                    ticket,
                    stripe: Some(stripe),
                    edge,
                } => {
                    w.u8(7);
                    w.0.extend_from_slice(ticket);
                    w.u32(stripe.index);
                    w.u32(stripe.count);
                    w.u64(*edge);
                }
                Request::Prune { dest, backup } => {
                    w.u8(6);
                    w.str(dest);
                    w.backup(backup.as_ref());
                }
                Request::Link { dest, backup, skip } => {
                    w.u8(8);
                    w.str(dest);
                    w.backup(backup.as_ref());
                    w.u8(skip.bits());
                }
                Request::Jump { to } => {
                    w.u8(9);
                    w.str(to);
                }
            }
        }
        Message::Welcome { version } => {
            w.u8(kind::WELCOME);
            w.u16(*version);
        }
        Message::Refused { code, message } => {
            w.u8(kind::REFUSED);
            w.u16(code.to_u16());
            w.str(message);
        }
        Message::Offer {
            id,
            entry,
            first,
            end,
            seal,
            content,
        } => {
            w.u8(kind::OFFER);
            w.u32(*id);
            w.entry(entry);
            w.u32(*first);
            w.u32(*end);
            w.seal(seal.as_ref());
            w.digest_opt(content.as_deref());
        }
        Message::Sealed { id, chunks } => {
            w.u8(kind::SEALED);
            w.u32(*id);
            w.u32(chunks.len() as u32);
            for c in chunks {
                w.u32(c.index);
                w.0.extend_from_slice(&c.digest);
                w.0.extend_from_slice(&c.seal);
            }
        }
        Message::Need { id, skip, have } => {
            w.u8(kind::NEED);
            w.u32(*id);
            w.u8(u8::from(*skip));
            w.u32(have.len() as u32);
            for (index, digest) in have {
                w.u32(*index);
                w.0.extend_from_slice(digest);
            }
        }
        Message::Chunk(h) => {
            w.u8(kind::CHUNK);
            w.u32(h.id);
            w.u32(h.index);
            w.u32(h.len);
            w.0.extend_from_slice(&h.digest);
            // The seal's flag byte also says (bit 1) that a raw length
            // follows, and (bit 2) that the digest came from a record.
            let mut flags = u8::from(h.seal.is_some());
            if h.packed.is_some() {
                flags |= 2;
            }
            if h.from_record {
                flags |= 4;
            }
            w.u8(flags);
            if let Some(s) = &h.seal {
                w.0.extend_from_slice(s);
            }
            if let Some(raw) = h.packed {
                w.u32(raw);
            }
        }
        Message::RangeEnd { id, chunks } => {
            w.u8(kind::RANGE_END);
            w.u32(*id);
            w.u32(*chunks);
        }
        Message::RangeStatus { id, bad } => {
            w.u8(kind::RANGE_STATUS);
            w.u32(*id);
            w.u32(bad.len() as u32);
            for b in bad {
                w.u32(*b);
            }
        }
        Message::Finish { id } => {
            w.u8(kind::FINISH);
            w.u32(*id);
        }
        Message::Release { id } => {
            w.u8(kind::RELEASE);
            w.u32(*id);
        }
        Message::Commit { id, root } => {
            w.u8(kind::COMMIT);
            w.u32(*id);
            w.0.extend_from_slice(root);
        }
        Message::Vouched { id, root, seal } => {
            w.u8(kind::VOUCHED);
            w.u32(*id);
            w.0.extend_from_slice(root);
            w.0.extend_from_slice(seal);
        }
        Message::Done {
            id,
            ok,
            root,
            message,
        } => {
            w.u8(kind::DONE);
            w.u32(*id);
            w.u8(u8::from(*ok));
            w.0.extend_from_slice(root);
            w.str(message);
        }
        Message::FileError { id, code, message } => {
            w.u8(kind::FILE_ERROR);
            w.u32(*id);
            w.u16(code.to_u16());
            w.str(message);
        }
        Message::Bye => w.u8(kind::BYE),
        Message::KeepAlive => w.u8(kind::KEEPALIVE),
        Message::Ticket { ticket } => {
            w.u8(kind::TICKET);
            w.0.extend_from_slice(ticket);
        }
        Message::Forward { targets } => {
            // Version 3's form when no target is striped.
            let striped = targets.iter().any(|t| t.stripe.is_some());
            w.u8(if striped {
                kind::FORWARD_STRIPES
            } else {
                kind::FORWARD
            });
            w.u32(targets.len() as u32);
            for t in targets {
                w.str(&t.addr);
                w.str(&t.fingerprint);
                w.0.extend_from_slice(&t.ticket);
                w.u64(t.edge);
                if striped {
                    let s = t.stripe.unwrap_or(Stripe { index: 0, count: 1 });
                    w.u32(s.index);
                    w.u32(s.count);
                }
            }
        }
        Message::Progress {
            bytes,
            entries,
            complete,
        } => {
            w.u8(kind::PROGRESS);
            w.u64(*bytes);
            w.u64(*entries);
            w.u8(u8::from(*complete));
        }
        Message::Unsealed {
            edge,
            entries,
            chunks,
        } => {
            w.u8(kind::UNSEALED);
            w.u64(*edge);
            w.u32(*entries);
            w.u32(*chunks);
        }
        Message::Quiet { edge, millis } => {
            w.u8(kind::QUIET);
            w.u64(*edge);
            w.u32(*millis);
        }
        Message::Takes { owners } => {
            w.u8(kind::TAKES);
            w.u8(u8::from(*owners));
        }
        Message::Piped { data } => {
            w.u8(kind::PIPED);
            w.u32(data.len() as u32);
            w.0.extend_from_slice(data);
        }
        Message::Cursor {
            cursor,
            changes_only,
        } => {
            w.u8(kind::CURSOR);
            w.u64(cursor.epoch);
            w.u64(cursor.seq);
            w.u8(u8::from(*changes_only));
        }
        Message::Report {
            ok,
            failed,
            bytes,
            message,
            lost,
            damaged,
            short,
        } => {
            w.u8(kind::REPORT);
            w.u64(*ok);
            w.u64(*failed);
            w.u64(*bytes);
            w.str(message);
            w.u32(lost.len() as u32);
            for addr in lost {
                w.str(addr);
            }
            w.u32(damaged.len() as u32);
            for path in damaged {
                w.str(path);
            }
            w.u32(short.len() as u32);
            for addr in short {
                w.str(addr);
            }
        }
        Message::Listing { entry } => {
            w.u8(kind::LISTING);
            w.entry(entry);
        }
        Message::Hashed { root } => {
            w.u8(kind::HASHED);
            w.0.extend_from_slice(root);
        }
        Message::Remove { path } => {
            w.u8(kind::REMOVE);
            w.str(path);
        }
        Message::Link { path, target } => {
            w.u8(kind::LINK);
            w.str(path);
            w.str(target);
        }
        Message::Want {
            id,
            path,
            dest,
            first,
            end,
        } => {
            w.u8(kind::WANT);
            w.u32(*id);
            w.str(path);
            w.str(dest);
            w.u32(*first);
            w.u32(*end);
        }
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// Decodes one frame from the front of `buf`.
pub fn decode_frame(buf: &[u8]) -> Result<Decoded, DecodeError> {
    let Some(prefix) = buf.get(..4) else {
        return Ok(Decoded::NeedMore(4));
    };
    let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    if len == 0 || len > MAX_FRAME_LEN {
        return Err(DecodeError::BadLength(len));
    }
    let total = 4 + len as usize;
    let Some(body) = buf.get(4..total) else {
        return Ok(Decoded::NeedMore(total));
    };
    let msg = decode_body(body)?;
    Ok(Decoded::Message(msg, total))
}

fn decode_body(body: &[u8]) -> Result<Message, DecodeError> {
    let (&k, rest) = body.split_first().ok_or(DecodeError::Malformed("empty"))?;
    let name = kind_name(k)?;
    let mut r = Reader { buf: rest, name };
    let msg = match k {
        kind::HELLO => {
            let version = r.u16()?;
            let token = r.str()?;
            let request = match r.u8()? {
                1 => {
                    let dest = r.str()?;
                    let flags = r.u8()?;
                    if flags > 63 {
                        return Err(DecodeError::Malformed(name));
                    }
                    let backup = match flags & 32 != 0 {
                        true => Some(r.backup_parts()?),
                        false => None,
                    };
                    Request::Push {
                        dest,
                        checksum: flags & 1 != 0,
                        replace_dirs: flags & 2 != 0,
                        skip: crate::SkipRule::from_bits(flags),
                        backup,
                        rate_hint: r.rate_hint()?,
                    }
                }
                2 => {
                    let path = r.str()?;
                    let flags = r.u8()?;
                    let keep = Keep::from_bits(flags >> 1).ok_or(DecodeError::Malformed(name))?;
                    // Absent in an older peer's Hello: its version is what
                    // the node refuses it for.
                    let since = match r.buf.is_empty() {
                        true => None,
                        false => match r.bool()? {
                            false => None,
                            true => Some(Cursor {
                                epoch: r.u64()?,
                                seq: r.u64()?,
                            }),
                        },
                    };
                    Request::List {
                        path,
                        sums: flags & 1 != 0,
                        keep,
                        since,
                    }
                }
                3 => {
                    let keep = Keep::from_bits(r.u8()?).ok_or(DecodeError::Malformed(name))?;
                    let compress = r.u8()?;
                    if compress > 22 {
                        return Err(DecodeError::Malformed(name));
                    }
                    Request::Fetch {
                        keep,
                        compress,
                        rate_hint: r.rate_hint()?,
                    }
                }
                4 => {
                    let dest = r.str()?;
                    let origin = r.digest()?;
                    let flags = r.u8()?;
                    if flags & !0b10_0001 != 0 {
                        return Err(DecodeError::Malformed(name));
                    }
                    let backup = match flags & 32 != 0 {
                        true => Some(r.backup_parts()?),
                        false => None,
                    };
                    Request::Admit {
                        dest,
                        origin,
                        checksum: flags & 1 != 0,
                        backup,
                    }
                }
                5 => Request::Relayed {
                    ticket: r.digest()?,
                    stripe: None,
                    edge: r.u64()?,
                },
                7 => Request::Relayed {
                    ticket: r.digest()?,
                    stripe: Some(r.stripe()?),
                    edge: r.u64()?,
                },
                6 => Request::Prune {
                    dest: r.str()?,
                    backup: r.backup()?,
                },
                8 => {
                    let (dest, backup, bits) = (r.str()?, r.backup()?, r.u8()?);
                    let skip = crate::SkipRule::from_bits(bits);
                    if skip.bits() != bits {
                        return Err(DecodeError::Malformed(name));
                    }
                    Request::Link { dest, backup, skip }
                }
                9 => Request::Jump { to: r.str()? },
                _ => return Err(DecodeError::Malformed(name)),
            };
            Message::Hello {
                version,
                token,
                request,
            }
        }
        kind::WELCOME => Message::Welcome { version: r.u16()? },
        kind::REFUSED => Message::Refused {
            code: ErrorCode::from_u16(r.u16()?),
            message: r.str()?,
        },
        kind::OFFER => Message::Offer {
            id: r.u32()?,
            entry: r.entry()?,
            first: r.u32()?,
            end: r.u32()?,
            seal: r.seal()?,
            content: r.digest_opt()?.map(Box::new),
        },
        kind::SEALED => {
            let id = r.u32()?;
            let n = r.count(100)?;
            if n > MAX_SEALS {
                return Err(DecodeError::Malformed(name));
            }
            let mut chunks = Vec::with_capacity(n);
            for _ in 0..n {
                chunks.push(ChunkSeal {
                    index: r.u32()?,
                    digest: r.digest()?,
                    seal: r.arr()?,
                });
            }
            Message::Sealed { id, chunks }
        }
        kind::NEED => {
            let id = r.u32()?;
            let skip = r.bool()?;
            let n = r.count(36)?;
            let mut have = Vec::with_capacity(n);
            for _ in 0..n {
                have.push((r.u32()?, r.digest()?));
            }
            Message::Need { id, skip, have }
        }
        kind::CHUNK => {
            let (id, index, len, digest) = (r.u32()?, r.u32()?, r.u32()?, r.digest()?);
            let flags = r.u8()?;
            if flags > 7 {
                return Err(DecodeError::Malformed(name));
            }
            let seal = if flags & 1 != 0 { Some(r.arr()?) } else { None };
            let packed = if flags & 2 != 0 {
                let raw = r.u32()?;
                // A chunk is at most `MAX_CHUNK_LEN`, never empty.
                // Packed only when it shrinks: the wire length is smaller.
                if raw == 0 || raw > crate::MAX_CHUNK_LEN || len >= raw {
                    return Err(DecodeError::Malformed(name));
                }
                Some(raw)
            } else {
                None
            };
            Message::Chunk(ChunkHeader {
                id,
                index,
                len,
                digest,
                seal,
                packed,
                from_record: flags & 4 != 0,
            })
        }
        kind::RANGE_END => Message::RangeEnd {
            id: r.u32()?,
            chunks: r.u32()?,
        },
        kind::RANGE_STATUS => {
            let id = r.u32()?;
            let n = r.count(4)?;
            let mut bad = Vec::with_capacity(n);
            for _ in 0..n {
                bad.push(r.u32()?);
            }
            Message::RangeStatus { id, bad }
        }
        kind::FINISH => Message::Finish { id: r.u32()? },
        kind::RELEASE => Message::Release { id: r.u32()? },
        kind::COMMIT => Message::Commit {
            id: r.u32()?,
            root: r.digest()?,
        },
        kind::VOUCHED => Message::Vouched {
            id: r.u32()?,
            root: r.digest()?,
            seal: r.arr()?,
        },
        kind::DONE => Message::Done {
            id: r.u32()?,
            ok: r.bool()?,
            root: r.digest()?,
            message: r.str()?,
        },
        kind::FILE_ERROR => Message::FileError {
            id: r.u32()?,
            code: ErrorCode::from_u16(r.u16()?),
            message: r.str()?,
        },
        kind::BYE => Message::Bye,
        kind::KEEPALIVE => Message::KeepAlive,
        kind::TICKET => Message::Ticket {
            ticket: r.digest()?,
        },
        kind::FORWARD | kind::FORWARD_STRIPES => {
            let striped = k == kind::FORWARD_STRIPES;
            let n = r.count(if striped { TARGET_MIN + 8 } else { TARGET_MIN })?;
            let mut targets = Vec::with_capacity(n);
            for _ in 0..n {
                targets.push(RelayTarget {
                    addr: r.str()?,
                    fingerprint: r.str()?,
                    ticket: r.digest()?,
                    edge: r.u64()?,
                    stripe: if striped { Some(r.stripe()?) } else { None },
                });
            }
            Message::Forward { targets }
        }
        kind::PROGRESS => Message::Progress {
            bytes: r.u64()?,
            entries: r.u64()?,
            complete: r.bool()?,
        },
        kind::UNSEALED => Message::Unsealed {
            edge: r.u64()?,
            entries: r.u32()?,
            chunks: r.u32()?,
        },
        kind::QUIET => Message::Quiet {
            edge: r.u64()?,
            millis: r.u32()?,
        },
        kind::TAKES => Message::Takes { owners: r.bool()? },
        kind::CURSOR => Message::Cursor {
            cursor: Cursor {
                epoch: r.u64()?,
                seq: r.u64()?,
            },
            changes_only: r.bool()?,
        },
        kind::PIPED => {
            let n = r.u32()? as usize;
            if n > MAX_PIPED {
                return Err(DecodeError::Malformed(name));
            }
            Message::Piped {
                data: r.take(n)?.to_vec(),
            }
        }
        kind::REPORT => {
            let (ok, failed, bytes, message) = (r.u64()?, r.u64()?, r.u64()?, r.str()?);
            let n = r.count(4)?;
            let mut lost = Vec::with_capacity(n);
            for _ in 0..n {
                lost.push(r.str()?);
            }
            let n = r.count(4)?;
            let mut damaged = Vec::with_capacity(n);
            for _ in 0..n {
                damaged.push(r.str()?);
            }
            let n = r.count(4)?;
            let mut short = Vec::with_capacity(n);
            for _ in 0..n {
                short.push(r.str()?);
            }
            Message::Report {
                ok,
                failed,
                bytes,
                message,
                lost,
                damaged,
                short,
            }
        }
        kind::LISTING => Message::Listing { entry: r.entry()? },
        kind::HASHED => Message::Hashed { root: r.digest()? },
        kind::REMOVE => Message::Remove { path: r.str()? },
        kind::LINK => Message::Link {
            path: r.str()?,
            target: r.str()?,
        },
        kind::WANT => Message::Want {
            id: r.u32()?,
            path: r.str()?,
            dest: r.str()?,
            first: r.u32()?,
            end: r.u32()?,
        },
        other => return Err(DecodeError::UnknownKind(other)),
    };
    if !r.buf.is_empty() {
        return Err(DecodeError::Malformed(name));
    }
    Ok(msg)
}

fn kind_name(k: u8) -> Result<&'static str, DecodeError> {
    Ok(match k {
        kind::HELLO => "Hello",
        kind::WELCOME => "Welcome",
        kind::REFUSED => "Refused",
        kind::OFFER => "Offer",
        kind::NEED => "Need",
        kind::CHUNK => "Chunk",
        kind::RANGE_END => "RangeEnd",
        kind::RANGE_STATUS => "RangeStatus",
        kind::FINISH => "Finish",
        kind::COMMIT => "Commit",
        kind::DONE => "Done",
        kind::FILE_ERROR => "FileError",
        kind::BYE => "Bye",
        kind::LISTING => "Listing",
        kind::HASHED => "Hashed",
        kind::REMOVE => "Remove",
        kind::LINK => "Link",
        kind::WANT => "Want",
        kind::RELEASE => "Release",
        kind::KEEPALIVE => "KeepAlive",
        kind::TICKET => "Ticket",
        kind::FORWARD => "Forward",
        kind::FORWARD_STRIPES => "Forward",
        kind::REPORT => "Report",
        kind::PROGRESS => "Progress",
        kind::UNSEALED => "Unsealed",
        kind::QUIET => "Quiet",
        kind::TAKES => "Takes",
        kind::PIPED => "Piped",
        kind::CURSOR => "Cursor",
        kind::SEALED => "Sealed",
        kind::VOUCHED => "Vouched",
        other => return Err(DecodeError::UnknownKind(other)),
    })
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
    fn entry(&mut self, e: &Entry) {
        self.str(&e.path);
        match &e.kind {
            EntryKind::File => self.u8(1),
            EntryKind::Dir => self.u8(2),
            EntryKind::Symlink { target } => {
                self.u8(3);
                self.str(target);
            }
            EntryKind::HardLink { target } => {
                self.u8(4);
                self.str(target);
            }
        }
        self.u64(e.size);
        self.u32(e.mode);
        self.u64(e.mtime_sec as u64);
        self.u32(e.mtime_nsec);
        self.u32(e.chunk_size);
        self.attrs(e.attrs.as_deref());
    }
    /// Version 11: a flag byte (bit 0 owner, 1 group, 2 xattrs, 3 sparse, 4
    /// linked; version 18: 5 all xattrs, 6 all ACLs; version 19: 7 all
    /// `trusted.*`), then each
    /// part present: a principal is `u32 id | str name`; xattrs are
    /// `u16 count | (str name | u32 len | value)*`.
    fn attrs(&mut self, a: Option<&Attrs>) {
        let Some(a) = a else {
            self.u8(0);
            return;
        };
        let flags = u8::from(a.owner.is_some())
            | (u8::from(a.group.is_some()) << 1)
            | (u8::from(a.xattrs.is_some()) << 2)
            | (u8::from(a.sparse) << 3)
            | (u8::from(a.linked) << 4)
            | (u8::from(a.all_xattrs) << 5)
            | (u8::from(a.all_acls) << 6)
            | (u8::from(a.all_trusted) << 7);
        self.u8(flags);
        for p in [&a.owner, &a.group].into_iter().flatten() {
            self.u32(p.id);
            self.str(&p.name);
        }
        if let Some(xattrs) = &a.xattrs {
            self.u16(xattrs.len() as u16);
            for x in xattrs {
                self.str(&x.name);
                self.u32(x.value.len() as u32);
                self.0.extend_from_slice(&x.value);
            }
        }
    }
    /// An optional [`Backup`]: a flag byte, then its parts when present.
    fn backup(&mut self, b: Option<&Backup>) {
        self.u8(u8::from(b.is_some()));
        if let Some(b) = b {
            self.backup_parts(b);
        }
    }
    fn backup_parts(&mut self, b: &Backup) {
        self.str(&b.dir);
        self.str(&b.suffix);
    }
    /// An optional digest: a flag byte, then 32 bytes when present.
    fn digest_opt(&mut self, d: Option<&Digest>) {
        match d {
            None => self.u8(0),
            Some(d) => {
                self.u8(1);
                self.0.extend_from_slice(d);
            }
        }
    }
    /// An optional seal: a flag byte, then 64 bytes when present.
    fn seal(&mut self, s: Option<&Seal>) {
        match s {
            None => self.u8(0),
            Some(s) => {
                self.u8(1);
                self.0.extend_from_slice(s);
            }
        }
    }
}

/// The bytes of `entry` as the wire encodes it (what a seal covers).
pub fn encode_entry(entry: &Entry, out: &mut Vec<u8>) {
    Writer(out).entry(entry);
}

struct Reader<'a> {
    buf: &'a [u8],
    name: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Malformed(self.name));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.arr::<1>()?[0])
    }
    fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::Malformed(self.name)),
        }
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.arr()?))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.arr()?))
    }
    /// `Push`'s and `Fetch`'s last field (version 17); absent in an older
    /// peer's `Hello`, read as none, so that its version is what the node
    /// refuses it for ("upgrade the older side"), not a malformed frame.
    fn rate_hint(&mut self) -> Result<u64, DecodeError> {
        if self.buf.is_empty() {
            return Ok(0);
        }
        self.u64()
    }
    /// A stripe: its index below its count, the count at most [`MAX_STRIPES`].
    fn stripe(&mut self) -> Result<Stripe, DecodeError> {
        let (index, count) = (self.u32()?, self.u32()?);
        if count == 0 || count > MAX_STRIPES || index >= count {
            return Err(DecodeError::Malformed(self.name));
        }
        Ok(Stripe { index, count })
    }

    fn digest(&mut self) -> Result<Digest, DecodeError> {
        self.arr()
    }
    fn backup(&mut self) -> Result<Option<Backup>, DecodeError> {
        match self.bool()? {
            false => Ok(None),
            true => self.backup_parts().map(Some),
        }
    }
    /// A [`Backup`]'s parts, checked ([`Backup::check`]).
    fn backup_parts(&mut self) -> Result<Backup, DecodeError> {
        let b = Backup {
            dir: self.str()?,
            suffix: self.str()?,
        };
        b.check().map_err(|_| DecodeError::Malformed(self.name))?;
        Ok(b)
    }
    fn digest_opt(&mut self) -> Result<Option<Digest>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.arr()?)),
            _ => Err(DecodeError::Malformed(self.name)),
        }
    }
    fn seal(&mut self) -> Result<Option<Seal>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.arr()?)),
            _ => Err(DecodeError::Malformed(self.name)),
        }
    }
    /// A element count, checked against the bytes actually left.
    fn count(&mut self, elem_size: usize) -> Result<usize, DecodeError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(elem_size) > self.buf.len() {
            return Err(DecodeError::Malformed(self.name));
        }
        Ok(n)
    }
    fn str(&mut self) -> Result<String, DecodeError> {
        let n = self.u32()?;
        if n > MAX_STRING {
            return Err(DecodeError::BadString(self.name));
        }
        let bytes = self.take(n as usize)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::BadString(self.name))
    }
    fn entry(&mut self) -> Result<Entry, DecodeError> {
        let path = self.str()?;
        let kind = match self.u8()? {
            1 => EntryKind::File,
            2 => EntryKind::Dir,
            3 => EntryKind::Symlink {
                target: self.str()?,
            },
            4 => EntryKind::HardLink {
                target: self.str()?,
            },
            _ => return Err(DecodeError::Malformed(self.name)),
        };
        Ok(Entry {
            path,
            kind,
            size: self.u64()?,
            mode: self.u32()?,
            mtime_sec: self.u64()? as i64,
            mtime_nsec: self.u32()?,
            chunk_size: self.u32()?,
            attrs: self.attrs()?,
        })
    }
    fn principal(&mut self) -> Result<Principal, DecodeError> {
        let id = self.u32()?;
        let name = self.str()?;
        if name.len() > MAX_XATTR_NAME || name.contains(['\0', '/', ':']) {
            return Err(DecodeError::BadString(self.name));
        }
        Ok(Principal { id, name })
    }
    fn attrs(&mut self) -> Result<Option<Box<Attrs>>, DecodeError> {
        let flags = self.u8()?;
        if flags == 0 {
            return Ok(None);
        }
        let owner = if flags & 1 != 0 {
            Some(self.principal()?)
        } else {
            None
        };
        let group = if flags & 2 != 0 {
            Some(self.principal()?)
        } else {
            None
        };
        let xattrs = if flags & 4 != 0 {
            let n = usize::from(self.u16()?);
            // Each takes at least its two length prefixes.
            if n > MAX_XATTRS || n.saturating_mul(8) > self.buf.len() {
                return Err(DecodeError::Malformed(self.name));
            }
            let mut xattrs = Vec::with_capacity(n);
            for _ in 0..n {
                let name = self.str()?;
                if name.is_empty() || name.len() > MAX_XATTR_NAME || name.contains('\0') {
                    return Err(DecodeError::BadString(self.name));
                }
                let len = self.u32()? as usize;
                if len > MAX_XATTR_VALUE {
                    return Err(DecodeError::Malformed(self.name));
                }
                let value = self.take(len)?.to_vec();
                xattrs.push(Xattr { name, value });
            }
            Some(xattrs)
        } else {
            None
        };
        Ok(Some(Box::new(Attrs {
            owner,
            group,
            xattrs,
            sparse: flags & 8 != 0,
            linked: flags & 16 != 0,
            all_xattrs: flags & 32 != 0,
            all_acls: flags & 64 != 0,
            all_trusted: flags & 128 != 0,
        })))
    }
}

#[cfg(test)]
mod tests;
