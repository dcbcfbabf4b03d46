//! `--tls-ca-file`, `--tls-cert-file` and `--tls-key-file` with PostgreSQL (`?sslmode=…`) and
//! etcd (`etcds://`), against servers started with certificates made at test time: what
//! works, and the exit status of each TLS failure (69: the server's certificate is not
//! trusted; 77: the server refused us for want of TLS or of a client certificate; 64: flags
//! that cannot work); Redis takes the same client certificate.

use crate::support;

use leasehold_harness::{
    Server, ServerOptions, TlsFiles, etcd_tls_for_test, postgres_tls_for_test, server_test,
};
use support::leasehold;

fn certificates() -> TlsFiles {
    TlsFiles::temporary().expect("certificates are generated")
}

fn path(p: std::path::PathBuf) -> String {
    p.to_str().expect("a UTF-8 path").to_string()
}

/// The CA, the client certificate and its key.
fn paths(files: &TlsFiles) -> (String, String, String) {
    (
        path(files.ca_cert()),
        path(files.client_cert()),
        path(files.client_key()),
    )
}

/// The three flags of mutual TLS.
fn tls_flags<'a>(ca: &'a str, cert: &'a str, key: &'a str) -> [&'a str; 6] {
    [
        "--tls-ca-file",
        ca,
        "--tls-cert-file",
        cert,
        "--tls-key-file",
        key,
    ]
}

/// `leasehold --url URL FLAGS... ARGS...`.
fn at(url: &str, flags: &[&str], args: &[&str]) -> support::Run {
    let mut all = vec!["--url", url];
    all.extend(flags);
    all.extend(args);
    leasehold(&all)
}

// A server that takes TLS only, with client certificates: `run` works with the three flags;
// without the client certificate the server refuses (77), with another CA its certificate is
// not trusted (69), plain text is refused (77), a certificate without its key is a usage
// error (64).
#[test]
fn postgres_with_tls_flags() {
    let files = certificates();
    let other = certificates();
    let Some(pg) = postgres_tls_for_test(&files, true) else {
        return;
    };
    let url = format!("{}?sslmode=verify-full", pg.url());
    let (ca, cert, key) = paths(&files);
    let with = |extra: &[&str], args: &[&str]| at(&url, extra, args);
    let mutual = tls_flags(&ca, &cert, &key);
    let out = with(
        &mutual,
        &["run", "tls:pg", "--", "sh", "-c", "echo under-lock"],
    )
    .expect(0);
    assert_eq!(out.stdout.trim(), "under-lock");
    // The flags after the subcommand work too.
    let mut after = vec!["inspect", "tls:pg", "--json"];
    after.extend(mutual);
    assert_eq!(with(&[], &after).expect(0).json()["held"], false);

    let out = with(&["--tls-ca-file", &ca], &["run", "tls:pg", "--", "true"]).expect(77);
    assert!(out.stderr.contains("certificate"), "{}", out.stderr);

    let wrong = path(other.ca_cert());
    let out = with(
        &tls_flags(&wrong, &cert, &key),
        &["run", "tls:pg", "--", "true"],
    )
    .expect(69);
    assert!(out.stderr.contains("not trusted"), "{}", out.stderr);

    let plain = format!("{}?sslmode=disable", pg.url());
    let out = leasehold(&["--url", &plain, "run", "tls:pg", "--", "true"]).expect(77);
    assert!(out.stderr.contains("no encryption"), "{}", out.stderr);

    let out = with(
        &["--tls-ca-file", &ca, "--tls-cert-file", &cert],
        &["run", "tls:pg", "--", "true"],
    )
    .expect(64);
    assert!(out.stderr.contains("key"), "{}", out.stderr);
}

// `etcds://` with mutual TLS: acquire, inspect, release. Another CA: 69. No client
// certificate: refused within the connect timeout, with a message that names it (69 when only
// the closed connection is seen, 77 when the member's alert is).
#[test]
fn etcd_with_tls_flags() {
    let files = certificates();
    let other = certificates();
    let Some(etcd) = etcd_tls_for_test(&files) else {
        return;
    };
    let url = format!("etcds://127.0.0.1:{}", etcd.tls_port().expect("a TLS port"));
    let (ca, cert, key) = paths(&files);
    let lh = |tls: &[&str], args: &[&str]| at(&url, tls, args);
    let mutual = tls_flags(&ca, &cert, &key);
    let token = lh(&mutual, &["acquire", "tls:etcd", "--ttl", "30s"])
        .expect(0)
        .stdout;
    let state = lh(&mutual, &["inspect", "tls:etcd", "--json"])
        .expect(0)
        .json();
    assert_eq!(state["token"], token.trim());
    lh(&mutual, &["release", "tls:etcd", "--token", token.trim()]).expect(0);

    let wrong = path(other.ca_cert());
    let out = lh(
        &tls_flags(&wrong, &cert, &key),
        &["acquire", "tls:etcd", "--ttl", "30s"],
    )
    .expect(69);
    assert!(
        out.stderr.contains("invalid peer certificate"),
        "{}",
        out.stderr
    );

    let out = lh(
        &["--tls-ca-file", &ca],
        &["acquire", "tls:etcd", "--ttl", "30s"],
    );
    assert!(matches!(out.code, 69 | 77), "{out:?}");
    assert!(out.stderr.contains("client certificate"), "{}", out.stderr);
}

// Redis asking for client certificates (`tls-auth-clients yes`): the three flags work (the
// CA and the client certificate); without the certificate the server refuses (77, or 69 when
// its reset overtakes its alert).
server_test!(async fn redis_with_tls_flags(bin) {
    let files = certificates();
    let options = ServerOptions::new().tls(&files).args(["--tls-auth-clients", "yes"]);
    let server = Server::start(&bin, &options).unwrap();
    let url = server.tls_url().unwrap();
    let (ca, cert, key) = paths(&files);
    let token = at(&url, &tls_flags(&ca, &cert, &key), &["acquire", "tls:redis", "--ttl", "30s"]).expect(0).stdout;
    at(&url, &tls_flags(&ca, &cert, &key), &["release", "tls:redis", "--token", token.trim()]).expect(0);
    let out = at(&url, &["--tls-ca-file", &ca], &["acquire", "tls:redis", "--ttl", "30s"]);
    assert!(matches!(out.code, 69 | 77), "{out:?}");
    if out.code == 77 {
        assert!(out.stderr.contains("client certificate"), "{}", out.stderr);
    }
});
