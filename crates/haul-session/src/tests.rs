//! Sessions fed what a hostile peer might send: any sequence of well-formed
//! messages. They may refuse or end the connection, but never panic, never
//! ask for a path outside the root, never write a chunk no offer made room
//! for, and never commit a file that was not received.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use haul_proto::{validate_entry_path, ChunkHeader, Entry, EntryKind, ErrorCode, Message};
use proptest::prelude::*;

use crate::{
    ChunkAction, ChunkOutcome, Event, FailKind, Prepared, Receiver, ReceiverIo, SendJob, Sender,
    SenderIo, SessionConfig,
};

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_string()),
        Just("a/b".to_string()),
        Just("".to_string()),
        Just("../x".to_string()),
        Just("/etc/passwd".to_string()),
        Just(".haul/partial/x".to_string()),
        Just("a//b".to_string()),
        Just("a/../../b".to_string()),
        "[a-z]{1,3}(/[a-z]{1,3}){0,2}",
    ]
}

fn entry() -> impl Strategy<Value = Entry> {
    (
        path(),
        0u8..3,
        0u64..5000,
        prop_oneof![Just(1024u32), Just(4096), Just(3000), Just(0)],
    )
        .prop_map(|(path, kind, size, chunk_size)| Entry {
            attrs: None,
            path,
            kind: match kind {
                0 => EntryKind::File,
                1 => EntryKind::Dir,
                _ => EntryKind::Symlink {
                    target: "../../x".into(),
                },
            },
            size,
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            chunk_size,
        })
}

/// Messages a sender could send a receiver (and the odd wrong one).
fn to_receiver() -> impl Strategy<Value = Message> {
    let id = 0u32..6;
    prop_oneof![
        (
            id.clone(),
            entry(),
            0u32..6,
            0u32..6,
            proptest::option::of(any::<[u8; 32]>())
        )
            .prop_map(|(id, entry, first, end, content)| Message::Offer {
                content: content.map(Box::new),
                id,
                entry,
                first,
                end,
                seal: None,
            }),
        (id.clone(), 0u32..6, 0u32..5000, any::<[u8; 32]>()).prop_map(
            |(id, index, len, digest)| {
                Message::Chunk(ChunkHeader {
                    packed: None,
                    from_record: false,
                    id,
                    index,
                    len,
                    digest,
                    seal: None,
                })
            }
        ),
        (id.clone(), 0u32..8).prop_map(|(id, chunks)| Message::RangeEnd { id, chunks }),
        (id.clone(), any::<[u8; 32]>()).prop_map(|(id, root)| Message::Commit { id, root }),
        (id.clone(), any::<[u8; 32]>()).prop_map(|(id, root)| Message::Vouched {
            id,
            root,
            seal: [0; 64]
        }),
        id.clone().prop_map(|id| Message::Release { id }),
        id.prop_map(|id| Message::FileError {
            id,
            code: ErrorCode::Io,
            message: "x".into()
        }),
        Just(Message::KeepAlive),
        Just(Message::Bye),
        Just(Message::Welcome { version: 2 }),
    ]
}

/// Messages a receiver could send a sender.
fn to_sender() -> impl Strategy<Value = Message> {
    let id = 0u32..6;
    prop_oneof![
        (id.clone(), path(), path(), 0u32..6, 0u32..8).prop_map(|(id, path, dest, first, end)| {
            Message::Want {
                id,
                path,
                dest,
                first,
                end,
            }
        }),
        (
            id.clone(),
            any::<bool>(),
            proptest::collection::vec((0u32..8, any::<[u8; 32]>()), 0..3)
        )
            .prop_map(|(id, skip, have)| Message::Need { id, skip, have }),
        (id.clone(), proptest::collection::vec(0u32..8, 0..3))
            .prop_map(|(id, bad)| Message::RangeStatus { id, bad }),
        id.clone().prop_map(|id| Message::Finish { id }),
        id.clone().prop_map(|id| Message::Release { id }),
        (id, any::<bool>()).prop_map(|(id, ok)| Message::Done {
            id,
            ok,
            root: [1; 32],
            message: String::new()
        }),
        Just(Message::KeepAlive),
        Just(Message::Bye),
    ]
}

fn safe(path: &str) -> bool {
    validate_entry_path(path).is_ok()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn a_hostile_sender_cannot_lead_a_receiver_astray(
        msgs in proptest::collection::vec((to_receiver(), any::<bool>()), 0..40),
        prefix in prop_oneof![Just(String::new()), Just("in".to_string())],
    ) {
        let t0 = Instant::now();
        let mut r = Receiver::for_push(SessionConfig::default(), prefix, t0);
        // What the receiver was told and has allowed so far.
        let mut prepared: HashMap<u32, Entry> = HashMap::new();
        let mut received: HashSet<u32> = HashSet::new();
        for (step, (msg, good)) in msgs.into_iter().enumerate() {
            let now = t0 + Duration::from_millis(step as u64);
            let result = match msg {
                Message::Chunk(h) => r.handle_chunk(now, h).map(|action| {
                    if let ChunkAction::Write { file, index, digest } = action {
                        let entry = prepared.get(&file).expect("a write only for a prepared file");
                        prop_assert!(index < entry.chunk_count());
                        prop_assert_eq!(entry.chunk_len(index), h.len);
                        prop_assert_eq!(digest, h.digest, "the sink checks the sender's digest");
                        received.insert(file);
                        let outcome = if good { ChunkOutcome::Good } else { ChunkOutcome::Bad };
                        r.chunk_done(now, file, index, outcome);
                    }
                    Ok(())
                }).and_then(|r| r.map_err(|e| crate::SessionError::Protocol(e.to_string()))),
                m => r.handle(now, m),
            };
            while let Some(io) = r.poll_io() {
                match io {
                    ReceiverIo::Make { file, entry } => {
                        prop_assert!(safe(&entry.path), "{:?}", entry.path);
                        r.made(now, file, Ok(()));
                    }
                    ReceiverIo::Prepare { file, entry, .. } => {
                        prop_assert!(safe(&entry.path), "{:?}", entry.path);
                        prop_assert_eq!(entry.kind.clone(), EntryKind::File);
                        prepared.insert(file, entry);
                        r.prepared(now, file, Ok(Prepared::Receive { have: Vec::new() }));
                    }
                    ReceiverIo::Commit { file, root } => {
                        prop_assert!(prepared.contains_key(&file), "commit of a file never prepared");
                        r.committed(now, file, Ok(root));
                    }
                    ReceiverIo::Assemble { file } => {
                        prop_assert!(prepared.contains_key(&file), "assembly of a file never prepared");
                        r.assembled_elsewhere(now, file);
                    }
                    ReceiverIo::Forget { file } => {
                        prepared.remove(&file);
                    }
                }
            }
            while r.poll_transmit(now).is_some() {}
            while r.poll_event().is_some() {}
            if result.is_err() {
                // The connection is closed: nothing more is taken.
                prop_assert!(r.handle(now, Message::KeepAlive).is_err());
                break;
            }
        }
        let _ = received;
    }

    #[test]
    fn a_hostile_receiver_cannot_lead_a_serving_sender_astray(
        msgs in proptest::collection::vec(to_sender(), 0..40),
    ) {
        let t0 = Instant::now();
        let mut s: Sender<()> = Sender::serve(SessionConfig::default(), t0);
        for (step, msg) in msgs.into_iter().enumerate() {
            let now = t0 + Duration::from_millis(step as u64);
            let result = s.handle(now, msg);
            while let Some(io) = s.poll_io() {
                match io {
                    SenderIo::Resolve { file, path, dest, first, end } => {
                        prop_assert!(safe(&path) && safe(&dest), "{path:?} {dest:?}");
                        let entry = Entry {
                            attrs: None,
                            path: dest,
                            kind: EntryKind::File,
                            size: 5000,
                            mode: 0o644,
                            mtime_sec: 0,
                            mtime_nsec: 0,
                            chunk_size: 1024,
                        };
                        let end = end.min(entry.chunk_count());
                        s.resolved(now, file, Ok(SendJob { entry, first, end, group: None, source: (), content: None }));
                    }
                    SenderIo::Read { file, index } => {
                        prop_assert!(index < 5);
                        s.read_done(now, file, index, Ok([7; 32]));
                    }
                    SenderIo::Hash { file, indices, .. } => {
                        prop_assert!(indices.iter().all(|i| *i < 5));
                        s.hashed(now, file, Ok(indices.into_iter().map(|i| (i, [7; 32])).collect()));
                    }
                    SenderIo::Confirm { file } => s.confirmed(now, file, Ok(())),
                    SenderIo::Reopen { file } => {
                        prop_assert!(false, "a serving sender reopened file {file}");
                    }
                    SenderIo::Forget { .. } => {}
                }
            }
            while s.poll_transmit(now).is_some() {}
            while s.poll_event().is_some() {}
            if result.is_err() {
                break;
            }
        }
    }
}

