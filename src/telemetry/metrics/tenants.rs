//! Tenants' metrics (docs/operations.md, "One cache for many teams"): requests refused
//! over a tenant's limits, and upstream fills granted by tenant and class. Tenant names
//! come from the credentials file, so the labels stay bounded.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RefusalLabels {
    tenant: String,
    limit: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct FillLabels {
    tenant: String,
    class: &'static str,
}

#[derive(Default)]
pub struct TenantMetrics {
    refusals: Family<RefusalLabels, Counter>,
    fills: Family<FillLabels, Counter>,
    /// Upstream fills waiting for a slot now.
    pub fills_waiting: Gauge,
}

impl TenantMetrics {
    /// A request of `tenant` refused with 503 SlowDown over its `limit`.
    pub fn count_refusal(&self, tenant: &str, limit: &'static str) {
        self.refusals
            .get_or_create(&RefusalLabels {
                tenant: tenant.to_owned(),
                limit,
            })
            .inc();
    }

    /// Requests of `tenant` refused over `limit` so far.
    pub fn refusals(&self, tenant: &str, limit: &'static str) -> u64 {
        self.refusals
            .get_or_create(&RefusalLabels {
                tenant: tenant.to_owned(),
                limit,
            })
            .get()
    }

    /// An upstream fill granted a slot for `tenant`, of `class`.
    pub fn count_fill(&self, tenant: &str, class: &'static str) {
        self.fills
            .get_or_create(&FillLabels {
                tenant: tenant.to_owned(),
                class,
            })
            .inc();
    }

    /// Upstream fills granted a slot for `tenant`, of `class`, so far.
    pub fn fills(&self, tenant: &str, class: &'static str) -> u64 {
        self.fills
            .get_or_create(&FillLabels {
                tenant: tenant.to_owned(),
                class,
            })
            .get()
    }

    /// The default tenant's series, so every family is exported from the start.
    pub(super) fn start_at_zero(&self, default_tenant: &str) {
        for limit in ["requests", "bytes", "fills"] {
            drop(self.refusals.get_or_create(&RefusalLabels {
                tenant: default_tenant.to_owned(),
                limit,
            }));
        }
        for class in ["demand", "prefetch", "warm"] {
            drop(self.fills.get_or_create(&FillLabels {
                tenant: default_tenant.to_owned(),
                class,
            }));
        }
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "portico_tenant_refusals",
            "Requests refused with 503 SlowDown over their tenant's limit, by tenant and limit: requests (max_requests_per_second), bytes (max_bytes_per_second: bytes served and filled beyond the rate are a debt that refuses requests until repaid), fills (as many fills waiting as max_concurrent_fills)",
            self.refusals.clone(),
        );
        registry.register(
            "portico_tenant_fills",
            "Upstream block fetches granted a fill slot (upstream.max_concurrent_fills), by tenant and class: demand, prefetch, warm",
            self.fills.clone(),
        );
        registry.register(
            "portico_tenant_fills_waiting",
            "Upstream block fetches waiting for a fill slot now, every tenant's",
            self.fills_waiting.clone(),
        );
    }
}
