//! Cache maintenance an operator asks for: purges (at once) and warm jobs (in the
//! background), for one key or every object under a prefix.
//!
//! Invariants: warm jobs load at most `concurrency` blocks at a time each, and at most
//! `MAX_RUNNING_JOBS` run at once (more are refused, not queued); running jobs and the
//! last `KEPT_JOBS` finished ones are remembered. A job's progress only grows, and a finished job's
//! bytes done equal its total unless an object failed (its errors say which).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use parking_lot::Mutex;

use crate::listing::ListingCache;
use crate::read::{KnownVersion, ReadError, ReadPath};
use crate::shutdown::Shutdown;
use crate::telemetry::ErrorChain;
use crate::types::{ObjectRef, ObjectRefError, RangeRequest, Selection};
use crate::upstream::{Origins, UpstreamError};

/// Warm jobs running at once at most.
pub const MAX_RUNNING_JOBS: usize = 4;
/// Finished jobs remembered for `GET /admin/jobs/{id}`.
const KEPT_JOBS: usize = 100;
/// Error messages kept per job.
const KEPT_ERRORS: usize = 10;

/// Which objects an action applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    Key(ObjectRef),
    /// Every object whose key starts with the prefix (may be empty: the whole bucket).
    Prefix {
        bucket: String,
        prefix: String,
    },
}

impl Selector {
    /// A key or a prefix of `bucket`: exactly one of the two must be given.
    pub fn new(
        bucket: &str,
        key: Option<&str>,
        prefix: Option<&str>,
    ) -> Result<Self, SelectorError> {
        match (key, prefix) {
            (Some(key), None) => Ok(Self::Key(ObjectRef::new(bucket, key)?)),
            (None, Some(prefix)) if !bucket.is_empty() => Ok(Self::Prefix {
                bucket: bucket.to_owned(),
                prefix: prefix.to_owned(),
            }),
            (None, Some(_)) => Err(ObjectRefError::EmptyBucket.into()),
            _ => Err(SelectorError::KeyOrPrefix),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("give exactly one of \"key\" and \"prefix\"")]
    KeyOrPrefix,
    #[error(transparent)]
    Object(#[from] ObjectRefError),
}

/// Why a warm or purge job could not run; its cause is its `source()`, so it is shown
/// whole with `telemetry::ErrorChain`.
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    #[error("listing the upstream failed")]
    List(#[from] UpstreamError),
    #[error("{MAX_RUNNING_JOBS} warm jobs are already running; try again when one finishes")]
    Busy,
    #[error("the purge could not be recorded")]
    Purge(#[source] ReadError),
}

/// What a purge removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Purged {
    pub objects: u64,
    pub blocks: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Running,
    Done,
    /// Finished, but some objects could not be warmed.
    Failed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }
}

/// A warm job's progress as reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStatus {
    pub id: u64,
    pub state: JobState,
    pub objects_done: u64,
    pub objects_total: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub errors: Vec<String>,
    pub started: SystemTime,
    pub finished: Option<SystemTime>,
}

#[derive(Default)]
struct Progress {
    objects_done: AtomicU64,
    objects_total: AtomicU64,
    bytes_done: AtomicU64,
    bytes_total: AtomicU64,
}

struct Job {
    progress: Progress,
    started: SystemTime,
    /// Set when the job ends: when, and the errors it met.
    end: Mutex<Option<(SystemTime, Vec<String>)>>,
}

impl Job {
    fn is_running(&self) -> bool {
        self.end.lock().is_none()
    }
}

/// Purges and warm jobs. Cheap to clone.
#[derive(Clone)]
pub struct Maintenance {
    /// Listing pages a purge drops, when listings are cached.
    listings: Option<Arc<ListingCache>>,
    read: ReadPath,
    upstreams: Arc<Origins>,
    concurrency: usize,
    jobs: Arc<Mutex<BTreeMap<u64, Arc<Job>>>>,
    next_id: Arc<AtomicU64>,
    /// Running jobs stop when it fires.
    shutdown: Shutdown,
}

impl Maintenance {
    /// Warm jobs load up to `concurrency` blocks at a time each, until `shutdown`.
    pub fn new(
        read: ReadPath,
        upstreams: Arc<Origins>,
        listings: Option<Arc<ListingCache>>,
        concurrency: usize,
        shutdown: Shutdown,
    ) -> Self {
        Self {
            read,
            upstreams,
            listings,
            concurrency: concurrency.max(1),
            jobs: Arc::default(),
            next_id: Arc::new(AtomicU64::new(1)),
            shutdown,
        }
    }

