//! The read path: object metadata → byte range → blocks → a stream of exactly the
//! requested bytes. One type per step, each owning its state, and [`ReadPath`]
//! (`path.rs`, walked by `get.rs`) orchestrating them; no step reaches into another's.
//!
//! A GET, in order (`api/s3.rs` calls [`ReadPath::get`] once, with a [`GetRequest`]):
//!
//! 1. `get.rs` reserves room in the memory budget for the first block and asks the
//!    metadata step for the object's metadata.
//! 2. `metadata.rs` (`Metadata`: its cache view, source, discoveries, write
//!    generations, clock and rules) answers from the cache while it is fresh; otherwise
//!    one coalesced request to the [`BlockSource`](crate::source::BlockSource) revalidates
//!    it (a conditional HEAD) or discovers it — for an unknown object, a ranged GET of the
//!    first needed block and up to [`stream::DISCOVERY_BLOCKS`] after it that the read
//!    wants: it caches the first before the metadata and returns it beside it
//!    (`discovered.rs`), and the rest of the answer comes as an origin stream
//!    (`stream.rs`) that the reads sharing the discovery join.
//! 3. `get.rs` judges the request's conditions against that version (a refusal reads no
//!    byte), resolves the range against its size and reads the first block (from step
//!    2's blocks when it has them) before it returns, so every error that can still
//!    become a status code does. Objects without an ETag go to `uncached.rs`.
//! 4. `block.rs` (`Blocks`: the block cache, source, hedger, peers and answer
//!    latches) reads each block: the cache (memory, then disk), else one coalesced,
//!    hedged (`hedge.rs`) fetch from the source or the block's owner, pinned to the
//!    version with `If-Match`. `lookup.rs` runs the lookups started ahead of the first.
//! 5. `get.rs` streams the blocks in order, `readahead_blocks` ahead within the budget:
//!    the first block is in the body when it starts (the rest too, when memory holds it
//!    within the readahead), and a task sends the rest (`body.rs`, which also checks a
//!    checksum-mode whole-object response against S3's CRC before its last byte);
//!    `prefetch.rs` (`Prefetcher`: its detector and slots over the blocks) records the
//!    read and fetches the blocks a sequential reader needs next.
//! 6. `status.rs` says what happened in the `Cache-Status` header; [`Tally`] counts the
//!    blocks by tier for the access log.
//!
//! Writes through Portico (`generations.rs`: the write generations; `writes.rs`:
//! admitting written bytes) and operator actions (`manage.rs`: purge, warm) change what
//! steps 2 and 4 find; [`ReadPath`] is their door too (`actions.rs`), and other members'
//! (`peers.rs`). `integrity.rs` judges each object whose blocks were all filled against
//! the full-object CRC S3 keeps and reports one that disagrees on a channel, which
//! `manage.rs` drains to purge it; `verify.rs` re-checks a sample of hits against the
//! origin (`cache.verify_fraction`).
//!
//! The steps form a line (checked by `src/layers.rs`): a file uses only the files of
//! lower layers, and reports to those above through a return value or a channel, never
//! by holding them. Lowest first:
//!
//! 0. `fills`, `hedge`, `claims`, `coalesce`, `generations`, `uncached`, `integrity`:
//!    parts that know no other step; this file's shared types (`Target`, `ReadError`)
//!    stand on them.
//! 1. `stream`, `body`, `verify`: origin streams, response bodies, verify mode.
//! 2. `discovered`, `fetch`: what a discovery brought; one block's fetch.
//! 3. `block`, `metadata`, `status`: the block step, the metadata step.
//! 4. `lookup`, `prefetch`, `manage`, `writes`: what runs over blocks and metadata.
//! 5. `path`: [`ReadPath`] and its wiring.
//! 6. `get`, `actions`, `peers`: what [`ReadPath`] does.
//!
//! Invariants:
//! - Every block is fetched for the object version (ETag) the response headers announce,
//!   with `If-Match`; a changed object is retried before the response starts and aborts
//!   the body after it has started. Bytes of two versions are never mixed.
//! - Memory is bounded per request and for the process: every block a response holds is
//!   charged to the memory budget (`crate::budget`) from before its lookup until the
//!   connection has written it. The first block of a GET waits a bounded time for room
//!   (then the GET is refused); each next block waits; blocks beyond the next (at most
//!   `readahead_blocks` ahead) and prefetches take only free room.
//! - Prefetch across requests (`prefetch.rs`) fetches only whole blocks of the version
//!   being read, through the same cache and coalescing as demand reads, within a fixed
//!   number of fetches in flight.
//! - Metadata discovery for one object runs once however many requests miss at once, and
//!   for a GET it fetches the first needed blocks in the same upstream request.

