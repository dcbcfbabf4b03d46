//! A minimal RESP2 encoder and parser, enough to drive a server from tests.

use std::fmt;
use std::io::BufRead;

use crate::HarnessError;

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RespValue {
    /// `+OK`
    Simple(String),
    /// `-ERR ...` (the text after the `-`)
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$3\r\nfoo` or the nil bulk `$-1` (`None`)
    Bulk(Option<Vec<u8>>),
    /// `*2\r\n...` or the nil array `*-1` (`None`)
    Array(Option<Vec<RespValue>>),
}

impl RespValue {
    /// The text of a simple string, or of a bulk string that is valid UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            RespValue::Simple(s) => Some(s),
            RespValue::Bulk(Some(b)) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The bytes of a simple or bulk string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            RespValue::Simple(s) => Some(s.as_bytes()),
            RespValue::Bulk(Some(b)) => Some(b),
            _ => None,
        }
    }

    /// The value of an integer reply.
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            RespValue::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// The elements of a non-nil array reply.
    pub fn as_array(&self) -> Option<&[RespValue]> {
        match self {
            RespValue::Array(Some(items)) => Some(items),
            _ => None,
        }
    }

    /// True for the nil bulk string and the nil array.
    pub fn is_nil(&self) -> bool {
        matches!(self, RespValue::Bulk(None) | RespValue::Array(None))
    }

    /// True for an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, RespValue::Error(_))
    }

    /// True if this is the simple string `OK`.
    pub fn is_ok(&self) -> bool {
        matches!(self, RespValue::Simple(s) if s == "OK")
    }

    /// Encodes one command as a RESP2 array of bulk strings.
    pub fn encode_command<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(16 + args.iter().map(|a| a.as_ref().len() + 16).sum::<usize>());
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for arg in args {
            let arg = arg.as_ref();
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    /// Reads one RESP2 reply. Socket timeouts become [`HarnessError::Timeout`].
    pub fn read<R: BufRead>(reader: &mut R) -> Result<RespValue, HarnessError> {
        let line = read_line(reader)?;
        let (kind, rest) = line
            .split_first()
            .ok_or_else(|| HarnessError::Protocol("empty reply line".into()))?;
        let text = || String::from_utf8_lossy(rest).into_owned();
        match kind {
            b'+' => Ok(RespValue::Simple(text())),
            b'-' => Ok(RespValue::Error(text())),
            b':' => Ok(RespValue::Integer(parse_int(rest)?)),
            b'$' => {
                let len = parse_int(rest)?;
                if len < 0 {
                    return Ok(RespValue::Bulk(None));
                }
                let len = usize::try_from(len)
                    .map_err(|_| HarnessError::Protocol(format!("bad bulk length {len}")))?;
                let mut buf = vec![0; len + 2];
                reader
                    .read_exact(&mut buf)
                    .map_err(|e| HarnessError::from_io(e, "reading a bulk string"))?;
                if !buf.ends_with(b"\r\n") {
                    return Err(HarnessError::Protocol(
                        "bulk string not terminated by CRLF".into(),
                    ));
                }
                buf.truncate(len);
                Ok(RespValue::Bulk(Some(buf)))
            }
            b'*' => {
                let len = parse_int(rest)?;
                if len < 0 {
                    return Ok(RespValue::Array(None));
                }
                let mut items = Vec::with_capacity(len.min(1024) as usize);
                for _ in 0..len {
                    items.push(RespValue::read(reader)?);
                }
                Ok(RespValue::Array(Some(items)))
            }
            other => Err(HarnessError::Protocol(format!(
                "unexpected reply type byte {:?} in {:?}",
                char::from(*other),
                String::from_utf8_lossy(&line)
            ))),
        }
    }
}

impl fmt::Display for RespValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RespValue::Simple(s) => write!(f, "{s}"),
            RespValue::Error(e) => write!(f, "(error) {e}"),
            RespValue::Integer(i) => write!(f, "(integer) {i}"),
            RespValue::Bulk(None) | RespValue::Array(None) => write!(f, "(nil)"),
            RespValue::Bulk(Some(b)) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            RespValue::Array(Some(items)) => {
                write!(f, "[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{item}")?;
                }
                write!(f, "]")
            }
        }
    }
}

/// Reads one CRLF-terminated line and returns it without the CRLF.
fn read_line<R: BufRead>(reader: &mut R) -> Result<Vec<u8>, HarnessError> {
    let mut line = Vec::new();
    let n = reader
        .read_until(b'\n', &mut line)
        .map_err(|e| HarnessError::from_io(e, "reading a reply"))?;
    if n == 0 {
        return Err(HarnessError::Protocol(
            "connection closed before a reply".into(),
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(HarnessError::Protocol(format!(
            "reply line not terminated by CRLF: {:?}",
            String::from_utf8_lossy(&line)
        )));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_int(digits: &[u8]) -> Result<i64, HarnessError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            HarnessError::Protocol(format!("bad integer {:?}", String::from_utf8_lossy(digits)))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: &[u8]) -> Result<RespValue, HarnessError> {
        RespValue::read(&mut &input[..])
    }

    #[test]
    fn encodes_commands() {
        assert_eq!(
            RespValue::encode_command(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn parses_all_resp2_types() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), RespValue::Simple("OK".into()));
        assert_eq!(
            parse(b"-ERR bad\r\n").unwrap(),
            RespValue::Error("ERR bad".into())
        );
        assert_eq!(parse(b":-12\r\n").unwrap(), RespValue::Integer(-12));
        assert_eq!(parse(b"$-1\r\n").unwrap(), RespValue::Bulk(None));
        assert_eq!(
            parse(b"$4\r\na\r\nb\r\n").unwrap(),
            RespValue::Bulk(Some(b"a\r\nb".to_vec()))
        );
        assert_eq!(parse(b"*-1\r\n").unwrap(), RespValue::Array(None));
        assert_eq!(
            parse(b"*3\r\n:1\r\n$1\r\nx\r\n*0\r\n").unwrap(),
            RespValue::Array(Some(vec![
                RespValue::Integer(1),
                RespValue::Bulk(Some(b"x".to_vec())),
                RespValue::Array(Some(vec![])),
            ]))
        );
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(parse(b""), Err(HarnessError::Protocol(_))));
        assert!(matches!(parse(b"+OK\n"), Err(HarnessError::Protocol(_))));
        assert!(matches!(parse(b"%1\r\n"), Err(HarnessError::Protocol(_))));
        assert!(matches!(parse(b":x\r\n"), Err(HarnessError::Protocol(_))));
        assert!(parse(b"$3\r\nab").is_err());
    }

    #[test]
    fn accessors() {
        let v = RespValue::Bulk(Some(b"hi".to_vec()));
        assert_eq!(v.as_str(), Some("hi"));
        assert!(RespValue::Simple("OK".into()).is_ok());
        assert!(RespValue::Bulk(None).is_nil());
        assert_eq!(RespValue::Integer(3).as_integer(), Some(3));
    }
}
