//! The overwrite soak: 3 writers overwrite 12 keys (1 B to 9 MiB; each writer reads back
//! every write it got acknowledged) while 12 readers GET the same keys, whole and in
//! ranges. Every body is checked against the version its ETag names. The same load runs
//! against MinIO directly, then through Portico (one node, 64 MiB memory tier) on an
//! unversioned bucket, then on a versioned one, then through a fleet of three members
//! (each request, a writer's read-back included, goes to one of them at random; every
//! 10 s one member is paused for 2 s or cut off from the others for 5 s), and one table
//! is printed.
//!
//! A stale read is a writer's read-back that returns a version acknowledged before its
//! own write began: S3 is read-after-write consistent, so that can only be a cache's
//! fault. A cut-off body is a response whose body failed after its headers.
//!
//! Usage: `overwrites [SECONDS]` (each phase; default 60). `SOAK_COLUMNS` picks phases
//! (`direct,portico,versioned,fleet`, the default). `PORTICO_BIN` names the binary
//! (default `target/debug/portico`), `PORTICO_MINIO` the MinIO server.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use md5::{Digest, Md5};
use parking_lot::Mutex;
use portico_testkit::forwarder::Forwarder;
use portico_testkit::minio::minio;
use portico_testkit::portico::{Portico, start_proxied_fleet};
use portico_testkit::{create_bucket, s3_client};
use rand::{Rng, SeedableRng};

const KEYS: usize = 12;
const WRITERS: usize = 3;
const READERS: usize = 12;
const SIZES: [usize; 7] = [1, 1000, 100 << 10, 1 << 20, 4 << 20, (4 << 20) + 1, 9 << 20];
/// Versions of a key whose bytes are kept to check reads against.
const KEPT_VERSIONS: usize = 8;

/// One written version: its bytes, and when its PUT was acknowledged.
struct Version {
    data: Arc<Vec<u8>>,
    acknowledged: Option<Instant>,
}

#[derive(Default)]
struct Registry {
    by_etag: HashMap<String, Version>,
    /// ETags by key, oldest first (their bytes are dropped past `KEPT_VERSIONS`).
    order: HashMap<usize, VecDeque<String>>,
}

#[derive(Default)]
struct Counts {
    acknowledged_puts: AtomicU64,
    failed_puts: AtomicU64,
    reads_checked: AtomicU64,
    reads_unverifiable: AtomicU64,
    wrong_bytes: AtomicU64,
    stale_reads: AtomicU64,
    cut_off: AtomicU64,
    failed_reads: AtomicU64,
}

/// `length` bytes from `seed`: a cheap generator, distinct per seed.
fn content(seed: u64, length: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut data = Vec::with_capacity(length + 8);
    while data.len() < length {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        data.extend_from_slice(&state.to_le_bytes());
    }
    data.truncate(length);
    data
}

fn key_name(key: usize) -> String {
    format!("soak/key-{key:02}")
}

struct Load {
    /// Each request goes to one of them at random.
    clients: Vec<Client>,
    bucket: String,
    registry: Mutex<Registry>,
    counts: Counts,
    seeds: AtomicU64,
}

/// What a GET returned: the ETag and the bytes, or how it failed.
enum Got {
    Body(String, u64, Vec<u8>),
    CutOff,
    Failed,
}

impl Load {
    fn client(&self) -> &Client {
        &self.clients[rand::random_range(0..self.clients.len())]
    }

    async fn get(&self, key: usize, range: Option<(u64, u64)>) -> Got {
        let request = self
            .client()
            .get_object()
            .bucket(&self.bucket)
            .key(key_name(key))
            .set_range(range.map(|(first, last)| format!("bytes={first}-{last}")));
        let Ok(output) = request.send().await else {
            return Got::Failed;
        };
        let etag = output.e_tag().unwrap_or_default().to_owned();
        let first = output
            .content_range()
            .and_then(|value| value.strip_prefix("bytes "))
            .and_then(|value| value.split('-').next())
            .and_then(|value| value.parse().ok())
            .unwrap_or(0);
        match output.body.collect().await {
            Ok(bytes) => Got::Body(etag, first, bytes.into_bytes().to_vec()),
            Err(_) => Got::CutOff,
        }
    }

