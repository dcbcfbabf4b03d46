//! Errors: etcd client errors classified into the library's.

use etcd_client as ec;

use crate::core::error::{Error, Operation};

pub(super) fn timeout_error(op: Operation, ambiguous: bool) -> Error {
    Error::Connection {
        op,
        ambiguous,
        source: std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no reply from etcd within the timeout",
        )
        .into(),
    }
}

pub(super) fn session_lost(op: Operation) -> Error {
    Error::Connection {
        op,
        ambiguous: false,
        source: "the etcd lease session ended (keep-alives failed) while acquiring".into(),
    }
}

/// Whether the error text says the request never left (the connection could not be made).
pub(super) fn never_sent(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        let text = e.to_string().to_ascii_lowercase();
        if text.contains("connection refused")
            || text.contains("tcp connect error")
            || text.contains("error trying to connect")
        {
            return true;
        }
        cur = e.source();
    }
    false
}

/// An error connecting: as [`from_etcd`], but a TLS alert from the member that refuses our
/// certificate (none sent, or not one it trusts) is an authentication failure, not an
/// unreachable member.
///
/// With TLS 1.3 the member's refusal comes after our side of the handshake is done, and the
/// gRPC client often reports only the closed connection, not the alert: over `etcds://` such
/// an error says what the likely cause is (`with_identity`: whether we sent a certificate).
pub(super) fn connect_error(err: ec::Error, tls: bool, with_identity: bool) -> Error {
    if crate::core::tls::refused_client_certificate(&err) {
        return crate::core::tls::refused_certificate_error(err);
    }
    let closed = {
        let text = format!("{err:?}");
        text.contains("connection closed")
            || text.contains("broken pipe")
            || text.contains("connection reset")
    };
    if tls && crate::core::tls::untrusted_server_certificate(&err) {
        return Error::Connection {
            op: Operation::Connect,
            ambiguous: false,
            source: Box::new(crate::core::tls::Hinted {
                hint: "the member's TLS certificate is not trusted: it must chain to the CA \
                       file (tls_ca_file, --tls-ca-file), else to the system's roots, and name \
                       the URL's host",
                source: Box::new(err),
            }),
        };
    }
    if tls && closed {
        let hint = if with_identity {
            "the member closed the TLS connection: does it trust the client certificate's CA?"
        } else {
            "the member closed the TLS connection: if it asks for client certificates \
             (--client-cert-auth), give one (tls_cert_file and tls_key_file, or --tls-cert-file \
             and --tls-key-file)"
        };
        return Error::Connection {
            op: Operation::Connect,
            ambiguous: false,
            source: Box::new(crate::core::tls::Hinted {
                hint,
                source: Box::new(err),
            }),
        };
    }
    from_etcd(Operation::Connect, false, err)
}

fn is_auth_failure(message: &str) -> bool {
    [
        "authentication failed",
        "invalid auth token",
        "user name is empty",
        "authentication is not enabled",
        "invalid user ID or password",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// etcd refused a write naming a lease that no longer exists.
pub(super) fn lease_gone(e: &Error) -> bool {
    matches!(e, Error::Server { source, .. } if source.to_string().contains("requested lease not found"))
}

/// Classifies an etcd client error. `write`: whether the request may have changed something
/// (then a lost reply is ambiguous).
pub(super) fn from_etcd(op: Operation, write: bool, err: ec::Error) -> Error {
    const CANCELLED: i32 = 1;
    const UNKNOWN: i32 = 2;
    const INVALID_ARGUMENT: i32 = 3;
    const DEADLINE_EXCEEDED: i32 = 4;
    const PERMISSION_DENIED: i32 = 7;
    const FAILED_PRECONDITION: i32 = 9;
    const UNAVAILABLE: i32 = 14;
    const UNAUTHENTICATED: i32 = 16;
    let ambiguous = write && op != Operation::Connect && !never_sent(&err);
    match &err {
        ec::Error::GRpcStatus(status) => {
            let code = i32::from(status.code());
            let message = status.message();
            if code == UNAUTHENTICATED
                || (matches!(code, INVALID_ARGUMENT | FAILED_PRECONDITION)
                    && is_auth_failure(message))
            {
                return Error::Authentication { source: err.into() };
            }
            if code == PERMISSION_DENIED {
                return Error::PermissionDenied {
                    op,
                    source: err.into(),
                };
            }
            // tonic reports a connection reset or broken pipe mid-call (a member killed) as
            // Unknown "transport error": a broken connection, not a server's answer.
            if matches!(code, UNAVAILABLE | DEADLINE_EXCEEDED | CANCELLED)
                || (code == UNKNOWN && message.contains("transport error"))
            {
                return Error::Connection {
                    op,
                    ambiguous,
                    source: err.into(),
                };
            }
            Error::Server {
                op,
                source: err.into(),
            }
        }
        ec::Error::TransportError(_)
        | ec::Error::IoError(_)
        | ec::Error::LeaseKeepAliveError(_)
        | ec::Error::WatchError(_)
        | ec::Error::EndpointError(_) => Error::Connection {
            op,
            ambiguous,
            source: err.into(),
        },
        ec::Error::InvalidArgs(_) | ec::Error::InvalidUri(_) => {
            Error::invalid("url", err.to_string())
        }
        _ => Error::Server {
            op,
            source: err.into(),
        },
    }
}

/// Whether a waiting acquisition rides the error out (until its deadline).
pub(super) fn transient(e: &Error) -> bool {
    matches!(e, Error::Connection { .. })
}
