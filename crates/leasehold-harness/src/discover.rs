//! Finding server binaries and sorting them into the test matrix.

use std::collections::HashMap;
use std::collections::HashSet;
use std::env;
use std::fmt;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::{Mutex, OnceLock};

use crate::HarnessError;

/// Which server implementation a binary is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServerKind {
    /// Redis (`redis-server`).
    Redis,
    /// Valkey (`valkey-server`).
    Valkey,
}

impl ServerKind {
    /// `"redis"` or `"valkey"`; also the prefix of the binaries' file names.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Redis => "redis",
            ServerKind::Valkey => "valkey",
        }
    }
}

impl fmt::Display for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ServerKind {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "redis" => Ok(ServerKind::Redis),
            "valkey" => Ok(ServerKind::Valkey),
            _ => Err(ParseError::new("server kind", s)),
        }
    }
}

/// A server version, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Version {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
}

impl Version {
    /// A version from its three components.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Version {
            major,
            minor,
            patch,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for Version {
    type Err = ParseError;

    /// Parses `8.6.3`, `7.2` or `9` (missing components are 0); a leading `v` is allowed.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseError::new("version", s);
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let mut parts = [0u32; 3];
        let pieces: Vec<&str> = t.split('.').collect();
        if pieces.len() > 3 {
            return Err(err());
        }
        for (slot, piece) in parts.iter_mut().zip(pieces) {
            if piece.is_empty() || !piece.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err());
            }
            *slot = piece.parse().map_err(|_| err())?;
        }
        Ok(Version::new(parts[0], parts[1], parts[2]))
    }
}

/// A slot of the test matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Flavor {
    /// Redis 7.x (no native conditional delete; the Lua path).
    Redis7,
    /// Redis >= 8.4 (`DELEX`, `SET ... IFEQ`).
    Redis8,
    /// Valkey >= 9 (`DELIFEQ`, `SET ... IFEQ`).
    Valkey9,
}

impl Flavor {
    /// `"redis7"`, `"redis8"` or `"valkey9"`; also the name of the generated test functions.
    pub fn name(&self) -> &'static str {
        match self {
            Flavor::Redis7 => "redis7",
            Flavor::Redis8 => "redis8",
            Flavor::Valkey9 => "valkey9",
        }
    }

    /// All flavors, in matrix order.
    pub fn all() -> [Flavor; 3] {
        [Flavor::Redis7, Flavor::Redis8, Flavor::Valkey9]
    }

    /// The server implementation this flavor needs.
    pub fn kind(&self) -> ServerKind {
        match self {
            Flavor::Redis7 | Flavor::Redis8 => ServerKind::Redis,
            Flavor::Valkey9 => ServerKind::Valkey,
        }
    }

    /// Whether `bin` fills this slot: redis 7.x, redis >= 8.4, valkey >= 9.
    pub fn matches(&self, bin: &ServerBinary) -> bool {
        let v = bin.version;
        match self {
            Flavor::Redis7 => bin.kind == ServerKind::Redis && v.major == 7,
            Flavor::Redis8 => bin.kind == ServerKind::Redis && v >= Version::new(8, 4, 0),
            Flavor::Valkey9 => bin.kind == ServerKind::Valkey && v.major >= 9,
        }
    }
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Flavor {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        Flavor::all()
            .into_iter()
            .find(|f| f.name() == lower)
            .ok_or_else(|| ParseError::new("flavor (redis7, redis8, valkey9)", s))
    }
}

/// The error of the `FromStr` impls of [`ServerKind`], [`Version`] and [`Flavor`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    what: &'static str,
    input: String,
}

impl ParseError {
    fn new(what: &'static str, input: &str) -> Self {
        ParseError {
            what,
            input: input.to_owned(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {:?}", self.what, self.input)
    }
}

impl std::error::Error for ParseError {}

/// A server binary found on this machine, with its siblings.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerBinary {
    /// Redis or valkey.
    pub kind: ServerKind,
    /// As reported by `--version`.
    pub version: Version,
    /// The `*-server` executable.
    pub server: PathBuf,
    /// The matching `*-cli`, if it sits next to the server.
    pub cli: Option<PathBuf>,
    /// The matching `*-benchmark`, if it sits next to the server.
    pub benchmark: Option<PathBuf>,
}

impl ServerBinary {
    /// Runs `<server> --version` and classifies the binary.
    pub fn probe(server: impl AsRef<Path>) -> Result<ServerBinary, HarnessError> {
        let server = server.as_ref();
        let unknown = |reason: String| HarnessError::UnknownBinary {
            path: server.to_owned(),
            reason,
        };
        let out = Command::new(server)
            .arg("--version")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map_err(|e| unknown(format!("cannot run --version: {e}")))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let (kind, version) = parse_version_output(&text)
            .ok_or_else(|| unknown(format!("--version printed {:?}", text.trim())))?;
        let sibling = |suffix: &str| {
            let name = format!("{}-{suffix}", kind.name());
            let mut dirs = vec![server.parent().map(Path::to_path_buf)];
            dirs.push(
                fs::canonicalize(server)
                    .ok()
                    .and_then(|p| p.parent().map(Path::to_path_buf)),
            );
            dirs.into_iter()
                .flatten()
                .map(|d| d.join(&name))
                .find(|p| is_executable(p))
        };
        Ok(ServerBinary {
            kind,
            version,
            server: server.to_owned(),
            cli: sibling("cli"),
            benchmark: sibling("benchmark"),
        })
    }

