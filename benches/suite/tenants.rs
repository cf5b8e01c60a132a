//! `tenants`: one cache for many teams (docs/operations.md, "One cache for many teams").
//!
//! - A light tenant (2 clients of hot-random over a 64 MiB set in memory, each starting a
//!   read every 2 ms, on a runtime of their own) alone, beside a greedy tenant (32
//!   clients of cold random 256 KiB reads back to back, each a 4 MiB block fill) without
//!   limits, beside it with limits on the greedy tenant (two sets), beside it refused
//!   nearly everything (what the limits themselves cost), and alone again (the spread);
//!   rounds in turn. Target: with limits, the light tenant's p99 is at most 1.5 × its
//!   p99 alone.
//! - Two tenants of equal weight doing cold random reads, one with 24 clients and one with
//!   8, through a Portico whose fill slots bind (`upstream.max_concurrent_fills = 4`):
//!   each gets 45-55 % of the origin's block GETs. Through a Portico whose slots do not
//!   bind, the shares follow the client counts (the reference).
//!
//! Clients use presigned URLs (one credential per tenant), so the load client signs
//! nothing per request. A client refused with 503 SlowDown backs off as an SDK does
//! (full jitter, doubling from 100 ms up to 2 s). The cold reads stay cold: their objects
//! are purged every 500 ms while they run (a dataset far larger than the cache).

use std::sync::Arc;

use bytes::Bytes;
use portico_testkit::http_send;
use portico_testkit::sign::Signer;

use super::*;

const HOT_SET: usize = 4;
const HOT_SET_BYTES: u64 = 16 * MIB;
const POOL_OBJECTS: usize = 48;
const POOL_OBJECT_BYTES: u64 = 8 * MIB;
const LIGHT_CLIENTS: usize = 2;
/// How often each light client starts a read: a notebook's pace, not a saturating load.
const LIGHT_PACE: Duration = Duration::from_millis(2);
const GREEDY_CLIENTS: usize = 32;
const ROUND: Duration = Duration::from_secs(4);
const ROUNDS: usize = 3;
const TOKEN: &str = "tenants-bench-admin-token";
/// The greedy tenant's limits in the limited rounds.
const GREEDY_LIMITS: &str =
    "max_bytes_per_second = \"16MiB\"\nmax_concurrent_fills = 1\nmax_requests_per_second = 100\n";
/// Tighter limits: what the light tenant's p99 is when fewer of greedy's fills pass.
const GREEDY_TIGHT: &str =
    "max_bytes_per_second = \"4MiB\"\nmax_concurrent_fills = 1\nmax_requests_per_second = 50\n";
/// Limits that refuse the greedy tenant nearly everything: what the limits themselves
/// cost the light tenant, with next to no fills beside it.
const GREEDY_REFUSED: &str = "max_requests_per_second = 1\n";
/// How often the cold pools are purged while they are read.
const PURGE_EVERY: Duration = Duration::from_millis(500);

/// The credentials file: the light and greedy tenants, and `a` and `b` for the shares.
fn credentials(greedy_limits: &str) -> String {
    let mut text = format!("[[tenants]]\nname = \"greedy\"\n{greedy_limits}\n");
    for key in ["greedy", "light", "a", "b"] {
        text.push_str(&format!(
            "[[credentials]]\naccess_key_id = \"{key}\"\nsecret_access_key = \"{key}-secret\"\n\n"
        ));
    }
    text
}

/// A presigned GET of `key` for credential `who`, valid for an hour.
fn presigned(portico: &Portico, bucket: &str, key: &str, who: &str) -> String {
    let host = portico.s3.trim_start_matches("http://");
    let signer = Signer {
        access_key_id: who.to_owned(),
        secret: format!("{who}-secret"),
        ..Signer::default()
    };
    let url = format!("{}/{bucket}/{key}", portico.s3);
    signer.presign("GET", &url, host, Duration::from_secs(3600))
}

fn pool(prefix: &str) -> Vec<String> {
    (0..POOL_OBJECTS)
        .map(|index| format!("tenants-{prefix}-{index:02}.bin"))
        .collect()
}

