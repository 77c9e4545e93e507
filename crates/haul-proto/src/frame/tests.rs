use super::*;
use crate::SkipRule;
use proptest::prelude::*;

fn roundtrip(msg: &Message) {
    let mut buf = Vec::new();
    encode(msg, &mut buf);
    match decode_frame(&buf) {
        Ok(Decoded::Message(back, used)) => {
            assert_eq!(&back, msg);
            assert_eq!(used, buf.len());
        }
        other => panic!("decode failed: {other:?}"),
    }
    // Every strict prefix asks for more bytes, never errors or panics.
    for cut in 0..buf.len() {
        assert!(matches!(
            decode_frame(&buf[..cut]),
            Ok(Decoded::NeedMore(_))
        ));
    }
}

fn hex_of(msg: &Message) -> String {
    let mut buf = Vec::new();
    encode(msg, &mut buf);
    hex::encode(buf)
}

#[test]
fn hex_snapshots_of_sending_edges() {
    // v15: a relayed hello ends with its edge; Unsealed names one.
    let hello = Message::Hello {
        version: 15,
        token: String::new(),
        request: Request::Relayed {
            ticket: [0xaa; 32],
            stripe: None,
            edge: 0x0102_0304_0506_0708,
        },
    };
    let hex = hex_of(&hello);
    assert!(
        hex.ends_with(&format!("05{}0102030405060708", "aa".repeat(32))),
        "{hex}"
    );
    assert_eq!(
        hex_of(&Message::Unsealed {
            edge: 7,
            entries: 1,
            chunks: 2
        }),
        "000000111c00000000000000070000000100000002"
    );
    // v16: a node says an edge went quiet.
    assert_eq!(
        hex_of(&Message::Quiet {
            edge: 7,
            millis: 2500
        }),
        "0000000d1d0000000000000007000009c4"
    );
    // v20: a node says whether it sets owners.
    assert_eq!(hex_of(&Message::Takes { owners: true }), "000000021e01");
    // v21: a connection passed on, and its bytes.
    let jump = Message::Hello {
        version: 21,
        token: String::new(),
        request: Request::Jump { to: "b:1".into() },
    };
    assert_eq!(hex_of(&jump), "0000000f010015000000000900000003623a31");
    assert_eq!(
        hex_of(&Message::Piped { data: vec![1, 2] }),
        "000000071f000000020102"
    );
    // v22: a listing of what changed since a cursor, and the next cursor.
    let since = Message::Hello {
        version: 22,
        token: String::new(),
        request: Request::List {
            path: "d".into(),
            sums: false,
            keep: crate::Keep::default(),
            since: Some(crate::Cursor { epoch: 1, seq: 2 }),
        },
    };
    assert_eq!(
        hex_of(&since),
        "0000001f0100160000000002000000016400010000000000000001\
         0000000000000002"
    );
    assert_eq!(
        hex_of(&Message::Cursor {
            cursor: crate::Cursor { epoch: 1, seq: 2 },
            changes_only: true
        }),
        "000000122000000000000000010000000000000002\
         01"
    );
}

