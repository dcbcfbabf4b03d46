//! Session locks refused behind a connection pooler: the signs of one, and the refusal.

use tokio_postgres::error::SqlState;

use crate::core::error::Error;

/// Session locks refused: the URL reaches a pooler, not a server session of this connection's
/// own. `found`: what showed it.
pub(super) fn pooler_error(found: &str) -> Error {
    Error::Topology {
        reason: format!(
            "postgres: {found}, so the URL reaches a connection pooler (PgBouncer in any pool \
             mode, pgcat, Odyssey, Supavisor, RDS Proxy, the pooled endpoint of a managed \
             PostgreSQL service) rather than a server session of this connection's own. A \
             session lock lives in the server session, which a pooler may hand to another client \
             (who would be granted the lock too) or end while this connection lives: session \
             locks are refused. Use lease rows (add ?lock=lease to the URL), which work through \
             any pooler, or connect to PostgreSQL directly (a plain TCP proxy or tunnel is fine)"
        ),
    }
}

/// A statement name taken or unknown (preparing, or running a statement this connection
/// prepared) cannot happen on a server session of our own, which never deallocates what it
/// prepared: a pooler moved the connection to another client's server session.
fn is_pooler_sign(e: &tokio_postgres::Error) -> bool {
    let code = e.code();
    code == Some(&SqlState::DUPLICATE_PSTATEMENT)
        || code == Some(&SqlState::INVALID_SQL_STATEMENT_NAME)
}

/// What [`is_pooler_sign`] saw, for [`pooler_error`]; `None`: another error.
pub(super) fn pooler_sign(e: &tokio_postgres::Error) -> Option<String> {
    is_pooler_sign(e).then(|| format!("a prepared statement was taken or unknown ({e})"))
}

/// The server process this connection's startup announced: the process id of the
/// `BackendKeyData` message, which PostgreSQL fills with the serving backend's own id and a
/// pooler fills with a key of its own (PgBouncer in every pool mode, pgcat, Odyssey and
/// Supavisor draw it at random: a pooler answers cancel requests itself, by mapping its key to
/// whichever server session the client has at that moment). Compared with `pg_backend_pid()`
/// in [`PostgresClient::open_raw`](super::PostgresClient): equal on a connection of our own,
/// also through a plain TCP proxy or tunnel (it forwards the message); different through a
/// pooler, whatever its load or pool mode, except by a 1 in 2^32 chance.
///
/// tokio-postgres keeps the announced id private but writes it into every cancel request:
/// the request is written here into an in-memory pipe (never to the network) and read back.
pub(super) async fn announced_pid(client: &tokio_postgres::Client) -> std::io::Result<i32> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    /// The protocol's request codes (length, then code, both big-endian `i32`).
    const SSL_REQUEST: i32 = 80_877_103;
    const CANCEL_REQUEST: i32 = 80_877_102;
    let (ours, mut pipe) = tokio::io::duplex(64);
    let token = client.cancel_token();
    let send = token.cancel_query_raw(ours, pipe::PassThrough);
    let read = async {
        let mut head = [0u8; 8];
        pipe.read_exact(&mut head).await?;
        let code = |h: &[u8; 8]| i32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        if code(&head) == SSL_REQUEST {
            // As a server that offers TLS: what follows goes through `PassThrough` unchanged.
            pipe.write_all(b"S").await?;
            pipe.read_exact(&mut head).await?;
        }
        let mut body = [0u8; 8];
        pipe.read_exact(&mut body).await?;
        if head[..4] != 16i32.to_be_bytes() || code(&head) != CANCEL_REQUEST {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "not a cancel request",
            ));
        }
        Ok(i32::from_be_bytes([body[0], body[1], body[2], body[3]]))
    };
    let (sent, pid) = tokio::join!(send, read);
    sent.map_err(std::io::Error::other)?;
    pid
}

/// A stand-in for TLS on the in-memory pipe of [`announced_pid`]: the bytes pass unchanged.
mod pipe {
    use std::io;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
    use tokio_postgres::tls::{ChannelBinding, TlsConnect, TlsStream};

    pub(super) struct PassThrough;

    pub(super) struct Plain(DuplexStream);

    impl TlsConnect<DuplexStream> for PassThrough {
        type Stream = Plain;
        type Error = io::Error;
        type Future = std::future::Ready<io::Result<Plain>>;

        fn connect(self, stream: DuplexStream) -> Self::Future {
            std::future::ready(Ok(Plain(stream)))
        }
    }

    impl TlsStream for Plain {
        fn channel_binding(&self) -> ChannelBinding {
            ChannelBinding::none()
        }
    }

    impl AsyncRead for Plain {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Plain {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.0).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_shutdown(cx)
        }
    }
}
