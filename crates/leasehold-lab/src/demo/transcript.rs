//! `cli/patterns-locks-1.redis`, replayed: each command as redis-cli shows it and the server's
//! real reply, with the Lua (or `DELIFEQ`) equivalent where the server lacks a command.

use anyhow::{Context, bail};
use leasehold::redis::{ClientConnection, RedisClient, ServerInfo};
use redis::Value;

use super::{TRANSCRIPT_KEY, del};

/// The seed's session, verbatim.
const TRANSCRIPT: &[&str] = &[
    r#"SET lock:payment "token-uuid-abc" NX PX 30000"#,
    r#"PTTL lock:payment"#,
    r#"SET lock:payment "token-uuid-xyz" NX PX 30000"#,
    r#"DELEX lock:payment IFEQ "wrong-token""#,
    r#"SET lock:payment "token-uuid-abc" PX 30000 IFEQ "token-uuid-abc""#,
    r#"SET lock:payment "token-uuid-xyz" PX 30000 IFEQ "wrong-token""#,
    r#"GET lock:payment"#,
    r#"DELEX lock:payment IFEQ "token-uuid-abc""#,
    r#"GET lock:payment"#,
    r#"SET lock:payment "token-uuid-abc" NX PX 30000"#,
    r#"EVAL "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) end return 0" 1 lock:payment "wrong-token""#,
    r#"EVAL "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) end return 0" 1 lock:payment "token-uuid-abc""#,
    r#"GET lock:payment"#,
];

/// `SET key value PX ms IFEQ current` as a script: the same replies (`OK`, or nil when the key
/// does not hold `current`).
const SET_IFEQ_LUA: &str = "if redis.call('get',KEYS[1])==ARGV[2] then return redis.call('set',KEYS[1],ARGV[1],'PX',ARGV[3]) end return false";

pub(super) async fn run(client: &RedisClient, prompt: &str) -> anyhow::Result<()> {
    let server = client.server();
    say!(
        "# cli/patterns-locks-1.redis, replayed on {server}: each command and the server's real reply"
    );
    let mut conn = client.connection();
    del(&mut conn, &[TRANSCRIPT_KEY]).await?;
    for line in TRANSCRIPT {
        let (command, note) = for_this_server(line, server)?;
        if let Some(note) = note {
            say!("# {note}");
        }
        say!("{prompt}> {command}");
        let args = split_args(&command)?;
        say!("{}", send(&mut conn, &args).await?);
    }
    Ok(())
}

/// The command to send in place of `line` on this server, and why it differs.
fn for_this_server(line: &str, server: &ServerInfo) -> anyhow::Result<(String, Option<String>)> {
    let args = split_args(line)?;
    let name = args[0].to_ascii_uppercase();
    let has = |word: &str| args.iter().any(|a| a.eq_ignore_ascii_case(word));
    if name == "DELEX" && !server.has_delex {
        let [_, key, _, token] = args.as_slice() else {
            bail!("unexpected DELEX form: {line}");
        };
        if server.has_delifeq {
            return Ok((
                format!("DELIFEQ {key} {}", quote(token)),
                Some(format!(
                    "this server has no DELEX (Redis 8.4+); Valkey's DELIFEQ does the same \
                     compare-and-delete (so does the Lua EVAL further down). Instead of: {line}"
                )),
            ));
        }
        return Ok((
            format!(
                "EVAL {} 1 {key} {}",
                quote(leasehold::internal::RELEASE_LUA),
                quote(token)
            ),
            Some(format!(
                "this server has no DELEX (Redis 8.4+); the Lua equivalent of: {line}"
            )),
        ));
    }
    if name == "SET" && has("IFEQ") && !server.has_set_ifeq {
        let after = |word: &str| {
            args.iter()
                .position(|a| a.eq_ignore_ascii_case(word))
                .and_then(|i| args.get(i + 1))
                .with_context(|| format!("unexpected SET form: {line}"))
        };
        let (key, value) = (&args[1], &args[2]);
        let (ms, current) = (after("PX")?, after("IFEQ")?);
        return Ok((
            format!(
                "EVAL {} 1 {key} {} {} {ms}",
                quote(SET_IFEQ_LUA),
                quote(value),
                quote(current)
            ),
            Some(format!(
                "this server has no SET ... IFEQ (Redis 8.4+, Valkey 8.1+); the Lua equivalent of: {line}"
            )),
        ));
    }
    Ok((line.to_string(), None))
}

