//! `scan`: a hot set against one-pass scans. A cache of `memory_capacity = 256MiB` and
//! `disk_capacity = 1GiB` (nginx: `proxy_cache` with `max_size` of the same 1.25 GiB) reads
//! a 128 MiB hot set five times, then every object of a scan of 1x, 2x or 4x that total
//! size once, then the hot set again: the origin bytes of that last read say which share of
//! the hot set the scan left cached. Each scan size starts from an empty cache, so a
//! measuring read never refreshes the hot set for the next one. Then a dataset that fits
//! (768 MiB, beside the hot set) is read twice: its second pass must cost no origin GET.

use super::*;

const SCAN_MEMORY_CAPACITY: &str = "256MiB";
const SCAN_DISK_CAPACITY: &str = "1GiB";
/// nginx's `max_size`: Portico's two tiers together.
const SCAN_NGINX_MAX_SIZE: &str = "1280m";
const SCAN_CACHE_BYTES: u64 = 1280 * MIB;
const HOT_SET_OBJECTS: usize = 4;
const HOT_SET_OBJECT_BYTES: u64 = 32 * MIB;
const HOT_SET_READS: usize = 5;
const SCAN_OBJECT_BYTES: u64 = 64 * MIB;
/// The largest scan, in multiples of the cache; the scan objects are uploaded once.
const SCAN_MULTIPLES: [u64; 3] = [1, 2, 4];
/// The dataset that fits: three quarters of the disk tier, which holds a copy of every
/// block in memory as well (the tiers are inclusive), so that the hot set fits beside it.
const FIT_OBJECTS: usize = 12;
/// Clients reading a scan's objects, each a whole object at a time, as a data loader's
/// workers do.
const SCAN_READERS: usize = 4;

fn hot_set() -> Vec<String> {
    (0..HOT_SET_OBJECTS)
        .map(|index| format!("scan-hot-{index}.bin"))
        .collect()
}

fn scan_objects(count: usize) -> Vec<String> {
    (0..count)
        .map(|index| format!("scan/{index:03}.bin"))
        .collect()
}

fn scan_object_count(multiple: u64) -> usize {
    (multiple * SCAN_CACHE_BYTES / SCAN_OBJECT_BYTES) as usize
}

/// Reads every one of `objects` whole, once, with `SCAN_READERS` clients taking them in
/// order.
async fn read_once(base: String, objects: Vec<String>) -> Run {
    let client = http_client();
    let objects = std::sync::Arc::new(objects);
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..SCAN_READERS {
        let (client, base, objects, next) =
            (client.clone(), base.clone(), objects.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut exchanges = Vec::new();
            loop {
                let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(object) = objects.get(index) else {
                    return exchanges;
                };
                exchanges.push(fetch(&client, &format!("{base}/{object}"), None).await);
            }
        }));
    }
    joined(workers, started).await
}

/// A cache under test, started empty for each measurement.
enum Cache {
    Portico(Box<Portico>),
    Nginx(Nginx, std::path::PathBuf),
}

impl Cache {
    async fn start(name: &str, settings: &Settings, work: &Path, origin_address: &str) -> Self {
        let dir = work.join(format!("scan-{name}"));
        std::fs::remove_dir_all(&dir).ok();
        if name == "nginx" {
            let nginx = Nginx::start_sized(&dir, origin_address, false, SCAN_NGINX_MAX_SIZE);
            return Self::Nginx(nginx, dir.join("cache"));
        }
        let mut settings = settings.clone();
        settings.cache_dir = dir;
        settings.memory_capacity = SCAN_MEMORY_CAPACITY;
        settings.disk_capacity = SCAN_DISK_CAPACITY;
        Self::Portico(Box::new(
            Portico::start(Path::new(env!("CARGO_BIN_EXE_portico")), &settings).await,
        ))
    }

    fn base(&self, bucket: &str) -> String {
        match self {
            Self::Portico(portico) => format!("{}/{bucket}", portico.s3),
            Self::Nginx(nginx, _) => local_base(nginx.port, bucket),
        }
    }

