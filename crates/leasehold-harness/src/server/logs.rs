//! The tails of a server's log files, for error messages.

use std::fs;
use std::path::Path;

use super::{SERVER_LOG, STDIO_LOG};

pub(super) fn log_tail(dir: &Path, lines: usize) -> String {
    log_files_tail(dir, &[SERVER_LOG, STDIO_LOG], lines)
}

/// The last `lines` lines of each of the files `names` in `dir`, each under a `[name]` header.
pub(crate) fn log_files_tail(dir: &Path, names: &[&str], lines: usize) -> String {
    let mut out = String::new();
    for name in names {
        let Ok(text) = fs::read_to_string(dir.join(name)) else {
            continue;
        };
        let all: Vec<&str> = text.lines().collect();
        if all.is_empty() {
            continue;
        }
        out.push_str(&format!("[{name}]\n"));
        for line in &all[all.len().saturating_sub(lines)..] {
            out.push_str(line);
            out.push('\n');
        }
    }
    if out.is_empty() {
        out.push_str("(no log output)\n");
    }
    out
}
