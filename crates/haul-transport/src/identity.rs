//! The server's long-lived TLS identity: a self-signed certificate and key,
//! generated once and kept on disk. Clients pin its fingerprint.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::TransportError;

/// A server's certificate and private key (DER).
#[derive(Clone)]
pub struct ServerIdentity {
    /// Certificate, DER.
    pub cert_der: Vec<u8>,
    /// PKCS#8 private key, DER.
    pub key_der: Vec<u8>,
}

impl std::fmt::Debug for ServerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerIdentity")
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

/// `SHA256:<base64>` of a certificate's DER bytes, as `ssh-keygen -l` prints keys.
pub fn fingerprint_of(cert_der: &[u8]) -> String {
    let digest = Sha256::digest(cert_der);
    format!(
        "SHA256:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
    )
}

impl ServerIdentity {
    /// Loads `dir/server.crt` + `dir/server.key`, creating them on first use.
    pub fn load_or_create(dir: &Path) -> Result<Self, TransportError> {
        let cert_path = dir.join("server.crt.der");
        let key_path = dir.join("server.key.der");
        let file_err = |what, path: &Path| {
            let path = path.display().to_string();
            move |source| TransportError::File { what, path, source }
        };
        if cert_path.exists() && key_path.exists() {
            let cert_der = fs::read(&cert_path).map_err(file_err("read", &cert_path))?;
            let key_der = fs::read(&key_path).map_err(file_err("read", &key_path))?;
            return Ok(Self { cert_der, key_der });
        }
        fs::create_dir_all(dir).map_err(file_err("create", dir))?;
        let id = Self::generate()?;
        let mut key = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&key_path)
            .map_err(file_err("create", &key_path))?;
        key.write_all(&id.key_der)
            .map_err(file_err("write", &key_path))?;
        fs::write(&cert_path, &id.cert_der).map_err(file_err("write", &cert_path))?;
        Ok(id)
    }

    /// A fresh identity that lives only in memory.
    pub fn generate() -> Result<Self, TransportError> {
        let ck = rcgen::generate_simple_self_signed(vec!["haul".to_owned()]).map_err(|e| {
            TransportError::File {
                what: "generate",
                path: "server identity".into(),
                source: std::io::Error::other(e.to_string()),
            }
        })?;
        Ok(Self {
            cert_der: ck.cert.der().to_vec(),
            key_der: ck.signing_key.serialize_der(),
        })
    }

    /// A 32-byte secret for `purpose`, derived from the private key: the
    /// same at every start of the node, of no use without the key, and
    /// different for every purpose.
    pub fn derive_secret(&self, purpose: &str) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"haul identity secret\0");
        h.update(purpose.as_bytes());
        h.update([0]);
        h.update(&self.key_der);
        h.finalize().into()
    }

    /// This identity's fingerprint.
    pub fn fingerprint(&self) -> String {
        fingerprint_of(&self.cert_der)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persists_and_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let a = ServerIdentity::load_or_create(dir.path()).unwrap();
        let b = ServerIdentity::load_or_create(dir.path()).unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert!(a.fingerprint().starts_with("SHA256:"));
        assert_ne!(
            a.fingerprint(),
            ServerIdentity::generate().unwrap().fingerprint()
        );
    }
}
