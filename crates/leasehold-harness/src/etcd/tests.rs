//! Unit tests: thread safety, HTTP reply parsing, and the leader in a status.

use super::http::parse_http_response;
use super::{Etcd, EtcdCluster, EtcdStatus};

#[test]
fn etcd_is_send_and_sync() {
    fn is<T: Send + Sync>() {}
    is::<Etcd>();
    is::<EtcdCluster>();
}

#[test]
fn parses_http_responses() {
    let plain = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
    assert_eq!(parse_http_response(plain).unwrap(), (200, "{}".to_owned()));
    let chunked = b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n4;x=y\r\n\"b\"}\r\n0\r\n\r\n";
    assert_eq!(
        parse_http_response(chunked).unwrap(),
        (503, r#"{"a":"b"}"#.to_owned())
    );
    assert!(parse_http_response(b"HTTP/1.1 200 OK\r\n").is_err());
    assert!(parse_http_response(b"SSH-2.0-x\r\n\r\n").is_err());
}

#[test]
fn status_leader() {
    let status = EtcdStatus {
        member_id: 7,
        leader: Some(7),
        raft_term: 2,
        version: "3.4.23".into(),
    };
    assert!(status.is_leader());
    assert!(
        !EtcdStatus {
            leader: None,
            ..status
        }
        .is_leader()
    );
}
