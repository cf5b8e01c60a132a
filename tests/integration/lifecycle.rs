//! The cache across restarts and upstream changes: blocks survive a restart on disk, an
//! object overwritten upstream is never served as a mix of two versions, and one written
//! again with the same bytes and other headers is served with the new headers once its
//! metadata is revalidated.

use std::time::Duration;

use crate::support::{Rig, eventually, random_bytes, s3_client};

const BLOCK: usize = 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_portico_serves_cached_blocks_from_disk() {
    let mut rig = Rig::start("restart", |_| {}).await;
    let first = random_bytes(BLOCK * 7 / 2, 1);
    let second = random_bytes(2 * BLOCK + 17, 2);
    rig.put("one.bin", &first).await;
    rig.put("two.bin", &second).await;
    assert!(rig.get("one.bin", None).await == first);
    assert!(rig.get("two.bin", Some("bytes=1000-")).await == second[1000..]);
    assert!(rig.upstream_gets() > 0);
    let portico = rig.portico();
    let mut skipped_disk = 0.0;
    for op in ["buffer_overflow", "channel_overflow"] {
        let sample = format!("foyer_storage_inner_op_total_total{{name=\"portico\",op=\"{op}\"}}");
        skipped_disk += portico.metric(&sample).await;
    }
    assert_eq!(
        skipped_disk, 0.0,
        "blocks skipped the disk tier before the restart"
    );

    rig.restart_portico().await;
    rig.forwarder.take();

    assert!(rig.get("one.bin", None).await == first);
    assert!(rig.get("two.bin", Some("bytes=1000-")).await == second[1000..]);
    assert!(rig.get("two.bin", Some("bytes=-5")).await == second[second.len() - 5..]);
    assert_eq!(
        rig.upstream_gets(),
        0,
        "after a restart: {:#?}",
        rig.forwarder.take()
    );
    assert!(
        rig.upstream_heads() <= 2,
        "at most one revalidation per object"
    );
    let portico = rig.portico();
    assert!(
        portico
            .metric("portico_cache_block_lookups_total{result=\"disk_hit\"}")
            .await
            >= 6.0
    );
}

