//! The hybrid block cache: fixed-size object blocks and object metadata in a foyer
//! `HybridCache` (memory tier + a disk tier in `cache.dir`).
//!
//! Invariants:
//! - Concurrent misses for one block run one fetch; every waiter gets its bytes or its error.
//! - Every block fits one foyer disk entry: the disk engine's block size is derived from
//!   `cache.block_size` (foyer silently skips entries larger than its block).
//! - Entries are written to disk on insertion, through foyer's bounded submit queue: when
//!   the disk falls behind, entries skip the disk tier (counted by foyer's
//!   `storage_queue_channel_overflow` metric) instead of piling up in memory.
//! - Disk I/O errors that persist turn the disk tier off for good: after
//!   [`DISK_FAILURES_BEFORE_DEGRADED`] failed disk reads in a row, or as many failed
//!   write-and-read-backs of the probe file in a row (probed every [`DISK_PROBE_INTERVAL`],
//!   and again after 1 s, 2 s, 4 s … once something failed), the cache carries on
//!   memory-only ("degraded") until a restart, and says so once in the log, in
//!   `portico_cache_degraded` and on `/readyz`. One transient error only costs the read
//!   it failed (answered by a fetch).

mod codec;
mod disk;
mod key;
mod meta;
mod purges;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use foyer::{
    BlockEngineConfig, DeviceBuilder, FileDeviceBuilder, HybridCache, HybridCacheBuilder,
    HybridCachePolicy, HybridCacheProperties, Location, PsyncIoEngineConfig, RecoverMode,
    S3FifoConfig, Source,
};
use parking_lot::Mutex;

pub use disk::{DiskFilesError, DiskFormat, DiskLayout, raise_open_file_limit};
pub use key::{BlockKey, CacheKey, CacheValue};
pub use meta::{Checksums, MetaClock, MetaRecord, MetaState, Missing, ObjectMeta};

use crate::config::CacheConfig;
use crate::telemetry::Metrics;
use crate::types::ObjectRef;

/// How often the disk tier's directory is checked with a probe write and read-back.
pub const DISK_PROBE_INTERVAL: Duration = Duration::from_secs(10);
/// Failed disk reads in a row, or failed probes in a row, that turn the disk tier off.
pub const DISK_FAILURES_BEFORE_DEGRADED: u32 = 3;
/// The first re-probe after a failure; each later one waits twice as long, up to
/// [`DISK_PROBE_INTERVAL`].
const DISK_RETRY_BACKOFF: Duration = Duration::from_secs(1);
/// The probe file, next to foyer's own files in `cache.dir`.
const PROBE_FILE: &str = "portico-disk-probe";
/// Created and removed at start to learn whether the disk tier's file system takes
/// `O_DIRECT`.
const DIRECT_PROBE_FILE: &str = "portico-direct-io-probe";

/// Whether the file system under `dir` (created if missing) accepts `O_DIRECT`. Some do
/// not (tmpfs before Linux 6.6, some network file systems); then the disk tier uses
/// buffered I/O and says so.
fn supports_direct_io(dir: &Path) -> std::io::Result<bool> {
    use rustix::fs::{Mode, OFlags};
    std::fs::create_dir_all(dir)?;
    let path = dir.join(DIRECT_PROBE_FILE);
    let flags = OFlags::CREATE | OFlags::WRONLY | OFlags::DIRECT | OFlags::CLOEXEC;
    let opened = rustix::fs::open(&path, flags, Mode::from_raw_mode(0o600));
    let _ = std::fs::remove_file(&path);
    let direct = direct_io_from_probe(opened.map(drop))?;
    if !direct {
        tracing::warn!(dir = %dir.display(), "the file system refuses direct I/O (O_DIRECT); the disk tier uses buffered I/O");
    }
    Ok(direct)
}

/// What opening a file with `O_DIRECT` says: `EINVAL` is the file system refusing the
/// flag; any other error is a directory Portico cannot use at all.
fn direct_io_from_probe(opened: rustix::io::Result<()>) -> std::io::Result<bool> {
    match opened {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::INVAL) => Ok(false),
        Err(error) => Err(error.into()),
    }
}

