//! Feeds every seed and saved input under `fuzz/corpus/TARGET/` to its
//! target (the functions the cargo-fuzz targets call), on stable Rust: a
//! parser that panics on an input the fuzzer once found fails CI.

use std::path::PathBuf;

#[test]
fn every_corpus_file_of_every_target() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut total = 0;
    for (name, target) in haul_fuzz_targets::TARGETS {
        let dir = root.join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            assert_eq!(
                *name,
                "decode_frame",
                "no corpus for {name} at {}",
                dir.display()
            );
            continue;
        };
        let mut files = 0;
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let result = std::panic::catch_unwind(|| target(&data));
            assert!(result.is_ok(), "{name} panicked on {}", path.display());
            files += 1;
        }
        assert!(files > 0, "the corpus of {name} is empty");
        total += files;
    }
    assert!(total >= 30, "only {total} corpus files");
}
