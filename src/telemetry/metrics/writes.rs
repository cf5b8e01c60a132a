//! What writes through Portico cost beyond the origin's answer: clients that hung up
//! before it (the write ran to its end without them), and in cluster mode each write's
//! fleet round (docs/cluster.md, "Writes through any member") and the members it could
//! not tell.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{LatencyBuckets, ResultLabel};

/// How a write's fleet round ended.
pub const ROUND_RESULTS: [&str; 2] = ["confirmed", "waited"];

pub struct WriteMetrics {
    client_gone: Counter,
    rounds: Family<ResultLabel, Counter>,
    round_duration: Histogram,
    /// Members this node refuses leases: a write could not tell them.
    pub members_cut: Gauge,
    /// How long a write waits for a member's confirmation now, in seconds.
    pub confirm_deadline: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl Default for WriteMetrics {
    fn default() -> Self {
        Self {
            client_gone: Counter::default(),
            rounds: Family::default(),
            round_duration: LatencyBuckets.new_metric(),
            members_cut: Gauge::default(),
            confirm_deadline: Gauge::default(),
        }
    }
}

impl WriteMetrics {
    /// A write's client hung up before its answer; the write ran on to its end.
    pub fn count_client_gone(&self) {
        self.client_gone.inc();
    }

    /// A write's fleet round ended after `seconds`; `waited` when it waited for a member
    /// past the confirmations (for a cut member's lease to run out, or a member that had
    /// to confirm).
    pub fn count_round(&self, waited: bool, seconds: f64) {
        let result = ROUND_RESULTS[usize::from(waited)];
        self.rounds.get_or_create(&ResultLabel { result }).inc();
        self.round_duration.observe(seconds);
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "portico_writes_client_gone",
            "Writes (PUT, COPY, DELETE, multipart completion) whose client hung up before the answer: each still ran to its end, at the origin and, in cluster mode, through its fleet round",
            self.client_gone.clone(),
        );
        registry.register(
            "portico_cluster_write_rounds",
            "Fleet rounds of writes through this node (every member told of the write before its client is answered), by result: confirmed (every member that could hold metadata confirmed, or held no lease of this node), waited (the round waited for a member that did not confirm: until its lease ran out, or for its confirmation)",
            self.rounds.clone(),
        );
        registry.register(
            "portico_cluster_write_round_duration_seconds",
            "Time from the origin's answer to a write until every member was told or could no longer serve the old version",
            self.round_duration.clone(),
        );
        registry.register(
            "portico_cluster_members_cut",
                        "Members this node refuses leases because a write could not tell them; writes wait for each once, until its lease has run out, and not again until it has caught up",
            self.members_cut.clone(),
        );
        registry.register(
            "portico_cluster_confirm_deadline_seconds",
            "How long a write through this node waits for a member's confirmation before it cuts the member off: ten times what confirmations usually take in the fleet, between 0.25 s and 2 s",
            self.confirm_deadline.clone(),
        );
    }

    pub(super) fn start_at_zero(&self) {
        for result in ROUND_RESULTS {
            drop(self.rounds.get_or_create(&ResultLabel { result }));
        }
    }
}