/// Where a block came from, for metrics and the access path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Memory,
    Disk,
    /// This request fetched it from the upstream.
    Upstream,
    /// Another request was already fetching it; this one waited for that fetch.
    Coalesced,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Disk => "disk",
            Self::Upstream => "upstream",
            Self::Coalesced => "coalesced",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// foyer's error prints its own causes, so it is not exposed as this error's source
    /// (a chain printer would repeat them).
    #[error("cannot open the disk cache in {dir} (config key cache.dir): {cause}")]
    Open { dir: String, cause: foyer::Error },
    #[error(transparent)]
    Files(#[from] DiskFilesError),
    #[error("cache lookup failed: {0}")]
    Lookup(foyer::Error),
    #[error("cache held a value of the wrong kind for a {0} key")]
    WrongKind(&'static str),
}

/// A failed block lookup: the fetch's own error, or the cache's.
#[derive(Debug)]
pub enum LookupError<E> {
    Fetch(E),
    Cache(CacheError),
}

fn to_usize(bytes: u64) -> usize {
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// Whether the disk tier is in use, and why not.
struct DiskHealth {
    degraded: AtomicBool,
    reason: Mutex<Option<String>>,
    metrics: Arc<Metrics>,
    /// Failed reads since the last successful one.
    failed_reads: AtomicU32,
    /// Failed probes since the last successful one.
    failed_probes: AtomicU32,
    /// Wakes the probe early after a failed read.
    probe_now: tokio::sync::Notify,
}

impl DiskHealth {
    fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            degraded: AtomicBool::new(false),
            reason: Mutex::new(None),
            metrics,
            failed_reads: AtomicU32::new(0),
            failed_probes: AtomicU32::new(0),
            probe_now: tokio::sync::Notify::new(),
        }
    }

    /// Records a disk I/O error; the tier turns off once errors of the same kind persist.
    fn failed(&self, operation: &'static str, error: &dyn std::fmt::Display) {
        self.metrics.count_disk_error(operation);
        let in_a_row = match operation {
            "read" => &self.failed_reads,
            _ => &self.failed_probes,
        };
        let failures = in_a_row.fetch_add(1, Ordering::AcqRel) + 1;
        if failures < DISK_FAILURES_BEFORE_DEGRADED {
            tracing::warn!(operation, failures, %error, "disk I/O error; the disk tier stays on unless it persists");
            self.probe_now.notify_one();
            return;
        }
        if self.degraded.swap(true, Ordering::AcqRel) {
            return;
        }
        let reason = format!("disk {operation} failed: {error}");
        tracing::error!(%reason, failures, "disk tier turned off after persistent I/O errors; the cache runs memory-only (degraded) until restarted");
        self.metrics.cache_degraded.set(1);
        *self.reason.lock() = Some(reason);
    }

    fn read_succeeded(&self) {
        if self.failed_reads.load(Ordering::Relaxed) != 0 {
            self.failed_reads.store(0, Ordering::Release);
        }
    }

    fn probe_succeeded(&self) {
        self.failed_probes.store(0, Ordering::Release);
    }

    /// How long the probe waits before its next round: the interval while all is well,
    /// a doubling back-off from [`DISK_RETRY_BACKOFF`] while failures are unresolved.
    fn next_probe_after(&self) -> Duration {
        let failures = self
            .failed_probes
            .load(Ordering::Acquire)
            .max(self.failed_reads.load(Ordering::Acquire));
        if failures == 0 {
            return DISK_PROBE_INTERVAL;
        }
        DISK_RETRY_BACKOFF
            .saturating_mul(1 << (failures - 1).min(8))
            .min(DISK_PROBE_INTERVAL)
    }
}

/// The block and metadata cache. Cheap to clone.
#[derive(Clone)]
pub struct BlockCache {
    hybrid: HybridCache<CacheKey, CacheValue>,
    health: Arc<DiskHealth>,
    disk_capacity_bytes: u64,
    purges: Arc<purges::Purges>,
}