    /// The objects `selector` names, with the version a listing reports for each.
    async fn objects(
        &self,
        selector: &Selector,
    ) -> Result<Vec<(ObjectRef, Option<KnownVersion>)>, MaintenanceError> {
        match selector {
            Selector::Key(object) => Ok(vec![(object.clone(), None)]),
            Selector::Prefix { bucket, prefix } => {
                let upstream = &self.upstreams.for_bucket(bucket).upstream;
                let listed = upstream.list(bucket, prefix).await?;
                Ok(listed
                    .into_iter()
                    .filter_map(|entry| {
                        let object = ObjectRef::new(bucket, &entry.key).ok()?;
                        let version = KnownVersion {
                            etag: entry.etag,
                            size: entry.size,
                        };
                        Some((object, Some(version)))
                    })
                    .collect())
            }
        }
    }

    /// What a write through another member does here: see [`forget_written`].
    pub async fn forget_written(&self, objects: &[ObjectRef], unknown: bool) {
        forget_written(&self.read, self.listings.as_deref(), objects, unknown).await;
    }

    /// Removes the metadata and blocks of what `selector` names (for a prefix, what the
    /// upstream lists under it).
    pub async fn purge(&self, selector: &Selector) -> Result<Purged, MaintenanceError> {
        let mut purged = Purged {
            objects: 0,
            blocks: 0,
        };
        for (object, version) in self.objects(selector).await? {
            purged.blocks += self
                .read
                .purge(&object, version)
                .await
                .map_err(MaintenanceError::Purge)?;
            if let Some(listings) = &self.listings {
                listings.invalidate(&object);
            }
            purged.objects += 1;
        }
        tracing::info!(
            ?selector,
            objects = purged.objects,
            blocks = purged.blocks,
            "purged"
        );
        Ok(purged)
    }

    /// Starts a warm job of `range` (the whole object when `None`) of what `selector`
    /// names and returns its id at once; listing, sizing and loading run in the job.
    pub fn start_warm(
        &self,
        selector: Selector,
        range: Option<RangeRequest>,
    ) -> Result<u64, MaintenanceError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let job = Arc::new(Job {
            progress: Progress::default(),
            started: SystemTime::now(),
            end: Mutex::new(None),
        });
        {
            let mut jobs = self.jobs.lock();
            let running = jobs.values().filter(|job| job.is_running()).count();
            if running >= MAX_RUNNING_JOBS {
                return Err(MaintenanceError::Busy);
            }
            jobs.insert(id, job.clone());
            // Forget the oldest finished jobs; running ones stay, so the limit holds.
            let finished: Vec<u64> = jobs
                .iter()
                .filter(|(_, job)| !job.is_running())
                .map(|(id, _)| *id)
                .collect();
            for old in finished.iter().take(jobs.len().saturating_sub(KEPT_JOBS)) {
                jobs.remove(old);
            }
        }
        tracing::info!(id, ?selector, "warm job started");
        let this = self.clone();
        tokio::spawn(async move {
            let work = async {
                match this.objects(&selector).await {
                    Ok(objects) => this.warm(&job, objects, range).await,
                    Err(error) => vec![ErrorChain(&error).to_string()],
                }
            };
            let errors = this.shutdown.run(work).await.unwrap_or_else(|| {
                vec!["stopped before it finished: Portico is shutting down".to_owned()]
            });
            let progress = &job.progress;
            tracing::info!(
                id,
                objects = progress.objects_done.load(Ordering::Relaxed),
                bytes = progress.bytes_done.load(Ordering::Relaxed),
                errors = errors.len(),
                "warm job finished"
            );
            *job.end.lock() = Some((SystemTime::now(), errors));
        });
        Ok(id)
    }

    /// Warms `objects` one after another, each `concurrency` blocks at a time; returns the
    /// errors met (at most [`KEPT_ERRORS`]).
    async fn warm(
        &self,
        job: &Job,
        objects: Vec<(ObjectRef, Option<KnownVersion>)>,
        range: Option<RangeRequest>,
    ) -> Vec<String> {
        let progress = &job.progress;
        progress
            .objects_total
            .store(objects.len() as u64, Ordering::Relaxed);
        // Totals first, so progress is a fraction of a known whole from the start: a
        // listing gives the sizes, a single key takes one metadata lookup.
        let mut sized = Vec::with_capacity(objects.len());
        let mut errors = Vec::new();
        let (objects, uncached): (Vec<_>, Vec<_>) = objects
            .into_iter()
            .partition(|(object, _)| self.read.policy(object).cache);
        if let Some((object, _)) = uncached.first() {
            // Counted as not done, so the job does not claim them; one line says why.
            let rule = self.read.policy(object).rule.as_deref().unwrap_or_default();
            errors.push(format!(
                "{} object(s) not warmed: a rule turns caching off for them (first: {object}, rule {rule:?})",
                uncached.len()
            ));
        }
        for (object, listed) in objects {
            let expected = match listed {
                Some(listed) => Selection::resolve(range, listed.size)
                    .map(|selection| selection.len_bytes(listed.size))
                    .map_err(ReadError::from),
                None => self.read.warm_size(&object, range).await,
            };
            match expected {
                Ok(bytes) => {
                    progress.bytes_total.fetch_add(bytes, Ordering::Relaxed);
                    sized.push((object, bytes));
                }
                Err(error) => note_error(&mut errors, &object, &error),
            }
        }
        for (object, expected) in sized {
            let loaded = AtomicU64::new(0);
            let result = self
                .read
                .warm(&object, range, self.concurrency, |bytes| {
                    loaded.fetch_add(bytes, Ordering::Relaxed);
                    progress.bytes_done.fetch_add(bytes, Ordering::Relaxed);
                })
                .await;
            match result {
                Ok(()) => {
                    progress.objects_done.fetch_add(1, Ordering::Relaxed);
                    // The object changed since it was listed: the total follows what was
                    // loaded, so a finished job is at 100 %.
                    let loaded = loaded.into_inner();
                    progress.bytes_total.fetch_add(loaded, Ordering::Relaxed);
                    progress.bytes_total.fetch_sub(expected, Ordering::Relaxed);
                }
                Err(error) => note_error(&mut errors, &object, &error),
            }
        }
        errors
    }

    /// A job's progress, while it is remembered.
    pub fn status(&self, id: u64) -> Option<JobStatus> {
        let job = self.jobs.lock().get(&id)?.clone();
        let progress = &job.progress;
        let end = job.end.lock().clone();
        let (state, finished, errors) = match end {
            None => (JobState::Running, None, Vec::new()),
            Some((at, errors)) if errors.is_empty() => (JobState::Done, Some(at), errors),
            Some((at, errors)) => (JobState::Failed, Some(at), errors),
        };
        Some(JobStatus {
            id,
            state,
            objects_done: progress.objects_done.load(Ordering::Relaxed),
            objects_total: progress.objects_total.load(Ordering::Relaxed),
            bytes_done: progress.bytes_done.load(Ordering::Relaxed),
            bytes_total: progress.bytes_total.load(Ordering::Relaxed),
            errors,
            started: job.started,
            finished,
        })
    }
}

