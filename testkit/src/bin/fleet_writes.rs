//! What telling every member of a write costs: the latency of PUTs through one member of
//! a fleet of 1, 3 and 5 Portico nodes in front of one MinIO (each PUT invalidates the
//! object on every other member before it is answered), and the same PUTs straight to
//! MinIO. One client writes 1 KiB objects one after another; p50 and p99 per fleet size.
//!
//! Usage: `fleet_writes [PUTS]` (per column; default 500). `PORTICO_BIN` names the binary
//! (default `target/debug/portico`), `PORTICO_MINIO` the MinIO server.
//!
//! A member's writes wait at start until every member's view lists it (docs/cluster.md,
//! "When views of the membership differ"): each fleet is measured once a PUT through it
//! is answered within 200 ms, and how long that took is printed.

use std::path::Path;
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use portico_testkit::minio::minio;
use portico_testkit::portico::start_fleet;
use portico_testkit::{create_bucket, random_bytes, s3_client};

/// `puts` PUTs of 1 KiB through `client`, one after another: each one's latency, sorted.
async fn latencies(client: &Client, bucket: &str, puts: usize) -> Vec<Duration> {
    let body = random_bytes(1024, 7);
    let mut took = Vec::with_capacity(puts);
    for index in 0..puts {
        let started = Instant::now();
        client
            .put_object()
            .bucket(bucket)
            .key(format!("written/{}", index % 64))
            .body(ByteStream::from(body.clone()))
            .send()
            .await
            .expect("PUT");
        took.push(started.elapsed());
    }
    took.sort();
    took
}

/// PUTs through `client` until one is answered within 200 ms; how long that took.
async fn settle(client: &Client, bucket: &str) -> Duration {
    let started = Instant::now();
    loop {
        let put = Instant::now();
        client
            .put_object()
            .bucket(bucket)
            .key("written/settle")
            .body(ByteStream::from(random_bytes(1024, 8)))
            .send()
            .await
            .expect("PUT");
        if put.elapsed() < Duration::from_millis(200) {
            return started.elapsed();
        }
    }
}

fn percentile(sorted: &[Duration], quantile: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * quantile).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn millis(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    let puts: usize = std::env::args()
        .nth(1)
        .and_then(|value| value.parse().ok())
        .unwrap_or(500);
    let binary = std::env::var("PORTICO_BIN").unwrap_or_else(|_| "target/debug/portico".into());
    let minio = minio();
    let direct = s3_client(&minio.endpoint(), false);
    let bucket = create_bucket(&direct, "fleet-writes").await;
    let mut rows = vec![(
        "MinIO direct".to_owned(),
        latencies(&direct, &bucket, puts).await,
    )];
    for members in [1, 3, 5] {
        let dirs: Vec<_> = (0..members)
            .map(|_| tempfile::tempdir().expect("cache directory"))
            .collect();
        let nodes = start_fleet(Path::new(&binary), &minio.endpoint(), &dirs, |settings| {
            settings.debug_log = false;
        })
        .await;
        let client = s3_client(&nodes[0].s3, false);
        if members > 1 {
            let settled = settle(&client, &bucket).await;
            eprintln!(
                "{members} members: writes answered at once {settled:?} after the fleet held its leases"
            );
        }
        let name = match members {
            1 => "Portico, 1 node".to_owned(),
            _ => format!("Portico, {members} members"),
        };
        eprintln!("{name}: {puts} PUTs");
        rows.push((name, latencies(&client, &bucket, puts).await));
        for node in nodes {
            node.stop().await;
        }
    }
    println!("\nPUT latency, 1 KiB objects, one client, {puts} PUTs per row");
    println!("| | p50 | p99 |");
    println!("|---|---|---|");
    for (name, sorted) in rows {
        println!(
            "| {name} | {} | {} |",
            millis(percentile(&sorted, 0.5)),
            millis(percentile(&sorted, 0.99))
        );
    }
}
