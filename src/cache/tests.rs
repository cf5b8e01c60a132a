//! The cache against foyer, memory-only and with a disk tier in a temporary directory:
//! lookups and coalescing, pieces and their edges across a reopen, admission, metadata,
//! purges and degraded mode. The helpers every test shares (the small configuration, the
//! test block key, the whole-block read) are here; pieces and the disk write queue have
//! files of their own.

use super::*;
use crate::config::{ByteSize, CacheConfig};
use crate::object::{Missing, ObjectMeta};
use device::DIRECT_PROBE_FILE;
use std::sync::atomic::AtomicUsize;

mod pieces;
use pieces::{mib_block, part, patterned, piece_config};
mod writes;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fetch failed: {0}")]
struct FetchFailed(&'static str);

fn config(dir: &std::path::Path, disk: ByteSize) -> CacheConfig {
    CacheConfig {
        dir: dir.to_owned(),
        memory_capacity: ByteSize::mib(4),
        disk_capacity: disk,
        block_size: ByteSize::kib(64),
        ..CacheConfig::default()
    }
}

fn block_key(index: u64) -> BlockKey {
    BlockKey::new(
        &ObjectRef::new("bucket", "key").unwrap(),
        "\"etag\"".into(),
        64 * 1024,
        index,
    )
}

impl BlockCache {
    /// All `len` bytes of block `index` of the test object, their parts joined.
    async fn whole<F, Fut>(
        &self,
        index: u64,
        len: usize,
        fetch: F,
    ) -> Result<(Bytes, Tier), LookupError<FetchFailed>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Bytes, FetchFailed>> + Send + 'static,
    {
        let part = self
            .block(&block_key(index), len, 0..len, Keep::Everywhere, fetch)
            .await?;
        Ok((part.slices.concat().into(), part.tier))
    }
}

async fn open(dir: &std::path::Path, disk: ByteSize) -> BlockCache {
    BlockCache::open(&config(dir, disk), Arc::new(Metrics::new()))
        .await
        .unwrap()
}

#[tokio::test]
async fn concurrent_misses_run_one_fetch() {
    let dir = tempfile::tempdir().unwrap();
    let cache = open(dir.path(), ByteSize(0)).await;
    let fetches = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Notify::new());
    let mut waiters = Vec::new();
    for _ in 0..16 {
        let cache = cache.clone();
        let fetches = fetches.clone();
        let gate = gate.clone();
        waiters.push(tokio::spawn(async move {
            cache
                .whole(0, 10, move || async move {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    gate.notified().await;
                    Ok::<_, FetchFailed>(Bytes::from_static(b"block zero"))
                })
                .await
        }));
    }
    // The fetch is under way (held at the gate): waiters that arrive now join it, later
    // ones find the block in memory; either way one fetch runs.
    for _ in 0..10_000 {
        if fetches.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(fetches.load(Ordering::SeqCst), 1, "the fetch started");
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
    gate.notify_one();
    let mut tiers = Vec::new();
    for waiter in waiters {
        let (bytes, tier) = waiter.await.unwrap().unwrap();
        assert_eq!(bytes, Bytes::from_static(b"block zero"));
        tiers.push(tier);
    }
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    assert_eq!(
        tiers.iter().filter(|tier| **tier == Tier::Upstream).count(),
        1
    );
    assert!(
        tiers
            .iter()
            .all(|tier| matches!(tier, Tier::Upstream | Tier::Coalesced | Tier::Memory))
    );
    let (_, tier) = cache
        .whole(0, 10, || async {
            Err::<Bytes, _>(FetchFailed("must not run"))
        })
        .await
        .unwrap();
    assert_eq!(tier, Tier::Memory);
}

#[tokio::test]
async fn a_failed_fetch_reaches_every_waiter_and_is_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    let cache = open(dir.path(), ByteSize(0)).await;
    let error = cache
        .whole(1, 5, || async {
            Err::<Bytes, _>(FetchFailed("upstream down"))
        })
        .await
        .unwrap_err();
    assert!(matches!(
        error,
        LookupError::Fetch(FetchFailed("upstream down"))
    ));
    let (bytes, tier) = cache
        .whole(1, 5, || async {
            Ok::<_, FetchFailed>(Bytes::from_static(b"later"))
        })
        .await
        .unwrap();
    assert_eq!(
        (bytes, tier),
        (Bytes::from_static(b"later"), Tier::Upstream)
    );
}

#[tokio::test]
async fn blocks_and_metadata_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    survives_a_reopen(&config(dir.path(), ByteSize::mib(4))).await;
}