#[test]
fn a_receiver_waits_for_every_counted_chunk_in_any_order() {
    let t0 = Instant::now();
    let mut r = Receiver::for_push(SessionConfig::default(), String::new(), t0);
    let entry = Entry {
        attrs: None,
        path: "f".into(),
        kind: EntryKind::File,
        size: 3000,
        mode: 0o644,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size: 1024,
    };
    r.handle(
        t0,
        Message::Offer {
            content: None,
            id: 1,
            entry,
            first: 0,
            end: 3,
            seal: None,
        },
    )
    .unwrap();
    let Some(ReceiverIo::Prepare { file, .. }) = r.poll_io() else {
        panic!("prepare")
    };
    r.prepared(t0, file, Ok(Prepared::Receive { have: Vec::new() }));
    assert!(matches!(
        r.poll_transmit(t0),
        Some(crate::Transmit::Message(Message::Need { .. }))
    ));
    // The RangeEnd overtakes two of the three chunks (streams per chunk).
    let h = |index, len| ChunkHeader {
        packed: None,
        from_record: false,
        id: 1,
        index,
        len,
        digest: [index as u8; 32],
        seal: None,
    };
    let a = r.handle_chunk(t0, h(2, 952)).unwrap();
    assert!(matches!(a, ChunkAction::Write { index: 2, .. }));
    r.handle(t0, Message::RangeEnd { id: 1, chunks: 3 })
        .unwrap();
    r.chunk_done(t0, 1, 2, ChunkOutcome::Good);
    assert_eq!(r.poll_transmit(t0), None, "two chunks still to come");
    r.handle_chunk(t0, h(0, 1024)).unwrap();
    r.handle_chunk(t0, h(1, 1024)).unwrap();
    r.chunk_done(t0, 1, 1, ChunkOutcome::Bad);
    assert_eq!(r.poll_transmit(t0), None, "a write still outstanding");
    r.chunk_done(t0, 1, 0, ChunkOutcome::Good);
    assert_eq!(
        r.poll_transmit(t0),
        Some(crate::Transmit::Message(Message::RangeStatus {
            id: 1,
            bad: vec![1]
        }))
    );
    // The verified chunks are announced (what a relay forwards).
    let verified: Vec<u32> = std::iter::from_fn(|| r.poll_verified())
        .map(|(_, i, _)| i)
        .collect();
    assert_eq!(verified, vec![2, 0]);
    // A chunk beyond the count is a protocol error.
    r.handle_chunk(t0, h(1, 1024)).unwrap();
    r.handle(t0, Message::RangeEnd { id: 1, chunks: 1 })
        .unwrap();
    assert!(r.handle_chunk(t0, h(1, 1024)).is_err());
}

#[test]
fn a_busy_session_keeps_the_peer_informed_and_a_silent_peer_times_out() {
    let t0 = Instant::now();
    let idle = Duration::from_secs(30);
    let cfg = SessionConfig {
        idle,
        ..SessionConfig::default()
    };
    let mut r = Receiver::for_push(cfg, String::new(), t0);
    let entry = Entry {
        attrs: None,
        path: "big".into(),
        kind: EntryKind::File,
        size: 1 << 20,
        mode: 0o644,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size: 1024,
    };
    r.handle(
        t0,
        Message::Offer {
            content: None,
            id: 1,
            entry,
            first: 0,
            end: 1024,
            seal: None,
        },
    )
    .unwrap();
    assert!(matches!(r.poll_io(), Some(ReceiverIo::Prepare { .. })));
    // Preparing (re-verifying a large partial) takes long: keepalives every third of the limit.
    assert_eq!(r.poll_timeout(), Some(t0 + idle / 3));
    r.handle_timeout(t0 + idle / 3).unwrap();
    assert_eq!(
        r.poll_transmit(t0 + idle / 3),
        Some(crate::Transmit::Message(Message::KeepAlive))
    );
    // Its own I/O outstanding, the session never blames the peer.
    r.handle_timeout(t0 + idle * 5).unwrap();
    let done = t0 + idle * 5;
    r.prepared(done, 1, Ok(Prepared::Receive { have: Vec::new() }));
    while r.poll_transmit(done).is_some() {}
    // Then the peer has the idle limit to speak, counted from that moment.
    assert_eq!(r.poll_timeout(), Some(done + idle));
    assert!(r
        .handle_timeout(done + idle - Duration::from_millis(1))
        .is_ok());
    assert!(matches!(
        r.handle_timeout(done + idle),
        Err(crate::SessionError::Timeout { .. })
    ));
}

/// A relay's receiver that a newer upstream superseded ends as soon as its
/// own sender has been silent for the quiet limit, counted from that
/// sender's last message only (its own flushes and I/O do not count).
#[test]
fn a_superseded_receiver_ends_once_its_sender_is_quiet_and_not_before() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let quiet = ms(2000);
    // Its sender spoke 500 ms ago: it ends 1.5 s later, not now.
    let mut r = Receiver::for_push(SessionConfig::default(), String::new(), t0);
    r.handle(t0, Message::KeepAlive).unwrap();
    r.flushed(t0 + ms(500));
    assert!(r.superseded(t0 + ms(500), quiet).is_ok());
    assert_eq!(r.poll_timeout(), Some(t0 + quiet));
    r.flushed(t0 + ms(1900));
    assert!(r.handle_timeout(t0 + ms(1999)).is_ok());
    assert_eq!(
        r.handle_timeout(t0 + quiet),
        Err(crate::SessionError::Superseded { millis: 2000 })
    );
    assert!(r.handle(t0 + quiet, Message::KeepAlive).is_err(), "ended");
    // A sender that keeps sending work is never cut.
    let mut r = Receiver::for_push(SessionConfig::default(), String::new(), t0);
    assert!(r.superseded(t0, quiet).is_ok());
    for k in 1..20u32 {
        let now = t0 + ms(500) * k;
        let entry = Entry {
            attrs: None,
            path: format!("f{k}"),
            kind: EntryKind::File,
            size: 10,
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            chunk_size: 1024,
        };
        let offer = Message::Offer {
            content: None,
            id: k,
            entry,
            first: 0,
            end: 1,
            seal: None,
        };
        r.handle(now, offer).unwrap();
        assert!(r.handle_timeout(now).is_ok());
    }
    // One that keeps it alive but sends nothing more is cut all the same
    // (a relay routed around, idle, still heartbeating).
    let mut r = Receiver::for_push(SessionConfig::default(), String::new(), t0);
    assert!(r.superseded(t0, quiet).is_ok());
    r.handle(t0 + ms(1000), Message::KeepAlive).unwrap();
    assert!(r.handle_timeout(t0 + ms(1999)).is_ok());
    assert_eq!(
        r.handle_timeout(t0 + quiet),
        Err(crate::SessionError::Superseded { millis: 2000 })
    );
    // Silent for longer already: it ends at once.
    let mut r = Receiver::for_push(SessionConfig::default(), String::new(), t0);
    assert_eq!(
        r.superseded(t0 + ms(2500), quiet),
        Err(crate::SessionError::Superseded { millis: 2500 })
    );
}

