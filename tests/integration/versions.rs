//! Reads pinned to a version (`versionId`) and reads that ask for the stored checksums
//! (`x-amz-checksum-mode: ENABLED`), served from cache with S3's answers.

use aws_sdk_s3::Client;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumMode};

use crate::support::{Rig, enable_versioning, failed, random_bytes, signed_request};

const MIB: usize = 1024 * 1024;

/// Uploads directly to MinIO and returns the new version id.
async fn put_version(rig: &Rig, key: &str, data: &[u8]) -> String {
    rig.direct
        .put_object()
        .bucket(&rig.bucket)
        .key(key)
        .body(ByteStream::from(data.to_vec()))
        .send()
        .await
        .expect("PUT")
        .version_id()
        .expect("a versioned bucket returns a version id")
        .to_owned()
}

/// The bytes and `x-amz-version-id` of a GET of `version` through `client`.
async fn get_version(client: &Client, bucket: &str, key: &str, version: &str) -> (Vec<u8>, String) {
    let output = client
        .get_object()
        .bucket(bucket)
        .key(key)
        .version_id(version)
        .send()
        .await
        .unwrap_or_else(|error| panic!("GET {key}?versionId={version}: {error:?}"));
    let version = output.version_id().unwrap_or_default().to_owned();
    let body = output.body.collect().await.expect("body").into_bytes();
    (body.to_vec(), version)
}

