//! Objects whose upstream sends no ETag. Nothing names their version: a modification
//! time and a size do not (two writes of the same size in one second share both), so no
//! block of theirs is cached and none is ever joined from another request. Each GET is one
//! streamed upstream GET of exactly the bytes it answers: one response, one version.
//!
//! Invariant: the upstream's answer must describe the object the response headers
//! announce (same size and modification time, still no ETag) and hold exactly the
//! requested bytes; otherwise the GET is retried as a changed object before its headers
//! are sent, and a body that breaks off aborts the response.

use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::Instrument;

use super::{BodyStream, ReadError, Tally, abort};
use crate::budget::Charge;
use crate::cache::Tier;
use crate::object::ObjectMeta;
use crate::source::{BlockSource, ResponseHead, UpstreamError};
use crate::telemetry::{Metrics, ServedFrom};
use crate::types::{ByteRange, ObjectRef};

/// Starts streaming `bytes` of `object` straight from `source`; `charge` covers what the
/// stream holds until it ends.
pub(super) async fn stream_uncached(
    source: &dyn BlockSource,
    metrics: &Arc<Metrics>,
    object: &ObjectRef,
    meta: &ObjectMeta,
    bytes: ByteRange,
    charge: Charge,
) -> Result<(BodyStream, Arc<Tally>), ReadError> {
    let mut read = source
        .stream(object, bytes, None, &ResponseHead::default())
        .await
        .map_err(ReadError::from_upstream)?;
    let same_object = read.meta.etag.is_empty()
        && read.meta.size == meta.size
        && read.meta.last_modified_unix_secs == meta.last_modified_unix_secs;
    if !same_object {
        return Err(ReadError::Changed);
    }
    if read.first != bytes.first() || read.length != bytes.len_bytes() {
        return Err(ReadError::Upstream(UpstreamError::invalid_response(
            format!(
                "asked for {}, got {} bytes from offset {}",
                bytes.header_value(),
                read.length,
                read.first
            ),
        )));
    }
    let tally = Arc::new(Tally::default());
    tally.count(Tier::Upstream);
    metrics.count_uncached_read();
    let (sender, receiver) = mpsc::channel(1);
    let metrics = metrics.clone();
    let object = object.clone();
    let task = async move {
        let _charge = charge;
        while let Some(chunk) = read.next_chunk().await {
            match chunk {
                Ok(chunk) => {
                    metrics.count_served(ServedFrom::Upstream, chunk.len() as u64);
                    if sender.send(Ok(vec![chunk])).await.is_err() {
                        return;
                    }
                }
                Err(error) => {
                    let error = ReadError::from_upstream(error);
                    abort(&metrics, &sender, &object, None, error).await;
                    return;
                }
            }
        }
    };
    tokio::spawn(task.instrument(tracing::Span::current()));
    Ok((BodyStream::sent(receiver), tally))
}
