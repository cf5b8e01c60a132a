//! Each read step on its own, through its own interface: the metadata step, the block
//! step and the prefetcher, over a memory source and a memory-only cache.

use std::sync::Arc;
use std::time::Duration;

use super::memory::MemorySource;
use super::{BLOCK, block_range, body, object, settings};
use crate::budget::MemoryBudget;
use crate::cache::{BlockCache, Tier};
use crate::config::{ByteSize, CacheConfig};
use crate::read::FillSlots;
use crate::read::block::{BlockParts, Blocks};
use crate::read::discovered::{Discovered, FirstRead};
use crate::read::hedge::Hedger;
use crate::read::integrity::Integrity;
use crate::read::metadata::{Metadata, MetadataParts};
use crate::read::prefetch::Prefetcher;
use crate::read::{PrefetchLimits, Target};
use crate::shutdown::Shutdown;
use crate::source::{Lease, ResponseHead};
use crate::telemetry::Metrics;
use crate::types::ByteRange;

async fn cache(metrics: &Arc<Metrics>) -> BlockCache {
    let config = CacheConfig {
        memory_capacity: ByteSize::mib(16),
        disk_capacity: ByteSize(0),
        block_size: ByteSize(BLOCK),
        ..CacheConfig::default()
    };
    BlockCache::open(&config, metrics.clone()).await.unwrap()
}

async fn metadata(source: &Arc<MemorySource>) -> Metadata {
    let metrics = Arc::new(Metrics::new());
    let integrity = Integrity::new(metrics.clone()).0;
    let cache = cache(&metrics).await;
    let streams = blocks(source, cache.clone(), &metrics).streams().clone();
    Metadata::new(MetadataParts {
        cache,
        source: source.clone(),
        fills: FillSlots::new(64, metrics.clone()),
        streams,
        metrics,
        rules: settings().rules,
        block_size: BLOCK,
        serve_stale_on_error: false,
        clustered: false,
        lease: Arc::new(Lease::alone()),
        integrity,
    })
}

/// The current version of `key` in `source`, as the metadata step learns it.
async fn target_of(source: &Arc<MemorySource>, key: &str) -> Target {
    let metadata = metadata(source).await;
    let object = object(key);
    let policy = metadata.policy(&object).clone();
    let meta = metadata
        .resolve_meta(&object, FirstRead::Head, false, &policy)
        .await
        .unwrap();
    Target::new(&object, meta, BLOCK)
}

fn blocks(source: &Arc<MemorySource>, cache: BlockCache, metrics: &Arc<Metrics>) -> Blocks {
    let hedger = Hedger::new(0.0, Duration::from_millis(50), metrics.clone());
    let integrity = Integrity::new(metrics.clone()).0;
    Blocks::new(BlockParts {
        cache,
        source: source.clone(),
        metrics: metrics.clone(),
        hedger,
        fills: FillSlots::new(64, metrics.clone()),
        fill_threads: crate::fill_threads::FillThreads::serving(),
        peers: None,
        integrity,
        verifier: None,
    })
}

#[tokio::test(start_paused = true)]
async fn the_metadata_step_answers_fresh_from_its_cache_until_an_invalidation() {
    let source = Arc::new(MemorySource::default());
    source.put("key", body(100, 1), 1);
    let metadata = metadata(&source).await;
    let key = object("key");
    let policy = metadata.policy(&key).clone();
    let first = metadata
        .resolve_meta(&key, FirstRead::Head, false, &policy)
        .await
        .unwrap();
    assert_eq!(first.etag, "\"v1\"");
    assert_eq!(source.calls().len(), 1);
    // Fresh: answered from the cache, the source is not asked.
    source.put("key", body(100, 2), 2);
    let again = metadata
        .resolve_meta(&key, FirstRead::Head, false, &policy)
        .await
        .unwrap();
    assert_eq!((again.etag.as_str(), source.calls().len()), ("\"v1\"", 1));
    // A write's invalidation: the next lookup asks the source and learns the new version.
    let generation = metadata.generation(&key);
    metadata.invalidate(&key);
    assert!(metadata.generation(&key) > generation);
    let after = metadata
        .resolve_meta(&key, FirstRead::Head, false, &policy)
        .await
        .unwrap();
    assert_eq!((after.etag.as_str(), source.calls().len()), ("\"v2\"", 2));
}