#[tokio::test]
async fn the_disk_tier_works_with_and_without_direct_io() {
    assert!(CacheConfig::default().direct_io);
    for direct_io in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let config = CacheConfig {
            direct_io,
            ..config(dir.path(), ByteSize::mib(4))
        };
        survives_a_reopen(&config).await;
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert!(
            !names.iter().any(|name| name == DIRECT_PROBE_FILE),
            "the probe file is removed: {names:?}"
        );
    }
}

/// A block and metadata written to the disk tier are read back after the cache is
/// closed and opened again, both times with `config`.
async fn survives_a_reopen(config: &CacheConfig) {
    let open = || async {
        BlockCache::open(config, Arc::new(Metrics::new()))
            .await
            .unwrap()
    };
    let object = ObjectRef::new("bucket", "key").unwrap();
    let data = Bytes::from(vec![7u8; 64 * 1024]);
    let record = MetaClock::new().record(
        MetaState::Found(Arc::new(ObjectMeta {
            size: 64 * 1024,
            etag: "\"etag\"".to_owned(),
            ..ObjectMeta::default()
        })),
        0,
    );
    {
        let cache = open().await;
        assert!(cache.has_disk_tier());
        cache.insert_block(block_key(0), data.clone());
        cache.insert_meta(&object, record.clone());
        cache.close().await.unwrap();
    }
    let cache = open().await;
    let (bytes, tier) = cache
        .whole(0, 64 * 1024, || async {
            Err::<Bytes, _>(FetchFailed("must come from disk"))
        })
        .await
        .unwrap();
    assert_eq!(tier, Tier::Disk);
    assert_eq!(bytes, data);
    assert_eq!(cache.meta(&object).await.unwrap(), Some(record));
}

#[tokio::test]
async fn disk_read_errors_that_persist_turn_the_disk_tier_off() {
    let dir = tempfile::tempdir().unwrap();
    let data = Bytes::from(vec![3u8; 64 * 1024]);
    let reads = DISK_FAILURES_BEFORE_DEGRADED as u64;
    {
        let cache = open(dir.path(), ByteSize::mib(4)).await;
        for index in 0..reads {
            cache.insert_block(block_key(index), data.clone());
        }
        cache.close().await.unwrap();
    }
    let metrics = Arc::new(Metrics::new());
    let cache = BlockCache::open(&config(dir.path(), ByteSize::mib(4)), metrics.clone())
        .await
        .unwrap();
    assert_eq!(cache.degraded(), None);
    portico_testkit::truncate_files(dir.path());
    for index in 0..reads {
        assert_eq!(
            cache.degraded(),
            None,
            "still on after {index} failed reads"
        );
        // Each failed disk read is answered by a fetch.
        let (bytes, tier) = cache
            .whole(index, 64 * 1024, {
                let data = data.clone();
                move || async move { Ok::<_, FetchFailed>(data) }
            })
            .await
            .unwrap();
        assert_eq!((bytes, tier), (data.clone(), Tier::Upstream));
    }
    let reason = cache
        .degraded()
        .expect("degraded after persistent read errors");
    assert!(reason.starts_with("disk read failed"), "{reason}");
    let text = metrics.render();
    assert!(text.contains("portico_cache_degraded 1"), "{text}");
    assert!(
        text.contains(&format!(
            "portico_cache_disk_errors_total{{operation=\"read\"}} {reads}"
        )),
        "{text}"
    );
    // Memory-only from now on: blocks are cached in memory, not written to disk.
    let (_, tier) = cache
        .whole(0, 64 * 1024, || async {
            Err::<Bytes, _>(FetchFailed("must come from memory"))
        })
        .await
        .unwrap();
    assert_eq!(tier, Tier::Memory);
}

#[tokio::test]
async fn negative_metadata_is_not_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let object = ObjectRef::new("bucket", "gone").unwrap();
    {
        let cache = open(dir.path(), ByteSize::mib(4)).await;
        cache.insert_meta(
            &object,
            MetaClock::new().record(MetaState::Missing(Missing::NoSuchKey), 0),
        );
        assert!(cache.meta(&object).await.unwrap().is_some());
        cache.close().await.unwrap();
    }
    let cache = open(dir.path(), ByteSize::mib(4)).await;
    assert_eq!(cache.meta(&object).await.unwrap(), None);
}

