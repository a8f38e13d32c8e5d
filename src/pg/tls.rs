//! TLS for PostgreSQL connections, per `sslmode`: the roots (`sslrootcert`,
//! else the Mozilla bundle), and the verifiers `require` and `verify-ca`
//! need. One crypto provider: ring.

use super::conn::{PgConn, SslMode};
use crate::error::{Error, ErrorKind, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::sync::Arc;

impl PgConn {
    /// The TLS connector for tokio-postgres, per `sslmode`.
    pub fn tls(&self) -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
        Ok(tokio_postgres_rustls::MakeRustlsConnect::new(
            self.rustls_config()?,
        ))
    }

    /// The rustls client configuration for `sslmode`: the roots, and the
    /// verifier `require` and `verify-ca` need; ring is the one provider.
    pub fn rustls_config(&self) -> Result<rustls::ClientConfig> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut roots = rustls::RootCertStore::empty();
        match &self.sslrootcert {
            Some(p) => {
                let pem = std::fs::read(p).map_err(|e| {
                    Error::io("cannot read sslrootcert", e).in_file(&p.display().to_string())
                })?;
                for cert in pem_certs(&pem)? {
                    roots.add(cert).map_err(|e| {
                        Error::new(
                            ErrorKind::Tls,
                            "sslrootcert holds a certificate rustls refuses",
                        )
                        .with_source(e)
                        .in_file(&p.display().to_string())
                    })?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::new(ErrorKind::Tls, "TLS setup failed").with_source(e))?;
        let roots = Arc::new(roots);
        let config = match self.sslmode {
            SslMode::Disable | SslMode::VerifyFull => {
                builder.with_root_certificates(roots).with_no_client_auth()
            }
            SslMode::Require => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
                .with_no_client_auth(),
            SslMode::VerifyCa => {
                let inner =
                    rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
                        .build()
                        .map_err(|e| {
                            Error::new(ErrorKind::Tls, "TLS setup failed").with_source(e)
                        })?;
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(ChainOnly(inner)))
                    .with_no_client_auth()
            }
        };
        Ok(config)
    }
}

/// The CERTIFICATE blocks of PEM text.
fn pem_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::new(ErrorKind::Tls, "sslrootcert is not PEM certificates").with_source(e)
        })
}

/// `sslmode=require`: encrypt, but accept any certificate (as libpq does).
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCert {
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
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `sslmode=verify-ca`: the chain must lead to a trusted root; the name is not checked.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end: &CertificateDer<'_>,
        inter: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end, inter, name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(m, c, d)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(m, c, d)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// A TLS failure in plain words with the way out, where `e` (or an error
/// inside it, io::Error wrappers included) is a rustls error; `None` otherwise.
pub fn explain(e: &(dyn std::error::Error + 'static), conn: &PgConn) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return Some(words(r, conn));
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            if let Some(r) = inner.downcast_ref::<rustls::Error>() {
                return Some(words(r, conn));
            }
        }
        cur = err.source();
    }
    None
}

fn words(e: &rustls::Error, conn: &PgConn) -> String {
    use rustls::CertificateError as C;
    let roots = match &conn.sslrootcert {
        Some(p) => format!("the CA certificates in sslrootcert ({})", p.display()),
        None => "the Mozilla root bundle (no sslrootcert given)".to_string(),
    };
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer => format!(
                "TLS: the server's certificate is not signed by {roots}; give sslrootcert=<the CA's certificate> (or PGSSLROOTCERT), or sslmode=require to encrypt without checking the certificate (which gives no protection against impersonation)"
            ),
            C::BadSignature => format!(
                "TLS: the server's certificate chain does not verify against {roots} (a signature that does not match, or an intermediate certificate the server does not send)"
            ),
            C::NotValidForName | C::NotValidForNameContext { .. } => format!(
                "TLS: the server's certificate does not name host {:?}; connect with a host name the certificate holds, or use sslmode=verify-ca to check the chain but not the name",
                conn.host
            ),
            C::Expired | C::ExpiredContext { .. } => {
                "TLS: the server's certificate has expired".to_string()
            }
            C::NotValidYet | C::NotValidYetContext { .. } => {
                "TLS: the server's certificate is not valid yet (is this machine's clock right?)"
                    .to_string()
            }
            C::Revoked => "TLS: the server's certificate is revoked".to_string(),
            other => format!("TLS: the server's certificate is refused: {other}"),
        },
        other => format!("TLS handshake failed: {other}"),
    }
}
