//! The one table from errors to S3 error codes, HTTP statuses and messages: the S3
//! surface's own refusals ([`RequestError`]), authentication, request bodies, the read
//! path and the upstream, for cached reads and forwarded requests alike.
//!
//! Errors the upstream sent pass through with their code, status and message; the
//! upstream's request id is added as `x-portico-upstream-request-id` and logged.
//!
//! One table: split, an error's code, status and message could no longer be read beside
//! every other's. Its tests are in `error/tests.rs`.

use http::{HeaderMap, HeaderValue, Response, StatusCode};
use s3s::{S3Error, S3ErrorCode};

use super::chunked::{BodyError, ChunkedError};
use crate::auth::AuthError;
use crate::object::Missing;
use crate::read::{ErrorSource, ReadError};
use crate::telemetry::ErrorChain;
use crate::types::ObjectRefError;
use crate::upstream::UpstreamError;

pub const UPSTREAM_REQUEST_ID_HEADER: &str = "x-portico-upstream-request-id";

/// The S3 error a client receives for `error`, carrying `request_id`.
pub fn s3_error(error: &ReadError, request_id: &str) -> S3Error {
    let (code, status, message): (S3ErrorCode, StatusCode, String) = match error {
        ReadError::NotFound(Missing::NoSuchKey, _) => (
            S3ErrorCode::NoSuchKey,
            StatusCode::NOT_FOUND,
            "The specified key does not exist.".to_owned(),
        ),
        ReadError::NotFound(Missing::NoSuchBucket, _) => (
            S3ErrorCode::NoSuchBucket,
            StatusCode::NOT_FOUND,
            "The specified bucket does not exist".to_owned(),
        ),
        ReadError::NotFound(Missing::NoSuchVersion, _) => (
            S3ErrorCode::NoSuchVersion,
            StatusCode::NOT_FOUND,
            "The specified version does not exist.".to_owned(),
        ),
        ReadError::InvalidRange(_) => (
            S3ErrorCode::InvalidRange,
            StatusCode::RANGE_NOT_SATISFIABLE,
            "The requested range is not satisfiable".to_owned(),
        ),
        ReadError::Changed => (
            S3ErrorCode::ServiceUnavailable,
            StatusCode::SERVICE_UNAVAILABLE,
            "The object changed upstream while it was being read. Please retry.".to_owned(),
        ),
        ReadError::Upstream(upstream) => upstream_error(upstream),
        ReadError::Busy(_) => (
            S3ErrorCode::SlowDown,
            StatusCode::SERVICE_UNAVAILABLE,
            "Please reduce your request rate.".to_owned(),
        ),
        ReadError::Internal(_) => (
            S3ErrorCode::InternalError,
            StatusCode::INTERNAL_SERVER_ERROR,
            "We encountered an internal error. Please try again.".to_owned(),
        ),
    };
    let mut s3_error = S3Error::with_message(code, message);
    s3_error.set_status_code(status);
    s3_error.set_request_id(request_id);
    let mut headers = HeaderMap::new();
    // Replacing an error's headers replaces all of them, so the XML content type is repeated.
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    if let ReadError::InvalidRange(unsatisfiable) = error
        && let Ok(value) = HeaderValue::from_str(&format!("bytes */{}", unsatisfiable.size))
    {
        headers.insert(http::header::CONTENT_RANGE, value);
    }
    if let Some(upstream_id) = upstream_request_id(error)
        && let Ok(value) = HeaderValue::from_str(upstream_id)
    {
        headers.insert(UPSTREAM_REQUEST_ID_HEADER, value);
    }
    s3_error.set_headers(headers);
    let level_is_error = error.source_kind() != ErrorSource::Client;
    let chain = crate::telemetry::ErrorChain(error);
    if level_is_error {
        tracing::warn!(request_id, upstream_request_id = upstream_request_id(error), error = %chain, "request failed");
    } else {
        tracing::debug!(request_id, upstream_request_id = upstream_request_id(error), error = %chain, "request failed");
    }
    s3_error
}

fn upstream_request_id(error: &ReadError) -> Option<&str> {
    match error {
        ReadError::NotFound(_, request_id) => request_id.as_deref(),
        ReadError::Upstream(upstream) => upstream.request_id(),
        _ => None,
    }
}

/// The error for a request the upstream could not answer (forwarded requests).
pub fn forward_error(error: &UpstreamError) -> S3Error {
    tracing::warn!(error = %ErrorChain(&error), "forwarding to the upstream failed");
    let (code, status, message) = upstream_error(error);
    let mut s3_error = S3Error::with_message(code, message);
    s3_error.set_status_code(status);
    s3_error
}