fn one_file(size: u64) -> Entry {
    Entry {
        attrs: None,
        path: "f".into(),
        kind: EntryKind::File,
        size,
        mode: 0o644,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size: 1024,
    }
}

/// A job that sends all of `entry`.
fn whole_job(entry: Entry) -> SendJob<()> {
    SendJob {
        content: None,
        end: entry.chunk_count(),
        entry,
        first: 0,
        group: None,
        source: (),
    }
}

fn drain(s: &mut Sender<()>, now: Instant) -> Vec<Message> {
    std::iter::from_fn(|| s.poll_transmit(now))
        .filter_map(|t| match t {
            crate::Transmit::Message(m) => Some(m),
            crate::Transmit::Chunk(_) => None,
        })
        .collect()
}

/// A relay's file whose chunks have not verified there yet gives its reads
/// back: other files' chunks go out meanwhile (a small file still to come
/// must not hold back a large one already arriving), keepalives go out,
/// and the parked file reads again when a source wakes.
#[test]
fn a_file_not_ready_yet_lets_the_others_read_and_reads_again_when_woken() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let idle = Duration::from_secs(30);
    let cfg = SessionConfig {
        idle,
        ..SessionConfig::default()
    };
    let mut s: Sender<()> = Sender::push(cfg, t0);
    let file = |path: &str, size: u64| SendJob {
        entry: Entry {
            path: path.into(),
            ..one_file(size)
        },
        first: 0,
        end: size.div_ceil(1024) as u32,
        group: None,
        source: (),
        content: None,
    };
    s.push_job(t0, file("small", 100));
    s.push_job(t0, file("big", 8 * 1024));
    for id in [1, 2] {
        let need = Message::Need {
            id,
            skip: false,
            have: Vec::new(),
        };
        s.handle(t0, need).unwrap();
    }
    // The small file asked first: its chunk is not there yet.
    let mut big = Vec::new();
    let mut parked = 0;
    for _ in 0..100 {
        let Some(io) = s.poll_io() else { break };
        match io {
            SenderIo::Read { file: 1, index } => {
                parked += 1;
                s.read_not_ready(t0, 1, index);
            }
            SenderIo::Read { file: 2, index } => {
                big.push(index);
                s.read_done(t0, 2, index, Ok([index as u8; 32]));
            }
            _ => {}
        }
    }
    assert_eq!(parked, 1, "asked once, then parked");
    assert_eq!(big, (0..8).collect::<Vec<u32>>(), "the big file went on");
    // While it waits, the peer hears keepalives.
    drain(&mut s, t0);
    assert_eq!(s.poll_timeout(), Some(t0 + idle / 3));
    s.handle_timeout(t0 + idle / 3).unwrap();
    assert_eq!(drain(&mut s, t0 + idle / 3), vec![Message::KeepAlive]);
    // Woken: it reads again, and its round ends.
    s.sources_ready();
    assert_eq!(s.poll_io(), Some(SenderIo::Read { file: 1, index: 0 }));
    s.read_done(t0 + ms(1), 1, 0, Ok([7; 32]));
    assert!(drain(&mut s, t0 + ms(1)).contains(&Message::RangeEnd { id: 1, chunks: 1 }));
}

#[test]
fn the_last_file_failing_in_a_read_still_ends_with_goodbye() {
    let t0 = Instant::now();
    let mut s: Sender<()> = Sender::push(SessionConfig::default(), t0);
    s.push_job(t0, whole_job(one_file(3000)));
    s.close_when_done();
    s.handle(
        t0,
        Message::Need {
            id: 1,
            skip: false,
            have: Vec::new(),
        },
    )
    .unwrap();
    while let Some(io) = s.poll_io() {
        match io {
            SenderIo::Read { file, index } => s.read_done(t0, file, index, Err("disk gone".into())),
            // A failed read is checked as a change first: this one held still.
            SenderIo::Confirm { file } => s.confirmed(t0, file, Ok(())),
            _ => {}
        }
    }
    let sent = drain(&mut s, t0);
    assert!(sent
        .iter()
        .any(|m| matches!(m, Message::FileError { id: 1, .. })));
    assert_eq!(sent.last(), Some(&Message::Bye), "{sent:?}");
    // After its goodbye, only the peer's is taken.
    assert!(s
        .handle(
            t0,
            Message::Done {
                id: 9,
                ok: true,
                root: [0; 32],
                message: String::new()
            }
        )
        .is_err());
}

#[test]
fn a_serving_sender_may_not_release_what_a_puller_asked_for() {
    let t0 = Instant::now();
    let mut r = Receiver::for_pull(SessionConfig::default(), t0);
    let job = crate::FetchJob {
        path: "f".into(),
        entry: one_file(3000),
        first: 0,
        end: u32::MAX,
        group: None,
    };
    let id = r.want(t0, job);
    assert!(r.handle(t0, Message::Release { id }).is_err());
}

#[test]
fn chunks_of_files_never_offered_are_refused_not_dropped() {
    let t0 = Instant::now();
    let mut r = Receiver::for_push(SessionConfig::default(), String::new(), t0);
    // A huge id once does not open the door for chunks of ids never seen.
    r.handle(
        t0,
        Message::Offer {
            content: None,
            id: u32::MAX,
            entry: one_file(3000),
            first: 0,
            end: 3,
            seal: None,
        },
    )
    .unwrap();
    let h = ChunkHeader {
        packed: None,
        from_record: false,
        id: 7,
        index: 0,
        len: 1024,
        digest: [0; 32],
        seal: None,
    };
    assert!(r.handle_chunk(t0, h).is_err());
}

/// `-c`'s content offer (version 19): a pushed whole file's BLAKE3 goes to
/// the driver with its `Prepare`; on a range, through a fan-out (sealed by
/// an origin) or to a fetching receiver it is a protocol error.
#[test]
fn a_content_offer_is_a_direct_pushs_whole_file_only() {
    let t0 = Instant::now();
    let entry = one_file(3000);
    let offer = |first, end| Message::Offer {
        content: Some(Box::new([7; 32])),
        id: 1,
        entry: entry.clone(),
        first,
        end,
        seal: None,
    };
    let mut r = Receiver::for_push(SessionConfig::default(), String::new(), t0);
    r.handle(t0, offer(0, 3)).unwrap();
    assert!(matches!(
        r.poll_io(),
        Some(ReceiverIo::Prepare {
            content: Some([7, ..]),
            first: 0,
            end: 3,
            ..
        })
    ));
    let mut r = Receiver::for_push(SessionConfig::default(), String::new(), t0);
    assert!(r.handle(t0, offer(0, 2)).is_err(), "a range");
    let mut r = Receiver::for_push(SessionConfig::default(), String::new(), t0);
    let origin = haul_proto::seal::Origin::generate().unwrap();
    r.check_origin(std::sync::Arc::new(crate::OriginPublic(origin.public())));
    assert!(r.handle(t0, offer(0, 3)).is_err(), "through a fan-out");
    let mut r = Receiver::for_pull(SessionConfig::default(), t0);
    assert!(r.handle(t0, offer(0, 3)).is_err(), "to a fetching receiver");
}