/// How full the tiers are. The disk tier is a ring that fills up to its capacity and then
/// reclaims its oldest regions, so its traffic is reported rather than a fill level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheUsage {
    pub memory_capacity_bytes: u64,
    pub memory_used_bytes: u64,
    /// 0 for a memory-only cache.
    pub disk_capacity_bytes: u64,
    pub disk_written_bytes: u64,
    pub disk_read_bytes: u64,
}

impl BlockCache {
    /// Opens the cache; with a disk tier, previously written entries are recovered and
    /// the disk is probed every [`DISK_PROBE_INTERVAL`] while the cache is open.
    pub async fn open(config: &CacheConfig, metrics: Arc<Metrics>) -> Result<Self, CacheError> {
        let health = Arc::new(DiskHealth::new(metrics.clone()));
        let memory = HybridCacheBuilder::new()
            .with_name("portico")
            .with_metrics_registry(metrics.foyer_registry())
            .with_policy(HybridCachePolicy::WriteOnInsertion)
            // Entries reach the disk at insertion; flushing the memory tier again on
            // close would only rewrite them.
            .with_flush_on_close(false)
            .memory(to_usize(config.memory_capacity.bytes()))
            .with_eviction_config(S3FifoConfig::default())
            .with_weighter(key::memory_weight);
        let mut storage = memory.storage();
        if config.disk_capacity.bytes() > 0 {
            let open_error = |cause| CacheError::Open {
                dir: config.dir.display().to_string(),
                cause,
            };
            let layout = DiskLayout::new(config.block_size.bytes(), config.disk_capacity.bytes());
            let format = DiskFormat::new(config.block_size.bytes(), config.disk_capacity.bytes());
            let prepared = disk::prepare(&config.dir, &format)?;
            if let Some(reason) = &prepared.reset {
                tracing::info!(dir = %config.dir.display(), %reason, "the disk tier starts empty");
            }
            let direct = config.direct_io
                && supports_direct_io(&config.dir)
                    .map_err(|error| open_error(foyer::Error::io_error(error)))?;
            let device = disk::quiet_stdout(|| {
                FileDeviceBuilder::new(&prepared.data_file)
                    .with_direct(direct)
                    .with_capacity(to_usize(config.disk_capacity.bytes()))
                    .build()
            })
            .map_err(open_error)?;
            let engine = BlockEngineConfig::new(device)
                .with_block_size(to_usize(layout.engine_block_bytes))
                .with_flushers(disk::DISK_FLUSHERS)
                .with_buffer_pool_size(to_usize(layout.flusher_buffer_bytes) * disk::DISK_FLUSHERS)
                .with_submit_queue_size_threshold(to_usize(layout.submit_queue_bytes));
            storage = storage
                .with_io_engine_config(PsyncIoEngineConfig::new())
                .with_engine_config(engine)
                .with_recover_mode(RecoverMode::Quiet);
            let hybrid = storage.build().await.map_err(open_error)?;
            let purges = purges::Purges::open(&config.dir)
                .map_err(|source| DiskFilesError::dir(&config.dir, source))?;
            let cache = Self {
                hybrid,
                health,
                disk_capacity_bytes: config.disk_capacity.bytes(),
                purges: Arc::new(purges),
            };
            cache.spawn_disk_probe(config.dir.join(PROBE_FILE));
            return Ok(cache);
        }
        let hybrid = storage.build().await.map_err(|cause| CacheError::Open {
            dir: "(memory only)".to_owned(),
            cause,
        })?;
        Ok(Self {
            hybrid,
            health,
            disk_capacity_bytes: 0,
            purges: Arc::new(purges::Purges::in_memory()),
        })
    }

    /// Whether the cache was opened with a disk tier (even if it has since failed).
    pub fn has_disk_tier(&self) -> bool {
        self.hybrid.is_hybrid()
    }

