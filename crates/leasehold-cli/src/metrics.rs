//! `--metrics-addr`: the library's metrics (see `leasehold::metrics`) in the Prometheus text
//! format, over a minimal HTTP/1.1 endpoint.
//!
//! A scrape is one GET answered with the rendered registry and the connection closed, so a
//! small responder on tokio does it; an HTTP server framework would be a large dependency for
//! one fixed response.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Installs the Prometheus recorder for this process and serves it on `addr` until the process
/// ends; returns the bound address (printed on stderr, for port 0).
pub async fn serve(addr: SocketAddr) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for --metrics-addr"))?;
    let local = listener.local_addr()?;
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    // Histograms are aggregated on upkeep; a scrape renders whatever was aggregated.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    accept_loop(listener, move || {
        let handle = handle.clone();
        async move {
            handle.run_upkeep();
            handle.render()
        }
    });
    crate::output::say(format_args!("leasehold: metrics on http://{local}/metrics"));
    Ok(local)
}

/// Where the `check-worker` logging to `log` writes its metrics port.
pub fn port_file(log: &Path) -> PathBuf {
    log.with_extension("metrics")
}

/// `leasehold-lab check --metrics-addr`: serves on `addr`, for each scrape, the metrics of every
/// worker that wrote its port into `logs` (see [`port_file`]), each sample labelled
/// `worker="<id>"`. A worker that a fault killed or paused is left out of that scrape.
pub async fn serve_workers(addr: SocketAddr, logs: PathBuf) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for --metrics-addr"))?;
    let local = listener.local_addr()?;
    accept_loop(listener, move || merged(logs.clone()));
    crate::output::say(format_args!(
        "leasehold: the workers' metrics on http://{local}/metrics"
    ));
    Ok(local)
}

/// Every live worker's metrics, labelled with its id; `# HELP` and `# TYPE` once per metric.
async fn merged(logs: PathBuf) -> String {
    let mut ports = Vec::new();
    if let Ok(dir) = std::fs::read_dir(&logs) {
        for entry in dir.flatten() {
            let path = entry.path();
            let Some(id) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("worker-")?.strip_suffix(".metrics"))
                .map(str::to_string)
            else {
                continue;
            };
            if let Some(port) = std::fs::read_to_string(&path)
                .ok()
                .and_then(|p| p.trim().parse::<u16>().ok())
            {
                ports.push((id, port));
            }
        }
    }
    ports.sort();
    let mut seen = std::collections::HashSet::new();
    let mut out = String::new();
    for (id, port) in ports {
        let Ok(Some(body)) = tokio::time::timeout(Duration::from_millis(500), scrape(port)).await
        else {
            continue;
        };
        for line in body.lines() {
            if line.starts_with('#') {
                if seen.insert(line.to_string()) {
                    out.push_str(line);
                    out.push('\n');
                }
            } else if let Some(labelled) = with_label(line, "worker", &id) {
                out.push_str(&labelled);
                out.push('\n');
            }
        }
    }
    out
}

/// `line` (`name{labels} value` or `name value`) with `key="value"` added to its labels.
fn with_label(line: &str, key: &str, value: &str) -> Option<String> {
    let (series, sample) = line.rsplit_once(' ')?;
    Some(match series.strip_suffix('}') {
        Some(open) => format!("{open},{key}=\"{value}\"}} {sample}"),
        None => format!("{series}{{{key}=\"{value}\"}} {sample}"),
    })
}

/// One worker's metrics, from its endpoint on loopback.
async fn scrape(port: u16) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: leasehold\r\n\r\n")
        .await
        .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    let response = String::from_utf8(response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// Answers every connection of `listener` with the body `render` makes.
fn accept_loop<F, Fut>(listener: TcpListener, render: F)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = String> + Send + 'static,
{
    let render = std::sync::Arc::new(render);
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let render = render.clone();
                    tokio::spawn(async move { answer(stream, render()).await });
                }
                Err(e) => {
                    tracing::debug!(error = %e, "metrics endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
}

/// Reads the request head (up to 8 KiB, 5 s) and answers with the body `body` makes.
async fn answer(mut stream: TcpStream, body: impl std::future::Future<Output = String>) {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        true
    })
    .await;
    if !matches!(read, Ok(true)) {
        return;
    }
    let body = body.await;
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
