//! The test rig: MinIO ← counting forwarder ← Portico (the real binary), with aws-sdk-s3
//! clients for both Portico and MinIO direct, and one fresh bucket per test.

pub mod cli;
pub mod form;

use aws_sdk_s3::Client;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::operation::get_object::builders::GetObjectFluentBuilder;
use aws_sdk_s3::operation::head_object::HeadObjectOutput;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumType, CompletedMultipartUpload, CompletedPart};
use portico_testkit::create_bucket;
use portico_testkit::forwarder::Forwarder;
use portico_testkit::minio::minio;
use portico_testkit::portico::{Portico, Settings};
pub use portico_testkit::raw::{aws_chunked, http_chunked, raw_exchange, raw_request};
pub use portico_testkit::{
    eventually, http_request, random_bytes, s3_client, s3_client_as, signed_request, signed_send,
};

/// The status of a PutObject of `data` as `key` through `client` (0 when no response
/// came).
pub async fn put_status(client: &Client, bucket: &str, key: &str, data: &[u8]) -> u16 {
    let result = client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(aws_sdk_s3::primitives::ByteStream::from(data.to_vec()))
        .send()
        .await;
    match result {
        Ok(_) => 200,
        Err(error) => error
            .raw_response()
            .map_or(0, |response| response.status().as_u16()),
    }
}

/// The status and S3 error code of a GET that must fail.
pub async fn failed_get(
    client: &Client,
    bucket: &str,
    key: &str,
    range: Option<&str>,
) -> (u16, Option<String>) {
    failed(
        client
            .get_object()
            .bucket(bucket)
            .key(key)
            .set_range(range.map(str::to_owned)),
    )
    .await
}

/// The status and S3 error code of a GET, built any way, that must fail.
pub async fn failed(request: GetObjectFluentBuilder) -> (u16, Option<String>) {
    let error = request.send().await.expect_err("the GET must fail");
    let status = error
        .raw_response()
        .map_or(0, |response| response.status().as_u16());
    (status, error.code().map(str::to_owned))
}

/// The status of a HEAD that must fail (HEAD errors carry no body, so no code).
pub async fn failed_head(client: &Client, bucket: &str, key: &str) -> u16 {
    let error = client
        .head_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .expect_err("the HEAD must fail");
    error
        .raw_response()
        .map_or(0, |response| response.status().as_u16())
}

/// The `portico` binary built with these tests.
pub fn binary() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_BIN_EXE_portico"))
}

/// MinIO, a forwarder in front of it, and Portico in front of that.
pub struct Rig {
    pub forwarder: Forwarder,
    pub portico: Option<Portico>,
    pub settings: Settings,
    /// aws-sdk-s3 against Portico.
    pub client: Client,
    /// aws-sdk-s3 against MinIO, bypassing Portico.
    pub direct: Client,
    pub bucket: String,
    _cache_dir: tempfile::TempDir,
}

impl Rig {
    pub async fn start(bucket_prefix: &str, configure: impl FnOnce(&mut Settings)) -> Self {
        let minio = minio();
        let forwarder = Forwarder::start(&minio.address).await;
        let cache_dir = tempfile::tempdir().expect("cache directory");
        let mut settings = Settings::new(forwarder.endpoint(), cache_dir.path());
        configure(&mut settings);
        let direct = s3_client(&minio.endpoint(), true);
        let bucket = create_bucket(&direct, bucket_prefix).await;
        let portico = Portico::start(binary(), &settings).await;
        let client = s3_client(&portico.s3, true);
        Self {
            forwarder,
            portico: Some(portico),
            settings,
            client,
            direct,
            bucket,
            _cache_dir: cache_dir,
        }
    }

    pub fn portico(&self) -> &Portico {
        self.portico.as_ref().expect("portico is running")
    }

    /// Stops Portico with SIGTERM and starts it again on the same cache directory.
    pub async fn restart_portico(&mut self) {
        self.stop_portico().await;
        self.start_portico().await;
    }

    /// Stops Portico with SIGTERM (and waits for it to exit).
    pub async fn stop_portico(&mut self) {
        if let Some(portico) = self.portico.take() {
            portico.stop().await;
        }
    }

