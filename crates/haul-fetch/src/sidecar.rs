//! `--verify-sidecar`: finds a file's checksum in `NAME.sha256`, `NAME.md5`
//! (...) beside it, or in the directory's `SHA256SUMS` / `MD5SUMS` (...).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use haul_remote::{join, Checksum, RemoteEntry, RemoteError, Session};

use crate::verify::{is_sidecar, parse_sidecar, sidecar_candidates};

/// Largest per-file sidecar read.
const MAX_SIDECAR: usize = 1 << 20;
/// Largest per-directory checksum list read.
const MAX_SUMS: usize = 64 << 20;
/// Per-directory lists kept in memory at once.
const MAX_CACHED: usize = 64;

/// Per-directory checksum lists, read once each.
#[derive(Default)]
pub(crate) struct Sidecars {
    lists: Mutex<HashMap<String, Option<Arc<String>>>>,
}

impl Sidecars {
    /// The checksum a sidecar gives for the file at `remote_path`, if any.
    pub(crate) async fn lookup(
        &self,
        session: &mut dyn Session,
        remote_path: &str,
    ) -> Result<Option<Checksum>, RemoteError> {
        let (dir, name) = match remote_path.rsplit_once('/') {
            Some((d, n)) => (if d.is_empty() { "/" } else { d }, n),
            None => ("/", remote_path),
        };
        if is_sidecar(name) {
            return Ok(None);
        }
        for (candidate, algorithm) in sidecar_candidates(name) {
            let path = join(dir, &candidate);
            let per_dir = !candidate.starts_with(name);
            let text = if per_dir {
                self.list(session, &path).await?
            } else {
                read_small(session, &path, MAX_SIDECAR).await?.map(Arc::new)
            };
            let Some(text) = text else { continue };
            if let Some(sum) = parse_sidecar(&text, algorithm, name) {
                return Ok(Some(sum));
            }
            // A checksum file made for this file alone that gives none for
            // it is a failure, not a reason to verify by size only.
            if !per_dir {
                return Err(RemoteError::UnusableChecksum(format!(
                    "{candidate} gives no {algorithm} checksum for {name}"
                )));
            }
        }
        Ok(None)
    }

    async fn list(
        &self,
        session: &mut dyn Session,
        path: &str,
    ) -> Result<Option<Arc<String>>, RemoteError> {
        if let Some(hit) = self.lists.lock().ok().and_then(|m| m.get(path).cloned()) {
            return Ok(hit);
        }
        let text = read_small(session, path, MAX_SUMS).await?.map(Arc::new);
        if let Ok(mut m) = self.lists.lock() {
            if m.len() >= MAX_CACHED {
                m.clear();
            }
            m.insert(path.to_string(), text.clone());
        }
        Ok(text)
    }
}

/// Reads a small text file whole; `None` when it does not exist or is not
/// readable.
async fn read_small(
    session: &mut dyn Session,
    path: &str,
    cap: usize,
) -> Result<Option<String>, RemoteError> {
    let mut buf = Vec::new();
    let mut sink = |d: &[u8]| {
        if buf.len() + d.len() > cap {
            return Err(RemoteError::Local(format!(
                "{path}: sidecar larger than {cap} bytes"
            )));
        }
        buf.extend_from_slice(d);
        Ok(())
    };
    let name = path.rsplit('/').next().unwrap_or(path);
    match session
        .read(path, 0, None, &RemoteEntry::file(name, None), &mut sink)
        .await
    {
        Ok(_) => Ok(Some(String::from_utf8_lossy(&buf).into_owned())),
        Err(RemoteError::NotFound(_) | RemoteError::PermissionDenied(_)) => Ok(None),
        Err(e) => Err(e),
    }
}