    /// Checks `bytes` read from offset `first` against the version `etag` names.
    fn check(&self, etag: &str, first: u64, bytes: &[u8]) {
        let expected = self
            .registry
            .lock()
            .by_etag
            .get(etag)
            .map(|version| version.data.clone());
        let Some(data) = expected else {
            self.counts
                .reads_unverifiable
                .fetch_add(1, Ordering::Relaxed);
            return;
        };
        self.counts.reads_checked.fetch_add(1, Ordering::Relaxed);
        let start = first as usize;
        if data.get(start..start + bytes.len()) != Some(bytes) {
            self.counts.wrong_bytes.fetch_add(1, Ordering::Relaxed);
            eprintln!("wrong bytes: {etag} from {first}, {} bytes", bytes.len());
        }
    }

    fn record(&self, got: &Got) {
        match got {
            Got::Body(etag, first, bytes) => self.check(etag, *first, bytes),
            Got::CutOff => {
                self.counts.cut_off.fetch_add(1, Ordering::Relaxed);
            }
            Got::Failed => {
                self.counts.failed_reads.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    async fn write(&self, key: usize, size: usize) {
        let seed = self.seeds.fetch_add(1, Ordering::Relaxed);
        let data = Arc::new(content(seed, size));
        let etag = format!("\"{}\"", hex::encode(Md5::digest(data.as_slice())));
        let started = Instant::now();
        {
            let mut registry = self.registry.lock();
            registry.by_etag.insert(
                etag.clone(),
                Version {
                    data: data.clone(),
                    acknowledged: None,
                },
            );
            let order = registry.order.entry(key).or_default();
            order.push_back(etag.clone());
            if order.len() > KEPT_VERSIONS
                && let Some(oldest) = order.pop_front()
            {
                registry.by_etag.remove(&oldest);
            }
        }
        let put = self
            .client()
            .put_object()
            .bucket(&self.bucket)
            .key(key_name(key))
            .body(ByteStream::from(data.to_vec()))
            .send()
            .await;
        if let Err(error) = put {
            self.counts.failed_puts.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "PUT of {} failed: {}",
                key_name(key),
                aws_sdk_s3::error::DisplayErrorContext(&error)
            );
            return;
        }
        if let Some(version) = self.registry.lock().by_etag.get_mut(&etag) {
            version.acknowledged = Some(Instant::now());
        }
        self.counts
            .acknowledged_puts
            .fetch_add(1, Ordering::Relaxed);
        let got = self.get(key, None).await;
        if let Got::Body(read, _, _) = &got
            && *read != etag
        {
            let older = self
                .registry
                .lock()
                .by_etag
                .get(read)
                .and_then(|version| version.acknowledged)
                .is_some_and(|acknowledged| acknowledged < started);
            if older {
                self.counts.stale_reads.fetch_add(1, Ordering::Relaxed);
                eprintln!("stale read of {}: {read} after {etag}", key_name(key));
            }
        }
        self.record(&got);
    }
}

/// Runs the load against `client`'s endpoint for `seconds`; returns the counts.
async fn run(clients: Vec<Client>, bucket: String, seconds: u64) -> Counts {
    let load = Arc::new(Load {
        clients,
        bucket,
        registry: Mutex::default(),
        counts: Counts::default(),
        seeds: AtomicU64::new(rand::random::<u32>() as u64 * 1_000_000),
    });
    // Every key exists before the readers start.
    for key in 0..KEYS {
        load.write(key, SIZES[key % SIZES.len()]).await;
    }
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let load = load.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(writer as u64);
            while Instant::now() < deadline {
                let key = rng.random_range(0..KEYS);
                let size = SIZES[rng.random_range(0..SIZES.len())];
                load.write(key, size).await;
            }
        }));
    }
    for reader in 0..READERS {
        let load = load.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(100 + reader as u64);
            while Instant::now() < deadline {
                let key = rng.random_range(0..KEYS);
                let range = rng.random_bool(0.5).then(|| {
                    let first = rng.random_range(0..(9u64 << 20));
                    (first, first + rng.random_range(0..(6u64 << 20)))
                });
                let got = match load.get(key, range).await {
                    // A range past a short version's end: read it whole instead.
                    Got::Failed if range.is_some() => load.get(key, None).await,
                    got => got,
                };
                load.record(&got);
            }
        }));
    }
    for task in tasks {
        task.await.expect("a load task");
    }
    Arc::try_unwrap(load)
        .ok()
        .expect("the tasks are done")
        .counts
}

