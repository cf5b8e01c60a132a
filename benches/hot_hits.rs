//! Hot-hit benchmark: 1 MiB range GETs through Portico (served from memory) against the
//! same GETs straight to MinIO, and Portico's peak RSS during a full GET of a 1 GiB object.
//!
//! Run with `make bench` (release build). Everything runs on loopback on this machine; the
//! load generator, Portico and MinIO share its cores, the same way for both targets.

use std::path::Path;
use std::time::{Duration, Instant};

use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use portico_testkit::forwarder::Forwarder;
use portico_testkit::load::{Http, fetch, http_client};
use portico_testkit::minio::minio;
use portico_testkit::portico::{Portico, Settings};
use portico_testkit::process::status_field_kib;
use portico_testkit::sign::Signer;
use portico_testkit::{create_bucket, s3_client, write_random_file};
use rand::{Rng, SeedableRng};

const MIB: u64 = 1024 * 1024;
const HOT_OBJECT_BYTES: u64 = 64 * MIB;
const LARGE_OBJECT_BYTES: u64 = 1024 * MIB;
const RANGE_BYTES: u64 = MIB;
const CLIENTS: usize = 16;
const RUN: Duration = Duration::from_secs(10);

struct LoadResult {
    requests: usize,
    bytes: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl LoadResult {
    fn gib_per_sec(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64() / (1024.0 * 1024.0 * 1024.0)
    }

    fn percentile_ms(&self, fraction: f64) -> f64 {
        let index = ((self.latencies.len() as f64 - 1.0) * fraction).round() as usize;
        self.latencies[index].as_secs_f64() * 1000.0
    }
}

/// GETs `url` (or a range of it) and returns the bytes received.
async fn get(client: &Http, url: &str, range: Option<(u64, u64)>) -> u64 {
    fetch(client, url, range).await.bytes
}

/// `CLIENTS` workers GET random 1 MiB ranges of the hot object for `RUN`.
async fn random_ranges(url: &str) -> LoadResult {
    let client = http_client(CLIENTS);
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..CLIENTS {
        let client = client.clone();
        let url = url.to_owned();
        workers.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(worker as u64);
            let mut latencies = Vec::new();
            let mut bytes = 0;
            while started.elapsed() < RUN {
                let first = rng.random_range(0..HOT_OBJECT_BYTES - RANGE_BYTES);
                let range = (first, first + RANGE_BYTES - 1);
                let sent = Instant::now();
                bytes += get(&client, &url, Some(range)).await;
                latencies.push(sent.elapsed());
            }
            (latencies, bytes)
        }));
    }
    let mut result = LoadResult {
        requests: 0,
        bytes: 0,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
    };
    for worker in workers {
        let (latencies, bytes) = worker.await.expect("worker");
        result.requests += latencies.len();
        result.bytes += bytes;
        result.latencies.extend(latencies);
    }
    result.elapsed = started.elapsed();
    result.latencies.sort();
    result
}

fn print_load(name: &str, result: &LoadResult) {
    println!(
        "{name:<16} {:>8} {:>10.2} {:>10.2} {:>10.2}",
        result.requests,
        result.gib_per_sec(),
        result.percentile_ms(0.50),
        result.percentile_ms(0.99),
    );
}