#[test]
fn hex_snapshots() {
    // These bytes are the protocol: changing them breaks old peers.
    assert_eq!(hex_of(&Message::Bye), "000000010d");
    assert_eq!(hex_of(&Message::Welcome { version: 1 }), "00000003020001");
    assert_eq!(
        hex_of(&Message::Hello {
            version: 1,
            token: "t".into(),
            request: Request::Push {
                dest: "d".into(),
                checksum: false,
                replace_dirs: false,
                skip: SkipRule::default(),
                backup: None,
                rate_hint: 0,
            }
        }),
        "000000170100010000000174010000000164000000000000000000"
    );
    assert_eq!(
        hex_of(&Message::Hello {
            version: 8,
            token: String::new(),
            request: Request::Push {
                dest: String::new(),
                checksum: true,
                replace_dirs: true,
                skip: SkipRule::default(),
                backup: None,
                rate_hint: 0,
            }
        }),
        "00000015010008000000000100000000030000000000000000"
    );
    // Version 10: the skip rule in bits 2-4 (`--ignore-existing`, `-u`).
    assert_eq!(
        hex_of(&Message::Hello {
            version: 10,
            token: String::new(),
            request: Request::Push {
                dest: String::new(),
                checksum: false,
                replace_dirs: false,
                skip: SkipRule {
                    ignore_existing: true,
                    size_only: false,
                    update: true,
                },
                backup: None,
                rate_hint: 0x0bebc200,
            }
        }),
        "0000001501000a00000000010000000014000000000bebc200"
    );
    assert_eq!(
        hex_of(&Message::Hashed { root: [7; 32] }).len(),
        2 * (4 + 1 + 32)
    );
    assert_eq!(
        hex_of(&Message::RangeStatus {
            id: 7,
            bad: vec![1, 2]
        }),
        "0000001108000000070000000200000001".to_owned() + "00000002"
    );
    let digest = [0xab; 32];
    assert_eq!(
        hex_of(&Message::Chunk(ChunkHeader {
            packed: None,
            from_record: false,
            id: 1,
            index: 2,
            len: 3,
            digest,
            seal: None,
        })),
        format!("0000002e06000000010000000200000003{}00", "ab".repeat(32))
    );
    // Version 14: bit 2 of the flag byte, a digest from the sender's record.
    let from_record = Message::Chunk(ChunkHeader {
        packed: None,
        from_record: true,
        id: 1,
        index: 2,
        len: 3,
        digest,
        seal: None,
    });
    assert_eq!(
        hex_of(&from_record),
        format!("0000002e06000000010000000200000003{}04", "ab".repeat(32))
    );
    // Bits above it are refused.
    let mut buf = Vec::new();
    encode(&from_record, &mut buf);
    if let Some(flags) = buf.last_mut() {
        *flags = 8;
    }
    assert_eq!(decode_frame(&buf), Err(DecodeError::Malformed("Chunk")));
}

#[test]
fn rejects_bad_lengths_before_allocating() {
    assert_eq!(
        decode_frame(&[0, 0, 0, 0, 1]),
        Err(DecodeError::BadLength(0))
    );
    assert_eq!(
        decode_frame(&[0xff, 0xff, 0xff, 0xff]),
        Err(DecodeError::BadLength(u32::MAX))
    );
}

#[test]
fn rejects_trailing_bytes_and_bad_kinds() {
    let mut buf = Vec::new();
    encode(&Message::Bye, &mut buf);
    buf[3] = 2;
    buf.push(0);
    assert_eq!(decode_frame(&buf), Err(DecodeError::Malformed("Bye")));
    assert_eq!(
        decode_frame(&[0, 0, 0, 1, 99]),
        Err(DecodeError::UnknownKind(99))
    );
}

#[test]
fn rejects_huge_counts() {
    // Need with a count of 2^32-1 entries but no bytes behind it.
    let buf = [0, 0, 0, 10, 5, 0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff];
    assert_eq!(decode_frame(&buf), Err(DecodeError::Malformed("Need")));
}

/// A listing of one file carrying `attrs`, encoded.
fn listing_with(attrs: crate::Attrs) -> Vec<u8> {
    let entry = Entry {
        path: "f".into(),
        kind: EntryKind::File,
        size: 1,
        mode: 0o644,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size: 1024,
        attrs: Some(Box::new(attrs)),
    };
    let mut buf = Vec::new();
    encode(&Message::Listing { entry }, &mut buf);
    buf
}