    /// Why the disk tier was turned off, once it has been.
    pub fn degraded(&self) -> Option<String> {
        self.health.reason.lock().clone()
    }

    fn disk_in_use(&self) -> bool {
        self.hybrid.is_hybrid() && !self.health.degraded.load(Ordering::Acquire)
    }

    /// Writes, syncs and reads back a small file in the cache directory every
    /// [`DISK_PROBE_INTERVAL`], so a disk that fails writes (full, read-only, I/O errors)
    /// turns the tier off even while every read hits memory. Stops with the cache.
    fn spawn_disk_probe(&self, path: PathBuf) {
        let weak = Arc::downgrade(&self.health);
        tokio::spawn(async move {
            let mut round: u64 = 0;
            loop {
                // Held for one round only: the task ends once the cache is gone.
                let Some(health) = weak.upgrade() else {
                    return;
                };
                // A failed read brings the probe forward to the back-off.
                tokio::select! {
                    () = tokio::time::sleep(health.next_probe_after()) => {}
                    () = health.probe_now.notified() => {
                        tokio::time::sleep(health.next_probe_after()).await;
                    }
                }
                if health.degraded.load(Ordering::Acquire) {
                    return;
                }
                round += 1;
                let path = path.clone();
                let probe = tokio::task::spawn_blocking(move || probe_disk(&path, round)).await;
                match probe {
                    Ok(Ok(())) => health.probe_succeeded(),
                    Ok(Err(error)) => health.failed("write", &error),
                    Err(error) => health.failed("write", &error),
                }
            }
        });
    }

    /// The cache key of a block: `key` under its object's purge generation.
    fn block_key(&self, key: &BlockKey) -> CacheKey {
        let mut key = key.clone();
        key.generation = self.purges.generation(key.object());
        CacheKey::Block(key)
    }

    /// The cache key of an object's metadata, under its purge generation.
    fn meta_key(&self, object: &ObjectRef) -> CacheKey {
        CacheKey::Meta(object.clone(), self.purges.generation(object))
    }

    /// Makes everything cached of `object` (every version, both tiers) unreachable for
    /// good: its purge generation is raised and journaled before this returns.
    pub fn purge(&self, object: &ObjectRef) -> Result<(), CacheError> {
        // Only the journal's write can fail, so there is a path.
        let journal = self.purges.path().unwrap_or(Path::new(""));
        self.purges
            .purge(object)
            .map(drop)
            .map_err(|source| CacheError::Files(DiskFilesError::dir(journal, source)))
    }

    /// The metadata record if the memory tier holds it; no disk I/O.
    pub fn meta_in_memory(&self, object: &ObjectRef) -> Option<MetaRecord> {
        let entry = self.hybrid.memory().get(&self.meta_key(object))?;
        match entry.value() {
            CacheValue::Meta(record) => Some(record.clone()),
            CacheValue::Block(_) => None,
        }
    }

