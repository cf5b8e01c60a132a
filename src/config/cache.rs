//! `[cache]` (the tiers, blocks and metadata TTLs) and `[prefetch]`.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ByteSize, ConfigError, HumanDuration, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE, MetadataTtl};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Directory of the disk tier.
    pub dir: PathBuf,
    pub memory_capacity: ByteSize,
    /// Touch the memory tier's pages at start, in the background, and keep freed block
    /// buffers for the next fills: no fill pays for faulting in and zeroing fresh memory
    /// (the process holds the tier's capacity from the start).
    pub memory_pretouch: bool,
    /// Disk tier capacity; `0` runs memory-only.
    pub disk_capacity: ByteSize,
    /// Read and write the disk tier with `O_DIRECT`, past the kernel's page cache (which
    /// would hold a second copy of what the memory tier caches); buffered I/O where the
    /// file system refuses it.
    pub direct_io: bool,
    /// Reserve the disk tier's whole capacity on its file system at start
    /// (`fallocate`), so that nothing else filling the file system can take the room the
    /// tier will write into.
    pub disk_preallocate: bool,
    /// Size of the cached range blocks, and of every upstream block fetch.
    pub block_size: ByteSize,
    /// How long object metadata is trusted; `0s` revalidates every request, `immutable` never.
    pub metadata_ttl: MetadataTtl,
    /// How long a 404 from the upstream is remembered per key; `0s` disables it.
    pub negative_ttl: HumanDuration,
    /// Blocks fetched ahead of what a client has consumed within one GET.
    pub readahead_blocks: u32,
    /// Cache the bytes of PutObject uploads under the new version as they pass through
    /// (objects up to a quarter of `memory_capacity`).
    pub write_through: bool,
    /// When metadata is past its TTL and the upstream cannot be reached (or answers 5xx),
    /// keep serving the last known version from the cache instead of failing.
    pub serve_stale_on_error: bool,
    /// The share of cache hits re-checked against the origin in the background (verify
    /// mode); 0 turns it off.
    pub verify_fraction: f64,
    /// Verify-mode checks started per second at most; hits sampled beyond it are skipped.
    pub verify_max_per_second: u32,
    /// Ask the origin once (GetObjectAttributes) for the checksums of an object whose
    /// fills did not report them, so that objects read only by ranges or plain GETs, and
    /// multipart ones part by part, are checked too.
    pub learn_checksums: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("/var/cache/portico"),
            memory_capacity: ByteSize::gib(1),
            memory_pretouch: true,
            disk_capacity: ByteSize::gib(10),
            direct_io: true,
            disk_preallocate: true,
            block_size: ByteSize::mib(4),
            metadata_ttl: MetadataTtl::After(Duration::from_secs(60)),
            negative_ttl: HumanDuration::secs(5),
            readahead_blocks: 4,
            write_through: false,
            serve_stale_on_error: true,
            verify_fraction: 0.0,
            verify_max_per_second: 10,
            learn_checksums: true,
        }
    }
}

impl CacheConfig {
    /// The smallest disk tier that holds enough blocks for the disk engine to rotate.
    pub fn min_disk_capacity(&self) -> ByteSize {
        ByteSize(self.block_size.bytes() * 32)
    }

    /// The smallest memory tier that holds the blocks of a few requests at once.
    pub fn min_memory_capacity(&self) -> ByteSize {
        ByteSize(self.block_size.bytes() * 4)
    }

    /// The block size, the tiers' capacities against it, and readahead.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let cache = self;
        let block = cache.block_size.bytes();
        if !(MIN_BLOCK_SIZE.bytes()..=MAX_BLOCK_SIZE.bytes()).contains(&block)
            || !block.is_multiple_of(MIN_BLOCK_SIZE.bytes())
        {
            return Err(ConfigError::not_accepted(
                "cache.block_size",
                cache.block_size,
                format_args!(
                    "a multiple of 64KiB from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE}, e.g. 4MiB"
                ),
            ));
        }
        if cache.memory_capacity < cache.min_memory_capacity() {
            return Err(ConfigError::too_small(
                "cache.memory_capacity",
                cache.memory_capacity,
                format_args!(
                    "at least 4 × cache.block_size = {}",
                    cache.min_memory_capacity()
                ),
            ));
        }
        if cache.disk_capacity.bytes() != 0 && cache.disk_capacity < cache.min_disk_capacity() {
            return Err(ConfigError::too_small(
                "cache.disk_capacity",
                cache.disk_capacity,
                format_args!(
                    "0 for memory-only, or at least 32 × cache.block_size = {}",
                    cache.min_disk_capacity()
                ),
            ));
        }
        if cache.disk_capacity.bytes() != 0 && cache.dir.as_os_str().is_empty() {
            return Err(ConfigError::must_be_set_when(
                "cache.dir",
                "cache.disk_capacity is not 0",
                None,
            ));
        }
        if !(0.0..=1.0).contains(&cache.verify_fraction) {
            return Err(ConfigError::not_accepted(
                "cache.verify_fraction",
                cache.verify_fraction,
                "0 to 1, e.g. 0.001; 0 turns verify mode off",
            ));
        }
        if !(1..=10_000).contains(&cache.verify_max_per_second) {
            return Err(ConfigError::not_accepted(
                "cache.verify_max_per_second",
                cache.verify_max_per_second,
                "1 to 10000",
            ));
        }
        if !(1..=64).contains(&cache.readahead_blocks) {
            return Err(ConfigError::not_accepted(
                "cache.readahead_blocks",
                cache.readahead_blocks,
                "1 to 64",
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrefetchConfig {
    /// Fetch the blocks after a client's sequential reads before it asks for them.
    pub enabled: bool,
    /// Largest prefetch window, in blocks; it doubles per sequential read from 1.
    pub max_window_blocks: u32,
    /// Prefetched bytes in flight at most; beyond this, prefetches are skipped.
    pub max_inflight_bytes: ByteSize,
    /// Prefetch fetches in flight at most (demand fetches are never limited by this).
    pub max_concurrent_fetches: u32,
}

impl Default for PrefetchConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_window_blocks: 16,
            max_inflight_bytes: ByteSize::mib(256),
            max_concurrent_fetches: 8,
        }
    }
}

impl PrefetchConfig {
    /// The prefetch keys' ranges.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=256).contains(&self.max_window_blocks) {
            return Err(ConfigError::not_accepted(
                "prefetch.max_window_blocks",
                self.max_window_blocks,
                "1 to 256",
            ));
        }
        if self.max_concurrent_fetches == 0 {
            return Err(ConfigError::must_be_at_least(
                "prefetch.max_concurrent_fetches",
                1,
                Some("set prefetch.enabled = false to turn prefetch off"),
            ));
        }
        Ok(())
    }
}
