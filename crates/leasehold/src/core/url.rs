//! URL pieces every backend's URL parser shares: multi-host lists, credentials.

/// Splits `[auth@]hosts[/db][?query][#fragment]` (the query is ignored).
pub(crate) fn split_multi_host(rest: &str) -> (Option<&str>, &str, Option<&str>, Option<&str>) {
    let (rest, fragment) = match rest.split_once('#') {
        Some((r, f)) => (r, Some(f)),
        None => (rest, None),
    };
    let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
    let (auth, rest) = match rest.rsplit_once('@') {
        Some((a, r)) => (Some(a), r),
        None => (None, rest),
    };
    let (hosts, db) = match rest.split_once('/') {
        Some((h, d)) => (h, Some(d)),
        None => (rest, None),
    };
    (auth, hosts, db, fragment)
}

/// `h1:p1,h2,[::1]:p3` -> `["h1:p1", "h2:6379", "[::1]:p3"]`.
pub(crate) fn parse_hosts(
    hosts: &str,
    default_port: u16,
) -> std::result::Result<Vec<String>, String> {
    let mut out = Vec::new();
    for h in hosts.split(',') {
        let h = h.trim();
        if h.is_empty() {
            continue;
        }
        let (host, port) = if let Some(v6) = h.strip_prefix('[') {
            let (addr, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("unterminated IPv6 address in {h:?}"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(format!("bad host {h:?}")),
            };
            (format!("[{addr}]"), port)
        } else {
            match h.rsplit_once(':') {
                Some((host, port)) => (host.to_string(), Some(port)),
                None => (h.to_string(), None),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err(format!("empty host in {h:?}"));
        }
        let port: u16 = match port {
            None => default_port,
            Some(p) => p
                .parse()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("bad port {p:?}"))?,
        };
        out.push(format!("{host}:{port}"));
    }
    if out.is_empty() {
        return Err("no host".to_string());
    }
    Ok(out)
}

/// `%XX` escapes decoded (invalid UTF-8 replaced).
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        // Bytes, not a str slice: a '%' before a multi-byte character must not split it.
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
