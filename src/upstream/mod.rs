//! The upstream object store, reached through aws-sdk-s3: ranged GETs that return object
//! metadata with the bytes, conditional HEADs, and a reachability probe.
//!
//! Invariants: a ranged read returns exactly the bytes its `Content-Range` names, never
//! more than the caller's limit, or an error; every request is counted in the metrics.

mod attributes;
mod blank_key;
mod client;
mod error;
mod forward;
mod object_headers;
mod origins;
mod results;
mod signer;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::{RequestChecksumCalculation, ResponseChecksumValidation};
use aws_sdk_s3::operation::head_object::HeadObjectOutput;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::ChecksumMode;
use futures::stream::StreamExt;
use tracing::Instrument;
use tracing::field::Empty;

use crate::buffers::BlockBuffers;
use crate::config::UpstreamConfig;
use crate::object::{Checksums, Missing, ObjectMeta};
pub use crate::source::{
    Cause, CredentialProblem, HeadOutcome, RangeRead, ResponseHead, StreamedRead, UpstreamError,
};
use crate::telemetry::ErrorChain;
use crate::telemetry::{Metrics, TRACE_TARGET};
use crate::types::{ByteRange, ObjectRef, RangeRequest};
use client::{LedgerCounter, RetryCounter};
pub use client::{sdk_config, tls_config};
pub use forward::{EndpointError, ForwardRequest, Forwarder, Payload, PostSigner, UpstreamBody};
use object_headers::ObjectHeaders;
pub use origins::{Origin, Origins};
pub use portico_http_client::TlsError;
pub use results::Listed;

/// A ranged GET whose head has been checked and whose body is still to be read.
struct OpenedRange {
    meta: ObjectMeta,
    first: u64,
    length: u64,
    body: ByteStream,
}

/// Builds [`ObjectMeta`] from a GetObject or HeadObject output (they share accessor names)
/// and the object headers its answer carried.
macro_rules! object_meta {
    ($output:expr, $size:expr, $checksums:expr, $headers:expr) => {{
        let output = $output;
        let mut user_metadata: Vec<(String, String)> = output
            .metadata()
            .map(|pairs| {
                pairs
                    .iter()
                    .map(|(name, value)| (name.clone(), value.clone()))
                    .collect()
            })
            .unwrap_or_default();
        user_metadata.sort();
        ObjectMeta {
            size: $size,
            etag: output.e_tag().unwrap_or_default().to_owned(),
            last_modified_unix_secs: output.last_modified().map(|time| time.secs()),
            version_id: output.version_id().map(str::to_owned),
            content_type: output.content_type().map(str::to_owned),
            content_encoding: output.content_encoding().map(str::to_owned),
            content_disposition: output.content_disposition().map(str::to_owned),
            content_language: output.content_language().map(str::to_owned),
            cache_control: output.cache_control().map(str::to_owned),
            expires: output.expires_string().map(str::to_owned),
            user_metadata,
            checksums: $checksums,
            headers: $headers,
        }
    }};
}

/// The checksums a HeadObject output with checksum mode enabled reports.
fn checksums_of(output: &HeadObjectOutput) -> Checksums {
    let values = [
        ("crc32", output.checksum_crc32()),
        ("crc32c", output.checksum_crc32_c()),
        ("crc64nvme", output.checksum_crc64_nvme()),
        ("sha1", output.checksum_sha1()),
        ("sha256", output.checksum_sha256()),
    ]
    .into_iter()
    .filter_map(|(algorithm, value)| Some((algorithm.to_owned(), value?.to_owned())))
    .collect();
    Checksums {
        values,
        kind: output.checksum_type().map(|kind| kind.as_str().to_owned()),
    }
}

pub struct Upstream {
    client: Client,
    /// The buffers whole blocks are gathered in.
    buffers: BlockBuffers,
    metrics: Arc<Metrics>,
    credential_log: crate::telemetry::LogLimit,
}

