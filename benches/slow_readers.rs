//! Slow readers: 500 clients each GET a different cold 8 MiB object and read it at
//! 64 KiB/s. Every response holds blocks Portico fetched and cannot hand on faster than
//! its client reads; the memory budget (`server.max_inflight_bytes`) bounds what they hold
//! together. The program runs the load twice — with the default budget and with a budget
//! too large to bind — and prints Portico's peak RSS, the most bytes in flight, how many
//! GETs were told to slow down, and how a fresh client's small GETs fare meanwhile.
//!
//! Run with `cargo bench --bench slow_readers` (part of `make bench`).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use futures::StreamExt;
use portico_testkit::minio::minio;
use portico_testkit::portico::{Portico, Settings};
use portico_testkit::process::status_field_kib;
use portico_testkit::{create_bucket, http_get, s3_client};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MIB: usize = 1024 * 1024;
const READERS: usize = 500;
const OBJECT_BYTES: usize = 8 * MIB;
/// Each reader takes this much every `READ_EVERY`: 64 KiB/s.
const READ_BYTES: usize = 16 * 1024;
const READ_EVERY: Duration = Duration::from_millis(250);
/// A reader told to slow down asks again after this long, as an S3 client backs off.
const RETRY_AFTER: Duration = Duration::from_secs(1);
const RUN: Duration = Duration::from_secs(20);

#[derive(Default)]
struct Counts {
    /// Readers whose GET was answered 200 (they then read slowly until the run ends).
    served: AtomicU64,
    /// 503 SlowDown answers (a reader may get several before it is served).
    slow_down: AtomicU64,
    other: AtomicU64,
}

/// One slow reader: GET `path`, retrying after a 503, then read at 64 KiB/s until `until`.
async fn slow_reader(address: String, path: String, counts: Arc<Counts>, until: Instant) {
    while Instant::now() < until {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        // A small receive window, so the kernel cannot take the object off Portico's hands.
        socket
            .set_recv_buffer_size(16 * 1024)
            .expect("receive buffer");
        let Ok(mut stream) = socket.connect(address.parse().expect("address")).await else {
            return;
        };
        let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n\r\n");
        if stream.write_all(request.as_bytes()).await.is_err() {
            return;
        }
        let mut head = [0u8; 12];
        if stream.read_exact(&mut head).await.is_err() {
            return;
        }
        match &head[9..12] {
            b"200" => {
                counts.served.fetch_add(1, Ordering::Relaxed);
                let mut buffer = vec![0u8; READ_BYTES];
                while Instant::now() < until {
                    tokio::time::sleep(READ_EVERY).await;
                    if matches!(stream.read(&mut buffer).await, Ok(0) | Err(_)) {
                        return;
                    }
                }
                return;
            }
            b"503" => {
                counts.slow_down.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(RETRY_AFTER).await;
            }
            _ => {
                counts.other.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// Runs the load against a fresh Portico with `max_inflight_bytes` and prints one line.
async fn run(upstream: &str, bucket: &str, max_inflight_bytes: &str, work: &Path) {
    let mut settings = Settings::new(upstream.to_owned(), &work.join(max_inflight_bytes));
    settings.block_size = "4MiB";
    settings.memory_capacity = "256MiB";
    settings.disk_capacity = "0B";
    settings.without_auth();
    settings.debug_log = false;
    settings.server_extra = format!("max_inflight_bytes = \"{max_inflight_bytes}\"\n");
    let binary = Path::new(env!("CARGO_BIN_EXE_portico"));
    let portico = Portico::start(binary, &settings).await;
    let pid = portico.pid().expect("portico pid");
    let address = portico.s3.trim_start_matches("http://").to_owned();
    let rss_at_start = status_field_kib(pid, "VmRSS:") / 1024;

    let counts = Arc::new(Counts::default());
    let until = Instant::now() + RUN;
    let readers: Vec<_> = (0..READERS)
        .map(|index| {
            let path = format!("/{bucket}/cold-{index:03}");
            tokio::spawn(slow_reader(address.clone(), path, counts.clone(), until))
        })
        .collect();

    // Meanwhile: the budget's use, and a fresh client's response time for a small
    // object (cached after its first GET), every half second.
    let small = format!("{}/{bucket}/small", portico.s3);
    let mut most_inflight = 0.0f64;
    let mut first_bytes = Vec::new();
    tokio::time::sleep(Duration::from_secs(2)).await;
    while Instant::now() + Duration::from_secs(1) < until {
        most_inflight = most_inflight.max(portico.metric("portico_memory_inflight_bytes").await);
        let asked = Instant::now();
        let (status, _) = http_get(&small, &[]).await;
        first_bytes.push((status, asked.elapsed()));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for reader in readers {
        let _ = reader.await;
    }
    let peak_rss = status_field_kib(pid, "VmHWM:") / 1024;
    let refused = portico
        .metric("portico_memory_budget_waits_total{result=\"refused\"}")
        .await;
    portico.stop().await;

    let served_small = first_bytes
        .iter()
        .filter(|(status, _)| *status == 200)
        .count();
    let mut ttfbs: Vec<_> = first_bytes.iter().map(|(_, ttfb)| *ttfb).collect();
    ttfbs.sort();
    let median_ms = ttfbs
        .get(ttfbs.len() / 2)
        .map_or(0.0, |ttfb| ttfb.as_secs_f64() * 1000.0);
    println!(
        "{max_inflight_bytes:>8}  {:>6}  {:>9}  {:>5}  {:>9} MiB  {:>8} MiB  {:>8.0} MiB  {served_small}/{} ({median_ms:.0} ms)",
        counts.served.load(Ordering::Relaxed),
        counts.slow_down.load(Ordering::Relaxed),
        counts.other.load(Ordering::Relaxed),
        rss_at_start,
        peak_rss,
        most_inflight / MIB as f64,
        first_bytes.len(),
    );
    // Every 503 was the budget's: the readers' and the fresh client's.
    let fresh_refused = first_bytes
        .iter()
        .filter(|(status, _)| *status == 503)
        .count();
    assert_eq!(
        refused as u64,
        counts.slow_down.load(Ordering::Relaxed) + fresh_refused as u64
    );
}

#[tokio::main]
async fn main() {
    let minio = minio();
    let direct = s3_client(&minio.endpoint(), true);
    let bucket = create_bucket(&direct, "slow").await;
    let work = tempfile::tempdir().expect("work directory");
    let body = portico_testkit::random_bytes(OBJECT_BYTES, 5);
    let uploads = futures::stream::iter(0..READERS)
        .map(|index| {
            let request = direct
                .put_object()
                .bucket(&bucket)
                .key(format!("cold-{index:03}"))
                .body(ByteStream::from(body.clone()));
            async move { request.send().await.expect("upload") }
        })
        .buffer_unordered(8);
    uploads.collect::<Vec<_>>().await;
    direct
        .put_object()
        .bucket(&bucket)
        .key("small")
        .body(ByteStream::from_static(b"small object"))
        .send()
        .await
        .expect("upload small object");

    println!(
        "slow readers: {READERS} clients, each a different cold {} MiB object at 64 KiB/s, {}s; block_size 4MiB, memory_capacity 256MiB, memory-only",
        OBJECT_BYTES / MIB,
        RUN.as_secs()
    );
    println!(
        "  budget  served  slow-down  other  RSS start   peak RSS  most in flight  fresh GETs 200 (p50 ms)"
    );
    run(&minio.endpoint(), &bucket, "512MiB", work.path()).await;
    run(&minio.endpoint(), &bucket, "64GiB", work.path()).await;
}