/// The status and error code of a GET of `version` that must fail.
async fn failed_version_get(
    client: &Client,
    bucket: &str,
    key: &str,
    version: &str,
) -> (u16, Option<String>) {
    failed(
        client
            .get_object()
            .bucket(bucket)
            .key(key)
            .version_id(version),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn versioned_reads_are_cached_under_their_version() {
    let rig = Rig::start("versions", |_| {}).await;
    enable_versioning(&rig.direct, &rig.bucket).await;
    let first = random_bytes(2 * MIB + 100, 21);
    let second = random_bytes(3 * MIB + 7, 22);
    let v1 = put_version(&rig, "object", &first).await;
    let v2 = put_version(&rig, "object", &second).await;
    let bucket = &rig.bucket;

    assert!(get_version(&rig.client, bucket, "object", &v1).await == (first.clone(), v1.clone()));
    assert!(get_version(&rig.client, bucket, "object", &v2).await == (second.clone(), v2.clone()));
    assert!(rig.get("object", None).await == second);
    let gets = rig.forwarder.object_requests("GET");
    let by_version: usize = gets
        .iter()
        .filter(|seen| {
            seen.query
                .as_deref()
                .is_some_and(|query| query.contains("versionId"))
        })
        .map(|seen| crate::support::blocks_asked(seen, MIB))
        .sum();
    assert!(
        by_version >= 7,
        "every block of both versions was fetched by version id: {gets:?}"
    );

    let before = rig.upstream_gets();
    assert!(get_version(&rig.client, bucket, "object", &v1).await.0 == first);
    let output = rig
        .client
        .get_object()
        .bucket(bucket)
        .key("object")
        .version_id(&v2)
        .range("bytes=1048570-2097200")
        .send()
        .await
        .expect("ranged GET of a version");
    let ranged = output.body.collect().await.expect("body").into_bytes();
    assert!(ranged == second[1_048_570..=2_097_200]);
    assert_eq!(
        rig.upstream_gets(),
        before,
        "both versions are served from cache"
    );

    // Deleting the current version through Portico makes the first one current at once,
    // and the deleted version is gone.
    rig.client
        .delete_object()
        .bucket(bucket)
        .key("object")
        .version_id(&v2)
        .send()
        .await
        .expect("DeleteObject of a version");
    assert!(rig.get("object", None).await == first);
    assert_eq!(
        failed_version_get(&rig.client, bucket, "object", &v2).await,
        (404, Some("NoSuchVersion".to_owned()))
    );

    // Unknown and malformed version ids get the upstream's answers.
    for version in ["00000000-0000-0000-0000-000000000000", "not-a-version"] {
        assert_eq!(
            failed_version_get(&rig.client, bucket, "object", version).await,
            failed_version_get(&rig.direct, bucket, "object", version).await,
            "versionId={version}"
        );
    }
}

/// The stored checksums a whole-object GET reports with checksum mode enabled.
async fn get_checksums(client: &Client, bucket: &str, key: &str) -> [Option<String>; 4] {
    let output = client
        .get_object()
        .bucket(bucket)
        .key(key)
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap_or_else(|error| panic!("GET {key}: {error:?}"));
    let checksums = [
        output.checksum_crc32().map(str::to_owned),
        output.checksum_crc32_c().map(str::to_owned),
        output.checksum_sha256().map(str::to_owned),
        output.checksum_type().map(|kind| kind.as_str().to_owned()),
    ];
    // The SDK validates the body against a full-object checksum while reading it.
    output.body.collect().await.expect("body validates");
    checksums
}

#[tokio::test(flavor = "multi_thread")]
async fn checksum_mode_reads_return_the_stored_checksums() {
    let rig = Rig::start("checksums", |_| {}).await;
    let bucket = &rig.bucket;
    let data = random_bytes(2 * MIB + 5, 23);
    for (key, algorithm) in [
        ("crc32", ChecksumAlgorithm::Crc32),
        ("crc32c", ChecksumAlgorithm::Crc32C),
        ("sha256", ChecksumAlgorithm::Sha256),
    ] {
        rig.direct
            .put_object()
            .bucket(bucket)
            .key(key)
            .checksum_algorithm(algorithm)
            .body(ByteStream::from(data.clone()))
            .send()
            .await
            .expect("PUT with a checksum");
    }

    for key in ["crc32", "crc32c", "sha256"] {
        let direct = get_checksums(&rig.direct, bucket, key).await;
        assert!(
            direct[..3].iter().any(Option::is_some),
            "{key}: the upstream stored a checksum"
        );
        assert_eq!(
            get_checksums(&rig.client, bucket, key).await,
            direct,
            "{key}: cold"
        );
        let gets = rig.upstream_gets();
        assert_eq!(
            get_checksums(&rig.client, bucket, key).await,
            direct,
            "{key}: cached"
        );
        assert_eq!(rig.upstream_gets(), gets, "{key}: served from cache");
        let head = rig
            .client
            .head_object()
            .bucket(bucket)
            .key(key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .expect("HEAD");
        assert_eq!(
            [
                head.checksum_crc32().map(str::to_owned),
                head.checksum_crc32_c().map(str::to_owned),
                head.checksum_sha256().map(str::to_owned),
            ],
            direct[..3],
            "{key}: HEAD"
        );
    }

    // Ranged reads carry no whole-object checksum.
    let ranged = rig
        .client
        .get_object()
        .bucket(bucket)
        .key("crc32")
        .range("bytes=0-99")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .expect("ranged GET");
    assert_eq!(ranged.checksum_crc32(), None);

    // Metadata learnt from a plain GET is completed by one HEAD, not by re-reading blocks.
    rig.direct
        .put_object()
        .bucket(bucket)
        .key("late")
        .checksum_algorithm(ChecksumAlgorithm::Crc32)
        .body(ByteStream::from(data.clone()))
        .send()
        .await
        .expect("PUT");
    let url = format!("{}/{bucket}/late", rig.portico().s3);
    let (status, _, body) = signed_request("GET", &url, &[]).await;
    assert!(status == 200 && body == data);
    let direct = get_checksums(&rig.direct, bucket, "late").await;
    let (gets, heads) = (rig.upstream_gets(), rig.upstream_heads());
    assert_eq!(get_checksums(&rig.client, bucket, "late").await, direct);
    assert_eq!(rig.upstream_gets(), gets);
    assert_eq!(rig.upstream_heads(), heads + 1);
    let error = rig
        .client
        .get_object()
        .bucket(bucket)
        .key("missing")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .expect_err("missing key");
    assert_eq!(error.code(), Some("NoSuchKey"));
}

/// The modification time MinIO reports for `key`, read past Portico.
async fn last_modified(rig: &Rig, key: &str) -> Option<i64> {
    let head = rig.direct.head_object().bucket(&rig.bucket).key(key).send();
    head.await.unwrap().last_modified().map(|time| time.secs())
}

#[tokio::test(flavor = "multi_thread")]
async fn objects_without_an_etag_are_streamed_whole_and_never_mixed() {
    let rig = Rig::start("no-etag", |settings| {
        settings.metadata_ttl = "0s";
    })
    .await;
    rig.forwarder.strip_etags();
    // Two versions of the same size written within one second: a modification time and a
    // size cannot tell them apart, so a block cached from the first would be served as
    // part of the second.
    let mut collided = None;
    for attempt in 0..20u64 {
        let key = format!("no-etag-{attempt}");
        let first = random_bytes(3 * MIB, attempt);
        let second = random_bytes(3 * MIB, attempt + 100);
        rig.put(&key, &first).await;
        let first_modified = last_modified(&rig, &key).await;
        assert_eq!(rig.get(&key, Some("bytes=0-99")).await, first[..100]);
        rig.put(&key, &second).await;
        if last_modified(&rig, &key).await != first_modified {
            continue;
        }
        assert!(
            rig.get(&key, None).await == second,
            "a GET mixed two versions"
        );
        collided = Some((key, second));
        break;
    }
    let (key, second) = collided.expect("two writes within one second");

    // Nothing of such an object is cached: every GET is one upstream GET of exactly the
    // bytes it answers, whole or ranged.
    rig.forwarder.take();
    assert!(rig.get(&key, None).await == second);
    let range = format!("bytes={}-{}", MIB - 10, 2 * MIB + 9);
    assert_eq!(
        rig.get(&key, Some(&range)).await,
        second[MIB - 10..2 * MIB + 10]
    );
    let gets = rig.forwarder.object_requests("GET");
    let ranges: Vec<_> = gets.iter().map(|seen| seen.range.as_deref()).collect();
    let whole = format!("bytes=0-{}", 3 * MIB - 1);
    assert_eq!(ranges, [Some(whole.as_str()), Some(range.as_str())]);
    assert!(rig.portico().metric("portico_uncached_reads_total").await >= 2.0);
}

/// In a versioned bucket a read that is running when its object is overwritten completes
/// with the version it started with: its block fetches are pinned to the version id the
/// upstream reported. The overwrite lands after every block boundary in turn (with SigV4;
/// two boundaries without authentication).
#[tokio::test(flavor = "multi_thread")]
async fn a_read_across_an_overwrite_completes_with_its_version_in_a_versioned_bucket() {
    const BLOCKS: usize = 6;
    let base = random_bytes(BLOCKS * MIB - 100, 40);
    // Each round's two versions: the base with its first bytes numbered.
    let version = |number: usize| {
        let mut data = base.clone();
        data[..8].copy_from_slice(&(number as u64).to_le_bytes());
        data
    };
    for (authenticated, boundaries) in [(true, vec![0, 1, 2, 3, 4, 5]), (false, vec![0, 3])] {
        let rig = Rig::start("pinned", |settings| {
            if !authenticated {
                settings.without_auth();
            }
        })
        .await;
        enable_versioning(&rig.direct, &rig.bucket).await;
        for boundary in boundaries {
            let started = version(2 * boundary);
            crate::support::put_object(&rig.client, &rig.bucket, "big.bin", &started).await;
            let output = rig
                .client
                .get_object()
                .bucket(&rig.bucket)
                .key("big.bin")
                .send()
                .await
                .expect("GET starts");
            let mut body = output.body;
            let mut received = Vec::with_capacity(started.len());
            while received.len() < boundary * MIB {
                let chunk = body.try_next().await.expect("the body").expect("more");
                received.extend_from_slice(&chunk);
            }
            put_version(&rig, "big.bin", &version(2 * boundary + 1)).await;
            while let Some(chunk) = body
                .try_next()
                .await
                .unwrap_or_else(|error| panic!("overwritten after {boundary} blocks: {error}"))
            {
                received.extend_from_slice(&chunk);
            }
            assert!(
                received == started,
                "authenticated {authenticated}, overwritten after {boundary} blocks: the version the read started with"
            );
        }
    }
}

/// In an unversioned bucket, with the object overwritten behind Portico (its metadata
/// still fresh here) and the old version's first block on this node's disk tier: the
/// blocks after it, asked for with it, find the version gone before the headers go out,
/// so the read starts over on the new version. No byte of the old version is sent, and
/// no body is cut off. In each auth mode.
#[tokio::test(flavor = "multi_thread")]
async fn an_overwrite_behind_a_first_block_on_disk_restarts_the_read_before_its_headers() {
    for authenticated in [true, false] {
        let rig = Rig::start("disk-first", |settings| {
            settings.memory_capacity = "4MiB";
            settings.disk_capacity = "64MiB";
            if !authenticated {
                settings.without_auth();
            }
        })
        .await;
        let old = random_bytes(3 * MIB - 100, 51);
        let new = random_bytes(3 * MIB - 100, 52);
        rig.put("model.bin", &old).await;
        assert!(rig.get("model.bin", Some("bytes=0-9")).await == old[..10]);
        // Other objects push the first block out of memory; the disk keeps it. A HEAD
        // then has the old version's metadata cached (fresh) again.
        for filler in 0..12 {
            let key = format!("filler-{filler}.bin");
            rig.put(&key, &random_bytes(MIB, 60 + filler)).await;
            rig.get(&key, None).await;
        }
        let head = rig.head("model.bin").await;
        assert_eq!(head.content_length(), Some(old.len() as i64));
        let portico = rig.portico();
        let disk_hits = "portico_cache_block_lookups_total{result=\"disk_hit\"}";
        let before = portico.metric(disk_hits).await;
        rig.put("model.bin", &new).await;
        // Ranged, as the first read was: the SDK asks for no checksums on a range, so the
        // cached metadata (learnt without them) answers it.
        let body = rig.get("model.bin", Some("bytes=0-")).await;
        assert!(
            body == new,
            "authenticated {authenticated}: the new version, whole"
        );
        assert!(
            portico.metric(disk_hits).await > before,
            "authenticated {authenticated}: the old first block came from the disk tier"
        );
        assert_eq!(
            portico
                .metric("portico_read_aborts_total{cause=\"changed\"}")
                .await,
            0.0,
            "authenticated {authenticated}"
        );
    }
}
