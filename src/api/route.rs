//! Which requests the cache answers and which are forwarded, decided once per request
//! from the method, the address (bucket, key), the query and a few headers.
//!
//! Invariant: only a GET or HEAD of an object whose every query parameter and header the
//! cached read path understands goes to the cache. Everything else (sub-resources such as
//! `?acl`, `?tagging`, `?attributes`, `partNumber`, SSE-C reads, listings, writes) is
//! forwarded, so a request that merely looks like a plain GET never gets the plain object.

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

/// Headers that make a GET something the cache cannot answer: SSE-C reads need the key.
const UNCACHEABLE_HEADERS: [&str; 3] = [
    "x-amz-server-side-encryption-customer-algorithm",
    "x-amz-server-side-encryption-customer-key",
    "x-amz-server-side-encryption-customer-key-md5",
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
    /// Any other write on an object key: CopyObject (destination), multipart uploads,
    /// DeleteObject, tagging, ACLs, retention.
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
        let change = |operation| Self::Forward {
            operation,
            effect: Effect::ChangeKey,
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
            Method::PUT if has("uploadId") && copy => change("UploadPartCopy"),
            Method::PUT if has("uploadId") => change("UploadPart"),
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
            Method::POST if has("uploads") => change("CreateMultipartUpload"),
            Method::POST if has("uploadId") => change("CompleteMultipartUpload"),
            Method::POST if has("restore") => change("RestoreObject"),
            Method::POST => change("PostObject"),
            Method::DELETE if has("uploadId") => change("AbortMultipartUpload"),
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
            // Bucket configuration of every kind, ACLs, retention, legal holds, browser
            // POST uploads (their policy document carries ACLs), and anything unknown.
            _ => Scope::Admin,
        }
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
mod tests {
    use super::*;

    fn address(uri: &str) -> Address {
        Address::parse(&uri.parse().unwrap(), None, None).unwrap()
    }

    fn route(method: Method, uri: &str) -> Route {
        Route::of(&method, &address(uri), &HeaderMap::new())
    }

    fn operation(method: Method, uri: &str) -> &'static str {
        match route(method, uri) {
            Route::Cached => "cache",
            Route::Forward { operation, .. } => operation,
        }
    }

    #[test]
    fn addresses_are_decoded() {
        let parsed = address("/bucket/dir/a%20b+c?prefix=x+y%2Fz&uploads");
        assert_eq!(parsed.bucket.as_deref(), Some("bucket"));
        assert_eq!(parsed.key.as_deref(), Some("dir/a b+c"));
        assert_eq!(
            parsed.query,
            vec![
                ("prefix".to_owned(), "x y/z".to_owned()),
                ("uploads".to_owned(), String::new())
            ]
        );
        assert_eq!(address("/bucket/").key, None);
        assert_eq!(address("/bucket").key, None);
        assert_eq!(address("/").bucket, None);
        assert_eq!(
            Address::parse(&"/a%FF".parse().unwrap(), None, None),
            Err(AddressError::Path)
        );
        let hosts = VirtualHosts::new(&["s3.local".to_owned()]);
        let virtual_host = Address::parse(
            &"/k/x".parse().unwrap(),
            Some("b.s3.local:8080"),
            Some(&hosts),
        )
        .unwrap();
        assert_eq!(virtual_host.bucket.as_deref(), Some("b"));
        assert_eq!(virtual_host.key.as_deref(), Some("k/x"));
    }

    #[test]
    fn only_plain_object_reads_are_cached() {
        assert_eq!(operation(Method::GET, "/b/k"), "cache");
        assert_eq!(operation(Method::HEAD, "/b/k?versionId=3"), "cache");
        assert_eq!(
            operation(Method::GET, "/b/k?versionId=3&x-id=GetObject"),
            "cache"
        );
        assert_eq!(
            operation(
                Method::GET,
                "/b/k?response-content-type=text%2Fplain&x-id=GetObject"
            ),
            "cache"
        );
        assert_eq!(operation(Method::GET, "/b/k?partNumber=1"), "GetObject");
        assert_eq!(operation(Method::HEAD, "/b/k?partNumber=1"), "HeadObject");
        assert_eq!(
            operation(Method::GET, "/b/k?attributes"),
            "GetObjectAttributes"
        );
        assert_eq!(operation(Method::GET, "/b/k?acl"), "GetObjectAcl");
        assert_eq!(operation(Method::GET, "/b/k?tagging"), "GetObjectTagging");
        assert_eq!(operation(Method::GET, "/b/k?torrent"), "GetObject");
        let mut sse_c = HeaderMap::new();
        sse_c.insert(
            "x-amz-server-side-encryption-customer-algorithm",
            "AES256".parse().unwrap(),
        );
        assert!(matches!(
            Route::of(&Method::GET, &address("/b/k"), &sse_c),
            Route::Forward { .. }
        ));
    }

    #[test]
    fn bucket_requests_are_forwarded_with_or_without_trailing_slash() {
        assert_eq!(operation(Method::GET, "/b/"), "ListObjects");
        assert_eq!(
            operation(Method::GET, "/b?delimiter=%2F&encoding-type=url"),
            "ListObjects"
        );
        assert_eq!(
            operation(Method::GET, "/b?versioning"),
            "GetBucketConfiguration"
        );
        assert_eq!(
            operation(Method::GET, "/b?prefix=&delimiter=%2F"),
            "ListObjects"
        );
        assert_eq!(
            operation(Method::GET, "/b/?list-type=2&delimiter=%2F"),
            "ListObjectsV2"
        );
        assert_eq!(operation(Method::GET, "/"), "ListBuckets");
        assert_eq!(operation(Method::HEAD, "/b"), "HeadBucket");
        assert_eq!(operation(Method::PUT, "/b"), "CreateBucket");
    }

    #[test]
    fn writes_carry_their_cache_effect() {
        let effect = |method, uri| match route(method, uri) {
            Route::Forward { effect, .. } => effect,
            Route::Cached => panic!("{uri} must be forwarded"),
        };
        assert_eq!(effect(Method::PUT, "/b/k"), Effect::WriteObject);
        assert_eq!(
            effect(Method::PUT, "/b/k?partNumber=1&uploadId=u"),
            Effect::ChangeKey
        );
        assert_eq!(effect(Method::PUT, "/b/k?tagging"), Effect::ChangeKey);
        assert_eq!(effect(Method::POST, "/b/k?uploadId=u"), Effect::ChangeKey);
        assert_eq!(effect(Method::DELETE, "/b/k"), Effect::ChangeKey);
        assert_eq!(effect(Method::DELETE, "/b/k?uploadId=u"), Effect::ChangeKey);
        assert_eq!(effect(Method::POST, "/b?delete"), Effect::DeleteListed);
        assert_eq!(effect(Method::GET, "/b?list-type=2"), Effect::None);
        assert_eq!(effect(Method::GET, "/b/k?acl"), Effect::None);
        let mut copy = HeaderMap::new();
        copy.insert("x-amz-copy-source", "src/k".parse().unwrap());
        assert_eq!(
            Route::of(&Method::PUT, &address("/b/k"), &copy),
            Route::Forward {
                operation: "CopyObject",
                effect: Effect::ChangeKey
            }
        );
    }

    #[test]
    fn a_presigned_put_with_checksum_parameters_is_a_put_object() {
        // What aws-sdk-s3 presigns for a PUT with a checksum: the parameters stay in the URL.
        let uri = "/b/k?x-id=PutObject&x-amz-checksum-crc32=AAAAAA%3D%3D&x-amz-sdk-checksum-algorithm=CRC32";
        assert_eq!(
            route(Method::PUT, uri),
            Route::Forward {
                operation: "PutObject",
                effect: Effect::WriteObject
            }
        );
        // Whatever a write on a key is called, it invalidates the key.
        for (method, uri) in [
            (Method::PUT, "/b/k?unknown-parameter"),
            (Method::PUT, "/b/k?retention"),
            (Method::PUT, "/b/k?acl"),
            (Method::POST, "/b/k?restore"),
            (Method::PATCH, "/b/k"),
        ] {
            assert!(
                matches!(
                    route(method.clone(), uri),
                    Route::Forward {
                        effect: Effect::ChangeKey | Effect::WriteObject,
                        ..
                    }
                ),
                "{method} {uri}"
            );
        }
    }

    #[test]
    fn each_operation_needs_its_scope() {
        let scope = |method, uri, headers: &[(&str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in headers {
                map.insert(
                    http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    value.parse().unwrap(),
                );
            }
            Route::of(&method, &address(uri), &map).scope(&map)
        };
        for (method, uri) in [
            (Method::GET, "/b/k"),
            (Method::HEAD, "/b/k"),
            (Method::GET, "/b/k?tagging"),
            (Method::GET, "/b?list-type=2"),
            (Method::GET, "/b?uploads"),
            (Method::HEAD, "/b"),
            (Method::GET, "/"),
        ] {
            assert_eq!(
                scope(method.clone(), uri, &[]),
                Scope::Read,
                "{method} {uri}"
            );
        }
        for (method, uri) in [
            (Method::PUT, "/b/k"),
            (Method::PUT, "/b/k?partNumber=1&uploadId=u"),
            (Method::POST, "/b/k?uploads"),
            (Method::DELETE, "/b/k"),
            (Method::POST, "/b?delete"),
            (Method::PUT, "/b/k?tagging"),
        ] {
            assert_eq!(
                scope(method.clone(), uri, &[]),
                Scope::Write,
                "{method} {uri}"
            );
        }
        for (method, uri) in [
            (Method::PUT, "/b"),
            (Method::DELETE, "/b"),
            (Method::PUT, "/b?policy"),
            (Method::GET, "/b?policy"),
            (Method::PUT, "/b?acl"),
            (Method::DELETE, "/b?lifecycle"),
            (Method::PUT, "/b/k?acl"),
            (Method::GET, "/b/k?acl"),
            (Method::PUT, "/b/k?retention"),
            (Method::PUT, "/b/k?legal-hold"),
            (Method::POST, "/b/k"),
            (Method::PATCH, "/b/k"),
        ] {
            assert_eq!(
                scope(method.clone(), uri, &[]),
                Scope::Admin,
                "{method} {uri}"
            );
        }
        assert_eq!(
            scope(Method::PUT, "/b/k", &[("x-amz-acl", "public-read")]),
            Scope::Admin
        );
        assert_eq!(
            scope(Method::PUT, "/b/k", &[("x-amz-grant-read", "uri=x")]),
            Scope::Admin
        );
        assert_eq!(
            scope(
                Method::PUT,
                "/b/k",
                &[("x-amz-object-lock-mode", "COMPLIANCE")]
            ),
            Scope::Admin
        );
    }
}