#[test]
fn attributes_from_a_peer_are_bounded_before_anything_is_kept() {
    let xattr = |name: &str, len: usize| crate::Xattr {
        name: name.into(),
        value: vec![7; len],
    };
    let attrs = |xattrs| crate::Attrs {
        owner: None,
        group: None,
        xattrs: Some(xattrs),
        ..Default::default()
    };
    // The largest value Linux takes goes through; one byte more is refused.
    let ok = listing_with(attrs(vec![xattr("user.a", crate::MAX_XATTR_VALUE)]));
    assert!(matches!(decode_frame(&ok), Ok(Decoded::Message(..))));
    let big = listing_with(attrs(vec![xattr("user.a", crate::MAX_XATTR_VALUE + 1)]));
    assert_eq!(decode_frame(&big), Err(DecodeError::Malformed("Listing")));
    // A name too long, empty, or with a NUL in it.
    for name in ["x".repeat(256), String::new(), "user.a\0b".into()] {
        let bad = listing_with(attrs(vec![xattr(&name, 1)]));
        assert_eq!(decode_frame(&bad), Err(DecodeError::BadString("Listing")));
    }
    // More attributes than one entry may carry.
    let many = listing_with(attrs(vec![xattr("user.a", 0); crate::MAX_XATTRS + 1]));
    assert_eq!(decode_frame(&many), Err(DecodeError::Malformed("Listing")));
    // An owner's name that could not be a name.
    let owner = |name: &str| crate::Attrs {
        owner: Some(crate::Principal {
            id: 0,
            name: name.into(),
        }),
        ..Default::default()
    };
    for name in ["a/b", "a:b", "a\0"] {
        let bad = listing_with(owner(name));
        assert_eq!(decode_frame(&bad), Err(DecodeError::BadString("Listing")));
    }
    // Every flag bit has a meaning since version 19 (bit 7: `all_trusted`).
    let mut trusted = listing_with(owner("root"));
    let at = trusted.len() - (4 + 4 + 4) - 1;
    assert_eq!(trusted[at], 1);
    trusted[at] = 129;
    let Ok(Decoded::Message(Message::Listing { entry }, _)) = decode_frame(&trusted) else {
        panic!("bit 7 decodes");
    };
    assert!(entry
        .attrs
        .is_some_and(|a| a.all_trusted && a.owner.is_some()));
}

#[test]
fn fetch_says_what_it_keeps_in_one_byte() {
    let keep = crate::Keep {
        owner: true,
        group: true,
        xattrs: false,
        acls: true,
        numeric_ids: false,
        sparse: false,
        hard_links: false,
    };
    assert_eq!(
        hex_of(&Message::Hello {
            version: 11,
            token: String::new(),
            request: Request::Fetch {
                keep,
                compress: 3,
                rate_hint: 0x0102
            }
        }),
        "0000001201000b00000000030b030000000000000102"
    );
    // A version 16 peer's Fetch (no rate hint) still decodes: the node
    // refuses it for its version, with the words to upgrade.
    let old = hex::decode("0000000a01001000000000030b03").unwrap();
    assert!(matches!(
        decode_frame(&old),
        Ok(Decoded::Message(
            Message::Hello {
                version: 16,
                request: Request::Fetch { rate_hint: 0, .. },
                ..
            },
            14
        ))
    ));
    assert_eq!(crate::Keep::from_bits(128), None);
    let links = crate::Keep::from_bits(64).map(|k| k.hard_links);
    assert_eq!(links, Some(true));
}

/// Backups a peer may send (each passes `Backup::check`).
fn arb_backup() -> impl Strategy<Value = Option<crate::Backup>> {
    let backup = |dir: &str, suffix: &str| crate::Backup {
        dir: dir.into(),
        suffix: suffix.into(),
    };
    prop_oneof![
        Just(None),
        Just(Some(backup("", "~"))),
        Just(Some(backup("bak/old", ""))),
        Just(Some(backup("b", ".1"))),
    ]
}

#[test]
fn a_backup_that_names_no_other_file_or_climbs_out_is_refused() {
    for (dir, suffix) in [
        ("", ""),
        ("../x", "~"),
        ("/abs", "~"),
        ("", "a/b"),
        (".haul", "~"),
    ] {
        let request = Request::Prune {
            dest: String::new(),
            backup: Some(crate::Backup {
                dir: dir.into(),
                suffix: suffix.into(),
            }),
        };
        let mut buf = Vec::new();
        encode(
            &Message::Hello {
                version: 13,
                token: String::new(),
                request,
            },
            &mut buf,
        );
        assert!(decode_frame(&buf).is_err(), "{dir:?} {suffix:?}");
    }
}

fn arb_seal() -> impl Strategy<Value = Option<Seal>> {
    proptest::option::of((any::<[u8; 32]>(), any::<[u8; 32]>()).prop_map(|(a, b)| {
        let mut s = [0u8; 64];
        s[..32].copy_from_slice(&a);
        s[32..].copy_from_slice(&b);
        s
    }))
}

fn arb_string() -> impl Strategy<Value = String> {
    ".{0,40}"
}