    /// The block from memory, disk, or `fetch` — run once however many callers miss at once.
    ///
    /// `fetch` runs in a spawned task: a caller that goes away does not cancel it for the
    /// others, and its result is cached.
    pub async fn block<F, Fut, E>(
        &self,
        key: &BlockKey,
        fetch: F,
    ) -> Result<(Bytes, Tier), LookupError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Bytes, E>> + Send + 'static,
        E: std::error::Error + Clone + Send + Sync + 'static,
    {
        // A memory hit must not go through `get_or_fetch`: with write-on-insertion foyer
        // would enqueue the entry for another disk write on every hit.
        let cache_key = self.block_key(key);
        if let Some(entry) = self.hybrid.memory().get(&cache_key)
            && let CacheValue::Block(bytes) = entry.value()
        {
            self.readmit(&cache_key, &entry);
            return Ok((bytes.clone(), Tier::Memory));
        }
        let fetched_here = Arc::new(AtomicBool::new(false));
        let flag = fetched_here.clone();
        let fetch = fetch();
        let fetch = move || async move {
            flag.store(true, Ordering::Release);
            fetch.await.map(CacheValue::Block)
        };
        let mut disk = self.disk_in_use();
        if disk {
            // The disk is read on its own first: foyer's `get_or_fetch` would answer a
            // disk read error by fetching, and the failing disk would go unnoticed.
            match self.hybrid.get(&cache_key).await {
                Ok(Some(entry)) => {
                    self.health.read_succeeded();
                    let tier = match entry.source() {
                        Source::Memory => Tier::Memory,
                        _ => Tier::Disk,
                    };
                    return block_of(&entry, tier);
                }
                Ok(None) => {}
                Err(error) => {
                    self.health.failed("read", &error);
                    disk = false;
                }
            }
        }
        let result = if disk {
            self.hybrid.get_or_fetch(&cache_key, fetch).await
        } else {
            // Memory-only: coalesced by the memory tier, never written to disk.
            self.hybrid.memory().get_or_fetch(&cache_key, fetch).await
        };
        let entry = result.map_err(|error| match error.downcast_ref::<E>() {
            Some(fetch_error) => LookupError::Fetch(fetch_error.clone()),
            None => LookupError::Cache(CacheError::Lookup(error)),
        })?;
        let tier = match entry.source() {
            Source::Memory => Tier::Memory,
            Source::Disk => Tier::Disk,
            Source::Outer if fetched_here.load(Ordering::Acquire) => Tier::Upstream,
            Source::Outer => Tier::Coalesced,
        };
        block_of(&entry, tier)
    }

    /// Queues a block served from memory for the disk tier again when the tier does not
    /// hold it: it skipped the disk while the disk's write queue was full. Without this,
    /// memory would evict it and the next read would fetch it from the upstream again.
    /// The write takes the same bounded queue (it may skip again, counted by foyer); a
    /// block already on disk or in flight to it is left alone.
    fn readmit(&self, key: &CacheKey, entry: &foyer::HybridCacheEntry<CacheKey, CacheValue>) {
        if !self.disk_in_use() || self.hybrid.storage().may_contains(key) {
            return;
        }
        self.hybrid.storage().enqueue(entry.piece(), false);
        self.health.metrics.disk_readmissions.inc();
    }

    pub fn insert_block(&self, key: BlockKey, bytes: Bytes) {
        self.hybrid.insert_with_properties(
            self.block_key(&key),
            CacheValue::Block(bytes),
            self.placement(Location::Default),
        );
    }

    /// Entry properties for `location`, kept in memory while the disk tier is off.
    fn placement(&self, location: Location) -> HybridCacheProperties {
        let location = if self.disk_in_use() {
            location
        } else {
            Location::InMem
        };
        HybridCacheProperties::default().with_location(location)
    }

    /// The metadata record from memory, or from disk (after a restart or eviction).
    pub async fn meta(&self, object: &ObjectRef) -> Result<Option<MetaRecord>, CacheError> {
        let key = self.meta_key(object);
        let entry = match self.hybrid.memory().get(&key) {
            Some(entry) => entry,
            None if !self.disk_in_use() => return Ok(None),
            None => match self.hybrid.get(&key).await {
                Ok(Some(entry)) => entry,
                Ok(None) => return Ok(None),
                Err(error) => {
                    self.health.failed("read", &error);
                    return Err(CacheError::Lookup(error));
                }
            },
        };
        match entry.value() {
            CacheValue::Meta(record) => Ok(Some(record.clone())),
            CacheValue::Block(_) => Err(CacheError::WrongKind("metadata")),
        }
    }

    /// Stores a metadata record; negative records stay in memory only.
    pub fn insert_meta(&self, object: &ObjectRef, record: MetaRecord) {
        let location = match record.state {
            MetaState::Found(_) => Location::Default,
            MetaState::Missing(_) => Location::InMem,
        };
        self.hybrid.insert_with_properties(
            self.meta_key(object),
            CacheValue::Meta(record),
            self.placement(location),
        );
    }