/// Every range form, across piece (256 KiB) and block (1 MiB) edges, is served from the
/// disk tier's pieces byte for byte after a restart, without the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ranges_across_piece_and_block_edges_are_byte_exact_from_disk_after_a_restart() {
    const PIECE: usize = 256 * 1024;
    let mut rig = Rig::start("pieces", |_| {}).await;
    let data = random_bytes(3 * BLOCK + 100 * 1024 + 3, 21);
    let len = data.len();
    rig.put("pieces.bin", &data).await;
    assert!(rig.get("pieces.bin", None).await == data);
    rig.restart_portico().await;
    rig.forwarder.take();

    let mut ranges: Vec<(String, std::ops::Range<usize>)> = Vec::new();
    let mut closed = |first: usize, last: usize| {
        ranges.push((format!("bytes={first}-{last}"), first..last + 1));
    };
    for edge in (PIECE..len).step_by(PIECE) {
        closed(edge - 1, edge);
        closed(edge, edge);
        closed(edge - 1, edge - 1);
        closed(edge - 3, (edge + PIECE + 5).min(len - 1));
    }
    closed(0, 0);
    closed(1, BLOCK);
    closed(BLOCK - 1, 2 * BLOCK);
    closed(7, len - 8);
    closed(len - 1, len - 1);
    for from in [0, 1, PIECE, BLOCK + 1, len - PIECE - 1, len - 1] {
        ranges.push((format!("bytes={from}-"), from..len));
    }
    for suffix in [1, PIECE - 1, PIECE + 1, BLOCK, BLOCK + 1, len, len + 10] {
        ranges.push((format!("bytes=-{suffix}"), len - suffix.min(len)..len));
    }
    ranges.push((format!("bytes=100-{}", len + 1000), 100..len));
    for (header, expected) in &ranges {
        let got = rig.get("pieces.bin", Some(header)).await;
        assert!(
            got == data[expected.clone()],
            "{header}: {} bytes, expected {}",
            got.len(),
            expected.len()
        );
    }
    assert!(rig.get("pieces.bin", None).await == data);
    assert_eq!(
        rig.upstream_gets(),
        0,
        "every range came from the disk tier: {:#?}",
        rig.forwarder.take()
    );
    let portico = rig.portico();
    let served = portico
        .metric("portico_served_bytes_total{source=\"disk\"}")
        .await;
    assert!(served > 0.0, "bytes were served from disk");
    // Pieces read from disk twice are kept in memory.
    assert!(
        portico
            .metric("portico_cache_memory_admissions_total")
            .await
            > 0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_block_size_on_the_same_disk_tier_never_serves_blocks_of_the_old_one() {
    let mut rig = Rig::start("relayout", |settings| settings.block_size = "2MiB").await;
    let data = random_bytes(3 * BLOCK, 12);
    rig.put("object.bin", &data).await;
    assert!(rig.get("object.bin", None).await == data);

    // The same cache directory, cut in 1 MiB blocks: old block 1 (bytes 2-3 MiB) must not
    // be taken for new block 1 (bytes 1-2 MiB), though both are 1 MiB long.
    rig.settings.block_size = "1MiB";
    rig.restart_portico().await;
    rig.forwarder.take();
    let logs = rig.portico().logs();
    assert!(
        logs.contains("the disk tier starts empty")
            && logs.contains("cache.block_size changed from 2097152 to 1048576"),
        "the reset is logged with its reason: {logs}"
    );
    let second_mib = rig.get("object.bin", Some("bytes=1048576-2097151")).await;
    assert!(second_mib == data[BLOCK..2 * BLOCK], "the bytes of 1-2 MiB");
    assert!(rig.get("object.bin", None).await == data);
    // Block 1 for the ranged read; then blocks 0 to 2 in one stream, block 1 again with
    // them rather than two single holes around it.
    assert_eq!(
        rig.upstream_blocks(),
        4,
        "every 1 MiB block came from the upstream: {:#?}",
        rig.forwarder.take()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_disk_tier_of_thousands_of_engine_blocks_starts_and_restarts_under_ulimit_n_1024() {
    // 1 GiB in 64 KiB blocks is about 3,600 engine blocks: more than 1,024 files, had
    // each engine block a file of its own. The hard limit is 1,024 too, so raising the
    // soft limit cannot help: only the layout can.
    let mut rig = Rig::start("nofile", |settings| {
        settings.block_size = "64KiB";
        settings.disk_capacity = "1GiB";
        settings.open_files_limit = Some(1024);
    })
    .await;
    let data = random_bytes(1024 * 1024 + 5, 21);
    rig.put("object.bin", &data).await;
    // Twice: a block whose pieces skipped a busy disk (a loaded test machine) is queued
    // for it again when memory serves it.
    for _ in 0..2 {
        assert!(rig.get("object.bin", None).await == data);
    }
    let files = std::fs::read_dir(&rig.settings.cache_dir).unwrap().count();
    assert!(
        files <= 4,
        "the disk tier keeps a few files, not one per engine block: {files}"
    );
    rig.restart_portico().await;
    rig.forwarder.take();
    assert!(rig.get("object.bin", Some("bytes=65530-")).await == data[65530..]);
    assert_eq!(
        rig.upstream_gets(),
        0,
        "served from the disk tier after the restart: {:#?}",
        rig.forwarder.take()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_object_changed_upstream_is_never_mixed_into_one_response() {
    let rig = Rig::start("change", |settings| settings.metadata_ttl = "1h").await;
    let old = random_bytes(3 * BLOCK, 10);
    let new = random_bytes(3 * BLOCK, 11);
    rig.put("object.bin", &old).await;
    // Caches the old version's metadata and its first block only.
    assert!(rig.get("object.bin", Some("bytes=0-99")).await == old[..100]);

    rig.put("object.bin", &new).await;
    // Within the TTL the old metadata is still trusted: block 0 comes from the cache, and
    // block 1 must be fetched with If-Match of the old ETag, which now fails.
    let during = rig
        .client
        .get_object()
        .bucket(&rig.bucket)
        .key("object.bin")
        .send()
        .await;
    match during {
        Ok(output) => match output.body.collect().await {
            Ok(bytes) => {
                let bytes = bytes.into_bytes();
                assert!(
                    bytes[..] == old[..] || bytes[..] == new[..],
                    "a response mixed two versions"
                );
            }
            Err(error) => println!("response aborted as it must be: {error}"),
        },
        Err(error) => println!("request failed before the body: {error:?}"),
    }

    // The failed If-Match dropped the stale metadata: the next read is wholly new.
    assert!(
        rig.get("object.bin", None).await == new,
        "after a change: only the new version"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_bytes_written_again_with_other_headers_are_served_with_the_new_headers() {
    let rig = Rig::start("same-bytes", |settings| settings.metadata_ttl = "0s").await;
    let data = random_bytes(BLOCK + 100, 40);
    let put = |content_type: &'static str, owner: &'static str| {
        rig.direct
            .put_object()
            .bucket(&rig.bucket)
            .key("report.csv")
            .content_type(content_type)
            .metadata("owner", owner)
            .body(data.clone().into())
            .send()
    };
    let first = put("text/plain", "alice").await.expect("PUT");
    assert!(rig.get("report.csv", None).await == data);
    assert_eq!(
        rig.head("report.csv").await.content_type(),
        Some("text/plain")
    );

    let second = put("text/csv", "bob").await.expect("PUT");
    assert_eq!(
        first.e_tag(),
        second.e_tag(),
        "the same bytes, the same ETag"
    );
    let head = rig.head("report.csv").await;
    assert_eq!(head.content_type(), Some("text/csv"), "revalidated headers");
    assert_eq!(
        head.metadata()
            .and_then(|meta| meta.get("owner"))
            .map(String::as_str),
        Some("bob")
    );
    let output = rig
        .client
        .get_object()
        .bucket(&rig.bucket)
        .key("report.csv")
        .send()
        .await
        .expect("GET");
    assert_eq!(output.content_type(), Some("text/csv"));
    assert!(output.body.collect().await.expect("body").into_bytes() == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_readers_see_whole_versions_while_an_object_changes() {
    let rig = Rig::start("churn", |settings| settings.metadata_ttl = "0s").await;
    let versions: Vec<Vec<u8>> = (0..4)
        .map(|seed| random_bytes(2 * BLOCK + 512, 20 + seed))
        .collect();
    rig.put("churn.bin", &versions[0]).await;
    let mut readers = Vec::new();
    for _ in 0..4 {
        let client = rig.client.clone();
        let bucket = rig.bucket.clone();
        let versions = versions.clone();
        readers.push(tokio::spawn(async move {
            let mut whole = 0;
            for _ in 0..15 {
                let Ok(output) = client
                    .get_object()
                    .bucket(&bucket)
                    .key("churn.bin")
                    .send()
                    .await
                else {
                    continue;
                };
                if let Ok(bytes) = output.body.collect().await {
                    let bytes = bytes.into_bytes();
                    assert!(
                        versions.iter().any(|version| version[..] == bytes[..]),
                        "a response that is no single version"
                    );
                    whole += 1;
                }
            }
            whole
        }));
    }
    for version in &versions[1..] {
        tokio::time::sleep(Duration::from_millis(150)).await;
        rig.put("churn.bin", version).await;
    }
    let mut complete = 0;
    for reader in readers {
        complete += reader.await.unwrap();
    }
    assert!(complete > 0, "no read completed");
    assert!(rig.get("churn.bin", None).await == versions[3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_lets_an_in_flight_100_mib_get_finish_then_exits_cleanly() {
    let mut rig = Rig::start("shutdown", |_| {}).await;
    let data = random_bytes(100 * 1024 * 1024, 77);
    rig.put("large.bin", &data).await;
    let portico = rig.portico.take().expect("portico is running");
    let address = portico.s3.trim_start_matches("http://").to_owned();
    let client = s3_client(&portico.s3, false);
    let output = client
        .get_object()
        .bucket(&rig.bucket)
        .key("large.bin")
        .send()
        .await
        .expect("GET starts");
    let mut body = output.body;
    let mut received = Vec::with_capacity(data.len());
    received.extend(body.try_next().await.unwrap().expect("a first chunk"));

    portico.terminate();
    eventually(
        "no new connections once shutdown began",
        Duration::from_secs(5),
        || async { tokio::net::TcpStream::connect(&address).await.err() },
    )
    .await;
    while let Some(chunk) = body.try_next().await.expect("the body completes") {
        received.extend(chunk);
    }
    assert!(received == data, "all 100 MiB arrived intact");
    assert!(
        portico.exit_status().await.success(),
        "clean exit after the drain"
    );
}
