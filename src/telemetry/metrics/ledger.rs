//! The cost ledger (docs/operations.md, "The cost ledger"): per bucket and tenant, the
//! origin requests by kind and the bytes they brought, against the requests served (and
//! how many of them never reached the origin) and the bytes sent; valued at the prices of
//! `[cost]`. Every origin request is counted once, when its answer's head arrives, with
//! the body bytes its `Content-Length` announces (none for a HEAD), which is what S3
//! bills. Buckets are labels only when the configuration names them; the rest count as
//! `other`, and requests that name no bucket as `-`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use crate::config::CostConfig;

/// The label of buckets the configuration does not name.
pub const OTHER_BUCKET: &str = "other";
/// The label of requests that name no bucket (ListBuckets, health checks).
pub const NO_BUCKET: &str = "-";
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// What an origin request, or a request served, was: what it is priced as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    Get,
    Head,
    List,
    /// Writes, deletes and everything else: counted, not priced (they go to the origin
    /// whatever a cache does).
    Other,
}

impl RequestKind {
    pub const VALUES: [&'static str; 4] = ["get", "head", "list", "other"];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::Head => "head",
            Self::List => "list",
            Self::Other => "other",
        }
    }

    /// The kind of the S3 operation named `operation`.
    pub fn of_operation(operation: &str) -> Self {
        match operation {
            "GetObject" => Self::Get,
            // Priced as a GET; its answer is a few hundred bytes of XML.
            "HeadObject" | "GetObjectAttributes" => Self::Head,
            operation if operation.starts_with("List") => Self::List,
            _ => Self::Other,
        }
    }
}

/// The price of one request of `kind` at `prices`.
fn request_price(prices: &CostConfig, kind: RequestKind) -> f64 {
    match kind {
        RequestKind::Get | RequestKind::Head => prices.get_per_1000 / 1000.0,
        RequestKind::List => prices.list_per_1000 / 1000.0,
        RequestKind::Other => 0.0,
    }
}

