//! Writing results to stdout, as text or as one JSON object, and lines to stderr.

use std::io::Write;

use anyhow::Context;
use serde::Serialize;

/// Writes `text` (a line break is added) or, with `json`, `value` as one line of JSON, and
/// flushes. Fails if stdout is closed, so a caller can undo what nobody will learn about.
pub(crate) fn emit<T: Serialize>(json: bool, value: &T, text: &str) -> anyhow::Result<()> {
    let line = if json {
        serde_json::to_string(value).context("cannot encode the result as JSON")?
    } else {
        text.to_string()
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .context("cannot write to stdout")
}

/// Writes one line to stderr, ignoring failure: `eprintln!` panics when stderr is a pipe
/// whose reader is gone (EPIPE), and a panic in `run` would leave the command running and the
/// lock held until its TTL. The line goes out in one write: stderr is unbuffered, and a line
/// written in pieces can be torn by another process writing to the same stream.
pub fn say(line: std::fmt::Arguments<'_>) {
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// A duration in whole milliseconds, as JSON wants it.
pub(crate) fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A duration for people: `29s 512ms`.
pub(crate) fn human(d: std::time::Duration) -> String {
    humantime::format_duration(std::time::Duration::from_millis(millis(d))).to_string()
}
