//! The registration of every metric with the help text operators read, one function per
//! family, and the series that start at zero.

use prometheus_client::registry::Registry;

use super::{
    CauseLabel, DirectionLabel, Metrics, OperationLabel, ReasonLabel, ResultLabel, SourceLabel,
    ZoneLabel,
};

/// Registers every metric of `metrics` in `registry`.
pub(super) fn register_all(registry: &mut Registry, metrics: &Metrics) {
    requests(registry, metrics);
    cache(registry, metrics);
    upstream(registry, metrics);
    cluster(registry, metrics);
    listings_and_events(registry, metrics);
    metrics.integrity.register(registry);
    metrics.writes.register(registry);
    metrics.streams.register(registry);
    metrics.tenants.register(registry);
    metrics.ledger.register(registry);
}

/// Requests and responses: counts, durations, bytes served, aborts, connections.
fn requests(registry: &mut Registry, metrics: &Metrics) {
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
        "portico_read_aborts",
        "Reads cut off after their headers were sent, by cause: the object changed and its version is gone, the upstream failed mid-body, the memory budget, an internal error",
        metrics.read_aborts.clone(),
    );
    registry.register(
        "portico_uncached_reads",
        "GETs of objects whose upstream sends no ETag: nothing names their version, so they are streamed from the upstream and never cached",
        metrics.uncached_reads.clone(),
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
}

/// The cache: block and metadata lookups, prefetch, the disk tier and its write queue, the memory budget.
fn cache(registry: &mut Registry, metrics: &Metrics) {
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
        "portico_stale_serves",
        "Metadata lookups answered with the last known version, past its TTL, because the upstream failed (serve_stale_on_error)",
        metrics.stale_serves.clone(),
    );
    registry.register(
        "portico_cache_degraded",
        "1 while the disk tier is off after a disk I/O error (the cache runs memory-only), else 0",
        metrics.cache_degraded.clone(),
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
        "portico_cache_memory_kept_buffer_bytes",
        "Free block buffers whose pages are resident, kept for the next fills: those of blocks that left the memory tier, and at start those cache.memory_pretouch touched; trimmed to the tier's free room whenever something enters the tier",
        metrics.kept_buffer_bytes.clone(),
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
}

/// The upstreams: requests, bytes, retries, hedges, health, failovers, credentials.
fn upstream(registry: &mut Registry, metrics: &Metrics) {
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
}

/// Cluster mode: members, the fleet lease, peer requests and invalidations.
fn cluster(registry: &mut Registry, metrics: &Metrics) {
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
        "portico_cluster_peer_zone_bytes",
        "Block bytes received from members, by zone: same (a member of this node's cluster.zone) or cross (another zone, or none configured)",
        metrics.peer_zone_bytes.clone(),
    );
    registry.register(
        "portico_cluster_peer_request_duration_seconds",
        "Time a block request to its owner took, to the end of its body",
        metrics.peer_request_duration.clone(),
    );
}

/// The listing cache and S3 event notifications.
fn listings_and_events(registry: &mut Registry, metrics: &Metrics) {
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
}

/// Creates every series whose labels are known in advance, at 0: a family without a
/// series is not exported at all, and `rate()`, `increase()` and the alert rules need
/// a series from the first scrape, not from the first event.
pub(super) fn start_known_series_at_zero(metrics: &Metrics) {
    let results = [
        (
            &metrics.block_lookups,
            &["memory_hit", "disk_hit", "miss", "coalesced"][..],
        ),
        (
            &metrics.prefetch_blocks,
            &["issued", "used", "wasted", "skipped"],
        ),
        (
            &metrics.metadata_lookups,
            &[
                "fresh",
                "revalidated",
                "changed",
                "fetched",
                "negative",
                "missing",
            ],
        ),
        (&metrics.upstream_hedges, &["sent", "won", "over_budget"]),
        (&metrics.budget_waits, &["waited", "refused"]),
        (
            &metrics.peer_requests,
            &["hit", "miss", "error", "fallback", "late"],
        ),
        (&metrics.peer_served, &["hit", "miss", "error"]),
        (&metrics.listing_lookups, &["hit", "miss"]),
        (&metrics.event_records, &["purged", "unchanged", "ignored"]),
        (&metrics.invalidations, &["confirmed", "failed"]),
    ];
    for (family, known) in results {
        for &result in known {
            drop(family.get_or_create(&ResultLabel { result }));
        }
    }
    for source in ["memory", "disk", "upstream", "coalesced"] {
        drop(metrics.served_bytes.get_or_create(&SourceLabel { source }));
    }
    for direction in ["received", "sent"] {
        drop(
            metrics
                .peer_bytes
                .get_or_create(&DirectionLabel { direction }),
        );
    }
    for zone in ["same", "cross"] {
        drop(metrics.peer_zone_bytes.get_or_create(&ZoneLabel { zone }));
    }
    for cause in ["changed", "upstream", "busy", "internal"] {
        drop(metrics.read_aborts.get_or_create(&CauseLabel { cause }));
    }
    for reason in ["malformed", "unauthorized"] {
        drop(
            metrics
                .event_rejections
                .get_or_create(&ReasonLabel { reason }),
        );
    }
    for operation in ["read", "write"] {
        drop(
            metrics
                .cache_disk_errors
                .get_or_create(&OperationLabel { operation }),
        );
    }
    for operation in ["GetObject", "HeadObject"] {
        drop(
            metrics
                .upstream_retries
                .get_or_create(&OperationLabel { operation }),
        );
    }
    for reason in ["missing", "rejected"] {
        drop(
            metrics
                .upstream_credential_errors
                .get_or_create(&ReasonLabel { reason }),
        );
    }
    drop(metrics.connections_refused.get_or_create(&ReasonLabel {
        reason: "per_client",
    }));
    metrics.integrity.start_at_zero();
    metrics.writes.start_at_zero();
    metrics.streams.start_at_zero();
    // The tenant of requests without a credential (`crate::tenant::DEFAULT_TENANT`).
    metrics.tenants.start_at_zero("default");
}
