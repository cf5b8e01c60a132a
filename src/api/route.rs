//! Which requests the cache answers and which are forwarded, decided once per request
//! from the method, the address (bucket, key), the query and a few headers.
//!
//! Invariant: only a GET or HEAD of an object whose every query parameter and header the
//! cached read path understands goes to the cache. Everything else (sub-resources such as
//! `?acl`, `?tagging`, `?attributes`, `partNumber`, reads with encryption headers,
//! listings, writes) is forwarded, so a request that merely looks like a plain GET never
//! gets the plain object.

use http::{HeaderMap, Method, Uri};
use percent_encoding::percent_decode_str;
use s3s::host::S3Host;

use super::host::VirtualHosts;
use crate::auth::Scope;

/// Query parameters a cached GET or HEAD may carry.
const CACHEABLE_QUERY: [&str; 8] = [
    "response-cache-control",
    "response-content-disposition",
    "response-content-encoding",
    "response-content-language",
    "response-content-type",
    "response-expires",
    "versionId",
    "x-id",
];

/// Query parameters of ListObjects (v1); any other names a bucket sub-resource.
const LIST_V1_QUERY: [&str; 6] = [
    "delimiter",
    "encoding-type",
    "marker",
    "max-keys",
    "prefix",
    "x-id",
];

/// Headers that make a GET or HEAD something the cache cannot answer: SSE-C reads need
/// the key, and S3 refuses the other encryption headers on reads (400 InvalidArgument),
/// which the origin answers for itself.
const UNCACHEABLE_HEADERS: [&str; 7] = [
    "x-amz-server-side-encryption-customer-algorithm",
    "x-amz-server-side-encryption-customer-key",
    "x-amz-server-side-encryption-customer-key-md5",
    "x-amz-server-side-encryption",
    "x-amz-server-side-encryption-aws-kms-key-id",
    "x-amz-server-side-encryption-context",
    "x-amz-server-side-encryption-bucket-key-enabled",
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("the request path is not valid percent-encoded UTF-8")]
    Path,
    #[error("the query string is not valid percent-encoded UTF-8")]
    Query,
}

/// A request's decoded address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub bucket: Option<String>,
    /// The object key; `None` for service and bucket requests (`/bucket` and `/bucket/`).
    pub key: Option<String>,
    pub query: Vec<(String, String)>,
}

impl Address {
    pub fn parse(
        uri: &Uri,
        host: Option<&str>,
        hosts: Option<&VirtualHosts>,
    ) -> Result<Self, AddressError> {
        let virtual_bucket = match (host, hosts) {
            (Some(host), Some(hosts)) => hosts
                .parse_host_header(host)
                .ok()
                .and_then(|parsed| parsed.bucket().map(str::to_owned)),
            _ => None,
        };
        let path = uri.path().strip_prefix('/').unwrap_or(uri.path());
        let (bucket, key) = match virtual_bucket {
            Some(bucket) => (Some(bucket), decode_path(path)?),
            None => match path.split_once('/') {
                Some((bucket, key)) => (decode_path(bucket)?, decode_path(key)?),
                None => (decode_path(path)?, None),
            },
        };
        Ok(Self {
            bucket,
            key,
            query: parse_query(uri.query().unwrap_or_default())?,
        })
    }

    pub fn has_query(&self, name: &str) -> bool {
        self.query.iter().any(|(candidate, _)| candidate == name)
    }

    pub fn query_value(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(candidate, _)| candidate == name)
            .map(|(_, value)| value.as_str())
    }
}

/// A decoded path segment; empty means absent.
fn decode_path(raw: &str) -> Result<Option<String>, AddressError> {
    if raw.is_empty() {
        return Ok(None);
    }
    let decoded = percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| AddressError::Path)?;
    Ok(Some(decoded.into_owned()))
}

fn decode_query_part(raw: &str) -> Result<String, AddressError> {
    let spaced = raw.replace('+', " ");
    percent_decode_str(&spaced)
        .decode_utf8()
        .map(|decoded| decoded.into_owned())
        .map_err(|_| AddressError::Query)
}

pub fn parse_query(raw: &str) -> Result<Vec<(String, String)>, AddressError> {
    raw.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode_query_part(name)?, decode_query_part(value)?))
        })
        .collect()
}

/// What a successful forwarded request changes in the cache's view of objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    None,
    /// PutObject: the key changes; its bytes may be cached on the way (write-through).
    WriteObject,
    /// Any other write on an object key: CopyObject (destination),
    /// CompleteMultipartUpload, DeleteObject, tagging, ACLs, retention.
    ChangeKey,
    /// DeleteObjects: the keys are listed in the request body.
    DeleteListed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// GetObject or HeadObject answered by the read path.
    Cached,
    Forward {
        operation: &'static str,
        effect: Effect,
    },
}

