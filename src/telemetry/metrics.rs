//! Portico's Prometheus metrics: one struct, created at start and passed to every
//! component; foyer registers its own metrics in the same registry.
//!
//! Names follow `portico_<subsystem>_<name>_<unit>`; counters get `_total` appended by the
//! exposition format.
//!
//! One file over 500 lines because it is one struct: each metric's field, its registration
//! with the help text operators read, and the methods that count it stay side by side.

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};

use super::labels::{
    BlockLookup, BudgetWait, EventRecord, EventRejection, HedgeOutcome, InvalidationResult,
    ListingLookup, MetadataLookup, PeerResult, PrefetchOutcome, ServedFrom,
};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RequestLabels {
    pub operation: &'static str,
    pub status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct OperationLabel {
    pub operation: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SourceLabel {
    pub source: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct UpstreamLabel {
    pub upstream: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DirectionLabel {
    pub direction: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CauseLabel {
    pub cause: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct UpstreamLabels {
    pub operation: &'static str,
    /// HTTP status, or 0 when no response arrived (connect failure, timeout).
    pub status: u16,
}

/// Latency buckets from 0.5 ms to ~65 s.
#[derive(Clone)]
pub struct LatencyBuckets;

impl MetricConstructor<Histogram> for LatencyBuckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(exponential_buckets(0.0005, 2.0, 18))
    }
}

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
            peer_request_duration: LatencyBuckets.new_metric(),
            listing_lookups: Family::default(),
            listing_invalidations: Counter::default(),
            listing_bytes: Gauge::default(),
            event_records: Family::default(),
            invalidations: Family::default(),
            event_rejections: Family::default(),
        };
        registry.register(
            "portico_requests",
            "S3 requests answered, by operation and HTTP status",
            metrics.requests.clone(),
        );
        registry.register(
            "portico_request_duration_seconds",
            "Time from a request's arrival to the end of its response body",
            metrics.request_duration.clone(),
        );
        registry.register(
            "portico_response_aborts",
            "Responses cut off after their headers were sent, rather than send wrong bytes",
            metrics.response_aborts.clone(),
        );
        registry.register(
            "portico_served_bytes",
            "Object bytes sent to clients, by the tier each block came from",
            metrics.served_bytes.clone(),
        );
        registry.register(
            "portico_cache_block_lookups",
            "Block lookups by result (memory_hit, disk_hit, miss, coalesced)",
            metrics.block_lookups.clone(),
        );
        registry.register(
            "portico_prefetch_blocks",
            "Prefetched blocks by outcome: issued, used (a later read covered it), wasted (its stream went idle unread), skipped (budget spent)",
            metrics.prefetch_blocks.clone(),
        );
        registry.register(
            "portico_cache_metadata_lookups",
            "Object metadata lookups by result (fresh, revalidated, changed, fetched, negative, missing)",
            metrics.metadata_lookups.clone(),
        );
        registry.register(
            "portico_upstream_requests",
            "Requests sent to the upstream, by operation and HTTP status (0: no response)",
            metrics.upstream_requests.clone(),
        );
        registry.register(
            "portico_upstream_received_bytes",
            "Body bytes received from the upstream",
            metrics.upstream_received_bytes.clone(),
        );
        registry.register(
            "portico_upstream_request_duration_seconds",
            "Upstream request latency, to the end of the response body",
            metrics.upstream_request_duration.clone(),
        );
        registry.register(
            "portico_upstream_retries",
            "Upstream attempts after the first (retried errors and timeouts), by operation",
            metrics.upstream_retries.clone(),
        );
        registry.register(
            "portico_upstream_hedges",
            "Hedged block fetches: sent (the first request was slower than the hedge quantile), won (the hedge finished first), over_budget (a straggler not hedged: the hedge budget was spent)",
            metrics.upstream_hedges.clone(),
        );
        registry.register(
            "portico_stale_serves",
            "Metadata lookups answered with the last known version, past its TTL, because the upstream failed (serve_stale_on_error)",
            metrics.stale_serves.clone(),
        );
        registry.register(
            "portico_read_aborts",
            "Reads cut off after their headers were sent, by cause: the object changed and its version is gone, the upstream failed mid-body, the memory budget, an internal error",
            metrics.read_aborts.clone(),
        );
        registry.register(
            "portico_cache_degraded",
            "1 while the disk tier is off after a disk I/O error (the cache runs memory-only), else 0",
            metrics.cache_degraded.clone(),
        );
        registry.register(
            "portico_upstream_up",
            "1 when the last probe of an upstream (at most one per 5 s, made by /readyz and /metrics) got an answer that accepted Portico's credential, else 0; by upstream (default is [upstream])",
            metrics.upstream_up.clone(),
        );
        registry.register(
            "portico_upstream_failovers",
            "Cached reads (HEADs, block GETs) sent to an upstream's fallback after the upstream failed, by the upstream that failed",
            metrics.upstream_failovers.clone(),
        );
        registry.register(
            "portico_upstream_credential_errors",
            "Upstream requests that failed on Portico's own credential: missing (none could be loaded) or rejected (InvalidAccessKeyId, SignatureDoesNotMatch, expired token)",
            metrics.upstream_credential_errors.clone(),
        );
        registry.register(
            "portico_cache_disk_readmissions",
            "Blocks served from memory that the disk tier did not hold (they skipped it while its write queue was full, or memory served them before they were queued), queued for the disk again",
            metrics.disk_readmissions.clone(),
        );
        registry.register(
            "portico_cache_disk_skipped_blocks",
            "Blocks whose pieces found the disk write queue full while the disk finished no write for 2 s (it stalled) and skipped the disk tier; written once the disk has room again if memory still holds them",
            metrics.disk_skipped_blocks.clone(),
        );
        registry.register(
            "portico_cache_disk_queue_bytes",
            "Bytes of block pieces queued for the disk tier and not yet written",
            metrics.disk_queue_bytes.clone(),
        );
        registry.register(
            "portico_cache_disk_retried_blocks",
            "Blocks that had skipped the disk tier (portico_cache_disk_skipped_blocks_total), written once a disk write finished again, from the bytes kept for them or from memory",
            metrics.disk_retried_blocks.clone(),
        );
        registry.register(
            "portico_cache_disk_lost_blocks",
            "Blocks that had skipped the disk tier and were gone when it had room again: their bytes were not kept (over the bound) and memory had evicted them",
            metrics.disk_lost_blocks.clone(),
        );
        registry.register(
            "portico_cache_disk_write_duration_seconds",
            "Time from handing a batch of block pieces to the disk tier until it is written (it includes waiting for the disk tier to reclaim room)",
            metrics.disk_write_duration.clone(),
        );
        registry.register(
            "portico_cache_memory_admissions",
            "Block pieces read from disk a second time (within the doorkeeper's memory), kept in the memory tier; a piece read once is not",
            metrics.memory_admissions.clone(),
        );
        registry.register(
            "portico_cache_disk_corrupt_pieces",
            "Block pieces the disk tier listed that failed verification when read back (entry checksum, header, or length): dropped and fetched again, never served",
            metrics.disk_corrupt_pieces.clone(),
        );
        registry.register(
            "portico_cache_disk_errors",
            "Disk-tier I/O errors, by operation (read, write)",
            metrics.cache_disk_errors.clone(),
        );
        registry.register(
            "portico_connections_refused",
            "Connections closed as soon as they were accepted, by reason (per_client: the client address held max_connections_per_client)",
            metrics.connections_refused.clone(),
        );
        registry.register(
            "portico_connections_open",
            "S3 connections accepted and not yet closed (at most server.max_connections)",
            metrics.connections_open.clone(),
        );
        registry.register(
            "portico_memory_inflight_bytes",
            "Bytes requests hold beside the cache (blocks on their way to clients, readahead, prefetch, warm jobs, write-through buffers), charged to server.max_inflight_bytes",
            metrics.inflight_bytes.clone(),
        );
        registry.register(
            "portico_memory_inflight_limit_bytes",
            "The memory budget for bytes in flight (server.max_inflight_bytes)",
            metrics.inflight_limit_bytes.clone(),
        );
        registry.register(
            "portico_memory_budget_waits",
            "Requests for memory budget not granted at once: waited (then granted), refused (a GET answered 503 SlowDown after server.inflight_wait)",
            metrics.budget_waits.clone(),
        );
        registry.register(
            "portico_uncached_reads",
            "GETs of objects whose upstream sends no ETag: nothing names their version, so they are streamed from the upstream and never cached",
            metrics.uncached_reads.clone(),
        );
        registry.register(
            "portico_cluster_members",
            "Members in this node's view of the cluster (cluster.members or cluster.members_dns); 0 when cluster mode is off",
            metrics.cluster_members.clone(),
        );
        registry.register(
            "portico_cluster_lease_held",
            "1 while this node holds a lease from every other member and serves its cached metadata as it is; 0 while it revalidates every record first (cluster mode)",
            metrics.cluster_lease_held.clone(),
        );
        registry.register(
            "portico_cluster_peer_requests",
            "Blocks this node asked of the member that owns them, by result: hit (the owner had it cached), miss (the owner fetched it from the upstream), error (the request failed; the member is suspect), fallback (the block was then fetched from the upstream by this node)",
            metrics.peer_requests.clone(),
        );
        registry.register(
            "portico_cluster_invalidations",
            "Invalidations a write through this node sent to the other members, by result: confirmed (the member forgot the objects before the write was answered), failed (no confirmation within the bound)",
            metrics.invalidations.clone(),
        );
        registry.register(
            "portico_cluster_peer_served",
            "Blocks this node served to members that asked for them, by result: hit (from its cache), miss (fetched from the upstream), error (refused or failed)",
            metrics.peer_served.clone(),
        );
        registry.register(
            "portico_cluster_peer_bytes",
            "Block bytes exchanged with members, by direction (received, sent)",
            metrics.peer_bytes.clone(),
        );
        registry.register(
            "portico_cluster_peer_request_duration_seconds",
            "Time a block request to its owner took, to the end of its body",
            metrics.peer_request_duration.clone(),
        );
        registry.register(
            "portico_listing_cache_lookups",
            "ListObjectsV2 and ListObjects requests within listing.cached_prefixes, by result: hit (answered from the listing cache), miss (forwarded)",
            metrics.listing_lookups.clone(),
        );
        registry.register(
            "portico_listing_cache_invalidations",
            "Cached listing pages dropped because a write, delete or purge through Portico changed a key under their prefix",
            metrics.listing_invalidations.clone(),
        );
        registry.register(
            "portico_listing_cache_bytes",
            "Bytes of cached listing pages (at most listing.memory)",
            metrics.listing_bytes.clone(),
        );
        registry.register(
            "portico_event_records",
            "S3 event notification records (webhook or SQS) by result: purged (the object's metadata and blocks were dropped), unchanged (the cache already holds the version the event names), ignored (an event that changes no object's bytes)",
            metrics.event_records.clone(),
        );
        registry.register(
            "portico_event_messages_rejected",
            "S3 event notification messages rejected, by reason: malformed (not an S3, SNS or EventBridge event; nothing purged), unauthorized (webhook without events.token)",
            metrics.event_rejections.clone(),
        );
        *metrics.registry.lock() = registry;
        metrics.start_known_series_at_zero();
        metrics
    }

    /// Creates every series whose labels are known in advance, at 0: a family without a
    /// series is not exported at all, and `rate()`, `increase()` and the alert rules need
    /// a series from the first scrape, not from the first event.
    fn start_known_series_at_zero(&self) {
        let results = [
            (
                &self.block_lookups,
                &["memory_hit", "disk_hit", "miss", "coalesced"][..],
            ),
            (
                &self.prefetch_blocks,
                &["issued", "used", "wasted", "skipped"],
            ),
            (
                &self.metadata_lookups,
                &[
                    "fresh",
                    "revalidated",
                    "changed",
                    "fetched",
                    "negative",
                    "missing",
                ],
            ),
            (&self.upstream_hedges, &["sent", "won", "over_budget"]),
            (&self.budget_waits, &["waited", "refused"]),
            (&self.peer_requests, &["hit", "miss", "error", "fallback"]),
            (&self.peer_served, &["hit", "miss", "error"]),
            (&self.listing_lookups, &["hit", "miss"]),
            (&self.event_records, &["purged", "unchanged", "ignored"]),
            (&self.invalidations, &["confirmed", "failed"]),
        ];
        for (family, known) in results {
            for &result in known {
                drop(family.get_or_create(&ResultLabel { result }));
            }
        }
        for source in ["memory", "disk", "upstream", "coalesced"] {
            drop(self.served_bytes.get_or_create(&SourceLabel { source }));
        }
        for direction in ["received", "sent"] {
            drop(self.peer_bytes.get_or_create(&DirectionLabel { direction }));
        }
        for cause in ["changed", "upstream", "busy", "internal"] {
            drop(self.read_aborts.get_or_create(&CauseLabel { cause }));
        }
        for reason in ["malformed", "unauthorized"] {
            drop(self.event_rejections.get_or_create(&ReasonLabel { reason }));
        }
        for operation in ["read", "write"] {
            drop(
                self.cache_disk_errors
                    .get_or_create(&OperationLabel { operation }),
            );
        }
        for operation in ["GetObject", "HeadObject"] {
            drop(
                self.upstream_retries
                    .get_or_create(&OperationLabel { operation }),
            );
        }
        for reason in ["missing", "rejected"] {
            drop(
                self.upstream_credential_errors
                    .get_or_create(&ReasonLabel { reason }),
            );
        }
        drop(self.connections_refused.get_or_create(&ReasonLabel {
            reason: "per_client",
        }));
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

#[cfg(test)]
mod tests;
