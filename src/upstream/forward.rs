//! Forwarding of S3 requests Portico does not answer itself: the client's request,
//! re-addressed to the upstream endpoint, re-signed with Portico's credentials, bodies
//! streamed both ways.
//!
//! Invariants: the URI sent upstream is built from the decoded bucket, key and query in
//! S3's canonical encoding, so the signature covers exactly what the upstream reads; a
//! request body that fails mid-stream aborts the upstream request (the upstream never
//! sees a complete request built from a broken one).

use std::sync::Arc;
use std::time::Instant;

use aws_config::SdkConfig;
use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::UpstreamError;
pub use super::signer::PostSigner;
use super::signer::{BodySignature, Signer};
use crate::BoxError;
use crate::config::UpstreamConfig;
use crate::source::Cause;
use crate::telemetry::{Metrics, RequestKind};
use crate::tenant::DEFAULT_TENANT;

pub type UpstreamBody = BoxBody<Bytes, BoxError>;

/// Characters S3's canonical URI encoding leaves as they are (RFC 3986 unreserved).
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');
/// The same for object keys in paths, where `/` separates nothing but stays literal.
const KEY_PATH: &AsciiSet = &COMPONENT.remove(b'/');

/// A request body and how it is sent upstream.
pub enum Payload {
    Empty,
    /// Plain bytes; `Some(length)` is sent as `Content-Length`, `None` is chunked.
    Plain(UpstreamBody, Option<u64>),
    /// Unsigned `aws-chunked` with trailing checksums; the length is the decoded length.
    AwsChunked(UpstreamBody, u64),
}

/// A request to forward, already decoded from the client's URI.
pub struct ForwardRequest {
    pub operation: &'static str,
    pub method: Method,
    pub bucket: Option<String>,
    pub key: Option<String>,
    /// Decoded query parameters in the client's order.
    pub query: Vec<(String, String)>,
    /// The client's end-to-end headers, without signature or framing headers.
    pub headers: HeaderMap,
    pub payload: Payload,
    /// Signed with the upstream credentials; a POST form upload carries its signature in
    /// its fields instead.
    pub signed: bool,
}

pub struct Forwarder {
    client: Client<portico_http_client::Connector, UpstreamBody>,
    scheme: Scheme,
    authority: Authority,
    force_path_style: bool,
    signer: Signer,
    metrics: Arc<Metrics>,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid upstream endpoint {endpoint:?}: {reason}")]
pub struct EndpointError {
    endpoint: String,
    reason: String,
}

impl Forwarder {
    pub fn new(
        config: &UpstreamConfig,
        shared: &SdkConfig,
        tls: &rustls::ClientConfig,
        metrics: Arc<Metrics>,
    ) -> Result<Self, EndpointError> {
        let endpoint = if config.endpoint.is_empty() {
            format!("https://s3.{}.amazonaws.com", config.region)
        } else {
            config.endpoint.clone()
        };
        let invalid = |reason: &str| EndpointError {
            endpoint: endpoint.clone(),
            reason: reason.to_owned(),
        };
        let uri: Uri = endpoint.parse().map_err(|_| invalid("not a URL"))?;
        let scheme = uri.scheme().cloned().ok_or_else(|| invalid("no scheme"))?;
        let authority = uri.authority().cloned().ok_or_else(|| invalid("no host"))?;
        let https =
            portico_http_client::https_connector(tls.clone(), Some(config.connect_timeout.get()));
        let client = Client::builder(TokioExecutor::new()).build(https);
        Ok(Self {
            client,
            scheme,
            authority,
            force_path_style: config.force_path_style,
            signer: Signer::new(shared.credentials_provider(), config.region.clone()),
            metrics,
        })
    }

    /// Sends `request` upstream and returns the response head with its streaming body.
    /// What signs a POST form's policy for this upstream at `now`.
    pub async fn post_signer(
        &self,
        now: std::time::SystemTime,
    ) -> Result<Option<PostSigner>, UpstreamError> {
        self.signer.post_signer(now).await
    }

    pub async fn send(&self, request: ForwardRequest) -> Result<Response<Incoming>, UpstreamError> {
        let started = Instant::now();
        let operation = request.operation;
        let head = request.method == http::Method::HEAD;
        let bucket = request.bucket.clone();
        let result = self.send_inner(request).await;
        let status = match &result {
            Ok(response) => response.status().as_u16(),
            Err(_) => 0,
        };
        if let Ok(response) = &result {
            let bytes = response
                .headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|length| length.to_str().ok()?.parse::<u64>().ok())
                .filter(|_| !head)
                .unwrap_or(0);
            let tenant = crate::tenant::note_origin_request();
            let tenant = tenant
                .as_ref()
                .map_or(DEFAULT_TENANT, |tenant| tenant.name());
            let kind = RequestKind::of_operation(operation);
            self.metrics
                .ledger
                .count_origin(bucket.as_deref(), tenant, kind, bytes);
        }
        self.metrics
            .record_upstream(operation, status, started.elapsed().as_secs_f64());
        result
    }