/// The error for a bucket and key that do not form a valid object reference.
pub fn invalid_object(error: &ObjectRefError) -> S3Error {
    let code = match error {
        ObjectRefError::KeyTooLong(_) => S3ErrorCode::KeyTooLongError,
        _ => S3ErrorCode::InvalidArgument,
    };
    S3Error::with_message(code, error.to_string())
}

/// `error` as an S3 XML response carrying `request_id`.
pub fn error_response(mut error: S3Error, request_id: &str) -> Response<s3s::Body> {
    error.set_request_id(request_id);
    match error.to_http_response() {
        Ok(response) => response.map(Into::into),
        Err(_) => {
            let mut response = Response::new(s3s::Body::empty());
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            response
        }
    }
}

/// The message for an upstream refusal that came without one: an answer to a HEAD, which
/// has no body to name its cause.
fn unexplained_refusal(status: u16, code: &str) -> String {
    let cause = match status {
        403 => {
            "Portico's upstream credential may lack permission to read this object, or a bucket policy or KMS key policy denies it"
        }
        _ => "the upstream gave no reason",
    };
    format!(
        "The upstream object store refused Portico's request for this object with {status} {code} and no message (an answer to a HEAD, such as a metadata revalidation, carries none): {cause}."
    )
}

fn upstream_error(error: &UpstreamError) -> (S3ErrorCode, StatusCode, String) {
    // Portico's own credential failing is not the client's: a client must not be told
    // its signature is wrong when it was Portico's.
    match error {
        UpstreamError::Rejected { code, .. } if error.credential_problem().is_some() => (
            S3ErrorCode::Custom("UpstreamCredentialRejected".into()),
            StatusCode::BAD_GATEWAY,
            format!(
                "The upstream object store refused the credential Portico signs with ({code}); Portico's operator must fix upstream.access_key_id and upstream.secret_access_key. Your request was not at fault."
            ),
        ),
        UpstreamError::NoCredential { .. } => (
            S3ErrorCode::Custom("UpstreamCredentialMissing".into()),
            StatusCode::BAD_GATEWAY,
            "Portico has no credential for the upstream object store; its operator must set upstream.access_key_id and upstream.secret_access_key or provide AWS credentials. Your request was not at fault.".to_owned(),
        ),
        UpstreamError::Rejected {
            status,
            code,
            message,
            ..
        } => {
            let message = if message.is_empty() {
                unexplained_refusal(*status, code)
            } else {
                message.clone()
            };
            let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY);
            let code =
                S3ErrorCode::from_bytes(code.as_bytes()).unwrap_or(S3ErrorCode::InternalError);
            (code, status, message)
        }
        UpstreamError::UnsignableHeader { name } => (
            S3ErrorCode::InvalidArgument,
            StatusCode::BAD_REQUEST,
            format!(
                "The value of header {name} is not UTF-8. Portico signs header values as text and cannot forward it."
            ),
        ),
        UpstreamError::Unreachable { .. } | UpstreamError::NotSent { .. } => (
            S3ErrorCode::ServiceUnavailable,
            StatusCode::SERVICE_UNAVAILABLE,
            "The upstream object store is unreachable. Please retry.".to_owned(),
        ),
        UpstreamError::InvalidRange { .. } => (
            S3ErrorCode::InvalidRange,
            StatusCode::RANGE_NOT_SATISFIABLE,
            "The requested range is not satisfiable".to_owned(),
        ),
        UpstreamError::NotFound { .. }
        | UpstreamError::PreconditionFailed { .. }
        | UpstreamError::NotModified
        | UpstreamError::InvalidResponse { .. }
        | UpstreamError::Request { .. } => (
            S3ErrorCode::InternalError,
            StatusCode::INTERNAL_SERVER_ERROR,
            "We encountered an internal error. Please try again.".to_owned(),
        ),
    }
}

