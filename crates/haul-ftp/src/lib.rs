//! FTP and FTPS remote source for haul: `ftp://`, `ftps://` (explicit TLS,
//! `AUTH TLS` on the control connection) and `ftps-implicit://` (TLS from the
//! first byte, port 990).
//!
//! Written by hand on tokio + tokio-rustls (not suppaftp) so that every wait
//! has a timeout, every line a length cap, and partial reads leave the session
//! usable.
//!
//! # How the protocol is used
//! - **Login**: greeting `220`; for `ftps` `AUTH TLS` (`234`) then the TLS
//!   handshake; `USER`/`PASS` (`anonymous` / `anonymous@` when no user is
//!   given); `530` is [`RemoteError::Auth`]. With TLS, `PBSZ 0` and `PROT P`
//!   protect the data channel too. Then `TYPE I` (binary) and `FEAT`
//!   (`MLST`, `SIZE`, `MDTM`, `UTF8` → `OPTS UTF8 ON`).
//! - **Data connections** are passive: `EPSV`, falling back to `PASV` for the
//!   rest of the session when refused. The data connection always goes to
//!   the control connection's peer IP, whatever address PASV names (as curl
//!   does), so NAT-confused servers work and none can aim it elsewhere.
//!   Data-channel TLS resumes the control connection's TLS session (each
//!   session has its own rustls session cache), as servers such as vsftpd
//!   (`require_ssl_reuse=YES`, its default) and ProFTPD insist.
//! - **list**: `MLSD` when FEAT shows `MLST`; else `CWD dir` then `LIST -a`
//!   (plain `LIST` if refused), parsed line by line (Unix `ls -l` and DOS/IIS
//!   formats; year-less dates resolve to the most recent past; LIST dates are
//!   taken as UTC). Lines over 8 KiB are skipped. Entries stream into the
//!   sink as they are parsed.
//! - **stat**: `MLST` when offered; else `SIZE` (+ `MDTM`) for a file, `CWD`
//!   for a directory.
//! - **read**: `SIZE` (and `MDTM` when `expect.mtime` has seconds, i.e. came
//!   from MDTM/MLSD rather than a minute-precision LIST line) are checked
//!   against `expect` → [`RemoteError::Changed`]; then `REST offset` and
//!   `RETR`. When the asked length is reached before the file's end, the data
//!   connection is closed and the transfer's final reply (`426` or `226`) is
//!   read, so the session stays in step and is reused.
//! - **delete**: `DELE`.
//! - **Errors**: `550`/`450` map to [`RemoteError::NotFound`] unless the
//!   message says permission/denied/access or the path is known to exist
//!   (e.g. `SIZE` answered but `RETR` was refused) → `PermissionDenied`.
//!   Other `4xx` are retryable `Connection` errors. A session that hit a
//!   transport error refuses further use.
//!
//! # Limits
//! Reply lines are capped at 8 KiB and replies at 2000 lines; a data read,
//! reply or connect waits at most `opts.timeout`. Names that are not UTF-8
//! are converted lossily. Active mode (PORT) is not supported. An expected
//! mtime that falls on a whole minute is not compared (it may come from a
//! LIST line); the size still is. A directory the user may not enter is
//! reported as not found by servers (vsftpd) that say only "Failed".

mod control;
mod data;
pub mod listing;
pub mod reply;
mod session;
mod tls;
mod transfer;

#[cfg(feature = "test-server")]
pub mod testserver;

use std::sync::Arc;
use std::time::Duration;

use haul_remote::{Remote, RemoteError, RemoteOptions, RemoteUrl, Scheme, Secret, Session};
use rustls::pki_types::ServerName;

/// Everything a session needs to connect, resolved once by [`open`].
pub(crate) struct Config {
    scheme: Scheme,
    host: String,
    authority: String,
    user: String,
    password: Secret,
    timeout: Duration,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// The read rate cap (`--bwlimit`).
    pace: Option<Arc<dyn haul_remote::ReadPace>>,
}

