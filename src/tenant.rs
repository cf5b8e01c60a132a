//! Tenants: who a request is charged to, and the limits that keep one team from starving
//! the others. A tenant is a client credential, or a named group of them: a
//! `[[tenants]]` entry of the credentials file that credentials join with `tenant =
//! "<name>"`. A credential that names no tenant is a tenant of its own, named by its
//! access key id (a `[[tenants]]` entry of that name sets its limits). Requests without a
//! credential (`auth.mode = "none"`) belong to the tenant [`DEFAULT_TENANT`].
//!
//! Limits, each optional: bytes served per second and requests per second (token buckets
//! of one second's worth, so a burst of one second passes), upstream fills in flight
//! (enforced where fills are granted, `read::fills`), and a weight for the tenant's share
//! of the fill slots. Tenants are few and named by the operator, so their names are
//! bounded metric labels.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use serde::Deserialize;

use crate::config::ByteSize;

/// The tenant of requests without a credential, of warm jobs, and of fills other members
/// ask this node for in a tenant it does not know.
pub const DEFAULT_TENANT: &str = "default";

/// The largest accepted weight: a share 10,000 times another's is already all of it.
pub const MAX_WEIGHT: u32 = 10_000;

/// A `[[tenants]]` entry of the credentials file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    pub name: String,
    /// Bytes per second, on average over a second: object data served to the tenant,
    /// plus the blocks its fills fetched from the origin.
    #[serde(default)]
    pub max_bytes_per_second: Option<ByteSize>,
    /// Requests per second, on average over a second.
    #[serde(default)]
    pub max_requests_per_second: Option<u32>,
    /// Upstream fills in flight for the tenant at most; more wait their turn.
    #[serde(default)]
    pub max_concurrent_fills: Option<u32>,
    /// The tenant's share of the fill slots against the others' (1 to 10,000).
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

impl TenantSpec {
    /// A tenant without limits, of weight 1.
    pub fn unlimited(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            max_bytes_per_second: None,
            max_requests_per_second: None,
            max_concurrent_fills: None,
            weight: 1,
        }
    }

    /// Why the entry cannot be used, if it cannot.
    pub fn problem(&self) -> Option<String> {
        let name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if self.name.is_empty() || self.name.len() > 64 || !self.name.chars().all(name) {
            return Some(format!(
                "tenant name {:?}: expected 1 to 64 letters, digits, '-', '_' or '.'",
                self.name
            ));
        }
        if self.name == DEFAULT_TENANT {
            return Some(format!(
                "tenant name {DEFAULT_TENANT:?} is reserved: it is the tenant of requests without a credential and of warm jobs"
            ));
        }
        let zero = [
            (
                "max_bytes_per_second",
                self.max_bytes_per_second.map(|b| b.0),
            ),
            (
                "max_requests_per_second",
                self.max_requests_per_second.map(u64::from),
            ),
            (
                "max_concurrent_fills",
                self.max_concurrent_fills.map(u64::from),
            ),
        ]
        .into_iter()
        .find(|(_, value)| *value == Some(0));
        if let Some((key, _)) = zero {
            return Some(format!(
                "tenant {}: {key} must be above 0 (leave it out for no limit)",
                self.name
            ));
        }
        if !(1..=MAX_WEIGHT).contains(&self.weight) {
            return Some(format!(
                "tenant {}: weight must be 1 to {MAX_WEIGHT}",
                self.name
            ));
        }
        None
    }
}

/// The limit a refused request ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Requests,
    Bytes,
    Fills,
}

impl Limit {
    /// The `limit` label of `portico_tenant_refusals_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requests => "requests",
            Self::Bytes => "bytes",
            Self::Fills => "fills",
        }
    }
}

/// A token bucket of one second's worth (at least one token). Charges past empty leave a
/// debt that refills first.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    capacity: f64,
    tokens: f64,
    refilled: Instant,
}

impl Bucket {
    fn new(rate: u64) -> Self {
        let rate = rate as f64;
        let capacity = rate.max(1.0);
        Self {
            rate,
            capacity,
            tokens: capacity,
            refilled: Instant::now(),
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.capacity);
        self.refilled = now;
    }

    /// Takes `amount` when there is that much.
    fn take(&mut self, amount: f64, now: Instant) -> bool {
        self.refill(now);
        if self.tokens < amount {
            return false;
        }
        self.tokens -= amount;
        true
    }

    /// Whether more was charged than has refilled.
    fn in_debt(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens < 0.0
    }

    fn charge(&mut self, amount: f64) {
        self.tokens -= amount;
    }
}