    /// `"redis 8.6.3"`.
    pub fn label(&self) -> String {
        format!("{} {}", self.kind, self.version)
    }

    /// The matrix slot this binary fills, if any.
    pub fn flavor(&self) -> Option<Flavor> {
        Flavor::all().into_iter().find(|f| f.matches(self))
    }

    /// Whether the server knows `--enable-debug-command` (redis >= 7, every valkey).
    pub fn supports_debug_command(&self) -> bool {
        match self.kind {
            ServerKind::Redis => self.version.major >= 7,
            ServerKind::Valkey => true,
        }
    }
}

impl ServerBinary {
    /// Whether the server was built with TLS support, i.e. links OpenSSL (`BUILD_TLS=yes`):
    /// the executable names `libssl` (dynamic linking) or contains OpenSSL's own
    /// `SSL_CTX_new` (static linking). The answer is cached per path.
    pub fn supports_tls(&self) -> bool {
        static CACHE: OnceLock<Mutex<HashMap<PathBuf, bool>>> = OnceLock::new();
        let cache = CACHE.get_or_init(Default::default);
        if let Some(known) = cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&self.server)
        {
            return *known;
        }
        let found = fs::read(&self.server)
            .map(|bytes| {
                [&b"libssl"[..], &b"SSL_CTX_new"[..]]
                    .iter()
                    .any(|needle| bytes.windows(needle.len()).any(|w| w == *needle))
            })
            .unwrap_or(false);
        cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.server.clone(), found);
        found
    }
}

impl fmt::Display for ServerBinary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.label(), self.server.display())
    }
}

/// Parses the first line of `redis-server --version` / `valkey-server --version`, e.g.
/// `Redis server v=7.0.15 sha=...` or `Valkey server v=9.0.0 sha=...`.
pub(crate) fn parse_version_output(text: &str) -> Option<(ServerKind, Version)> {
    let line = text.lines().next()?;
    let mut words = line.split_whitespace();
    let kind = words.next()?.parse::<ServerKind>().ok()?;
    let v = words.find_map(|w| w.strip_prefix("v="))?;
    // Keep the numeric prefix only ("8.0.0-rc1" -> "8.0.0").
    let end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let version = v[..end].trim_end_matches('.').parse().ok()?;
    Some((kind, version))
}

/// `${XDG_CACHE_HOME:-$HOME/.cache}/leasehold/servers`, where `scripts/install-servers`
/// puts the binaries it builds (one `<name>-<version>/` directory per build).
pub fn servers_cache_dir() -> Option<PathBuf> {
    let base = match env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(env::var_os("HOME").filter(|v| !v.is_empty())?).join(".cache"),
    };
    Some(base.join("leasehold").join("servers"))
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

const SERVER_NAMES: [&str; 2] = ["redis-server", "valkey-server"];

fn servers_in(dir: &Path, out: &mut Vec<PathBuf>) {
    for name in SERVER_NAMES {
        let p = dir.join(name);
        if is_executable(&p) {
            out.push(p);
        }
    }
}

fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    // 1. LEASEHOLD_SERVERS: directories or server binaries, colon-separated.
    if let Some(list) = env::var_os("LEASEHOLD_SERVERS") {
        for entry in env::split_paths(&list) {
            if entry.as_os_str().is_empty() {
                continue;
            }
            if entry.is_dir() {
                servers_in(&entry, &mut out);
            } else if is_executable(&entry) {
                out.push(entry);
            }
        }
    }
    // 2. The install-servers cache.
    if let Some(cache) = servers_cache_dir()
        && let Ok(entries) = fs::read_dir(&cache)
    {
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        for d in dirs {
            servers_in(&d, &mut out);
        }
    }
    // 3. PATH.
    for dir in env::split_paths(&env::var_os("PATH").unwrap_or_default()) {
        if !dir.as_os_str().is_empty() {
            servers_in(&dir, &mut out);
        }
    }
    out
}

/// Like [`discover`], without the cache: looks again every time.
pub fn discover_uncached() -> Vec<ServerBinary> {
    let mut seen = HashSet::new();
    let mut found: Vec<ServerBinary> = candidates()
        .into_iter()
        .filter(|p| seen.insert(fs::canonicalize(p).unwrap_or_else(|_| p.clone())))
        .filter_map(|p| ServerBinary::probe(&p).ok())
        .collect();
    // Newest first; among equal versions the search order (env, cache, PATH) is kept.
    found.sort_by_key(|b| std::cmp::Reverse(b.version));
    found
}