impl Upstream {
    pub fn new(
        config: &UpstreamConfig,
        shared: &SdkConfig,
        buffers: BlockBuffers,
        metrics: Arc<Metrics>,
    ) -> Self {
        let mut builder = aws_sdk_s3::config::Builder::from(shared)
            .force_path_style(config.force_path_style)
            // Portico validates lengths itself; checksums are only needed where S3 demands them.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .interceptor(RetryCounter {
                metrics: metrics.clone(),
            })
            .interceptor(LedgerCounter {
                metrics: metrics.clone(),
            });
        if !config.endpoint.is_empty() {
            builder = builder.endpoint_url(&config.endpoint);
        }
        Self {
            client: Client::from_conf(builder.build()),
            buffers,
            metrics,
            credential_log: crate::telemetry::LogLimit::per(Duration::from_secs(60)),
        }
    }

    /// GETs `range` of `object`, at most `max_bytes` of it.
    ///
    /// With `if_match`, a changed object fails with [`UpstreamError::PreconditionFailed`].
    /// `head` learns when the response head arrived.
    pub async fn get_range(
        &self,
        object: &ObjectRef,
        range: RangeRequest,
        if_match: Option<&str>,
        max_bytes: u64,
        head: &ResponseHead,
    ) -> Result<RangeRead, UpstreamError> {
        let range = range.header_value();
        let exchange = self.fetch_range(object, &range, if_match, max_bytes, head);
        self.counted_get(&range, exchange).await
    }

    /// Runs one GetObject exchange in its `upstream.get` span and counts it with its status.
    async fn counted_get<T>(
        &self,
        range: &str,
        exchange: impl Future<Output = Result<(T, u16), UpstreamError>>,
    ) -> Result<T, UpstreamError> {
        let started = Instant::now();
        let span = tracing::info_span!(target: TRACE_TARGET, "upstream.get", http.range = range, http.status_code = Empty);
        let result = exchange.instrument(span.clone()).await;
        let status = match &result {
            Ok((_, status)) => *status,
            Err(error) => error.upstream_status(),
        };
        span.record("http.status_code", status);
        self.metrics
            .record_upstream("GetObject", status, started.elapsed().as_secs_f64());
        if let Err(error) = &result {
            self.note_credential(error);
        }
        result.map(|(value, _)| value)
    }

    async fn fetch_range(
        &self,
        object: &ObjectRef,
        range: &str,
        if_match: Option<&str>,
        max_bytes: u64,
        head: &ResponseHead,
    ) -> Result<(RangeRead, u16), UpstreamError> {
        let (opened, status) = self
            .open_range(object, range, if_match, max_bytes, head)
            .await?;
        let mut read = self.streamed(opened);
        // `length` was checked against the caller's block-sized limit.
        let mut body = self.buffers.take(read.length as usize);
        while let Some(chunk) = read.next_chunk().await {
            body.extend_from_slice(&chunk?);
        }
        let body = body.freeze();
        Ok((
            RangeRead {
                meta: read.meta,
                first: read.first,
                body,
            },
            status,
        ))
    }

    /// GETs `range` of `object` (with `if_match`, only that version) and returns its
    /// bytes as they arrive; counted like [`Upstream::get_range`] once the head arrives.
    pub async fn stream_range(
        &self,
        object: &ObjectRef,
        range: ByteRange,
        if_match: Option<&str>,
        head: &ResponseHead,
    ) -> Result<StreamedRead, UpstreamError> {
        let range = range.header_value();
        let exchange = self.open_range(object, &range, if_match, u64::MAX, head);
        let opened = self.counted_get(&range, exchange).await?;
        Ok(self.streamed(opened))
    }

    /// The body of `opened`, to be read as it arrives and counted as received.
    fn streamed(&self, opened: OpenedRange) -> StreamedRead {
        let metrics = self.metrics.clone();
        let chunks = futures::stream::unfold(opened.body, |mut body| async move {
            let chunk = body.next().await?;
            Some((chunk, body))
        });
        let body = chunks.map(move |chunk| match chunk {
            Ok(chunk) => {
                metrics.upstream_received_bytes.inc_by(chunk.len() as u64);
                Ok(chunk)
            }
            Err(error) => Err(UpstreamError::Unreachable {
                cause: Cause::context("response body interrupted", error),
            }),
        });
        StreamedRead::new(opened.meta, opened.first, opened.length, body)
    }

    /// Sends a ranged GET and checks its head: the body is still to be read.
    async fn open_range(
        &self,
        object: &ObjectRef,
        range: &str,
        if_match: Option<&str>,
        max_bytes: u64,
        head: &ResponseHead,
    ) -> Result<(OpenedRange, u16), UpstreamError> {
        let (key, restore) = blank_key::sdk_key(object.key());
        let request = self
            .client
            .get_object()
            .bucket(object.bucket())
            .key(key)
            .set_version_id(object.version().map(str::to_owned))
            .range(range)
            .set_if_match(if_match.map(str::to_owned));
        let headers = ObjectHeaders::default();
        let sent = headers.capturing(request.customize(), restore).send().await;
        let mut output = sent.map_err(error::from_sdk)?;
        head.arrived();
        let content_length = output
            .content_length()
            .and_then(|length| u64::try_from(length).ok())
            .ok_or_else(|| UpstreamError::invalid_response("response has no Content-Length"))?;
        let (first, size, status) = match output.content_range() {
            // MinIO's answer to a suffix range of an empty object: the whole (empty) object.
            Some(EMPTY_OBJECT_RANGE) if content_length == 0 => (0, 0, 206),
            Some(header) => {
                let (first, last, size) = parse_content_range(header).ok_or_else(|| {
                    UpstreamError::invalid_response(format!("unparsable Content-Range {header:?}"))
                })?;
                if last - first + 1 != content_length {
                    return Err(UpstreamError::invalid_response(format!(
                        "Content-Range {header:?} disagrees with Content-Length {content_length}"
                    )));
                }
                (first, size, 206)
            }
            None => (0, content_length, 200),
        };
        if content_length > max_bytes {
            return Err(UpstreamError::invalid_response(format!(
                "{content_length} bytes returned for a read of at most {max_bytes}"
            )));
        }
        // A ranged GET carries no checksums of the whole object.
        let meta = object_meta!(&output, size, None, headers.take());
        let body = std::mem::replace(&mut output.body, ByteStream::from_static(b""));
        let opened = OpenedRange {
            meta,
            first,
            length: content_length,
            body,
        };
        Ok((opened, status))
    }

    /// HEADs `object`, asking for its stored checksums; with `if_none_match`, an unchanged
    /// object answers `NotModified`.
    pub async fn head(
        &self,
        object: &ObjectRef,
        if_none_match: Option<&str>,
    ) -> Result<HeadOutcome, UpstreamError> {
        self.head_if(object, if_none_match, None).await
    }

    /// [`Self::head`], also with `If-Match`: another version fails with
    /// [`UpstreamError::PreconditionFailed`].
    pub async fn head_if(
        &self,
        object: &ObjectRef,
        if_none_match: Option<&str>,
        if_match: Option<&str>,
    ) -> Result<HeadOutcome, UpstreamError> {
        let started = Instant::now();
        let span =
            tracing::info_span!(target: TRACE_TARGET, "upstream.head", http.status_code = Empty);
        let (key, restore) = blank_key::sdk_key(object.key());
        let request = self
            .client
            .head_object()
            .bucket(object.bucket())
            .key(key)
            .set_version_id(object.version().map(str::to_owned))
            .checksum_mode(ChecksumMode::Enabled)
            .set_if_none_match(if_none_match.map(str::to_owned))
            .set_if_match(if_match.map(str::to_owned));
        let headers = ObjectHeaders::default();
        let sent = headers.capturing(request.customize(), restore).send();
        let result = sent.instrument(span.clone()).await.map_err(error::from_sdk);
        let outcome = match result {
            Ok(output) => {
                let size = output
                    .content_length()
                    .and_then(|length| u64::try_from(length).ok())
                    .ok_or_else(|| {
                        UpstreamError::invalid_response("HEAD response has no Content-Length")
                    });
                size.map(|size| {
                    let checksums = Some(checksums_of(&output));
                    HeadOutcome::Found(Box::new(object_meta!(
                        &output,
                        size,
                        checksums,
                        headers.take()
                    )))
                })
            }
            Err(UpstreamError::NotModified) => Ok(HeadOutcome::NotModified),
            // A HEAD's 404 has no body to name what is missing; for a pinned version it is
            // the version.
            Err(UpstreamError::NotFound {
                missing: Missing::NoSuchKey,
                request_id,
            }) if object.version().is_some() => Err(UpstreamError::NotFound {
                missing: Missing::NoSuchVersion,
                request_id,
            }),
            Err(error) => Err(error),
        };
        let status = match &outcome {
            Ok(HeadOutcome::Found(_)) => 200,
            Ok(HeadOutcome::NotModified) => 304,
            Err(error) => error.upstream_status(),
        };
        span.record("http.status_code", status);
        self.metrics
            .record_upstream("HeadObject", status, started.elapsed().as_secs_f64());
        if let Err(error) = &outcome {
            self.note_credential(error);
        }
        outcome
    }

    /// Every object under `prefix` in `bucket` (ListObjectsV2, all pages), in key order.
    pub async fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<Listed>, UpstreamError> {
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        let mut listed = Vec::new();
        loop {
            let started = Instant::now();
            let Some(page) = pages.next().await else {
                break;
            };
            let page = page.map_err(error::from_sdk);
            let status = match &page {
                Ok(_) => 200,
                Err(error) => error.upstream_status(),
            };
            self.metrics
                .record_upstream("ListObjectsV2", status, started.elapsed().as_secs_f64());
            for object in page?.contents() {
                let (Some(key), Some(size)) = (object.key(), object.size()) else {
                    continue;
                };
                listed.push(Listed {
                    key: key.to_owned(),
                    size: u64::try_from(size).unwrap_or_default(),
                    etag: object.e_tag().unwrap_or_default().to_owned(),
                });
            }
        }
        Ok(listed)
    }

    /// Succeeds when the upstream answers HTTP at all (even with an error status).
    /// Asks the upstream one cheap question (ListBuckets, at most one bucket). Any answer
    /// means it is reachable, unless the answer refuses Portico's credential; a credential
    /// that cannot be loaded is an error too.
    pub async fn probe(&self) -> Result<(), UpstreamError> {
        let started = Instant::now();
        let result = self.client.list_buckets().max_buckets(1).send().await;
        let (status, outcome) = match result {
            Ok(_) => (200, Ok(())),
            Err(error) => match error::from_sdk(error) {
                error @ (UpstreamError::Unreachable { .. }
                | UpstreamError::NotSent { .. }
                | UpstreamError::Request { .. }
                | UpstreamError::NoCredential { .. }) => (0, Err(error)),
                refused if refused.credential_problem().is_some() => {
                    (refused.upstream_status(), Err(refused))
                }
                // A credential allowed to read objects but not to list buckets is fine.
                answered => (answered.upstream_status(), Ok(())),
            },
        };
        self.metrics
            .record_upstream("ListBuckets", status, started.elapsed().as_secs_f64());
        if let Err(error) = &outcome {
            self.note_credential(error);
        }
        outcome
    }

    /// Counts an upstream answer that shows Portico's credential failing, and logs it
    /// (once a minute at most: every request would fail the same way).
    fn note_credential(&self, error: &UpstreamError) {
        let Some(problem) = error.credential_problem() else {
            return;
        };
        self.metrics.count_credential_error(problem.as_str());
        if self.credential_log.allow() {
            tracing::error!(problem = problem.as_str(), upstream_request_id = error.request_id(), error = %ErrorChain(&error), "the upstream credential failed: check upstream.access_key_id and upstream.secret_access_key (or the AWS credential chain)");
        }
    }
}