    /// What the cache holds: nginx's cache directory on disk, or Portico's memory tier and
    /// what its disk tier wrote.
    async fn held(&self) -> String {
        match self {
            Self::Nginx(_, dir) => {
                let output = Command::new("du").arg("-sm").arg(dir).output().expect("du");
                let text = String::from_utf8_lossy(&output.stdout);
                format!(
                    "{} MiB on disk",
                    text.split_whitespace().next().unwrap_or("?")
                )
            }
            Self::Portico(portico) => {
                let memory = portico.metric("foyer_memory_usage{name=\"portico\"}").await;
                let written = portico
                    .metric(
                        "foyer_storage_disk_io_bytes_total_total{name=\"portico\",op=\"write\"}",
                    )
                    .await;
                format!(
                    "{:.0} MiB in memory, {:.0} MiB written to disk",
                    memory / MIB as f64,
                    written / MIB as f64
                )
            }
        }
    }

    async fn stop(self) {
        match self {
            Self::Portico(portico) => portico.stop().await,
            Self::Nginx(nginx, _) => nginx.stop(),
        }
    }
}

/// Reads the hot set `HOT_SET_READS` times.
async fn heat(base: &str) {
    for _ in 0..HOT_SET_READS {
        read_once(base.to_owned(), hot_set()).await;
    }
}

/// The share of the hot set's bytes a whole read of it did not fetch from the origin.
async fn hot_share_cached(base: &str, origin: &Forwarder) -> f64 {
    origin.take_counts();
    read_once(base.to_owned(), hot_set()).await;
    let (_, origin_bytes) = origin.take_counts();
    let hot_bytes = HOT_SET_OBJECTS as u64 * HOT_SET_OBJECT_BYTES;
    1.0 - (origin_bytes.min(hot_bytes) as f64 / hot_bytes as f64)
}

pub async fn scan_scenario(
    settings: &Settings,
    work: &Path,
    origin: &Forwarder,
    origin_address: &str,
    direct: &aws_sdk_s3::Client,
    bucket: &str,
) {
    let largest = scan_object_count(*SCAN_MULTIPLES.last().unwrap_or(&1));
    println!();
    println!(
        "uploading {HOT_SET_OBJECTS} x {} MiB hot-set and {largest} x {} MiB scan objects",
        HOT_SET_OBJECT_BYTES / MIB,
        SCAN_OBJECT_BYTES / MIB
    );
    for (seed, object) in hot_set().iter().enumerate() {
        let data = random_bytes(HOT_SET_OBJECT_BYTES as usize, 3000 + seed as u64);
        upload(direct, bucket, object, ByteStream::from(data)).await;
    }
    for (seed, object) in scan_objects(largest).iter().enumerate() {
        let data = random_bytes(SCAN_OBJECT_BYTES as usize, 4000 + seed as u64);
        upload(direct, bucket, object, ByteStream::from(data)).await;
    }
    println!();
    println!(
        "scan: a {} MiB hot set read {HOT_SET_READS} times, then one pass over other objects ({SCAN_READERS} clients, whole 64 MiB objects), then the hot set again; portico: memory_capacity {SCAN_MEMORY_CAPACITY}, disk_capacity {SCAN_DISK_CAPACITY}; nginx: max_size {SCAN_NGINX_MAX_SIZE}; each scan from an empty cache",
        HOT_SET_OBJECTS as u64 * HOT_SET_OBJECT_BYTES / MIB
    );
    println!(
        "{:<9} {:>15} {:>11} {:>11}  after the scan",
        "target", "scan", "scan MiB/s", "hot cached"
    );
    let mut portico_after_largest = 0.0;
    for multiple in SCAN_MULTIPLES {
        for name in ["nginx", "portico"] {
            let cache = Cache::start(name, settings, work, origin_address).await;
            let base = cache.base(bucket);
            heat(&base).await;
            let scan = read_once(base.clone(), scan_objects(scan_object_count(multiple))).await;
            let held = cache.held().await;
            let share = hot_share_cached(&base, origin).await;
            println!(
                "{name:<9} {:>15} {:>11.1} {:>10.1}%  {held}",
                format!(
                    "{multiple}x {:.2} GiB",
                    (multiple * SCAN_CACHE_BYTES) as f64 / (1024 * MIB) as f64
                ),
                scan.mib_per_sec(),
                share * 100.0
            );
            if name == "portico" && multiple == *SCAN_MULTIPLES.last().unwrap_or(&1) {
                portico_after_largest = share;
            }
            cache.stop().await;
        }
    }
    println!(
        "portico's hot set still cached after the {}x scan: {:.1}% (target >= 95%: {})",
        SCAN_MULTIPLES.last().unwrap_or(&1),
        portico_after_largest * 100.0,
        verdict(portico_after_largest >= 0.95)
    );
    println!();
    println!(
        "scan-fit: the hot set read {HOT_SET_READS} times, then a {} MiB dataset read twice; origin traffic of the second pass",
        FIT_OBJECTS as u64 * SCAN_OBJECT_BYTES / MIB
    );
    for name in ["nginx", "portico"] {
        let cache = Cache::start(name, settings, work, origin_address).await;
        let base = cache.base(bucket);
        heat(&base).await;
        let first = counted_pass(&base, origin).await;
        let second = counted_pass(&base, origin).await;
        let met = second.origin_bytes == 0;
        if let Cache::Portico(portico) = &cache {
            println!("{}", disk_writes(portico).await);
        }
        println!(
            "{name:<9} first pass {:.1} MiB/s, {} origin requests; second pass {:.1} MiB/s, {} origin requests, {:.1} MiB{}",
            first.mib_per_sec(),
            first.origin_requests,
            second.mib_per_sec(),
            second.origin_requests,
            second.origin_bytes as f64 / MIB as f64,
            if name == "portico" {
                format!(" (target: no block fetched again: {})", verdict(met))
            } else {
                String::new()
            }
        );
        cache.stop().await;
    }
}

