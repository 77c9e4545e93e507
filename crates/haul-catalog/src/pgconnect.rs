//! How the PostgreSQL driver connects: the URL's `sslmode` (libpq's five
//! modes, with rustls through `tokio-postgres-rustls`) and, when the URL
//! holds no password, libpq's password file (`passfile=` in the URL,
//! `PGPASSFILE`, or `~/.pgpass`; ignored unless private, as libpq does).
//!
//! The `postgres` crate parses only `disable`, `prefer` and `require`, and
//! neither `sslrootcert` nor `passfile`: those parameters are taken out of
//! the URL here, and the rest is parsed by the crate.
//!
//! | `sslmode` | encrypted | certificate checked against the roots | name checked |
//! |---|---|---|---|
//! | `disable` | no | — | — |
//! | `prefer` (default) | if the server offers it | no | no |
//! | `require` | yes | no | no |
//! | `verify-ca` | yes | yes | no |
//! | `verify-full` | yes | yes | yes |
//!
//! The roots for `verify-ca`/`verify-full` are `sslrootcert=PATH` (PEM),
//! `sslrootcert=system` (the webpki roots), or libpq's default
//! `~/.postgresql/root.crt`. Unlike libpq, `require` never turns into
//! `verify-ca` because a root file exists: ask for `verify-ca` by name.
//! No password is ever written to a message or a log.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use postgres::config::{Host, SslMode as PgSslMode};
use postgres::Config;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};

use crate::{CatalogError, Result};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP.
    Disable,
    /// TLS if the server offers it, unverified; else plain.
    Prefer,
    /// TLS, the certificate not checked.
    Require,
    /// TLS, the certificate chained to a trusted root; any name.
    VerifyCa,
    /// TLS, the certificate chained to a trusted root and naming the host.
    VerifyFull,
}

const SSLMODES: &str = "use disable, prefer, require, verify-ca or verify-full";

fn ssl_mode(value: &str) -> Option<SslMode> {
    Some(match value {
        "disable" => SslMode::Disable,
        "allow" | "prefer" => SslMode::Prefer,
        "require" => SslMode::Require,
        "verify-ca" => SslMode::VerifyCa,
        "verify-full" => SslMode::VerifyFull,
        _ => return None,
    })
}

/// A parsed catalog URL: the crate's config and what haul adds to it.
pub(crate) struct ConnectSpec {
    /// The connection settings, password included if one was found.
    pub config: Config,
    /// The TLS connector (`None`: plain).
    pub tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    /// The mode asked for.
    pub mode: SslMode,
}

fn bad(url: &str, why: impl std::fmt::Display) -> CatalogError {
    CatalogError::Connect(format!("{}: {why}", crate::shown_url(url)))
}

/// Parses `url` (`postgres://…`), finds the password and builds the TLS
/// setting. `home` and `pgpassfile` are `$HOME` and `$PGPASSFILE` (given
/// by the caller so tests need not change the process's environment).
pub(crate) fn spec(
    url: &str,
    home: Option<&Path>,
    pgpassfile: Option<&Path>,
) -> Result<ConnectSpec> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut mode = SslMode::Prefer;
    let mut rootcert: Option<String> = None;
    let mut passfile: Option<PathBuf> = None;
    let mut rest = Vec::new();
    for pair in query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decoded = || {
            percent_encoding::percent_decode_str(value)
                .decode_utf8()
                .map(|v| v.into_owned())
                .map_err(|_| bad(url, format!("{key}: not UTF-8")))
        };
        match key {
            "sslmode" => {
                let value = decoded()?;
                mode = ssl_mode(&value)
                    .ok_or_else(|| bad(url, format!("sslmode={value}: {SSLMODES}")))?;
            }
            "sslrootcert" => rootcert = Some(decoded()?),
            "passfile" => passfile = Some(PathBuf::from(decoded()?)),
            _ => rest.push(pair),
        }
    }
    let url_rest = if rest.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    let mut config: Config = url_rest.parse()?;
    config.ssl_mode(match mode {
        SslMode::Disable => PgSslMode::Disable,
        SslMode::Prefer => PgSslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => PgSslMode::Require,
    });
    if config.get_password().is_none() {
        let file = passfile
            .or_else(|| pgpassfile.map(Path::to_path_buf))
            .or_else(|| home.map(|h| h.join(".pgpass")));
        if let Some(file) = file {
            if let Some(password) = password_for(&config, &file)? {
                config.password(password);
            }
        }
    }
    let tls = match mode {
        SslMode::Disable => None,
        _ => Some(tokio_postgres_rustls::MakeRustlsConnect::new(
            client_config(url, mode, rootcert.as_deref(), home)?,
        )),
    };
    Ok(ConnectSpec { config, tls, mode })
}