/// One tenant's limits and their state. Shared by every request of the tenant.
#[derive(Debug)]
pub struct Tenant {
    /// The name, shared by whatever keys state by tenant.
    name: Arc<str>,
    spec: TenantSpec,
    requests: Option<Mutex<Bucket>>,
    bytes: Option<Mutex<Bucket>>,
}

impl Tenant {
    pub fn new(spec: TenantSpec) -> Self {
        Self {
            requests: spec
                .max_requests_per_second
                .map(|rate| Mutex::new(Bucket::new(u64::from(rate)))),
            bytes: spec
                .max_bytes_per_second
                .map(|rate| Mutex::new(Bucket::new(rate.0))),
            name: Arc::from(spec.name.as_str()),
            spec,
        }
    }

    /// A tenant without limits.
    pub fn unlimited(name: &str) -> Self {
        Self::new(TenantSpec::unlimited(name))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name as a shared key.
    pub fn key(&self) -> Arc<str> {
        self.name.clone()
    }

    pub fn spec(&self) -> &TenantSpec {
        &self.spec
    }

    pub fn weight(&self) -> u32 {
        self.spec.weight
    }

    /// Upstream fills in flight for it at most, if limited.
    pub fn max_concurrent_fills(&self) -> Option<usize> {
        self.spec.max_concurrent_fills.map(|fills| fills as usize)
    }

    /// Admits one request, or names the limit it is over: bytes served and filled beyond
    /// the rate (until the debt has refilled), then requests beyond the rate.
    pub fn admit(&self) -> Result<(), Limit> {
        let now = Instant::now();
        if let Some(bytes) = &self.bytes
            && bytes.lock().in_debt(now)
        {
            return Err(Limit::Bytes);
        }
        if let Some(requests) = &self.requests
            && !requests.lock().take(1.0, now)
        {
            return Err(Limit::Requests);
        }
        Ok(())
    }

    /// Bytes of a response sent to the tenant, or of a block fetched for it.
    pub fn charge_bytes(&self, sent: u64) {
        if let Some(bytes) = &self.bytes {
            bytes.lock().charge(sent as f64);
        }
    }
}

/// The tenants in force: every `[[tenants]]` entry and every credential's own tenant,
/// plus [`DEFAULT_TENANT`].
#[derive(Debug)]
pub struct Tenants {
    by_name: HashMap<String, Arc<Tenant>>,
    default: Arc<Tenant>,
}

impl Default for Tenants {
    fn default() -> Self {
        Self::new(&[], std::iter::empty(), None)
    }
}

impl Tenants {
    /// The tenants `specs` define, plus an unlimited one for every name of `members` no
    /// entry defines. A tenant whose entry is unchanged from `previous` keeps its state
    /// (a reload does not refill a bucket).
    pub fn new<'a>(
        specs: &[TenantSpec],
        members: impl Iterator<Item = &'a str>,
        previous: Option<&Tenants>,
    ) -> Self {
        let build = |spec: TenantSpec| -> Arc<Tenant> {
            match previous.and_then(|previous| previous.by_name.get(&spec.name)) {
                Some(kept) if kept.spec == spec => kept.clone(),
                _ => Arc::new(Tenant::new(spec)),
            }
        };
        let mut by_name: HashMap<String, Arc<Tenant>> = specs
            .iter()
            .map(|spec| (spec.name.clone(), build(spec.clone())))
            .collect();
        for name in members.chain([DEFAULT_TENANT]) {
            if !by_name.contains_key(name) {
                by_name.insert(name.to_owned(), build(TenantSpec::unlimited(name)));
            }
        }
        let default = by_name[DEFAULT_TENANT].clone();
        Self { by_name, default }
    }

    /// The tenant `name`, else the default one.
    pub fn get(&self, name: &str) -> Arc<Tenant> {
        self.by_name
            .get(name)
            .cloned()
            .unwrap_or_else(|| self.default.clone())
    }

    /// The tenant of requests without a credential.
    pub fn default_tenant(&self) -> Arc<Tenant> {
        self.default.clone()
    }
}

/// Who the origin requests made while serving a request are charged to, and how many
/// it made: the request's task carries it (see [`charged`]).
#[derive(Debug, Clone)]
pub struct Charge {
    pub tenant: Arc<Tenant>,
    origin_requests: Arc<AtomicU64>,
}

impl Charge {
    pub fn new(tenant: Arc<Tenant>) -> Self {
        Self {
            tenant,
            origin_requests: Arc::default(),
        }
    }

    /// Origin requests made under this charge so far.
    pub fn origin_requests(&self) -> u64 {
        self.origin_requests.load(Ordering::Relaxed)
    }
}

