//! The replies of a [`HostileServer`](super::HostileServer): where each choice comes from,
//! the honest reply to a command, the hostile ones, and what counts as a grant.

use std::sync::atomic::{AtomicUsize, Ordering};

use rand::Rng;
use rand::rngs::StdRng;

use super::{Grant, ReplyKind};
use crate::resp::RespValue;

/// Where choices come from: the seeded generator, or the fuzzer's bytes.
pub(super) enum Source<'a> {
    Rng(Box<StdRng>),
    Script {
        bytes: &'a [u8],
        pos: &'a AtomicUsize,
    },
}

impl Source<'_> {
    /// A choice in `0..n` (0 once a script has run out).
    pub(super) fn below(&mut self, n: usize) -> usize {
        match self {
            Source::Rng(rng) => rng.random_range(0..n.max(1)),
            Source::Script { bytes, pos } => {
                let i = pos.fetch_add(1, Ordering::SeqCst);
                bytes.get(i).map_or(0, |b| usize::from(*b) % n.max(1))
            }
        }
    }

    pub(super) fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
}

/// What happens on the connection after a reply.
pub(super) enum After {
    Continue,
    Close,
    Hang,
}

/// Malformed replies beside those made from the honest one.
// Not here: `~-5`, `>-1` and `(12ab`, which the redis crate reads as nil, an empty push
// and a big number: a client on it cannot tell them from those replies.
const GARBAGE: &[&[u8]] = &[
    b"?what\r\n",
    b"$abc\r\n",
    b"*x\r\n",
    b":12a\r\n",
    b":\r\n",
    b"\r\n",
    b"$99999999999999999999999\r\n",
    b"*-99999999999999999999\r\n",
    b"$3\r\nabcdef\r\n",
    b"*2\r\n:1\r\n?\r\n",
    b",not-a-double\r\n",
    b"#x\r\n",
    b"%-1\r\n",
    b"|-2\r\n",
    b"=-3\r\n",
    b"!-7\r\n",
    b"%1\r\n:1\r\n",
    b"=5\r\nabc\r\n",
    b"$\xff\r\n",
    b"+\xff\xfe\r\n",
];

/// Malformed replies that do not end where they stop: a RESP reader takes the next reply's
/// bytes as their rest (a map short of its value, a verbatim string short of its CRLF).
const UNENDED: &[&[u8]] = &[b"%1\r\n:1\r\n", b"=5\r\nabc\r\n"];

