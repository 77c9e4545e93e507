//! SSH connection: TCP, key exchange with host-key checking against
//! `known_hosts`, user authentication (key files, agent, password), and the
//! `sftp` subsystem.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use haul_remote::{within, RemoteError, Secret};
use russh::keys::{Algorithm, HashAlg, PrivateKey, PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use russh::{client, ChannelMsg};
use russh_sftp::client::RawSftpSession;

use crate::known_hosts::{self, Verdict};

/// Everything a connection needs, resolved by `open` (no network there).
pub(crate) struct Config {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<Secret>,
    /// Loaded private keys with their file names.
    pub keys: Vec<(PathBuf, Arc<PrivateKey>)>,
    /// Key files that could not be used (passphrase-protected): for the
    /// authentication error message.
    pub skipped_keys: Vec<String>,
    pub known_hosts: Option<PathBuf>,
    pub accept_new_host_key: bool,
    pub timeout: Duration,
}

impl Config {
    fn name(&self) -> String {
        known_hosts::host_name(&self.host, self.port)
    }
}

/// A logged-in SSH connection with an SFTP session on it.
pub(crate) struct Connected {
    /// The SSH connection (taken on drop to disconnect).
    pub ssh: Option<client::Handle<Client>>,
    pub sftp: RawSftpSession,
    /// Largest READ length the server accepts.
    pub read_len: u32,
}

impl Drop for Connected {
    /// Sends SSH_MSG_DISCONNECT in the background: russh keeps the
    /// connection open after its handle is dropped otherwise.
    fn drop(&mut self) {
        let Some(ssh) = self.ssh.take() else { return };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let bye = ssh.disconnect(russh::Disconnect::ByApplication, "", "");
                let _ = tokio::time::timeout(Duration::from_secs(5), bye).await;
            });
        }
    }
}

/// The russh event handler: checks the host key.
pub(crate) struct Client {
    cfg: Arc<Config>,
    /// Why the host key was refused (russh only reports "unknown key").
    verdict: Arc<Mutex<Option<RemoteError>>>,
}

impl client::Handler for Client {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        match verify_host_key(&self.cfg, key) {
            Ok(()) => Ok(true),
            Err(e) => {
                if let Ok(mut v) = self.verdict.lock() {
                    *v = Some(e);
                }
                Ok(false)
            }
        }
    }
}

fn verify_host_key(cfg: &Config, key: &PublicKeyOrCertificate) -> Result<(), RemoteError> {
    let name = cfg.name();
    let key = match key {
        PublicKeyOrCertificate::PublicKey { key, .. } => key,
        PublicKeyOrCertificate::Certificate(_) => {
            return Err(RemoteError::HostKey(format!(
                "{name} presented a host certificate; only plain host keys listed in known_hosts are supported"
            )))
        }
    };
    let blob = key.to_bytes().map_err(|e| {
        RemoteError::Protocol(format!("{name}: cannot encode the server's host key: {e}"))
    })?;
    let key_type = key.algorithm().as_str().to_string();
    let fp = known_hosts::fingerprint(&blob);
    let Some(path) = cfg.known_hosts.as_deref() else {
        return Err(RemoteError::HostKey(format!(
            "cannot check host key {fp} for {name}: no known_hosts file (HOME is not set); pass --known-hosts FILE"
        )));
    };
    let file = path.display();
    let verdict = known_hosts::check(path, &cfg.host, cfg.port, &key_type, &blob)
        .map_err(|e| RemoteError::HostKey(format!("cannot read {file}: {e}")))?;
    match verdict {
        Verdict::Known => Ok(()),
        Verdict::Unknown { other_types } if !other_types.is_empty() => {
            let lines: Vec<String> = other_types.iter().map(|(l, t)| format!("line {l} ({t})")).collect();
            Err(RemoteError::HostKey(format!(
                "{name} offered a {key_type} host key {fp}, but {file} lists only other key types for it ({}); \
                 possible man-in-the-middle attack. If the server's keys really changed, remove those lines \
                 (ssh-keygen -R '{name}' -f {file}) and re-run",
                lines.join(", ")
            )))
        }
        Verdict::Unknown { .. } if cfg.accept_new_host_key => {
            known_hosts::append(path, &cfg.host, cfg.port, &key_type, &blob)
                .map_err(|e| RemoteError::HostKey(format!("cannot record the host key of {name} in {file}: {e}")))?;
            tracing::warn!("recorded new host key {fp} ({key_type}) for {name} in {file}");
            Ok(())
        }
        Verdict::Unknown { .. } => Err(RemoteError::HostKey(format!(
            "unknown host key {fp} for {name} ({key_type}, not in {file}); verify it and re-run with --accept-new-host-key"
        ))),
        Verdict::Changed { line } => Err(RemoteError::HostKey(format!(
            "the host key of {name} CHANGED: the server offered {key_type} {fp}, {file} line {line} lists another; \
             possible man-in-the-middle attack. Refusing to connect. If the key was legitimately replaced, \
             remove line {line} of {file} (ssh-keygen -R '{name}' -f {file}) and re-run"
        ))),
        Verdict::Revoked { line } => Err(RemoteError::HostKey(format!(
            "the host key {fp} of {name} is marked @revoked in {file} line {line}; refusing to connect"
        ))),
    }
}

