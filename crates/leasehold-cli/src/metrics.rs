//! `--metrics-addr`: the library's metrics (see `leasehold::metrics`) in the Prometheus text
//! format, over a minimal HTTP/1.1 endpoint.
//!
//! A scrape is one GET answered with the rendered registry and the connection closed, so a
//! small responder on tokio does it; an HTTP server framework would be a large dependency for
//! one fixed response.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Installs the Prometheus recorder for this process and serves it on `addr` until the process
/// ends; returns the bound address (printed on stderr, for port 0).
pub(crate) async fn serve(addr: SocketAddr) -> anyhow::Result<SocketAddr> {
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
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(answer(stream, handle.clone()));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "metrics endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    eprintln!("leasehold: metrics on http://{local}/metrics");
    Ok(local)
}

/// Reads the request head (up to 8 KiB, 5 s) and answers with the metrics.
async fn answer(mut stream: TcpStream, handle: PrometheusHandle) {
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
    handle.run_upkeep();
    let body = handle.render();
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
