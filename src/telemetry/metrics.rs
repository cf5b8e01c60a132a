//! Portico's Prometheus metrics: one struct, created at start and passed to every
//! component; foyer registers its own metrics in the same registry.
//!
//! Names follow `portico_<subsystem>_<name>_<unit>`; counters get `_total` appended by the
//! exposition format.
//!
//! Each metric's field and the methods that count it are here; its registration, with
//! the help text operators read, is in `metrics/register.rs`, one function per family,
//! and the label sets families are keyed by are in `metrics/label_sets.rs`.

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};

use super::labels::{
    BlockLookup, BudgetWait, EventRecord, EventRejection, HedgeOutcome, InvalidationResult,
    ListingLookup, MetadataLookup, PeerResult, PrefetchOutcome, ServedFrom,
};
use label_sets::{
    CauseLabel, DirectionLabel, LatencyBuckets, OperationLabel, ReasonLabel, RequestLabels,
    ResultLabel, SourceLabel, UpstreamLabel, UpstreamLabels, ZoneLabel,
};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    /// S3 requests answered, by operation and HTTP status.
    pub requests: Family<RequestLabels, Counter>,
    /// Time from a request's arrival to the end of its response body.
    pub request_duration: Family<OperationLabel, Histogram, LatencyBuckets>,
    /// Responses cut off after their headers were sent (upstream failure mid-body).
    pub response_aborts: Counter,
    /// Object bytes sent to clients, by where each block came from.
    pub served_bytes: Family<SourceLabel, Counter>,
    /// Block lookups by result: memory_hit, disk_hit, miss, coalesced.
    pub block_lookups: Family<ResultLabel, Counter>,
    /// Prefetched blocks by outcome: issued, used, wasted, skipped.
    pub prefetch_blocks: Family<ResultLabel, Counter>,
    /// Object metadata lookups by result: fresh, revalidated, changed, fetched, negative, missing.
    pub metadata_lookups: Family<ResultLabel, Counter>,
    /// Requests sent to the upstream, by operation and HTTP status.
    pub upstream_requests: Family<UpstreamLabels, Counter>,
    /// Body bytes received from the upstream.
    pub upstream_received_bytes: Counter,
    /// Upstream request latency, to the end of the response body.
    pub upstream_request_duration: Family<OperationLabel, Histogram, LatencyBuckets>,
    /// Upstream attempts after the first, by operation.
    pub upstream_retries: Family<OperationLabel, Counter>,
    /// Hedged block fetches: sent, and won (the hedge finished first).
    pub upstream_hedges: Family<ResultLabel, Counter>,
    /// Metadata lookups answered with the last known version because the upstream failed.
    pub stale_serves: Counter,
    /// Reads cut off after their headers were sent, by cause (`changed`, `upstream`,
    /// `busy`, `internal`).
    pub read_aborts: Family<CauseLabel, Counter>,
    /// 1 while the disk tier is off after an I/O error (memory-only), else 0.
    pub cache_degraded: Gauge,
    /// Per upstream: 1 when its last probe succeeded.
    upstream_up: Family<UpstreamLabel, Gauge>,
    /// Cached reads sent to an upstream's fallback after it failed, by upstream.
    upstream_failovers: Family<UpstreamLabel, Counter>,
    /// Upstream answers showing Portico's credential failing, by reason.
    pub upstream_credential_errors: Family<ReasonLabel, Counter>,
    /// Disk-tier I/O errors seen, by operation (read, write).
    pub cache_disk_errors: Family<OperationLabel, Counter>,
    /// Connections closed as soon as they were accepted, by reason (per_client).
    pub connections_refused: Family<ReasonLabel, Counter>,
    /// S3 connections accepted and not yet closed.
    pub connections_open: Gauge,
    /// Bytes requests hold charged to the memory budget (`server.max_inflight_bytes`).
    pub inflight_bytes: Gauge,
    /// The memory budget, in bytes.
    pub inflight_limit_bytes: Gauge,
    /// Requests for budget that could not be granted at once, by outcome.
    pub budget_waits: Family<ResultLabel, Counter>,
    /// GETs of objects without an ETag, streamed from the upstream and not cached.
    pub uncached_reads: Counter,
    /// Blocks served from memory that had skipped the disk tier, queued for it again.
    pub disk_readmissions: Counter,
    /// Blocks that found the disk write queue full and skipped the disk tier.
    pub disk_skipped_blocks: Counter,
    /// Bytes of block pieces queued for the disk tier and not yet written.
    pub disk_queue_bytes: Gauge,
    /// Free block buffers kept for the next fills (`buffers`).
    pub kept_buffer_bytes: Gauge,
    /// Blocks that had skipped the disk tier, written once it had room again.
    pub disk_retried_blocks: Counter,
    /// Blocks that had skipped the disk tier and were gone when it had room again.
    pub disk_lost_blocks: Counter,
    /// Time from handing a batch of pieces to the disk tier until it is written.
    pub disk_write_duration: Histogram,
    /// Block pieces read from disk for the second time, kept in memory.
    pub memory_admissions: Counter,
    /// Block pieces the disk tier listed that failed verification when read back.
    pub disk_corrupt_pieces: Counter,
    /// Members in this node's view of the cluster (0 when cluster mode is off).
    pub cluster_members: Gauge,
    pub cluster_lease_held: Gauge,
    /// Blocks this node asked of their owner, by result.
    pub peer_requests: Family<ResultLabel, Counter>,
    /// Blocks this node served to members that asked for them, by result.
    pub peer_served: Family<ResultLabel, Counter>,
    /// Block bytes received from and sent to members.
    pub peer_bytes: Family<DirectionLabel, Counter>,
    /// Block bytes received from members of this node's zone (`same`) and of others.
    pub peer_zone_bytes: Family<ZoneLabel, Counter>,
    /// Time a block request to its owner took, to the end of its body.
    pub peer_request_duration: Histogram,
    /// Cacheable listings by result: hit, miss.
    pub listing_lookups: Family<ResultLabel, Counter>,
    /// Cached listing pages dropped by a write, delete or purge under their prefix.
    pub listing_invalidations: Counter,
    /// Bytes of cached listing pages.
    pub listing_bytes: Gauge,
    /// Event notification records by what they did: purged, unchanged, ignored.
    event_records: Family<ResultLabel, Counter>,
    invalidations: Family<ResultLabel, Counter>,
    /// Event notification messages rejected, by reason: malformed, unauthorized.
    event_rejections: Family<ReasonLabel, Counter>,
    /// The integrity checks: objects compared with S3's CRC, mismatches, verify mode.
    pub integrity: IntegrityMetrics,
    /// Tenants: refusals over their limits, fills by class.
    pub tenants: TenantMetrics,
    /// Writes: clients that hung up, fleet rounds, members cut off.
    pub writes: WriteMetrics,
    /// Origin streams: opened, how they ended, the blocks they brought.
    pub streams: StreamMetrics,
    /// The cost ledger: origin traffic against what was served, by bucket and tenant.
    pub ledger: Ledger,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let metrics = Self {
            registry: Arc::new(Mutex::new(Registry::default())),
            requests: Family::default(),
            request_duration: Family::new_with_constructor(LatencyBuckets),
            response_aborts: Counter::default(),
            served_bytes: Family::default(),
            block_lookups: Family::default(),
            prefetch_blocks: Family::default(),
            metadata_lookups: Family::default(),
            upstream_requests: Family::default(),
            upstream_received_bytes: Counter::default(),
            upstream_request_duration: Family::new_with_constructor(LatencyBuckets),
            upstream_retries: Family::default(),
            upstream_hedges: Family::default(),
            stale_serves: Counter::default(),
            read_aborts: Family::default(),
            cache_degraded: Gauge::default(),
            upstream_up: Family::default(),
            upstream_failovers: Family::default(),
            upstream_credential_errors: Family::default(),
            cache_disk_errors: Family::default(),
            connections_refused: Family::default(),
            connections_open: Gauge::default(),
            inflight_bytes: Gauge::default(),
            inflight_limit_bytes: Gauge::default(),
            budget_waits: Family::default(),
            disk_readmissions: Counter::default(),
            disk_skipped_blocks: Counter::default(),
            disk_queue_bytes: Gauge::default(),
            kept_buffer_bytes: Gauge::default(),
            disk_retried_blocks: Counter::default(),
            disk_lost_blocks: Counter::default(),
            disk_write_duration: LatencyBuckets.new_metric(),
            memory_admissions: Counter::default(),
            disk_corrupt_pieces: Counter::default(),
            uncached_reads: Counter::default(),
            cluster_members: Gauge::default(),
            cluster_lease_held: Gauge::default(),
            peer_requests: Family::default(),
            peer_served: Family::default(),
            peer_bytes: Family::default(),
            peer_zone_bytes: Family::default(),
            peer_request_duration: LatencyBuckets.new_metric(),
            listing_lookups: Family::default(),
            listing_invalidations: Counter::default(),
            listing_bytes: Gauge::default(),
            event_records: Family::default(),
            invalidations: Family::default(),
            event_rejections: Family::default(),
            integrity: IntegrityMetrics::default(),
            tenants: TenantMetrics::default(),
            writes: WriteMetrics::default(),
            streams: StreamMetrics::default(),
            ledger: Ledger::default(),
        };
        register::register_all(&mut registry, &metrics);
        *metrics.registry.lock() = registry;
        register::start_known_series_at_zero(&metrics);
        metrics
    }

    /// A registry handle for foyer's metrics, so they appear in the same exposition.
    pub fn foyer_registry(&self) -> mixtrics::metrics::BoxedRegistry {
        Box::new(
            mixtrics::registry::prometheus_client_0_24::PrometheusClientMetricsRegistry::new(
                self.registry.clone(),
            ),
        )
    }

    /// All metrics in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut text = String::new();
        let registry = self.registry.lock();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &registry) {
            tracing::error!(%error, "failed to render metrics");
        }
        text
    }

    pub fn count_block(&self, result: BlockLookup) {
        let result = result.as_str();
        self.block_lookups
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// Block lookups so far with `result`.
    pub fn block_lookups_of(&self, result: BlockLookup) -> u64 {
        let result = result.as_str();
        self.block_lookups
            .get_or_create(&ResultLabel { result })
            .get()
    }

    pub fn count_prefetch(&self, outcome: PrefetchOutcome, blocks: u64) {
        if blocks > 0 {
            let result = outcome.as_str();
            self.prefetch_blocks
                .get_or_create(&ResultLabel { result })
                .inc_by(blocks);
        }
    }

    pub fn count_metadata(&self, result: MetadataLookup) {
        let result = result.as_str();
        self.metadata_lookups
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    pub fn count_served(&self, source: ServedFrom, bytes: u64) {
        let source = source.as_str();
        self.served_bytes
            .get_or_create(&SourceLabel { source })
            .inc_by(bytes);
    }

    pub fn record_upstream(&self, operation: &'static str, status: u16, seconds: f64) {
        self.upstream_requests
            .get_or_create(&UpstreamLabels { operation, status })
            .inc();
        self.upstream_request_duration
            .get_or_create(&OperationLabel { operation })
            .observe(seconds);
    }

    pub fn count_retry(&self, operation: &'static str) {
        self.upstream_retries
            .get_or_create(&OperationLabel { operation })
            .inc();
    }

    pub fn count_disk_error(&self, operation: &'static str) {
        self.cache_disk_errors
            .get_or_create(&OperationLabel { operation })
            .inc();
    }

    pub fn count_credential_error(&self, reason: &'static str) {
        self.upstream_credential_errors
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    pub fn count_refused_connection(&self, reason: &'static str) {
        self.connections_refused
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    pub fn count_budget_wait(&self, outcome: BudgetWait) {
        let result = outcome.as_str();
        self.budget_waits
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// Budget requests so far with `outcome`.
    pub fn budget_waits_of(&self, outcome: BudgetWait) -> u64 {
        let result = outcome.as_str();
        self.budget_waits
            .get_or_create(&ResultLabel { result })
            .get()
    }

    pub fn count_uncached_read(&self) {
        self.uncached_reads.inc();
    }

    /// A read cut off after its headers were sent, by `cause`.
    pub fn count_read_abort(&self, cause: &'static str) {
        self.read_aborts.get_or_create(&CauseLabel { cause }).inc();
    }

    /// Reads cut off by `cause` so far.
    pub fn read_aborts(&self, cause: &'static str) -> u64 {
        self.read_aborts.get_or_create(&CauseLabel { cause }).get()
    }

    pub fn count_peer_request(&self, result: PeerResult) {
        self.peer_requests
            .get_or_create(&ResultLabel {
                result: result.as_str(),
            })
            .inc();
    }

    pub fn count_peer_served(&self, result: PeerResult, bytes: u64) {
        self.peer_served
            .get_or_create(&ResultLabel {
                result: result.as_str(),
            })
            .inc();
        self.peer_bytes
            .get_or_create(&DirectionLabel { direction: "sent" })
            .inc_by(bytes);
    }

    pub fn count_peer_received(&self, bytes: u64, seconds: f64) {
        self.peer_bytes
            .get_or_create(&DirectionLabel {
                direction: "received",
            })
            .inc_by(bytes);
        self.peer_request_duration.observe(seconds);
    }

    /// Block bytes received from a member of this node's zone (`same`) or another.
    pub fn count_peer_zone_bytes(&self, same: bool, bytes: u64) {
        let zone = if same { "same" } else { "cross" };
        self.peer_zone_bytes
            .get_or_create(&ZoneLabel { zone })
            .inc_by(bytes);
    }

    pub fn count_listing(&self, result: ListingLookup) {
        self.listing_lookups
            .get_or_create(&ResultLabel {
                result: result.as_str(),
            })
            .inc();
    }

    /// Whether the upstream `name` answered its last probe.
    pub fn set_upstream_up(&self, name: &str, up: bool) {
        self.upstream_up
            .get_or_create(&UpstreamLabel {
                upstream: name.to_owned(),
            })
            .set(i64::from(up));
    }

    /// Starts the series of the upstream `name` (down until probed, no failovers).
    pub fn start_upstream(&self, name: &str) {
        let label = UpstreamLabel {
            upstream: name.to_owned(),
        };
        drop(self.upstream_up.get_or_create(&label));
        drop(self.upstream_failovers.get_or_create(&label));
    }

    pub fn count_failover(&self, upstream: &str) {
        self.upstream_failovers
            .get_or_create(&UpstreamLabel {
                upstream: upstream.to_owned(),
            })
            .inc();
    }

    pub fn count_event_record(&self, result: EventRecord) {
        self.event_records
            .get_or_create(&ResultLabel {
                result: result.as_str(),
            })
            .inc();
    }

    pub fn count_invalidation(&self, result: InvalidationResult) {
        self.invalidations
            .get_or_create(&ResultLabel {
                result: result.as_str(),
            })
            .inc();
    }

    pub fn count_event_rejection(&self, reason: EventRejection) {
        self.event_rejections
            .get_or_create(&ReasonLabel {
                reason: reason.as_str(),
            })
            .inc();
    }

    pub fn count_hedge(&self, result: HedgeOutcome) {
        let result = result.as_str();
        self.upstream_hedges
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    pub fn record_request(&self, operation: &'static str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels { operation, status })
            .inc();
        self.request_duration
            .get_or_create(&OperationLabel { operation })
            .observe(seconds);
    }
}

mod integrity;
mod label_sets;
mod ledger;
mod register;
mod streams;
mod tenants;
mod writes;

pub use integrity::IntegrityMetrics;
pub use ledger::{Ledger, RequestKind};
pub use streams::{StreamEnd, StreamMetrics};
pub use tenants::TenantMetrics;
pub use writes::WriteMetrics;

#[cfg(test)]
mod tests;
