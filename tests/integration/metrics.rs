//! The metrics tell the truth: one workload that reads cold, from memory, from disk,
//! coalesced, prefetched and stale, with every lookup and served-bytes counter checked
//! after each step against what the forwarder saw reach the upstream.

use std::time::Duration;

use crate::support::{Rig, eventually, http_request, random_bytes};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
const RESULTS: [&str; 4] = ["miss", "memory_hit", "disk_hit", "coalesced"];
const SOURCES: [&str; 4] = ["upstream", "memory", "disk", "coalesced"];

/// Every lookup result and served-bytes source, in the order of [`RESULTS`] and
/// [`SOURCES`].
#[derive(Debug, Clone, Copy, PartialEq)]
struct Counters {
    lookups: [f64; 4],
    served: [f64; 4],
}

impl Counters {
    async fn read(rig: &Rig) -> Self {
        let portico = rig.portico();
        let mut counters = Self {
            lookups: [0.0; 4],
            served: [0.0; 4],
        };
        for (slot, result) in counters.lookups.iter_mut().zip(RESULTS) {
            *slot = portico
                .metric(&format!(
                    "portico_cache_block_lookups_total{{result=\"{result}\"}}"
                ))
                .await;
        }
        for (slot, source) in counters.served.iter_mut().zip(SOURCES) {
            *slot = portico
                .metric(&format!(
                    "portico_served_bytes_total{{source=\"{source}\"}}"
                ))
                .await;
        }
        counters
    }

    /// What changed since `before`.
    fn since(self, before: Self) -> Self {
        let mut delta = self;
        for (now, then) in delta.lookups.iter_mut().zip(before.lookups) {
            *now -= then;
        }
        for (now, then) in delta.served.iter_mut().zip(before.served) {
            *now -= then;
        }
        delta
    }
}