impl Source<'_> {
    /// A malformed reply, and whether it ends where it stops. One that does not (the honest
    /// reply without its CRLFs, an [`UNENDED`] one) runs into the next reply on the connection:
    /// no RESP client can tell where it ends, so every later reply would be read shifted (a
    /// release could take the reply to the command before it for its own). The server ends
    /// the connection after such a reply instead of going on.
    pub(super) fn malformed(&mut self, honest: &[u8]) -> (Vec<u8>, bool) {
        let bytes = self.malformed_bytes(honest);
        let ends = bytes.ends_with(b"\r\n") && !UNENDED.contains(&bytes.as_slice());
        (bytes, ends)
    }

    fn malformed_bytes(&mut self, honest: &[u8]) -> Vec<u8> {
        match self.below(5) {
            // Nesting deeper than a parser should recurse.
            4 => {
                let mut b = b"*1\r\n".repeat(150 + self.below(400));
                b.extend_from_slice(b":1\r\n");
                b
            }
            // The honest reply without its CRLFs.
            0 => honest
                .iter()
                .copied()
                .filter(|b| *b != b'\r' && *b != b'\n')
                .collect(),
            // The honest reply with a bad type byte.
            1 if !honest.is_empty() => {
                let mut b = honest.to_vec();
                b[0] = b"@&^0A"[self.below(5)];
                b
            }
            _ => GARBAGE[self.below(GARBAGE.len())].to_vec(),
        }
    }

    pub(super) fn oversized(&mut self) -> (ReplyKind, Vec<u8>, After) {
        let (bytes, after) = match self.below(5) {
            0 => {
                let n = (1 << 20) * (1 + self.below(4));
                let mut b = format!("${n}\r\n").into_bytes();
                b.resize(b.len() + n, b'x');
                b.extend_from_slice(b"\r\n");
                (b, After::Continue)
            }
            1 => {
                let n = 20_000 + self.below(50_000);
                let mut b = format!("*{n}\r\n").into_bytes();
                for _ in 0..n {
                    b.extend_from_slice(b":1\r\n");
                }
                (b, After::Continue)
            }
            2 => (b"$2147483647\r\nxx".to_vec(), After::Hang),
            3 => (b"*9223372036854775807\r\n:1\r\n".to_vec(), After::Hang),
            _ => (b"%4611686018427387904\r\n".to_vec(), After::Hang),
        };
        (ReplyKind::Oversized, bytes, after)
    }

    pub(super) fn wrong_type(&mut self) -> Vec<u8> {
        const POOL: &[&[u8]] = &[
            b":1\r\n",
            b":-1\r\n",
            b":0\r\n",
            b":9223372036854775807\r\n",
            b"$2\r\nOK\r\n",
            b"$1\r\n1\r\n",
            b"$5\r\nhello\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"+QUEUED\r\n",
            b"+OK\r\n",
            b"-ERR hostile server\r\n",
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            b"-NOSCRIPT No matching script\r\n",
            b"-READONLY You can't write against a read only replica.\r\n",
            b"-LOADING Redis is loading the dataset in memory\r\n",
            b"-MOVED 3999 127.0.0.1:1\r\n",
            b"-\r\n",
            b"*2\r\n:1\r\n$1\r\n5\r\n",
            b"*2\r\n$1\r\n1\r\n:5\r\n",
            b"*2\r\n:1\r\n:-5\r\n",
            b"*2\r\n:1\r\n:9007199254740993\r\n",
            b"*3\r\n:1\r\n:2\r\n:3\r\n",
            b"*1\r\n:1\r\n",
            b"*2\r\n*2\r\n:1\r\n:2\r\n:3\r\n",
            b"*2\r\n:2\r\n$-1\r\n",
            b"*5\r\n:2\r\n:7\r\n:1\r\n:1\r\n$1\r\nx\r\n",
            b"%1\r\n+ok\r\n:1\r\n",
            b"~2\r\n:1\r\n:2\r\n",
            b",3.14\r\n",
            b",inf\r\n",
            b",nan\r\n",
            b"(123456789012345678901234567890\r\n",
            b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nx\r\n",
            b"=8\r\ntxt:OK!\r\n",
            b"|1\r\n+key\r\n+val\r\n+OK\r\n",
            b"|1\r\n+key\r\n+val\r\n:1\r\n",
            b"_\r\n",
            b"#t\r\n",
            b"#f\r\n",
            b"!9\r\nERR blob!\r\n",
            b">0\r\n",
        ];
        POOL[self.below(POOL.len())].to_vec()
    }

    /// A correct reply for `command`, imitating Redis 7.4 (without data: a grant or a refusal
    /// at random).
    pub(super) fn honest(&mut self, resp3: &mut bool, command: &[Vec<u8>]) -> Vec<u8> {
        let upper = |i: usize| {
            command
                .get(i)
                .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
                .unwrap_or_default()
        };
        let has = |word: &str| {
            command
                .iter()
                .skip(1)
                .any(|a| a.eq_ignore_ascii_case(word.as_bytes()))
        };
        match upper(0).as_str() {
            "HELLO" => {
                *resp3 = upper(1) == "3";
                hello(*resp3)
            }
            "PING" => simple("PONG"),
            "AUTH" | "SELECT" | "CLIENT" | "READONLY" | "READWRITE" => simple("OK"),
            "INFO" if upper(1) == "CLUSTER" => bulk(b"# Cluster\r\ncluster_enabled:0\r\n"),
            "INFO" => bulk(
                b"# Server\r\nredis_version:7.4.0\r\nredis_mode:standalone\r\nrun_id:hostile\r\n",
            ),
            "SET" if has("NX") || has("IFEQ") => {
                if self.one_in(2) {
                    simple("OK")
                } else {
                    nil()
                }
            }
            "SET" => simple("OK"),
            "GET" if self.one_in(2) => bulk(b"0123456789abcdef0123456789abcdef"),
            "GET" => nil(),
            "PTTL" | "PEXPIRE" => int([-2, -1, 1, 30_000][self.below(4)]),
            "DELEX" | "DELIFEQ" => match self.below(3) {
                0 => error("ERR unknown command"),
                n => int(n as i64 - 1),
            },
            "DEL" | "EXISTS" | "WAIT" | "PUBLISH" | "SPUBLISH" => int(self.below(3) as i64),
            "INCR" => int(1 + self.below(1000) as i64),
            "SCRIPT" if upper(1) == "LOAD" => bulk(&[b'0'; 40]),
            "SCRIPT" => simple("OK"),
            "EVALSHA" | "EVAL" | "FCALL" | "FCALL_RO" | "EVALSHA_RO" | "EVAL_RO" => {
                if upper(0).starts_with("EVALSHA") && self.one_in(4) {
                    return error("NOSCRIPT No matching script. Please use EVAL.");
                }
                let keys: usize = upper(2).parse().unwrap_or(0);
                self.script_reply(keys)
            }
            "SUBSCRIBE" | "SSUBSCRIBE" | "PSUBSCRIBE" | "UNSUBSCRIBE" | "SUNSUBSCRIBE" => {
                let kind = upper(0).to_ascii_lowercase();
                let mut out = Vec::new();
                for (i, channel) in command.iter().skip(1).enumerate() {
                    let head = if *resp3 { b'>' } else { b'*' };
                    out.extend_from_slice(format!("{}3\r\n", char::from(head)).as_bytes());
                    out.extend(bulk(kind.as_bytes()));
                    out.extend(bulk(channel));
                    out.extend(int(i as i64 + 1));
                }
                out
            }
            _ => error("ERR unknown command"),
        }
    }

    /// A reply of one of the shapes leasehold's scripts return.
    fn script_reply(&mut self, keys: usize) -> Vec<u8> {
        match self.below(6) {
            // Granted: with a fencing number when the script got the counter's key.
            0 | 1 => {
                let number = if keys >= 2 {
                    1 + self.below(1_000_000) as i64
                } else {
                    0
                };
                array(&[int(1), int(number)])
            }
            2 => array(&[int(0), int([-1, 0, 1500, 30_000][self.below(4)])]),
            3 => int(1),
            4 => int(0),
            _ => nil(),
        }
    }
}