/// At `t0`, a fan-out receiver is offered chunks `first..end` of `entry` as file
/// `id`, sealed by `origin`, and they arrive clean (`RangeStatus` sent).
fn stripe_arrives(
    r: &mut Receiver,
    t0: Instant,
    origin: &haul_proto::seal::Origin,
    entry: &Entry,
    id: u32,
    first: u32,
    end: u32,
) -> Vec<crate::Transmit> {
    let hash = haul_proto::seal::entry_hash(entry);
    let offer = Message::Offer {
        content: None,
        id,
        entry: entry.clone(),
        first,
        end,
        seal: Some(origin.seal_entry(entry)),
    };
    r.handle(t0, offer).unwrap();
    let Some(ReceiverIo::Prepare { file, .. }) = r.poll_io() else {
        panic!("prepare")
    };
    r.prepared(t0, file, Ok(Prepared::Receive { have: Vec::new() }));
    for index in first..end {
        let digest = [index as u8; 32];
        let h = ChunkHeader {
            packed: None,
            from_record: false,
            id,
            index,
            len: entry.chunk_len(index),
            digest,
            seal: Some(origin.seal_chunk(&hash, index, &digest)),
        };
        assert!(matches!(
            r.handle_chunk(t0, h).unwrap(),
            ChunkAction::Write { .. }
        ));
        r.chunk_done(t0, id, index, ChunkOutcome::Good);
    }
    let chunks = end - first;
    r.handle(t0, Message::RangeEnd { id, chunks }).unwrap();
    std::iter::from_fn(|| r.poll_transmit(t0)).collect()
}

/// A fan-out stripe: the receiver asks its driver to put the file together
/// once the origin vouched for its root (never waits for a `Commit` no
/// stripe's sender can make), and the sender of a stripe waits for `Done`
/// or `Release` instead of committing.
#[test]
fn stripes_are_put_together_by_the_receiver_and_released_by_the_others() {
    let t0 = Instant::now();
    let origin = haul_proto::seal::Origin::generate().unwrap();
    let entry = one_file(3000);
    let hash = haul_proto::seal::entry_hash(&entry);
    let mut r = Receiver::for_push(SessionConfig::default(), String::new(), t0);
    r.check_origin(std::sync::Arc::new(crate::OriginPublic(origin.public())));
    // Two stripes of one file, as two senders would offer them.
    let stripe = |r: &mut Receiver, id: u32, first: u32, end: u32| {
        let sent = stripe_arrives(r, t0, &origin, &entry, id, first, end);
        assert!(
            sent.contains(&crate::Transmit::Message(Message::RangeStatus {
                id,
                bad: Vec::new()
            }))
        );
        assert!(!sent.iter().any(|m| matches!(
            m,
            crate::Transmit::Message(Message::Done { .. } | Message::Release { .. })
        )));
        // Put together only once the origin vouched for the whole file.
        assert_eq!(r.poll_io(), None);
        let root = [9; 32];
        let seal = origin.seal_root(&hash, &root);
        r.handle(t0, Message::Vouched { id, root, seal }).unwrap();
        assert_eq!(r.poll_io(), Some(ReceiverIo::Assemble { file: id }));
    };
    // The first stripe in: the rest is still to come, it is released.
    stripe(&mut r, 1, 1, 3);
    r.assembled_elsewhere(t0, 1);
    assert_eq!(
        r.poll_transmit(t0),
        Some(crate::Transmit::Message(Message::Release { id: 1 }))
    );
    assert_eq!(r.poll_io(), Some(ReceiverIo::Forget { file: 1 }));
    // The last one completes it: its session commits and says so.
    stripe(&mut r, 2, 0, 1);
    r.committed(t0, 2, Ok([9; 32]));
    assert!(matches!(
        r.poll_transmit(t0),
        Some(crate::Transmit::Message(Message::Done { id: 2, ok: true, root, .. })) if root == [9; 32]
    ));

    // The sender of a stripe: a clean range is not committed; a `Release`
    // ends it, and the session closes.
    let mut s: Sender<()> = Sender::push(SessionConfig::default(), t0);
    s.push_job(
        t0,
        SendJob {
            content: None,
            entry: entry.clone(),
            first: 1,
            end: 3,
            group: None,
            source: (),
        },
    );
    s.close_when_done();
    let need = Message::Need {
        id: 1,
        skip: false,
        have: Vec::new(),
    };
    s.handle(t0, need).unwrap();
    while let Some(io) = s.poll_io() {
        if let SenderIo::Read { file, index } = io {
            s.read_done(t0, file, index, Ok([index as u8; 32]));
        }
    }
    let sent = drain(&mut s, t0);
    assert!(
        sent.contains(&Message::RangeEnd { id: 1, chunks: 2 }),
        "{sent:?}"
    );
    let clean = Message::RangeStatus {
        id: 1,
        bad: Vec::new(),
    };
    s.handle(t0, clean).unwrap();
    // Its hash goes nowhere before the source is confirmed unchanged.
    assert_eq!(s.poll_io(), Some(SenderIo::Confirm { file: 1 }));
    s.confirmed(t0, 1, Ok(()));
    let sent = drain(&mut s, t0);
    assert!(
        !sent
            .iter()
            .any(|m| matches!(m, Message::Commit { .. } | Message::Bye)),
        "{sent:?}"
    );
    s.handle(t0, Message::Release { id: 1 }).unwrap();
    assert_eq!(drain(&mut s, t0), vec![Message::Bye]);
}

/// A read that fails (a file cut short while it was sent fails its reads
/// past the new end) is checked as a change: one that changed is offered
/// again once it settled; one that did not fails with the read's error.
#[test]
fn a_read_that_fails_on_a_changed_file_is_a_change() {
    let t0 = Instant::now();
    let cfg = SessionConfig {
        settle: Duration::from_secs(1),
        ..SessionConfig::default()
    };
    for changed in [true, false] {
        let mut s: Sender<()> = Sender::push(cfg.clone(), t0);
        s.push_job(t0, whole_job(one_file(3000)));
        s.close_when_done();
        drain(&mut s, t0);
        let need = Message::Need {
            id: 1,
            skip: false,
            have: Vec::new(),
        };
        s.handle(t0, need).unwrap();
        let mut failed = false;
        while let Some(io) = s.poll_io() {
            match io {
                SenderIo::Read { file, index } if !failed => {
                    failed = true;
                    s.read_done(t0, file, index, Err("failed to fill whole buffer".into()));
                }
                // Reads still out come back to a file no longer sending.
                SenderIo::Read { file, index } => s.read_done(t0, file, index, Ok([0; 32])),
                SenderIo::Confirm { file: 1 } => {
                    let result = if changed {
                        Err((FailKind::Changed, "size 3000 -> 1500".into()))
                    } else {
                        Ok(())
                    };
                    s.confirmed(t0, 1, result);
                }
                SenderIo::Forget { file: 1 } => {}
                other => panic!("{other:?}"),
            }
        }
        let sent = drain(&mut s, t0);
        assert!(
            sent.iter()
                .any(|m| matches!(m, Message::FileError { id: 1, .. })),
            "{sent:?}"
        );
        let events: Vec<Event> = std::iter::from_fn(|| s.poll_event()).collect();
        if changed {
            assert!(!sent.contains(&Message::Bye), "it waits to send it again");
            s.handle_timeout(t0 + Duration::from_secs(1)).unwrap();
            assert_eq!(s.poll_io(), Some(SenderIo::Reopen { file: 1 }));
        } else {
            assert!(
                events
                    .iter()
                    .any(|e| matches!(e, Event::FileError { error, .. }
                    if error == "failed to fill whole buffer")),
                "{events:?}"
            );
            assert!(sent.contains(&Message::Bye), "{sent:?}");
        }
    }
}