/// Parses `bytes first-last/size` into `(first, last, size)`.
/// The `Content-Range` MinIO sends with a 206 to a suffix range of an empty object (no
/// range of an empty object is valid; S3 answers such a read with 200).
const EMPTY_OBJECT_RANGE: &str = "bytes 0--1/0";

fn parse_content_range(header: &str) -> Option<(u64, u64, u64)> {
    let rest = header.trim().strip_prefix("bytes ")?;
    let (span, size) = rest.split_once('/')?;
    let (first, last) = span.split_once('-')?;
    let (first, last, size): (u64, u64, u64) =
        (first.parse().ok()?, last.parse().ok()?, size.parse().ok()?);
    (first <= last && last < size).then_some((first, last, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_is_parsed_strictly() {
        assert_eq!(parse_content_range("bytes 0-9/10"), Some((0, 9, 10)));
        assert_eq!(parse_content_range("bytes 5-5/6"), Some((5, 5, 6)));
        assert_eq!(parse_content_range("bytes 0--1/0"), None);
        assert_eq!(parse_content_range("bytes 5-4/10"), None);
        assert_eq!(parse_content_range("bytes 0-10/10"), None);
        assert_eq!(parse_content_range("bytes */10"), None);
        assert_eq!(parse_content_range("items 0-1/2"), None);
    }
}
