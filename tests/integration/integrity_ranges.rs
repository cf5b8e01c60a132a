//! End-to-end integrity for the reads and uploads the whole-object check alone misses,
//! against MinIO, each with one byte flipped at the origin (same length, same ETag): an
//! object read only by ranges (its checksums learnt with one GetObjectAttributes), a
//! multipart object with part checksums (parts not aligned with blocks), judged part by
//! part as soon as a part's bytes are all filled, a multipart object with a FULL_OBJECT
//! CRC64NVME, and a fleet of two. A flipped byte is served at most by the read that
//! filled it, and never once the object's bytes are all cached.

use std::time::Duration;

use aws_sdk_s3::types::ChecksumAlgorithm;
use portico_testkit::forwarder::Fault;
use portico_testkit::http_send;
use portico_testkit::portico::{Portico, start_proxied_fleet};

use crate::support::{
    Rig, binary, eventually, multipart_upload_with, random_bytes, s3_client, try_get,
};

const MIB: usize = 1024 * 1024;
const LEARNT: &str = "portico_integrity_checksum_lookups_total{result=\"learnt\"}";
const VERIFIED: &str = "portico_integrity_objects_total{result=\"verified\"}";
const MISMATCHED: &str = "portico_integrity_objects_total{result=\"mismatch\"}";
const NO_CHECKSUM: &str = "portico_integrity_objects_total{result=\"no_checksum\"}";

fn mismatches(check: &str) -> String {
    format!("portico_integrity_mismatches_total{{check=\"{check}\"}}")
}

/// A rig whose every block is filled by the read that asks for it (no prefetch).
async fn rig(prefix: &str, block_size: &'static str) -> Rig {
    Rig::start(prefix, |settings| {
        settings.block_size = block_size;
        let off = ("PORTICO_PREFETCH_ENABLED".to_owned(), "false".to_owned());
        settings.env.push(off);
    })
    .await
}

/// Uploads `data` as `key` straight to MinIO in parts of `part` bytes, each with its
/// `algorithm` checksum; `whole`: the object's checksum is FULL_OBJECT (else composite).
async fn upload_in_parts(
    rig: &Rig,
    key: &str,
    data: &[u8],
    part: usize,
    checksum: (ChecksumAlgorithm, bool),
) {
    let parts: Vec<Vec<u8>> = data.chunks(part).map(<[u8]>::to_vec).collect();
    let named = (rig.bucket.as_str(), key);
    multipart_upload_with(&rig.direct, named, &parts, Some(checksum)).await;
}

/// `first..=last` of `key` through the rig, as a `Range` header.
async fn range(rig: &Rig, key: &str, first: usize, last: usize) -> Vec<u8> {
    rig.get(key, Some(&format!("bytes={first}-{last}"))).await
}

/// Waits until `portico` counts `sample` at least `count`.
async fn counted(portico: &Portico, sample: &str, count: f64) {
    eventually(sample, Duration::from_secs(10), || async {
        (portico.metric(sample).await >= count).then_some(())
    })
    .await;
}