fn arb_entry() -> impl Strategy<Value = Entry> {
    (
        arb_string(),
        prop_oneof![
            Just(EntryKind::File),
            Just(EntryKind::Dir),
            arb_string().prop_map(|target| EntryKind::Symlink { target }),
            arb_string().prop_map(|target| EntryKind::HardLink { target })
        ],
        any::<u64>(),
        any::<u32>(),
        any::<i64>(),
        any::<u32>(),
        any::<u32>(),
        arb_attrs(),
    )
        .prop_map(
            |(path, kind, size, mode, mtime_sec, mtime_nsec, chunk_size, attrs)| Entry {
                attrs,
                path,
                kind,
                size,
                mode,
                mtime_sec,
                mtime_nsec,
                chunk_size,
            },
        )
}

/// Attributes as a sender puts them: `None`, or at least one part.
fn arb_attrs() -> impl Strategy<Value = Option<Box<crate::Attrs>>> {
    let principal = (any::<u32>(), "[a-z_][a-z0-9_-]{0,12}")
        .prop_map(|(id, name)| crate::Principal { id, name });
    let xattr = (
        "(user|trusted|security)\\.[a-z.]{1,20}",
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(name, value)| crate::Xattr { name, value });
    prop_oneof![
        Just(None),
        (
            proptest::option::of(principal.clone()),
            proptest::option::of(principal),
            proptest::option::of(proptest::collection::vec(xattr, 0..4)),
            any::<bool>(),
            any::<bool>(),
            any::<(bool, bool, bool)>(),
        )
            .prop_filter("not empty", |(o, g, x, s, l, (ax, aa, at))| o.is_some()
                || g.is_some()
                || x.is_some()
                || *s
                || *l
                || *ax
                || *aa
                || *at)
            .prop_map(
                |(owner, group, xattrs, sparse, linked, (all_xattrs, all_acls, all_trusted))| {
                    Some(Box::new(crate::Attrs {
                        owner,
                        group,
                        xattrs,
                        sparse,
                        linked,
                        all_xattrs,
                        all_acls,
                        all_trusted,
                    }))
                }
            ),
    ]
}

