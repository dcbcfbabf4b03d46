//! TLS to PostgreSQL, with libpq's `sslmode` meanings, on rustls.
//!
//! tokio-postgres parses `sslmode=disable|prefer|require` only and has no `sslrootcert`: the
//! URL's TLS parameters are taken out here, and the connector below does what libpq does for
//! each mode. (A connector of our own on tokio-rustls, which the Redis client already brings,
//! instead of the `tokio-postgres-rustls` crate: that one would add sha2 0.11 and x509-cert
//! for SCRAM channel binding, and the per-mode verification is ours to write either way.)

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

use crate::core::error::{Error, Result};
use crate::core::options::ClientOptions;
use crate::core::tls::{ensure_crypto_provider, read_ca, read_identity};
use crate::core::url::percent_decode;

/// libpq's `sslmode` (but `allow`, which tokio-postgres cannot do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SslMode {
    /// Plain text.
    Disable,
    /// TLS if the server offers it, plain text otherwise; the certificate is not checked.
    Prefer,
    /// TLS; the certificate is checked against a CA only if one is named (libpq's rule).
    Require,
    /// TLS; the certificate must chain to the CA.
    VerifyCa,
    /// TLS; the certificate must chain to the CA and name the host.
    VerifyFull,
}

/// Where the trusted roots come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    File(PathBuf),
    /// `sslrootcert=system`: the system's roots.
    System,
}

/// The TLS parameters a connection string named (leasehold's, not tokio-postgres's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TlsParams {
    mode: SslMode,
    root_cert: Option<Roots>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

impl Default for TlsParams {
    /// libpq's default: `sslmode=prefer`.
    fn default() -> Self {
        TlsParams {
            mode: SslMode::Prefer,
            root_cert: None,
            cert: None,
            key: None,
        }
    }
}

const TLS_KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

impl TlsParams {
    fn set(&mut self, key: &str, value: String) -> Result<()> {
        match key {
            "sslmode" => {
                self.mode = match value.as_str() {
                    "disable" => SslMode::Disable,
                    "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-ca" => SslMode::VerifyCa,
                    "verify-full" => SslMode::VerifyFull,
                    other => {
                        return Err(Error::invalid(
                            "url",
                            format!(
                                "sslmode={other:?}: use disable, prefer (the default), require, \
                                 verify-ca or verify-full"
                            ),
                        ));
                    }
                }
            }
            "sslrootcert" if value == "system" => self.root_cert = Some(Roots::System),
            "sslrootcert" => self.root_cert = Some(Roots::File(value.into())),
            "sslcert" => self.cert = Some(value.into()),
            "sslkey" => self.key = Some(value.into()),
            _ => unreachable!("only TLS_KEYS are set"),
        }
        Ok(())
    }
}

/// `conn` without its `sslmode`, `sslrootcert`, `sslcert` and `sslkey` parameters, and what
/// they said. `conn` is a URL (`postgres://…?sslmode=…`) or a `key=value` string.
pub(super) fn take_tls_params(conn: &str) -> Result<(String, TlsParams)> {
    let mut params = TlsParams::default();
    if conn.contains("://") {
        let Some((base, query)) = conn.split_once('?') else {
            return Ok((conn.to_string(), params));
        };
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if TLS_KEYS.contains(&key) {
                params.set(key, percent_decode(value))?;
            } else {
                rest.push(pair);
            }
        }
        let url = if rest.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        return Ok((url, params));
    }
    let mut kept = Vec::new();
    for (key, value, text) in key_values(conn)? {
        if TLS_KEYS.contains(&key.as_str()) {
            params.set(&key, value)?;
        } else {
            kept.push(text);
        }
    }
    Ok((kept.join(" "), params))
}

