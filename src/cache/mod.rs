//! The hybrid block cache: fixed-size object blocks and object metadata in a foyer
//! `HybridCache` (memory tier + a disk tier in `cache.dir`).
//!
//! Invariants:
//! - Concurrent misses for one block run one fetch; every waiter gets its bytes or its error.
//! - Whole blocks live in memory only; the disk tier holds them as pieces of
//!   [`PIECE_BYTES`] (at most a block), so a disk hit reads only the pieces its range
//!   overlaps. The disk engine's block size is derived from `cache.block_size`, so every
//!   piece fits it (foyer silently skips entries larger than its block).
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
use std::hash::{BuildHasher, RandomState};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use foyer::{
    BlockEngineConfig, DeviceBuilder, FileDeviceBuilder, HybridCache, HybridCacheBuilder,
    HybridCachePolicy, HybridCacheProperties, Load, Location, PsyncIoEngineConfig, RecoverMode,
    S3FifoConfig, Source,
};
use parking_lot::Mutex;

pub use disk::{
    DISK_FLUSHERS, DiskFilesError, DiskFormat, DiskLayout, PIECE_BYTES, raise_open_file_limit,
};
pub use key::{BlockKey, CacheKey, CacheValue};
pub use meta::{MetaClock, MetaRecord, MetaState};

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
    #[error("a block of {got} bytes where {expected} were expected")]
    BlockLength { expected: usize, got: usize },
    #[error("bytes {start}..{end} are not within a block of {block_len} bytes")]
    OutsideBlock {
        start: usize,
        end: usize,
        block_len: usize,
    },
}

/// The bytes a lookup found for part of a block: consecutive slices (one of a whole
/// block, or one per piece read), the tier they came from — [`Tier::Disk`] when any piece
/// was read from disk — and how many of them came from pieces held in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub slices: Vec<Bytes>,
    pub tier: Tier,
    /// Bytes from pieces memory held (read from disk twice before); what matters is the
    /// share of a [`Tier::Disk`] part. 0 for a slice of a whole block.
    pub memory_bytes: usize,
}

impl Part {
    /// One slice of a whole block.
    pub fn whole(slice: Bytes, tier: Tier) -> Self {
        Self {
            slices: vec![slice],
            tier,
            memory_bytes: 0,
        }
    }

