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
const CLIENT_KEY: &str = "client.key";
const CLIENT_CSR: &str = "client.csr";
const CLIENT_CERT: &str = "client.crt";
const OPENSSL_CNF: &str = "openssl.cnf";

/// `openssl req` arguments for a new ECDSA P-256 key.
const EC_KEY: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

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

[v3_client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

/// A throwaway certificate authority and a server certificate signed by it, valid for
/// `127.0.0.1` and `localhost` (subject alternative names `IP:127.0.0.1`, `DNS:localhost`),
/// and a client certificate (`CN=leasehold`, for mutual TLS) signed by it too, for ten
/// years. Keys are ECDSA P-256, unencrypted, in PEM files.
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
    /// Creates `ca.key`, `ca.crt`, `server.key`, `server.crt`, `client.key` and `client.crt`
    /// in `dir` (created if
    /// missing; existing files of these names are overwritten) by running `openssl`.
    ///
    /// Fails with [`HarnessError::NotInstalled`] if there is no `openssl` on `PATH`, with
    /// [`HarnessError::Setup`] (and openssl's output) if a step fails.
    pub fn generate(dir: impl AsRef<Path>) -> Result<TlsFiles, HarnessError> {
        let dir = dir.as_ref();
        fs::create_dir_all(dir)?;
        let dir = fs::canonicalize(dir)?;
        fs::write(dir.join(OPENSSL_CNF), CONFIG)?;
        let mut ca = vec!["req", "-x509", "-new", "-nodes"];
        ca.extend(EC_KEY);
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
        let server = Leaf {
            key: SERVER_KEY,
            csr: SERVER_CSR,
            cert: SERVER_CERT,
            subject: "/CN=localhost",
            extensions: "v3_server",
            what: "server",
        };
        sign_leaf(&dir, &server, serial_number())?;
        let client = Leaf {
            key: CLIENT_KEY,
            csr: CLIENT_CSR,
            cert: CLIENT_CERT,
            subject: "/CN=leasehold",
            extensions: "v3_client",
            what: "client",
        };
        // Another serial than the server's: a certificate is named by issuer and serial.
        sign_leaf(&dir, &client, serial_number() ^ 0x5a5a)?;
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

    /// A client certificate (PEM, `CN=leasehold`, extended key usage `clientAuth`), signed by
    /// the CA: what a server that asks for client certificates accepts.
    pub fn client_cert(&self) -> PathBuf {
        self.dir.join(CLIENT_CERT)
    }

    /// The client certificate's private key (PEM, unencrypted PKCS#8).
    pub fn client_key(&self) -> PathBuf {
        self.dir.join(CLIENT_KEY)
    }
}

/// A key and a certificate signed by the CA in the directory.
struct Leaf {
    key: &'static str,
    csr: &'static str,
    cert: &'static str,
    subject: &'static str,
    /// The section of [`CONFIG`] with its extensions.
    extensions: &'static str,
    /// `server` or `client`, for errors.
    what: &'static str,
}

/// Makes `leaf`'s key and a request, and has the CA sign it.
fn sign_leaf(dir: &Path, leaf: &Leaf, serial: u64) -> Result<(), HarnessError> {
    let mut csr = vec!["req", "-new", "-nodes"];
    csr.extend(EC_KEY);
    csr.extend([
        "-keyout",
        leaf.key,
        "-out",
        leaf.csr,
        "-config",
        OPENSSL_CNF,
        "-subj",
        leaf.subject,
    ]);
    openssl(dir, &csr, &format!("the {} key and request", leaf.what))?;
    let serial = format!("0x{serial:016x}");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            leaf.csr,
            "-CA",
            CA_CERT,
            "-CAkey",
            CA_KEY,
            "-set_serial",
            &serial,
            "-out",
            leaf.cert,
            "-days",
            DAYS,
            "-extfile",
            OPENSSL_CNF,
            "-extensions",
            leaf.extensions,
        ],
        &format!("the {} certificate", leaf.what),
    )?;
    let _ = fs::remove_file(dir.join(leaf.csr));
    Ok(())
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
