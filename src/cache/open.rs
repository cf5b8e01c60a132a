//! Opening the cache: the memory tier as `[cache]` sizes and tunes it and, with a disk
//! tier, the data file under its recorded layout (`disk.rs`), foyer's block engine sized
//! by `layout.rs`, the write queue that feeds it and the disk probe.

use std::sync::Arc;

use foyer::{
    BlockEngineConfig, DeviceBuilder, FileDeviceBuilder, HybridCacheBuilder, HybridCachePolicy,
    PsyncIoEngineConfig, RecoverMode, S3FifoConfig,
};

use super::device::{DiskHealth, PROBE_FILE, supports_direct_io};
use super::disk::{self, DiskFilesError, DiskFormat};
use super::doorkeeper::{Doorkeeper, doorkeeper_slots};
use super::layout::{self, DiskLayout};
use super::memory::{SMALL_TO_MAIN_HITS, memory_shards, small_queue_ratio};
use super::writer::WriteQueue;
use super::{BlockCache, BlockKey, CacheError, kept, key, purges, to_usize};
use crate::buffers::{BlockBuffers, spare_bytes};
use crate::config::CacheConfig;
use crate::telemetry::Metrics;

impl BlockCache {
    /// Opens the cache; with a disk tier, previously written entries are recovered and
    /// the disk is probed every [`DISK_PROBE_INTERVAL`](super::DISK_PROBE_INTERVAL) while
    /// the cache is open.
    pub async fn open(config: &CacheConfig, metrics: Arc<Metrics>) -> Result<Self, CacheError> {
        let health = Arc::new(DiskHealth::new(metrics.clone()));
        let buffers = BlockBuffers::new(
            to_usize(config.block_size.bytes()),
            spare_bytes(config.memory_capacity.bytes()),
        );
        let memory = HybridCacheBuilder::new()
            .with_name("portico")
            .with_metrics_registry(metrics.foyer_registry())
            .with_policy(HybridCachePolicy::WriteOnInsertion)
            // Entries reach the disk at insertion; flushing the memory tier again on
            // close would only rewrite them.
            .with_flush_on_close(false)
            .memory(to_usize(config.memory_capacity.bytes()))
            .with_shards(memory_shards(config))
            .with_eviction_config(S3FifoConfig {
                small_to_main_freq_threshold: SMALL_TO_MAIN_HITS,
                small_queue_capacity_ratio: small_queue_ratio(config),
                ..S3FifoConfig::default()
            })
            .with_weighter(key::memory_weight);
        let mut storage = memory.storage();
        if config.disk_capacity.bytes() > 0 {
            let open_error = |cause| CacheError::Open {
                dir: config.dir.display().to_string(),
                cause,
            };
            let layout = DiskLayout::new(config.block_size.bytes(), config.disk_capacity.bytes());
            let format = DiskFormat::new(config.block_size.bytes(), config.disk_capacity.bytes());
            let prepared = disk::prepare(&config.dir, &format, config.disk_preallocate)?;
            if let Some(reason) = &prepared.reset {
                tracing::info!(dir = %config.dir.display(), %reason, "the disk tier starts empty");
            }
            let direct = config.direct_io
                && supports_direct_io(&config.dir)
                    .map_err(|error| open_error(foyer::Error::io_error(error)))?;
            let device = quiet_stdout(|| {
                FileDeviceBuilder::new(&prepared.data_file)
                    .with_direct(direct)
                    .with_capacity(to_usize(config.disk_capacity.bytes()))
                    .build()
            })
            .map_err(open_error)?;
            let engine = BlockEngineConfig::new(device)
                .with_block_size(to_usize(layout.engine_block_bytes))
                .with_flushers(layout::DISK_FLUSHERS)
                .with_buffer_pool_size(
                    to_usize(layout.flusher_buffer_bytes) * layout::DISK_FLUSHERS,
                )
                .with_submit_queue_size_threshold(to_usize(layout.submit_queue_bytes));
            storage = storage
                .with_io_engine_config(PsyncIoEngineConfig::new())
                .with_engine_config(engine)
                .with_recover_mode(RecoverMode::Quiet);
            let hybrid = storage.build().await.map_err(open_error)?;
            let purges = purges::Purges::open(&config.dir)
                .map_err(|source| DiskFilesError::dir(&config.dir, source))?;
            let writes = Arc::new(WriteQueue::new(
                to_usize(layout.submit_queue_bytes),
                to_usize(layout.flusher_buffer_bytes),
                metrics.clone(),
            ));
            let writing = {
                let health = health.clone();
                move || !health.is_degraded()
            };
            let cache = Self {
                hybrid,
                health,
                disk_capacity_bytes: config.disk_capacity.bytes(),
                purges: Arc::new(purges),
                piece_bytes: to_usize(format.piece_bytes),
                doorkeeper: Arc::new(Doorkeeper::new(doorkeeper_slots(config))),
                writes,
                buffers,
                closed: kept::Closed::default(),
                fetching: Arc::default(),
                metrics,
            };
            cache.keep_buffers(config.memory_pretouch);
            let retry = {
                let cache = cache.clone();
                move |block: &BlockKey, kept| cache.skipped_pieces(block, kept)
            };
            tokio::spawn(
                cache
                    .writes
                    .clone()
                    .run(cache.hybrid.clone(), writing, retry),
            );
            cache.spawn_disk_probe(config.dir.join(PROBE_FILE));
            return Ok(cache);
        }
        let hybrid = storage.build().await.map_err(|cause| CacheError::Open {
            dir: "(memory only)".to_owned(),
            cause,
        })?;
        let cache = Self {
            hybrid,
            health,
            disk_capacity_bytes: 0,
            purges: Arc::new(purges::Purges::in_memory()),
            piece_bytes: to_usize(layout::piece_bytes(config.block_size.bytes())),
            doorkeeper: Arc::new(Doorkeeper::new(1)),
            writes: Arc::new(WriteQueue::new(0, 0, metrics.clone())),
            buffers,
            closed: kept::Closed::default(),
            fetching: Arc::default(),
            metrics,
        };
        cache.keep_buffers(config.memory_pretouch);
        Ok(cache)
    }
}

/// Runs `build` with the process's standard output pointed at `/dev/null`.
///
/// foyer 0.22's `FileDeviceBuilder::build` prints the device's capacity to stdout with a
/// leftover `println!`. Portico's stdout carries exactly one machine-readable line (the
/// listening addresses, printed after the cache is open), and logs go to stderr, so
/// nothing of Portico's is lost while the device is built. If stdout cannot be
/// redirected, `build` runs anyway.
fn quiet_stdout<T>(build: impl FnOnce() -> T) -> T {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let saved = rustix::io::fcntl_dupfd_cloexec(rustix::stdio::stdout(), 0).ok();
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .ok();
    let redirected = match (&saved, &null) {
        (Some(_), Some(null)) => rustix::stdio::dup2_stdout(null).is_ok(),
        _ => false,
    };
    let result = build();
    if redirected && let Some(saved) = &saved {
        let _ = std::io::stdout().flush();
        let _ = rustix::stdio::dup2_stdout(saved);
    }
    result
}
