//! TLS for FTPS: one rustls client configuration per remote; each session
//! uses a copy with its own session cache, so that its data connections
//! resume its control connection's TLS session (servers such as vsftpd with
//! `require_ssl_reuse=YES` insist on that).

use std::sync::Arc;

use haul_remote::{RemoteError, RemoteOptions};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// Builds the client configuration: webpki roots plus `opts.ca_cert`, or no
/// verification at all with `opts.insecure_tls`.
pub(crate) fn client_config(opts: &RemoteOptions) -> Result<Arc<ClientConfig>, RemoteError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| RemoteError::Protocol(format!("TLS setup: {e}")))?;
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = &opts.ca_cert {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| {
                RemoteError::Local(format!(
                    "cannot read CA certificate {}: {e} (give a PEM file)",
                    path.display()
                ))
            })?;
        if certs.is_empty() {
            return Err(RemoteError::Local(format!(
                "no certificate in {} (give a PEM file with BEGIN CERTIFICATE)",
                path.display()
            )));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| {
                RemoteError::Local(format!(
                    "unusable CA certificate in {}: {e}",
                    path.display()
                ))
            })?;
        }
    }
    let mut config = builder.with_root_certificates(roots).with_no_client_auth();
    if opts.insecure_tls {
        config
            .dangerous()
            .set_certificate_verifier(Arc::new(AcceptAny(provider)));
    }
    Ok(Arc::new(config))
}

/// A copy of `config` with a session cache of its own, for one FTP session:
/// the TLS session tickets its control connection receives are then used by
/// its own data connections only.
pub(crate) fn per_session(config: &Arc<ClientConfig>) -> Arc<ClientConfig> {
    let mut c = ClientConfig::clone(config);
    c.resumption = rustls::client::Resumption::in_memory_sessions(16);
    Arc::new(c)
}

/// The name the server's certificate must carry.
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, RemoteError> {
    ServerName::try_from(host.to_string())
        .map_err(|_| RemoteError::Unsupported(format!("{host:?} is not a valid TLS server name")))
}

/// Accepts any certificate (`--insecure`), still checking the handshake
/// signatures so the connection is at least to the key the server showed.
#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
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
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
