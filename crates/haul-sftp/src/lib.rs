//! SFTP remote source for haul: `sftp://user@host:port/path`.
//!
//! Built on `russh` (SSH client, `ring` crypto backend, no aws-lc-rs) and
//! `russh-sftp` (SFTP v3 client, the version OpenSSH speaks). Each
//! [`haul_remote::Session`] is one SSH connection with one `sftp` subsystem
//! channel on it.
//!
//! Connecting:
//! - **Host key**: checked against `known_hosts` (`--known-hosts`, default
//!   `~/.ssh/known_hosts`), OpenSSH format: `host`/`[host]:port` names,
//!   comma lists, `*`/`?` wildcards, `!` negation, hashed `|1|salt|hash`
//!   names, `@revoked`. Key types recorded for the host are preferred in the
//!   key exchange. An unknown host is refused with its `SHA256:` fingerprint
//!   unless `accept_new_host_key` (then the key is appended to the file); a
//!   changed key is always refused ("possible man-in-the-middle", with the
//!   file and line to fix). Host certificates are not supported.
//! - **Authentication**, in order: each `ssh_keys` file (ed25519, ECDSA,
//!   RSA with rsa-sha2-512/256 when the server allows; passphrase-protected
//!   keys are skipped with a note), every key of the ssh-agent at
//!   `$SSH_AUTH_SOCK`, then the password (URL, else options). The user is
//!   the URL's, else `opts.user`, else `$USER`/`$LOGNAME`. When all fail,
//!   [`RemoteError::Auth`] lists the methods tried (never the password).
//! - Ciphers: AES-256-GCM first (AES-NI), then ChaCha20-Poly1305, AES-CTR.
//!
//! Operations (paths are used as given, absolute):
//! - `stat`: SFTP `STAT` (follows symlinks): kind, size, mtime (seconds;
//!   SFTP v3 has 32-bit times).
//! - `list`: `OPENDIR` + `READDIR` until EOF; each batch (OpenSSH: up to 100
//!   names, bounded by the 256 KiB packet limit) is sent to the sink entry by
//!   entry as it arrives. Entries come from `lstat` on the server, so a
//!   symlink is [`haul_remote::EntryKind::Other`]. `.`/`..` and names with
//!   `/` are dropped.
//! - `read`: `OPEN` + `FSTAT` (size and mtime compared with `expect`:
//!   [`RemoteError::Changed`] on a difference, or when the asked range
//!   reaches past the end), then `READ`s of the server's maximum read length
//!   (`limits@openssh.com`: 255 KiB on OpenSSH ≥ 8.7, else 32 KiB) with 32
//!   requests in flight, delivered in order. Short replies are completed
//!   before later ones are delivered; an EOF before the range's end means the
//!   file shrank: `Changed`.
//! - `delete`: `REMOVE`.
//!
//! Errors: SFTP status `NO_SUCH_FILE` → `NotFound`, `PERMISSION_DENIED` →
//! `PermissionDenied`, lost channel/connection → `Connection`, no answer
//! within `opts.timeout` → `Timeout`, anything else unexpected →
//! `Protocol`. Incoming SFTP packets are capped at 257 KiB.

mod connect;
pub mod known_hosts;
mod session;
#[cfg(feature = "test-server")]
pub mod testserver;

use std::path::PathBuf;
use std::sync::Arc;

use haul_remote::{Remote, RemoteError, RemoteOptions, RemoteUrl, Scheme, Session};

/// An `sftp://` endpoint: opens SSH connections with an SFTP session each.
pub struct SftpRemote {
    cfg: Arc<connect::Config>,
    display: String,
    pace: Option<Arc<dyn haul_remote::ReadPace>>,
}

/// Validates `url` and `opts`, resolves the user, loads the key files and
/// finds the known_hosts file. No network.
pub fn open(url: &RemoteUrl, opts: &RemoteOptions) -> Result<Arc<dyn Remote>, RemoteError> {
    if url.scheme != Scheme::Sftp {
        return Err(RemoteError::Unsupported(
            "haul-sftp handles sftp:// URLs only".into(),
        ));
    }
    let user = url
        .user
        .clone()
        .or_else(|| opts.user.clone())
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .or_else(|| std::env::var("LOGNAME").ok().filter(|u| !u.is_empty()))
        .ok_or_else(|| {
            RemoteError::Auth(
                "no SSH user: put it in the URL (sftp://USER@host/...) or pass --user".into(),
            )
        })?;
    let mut keys = Vec::new();
    let mut skipped_keys = Vec::new();
    for path in &opts.ssh_keys {
        match russh::keys::load_secret_key(path, None) {
            Ok(k) => keys.push((path.clone(), Arc::new(k))),
            Err(russh::keys::Error::KeyIsEncrypted) => {
                tracing::warn!(
                    "SSH key {} is passphrase-protected: skipped (load it into ssh-agent instead)",
                    path.display()
                );
                skipped_keys.push(format!(
                    "key {} (skipped: passphrase-protected)",
                    path.display()
                ));
            }
            Err(e) => {
                return Err(RemoteError::Auth(format!(
                    "cannot use SSH key {}: {e}; give an OpenSSH or PEM private key file",
                    path.display()
                )))
            }
        }
    }
    let known_hosts = opts.known_hosts.clone().or_else(|| {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".ssh").join("known_hosts"))
    });
    let display = format!("sftp://{user}@{}", url.authority());
    let cfg = connect::Config {
        host: url.host.clone(),
        port: url.port,
        user,
        password: url.password.clone().or_else(|| opts.password.clone()),
        keys,
        skipped_keys,
        known_hosts,
        accept_new_host_key: opts.accept_new_host_key,
        timeout: opts.timeout,
    };
    Ok(Arc::new(SftpRemote {
        cfg: Arc::new(cfg),
        display,
        pace: opts.pace.clone(),
    }))
}

#[async_trait::async_trait]
impl Remote for SftpRemote {
    fn display(&self) -> String {
        self.display.clone()
    }

    fn host(&self) -> String {
        self.cfg.host.clone()
    }

    async fn connect(&self) -> Result<Box<dyn Session>, RemoteError> {
        let conn = connect::connect(&self.cfg).await?;
        Ok(Box::new(session::SftpSession::new(
            conn,
            self.cfg.timeout,
            self.display.clone(),
            self.pace.clone(),
        )))
    }
}