/// Sends every chunk of file `id` and answers the driver's reads with
/// `digest(index)`; returns what the sender asked next (after `RangeEnd`
/// and a clean `RangeStatus`).
fn send_whole(s: &mut Sender<()>, now: Instant, id: crate::FileId) -> Vec<SenderIo> {
    s.handle(
        now,
        Message::Need {
            id,
            skip: false,
            have: Vec::new(),
        },
    )
    .unwrap();
    while let Some(io) = s.poll_io() {
        if let SenderIo::Read { file, index } = io {
            s.read_done(now, file, index, Ok([index as u8; 32]));
        }
    }
    let sent = drain(s, now);
    assert!(sent.iter().any(|m| matches!(m, Message::RangeEnd { .. })));
    s.handle(
        now,
        Message::RangeStatus {
            id,
            bad: Vec::new(),
        },
    )
    .unwrap();
    std::iter::from_fn(|| s.poll_io()).collect()
}

/// File `id` is read in full; its source's check is asked for, and no
/// hash is announced before it (no `Commit`, no `Vouched`).
fn read_until_the_check(s: &mut Sender<()>, now: Instant, id: crate::FileId) {
    assert_eq!(send_whole(s, now, id), vec![SenderIo::Confirm { file: id }]);
    assert!(
        !drain(s, now)
            .iter()
            .any(|m| matches!(m, Message::Vouched { .. } | Message::Commit { .. })),
        "no hash announced before the check"
    );
}

/// File `id` is read in full, then the check says it changed: no hash is
/// announced (no `Commit`, no `Vouched`), only the receiver told to drop it.
fn changed_while_read(s: &mut Sender<()>, now: Instant, id: crate::FileId) {
    assert_eq!(send_whole(s, now, id), vec![SenderIo::Confirm { file: id }]);
    s.confirmed(now, id, Err((FailKind::Changed, "modified".into())));
    let sent = drain(s, now);
    assert!(
        matches!(sent.as_slice(), [Message::FileError { id: i, .. }] if *i == id),
        "{sent:?}"
    );
}

#[test]
fn a_file_that_changed_while_read_is_offered_again_once_it_settled() {
    let t0 = Instant::now();
    let cfg = SessionConfig {
        changed_retries: 2,
        settle: Duration::from_secs(1),
        idle: Duration::from_secs(3),
        ..SessionConfig::default()
    };
    let mut s: Sender<()> = Sender::push(cfg, t0);
    let entry = one_file(3000);
    s.push_job(t0, whole_job(entry.clone()));
    s.close_when_done();
    drain(&mut s, t0);

    // Read in full, then the check says it changed: no Commit; the
    // receiver drops it; the session waits for it to settle.
    changed_while_read(&mut s, t0, 1);
    let warned: Vec<Event> = std::iter::from_fn(|| s.poll_event()).collect();
    assert!(warned.iter().any(|e| matches!(e, Event::Warning { message }
        if message.contains("changed while it was being sent (modified); sending it again in 1 s"))));
    // Settling is not the peer's silence: keepalives go out, it does not time out.
    let t1 = t0 + Duration::from_millis(999);
    assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(1)));
    s.handle_timeout(t1).unwrap();
    assert_eq!(s.poll_io(), None, "not before it settled");

    // Settled: opened again, offered from scratch under a new id with the
    // entry as it is now.
    let t2 = t0 + Duration::from_secs(1);
    s.handle_timeout(t2).unwrap();
    assert_eq!(s.poll_io(), Some(SenderIo::Reopen { file: 1 }));
    let now_entry = Entry {
        size: 4000,
        mtime_sec: 7,
        ..entry.clone()
    };
    let id = s.reopened(t2, 1, Ok(now_entry.clone())).unwrap();
    assert_ne!(id, 1);
    assert_eq!(s.poll_io(), Some(SenderIo::Forget { file: 1 }));
    let sent = drain(&mut s, t2);
    // The receiver heard from it while it settled.
    assert_eq!(sent.first(), Some(&Message::KeepAlive), "{sent:?}");
    assert!(
        matches!(&sent[1..], [Message::Offer { id: i, entry: e, first: 0, end: 4, .. }]
            if *i == id && *e == now_entry),
        "{sent:?}"
    );

    // Changes again: the second wait is twice as long.
    assert_eq!(
        send_whole(&mut s, t2, id),
        vec![SenderIo::Confirm { file: id }]
    );
    s.confirmed(
        t2,
        id,
        Err((FailKind::Changed, "grew from 4000 to 5000 bytes".into())),
    );
    drain(&mut s, t2);
    s.handle_timeout(t2 + Duration::from_secs(1)).unwrap();
    assert_eq!(s.poll_io(), None, "not after 1 s this time");
    assert_eq!(s.poll_timeout(), Some(t2 + Duration::from_secs(2)));
    let t3 = t2 + Duration::from_secs(2);
    s.handle_timeout(t3).unwrap();
    assert_eq!(s.poll_io(), Some(SenderIo::Reopen { file: id }));
    let last = s.reopened(t3, id, Ok(now_entry.clone())).unwrap();
    drain(&mut s, t3);
    std::iter::from_fn(|| s.poll_event()).for_each(drop);

    // A third change is past `changed_retries`: it fails, not delivered,
    // and the session ends.
    assert_eq!(
        send_whole(&mut s, t3, last),
        vec![SenderIo::Confirm { file: last }]
    );
    s.confirmed(t3, last, Err((FailKind::Changed, "modified".into())));
    let sent = failed_then_bye(&mut s, t3, "it was not delivered (sent 3 times)");
    assert!(
        matches!(sent.first(), Some(Message::FileError { .. })),
        "{sent:?}"
    );
}

/// What the sender sends now, which ends with `Bye`, after an event that
/// failed a file saying `says`.
fn failed_then_bye(s: &mut Sender<()>, now: Instant, says: &str) -> Vec<Message> {
    let sent = drain(s, now);
    assert_eq!(sent.last(), Some(&Message::Bye), "{sent:?}");
    let failed: Vec<Event> = std::iter::from_fn(|| s.poll_event()).collect();
    assert!(
        failed
            .iter()
            .any(|e| matches!(e, Event::FileError { error, .. } if error.contains(says))),
        "{failed:?}"
    );
    sent
}

#[test]
fn an_unchanged_file_is_committed_after_the_check() {
    let t0 = Instant::now();
    let mut s: Sender<()> = Sender::push(SessionConfig::default(), t0);
    s.push_job(t0, whole_job(one_file(3000)));
    drain(&mut s, t0);
    read_until_the_check(&mut s, t0, 1);
    s.confirmed(t0, 1, Ok(()));
    assert!(matches!(
        drain(&mut s, t0).as_slice(),
        [Message::Commit { id: 1, .. }]
    ));
}

/// A fan-out sender whose reads give chunk `i` the digest `[i; 32]`.
fn sealed_sender(cfg: SessionConfig, now: Instant) -> (Sender<()>, haul_proto::OriginKey) {
    let origin = std::sync::Arc::new(haul_proto::seal::Origin::generate().unwrap());
    let key = origin.public();
    let mut s: Sender<()> = Sender::push(cfg, now);
    s.seal_with(origin);
    (s, key)
}