tokio::task_local! {
    static CHARGE: Charge;
}

/// Runs `future` with `charge` as the charge of the origin requests it makes in its task
/// (work it spawns carries its own, or none).
pub async fn charged<F: Future>(charge: Charge, future: F) -> F::Output {
    CHARGE.scope(charge, future).await
}

/// The charge of the task running now, if it has one.
pub fn current_charge() -> Option<Charge> {
    CHARGE.try_with(Charge::clone).ok()
}

/// `future`, charged to the task that calls this (if it has a charge) wherever it runs:
/// for work spawned on a caller's behalf.
pub fn for_the_caller<F: Future>(future: F) -> impl Future<Output = F::Output> {
    let charge = current_charge();
    async move {
        match charge {
            Some(charge) => charged(charge, future).await,
            None => future.await,
        }
    }
}

/// Counts an origin request against the task's charge: the tenant it is charged to, if
/// the task has one.
pub fn note_origin_request() -> Option<Arc<Tenant>> {
    CHARGE
        .try_with(|charge| {
            charge.origin_requests.fetch_add(1, Ordering::Relaxed);
            charge.tenant.clone()
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn spec(name: &str) -> TenantSpec {
        TenantSpec::unlimited(name)
    }

    #[test]
    fn requests_beyond_the_rate_are_refused_until_the_bucket_refills() {
        let tenant = Tenant::new(TenantSpec {
            max_requests_per_second: Some(3),
            ..spec("t")
        });
        let start = Instant::now();
        let mut bucket = tenant.requests.as_ref().unwrap().lock();
        for _ in 0..3 {
            assert!(bucket.take(1.0, start));
        }
        assert!(!bucket.take(1.0, start), "a second's worth, then refused");
        assert!(!bucket.take(1.0, start + Duration::from_millis(300)));
        assert!(
            bucket.take(1.0, start + Duration::from_millis(340)),
            "1/3 s later, one more"
        );
        drop(bucket);
        let unlimited = Tenant::unlimited("u");
        assert!((0..10_000).all(|_| unlimited.admit().is_ok()));
    }

    #[test]
    fn bytes_beyond_the_rate_are_a_debt_that_refuses_requests_until_repaid() {
        let tenant = Tenant::new(TenantSpec {
            max_bytes_per_second: Some(ByteSize(1000)),
            ..spec("t")
        });
        assert_eq!(tenant.admit(), Ok(()));
        tenant.charge_bytes(3000);
        assert_eq!(tenant.admit(), Err(Limit::Bytes), "2000 bytes in debt");
        let mut bucket = tenant.bytes.as_ref().unwrap().lock();
        let now = Instant::now();
        assert!(bucket.in_debt(now + Duration::from_millis(1900)));
        assert!(
            !bucket.in_debt(now + Duration::from_millis(2100)),
            "repaid in 2 s"
        );
    }

    #[test]
    fn entries_are_checked_and_a_reload_keeps_the_state_of_unchanged_tenants() {
        for (bad, expected) in [
            (spec("has space"), "tenant name"),
            (spec(""), "tenant name"),
            (spec("default"), "reserved"),
            (
                TenantSpec {
                    max_concurrent_fills: Some(0),
                    ..spec("t")
                },
                "max_concurrent_fills must be above 0",
            ),
            (
                TenantSpec {
                    weight: 0,
                    ..spec("t")
                },
                "weight",
            ),
        ] {
            let problem = bad.problem().expect("refused");
            assert!(problem.contains(expected), "{problem}");
        }
        assert_eq!(spec("team-a.prod_1").problem(), None);

        let limited = TenantSpec {
            max_requests_per_second: Some(5),
            ..spec("team")
        };
        let first = Tenants::new(std::slice::from_ref(&limited), ["alone"].into_iter(), None);
        assert_eq!(first.get("team").spec(), &limited);
        assert_eq!(first.get("alone").spec(), &spec("alone"));
        assert_eq!(first.get("nobody").name(), DEFAULT_TENANT);
        let second = Tenants::new(&[limited], ["alone"].into_iter(), Some(&first));
        assert!(Arc::ptr_eq(&first.get("team"), &second.get("team")));
        let changed = TenantSpec {
            max_requests_per_second: Some(6),
            ..spec("team")
        };
        let third = Tenants::new(&[changed], std::iter::empty(), Some(&second));
        assert!(!Arc::ptr_eq(&second.get("team"), &third.get("team")));
        assert_eq!(third.get("alone").name(), DEFAULT_TENANT);
    }
}