/// An FTP/FTPS endpoint: opens logged-in [`Session`]s.
pub struct FtpRemote {
    cfg: Arc<Config>,
    display: String,
}

/// Configures an FTP remote from its URL and options (no network here).
///
/// The user comes from the URL, else `opts.user`, else `anonymous`; the
/// password likewise from the URL, else `opts.password` (anonymous logins
/// send `anonymous@`). For `ftps`/`ftps-implicit` the TLS configuration
/// (webpki roots + `opts.ca_cert`, or `opts.insecure_tls`) is built here, so
/// an unreadable CA file fails at once.
pub fn open(url: &RemoteUrl, opts: &RemoteOptions) -> Result<Arc<dyn Remote>, RemoteError> {
    let tls = match url.scheme {
        Scheme::Ftp => false,
        Scheme::FtpsExplicit | Scheme::FtpsImplicit => true,
        other => {
            return Err(RemoteError::Unsupported(format!(
                "haul-ftp handles ftp, ftps and ftps-implicit URLs, not {other:?}"
            )))
        }
    };
    let user = url.user.clone().or_else(|| opts.user.clone());
    let (user, password) = match user {
        Some(u) if !u.is_empty() => {
            let pw = url.password.clone().or_else(|| opts.password.clone());
            (u, pw.unwrap_or_else(|| Secret::new("")))
        }
        _ => ("anonymous".to_string(), Secret::new("anonymous@")),
    };
    if user.contains(['\r', '\n']) || password.expose().contains(['\r', '\n']) {
        return Err(RemoteError::Unsupported(
            "FTP user names and passwords cannot contain line breaks".into(),
        ));
    }
    let tls = if tls {
        if opts.insecure_tls {
            tracing::warn!(
                "FTPS certificate checks are off (--insecure): the server is not authenticated"
            );
        }
        Some((tls::client_config(opts)?, tls::server_name(&url.host)?))
    } else {
        None
    };
    let cfg = Config {
        scheme: url.scheme,
        host: url.host.clone(),
        authority: url.authority(),
        user,
        password,
        timeout: if opts.timeout.is_zero() {
            Duration::from_secs(60)
        } else {
            opts.timeout
        },
        tls,
        pace: opts.pace.clone(),
    };
    let display = RemoteUrl {
        path: "/".into(),
        password: None,
        query: None,
        ..url.clone()
    }
    .to_string()
    .trim_end_matches('/')
    .to_string();
    Ok(Arc::new(FtpRemote {
        cfg: Arc::new(cfg),
        display,
    }))
}

#[async_trait::async_trait]
impl Remote for FtpRemote {
    fn display(&self) -> String {
        self.display.clone()
    }

    fn host(&self) -> String {
        self.cfg.host.clone()
    }

    async fn connect(&self) -> Result<Box<dyn Session>, RemoteError> {
        let s = session::FtpSession::connect(self.cfg.clone()).await?;
        Ok(Box::new(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_resolves_credentials_without_showing_them() {
        let url = RemoteUrl::parse("ftp://bob:s3cret@127.0.0.1:2121/pub").unwrap();
        let r = open(&url, &RemoteOptions::default()).unwrap();
        assert_eq!(r.display(), "ftp://bob@127.0.0.1:2121");
        assert_eq!(r.host(), "127.0.0.1");
        let url = RemoteUrl::parse("sftp://h/").unwrap();
        assert!(matches!(
            open(&url, &RemoteOptions::default()),
            Err(RemoteError::Unsupported(_))
        ));
        let url = RemoteUrl::parse("ftps://h/").unwrap();
        let opts = RemoteOptions {
            ca_cert: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        let err = open(&url, &opts).err().unwrap();
        assert!(matches!(err, RemoteError::Local(_)), "{err}");
    }
}