/// The root of a file whose chunk `i` has digest `[i; 32]`.
fn root_of(entry: &Entry) -> haul_proto::Digest {
    let digests: Vec<_> = (0..entry.chunk_count()).map(|i| [i as u8; 32]).collect();
    haul_proto::digest::root_from_digests(&digests, entry.chunk_size, entry.size).unwrap()
}

#[test]
fn a_fan_out_origin_vouches_for_a_files_root_only_after_it_held_still() {
    let t0 = Instant::now();
    let (mut s, key) = sealed_sender(SessionConfig::default(), t0);
    let entry = one_file(3000);
    s.push_job(t0, whole_job(entry.clone()));
    s.push_job(
        t0,
        whole_job(Entry {
            path: "g".into(),
            ..entry.clone()
        }),
    );
    drain(&mut s, t0);
    read_until_the_check(&mut s, t0, 1);
    s.confirmed(t0, 1, Ok(()));
    let sent = drain(&mut s, t0);
    let root = root_of(&entry);
    let hash = haul_proto::seal::entry_hash(&entry);
    match sent.as_slice() {
        [Message::Vouched {
            id: 1,
            root: r,
            seal,
        }, Message::Commit { id: 1, root: c }] => {
            assert_eq!((*r, *c), (root, root));
            assert!(haul_proto::seal::root_sealed(&key, &hash, &root, seal));
        }
        other => panic!("{other:?}"),
    }
    // A read torn by a writer: never vouched for, whatever else was sealed.
    changed_while_read(&mut s, t0, 2);
}

#[test]
fn a_relay_never_vouched_for_fails_the_file_by_the_idle_limit_and_commits_nothing() {
    let t0 = Instant::now();
    let idle = Duration::from_secs(3);
    let cfg = SessionConfig {
        idle,
        ..SessionConfig::default()
    };
    let (mut s, _) = sealed_sender(cfg, t0);
    s.push_job(t0, whole_job(one_file(3000)));
    s.close_when_done();
    drain(&mut s, t0);
    // The confirmation waits (a relay's: the origin's root seal has not
    // come): the session's own deadline bounds the wait.
    assert_eq!(
        send_whole(&mut s, t0, 1),
        vec![SenderIo::Confirm { file: 1 }]
    );
    assert!(s.poll_timeout().is_some_and(|t| t <= t0 + idle));
    let t1 = t0 + idle;
    s.handle_timeout(t1).unwrap();
    let sent = failed_then_bye(&mut s, t1, "did not vouch for this version");
    assert!(
        !sent
            .iter()
            .any(|m| matches!(m, Message::Vouched { .. } | Message::Commit { .. })),
        "{sent:?}"
    );
    assert!(
        matches!(sent.first(), Some(Message::FileError { id: 1, .. })),
        "{sent:?}"
    );
    // An answer that comes after all changes nothing.
    s.confirmed(t1, 1, Ok(()));
    assert!(drain(&mut s, t1).is_empty());
}

/// A confirmation whose wait moves (another stripe of the file read a
/// chunk) is bounded by silence, not by a fixed time: a large file's
/// stripes may end minutes apart. Progress pushes the deadline on; once
/// nothing moves for the idle limit, the file fails as before.
#[test]
fn a_confirmation_that_progresses_waits_past_the_idle_limit() {
    let t0 = Instant::now();
    let idle = Duration::from_secs(3);
    let cfg = SessionConfig {
        idle,
        ..SessionConfig::default()
    };
    let (mut s, _) = sealed_sender(cfg, t0);
    s.push_job(t0, whole_job(one_file(3000)));
    s.close_when_done();
    drain(&mut s, t0);
    assert_eq!(
        send_whole(&mut s, t0, 1),
        vec![SenderIo::Confirm { file: 1 }]
    );
    // Progress every two seconds for ten: never overdue.
    let mut now = t0;
    for _ in 0..5 {
        now += Duration::from_secs(2);
        s.confirm_progressed(now, 1);
        s.handle_timeout(now).unwrap();
        assert!(
            s.poll_timeout().is_some_and(|t| t > now),
            "still waiting at {:?}",
            now - t0
        );
    }
    let sent = drain(&mut s, now);
    assert!(
        !sent.iter().any(|m| matches!(m, Message::FileError { .. })),
        "nothing failed while it moved: {sent:?}"
    );
    // Then silence: it fails one idle limit after the last progress.
    let late = now + idle;
    s.handle_timeout(late).unwrap();
    failed_then_bye(&mut s, late, "did not vouch for this version");
}

/// The origin of a striped fan-out as a stripe's sender sees it: vouches
/// for the whole file's root once every stripe held still (`root`), or not.
#[derive(Debug)]
struct StripeOrigin {
    origin: haul_proto::seal::Origin,
    root: Option<haul_proto::Digest>,
}

impl crate::Sealer for StripeOrigin {
    fn entry(&self, entry: &Entry) -> Result<haul_proto::Seal, String> {
        crate::Sealer::entry(&self.origin, entry)
    }

    fn chunk(
        &self,
        entry: &Entry,
        index: u32,
        digest: &haul_proto::Digest,
    ) -> Result<haul_proto::Seal, String> {
        crate::Sealer::chunk(&self.origin, entry, index, digest)
    }

    fn root(&self, entry: &Entry, root: &haul_proto::Digest) -> Result<haul_proto::Seal, String> {
        crate::Sealer::root(&self.origin, entry, root)
    }

    fn stripe_root(&self, entry: &Entry) -> Result<(haul_proto::Digest, haul_proto::Seal), String> {
        let root = self
            .root
            .ok_or("another stripe of it changed while it was read")?;
        Ok((
            root,
            self.origin
                .seal_root(&haul_proto::seal::entry_hash(entry), &root),
        ))
    }
}

