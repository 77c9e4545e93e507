//! `haul check URL DIR` for FTP, SFTP, HTTP and S3: a remote tree compared
//! with a local one without downloading. Hashing the remote side would
//! mean reading it all, so contents are compared by the checksums the
//! source offers for each file (S3 ETag MD5, `x-amz-checksum-*`,
//! `Content-MD5`, `Digest`), computed over the local file; a file the
//! source offers none for is reported as not verifiable (sizes only).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use haul_engine::source::open_local;
use haul_engine::{Filter, LocalTree, Source as _, SourceEntry};
use haul_remote::{EntryKind, Remote, RemoteError};

use crate::listing::list_remote;
use crate::verify::Hashers;

use haul_run::check::{CheckMethod, CheckReport};

/// Compares `path` on `remote` (its contents) with local directory `dir`.
pub async fn check_remote(
    remote: Arc<dyn Remote>,
    path: &str,
    dir: &Path,
    filter: Filter,
) -> Result<CheckReport, RemoteError> {
    let filter = Arc::new(filter);
    let listing = list_remote(remote.clone(), path, true, filter.clone()).await?;
    let mut out = CheckReport::by(CheckMethod::RemoteChecksums);
    for (p, e) in listing.errors {
        out.unreadable.push((p, e));
    }
    let local = walk(dir, filter, &mut out)?;
    let base = path.trim_end_matches('/');
    let mut session = remote.connect().await?;
    let mut seen = BTreeSet::new();
    for listed in listing.entries {
        seen.insert(listed.path.clone());
        let Some(here) = local.get(&listed.path) else {
            out.only_in_src.push(listed.path);
            continue;
        };
        match listed.entry.kind {
            EntryKind::Dir | EntryKind::Other => continue,
            EntryKind::File => {}
        }
        if listed.entry.size != Some(here.entry.size) {
            out.differ.push(listed.path);
            continue;
        }
        // A stat tells the checksums a listing may leave out.
        let stated = match session.stat(&format!("{base}/{}", listed.path)).await {
            Ok(e) => e,
            Err(e) => {
                out.unreadable.push((listed.path, e.to_string()));
                continue;
            }
        };
        let sums = if stated.checksums.is_empty() {
            listed.entry.checksums
        } else {
            stated.checksums
        };
        if sums.is_empty() {
            out.unverifiable.push(listed.path);
            continue;
        }
        match local_mismatches(here, &sums) {
            Ok(0) => {
                out.same += 1;
                out.checksums.extend(sums.iter().map(|c| c.algorithm()));
            }
            Ok(_) => out.differ.push(listed.path),
            Err(e) => out.unreadable.push((listed.path, e)),
        }
    }
    for p in local.keys() {
        if !seen.contains(p) {
            out.only_in_dst.push(p.clone());
        }
    }
    Ok(out)
}

/// How many of `sums` the local file fails.
fn local_mismatches(e: &SourceEntry, sums: &[haul_remote::Checksum]) -> Result<usize, String> {
    let mut file = open_local(e).map_err(|e| e.to_string())?;
    let mut hashers = Hashers::for_checksums(sums);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|err| err.to_string())?;
        if n == 0 {
            break;
        }
        hashers.update(&buf[..n]);
    }
    Ok(hashers.check(sums).len())
}

/// The local tree's contents by relative path.
fn walk(
    dir: &Path,
    filter: Arc<Filter>,
    out: &mut CheckReport,
) -> Result<BTreeMap<String, SourceEntry>, RemoteError> {
    let shown = format!("{}/", dir.display().to_string().trim_end_matches('/'));
    let tree = LocalTree::new(&shown)
        .map_err(|e| RemoteError::Local(e.to_string()))?
        .with_filter(filter);
    let mut map = BTreeMap::new();
    for item in Box::new(tree).entries() {
        match item {
            Ok(e) => {
                map.insert(e.entry.path.clone(), e);
            }
            Err(e) if e.is_skip() => {}
            Err(e) => out.unreadable.push((e.path().to_owned(), e.to_string())),
        }
    }
    Ok(map)
}