/// One whole pass over the dataset that fits, with its origin traffic.
async fn counted_pass(base: &str, origin: &Forwarder) -> Run {
    origin.take_counts();
    let mut run = read_once(base.to_owned(), scan_objects(FIT_OBJECTS)).await;
    (run.origin_requests, run.origin_bytes) = origin.take_counts();
    run
}

/// What Portico's disk tier was asked to write and what it skipped.
async fn disk_writes(portico: &Portico) -> String {
    let mut skipped = Vec::new();
    for op in ["buffer_overflow", "channel_overflow"] {
        let sample = format!("foyer_storage_inner_op_total_total{{name=\"portico\",op=\"{op}\"}}");
        skipped.push(portico.metric(&sample).await);
    }
    let written = portico
        .metric("foyer_storage_disk_io_bytes_total_total{name=\"portico\",op=\"write\"}")
        .await;
    let readmitted = portico
        .metric("portico_cache_disk_readmissions_total")
        .await;
    let queue_skipped = portico
        .metric("portico_cache_disk_skipped_blocks_total")
        .await;
    let retried = portico
        .metric("portico_cache_disk_retried_blocks_total")
        .await;
    let writes = portico
        .metric("portico_cache_disk_write_duration_seconds_count")
        .await;
    let mut slower = Vec::new();
    for le in ["1.024", "2.048"] {
        let within = portico
            .metric(&format!(
                "portico_cache_disk_write_duration_seconds_bucket{{le=\"{le}\"}}"
            ))
            .await;
        slower.push(writes - within);
    }
    format!(
        "portico disk tier: {:.0} MiB written in {writes} writes ({} over 1 s, {} over 2 s); pieces that skipped it: {} (write buffer full), {} (write queue full); {queue_skipped} blocks found the write queue full, {retried} of them written later; {readmitted} blocks queued again from memory hits",
        written / MIB as f64,
        slower[0],
        slower[1],
        skipped[0],
        skipped[1]
    )
}
