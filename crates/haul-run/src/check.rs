//! What `haul check` found, whichever sides it compared: local trees and
//! node paths by BLAKE3 (each side read, or hashed by its node), or a
//! remote source by the checksums its server offers (nothing downloaded).
//! One report, so one printer and one `--json` summary serve every form.

use std::collections::BTreeSet;

use serde::Serialize;

/// How the contents were compared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckMethod {
    /// Both sides hashed with BLAKE3.
    #[default]
    Blake3,
    /// The remote server's own checksums against the local files.
    RemoteChecksums,
}

/// What a check found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckReport {
    /// How contents were compared.
    pub method: CheckMethod,
    /// The checksums used (`blake3`; a server's `md5`, `sha256`...).
    pub checksums: BTreeSet<&'static str>,
    /// Files identical on both sides.
    pub same: u64,
    /// Bytes of those (known when both sides were read).
    pub same_bytes: u64,
    /// Files whose content differs.
    pub differ: Vec<String>,
    /// Entries only in SRC (missing from DST).
    pub only_in_src: Vec<String>,
    /// Entries only in DST.
    pub only_in_dst: Vec<String>,
    /// Entries that could not be read or listed (on either side), with why.
    pub unreadable: Vec<(String, String)>,
    /// Files of the same size for which the source offers no checksum:
    /// comparing them would mean downloading them.
    pub unverifiable: Vec<String>,
}

impl CheckReport {
    /// An empty report of a check by `method`.
    pub fn by(method: CheckMethod) -> Self {
        let checksums = match method {
            CheckMethod::Blake3 => BTreeSet::from(["blake3"]),
            CheckMethod::RemoteChecksums => BTreeSet::new(),
        };
        Self {
            method,
            checksums,
            ..Self::default()
        }
    }

    /// True when every entry was compared and matched: nothing differs, is
    /// missing, unreadable or left uncompared.
    pub fn matches(&self) -> bool {
        self.differ.is_empty()
            && self.only_in_src.is_empty()
            && self.only_in_dst.is_empty()
            && self.unreadable.is_empty()
            && self.unverifiable.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_uncompared_file_is_not_a_match() {
        let mut r = CheckReport::by(CheckMethod::RemoteChecksums);
        assert!(r.matches());
        r.unverifiable.push("big.bin".into());
        assert!(!r.matches());
        assert!(CheckReport::by(CheckMethod::Blake3)
            .checksums
            .contains("blake3"));
    }
}