/// The price of `bytes` from the origin at `prices`.
fn bytes_price(prices: &CostConfig, bytes: u64) -> f64 {
    bytes as f64 / GIB * prices.origin_per_gib
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Labels {
    bucket: String,
    tenant: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    bucket: String,
    tenant: String,
    kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ServedLabels {
    bucket: String,
    tenant: String,
    origin: &'static str,
}

/// One bucket's and tenant's account: its totals, and its metric series (looked up once,
/// so counting a request allocates nothing).
struct Account {
    totals: Totals,
    series: Series,
}

/// What an account has counted.
#[derive(Debug, Default, Clone)]
struct Totals {
    origin_requests: [u64; 4],
    origin_bytes: u64,
    requests: u64,
    cache_only_requests: u64,
    served_bytes: u64,
    spent: f64,
    saved: f64,
}

/// An account's series of the ledger's metric families.
struct Series {
    origin_requests: [Counter; 4],
    origin_bytes: Counter,
    /// Requests served that reached the origin, and those that did not.
    reached: Counter,
    cache_only: Counter,
    served_bytes: Counter,
    spent: Counter<f64, AtomicU64>,
    saved: Counter<f64, AtomicU64>,
}

impl Totals {
    fn add(&mut self, other: &Totals) {
        for (total, count) in self.origin_requests.iter_mut().zip(other.origin_requests) {
            *total += count;
        }
        self.origin_bytes += other.origin_bytes;
        self.requests += other.requests;
        self.cache_only_requests += other.cache_only_requests;
        self.served_bytes += other.served_bytes;
        self.spent += other.spent;
        self.saved += other.saved;
    }

    fn json(&self) -> Value {
        let kinds: serde_json::Map<String, Value> = RequestKind::VALUES
            .iter()
            .zip(self.origin_requests)
            .map(|(kind, count)| ((*kind).to_owned(), json!(count)))
            .collect();
        json!({
            "origin_requests": kinds,
            "origin_bytes": self.origin_bytes,
            "requests": self.requests,
            "requests_without_origin": self.cache_only_requests,
            "served_bytes": self.served_bytes,
            "spent": self.spent,
            "saved": self.saved,
        })
    }
}

/// Accounts by bucket label, then tenant.
type Accounts = HashMap<Arc<str>, HashMap<Arc<str>, Account>>;

#[derive(Default)]
pub struct Ledger {
    prices: OnceLock<CostConfig>,
    /// The buckets the configuration names, as their labels.
    named: OnceLock<HashMap<String, Arc<str>>>,
    accounts: Mutex<Accounts>,
    origin_requests: Family<KindLabels, Counter>,
    origin_bytes: Family<Labels, Counter>,
    requests: Family<ServedLabels, Counter>,
    served_bytes: Family<Labels, Counter>,
    spent: Family<Labels, Counter<f64, AtomicU64>>,
    saved: Family<Labels, Counter<f64, AtomicU64>>,
}

impl Ledger {
    /// Sets the prices and the buckets named as labels, once, at startup.
    pub fn configure(&self, prices: CostConfig, buckets: &[String]) {
        let named = buckets
            .iter()
            .map(|bucket| (bucket.clone(), Arc::from(bucket.as_str())))
            .collect();
        let _ = self.prices.set(prices);
        let _ = self.named.set(named);
    }

    fn prices(&self) -> &CostConfig {
        self.prices.get_or_init(CostConfig::default)
    }

    /// The label `bucket` is counted under.
    pub fn bucket_label(&self, bucket: Option<&str>) -> Arc<str> {
        static OTHER: OnceLock<Arc<str>> = OnceLock::new();
        static NONE: OnceLock<Arc<str>> = OnceLock::new();
        match bucket {
            None => NONE.get_or_init(|| Arc::from(NO_BUCKET)).clone(),
            Some(bucket) => self
                .named
                .get()
                .and_then(|named| named.get(bucket).cloned())
                .unwrap_or_else(|| OTHER.get_or_init(|| Arc::from(OTHER_BUCKET)).clone()),
        }
    }

    /// Runs `count` on the account of `bucket` and `tenant`, opened on first use.
    fn with_account(&self, bucket: &Arc<str>, tenant: &str, count: impl FnOnce(&mut Account)) {
        let mut accounts = self.accounts.lock();
        let by_tenant = accounts.entry(bucket.clone()).or_default();
        if !by_tenant.contains_key(tenant) {
            let account = self.open(bucket, tenant);
            by_tenant.insert(Arc::from(tenant), account);
        }
        if let Some(account) = by_tenant.get_mut(tenant) {
            count(account);
        }
    }

    /// A new account, its series made in the families.
    fn open(&self, bucket: &str, tenant: &str) -> Account {
        let labels = Labels {
            bucket: bucket.to_owned(),
            tenant: tenant.to_owned(),
        };
        let kind = |kind: &'static str| {
            self.origin_requests
                .get_or_create(&KindLabels {
                    bucket: labels.bucket.clone(),
                    tenant: labels.tenant.clone(),
                    kind,
                })
                .clone()
        };
        let served = |origin: &'static str| {
            self.requests
                .get_or_create(&ServedLabels {
                    bucket: labels.bucket.clone(),
                    tenant: labels.tenant.clone(),
                    origin,
                })
                .clone()
        };
        Account {
            totals: Totals::default(),
            series: Series {
                origin_requests: RequestKind::VALUES.map(kind),
                origin_bytes: self.origin_bytes.get_or_create(&labels).clone(),
                reached: served("reached"),
                cache_only: served("none"),
                served_bytes: self.served_bytes.get_or_create(&labels).clone(),
                spent: self.spent.get_or_create(&labels).clone(),
                saved: self.saved.get_or_create(&labels).clone(),
            },
        }
    }

    /// An origin request of `kind` for `bucket`, charged to `tenant`, whose answer
    /// announced `bytes` of body.
    pub fn count_origin(&self, bucket: Option<&str>, tenant: &str, kind: RequestKind, bytes: u64) {
        let bucket = self.bucket_label(bucket);
        let prices = self.prices();
        let spent = request_price(prices, kind) + bytes_price(prices, bytes);
        self.with_account(&bucket, tenant, |account| {
            let totals = &mut account.totals;
            totals.origin_requests[kind as usize] += 1;
            totals.origin_bytes += bytes;
            totals.spent += spent;
            let series = &account.series;
            series.origin_requests[kind as usize].inc();
            series.origin_bytes.inc_by(bytes);
            series.spent.inc_by(spent);
        });
    }

    /// A request served to `tenant` for the bucket labelled `bucket`, of `kind`, with
    /// `bytes` of body; one that never `reached_origin` saved what the origin would have
    /// cost for it.
    pub fn count_served(
        &self,
        bucket: &Arc<str>,
        tenant: &str,
        kind: RequestKind,
        bytes: u64,
        reached_origin: bool,
    ) {
        let prices = self.prices();
        let saved = if reached_origin {
            0.0
        } else {
            request_price(prices, kind) + bytes_price(prices, bytes)
        };
        self.with_account(bucket, tenant, |account| {
            let totals = &mut account.totals;
            totals.requests += 1;
            totals.cache_only_requests += u64::from(!reached_origin);
            totals.served_bytes += bytes;
            totals.saved += saved;
            let series = &account.series;
            match reached_origin {
                true => series.reached.inc(),
                false => series.cache_only.inc(),
            };
            series.served_bytes.inc_by(bytes);
            series.saved.inc_by(saved);
        });
    }

    /// The ledger as `/admin/usage` shows it: the prices, the totals, and an account per
    /// bucket and tenant, in order.
    pub fn usage(&self) -> Value {
        let prices = self.prices();
        let accounts: BTreeMap<(String, String), Totals> = self
            .accounts
            .lock()
            .iter()
            .flat_map(|(bucket, by_tenant)| {
                by_tenant.iter().map(|(tenant, account)| {
                    (
                        (bucket.to_string(), tenant.to_string()),
                        account.totals.clone(),
                    )
                })
            })
            .collect();
        let mut total = Totals::default();
        let rows: Vec<Value> = accounts
            .iter()
            .map(|((bucket, tenant), totals)| {
                total.add(totals);
                let mut row = totals.json();
                row["bucket"] = json!(bucket);
                row["tenant"] = json!(tenant);
                row
            })
            .collect();
        json!({
            "currency": prices.currency,
            "prices": {
                "get_per_1000": prices.get_per_1000,
                "list_per_1000": prices.list_per_1000,
                "origin_per_gib": prices.origin_per_gib,
            },
            "total": total.json(),
            "accounts": rows,
        })
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "portico_ledger_origin_requests",
            "Origin requests by bucket (named in the configuration, else other), tenant and kind: get, head, list, other (writes and the rest), each attempt counted when its answer's head arrives",
            self.origin_requests.clone(),
        );
        registry.register(
            "portico_ledger_origin_bytes",
            "Body bytes the origin's answers announced, by bucket and tenant",
            self.origin_bytes.clone(),
        );
        registry.register(
            "portico_ledger_requests",
            "Requests served, by bucket, tenant and origin: none (served from the cache alone) or reached",
            self.requests.clone(),
        );
        registry.register(
            "portico_ledger_served_bytes",
            "Body bytes sent to clients, by bucket and tenant",
            self.served_bytes.clone(),
        );
        registry.register(
            "portico_ledger_spent",
            "What the origin requests and bytes cost at the prices of [cost], by bucket and tenant",
            self.spent.clone(),
        );
        registry.register(
            "portico_ledger_saved",
            "What the requests served without the origin would have cost it at the prices of [cost], by bucket and tenant",
            self.saved.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_add_up_and_are_valued_at_the_prices() {
        let ledger = Ledger::default();
        ledger.configure(
            CostConfig {
                origin_per_gib: 0.02,
                ..CostConfig::default()
            },
            &["datasets".to_owned()],
        );
        assert_eq!(&*ledger.bucket_label(Some("datasets")), "datasets");
        assert_eq!(&*ledger.bucket_label(Some("scratch")), OTHER_BUCKET);
        assert_eq!(&*ledger.bucket_label(None), NO_BUCKET);

        let gib = 1024 * 1024 * 1024;
        ledger.count_origin(Some("datasets"), "team", RequestKind::Get, gib);
        ledger.count_origin(Some("datasets"), "team", RequestKind::Head, 0);
        ledger.count_origin(Some("scratch"), "team", RequestKind::List, 100);
        ledger.count_origin(None, "default", RequestKind::List, 0);
        let datasets = ledger.bucket_label(Some("datasets"));
        for _ in 0..1000 {
            ledger.count_served(&datasets, "team", RequestKind::Get, gib / 1000, false);
        }
        ledger.count_served(&datasets, "team", RequestKind::Get, gib, true);

        let usage = ledger.usage();
        let total = &usage["total"];
        assert_eq!(total["origin_requests"]["get"], 1);
        assert_eq!(total["origin_requests"]["head"], 1);
        assert_eq!(total["origin_requests"]["list"], 2);
        assert_eq!(total["origin_bytes"], gib + 100);
        assert_eq!(total["requests"], 1001);
        assert_eq!(total["requests_without_origin"], 1000);
        let close = |value: &Value, expected: f64| {
            let value = value.as_f64().unwrap();
            assert!((value - expected).abs() < 1e-9, "{value} != {expected}");
        };
        // 1000 GETs at 0.0004 per 1000, and about a GiB at 0.02.
        close(
            &total["saved"],
            0.0004 + 0.02 * (gib / 1000 * 1000) as f64 / gib as f64,
        );
        close(
            &total["spent"],
            0.0004 / 1000.0 * 2.0 + 0.005 / 1000.0 * 2.0 + 0.02 * (gib + 100) as f64 / gib as f64,
        );
        let accounts = usage["accounts"].as_array().unwrap();
        assert_eq!(accounts.len(), 3, "{accounts:?}");
        assert!(
            accounts
                .iter()
                .any(|a| a["bucket"] == "other" && a["tenant"] == "team")
        );
        assert!(
            accounts
                .iter()
                .any(|a| a["bucket"] == "-" && a["tenant"] == "default")
        );
        assert_eq!(
            RequestKind::of_operation("ListObjectsV2"),
            RequestKind::List
        );
        assert_eq!(RequestKind::of_operation("PutObject"), RequestKind::Other);
    }
}
