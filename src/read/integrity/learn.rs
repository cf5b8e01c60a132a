//! Learning what S3 keeps of a version whose fills did not say: one GetObjectAttributes
//! per version (per 1,000 parts), asked in the background as its first block is filled,
//! charged to the tenant whose read filled it. `cache.learn_checksums = false` turns it
//! off. An origin that refuses the question for a bucket (credentials allowed
//! `s3:GetObject` only, or a store without the operation) is not asked about that bucket
//! again for [`REFUSED_FOR`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, mpsc};

use super::{Integrity, Learn};
use crate::shutdown::Shutdown;
use crate::source::BlockSource;
use crate::telemetry::ErrorChain;

/// Questions to the origin under way at once, at most.
const LOOKUPS_IN_FLIGHT: usize = 4;
/// How long a bucket whose origin refused the question is not asked about.
const REFUSED_FOR: Duration = Duration::from_secs(15 * 60);

/// Buckets whose origin refused the question lately, and until when.
#[derive(Default)]
struct Refused(parking_lot::Mutex<HashMap<String, Instant>>);

impl Refused {
    fn now(&self, bucket: &str) -> bool {
        let mut refused = self.0.lock();
        refused.retain(|_, until| *until > Instant::now());
        refused.contains_key(bucket)
    }

    /// Notes `bucket` as refused; `true` when it was not already.
    fn note(&self, bucket: &str) -> bool {
        let until = Instant::now() + REFUSED_FOR;
        self.0.lock().insert(bucket.to_owned(), until).is_none()
    }
}

/// Whether `status` says the origin will not answer the question for any object of the
/// bucket: forbidden, or not implemented.
fn refusal(status: u16) -> bool {
    matches!(status, 403 | 405 | 501)
}

/// Asks `source` about each version `asked` brings and hands the answer to `integrity`,
/// until `shutdown`.
pub(in crate::read) fn learn_checksums(
    mut asked: mpsc::Receiver<Learn>,
    source: Arc<dyn BlockSource>,
    integrity: Integrity,
    shutdown: Shutdown,
) {
    let lookups = async move {
        let slots = Arc::new(Semaphore::new(LOOKUPS_IN_FLIGHT));
        let refused = Arc::new(Refused::default());
        while let Some(Learn { target, charge }) = asked.recv().await {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            // Judged once a slot is free: a refusal that came meanwhile counts (at most
            // the questions under way when it came are asked of a refusing bucket).
            if refused.now(target.object.bucket()) {
                integrity.metrics().integrity.count_lookup("skipped");
                integrity.settle(&target, None, false);
                continue;
            }
            let (source, integrity, refused) = (source.clone(), integrity.clone(), refused.clone());
            tokio::spawn(async move {
                let object = target.pinned();
                let question = source.checksums(&object, &target.meta.etag);
                let answer = match charge {
                    Some(charge) => crate::tenant::charged(charge, question).await,
                    None => question.await,
                };
                let metrics = &integrity.metrics().integrity;
                let reference = match answer {
                    Ok(Some(reference)) => {
                        metrics.count_lookup("learnt");
                        Some(reference)
                    }
                    Ok(None) => {
                        metrics.count_lookup("none");
                        None
                    }
                    Err(error) => {
                        metrics.count_lookup("failed");
                        let bucket = target.object.bucket();
                        if !refusal(error.upstream_status()) {
                            tracing::warn!(object = %target.object, error = %ErrorChain(&error), "could not learn the checksums S3 keeps of an object; it is not judged");
                        } else if refused.note(bucket) {
                            tracing::warn!(bucket, error = %ErrorChain(&error), "the origin refuses GetObjectAttributes for this bucket (allow s3:GetObjectAttributes, or set cache.learn_checksums = false); objects read only by ranges and multipart ones are not judged, and it is asked again in 15 minutes");
                        }
                        integrity.settle(&target, None, false);
                        drop(slot);
                        return;
                    }
                };
                integrity.learnt(&target, reference);
                drop(slot);
            });
        }
    };
    tokio::spawn(async move { shutdown.run(lookups).await });
}