/// The S3 error a client receives when authentication or authorization fails.
pub fn auth_error(error: &AuthError) -> S3Error {
    use std::borrow::Cow;
    let fixed = |code, status, message: &'static str| (code, status, Cow::Borrowed(message));
    let (code, status, message) = match error {
        AuthError::Anonymous | AuthError::Denied(_) => fixed(
            S3ErrorCode::AccessDenied,
            StatusCode::FORBIDDEN,
            "Access Denied",
        ),
        // SigV4a (`AWS4-ECDSA-P256-SHA256`, multi-region access points) lands here too:
        // the message names what the client used, so its user sees why.
        AuthError::UnsupportedAlgorithm(algorithm) => (
            S3ErrorCode::InvalidRequest,
            StatusCode::BAD_REQUEST,
            Cow::Owned(format!(
                "The authorization mechanism you have provided ({algorithm}) is not supported. Please use AWS4-HMAC-SHA256."
            )),
        ),
        AuthError::MalformedHeader(_) | AuthError::MalformedCredential(_) => fixed(
            S3ErrorCode::AuthorizationHeaderMalformed,
            StatusCode::BAD_REQUEST,
            "The authorization header is malformed.",
        ),
        AuthError::MalformedQuery(_) => fixed(
            S3ErrorCode::AuthorizationQueryParametersError,
            StatusCode::BAD_REQUEST,
            "The presigned URL's X-Amz-* parameters are malformed.",
        ),
        AuthError::MissingDate => fixed(
            S3ErrorCode::AccessDenied,
            StatusCode::FORBIDDEN,
            "AWS authentication requires a valid Date or x-amz-date header",
        ),
        AuthError::UnknownKey(_) => fixed(
            S3ErrorCode::InvalidAccessKeyId,
            StatusCode::FORBIDDEN,
            "The AWS Access Key Id you provided does not exist in our records.",
        ),
        AuthError::SignatureMismatch => fixed(
            S3ErrorCode::SignatureDoesNotMatch,
            StatusCode::FORBIDDEN,
            "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
        ),
        AuthError::Skewed => fixed(
            S3ErrorCode::RequestTimeTooSkewed,
            StatusCode::FORBIDDEN,
            "The difference between the request time and the current time is too large.",
        ),
        AuthError::Expired => fixed(
            S3ErrorCode::AccessDenied,
            StatusCode::FORBIDDEN,
            "Request has expired",
        ),
        AuthError::MissingContentSha256 => fixed(
            S3ErrorCode::InvalidRequest,
            StatusCode::BAD_REQUEST,
            "Missing required header for this request: x-amz-content-sha256",
        ),
        AuthError::InvalidContentSha256 => fixed(
            S3ErrorCode::InvalidArgument,
            StatusCode::BAD_REQUEST,
            "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER or a SHA-256 in hex.",
        ),
        AuthError::Policy(reason) => (
            S3ErrorCode::AccessDenied,
            StatusCode::FORBIDDEN,
            Cow::Owned(format!("Invalid according to Policy: {reason}")),
        ),
        AuthError::PolicyDocument(reason) => (
            S3ErrorCode::InvalidPolicyDocument,
            StatusCode::BAD_REQUEST,
            Cow::Owned(reason.clone()),
        ),
        AuthError::HeadersNotSigned(names) => (
            S3ErrorCode::AccessDenied,
            StatusCode::FORBIDDEN,
            Cow::Owned(format!(
                "There were headers present in the request which were not signed: {names}"
            )),
        ),
        AuthError::WrongRegion {
            given,
            expected,
            presigned,
        } => {
            let (code, what) = if *presigned {
                (
                    S3ErrorCode::AuthorizationQueryParametersError,
                    "Error parsing the X-Amz-Credential parameter",
                )
            } else {
                (
                    S3ErrorCode::AuthorizationHeaderMalformed,
                    "The authorization header is malformed",
                )
            };
            (
                code,
                StatusCode::BAD_REQUEST,
                Cow::Owned(format!(
                    "{what}; the region '{given}' is wrong; expecting '{expected}'"
                )),
            )
        }
    };
    let mut error = S3Error::with_message(code, message);
    error.set_status_code(status);
    error
}

/// What the S3 surface itself refuses in a request, before the read path or the upstream
/// sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// The request target is not an S3 address.
    InvalidUri(String),
    UriTooLong {
        bytes: usize,
        limit: usize,
    },
    HeaderSectionTooLarge {
        bytes: usize,
        limit: usize,
    },
    KeyTooLong {
        bytes: usize,
        limit: usize,
    },
    /// The credential's request rate is spent.
    SlowDown,
    /// `Host` and the request target's authority are missing, repeated or disagree.
    BadHost(&'static str),
    /// The request body broke off before it was read.
    UnreadableBody(String),
    /// A DeleteObjects list over the limit.
    ListTooLong,
    MalformedXml,
    /// An `aws-chunked` body without `x-amz-decoded-content-length`.
    MissingDecodedLength,
    ContentLengthNotANumber,
    /// A GetObject that names no object (s3s routed it without Portico's address).
    NotAnObject,
    InvalidRange,
    PreconditionFailed,
    NotModified,
}