mod actions;
mod block;
mod body;
mod claims;
mod coalesce;
mod discovered;
mod fetch;
mod fills;
mod generations;
mod get;
mod hedge;
mod integrity;
mod lookup;
mod manage;
mod metadata;
mod path;
mod peers;
mod prefetch;
mod status;
mod stream;
mod uncached;
mod verify;
mod writes;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cache::{BlockKey, Tier};
use crate::object::{Missing, ObjectMeta};
use crate::rules::{Policy, Rules};
use crate::source::{BlockAsk, UpstreamError};
use crate::telemetry::ErrorChain;
use crate::telemetry::Metrics;
use crate::tenant::Tenant;
use crate::types::{BlockIndex, BlockLayout, ObjectRef, RangeRequest, Selection, Unsatisfiable};
pub use body::BodyStream;
pub use discovered::MetaSource;
pub use fills::{FillClass, FillFor, FillSlots};
pub use manage::KnownVersion;
pub use path::{ReadParts, ReadPath};
pub use status::CacheStatus;
pub use writes::AdmitError;

/// Read-path settings taken from the cache configuration.
#[derive(Clone)]
pub struct ReadSettings {
    pub block_size: u64,
    /// Metadata TTLs, caching and prefetch per object (`[[rules]]` over `[cache]`).
    pub rules: Arc<Rules>,
    pub readahead_blocks: usize,
    /// Largest prefetch window in blocks; 0 turns prefetch off.
    pub prefetch_window_blocks: u64,
    /// Prefetch origin requests and blocks in flight at most.
    pub prefetch_limits: PrefetchLimits,
    /// Quantile of recent times to first byte after which a block fetch is hedged; 0: never.
    pub hedge_quantile: f64,
    /// Shortest wait before a hedge.
    pub hedge_min_delay: std::time::Duration,
    /// Serve the last known version when the upstream fails a revalidation.
    pub serve_stale_on_error: bool,
    /// Verify mode: the hits re-checked against the origin.
    pub verify: Verify,
    /// Upstream block fetches in flight at most, shared between tenants by weight.
    pub max_concurrent_fills: usize,
    /// Ask the origin for the checksums of versions whose fills did not report them.
    pub learn_checksums: bool,
}

/// What prefetches may have in flight at once (`[prefetch]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefetchLimits {
    /// Origin requests: a stream of several blocks, or a lone block's fetch
    /// (`max_concurrent_fetches`).
    pub fetches: usize,
    /// Blocks not cached yet (`max_inflight_bytes` / the block size).
    pub blocks: usize,
}

/// Verify mode (`cache.verify_fraction`): which hits are re-checked against the origin.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verify {
    /// The share of hits sampled; 0 turns verify mode off.
    pub fraction: f64,
    /// Checks started per second at most.
    pub per_second: u32,
}

impl Verify {
    pub const OFF: Self = Self {
        fraction: 0.0,
        per_second: 1,
    };
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("no such {0}")]
    NotFound(Missing, Option<String>),
    #[error(transparent)]
    InvalidRange(#[from] Unsatisfiable),
    #[error("the object changed upstream while it was being read")]
    Changed,
    #[error(transparent)]
    Upstream(UpstreamError),
    /// Its words are the read error's own, not a cause of it.
    #[error("too many bytes in flight: {0}")]
    Busy(crate::budget::Exhausted),
    #[error(transparent)]
    Internal(Internal),
}

/// A read that failed through a fault of Portico's own, with its cause: a block that is
/// not where the object's layout puts it, or a task or cache step that failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Internal {
    #[error("bytes {within:?} of block {index} are outside the object")]
    OutsideObject {
        index: BlockIndex,
        within: std::ops::Range<u64>,
    },
    #[error("block {index} of {object} gave {got} bytes for a part of {wanted}")]
    WrongLength {
        object: ObjectRef,
        index: BlockIndex,
        got: usize,
        wanted: usize,
    },
    #[error("the lookup of block {index} did not complete")]
    Lookup {
        index: BlockIndex,
        #[source]
        cause: Arc<tokio::task::JoinError>,
    },
    #[error("the shared metadata lookup did not complete")]
    Discovery(#[source] coalesce::TaskFailed),
    #[error("the purge could not be recorded")]
    Purge(#[source] Arc<crate::cache::CacheError>),
    #[error(
        "the bytes of {object} have the CRC {computed}, where S3 reports {expected}: the response is cut off and the object purged"
    )]
    Checksum {
        object: ObjectRef,
        expected: String,
        computed: String,
    },
}

