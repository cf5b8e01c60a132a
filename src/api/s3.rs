//! The S3 operations Portico answers itself: GetObject and HeadObject from the read path.
//!
//! Only requests the cache can answer reach these handlers (see `route`): conditional
//! headers are evaluated here against the cached metadata, `response-*` overrides are
//! applied by the front. `versionId` reads are cached under that version.
//! `x-amz-checksum-mode: ENABLED`, which current SDKs send on every GET, returns the stored
//! `x-amz-checksum-*` headers where S3 does: on whole-object GETs and HEADs (ranged reads
//! carry none).

use s3s::dto::{
    ChecksumMode, ChecksumType, ETag, GetObjectInput, GetObjectOutput, HeadObjectInput,
    HeadObjectOutput, Metadata, Range, StreamingBlob, Timestamp, TimestampFormat,
};
use s3s::{S3, S3Error, S3Request, S3Response, S3Result};

use std::time::{Duration, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};

use super::conditions::{Preconditions, Verdict};
use super::context::RequestContext;
use super::error::{RequestError, invalid_object, s3_error};
use super::route::Address;
use crate::object::{Checksums, ObjectMeta};
use crate::read::{ReadError, ReadPath};
use crate::types::{ObjectRef, RangeRequest, Selection};

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

/// Whether the request asks for the object's checksums (`x-amz-checksum-mode: ENABLED`).
fn wants_checksums(mode: Option<&ChecksumMode>) -> bool {
    mode.is_some_and(|mode| mode.as_str().eq_ignore_ascii_case(ChecksumMode::ENABLED))
}

/// Names the request's operation and returns its request id.
fn request_id_of<T>(request: &S3Request<T>, operation: &'static str) -> String {
    match request.extensions.get::<RequestContext>() {
        Some(context) => {
            context.set_operation(operation);
            context.id().to_owned()
        }
        None => String::new(),
    }
}

/// The object a request reads: the bucket and key the front decoded and authorized (never
/// s3s's own parse of the same request, which could differ).
fn object_ref<T>(
    request: &S3Request<T>,
    version: Option<&str>,
    request_id: &str,
) -> S3Result<ObjectRef> {
    let Some(Address {
        bucket: Some(bucket),
        key: Some(key),
        ..
    }) = request.extensions.get::<Address>()
    else {
        let mut error = S3Error::from(RequestError::NotAnObject);
        error.set_request_id(request_id);
        return Err(error);
    };
    let object = ObjectRef::new(bucket, key).and_then(|object| object.with_version(version));
    object.map_err(|error| {
        let mut s3_error = invalid_object(&error);
        s3_error.set_request_id(request_id);
        s3_error
    })
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

fn preconditions<T>(request: &S3Request<T>) -> Preconditions {
    request
        .extensions
        .get::<Preconditions>()
        .cloned()
        .unwrap_or_default()
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
        let request_id = request_id_of(&request, "GetObject");
        let input = &request.input;
        let conditions = preconditions(&request);
        let object = object_ref(&request, input.version_id.as_deref(), &request_id)?;
        let failed = |error: ReadError| s3_error(&error, &request_id);
        let mut range = input.range.map(RangeRequest::from);
        let wanted = wants_checksums(input.checksum_mode.as_ref());
        // S3 reports checksums of the whole object only, so only a whole GET needs them.
        let mut result = self
            .read
            .get(&object, range, wanted && range.is_none())
            .await;
        // If-Range is judged against the version the response serves (the read may have
        // revalidated or retried onto a newer one): when it names another version, the
        // answer is the whole current object, never a range of a version it did not name.
        if range.is_some() && conditions.has_if_range() {
            let applies = match &result {
                Ok(read) => conditions.range_applies(&read.meta),
                Err(ReadError::InvalidRange(_)) => {
                    let meta = self.read.head(&object, false).await.map_err(failed)?;
                    conditions.range_applies(&meta)
                }
                Err(_) => true,
            };
            if !applies {
                range = None;
                result = self.read.get(&object, None, wanted).await;
            }
        }
        let checksums = wanted && range.is_none();
        let read = match result {
            Ok(read) => read,
            Err(error @ ReadError::InvalidRange(_)) if !conditions.is_empty() => {
                // Preconditions come before the range: a failed one answers instead of 416.
                let meta = self.read.head(&object, false).await.map_err(failed)?;
                let verdict = conditions.evaluate(&meta);
                return Err(precondition_error(verdict, &meta, &request_id)
                    .unwrap_or_else(|| failed(error)));
            }
            Err(error) => return Err(failed(error)),
        };
        if let Some(context) = request.extensions.get::<RequestContext>() {
            context.set_tally(read.tally.clone());
            context.set_cache_status(&read.status);
        }
        if let Some(error) =
            precondition_error(conditions.evaluate(&read.meta), &read.meta, &request_id)
        {
            return Err(error);
        }
        let (content_length, content_range) = content_extent(read.selection, read.meta.size);
        let body = StreamingBlob::wrap(read.body);
        let mut output = object_output!(GetObjectOutput, &read.meta, {
            body: Some(body),
            content_length: i64::try_from(content_length).ok(),
            content_range: content_range,
        });
        if checksums
            && read.selection == Selection::Whole
            && let Some(stored) = &read.meta.checksums
        {
            set_checksums!(output, stored);
        }
        Ok(S3Response::new(output))
    }

    async fn head_object(
        &self,
        request: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let request_id = request_id_of(&request, "HeadObject");
        let input = &request.input;
        let object = object_ref(&request, input.version_id.as_deref(), &request_id)?;
        let checksums = wants_checksums(input.checksum_mode.as_ref())
            && !request.headers.contains_key(http::header::RANGE);
        let (meta, status) = self
            .read
            .head_with_status(&object, checksums)
            .await
            .map_err(|error| s3_error(&error, &request_id))?;
        if let Some(context) = request.extensions.get::<RequestContext>() {
            context.set_cache_status(&status);
        }
        let conditions = preconditions(&request);
        if let Some(error) = precondition_error(conditions.evaluate(&meta), &meta, &request_id) {
            return Err(error);
        }
        // A Range on HEAD answers with the range's length and Content-Range (the front
        // turns the status into 206), as S3 does.
        let range = match request.headers.get(http::header::RANGE) {
            Some(value) => {
                let parsed = value.to_str().ok().and_then(|text| Range::parse(text).ok());
                match parsed {
                    Some(range) => Some(RangeRequest::from(range)),
                    None => {
                        let mut error = S3Error::from(RequestError::InvalidRange);
                        error.set_request_id(&request_id);
                        return Err(error);
                    }
                }
            }
            None => None,
        };
        let range = range.filter(|_| conditions.range_applies(&meta));
        let selection = Selection::resolve(range, meta.size)
            .map_err(|error| s3_error(&ReadError::InvalidRange(error), &request_id))?;
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
        Ok(S3Response::new(output))
    }
}