/// Key type of an algorithm as written in known_hosts.
fn key_type(a: &Algorithm) -> String {
    match a {
        Algorithm::Rsa { .. } => "ssh-rsa".to_string(),
        other => other.as_str().to_string(),
    }
}

fn ssh_config(cfg: &Config) -> client::Config {
    // Fast AEAD ciphers first (AES-GCM uses AES-NI through ring).
    let mut preferred = russh::Preferred {
        cipher: std::borrow::Cow::Borrowed(&[
            russh::cipher::AES_256_GCM,
            russh::cipher::CHACHA20_POLY1305,
            russh::cipher::AES_256_CTR,
            russh::cipher::AES_192_CTR,
            russh::cipher::AES_128_CTR,
        ]),
        ..Default::default()
    };
    // Like OpenSSH: ask for host key types already recorded for this host
    // first, so a known host is not reported as changed for a type switch.
    if let Some(path) = cfg.known_hosts.as_deref() {
        let known = known_hosts::known_types(path, &cfg.host, cfg.port);
        if !known.is_empty() {
            let mut keys: Vec<Algorithm> = preferred.key.to_vec();
            keys.sort_by_key(|a| !known.contains(&key_type(a)));
            preferred.key = std::borrow::Cow::Owned(keys);
        }
    }
    client::Config {
        preferred,
        window_size: 16 * 1024 * 1024,
        maximum_packet_size: 256 * 1024,
        nodelay: true,
        inactivity_timeout: None,
        ..Default::default()
    }
}

fn ssh_err(cfg: &Config, what: &str, e: impl std::fmt::Display) -> RemoteError {
    RemoteError::Connection(format!("{}: {what}: {e}", cfg.name()))
}

/// Connects, checks the host key, logs in and starts SFTP.
pub(crate) async fn connect(cfg: &Arc<Config>) -> Result<Connected, RemoteError> {
    let t = cfg.timeout;
    let name = cfg.name();
    let addr = (cfg.host.as_str(), cfg.port);
    let socket = within(t, &format!("connect to {name}"), async {
        tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| ssh_err(cfg, "cannot connect (is an SSH server listening there?)", e))
    })
    .await?;
    let verdict = Arc::new(Mutex::new(None));
    let handler = Client {
        cfg: cfg.clone(),
        verdict: verdict.clone(),
    };
    let shake = within(t, &format!("SSH handshake with {name}"), async {
        client::connect_stream(Arc::new(ssh_config(cfg)), socket, handler)
            .await
            .map_err(|e| ssh_err(cfg, "SSH handshake failed", e))
    })
    .await;
    let refused = verdict.lock().ok().and_then(|mut v| v.take());
    let mut handle = match (shake, refused) {
        (_, Some(e)) => return Err(e),
        (r, None) => r?,
    };
    authenticate(cfg, &mut handle).await?;

    let channel = within(t, "open SSH session channel", async {
        handle
            .channel_open_session()
            .await
            .map_err(|e| ssh_err(cfg, "cannot open a session channel", e))
    })
    .await?;
    let mut channel = channel;
    within(t, "start the sftp subsystem", async {
        channel
            .request_subsystem(true, "sftp")
            .await
            .map_err(|e| ssh_err(cfg, "cannot request the sftp subsystem", e))?;
        loop {
            match channel.wait().await {
                Some(ChannelMsg::Success) => return Ok(()),
                Some(ChannelMsg::Failure) => {
                    return Err(RemoteError::Unsupported(format!(
                        "{name}: the server refused the sftp subsystem (is SFTP enabled in its sshd_config?)"
                    )))
                }
                Some(ChannelMsg::Close | ChannelMsg::Eof) | None => {
                    return Err(ssh_err(cfg, "sftp subsystem", "channel closed by the server"))
                }
                Some(_) => {}
            }
        }
    })
    .await?;
    let secs = t.as_secs().max(1);
    let sftp_cfg = russh_sftp::client::Config {
        // A READ reply is at most read_len + a small header; leave room.
        max_packet_len: 256 * 1024 + 1024,
        request_timeout_secs: if t.is_zero() { 60 } else { secs },
        ..Default::default()
    };
    let mut sftp = RawSftpSession::new_with_config(channel.into_stream(), sftp_cfg);
    let version = within(t, "SFTP init", async {
        sftp.init()
            .await
            .map_err(|e| crate::session::sftp_err(&name, e))
    })
    .await?;
    // OpenSSH ≥ 8.7 tells its limits; older servers accept 32 KiB reads
    // (the draft's guaranteed minimum) and serve up to 64 KiB.
    let mut read_len: u32 = 32 * 1024;
    if version.extensions.contains_key("limits@openssh.com") {
        if let Ok(Ok(l)) = tokio::time::timeout(t.max(Duration::from_secs(1)), sftp.limits()).await
        {
            if l.max_read_len > 0 {
                read_len = l.max_read_len.min(255 * 1024) as u32;
            }
            sftp.set_limits(l.into());
        }
    }
    Ok(Connected {
        ssh: Some(handle),
        sftp,
        read_len,
    })
}