/// Sends one command and renders the reply as redis-cli does. Error replies are shown, not
/// raised; a broken connection is raised.
async fn send(conn: &mut ClientConnection, args: &[String]) -> anyhow::Result<String> {
    let mut cmd = redis::cmd(&args[0]);
    for a in &args[1..] {
        cmd.arg(a);
    }
    match cmd.query_async::<Value>(conn).await {
        Ok(value) => Ok(render(&value)),
        Err(e) if e.code().is_some() && !e.is_io_error() => Ok(format!(
            "(error) {} {}",
            e.code().unwrap_or_default(),
            e.detail().unwrap_or_default()
        )
        .trim_end()
        .to_string()),
        Err(e) => Err(e).with_context(|| format!("sending {}", args[0])),
    }
}

/// A reply as redis-cli prints it.
fn render(value: &Value) -> String {
    let mut out = String::new();
    render_into(value, 0, &mut out);
    out
}

fn render_into(value: &Value, indent: usize, out: &mut String) {
    let items = |items: &[Value], out: &mut String| {
        if items.is_empty() {
            out.push_str("(empty array)");
            return;
        }
        let width = items.len().to_string().len();
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push('\n');
                out.push_str(&" ".repeat(indent));
            }
            let label = format!("{:>width$}) ", i + 1);
            out.push_str(&label);
            render_into(item, indent + label.len(), out);
        }
    };
    match value {
        Value::Nil => out.push_str("(nil)"),
        Value::Int(n) => out.push_str(&format!("(integer) {n}")),
        Value::BulkString(bytes) => out.push_str(&repr(bytes)),
        Value::SimpleString(s) => out.push_str(s),
        Value::Okay => out.push_str("OK"),
        Value::Double(d) => out.push_str(&format!("(double) {d}")),
        Value::Boolean(b) => out.push_str(if *b { "(true)" } else { "(false)" }),
        Value::VerbatimString { text, .. } => out.push_str(text),
        Value::ServerError(e) => {
            out.push_str(&format!(
                "(error) {} {}",
                e.code(),
                e.details().unwrap_or_default()
            ));
        }
        Value::Array(v) | Value::Set(v) | Value::Push { data: v, .. } => items(v, out),
        Value::Map(pairs) => {
            let flat: Vec<Value> = pairs
                .iter()
                .flat_map(|(k, v)| [k.clone(), v.clone()])
                .collect();
            items(&flat, out);
        }
        Value::Attribute { data, .. } => render_into(data, indent, out),
        other => out.push_str(&format!("{other:?}")),
    }
}

/// A bulk string in double quotes, escaped like redis-cli's `sdscatrepr`.
fn repr(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            b if b.is_ascii_graphic() || b == b' ' => out.push(b as char),
            b => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('"');
    out
}

