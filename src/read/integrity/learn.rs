//! Learning what S3 keeps of a version whose fills did not say: one GetObjectAttributes
//! per version (per 1,000 parts), asked in the background as its first block is filled,
//! charged to the tenant whose read filled it. `cache.learn_checksums = false` turns it
//! off.

use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc};

use super::{Integrity, Learn};
use crate::shutdown::Shutdown;
use crate::source::BlockSource;

/// Questions to the origin under way at once, at most.
const LOOKUPS_IN_FLIGHT: usize = 4;

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
        while let Some(Learn { target, charge }) = asked.recv().await {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let (source, integrity) = (source.clone(), integrity.clone());
            tokio::spawn(async move {
                let object = crate::read::fetch::pinned(target.object.clone(), &target.meta);
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
                        tracing::warn!(object = %target.object, %error, "could not learn the checksums S3 keeps of an object; it is not judged");
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
