//! Data-loader workloads against the cache's admission: a hot set read again and again
//! survives a one-pass scan several times the cache, and a dataset that fits the disk
//! tier, read twice, is fetched from the upstream once.

use crate::support::{Rig, random_bytes};

const MIB: usize = 1024 * 1024;

/// Reads every object whole through Portico and checks its bytes.
async fn read_all(rig: &Rig, objects: &[(String, Vec<u8>)]) {
    for (key, data) in objects {
        assert!(rig.get(key, None).await == *data, "{key}: wrong bytes");
    }
}

/// Uploads `count` random objects of `bytes` under `prefix`.
async fn upload(rig: &Rig, prefix: &str, count: usize, bytes: usize) -> Vec<(String, Vec<u8>)> {
    let mut objects = Vec::new();
    for index in 0..count {
        let key = format!("{prefix}/{index:03}.bin");
        let data = random_bytes(bytes, (prefix.len() * 1000 + index) as u64);
        rig.put(&key, &data).await;
        objects.push((key, data));
    }
    objects
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hot_set_read_repeatedly_survives_a_one_pass_scan_of_four_times_the_cache() {
    // A memory tier of 16 blocks (1 MiB of 64 KiB blocks; its probationary queue holds
    // 4 of them) and 4 MiB of disk: 5 MiB of cache.
    let rig = Rig::start("scan", |settings| {
        settings.block_size = "64KiB";
        settings.memory_capacity = "1MiB";
        settings.disk_capacity = "4MiB";
    })
    .await;
    let hot = upload(&rig, "hot", 2, 64 * 1024).await;
    let scan = upload(&rig, "scan", 5, 4 * MIB).await;
    for _ in 0..5 {
        read_all(&rig, &hot).await;
    }
    // 20 MiB read once, whole objects: each block is prefetched and then read.
    read_all(&rig, &scan).await;
    let before = rig.upstream_gets();
    read_all(&rig, &hot).await;
    let again: Vec<_> = rig.forwarder.object_requests("GET")[before..]
        .iter()
        .map(|seen| format!("{} {:?}", seen.path, seen.range))
        .collect();
    assert!(
        again.is_empty(),
        "blocks of the hot set were fetched again after the scan: {again:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dataset_that_fits_the_disk_tier_read_twice_costs_no_upstream_get_the_second_time() {
    // 40 MiB of data: 2.5 times memory, well within the disk tier.
    let rig = Rig::start("twice", |settings| {
        settings.memory_capacity = "16MiB";
        settings.disk_capacity = "96MiB";
    })
    .await;
    let dataset = upload(&rig, "data", 10, 4 * MIB).await;
    read_all(&rig, &dataset).await;
    let first = rig.upstream_blocks();
    assert!(first >= 40, "the first pass fetched {first} blocks of 40");
    read_all(&rig, &dataset).await;
    assert_eq!(
        rig.upstream_blocks() - first,
        0,
        "the second pass fetched blocks from the upstream again"
    );
    let portico = rig.portico();
    assert_eq!(
        portico
            .metric("portico_cache_disk_skipped_blocks_total")
            .await,
        0.0
    );
    assert!(
        portico
            .metric("portico_cache_block_lookups_total{result=\"disk_hit\"}")
            .await
            > 0.0,
        "the second pass was served from disk"
    );
}
