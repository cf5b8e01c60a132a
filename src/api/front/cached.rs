//! A cached read's request and answer at the front: its object, conditions, `Range` and
//! policy taken off the request for the read path, and the `response-*` overrides and
//! status fixes applied to what s3s answers.

use std::sync::Arc;

use http::{HeaderName, HeaderValue, Request, Response};
use hyper::body::Incoming;
use s3s::S3Error;
use s3s::dto::Range;

use crate::api::conditions::Preconditions;
use crate::api::context::{CachedRequest, RequestContext};
use crate::api::error::{RequestError, invalid_object};
use crate::api::route::Address;
use crate::rules::Policy;
use crate::tenant::Tenant;
use crate::types::{ObjectRef, RangeRequest};

/// The context of a cached read: its object (with the version it names), its conditions
/// taken off `request`, its `Range` as S3 acts on it, and `policy`.
pub(super) fn cached_request(
    request: &mut Request<Incoming>,
    address: &Address,
    policy: Option<Arc<Policy>>,
    tenant: Arc<Tenant>,
    context: &RequestContext,
) -> Result<CachedRequest, S3Error> {
    let (Some(bucket), Some(key), Some(policy)) = (&address.bucket, &address.key, policy) else {
        return Err(RequestError::NotAnObject.into());
    };
    let object = ObjectRef::new(bucket, key)
        .and_then(|object| object.with_version(address.query_value("versionId")))
        .map_err(|error| invalid_object(&error))?;
    let conditions = Preconditions::take_from(request.headers_mut());
    crate::api::range::normalize(request.headers_mut());
    let range = match request.headers().get(http::header::RANGE) {
        None => None,
        Some(value) => {
            let parsed = value.to_str().ok().and_then(|text| Range::parse(text).ok());
            Some(
                parsed
                    .map(RangeRequest::from)
                    .ok_or(RequestError::InvalidRange)?,
            )
        }
    };
    Ok(CachedRequest {
        context: context.clone(),
        object,
        conditions,
        range,
        policy,
        tenant,
    })
}

/// The `response-*` query parameters as the headers they override.
pub(super) fn response_overrides(address: &Address) -> Vec<(HeaderName, HeaderValue)> {
    address
        .query
        .iter()
        .filter_map(|(name, value)| {
            let header = name.strip_prefix("response-")?;
            let header = HeaderName::from_bytes(header.as_bytes()).ok()?;
            Some((header, HeaderValue::from_str(value).ok()?))
        })
        .collect()
}

/// Applies `response-*` overrides to a successful response; a 304 carries no body.
pub(super) fn finish_cached_response(
    response: &mut Response<s3s::Body>,
    overrides: &[(HeaderName, HeaderValue)],
) {
    let status = response.status();
    if status == http::StatusCode::OK
        && response.headers().contains_key(http::header::CONTENT_RANGE)
    {
        // s3s answers every HeadObject with 200; a HEAD with a Range is a partial response.
        *response.status_mut() = http::StatusCode::PARTIAL_CONTENT;
    }
    if status.is_success() {
        for (name, value) in overrides {
            response.headers_mut().insert(name.clone(), value.clone());
        }
    } else if status == http::StatusCode::NOT_MODIFIED {
        *response.body_mut() = s3s::Body::empty();
        response.headers_mut().remove(http::header::CONTENT_LENGTH);
        response.headers_mut().remove(http::header::CONTENT_TYPE);
    }
}