#[tokio::main]
async fn main() {
    let minio = minio();
    let direct = s3_client(&minio.endpoint(), true);
    let bucket = create_bucket(&direct, "bench").await;
    let work = tempfile::tempdir().expect("work directory");

    let hot = portico_testkit::random_bytes(HOT_OBJECT_BYTES as usize, 1);
    direct
        .put_object()
        .bucket(&bucket)
        .key("hot.bin")
        .body(ByteStream::from(hot))
        .send()
        .await
        .expect("upload hot object");
    let large_path = work.path().join("large.bin");
    write_random_file(&large_path, LARGE_OBJECT_BYTES, 7);
    direct
        .put_object()
        .bucket(&bucket)
        .key("large.bin")
        .body(
            ByteStream::from_path(&large_path)
                .await
                .expect("large file"),
        )
        .send()
        .await
        .expect("upload large object");
    std::fs::remove_file(&large_path).ok();

    let binary = Path::new(env!("CARGO_BIN_EXE_portico"));
    let mut forwarder = Forwarder::start(&minio.address).await;
    let cache_dir = work.path().join("cache");
    let mut settings = Settings::new(forwarder.endpoint(), &cache_dir);
    settings.block_size = "4MiB";
    settings.memory_capacity = "256MiB";
    settings.disk_capacity = "4GiB";
    // Logging as deployed (Portico's default filter), not the tests' debug logging.
    settings.debug_log = false;
    let portico = Portico::start(binary, &settings).await;
    let pid = portico.pid().expect("portico pid");
    let http = http_client(1);

    // Hot hits: warm the 64 MiB working set into memory, then load both targets. Portico
    // verifies SigV4 on every request: a presigned URL, verified each time, costs the
    // clients nothing.
    let plain_url = format!("{}/{bucket}/hot.bin", portico.s3);
    let host = portico.s3.trim_start_matches("http://").to_owned();
    let portico_url =
        Signer::default().presign("GET", &plain_url, &host, Duration::from_secs(3600));
    get(&http, &portico_url, None).await;
    get(&http, &portico_url, None).await;
    forwarder.take();
    let presigned = direct
        .get_object()
        .bucket(&bucket)
        .key("hot.bin")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(3600)).expect("presigning"))
        .await
        .expect("presign");
    let through_portico = random_ranges(&portico_url).await;
    let hot_upstream_gets = forwarder.object_requests("GET").len();
    let to_minio = random_ranges(presigned.uri()).await;

    println!();
    println!("hot hits: {CLIENTS} clients, random 1 MiB ranges of a 64 MiB object, {RUN:?} each");
    println!(
        "{:<16} {:>8} {:>10} {:>10} {:>10}",
        "target", "requests", "GiB/s", "p50 ms", "p99 ms"
    );
    print_load("portico (sigv4)", &through_portico);
    print_load("minio direct", &to_minio);
    println!(
        "portico / direct: {:.2}x throughput; upstream GETs during the Portico run: {hot_upstream_gets}",
        through_portico.gib_per_sec() / to_minio.gib_per_sec()
    );
    println!(
        "portico peak RSS during hot hits: {} MiB (memory_capacity 256 MiB)",
        status_field_kib(pid, "VmHWM:") / 1024
    );

    // The same load without authentication: the cost of verifying SigV4.
    portico.stop().await;
    settings.without_auth();
    let portico = Portico::start(binary, &settings).await;
    let unsigned_url = format!("{}/{bucket}/hot.bin", portico.s3);
    get(&http, &unsigned_url, None).await;
    get(&http, &unsigned_url, None).await;
    let without_auth = random_ranges(&unsigned_url).await;
    print_load("portico (none)", &without_auth);
    println!(
        "sigv4 / none: {:.2}x throughput",
        through_portico.gib_per_sec() / without_auth.gib_per_sec()
    );

    // A full GET of 1 GiB: memory stays bounded by the cache capacity, not the object.
    portico.stop().await;
    std::fs::remove_dir_all(&cache_dir).ok();
    let portico = Portico::start(binary, &settings).await;
    let pid_large = portico.pid().expect("portico pid");
    let rss_before = status_field_kib(pid_large, "VmRSS:");
    let large_url = format!("{}/{bucket}/large.bin", portico.s3);
    forwarder.take();
    for pass in ["cold", "warm"] {
        let started = Instant::now();
        let received = get(&http, &large_url, None).await;
        let elapsed = started.elapsed();
        assert_eq!(received, LARGE_OBJECT_BYTES);
        let mut skipped_disk = 0.0;
        for op in ["buffer_overflow", "channel_overflow"] {
            let sample =
                format!("foyer_storage_inner_op_total_total{{name=\"portico\",op=\"{op}\"}}");
            skipped_disk += portico.metric(&sample).await;
        }
        println!(
            "1 GiB GET ({pass}): {:.2} s, {:.0} MiB/s, upstream GETs {}, blocks that skipped the disk so far {skipped_disk}, peak RSS {} MiB (memory_capacity 256 MiB, RSS at start {} MiB)",
            elapsed.as_secs_f64(),
            LARGE_OBJECT_BYTES as f64 / MIB as f64 / elapsed.as_secs_f64(),
            forwarder
                .take()
                .iter()
                .filter(|seen| seen.method == "GET" && seen.path != "/")
                .count(),
            status_field_kib(pid_large, "VmHWM:") / 1024,
            rss_before / 1024,
        );
    }
    portico.stop().await;
    forwarder.stop().await;
}
