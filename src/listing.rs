//! The listing cache: ListObjectsV2 and ListObjects pages within the configured
//! `listing.cached_prefixes`, answered from memory for `listing.ttl` with the status,
//! headers and body bytes the upstream sent.
//!
//! Invariants:
//! - A page is keyed by its bucket, every query parameter (prefix, delimiter, max-keys,
//!   start-after, continuation-token, marker, encoding-type, fetch-owner, …) and the
//!   request headers that change the answer, so no request gets another's page.
//! - Pages are served only to requests that passed authentication and the bucket scope
//!   check (the cache sits in the forwarding path, after both).
//! - Read-your-writes: a write or delete of a key through Portico, and a purge, drop every
//!   page of its bucket whose prefix covers the key before the write is answered. A page
//!   fetched while a write of its bucket was invalidating is not cached: each insert
//!   checks, under the lock every invalidation takes, that no write of the bucket came
//!   after the fetch began ([`WriteMark`]).
//! - In a fleet, a page is served as it is only while the fleet lease holds and has kept
//!   the epoch it had when the page's fetch began, as cached metadata is: a member that may
//!   have missed a write through another member (its lease ran out) fetches the listing
//!   again.
//! - Memory is bounded by `listing.memory`, least recently used pages first, and every
//!   page is charged to the memory budget (`server.max_inflight_bytes`): a page that finds
//!   no room is not cached.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::budget::{Charge, MemoryBudget};
use crate::config::ListingConfig;
use crate::source::Lease;
use crate::telemetry::{ListingLookup, Metrics};
use crate::types::ObjectRef;

/// Request headers that change a listing's answer.
const KEYED_HEADERS: [&str; 3] = [
    "x-amz-optional-object-attributes",
    "x-amz-request-payer",
    "x-amz-expected-bucket-owner",
];

/// Which page a listing request asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PageKey {
    bucket: String,
    /// The query parameters, sorted.
    query: Vec<(String, String)>,
    /// The keyed headers the request carries, by name.
    headers: Vec<(&'static str, Vec<u8>)>,
}

/// A page as the upstream answered it.
#[derive(Debug, Clone)]
pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

struct Stored {
    page: Page,
    /// The listing's prefix: writes under it drop the page.
    prefix: String,
    stored_at: Instant,
    /// The fleet lease's epoch when the page's fetch began.
    epoch: u64,
    last_used: u64,
    _charge: Charge,
}

#[derive(Default)]
struct State {
    pages: HashMap<PageKey, Stored>,
    bytes: u64,
    uses: u64,
    /// Invalidations so far, by bucket.
    writes: HashMap<String, u64>,
}

/// How many writes of a bucket the cache had seen when a listing's fetch began, and the
/// fleet lease's epoch then: its page is cached only if neither moved since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteMark {
    writes: u64,
    epoch: u64,
}

pub struct ListingCache {
    /// `(bucket, prefix)`; `None`: any bucket.
    places: Vec<(Option<String>, String)>,
    ttl: Duration,
    max_bytes: u64,
    state: Mutex<State>,
    budget: MemoryBudget,
    metrics: Arc<Metrics>,
    /// The fleet lease (a node alone always holds its own).
    lease: Arc<Lease>,
}

impl ListingCache {
    /// The cache `config` describes, serving pages under `lease`; `None` when it names no
    /// place.
    pub fn new(
        config: &ListingConfig,
        budget: MemoryBudget,
        metrics: Arc<Metrics>,
        lease: Arc<Lease>,
    ) -> Option<Self> {
        let places = config.places();
        (!places.is_empty()).then(|| Self {
            places,
            ttl: config.ttl.get(),
            max_bytes: config.memory.bytes(),
            state: Mutex::new(State::default()),
            budget,
            metrics,
            lease,
        })
    }