/// A striped fan-out: a node puts a file together from stripes that came
/// over several sessions only under the root the origin vouched for, given
/// after every stripe was confirmed as one version. A stripe read clean but
/// never vouched for (torn at the origin in another stripe), or vouched for
/// by anyone but the origin, is never assembled: the origin's `FileError`
/// drops it, and a silent sender is timed out by the idle limit.
#[test]
fn a_stripe_is_put_together_only_under_the_root_the_origin_vouched_for() {
    let t0 = Instant::now();
    let idle = Duration::from_secs(3);
    let cfg = SessionConfig {
        idle,
        ..SessionConfig::default()
    };
    let origin = haul_proto::seal::Origin::generate().unwrap();
    let entry = one_file(3000);
    let hash = haul_proto::seal::entry_hash(&entry);
    let stripe_in = |r: &mut Receiver, id: u32| stripe_arrives(r, t0, &origin, &entry, id, 1, 3);
    let receiver = || {
        let mut r = Receiver::for_push(cfg.clone(), String::new(), t0);
        r.check_origin(std::sync::Arc::new(crate::OriginPublic(origin.public())));
        r
    };

    // Clean, but nothing vouched for yet: not put together; a root sealed
    // by another key changes nothing.
    let mut r = receiver();
    stripe_in(&mut r, 1);
    assert_eq!(r.poll_io(), None);
    let forger = haul_proto::seal::Origin::generate().unwrap();
    let root = root_of(&entry);
    let seal = forger.seal_root(&hash, &root);
    r.handle(t0, Message::Vouched { id: 1, root, seal })
        .unwrap();
    assert_eq!(r.poll_io(), None);
    // The origin dropped that version (another stripe changed while read):
    // the stripe is let go, never assembled.
    let dropped = Message::FileError {
        id: 1,
        code: ErrorCode::Io,
        message: "changed while it was read".into(),
    };
    r.handle(t0, dropped).unwrap();
    assert_eq!(r.poll_io(), Some(ReceiverIo::Forget { file: 1 }));
    assert_eq!(r.poll_io(), None);

    // A sender that never vouches and goes silent: the wait is bounded.
    let mut r = receiver();
    stripe_in(&mut r, 1);
    let due = r.poll_timeout().unwrap();
    assert!(due <= t0 + idle, "{due:?}");
    assert!(r.handle_timeout(t0 + idle).is_err());
    assert!(!std::iter::from_fn(|| r.poll_io()).any(|io| matches!(io, ReceiverIo::Assemble { .. })));

    // The stripe's sender: `Vouched` for the whole root only once its own
    // stripe was confirmed and the origin vouches; otherwise it fails.
    for vouches in [true, false] {
        let mut s: Sender<()> = Sender::push(cfg.clone(), t0);
        let sealer = StripeOrigin {
            origin: haul_proto::seal::Origin::generate().unwrap(),
            root: vouches.then_some(root),
        };
        let key = sealer.origin.public();
        s.seal_with(std::sync::Arc::new(sealer));
        s.push_job(
            t0,
            SendJob {
                content: None,
                entry: entry.clone(),
                first: 1,
                end: 3,
                group: None,
                source: (),
            },
        );
        s.close_when_done();
        drain(&mut s, t0);
        let need = Message::Need {
            id: 1,
            skip: false,
            have: Vec::new(),
        };
        s.handle(t0, need).unwrap();
        while let Some(io) = s.poll_io() {
            if let SenderIo::Read { file, index } = io {
                s.read_done(t0, file, index, Ok([index as u8; 32]));
            }
        }
        drain(&mut s, t0);
        let clean = Message::RangeStatus {
            id: 1,
            bad: Vec::new(),
        };
        s.handle(t0, clean).unwrap();
        assert_eq!(s.poll_io(), Some(SenderIo::Confirm { file: 1 }));
        assert!(drain(&mut s, t0).is_empty());
        s.confirmed(t0, 1, Ok(()));
        let sent = drain(&mut s, t0);
        match (vouches, sent.as_slice()) {
            (
                true,
                [Message::Vouched {
                    id: 1,
                    root: r,
                    seal,
                }],
            ) => {
                assert_eq!(*r, root);
                assert!(haul_proto::seal::root_sealed(&key, &hash, &root, seal));
            }
            (false, [Message::FileError { id: 1, .. }, ..]) => {}
            (_, other) => panic!("vouches {vouches}: {other:?}"),
        }
    }
}

#[test]
fn only_the_seals_of_a_skipped_file_may_come_from_a_record() {
    let t0 = Instant::now();
    let entry = one_file(3000);
    // A node that holds the file skips it: the origin seals every chunk
    // the node relays, and a record may give those digests.
    let (mut s, _) = sealed_sender(SessionConfig::default(), t0);
    s.push_job(t0, whole_job(entry.clone()));
    drain(&mut s, t0);
    let skip = Message::Need {
        id: 1,
        skip: true,
        have: Vec::new(),
    };
    s.handle(t0, skip).unwrap();
    assert_eq!(
        s.poll_io(),
        Some(SenderIo::Hash {
            file: 1,
            indices: vec![0, 1, 2],
            sealing: true,
        })
    );
    // Claims are checked against the bytes themselves: a record could
    // accept a chunk of another version, a torn file.
    let (mut s, _) = sealed_sender(SessionConfig::default(), t0);
    s.push_job(t0, whole_job(entry));
    drain(&mut s, t0);
    let claims = Message::Need {
        id: 1,
        skip: false,
        have: vec![(1, [1; 32])],
    };
    s.handle(t0, claims).unwrap();
    assert_eq!(
        s.poll_io(),
        Some(SenderIo::Hash {
            file: 1,
            indices: vec![1],
            sealing: false,
        })
    );
}

/// What a fan-out receiver counts against the sender of a session: a seal
/// that fails (an entry's, a chunk's) and bytes that do not hash to a
/// sealed digest — never an offer with no seal at all, which is how an
/// honest relay offers a version it holds no seals of any more.
#[test]
fn only_a_failed_seal_or_unsealed_bytes_are_evidence_against_the_sender() {
    let t0 = Instant::now();
    let origin = haul_proto::seal::Origin::generate().unwrap();
    let other = haul_proto::seal::Origin::generate().unwrap();
    let entry = one_file(3000);
    let hash = haul_proto::seal::entry_hash(&entry);
    let mut r = Receiver::for_push(SessionConfig::default(), String::new(), t0);
    r.check_origin(std::sync::Arc::new(crate::OriginPublic(origin.public())));
    let evidence = |r: &mut Receiver| -> Vec<Option<u32>> {
        std::iter::from_fn(|| r.poll_event())
            .filter_map(|e| match e {
                Event::SealFailed { chunk, .. } => Some(chunk),
                _ => None,
            })
            .collect()
    };
    let offer = |id, seal| Message::Offer {
        content: None,
        id,
        entry: entry.clone(),
        first: 0,
        end: entry.chunk_count(),
        seal,
    };
    // No seal: refused, no evidence.
    r.handle(t0, offer(1, None)).unwrap();
    assert!(evidence(&mut r).is_empty());
    // Another key's seal: refused, evidence.
    r.handle(t0, offer(2, Some(other.seal_entry(&entry))))
        .unwrap();
    assert_eq!(evidence(&mut r), [None]);
    // The origin's: taken; a chunk sealed by another key is evidence, one
    // with no seal is not, and one whose bytes fail its sealed digest is.
    r.handle(t0, offer(3, Some(origin.seal_entry(&entry))))
        .unwrap();
    let io: Vec<ReceiverIo> = std::iter::from_fn(|| r.poll_io()).collect();
    let Some(file) = io.iter().find_map(|io| match io {
        ReceiverIo::Prepare { file, .. } => Some(*file),
        _ => None,
    }) else {
        panic!("prepare: {io:?}")
    };
    r.prepared(t0, file, Ok(Prepared::Receive { have: Vec::new() }));
    let chunk = |index: u32, seal| ChunkHeader {
        packed: None,
        from_record: false,
        id: 3,
        index,
        len: entry.chunk_len(index),
        digest: [index as u8; 32],
        seal,
    };
    r.handle_chunk(t0, chunk(0, Some(other.seal_chunk(&hash, 0, &[0; 32]))))
        .unwrap();
    r.handle_chunk(t0, chunk(1, None)).unwrap();
    assert_eq!(evidence(&mut r), [Some(0)]);
    let sealed = Some(origin.seal_chunk(&hash, 2, &[2; 32]));
    assert!(matches!(
        r.handle_chunk(t0, chunk(2, sealed)).unwrap(),
        ChunkAction::Write { .. }
    ));
    assert!(evidence(&mut r).is_empty());
    r.chunk_done(t0, 3, 2, ChunkOutcome::Bad);
    assert!(
        evidence(&mut r).is_empty(),
        "once: a flipped bit on the way"
    );
    r.handle(t0, Message::RangeEnd { id: 3, chunks: 3 })
        .unwrap();
    while r.poll_transmit(t0).is_some() {}
    let sealed = Some(origin.seal_chunk(&hash, 2, &[2; 32]));
    assert!(matches!(
        r.handle_chunk(t0, chunk(2, sealed)).unwrap(),
        ChunkAction::Write { .. }
    ));
    r.chunk_done(t0, 3, 2, ChunkOutcome::Bad);
    assert_eq!(evidence(&mut r), [Some(2)], "the same chunk twice");
}