/// The password `file` holds for `config`'s first host, port, database
/// and user, if it is readable, private and has a matching line.
fn password_for(config: &Config, file: &Path) -> Result<Option<String>> {
    let meta = match std::fs::metadata(file) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            tracing::warn!("password file {}: {e}; not used", file.display());
            return Ok(None);
        }
    };
    if !meta.is_file() {
        tracing::warn!(
            "password file {} is not a plain file; not used",
            file.display()
        );
        return Ok(None);
    }
    use std::os::unix::fs::PermissionsExt;
    if meta.permissions().mode() & 0o077 != 0 {
        // libpq's rule and words.
        tracing::warn!(
            "password file {} has group or world access; permissions should be u=rw (0600) or less; not used",
            file.display()
        );
        return Ok(None);
    }
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!("password file {}: {e}; not used", file.display());
            return Ok(None);
        }
    };
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        // libpq matches a socket directory (or no host) as `localhost`.
        Some(Host::Unix(_)) | None => "localhost".to_string(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = match config.get_user() {
        Some(u) => u.to_string(),
        None => std::env::var("USER").unwrap_or_default(),
    };
    let db = config
        .get_dbname()
        .map_or_else(|| user.clone(), str::to_string);
    Ok(lookup(&text, [&host, &port, &db, &user]))
}

/// libpq's `.pgpass` lookup: the first line `host:port:database:user:password`
/// whose first four fields equal `want` or are `*`; `\:` and `\\` escape;
/// lines starting with `#` are comments.
pub(crate) fn lookup(text: &str, want: [&str; 4]) -> Option<String> {
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields = split_fields(line);
        if fields.len() < 5 {
            continue;
        }
        if fields[..4]
            .iter()
            .zip(want)
            .all(|(f, w)| f == "*" || f == w)
        {
            // A password with unescaped colons keeps them (libpq takes the rest).
            return Some(fields[4..].join(":"));
        }
    }
    None
}

fn split_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    if let Some(last) = fields.last_mut() {
                        last.push(next);
                    }
                }
            }
            ':' => fields.push(String::new()),
            c => {
                if let Some(last) = fields.last_mut() {
                    last.push(c);
                }
            }
        }
    }
    fields
}

/// The rustls configuration for `mode`.
fn client_config(
    url: &str,
    mode: SslMode,
    rootcert: Option<&str>,
    home: Option<&Path>,
) -> Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(url, format!("TLS setup: {e}")))?;
    if matches!(mode, SslMode::Prefer | SslMode::Require) {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
            .with_no_client_auth());
    }
    let roots = roots(url, rootcert, home)?;
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| bad(url, format!("TLS roots: {e}")))?;
    if mode == SslMode::VerifyFull {
        return Ok(builder.with_webpki_verifier(webpki).with_no_client_auth());
    }
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyName(webpki)))
        .with_no_client_auth())
}

/// The trusted roots: `sslrootcert` (a PEM file, or `system`), else
/// `~/.postgresql/root.crt` as libpq.
fn roots(url: &str, rootcert: Option<&str>, home: Option<&Path>) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    if rootcert == Some("system") {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        return Ok(roots);
    }
    let path = match (rootcert, home) {
        (Some(p), _) => PathBuf::from(p),
        (None, Some(h)) => h.join(".postgresql/root.crt"),
        (None, None) => {
            return Err(bad(
                url,
                "verify-ca and verify-full need the server's CA: add sslrootcert=/path/ca.pem (or sslrootcert=system)",
            ))
        }
    };
    let certs = CertificateDer::pem_file_iter(&path)
        .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| {
            bad(
                url,
                format!(
                    "cannot read the root certificate {}: {e} (give sslrootcert=PEM file)",
                    path.display()
                ),
            )
        })?;
    if certs.is_empty() {
        return Err(bad(
            url,
            format!(
                "no certificate in {} (a PEM file with BEGIN CERTIFICATE)",
                path.display()
            ),
        ));
    }
    for cert in certs {
        roots.add(cert).map_err(|e| {
            bad(
                url,
                format!("unusable root certificate in {}: {e}", path.display()),
            )
        })?;
    }
    Ok(roots)
}

