//! Upstream and disk failures Portico rides out: a slow upstream request is hedged (the
//! hedge wins and the slow request is cancelled), stale metadata is served while the
//! upstream is down, and a failed disk tier turns the cache memory-only without a wrong
//! byte.

use std::time::{Duration, Instant};

use portico_testkit::forwarder::Fault;

use crate::support::{Rig, eventually, failed_get, random_bytes, s3_client};
use portico_testkit::truncate_files;

const KIB: usize = 1024;

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_block_fetch_is_hedged_and_the_slow_request_cancelled() {
    let rig = Rig::start("hedge", |settings| {
        settings.block_size = "64KiB";
        settings.hedge_quantile = 0.9;
    })
    .await;
    let slow = random_bytes(256 * KIB, 52);
    rig.put("slow.bin", &slow).await;
    let sent = "portico_upstream_hedges_total{result=\"sent\"}";
    let won = "portico_upstream_hedges_total{result=\"won\"}";
    // Block fetches teach Portico what a normal fetch takes, and each earns a tenth of a
    // hedge. A warm-up fetch may itself be hedged on a busy machine, spending the budget:
    // warm up until 16 fetches in a row (1.6 hedges earned) went unhedged.
    // Block by block, last first: a read of many blocks at once comes in origin streams,
    // and a sequential reader's blocks in prefetches, neither of which is hedged.
    let warm = random_bytes(1024 * KIB, 51);
    for round in 0..6 {
        assert!(round < 5, "every warm-up round was hedged");
        let key = format!("warm-{round}.bin");
        rig.put(&key, &warm).await;
        let hedged_before = rig.portico().metric(sent).await;
        for first in (0..warm.len()).step_by(64 * KIB).rev() {
            let range = format!("bytes={first}-{}", first + 64 * KIB - 1);
            let block = rig.get(&key, Some(&range)).await;
            assert!(block[..] == warm[first..first + 64 * KIB]);
        }
        if round > 0 && rig.portico().metric(sent).await == hedged_before {
            break;
        }
    }
    // Metadata first, so the next GET is a plain block fetch.
    rig.head("slow.bin").await;
    rig.forwarder.take();
    let (sent_before, won_before) = (
        rig.portico().metric(sent).await,
        rig.portico().metric(won).await,
    );

    rig.forwarder
        .inject(&[Fault::Delay(Duration::from_secs(5))]);
    let started = Instant::now();
    let read = rig.get("slow.bin", Some("bytes=1000-2999")).await;
    let took = started.elapsed();
    assert!(
        read == slow[1000..3000],
        "the hedge's bytes are the object's"
    );
    assert!(
        took < Duration::from_secs(2),
        "the hedge answered long before the slow request: {took:?}"
    );
    let gets = rig.forwarder.object_requests("GET");
    assert_eq!(gets.len(), 2, "the slow request and one hedge: {gets:?}");
    assert!(
        gets.iter()
            .all(|seen| seen.range.as_deref() == Some("bytes=0-65535")),
        "{gets:?}"
    );
    assert_eq!(rig.portico().metric(sent).await - sent_before, 1.0);
    assert_eq!(rig.portico().metric(won).await - won_before, 1.0);
    // The slow request's connection was closed, well before its delay ran out.
    let deadline = Instant::now() + Duration::from_secs(3);
    while rig.forwarder.cancelled() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        rig.forwarder.cancelled(),
        1,
        "the losing request was cancelled"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stale_metadata_is_served_while_the_upstream_is_down() {
    // Every read revalidates: with the upstream down, each one finds its metadata stale.
    let mut rig = Rig::start("stale", |settings| settings.metadata_ttl = "0s").await;
    let cached = random_bytes(3 * 1024 * KIB, 53);
    let uncached = random_bytes(100 * KIB, 54);
    rig.put("cached.bin", &cached).await;
    rig.put("uncached.bin", &uncached).await;
    assert!(rig.get("cached.bin", None).await == cached);
    rig.head("uncached.bin").await;

    rig.forwarder.stop().await;
    // The upstream unreachable: the cached version is served.
    assert!(rig.get("cached.bin", None).await == cached);
    assert!(rig.get("cached.bin", Some("bytes=100-199")).await == cached[100..200]);
    let head = rig.head("cached.bin").await;
    assert_eq!(head.content_length(), Some(cached.len() as i64));
    assert!(rig.portico().metric("portico_stale_serves_total").await >= 3.0);
    // Known metadata but no cached bytes: nothing to serve.
    let client = s3_client(&rig.portico().s3, false);
    let (status, _) = failed_get(&client, &rig.bucket, "uncached.bin", None).await;
    assert_eq!(status, 503);

    // With serve_stale_on_error off, the same read fails.
    rig.settings.serve_stale_on_error = false;
    rig.restart_portico().await;
    let client = s3_client(&rig.portico().s3, false);
    let (status, _) = failed_get(&client, &rig.bucket, "cached.bin", None).await;
    assert_eq!(status, 503);
    assert_eq!(
        rig.portico().metric("portico_stale_serves_total").await,
        0.0
    );

    rig.forwarder.restart().await;
    assert!(rig.get("cached.bin", None).await == cached);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_disk_turns_the_cache_memory_only_and_every_byte_stays_right() {
    let mut rig = Rig::start("degraded", |_| {}).await;
    let data = random_bytes(5 * 1024 * KIB + 17, 55);
    let other = random_bytes(2 * 1024 * KIB, 56);
    let small = random_bytes(10 * KIB, 57);
    rig.put("object.bin", &data).await;
    rig.put("other.bin", &other).await;
    for key in ["first.bin", "second.bin"] {
        rig.put(key, &small).await;
        assert!(rig.get(key, None).await == small);
    }
    assert!(rig.get("object.bin", None).await == data);
    // After a restart the blocks are on disk only.
    rig.restart_portico().await;
    let (_, body) = rig.portico().admin_get("/readyz").await;
    assert!(
        body.starts_with("ready\ncache: open (memory + disk)"),
        "{body}"
    );
    rig.forwarder.take();
    rig.forwarder.take_counts();

    // The disk loses what it held before each read: three failed reads in a row, each
    // answered from the upstream. What a read learns again (its metadata) is written back
    // to the disk; the files lose it only once that write is done, or the write would land
    // after them and make the files long again (zeros that fail verification, not reads
    // that fail).
    let writes = "foyer_storage_disk_io_bytes_total_total{name=\"portico\",op=\"write\"}";
    let mut written = rig.portico().metric(writes).await;
    for (at, key) in ["first.bin", "second.bin", "object.bin"]
        .into_iter()
        .enumerate()
    {
        if at > 0 {
            let what = "what the read before learnt is written back";
            eventually(what, Duration::from_secs(10), || async {
                (rig.portico().metric(writes).await > written).then_some(())
            })
            .await;
        }
        written = rig.portico().metric(writes).await;
        assert!(truncate_files(&rig.settings.cache_dir) > 0);
        let expected = if key == "object.bin" { &data } else { &small };
        assert!(rig.get(key, None).await == *expected, "{key}");
    }
    assert_eq!(
        rig.portico().metric("portico_cache_degraded").await,
        1.0,
        "{}",
        rig.portico().logs()
    );
    assert!(
        rig.portico()
            .metric("portico_cache_disk_errors_total{operation=\"read\"}")
            .await
            >= 1.0
    );
    let (status, body) = rig.portico().admin_get("/readyz").await;
    assert_eq!(status, 200, "degraded is still ready: {body}");
    assert!(
        body.starts_with("degraded\ncache: open (memory only (disk tier off: disk read failed"),
        "{body}"
    );
    let logs = rig.portico().logs();
    assert_eq!(
        logs.matches("disk tier turned off").count(),
        1,
        "one log line says so: {logs}"
    );
    // The blocks were fetched again and are served from memory now.
    let (_, fetched) = rig.forwarder.take_counts();
    assert!(
        fetched >= (data.len() + 2 * small.len()) as u64,
        "the lost blocks came from the upstream: {fetched} bytes"
    );
    let blocks = rig.upstream_blocks();
    assert!(rig.get("object.bin", None).await == data);
    assert!(rig.get("other.bin", None).await == other);
    assert!(rig.get("other.bin", Some("bytes=5-1048580")).await == other[5..1_048_581]);
    assert_eq!(
        rig.upstream_blocks(),
        blocks + 2,
        "object.bin from memory; other.bin's two blocks once"
    );
}

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(bytes: u64) -> Self {
        let dir = tempfile::tempdir().expect("mount point");
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mounting a tmpfs needs root, as `make test` runs in CI"
        );
        Self(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0.path())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_disk_tier_keeps_its_room_when_something_else_fills_its_file_system() {
    // 32 MiB of disk tier on a 40 MiB file system that something else then fills up:
    // the tier reserved its capacity at start, so its writes still find room (a sparse
    // tier's writes failed there, and foyer's flusher panicked on the failure).
    let tmpfs = Tmpfs::mount(40 << 20);
    let cache = tmpfs.0.path().join("cache");
    let mut rig = Rig::start("full-fs", |settings| {
        settings.cache_dir = cache.clone();
        settings.memory_capacity = "4MiB";
        settings.disk_capacity = "32MiB";
    })
    .await;
    let taken = portico_testkit::fill_file_system(&tmpfs.0.path().join("filler"));
    assert!(
        taken < 9 << 20,
        "the tier's 32 MiB were reserved: {taken} bytes were left"
    );
    let objects: Vec<Vec<u8>> = (0..3)
        .map(|seed| random_bytes(4 << 20, 90 + seed))
        .collect();
    for (index, data) in objects.iter().enumerate() {
        rig.put(&format!("object-{index}.bin"), data).await;
        assert!(rig.get(&format!("object-{index}.bin"), None).await == *data);
    }
    let writes = "foyer_storage_disk_io_bytes_total_total{name=\"portico\",op=\"write\"}";
    eventually(
        "the disk tier writes 8 MiB",
        Duration::from_secs(20),
        || async { (rig.portico().metric(writes).await >= (8 << 20) as f64).then_some(()) },
    )
    .await;
    // After a restart (the memory tier empty, the reserved file kept) every block comes
    // back from the disk tier.
    let logs = rig.portico().logs();
    rig.restart_portico().await;
    rig.forwarder.take();
    for (index, data) in objects.iter().enumerate() {
        assert!(rig.get(&format!("object-{index}.bin"), None).await == *data);
    }
    let disk_hits = "portico_cache_block_lookups_total{result=\"disk_hit\"}";
    let from_disk = rig.portico().metric(disk_hits).await;
    assert!(
        from_disk >= 12.0,
        "{from_disk} blocks read back from the disk tier, {} from the upstream",
        rig.upstream_gets()
    );
    let logs = logs + &rig.portico().logs();
    assert!(!logs.contains("panicked"), "{logs}");
}