fn hot_set() -> Vec<String> {
    (0..HOT_SET)
        .map(|index| format!("tenants-hot-{index}.bin"))
        .collect()
}

/// `clients` clients reading random ranges of `lengths` from `urls` (objects of `bytes`)
/// for `ROUND`, each starting a read at most every `pace` when given (back to back when
/// not): the successful exchanges, and how many were refused (503, then backed off).
async fn tenant_reads(
    urls: Arc<Vec<String>>,
    bytes: u64,
    lengths: std::ops::RangeInclusive<u64>,
    clients: usize,
    pace: Option<Duration>,
    seed: u64,
) -> (Run, u64) {
    let client = http_client();
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..clients {
        let (client, urls, lengths) = (client.clone(), urls.clone(), lengths.clone());
        workers.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed + worker as u64);
            let (mut exchanges, mut refused) = (Vec::new(), 0);
            let mut backoff_ms: u64 = 100;
            while started.elapsed() < ROUND {
                let next = pace.map(|pace| tokio::time::Instant::now() + pace);
                let url = &urls[rng.random_range(0..urls.len())];
                let length = rng.random_range(lengths.clone());
                let first = rng.random_range(0..=bytes - length);
                match load::try_fetch(&client, url, Some((first, first + length - 1))).await {
                    Ok(exchange) => {
                        exchanges.push(exchange);
                        backoff_ms = 100;
                    }
                    Err(503) => {
                        refused += 1;
                        let backoff = rng.random_range(0..=backoff_ms);
                        backoff_ms = (backoff_ms * 2).min(2000);
                        tokio::time::sleep(Duration::from_millis(backoff)).await;
                    }
                    Err(status) => panic!("{url}: {status}"),
                }
                if let Some(next) = next {
                    tokio::time::sleep_until(next).await;
                }
            }
            (exchanges, refused)
        }));
    }
    let (mut exchanges, mut refused) = (Vec::new(), 0);
    for worker in workers {
        let (done, count) = worker.await.expect("tenant worker");
        exchanges.extend(done);
        refused += count;
    }
    (Run::new(exchanges, started.elapsed()), refused)
}

/// Runs `load` on a runtime of its own, on threads of their own: the light tenant's clients
/// are timed apart from the greedy ones and from the forwarder's copying (other machines,
/// in a deployment), though on the same cores.
async fn apart<T: Send + 'static>(load: impl Future<Output = T> + Send + 'static) -> T {
    let thread = std::thread::spawn(move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("the light tenant's runtime")
            .block_on(load)
    });
    tokio::task::spawn_blocking(move || thread.join().expect("the light tenant's thread"))
        .await
        .expect("the light tenant's load")
}

/// Purges `prefix` through the admin API at `admin`: its objects are cold again.
async fn purge_at(admin: &str, bucket: &str, prefix: &str) {
    let url = format!("{admin}/admin/purge");
    let bearer = format!("Bearer {TOKEN}");
    let body = format!("{{\"bucket\": \"{bucket}\", \"prefix\": \"{prefix}\"}}");
    let headers = [
        ("authorization", bearer.as_str()),
        ("content-type", "application/json"),
    ];
    let (status, _, answer) = http_send("POST", &url, &headers, Bytes::from(body)).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
}

