//! Tests of `TlsFiles` and `ServerOptions::tls` against every server of the matrix.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use leasehold_harness::{
    HarnessError, RespValue, Server, ServerBinary, ServerKind, ServerOptions, TlsFiles, Version,
};

/// Runs `openssl <args>` with `input` on stdin; gives up (killing it) after 30 s.
fn openssl(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl is installed (scripts/install-servers)");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            child.kill().unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Talks RESP (inline commands) over TLS with `openssl s_client`, verifying the server's
/// certificate against the CA and for `127.0.0.1`; returns what the server answered.
fn tls_session(files: &TlsFiles, port: u16, commands: &str) -> String {
    let connect = format!("127.0.0.1:{port}");
    let ca = files.ca_cert();
    let out = openssl(
        &[
            "s_client",
            "-connect",
            &connect,
            "-CAfile",
            ca.to_str().unwrap(),
            "-verify_return_error",
            "-verify_ip",
            "127.0.0.1",
            "-servername",
            "localhost",
            "-quiet",
            "-ign_eof",
        ],
        format!("{commands}QUIT\r\n").as_bytes(),
    );
    assert!(
        out.status.success(),
        "s_client failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn generated_certificates_verify() {
    let dir = tempfile::tempdir().unwrap();
    let files = TlsFiles::generate(dir.path().join("certs")).unwrap();
    for path in [files.ca_cert(), files.server_cert(), files.server_key()] {
        assert!(path.is_file(), "{}", path.display());
        assert!(path.starts_with(files.dir()));
    }
    let verify = openssl(
        &[
            "verify",
            "-CAfile",
            files.ca_cert().to_str().unwrap(),
            "-verify_ip",
            "127.0.0.1",
            "-verify_hostname",
            "localhost",
            files.server_cert().to_str().unwrap(),
        ],
        b"",
    );
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    // A name the certificate is not for is rejected.
    let wrong = openssl(
        &[
            "verify",
            "-CAfile",
            files.ca_cert().to_str().unwrap(),
            "-verify_hostname",
            "example.org",
            files.server_cert().to_str().unwrap(),
        ],
        b"",
    );
    assert!(!wrong.status.success());

    // A temporary set lives as long as its clones.
    let temp = TlsFiles::temporary().unwrap();
    let clone = temp.clone();
    let dir = temp.dir().to_owned();
    drop(temp);
    assert!(clone.ca_cert().exists());
    drop(clone);
    assert!(!dir.exists(), "the temporary directory is removed");
}

#[test]
fn binary_without_tls_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("redis-server");
    std::fs::write(&fake, "#!/bin/sh\nexit 1\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = ServerBinary {
        kind: ServerKind::Redis,
        version: Version::new(8, 6, 3),
        server: fake.clone(),
        cli: None,
        benchmark: None,
    };
    assert!(!bin.supports_tls());
    let files = TlsFiles::temporary().unwrap();
    let err = Server::start(&bin, &ServerOptions::new().tls(&files)).unwrap_err();
    match &err {
        HarnessError::Unsupported { binary, reason } => {
            assert!(binary.contains(fake.to_str().unwrap()), "{binary}");
            assert!(reason.contains("TLS"), "{reason}");
        }
        other => panic!("expected Unsupported, got {other}"),
    }
}

leasehold_harness::server_test!(async fn server_listens_with_tls(bin) {
    assert!(bin.supports_tls(), "{bin} links OpenSSL");
    let files = TlsFiles::temporary().unwrap();
    let mut server = Server::start(&bin, &ServerOptions::new().tls(&files)).unwrap();
    let tls_port = server.tls_port().expect("a TLS port");
    assert_ne!(tls_port, server.port());
    assert_eq!(server.tls_url(), Some(format!("rediss://127.0.0.1:{tls_port}/")));

    // The plain port still serves the harness, and the server has the TLS configuration.
    let reply = server.command(&["CONFIG", "GET", "tls-port"]).unwrap();
    let expected = RespValue::Array(Some(vec![
        RespValue::Bulk(Some(b"tls-port".to_vec())),
        RespValue::Bulk(Some(tls_port.to_string().into_bytes())),
    ]));
    assert_eq!(reply, expected);

    // Plain RESP on the TLS port gets no PONG.
    let mut raw = TcpStream::connect(("127.0.0.1", tls_port)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    raw.write_all(&RespValue::encode_command(&["PING"])).unwrap();
    let mut answer = Vec::new();
    let _ = BufReader::new(raw).read_to_end(&mut answer);
    assert!(!String::from_utf8_lossy(&answer).contains("PONG"), "{answer:?}");

    // A verified TLS session works.
    assert!(server.command(&["SET", "k", "over-tls"]).unwrap().is_ok());
    let out = tls_session(&files, tls_port, "PING\r\nGET k\r\n");
    assert!(out.contains("+PONG") && out.contains("over-tls"), "{out}");

    // A restart keeps the TLS port.
    server.restart().unwrap();
    assert_eq!(server.tls_port(), Some(tls_port));
    assert!(tls_session(&files, tls_port, "PING\r\n").contains("+PONG"));

    // Without the option there is no TLS port.
    let plain = Server::start(&bin, &ServerOptions::new()).unwrap();
    assert_eq!(plain.tls_port(), None);
    assert_eq!(plain.tls_url(), None);
});

leasehold_harness::server_test!(async fn tls_with_password_and_acl_user(bin) {
    let files = TlsFiles::temporary().unwrap();
    let server = Server::start(&bin, &ServerOptions::new().requirepass("tls pass").tls(&files)).unwrap();
    let port = server.tls_port().unwrap();
    let out = tls_session(&files, port, "PING\r\n");
    assert!(out.contains("NOAUTH"), "{out}");
    let out = tls_session(&files, port, "AUTH \"tls pass\"\r\nPING\r\n");
    assert!(out.contains("+PONG"), "{out}");

    // ACL helper: a user limited to lock keys.
    server.acl_setuser("locker", &["on", ">lockpw", "~lock:*", "+@all"]).unwrap();
    let out = tls_session(&files, port, "AUTH locker lockpw\r\nSET lock:a 1\r\nSET other 1\r\n");
    assert!(out.contains("+OK\r\n+OK") && out.contains("NOPERM"), "{out}");
    let err = server.acl_setuser("bad", &["no-such-rule"]).unwrap_err();
    assert!(matches!(err, HarnessError::Server(_)), "{err}");
});
