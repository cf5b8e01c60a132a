//! The S3 operations Portico answers itself: GetObject and HeadObject from the read path.
//!
//! GET variants the plain cache entry cannot answer correctly (conditional headers,
//! `partNumber`, `versionId`, SSE-C) are refused with `NotImplemented` rather than
//! answered with the wrong object or status. `x-amz-checksum-mode: ENABLED`, which
//! current SDKs send on every GET, is served without `x-amz-checksum-*` headers: clients
//! validate only checksums that are present, and Portico checks every block's length and
//! foyer checksums every disk entry.

use s3s::dto::{
    ETag, GetObjectInput, GetObjectOutput, HeadObjectInput, HeadObjectOutput, Metadata, Range,
    StreamingBlob, Timestamp, TimestampFormat,
};
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use super::error::s3_error;
use super::front::RequestContext;
use crate::cache::ObjectMeta;
use crate::read::ReadPath;
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

/// Whether a GetObject or HeadObject input carries any conditional header.
macro_rules! has_conditions {
    ($input:expr) => {
        $input.if_match.is_some()
            || $input.if_none_match.is_some()
            || $input.if_modified_since.is_some()
            || $input.if_unmodified_since.is_some()
    };
}

fn object_ref(bucket: &str, key: &str, request_id: &str) -> S3Result<ObjectRef> {
    ObjectRef::new(bucket, key).map_err(|error| {
        let code = match error {
            crate::types::ObjectRefError::KeyTooLong(_) => S3ErrorCode::KeyTooLongError,
            _ => S3ErrorCode::InvalidArgument,
        };
        let mut s3_error = S3Error::with_message(code, error.to_string());
        s3_error.set_request_id(request_id);
        s3_error
    })
}

fn not_implemented(what: &str, request_id: &str) -> S3Error {
    let mut error = S3Error::with_message(
        S3ErrorCode::NotImplemented,
        format!("Portico does not serve GET requests with {what} yet."),
    );
    error.set_request_id(request_id);
    error
}

/// The first GET feature a plain cached read would answer wrongly, if any.
fn unsupported_get(input: &GetObjectInput) -> Option<&'static str> {
    if has_conditions!(input) {
        return Some("conditional headers");
    }
    if input.part_number.is_some() {
        return Some("partNumber");
    }
    if input.version_id.is_some() {
        return Some("versionId");
    }
    if input.sse_customer_algorithm.is_some() || input.sse_customer_key.is_some() {
        return Some("SSE-C keys");
    }
    None
}

fn range_request(range: Range) -> RangeRequest {
    match range {
        Range::Int { first, last } => RangeRequest::From { first, last },
        Range::Suffix { length } => RangeRequest::Suffix { length },
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
        if let Some(feature) = unsupported_get(input) {
            return Err(not_implemented(feature, &request_id));
        }
        let object = object_ref(&input.bucket, &input.key, &request_id)?;
        let read = self
            .read
            .get(&object, input.range.map(range_request))
            .await
            .map_err(|error| s3_error(&error, &request_id))?;
        let size = read.meta.size;
        let (content_length, content_range) = match read.selection {
            Selection::Whole => (size, None),
            Selection::Partial(range) => (
                range.len_bytes(),
                Some(format!("bytes {}-{}/{size}", range.first(), range.last())),
            ),
        };
        let body = StreamingBlob::wrap(read.body);
        let output = object_output!(GetObjectOutput, &read.meta, {
            body: Some(body),
            content_length: i64::try_from(content_length).ok(),
            content_range: content_range,
        });
        Ok(S3Response::new(output))
    }

    async fn head_object(
        &self,
        request: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let request_id = request_id_of(&request, "HeadObject");
        let input = &request.input;
        if has_conditions!(input) {
            return Err(not_implemented("conditional headers", &request_id));
        }
        if input.version_id.is_some() || input.part_number.is_some() {
            return Err(not_implemented("versionId or partNumber", &request_id));
        }
        let object = object_ref(&input.bucket, &input.key, &request_id)?;
        let meta = self
            .read
            .head(&object)
            .await
            .map_err(|error| s3_error(&error, &request_id))?;
        let output = object_output!(HeadObjectOutput, &meta, {
            content_length: i64::try_from(meta.size).ok(),
        });
        Ok(S3Response::new(output))
    }
}