#[tokio::test]
async fn a_block_kept_in_memory_only_never_reaches_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let config = piece_config(dir.path());
    let cache = BlockCache::open(&config, Arc::new(Metrics::new()))
        .await
        .unwrap();
    let data = patterned(1 << 20, 9);
    let fetches = Arc::new(AtomicUsize::new(0));
    for (index, keep) in [(0, Keep::Memory), (1, Keep::Everywhere)] {
        // The fetch, then a memory hit (which queues pieces a disk lacks, for owned blocks).
        for _ in 0..2 {
            let (counted, source) = (fetches.clone(), data.clone());
            let found = cache
                .block(
                    &mib_block(index),
                    1 << 20,
                    0..1 << 20,
                    keep,
                    move || async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, FetchFailed>(source)
                    },
                )
                .await
                .unwrap();
            assert_eq!(found.slices.concat(), data);
        }
    }
    assert_eq!(fetches.load(Ordering::SeqCst), 2, "one fetch per block");
    // Reopened, memory is empty: what is held is on disk.
    cache.close().await.unwrap();
    let cache = BlockCache::open(&config, Arc::new(Metrics::new()))
        .await
        .unwrap();
    assert!(
        !cache.holds(&mib_block(0), 1 << 20),
        "a block another member owns went to disk"
    );
    assert!(
        cache.holds(&mib_block(1), 1 << 20),
        "an owned block's pieces are on disk"
    );
}

#[tokio::test]
async fn a_burst_of_fetched_blocks_larger_than_the_disk_write_buffer_reaches_the_disk_whole() {
    let dir = tempfile::tempdir().unwrap();
    let config = CacheConfig {
        disk_capacity: ByteSize::mib(128),
        ..piece_config(dir.path())
    };
    let metrics = Arc::new(Metrics::new());
    let blocks = 80u64;
    {
        let cache = BlockCache::open(&config, metrics.clone()).await.unwrap();
        // 80 MiB fetched at once: more than twice foyer's write buffer, which drops what
        // arrives while it is full and a write is in flight.
        let fetches = (0..blocks).map(|index| {
            let cache = cache.clone();
            async move {
                let data = patterned(1 << 20, index as u32);
                cache
                    .block(
                        &mib_block(index),
                        1 << 20,
                        0..1,
                        Keep::Everywhere,
                        || async move { Ok::<_, FetchFailed>(data) },
                    )
                    .await
                    .unwrap();
            }
        });
        futures::future::join_all(fetches).await;
        cache.close().await.unwrap();
    }
    let mut skipped = 0;
    for op in ["buffer_overflow", "channel_overflow"] {
        let sample = format!("foyer_storage_inner_op_total_total{{name=\"portico\",op=\"{op}\"}}");
        skipped += metrics
            .render()
            .lines()
            .find_map(|line| line.strip_prefix(sample.as_str()))
            .map_or(0, |value| value.trim().parse::<u64>().unwrap());
    }
    assert_eq!(skipped, 0, "foyer dropped pieces");
    assert_eq!(metrics.disk_skipped_blocks.get(), 0);
    // Reopened, every block comes from disk, byte for byte.
    let cache = BlockCache::open(&config, metrics.clone()).await.unwrap();
    for index in 0..blocks {
        let (bytes, tier, _) = part(&cache, index, 1 << 20, 0..1 << 20).await;
        assert_eq!(tier, Tier::Disk, "block {index}");
        assert!(bytes == patterned(1 << 20, index as u32), "block {index}");
    }
}

#[tokio::test]
async fn a_one_pass_scan_through_memory_leaves_a_block_read_repeatedly_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    // Memory only: 4 MiB, 64 blocks of 64 KiB.
    let cache = open(dir.path(), ByteSize(0)).await;
    let block = |index: u64| Bytes::from(vec![index as u8; 64 * 1024]);
    let fetched = |index: u64| {
        let bytes = block(index);
        move || async move { Ok::<_, FetchFailed>(bytes) }
    };
    let hot = 0..8;
    for _ in 0..5 {
        for index in hot.clone() {
            cache.whole(index, 64 * 1024, fetched(index)).await.unwrap();
        }
    }
    // A scan of 16 times the memory tier, each block fetched (as a prefetch does) and
    // then read once.
    for index in 1000..1000 + 16 * 64 {
        cache.whole(index, 64 * 1024, fetched(index)).await.unwrap();
        cache.whole(index, 64 * 1024, fetched(index)).await.unwrap();
    }
    for index in hot {
        let (bytes, tier) = cache
            .whole(index, 64 * 1024, || async {
                Err::<Bytes, _>(FetchFailed("the hot block was evicted"))
            })
            .await
            .unwrap();
        assert_eq!((bytes, tier), (block(index), Tier::Memory), "block {index}");
    }
}
