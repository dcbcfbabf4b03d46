//! TLS files every backend reads the same way: a private CA and a client certificate and key
//! (PEM), named in `ClientOptions` or in the URL; and how TLS refusals read.

use std::path::Path;

use crate::core::error::{Error, Result};

/// A PEM file's bytes, if it can be read and holds a PEM block of `kind` (`CERTIFICATE`, or
/// `PRIVATE KEY` for any key type). `what` names the file in the error.
pub(crate) fn read_pem(path: &Path, what: &'static str, kind: &str) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::invalid(what, format!("cannot read {}: {e}", path.display())))?;
    let text = String::from_utf8_lossy(&bytes);
    // Keys come as `BEGIN PRIVATE KEY`, `BEGIN EC PRIVATE KEY`, `BEGIN RSA PRIVATE KEY`.
    let found = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.ends_with(&format!("{kind}-----")));
    if !found {
        let article = if kind == "CERTIFICATE" {
            "certificate"
        } else {
            "private key"
        };
        return Err(Error::invalid(
            what,
            format!("{} holds no PEM {article}", path.display()),
        ));
    }
    Ok(bytes)
}

/// A private CA's certificates (PEM).
#[cfg(any(feature = "etcd", feature = "postgres"))]
pub(crate) fn read_ca(path: &Path) -> Result<Vec<u8>> {
    read_pem(path, "TLS CA file", "CERTIFICATE")
}

/// The client certificate (chain) and its key, both PEM, for mutual TLS.
pub(crate) struct ClientIdentity {
    pub(crate) cert: Vec<u8>,
    pub(crate) key: Vec<u8>,
}

/// Reads a client certificate and key given as a pair (both or neither).
///
/// # Errors
/// [`Error::InvalidArgument`] for one without the other, or a file that cannot be read or
/// holds no PEM certificate (key).
pub(crate) fn read_identity(
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<Option<ClientIdentity>> {
    match (cert, key) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => Ok(Some(ClientIdentity {
            cert: read_pem(cert, "TLS certificate file", "CERTIFICATE")?,
            key: read_pem(key, "TLS key file", "PRIVATE KEY")?,
        })),
        (Some(_), None) => Err(Error::invalid(
            "TLS key file",
            "a client certificate needs its private key too (tls_key_file, --tls-key-file)",
        )),
        (None, Some(_)) => Err(Error::invalid(
            "TLS certificate file",
            "a private key needs its client certificate too (tls_cert_file, --tls-cert-file)",
        )),
    }
}

/// The client certificate and key of `options`, if any.
#[cfg(feature = "etcd")]
pub(crate) fn options_identity(
    options: &crate::core::options::ClientOptions,
) -> Result<Option<ClientIdentity>> {
    read_identity(
        options.tls_cert_file.as_deref(),
        options.tls_key_file.as_deref(),
    )
}

/// Whether the error chain holds a TLS alert by which the peer refused our client certificate
/// (rustls names the alert it received).
pub(crate) fn refused_client_certificate(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        let text = e.to_string();
        if text.contains("received fatal alert")
            && [
                "CertificateRequired",
                "BadCertificate",
                "UnknownCA",
                "AccessDenied",
            ]
            .iter()
            .any(|alert| text.contains(alert))
        {
            return true;
        }
        cur = e.source();
    }
    false
}

/// Whether the error chain says the peer's certificate failed our check (rustls's words).
#[cfg(any(feature = "etcd", feature = "postgres"))]
pub(crate) fn untrusted_server_certificate(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if e.to_string().contains("invalid peer certificate") {
            return true;
        }
        cur = e.source();
    }
    false
}

/// The error for a TLS alert by which the server refused our client certificate.
#[cfg(any(feature = "etcd", feature = "postgres"))]
pub(crate) fn refused_certificate_error(
    source: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    Error::Authentication {
        source: Box::new(Hinted {
            hint: REFUSED_CERTIFICATE,
            source: Box::new(source),
        }),
    }
}

/// `err`, or, if it is a connection error whose cause is a TLS alert by which the server refused
/// our client certificate, that authentication error.
pub(crate) fn client_certificate_refusal(err: Error) -> Error {
    match err {
        Error::Connection { source, .. } if refused_client_certificate(&*source) => {
            Error::Authentication {
                source: Box::new(Hinted {
                    hint: REFUSED_CERTIFICATE,
                    source,
                }),
            }
        }
        other => other,
    }
}

const REFUSED_CERTIFICATE: &str = "the server refused the TLS client certificate (none was \
                                   given, or it is not signed by a CA the server trusts)";

/// An error with what probably caused it.
#[derive(Debug)]
pub(crate) struct Hinted {
    pub(crate) hint: &'static str,
    pub(crate) source: crate::core::error::BoxError,
}

impl std::fmt::Display for Hinted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.hint, self.source)
    }
}

impl std::error::Error for Hinted {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// Makes sure rustls has a process-wide crypto provider: ring, unless the application
/// installed another one first (then that one stays).
#[cfg(any(feature = "etcd", feature = "postgres"))]
pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: some provider is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(all(test, any(feature = "etcd", feature = "postgres")))]
mod tests {
    use super::*;

    #[test]
    fn pem_files_are_checked() {
        let dir = std::env::temp_dir().join(format!("leasehold-pem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = dir.join("c.pem");
        let key = dir.join("k.pem");
        std::fs::write(
            &cert,
            "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        std::fs::write(
            &key,
            "-----BEGIN EC PRIVATE KEY-----\nAA==\n-----END EC PRIVATE KEY-----\n",
        )
        .unwrap();
        assert!(read_ca(&cert).is_ok());
        let err = read_ca(&key).err().unwrap();
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
        assert!(read_identity(Some(&cert), Some(&key)).unwrap().is_some());
        assert!(read_identity(Some(&cert), None).is_err());
        assert!(read_identity(None, Some(&key)).is_err());
        let err = read_identity(Some(&cert), Some(&cert)).err().unwrap();
        assert!(err.to_string().contains("no PEM private key"), "{err}");
        assert!(read_ca(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