    /// Starts Portico on the rig's settings and cache directory.
    pub async fn start_portico(&mut self) {
        let portico = Portico::start(binary(), &self.settings).await;
        self.client = s3_client(&portico.s3, true);
        self.portico = Some(portico);
    }

    /// Uploads directly to MinIO.
    pub async fn put(&self, key: &str, data: &[u8]) {
        put_object(&self.direct, &self.bucket, key, data).await;
    }

    /// HEADs through Portico, so its metadata is cached.
    pub async fn head(&self, key: &str) -> HeadObjectOutput {
        self.client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .unwrap_or_else(|error| panic!("HEAD {key}: {error:?}"))
    }

    /// GETs through Portico with an optional `Range` header value.
    pub async fn get(&self, key: &str, range: Option<&str>) -> Vec<u8> {
        self.try_get(key, range)
            .await
            .unwrap_or_else(|error| panic!("GET {key} {range:?}: {error}"))
    }

    /// [`Rig::get`] that may fail: the body, or why the read failed (an error status or
    /// a body that ended early).
    pub async fn try_get(&self, key: &str, range: Option<&str>) -> Result<Vec<u8>, String> {
        try_get(&self.client, &self.bucket, key, range).await
    }

    /// Object GETs (not probes) the upstream received since the last `take`.
    pub fn upstream_gets(&self) -> usize {
        self.forwarder.object_requests("GET").len()
    }

    /// Blocks the object GETs the upstream received since the last `take` asked for,
    /// by their ranges: one per block fetched alone, many per origin stream.
    pub fn upstream_blocks(&self) -> usize {
        let block = parse_size(self.settings.block_size);
        self.forwarder
            .object_requests("GET")
            .iter()
            .map(|seen| blocks_asked(seen, block))
            .sum()
    }

    pub fn upstream_heads(&self) -> usize {
        self.forwarder.object_requests("HEAD").len()
    }
}

/// A GET of `key` in `bucket` through `client` with an optional `Range` header value:
/// the body, or why the read failed (an error status or a body that ended early).
pub async fn try_get(
    client: &Client,
    bucket: &str,
    key: &str,
    range: Option<&str>,
) -> Result<Vec<u8>, String> {
    let request = client.get_object().bucket(bucket).key(key);
    read_object(request.set_range(range.map(str::to_owned))).await
}

/// The body `request` reads, or why the read failed (an error status or a body that ended
/// early).
pub async fn read_object(request: GetObjectFluentBuilder) -> Result<Vec<u8>, String> {
    let output = request.send().await.map_err(|error| format!("{error:?}"))?;
    let body = output
        .body
        .collect()
        .await
        .map_err(|error| format!("GET body: {error}"))?;
    Ok(body.into_bytes().to_vec())
}

/// PUTs `data` as `key` in `bucket` through `client`.
pub async fn put_object(client: &Client, bucket: &str, key: &str, data: &[u8]) {
    client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(data.to_vec()))
        .send()
        .await
        .unwrap_or_else(|error| panic!("PUT {bucket}/{key}: {error:?}"));
}

/// Uploads `parts` as `key` in `bucket` through `client`, one part each, without
/// checksums.
pub async fn multipart_upload(client: &Client, bucket: &str, key: &str, parts: &[Vec<u8>]) {
    multipart_upload_with(client, (bucket, key), parts, None).await;
}

