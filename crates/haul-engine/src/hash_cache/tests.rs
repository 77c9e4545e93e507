use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::*;
use haul_proto::digest::chunk_digest;

/// Tests that change the process's settings take turns, and set them back.
static TURN: Mutex<()> = Mutex::new(());

struct Using(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

impl Using {
    fn settings(s: Settings) -> Self {
        let guard = TURN.lock().unwrap_or_else(|e| e.into_inner());
        configure(s);
        Self(guard)
    }
}

impl Drop for Using {
    fn drop(&mut self) {
        configure(Settings::DEFAULT);
    }
}

/// The settings, with a store: a record whose write on the file was slow
/// (this machine is shared) is kept there instead, so whether a record is
/// kept does not depend on the scheduler.
fn defaults(store: Option<PathBuf>, ignore_ctime: bool) -> Settings {
    Settings {
        ignore_ctime,
        store: store.or_else(|| Some(STORE.path().to_path_buf())),
        ..Settings::DEFAULT
    }
}

static STORE: std::sync::LazyLock<tempfile::TempDir> =
    std::sync::LazyLock::new(|| tempfile::tempdir().unwrap());

/// A file of `size` bytes whose mtime is an hour old, and its digests.
fn old_file(
    dir: &std::path::Path,
    name: &str,
    size: usize,
    cs: u32,
) -> (File, Vec<Digest>, Digest) {
    let data: Vec<u8> = (0..size).map(|i| (i * 13 % 251) as u8).collect();
    let path = dir.join(name);
    let mut f = File::create(&path).unwrap();
    f.write_all(&data).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    drop(f);
    let chunks = data
        .chunks(cs as usize)
        .enumerate()
        .map(|(i, c)| chunk_digest(c, i as u32, cs, size as u64))
        .collect();
    (
        File::open(path).unwrap(),
        chunks,
        *blake3::hash(&data).as_bytes(),
    )
}

fn id(f: &File) -> FileIdentity {
    FileIdentity::of(f).unwrap()
}

#[test]
fn a_record_set_on_the_file_is_trusted_until_the_file_changes() {
    let _turn = Using::settings(defaults(None, false));
    let tmp = tempfile::tempdir().unwrap();
    let (f, chunks, root) = old_file(tmp.path(), "f", 100_000, 16 << 10);
    let before = id(&f);
    assert!(look_up(&f, &before).is_none());
    fill(&f, &before, 16 << 10, root, chunks.clone());
    let after = id(&f);
    if before.ctime != after.ctime && look_up(&f, &after).is_some_and(|r| r.stamped.is_some()) {
        assert!(
            explains(&f, &before, &after),
            "the record explains its own write"
        );
    }
    let r = look_up(&f, &after).expect("trusted after its own write");
    assert_eq!((r.root, r.chunks.clone()), (root, chunks.clone()));
    assert_eq!(digests(&f, &after, 32 << 10).unwrap().len(), 4);
    assert!(
        digests(&f, &after, 4 << 10).is_none(),
        "smaller chunks cannot be derived"
    );

    // Edited in place, its mtime set back (`touch -d`): ctime tells.
    // Past the window, and past the coarse clock's lag of one tick.
    std::thread::sleep(STAMP_WINDOW + TIMESTAMP_GRAIN * 2);
    let w = std::fs::OpenOptions::new()
        .write(true)
        .open(tmp.path().join("f"))
        .unwrap();
    w.write_all_at(b"edited", 10).unwrap();
    w.set_modified(SystemTime::UNIX_EPOCH + Duration::new(after.mtime.0 as u64, after.mtime.1))
        .unwrap();
    let edited = id(&f);
    assert_eq!(edited.mtime, after.mtime);
    assert!(
        look_up(&f, &edited).is_none(),
        "a ctime the record does not explain"
    );
    assert!(!explains(&f, &after, &edited));
    drop(_turn);
    let _turn = Using::settings(defaults(None, true));
    assert!(
        look_up(&f, &edited).is_some(),
        "with --ignore-ctime it is trusted (and stale)"
    );
}

#[test]
fn a_record_copied_onto_another_file_is_not_trusted() {
    let _turn = Using::settings(defaults(None, false));
    let tmp = tempfile::tempdir().unwrap();
    let (f, chunks, root) = old_file(tmp.path(), "f", 100_000, 16 << 10);
    fill(&f, &id(&f), 16 << 10, root, chunks);
    let mut buf = vec![0u8; 64 << 10];
    let n = haul_root::file_get_xattr(&f, XATTR.as_bytes(), &mut buf)
        .unwrap()
        .unwrap();
    let (g, _, _) = old_file(tmp.path(), "g", 100_000, 16 << 10);
    haul_root::file_set_xattr(&g, XATTR.as_bytes(), &buf[..n]).unwrap();
    assert!(
        look_up(&g, &id(&g)).is_none(),
        "its inode is not the one recorded"
    );
    // Renamed (same inode): a rename moves the ctime, so only with
    // --ignore-ctime is the record trusted still.
    std::thread::sleep(STAMP_WINDOW + TIMESTAMP_GRAIN * 2);
    std::fs::rename(tmp.path().join("f"), tmp.path().join("renamed")).unwrap();
    let f = File::open(tmp.path().join("renamed")).unwrap();
    assert!(look_up(&f, &id(&f)).is_none());
    drop(_turn);
    let _turn = Using::settings(defaults(None, true));
    assert!(look_up(&f, &id(&f)).is_some());
    assert!(
        look_up(&g, &id(&g)).is_none(),
        "a copy's record not even so"
    );
    drop(_turn);
    // A hard link: one inode, one record, whichever name opens it — and
    // linking moves the ctime too.
    let _turn = Using::settings(defaults(None, false));
    std::fs::hard_link(tmp.path().join("renamed"), tmp.path().join("linked")).unwrap();
    let linked = File::open(tmp.path().join("linked")).unwrap();
    assert!(look_up(&linked, &id(&linked)).is_none());
    drop(_turn);
    let _turn = Using::settings(defaults(None, true));
    assert_eq!(
        look_up(&linked, &id(&linked)).map(|r| r.root),
        look_up(&f, &id(&f)).map(|r| r.root)
    );
    assert!(look_up(&linked, &id(&linked)).is_some());
}

#[test]
fn new_files_and_small_ones_are_not_cached() {
    let _turn = Using::settings(defaults(None, false));
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("new");
    std::fs::write(&path, vec![1u8; 100_000]).unwrap();
    // Modified "now" as far as the racy rule can tell, whatever the
    // scheduler does: an mtime ahead of the clock.
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(SystemTime::now() + Duration::from_secs(3600))
        .unwrap();
    let f = File::open(&path).unwrap();
    fill(
        &f,
        &id(&f),
        1 << 20,
        *blake3::hash(&[1u8; 100_000]).as_bytes(),
        Vec::new(),
    );
    assert!(
        look_up(&f, &id(&f)).is_none(),
        "not older than the record: racy"
    );
    let (small, _, root) = old_file(tmp.path(), "small", 1000, 1 << 20);
    fill(&small, &id(&small), 1 << 20, root, Vec::new());
    assert!(look_up(&small, &id(&small)).is_none());
}

#[test]
fn a_record_that_does_not_fit_the_file_goes_to_the_store() {
    let store = tempfile::tempdir().unwrap();
    let _turn = Using::settings(defaults(Some(store.path().join("hashes")), false));
    let tmp = tempfile::tempdir().unwrap();
    // 200 chunks: 6.4 KB of digests, more than ext4 keeps in an attribute;
    // on a filesystem that takes it, the record is on the file instead.
    let (f, chunks, root) = old_file(tmp.path(), "f", 200 << 10, 1 << 10);
    let before = id(&f);
    fill(&f, &before, 1 << 10, root, chunks);
    let now = id(&f);
    let r = look_up(&f, &now).expect("kept somewhere");
    assert_eq!(r.root, root);
    if r.stamped.is_none() {
        assert!(store::read(&store.path().join("hashes"), &now, |_| true).is_some());
    }
    let _ = before;
    drop(_turn);
    let _off = Using::settings(Settings {
        enabled: false,
        ..Settings::DEFAULT
    });
    assert!(look_up(&f, &now).is_none(), "--no-hash-cache");
}

#[test]
fn an_edit_in_the_very_tick_of_the_record_is_seen_by_its_mtime() {
    let _turn = Using::settings(defaults(None, false));
    let tmp = tempfile::tempdir().unwrap();
    let (f, chunks, root) = old_file(tmp.path(), "f", 100_000, 16 << 10);
    fill(&f, &id(&f), 16 << 10, root, chunks);
    assert!(look_up(&f, &id(&f)).is_some());
    // At once, within the window the record's own write stands for: the
    // ctime cannot tell, the new mtime does.
    let w = std::fs::OpenOptions::new()
        .write(true)
        .open(tmp.path().join("f"))
        .unwrap();
    w.write_all_at(b"x", 5).unwrap();
    assert!(look_up(&f, &id(&f)).is_none());
}

#[test]
fn a_chunk_sent_again_is_read_from_disk_and_a_stale_record_is_found_out_and_replaced() {
    use crate::chunks::{ChunkRead, ChunkSource, LocalFile};
    let cached = |digest| ChunkRead {
        digest,
        from_record: true,
    };
    let _turn = Using::settings(defaults(None, true));
    let tmp = tempfile::tempdir().unwrap();
    let cs = 16 << 10;
    let (f, chunks, root) = old_file(tmp.path(), "f", 100_000, cs);
    fill(&f, &id(&f), cs, root, chunks.clone());
    let entry = haul_proto::Entry {
        attrs: None,
        path: "f".into(),
        kind: haul_proto::EntryKind::File,
        size: 100_000,
        mode: 0o644,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size: cs,
    };
    let path = tmp.path().join("f");
    let mut buf = Vec::new();
    {
        // Sent twice (lost on the way): the same digest, from the record
        // and then read from disk.
        let lf = LocalFile::open(File::open(&path).unwrap()).unwrap();
        assert_eq!(
            lf.read_chunk(&entry, 0, &mut buf, false).unwrap(),
            cached(chunks[0])
        );
        assert_eq!(
            lf.read_chunk(&entry, 0, &mut buf, false).unwrap(),
            ChunkRead::hashed(chunks[0])
        );
    }
    flush(Duration::from_secs(10));

    // Edited in place, size and mtime kept; --ignore-ctime trusts the record.
    std::thread::sleep(STAMP_WINDOW + TIMESTAMP_GRAIN * 2);
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    let w = File::options().write(true).open(&path).unwrap();
    w.write_all_at(b"edited", 2 * u64::from(cs) + 5).unwrap();
    w.set_modified(mtime).unwrap();
    drop(w);
    let data = std::fs::read(&path).unwrap();
    let real = chunk_digest(&data[2 * cs as usize..3 * cs as usize], 2, cs, 100_000);
    let lf = LocalFile::open(File::open(&path).unwrap()).unwrap();
    // A check no receiver makes is never answered from the record.
    assert_eq!(lf.hash_chunk(&entry, 2, &mut buf).unwrap(), real);
    // Sent: the record's (stale) digest; refused and asked again: the bytes'.
    assert_eq!(
        lf.read_chunk(&entry, 2, &mut buf, false).unwrap(),
        cached(chunks[2])
    );
    assert_eq!(
        lf.read_chunk(&entry, 2, &mut buf, false).unwrap(),
        ChunkRead::hashed(real)
    );
    assert_eq!(lf.confirm(), crate::Confirmation::Unchanged);
    drop(lf);
    flush(Duration::from_secs(10));
    // Hashed again whole once closed: the record now says what it holds.
    let now = File::open(&path).unwrap();
    let r = look_up(&now, &id(&now)).expect("kept again");
    assert_eq!(r.root, *blake3::hash(&data).as_bytes());
}

#[test]
fn a_record_serves_the_pieces_of_every_plan_up_to_its_depth_and_every_push() {
    use haul_proto::digest::chunk_size_for;
    let sizes = [
        MIN_SIZE,
        100_000,
        (3 << 20) + 17,
        10 << 20,
        (48 << 20) - 1,
        64 << 20,
        (200 << 20) + 5,
        70 << 30,
    ];
    for size in sizes {
        let chunk = chunk_size_for(size);
        let piece = piece_for(size, chunk);
        assert!(piece.is_power_of_two(), "{size}");
        // A push's chunks and every plan's pieces up to RECORD_DEPTH are
        // whole numbers of the record's pieces (derived by merging up).
        assert_eq!(chunk % piece, 0, "{size}");
        if size > u64::from(FINE_PIECE) * record::MAX_DIGESTS as u64 {
            // Over 64 GiB, coarser: a record holds at most MAX_DIGESTS.
            assert!(piece > FINE_PIECE, "{size}");
            continue;
        }
        assert!(piece <= FINE_PIECE, "{size}");
        for depth in 1..=RECORD_DEPTH {
            let p = haul_plan::piece_size(size, depth);
            assert_eq!(p % piece, 0, "size {size} depth {depth}: {p} / {piece}");
        }
        // At most 127 digests below the files 1 MiB pieces serve, so the
        // attribute (about 4 KB on ext4) holds the record of most.
        let digests = size.div_ceil(u64::from(piece));
        if size < u64::from(FINE_PIECE) * 64 {
            assert!(digests < 128, "{size}: {digests} digests");
        }
    }
}

#[test]
fn a_finer_record_in_the_store_wins_over_a_coarser_one_on_the_file() {
    let store = tempfile::tempdir().unwrap();
    let dir = store.path().join("hashes");
    let _turn = Using::settings(defaults(Some(dir.clone()), false));
    let tmp = tempfile::tempdir().unwrap();
    // 4 MiB, recorded as one 1 MiB-piece record would have been before
    // records kept the 64 KiB pieces a deep fan-out cuts it in.
    let size = 4 << 20;
    let (f, coarse, root) = old_file(tmp.path(), "f", size, 1 << 20);
    fill(&f, &id(&f), 1 << 20, root, coarse);
    let mut buf = vec![0u8; 64 << 10];
    if !matches!(
        haul_root::file_get_xattr(&f, XATTR.as_bytes(), &mut buf),
        Ok(Some(_))
    ) {
        eprintln!("no user xattrs here: nothing on the file to prefer");
        return;
    }
    let now = id(&f);
    assert_eq!(look_up(&f, &now).map(|r| r.chunk_size), Some(1 << 20));
    let fine_size = piece_for(size as u64, u32::MAX);
    assert_eq!(fine_size, 64 << 10);
    let (_, fine, _) = old_file(tmp.path(), "same-bytes", size, fine_size);
    store::write(
        &dir,
        &Record {
            chunk_size: fine_size,
            identity: now,
            written: super::now(),
            stamped: None,
            root,
            chunks: fine.clone(),
        },
    )
    .unwrap();
    let r = look_up(&f, &now).expect("a record");
    assert_eq!((r.chunk_size, r.chunks), (fine_size, fine.clone()));
    // And a fill of the same digests finds them kept: the file is not
    // written again (its ctime stays).
    let before = id(&f);
    fill(&f, &before, fine_size, root, fine);
    assert_eq!(id(&f), before);
}
