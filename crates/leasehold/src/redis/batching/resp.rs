//! Reading RESP2 replies into the `redis` crate's [`Value`], as its own parser reads them.

use redis::Value;

/// One reply at the start of `bytes`, and how many bytes it took; `Ok(None)` while the reply is
/// not complete yet. Bytes that are not RESP2 are an error: the connection can no longer tell
/// where a reply starts.
pub(super) fn parse(bytes: &[u8]) -> Result<Option<(Value, usize)>, String> {
    let Some(&kind) = bytes.first() else {
        return Ok(None);
    };
    if !matches!(kind, b'+' | b'-' | b':' | b'$' | b'*') {
        return Err(format!(
            "not a RESP2 reply (type byte {:?})",
            char::from(kind)
        ));
    }
    let Some((line, used)) = line(bytes) else {
        return Ok(None);
    };
    let number = || -> Result<i64, String> {
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                format!(
                    "not a number in a reply: {:?}",
                    String::from_utf8_lossy(line)
                )
            })
    };
    Ok(Some(match kind {
        b'+' if line == b"OK" => (Value::Okay, used),
        b'+' => (
            Value::SimpleString(String::from_utf8_lossy(line).into_owned()),
            used,
        ),
        // Errors are rare (a script not cached yet, a refusal): the crate's own parser makes
        // its `ServerError` of them, with the code and detail it would give.
        b'-' => match redis::parse_redis_value(&bytes[..used]) {
            Ok(value) => (value, used),
            Err(e) => return Err(format!("an error reply the client cannot read: {e}")),
        },
        b':' => (Value::Int(number()?), used),
        b'$' => match usize::try_from(number()?) {
            Err(_) => (Value::Nil, used),
            Ok(len) => {
                let end = used + len;
                if bytes.len() < end + 2 {
                    return Ok(None);
                }
                if &bytes[end..end + 2] != b"\r\n" {
                    return Err("a bulk string not ended by CRLF".into());
                }
                (Value::BulkString(bytes[used..end].to_vec()), end + 2)
            }
        },
        b'*' => match usize::try_from(number()?) {
            Err(_) => (Value::Nil, used),
            Ok(len) => {
                // Not trusting the count for the allocation: a reply cut short must not reserve
                // what its header claims.
                let mut items = Vec::with_capacity(len.min(64));
                let mut at = used;
                for _ in 0..len {
                    let Some((item, took)) = parse(&bytes[at..])? else {
                        return Ok(None);
                    };
                    items.push(item);
                    at += took;
                }
                (Value::Array(items), at)
            }
        },
        _ => unreachable!("the type byte was checked above"),
    }))
}

/// The first line of `bytes` without its type byte and CRLF, and its length with both.
fn line(bytes: &[u8]) -> Option<(&[u8], usize)> {
    // Past the type byte, which may itself be a CR in bytes that are not RESP.
    let cr = 1 + bytes.get(1..)?.iter().position(|&b| b == b'\r')?;
    (bytes.get(cr + 1) == Some(&b'\n')).then(|| (&bytes[1..cr], cr + 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reply a lock's commands get, read as the crate's parser reads it, whole; and as
    /// incomplete, cut at every byte.
    #[test]
    fn replies_read_as_the_crate_reads_them_and_wait_for_their_end() {
        let replies: &[&[u8]] = &[
            b"+OK\r\n",
            b"+QUEUED\r\n",
            b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
            b"-WRONGPASS invalid username-password pair\r\n",
            b":0\r\n",
            b":-42\r\n",
            b"$-1\r\n",
            b"$0\r\n\r\n",
            b"$5\r\nab\r\nc\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*2\r\n:1\r\n:7\r\n",
            b"*3\r\n$3\r\nkey\r\n*2\r\n:1\r\n$-1\r\n-ERR inner\r\n",
        ];
        for reply in replies {
            let ours = parse(reply).unwrap().unwrap();
            assert_eq!(ours.1, reply.len(), "{reply:?}");
            assert_eq!(
                ours.0,
                redis::parse_redis_value(reply).unwrap(),
                "{reply:?}"
            );
            for cut in 0..reply.len() {
                assert_eq!(
                    parse(&reply[..cut]).unwrap(),
                    None,
                    "{reply:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn two_replies_in_one_read_are_taken_one_at_a_time() {
        let bytes = b":1\r\n$2\r\nhi\r\n+OK";
        let (first, took) = parse(bytes).unwrap().unwrap();
        assert_eq!((first, took), (Value::Int(1), 4));
        let (second, took2) = parse(&bytes[took..]).unwrap().unwrap();
        assert_eq!((second, took2), (Value::BulkString(b"hi".to_vec()), 8));
        assert_eq!(parse(&bytes[took + took2..]).unwrap(), None);
    }

    #[test]
    fn bytes_that_are_not_resp2_are_an_error_not_a_reply() {
        for bad in [
            &b"%1\r\n"[..],
            b"\r\n",
            b"\r\r\n",
            b"?\r\n",
            b":x\r\n",
            b"$2\r\nabcd\r\n",
            b"*1\r\n!\r\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
