//! Object metadata as the cache keeps it: size, ETag and the headers a GET or HEAD returns,
//! plus when Portico last validated it against the upstream.
//!
//! Invariants: a record validated by an earlier process (another boot) is never trusted
//! without revalidation unless metadata is configured `immutable`; a record of this
//! process is trusted only under the write generation it was stored under (see
//! `read/generations.rs`), so a copy that comes back from anywhere after a write's invalidation
//! (foyer's disk write queue, a disk read that was under way) is never served.
//!
//! The records' disk encoding is in `meta/encoding.rs`.

mod encoding;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::MetadataTtl;
use crate::object::{Missing, ObjectMeta};

/// What is known about an object: its metadata, or that it does not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaState {
    Found(Arc<ObjectMeta>),
    Missing(Missing),
}

/// A metadata state and when it was last validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaRecord {
    pub state: MetaState,
    validated: Validation,
}

/// When a record was validated: which process (boot), how long after its start, and
/// under which write generation of its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Validation {
    boot_id: u64,
    millis_since_boot: u64,
    generation: u64,
}

/// The clock records are validated against: a random id per process and a monotonic
/// start instant (so wall-clock jumps never make stale metadata look fresh).
#[derive(Debug, Clone)]
pub struct MetaClock {
    boot_id: u64,
    started: Instant,
}

impl Default for MetaClock {
    fn default() -> Self {
        Self::new()
    }
}

/// The boot id of a record that must be revalidated before it is used again, whatever
/// its TTL (a write whose outcome is unknown may have replaced its version). No process
/// has it.
const MUST_REVALIDATE: u64 = 0;

impl MetaClock {
    pub fn new() -> Self {
        Self {
            boot_id: rand::random::<u64>() | 1,
            started: Instant::now(),
        }
    }

    /// `record`, expired under write generation `generation`: it is revalidated before it
    /// is served again, and served stale only where stale serving is allowed.
    pub fn expired(&self, record: &MetaRecord, generation: u64) -> MetaRecord {
        MetaRecord {
            state: record.state.clone(),
            validated: Validation {
                boot_id: MUST_REVALIDATE,
                millis_since_boot: 0,
                generation,
            },
        }
    }

    /// A record of `state` validated now, under its object's write generation
    /// `generation`.
    pub fn record(&self, state: MetaState, generation: u64) -> MetaRecord {
        let millis = self.started.elapsed().as_millis();
        MetaRecord {
            state,
            validated: Validation {
                boot_id: self.boot_id,
                millis_since_boot: u64::try_from(millis).unwrap_or(u64::MAX),
                generation,
            },
        }
    }