fn refused(r: Result<client::AuthResult, RemoteError>) -> Result<bool, RemoteError> {
    Ok(r?.success())
}

async fn authenticate(
    cfg: &Config,
    handle: &mut client::Handle<Client>,
) -> Result<(), RemoteError> {
    let t = cfg.timeout;
    let user = cfg.user.as_str();
    let mut tried: Vec<String> = Vec::new();
    let mut rsa_hash: Option<Option<HashAlg>> = None;
    let auth_err = |e: russh::Error| ssh_err(cfg, "authentication", e);

    for (path, key) in &cfg.keys {
        let hash = if key.algorithm().is_rsa() {
            if rsa_hash.is_none() {
                let best = within(t, "server signature algorithms", async {
                    handle.best_supported_rsa_hash().await.map_err(auth_err)
                })
                .await?;
                rsa_hash = Some(best.flatten());
            }
            rsa_hash.flatten()
        } else {
            None
        };
        let key = PrivateKeyWithHashAlg::new(key.clone(), hash);
        let ok = refused(
            within(t, "public key authentication", async {
                handle
                    .authenticate_publickey(user, key)
                    .await
                    .map_err(auth_err)
            })
            .await,
        )?;
        if ok {
            return Ok(());
        }
        tried.push(format!("key {}", path.display()));
    }
    tried.extend(cfg.skipped_keys.iter().cloned());

    if let Some(sock) = std::env::var_os("SSH_AUTH_SOCK").filter(|s| !s.is_empty()) {
        match within(t, "ssh-agent", async {
            let mut agent = russh::keys::agent::client::AgentClient::connect_uds(&sock)
                .await
                .map_err(|e| RemoteError::Auth(e.to_string()))?;
            let ids = agent
                .request_identities()
                .await
                .map_err(|e| RemoteError::Auth(e.to_string()))?;
            Ok((agent, ids))
        })
        .await
        {
            Ok((mut agent, ids)) => {
                let mut n = 0;
                for id in ids {
                    let russh::keys::agent::AgentIdentity::PublicKey { key, .. } = id else {
                        continue;
                    };
                    n += 1;
                    let hash = if key.algorithm().is_rsa() {
                        within(t, "server signature algorithms", async {
                            handle.best_supported_rsa_hash().await.map_err(auth_err)
                        })
                        .await?
                        .flatten()
                    } else {
                        None
                    };
                    let r = within(t, "ssh-agent authentication", async {
                        handle
                            .authenticate_publickey_with(user, key, hash, &mut agent)
                            .await
                            .map_err(|e| ssh_err(cfg, "ssh-agent authentication", e))
                    })
                    .await;
                    match r {
                        Ok(r) if r.success() => return Ok(()),
                        Ok(_) => {}
                        Err(e) => tracing::debug!("ssh-agent key refused: {e}"),
                    }
                }
                tried.push(format!("ssh-agent ({n} keys)"));
            }
            Err(e) => tried.push(format!("ssh-agent (unusable: {e})")),
        }
    }

    if let Some(pw) = &cfg.password {
        let ok = refused(
            within(t, "password authentication", async {
                handle
                    .authenticate_password(user, pw.expose())
                    .await
                    .map_err(auth_err)
            })
            .await,
        )?;
        if ok {
            return Ok(());
        }
        tried.push("password".to_string());
    }
    let name = cfg.name();
    if tried.is_empty() {
        return Err(RemoteError::Auth(format!(
            "{user}@{name}: no credentials to try: give --ssh-key FILE, start an ssh-agent (SSH_AUTH_SOCK), or a password"
        )));
    }
    Err(RemoteError::Auth(format!(
        "{user}@{name}: the server refused every method tried: {}; check the user name, key or password",
        tried.join(", ")
    )))
}
