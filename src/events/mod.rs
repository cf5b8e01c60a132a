//! Invalidation from S3 event notifications: messages pushed to `POST /events/s3` on the
//! admin listener (`crate::admin`) or read from an SQS queue (`sqs.rs`) are parsed
//! (`notice.rs`) and every object they say was created or removed is purged — metadata
//! and blocks, on every member in cluster mode — so the next read fetches the new version
//! whatever `metadata_ttl` says.
//!
//! Invariants: a malformed message purges nothing; a created object whose new ETag is the
//! version the cache already holds (a write through Portico, announced afterwards) is left
//! alone on this node; a purge that fails is reported, so the message is not acknowledged.

mod notice;
mod sqs;

use std::collections::HashSet;
use std::sync::Arc;

pub use notice::{Change, ChangeKind, Malformed, parse};
pub use sqs::SqsConsumer;

use crate::cluster::{Cluster, PurgeRequest};
use crate::read::ReadPath;
use crate::telemetry::{EventRecord, Metrics};
use crate::types::ObjectRef;
use crate::warm::{Maintenance, Selector};

/// What one message did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Applied {
    pub records: usize,
    pub purged: usize,
    pub unchanged: usize,
    pub ignored: usize,
    /// Objects whose purge failed somewhere, with why.
    pub failed: Vec<String>,
}

/// Purges what event notifications say changed. Cheap to clone.
#[derive(Clone)]
pub struct Invalidator {
    read: ReadPath,
    maintenance: Maintenance,
    cluster: Option<Arc<Cluster>>,
    metrics: Arc<Metrics>,
}

impl Invalidator {
    pub fn new(
        read: ReadPath,
        maintenance: Maintenance,
        cluster: Option<Arc<Cluster>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            read,
            maintenance,
            cluster,
            metrics,
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Purges every object `changes` created or removed (each once).
    pub async fn apply(&self, changes: &[Change]) -> Applied {
        let mut applied = Applied {
            records: changes.len(),
            ..Applied::default()
        };
        let mut seen: HashSet<&ObjectRef> = HashSet::new();
        for change in changes {
            let result = if change.kind == ChangeKind::Other || !seen.insert(&change.object) {
                EventRecord::Ignored
            } else if self.holds(change).await {
                EventRecord::Unchanged
            } else {
                match self.purge(&change.object).await {
                    Ok(()) => EventRecord::Purged,
                    Err(error) => {
                        applied.failed.push(format!("{}: {error}", change.object));
                        continue;
                    }
                }
            };
            self.metrics.count_event_record(result);
            match result {
                EventRecord::Purged => applied.purged += 1,
                EventRecord::Unchanged => applied.unchanged += 1,
                EventRecord::Ignored => applied.ignored += 1,
            }
        }
        applied
    }

    /// Whether this node's cache already holds the version a created object's event names
    /// (and, in cluster mode, no other member can hold an older one: never assumed).
    async fn holds(&self, change: &Change) -> bool {
        let (ChangeKind::Created, Some(etag), None) = (change.kind, &change.etag, &self.cluster)
        else {
            return false;
        };
        self.read
            .cached_meta(&change.object)
            .await
            .is_some_and(|meta| meta.etag.trim_matches('"') == etag)
    }

    /// Purges `object` here and on every other member.
    async fn purge(&self, object: &ObjectRef) -> Result<(), String> {
        self.maintenance
            .purge(&Selector::Key(object.clone()))
            .await
            .map_err(|error| error.to_string())?;
        let Some(cluster) = &self.cluster else {
            return Ok(());
        };
        let request = PurgeRequest {
            bucket: object.bucket().to_owned(),
            key: Some(object.key().to_owned()),
            prefix: None,
        };
        let failures: Vec<String> = cluster
            .purge_members(&request)
            .await
            .into_iter()
            .filter_map(|(member, result)| result.err().map(|error| format!("{member}: {error}")))
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(format!("not purged on {}", failures.join(", ")))
        }
    }
}