fn arb_message() -> impl Strategy<Value = Message> {
    let digest = any::<[u8; 32]>();
    prop_oneof![
        (
            any::<u16>(),
            arb_string(),
            arb_string(),
            any::<bool>(),
            any::<bool>(),
            0u8..8,
            arb_backup(),
        )
            .prop_map(
                |(version, token, dest, checksum, replace_dirs, skip, backup)| {
                    Message::Hello {
                        version,
                        token,
                        request: Request::Push {
                            dest,
                            checksum,
                            replace_dirs,
                            skip: SkipRule::from_bits(skip << 2),
                            backup,
                            rate_hint: u64::from(skip) * 1_000_003,
                        },
                    }
                }
            ),
        (
            arb_string(),
            any::<bool>(),
            0u8..32,
            proptest::option::of((any::<u64>(), any::<u64>()))
        )
            .prop_map(|(path, sums, keep, since)| Message::Hello {
                version: 1,
                token: String::new(),
                request: Request::List {
                    path,
                    sums,
                    keep: crate::Keep::from_bits(keep).unwrap_or_default(),
                    since: since.map(|(epoch, seq)| crate::Cursor { epoch, seq }),
                }
            }),
        (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(epoch, seq, changes_only)| {
            Message::Cursor {
                cursor: crate::Cursor { epoch, seq },
                changes_only,
            }
        }),
        digest.prop_map(|root| Message::Hashed { root }),
        (0u8..32).prop_map(|bits| Message::Hello {
            version: 1,
            token: "x".into(),
            request: Request::Fetch {
                keep: crate::Keep::from_bits(bits).unwrap_or_default(),
                compress: bits % 23,
                rate_hint: u64::from(bits) << 20,
            }
        }),
        (arb_string(), digest, any::<bool>(), arb_backup()).prop_map(
            |(dest, origin, checksum, backup)| Message::Hello {
                version: 3,
                token: "t".into(),
                request: Request::Admit {
                    dest,
                    origin,
                    checksum,
                    backup,
                },
            }
        ),
        (
            any::<u32>(),
            proptest::collection::vec((any::<u32>(), digest, arb_seal()), 0..4)
        )
            .prop_map(|(id, c)| Message::Sealed {
                id,
                chunks: c
                    .into_iter()
                    .map(|(index, digest, seal)| ChunkSeal {
                        index,
                        digest,
                        seal: seal.unwrap_or([1; 64]),
                    })
                    .collect(),
            }),
        (
            digest,
            proptest::option::of((0u32..64, 1u32..=64)),
            any::<u64>()
        )
            .prop_map(|(ticket, stripe, edge)| {
                Message::Hello {
                    version: 7,
                    token: String::new(),
                    request: Request::Relayed {
                        ticket,
                        stripe: stripe.map(|(i, k)| Stripe {
                            index: i % k,
                            count: k,
                        }),
                        edge,
                    },
                }
            }),
        digest.prop_map(|ticket| Message::Ticket { ticket }),
        (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(bytes, entries, complete)| {
            Message::Progress {
                bytes,
                entries,
                complete,
            }
        }),
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(edge, entries, chunks)| {
            Message::Unsealed {
                edge,
                entries,
                chunks,
            }
        }),
        (any::<u64>(), any::<u32>()).prop_map(|(edge, millis)| Message::Quiet { edge, millis }),
        any::<bool>().prop_map(|owners| Message::Takes { owners }),
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(|data| Message::Piped { data }),
        arb_string().prop_map(|to| Message::Hello {
            version: 21,
            token: String::new(),
            request: Request::Jump { to },
        }),
        (
            proptest::collection::vec(
                (arb_string(), arb_string(), digest, 0u32..64, any::<u64>()),
                0..4
            ),
            proptest::option::of(1u32..=64)
        )
            .prop_map(|(t, striped)| {
                // A Forward's targets are all striped, or none is.
                Message::Forward {
                    targets: t
                        .into_iter()
                        .map(|(addr, fingerprint, ticket, i, edge)| RelayTarget {
                            addr,
                            fingerprint,
                            ticket,
                            edge,
                            stripe: striped.map(|k| Stripe {
                                index: i % k,
                                count: k,
                            }),
                        })
                        .collect(),
                }
            }),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            arb_string(),
            proptest::collection::vec(arb_string(), 0..3),
            proptest::collection::vec(arb_string(), 0..2),
            proptest::collection::vec(arb_string(), 0..2)
        )
            .prop_map(|(ok, failed, bytes, message, lost, damaged, short)| {
                Message::Report {
                    ok,
                    failed,
                    bytes,
                    message,
                    lost,
                    damaged,
                    short,
                }
            }),
        arb_entry().prop_map(|entry| Message::Listing { entry }),
        arb_string().prop_map(|path| Message::Remove { path }),
        (arb_string(), arb_string()).prop_map(|(path, target)| Message::Link { path, target }),
        (arb_string(), arb_backup()).prop_map(|(dest, backup)| Message::Hello {
            version: 5,
            token: "t".into(),
            request: Request::Prune { dest, backup }
        }),
        (arb_string(), arb_backup(), 0u8..8).prop_map(|(dest, backup, skip)| Message::Hello {
            version: 13,
            token: "t".into(),
            request: Request::Link {
                dest,
                backup,
                skip: SkipRule::from_bits(skip << 2)
            }
        }),
        (
            any::<u32>(),
            arb_string(),
            arb_string(),
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(|(id, path, dest, first, end)| Message::Want {
                id,
                path,
                dest,
                first,
                end
            }),
        any::<u16>().prop_map(|version| Message::Welcome { version }),
        (any::<u16>(), arb_string()).prop_map(|(c, message)| Message::Refused {
            code: ErrorCode::from_u16(c),
            message
        }),
        (
            any::<u32>(),
            arb_entry(),
            any::<u32>(),
            any::<u32>(),
            arb_seal(),
            proptest::option::of(any::<[u8; 32]>())
        )
            .prop_map(|(id, entry, first, end, seal, content)| Message::Offer {
                id,
                entry,
                first,
                end,
                seal,
                content: content.map(Box::new)
            }),
        (
            any::<u32>(),
            any::<bool>(),
            proptest::collection::vec((any::<u32>(), any::<[u8; 32]>()), 0..5)
        )
            .prop_map(|(id, skip, have)| Message::Need { id, skip, have }),
        (
            (any::<u32>(), any::<u32>(), any::<u32>()),
            digest,
            arb_seal(),
            any::<bool>()
        )
            .prop_map(|((id, index, len), digest, seal, from_record)| {
                Message::Chunk(ChunkHeader {
                    packed: None,
                    from_record,
                    id,
                    index,
                    len,
                    digest,
                    seal,
                })
            }),
        (any::<u32>(), any::<u32>()).prop_map(|(id, chunks)| Message::RangeEnd { id, chunks }),
        (any::<u32>(), proptest::collection::vec(any::<u32>(), 0..8))
            .prop_map(|(id, bad)| Message::RangeStatus { id, bad }),
        any::<u32>().prop_map(|id| Message::Finish { id }),
        any::<u32>().prop_map(|id| Message::Release { id }),
        (any::<u32>(), digest).prop_map(|(id, root)| Message::Commit { id, root }),
        (any::<u32>(), digest, any::<[u8; 32]>(), any::<[u8; 32]>()).prop_map(
            |(id, root, a, b)| {
                let mut seal = [0u8; 64];
                seal[..32].copy_from_slice(&a);
                seal[32..].copy_from_slice(&b);
                Message::Vouched { id, root, seal }
            }
        ),
        (any::<u32>(), any::<bool>(), digest, arb_string()).prop_map(|(id, ok, root, message)| {
            Message::Done {
                id,
                ok,
                root,
                message,
            }
        }),
        (any::<u32>(), any::<u16>(), arb_string()).prop_map(|(id, c, message)| {
            Message::FileError {
                id,
                code: ErrorCode::from_u16(c),
                message,
            }
        }),
        Just(Message::Bye),
        Just(Message::KeepAlive),
    ]
}