/// All usable server binaries on this machine, newest first, deduplicated by canonical path.
///
/// Looks in `LEASEHOLD_SERVERS` (colon-separated directories or server binaries), in
/// [`servers_cache_dir`]`/*/` and on `PATH`, for `redis-server` and `valkey-server`, and
/// classifies each by running it with `--version`. The result is computed once per process.
pub fn discover() -> Vec<ServerBinary> {
    static DISCOVERED: OnceLock<Vec<ServerBinary>> = OnceLock::new();
    DISCOVERED.get_or_init(discover_uncached).clone()
}

/// The newest discovered binary that fills `flavor`'s slot.
pub fn find(flavor: Flavor) -> Option<ServerBinary> {
    discover().into_iter().find(|b| flavor.matches(b))
}

fn env_flag(name: &str) -> bool {
    env::var(name)
        .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true"))
        .unwrap_or(false)
}

/// True if a missing matrix server must fail the tests instead of skipping them:
/// `LEASEHOLD_REQUIRE_MATRIX` or `CI` is `1`/`true`.
pub fn require_full_matrix() -> bool {
    env_flag("LEASEHOLD_REQUIRE_MATRIX") || env_flag("CI")
}

/// The binary a test for `flavor` should use.
///
/// If none is found: panics when [`require_full_matrix`] is true, otherwise prints a
/// `skipping: ...` line to stderr and returns `None` (the test then passes vacuously).
#[track_caller]
pub fn binary_for_test(flavor: Flavor) -> Option<ServerBinary> {
    match find(flavor) {
        Some(bin) => Some(bin),
        None if require_full_matrix() => panic!(
            "no {flavor} server found, and LEASEHOLD_REQUIRE_MATRIX/CI demands the full matrix \
             (run scripts/install-servers, or point LEASEHOLD_SERVERS at a server binary)"
        ),
        None => {
            eprintln!("skipping: no {flavor} server found (run scripts/install-servers)");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        assert_eq!("8.6.3".parse::<Version>().unwrap(), Version::new(8, 6, 3));
        assert_eq!("7.2".parse::<Version>().unwrap(), Version::new(7, 2, 0));
        assert_eq!("v9".parse::<Version>().unwrap(), Version::new(9, 0, 0));
        assert!("8.6.3.1".parse::<Version>().is_err());
        assert!("8..1".parse::<Version>().is_err());
        assert!("".parse::<Version>().is_err());
        assert_eq!(Version::new(8, 6, 3).to_string(), "8.6.3");
        assert!(Version::new(8, 4, 0) > Version::new(7, 99, 99));
        assert!(Version::new(8, 10, 0) > Version::new(8, 9, 9));
    }

    #[test]
    fn parses_version_output() {
        assert_eq!(
            parse_version_output(
                "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64\n"
            ),
            Some((ServerKind::Redis, Version::new(7, 0, 15)))
        );
        assert_eq!(
            parse_version_output(
                "Valkey server v=9.0.0 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64"
            ),
            Some((ServerKind::Valkey, Version::new(9, 0, 0)))
        );
        assert_eq!(
            parse_version_output("Redis server v=8.0.0-rc1 sha=x"),
            Some((ServerKind::Redis, Version::new(8, 0, 0)))
        );
        assert_eq!(parse_version_output("KeyDB server v=6.3.4"), None);
        assert_eq!(parse_version_output(""), None);
    }

    fn bin(kind: ServerKind, v: &str) -> ServerBinary {
        ServerBinary {
            kind,
            version: v.parse().unwrap(),
            server: PathBuf::from("/x"),
            cli: None,
            benchmark: None,
        }
    }

    #[test]
    fn classifies_flavors() {
        assert_eq!(
            bin(ServerKind::Redis, "7.0.15").flavor(),
            Some(Flavor::Redis7)
        );
        assert_eq!(
            bin(ServerKind::Redis, "7.4.2").flavor(),
            Some(Flavor::Redis7)
        );
        assert_eq!(bin(ServerKind::Redis, "6.2.0").flavor(), None);
        assert_eq!(bin(ServerKind::Redis, "8.2.1").flavor(), None);
        assert_eq!(
            bin(ServerKind::Redis, "8.4.0").flavor(),
            Some(Flavor::Redis8)
        );
        assert_eq!(
            bin(ServerKind::Redis, "8.6.3").flavor(),
            Some(Flavor::Redis8)
        );
        assert_eq!(bin(ServerKind::Valkey, "8.1.0").flavor(), None);
        assert_eq!(
            bin(ServerKind::Valkey, "9.0.0").flavor(),
            Some(Flavor::Valkey9)
        );
        assert_eq!(bin(ServerKind::Redis, "8.6.3").label(), "redis 8.6.3");
    }

    #[test]
    fn parses_flavors() {
        for f in Flavor::all() {
            assert_eq!(f.name().parse::<Flavor>().unwrap(), f);
            assert_eq!(f.to_string(), f.name());
        }
        assert_eq!("Valkey9".parse::<Flavor>().unwrap(), Flavor::Valkey9);
        assert!("redis6".parse::<Flavor>().is_err());
        assert_eq!("valkey".parse::<ServerKind>().unwrap(), ServerKind::Valkey);
        assert_eq!(ServerKind::Redis.to_string(), "redis");
    }
}
