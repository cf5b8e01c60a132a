//! [`ReadPath`], the read path's front door: what it is built from and how its steps are
//! wired together. What it does lives beside it: a GET's and a HEAD's walk over the steps
//! in `get.rs`, what writes and operators do to the cache in `actions.rs`, and what other
//! members ask of it in `peers.rs`.

use std::sync::Arc;

use super::ReadSettings;
use super::block::{BlockParts, Blocks};
use super::fills::FillSlots;
use super::hedge::Hedger;
use super::integrity::{self, Integrity};
use super::manage::{self};
use super::metadata::{Metadata, MetadataParts};
use super::prefetch::Prefetcher;
use super::verify::Verifier;
use crate::budget::MemoryBudget;
use crate::cache::BlockCache;
use crate::fill_threads::FillThreads;
use crate::rules::{Policy, Rules};
use crate::shutdown::Shutdown;
use crate::source::{BlockSource, Lease, Peers};
use crate::telemetry::Metrics;
use crate::types::ObjectRef;

/// What a read path is built from, beside its settings.
pub struct ReadParts {
    pub cache: BlockCache,
    /// Where metadata and blocks come from: the upstream origins.
    pub source: Arc<dyn BlockSource>,
    pub metrics: Arc<Metrics>,
    /// The memory budget every block a request holds is charged to.
    pub budget: MemoryBudget,
    /// Prefetches in flight stop when it fires.
    pub shutdown: Shutdown,
    /// The other cluster members, in cluster mode.
    pub peers: Option<Arc<dyn Peers>>,
    /// Where block fills run (`FillThreads::serving()`: on the caller's runtime).
    pub fill_threads: FillThreads,
}

/// The read path. Cheap to clone.
#[derive(Clone)]
pub struct ReadPath {
    pub(super) metadata: Metadata,
    pub(super) blocks: Blocks,
    /// `None` when prefetch is off.
    pub(super) prefetcher: Option<Prefetcher>,
    pub(super) source: Arc<dyn BlockSource>,
    pub(super) budget: MemoryBudget,
    pub(super) metrics: Arc<Metrics>,
    pub(super) integrity: Integrity,
    pub(super) block_size: u64,
    pub(super) readahead_blocks: usize,
}

impl ReadPath {
    pub fn new(settings: ReadSettings, parts: ReadParts) -> Self {
        let ReadParts {
            cache,
            source,
            metrics,
            budget,
            shutdown,
            peers,
            fill_threads,
        } = parts;
        let (mut integrity, wrong) = Integrity::new(metrics.clone());
        let learns = settings.learn_checksums.then(|| integrity.learning());
        let lease = peers
            .as_ref()
            .map_or_else(|| Arc::new(Lease::alone()), |peers| peers.lease());
        let fills = FillSlots::new(settings.max_concurrent_fills, metrics.clone());
        let hedger = Hedger::new(
            settings.hedge_quantile,
            settings.hedge_min_delay,
            metrics.clone(),
        );
        let verifier = Verifier::new(settings.verify, source.clone(), integrity.clone());
        let blocks = Blocks::new(BlockParts {
            cache: cache.clone(),
            source: source.clone(),
            metrics: metrics.clone(),
            hedger,
            fills: fills.clone(),
            fill_threads,
            peers: peers.clone(),
            integrity: integrity.clone(),
            verifier,
        });
        let metadata = Metadata::new(MetadataParts {
            cache,
            source: source.clone(),
            metrics: metrics.clone(),
            rules: settings.rules,
            block_size: settings.block_size,
            serve_stale_on_error: settings.serve_stale_on_error,
            clustered: peers.is_some(),
            lease,
            integrity: integrity.clone(),
            fills: fills.clone(),
            streams: blocks.streams().clone(),
        });
        let prefetcher = Prefetcher::new(
            settings.prefetch_window_blocks,
            settings.prefetch_limits,
            blocks.clone(),
            budget.clone(),
            metrics.clone(),
            shutdown.clone(),
        );
        if let Some(learns) = learns {
            let learner = integrity.clone();
            integrity::learn_checksums(learns, source.clone(), learner, shutdown.clone());
        }
        manage::purge_wrong(wrong, &metadata, &blocks, peers, shutdown);
        Self {
            metadata,
            blocks,
            prefetcher,
            source,
            budget,
            metrics,
            integrity,
            block_size: settings.block_size,
            readahead_blocks: settings.readahead_blocks.max(1),
        }
    }

    /// The upstream fill slots, shared between tenants.
    pub fn fill_slots(&self) -> &FillSlots {
        self.blocks.fill_slots()
    }

    /// What the cache does for `object`: its `[[rules]]` entry's policy, or the defaults.
    pub fn policy(&self, object: &ObjectRef) -> &Arc<Policy> {
        self.metadata.policy(object)
    }

    /// The rules every object's policy comes from.
    pub fn rules(&self) -> &Arc<Rules> {
        self.metadata.rules()
    }

    /// The memory budget this read path charges its blocks to.
    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    #[cfg(test)]
    pub(super) fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    #[cfg(test)]
    pub(super) fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}