/// The pairs of a `key=value key='quoted value'` string: key, value, and the pair's text.
fn key_values(conn: &str) -> Result<Vec<(String, String, &str)>> {
    let bad = |why: &str| Error::invalid("url", format!("{why} in a PostgreSQL connection string"));
    let bytes = conn.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = conn[start..i].to_string();
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= bytes.len() || bytes[i] != b'=' {
            return Err(bad(&format!("{key:?} without a value")));
        }
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = Vec::new();
        if i < bytes.len() && bytes[i] == b'\'' {
            i += 1;
            loop {
                match bytes.get(i) {
                    None => return Err(bad("an unterminated quoted value")),
                    Some(b'\'') => break,
                    Some(b'\\') if i + 1 < bytes.len() => {
                        value.push(bytes[i + 1]);
                        i += 2;
                    }
                    Some(&b) => {
                        value.push(b);
                        i += 1;
                    }
                }
            }
            i += 1;
        } else {
            while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
                value.push(bytes[i]);
                i += 1;
            }
        }
        let value = String::from_utf8_lossy(&value).into_owned();
        out.push((key, value, &conn[start..i]));
    }
    Ok(out)
}

/// The connector for `params` (the URL's TLS parameters, over `options`' files), and the
/// `sslmode` to give tokio-postgres.
///
/// # Errors
/// [`Error::InvalidArgument`] for unreadable or malformed files, a certificate without a key,
/// or `sslrootcert=system` with a mode weaker than `verify-full` (as libpq).
pub(super) fn connector(
    params: &TlsParams,
    options: &ClientOptions,
) -> Result<(tokio_postgres::config::SslMode, PgTls)> {
    use tokio_postgres::config::SslMode as Pg;
    if params.mode == SslMode::Disable {
        return Ok((Pg::Disable, PgTls { config: None }));
    }
    let roots = params
        .root_cert
        .clone()
        .or_else(|| options.tls_ca_file.clone().map(Roots::File));
    if roots == Some(Roots::System) && params.mode != SslMode::VerifyFull {
        return Err(Error::invalid(
            "url",
            "sslrootcert=system needs sslmode=verify-full (as libpq: the system's roots vouch \
             for any name)",
        ));
    }
    let (cert, key) = if params.cert.is_some() || params.key.is_some() {
        (params.cert.as_deref(), params.key.as_deref())
    } else {
        (
            options.tls_cert_file.as_deref(),
            options.tls_key_file.as_deref(),
        )
    };
    let identity = read_identity(cert, key)?;
    ensure_crypto_provider();
    let provider = CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    // libpq: with a root certificate, `require` checks the chain as `verify-ca` does.
    let check = match (params.mode, &roots) {
        (SslMode::Prefer, _) | (SslMode::Require, None) => Check::Nothing,
        (SslMode::Require | SslMode::VerifyCa, _) => Check::Chain,
        _ => Check::ChainAndName,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match check {
        Check::Nothing => Arc::new(NameUnchecked {
            provider: provider.clone(),
            chain: None,
        }),
        Check::Chain | Check::ChainAndName => {
            let store = root_store(roots.as_ref())?;
            let webpki =
                WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
                    .build()
                    .map_err(|e| Error::invalid("TLS CA file", e.to_string()))?;
            if check == Check::Chain {
                Arc::new(NameUnchecked {
                    provider: provider.clone(),
                    chain: Some(webpki),
                })
            } else {
                webpki
            }
        }
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid("TLS", e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some(id) => {
            let bad_cert = |e: rustls::pki_types::pem::Error| {
                Error::invalid("TLS certificate file", e.to_string())
            };
            let certs = CertificateDer::pem_slice_iter(&id.cert)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(bad_cert)?;
            let key = PrivateKeyDer::from_pem_slice(&id.key)
                .map_err(|e| Error::invalid("TLS key file", e.to_string()))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| Error::invalid("TLS key file", e.to_string()))?
        }
    };
    let mode = if params.mode == SslMode::Prefer {
        Pg::Prefer
    } else {
        Pg::Require
    };
    Ok((
        mode,
        PgTls {
            config: Some(Arc::new(config)),
        },
    ))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    ChainAndName,
}

/// The trusted roots: the CA file's certificates, or the system's.
fn root_store(roots: Option<&Roots>) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    match roots {
        Some(Roots::File(path)) => {
            let pem = read_ca(path)?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| {
                    Error::invalid("TLS CA file", format!("{}: {e}", path.display()))
                })?;
                store.add(cert).map_err(|e| {
                    Error::invalid("TLS CA file", format!("{}: {e}", path.display()))
                })?;
            }
        }
        None | Some(Roots::System) => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err(Error::invalid(
                    "TLS CA file",
                    "no CA named (sslrootcert in the URL, or tls_ca_file) and no system root \
                     certificates found",
                ));
            }
        }
    }
    Ok(store)
}