    /// Removes a block from both tiers; whether the cache held it.
    pub fn remove_block(&self, key: &BlockKey) -> bool {
        let key = self.block_key(key);
        let held = self.hybrid.contains(&key);
        self.hybrid.remove(&key);
        held
    }

    pub fn remove_meta(&self, object: &ObjectRef) {
        self.hybrid.remove(&self.meta_key(object));
    }

    pub fn usage(&self) -> CacheUsage {
        let memory = self.hybrid.memory();
        let disk = self.hybrid.statistics();
        CacheUsage {
            memory_capacity_bytes: memory.capacity() as u64,
            memory_used_bytes: memory.usage() as u64,
            disk_capacity_bytes: self.disk_capacity_bytes,
            disk_written_bytes: disk.disk_write_bytes() as u64,
            disk_read_bytes: disk.disk_read_bytes() as u64,
        }
    }

    /// Waits for queued disk writes and closes the disk tier.
    pub async fn close(&self) -> Result<(), CacheError> {
        self.hybrid.close().await.map_err(CacheError::Lookup)
    }
}

/// The bytes of a block entry.
fn block_of<E>(
    entry: &foyer::HybridCacheEntry<CacheKey, CacheValue>,
    tier: Tier,
) -> Result<(Bytes, Tier), LookupError<E>> {
    match entry.value() {
        CacheValue::Block(bytes) => Ok((bytes.clone(), tier)),
        CacheValue::Meta(_) => Err(LookupError::Cache(CacheError::WrongKind("block"))),
    }
}