/// `verify-ca`: the chain is checked, the name is not.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            // The name is checked last, once the chain was found good.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require`: any certificate (the handshake's signatures are
/// still checked, so the session is with whoever holds its key).
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgpass_lines() {
        let text = "# comment\n\
                    db.example:5432:cat:haul:first\n\
                    *:*:*:other:two\n\
                    127.0.0.1:6000:c\\:x:haul:pa\\:ss\\\\w:rd\n\
                    *:*:*:*:any\n";
        assert_eq!(
            lookup(text, ["db.example", "5432", "cat", "haul"]).as_deref(),
            Some("first")
        );
        assert_eq!(
            lookup(text, ["h", "1", "d", "other"]).as_deref(),
            Some("two")
        );
        // Escaped colon in a field, escaped backslash and a bare colon in the password.
        assert_eq!(
            lookup(text, ["127.0.0.1", "6000", "c:x", "haul"]).as_deref(),
            Some("pa:ss\\w:rd")
        );
        assert_eq!(
            lookup(text, ["db.example", "5433", "cat", "haul"]).as_deref(),
            Some("any")
        );
        assert_eq!(lookup("# only\nshort:line\n", ["a", "b", "c", "d"]), None);
    }

    #[test]
    fn sslmodes_and_passfiles() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        std::fs::write(home.join(".pgpass"), "127.0.0.1:5432:db:u:from-home\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        let private = std::fs::Permissions::from_mode(0o600);
        std::fs::set_permissions(home.join(".pgpass"), private.clone()).unwrap();
        let other = home.join("other");
        std::fs::write(&other, "*:*:*:u:from-env\n").unwrap();
        std::fs::set_permissions(&other, private).unwrap();
        let url = "postgres://u@127.0.0.1/db";
        let pw = |url: &str, env: Option<&Path>| {
            spec(url, Some(home), env)
                .unwrap()
                .config
                .get_password()
                .map(|p| String::from_utf8_lossy(p).into_owned())
        };
        assert_eq!(pw(url, None).as_deref(), Some("from-home"));
        assert_eq!(pw(url, Some(&other)).as_deref(), Some("from-env"));
        let with_param = format!("{url}?passfile={}", other.display());
        assert_eq!(pw(&with_param, None).as_deref(), Some("from-env"));
        // A password in the URL wins.
        assert_eq!(
            pw("postgres://u:inline@127.0.0.1/db", None).as_deref(),
            Some("inline")
        );
        // Readable by others: ignored, as libpq does.
        std::fs::set_permissions(home.join(".pgpass"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        assert_eq!(pw(url, None), None);

        let mode = |u: &str| spec(u, Some(home), None).map(|s| (s.mode, s.tls.is_some()));
        assert_eq!(mode(url).unwrap(), (SslMode::Prefer, true));
        assert_eq!(
            mode(&format!("{url}?sslmode=disable")).unwrap(),
            (SslMode::Disable, false)
        );
        assert_eq!(
            mode(&format!("{url}?sslmode=require&connect_timeout=3")).unwrap(),
            (SslMode::Require, true)
        );
        let e = mode(&format!("{url}?sslmode=always"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("verify-full"), "{e}");
        // verify-full without a root: libpq's default file, named when missing.
        let e = mode(&format!("{url}?sslmode=verify-full"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(".postgresql/root.crt"), "{e}");
        assert_eq!(
            mode(&format!("{url}?sslmode=verify-full&sslrootcert=system")).unwrap(),
            (SslMode::VerifyFull, true)
        );
        let e = spec("postgres://u:s3cret@127.0.0.1/db?sslmode=bogus", None, None)
            .err()
            .unwrap()
            .to_string();
        assert!(!e.contains("s3cret"), "{e}");
    }
}
