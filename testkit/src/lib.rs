//! The rig Portico's integration tests and benchmarks run on: a MinIO server on loopback
//! ([`minio`]), a counting forwarder as an independent observer of upstream traffic
//! ([`forwarder`]), the `portico` binary started on free ports ([`portico`]), and small
//! HTTP and S3 client helpers, and a SigV4 signer for raw requests ([`sign`]).

pub mod forwarder;
pub mod load;
pub mod minio;
pub mod portico;
pub mod process;
pub mod raw;
pub mod sign;
pub mod sqs;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use rand::{Rng, RngCore, SeedableRng};

use minio::{ACCESS_KEY, SECRET_KEY};

/// An S3 client for `endpoint` with the rig's credentials; `retries` off makes errors
/// surface at once.
pub fn s3_client(endpoint: &str, retries: bool) -> Client {
    s3_client_as(endpoint, ACCESS_KEY, SECRET_KEY, retries)
}

/// An S3 client for `endpoint` signing with `key` and `secret`.
pub fn s3_client_as(endpoint: &str, key: &str, secret: &str, retries: bool) -> Client {
    let retry = if retries {
        RetryConfig::standard()
    } else {
        RetryConfig::disabled()
    };
    s3_client_retrying(endpoint, (key, secret), retry)
}

/// An S3 client for `endpoint` signing with `key` and `secret`, retrying as `retry` says.
pub fn s3_client_retrying(
    endpoint: &str,
    (key, secret): (&str, &str),
    retry: RetryConfig,
) -> Client {
    let config = aws_sdk_s3::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .credentials_provider(Credentials::new(key, secret, None, None, "test"))
        .retry_config(retry)
        .http_client(sdk_http_client())
        .build();
    Client::from_conf(config)
}

/// The SDK's HTTP client for the rig: plain HTTP to loopback, no system roots needed.
pub fn sdk_http_client() -> portico_http_client::SdkHttpClient {
    let roots = portico_http_client::TrustRoots::load(false, None).expect("no CA file to read");
    portico_http_client::SdkHttpClient::new(roots.client_config().expect("TLS defaults"))
}

/// Deterministic pseudo-random bytes.
pub fn random_bytes(length: usize, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; length];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut bytes);
    bytes
}

/// Writes `bytes` (a multiple of 8 MiB) pseudo-random bytes to `path`, for objects too
/// large to hold in memory while uploading.
pub fn write_random_file(path: &std::path::Path, bytes: u64, seed: u64) {
    use std::io::Write;
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("create file"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut chunk = vec![0u8; 8 << 20];
    for _ in 0..bytes / chunk.len() as u64 {
        rng.fill_bytes(&mut chunk);
        file.write_all(&chunk).expect("write file");
    }
    file.flush().expect("flush file");
}

/// Turns versioning on in `bucket`.
pub async fn enable_versioning(client: &Client, bucket: &str) {
    use aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};
    client
        .put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .expect("enable versioning");
}

/// Writes zeros to a new file at `path` until its file system is full, as another
/// process filling a shared disk would; returns how many bytes it wrote.
pub fn fill_file_system(path: &std::path::Path) -> u64 {
    use std::io::Write;
    let Ok(mut file) = std::fs::File::create(path) else {
        return 0;
    };
    let chunk = vec![0u8; 1 << 20];
    let mut written = 0;
    while let Ok(count) = file.write(&chunk) {
        if count == 0 {
            break;
        }
        written += count as u64;
    }
    let _ = file.flush();
    written
}

/// Truncates every file directly in `dir` to zero bytes, as a failed disk loses what it
/// held; returns how many there were.
pub fn truncate_files(dir: &std::path::Path) -> usize {
    let mut files = 0;
    for entry in std::fs::read_dir(dir).expect("read directory") {
        let path = entry.expect("directory entry").path();
        if path.is_file() {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|file| file.set_len(0))
                .unwrap_or_else(|error| panic!("truncate {}: {error}", path.display()));
            files += 1;
        }
    }
    files
}

/// Creates a bucket named `prefix` plus a unique suffix; returns its name.
///
/// MinIO can answer its readiness probe and still refuse requests for a moment with 503
/// `XMinioServerNotInitialized`; that is retried for up to 30 s.
pub async fn create_bucket(client: &Client, prefix: &str) -> String {
    let bucket = unique_bucket(prefix);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match client.create_bucket().bucket(&bucket).send().await {
            Ok(_) => return bucket,
            Err(error)
                if error
                    .as_service_error()
                    .and_then(|service| service.meta().code())
                    == Some("XMinioServerNotInitialized")
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            Err(error) => panic!("create bucket {bucket}: {error:?}"),
        }
    }
}