/// `s` in double quotes, for a command line.
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Splits a redis-cli command line into arguments: whitespace separates, `"..."` allows the
/// escapes `\" \\ \n \r \t \a \b \xHH`, `'...'` allows `\'`.
fn split_args(line: &str) -> anyhow::Result<Vec<String>> {
    let mut args = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let Some(&first) = chars.peek() else { break };
        let mut arg = String::new();
        match first {
            '"' => {
                chars.next();
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some('n') => arg.push('\n'),
                            Some('r') => arg.push('\r'),
                            Some('t') => arg.push('\t'),
                            Some('a') => arg.push('\x07'),
                            Some('b') => arg.push('\x08'),
                            Some('x') => {
                                let hex: String = chars.by_ref().take(2).collect();
                                let byte = u8::from_str_radix(&hex, 16)
                                    .with_context(|| format!("bad \\x escape in: {line}"))?;
                                arg.push(char::from(byte));
                            }
                            Some(c) => arg.push(c),
                            None => bail!("unbalanced quotes in: {line}"),
                        },
                        Some(c) => arg.push(c),
                        None => bail!("unbalanced quotes in: {line}"),
                    }
                }
            }
            '\'' => {
                chars.next();
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some('\\') if chars.peek() == Some(&'\'') => {
                            chars.next();
                            arg.push('\'');
                        }
                        Some(c) => arg.push(c),
                        None => bail!("unbalanced quotes in: {line}"),
                    }
                }
            }
            _ => {
                while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                    arg.push(c);
                }
            }
        }
        args.push(arg);
    }
    if args.is_empty() {
        bail!("empty command");
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_like_redis_cli() {
        assert_eq!(
            split_args(TRANSCRIPT[10]).unwrap(),
            [
                "EVAL",
                leasehold::internal::RELEASE_LUA,
                "1",
                "lock:payment",
                "wrong-token"
            ]
        );
        assert_eq!(
            split_args(r#"a "b \"c\"" 'd\'e'"#).unwrap(),
            ["a", "b \"c\"", "d'e"]
        );
        assert!(split_args(r#"GET "x"#).is_err());
        assert!(split_args("  ").is_err());
    }

    #[test]
    fn renders_like_redis_cli() {
        assert_eq!(render(&Value::Okay), "OK");
        assert_eq!(render(&Value::Nil), "(nil)");
        assert_eq!(render(&Value::Int(30000)), "(integer) 30000");
        assert_eq!(
            render(&Value::BulkString(b"token-uuid-abc".to_vec())),
            "\"token-uuid-abc\""
        );
        assert_eq!(
            render(&Value::Array(vec![
                Value::Int(1),
                Value::Array(vec![Value::Nil, Value::Okay])
            ])),
            "1) (integer) 1\n2) 1) (nil)\n   2) OK"
        );
    }

    fn server(has_delex: bool, has_delifeq: bool, has_set_ifeq: bool) -> ServerInfo {
        ServerInfo {
            kind: leasehold::redis::ServerKind::Redis,
            version: "x".into(),
            has_delex,
            has_delifeq,
            has_set_ifeq,
            can_publish: true,
            can_track: true,
            cluster_enabled: false,
        }
    }

    #[test]
    fn substitutes_what_the_server_lacks() {
        let (cmd, note) = for_this_server(TRANSCRIPT[3], &server(true, false, true)).unwrap();
        assert_eq!((cmd.as_str(), note), (TRANSCRIPT[3], None));
        let (cmd, _) = for_this_server(TRANSCRIPT[3], &server(false, true, true)).unwrap();
        assert_eq!(cmd, r#"DELIFEQ lock:payment "wrong-token""#);
        let (cmd, note) = for_this_server(TRANSCRIPT[7], &server(false, false, false)).unwrap();
        assert_eq!(
            split_args(&cmd).unwrap(),
            [
                "EVAL",
                leasehold::internal::RELEASE_LUA,
                "1",
                "lock:payment",
                "token-uuid-abc"
            ]
        );
        assert!(note.unwrap().contains("no DELEX"));
        let (cmd, _) = for_this_server(TRANSCRIPT[5], &server(false, false, false)).unwrap();
        assert_eq!(
            split_args(&cmd).unwrap(),
            [
                "EVAL",
                SET_IFEQ_LUA,
                "1",
                "lock:payment",
                "token-uuid-xyz",
                "wrong-token",
                "30000"
            ]
        );
    }
}