impl PartialEq for Internal {
    /// The same kind with the same words: causes compare by what they say.
    fn eq(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
            && crate::telemetry::error_chain(self) == crate::telemetry::error_chain(other)
    }
}

impl Eq for Internal {}

/// Who a read error is attributed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorSource {
    Client,
    Upstream,
    Internal,
}

impl From<crate::budget::Exhausted> for ReadError {
    fn from(exhausted: crate::budget::Exhausted) -> Self {
        Self::Busy(exhausted)
    }
}

impl ReadError {
    /// What cut a read off after its headers were sent, for `portico_read_aborts_total`.
    pub fn abort_cause(&self) -> &'static str {
        match self {
            Self::Changed => "changed",
            Self::Upstream(_) | Self::NotFound(..) | Self::InvalidRange(_) => "upstream",
            Self::Busy(_) => "busy",
            Self::Internal(_) => "internal",
        }
    }

    pub fn source_kind(&self) -> ErrorSource {
        match self {
            Self::NotFound(..) | Self::InvalidRange(_) => ErrorSource::Client,
            Self::Changed | Self::Upstream(_) => ErrorSource::Upstream,
            Self::Busy(_) | Self::Internal(_) => ErrorSource::Internal,
        }
    }

    fn from_upstream(error: UpstreamError) -> Self {
        match error {
            UpstreamError::NotFound {
                missing,
                request_id,
            } => Self::NotFound(missing, request_id),
            UpstreamError::PreconditionFailed { .. } => Self::Changed,
            other => Self::Upstream(other),
        }
    }
}

/// One GET as the read path serves it: what the request context carries.
pub struct GetRequest<'a> {
    pub object: &'a ObjectRef,
    pub range: Option<RangeRequest>,
    /// The object's stored checksums are wanted: they come with a response that sends
    /// the object whole (S3 reports the whole object's only).
    pub checksums: bool,
    /// The object's policy, looked up once for the request.
    pub policy: &'a Arc<Policy>,
    /// The request's conditions (preconditions and `If-Range`), judged against each
    /// version found before a byte of it is read.
    pub judge: &'a (dyn Fn(&ObjectMeta) -> Judgement + Send + Sync),
    /// The tenant the request is charged to: its fills wait their turn among tenants.
    pub tenant: &'a Arc<Tenant>,
}

/// What a request's conditions say of a version of the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    /// Serve it: the requested range (`range`), or the whole object (an `If-Range` that
    /// names another version).
    Serve { range: bool },
    /// Answer from its metadata alone (304 or 412): no byte of it is read.
    Refuse,
}

/// How a GET is answered.
pub enum GetAnswer {
    /// With the object's bytes (or an empty body).
    Read(ObjectRead),
    /// From the version's metadata alone: its conditions refused it.
    Refused {
        meta: Arc<ObjectMeta>,
        status: CacheStatus,
    },
}

/// A GET being answered: the object's metadata, what part of it is sent, the bytes, and
/// where the blocks sent so far came from.
pub struct ObjectRead {
    pub meta: Arc<ObjectMeta>,
    pub selection: Selection,
    pub body: BodyStream,
    pub tally: Arc<Tally>,
    /// What the cache did, for the `Cache-Status` header.
    pub status: CacheStatus,
}

/// The blocks one response was served from, by tier, counted as they are sent.
#[derive(Debug, Default)]
pub struct Tally {
    memory: AtomicU64,
    disk: AtomicU64,
    upstream: AtomicU64,
    coalesced: AtomicU64,
}

