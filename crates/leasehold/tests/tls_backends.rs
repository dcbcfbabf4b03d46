//! TLS to PostgreSQL (`sslmode`, `sslrootcert`, client certificates) and etcd (`etcds://`,
//! mutual TLS), against real servers started with a CA and certificates made at test time
//! (never committed): what connects, and what is refused with which error. Every connection
//! attempt is bounded by the connect timeout; the outer bound only keeps a broken build from
//! hanging.
#![cfg(any(feature = "postgres", feature = "etcd"))]

use std::time::Duration;

use leasehold::{ClientOptions, Error, LockOptions, Locker};
use leasehold_harness::TlsFiles;

/// Only keeps a broken test from hanging.
const HANG_GUARD: Duration = Duration::from_secs(60);

fn options() -> ClientOptions {
    ClientOptions::new()
        .connect_timeout(Duration::from_secs(5))
        .response_timeout(Duration::from_secs(5))
}

fn certificates() -> TlsFiles {
    TlsFiles::temporary().expect("certificates are generated")
}

/// Connects (bounded by [`HANG_GUARD`]).
async fn connect(url: &str, options: ClientOptions) -> leasehold::Result<Locker> {
    tokio::time::timeout(HANG_GUARD, Locker::connect_with(url, options))
        .await
        .unwrap_or_else(|_| panic!("{url}: connecting hung"))
}

