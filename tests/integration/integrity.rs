//! End-to-end integrity against MinIO: objects stored with a full-object CRC (CRC64NVME,
//! CRC32C) are verified once this node has filled every block, whole or by ranges; a
//! byte the origin flips (same length, same ETag) is caught: the object is purged, the
//! mismatch counted, and a checksum-mode GET is cut off before its last byte; a byte
//! flipped on the way from a block's owner is never served.

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumMode};
use portico_testkit::forwarder::Fault;
use portico_testkit::portico::{Portico, start_proxied_fleet};

use crate::support::{
    Rig, binary, eventually, multipart_upload, random_bytes, read_object, s3_client, try_get,
};

const MIB: usize = 1024 * 1024;
const VERIFIED: &str = "portico_integrity_objects_total{result=\"verified\"}";
const MISMATCHED: &str = "portico_integrity_objects_total{result=\"mismatch\"}";
const NO_CHECKSUM: &str = "portico_integrity_objects_total{result=\"no_checksum\"}";

fn mismatches(check: &str) -> String {
    format!("portico_integrity_mismatches_total{{check=\"{check}\"}}")
}

/// Uploads `data` as `key` straight to MinIO with a `algorithm` checksum.
async fn put_with(rig: &Rig, key: &str, data: &[u8], algorithm: ChecksumAlgorithm) {
    put_direct(&rig.direct, &rig.bucket, key, data, algorithm).await;
}

/// Uploads `data` as `key` in `bucket` through `direct` with a `algorithm` checksum.
async fn put_direct(
    direct: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    data: &[u8],
    algorithm: ChecksumAlgorithm,
) {
    direct
        .put_object()
        .bucket(bucket)
        .key(key)
        .checksum_algorithm(algorithm)
        .body(ByteStream::from(data.to_vec()))
        .send()
        .await
        .unwrap_or_else(|error| panic!("PUT {key}: {error:?}"));
}

/// A GET through Portico that asks for checksums, as current SDKs do by default.
async fn checked_get(rig: &Rig, key: &str) -> Result<Vec<u8>, String> {
    checked(&rig.client, &rig.bucket, key).await
}

