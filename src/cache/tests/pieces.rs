//! Blocks stored as pieces on disk: ranges read from the pieces they overlap, pieces
//! admitted to memory on their second read, missing pieces rewritten.

use super::*;

/// A cache of 1 MiB blocks (four pieces each) with a disk tier.
pub(super) fn piece_config(dir: &std::path::Path) -> CacheConfig {
    CacheConfig {
        block_size: ByteSize::mib(1),
        memory_capacity: ByteSize::mib(4),
        disk_capacity: ByteSize::mib(32),
        ..config(dir, ByteSize(0))
    }
}

pub(super) fn mib_block(index: u64) -> BlockKey {
    BlockKey::new(
        &ObjectRef::new("bucket", "pieces").unwrap(),
        "\"etag\"".into(),
        1 << 20,
        index,
    )
}

/// Bytes no two offsets of which repeat within a block.
pub(super) fn patterned(len: usize, seed: u32) -> Bytes {
    (0..len as u32)
        .flat_map(|word| (word.wrapping_mul(2_654_435_761) ^ seed).to_le_bytes())
        .take(len)
        .collect::<Vec<u8>>()
        .into()
}

pub(super) async fn part(
    cache: &BlockCache,
    index: u64,
    len: usize,
    within: Range<usize>,
) -> (Bytes, Tier, usize) {
    let found = cache
        .block(&mib_block(index), len, within, Keep::Everywhere, || async {
            Err::<Bytes, _>(FetchFailed("must come from the cache"))
        })
        .await
        .unwrap();
    let count = found.slices.len();
    (found.slices.concat().into(), found.tier, count)
}

/// A cache opened with `config` after `blocks` were inserted and it was closed, with
/// fresh metrics.
pub(super) async fn reopened_with(
    config: &CacheConfig,
    blocks: &[(u64, Bytes)],
) -> (BlockCache, Arc<Metrics>) {
    {
        let cache = BlockCache::open(config, Arc::new(Metrics::new()))
            .await
            .unwrap();
        for (index, data) in blocks {
            cache.insert_block(mib_block(*index), data.clone());
        }
        cache.close().await.unwrap();
    }
    let metrics = Arc::new(Metrics::new());
    let cache = BlockCache::open(config, metrics.clone()).await.unwrap();
    (cache, metrics)
}

/// A cache opened with `config` whose block 0, `data`, is on its disk tier and not in
/// memory.
async fn on_disk_only(config: &CacheConfig, data: &Bytes) -> BlockCache {
    let cache = BlockCache::open(config, Arc::new(Metrics::new()))
        .await
        .unwrap();
    cache.insert_block(mib_block(0), data.clone());
    cache.writes.drained().await;
    cache
        .hybrid
        .memory()
        .remove(&CacheKey::Block(cache.generational(&mib_block(0))));
    cache
}

#[tokio::test]
async fn a_range_is_read_from_the_pieces_it_overlaps_byte_exact_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = piece_config(dir.path());
    let piece = PIECE_BYTES as usize;
    // A whole block and a short last block (two and a half pieces).
    let full = patterned(1 << 20, 1);
    let short_len = 2 * piece + piece / 2;
    let short = patterned(short_len, 2);
    let (cache, _) = reopened_with(&config, &[(0, full.clone()), (1, short.clone())]).await;
    assert!(cache.holds(&mib_block(0), 1 << 20));
    assert!(cache.holds(&mib_block(1), short_len));
    let edges = [
        0..1,
        0..piece,
        piece - 1..piece + 1,
        piece..2 * piece,
        1..(1 << 20) - 1,
        3 * piece + 17..4 * piece,
        (1 << 20) - 1..1 << 20,
        0..1 << 20,
    ];
    for within in edges {
        let read_before = cache.usage().disk_read_bytes;
        let (bytes, tier, parts) = part(&cache, 0, 1 << 20, within.clone()).await;
        assert_eq!(bytes, full.slice(within.clone()), "bytes {within:?}");
        let pieces = (within.end - 1) / piece - within.start / piece + 1;
        assert_eq!(parts, pieces, "one slice per piece for {within:?}");
        if tier == Tier::Disk {
            // Only the overlapped pieces are read (each with its header and alignment).
            let read = cache.usage().disk_read_bytes - read_before;
            assert!(
                read as usize <= pieces * (piece + 8192),
                "{read} bytes read from disk for {within:?}"
            );
        }
    }
    for within in [0..short_len, piece + 5..short_len, short_len - 1..short_len] {
        let (bytes, _, _) = part(&cache, 1, short_len, within.clone()).await;
        assert_eq!(bytes, short.slice(within.clone()), "short block {within:?}");
    }
    // A range outside the block is an error, never a panic.
    let error = cache
        .block(
            &mib_block(0),
            1 << 20,
            10..(1 << 20) + 1,
            Keep::Everywhere,
            || async { Err::<Bytes, _>(FetchFailed("must not run")) },
        )
        .await
        .unwrap_err();
    assert!(matches!(
        error,
        LookupError::Cache(CacheError::OutsideBlock { .. })
    ));
}