/// A lock taken, seen by `inspect`, released: the connection carries real traffic.
async fn lock_round_trip(locker: &Locker, key: &str) {
    let guard = locker
        .try_acquire(
            key,
            &LockOptions::new(Duration::from_secs(30)).fencing(true),
        )
        .await
        .expect("try_acquire")
        .acquired()
        .expect("the lock is free");
    assert!(guard.fencing_token().is_some());
    let state = locker.inspect(key).await.expect("inspect");
    assert_eq!(state.holder.as_deref(), Some(guard.token().expose()));
    guard.release().await.expect("release");
    assert_eq!(locker.inspect(key).await.unwrap().holder, None);
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use leasehold_harness::{Postgres, postgres_tls_for_test};

    fn url(pg: &Postgres, query: &str) -> String {
        format!("{}?{query}", pg.url())
    }

    fn path(p: std::path::PathBuf) -> String {
        p.to_str().expect("a UTF-8 path").to_string()
    }

    // `require` without a CA: encrypted, the certificate unchecked (libpq's meaning); with the
    // CA, `verify-ca` and `verify-full` pass for the certificate's names. The server takes TCP
    // connections over TLS only, so every connection here is TLS. Session locks (whose
    // connect checks for a pooler with two sessions) and lease rows both work.
    #[tokio::test]
    async fn postgres_sslmodes_connect_over_tls() {
        let files = certificates();
        let Some(pg) = postgres_tls_for_test(&files, false) else {
            return;
        };
        let ca = path(files.ca_cert());
        for query in [
            "sslmode=require".to_string(),
            format!("sslmode=require&sslrootcert={ca}"),
            format!("sslmode=verify-ca&sslrootcert={ca}"),
            format!("sslmode=verify-full&sslrootcert={ca}"),
            format!("sslmode=verify-full&sslrootcert={ca}&lock=lease"),
            // The default, prefer: TLS when the server offers it.
            String::new(),
        ] {
            let url = url(&pg, &query);
            let locker = connect(&url, options())
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            lock_round_trip(&locker, "tls:pg").await;
        }
        // The CA from the options instead of the URL.
        let locker = connect(
            &url(&pg, "sslmode=verify-full"),
            options().tls_ca_file(files.ca_cert()),
        )
        .await
        .expect("verify-full with tls_ca_file");
        lock_round_trip(&locker, "tls:pg").await;
    }

    // `verify-full` checks the host name; `verify-ca` does not. The TCP connection goes to
    // 127.0.0.1 (hostaddr) while the name checked is one the certificate does not carry.
    #[tokio::test]
    async fn postgres_verify_full_checks_the_host_name() {
        let files = certificates();
        let Some(pg) = postgres_tls_for_test(&files, false) else {
            return;
        };
        let ca = path(files.ca_cert());
        let other_name = format!(
            "postgres://leasehold@not-the-server.invalid:{}/postgres?hostaddr=127.0.0.1&sslrootcert={ca}",
            pg.port()
        );
        let err = connect(&format!("{other_name}&sslmode=verify-full"), options())
            .await
            .expect_err("the certificate does not name not-the-server.invalid");
        assert!(matches!(err, Error::Connection { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("not trusted") && text.contains("not valid for name"),
            "{text}"
        );
        let locker = connect(&format!("{other_name}&sslmode=verify-ca"), options())
            .await
            .expect("verify-ca does not check the name");
        lock_round_trip(&locker, "tls:pg").await;
    }

    // A CA that did not sign the server's certificate: refused, naming the certificate
    // problem, for `verify-full` and for `require` with a root certificate (libpq's rule).
    #[tokio::test]
    async fn postgres_wrong_ca_is_refused() {
        let files = certificates();
        let other = certificates();
        let Some(pg) = postgres_tls_for_test(&files, false) else {
            return;
        };
        let wrong = path(other.ca_cert());
        for query in [
            format!("sslmode=verify-full&sslrootcert={wrong}"),
            format!("sslmode=require&sslrootcert={wrong}"),
        ] {
            let err = connect(&url(&pg, &query), options())
                .await
                .expect_err("an unknown issuer");
            assert!(matches!(err, Error::Connection { .. }), "{query}: {err:?}");
            // Both throwaway CAs have the same name: the signature is what does not match.
            let text = err.to_string();
            assert!(
                text.contains("TLS certificate is not trusted")
                    && text.contains("invalid peer certificate"),
                "{query}: {text}"
            );
        }
        // The same through the options' CA file.
        let err = connect(
            &url(&pg, "sslmode=verify-full"),
            options().tls_ca_file(other.ca_cert()),
        )
        .await
        .expect_err("an unknown issuer");
        assert!(matches!(err, Error::Connection { .. }), "{err:?}");
    }

    // A plain connection to a server whose pg_hba.conf takes TCP over TLS only is refused by
    // the server (`hostnossl … reject`): an authentication error, naming the missing
    // encryption. `require` to a server without TLS is refused by the client.
    #[tokio::test]
    async fn postgres_plain_connection_is_refused_by_a_tls_only_server() {
        let files = certificates();
        let Some(pg) = postgres_tls_for_test(&files, false) else {
            return;
        };
        let err = connect(&url(&pg, "sslmode=disable"), options())
            .await
            .expect_err("hostnossl rejects");
        assert!(matches!(err, Error::Authentication { .. }), "{err:?}");
        let text = format!("{err} {:?}", std::error::Error::source(&err));
        assert!(text.contains("no encryption"), "{text}");

        let Some(plain) = leasehold_harness::postgres_for_test() else {
            return;
        };
        let err = connect(&url(&plain, "sslmode=require"), options())
            .await
            .expect_err("the server has no TLS");
        assert!(matches!(err, Error::Connection { .. }), "{err:?}");
        let text = format!("{err} {:?}", std::error::Error::source(&err));
        assert!(text.contains("does not support TLS"), "{text}");
    }

    // A server that asks for a client certificate (`clientcert=verify-ca`): refused without
    // one (authentication), accepted with the CA's client certificate, from the options or
    // from the URL (`sslcert`, `sslkey`).
    #[tokio::test]
    async fn postgres_client_certificates() {
        let files = certificates();
        let Some(pg) = postgres_tls_for_test(&files, true) else {
            return;
        };
        let ca = path(files.ca_cert());
        let verify = format!("sslmode=verify-full&sslrootcert={ca}");
        let err = connect(&url(&pg, &verify), options())
            .await
            .expect_err("no client certificate");
        assert!(matches!(err, Error::Authentication { .. }), "{err:?}");
        let text = format!("{err} {:?}", std::error::Error::source(&err));
        assert!(text.contains("certificate"), "{text}");

        let with_options = options()
            .tls_cert_file(files.client_cert())
            .tls_key_file(files.client_key());
        let locker = connect(&url(&pg, &verify), with_options)
            .await
            .expect("a client certificate from the options");
        lock_round_trip(&locker, "tls:pg").await;
        let in_url = format!(
            "{verify}&sslcert={}&sslkey={}",
            path(files.client_cert()),
            path(files.client_key())
        );
        let locker = connect(&url(&pg, &in_url), options())
            .await
            .expect("a client certificate from the URL");
        lock_round_trip(&locker, "tls:pg").await;

        // A certificate without its key: refused before connecting.
        let err = connect(
            &url(&pg, &verify),
            options().tls_cert_file(files.client_cert()),
        )
        .await
        .expect_err("no key");
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    }
}

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use leasehold_harness::{Etcd, etcd_tls_for_test};

    fn url(etcd: &Etcd) -> String {
        format!("etcds://127.0.0.1:{}", etcd.tls_port().expect("a TLS port"))
    }

    fn mutual(files: &TlsFiles) -> ClientOptions {
        options()
            .tls_ca_file(files.ca_cert())
            .tls_cert_file(files.client_cert())
            .tls_key_file(files.client_key())
    }

    // `etcds://` with the CA and a client certificate (`--client-cert-auth`): locks work.
    #[tokio::test]
    async fn etcd_mutual_tls() {
        let files = certificates();
        let Some(etcd) = etcd_tls_for_test(&files) else {
            return;
        };
        let locker = connect(&url(&etcd), mutual(&files))
            .await
            .expect("mutual TLS");
        lock_round_trip(&locker, "tls:etcd").await;
        // `localhost` is a name the certificate carries too.
        let by_name = format!("etcds://localhost:{}", etcd.tls_port().unwrap());
        let locker = connect(&by_name, mutual(&files)).await.expect("by name");
        lock_round_trip(&locker, "tls:etcd").await;
    }

    // No client certificate where the member asks for one: refused within the connect
    // timeout. TLS 1.3 lets the member refuse only after the client's handshake is done, and
    // the gRPC client mostly reports the closed connection rather than the member's alert:
    // then the error says what to check (an unreachable member, exit 69 in the CLI); when the
    // alert is seen it is an authentication error (77).
    #[tokio::test]
    async fn etcd_missing_client_certificate_is_refused() {
        let files = certificates();
        let Some(etcd) = etcd_tls_for_test(&files) else {
            return;
        };
        let err = connect(&url(&etcd), options().tls_ca_file(files.ca_cert()))
            .await
            .expect_err("no client certificate");
        match &err {
            Error::Authentication { .. } => {}
            Error::Connection { .. } => {
                let text = err.to_string();
                assert!(
                    text.contains("if it asks for client certificates"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
        // A client certificate of another CA is refused the same way.
        let other = certificates();
        let foreign = options()
            .tls_ca_file(files.ca_cert())
            .tls_cert_file(other.client_cert())
            .tls_key_file(other.client_key());
        let err = connect(&url(&etcd), foreign)
            .await
            .expect_err("a client certificate the member does not trust");
        match &err {
            Error::Authentication { .. } => {}
            Error::Connection { .. } => {
                let text = err.to_string();
                assert!(
                    text.contains("does it trust the client certificate"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    // A CA that did not sign the member's certificate: refused, naming the certificate
    // problem; so is plain text to the TLS port.
    #[tokio::test]
    async fn etcd_wrong_ca_is_refused() {
        let files = certificates();
        let other = certificates();
        let Some(etcd) = etcd_tls_for_test(&files) else {
            return;
        };
        let wrong = options()
            .tls_ca_file(other.ca_cert())
            .tls_cert_file(files.client_cert())
            .tls_key_file(files.client_key());
        let err = connect(&url(&etcd), wrong)
            .await
            .expect_err("an unknown issuer");
        assert!(matches!(err, Error::Connection { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("invalid peer certificate"), "{text}");

        let plain = format!("etcd://127.0.0.1:{}", etcd.tls_port().unwrap());
        let err = connect(&plain, mutual(&files))
            .await
            .expect_err("plain text to a TLS port");
        assert!(matches!(err, Error::Connection { .. }), "{err:?}");
    }
}

// A listener that accepts and never answers (no TLS handshake, no SSLRequest reply): every TLS
// form fails with a connection error within the connect timeout, none hangs.
#[tokio::test]
async fn a_silent_server_fails_tls_connects_within_the_connect_timeout() {
    let silent = leasehold_harness::SilentServer::start().expect("a silent listener");
    let port = silent.port();
    let files = certificates();
    let bounded = ClientOptions::new()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .tls_ca_file(files.ca_cert())
        .tls_cert_file(files.client_cert())
        .tls_key_file(files.client_key());
    let mut urls = Vec::new();
    if cfg!(feature = "postgres") {
        urls.push(format!(
            "postgres://leasehold@127.0.0.1:{port}/postgres?sslmode=verify-full"
        ));
    }
    if cfg!(feature = "etcd") {
        urls.push(format!("etcds://127.0.0.1:{port}"));
    }
    for url in urls {
        let err = connect(&url, bounded.clone())
            .await
            .expect_err("nothing answers");
        assert!(matches!(err, Error::Connection { .. }), "{url}: {err:?}");
    }
    assert!(
        silent.accepted() >= 1,
        "the silent server saw no connection"
    );
}

// Redis with `tls-auth-clients yes`: the client certificate of the options is shown (mutual
// TLS); without one the server refuses the connection, an authentication error.
leasehold_harness::server_test!(async fn redis_mutual_tls(bin) {
    use leasehold_harness::{Server, ServerOptions};
    let files = certificates();
    let server = Server::start(&bin, &ServerOptions::new().tls(&files).args(["--tls-auth-clients", "yes"]))
        .expect("a TLS server that asks for client certificates");
    let url = server.tls_url().expect("a TLS port");
    let with_ca = options().tls_ca_file(files.ca_cert());
    let mutual = with_ca.clone().tls_cert_file(files.client_cert()).tls_key_file(files.client_key());
    let locker = connect(&url, mutual).await.expect("mutual TLS");
    lock_round_trip(&locker, "tls:redis").await;
    let err = connect(&url, with_ca).await.map(drop).expect_err("no client certificate");
    // The server's alert (CertificateRequired) names the refusal: authentication. (Should the
    // server's reset overtake its alert, only a connection error is left to see.)
    match &err {
        Error::Authentication { .. } => {
            assert!(err.to_string().contains("refused the TLS client certificate"), "{err}");
        }
        Error::Connection { .. } => {}
        other => panic!("{other:?}"),
    }
});