#[tokio::test(start_paused = true)]
async fn the_block_step_fetches_a_block_once_caches_it_and_shares_its_answer_latch() {
    let source = Arc::new(MemorySource::default());
    let data = body(2 * BLOCK as usize, 1);
    source.put("key", data.clone(), 1);
    let metrics = Arc::new(Metrics::new());
    let cache = cache(&metrics).await;
    let blocks = blocks(&source, cache, &metrics);
    let target = target_of(&source, "key").await;
    let key = target.key(1);
    assert!(!blocks.holds(&key, BLOCK));
    // Two lookups of one block under way hold one latch; once both end it is forgotten.
    let first = blocks.answer_latch(&key);
    let second = blocks.answer_latch(&key);
    assert!(first.latch.same(&second.latch));
    let shared = first.latch.clone();
    drop((first, second));
    let third = blocks.answer_latch(&key);
    assert!(
        !third.latch.same(&shared),
        "a later lookup starts a latch of its own"
    );
    drop(third);
    // A lookup fetches the block once, with its version, and caches it.
    let bytes = ByteRange::new(BLOCK, 2 * BLOCK - 1).unwrap();
    let budget = MemoryBudget::new(64 << 20, Duration::from_secs(1), metrics.clone());
    for tier in [Tier::Upstream, Tier::Memory] {
        let charge = budget.reserve(BLOCK).await;
        let part = blocks
            .block_or_discovered(
                &target,
                1,
                bytes,
                charge,
                &Discovered::default(),
                &ResponseHead::default(),
            )
            .await
            .unwrap();
        assert_eq!(part.tier, tier);
        assert!(part.slices.concat() == data[BLOCK as usize..]);
    }
    assert_eq!(source.gets_of("key", &block_range(1)), 1);
    assert!(blocks.holds(&key, BLOCK));
    assert!(blocks.remove(&key));
    assert!(!blocks.holds(&key, BLOCK));
}

#[tokio::test(start_paused = true)]
async fn the_prefetcher_fetches_ahead_of_a_sequential_reader_and_is_off_without_a_window() {
    let source = Arc::new(MemorySource::default());
    source.put("key", body(8 * BLOCK as usize, 1), 1);
    let metrics = Arc::new(Metrics::new());
    let blocks = blocks(&source, cache(&metrics).await, &metrics);
    let budget = MemoryBudget::new(64 << 20, Duration::from_secs(1), metrics.clone());
    let limits = PrefetchLimits {
        fetches: 4,
        blocks: 4,
    };
    let off = Prefetcher::new(
        0,
        limits,
        blocks.clone(),
        budget.clone(),
        metrics.clone(),
        Shutdown::never(),
    );
    assert!(off.is_none(), "a window of 0 blocks turns prefetch off");
    let prefetcher = Prefetcher::new(
        4,
        limits,
        blocks.clone(),
        budget,
        metrics,
        Shutdown::never(),
    )
    .expect("prefetch is on");
    let target = target_of(&source, "key").await;
    // Three reads of one block each, one after the other: the stream's second
    // continuation opens a window after the read.
    for index in 0..3 {
        let bytes = ByteRange::new(index * BLOCK, (index + 1) * BLOCK - 1).unwrap();
        prefetcher.after(&target, bytes);
    }
    // The prefetch runs in a task of its own: wait (paused clock) until it has cached.
    for _ in 0..100 {
        if blocks.holds(&target.key(3), BLOCK) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        blocks.holds(&target.key(3), BLOCK),
        "the block after the last read was prefetched: {:?}",
        source.calls()
    );
    assert_eq!(source.gets_of("key", &block_range(3)), 1);
}