fn print_table(seconds: u64, columns: &[(&str, Counts)]) {
    let header: Vec<String> = columns.iter().map(|(name, _)| name.to_string()).collect();
    println!("\nOverwrite soak, {seconds} s per column");
    println!("| | {} |", header.join(" | "));
    println!("|---|{}", "---|".repeat(columns.len()));
    type Row = (&'static str, fn(&Counts) -> &AtomicU64);
    let rows: [Row; 8] = [
        ("acknowledged PUTs", |c| &c.acknowledged_puts),
        ("failed PUTs", |c| &c.failed_puts),
        ("reads checked", |c| &c.reads_checked),
        ("reads of a version no longer kept", |c| {
            &c.reads_unverifiable
        }),
        ("wrong bytes", |c| &c.wrong_bytes),
        ("writer's own GET returns an older version", |c| {
            &c.stale_reads
        }),
        ("bodies cut off after the headers", |c| &c.cut_off),
        ("reads failed before the body", |c| &c.failed_reads),
    ];
    for (name, counter) in rows {
        let values: Vec<String> = columns
            .iter()
            .map(|(_, counts)| counter(counts).load(Ordering::Relaxed).to_string())
            .collect();
        println!("| {name} | {} |", values.join(" | "));
    }
}

/// Every 10 s, one fault on one member picked at random, in turn: a pause (SIGSTOP, then
/// SIGCONT 2 s later: its clients wait for it, and a write through another member waits
/// for its confirmation or its lease), then a partition (its forwarder stops for 5 s: the
/// others cannot reach it, it still reaches them and the origin). Runs for `seconds`;
/// returns how many pauses and partitions there were.
async fn disturb(pids: Vec<u32>, mut proxies: Vec<Forwarder>, seconds: u64) -> (u32, u32) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let (mut pauses, mut partitions) = (0, 0);
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        if Instant::now() + Duration::from_secs(10) >= deadline {
            return (pauses, partitions);
        }
        let member = rand::random_range(0..pids.len());
        if pauses <= partitions {
            let pid = pids[member].to_string();
            let signal = |name: &str| {
                let status = std::process::Command::new("kill")
                    .args([format!("-{name}"), pid.clone()])
                    .status()
                    .expect("kill");
                assert!(status.success(), "kill -{name} {pid}");
            };
            signal("STOP");
            tokio::time::sleep(Duration::from_secs(2)).await;
            signal("CONT");
            pauses += 1;
        } else {
            proxies[member].stop().await;
            tokio::time::sleep(Duration::from_secs(5)).await;
            proxies[member].restart().await;
            partitions += 1;
        }
    }
}

#[tokio::main]
async fn main() {
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|value| value.parse().ok())
        .unwrap_or(60);
    let phases = std::env::var("SOAK_COLUMNS")
        .unwrap_or_else(|_| "direct,portico,versioned,fleet".to_owned());
    let phases: Vec<&str> = phases.split(',').map(str::trim).collect();
    let binary = std::env::var("PORTICO_BIN").unwrap_or_else(|_| "target/debug/portico".into());
    let minio = minio();
    let direct = s3_client(&minio.endpoint(), false);

    let mut columns = Vec::new();
    if phases.contains(&"direct") {
        let bucket = create_bucket(&direct, "soak-direct").await;
        eprintln!("MinIO direct, {seconds} s");
        columns.push((
            "MinIO direct",
            run(vec![direct.clone()], bucket, seconds).await,
        ));
    }
    for (phase, name, versioned, members) in [
        ("portico", "Portico", false, 1),
        ("versioned", "Portico, versioned bucket", true, 1),
        ("fleet", "Portico, 3 members", false, 3),
    ] {
        if !phases.contains(&phase) {
            continue;
        }
        let dirs: Vec<_> = (0..members)
            .map(|_| tempfile::tempdir().expect("cache directory"))
            .collect();
        let (nodes, proxies) =
            start_proxied_fleet(Path::new(&binary), &minio.endpoint(), &dirs, |settings| {
                settings.block_size = "4MiB";
                settings.memory_capacity = "64MiB";
                settings.debug_log = false;
            })
            .await;
        let bucket = create_bucket(&direct, "soak-portico").await;
        if versioned {
            portico_testkit::enable_versioning(&direct, &bucket).await;
        }
        eprintln!("{name}, {seconds} s");
        let pids: Vec<u32> = nodes.iter().filter_map(Portico::pid).collect();
        let faults = (members > 1).then(|| tokio::spawn(disturb(pids, proxies, seconds)));
        let clients = nodes
            .iter()
            .map(|node| s3_client(&node.s3, false))
            .collect();
        columns.push((name, run(clients, bucket, seconds).await));
        if let Some(faults) = faults {
            let (pauses, partitions) = faults.await.expect("the faults");
            eprintln!("{name}: {pauses} pauses and {partitions} partitions of a member");
        }
        for node in nodes {
            node.stop().await;
        }
    }
    print_table(seconds, &columns);
}
