//! A sender streams a file from a staging file that is still being
//! received (what a relay does): its chunks go out as they verify, and the
//! copy downstream verifies whole.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use haul_engine::{ChunkSource, Destination};
use haul_node::buffers::ChunkBuffers;
use haul_node::drive::receive::{run_receiver, ReceiverCtx};
use haul_node::drive::send::{run_sender, JobFeed, SenderCtx};
use haul_node::jobs::{SendJob, Source, WorkQueue};
use haul_node::ChunkWork;
use haul_proto::digest::{chunk_digest, root_from_digests};
use haul_proto::{Entry, EntryKind};
use haul_session::{Event, Observer};
use haul_transport::{memory_pair, Timeouts};

/// Counts chunk bytes sent while the upstream writer is still going.
struct Early {
    writer_done: Arc<AtomicBool>,
    early_bytes: AtomicU64,
}

impl Observer for Early {
    fn event(&self, event: &Event) {
        if let Event::Progress { bytes, .. } = event {
            if !self.writer_done.load(Ordering::SeqCst) {
                self.early_bytes.fetch_add(*bytes, Ordering::SeqCst);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_still_being_received_is_sent_on_as_its_chunks_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let chunk = 64 << 10;
    let data: Vec<u8> = (0..(40 * chunk + 123) as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    let entry = Entry {
        attrs: None,
        path: "relayed.bin".into(),
        kind: EntryKind::File,
        size: data.len() as u64,
        mode: 0o644,
        mtime_sec: 1_700_000_000,
        mtime_nsec: 0,
        chunk_size: chunk as u32,
    };
    // Upstream: a destination receiving the file (its staging is the source).
    let upstream = Destination::open(&tmp.path().join("up")).unwrap();
    let staging = upstream.begin_file(&entry).unwrap();
    let writer_done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (staging, data, done) = (staging.clone(), data.clone(), writer_done.clone());
        std::thread::spawn(move || {
            // Chunks verify out of order and over time, as a receiving
            // session writes them.
            let count = data.len().div_ceil(chunk);
            let mut order: Vec<usize> = (0..count).collect();
            order.swap(0, 7);
            order.swap(3, count - 1);
            for i in order {
                let bytes = &data[i * chunk..((i + 1) * chunk).min(data.len())];
                let d = chunk_digest(bytes, i as u32, chunk as u32, data.len() as u64);
                staging.write_chunk(i as u32, bytes, &d).unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
            done.store(true, Ordering::SeqCst);
        })
    };

    // Downstream: a push of that staging file through the real drivers.
    let downstream = Destination::open(&tmp.path().join("down")).unwrap();
    let observer = Arc::new(Early {
        writer_done: writer_done.clone(),
        early_bytes: AtomicU64::new(0),
    });
    let source: Arc<dyn ChunkSource> = staging.clone();
    let queue = WorkQueue::fed_by(std::iter::once(SendJob {
        content: None,
        entry: entry.clone(),
        first: 0,
        end: entry.chunk_count(),
        group: None,
        source: Source::Open(source),
    }));
    let ((sr, sw), (rr, rw)) = memory_pair(Timeouts::default());
    let sctx = SenderCtx {
        observer: observer.clone(),
        window: 8,
        max_retries: 3,
        idle: Duration::from_secs(30),
        chunk_work: ChunkWork::for_this_machine(),
        buffers: ChunkBuffers::new(64 << 20),
        sealer: None,
        changed_retries: 0,
        stripes: None,
        heartbeat: None,
    };
    let rctx = ReceiverCtx {
        observer: Arc::new(haul_run::event::Quiet),
        dest: downstream.clone(),
        prefix: String::new(),
        window: 8,
        idle: Duration::from_secs(30),
        chunk_work: ChunkWork::for_this_machine(),
        buffers: ChunkBuffers::new(64 << 20),
        relay: None,
        quick_check: Some(Default::default()),
        replace_dirs: false,
        backups: None,
        heartbeat: None,
    };
    let receiving = tokio::spawn(run_receiver(rr, rw, None, rctx));
    let sent = run_sender(sr, sw, JobFeed::Queue(queue), sctx).await;
    assert!(sent.is_ok(), "the sender ended with an error");
    assert!(
        receiving.await.unwrap().is_ok(),
        "the receiver ended with an error"
    );
    writer.join().unwrap();

    let got = std::fs::read(tmp.path().join("down/relayed.bin")).unwrap();
    assert_eq!(got, data);
    let digests: Vec<_> = data
        .chunks(chunk)
        .enumerate()
        .map(|(i, c)| chunk_digest(c, i as u32, chunk as u32, data.len() as u64))
        .collect();
    assert_eq!(
        root_from_digests(&digests, chunk as u32, data.len() as u64).unwrap(),
        *blake3::hash(&got).as_bytes()
    );
    // Chunks went on while the file upstream was still arriving.
    assert!(
        observer.early_bytes.load(Ordering::SeqCst) > 0,
        "nothing was sent before the upstream file was complete"
    );
}
