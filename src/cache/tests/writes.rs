//! Blocks that skipped the disk tier reach it later: from a memory hit, or once it has
//! room, from their kept bytes or memory.

use super::*;
use pieces::{mib_block, part, patterned, piece_config};

#[tokio::test]
async fn a_block_that_skipped_the_disk_is_written_on_its_next_memory_hit() {
    let dir = tempfile::tempdir().unwrap();
    let data = Bytes::from(vec![5u8; 64 * 1024]);
    let metrics = Arc::new(Metrics::new());
    {
        let cache = BlockCache::open(&config(dir.path(), ByteSize::mib(4)), metrics.clone())
            .await
            .unwrap();
        // Both blocks skipped the disk (as when its write queue is full); only block 0
        // is read again while in memory.
        for index in [0, 1] {
            cache.hybrid.memory().insert(
                CacheKey::Block(cache.generational(&block_key(index))),
                CacheValue::Block(data.clone()),
            );
        }
        let (bytes, tier) = cache
            .whole(0, 64 * 1024, || async {
                Err::<Bytes, _>(FetchFailed("must come from memory"))
            })
            .await
            .unwrap();
        assert_eq!((bytes, tier), (data.clone(), Tier::Memory));
        assert_eq!(metrics.disk_readmissions.get(), 1);
        // A second hit finds it on its way to the disk: no second write.
        cache
            .whole(0, 64 * 1024, || async {
                Err::<Bytes, _>(FetchFailed("must come from memory"))
            })
            .await
            .unwrap();
        assert_eq!(metrics.disk_readmissions.get(), 1);
        cache.close().await.unwrap();
    }
    block_0_is_on_disk_and_block_1_is_not(dir.path(), &data).await;
}

#[tokio::test]
async fn a_block_that_skipped_the_disk_is_written_once_it_has_room_from_its_kept_bytes_or_memory() {
    let dir = tempfile::tempdir().unwrap();
    let data = Bytes::from(vec![7u8; 64 * 1024]);
    let metrics = Arc::new(Metrics::new());
    {
        let cache = BlockCache::open(&config(dir.path(), ByteSize::mib(4)), metrics.clone())
            .await
            .unwrap();
        // Blocks 0, 1 and 2 were fetched while the disk write queue was full and skipped
        // the disk. Block 0 kept no bytes but memory still holds it; block 1's bytes were
        // kept and memory evicted it; block 2 kept no bytes and memory evicted it. None is
        // read again before the restart.
        let block = |index| cache.generational(&block_key(index));
        cache
            .hybrid
            .memory()
            .insert(CacheKey::Block(block(0)), CacheValue::Block(data.clone()));
        let kept = cache
            .missing_pieces(&block(1), &data)
            .expect("block 1's pieces");
        cache.writes.skip(&block(0), Vec::new());
        cache.writes.skip(&block(1), kept);
        cache.writes.skip(&block(2), Vec::new());
        cache.writes.drained().await;
        assert_eq!(metrics.disk_skipped_blocks.get(), 3);
        assert_eq!(metrics.disk_retried_blocks.get(), 2, "blocks 0 and 1");
        assert_eq!(metrics.disk_lost_blocks.get(), 1, "block 2");
        assert_eq!(metrics.disk_readmissions.get(), 0);
        cache.close().await.unwrap();
    }
    let cache = open(dir.path(), ByteSize::mib(4)).await;
    for index in [0, 1] {
        let (bytes, tier) = cache
            .whole(index, 64 * 1024, || async {
                Err::<Bytes, _>(FetchFailed("must come from disk"))
            })
            .await
            .unwrap();
        assert_eq!((bytes, tier), (data.clone(), Tier::Disk), "block {index}");
    }
    let (_, tier) = cache
        .whole(2, 64 * 1024, {
            let data = data.clone();
            move || async move { Ok::<_, FetchFailed>(data) }
        })
        .await
        .unwrap();
    assert_eq!(tier, Tier::Upstream, "block 2 stayed off the disk");
}

/// Reopens the cache in `dir`: block 0 (`data`) must come from disk, block 1 from a fetch.
async fn block_0_is_on_disk_and_block_1_is_not(dir: &std::path::Path, data: &Bytes) {
    let cache = open(dir, ByteSize::mib(4)).await;
    let (bytes, tier) = cache
        .whole(0, 64 * 1024, || async {
            Err::<Bytes, _>(FetchFailed("must come from disk"))
        })
        .await
        .unwrap();
    assert_eq!((bytes, tier), (data.clone(), Tier::Disk));
    let (_, tier) = cache
        .whole(1, 64 * 1024, {
            let data = data.clone();
            move || async move { Ok::<_, FetchFailed>(data) }
        })
        .await
        .unwrap();
    assert_eq!(tier, Tier::Upstream, "block 1 stayed off the disk");
}

#[tokio::test]
async fn a_memory_hit_rewrites_a_piece_the_disk_lost_when_it_reads_from_that_piece() {
    let dir = tempfile::tempdir().unwrap();
    let config = piece_config(dir.path());
    let piece = PIECE_BYTES as usize;
    let data = patterned(1 << 20, 9);
    let metrics = Arc::new(Metrics::new());
    let cache = BlockCache::open(&config, metrics.clone()).await.unwrap();
    cache.insert_block(mib_block(0), data.clone());
    cache.writes.drained().await;
    let block = cache.generational(&mib_block(0));
    // The disk lost piece 2; memory still holds the block.
    cache.hybrid.storage().delete(&cache.piece_key(&block, 2));
    assert!(
        !cache
            .hybrid
            .storage()
            .may_contains(&cache.piece_key(&block, 2))
    );
    // Hits that read from other pieces ask the disk only for the one they start in.
    for within in [0..piece, piece + 1..3 * piece, 3 * piece..4 * piece] {
        let (bytes, tier, _) = part(&cache, 0, 1 << 20, within.clone()).await;
        assert_eq!((bytes, tier), (data.slice(within), Tier::Memory));
    }
    assert_eq!(metrics.disk_readmissions.get(), 0);
    // A hit that starts in it queues the block's missing piece again.
    let (_, tier, _) = part(&cache, 0, 1 << 20, 2 * piece + 7..2 * piece + 9).await;
    assert_eq!(tier, Tier::Memory);
    assert_eq!(metrics.disk_readmissions.get(), 1);
    cache.writes.drained().await;
    assert!(
        cache
            .hybrid
            .storage()
            .may_contains(&cache.piece_key(&block, 2))
    );
    // With the block gone from memory, the disk answers over the rewritten piece.
    cache.hybrid.memory().remove(&CacheKey::Block(block));
    let within = piece..3 * piece + 1;
    let (bytes, tier, _) = part(&cache, 0, 1 << 20, within.clone()).await;
    assert_eq!((bytes, tier), (data.slice(within), Tier::Disk));
}
