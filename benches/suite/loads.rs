//! The loads the scenarios run: sequential, herds, random ranges, and the objects they
//! read.

use super::*;

pub(super) async fn cold_sequential(base: String) -> Run {
    sequential(base, "sequential.bin").await
}

/// One client reads `key` (of `SEQUENTIAL_BYTES`) whole in 1 MiB ranges, in order.
pub(super) async fn sequential(base: String, key: &str) -> Run {
    let client = http_client();
    let url = format!("{base}/{key}");
    let started = Instant::now();
    let mut exchanges = Vec::new();
    for first in (0..SEQUENTIAL_BYTES).step_by(MIB as usize) {
        exchanges.push(fetch(&client, &url, Some((first, first + MIB - 1))).await);
    }
    Run::new(exchanges, started.elapsed())
}

/// One client GETs the cold-whole object (of `SEQUENTIAL_BYTES`) whole.
pub(super) async fn cold_whole(base: String) -> Run {
    let client = http_client();
    let url = format!("{base}/whole.bin");
    let started = Instant::now();
    let exchange = fetch(&client, &url, None).await;
    assert_eq!(exchange.bytes, SEQUENTIAL_BYTES);
    Run::new(vec![exchange], started.elapsed())
}

/// The cold-sequential object read straight from `base` in `BLOCK_BYTES` ranges,
/// `PARALLEL_GETS` at a time, in order.
pub(super) async fn direct_parallel(base: String) -> Run {
    let client = http_client();
    let url = format!("{base}/sequential.bin");
    let next = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..PARALLEL_GETS {
        let (client, url, next) = (client.clone(), url.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut exchanges = Vec::new();
            loop {
                let first = next.fetch_add(BLOCK_BYTES, std::sync::atomic::Ordering::Relaxed);
                if first >= SEQUENTIAL_BYTES {
                    return exchanges;
                }
                let last = (first + BLOCK_BYTES).min(SEQUENTIAL_BYTES) - 1;
                exchanges.push(fetch(&client, &url, Some((first, last))).await);
            }
        }));
    }
    joined(workers, started).await
}

/// One run of every exchange `workers` made since `started`.
pub(super) async fn joined(
    workers: Vec<tokio::task::JoinHandle<Vec<Exchange>>>,
    started: Instant,
) -> Run {
    let mut exchanges = Vec::new();
    for worker in workers {
        exchanges.extend(worker.await.expect("load worker"));
    }
    Run::new(exchanges, started.elapsed())
}

pub(super) async fn cold_herd(base: String) -> Run {
    herd(base, "herd.bin").await
}

/// [`HERD_CLIENTS`] clients GET object `key` (of [`HERD_BYTES`]) whole, all at once.
pub(super) async fn herd(base: String, key: &str) -> Run {
    let client = http_client();
    let url = format!("{base}/{key}");
    let gate = std::sync::Arc::new(tokio::sync::Barrier::new(HERD_CLIENTS + 1));
    let mut clients = Vec::new();
    for _ in 0..HERD_CLIENTS {
        let (client, url, gate) = (client.clone(), url.clone(), gate.clone());
        clients.push(tokio::spawn(async move {
            gate.wait().await;
            fetch(&client, &url, None).await
        }));
    }
    gate.wait().await;
    let started = Instant::now();
    let mut exchanges = Vec::new();
    for client in clients {
        let exchange = client.await.expect("herd client");
        assert_eq!(exchange.bytes, HERD_BYTES);
        exchanges.push(exchange);
    }
    Run::new(exchanges, started.elapsed())
}

/// `clients` workers each reading random ranges of `lengths` from random `objects`,
/// `reads` times or until `run` has passed.
pub(super) async fn random_reads(
    base: String,
    objects: Vec<String>,
    object_bytes: u64,
    lengths: std::ops::RangeInclusive<u64>,
    clients: usize,
    limit: Limit,
) -> Run {
    let client = http_client();
    let bases = bases(&base);
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..clients {
        let (client, base, objects, lengths) = (
            client.clone(),
            bases[worker % bases.len()].clone(),
            objects.clone(),
            lengths.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(1000 + worker as u64);
            let mut exchanges = Vec::new();
            while match limit {
                Limit::Reads(reads) => exchanges.len() < reads,
                Limit::Time(run) => started.elapsed() < run,
            } {
                let object = &objects[rng.random_range(0..objects.len())];
                let length = rng.random_range(lengths.clone());
                let first = rng.random_range(0..=object_bytes - length);
                let url = format!("{base}/{object}");
                exchanges.push(fetch(&client, &url, Some((first, first + length - 1))).await);
            }
            exchanges
        }));
    }
    joined(workers, started).await
}

#[derive(Clone, Copy)]
pub(super) enum Limit {
    Reads(usize),
    Time(Duration),
}

pub(super) fn hot_objects() -> Vec<String> {
    (0..HOT_OBJECTS)
        .map(|index| format!("hot-{index}.bin"))
        .collect()
}

pub(super) fn disk_objects() -> Vec<String> {
    (0..DISK_OBJECTS)
        .map(|index| format!("disk-{index:02}.bin"))
        .collect()
}

pub(super) async fn hot_random_disk(base: String) -> Run {
    random_reads(
        base,
        disk_objects(),
        DISK_OBJECT_BYTES,
        64 * KIB..=4 * MIB,
        HOT_CLIENTS,
        Limit::Time(HOT_ROUND),
    )
    .await
}

pub(super) fn cold_objects() -> Vec<String> {
    (0..COLD_OBJECTS)
        .map(|index| format!("cold-{index:03}.bin"))
        .collect()
}

/// Reads every one of `objects` whole, twice, through each of `base`'s bases, so that a
/// cache holds them.
pub(super) async fn read_twice(base: String, objects: Vec<String>) {
    let client = http_client();
    for base in bases(&base) {
        for _ in 0..2 {
            for object in &objects {
                fetch(&client, &format!("{base}/{object}"), None).await;
            }
        }
    }
}

pub(super) async fn hot_warm_up(base: String) {
    read_twice(base, hot_objects()).await;
}

pub(super) async fn hot_random(base: String) -> Run {
    random_reads(
        base,
        hot_objects(),
        HOT_OBJECT_BYTES,
        64 * KIB..=4 * MIB,
        HOT_CLIENTS,
        Limit::Time(HOT_ROUND),
    )
    .await
}

pub(super) async fn random_cold(base: String) -> Run {
    random_reads(
        base,
        cold_objects(),
        COLD_OBJECT_BYTES,
        4 * KIB..=256 * KIB,
        COLD_CLIENTS,
        Limit::Reads(COLD_READS_PER_CLIENT),
    )
    .await
}