/// Waits until `first..=last` of `key` reads as `expected` (the purge of a wrong object
/// is carried out in the background).
async fn reads_right(rig: &Rig, key: &str, (first, last): (usize, usize), expected: &[u8]) {
    let header = format!("bytes={first}-{last}");
    eventually(
        "the right bytes after the purge",
        Duration::from_secs(10),
        || async {
            let body = rig.try_get(key, Some(&header)).await.ok()?;
            (body == expected[first..=last]).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_byte_flipped_for_a_range_reader_is_caught_once_the_object_is_filled() {
    let rig = rig("integrity-ranges", "1MiB").await;
    let data = random_bytes(4 * MIB + 99, 601);
    rig.put("ranged.bin", &data).await;
    let portico = rig.portico();

    // The first block's GET comes back with one byte inverted; the reader asks only for
    // ranges, so no fill's metadata says which CRC S3 keeps.
    rig.forwarder.inject(&[Fault::FlipByte(100)]);
    let first = range(&rig, "ranged.bin", 0, MIB - 1).await;
    assert!(first != data[..MIB], "the read that filled it served it");
    for block in 1..5 {
        let last = ((block + 1) * MIB - 1).min(data.len() - 1);
        let body = range(&rig, "ranged.bin", block * MIB, last).await;
        assert!(body == data[block * MIB..=last], "block {block}");
    }
    // One question for the object; the fill that completed it failed rather than complete
    // a wrong object (the SDK's retry read it right), or, had the answer come after that
    // fill, the object was judged and purged when it came.
    counted(portico, MISMATCHED, 1.0).await;
    assert_eq!(rig.forwarder.attribute_requests().len(), 1);
    assert_eq!(portico.metric(LEARNT).await, 1.0);
    assert_eq!(portico.metric(&mismatches("object")).await, 1.0);
    reads_right(&rig, "ranged.bin", (0, MIB - 1), &data).await;
    // Read by ranges again, it is whole and right, and judged right.
    for block in 0..5 {
        let last = ((block + 1) * MIB - 1).min(data.len() - 1);
        let body = range(&rig, "ranged.bin", block * MIB, last).await;
        assert!(body == data[block * MIB..=last], "block {block} again");
    }
    assert_eq!(portico.metric(VERIFIED).await, 1.0);
    assert_eq!(
        rig.forwarder.attribute_requests().len(),
        1,
        "what S3 keeps of the version is remembered"
    );

    // An object of one block read by a range is asked about too (Portico's fills are
    // ranged GETs, which carry no checksums): its flipped byte is served by the read
    // that filled it, and the object is judged and purged when the answer comes.
    rig.put("small.bin", &data[..1000]).await;
    rig.forwarder.inject(&[Fault::FlipByte(3)]);
    assert!(range(&rig, "small.bin", 0, 9).await != data[..10]);
    counted(portico, MISMATCHED, 2.0).await;
    assert_eq!(rig.forwarder.attribute_requests().len(), 2);
    reads_right(&rig, "small.bin", (0, 9), &data).await;
    // A whole GET with checksum mode (the SDK's) learns the CRC with its metadata, from
    // a HEAD: nothing more is asked.
    rig.put("whole.bin", &data[..2000]).await;
    assert!(rig.get("whole.bin", None).await == data[..2000]);
    counted(portico, VERIFIED, 2.0).await;
    assert_eq!(rig.forwarder.attribute_requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_multipart_object_is_judged_part_by_part_before_it_is_complete() {
    // Parts of 5 MiB over blocks of 4 MiB: 0..5, 5..10, 10..15, 15..16 MiB against
    // blocks 0..4, 4..8, 8..12, 12..16 MiB.
    let rig = rig("integrity-parts", "4MiB").await;
    let data = random_bytes(16 * MIB, 602);
    let composite = (ChecksumAlgorithm::Crc32, false);
    upload_in_parts(&rig, "clean.bin", &data, 5 * MIB, composite.clone()).await;
    upload_in_parts(&rig, "parts.bin", &data, 5 * MIB, composite.clone()).await;
    upload_in_parts(&rig, "whole.bin", &data, 5 * MIB, composite).await;
    let portico = rig.portico();

    // Read whole, right: judged against the parts' CRCs combined.
    assert!(rig.get("clean.bin", None).await == data);
    counted(portico, VERIFIED, 1.0).await;
    assert_eq!(portico.metric(NO_CHECKSUM).await, 0.0);

    // By ranges: the first block's fill asks for the parts; once they are known, the
    // second block arrives with a byte flipped in the second part (at 6 MiB).
    assert!(range(&rig, "parts.bin", 0, 4 * MIB - 1).await == data[..4 * MIB]);
    counted(portico, LEARNT, 2.0).await;
    rig.forwarder.inject(&[Fault::FlipByte(2 * MIB)]);
    let second = range(&rig, "parts.bin", 4 * MIB, 8 * MIB - 1).await;
    assert!(
        second != data[4 * MIB..8 * MIB],
        "served by the read that filled it"
    );
    assert_eq!(
        portico.metric(MISMATCHED).await,
        0.0,
        "the first part is right"
    );
    // The third block completes the second part: caught, though the object is not
    // complete (its last block was never read); that fill fails, the SDK's retry reads
    // it right.
    assert!(range(&rig, "parts.bin", 8 * MIB, 12 * MIB - 1).await == data[8 * MIB..12 * MIB]);
    assert_eq!(portico.metric(&mismatches("part")).await, 1.0);
    reads_right(&rig, "parts.bin", (4 * MIB, 8 * MIB - 1), &data).await;

    // Read whole with a byte flipped in the second part, the parts known (its first
    // block read by a range before): the fill of the part's last block fails, so the read
    // is cut off, never completed with it, and the next read is right.
    assert!(range(&rig, "whole.bin", 0, 4 * MIB - 1).await == data[..4 * MIB]);
    counted(portico, LEARNT, 3.0).await;
    // The GET of blocks 1 to 3 (4 MiB on): object byte 5 MiB.
    rig.forwarder.inject(&[Fault::FlipByte(MIB)]);
    let once = s3_client(&portico.s3, false);
    let read = try_get(&once, &rig.bucket, "whole.bin", None).await;
    assert!(read.is_err(), "a read with a wrong byte ended well");
    assert_eq!(portico.metric(MISMATCHED).await, 2.0);
    reads_right(&rig, "whole.bin", (0, data.len() - 1), &data).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_multipart_object_with_a_full_object_crc64nvme_is_judged_whole() {
    let rig = rig("integrity-full", "4MiB").await;
    let data = random_bytes(11 * MIB + 5, 603);
    let whole = (ChecksumAlgorithm::Crc64Nvme, true);
    upload_in_parts(&rig, "full.bin", &data, 5 * MIB, whole).await;
    let portico = rig.portico();
    let head = rig.head("full.bin").await;
    assert!(
        head.e_tag().is_some_and(|etag| etag.contains('-')),
        "a multipart object"
    );

    rig.forwarder.inject(&[Fault::FlipByte(12_345)]);
    let first = range(&rig, "full.bin", 0, 4 * MIB - 1).await;
    assert!(first != data[..4 * MIB]);
    let body = range(&rig, "full.bin", 4 * MIB, 8 * MIB - 1).await;
    assert!(body == data[4 * MIB..8 * MIB]);
    let body = range(&rig, "full.bin", 8 * MIB, data.len() - 1).await;
    assert!(body == data[8 * MIB..], "the completing read retried right");
    assert_eq!(portico.metric(&mismatches("object")).await, 1.0);
    assert_eq!(portico.metric(&mismatches("part")).await, 0.0);
    reads_right(&rig, "full.bin", (0, 4 * MIB - 1), &data).await;
    let body = range(&rig, "full.bin", 4 * MIB, data.len() - 1).await;
    assert!(body == data[4 * MIB..]);
    assert_eq!(portico.metric(VERIFIED).await, 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_fleet_a_byte_flipped_for_a_range_reader_is_purged_on_every_member() {
    let minio = portico_testkit::minio::minio();
    let forwarder = portico_testkit::forwarder::Forwarder::start(&minio.address).await;
    let direct = s3_client(&minio.endpoint(), true);
    let bucket = portico_testkit::create_bucket(&direct, "integrity-fleet-ranges").await;
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let (nodes, _proxies): (Vec<Portico>, _) =
        start_proxied_fleet(binary(), &forwarder.endpoint(), &dirs, |settings| {
            let off = ("PORTICO_PREFETCH_ENABLED".to_owned(), "false".to_owned());
            settings.env.push(off);
        })
        .await;
    let data = random_bytes(6 * MIB, 604);
    crate::support::put_object(&direct, &bucket, "fleet.bin", &data).await;
    let clients: Vec<_> = nodes.iter().map(|node| s3_client(&node.s3, true)).collect();
    let read = |at: usize, block: usize| {
        let header = format!("bytes={}-{}", block * MIB, (block + 1) * MIB - 1);
        let client = clients[at].clone();
        let bucket = bucket.clone();
        async move { try_get(&client, &bucket, "fleet.bin", Some(&header)).await }
    };

    // Every block passes through node 0 (filled there or fetched from its owner), so node
    // 0 judges the object; the first block's fill comes back with a byte flipped.
    forwarder.inject(&[Fault::FlipByte(77)]);
    let first = read(0, 0).await.expect("block 0");
    assert!(first != data[..MIB]);
    for block in 1..6 {
        let body = read(0, block).await.expect("a block");
        assert!(
            body == data[block * MIB..(block + 1) * MIB],
            "block {block}"
        );
    }
    eventually(
        "the flipped byte caught",
        Duration::from_secs(10),
        || async {
            let caught = nodes[0].metric(MISMATCHED).await + nodes[1].metric(MISMATCHED).await;
            (caught >= 1.0).then_some(())
        },
    )
    .await;
    // Purged on both members: each serves the first block right.
    for at in [1, 0] {
        eventually(
            "the right bytes on every member",
            Duration::from_secs(10),
            || async {
                let body = read(at, 0).await.ok()?;
                (body == data[..MIB]).then_some(())
            },
        )
        .await;
    }
    for node in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_origin_that_refuses_the_question_is_not_asked_again_for_the_bucket() {
    let rig = rig("integrity-refused", "1MiB").await;
    let data = random_bytes(3 * MIB + 1, 605);
    rig.put("first.bin", &data).await;
    rig.put("second.bin", &data).await;
    let portico = rig.portico();
    // Credentials that allow s3:GetObject only: the origin answers 403.
    rig.forwarder.inject_attributes(&[Fault::Status(403)]);
    for key in ["first.bin", "second.bin"] {
        for block in 0..4 {
            let last = ((block + 1) * MIB - 1).min(data.len() - 1);
            let body = range(&rig, key, block * MIB, last).await;
            assert!(body == data[block * MIB..=last], "{key} block {block}");
        }
    }
    assert_eq!(rig.forwarder.attribute_requests().len(), 1, "asked once");
    let failed = "portico_integrity_checksum_lookups_total{result=\"failed\"}";
    let skipped = "portico_integrity_checksum_lookups_total{result=\"skipped\"}";
    assert_eq!(portico.metric(failed).await, 1.0);
    assert_eq!(portico.metric(skipped).await, 1.0);
    assert_eq!(portico.metric(NO_CHECKSUM).await, 2.0, "both unjudged");
    let logs = portico.logs();
    assert_eq!(
        logs.matches("the origin refuses GetObjectAttributes")
            .count(),
        1,
        "{logs}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_object_complete_before_the_origin_says_what_it_keeps_is_judged_when_it_says() {
    let rig = rig("integrity-slow", "1MiB").await;
    let data = random_bytes(3 * MIB + 1, 606);
    rig.put("slow.bin", &data).await;
    let portico = rig.portico();
    rig.forwarder
        .inject_attributes(&[Fault::Delay(Duration::from_secs(3))]);
    rig.forwarder.inject(&[Fault::FlipByte(5)]);
    let first = range(&rig, "slow.bin", 0, MIB - 1).await;
    assert!(first != data[..MIB]);
    // The read that completes the object does not wait for the answer (its block is
    // right); the verdict comes with the answer, 3 s later, and purges the object.
    for block in 1..4 {
        let last = ((block + 1) * MIB - 1).min(data.len() - 1);
        let body = range(&rig, "slow.bin", block * MIB, last).await;
        assert!(body == data[block * MIB..=last], "block {block}");
    }
    counted(portico, MISMATCHED, 1.0).await;
    assert_eq!(portico.metric(&mismatches("object")).await, 1.0);
    reads_right(&rig, "slow.bin", (0, MIB - 1), &data).await;
}

/// A wrong block served to a range reader and then purged by the operator before the
/// object was judged: what was hashed of it is forgotten with the purge, so the right
/// bytes filled after it are judged right, and no read after the purge fails.
#[tokio::test(flavor = "multi_thread")]
async fn a_purge_forgets_the_bytes_hashed_before_it() {
    const TOKEN: &str = "integrity-admin";
    let rig = Rig::start("integrity-purged", |settings| {
        settings.block_size = "1MiB";
        let off = ("PORTICO_PREFETCH_ENABLED".to_owned(), "false".to_owned());
        settings.env.push(off);
        settings.admin_extra = format!("token = \"{TOKEN}\"\n");
    })
    .await;
    let data = random_bytes(4 * MIB + 7, 607);
    rig.put("purged.bin", &data).await;
    let portico = rig.portico();
    // Block 1 comes back with a byte flipped, and the operator purges the object.
    rig.forwarder.inject(&[Fault::FlipByte(11)]);
    let wrong = range(&rig, "purged.bin", MIB, 2 * MIB - 1).await;
    assert!(
        wrong != data[MIB..2 * MIB],
        "the read that filled it served it"
    );
    let url = format!("{}/admin/purge", portico.admin);
    let bearer = format!("Bearer {TOKEN}");
    let headers = [
        ("authorization", bearer.as_str()),
        ("content-type", "application/json"),
    ];
    let body = format!(r#"{{"bucket":"{}","key":"purged.bin"}}"#, rig.bucket);
    let (status, _, answer) = http_send("POST", &url, &headers, body.into()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    // The other blocks first (the block read wrong, last): each read right, and the
    // version is judged right once block 1 is filled again.
    for block in [0, 2, 3, 4, 1] {
        let last = ((block + 1) * MIB - 1).min(data.len() - 1);
        let body = range(&rig, "purged.bin", block * MIB, last).await;
        assert!(body == data[block * MIB..=last], "block {block}");
    }
    counted(portico, VERIFIED, 1.0).await;
    assert_eq!(portico.metric(MISMATCHED).await, 0.0, "no mismatch");
    assert_eq!(rig.forwarder.attribute_requests().len(), 1, "asked once");
}

/// Two blocks cached before a restart (in the disk tier), one of them wrong, and the rest
/// of the object filled after it: the fills after the restart start a record, and the
/// hits of the blocks cached before it complete it, so the wrong block is caught.
#[tokio::test(flavor = "multi_thread")]
async fn blocks_cached_before_a_restart_are_judged_with_the_fills_after_it() {
    let mut rig = rig("integrity-restart", "1MiB").await;
    let data = random_bytes(4 * MIB + 5, 608);
    rig.put("restart.bin", &data).await;
    assert!(range(&rig, "restart.bin", 0, MIB - 1).await == data[..MIB]);
    rig.forwarder.inject(&[Fault::FlipByte(21)]);
    let wrong = range(&rig, "restart.bin", MIB, 2 * MIB - 1).await;
    assert!(
        wrong != data[MIB..2 * MIB],
        "the read that filled it served it"
    );
    rig.restart_portico().await;
    rig.forwarder.take();
    for block in [2, 3, 4, 0, 1] {
        let last = ((block + 1) * MIB - 1).min(data.len() - 1);
        let _ = range(&rig, "restart.bin", block * MIB, last).await;
    }
    assert_eq!(
        rig.upstream_blocks(),
        3,
        "the two blocks cached before the restart were hits"
    );
    let portico = rig.portico();
    counted(portico, MISMATCHED, 1.0).await;
    reads_right(&rig, "restart.bin", (MIB, 2 * MIB - 1), &data).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_mode_catches_bytes_changed_under_a_multipart_objects_etag() {
    let rig = Rig::start("integrity-verify-parts", |settings| {
        settings.block_size = "4MiB";
        settings.cache_extra = "verify_fraction = 1.0\nverify_max_per_second = 1000\n".to_owned();
    })
    .await;
    let data = random_bytes(12 * MIB + 3, 607);
    let composite = (ChecksumAlgorithm::Crc32, false);
    upload_in_parts(&rig, "verified.bin", &data, 5 * MIB, composite).await;
    let portico = rig.portico();
    assert!(rig.get("verified.bin", None).await == data, "filled");
    counted(portico, VERIFIED, 1.0).await;

    // The origin now sends other bytes under the same ETag: a hit of the second block
    // (which holds the first part boundary) is re-read and found different.
    rig.forwarder.flip_bytes(Some(MIB));
    let hit = range(&rig, "verified.bin", 4 * MIB, 8 * MIB - 1).await;
    assert!(hit == data[4 * MIB..8 * MIB], "a hit, from the cache");
    counted(portico, &mismatches("verify"), 1.0).await;
    rig.forwarder.flip_bytes(None);
    // Purged: the next read misses and fills from the origin again.
    let misses = "portico_cache_block_lookups_total{result=\"miss\"}";
    let before = portico.metric(misses).await;
    eventually("the object purged", Duration::from_secs(10), || async {
        let body = range(&rig, "verified.bin", 4 * MIB, 8 * MIB - 1).await;
        assert!(body == data[4 * MIB..8 * MIB]);
        (portico.metric(misses).await > before).then_some(())
    })
    .await;
}