fn note_error(errors: &mut Vec<String>, object: &ObjectRef, error: &ReadError) {
    tracing::warn!(%object, error = %ErrorChain(&error), "warming an object failed");
    if errors.len() < KEPT_ERRORS {
        errors.push(format!("{object}: {}", ErrorChain(error)));
    }
}

/// What a write that changed `objects` does to this node's caches: their metadata is
/// forgotten (or, when the write's outcome is `unknown`, revalidated before it is served
/// again), and so are the listing pages that cover them. Blocks stay: they are named by
/// version.
pub async fn forget_written(
    read: &ReadPath,
    listings: Option<&ListingCache>,
    objects: &[ObjectRef],
    unknown: bool,
) {
    for object in objects {
        if unknown {
            read.expire(object).await;
        } else {
            read.invalidate(object);
        }
        if let Some(listings) = listings {
            listings.invalidate(object);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selector_takes_exactly_one_of_key_and_prefix() {
        let key = Selector::new("b", Some("k"), None).unwrap();
        assert_eq!(key, Selector::Key(ObjectRef::new("b", "k").unwrap()));
        let prefix = Selector::new("b", None, Some("")).unwrap();
        assert!(matches!(prefix, Selector::Prefix { ref prefix, .. } if prefix.is_empty()));
        assert_eq!(
            Selector::new("b", Some("k"), Some("p")),
            Err(SelectorError::KeyOrPrefix)
        );
        assert_eq!(
            Selector::new("b", None, None),
            Err(SelectorError::KeyOrPrefix)
        );
        assert!(matches!(
            Selector::new("", None, Some("p")),
            Err(SelectorError::Object(ObjectRefError::EmptyBucket))
        ));
        assert!(matches!(
            Selector::new("b", Some(""), None),
            Err(SelectorError::Object(ObjectRefError::EmptyKey))
        ));
    }
}
