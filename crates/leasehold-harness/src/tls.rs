//! Throwaway TLS certificates for test servers, made with the `openssl` command-line tool.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use tempfile::TempDir;

use crate::HarnessError;

const CA_KEY: &str = "ca.key";
const CA_CERT: &str = "ca.crt";
const SERVER_KEY: &str = "server.key";
const SERVER_CSR: &str = "server.csr";
const SERVER_CERT: &str = "server.crt";
const OPENSSL_CNF: &str = "openssl.cnf";

/// Validity of the generated certificates, in days.
const DAYS: &str = "3650";

/// The OpenSSL configuration used for both certificates: no dependency on the system's
/// `openssl.cnf`, explicit extensions for the CA and the server certificate.
const CONFIG: &str = "\
[req]
distinguished_name = dn
prompt = no

[dn]
CN = leasehold test

[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[v3_server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

/// A throwaway certificate authority and a server certificate signed by it, valid for
/// `127.0.0.1` and `localhost` (subject alternative names `IP:127.0.0.1`, `DNS:localhost`),
/// for ten years. Keys are ECDSA P-256, unencrypted, in PEM files.
///
/// Hand it to [`ServerOptions::tls`](crate::ServerOptions::tls) to make a server listen with
/// TLS; clients trust [`TlsFiles::ca_cert`]. Cloning is cheap; a set made by
/// [`TlsFiles::temporary`] keeps its directory until the last clone is dropped.
#[derive(Clone)]
pub struct TlsFiles {
    dir: PathBuf,
    /// Keeps the directory of [`TlsFiles::temporary`] alive.
    _temp: Option<Arc<TempDir>>,
}

impl fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsFiles")
            .field("dir", &self.dir)
            .field("temporary", &self._temp.is_some())
            .finish()
    }
}

impl TlsFiles {
    /// Creates `ca.key`, `ca.crt`, `server.key` and `server.crt` in `dir` (created if
    /// missing; existing files of these names are overwritten) by running `openssl`.
    ///
    /// Fails with [`HarnessError::NotInstalled`] if there is no `openssl` on `PATH`, with
    /// [`HarnessError::Setup`] (and openssl's output) if a step fails.
    pub fn generate(dir: impl AsRef<Path>) -> Result<TlsFiles, HarnessError> {
        let dir = dir.as_ref();
        fs::create_dir_all(dir)?;
        let dir = fs::canonicalize(dir)?;
        fs::write(dir.join(OPENSSL_CNF), CONFIG)?;
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        let mut ca = vec!["req", "-x509", "-new", "-nodes"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            CA_KEY,
            "-out",
            CA_CERT,
            "-days",
            DAYS,
            "-config",
            OPENSSL_CNF,
            "-extensions",
            "v3_ca",
            "-subj",
            "/CN=leasehold test CA",
        ]);
        openssl(&dir, &ca, "the CA certificate")?;
        let mut csr = vec!["req", "-new", "-nodes"];
        csr.extend(ec);
        csr.extend([
            "-keyout",
            SERVER_KEY,
            "-out",
            SERVER_CSR,
            "-config",
            OPENSSL_CNF,
            "-subj",
            "/CN=localhost",
        ]);
        openssl(&dir, &csr, "the server key and request")?;
        let serial = format!("0x{:016x}", serial_number());
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                SERVER_CSR,
                "-CA",
                CA_CERT,
                "-CAkey",
                CA_KEY,
                "-set_serial",
                &serial,
                "-out",
                SERVER_CERT,
                "-days",
                DAYS,
                "-extfile",
                OPENSSL_CNF,
                "-extensions",
                "v3_server",
            ],
            "the server certificate",
        )?;
        let _ = fs::remove_file(dir.join(SERVER_CSR));
        Ok(TlsFiles { dir, _temp: None })
    }

    /// Like [`TlsFiles::generate`], in a fresh temporary directory that is removed when the
    /// last clone of the returned value is dropped.
    pub fn temporary() -> Result<TlsFiles, HarnessError> {
        let temp = tempfile::Builder::new()
            .prefix("leasehold-tls-")
            .tempdir()?;
        let files = TlsFiles::generate(temp.path())?;
        Ok(TlsFiles {
            _temp: Some(Arc::new(temp)),
            ..files
        })
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate (PEM) that clients should trust.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join(CA_CERT)
    }

    /// The server certificate (PEM), signed by the CA, for `127.0.0.1` and `localhost`.
    pub fn server_cert(&self) -> PathBuf {
        self.dir.join(SERVER_CERT)
    }

    /// The server certificate's private key (PEM, unencrypted PKCS#8).
    pub fn server_key(&self) -> PathBuf {
        self.dir.join(SERVER_KEY)
    }
}

/// A serial number that differs between runs (time and pid), so clients that cache
/// certificates by issuer and serial do not mix up two throwaway sets.
fn serial_number() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    // 63 bits: serial numbers must be positive.
    (((nanos as u64) ^ (u64::from(std::process::id()) << 32)) & 0x7fff_ffff_ffff_ffff) | 1
}

/// Runs `openssl <args>` in `dir`; a failure carries openssl's output.
fn openssl(dir: &Path, args: &[&str], what: &str) -> Result<(), HarnessError> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => HarnessError::NotInstalled(
                "the openssl command-line tool is not on PATH (Debian package `openssl`)".into(),
            ),
            _ => HarnessError::Io(e),
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(HarnessError::Setup {
        what: format!("{what} in {}", dir.display()),
        reason: format!("openssl {} exited with {}", args.join(" "), out.status),
        log_tail: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    })
}
