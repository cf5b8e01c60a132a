//! Prefetch across requests: a client reading an object in consecutive ranges finds the
//! next blocks already fetched, every block still comes from the upstream exactly once
//! (prefetch and demand coalesce), and random access prefetches nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::support::{Rig, random_bytes};

const MIB: usize = 1024 * 1024;

async fn prefetch_metric(rig: &Rig, outcome: &str) -> f64 {
    rig.portico()
        .metric(&format!(
            "portico_prefetch_blocks_total{{result=\"{outcome}\"}}"
        ))
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn sequential_ranges_are_prefetched_and_each_block_is_fetched_once() {
    let rig = Rig::start("prefetch", |_| {}).await;
    let data = random_bytes(12 * MIB, 41);
    rig.put("sequential.bin", &data).await;
    rig.forwarder.take();

    let step = MIB / 4;
    let mut read = Vec::with_capacity(data.len());
    for offset in (0..data.len()).step_by(step) {
        let range = format!("bytes={offset}-{}", offset + step - 1);
        read.extend(rig.get("sequential.bin", Some(&range)).await);
        // A client doing work between reads gives prefetches time to land.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(read == data, "the bytes read back are the object");

    let fetched: Vec<String> = rig
        .forwarder
        .object_requests("GET")
        .into_iter()
        .filter_map(|seen| seen.range)
        .collect();
    let unique: BTreeSet<&String> = fetched.iter().collect();
    assert_eq!(
        unique.len(),
        fetched.len(),
        "no range asked twice: {fetched:?}"
    );
    // One block at a time, or many in an origin stream: each block once.
    assert_eq!(rig.upstream_blocks(), 12, "each block once: {fetched:?}");
    let issued = prefetch_metric(&rig, "issued").await;
    let used = prefetch_metric(&rig, "used").await;
    assert!(
        issued >= 8.0,
        "blocks after the first were prefetched: {issued}"
    );
    assert!(used >= 8.0, "and read: {used}");
    let misses = rig
        .portico()
        .metric("portico_cache_block_lookups_total{result=\"miss\"}")
        .await;
    assert!(
        misses <= 3.0,
        "reads found prefetched blocks instead of missing: {misses} misses"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_steady_reader_s_prefetches_come_in_streams_of_several_blocks() {
    let rig = Rig::start("prefetch-batches", |_| {}).await;
    let blocks = 48;
    let data = random_bytes(blocks * MIB, 43);
    rig.put("steady.bin", &data).await;
    rig.forwarder.take();

    let step = MIB / 4;
    for offset in (0..data.len()).step_by(step) {
        let range = format!("bytes={offset}-{}", offset + step - 1);
        let read = rig.get("steady.bin", Some(&range)).await;
        assert!(read == data[offset..offset + step], "bytes at {offset}");
        // A client doing work between reads, as in the test above.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(rig.upstream_blocks(), blocks, "each block once");
    // The window grows 1, 2, 4, 8, 16 blocks in its first reads; past that it is issued
    // 4 blocks at a time, each batch one origin GET: about 48 / 4 + 6 GETs, where a
    // block per GET would be about 48.
    let gets = rig.upstream_gets();
    assert!(
        gets <= blocks / 4 + 8,
        "prefetches came in streams: {gets} GETs for {blocks} blocks: {:?}",
        rig.forwarder.object_requests("GET")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn prefetches_that_find_no_room_are_not_counted_as_used() {
    let rig = Rig::start("prefetch-no-room", |settings| {
        // Room for about two blocks beside the ones on their way to the client.
        settings.server_extra = "max_inflight_bytes = \"3MiB\"".into();
    })
    .await;
    let data = random_bytes(24 * MIB, 44);
    rig.put("tight.bin", &data).await;
    let step = MIB / 4;
    for offset in (0..data.len()).step_by(step) {
        let range = format!("bytes={offset}-{}", offset + step - 1);
        let read = rig.get("tight.bin", Some(&range)).await;
        assert!(read == data[offset..offset + step], "bytes at {offset}");
    }
    let issued = prefetch_metric(&rig, "issued").await;
    let used = prefetch_metric(&rig, "used").await;
    let skipped = prefetch_metric(&rig, "skipped").await;
    assert!(skipped > 0.0, "the room ran out: {skipped} skipped");
    assert!(
        used <= issued,
        "a block used was a block issued: {used} used, {issued} issued"
    );
}

#[tokio::test]
async fn random_reads_prefetch_nothing() {
    let rig = Rig::start("noprefetch", |_| {}).await;
    let data = random_bytes(32 * MIB, 42);
    rig.put("random.bin", &data).await;
    rig.forwarder.take();
    let mut offset = 5 * MIB + 123;
    let mut blocks = BTreeSet::new();
    for _ in 0..30 {
        offset = (offset * 48_271 + 7 * MIB + 17) % (data.len() - 65_536);
        let range = format!("bytes={offset}-{}", offset + 65_535);
        let read = rig.get("random.bin", Some(&range)).await;
        assert!(read == data[offset..offset + 65_536]);
        blocks.insert(offset / MIB);
        blocks.insert((offset + 65_535) / MIB);
    }
    assert_eq!(prefetch_metric(&rig, "issued").await, 0.0);
    assert!(
        rig.upstream_gets() <= blocks.len(),
        "only the blocks read were fetched"
    );
}
