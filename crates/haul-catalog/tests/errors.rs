//! Catalog errors say what is wrong and what to do, not SQLite's code.

use haul_catalog::SqliteCatalog;

fn open_error(path: &std::path::Path) -> String {
    match SqliteCatalog::open(path) {
        Ok(_) => panic!("{} opened", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_file_that_is_not_a_catalog_is_named_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalog.db");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let e = open_error(&path);
    assert!(e.contains("corrupt or not a haul catalog"), "{e}");
    assert!(e.contains("move it aside"), "{e}");
}

#[test]
fn a_directory_that_cannot_be_made_is_named_so() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("plain"), b"x").unwrap();
    let e = open_error(&dir.path().join("plain/catalog.db"));
    assert!(e.contains("its directory does not exist"), "{e}");
    assert!(e.contains("plain/catalog.db"), "{e}");
}