    /// The page a listing of `bucket` with `query` and `headers` asks for, when its prefix
    /// lies within a configured place.
    pub fn key(
        &self,
        bucket: &str,
        query: &[(String, String)],
        headers: &HeaderMap,
    ) -> Option<PageKey> {
        let prefix = prefix_of(query);
        let within = self.places.iter().any(|(place_bucket, place_prefix)| {
            place_bucket.as_deref().is_none_or(|name| name == bucket)
                && prefix.starts_with(place_prefix.as_str())
        });
        if !within {
            return None;
        }
        let mut query = query.to_vec();
        query.sort();
        let headers = KEYED_HEADERS
            .iter()
            .filter_map(|name| {
                headers
                    .get(*name)
                    .map(|value| (*name, value.as_bytes().to_vec()))
            })
            .collect();
        Some(PageKey {
            bucket: bucket.to_owned(),
            query,
            headers,
        })
    }

    /// The cached page for `key`, while it is fresh; counted as a hit or a miss.
    pub fn get(&self, key: &PageKey) -> Option<Page> {
        let mut state = self.state.lock();
        state.uses += 1;
        let uses = state.uses;
        // The lease first: a renewal after a lapse moves the epoch before it holds again.
        let leased = self.lease.holds();
        let epoch = self.lease.epoch();
        let found = match state.pages.get_mut(key) {
            Some(stored)
                if stored.stored_at.elapsed() < self.ttl && leased && stored.epoch == epoch =>
            {
                stored.last_used = uses;
                Some(stored.page.clone())
            }
            Some(_) => {
                remove(&mut state, key);
                None
            }
            None => None,
        };
        drop(state);
        self.metrics.count_listing(if found.is_some() {
            ListingLookup::Hit
        } else {
            ListingLookup::Miss
        });
        self.report();
        found
    }

    /// Where the writes of `bucket` stand: taken before a listing is fetched, for
    /// [`Self::insert`].
    pub fn mark(&self, bucket: &str) -> WriteMark {
        let epoch = self.lease.epoch();
        WriteMark {
            writes: self.state.lock().writes.get(bucket).copied().unwrap_or(0),
            epoch,
        }
    }