/// One disk probe: write a page naming `round`, sync it, read it back.
fn probe_disk(path: &Path, round: u64) -> std::io::Result<()> {
    use std::io::Write;
    let page: Vec<u8> = round
        .to_le_bytes()
        .iter()
        .copied()
        .cycle()
        .take(disk::PAGE_BYTES as usize)
        .collect();
    let mut file = std::fs::File::create(path)?;
    file.write_all(&page)?;
    file.sync_all()?;
    let read = std::fs::read(path)?;
    if read != page {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} read back different bytes", path.display()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ByteSize;
    use std::sync::atomic::AtomicUsize;

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
                    .block(&block_key(0), move || async move {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        gate.notified().await;
                        Ok::<_, FetchFailed>(Bytes::from_static(b"block zero"))
                    })
                    .await
            }));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
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
            .block(&block_key(0), || async {
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
            .block(&block_key(1), || async {
                Err::<Bytes, _>(FetchFailed("upstream down"))
            })
            .await
            .unwrap_err();
        assert!(matches!(
            error,
            LookupError::Fetch(FetchFailed("upstream down"))
        ));
        let (bytes, tier) = cache
            .block(&block_key(1), || async {
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
                cache.hybrid.insert_with_properties(
                    cache.block_key(&block_key(index)),
                    CacheValue::Block(data.clone()),
                    HybridCacheProperties::default().with_location(Location::InMem),
                );
            }
            let (bytes, tier) = cache
                .block(&block_key(0), || async {
                    Err::<Bytes, _>(FetchFailed("must come from memory"))
                })
                .await
                .unwrap();
            assert_eq!((bytes, tier), (data.clone(), Tier::Memory));
            assert_eq!(metrics.disk_readmissions.get(), 1);
            // A second hit finds it on its way to the disk: no second write.
            cache
                .block(&block_key(0), || async {
                    Err::<Bytes, _>(FetchFailed("must come from memory"))
                })
                .await
                .unwrap();
            assert_eq!(metrics.disk_readmissions.get(), 1);
            cache.close().await.unwrap();
        }
        let cache = open(dir.path(), ByteSize::mib(4)).await;
        let (bytes, tier) = cache
            .block(&block_key(0), || async {
                Err::<Bytes, _>(FetchFailed("must come from disk"))
            })
            .await
            .unwrap();
        assert_eq!((bytes, tier), (data.clone(), Tier::Disk));
        let (_, tier) = cache
            .block(&block_key(1), {
                let data = data.clone();
                move || async move { Ok::<_, FetchFailed>(data) }
            })
            .await
            .unwrap();
        assert_eq!(
            tier,
            Tier::Upstream,
            "the block not read again stayed off the disk"
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

    #[test]
    fn a_file_system_refusing_direct_io_gets_buffered_io() {
        use rustix::io::Errno;
        assert!(direct_io_from_probe(Ok(())).unwrap());
        // EINVAL is how open(2) says the file system does not do O_DIRECT.
        assert!(!direct_io_from_probe(Err(Errno::INVAL)).unwrap());
        let error = direct_io_from_probe(Err(Errno::ACCESS)).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::PermissionDenied);
        // A directory that cannot be created is an error, not a fallback.
        let file = tempfile::NamedTempFile::new().unwrap();
        assert!(supports_direct_io(&file.path().join("below-a-file")).is_err());
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
        let record = MetaClock::new().record(MetaState::Found(Arc::new(ObjectMeta {
            size: 64 * 1024,
            etag: "\"etag\"".to_owned(),
            ..ObjectMeta::default()
        })));
        {
            let cache = open().await;
            assert!(cache.has_disk_tier());
            cache.insert_block(block_key(0), data.clone());
            cache.insert_meta(&object, record.clone());
            cache.close().await.unwrap();
        }
        let cache = open().await;
        let (bytes, tier) = cache
            .block(&block_key(0), || async {
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
                .block(&block_key(index), {
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
            .block(&block_key(0), || async {
                Err::<Bytes, _>(FetchFailed("must come from memory"))
            })
            .await
            .unwrap();
        assert_eq!(tier, Tier::Memory);
    }

    #[test]
    fn a_transient_disk_error_is_retried_with_back_off_not_fatal() {
        let health = DiskHealth::new(Arc::new(Metrics::new()));
        assert_eq!(health.next_probe_after(), DISK_PROBE_INTERVAL);
        for _ in 1..DISK_FAILURES_BEFORE_DEGRADED {
            health.failed("read", &"I/O error");
        }
        assert!(!health.degraded.load(Ordering::Acquire));
        assert_eq!(health.next_probe_after(), 2 * DISK_RETRY_BACKOFF);
        // A good read in between: the next errors start counting again.
        health.read_succeeded();
        assert_eq!(health.next_probe_after(), DISK_PROBE_INTERVAL);
        health.failed("read", &"I/O error");
        assert!(!health.degraded.load(Ordering::Acquire));
        assert_eq!(health.next_probe_after(), DISK_RETRY_BACKOFF);
        // Probe failures count apart from read failures, and persist into degraded mode.
        for _ in 0..DISK_FAILURES_BEFORE_DEGRADED {
            health.failed("write", &"read-only file system");
        }
        assert!(health.degraded.load(Ordering::Acquire));
        let reason = health.reason.lock().clone().unwrap();
        assert!(reason.starts_with("disk write failed"), "{reason}");
    }

    #[test]
    fn the_disk_probe_fails_on_an_unwritable_directory() {
        let dir = tempfile::tempdir().unwrap();
        probe_disk(&dir.path().join(PROBE_FILE), 7).unwrap();
        // A directory where the file should be cannot be written like a file.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir(&blocked).unwrap();
        assert!(probe_disk(&blocked, 8).is_err());
        assert!(probe_disk(&dir.path().join("missing/dir/file"), 9).is_err());
    }

    #[tokio::test]
    async fn negative_metadata_is_not_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let object = ObjectRef::new("bucket", "gone").unwrap();
        {
            let cache = open(dir.path(), ByteSize::mib(4)).await;
            cache.insert_meta(
                &object,
                MetaClock::new().record(MetaState::Missing(Missing::NoSuchKey)),
            );
            assert!(cache.meta(&object).await.unwrap().is_some());
            cache.close().await.unwrap();
        }
        let cache = open(dir.path(), ByteSize::mib(4)).await;
        assert_eq!(cache.meta(&object).await.unwrap(), None);
    }
}
