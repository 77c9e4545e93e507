//! One logged-in FTP session: login, features, stat, delete, and the
//! [`Session`] implementation (listing and reading are in `transfer.rs`).

use std::sync::Arc;
use std::time::SystemTime;

use haul_remote::{ByteSink, EntryKind, ListSink, RemoteEntry, RemoteError, Scheme, Session};
use rustls::pki_types::ServerName;

use crate::control::{Control, Reply};
use crate::listing::{parse_mdtm, parse_mlsx};
use crate::Config;

/// What the server advertised in FEAT (or showed by answering).
#[derive(Debug, Default)]
pub(crate) struct Features {
    pub(crate) mlst: bool,
    size: bool,
    mdtm: bool,
    pub(crate) epsv: bool,
}

/// A logged-in session.
pub(crate) struct FtpSession {
    pub(crate) ctl: Control,
    pub(crate) cfg: Arc<Config>,
    pub(crate) feat: Features,
    /// This session's TLS config: its own session cache, so data connections
    /// resume this control connection's TLS session and no other.
    pub(crate) tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// Set when an error may have left the control connection out of step.
    pub(crate) broken: bool,
}

/// Maps a reply nobody planned for onto the error classes.
pub(crate) fn unexpected(what: &str, r: &Reply) -> RemoteError {
    match r.code {
        421 => RemoteError::Connection(format!(
            "{what}: the server is closing the connection ({})",
            r.message()
        )),
        530 => RemoteError::Auth(format!("{what}: not logged in ({})", r.message())),
        400..=499 => {
            RemoteError::Connection(format!("{what}: temporary failure ({})", r.message()))
        }
        502 | 504 => RemoteError::Unsupported(format!(
            "{what}: the server does not support it ({})",
            r.message()
        )),
        _ => RemoteError::Protocol(format!("{what}: unexpected reply {}", r.message())),
    }
}

/// A 550-style refusal: permission denied when the message says so or the
/// path is known to exist, otherwise not found.
pub(crate) fn refused(path: &str, r: &Reply, exists: bool) -> RemoteError {
    let m = r.message().to_ascii_lowercase();
    if exists || m.contains("permission") || m.contains("denied") || m.contains("access") {
        RemoteError::PermissionDenied(format!("{path}: the server refused ({})", r.message()))
    } else if r.code == 550 || r.code == 450 {
        RemoteError::NotFound(format!("{path} ({})", r.message()))
    } else {
        unexpected(path, r)
    }
}

pub(crate) fn normalize(path: &str) -> String {
    let p = path.trim_end_matches('/');
    if p.is_empty() {
        "/".to_string()
    } else if p.starts_with('/') {
        p.to_string()
    } else {
        format!("/{p}")
    }
}

fn base_name(path: &str) -> String {
    path.rsplit('/').next().unwrap_or("").to_string()
}

impl FtpSession {
    /// Connects, starts TLS as the scheme asks, logs in and sets binary mode.
    pub(crate) async fn connect(cfg: Arc<Config>) -> Result<FtpSession, RemoteError> {
        let tls = cfg
            .tls
            .as_ref()
            .map(|(c, n)| (crate::tls::per_session(c), n.clone()));
        let tls_or_err = || {
            tls.as_ref()
                .ok_or_else(|| RemoteError::Protocol("TLS is not configured".into()))
        };
        let mut ctl = Control::connect(&cfg.authority, cfg.timeout).await?;
        if cfg.scheme == Scheme::FtpsImplicit {
            let (tls, name) = tls_or_err()?;
            ctl.start_tls(tls, name.clone()).await?;
        }
        let mut greeting = ctl.reply("the greeting").await?;
        if greeting.code == 120 {
            greeting = ctl.reply("the greeting").await?;
        }
        if greeting.code != 220 {
            return Err(unexpected("connecting", &greeting));
        }
        if cfg.scheme == Scheme::FtpsExplicit {
            let r = ctl.cmd("AUTH TLS").await?;
            if r.code != 234 {
                return Err(match r.code {
                    500..=504 | 534 | 431 => RemoteError::Unsupported(format!(
                        "the server does not offer TLS ({}); use ftp:// if plain FTP is acceptable",
                        r.message()
                    )),
                    _ => unexpected("AUTH TLS", &r),
                });
            }
            let (tls, name) = tls_or_err()?;
            ctl.start_tls(tls, name.clone()).await?;
        }
        let mut s = FtpSession {
            ctl,
            cfg,
            feat: Features::default(),
            tls,
            broken: false,
        };
        s.login().await?;
        if s.tls.is_some() {
            s.expect_ok("PBSZ 0").await?;
            s.expect_ok("PROT P").await?;
        }
        s.expect_ok("TYPE I").await?;
        s.features().await?;
        Ok(s)
    }