    async fn send_inner(
        &self,
        request: ForwardRequest,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let uri = self.uri_for(&request)?;
        let host = uri
            .authority()
            .map(Authority::as_str)
            .unwrap_or_default()
            .to_owned();
        let (body, signature, length) = match request.payload {
            Payload::Empty => (empty_body(), BodySignature::Empty, None),
            Payload::Plain(body, length) => (body, BodySignature::Unsigned, length),
            Payload::AwsChunked(body, _) => (body, BodySignature::UnsignedWithTrailer, None),
        };
        let mut outgoing = Request::builder()
            .method(request.method)
            .uri(uri)
            .body(body)
            .map_err(|error| UpstreamError::Request {
                cause: Cause::of(error),
            })?;
        let headers = outgoing.headers_mut();
        *headers = request.headers;
        let host = HeaderValue::from_str(&host).map_err(|error| UpstreamError::Request {
            cause: Cause::context("invalid upstream host", error),
        })?;
        headers.insert(http::header::HOST, host);
        if let Some(length) = length {
            headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(length));
        }
        if request.signed {
            self.signer.sign(&mut outgoing, signature).await?;
        }
        self.client.request(outgoing).await.map_err(|error| {
            // A failed connect (refused, DNS, TLS handshake) sent nothing.
            if error.is_connect() {
                UpstreamError::NotSent {
                    cause: Cause::of(error),
                }
            } else {
                UpstreamError::Unreachable {
                    cause: Cause::of(error),
                }
            }
        })
    }

    /// The upstream URI for a request: path style or virtual-host style, canonically encoded.
    fn uri_for(&self, request: &ForwardRequest) -> Result<Uri, UpstreamError> {
        let key_path = request
            .key
            .as_deref()
            .map(|key| utf8_percent_encode(key, KEY_PATH).to_string());
        let (authority, path) = match request.bucket.as_deref() {
            None => (self.authority.to_string(), "/".to_owned()),
            Some(bucket) if self.force_path_style || !virtual_host_safe(bucket) => {
                let bucket = utf8_percent_encode(bucket, COMPONENT);
                match &key_path {
                    Some(key) => (self.authority.to_string(), format!("/{bucket}/{key}")),
                    None => (self.authority.to_string(), format!("/{bucket}")),
                }
            }
            Some(bucket) => (
                format!("{bucket}.{}", self.authority),
                format!("/{}", key_path.unwrap_or_default()),
            ),
        };
        let query = request
            .query
            .iter()
            .map(|(name, value)| {
                let name = utf8_percent_encode(name, COMPONENT);
                if value.is_empty() {
                    name.to_string()
                } else {
                    format!("{name}={}", utf8_percent_encode(value, COMPONENT))
                }
            })
            .collect::<Vec<_>>()
            .join("&");
        let path_and_query = if query.is_empty() {
            path
        } else {
            format!("{path}?{query}")
        };
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(authority)
            .path_and_query(path_and_query)
            .build()
            .map_err(|error| UpstreamError::Request {
                cause: Cause::context("cannot build the upstream URI", error),
            })
    }
}

/// Whether a bucket can be a DNS label over TLS (dotted names break wildcard certificates).
fn virtual_host_safe(bucket: &str) -> bool {
    !bucket.is_empty()
        && bucket.len() <= 63
        && bucket
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
}

fn empty_body() -> UpstreamBody {
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(bucket: Option<&str>, key: Option<&str>, query: &[(&str, &str)]) -> ForwardRequest {
        ForwardRequest {
            operation: "Test",
            method: Method::GET,
            bucket: bucket.map(str::to_owned),
            key: key.map(str::to_owned),
            query: query
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
            headers: HeaderMap::new(),
            payload: Payload::Empty,
            signed: true,
        }
    }

    fn forwarder(endpoint: &str, force_path_style: bool) -> Forwarder {
        let config = UpstreamConfig {
            endpoint: endpoint.to_owned(),
            force_path_style,
            ..UpstreamConfig::default()
        };
        let shared = SdkConfig::builder().build();
        let tls = portico_http_client::TrustRoots::load(false, None)
            .unwrap()
            .client_config()
            .unwrap();
        Forwarder::new(&config, &shared, &tls, Arc::new(Metrics::new())).unwrap()
    }

    #[test]
    fn uris_are_canonically_encoded() {
        let path_style = forwarder("http://127.0.0.1:9000", true);
        let uri = path_style
            .uri_for(&request(
                Some("bucket"),
                Some("dir/a b+c%~é"),
                &[("prefix", "x y/z"), ("uploads", "")],
            ))
            .unwrap();
        assert_eq!(
            uri.to_string(),
            "http://127.0.0.1:9000/bucket/dir/a%20b%2Bc%25~%C3%A9?prefix=x%20y%2Fz&uploads"
        );
        let root = path_style.uri_for(&request(None, None, &[])).unwrap();
        assert_eq!(root.to_string(), "http://127.0.0.1:9000/");
        let bucket_only = path_style
            .uri_for(&request(Some("bucket"), None, &[("list-type", "2")]))
            .unwrap();
        assert_eq!(
            bucket_only.to_string(),
            "http://127.0.0.1:9000/bucket?list-type=2"
        );
    }

    #[test]
    fn virtual_hosts_are_used_unless_path_style_or_dotted() {
        let virtual_hosts = forwarder("https://s3.example.com", false);
        let uri = virtual_hosts
            .uri_for(&request(Some("photos"), Some("a/b"), &[]))
            .unwrap();
        assert_eq!(uri.to_string(), "https://photos.s3.example.com/a/b");
        let dotted = virtual_hosts
            .uri_for(&request(Some("my.photos"), Some("a"), &[]))
            .unwrap();
        assert_eq!(dotted.to_string(), "https://s3.example.com/my.photos/a");
    }
}