/// The modes that do not check the name. Without a chain verifier (`prefer`, and `require`
/// without a CA): encrypted, the certificate taken as it comes. With one (`verify-ca`, and
/// `require` with a CA): the chain must lead to a trusted root; the name is not checked.
/// (webpki checks the chain before the name, so a name mismatch means the chain was good.)
/// The handshake's signatures are checked in both cases, with the provider's algorithms (as
/// webpki's verifier built on that provider checks them).
#[derive(Debug)]
struct NameUnchecked {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for NameUnchecked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
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
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
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
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// tokio-postgres's TLS connector, on rustls. `None`: `sslmode=disable` (never asked).
#[derive(Clone)]
pub(crate) struct PgTls {
    config: Option<Arc<rustls::ClientConfig>>,
}

impl<S> MakeTlsConnect<S> for PgTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgTlsStream<S>;
    type TlsConnect = PgTlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<PgTlsConnect> {
        // A Unix socket has no host name (""): the error waits for a handshake, which
        // PostgreSQL never offers on a socket.
        Ok(PgTlsConnect {
            config: self.config.clone(),
            domain: domain.to_string(),
        })
    }
}

/// One connection's handshake.
pub(crate) struct PgTlsConnect {
    config: Option<Arc<rustls::ClientConfig>>,
    domain: String,
}

impl<S> TlsConnect<S> for PgTlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgTlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<PgTlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let config = self
                .config
                .ok_or_else(|| io::Error::other("TLS is disabled"))?;
            let name = ServerName::try_from(self.domain.clone()).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{:?} is not a TLS server name: {e}", self.domain),
                )
            })?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await?;
            Ok(PgTlsStream(Box::new(tls)))
        })
    }
}

/// A TLS connection to PostgreSQL. SCRAM channel binding is not offered (it would need the
/// certificate's signature hash): `channel_binding=require` is refused by tokio-postgres.
pub(crate) struct PgTlsStream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for PgTlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for PgTlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for PgTlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_are_taken_out_of_urls() {
        let (url, p) = take_tls_params(
            "postgres://u@h/db?lock=lease&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(url, "postgres://u@h/db?lock=lease&application_name=x");
        assert_eq!(p.mode, SslMode::VerifyFull);
        assert_eq!(p.root_cert, Some(Roots::File("/tmp/ca.pem".into())));
        let (url, p) = take_tls_params("postgres://u@h/db?sslmode=require").unwrap();
        assert_eq!(url, "postgres://u@h/db");
        assert_eq!(p.mode, SslMode::Require);
        let (url, p) = take_tls_params("postgres://u@h/db").unwrap();
        assert_eq!(url, "postgres://u@h/db");
        assert_eq!(p, TlsParams::default());
        let (_, p) =
            take_tls_params("postgres://h/?sslrootcert=system&sslcert=c&sslkey=k").unwrap();
        assert_eq!(p.root_cert, Some(Roots::System));
        assert_eq!((p.cert, p.key), (Some("c".into()), Some("k".into())));
        let err = take_tls_params("postgres://h/?sslmode=allow").unwrap_err();
        assert!(err.to_string().contains("verify-full"), "{err}");
    }

    #[test]
    fn tls_parameters_are_taken_out_of_key_value_strings() {
        let (conn, p) = take_tls_params(
            "host=h sslmode = verify-ca  user=u sslrootcert='/a b/ca.pem' password='it\\'s'",
        )
        .unwrap();
        assert_eq!(conn, "host=h user=u password='it\\'s'");
        assert_eq!(p.mode, SslMode::VerifyCa);
        assert_eq!(p.root_cert, Some(Roots::File("/a b/ca.pem".into())));
        assert!(take_tls_params("host=h sslmode").is_err());
        assert!(take_tls_params("host='h").is_err());
    }

    #[test]
    fn system_roots_need_verify_full() {
        let (_, p) = take_tls_params("postgres://h/?sslmode=require&sslrootcert=system").unwrap();
        let err = connector(&p, &ClientOptions::new()).err().unwrap();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    }
}