/// Whether `reply`, sent in full, grants what `command` asked for: `+OK` to `SET ... NX`, or
/// `[1, n]` to a script. Only exact RESP2 counts: a client that took anything else for a grant
/// would be guessing.
pub(super) fn grant_in(command: &[Vec<u8>], reply: &[u8]) -> Option<Grant> {
    // A grant is a few bytes; longer replies are not parsed (the parser recurses, and the
    // nesting of a malformed reply is deep enough to overflow a thread's stack).
    if reply.len() > 64 {
        return None;
    }
    let mut rest = reply;
    let value = RespValue::read(&mut rest).ok()?;
    if !rest.is_empty() {
        return None;
    }
    let name = String::from_utf8_lossy(command.first()?).to_ascii_uppercase();
    let nx = command.iter().any(|a| a.eq_ignore_ascii_case(b"NX"));
    match (name.as_str(), &value) {
        ("SET", RespValue::Simple(s)) if nx && s == "OK" => Some(Grant::Set),
        ("EVAL" | "EVALSHA" | "FCALL" | "EVAL_RO" | "EVALSHA_RO" | "FCALL_RO", _) => {
            match value.as_array()? {
                [RespValue::Integer(1), RespValue::Integer(number)] => {
                    Some(Grant::Script { number: *number })
                }
                _ => None,
            }
        }
        _ => None,
    }
}