    /// Bytes in all the slices.
    pub fn total_bytes(&self) -> usize {
        self.slices.iter().map(Bytes::len).sum()
    }
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

/// Doorkeeper slots: twice the pieces the memory tier holds, so a piece read again while
/// memory could still hold it is usually remembered.
fn doorkeeper_slots(config: &CacheConfig) -> usize {
    let pieces = config.memory_capacity.bytes() / disk::piece_bytes(config.block_size.bytes());
    to_usize(pieces.saturating_mul(2)).clamp(1024, 1 << 20)
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
    /// Ends the probe: the cache is closing.
    closing: tokio::sync::Notify,
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
            closing: tokio::sync::Notify::new(),
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
    /// The disk tier's unit (see `disk::PIECE_BYTES`).
    piece_bytes: usize,
    doorkeeper: Arc<Doorkeeper>,
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
                piece_bytes: to_usize(format.piece_bytes),
                doorkeeper: Arc::new(Doorkeeper::new(doorkeeper_slots(config))),
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
            piece_bytes: to_usize(disk::piece_bytes(config.block_size.bytes())),
            doorkeeper: Arc::new(Doorkeeper::new(1)),
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
    /// turns the tier off even while every read hits memory. Ends when the cache closes.
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
                    () = health.closing.notified() => return,
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

    /// `key` under its object's purge generation.
    fn generational(&self, key: &BlockKey) -> BlockKey {
        let mut key = key.clone();
        key.generation = self.purges.generation(key.object());
        key
    }

    /// The cache key of piece `index` of `block` (a generational key).
    fn piece_key(&self, block: &BlockKey, index: usize) -> CacheKey {
        CacheKey::Piece {
            block: block.clone(),
            // Both are at most a block size, which the configuration bounds far below 4 GiB.
            piece_bytes: u32::try_from(self.piece_bytes).unwrap_or(u32::MAX),
            index: u32::try_from(index).unwrap_or(u32::MAX),
        }
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

    /// Bytes `within` of a block of `block_len` bytes, from memory, disk, or `fetch` — run
    /// once however many callers miss at once — as consecutive slices: one of a whole
    /// block, or one per piece read.
    ///
    /// A block in memory is sliced. Otherwise the pieces `within` overlaps are read, each
    /// from memory or disk (foyer verifies each piece's checksum), when every one of them
    /// is cached; a piece read from disk for the second time is kept in memory. Otherwise
    /// the whole block is fetched, kept in memory and queued for the disk in pieces.
    ///
    /// `fetch` runs in a spawned task: a caller that goes away does not cancel it for the
    /// others, and its result is cached.
    pub async fn block<F, Fut, E>(
        &self,
        key: &BlockKey,
        block_len: usize,
        within: Range<usize>,
        fetch: F,
    ) -> Result<Part, LookupError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Bytes, E>> + Send + 'static,
        E: std::error::Error + Clone + Send + Sync + 'static,
    {
        if within.start >= within.end || within.end > block_len {
            return Err(LookupError::Cache(CacheError::OutsideBlock {
                start: within.start,
                end: within.end,
                block_len,
            }));
        }
        let key = self.generational(key);
        let cache_key = CacheKey::Block(key.clone());
        // A memory hit must not go through `get_or_fetch`, which counts and coalesces.
        if let Some(entry) = self.hybrid.memory().get(&cache_key) {
            let bytes = block_of(&entry, block_len)?;
            self.readmit(&key, &bytes);
            return Ok(Part::whole(bytes.slice(within), Tier::Memory));
        }
        match self.pieces(&key, block_len, within.clone()).await {
            Ok(Some(found)) => return Ok(found),
            Ok(None) => {}
            // Answered by a fetch; errors that persist turn the disk tier off.
            Err(error) => self.health.failed("read", &error),
        }
        let fetched_here = Arc::new(AtomicBool::new(false));
        let flag = fetched_here.clone();
        let fetch = fetch();
        let cache = self.clone();
        let stored = key.clone();
        let fetch = move || async move {
            flag.store(true, Ordering::Release);
            let bytes = fetch.await?;
            if bytes.len() == block_len {
                cache.store_pieces(&stored, &bytes);
            }
            Ok::<_, E>(CacheValue::Block(bytes))
        };
        // Whole blocks live in memory only; the disk holds their pieces.
        let entry = self
            .hybrid
            .memory()
            .get_or_fetch(&cache_key, fetch)
            .await
            .map_err(|error| match error.downcast_ref::<E>() {
                Some(fetch_error) => LookupError::Fetch(fetch_error.clone()),
                None => LookupError::Cache(CacheError::Lookup(error)),
            })?;
        let tier = match entry.source() {
            Source::Outer if fetched_here.load(Ordering::Acquire) => Tier::Upstream,
            Source::Outer => Tier::Coalesced,
            _ => Tier::Memory,
        };
        let bytes = block_of(&entry, block_len)?;
        Ok(Part::whole(bytes.slice(within), tier))
    }

    /// The pieces of `block` that hold `within`, sliced to it, when the cache holds every
    /// one of them: from memory, else from disk. `None` when one is missing (nothing is
    /// read from disk then) or the disk tier is off.
    async fn pieces(
        &self,
        block: &BlockKey,
        block_len: usize,
        within: Range<usize>,
    ) -> Result<Option<Part>, foyer::Error> {
        if !self.disk_in_use() {
            return Ok(None);
        }
        let indexes = within.start / self.piece_bytes..=(within.end - 1) / self.piece_bytes;
        let keys: Vec<CacheKey> = indexes
            .clone()
            .map(|index| self.piece_key(block, index))
            .collect();
        if !keys.iter().all(|key| self.piece_held(key)) {
            return Ok(None);
        }
        let spans: Vec<Range<usize>> = indexes
            .map(|index| self.piece_span(index, block_len))
            .collect();
        let loads = keys
            .into_iter()
            .zip(&spans)
            .map(|(key, span)| self.piece(key, span.len()));
        let found = futures::future::try_join_all(loads).await?;
        let mut part = Part {
            slices: Vec::with_capacity(found.len()),
            tier: Tier::Memory,
            memory_bytes: 0,
        };
        for (span, piece) in spans.into_iter().zip(found) {
            let Some((bytes, from)) = piece else {
                return Ok(None);
            };
            let start = within.start.max(span.start) - span.start;
            let end = within.end.min(span.end) - span.start;
            match from {
                Tier::Memory => part.memory_bytes += end - start,
                _ => part.tier = Tier::Disk,
            }
            part.slices.push(bytes.slice(start..end));
        }
        Ok(Some(part))
    }

    /// One piece of `length` bytes from memory, else from disk (kept in memory on its
    /// second read from disk). A piece of another length is a miss.
    async fn piece(
        &self,
        key: CacheKey,
        length: usize,
    ) -> Result<Option<(Bytes, Tier)>, foyer::Error> {
        if let Some(entry) = self.hybrid.memory().get(&key)
            && let CacheValue::Block(bytes) = entry.value()
            && bytes.len() == length
        {
            return Ok(Some((bytes.clone(), Tier::Memory)));
        }
        let value = match self.hybrid.storage().load(&key).await? {
            Load::Entry { value, .. } => value,
            Load::Piece { piece, .. } => piece.value().clone(),
            Load::Miss | Load::Throttled => return Ok(None),
        };
        self.health.read_succeeded();
        let CacheValue::Block(bytes) = value else {
            return Ok(None);
        };
        if bytes.len() != length {
            return Ok(None);
        }
        if self.doorkeeper.second_touch(&key) {
            self.hybrid.memory().insert_with_properties(
                key,
                CacheValue::Block(bytes.clone()),
                self.placement(Location::InMem),
            );
            self.health.metrics.memory_admissions.inc();
        }
        Ok(Some((bytes, Tier::Disk)))
    }

    /// Whether the cache holds all of a block of `block_len` bytes (whole in memory, or
    /// every piece), without reading it.
    pub fn holds(&self, key: &BlockKey, block_len: usize) -> bool {
        let key = self.generational(key);
        if self.hybrid.memory().contains(&CacheKey::Block(key.clone())) {
            return true;
        }
        self.disk_in_use()
            && (0..block_len.div_ceil(self.piece_bytes))
                .all(|index| self.piece_held(&self.piece_key(&key, index)))
    }

    /// Whether memory or the disk tier holds a piece (the disk's answer comes from foyer's
    /// in-memory index; rarely, a hash collision makes it a false yes, which the read
    /// then finds out).
    fn piece_held(&self, key: &CacheKey) -> bool {
        self.hybrid.memory().contains(key) || self.hybrid.storage().may_contains(key)
    }

    /// The bytes piece `index` covers in a block of `block_len` bytes.
    fn piece_span(&self, index: usize, block_len: usize) -> Range<usize> {
        let start = index * self.piece_bytes;
        start..(start + self.piece_bytes).min(block_len)
    }

    /// Queues the pieces of `block` (its `bytes`) the disk tier does not hold for it;
    /// how many. The writes take foyer's bounded queue and may skip the disk (counted by
    /// foyer) when it falls behind.
    fn store_pieces(&self, block: &BlockKey, bytes: &Bytes) -> usize {
        if !self.disk_in_use() {
            return 0;
        }
        let mut queued = 0;
        for index in 0..bytes.len().div_ceil(self.piece_bytes) {
            let key = self.piece_key(block, index);
            if self.hybrid.storage().may_contains(&key) {
                continue;
            }
            self.hybrid.insert_with_properties(
                key,
                CacheValue::Block(bytes.slice(self.piece_span(index, bytes.len()))),
                self.placement(Location::OnDisk),
            );
            queued += 1;
        }
        queued
    }

    /// Queues the pieces of a block served from memory for the disk tier again when the
    /// tier does not hold them: they skipped the disk while its write queue was full.
    /// Without this, memory would evict the block and the next read would fetch it from
    /// the upstream again. Pieces on disk or in flight to it are left alone.
    fn readmit(&self, block: &BlockKey, bytes: &Bytes) {
        if self.store_pieces(block, bytes) > 0 {
            self.health.metrics.disk_readmissions.inc();
        }
    }

    /// Caches a whole block: in memory, and its pieces on disk.
    pub fn insert_block(&self, key: BlockKey, bytes: Bytes) {
        let key = self.generational(&key);
        self.store_pieces(&key, &bytes);
        self.hybrid.memory().insert_with_properties(
            CacheKey::Block(key),
            CacheValue::Block(bytes),
            self.placement(Location::InMem),
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

    /// Removes a block and its pieces from both tiers; whether the cache held any of it.
    pub fn remove_block(&self, key: &BlockKey) -> bool {
        let key = self.generational(key);
        let pieces = key.block_size_bytes.div_ceil(self.piece_bytes as u64);
        let pieces = (0..to_usize(pieces)).map(|index| self.piece_key(&key, index));
        let mut held = false;
        for key in std::iter::once(CacheKey::Block(key.clone())).chain(pieces) {
            held |= self.hybrid.contains(&key) || self.hybrid.storage().may_contains(&key);
            self.hybrid.remove(&key);
        }
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
        // A permit, so a probe round under way sees it when it next waits.
        self.health.closing.notify_one();
        self.hybrid.close().await.map_err(CacheError::Lookup)
    }
}

/// The bytes of a whole-block entry, which must be `block_len` long.
fn block_of<E>(
    entry: &foyer::HybridCacheEntry<CacheKey, CacheValue>,
    block_len: usize,
) -> Result<Bytes, LookupError<E>> {
    match entry.value() {
        CacheValue::Block(bytes) if bytes.len() == block_len => Ok(bytes.clone()),
        CacheValue::Block(bytes) => Err(LookupError::Cache(CacheError::BlockLength {
            expected: block_len,
            got: bytes.len(),
        })),
        CacheValue::Meta(_) => Err(LookupError::Cache(CacheError::WrongKind("block"))),
    }
}

/// Remembers pieces read from disk once, so that their second read keeps them in memory:
/// a piece read once (a scan, a one-off range) does not displace memory's hot set. One
/// hash per slot, overwritten by collisions, so it is bounded and forgets old reads.
struct Doorkeeper {
    slots: Box<[AtomicU64]>,
    hasher: RandomState,
}

impl Doorkeeper {
    fn new(slots: usize) -> Self {
        Self {
            slots: (0..slots.max(1)).map(|_| AtomicU64::new(0)).collect(),
            hasher: RandomState::new(),
        }
    }

    /// Whether `key` was seen since its slot last changed; records it otherwise.
    fn second_touch(&self, key: &CacheKey) -> bool {
        // Never 0, the empty slot's value.
        let hash = self.hasher.hash_one(key) | 1;
        let slot = &self.slots[(hash % self.slots.len() as u64) as usize];
        if slot.load(Ordering::Relaxed) == hash {
            slot.store(0, Ordering::Relaxed);
            true
        } else {
            slot.store(hash, Ordering::Relaxed);
            false
        }
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
    use crate::object::{Missing, ObjectMeta};
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
            let part = self.block(&block_key(index), len, 0..len, fetch).await?;
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
        let cache = open(dir.path(), ByteSize::mib(4)).await;
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
        assert_eq!(
            tier,
            Tier::Upstream,
            "the block not read again stayed off the disk"
        );
    }

    /// A cache of 1 MiB blocks (four pieces each) with a disk tier.
    fn piece_config(dir: &std::path::Path) -> CacheConfig {
        CacheConfig {
            block_size: ByteSize::mib(1),
            memory_capacity: ByteSize::mib(4),
            disk_capacity: ByteSize::mib(32),
            ..config(dir, ByteSize(0))
        }
    }

    fn mib_block(index: u64) -> BlockKey {
        BlockKey::new(
            &ObjectRef::new("bucket", "pieces").unwrap(),
            "\"etag\"".into(),
            1 << 20,
            index,
        )
    }

    /// Bytes no two offsets of which repeat within a block.
    fn patterned(len: usize, seed: u32) -> Bytes {
        (0..len as u32)
            .flat_map(|word| (word.wrapping_mul(2_654_435_761) ^ seed).to_le_bytes())
            .take(len)
            .collect::<Vec<u8>>()
            .into()
    }

    async fn part(
        cache: &BlockCache,
        index: u64,
        len: usize,
        within: Range<usize>,
    ) -> (Bytes, Tier, usize) {
        let found = cache
            .block(&mib_block(index), len, within, || async {
                Err::<Bytes, _>(FetchFailed("must come from the cache"))
            })
            .await
            .unwrap();
        let count = found.slices.len();
        (found.slices.concat().into(), found.tier, count)
    }

    /// A cache opened with `config` after `blocks` were inserted and it was closed, with
    /// fresh metrics.
    async fn reopened_with(
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
            .block(&mib_block(0), 1 << 20, 10..(1 << 20) + 1, || async {
                Err::<Bytes, _>(FetchFailed("must not run"))
            })
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
            .block(&mib_block(0), 1 << 20, piece - 3..piece + 5, || async {
                Err::<Bytes, _>(FetchFailed("must come from the cache"))
            })
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
        let cache = BlockCache::open(&config, Arc::new(Metrics::new()))
            .await
            .unwrap();
        cache.insert_block(mib_block(0), data.clone());
        cache.hybrid.storage().wait().await;
        cache
            .hybrid
            .memory()
            .remove(&CacheKey::Block(cache.generational(&mib_block(0))));
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

    #[test]
    fn the_doorkeeper_admits_on_the_second_touch_and_forgets_on_collision() {
        let doorkeeper = Doorkeeper::new(1);
        let key = |index| CacheKey::Block(block_key(index));
        assert!(!doorkeeper.second_touch(&key(0)));
        assert!(doorkeeper.second_touch(&key(0)));
        // Admitted: the slot is cleared, so a third touch starts over.
        assert!(!doorkeeper.second_touch(&key(0)));
        // One slot: another key takes it, and the first is forgotten.
        assert!(!doorkeeper.second_touch(&key(1)));
        assert!(!doorkeeper.second_touch(&key(0)));
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