/// Uploads `parts` as `key` in `bucket` through `client`, one part each; with
/// `checksum = Some((algorithm, whole))`, each part carries its `algorithm` checksum and
/// the object's is FULL_OBJECT (`whole`) or composite.
pub async fn multipart_upload_with(
    client: &Client,
    (bucket, key): (&str, &str),
    parts: &[Vec<u8>],
    checksum: Option<(ChecksumAlgorithm, bool)>,
) {
    let algorithm = checksum.as_ref().map(|(algorithm, _)| algorithm.clone());
    let kind = checksum
        .as_ref()
        .and_then(|(_, whole)| whole.then_some(ChecksumType::FullObject));
    let upload = client
        .create_multipart_upload()
        .bucket(bucket)
        .key(key)
        .set_checksum_algorithm(algorithm.clone())
        .set_checksum_type(kind.clone())
        .send()
        .await
        .expect("CreateMultipartUpload");
    let upload_id = upload.upload_id().expect("upload id");
    let mut completed = Vec::new();
    for (number, data) in (1..).zip(parts) {
        let part = client
            .upload_part()
            .bucket(bucket)
            .key(key)
            .upload_id(upload_id)
            .part_number(number)
            .set_checksum_algorithm(algorithm.clone())
            .body(ByteStream::from(data.clone()))
            .send()
            .await
            .expect("UploadPart");
        completed.push(
            CompletedPart::builder()
                .part_number(number)
                .set_e_tag(part.e_tag().map(str::to_owned))
                .set_checksum_crc32(part.checksum_crc32().map(str::to_owned))
                .set_checksum_crc32_c(part.checksum_crc32_c().map(str::to_owned))
                .set_checksum_crc64_nvme(part.checksum_crc64_nvme().map(str::to_owned))
                .build(),
        );
    }
    client
        .complete_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(upload_id)
        .set_checksum_type(kind)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(completed))
                .build(),
        )
        .send()
        .await
        .expect("CompleteMultipartUpload");
}

/// Turns versioning on for `bucket` (through MinIO directly).
pub async fn enable_versioning(direct: &Client, bucket: &str) {
    direct
        .put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(
            aws_sdk_s3::types::VersioningConfiguration::builder()
                .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .expect("enable versioning");
}

/// A lifecycle rule (`id`) on `bucket` that expires objects under `prefix` after 30 days,
/// so their answers carry `x-amz-expiration`.
pub async fn expire_after_30_days(direct: &Client, bucket: &str, id: &str, prefix: &str) {
    use aws_sdk_s3::types::{
        BucketLifecycleConfiguration, ExpirationStatus, LifecycleExpiration, LifecycleRule,
        LifecycleRuleFilter,
    };
    let rule = LifecycleRule::builder()
        .id(id)
        .filter(LifecycleRuleFilter::builder().prefix(prefix).build())
        .status(ExpirationStatus::Enabled)
        .expiration(LifecycleExpiration::builder().days(30).build())
        .build()
        .expect("lifecycle rule");
    let configuration = BucketLifecycleConfiguration::builder()
        .rules(rule)
        .build()
        .expect("lifecycle configuration");
    direct
        .put_bucket_lifecycle_configuration()
        .bucket(bucket)
        .lifecycle_configuration(configuration)
        .send()
        .await
        .expect("put the lifecycle rule");
}

pub fn crc32_base64(data: &[u8]) -> String {
    aws_smithy_types::base64::encode(crc32fast::hash(data).to_be_bytes())
}

/// Bytes in a size as the settings spell it (`1MiB`, `64KiB`).
fn parse_size(size: &str) -> usize {
    let (number, unit) = size.split_at(
        size.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(size.len()),
    );
    let number: usize = number.parse().expect("a size");
    number
        * match unit {
            "KiB" => 1024,
            "MiB" => 1024 * 1024,
            "" => 1,
            other => panic!("size unit {other}"),
        }
}

/// The blocks of `block` bytes a GET the upstream received asked for, by the range its
/// answer carried (a range past the object's end is cut there), else by the range it
/// asked for (one without a range: one).
pub fn blocks_asked(seen: &portico_testkit::forwarder::Seen, block: usize) -> usize {
    let answered = seen.answered.get().and_then(|range| {
        let (range, _size) = range.strip_prefix("bytes ")?.split_once('/')?;
        Some(range.to_owned())
    });
    let range =
        answered.or_else(|| Some(seen.range.as_deref()?.strip_prefix("bytes=")?.to_owned()));
    let range = range.and_then(|range| {
        let (first, last) = range.split_once('-')?;
        Some((first.parse::<usize>().ok()?, last.parse::<usize>().ok()?))
    });
    range.map_or(1, |(first, last)| (last - first + 1).div_ceil(block))
}