/// Purges each of `prefixes` every `PURGE_EVERY` until the returned sender is dropped.
fn keep_cold(
    portico: &Portico,
    bucket: &str,
    prefixes: &[&'static str],
) -> tokio::sync::oneshot::Sender<()> {
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let (admin, bucket, prefixes) = (portico.admin.clone(), bucket.to_owned(), prefixes.to_vec());
    tokio::spawn(async move {
        loop {
            for prefix in &prefixes {
                purge_at(&admin, &bucket, prefix).await;
            }
            tokio::select! {
                _ = &mut stopped => return,
                () = tokio::time::sleep(PURGE_EVERY) => {}
            }
        }
    });
    stop
}

/// A Portico with the tenants' credentials file at `file` and `extra` lines in
/// `[upstream]`.
async fn start(settings: &Settings, work: &Path, name: &str, file: &Path, extra: &str) -> Portico {
    let mut settings = settings.clone();
    settings.cache_dir = work.join(name);
    settings.with_credentials_file(file);
    settings.admin_extra = format!("token = \"{TOKEN}\"\n");
    settings.upstream_extra = extra.to_owned();
    settings.tables = "[prefetch]\nenabled = false\n".to_owned();
    Portico::start(Path::new(env!("CARGO_BIN_EXE_portico")), &settings).await
}

pub(super) async fn upload_objects(direct: &aws_sdk_s3::Client, bucket: &str, work: &Path) {
    let mut seed = 40;
    for key in hot_set() {
        upload_large(direct, bucket, work, &key, HOT_SET_BYTES, seed).await;
        seed += 1;
    }
    for prefix in ["greedy", "a", "b"] {
        for key in pool(prefix) {
            upload_large(direct, bucket, work, &key, POOL_OBJECT_BYTES, seed).await;
            seed += 1;
        }
    }
}

pub(super) async fn tenants_scenario(
    settings: &Settings,
    work: &Path,
    origin: &Forwarder,
    bucket: &str,
) {
    let file = work.join("tenants-credentials.toml");
    std::fs::write(&file, credentials("")).expect("credentials file");
    let portico = start(settings, work, "tenants", &file, "").await;
    let urls = |who: &str, keys: Vec<String>| -> Arc<Vec<String>> {
        Arc::new(
            keys.iter()
                .map(|key| presigned(&portico, bucket, key, who))
                .collect(),
        )
    };
    let hot = urls("light", hot_set());
    let greedy = urls("greedy", pool("greedy"));
    // The hot set in memory.
    let client = http_client();
    for _ in 0..2 {
        for url in hot.iter() {
            load::try_fetch(&client, url, Some((0, HOT_SET_BYTES - 1)))
                .await
                .expect("warm");
        }
    }

    print_header(
        &format!(
            "tenants: light ({LIGHT_CLIENTS} clients, each a read every {} ms, hot-random 64 KiB-1 MiB over {} MiB in memory) alone and beside greedy ({GREEDY_CLIENTS} clients, cold random 256 KiB reads), greedy unlimited, limited ({}), limited tighter ({}) and refused nearly all (max_requests_per_second = 1), {ROUNDS} rounds of {} s in turn",
            LIGHT_PACE.as_millis(),
            HOT_SET as u64 * HOT_SET_BYTES / MIB,
            GREEDY_LIMITS.trim().replace('\n', ", "),
            GREEDY_TIGHT.trim().replace('\n', ", "),
            ROUND.as_secs()
        ),
        false,
    );
    // The greedy tenant's limits in each variant (none: it does not run).
    let variants = [
        ("light alone", None),
        ("beside greedy, no limits", Some("")),
        ("beside greedy, limits", Some(GREEDY_LIMITS)),
        ("beside greedy, tight limits", Some(GREEDY_TIGHT)),
        ("beside greedy, all refused", Some(GREEDY_REFUSED)),
        ("light alone, again", None),
    ];
    let mut light: Vec<Option<Run>> = (0..variants.len()).map(|_| None).collect();
    let mut greedy_runs: Vec<(u64, u64, u64)> = vec![(0, 0, 0); variants.len()];
    let mut in_force = "";
    for round in 0..ROUNDS {
        for (at, (_, limits)) in variants.iter().enumerate() {
            if let Some(limits) = *limits
                && limits != in_force
            {
                std::fs::write(&file, credentials(limits)).expect("credentials file");
                // Reloaded within the file poll (2 s).
                tokio::time::sleep(Duration::from_millis(2500)).await;
                in_force = limits;
            }
            let cold = keep_cold(&portico, bucket, &["tenants-greedy-"]);
            origin.take_counts();
            let seed = 100 * round as u64;
            let light_load = apart(tenant_reads(
                hot.clone(),
                HOT_SET_BYTES,
                64 * KIB..=MIB,
                LIGHT_CLIENTS,
                Some(LIGHT_PACE),
                seed,
            ));
            let (run, greedy_result) = if limits.is_none() {
                (light_load.await.0, None)
            } else {
                let greedy_load = tenant_reads(
                    greedy.clone(),
                    POOL_OBJECT_BYTES,
                    256 * KIB..=256 * KIB,
                    GREEDY_CLIENTS,
                    None,
                    seed + 50,
                );
                let ((run, _), greedy) = tokio::join!(light_load, greedy_load);
                (run, Some(greedy))
            };
            drop(cold);
            let (origin_requests, _) = origin.take_counts();
            if let Some((greedy, refused)) = greedy_result {
                let totals = &mut greedy_runs[at];
                totals.0 += greedy.latencies.len() as u64;
                totals.1 += refused;
                totals.2 += origin_requests;
            }
            match &mut light[at] {
                Some(total) => total.absorb(run),
                slot => *slot = Some(run),
            }
        }
    }
    let light: Vec<Run> = light.into_iter().map(|run| run.expect("a run")).collect();
    for (at, (name, _)) in variants.iter().enumerate() {
        print_run(name, &light[at], false);
        if variants[at].1.is_some() {
            let (served, refused, fetched) = greedy_runs[at];
            println!(
                "  greedy: {served} reads served, {refused} refused (503 SlowDown), {fetched} origin requests"
            );
        }
    }
    let alone = light[0].latency_ms(0.99);
    let ratio = |run: &Run| run.latency_ms(0.99) / alone;
    println!(
        "light p99 / alone: no limits {:.2}x, limits {:.2}x (target <= 1.5: {}), tight limits {:.2}x ({}), all refused {:.2}x, alone again {:.2}x (the spread)",
        ratio(&light[1]),
        ratio(&light[2]),
        verdict(ratio(&light[2]) <= 1.5),
        ratio(&light[3]),
        verdict(ratio(&light[3]) <= 1.5),
        ratio(&light[4]),
        ratio(&light[5]),
    );
    std::fs::write(&file, credentials("")).expect("credentials file");

    // The shares of two equal tenants, through fill slots that bind and through ones that
    // do not.
    let binding = start(
        settings,
        work,
        "tenants-shares",
        &file,
        "max_concurrent_fills = 4\n",
    )
    .await;
    for (name, node) in [
        ("slots bind (4)", &binding),
        ("slots do not bind (64)", &portico),
    ] {
        let cold = keep_cold(node, bucket, &["tenants-a-", "tenants-b-"]);
        origin.take();
        let urls = |who: &str| -> Arc<Vec<String>> {
            Arc::new(
                pool(who)
                    .iter()
                    .map(|key| presigned(node, bucket, key, who))
                    .collect(),
            )
        };
        let (a, b) = (urls("a"), urls("b"));
        let lengths = 256 * KIB..=256 * KIB;
        let _ = tokio::join!(
            tenant_reads(a, POOL_OBJECT_BYTES, lengths.clone(), 24, None, 7000),
            tenant_reads(b, POOL_OBJECT_BYTES, lengths, 8, None, 8000),
        );
        drop(cold);
        let gets = origin.object_requests("GET");
        let count = |prefix: &str| {
            gets.iter()
                .filter(|seen| seen.path.contains(prefix))
                .count()
        };
        let (a, b) = (count("tenants-a-"), count("tenants-b-"));
        let share = a as f64 / (a + b).max(1) as f64;
        println!(
            "two equal tenants, 24 and 8 clients of cold random reads, {name}: origin block GETs {a} and {b}, the first's share {:.1} %{}",
            share * 100.0,
            if name.starts_with("slots bind") {
                format!(
                    " (target 45-55 %: {})",
                    verdict((0.45..=0.55).contains(&share))
                )
            } else {
                String::new()
            }
        );
    }
    binding.stop().await;
    portico.stop().await;
}