    async fn login(&mut self) -> Result<(), RemoteError> {
        let user = self.cfg.user.clone();
        let r = self.ctl.cmd(&format!("USER {user}")).await?;
        let r = match r.code {
            230 => return Ok(()),
            331 | 332 => {
                let pass = format!("PASS {}", self.cfg.password.expose());
                self.ctl.send(&pass, "PASS").await?;
                self.ctl.reply("PASS").await?
            }
            _ => r,
        };
        match r.code {
            230 | 202 => Ok(()),
            530 | 430 => {
                let mut msg = r.message();
                let pw = self.cfg.password.expose();
                if !pw.is_empty() {
                    msg = msg.replace(pw, "<hidden>");
                }
                Err(RemoteError::Auth(format!(
                    "login as {user} refused ({msg}); check the user name and password"
                )))
            }
            332 => Err(RemoteError::Unsupported(
                "the server asks for an account (ACCT), which haul does not send".into(),
            )),
            _ => Err(unexpected("login", &r)),
        }
    }

    async fn features(&mut self) -> Result<(), RemoteError> {
        // Servers without FEAT may still know SIZE and MDTM: try them.
        self.feat = Features {
            mlst: false,
            size: true,
            mdtm: true,
            epsv: true,
        };
        let r = self.ctl.cmd("FEAT").await?;
        if r.code != 211 {
            return Ok(());
        }
        let names: Vec<String> = r
            .lines
            .iter()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_ascii_uppercase)
            .collect();
        let has = |f: &str| names.iter().any(|n| n == f);
        self.feat.mlst = has("MLST");
        self.feat.size = has("SIZE");
        self.feat.mdtm = has("MDTM");
        if has("UTF8") {
            // Best effort: some servers need it to send UTF-8 names.
            let _ = self.ctl.cmd("OPTS UTF8 ON").await?;
        }
        Ok(())
    }

    async fn expect_ok(&mut self, cmd: &str) -> Result<Reply, RemoteError> {
        let r = self.ctl.cmd(cmd).await?;
        if r.class() != 2 {
            return Err(unexpected(cmd, &r));
        }
        Ok(r)
    }

    /// SIZE: `Ok(None)` when the path is not a regular file (or does not
    /// exist), with the refusal.
    pub(crate) async fn size(
        &mut self,
        path: &str,
    ) -> Result<Result<Option<u64>, Reply>, RemoteError> {
        if !self.feat.size {
            return Ok(Ok(None));
        }
        let r = self.ctl.cmd(&format!("SIZE {path}")).await?;
        match r.code {
            213 => {
                let v = r.lines[0].trim().parse().map_err(|_| {
                    RemoteError::Protocol(format!("SIZE {path}: cannot parse {:?}", r.message()))
                })?;
                Ok(Ok(Some(v)))
            }
            500 | 502 | 504 => {
                self.feat.size = false;
                Ok(Ok(None))
            }
            450 | 550 => Ok(Err(r)),
            _ => Err(unexpected(&format!("SIZE {path}"), &r)),
        }
    }

    pub(crate) async fn mdtm(&mut self, path: &str) -> Result<Option<SystemTime>, RemoteError> {
        if !self.feat.mdtm {
            return Ok(None);
        }
        let r = self.ctl.cmd(&format!("MDTM {path}")).await?;
        match r.code {
            213 => Ok(parse_mdtm(&r.lines[0])),
            500 | 502 | 504 => {
                self.feat.mdtm = false;
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    pub(crate) async fn cwd(&mut self, path: &str) -> Result<Result<(), Reply>, RemoteError> {
        let r = self.ctl.cmd(&format!("CWD {path}")).await?;
        match r.class() {
            2 => Ok(Ok(())),
            4 | 5 if r.code != 421 && r.code != 530 => Ok(Err(r)),
            _ => Err(unexpected(&format!("CWD {path}"), &r)),
        }
    }

    async fn stat_inner(&mut self, path: &str) -> Result<RemoteEntry, RemoteError> {
        let path = normalize(path);
        let name = base_name(&path);
        if path == "/" {
            return Ok(RemoteEntry::dir(""));
        }
        if self.feat.mlst {
            let r = self.ctl.cmd(&format!("MLST {path}")).await?;
            if r.code == 250 {
                let fact = r.lines.iter().skip(1).find_map(|l| {
                    let l = l.strip_prefix(' ').unwrap_or(l);
                    let (facts, _) = l.split_once(' ')?;
                    parse_mlsx(&format!("{facts} {name}"))
                });
                if let Some(e) = fact {
                    return Ok(e);
                }
            } else if r.class() == 5 && r.code != 530 && !(500..=504).contains(&r.code) {
                return Err(refused(&path, &r, false));
            } else if !(500..=504).contains(&r.code) {
                return Err(unexpected(&format!("MLST {path}"), &r));
            }
        }
        if let Ok(Some(size)) = self.size(&path).await? {
            let mut e = RemoteEntry::file(name, Some(size));
            e.mtime = self.mdtm(&path).await?;
            return Ok(e);
        }
        match self.cwd(&path).await? {
            Ok(()) => Ok(RemoteEntry::dir(name)),
            Err(r) => {
                if !self.feat.size {
                    // No SIZE: tell a file from nothing with MDTM.
                    if let Some(t) = self.mdtm(&path).await? {
                        let mut e = RemoteEntry::file(name, None);
                        e.mtime = Some(t);
                        return Ok(e);
                    }
                }
                Err(refused(&path, &r, false))
            }
        }
    }

    async fn delete_inner(&mut self, path: &str) -> Result<(), RemoteError> {
        let path = normalize(path);
        let r = self.ctl.cmd(&format!("DELE {path}")).await?;
        match r.code {
            250 | 200 => Ok(()),
            450 | 550 => {
                let exists = matches!(self.size(&path).await?, Ok(Some(_)));
                Err(refused(&path, &r, exists))
            }
            _ => Err(unexpected(&format!("DELE {path}"), &r)),
        }
    }

    /// Runs an operation: refuses when the session is out of step, and marks
    /// it so after transport failures.
    fn check(&self) -> Result<(), RemoteError> {
        if self.broken {
            return Err(RemoteError::Connection(
                "this FTP session failed earlier; open a new one".into(),
            ));
        }
        Ok(())
    }

    fn note<T>(&mut self, r: Result<T, RemoteError>) -> Result<T, RemoteError> {
        if let Err(
            RemoteError::Timeout(_) | RemoteError::Connection(_) | RemoteError::Protocol(_),
        ) = &r
        {
            self.broken = true;
        }
        r
    }
}

#[async_trait::async_trait]
impl Session for FtpSession {
    async fn stat(&mut self, path: &str) -> Result<RemoteEntry, RemoteError> {
        self.check()?;
        let r = self.stat_inner(path).await;
        self.note(r)
    }

    async fn list(&mut self, dir: &str, out: &ListSink) -> Result<(), RemoteError> {
        self.check()?;
        let r = self.list_inner(dir, out).await;
        self.note(r)
    }

    async fn read(
        &mut self,
        path: &str,
        offset: u64,
        len: Option<u64>,
        expect: &RemoteEntry,
        sink: ByteSink<'_>,
    ) -> Result<u64, RemoteError> {
        self.check()?;
        if expect.kind == EntryKind::Dir {
            return Err(RemoteError::NotFound(format!(
                "{path} is a directory, not a file"
            )));
        }
        let r = self.read_inner(path, offset, len, expect, sink).await;
        self.note(r)
    }

    async fn delete(&mut self, path: &str) -> Result<(), RemoteError> {
        self.check()?;
        let r = self.delete_inner(path).await;
        self.note(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_refusals() {
        assert_eq!(normalize("/a/b/"), "/a/b");
        assert_eq!(normalize("/"), "/");
        assert_eq!(normalize("a"), "/a");
        assert_eq!(base_name("/a/b c"), "b c");
        let r = Reply {
            code: 550,
            lines: vec!["Permission denied.".into()],
        };
        assert!(matches!(
            refused("/x", &r, false),
            RemoteError::PermissionDenied(_)
        ));
        let r = Reply {
            code: 550,
            lines: vec!["Failed to open file.".into()],
        };
        assert!(matches!(refused("/x", &r, false), RemoteError::NotFound(_)));
        assert!(matches!(
            refused("/x", &r, true),
            RemoteError::PermissionDenied(_)
        ));
        let r = Reply {
            code: 421,
            lines: vec!["bye".into()],
        };
        assert!(unexpected("x", &r).is_retryable());
    }
}