/// A bucket name no other test uses.
pub fn unique_bucket(prefix: &str) -> String {
    let suffix: u32 = rand::rng().random();
    format!("{prefix}-{suffix:08x}")
}

/// A plain HTTP GET with extra headers: (status, body as text).
pub async fn http_get(url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let (status, _, body) = http_request("GET", url, headers).await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A plain HTTP request without a body: (status, headers, body).
pub async fn http_request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, http::HeaderMap, Bytes) {
    http_send(method, url, headers, Bytes::new()).await
}

/// A plain HTTP request with `body`: (status, headers, body).
pub async fn http_send(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> (u16, http::HeaderMap, Bytes) {
    try_http_send(None, method, url, headers, body)
        .await
        .unwrap_or_else(|error| panic!("{method} {url}: {error}"))
}

/// A request with `body`, over HTTPS with `tls` when the URL says so: (status, headers,
/// body), or why there was no whole answer within 10 s.
pub async fn try_http_send(
    tls: Option<rustls::ClientConfig>,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<(u16, http::HeaderMap, Bytes), String> {
    let tls = tls.unwrap_or_else(|| {
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
    });
    let connector = portico_http_client::https_connector(tls, Some(Duration::from_secs(2)));
    let client = HttpClient::builder(TokioExecutor::new()).build::<_, Full<Bytes>>(connector);
    let mut request = http::Request::builder().method(method).uri(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(body))
        .map_err(|error| error.to_string())?;
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|error| format!("{error:?}"))?;
        answer(response).await
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .unwrap_or_else(|_| Err("no answer within 10 s".to_owned()))
}

/// An HTTP/2 request (cleartext, prior knowledge) whose body is sent as `chunks` with no
/// `Content-Length`, as HTTP/2 allows: (status, headers, body).
pub async fn http2_send_unsized(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    chunks: Vec<Bytes>,
) -> (u16, http::HeaderMap, Bytes) {
    use http_body_util::StreamBody;
    type Chunks = StreamBody<
        futures::stream::Iter<
            std::vec::IntoIter<Result<hyper::body::Frame<Bytes>, std::convert::Infallible>>,
        >,
    >;
    let client = HttpClient::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Chunks>();
    let frames: Vec<_> = chunks
        .into_iter()
        .map(|chunk| Ok(hyper::body::Frame::data(chunk)))
        .collect();
    let mut request = http::Request::builder()
        .method(method)
        .uri(url)
        .version(http::Version::HTTP_2);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = StreamBody::new(futures::stream::iter(frames));
    let response = client
        .request(request.body(body).expect("request"))
        .await
        .unwrap_or_else(|error| panic!("{method} {url} over HTTP/2: {error}"));
    answer(response).await.expect("response body")
}

/// A response's status, headers and whole body.
async fn answer(
    response: http::Response<hyper::body::Incoming>,
) -> Result<(u16, http::HeaderMap, Bytes), String> {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|error| error.to_string())?
        .to_bytes();
    Ok((status, headers, body))
}

/// [`http_request`] signed with SigV4 by the test credentials (empty payload). A `host`
/// entry in `headers` is signed instead of the URL's authority.
pub async fn signed_request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, http::HeaderMap, Bytes) {
    signed_send(method, url, headers, Bytes::new()).await
}

/// [`http_send`] signed with SigV4 by the test credentials: an empty `body` signs its
/// hash, any other is sent as `UNSIGNED-PAYLOAD`. A `host` entry in `headers` is signed
/// instead of the URL's authority. For requests an S3 SDK will not send (keys it refuses).
pub async fn signed_send(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> (u16, http::HeaderMap, Bytes) {
    let uri: http::Uri = url.parse().expect("URL");
    let authority = uri.authority().expect("URL with a host").to_string();
    let mut all: Vec<(&str, &str)> = headers.to_vec();
    if !all
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        all.push(("host", &authority));
    }
    let payload = if body.is_empty() {
        sign::EMPTY_SHA256
    } else {
        "UNSIGNED-PAYLOAD"
    };
    let signed = sign::Signer::default().sign(method, url, &all, payload);
    let mut with_signature: Vec<(&str, &str)> = headers.to_vec();
    for (name, value) in &signed.headers {
        with_signature.push((name, value));
    }
    http_send(method, url, &with_signature, body).await
}

/// How often [`eventually`] looks at its condition again.
const EVENTUALLY_EVERY: std::time::Duration = std::time::Duration::from_millis(20);

/// Polls `check` until it gives a value, and returns that value; panics naming `what`
/// once `within` has passed without one. Tests wait with it for a condition instead of
/// sleeping for a time that is either too short (a flaky test) or needlessly long, and a
/// test that waits for something not to happen first waits for what shows it is over.
pub async fn eventually<T, F, Fut>(what: &str, within: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(EVENTUALLY_EVERY).await;
    }
}