fn simple(s: &str) -> Vec<u8> {
    format!("+{s}\r\n").into_bytes()
}

fn error(s: &str) -> Vec<u8> {
    format!("-{s}\r\n").into_bytes()
}

fn int(i: i64) -> Vec<u8> {
    format!(":{i}\r\n").into_bytes()
}

fn nil() -> Vec<u8> {
    b"$-1\r\n".to_vec()
}

fn bulk(b: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", b.len()).into_bytes();
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
    out
}

fn array(items: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", items.len()).into_bytes();
    for i in items {
        out.extend_from_slice(i);
    }
    out
}

/// `HELLO`'s reply: a map in RESP3, a flat array of pairs in RESP2.
fn hello(resp3: bool) -> Vec<u8> {
    let fields: [(&str, Vec<u8>); 4] = [
        ("server", bulk(b"redis")),
        ("version", bulk(b"7.4.0")),
        ("proto", int(if resp3 { 3 } else { 2 })),
        ("mode", bulk(b"standalone")),
    ];
    let mut out = if resp3 {
        format!("%{}\r\n", fields.len()).into_bytes()
    } else {
        format!("*{}\r\n", 2 * fields.len()).into_bytes()
    };
    for (k, v) in fields {
        out.extend(bulk(k.as_bytes()));
        out.extend(v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(args: &[&str]) -> Vec<Vec<u8>> {
        args.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    #[test]
    fn grants_are_exact() {
        let set = cmd(&["SET", "k", "t", "NX", "PX", "100"]);
        assert_eq!(grant_in(&set, b"+OK\r\n"), Some(Grant::Set));
        for not in [
            &b"$2\r\nOK\r\n"[..],
            b"+OK",
            b"+OK\r\n+OK\r\n",
            b":1\r\n",
            b"$-1\r\n",
        ] {
            assert_eq!(grant_in(&set, not), None, "{not:?}");
        }
        assert_eq!(
            grant_in(&cmd(&["SET", "k", "t", "PX", "1"]), b"+OK\r\n"),
            None
        );
        let eval = cmd(&["EVALSHA", "abc", "2", "k", "f", "t", "100"]);
        assert_eq!(
            grant_in(&eval, b"*2\r\n:1\r\n:7\r\n"),
            Some(Grant::Script { number: 7 })
        );
        for not in [
            &b"*2\r\n:0\r\n:7\r\n"[..],
            b"~2\r\n:1\r\n:7\r\n",
            b"*2\r\n$1\r\n1\r\n:7\r\n",
        ] {
            assert_eq!(grant_in(&eval, not), None, "{not:?}");
        }
    }

    /// The malformed reply of CI's seed 505290436068369086 (an error line without its CRLF)
    /// ran into the next reply, and the client read that reply's `:1` as a release's: such
    /// replies must say so, for the server to end the connection after them.
    #[test]
    fn malformed_replies_that_run_into_the_next_say_so() {
        let pick = |choices: &[u8]| {
            let pos = AtomicUsize::new(0);
            let mut src = Source::Script {
                bytes: choices,
                pos: &pos,
            };
            src.malformed(b"-NOSCRIPT No matching script. Please use EVAL.\r\n")
        };
        let (stripped, ends) = pick(&[0]);
        assert!(!ends, "{stripped:?}");
        for (i, garbage) in GARBAGE.iter().enumerate() {
            let (bytes, ends) = pick(&[2, i as u8]);
            assert_eq!(&bytes, garbage);
            assert_eq!(ends, !UNENDED.contains(garbage), "{garbage:?}");
        }
        let (nested, ends) = pick(&[4, 0]);
        assert!(ends, "{} bytes", nested.len());
    }
}
