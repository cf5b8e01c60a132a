//! The S3 operations Portico answers itself: GetObject and HeadObject from the read path.
//!
//! Only requests the cache can answer reach these handlers (see `route`), each with the
//! [`CachedRequest`] the front built: the object (a `versionId` read is cached under that
//! version), its conditions, range and policy. A GET calls the read path once, which
//! judges the conditions against the version it finds before reading a byte of it;
//! `response-*` overrides are applied by the front.
//! `x-amz-checksum-mode: ENABLED`, which current SDKs send on every GET, returns the stored
//! `x-amz-checksum-*` headers where S3 does: on whole-object GETs and HEADs (ranged reads
//! carry none). The object headers a record keeps (tagging count, object lock, storage
//! class, encryption and the rest of `OBJECT_HEADERS`) go out as the origin sent them.

use s3s::dto::{
    ChecksumMode, ChecksumType, ETag, GetObjectInput, GetObjectOutput, HeadObjectInput,
    HeadObjectOutput, Metadata, StreamingBlob, Timestamp, TimestampFormat,
};
use s3s::{S3, S3Error, S3Request, S3Response, S3Result};

use std::time::{Duration, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};

use super::conditions::Verdict;
use super::context::CachedRequest;
use super::error::{RequestError, s3_error};
use crate::object::{Checksums, ObjectMeta};
use crate::read::{GetAnswer, GetRequest, Judgement, ReadError, ReadPath};
use crate::types::Selection;

pub struct PorticoS3 {
    read: ReadPath,
}

impl PorticoS3 {
    pub fn new(read: ReadPath) -> Self {
        Self { read }
    }
}

/// The response headers every GET and HEAD of an object carries.
struct ObjectHeaders {
    cache_control: Option<String>,
    content_disposition: Option<String>,
    content_encoding: Option<String>,
    content_language: Option<String>,
    content_type: Option<String>,
    e_tag: Option<ETag>,
    expires: Option<Timestamp>,
    last_modified: Option<Timestamp>,
    metadata: Option<Metadata>,
    version_id: Option<String>,
}

impl ObjectHeaders {
    fn of(meta: &ObjectMeta) -> Self {
        let metadata: Metadata = meta.user_metadata.iter().cloned().collect();
        Self {
            cache_control: meta.cache_control.clone(),
            content_disposition: meta.content_disposition.clone(),
            content_encoding: meta.content_encoding.clone(),
            content_language: meta.content_language.clone(),
            content_type: meta.content_type.clone(),
            e_tag: meta.etag.parse().ok(),
            expires: meta
                .expires
                .as_deref()
                .and_then(|raw| Timestamp::parse(TimestampFormat::HttpDate, raw).ok()),
            last_modified: meta
                .last_modified_unix_secs
                .and_then(|secs| time::OffsetDateTime::from_unix_timestamp(secs).ok())
                .map(Timestamp::from),
            metadata: (!metadata.is_empty()).then_some(metadata),
            version_id: meta.version_id.clone(),
        }
    }
}

/// Fills an output struct (GetObjectOutput or HeadObjectOutput) with the object headers.
macro_rules! object_output {
    ($output:ident, $meta:expr, { $($field:ident: $value:expr),* $(,)? }) => {{
        let headers = ObjectHeaders::of($meta);
        $output {
            accept_ranges: Some("bytes".to_owned()),
            cache_control: headers.cache_control,
            content_disposition: headers.content_disposition,
            content_encoding: headers.content_encoding,
            content_language: headers.content_language,
            content_type: headers.content_type,
            e_tag: headers.e_tag,
            expires: headers.expires,
            last_modified: headers.last_modified,
            metadata: headers.metadata,
            version_id: headers.version_id,
            $($field: $value,)*
            ..Default::default()
        }
    }};
}

/// Sets the `x-amz-checksum-*` fields of a GetObjectOutput or HeadObjectOutput.
macro_rules! set_checksums {
    ($output:expr, $checksums:expr) => {{
        let output = &mut $output;
        let checksums: &Checksums = $checksums;
        for (algorithm, value) in &checksums.values {
            let value = Some(value.clone());
            match algorithm.as_str() {
                "crc32" => output.checksum_crc32 = value,
                "crc32c" => output.checksum_crc32c = value,
                "crc64nvme" => output.checksum_crc64nvme = value,
                "sha1" => output.checksum_sha1 = value,
                "sha256" => output.checksum_sha256 = value,
                _ => {}
            }
        }
        output.checksum_type = checksums.kind.clone().map(ChecksumType::from);
    }};
}

/// `output` answered with the object headers `meta` keeps ([`crate::object::OBJECT_HEADERS`]),
/// which s3s's outputs would otherwise leave out or re-format.
fn with_object_headers<T>(output: T, meta: &ObjectMeta) -> S3Response<T> {
    let mut response = S3Response::new(output);
    for (name, value) in &meta.headers {
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            (Ok(name), Ok(value)) => {
                response.headers.insert(name, value);
            }
            _ => tracing::warn!(header = %name, "a kept object header is not a valid header"),
        }
    }
    response
}

/// Whether the request asks for the object's checksums (`x-amz-checksum-mode: ENABLED`).
fn wants_checksums(mode: Option<&ChecksumMode>) -> bool {
    mode.is_some_and(|mode| mode.as_str().eq_ignore_ascii_case(ChecksumMode::ENABLED))
}

