//! Large chunks are verified and written the same whether the receiver
//! writes them inline or on blocking threads (`ChunkWork`): a local copy
//! through the real sender and receiver, in each mode.

use std::sync::Arc;

use haul_node::{copy_local, ChunkWork, ClientOptions};
use haul_run::event::Quiet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_chunks_arrive_whole_in_either_write_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    // 10 MiB: chunks of 4, 4 and 2 MiB, all over the 256 KiB inline limit.
    let big: Vec<u8> = (0..10u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(src.join("sub/big.bin"), &big).unwrap();
    std::fs::write(src.join("small.txt"), b"small").unwrap();

    for mode in [ChunkWork::Inline, ChunkWork::Threads] {
        let dest = tmp.path().join(format!("{mode:?}"));
        let opts = ClientOptions {
            chunk_work: mode,
            ..ClientOptions::default()
        };
        let source = format!("{}/", src.display());
        let summary = copy_local(&[source], &dest, &opts, Arc::new(Quiet))
            .await
            .unwrap();
        assert_eq!(summary.failed, 0, "{mode:?}: {:?}", summary.failures);
        assert_eq!(summary.files_ok, 2, "{mode:?}");
        assert_eq!(
            std::fs::read(dest.join("sub/big.bin")).unwrap(),
            big,
            "{mode:?}"
        );
        let record = summary
            .files
            .iter()
            .find(|f| f.path == "sub/big.bin")
            .unwrap();
        assert_eq!(
            record.blake3,
            blake3::hash(&big).to_hex().to_string(),
            "{mode:?}"
        );
    }
}