impl Tally {
    fn count(&self, tier: Tier) {
        let counter = match tier {
            Tier::Memory => &self.memory,
            Tier::Disk => &self.disk,
            Tier::Upstream => &self.upstream,
            Tier::Coalesced => &self.coalesced,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Blocks found in memory or on disk.
    pub fn hits(&self) -> u64 {
        self.memory.load(Ordering::Relaxed) + self.disk.load(Ordering::Relaxed)
    }

    /// Blocks fetched from the upstream, by this response or one it waited for.
    pub fn misses(&self) -> u64 {
        self.upstream.load(Ordering::Relaxed) + self.coalesced.load(Ordering::Relaxed)
    }

    /// Where the bytes came from: the one tier of every block, `mixed`, or `none`.
    pub fn source(&self) -> &'static str {
        let tiers = [
            (Tier::Memory, &self.memory),
            (Tier::Disk, &self.disk),
            (Tier::Upstream, &self.upstream),
            (Tier::Coalesced, &self.coalesced),
        ];
        let mut used = tiers
            .iter()
            .filter(|(_, count)| count.load(Ordering::Relaxed) > 0);
        match (used.next(), used.next()) {
            (None, _) => "none",
            (Some((tier, _)), None) => tier.as_str(),
            (Some(_), Some(_)) => "mixed",
        }
    }
}

/// One version of one object, as a request reads it. Cheap to clone.
#[derive(Clone)]
struct Target {
    object: ObjectRef,
    meta: Arc<ObjectMeta>,
    /// The version token in this object's block keys.
    version: Arc<str>,
    layout: BlockLayout,
    /// Who its blocks are fetched for; `None`: the default tenant's demand.
    fill: Option<FillFor>,
}

impl Target {
    fn new(object: &ObjectRef, meta: Arc<ObjectMeta>, block_size: u64) -> Self {
        Self {
            object: object.clone(),
            version: meta.version_token().into(),
            layout: BlockLayout::new(block_size, meta.size),
            meta,
            fill: None,
        }
    }

    /// The object as a fetch asks for it: pinned to the version id its metadata names,
    /// when the read did not name one itself.
    fn pinned(&self) -> ObjectRef {
        let object = self.object.clone();
        match (object.version(), self.meta.pinned_version()) {
            (None, Some(version)) => object.clone().with_version(Some(version)).unwrap_or(object),
            _ => object,
        }
    }

    /// The same version, its blocks fetched for `fill`.
    fn for_fill(self, fill: FillFor) -> Self {
        Self {
            fill: Some(fill),
            ..self
        }
    }

    /// Who its blocks are fetched for: its fill, else the default tenant's demand.
    fn fill_or_default(&self, fills: &FillSlots) -> FillFor {
        self.fill.clone().unwrap_or_else(|| fills.default_fill())
    }

    /// The same version, its blocks fetched for the same tenant as `class`.
    fn of_class(&self, class: FillClass) -> Self {
        let mut target = self.clone();
        if let Some(fill) = &mut target.fill {
            fill.class = class;
        }
        target
    }

    /// What to ask the block's owner for: the bytes `within` block `index`, for this
    /// target's tenant and class.
    fn ask(&self, index: BlockIndex, within: std::ops::Range<u64>) -> BlockAsk<'_> {
        let (tenant, class) = match &self.fill {
            Some(fill) => (fill.tenant.name(), fill.class),
            None => (crate::tenant::DEFAULT_TENANT, FillClass::Demand),
        };
        BlockAsk {
            object: &self.object,
            meta: &self.meta,
            block_size: self.layout.block_size(),
            index,
            within,
            tenant,
            class: class.as_str(),
        }
    }

    fn key(&self, index: BlockIndex) -> BlockKey {
        BlockKey::new(
            &self.object,
            self.version.clone(),
            self.layout.block_size(),
            index,
        )
    }
}

/// Ends a response whose headers were sent with `error`: logged once with its object,
/// counted by cause.
async fn abort(
    metrics: &Metrics,
    sender: &body::Sender,
    object: &ObjectRef,
    block: Option<u64>,
    error: ReadError,
) {
    let error = aborting(metrics, object, block, error);
    let _ = sender.send(Err(error)).await;
}

/// [`abort`]'s log line and count, for a response whose error is in hand: the error to
/// end the body with.
fn aborting(
    metrics: &Metrics,
    object: &ObjectRef,
    block: Option<u64>,
    error: ReadError,
) -> ReadError {
    let cause = error.abort_cause();
    tracing::warn!(%object, block, cause, error = %ErrorChain(&error), "aborting a response after its headers were sent");
    metrics.count_read_abort(cause);
    error
}