/// A fan-out's relayed session: a keepalive every 250 ms, the peer's
/// silence told after 2 s.
fn relayed_cfg() -> SessionConfig {
    SessionConfig {
        heartbeat: Some(crate::Heartbeat {
            every: Duration::from_millis(250),
            quiet: Duration::from_millis(2000),
        }),
        ..SessionConfig::default()
    }
}

/// A fan-out's sending edge: its sender says something every heartbeat
/// with nothing of its own to do (a relay waiting for its upstream), not
/// only while busy; a plain push's sender stays silent then.
#[test]
fn a_relayed_sender_keeps_alive_every_heartbeat_with_nothing_to_do() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let cfg = relayed_cfg();
    let mut s: Sender<()> = Sender::push(cfg, t0);
    assert!(drain(&mut s, t0).is_empty());
    assert_eq!(s.poll_timeout(), Some(t0 + ms(250)));
    s.handle_timeout(t0 + ms(250)).unwrap();
    assert_eq!(drain(&mut s, t0 + ms(250)), vec![Message::KeepAlive]);
    assert_eq!(s.poll_timeout(), Some(t0 + ms(500)));
    // Without a heartbeat, an idle pusher has no timer at all.
    let mut s: Sender<()> = Sender::push(SessionConfig::default(), t0);
    assert_eq!(s.poll_timeout(), None);
    s.handle_timeout(t0 + ms(250)).unwrap();
    assert!(drain(&mut s, t0 + ms(250)).is_empty());
}

/// A fan-out's receiver tells its observer when its sender — which keeps
/// the edge alive every heartbeat — said nothing for the heartbeat's
/// `quiet`: once it is reached, again every quarter of it while it lasts,
/// and anew after the sender spoke. Bytes its connection saw count as
/// speaking (a payload arriving), and the session itself goes on.
#[test]
fn a_relayed_receiver_tells_its_senders_silence_as_it_grows_and_goes_on() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let cfg = relayed_cfg();
    let quiet_events = |r: &mut Receiver| -> Vec<u64> {
        std::iter::from_fn(|| r.poll_event())
            .filter_map(|e| match e {
                Event::PeerQuiet { millis } => Some(millis),
                _ => None,
            })
            .collect()
    };
    let mut r = Receiver::for_push(cfg, String::new(), t0);
    r.handle(t0, Message::KeepAlive).unwrap();
    // Keepalives every 250 ms for a while: never quiet.
    for k in 1..=8u32 {
        let now = t0 + ms(250) * k;
        r.handle(now, Message::KeepAlive).unwrap();
        r.handle_timeout(now).unwrap();
    }
    assert!(quiet_events(&mut r).is_empty());
    let last = t0 + ms(2000);
    // Then nothing — its own flushes (keepalives going out) do not count:
    // told at 2 s of silence, not before.
    r.flushed(last + ms(1500));
    // (Told only where the driver waits on the connection: `tell_quiet`.)
    let step = |r: &mut Receiver, at: Instant| {
        r.handle_timeout(at).unwrap();
        r.tell_quiet(at);
    };
    step(&mut r, last + ms(1999));
    assert!(quiet_events(&mut r).is_empty());
    assert_eq!(r.poll_timeout(), Some(last + ms(2000)));
    step(&mut r, last + ms(2000));
    assert_eq!(quiet_events(&mut r), vec![2000]);
    // Again every 500 ms while it lasts, the silence grown.
    assert!(r.poll_timeout() <= Some(last + ms(2500)));
    step(&mut r, last + ms(2400));
    assert!(quiet_events(&mut r).is_empty());
    step(&mut r, last + ms(2500));
    assert_eq!(quiet_events(&mut r), vec![2500]);
    // Bytes arrived (a payload in the making): the silence ends, and a new
    // one is told from its own start.
    r.arrived(last + ms(2600));
    step(&mut r, last + ms(3000));
    assert!(quiet_events(&mut r).is_empty());
    step(&mut r, last + ms(4600));
    assert_eq!(quiet_events(&mut r), vec![2000]);
    // Timers alone (the driver back from its own work) tell nothing.
    r.handle_timeout(last + ms(7000)).unwrap();
    assert!(quiet_events(&mut r).is_empty());
    step(&mut r, last + ms(7000));
    assert_eq!(quiet_events(&mut r), vec![4400]);
    // An arrival older than the last word changes nothing.
    r.arrived(t0);
    step(&mut r, last + ms(7500));
    assert_eq!(quiet_events(&mut r), vec![4900]);
    // The session lives on until `idle`.
    assert!(r.handle(last + ms(7600), Message::KeepAlive).is_ok());
    // Without a heartbeat, silence is never told.
    let mut r = Receiver::for_push(SessionConfig::default(), String::new(), t0);
    r.handle_timeout(t0 + ms(5000)).unwrap();
    r.tell_quiet(t0 + ms(5000));
    assert!(quiet_events(&mut r).is_empty());
}

/// v23: a closing sender says `Bye` right after its last `Commit` and
/// takes the verdicts still owed after it; a receiver's `Bye` that leaves a
/// committed file without one ends the session with that file given back
/// (to be sent again), never reported as delivered.
#[test]
fn a_closing_sender_says_goodbye_with_its_last_commit_and_takes_the_verdicts_after_it() {
    let t0 = Instant::now();
    let start = |paths: &[&str]| {
        let mut s: Sender<()> = Sender::push(SessionConfig::default(), t0);
        for path in paths {
            let entry = Entry {
                path: (*path).into(),
                ..one_file(3000)
            };
            s.push_job(t0, whole_job(entry));
        }
        s.close_when_done();
        let offers = drain(&mut s, t0);
        assert_eq!(offers.len(), paths.len(), "{offers:?}");
        s
    };
    let commit = |s: &mut Sender<()>, id| {
        assert_eq!(send_whole(s, t0, id), vec![SenderIo::Confirm { file: id }]);
        s.confirmed(t0, id, Ok(()));
        drain(s, t0)
    };
    let done = |id| Message::Done {
        id,
        ok: true,
        root: [id as u8; 32],
        message: String::new(),
    };
    let mut s = start(&["a", "b"]);
    let sent = commit(&mut s, 1);
    assert!(
        matches!(sent.as_slice(), [Message::Commit { id: 1, .. }]),
        "{sent:?}"
    );
    // The second file is still being sent: no goodbye yet.
    let sent = commit(&mut s, 2);
    assert!(
        matches!(
            sent.as_slice(),
            [Message::Commit { id: 2, .. }, Message::Bye]
        ),
        "{sent:?}"
    );
    s.handle(t0, done(1)).unwrap();
    s.handle(t0, done(2)).unwrap();
    assert!(!s.is_finished());
    s.handle(t0, Message::Bye).unwrap();
    assert!(s.is_finished());
    let delivered: Vec<(String, bool)> = std::iter::from_fn(|| s.poll_event())
        .filter_map(|e| match e {
            Event::FileDone { path, skipped, .. } => Some((path, skipped)),
            _ => None,
        })
        .collect();
    assert_eq!(delivered, vec![("a".into(), false), ("b".into(), false)]);

    // A receiver that says Bye with a verdict still owed.
    let mut s = start(&["c"]);
    let sent = commit(&mut s, 1);
    assert!(
        matches!(
            sent.as_slice(),
            [Message::Commit { id: 1, .. }, Message::Bye]
        ),
        "{sent:?}"
    );
    assert!(s.handle(t0, Message::Bye).is_err());
    assert!(!std::iter::from_fn(|| s.poll_event()).any(|e| matches!(e, Event::FileDone { .. })));
    let back: Vec<String> = s
        .into_unfinished()
        .into_iter()
        .map(|j| j.entry.path)
        .collect();
    assert_eq!(back, vec!["c".to_string()]);
}
