//! `list`: a data loader's listing. Every pass lists a 10,000-key prefix in 10 pages of
//! 1,000 (ListObjectsV2 with `start-after`): one pass through Portico (its own, with the
//! listing cache on for that prefix) fills the cache, then 5 passes straight from the
//! origin and 5 through Portico are measured.

use super::*;

const KEYS: usize = 10_000;
const PAGE_KEYS: usize = 1_000;
const PASSES: usize = 5;
const UPLOADERS: usize = 32;

fn key(index: usize) -> String {
    format!("list/key-{index:05}")
}

/// `PASSES` listings of the whole prefix, page by page, in order.
async fn list_passes(base: String) -> Run {
    list(base, PASSES).await
}

/// `passes` listings of the whole prefix, page by page, in order.
async fn list(base: String, passes: usize) -> Run {
    let client = http_client();
    let started = Instant::now();
    let mut exchanges = Vec::new();
    for _ in 0..passes {
        for page in 0..KEYS / PAGE_KEYS {
            let after = match page {
                0 => String::new(),
                _ => format!(
                    "&start-after={}",
                    key(page * PAGE_KEYS - 1).replace('/', "%2F")
                ),
            };
            let url = format!("{base}?list-type=2&prefix=list%2F&max-keys={PAGE_KEYS}{after}");
            exchanges.push(fetch(&client, &url, None).await);
        }
    }
    Run::new(exchanges, started.elapsed())
}

pub async fn list_scenario(
    settings: &Settings,
    work: &Path,
    origin: &Forwarder,
    direct: &aws_sdk_s3::Client,
    bucket: &str,
) {
    println!();
    println!("uploading {KEYS} small objects under list/");
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut uploaders = Vec::new();
    for _ in 0..UPLOADERS {
        let (direct, bucket, next) = (direct.clone(), bucket.to_owned(), next.clone());
        uploaders.push(tokio::spawn(async move {
            loop {
                let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if index >= KEYS {
                    return;
                }
                upload(&direct, &bucket, &key(index), ByteStream::from_static(b"x")).await;
            }
        }));
    }
    for uploader in uploaders {
        uploader.await.expect("uploader");
    }
    let mut settings = settings.clone();
    settings.cache_dir = work.join("portico-list");
    settings.listing = format!("cached_prefixes = [\"{bucket}/list/\"]\nttl = \"5m\"\n");
    let portico = Portico::start(Path::new(env!("CARGO_BIN_EXE_portico")), &settings).await;
    let targets = [
        direct_target(origin, bucket),
        portico_target("portico", &portico, bucket),
    ];
    // The first pass fills the listing cache.
    let cold = counted(&targets[1], origin, &|base| list(base, 1)).await;
    let runs = run_all(
        "list: 5 passes over a 10,000-key prefix in pages of 1,000 (ListObjectsV2, start-after); portico with listing.cached_prefixes on it, after one pass that filled its cache",
        false,
        &targets,
        origin,
        list_passes,
    )
    .await;
    let ratio = runs[1].mib_per_sec() / runs[0].mib_per_sec();
    println!(
        "cached listings / direct throughput: {ratio:.0}x (target >= 10x: {}); origin listings within the TTL {} (target 0: {}); the first pass through portico took {:.2} s, p50 {:.1} ms, {} origin listings",
        verdict(ratio >= 10.0),
        runs[1].origin_requests,
        verdict(runs[1].origin_requests == 0),
        cold.elapsed.as_secs_f64(),
        cold.latency_ms(0.5),
        cold.origin_requests,
    );
    portico.stop().await;
}
