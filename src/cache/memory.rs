//! The memory tier's shape: how many shards foyer's S3-FIFO runs, and how large its
//! small (probationary) queue is, so that a one-pass scan cannot wear down the hot set.

use foyer::S3FifoConfig;

use super::to_usize;
use crate::config::CacheConfig;

/// Hits an entry needs while in the memory tier's small (probationary) queue to move to
/// its main queue. A block of a one-pass scan is hit once (its read after the prefetch
/// that brought it); with 1, foyer's default, every scan block would enter the main
/// queue and wear down the hot set there. Entries evicted from the small queue are
/// remembered (the ghost queue) and enter the main queue directly when they return.
pub(super) const SMALL_TO_MAIN_HITS: u8 = 2;
/// Blocks S3-FIFO's small queue holds at least. foyer sizes it at 10 % of a shard's
/// memory, and it evicts from the main queue whenever the small queue is within its
/// size: with a shard of a few dozen blocks, 10 % is less than one block, every scan
/// block inserted evicted from the main queue, and a hot set there was worn down within
/// a few blocks of a scan.
const SMALL_QUEUE_MIN_BLOCKS: u64 = 4;
/// Blocks a memory shard holds at least. foyer runs one S3-FIFO per shard (8 by default,
/// for lock contention), so a shard must hold enough blocks for its queues to mean
/// anything: a 256 MiB tier of 4 MiB blocks had 8 blocks per shard.
const SHARD_MIN_BLOCKS: u64 = 32;
/// foyer's default shard count, the most used.
const MAX_MEMORY_SHARDS: u64 = 8;

/// Memory shards: foyer's 8, fewer when memory holds fewer than 8 × [`SHARD_MIN_BLOCKS`].
pub(super) fn memory_shards(config: &CacheConfig) -> usize {
    let blocks = config.memory_capacity.bytes() / config.block_size.bytes().max(1);
    to_usize((blocks / SHARD_MIN_BLOCKS).clamp(1, MAX_MEMORY_SHARDS))
}

/// The share of a shard S3-FIFO's small queue takes: foyer's 10 %, or
/// [`SMALL_QUEUE_MIN_BLOCKS`] blocks when a shard holds few, at most half.
pub(super) fn small_queue_ratio(config: &CacheConfig) -> f64 {
    let shard = config.memory_capacity.bytes().max(1) as f64 / memory_shards(config) as f64;
    let floor = (SMALL_QUEUE_MIN_BLOCKS * config.block_size.bytes()) as f64 / shard;
    floor.clamp(S3FifoConfig::default().small_queue_capacity_ratio, 0.5)
}