/// Counters with `lookups` (miss, memory, disk, coalesced) and `served` bytes by the same
/// sources.
fn expected(lookups: [usize; 4], served: [usize; 4]) -> Counters {
    Counters {
        lookups: lookups.map(|count| count as f64),
        served: served.map(|bytes| bytes as f64),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_block_lookup_is_counted_where_it_happened() {
    // A short TTL, for the stale serve at the end; not 1 s: a read joins only a discovery
    // of its own join window (one TTL long, counted from Portico's start), so the herd
    // below would run two discoveries whenever a window ended among its readers.
    let mut rig = Rig::start("truth", |settings| settings.metadata_ttl = "3s").await;
    let small = random_bytes(10 * KIB, 1);
    for index in 0..5 {
        rig.put(&format!("small-{index}"), &small).await;
    }
    let herd = random_bytes(100 * KIB, 2);
    rig.put("herd", &herd).await;
    let sequential = random_bytes(6 * MIB, 3);
    rig.put("sequential", &sequential).await;
    rig.forwarder.take();

    // Cold: five first-ever GETs are five misses served from the upstream.
    let before = Counters::read(&rig).await;
    for index in 0..5 {
        assert!(rig.get(&format!("small-{index}"), None).await == small);
    }
    assert_eq!(rig.upstream_gets(), 5);
    assert_eq!(
        Counters::read(&rig).await.since(before),
        expected([5, 0, 0, 0], [5 * small.len(), 0, 0, 0]),
        "cold reads"
    );

    // Memory: the same object again.
    let before = Counters::read(&rig).await;
    assert!(rig.get("small-0", None).await == small);
    assert_eq!(
        Counters::read(&rig).await.since(before),
        expected([0, 1, 0, 0], [0, small.len(), 0, 0]),
        "a memory hit"
    );

    // Coalesced: eight concurrent first reads of one object, one upstream GET.
    rig.forwarder.take();
    rig.forwarder.set_latency(Duration::from_millis(300));
    let before = Counters::read(&rig).await;
    let mut readers = Vec::new();
    let together = std::sync::Arc::new(tokio::sync::Barrier::new(8));
    for _ in 0..8 {
        let client = rig.client.clone();
        let bucket = rig.bucket.clone();
        let together = together.clone();
        readers.push(tokio::spawn(async move {
            let request = client.get_object().bucket(bucket).key("herd");
            together.wait().await;
            let output = request.send().await;
            output.unwrap().body.collect().await.unwrap().into_bytes()
        }));
    }
    for reader in readers {
        assert!(reader.await.unwrap()[..] == herd[..]);
    }
    rig.forwarder.set_latency(Duration::ZERO);
    assert_eq!(rig.upstream_gets(), 1);
    assert_eq!(
        Counters::read(&rig).await.since(before),
        expected([1, 0, 0, 7], [herd.len(), 0, 0, 7 * herd.len()]),
        "a coalesced herd"
    );

    // Prefetched: a sequential reader finds the blocks prefetch fetched (in memory, or
    // still arriving); each block reaches the upstream once, as a miss or a prefetch.
    rig.forwarder.take();
    let before = Counters::read(&rig).await;
    let issued_before = prefetch(&rig, "issued").await;
    for offset in (0..sequential.len()).step_by(MIB) {
        let range = format!("bytes={offset}-{}", offset + MIB - 1);
        assert!(rig.get("sequential", Some(&range)).await == sequential[offset..offset + MIB]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rig.upstream_blocks(), 6, "every block fetched once");
    let issued = prefetch(&rig, "issued").await - issued_before;
    let delta = Counters::read(&rig).await.since(before);
    let [miss, memory, disk, coalesced] = delta.lookups;
    assert!(issued >= 3.0, "prefetches were issued: {issued}");
    assert_eq!(
        miss + issued,
        6.0,
        "demand misses and prefetches: {delta:?}"
    );
    assert_eq!(
        memory + coalesced,
        issued,
        "prefetched blocks found: {delta:?}"
    );
    assert_eq!(disk, 0.0);
    assert_eq!(delta.served.iter().sum::<f64>(), sequential.len() as f64);
    assert_eq!(delta.served[0], miss * MIB as f64);

    // Disk: after a restart, the memory tier is empty and the block comes from disk.
    rig.restart_portico().await;
    rig.forwarder.take();
    assert!(rig.get("small-1", None).await == small);
    assert_eq!(rig.upstream_gets(), 0);
    assert_eq!(
        Counters::read(&rig).await,
        expected([0, 0, 1, 0], [0, 0, small.len(), 0]),
        "a disk hit after a restart"
    );
    // A ranged disk hit reads the 256 KiB pieces it overlaps, not its 1 MiB block: the
    // read amplification the dashboard plots (foyer's disk read bytes over the bytes
    // served from disk).
    let disk_read = "foyer_storage_disk_io_bytes_total_total{name=\"portico\",op=\"read\"}";
    let piece = 256 * 1024;
    for (range, pieces) in [((0, 1023), 1), ((piece - 512, piece + 511), 2)] {
        let read_before = rig.portico().metric(disk_read).await;
        let before = Counters::read(&rig).await;
        let header = format!("bytes={}-{}", range.0, range.1);
        assert!(rig.get("sequential", Some(&header)).await == sequential[range.0..=range.1]);
        let read = rig.portico().metric(disk_read).await - read_before;
        assert_eq!(Counters::read(&rig).await.since(before).served[2], 1024.0);
        assert!(
            read >= (pieces * piece) as f64 && read <= (pieces * (piece + 8192)) as f64,
            "{pieces} piece(s) read for 1 KiB served ({header}): {read}"
        );
    }

    // Stale: the upstream is down and the metadata past its TTL; the cached version is
    // served and counted as a stale serve. It comes from disk again: a block read from
    // disk once is not admitted to memory (the second read is).
    // HEADs show when the metadata has passed its TTL: the first stale serve.
    rig.forwarder.stop().await;
    let stale = "portico_stale_serves_total";
    eventually(
        "the metadata passes its TTL",
        Duration::from_secs(10),
        || async {
            rig.head("small-1").await;
            (rig.portico().metric(stale).await >= 1.0).then_some(())
        },
    )
    .await;
    let stale_before = rig.portico().metric(stale).await;
    let before = Counters::read(&rig).await;
    assert!(rig.get("small-1", None).await == small);
    assert_eq!(
        Counters::read(&rig).await.since(before),
        expected([0, 0, 1, 0], [0, 0, small.len(), 0]),
        "a stale serve"
    );
    assert_eq!(rig.portico().metric(stale).await, stale_before + 1.0);
    rig.forwarder.restart().await;
}

async fn prefetch(rig: &Rig, result: &str) -> f64 {
    rig.portico()
        .metric(&format!(
            "portico_prefetch_blocks_total{{result=\"{result}\"}}"
        ))
        .await
}

/// Every metric name the README, the docs, the alert rules and the dashboard use, foyer's
/// included, is one a live `/metrics` exports (after reads that touch both tiers).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_metric_named_in_docs_alerts_and_dashboard_is_exported() {
    let rig = Rig::start("names", |_| {}).await;
    let data = random_bytes(3 * MIB, 4);
    rig.put("object", &data).await;
    assert!(rig.get("object", None).await == data);
    assert!(rig.get("object", None).await == data);
    let (status, text) = rig.portico().admin_get("/metrics").await;
    assert_eq!(status, 200);
    let mut exported = std::collections::BTreeSet::new();
    for line in text.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let mut words = declared.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            // A histogram's family name names it in prose; a counter's never (its
            // samples end in `_total`).
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["", "_bucket", "_sum", "_count"],
                _ => &[""],
            };
            exported.extend(suffixes.iter().map(|suffix| format!("{name}{suffix}")));
        } else if !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            exported.insert(name.to_owned());
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut documents = vec![
        root.join("README.md"),
        root.join("charts/portico/alerts/portico.rules.yaml"),
        root.join("charts/portico/dashboards/portico.json"),
    ];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        documents.push(entry.unwrap().path());
    }
    let mut checked = 0;
    for document in documents {
        let text = std::fs::read_to_string(&document).unwrap();
        for (start, _) in text.match_indices(['p', 'f']) {
            let rest = &text[start..];
            if !(rest.starts_with("portico_") || rest.starts_with("foyer_"))
                || text[..start]
                    .chars()
                    .next_back()
                    .is_some_and(|before| before.is_ascii_alphanumeric() || before == '_')
            {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            // `foyer_*` in prose names the family, not a metric.
            if name.ends_with('_') {
                continue;
            }
            checked += 1;
            assert!(
                exported.contains(&name),
                "{} names {name}, which /metrics does not export",
                document.display()
            );
        }
    }
    assert!(checked >= 40, "only {checked} metric names found");
}