    fn millis_since_boot(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether `record` still speaks for its object now that the object's write
    /// generation is `generation`: it was stored under that generation, or by another
    /// process (whose records [`Self::is_fresh`] trusts only when `immutable`). A record
    /// stored under an earlier generation predates a write's invalidation; it may still
    /// be revalidated, never served as it is.
    pub fn vouches(&self, record: &MetaRecord, generation: u64) -> bool {
        let validated = record.validated;
        match validated.boot_id {
            MUST_REVALIDATE => validated.generation == generation,
            boot_id if boot_id == self.boot_id => validated.generation == generation,
            _ => true,
        }
    }

    /// Whether `record` can be used without asking the upstream, given its `ttl`.
    pub fn is_fresh(&self, record: &MetaRecord, ttl: MetadataTtl) -> bool {
        if record.validated.boot_id == MUST_REVALIDATE {
            return false;
        }
        let ttl = match (ttl, &record.state) {
            (MetadataTtl::Immutable, MetaState::Found(_)) => return true,
            (MetadataTtl::Immutable, MetaState::Missing(_)) => return false,
            (MetadataTtl::After(ttl), _) => ttl,
        };
        if record.validated.boot_id != self.boot_id {
            return false;
        }
        let age = self
            .millis_since_boot()
            .saturating_sub(record.validated.millis_since_boot);
        Duration::from_millis(age) < ttl
    }

    /// Which `window`-long stretch of this process's life it is now (the first is 0).
    pub fn epoch(&self, window: Duration) -> u64 {
        let window = u64::try_from(window.as_millis()).unwrap_or(u64::MAX).max(1);
        self.millis_since_boot() / window
    }

    /// How long `record` stays fresh under `ttl`: `None` when it never expires
    /// (`immutable`), zero once it has.
    pub fn remaining(&self, record: &MetaRecord, ttl: MetadataTtl) -> Option<Duration> {
        let MetadataTtl::After(ttl) = ttl else {
            return None;
        };
        if record.validated.boot_id != self.boot_id {
            return Some(Duration::ZERO);
        }
        let age = self
            .millis_since_boot()
            .saturating_sub(record.validated.millis_since_boot);
        Some(ttl.saturating_sub(Duration::from_millis(age)))
    }

    /// Whether a negative record is still within `negative_ttl`.
    pub fn is_fresh_negative(&self, record: &MetaRecord, negative_ttl: Duration) -> bool {
        matches!(record.state, MetaState::Missing(_))
            && self.is_fresh(record, MetadataTtl::After(negative_ttl))
    }
}

impl MetaRecord {
    pub fn meta(&self) -> Option<&Arc<ObjectMeta>> {
        match &self.state {
            MetaState::Found(meta) => Some(meta),
            MetaState::Missing(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Checksums;

    pub(crate) fn sample_meta() -> ObjectMeta {
        ObjectMeta {
            size: 12_345,
            etag: "\"5eb63bbbe01eeed093cb22bb8f5acdc3\"".to_owned(),
            last_modified_unix_secs: Some(1_790_000_000),
            version_id: None,
            content_type: Some("text/plain".to_owned()),
            content_encoding: Some("gzip".to_owned()),
            content_disposition: None,
            content_language: Some("en".to_owned()),
            cache_control: Some("max-age=60".to_owned()),
            expires: Some("Thu, 01 Dec 2094 16:00:00 GMT".to_owned()),
            user_metadata: vec![("owner".to_owned(), "ünïcode".to_owned())],
            checksums: Some(Checksums {
                values: vec![("crc32".to_owned(), "NhCmhg==".to_owned())],
                kind: Some("FULL_OBJECT".to_owned()),
            }),
            headers: vec![
                (
                    "x-amz-storage-class".to_owned(),
                    "REDUCED_REDUNDANCY".to_owned(),
                ),
                ("x-amz-tagging-count".to_owned(), "2".to_owned()),
            ],
        }
    }

    #[test]
    fn a_record_vouches_only_under_the_generation_it_was_stored_under() {
        let clock = MetaClock::new();
        let record = clock.record(MetaState::Found(Arc::new(sample_meta())), 3);
        assert!(clock.vouches(&record, 3));
        assert!(
            !clock.vouches(&record, 4),
            "a write invalidated the object since"
        );
        let mut bytes = Vec::new();
        record.encode(&mut bytes).unwrap();
        let reloaded = MetaRecord::decode(&mut bytes.as_slice()).unwrap();
        assert!(
            !clock.vouches(&reloaded, 4),
            "nor when it comes back from disk"
        );
        let expired = clock.expired(&record, 4);
        assert!(clock.vouches(&expired, 4) && !clock.vouches(&expired, 5));
    }

    #[test]
    fn version_token_falls_back_to_time_and_size() {
        let mut meta = sample_meta();
        assert_eq!(meta.version_token(), meta.etag);
        meta.etag.clear();
        assert_eq!(meta.version_token(), "lm:1790000000:12345");
    }

    #[tokio::test(start_paused = true)]
    async fn freshness_follows_the_ttl() {
        let clock = MetaClock::new();
        let record = clock.record(MetaState::Found(Arc::new(sample_meta())), 0);
        let ttl = MetadataTtl::After(Duration::from_secs(60));
        assert!(clock.is_fresh(&record, ttl));
        assert!(!clock.is_fresh(&record, MetadataTtl::After(Duration::ZERO)));
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(clock.is_fresh(&record, ttl));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!clock.is_fresh(&record, ttl));
        assert!(clock.is_fresh(&record, MetadataTtl::Immutable));
    }

    #[tokio::test(start_paused = true)]
    async fn records_from_another_boot_are_stale_unless_immutable() {
        let earlier = MetaClock::new();
        let record = earlier.record(MetaState::Found(Arc::new(sample_meta())), 0);
        let now = MetaClock::new();
        assert!(!now.is_fresh(&record, MetadataTtl::After(Duration::from_secs(3600))));
        assert!(now.is_fresh(&record, MetadataTtl::Immutable));
        let negative = earlier.record(MetaState::Missing(Missing::NoSuchKey), 0);
        assert!(!now.is_fresh(&negative, MetadataTtl::Immutable));
    }

    #[tokio::test(start_paused = true)]
    async fn negative_records_expire_after_the_negative_ttl() {
        let clock = MetaClock::new();
        let record = clock.record(MetaState::Missing(Missing::NoSuchKey), 0);
        assert!(clock.is_fresh_negative(&record, Duration::from_secs(5)));
        assert!(!clock.is_fresh_negative(&record, Duration::ZERO));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(!clock.is_fresh_negative(&record, Duration::from_secs(5)));
    }

    #[test]
    fn an_expired_record_is_stale_under_every_ttl_and_after_a_round_trip_to_disk() {
        let clock = MetaClock::new();
        let fresh = clock.record(MetaState::Found(Arc::new(sample_meta())), 0);
        let expired = clock.expired(&fresh, 0);
        assert_eq!(
            expired.state, fresh.state,
            "the version is kept, for stale serving"
        );
        let mut bytes = Vec::new();
        expired.encode(&mut bytes).unwrap();
        let reloaded = MetaRecord::decode(&mut bytes.as_slice()).unwrap();
        for record in [&expired, &reloaded] {
            assert!(!clock.is_fresh(record, MetadataTtl::After(Duration::from_secs(3600))));
            assert!(!clock.is_fresh(record, MetadataTtl::Immutable));
        }
    }
}