/// The cached read the front routed here, named as `operation`. The front inserts it
/// for every request it routes to these handlers: its absence is a bug, answered with
/// 500 rather than served from some default.
fn cached_request<'a, T>(
    request: &'a S3Request<T>,
    operation: &'static str,
) -> S3Result<&'a CachedRequest> {
    let Some(cached) = request.extensions.get::<CachedRequest>() else {
        tracing::error!(
            operation,
            "a cached read reached its handler without the front's request context"
        );
        return Err(S3Error::with_message(
            s3s::S3ErrorCode::InternalError,
            "We encountered an internal error. Please try again.",
        ));
    };
    cached.context.set_operation(operation);
    Ok(cached)
}

/// The error that answers a failed precondition: 304 (with the validators) or 412.
fn precondition_error(verdict: Verdict, meta: &ObjectMeta, request_id: &str) -> Option<S3Error> {
    let mut error = match verdict {
        Verdict::Proceed => return None,
        Verdict::NotModified => {
            let mut error = S3Error::from(RequestError::NotModified);
            let mut headers = HeaderMap::new();
            if let Ok(etag) = HeaderValue::from_str(&meta.etag) {
                headers.insert(http::header::ETAG, etag);
            }
            if let Some(secs) = meta
                .last_modified_unix_secs
                .and_then(|secs| u64::try_from(secs).ok())
            {
                let modified = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
                if let Ok(value) = HeaderValue::from_str(&modified) {
                    headers.insert(http::header::LAST_MODIFIED, value);
                }
            }
            // RFC 9110 15.4.5: a 304 repeats the caching headers a 200 would carry; S3
            // adds the version id.
            let repeated = [
                (http::header::CACHE_CONTROL, &meta.cache_control),
                (http::header::EXPIRES, &meta.expires),
                (
                    HeaderName::from_static("x-amz-version-id"),
                    &meta.version_id,
                ),
            ];
            for (name, value) in repeated {
                if let Some(value) = value
                    .as_deref()
                    .and_then(|value| HeaderValue::from_str(value).ok())
                {
                    headers.insert(name, value);
                }
            }
            error.set_headers(headers);
            error
        }
        Verdict::PreconditionFailed => RequestError::PreconditionFailed.into(),
    };
    error.set_request_id(request_id);
    Some(error)
}

/// The Content-Length and Content-Range of a response that sends `selection`.
fn content_extent(selection: Selection, size: u64) -> (u64, Option<String>) {
    match selection {
        Selection::Whole => (size, None),
        Selection::Partial(range) => (
            range.len_bytes(),
            Some(format!("bytes {}-{}/{size}", range.first(), range.last())),
        ),
    }
}

#[async_trait::async_trait]
impl S3 for PorticoS3 {
    async fn get_object(
        &self,
        request: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let cached = cached_request(&request, "GetObject")?;
        let (context, conditions) = (&cached.context, &cached.conditions);
        let request_id = context.id();
        let wanted = wants_checksums(request.input.checksum_mode.as_ref());
        let judge = |meta: &ObjectMeta| match conditions.evaluate(meta) {
            Verdict::Proceed => Judgement::Serve {
                range: conditions.range_applies(meta),
            },
            Verdict::NotModified | Verdict::PreconditionFailed => Judgement::Refuse,
        };
        let answer = self
            .read
            .get(GetRequest {
                object: &cached.object,
                range: cached.range,
                checksums: wanted,
                policy: &cached.policy,
                judge: &judge,
                tenant: &cached.tenant,
            })
            .await
            .map_err(|error| s3_error(&error, request_id))?;
        let read = match answer {
            GetAnswer::Read(read) => read,
            GetAnswer::Refused { meta, status } => {
                context.set_cache_status(&status);
                let verdict = conditions.evaluate(&meta);
                return Err(precondition_error(verdict, &meta, request_id)
                    .unwrap_or_else(|| RequestError::PreconditionFailed.into()));
            }
        };
        context.set_tally(read.tally.clone());
        context.set_cache_status(&read.status);
        let (content_length, content_range) = content_extent(read.selection, read.meta.size);
        let body = StreamingBlob::wrap(read.body);
        let mut output = object_output!(GetObjectOutput, &read.meta, {
            body: Some(body),
            content_length: i64::try_from(content_length).ok(),
            content_range: content_range,
        });
        if wanted
            && read.selection == Selection::Whole
            && let Some(stored) = &read.meta.checksums
        {
            set_checksums!(output, stored);
        }
        Ok(with_object_headers(output, &read.meta))
    }

    async fn head_object(
        &self,
        request: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let cached = cached_request(&request, "HeadObject")?;
        let (context, conditions) = (&cached.context, &cached.conditions);
        let request_id = context.id();
        let checksums =
            wants_checksums(request.input.checksum_mode.as_ref()) && cached.range.is_none();
        let (meta, status) = self
            .read
            .head(&cached.object, checksums, &cached.policy)
            .await
            .map_err(|error| s3_error(&error, request_id))?;
        context.set_cache_status(&status);
        if let Some(error) = precondition_error(conditions.evaluate(&meta), &meta, request_id) {
            return Err(error);
        }
        // A Range on HEAD answers with the range's length and Content-Range (the front
        // turns the status into 206), as S3 does.
        let range = cached.range.filter(|_| conditions.range_applies(&meta));
        let selection = Selection::resolve(range, meta.size)
            .map_err(|error| s3_error(&ReadError::InvalidRange(error), request_id))?;
        let (content_length, content_range) = content_extent(selection, meta.size);
        let mut output = object_output!(HeadObjectOutput, &meta, {
            content_length: i64::try_from(content_length).ok(),
            content_range: content_range,
        });
        if checksums
            && selection == Selection::Whole
            && let Some(stored) = &meta.checksums
        {
            set_checksums!(output, stored);
        }
        Ok(with_object_headers(output, &meta))
    }
}