/// `Cache-Status` (RFC 9211) on GET and HEAD says what the cache did: a miss, a hit and
/// where, a collapsed wait and a bypass; the access log says the same; and the header can
/// be renamed or turned off. (Revalidation and stale serves, which need the TTL to pass,
/// are asserted with a paused clock in the read path's unit tests.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cache_status_says_what_the_cache_did() {
    let mut rig = Rig::start("status", |settings| {
        settings.without_auth();
        settings.metadata_ttl = "1s";
        settings.log = "access_log = true\n".to_owned();
    })
    .await;
    let data = random_bytes(100 * KIB, 5);
    for key in ["object", "herd", "bypassed"] {
        rig.put(key, &data).await;
    }

    assert_eq!(
        cache_status(&rig, "GET", "object").await.as_deref(),
        Some("Portico; fwd=miss; stored; ttl=1")
    );
    assert_eq!(
        cache_status(&rig, "GET", "object").await.as_deref(),
        Some("Portico; hit; ttl=0; detail=memory")
    );
    assert_eq!(
        cache_status(&rig, "HEAD", "object").await.as_deref(),
        Some("Portico; hit; ttl=0")
    );

    // Concurrent first reads: one fetches, the others wait for it.
    rig.forwarder.set_latency(Duration::from_millis(300));
    let herd: Vec<_> = (0..4).map(|_| cache_status(&rig, "GET", "herd")).collect();
    let mut statuses: Vec<String> = futures::future::join_all(herd)
        .await
        .into_iter()
        .map(Option::unwrap)
        .collect();
    rig.forwarder.set_latency(Duration::ZERO);
    statuses.sort();
    assert_eq!(
        statuses,
        [
            "Portico; fwd=miss; stored; collapsed; ttl=1",
            "Portico; fwd=miss; stored; collapsed; ttl=1",
            "Portico; fwd=miss; stored; collapsed; ttl=1",
            "Portico; fwd=miss; stored; ttl=1",
        ]
    );

    // Without an ETag nothing is cached: every GET goes upstream.
    rig.forwarder.strip_etags();
    assert_eq!(
        cache_status(&rig, "GET", "bypassed").await.as_deref(),
        Some("Portico; fwd=bypass")
    );
    let logs = rig.portico().logs();
    assert!(
        logs.contains("cache_status=\"Portico; fwd=bypass\""),
        "the access log says it too: {logs}"
    );

    rig.settings.server_extra = "cache_status_header = \"\"\n".to_owned();
    rig.restart_portico().await;
    assert_eq!(
        cache_status(&rig, "GET", "object").await,
        None,
        "turned off"
    );
}

/// The `Cache-Status` of an unsigned `method` of `key` (the rig runs without auth).
async fn cache_status(rig: &Rig, method: &str, key: &str) -> Option<String> {
    let url = format!("{}/{}/{key}", rig.portico().s3, rig.bucket);
    let (code, headers, _) = http_request(method, &url, &[]).await;
    assert_eq!(code, 200, "{method} {key}");
    headers
        .get("cache-status")
        .map(|value| value.to_str().unwrap().to_owned())
}