    /// Caches `page` (a 200 answer) for `key`, fetched since `mark`, evicting the least
    /// recently used pages to stay within `listing.memory`; not cached when a write of
    /// the bucket came after `mark` (the page may predate it), nor when the memory budget
    /// has no room.
    pub fn insert(&self, key: PageKey, page: Page, mark: WriteMark) {
        let bytes = page_bytes(&page);
        if bytes > self.max_bytes {
            return;
        }
        let Some(charge) = self.budget.try_reserve(bytes) else {
            return;
        };
        let prefix = prefix_of(&key.query).to_owned();
        let mut state = self.state.lock();
        if state.writes.get(&key.bucket).copied().unwrap_or(0) != mark.writes
            || self.lease.epoch() != mark.epoch
        {
            return;
        }
        remove(&mut state, &key);
        while state.bytes + bytes > self.max_bytes {
            let Some(oldest) = state
                .pages
                .iter()
                .min_by_key(|(_, stored)| stored.last_used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            remove(&mut state, &oldest);
        }
        state.uses += 1;
        let last_used = state.uses;
        state.bytes += bytes;
        state.pages.insert(
            key,
            Stored {
                page,
                prefix,
                stored_at: Instant::now(),
                epoch: mark.epoch,
                last_used,
                _charge: charge,
            },
        );
        drop(state);
        self.report();
    }

    /// Drops every page of `object`'s bucket whose prefix covers its key.
    pub fn invalidate(&self, object: &ObjectRef) {
        let mut state = self.state.lock();
        *state.writes.entry(object.bucket().to_owned()).or_default() += 1;
        let covering: Vec<PageKey> = state
            .pages
            .iter()
            .filter(|(key, stored)| {
                key.bucket == object.bucket() && object.key().starts_with(stored.prefix.as_str())
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in &covering {
            remove(&mut state, key);
        }
        drop(state);
        if !covering.is_empty() {
            self.metrics
                .listing_invalidations
                .inc_by(covering.len() as u64);
            self.report();
        }
    }

    fn report(&self) {
        let bytes = self.state.lock().bytes;
        self.metrics.listing_bytes.set(bytes as i64);
    }
}

fn remove(state: &mut State, key: &PageKey) {
    if let Some(stored) = state.pages.remove(key) {
        state.bytes -= page_bytes(&stored.page);
    }
}

/// The `prefix` query parameter ("" when absent: the whole bucket).
fn prefix_of(query: &[(String, String)]) -> &str {
    query
        .iter()
        .find(|(name, _)| name == "prefix")
        .map_or("", |(_, value)| value.as_str())
}

/// What a page holds in memory: its body and headers.
fn page_bytes(page: &Page) -> u64 {
    let headers: usize = page
        .headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    (page.body.len() + headers) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ByteSize, HumanDuration};
    use portico_fleet::ManualClock;

    fn cache(places: &[&str], memory: ByteSize) -> ListingCache {
        leased_cache(places, memory, Arc::new(Lease::alone()))
    }

    fn leased_cache(places: &[&str], memory: ByteSize, lease: Arc<Lease>) -> ListingCache {
        let config = ListingConfig {
            cached_prefixes: places.iter().map(|place| place.to_string()).collect(),
            ttl: HumanDuration::secs(30),
            memory,
        };
        let metrics = Arc::new(Metrics::new());
        let budget = MemoryBudget::new(64 << 20, Duration::from_secs(1), metrics.clone());
        ListingCache::new(&config, budget, metrics, lease).unwrap()
    }

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    fn page(body: &str) -> Page {
        Page {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body: Bytes::from(body.to_owned()),
        }
    }

    fn object(bucket: &str, key: &str) -> ObjectRef {
        ObjectRef::new(bucket, key).unwrap()
    }

    #[test]
    fn only_listings_within_a_configured_place_are_cached_and_every_parameter_keys_them() {
        let cache = cache(&["datasets/train/", "*/models/", "logs"], ByteSize::mib(1));
        let none = HeaderMap::new();
        let key = |bucket, pairs: &[(&str, &str)]| cache.key(bucket, &query(pairs), &none);
        assert!(
            key(
                "datasets",
                &[("list-type", "2"), ("prefix", "train/shard-")]
            )
            .is_some()
        );
        assert!(key("datasets", &[("list-type", "2"), ("prefix", "test/")]).is_none());
        assert!(
            key("datasets", &[("list-type", "2")]).is_none(),
            "the whole bucket"
        );
        assert!(key("anything", &[("prefix", "models/llama/")]).is_some());
        assert!(
            key("logs", &[]).is_some(),
            "a bare bucket name is the whole bucket"
        );
        // Order does not matter; any other value does.
        let a = key("logs", &[("prefix", "a"), ("max-keys", "2")]);
        assert_eq!(a, key("logs", &[("max-keys", "2"), ("prefix", "a")]));
        assert_ne!(a, key("logs", &[("max-keys", "3"), ("prefix", "a")]));
        assert_ne!(
            a,
            key(
                "logs",
                &[("max-keys", "2"), ("prefix", "a"), ("fetch-owner", "true")]
            )
        );
        let mut attributes = HeaderMap::new();
        attributes.insert(
            "x-amz-optional-object-attributes",
            "RestoreStatus".parse().unwrap(),
        );
        assert_ne!(
            a,
            cache.key(
                "logs",
                &query(&[("prefix", "a"), ("max-keys", "2")]),
                &attributes
            )
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_page_is_served_for_its_ttl_then_fetched_again() {
        let cache = cache(&["logs"], ByteSize::mib(1));
        let key = cache
            .key("logs", &query(&[("prefix", "2026/")]), &HeaderMap::new())
            .unwrap();
        assert!(cache.get(&key).is_none());
        cache.insert(key.clone(), page("<ListBucketResult/>"), cache.mark("logs"));
        tokio::time::advance(Duration::from_secs(29)).await;
        assert_eq!(cache.get(&key).unwrap().body, "<ListBucketResult/>");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(cache.get(&key).is_none(), "expired after listing.ttl");
    }

    #[test]
    fn in_a_fleet_a_page_is_served_only_while_the_lease_holds_in_the_epoch_it_was_fetched() {
        let clock = ManualClock::default();
        let lease = Arc::new(Lease::lapsed(clock.clock()));
        let cache = leased_cache(&["logs"], ByteSize::mib(1), lease.clone());
        let key = cache
            .key("logs", &query(&[("prefix", "2026/")]), &HeaderMap::new())
            .unwrap();
        let renew = || lease.renew(clock.now() + Duration::from_secs(3));
        renew();
        cache.insert(key.clone(), page("before"), cache.mark("logs"));
        assert!(cache.get(&key).is_some(), "the lease holds");

        // The lease runs out: a write through another member may have gone unheard.
        clock.advance(Duration::from_secs(4));
        assert!(
            cache.get(&key).is_none(),
            "not served while the lease has run out"
        );
        renew();
        assert!(
            cache.get(&key).is_none(),
            "nor after a renewal: the page is from the epoch before"
        );
        cache.insert(key.clone(), page("after"), cache.mark("logs"));
        assert_eq!(cache.get(&key).unwrap().body, "after");

        // A page whose fetch began before the lease ran out is not cached after it.
        let mark = cache.mark("logs");
        clock.advance(Duration::from_secs(4));
        renew();
        cache.insert(key.clone(), page("fetched across a lapse"), mark);
        assert!(cache.get(&key).is_none());
    }

    #[test]
    fn a_write_drops_the_pages_whose_prefix_covers_its_key_and_no_other() {
        let cache = cache(&["logs"], ByteSize::mib(1));
        let none = HeaderMap::new();
        let keys: Vec<PageKey> = ["", "2026/", "2026/11/", "2025/"]
            .iter()
            .map(|prefix| {
                cache
                    .key("logs", &query(&[("prefix", prefix)]), &none)
                    .unwrap()
            })
            .collect();
        for key in &keys {
            cache.insert(key.clone(), page("page"), cache.mark("logs"));
        }
        cache.invalidate(&object("other-bucket", "2026/11/a.log"));
        assert!(keys.iter().all(|key| cache.get(key).is_some()));
        cache.invalidate(&object("logs", "2026/11/a.log"));
        let left: Vec<bool> = keys.iter().map(|key| cache.get(key).is_some()).collect();
        assert_eq!(left, [false, false, false, true]);
    }

    #[test]
    fn a_page_fetched_before_a_write_of_its_bucket_is_not_cached_after_it() {
        let cache = cache(&["logs"], ByteSize::mib(1));
        let key = cache
            .key("logs", &query(&[("prefix", "2026/")]), &HeaderMap::new())
            .unwrap();
        // The listing's fetch begins, a write of the bucket is answered, the page arrives.
        let mark = cache.mark("logs");
        cache.invalidate(&object("logs", "2026/11/new.log"));
        cache.insert(key.clone(), page("without new.log"), mark);
        assert!(cache.get(&key).is_none(), "the page may predate the write");
        // A write of another bucket changes nothing here.
        let mark = cache.mark("logs");
        cache.invalidate(&object("other-bucket", "2026/11/new.log"));
        cache.insert(key.clone(), page("with new.log"), mark);
        assert_eq!(cache.get(&key).unwrap().body, "with new.log");
    }

    #[test]
    fn memory_is_bounded_least_recently_used_first() {
        let cache = cache(&["logs"], ByteSize::mib(1));
        let none = HeaderMap::new();
        let key = |at: usize| {
            cache
                .key("logs", &query(&[("prefix", &format!("{at}/"))]), &none)
                .unwrap()
        };
        let big = "x".repeat(300 << 10);
        for at in 0..3 {
            cache.insert(key(at), page(&big), cache.mark("logs"));
        }
        // Page 0 is used, so page 1 is the least recently used when page 3 arrives.
        assert!(cache.get(&key(0)).is_some());
        cache.insert(key(3), page(&big), cache.mark("logs"));
        let held: Vec<bool> = (0..4).map(|at| cache.get(&key(at)).is_some()).collect();
        assert_eq!(held, [true, false, true, true]);
        assert!(cache.state.lock().bytes <= 1 << 20);
    }
}
