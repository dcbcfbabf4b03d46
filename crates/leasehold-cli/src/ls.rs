//! `leasehold ls`: the held locks as a table (or one JSON array), once or redrawn in place
//! (`--watch`) until SIGINT or `q`.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use leasehold::{LockEntry, LockHolder, Locker, Owner};
use serde::Serialize;

use crate::cli::LsArgs;
use crate::output::{emit, human, millis};
use crate::target::Servers;

/// One lock, as `--json` prints it.
#[derive(Serialize)]
struct Listed<'a> {
    key: &'a str,
    kind: &'static str,
    ttl_ms: Option<u64>,
    fencing_counter: Option<u64>,
    waiters: Option<u64>,
    permits: Option<u64>,
    holders: Vec<ListedHolder>,
}

/// One holder: its token's redacted name (the token is a capability), owner and TTL.
#[derive(Serialize)]
struct ListedHolder {
    holder: String,
    owner: Option<OwnerJson>,
    ttl_ms: Option<u64>,
}

/// An owner record, field by field.
#[derive(Serialize)]
pub(crate) struct OwnerJson {
    host: String,
    pid: u32,
    program: String,
    label: Option<String>,
}

impl OwnerJson {
    pub(crate) fn of(owner: &Owner) -> Self {
        OwnerJson {
            host: owner.host().to_string(),
            pid: owner.pid(),
            program: owner.program().to_string(),
            label: owner.user_label().map(str::to_string),
        }
    }
}

impl<'a> Listed<'a> {
    fn of(entry: &'a LockEntry) -> Self {
        Listed {
            key: &entry.key,
            kind: entry.kind.name(),
            ttl_ms: entry.ttl.map(millis),
            fencing_counter: entry.fencing_counter,
            waiters: entry.waiters,
            permits: entry.permits,
            holders: entry
                .holders
                .iter()
                .map(|h| ListedHolder {
                    holder: h.token.redacted(),
                    owner: h.owner.as_ref().map(OwnerJson::of),
                    ttl_ms: h.ttl.map(millis),
                })
                .collect(),
        }
    }
}

pub(crate) async fn run(servers: &Servers, args: LsArgs) -> anyhow::Result<()> {
    let locker = servers.connect().await?;
    match args.watch {
        Some(interval) => watch(&locker, &args.pattern, interval).await,
        None => {
            let entries = locker.list(&args.pattern).await?;
            let listed: Vec<Listed> = entries.iter().map(Listed::of).collect();
            emit(args.json, &listed, table(&entries).trim_end())
        }
    }
}

/// Redraws the table every `interval` (clear screen, home, draw: as `watch` does) until SIGINT
/// or `q`. A listing error is shown in place of the table, and the next refresh tries again.
async fn watch(locker: &Locker, pattern: &str, interval: Duration) -> anyhow::Result<()> {
    let mut keys = Keys::start();
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("cannot catch SIGINT")?;
    loop {
        let body = match locker.list(pattern).await {
            Ok(entries) => table(&entries),
            Err(e) => format!("error: {e}\n"),
        };
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
        let screen = format!(
            "\x1b[H\x1b[2JEvery {}: leasehold ls {pattern}    {now}    (q or Ctrl-C quits)\n\n{body}",
            human(interval)
        );
        {
            let mut out = std::io::stdout().lock();
            out.write_all(screen.as_bytes())
                .and_then(|()| out.flush())
                .context("cannot write to stdout")?;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = interrupt.recv() => break,
            _ = keys.quit() => break,
        }
    }
    drop(keys);
    println!();
    Ok(())
}

/// The table: a header, then one line per lock (and one more per further holder).
fn table(entries: &[LockEntry]) -> String {
    let mut rows: Vec<[String; 7]> = vec![[
        "KEY".into(),
        "KIND".into(),
        "HOLDER".into(),
        "OWNER".into(),
        "TTL".into(),
        "FENCE".into(),
        "WAITERS".into(),
    ]];
    for e in entries {
        let kind = match e.permits {
            Some(n) => format!("{} {}/{n}", e.kind.name(), e.holders.len()),
            None => e.kind.name().to_string(),
        };
        let fence = e.fencing_counter.map_or("-".into(), |n| n.to_string());
        let waiters = e.waiters.map_or("-".into(), |n| n.to_string());
        for (i, h) in e.holders.iter().enumerate() {
            let (key, kind, fence, waiters) = if i == 0 {
                (e.key.clone(), kind.clone(), fence.clone(), waiters.clone())
            } else {
                Default::default()
            };
            rows.push([
                key,
                kind,
                h.token.redacted(),
                owner_text(h),
                ttl_text(h),
                fence,
                waiters,
            ]);
        }
    }
    if entries.is_empty() {
        rows.push([
            "(no locks held)".into(),
            "".into(),
            "".into(),
            "".into(),
            "".into(),
            "".into(),
            "".into(),
        ]);
    }
    let widths: Vec<usize> = (0..7)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn owner_text(holder: &LockHolder) -> String {
    holder.owner.as_ref().map_or("-".into(), Owner::to_string)
}

/// Whole seconds (rounded up, so a live lease never shows 0s): a table redrawn every few
/// seconds has no use for milliseconds.
fn ttl_text(holder: &LockHolder) -> String {
    holder.ttl.map_or("-".into(), |t| {
        human(Duration::from_secs(t.as_millis().div_ceil(1000) as u64))
    })
}

/// The keyboard while watching: `q` quits. The terminal is put in non-canonical mode without
/// echo (so `q` counts without Enter; Ctrl-C still sends SIGINT) and restored on drop. When
/// stdin is not a terminal, only SIGINT ends the watch.
struct Keys {
    saved: Option<nix::sys::termios::Termios>,
    pressed: tokio::sync::mpsc::UnboundedReceiver<u8>,
}

impl Keys {
    fn start() -> Keys {
        use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
        let stdin = std::io::stdin();
        let saved = tcgetattr(&stdin).ok();
        if let Some(saved) = &saved {
            let mut raw = saved.clone();
            raw.local_flags
                .remove(LocalFlags::ICANON | LocalFlags::ECHO);
            let _ = tcsetattr(&stdin, SetArg::TCSANOW, &raw);
        }
        let (send, pressed) = tokio::sync::mpsc::unbounded_channel();
        if saved.is_some() {
            // A thread of its own: a blocking read of stdin (tokio's stdin is a thread too).
            std::thread::spawn(move || {
                use std::io::Read;
                let mut byte = [0u8; 1];
                while let Ok(1) = std::io::stdin().read(&mut byte) {
                    if send.send(byte[0]).is_err() {
                        break;
                    }
                }
            });
        }
        Keys { saved, pressed }
    }

    /// Resolves when `q` (or `Q`) is pressed; never without a terminal.
    async fn quit(&mut self) {
        while let Some(key) = self.pressed.recv().await {
            if key.eq_ignore_ascii_case(&b'q') {
                return;
            }
        }
        std::future::pending::<()>().await
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let _ = nix::sys::termios::tcsetattr(
                std::io::stdin(),
                nix::sys::termios::SetArg::TCSANOW,
                saved,
            );
        }
    }
}