impl From<RequestError> for S3Error {
    fn from(error: RequestError) -> Self {
        use RequestError as E;
        let (code, status, message) = match error {
            E::InvalidUri(message) => (S3ErrorCode::InvalidURI, None, message),
            E::UriTooLong { bytes, limit } => (
                S3ErrorCode::InvalidURI,
                None,
                format!("Couldn't parse the specified URI: it is {bytes} bytes long, the limit is {limit}."),
            ),
            E::HeaderSectionTooLarge { bytes, limit } => (
                S3ErrorCode::RequestHeaderSectionTooLarge,
                None,
                format!("Your request header section exceeds the maximum allowed size ({bytes} bytes, the limit is {limit})."),
            ),
            E::KeyTooLong { bytes, limit } => (
                S3ErrorCode::KeyTooLongError,
                None,
                format!("Your key is too long: {bytes} bytes, the limit is {limit}."),
            ),
            E::SlowDown => (
                S3ErrorCode::SlowDown,
                None,
                "Please reduce your request rate.".to_owned(),
            ),
            E::BadHost(message) => (
                S3ErrorCode::InvalidRequest,
                Some(StatusCode::BAD_REQUEST),
                message.to_owned(),
            ),
            E::UnreadableBody(cause) => (
                S3ErrorCode::IncompleteBody,
                None,
                format!("The request body could not be read: {cause}"),
            ),
            E::ListTooLong => (
                S3ErrorCode::MaxMessageLengthExceeded,
                None,
                "Your request was too big.".to_owned(),
            ),
            E::MalformedXml => (
                S3ErrorCode::MalformedXML,
                None,
                "The XML you provided was not well-formed or did not validate against our published schema.".to_owned(),
            ),
            E::MissingDecodedLength => (
                S3ErrorCode::MissingContentLength,
                None,
                "You must provide the x-amz-decoded-content-length header with an aws-chunked payload.".to_owned(),
            ),
            E::ContentLengthNotANumber => (
                S3ErrorCode::InvalidArgument,
                None,
                "Content-Length is not a number.".to_owned(),
            ),
            E::NotAnObject => (
                S3ErrorCode::InvalidRequest,
                None,
                "The request does not address an object.".to_owned(),
            ),
            E::InvalidRange => (
                S3ErrorCode::InvalidArgument,
                None,
                "The Range header is not valid.".to_owned(),
            ),
            E::PreconditionFailed => (
                S3ErrorCode::PreconditionFailed,
                Some(StatusCode::PRECONDITION_FAILED),
                "At least one of the pre-conditions you specified did not hold".to_owned(),
            ),
            E::NotModified => (
                S3ErrorCode::NotModified,
                Some(StatusCode::NOT_MODIFIED),
                "Not Modified".to_owned(),
            ),
        };
        // `None`: the status s3s gives the code.
        let mut s3_error = S3Error::with_message(code, message);
        if let Some(status) = status {
            s3_error.set_status_code(status);
        }
        s3_error
    }
}

/// The client's error for a request body that failed while it streamed upstream.
pub fn body_error(error: &BodyError) -> S3Error {
    let (code, status) = match error {
        BodyError::Client(_) => (S3ErrorCode::IncompleteBody, StatusCode::BAD_REQUEST),
        BodyError::Chunked(ChunkedError::SignatureMismatch) => {
            (S3ErrorCode::SignatureDoesNotMatch, StatusCode::FORBIDDEN)
        }
        BodyError::Chunked(_) => (S3ErrorCode::InvalidRequest, StatusCode::BAD_REQUEST),
        BodyError::Sha256Mismatch => (
            S3ErrorCode::Custom("XAmzContentSHA256Mismatch".into()),
            StatusCode::BAD_REQUEST,
        ),
        BodyError::EntityTooLarge => (S3ErrorCode::EntityTooLarge, StatusCode::BAD_REQUEST),
        BodyError::EntityTooSmall => (S3ErrorCode::EntityTooSmall, StatusCode::BAD_REQUEST),
        BodyError::MalformedForm => (S3ErrorCode::MalformedPOSTRequest, StatusCode::BAD_REQUEST),
    };
    let mut s3_error = S3Error::with_message(code, error.to_string());
    s3_error.set_status_code(status);
    s3_error
}

#[cfg(test)]
mod tests;