#[tokio::test]
async fn a_piece_read_from_disk_twice_is_kept_in_memory_and_once_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let config = piece_config(dir.path());
    let piece = PIECE_BYTES as usize;
    let data = patterned(1 << 20, 3);
    let (cache, metrics) = reopened_with(&config, &[(0, data.clone())]).await;
    let first = part(&cache, 0, 1 << 20, 10..20).await;
    assert_eq!((first.0, first.1), (data.slice(10..20), Tier::Disk));
    assert_eq!(
        metrics.memory_admissions.get(),
        0,
        "read once: not admitted"
    );
    let second = part(&cache, 0, 1 << 20, 30..40).await;
    assert_eq!((second.0, second.1), (data.slice(30..40), Tier::Disk));
    assert_eq!(metrics.memory_admissions.get(), 1, "read twice: admitted");
    let read_before = cache.usage().disk_read_bytes;
    let third = part(&cache, 0, 1 << 20, 50..piece).await;
    assert_eq!((third.0, third.1), (data.slice(50..piece), Tier::Memory));
    assert_eq!(cache.usage().disk_read_bytes, read_before);
    // A range over a piece in memory and one on disk is a disk read of the latter,
    // with the bytes memory held counted apart.
    let mixed = part(&cache, 0, 1 << 20, piece - 3..piece + 3).await;
    assert_eq!(
        (mixed.0, mixed.1),
        (data.slice(piece - 3..piece + 3), Tier::Disk)
    );
    let found = cache
        .block(
            &mib_block(0),
            1 << 20,
            piece - 3..piece + 5,
            Keep::Everywhere,
            || async { Err::<Bytes, _>(FetchFailed("must come from the cache")) },
        )
        .await
        .unwrap();
    assert_eq!(
        (found.tier, found.memory_bytes, found.total_bytes()),
        (Tier::Disk, 3, 8)
    );
}

#[tokio::test]
async fn a_block_missing_a_piece_is_fetched_whole_and_its_pieces_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let config = piece_config(dir.path());
    let piece = PIECE_BYTES as usize;
    let data = patterned(1 << 20, 4);
    let cache = on_disk_only(&config, &data).await;
    cache
        .hybrid
        .remove(&cache.piece_key(&cache.generational(&mib_block(0)), 2));
    assert!(!cache.holds(&mib_block(0), 1 << 20));
    // The pieces still held answer a range within them.
    assert_eq!(part(&cache, 0, 1 << 20, 0..piece).await.1, Tier::Disk);
    // A range over the missing piece fetches the whole block, once.
    let fetches = Arc::new(AtomicUsize::new(0));
    let counted = fetches.clone();
    let source = data.clone();
    let found = cache
        .block(
            &mib_block(0),
            1 << 20,
            piece..3 * piece,
            Keep::Everywhere,
            move || async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<_, FetchFailed>(source)
            },
        )
        .await
        .unwrap();
    assert_eq!(found.tier, Tier::Upstream);
    assert_eq!(
        Bytes::from(found.slices.concat()),
        data.slice(piece..3 * piece)
    );
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    assert!(cache.holds(&mib_block(0), 1 << 20));
    // Its pieces are on disk again: with the block gone from memory, they answer.
    cache.close().await.unwrap();
    let cache = BlockCache::open(&config, Arc::new(Metrics::new()))
        .await
        .unwrap();
    let (bytes, tier, _) = part(&cache, 0, 1 << 20, 2 * piece - 1..2 * piece + 1).await;
    assert_eq!(
        (bytes, tier),
        (data.slice(2 * piece - 1..2 * piece + 1), Tier::Disk)
    );
    // Removing the block removes its pieces.
    assert!(cache.remove_block(&mib_block(0)));
    assert!(!cache.holds(&mib_block(0), 1 << 20));
}

#[tokio::test]
async fn a_buffered_disk_tier_reads_pieces_exactly_from_the_page_cache_and_past_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = CacheConfig {
        direct_io: false,
        ..piece_config(dir.path())
    };
    let piece = PIECE_BYTES as usize;
    let data = patterned(1 << 20, 11);
    let cache = on_disk_only(&config, &data).await;
    // Just written: the page cache holds the pieces, and they are read from it.
    let within = 10..2 * piece - 10;
    let (bytes, tier, _) = part(&cache, 0, 1 << 20, within.clone()).await;
    assert_eq!((bytes, tier), (data.slice(within), Tier::Disk));
    // Out of the page cache (where the file system drops pages on request), they are read
    // from the device.
    let file = std::fs::File::open(dir.path().join(super::super::disk::DATA_FILE)).unwrap();
    file.sync_all().unwrap();
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    let within = 2 * piece + 10..4 * piece - 10;
    let (bytes, tier, _) = part(&cache, 0, 1 << 20, within.clone()).await;
    assert_eq!((bytes, tier), (data.slice(within), Tier::Disk));
}
