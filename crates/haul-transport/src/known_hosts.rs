//! Trust on first use: `known_hosts` maps `host:port` to the fingerprint seen
//! the first time. A different key later is refused.

use std::fs;
use std::io::Write;
use std::path::PathBuf;

use crate::TransportError;

/// The known-hosts file.
#[derive(Debug, Clone)]
pub struct KnownHosts {
    path: PathBuf,
}

/// What to do with a server's fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustDecision {
    /// Matches what is pinned.
    Known,
    /// Never seen: it was recorded (trust on first use).
    Learned,
    /// Differs from the pinned one.
    Changed {
        /// The pinned fingerprint.
        expected: String,
    },
}

impl KnownHosts {
    /// The file at `path` (created when a host is first learned).
    pub fn new(path: PathBuf) -> Self {
        Self { path }
    }

    /// `config_dir()/known_hosts`.
    pub fn default_file() -> Self {
        Self::new(crate::config_dir().join("known_hosts"))
    }

    /// Path of the file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The pinned fingerprint of `host`, if any.
    pub fn lookup(&self, host: &str) -> Option<String> {
        let text = fs::read_to_string(&self.path).ok()?;
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .filter_map(|l| l.split_once(char::is_whitespace))
            .find(|(h, _)| *h == host)
            .map(|(_, fp)| fp.trim().to_owned())
    }

    /// Checks `fingerprint` for `host`, recording it if the host is new.
    pub fn check(&self, host: &str, fingerprint: &str) -> Result<TrustDecision, TransportError> {
        match self.decide(host, fingerprint) {
            TrustDecision::Learned => {
                self.learn(host, fingerprint)?;
                Ok(TrustDecision::Learned)
            }
            other => Ok(other),
        }
    }

    /// Checks `fingerprint` for `host` without recording anything:
    /// [`TrustDecision::Learned`] means "new, to be recorded with
    /// [`KnownHosts::learn`]".
    pub fn decide(&self, host: &str, fingerprint: &str) -> TrustDecision {
        match self.lookup(host) {
            Some(fp) if fp == fingerprint => TrustDecision::Known,
            Some(expected) => TrustDecision::Changed { expected },
            None => TrustDecision::Learned,
        }
    }

    /// Records `fingerprint` for `host` unless that key is recorded for it
    /// already. Returns whether this call recorded it (connections opened
    /// side by side each try; one records). A different key recorded
    /// meanwhile (by a connection that met another server) is refused.
    pub fn learn(&self, host: &str, fingerprint: &str) -> Result<bool, TransportError> {
        static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = WRITING.lock().unwrap_or_else(|e| e.into_inner());
        match self.lookup(host) {
            Some(fp) if fp == fingerprint => return Ok(false),
            Some(expected) => {
                return Err(TransportError::KeyChanged {
                    host: host.to_owned(),
                    got: fingerprint.to_owned(),
                    expected,
                    hint: String::new(),
                    file: self.path.display().to_string(),
                })
            }
            None => {}
        }
        let file_err = |source| TransportError::File {
            what: "update",
            path: self.path.display().to_string(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir).map_err(file_err)?;
        }
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(file_err)?;
        writeln!(f, "{host} {fingerprint}").map_err(file_err)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tofu_then_pin() {
        let dir = tempfile::tempdir().unwrap();
        let kh = KnownHosts::new(dir.path().join("sub/known_hosts"));
        assert_eq!(kh.check("h:1", "SHA256:a").unwrap(), TrustDecision::Learned);
        assert_eq!(kh.check("h:1", "SHA256:a").unwrap(), TrustDecision::Known);
        assert_eq!(
            kh.check("h:1", "SHA256:b").unwrap(),
            TrustDecision::Changed {
                expected: "SHA256:a".into()
            }
        );
        assert_eq!(kh.check("h:2", "SHA256:b").unwrap(), TrustDecision::Learned);
    }

    #[test]
    fn deciding_records_nothing_and_one_learner_records() {
        let dir = tempfile::tempdir().unwrap();
        let kh = KnownHosts::new(dir.path().join("known_hosts"));
        assert_eq!(kh.decide("h:1", "SHA256:a"), TrustDecision::Learned);
        assert_eq!(kh.lookup("h:1"), None);
        // Connections opened side by side all decided "new": one records.
        assert!(kh.learn("h:1", "SHA256:a").unwrap());
        assert!(!kh.learn("h:1", "SHA256:a").unwrap());
        assert_eq!(kh.lookup("h:1").as_deref(), Some("SHA256:a"));
        // One that met another key meanwhile is refused.
        assert!(matches!(
            kh.learn("h:1", "SHA256:b"),
            Err(TransportError::KeyChanged { .. })
        ));
    }
}