proptest! {
    #[test]
    fn every_message_roundtrips(msg in arb_message()) {
        roundtrip(&msg);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode_frame(&bytes);
    }
}

#[test]
fn stripes_cut_every_entry_once() {
    let file = |size: u64, path: &str| Entry {
        attrs: None,
        path: path.into(),
        kind: EntryKind::File,
        size,
        mode: 0o644,
        mtime_sec: 1,
        mtime_nsec: 0,
        chunk_size: 1024,
    };
    for count in 1..=5u32 {
        let stripes: Vec<Stripe> = (0..count).map(|index| Stripe { index, count }).collect();
        // Large files: contiguous ranges that tile the file, sizes within one.
        for chunks in [count, count + 1, 10, 97] {
            let e = file(u64::from(chunks) * 1024 - 7, "big");
            let ranges: Vec<(u32, u32)> = stripes.iter().map(|s| s.carries(&e).unwrap()).collect();
            assert_eq!(ranges[0].0, 0);
            assert_eq!(ranges[ranges.len() - 1].1, e.chunk_count());
            for w in ranges.windows(2) {
                assert_eq!(w[0].1, w[1].0);
            }
            let lens: Vec<u32> = ranges.iter().map(|(a, b)| b - a).collect();
            assert!(
                lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1,
                "{lens:?}"
            );
        }
        // Small files, empty files and links: whole, in exactly one stripe.
        let mut per_stripe = vec![0; count as usize];
        for n in 0..200 {
            let e = file(if n % 3 == 0 { 0 } else { 1000 }, &format!("d/f{n}"));
            let carried: Vec<(u32, u32)> = stripes.iter().filter_map(|s| s.carries(&e)).collect();
            assert_eq!(carried, vec![(0, e.chunk_count())], "{}", e.path);
            let s = stripes
                .iter()
                .position(|s| s.carries(&e).is_some())
                .unwrap();
            per_stripe[s] += 1;
        }
        assert!(
            per_stripe.iter().all(|&n| n >= 200 / count as usize / 2),
            "{per_stripe:?}"
        );
        let link = Entry {
            kind: EntryKind::Symlink { target: "x".into() },
            ..file(0, "l")
        };
        assert_eq!(
            stripes
                .iter()
                .filter(|s| s.carries(&link).is_some())
                .count(),
            1
        );
        let dir = Entry {
            kind: EntryKind::Dir,
            ..file(0, "d")
        };
        assert!(stripes.iter().all(|s| s.carries(&dir) == Some((0, 0))));
    }
}

#[test]
fn a_stripe_outside_its_count_is_refused() {
    for (index, count) in [(0u32, 0u32), (2, 2), (0, MAX_STRIPES + 1)] {
        let mut out = Vec::new();
        encode(
            &Message::Hello {
                version: 7,
                token: String::new(),
                request: Request::Relayed {
                    ticket: [1; 32],
                    stripe: Some(Stripe { index, count }),
                    edge: 9,
                },
            },
            &mut out,
        );
        assert!(decode_frame(&out).is_err(), "{index}/{count}");
    }
}