impl Route {
    pub fn of(method: &Method, address: &Address, headers: &HeaderMap) -> Self {
        let forward = |operation| Self::Forward {
            operation,
            effect: Effect::None,
        };
        let has = |name| address.has_query(name);
        let Some(_) = &address.bucket else {
            return forward(if *method == Method::GET {
                "ListBuckets"
            } else {
                "Other"
            });
        };
        let Some(_) = &address.key else {
            return match *method {
                Method::GET if address.query_value("list-type") == Some("2") => {
                    forward("ListObjectsV2")
                }
                Method::GET if has("versions") => forward("ListObjectVersions"),
                Method::GET if has("uploads") => forward("ListMultipartUploads"),
                Method::GET if has("location") => forward("GetBucketLocation"),
                Method::GET
                    if address
                        .query
                        .iter()
                        .all(|(name, _)| LIST_V1_QUERY.contains(&name.as_str())) =>
                {
                    forward("ListObjects")
                }
                Method::GET => forward("GetBucketConfiguration"),
                Method::HEAD => forward("HeadBucket"),
                Method::PUT if address.query.is_empty() => forward("CreateBucket"),
                Method::PUT => forward("PutBucketConfiguration"),
                Method::DELETE if address.query.is_empty() => forward("DeleteBucket"),
                Method::DELETE => forward("DeleteBucketConfiguration"),
                Method::POST if has("delete") => Self::Forward {
                    operation: "DeleteObjects",
                    effect: Effect::DeleteListed,
                },
                _ => forward("Other"),
            };
        };
        // Every write on an object key invalidates it, whatever the operation: a write
        // that changes no bytes costs one metadata refresh, a missed one serves stale data.
        // The steps of a multipart upload before its completion change no object: the key
        // keeps its version until CompleteMultipartUpload (in a cluster, each invalidation
        // is a round trip to every member).
        let change = |operation| Self::Forward {
            operation,
            effect: Effect::ChangeKey,
        };
        let upload_step = |operation| Self::Forward {
            operation,
            effect: Effect::None,
        };
        let copy = headers.contains_key("x-amz-copy-source");
        match *method {
            Method::GET | Method::HEAD if is_cacheable_read(address, headers) => Self::Cached,
            Method::GET if has("uploadId") => forward("ListParts"),
            Method::GET if has("tagging") => forward("GetObjectTagging"),
            Method::GET if has("attributes") => forward("GetObjectAttributes"),
            Method::GET if has("acl") => forward("GetObjectAcl"),
            Method::GET => forward("GetObject"),
            Method::HEAD => forward("HeadObject"),
            Method::PUT if has("uploadId") && copy => upload_step("UploadPartCopy"),
            Method::PUT if has("uploadId") => upload_step("UploadPart"),
            Method::PUT if has("tagging") => change("PutObjectTagging"),
            Method::PUT if has("acl") => change("PutObjectAcl"),
            Method::PUT if has("retention") => change("PutObjectRetention"),
            Method::PUT if has("legal-hold") => change("PutObjectLegalHold"),
            // Other parameters (`x-id`, the checksum parameters of SDK presigned PUTs) do
            // not make it another operation.
            Method::PUT if copy => change("CopyObject"),
            Method::PUT => Self::Forward {
                operation: "PutObject",
                effect: Effect::WriteObject,
            },
            Method::POST if has("uploads") => upload_step("CreateMultipartUpload"),
            Method::POST if has("uploadId") => change("CompleteMultipartUpload"),
            Method::POST if has("restore") => change("RestoreObject"),
            Method::POST => change("PostObject"),
            Method::DELETE if has("uploadId") => upload_step("AbortMultipartUpload"),
            Method::DELETE if has("tagging") => change("DeleteObjectTagging"),
            Method::DELETE => change("DeleteObject"),
            _ => change("Other"),
        }
    }
}

/// Request headers that grant access or lock an object on a write: only a credential
/// with the admin scope may send them.
const ADMIN_HEADERS: [&str; 10] = [
    "x-amz-acl",
    "x-amz-grant-full-control",
    "x-amz-grant-read",
    "x-amz-grant-read-acp",
    "x-amz-grant-write",
    "x-amz-grant-write-acp",
    "x-amz-bypass-governance-retention",
    "x-amz-object-lock-mode",
    "x-amz-object-lock-legal-hold",
    "x-amz-object-lock-retain-until-date",
];

impl Route {
    /// The credential scope the request needs.
    pub fn scope(&self, headers: &HeaderMap) -> Scope {
        let operation = match self {
            Self::Cached => return Scope::Read,
            Self::Forward { operation, .. } => *operation,
        };
        match operation {
            "GetObject"
            | "HeadObject"
            | "GetObjectTagging"
            | "GetObjectAttributes"
            | "ListParts"
            | "ListBuckets"
            | "ListObjects"
            | "ListObjectsV2"
            | "ListObjectVersions"
            | "ListMultipartUploads"
            | "GetBucketLocation"
            | "HeadBucket" => Scope::Read,
            "PutObject"
            | "CopyObject"
            | "UploadPart"
            | "UploadPartCopy"
            | "CreateMultipartUpload"
            | "CompleteMultipartUpload"
            | "AbortMultipartUpload"
            | "DeleteObject"
            | "DeleteObjects"
            | "PutObjectTagging"
            | "DeleteObjectTagging"
            | "RestoreObject"
                if !ADMIN_HEADERS.iter().any(|name| headers.contains_key(*name)) =>
            {
                Scope::Write
            }
            // Bucket configuration of every kind, ACLs, retention, legal holds, and
            // anything unknown (form uploads: `form_upload_scope`).
            _ => Scope::Admin,
        }
    }
}

/// The scope a browser form upload needs, its fields given as the headers they stand for:
/// it writes an object, so the write scope, or admin with an ACL, grant or lock field.
pub fn form_upload_scope(fields: &HeaderMap) -> Scope {
    if ADMIN_HEADERS.iter().any(|name| fields.contains_key(*name)) {
        Scope::Admin
    } else {
        Scope::Write
    }
}

fn is_cacheable_read(address: &Address, headers: &HeaderMap) -> bool {
    address
        .query
        .iter()
        .all(|(name, _)| CACHEABLE_QUERY.contains(&name.as_str()))
        && !UNCACHEABLE_HEADERS
            .iter()
            .any(|name| headers.contains_key(*name))
}

#[cfg(test)]
mod tests;
