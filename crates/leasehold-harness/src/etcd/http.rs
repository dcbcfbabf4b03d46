//! A minimal HTTP/1.1 client on `std::net`, for the JSON gateway.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::HarnessError;

/// One HTTP/1.1 request to `127.0.0.1:port` on a fresh connection (`Connection: close`);
/// returns the status code and the body (chunked transfer decoded).
pub(super) fn http(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<(u16, String), HarnessError> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let what = format!("{method} http://{addr}{path}");
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| HarnessError::from_io(e, &format!("connecting for {what}")))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: application/json\r\n"
    );
    if let Some(body) = body {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ));
    } else {
        request.push_str("\r\n");
    }
    stream
        .write_all(request.as_bytes())
        .map_err(|e| HarnessError::from_io(e, &format!("sending {what}")))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(|e| HarnessError::from_io(e, &format!("reading the reply to {what}")))?;
    parse_http_response(&raw).map_err(|e| {
        HarnessError::Io(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{what}: malformed HTTP reply: {e}"),
        ))
    })
}

/// Splits a complete HTTP/1.1 response (read until the server closed) into status and body.
pub(super) fn parse_http_response(raw: &[u8]) -> Result<(u16, String), String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|_| status_line.starts_with("HTTP/1."))
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let chunked = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("transfer-encoding")
                && value.to_ascii_lowercase().contains("chunked")
        })
    });
    let mut body = &raw[split + 4..];
    let decoded;
    if chunked {
        let mut out = Vec::new();
        loop {
            let eol = body
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or("truncated chunk size")?;
            let size_text = String::from_utf8_lossy(&body[..eol]);
            let size_text = size_text.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| format!("bad chunk size {size_text:?}"))?;
            body = &body[eol + 2..];
            if size == 0 {
                break;
            }
            if body.len() < size + 2 {
                return Err("truncated chunk".to_owned());
            }
            out.extend_from_slice(&body[..size]);
            body = &body[size + 2..];
        }
        decoded = out;
        body = &decoded;
    }
    Ok((status, String::from_utf8_lossy(body).into_owned()))
}