/// A GET of `key` through `client` that asks for checksums.
async fn checked(client: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<Vec<u8>, String> {
    let request = client.get_object().bucket(bucket).key(key);
    read_object(request.checksum_mode(ChecksumMode::Enabled)).await
}

async fn verified_in_both_tiers(disk_capacity: &'static str) {
    let rig = Rig::start("integrity", |settings| {
        settings.disk_capacity = disk_capacity
    })
    .await;
    let whole = random_bytes(3 * MIB + 777, 381);
    let ranged = random_bytes(2 * MIB + 5, 382);
    put_with(&rig, "crc64nvme.bin", &whole, ChecksumAlgorithm::Crc64Nvme).await;
    put_with(&rig, "crc32c.bin", &ranged, ChecksumAlgorithm::Crc32C).await;
    let portico = rig.portico();

    assert!(checked_get(&rig, "crc64nvme.bin").await.expect("whole GET") == whole);
    assert_eq!(portico.metric(VERIFIED).await, 1.0, "read whole");

    // A HEAD that asks for checksums learns them; ranged reads then fill every block.
    let head = rig
        .client
        .head_object()
        .bucket(&rig.bucket)
        .key("crc32c.bin")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .expect("HEAD");
    assert!(head.checksum_crc32_c().is_some(), "MinIO keeps the CRC32C");
    for (first, last) in [(MIB, 2 * MIB - 1), (2 * MIB, 2 * MIB + 4), (0, MIB - 1)] {
        let range = format!("bytes={first}-{last}");
        assert!(rig.get("crc32c.bin", Some(&range)).await == ranged[first..=last]);
        let expected = if first == 0 { 2.0 } else { 1.0 };
        assert_eq!(portico.metric(VERIFIED).await, expected, "after {range}");
    }

    // A multipart object's checksum is composite: nothing whole to compare with.
    let parts = vec![random_bytes(5 * MIB, 383), random_bytes(1000, 384)];
    multipart_upload(&rig.direct, &rig.bucket, "parts.bin", &parts).await;
    assert!(checked_get(&rig, "parts.bin").await.expect("multipart GET") == parts.concat());
    assert_eq!(portico.metric(NO_CHECKSUM).await, 1.0);
    assert_eq!(portico.metric(MISMATCHED).await, 0.0);
    assert_eq!(portico.metric(VERIFIED).await, 2.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn objects_with_full_object_crcs_are_verified_whole_or_by_ranges_in_memory() {
    verified_in_both_tiers("0").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn objects_with_full_object_crcs_are_verified_whole_or_by_ranges_with_a_disk_tier() {
    verified_in_both_tiers("64MiB").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_byte_the_origin_flips_is_caught_the_object_purged_and_never_served_whole() {
    // No prefetch: each block is filled by the read that asks for it.
    let rig = Rig::start("integrity-flip", |settings| {
        let off = ("PORTICO_PREFETCH_ENABLED".to_owned(), "false".to_owned());
        settings.env.push(off);
    })
    .await;
    let data = random_bytes(3 * MIB + 4321, 385);
    put_with(&rig, "flipped.bin", &data, ChecksumAlgorithm::Crc64Nvme).await;
    let portico = rig.portico();

    // The first block's GET comes back with one byte inverted, same length, same ETag.
    // Without retries, so that the failed read is seen (a retry would find the object
    // purged, and read it right).
    rig.forwarder.inject(&[Fault::FlipByte(100)]);
    let once = s3_client(&portico.s3, false);
    let read = checked(&once, &rig.bucket, "flipped.bin").await;
    assert!(read.is_err(), "a response with a wrong byte ended well");
    let caught =
        portico.metric(&mismatches("object")).await + portico.metric(&mismatches("response")).await;
    assert!(caught >= 1.0, "the mismatch is counted");
    assert_eq!(portico.metric(MISMATCHED).await, 1.0);
    let logs = portico.logs();
    assert!(
        logs.contains("disagree with the checksum S3 keeps") && logs.contains("flipped.bin"),
        "{logs}"
    );

    // Purged: the next read fetches every block again and is exact.
    rig.forwarder.take();
    let body = eventually(
        "a clean read after the purge",
        std::time::Duration::from_secs(10),
        || async { checked_get(&rig, "flipped.bin").await.ok() },
    )
    .await;
    assert!(
        body == data,
        "the bytes read after the purge are the object's"
    );
    assert!(rig.upstream_blocks() >= 4, "every block was fetched again");
    assert_eq!(portico.metric(VERIFIED).await, 1.0);

    // Ranged readers: a block flipped before its object is complete cannot be judged
    // alone, but the fill that completes the object fails rather than be served, and the
    // object is purged, so the flipped block is read again.
    let ranged = random_bytes(3 * MIB + 99, 387);
    put_with(&rig, "ranged.bin", &ranged, ChecksumAlgorithm::Crc64Nvme).await;
    let head = rig
        .client
        .head_object()
        .bucket(&rig.bucket)
        .key("ranged.bin");
    head.checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .expect("HEAD");
    rig.forwarder.inject(&[Fault::FlipByte(7)]);
    let first = rig.get("ranged.bin", Some("bytes=0-99")).await;
    assert!(
        first != ranged[..100],
        "the one block read so far is the flipped one"
    );
    // The read that completes the object fails with a 5xx; the SDK's retry finds it purged.
    for (first, last) in [
        (MIB, 2 * MIB - 1),
        (2 * MIB, 3 * MIB - 1),
        (3 * MIB, ranged.len() - 1),
    ] {
        let range = format!("bytes={first}-{last}");
        assert!(
            rig.get("ranged.bin", Some(&range)).await == ranged[first..=last],
            "{range}"
        );
    }
    assert_eq!(portico.metric(MISMATCHED).await, 2.0);
    let within = std::time::Duration::from_secs(10);
    eventually(
        "the first block read again after the purge",
        within,
        || async {
            let body = rig.try_get("ranged.bin", Some("bytes=0-99")).await.ok()?;
            (body == ranged[..100]).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_checksum_mode_get_of_cached_wrong_bytes_is_cut_off_before_its_last_byte() {
    // Without asking the origin for the checksums a ranged read's metadata lacks, so that
    // the object is cached unjudged.
    let rig = Rig::start("integrity-response", |settings| {
        settings.cache_extra = "learn_checksums = false\n".to_owned();
    })
    .await;
    let data = random_bytes(2 * MIB + 10, 388);
    put_with(&rig, "late.bin", &data, ChecksumAlgorithm::Crc64Nvme).await;
    let portico = rig.portico();
    // Every block filled by ranged reads while the metadata knew no checksums (it came
    // from the first GET), one of them with a byte the origin flipped.
    rig.forwarder.inject(&[Fault::FlipByte(5)]);
    for (first, last) in [(0, MIB - 1), (MIB, 2 * MIB - 1), (2 * MIB, data.len() - 1)] {
        rig.get("late.bin", Some(&format!("bytes={first}-{last}")))
            .await;
    }
    assert_eq!(portico.metric(NO_CHECKSUM).await, 1.0);

    // Served whole from the cache to a client that asks for checksums: the response is
    // checked as it goes, and cut off before its last byte.
    let once = s3_client(&portico.s3, false);
    let read = checked(&once, &rig.bucket, "late.bin").await;
    assert!(read.is_err(), "a response with a wrong byte ended well");
    assert_eq!(portico.metric(&mismatches("response")).await, 1.0);
    assert_eq!(
        portico
            .metric("portico_read_aborts_total{cause=\"internal\"}")
            .await,
        1.0
    );
    let within = std::time::Duration::from_secs(10);
    let body = eventually("a clean read after the purge", within, || async {
        checked_get(&rig, "late.bin").await.ok()
    })
    .await;
    assert!(body == data);
    assert_eq!(
        portico.metric(VERIFIED).await,
        1.0,
        "filled again, and verified"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_byte_flipped_between_members_is_never_served() {
    let minio = portico_testkit::minio::minio();
    let forwarder = portico_testkit::forwarder::Forwarder::start(&minio.address).await;
    let direct = s3_client(&minio.endpoint(), true);
    let bucket = portico_testkit::create_bucket(&direct, "integrity-peers").await;
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let (nodes, proxies): (Vec<Portico>, _) =
        start_proxied_fleet(binary(), &forwarder.endpoint(), &dirs, |_| {}).await;
    let data = random_bytes(8 * MIB, 386);
    crate::support::put_object(&direct, &bucket, "peer.bin", &data).await;
    // Read through node 1 first: it keeps its blocks (and hands node 0 its own), so node 0
    // then asks node 1 for node 1's.
    let owner = s3_client(&nodes[1].s3, true);
    let warm = try_get(&owner, &bucket, "peer.bin", None).await;
    assert!(warm.expect("GET through node 1") == data);
    // Every answer node 1 sends node 0 arrives with one byte inverted.
    proxies[1].flip_bytes(Some(4096));
    let client = s3_client(&nodes[0].s3, true);
    for round in 0..2 {
        let body = try_get(&client, &bucket, "peer.bin", None)
            .await
            .expect("GET through node 0");
        assert!(
            body == data,
            "round {round}: node 0 served the object's bytes"
        );
    }
    let caught = nodes[0].metric(&mismatches("peer")).await;
    assert!(
        caught >= 1.0,
        "node 1's damaged answers were caught: {caught}"
    );
    assert!(
        nodes[0]
            .metric("portico_cluster_peer_requests_total{result=\"fallback\"}")
            .await
            >= 1.0,
        "the damaged blocks came from the origin instead"
    );
    proxies[1].flip_bytes(None);
    for node in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_mode_leaves_a_correct_cache_alone_and_catches_bytes_changed_under_one_etag() {
    let rig = Rig::start("integrity-verify", |settings| {
        settings.cache_extra = "verify_fraction = 1.0\nverify_max_per_second = 1000\n".to_owned();
    })
    .await;
    let data = random_bytes(2 * MIB, 389);
    rig.put("verified.bin", &data).await;
    let portico = rig.portico();
    assert!(rig.get("verified.bin", None).await == data, "filled");
    assert_eq!(
        portico
            .metric("portico_verify_checks_total{result=\"ok\"}")
            .await,
        0.0,
        "misses are not checked"
    );

    // Two hits, each checked: a conditional HEAD and a GET of the same range.
    assert!(rig.get("verified.bin", None).await == data);
    verify_checks(portico, "ok", 2.0).await;
    assert_eq!(
        portico.metric("portico_verify_origin_requests_total").await,
        4.0
    );
    assert_eq!(
        portico.metric("portico_verify_origin_bytes_total").await,
        data.len() as f64
    );
    assert_eq!(portico.metric(&mismatches("verify")).await, 0.0);

    // The origin now sends other bytes under the same ETag.
    rig.forwarder.flip_bytes(Some(10));
    assert!(
        rig.get("verified.bin", Some("bytes=0-99")).await == data[..100],
        "a hit"
    );
    verify_checks(portico, "mismatch", 1.0).await;
    assert_eq!(portico.metric(&mismatches("verify")).await, 1.0);
    let logs = portico.logs();
    assert!(
        logs.contains("verify mode: the cache holds other bytes"),
        "{logs}"
    );
    // The object was purged: the next read misses and fetches from the origin again.
    rig.forwarder.flip_bytes(None);
    const MISSES: &str = "portico_cache_block_lookups_total{result=\"miss\"}";
    let misses = portico.metric(MISSES).await;
    let within = std::time::Duration::from_secs(10);
    eventually("the object purged", within, || async {
        let body = rig.get("verified.bin", Some("bytes=0-99")).await;
        assert!(body == data[..100]);
        (portico.metric(MISSES).await > misses).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_verifies_objects_whose_blocks_several_members_filled_and_purges_a_wrong_one_everywhere()
 {
    let minio = portico_testkit::minio::minio();
    let forwarder = portico_testkit::forwarder::Forwarder::start(&minio.address).await;
    let direct = s3_client(&minio.endpoint(), true);
    let bucket = portico_testkit::create_bucket(&direct, "integrity-fleet").await;
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let nodes =
        portico_testkit::portico::start_fleet(binary(), &forwarder.endpoint(), &dirs, |settings| {
            let off = ("PORTICO_PREFETCH_ENABLED".to_owned(), "false".to_owned());
            settings.env.push(off);
        })
        .await;
    let (good, bad) = (
        random_bytes(6 * MIB + 3, 390),
        random_bytes(6 * MIB + 5, 391),
    );
    // Node 1 fills its own blocks, one read each. Node 0 then reads the object whole: node
    // 1's blocks from node 1, its own in its streams from the origin, each checked on
    // arrival; together they are verified.
    let members: Vec<String> = nodes
        .iter()
        .map(|node| {
            let peers = node.peers.as_deref().expect("a peer listener");
            peers.split("://").nth(1).expect("an address").to_owned()
        })
        .collect();
    let blocks = good.len().div_ceil(MIB) as u64;
    let good_key = crate::cluster::key_owned_by_all(&members, &bucket, "good", blocks);
    for (key, data) in [(good_key.as_str(), &good), ("bad.bin", &bad)] {
        put_direct(&direct, &bucket, key, data, ChecksumAlgorithm::Crc64Nvme).await;
    }
    let owners = crate::cluster::owners_among(&members, &bucket, &good_key, blocks);
    let other = s3_client(&nodes[1].s3, true);
    for index in (0..blocks as usize).filter(|index| owners[*index] == 1) {
        let last = ((index + 1) * MIB).min(good.len()) - 1;
        let range = format!("bytes={}-{last}", index * MIB);
        let block = try_get(&other, &bucket, &good_key, Some(&range)).await;
        assert!(block.expect("GET through node 1") == good[index * MIB..=last]);
    }
    let client = s3_client(&nodes[0].s3, true);
    assert!(checked(&client, &bucket, &good_key).await.expect("GET") == good);
    assert_eq!(nodes[0].metric(VERIFIED).await, 1.0);
    assert!(
        nodes[0]
            .metric("portico_cluster_peer_requests_total{result=\"hit\"}")
            .await
            >= 1.0,
        "node 0 had blocks from node 1"
    );

    // A byte flipped at the origin, in whichever member's block comes first.
    forwarder.inject(&[Fault::FlipByte(1000)]);
    let once = s3_client(&nodes[0].s3, false);
    let read = checked(&once, &bucket, "bad.bin").await;
    assert!(read.is_err(), "a response with a wrong byte ended well");
    assert_eq!(nodes[0].metric(MISMATCHED).await, 1.0);
    for (at, node) in nodes.iter().enumerate() {
        let within = std::time::Duration::from_secs(10);
        eventually(&format!("node {at} purged bad.bin"), within, || async {
            let logs = node.logs();
            logs.lines()
                .any(|line| line.contains("purged") && line.contains("bad.bin"))
                .then_some(())
        })
        .await;
    }
    // Purged on both: read again, every block is the origin's, and verified.
    let read = checked(&client, &bucket, "bad.bin").await;
    assert!(read.expect("GET after the purge") == bad);
    assert_eq!(nodes[0].metric(VERIFIED).await, 2.0);
    for node in nodes {
        node.stop().await;
    }
}

/// Waits until `portico` counted `count` verify-mode checks with `result`.
async fn verify_checks(portico: &portico_testkit::portico::Portico, result: &str, count: f64) {
    let sample = format!("portico_verify_checks_total{{result=\"{result}\"}}");
    let within = std::time::Duration::from_secs(10);
    eventually(&format!("{count} {result} checks"), within, || async {
        (portico.metric(&sample).await == count).then_some(())
    })
    .await;
}
