//! Cold reads as S3 serves them: a read's uncached blocks come in a few origin streams
//! started at once, pinned to the version the read announced, so a long cold read that an
//! overwrite overtakes completes with the old version; concurrent readers wait for the
//! streams instead of asking again; a stream whose readers left stops.

use aws_sdk_s3::Client;

use crate::support::{Rig, eventually, put_object, random_bytes};

const MIB: usize = 1024 * 1024;

/// A version of `size` bytes, numbered in its first bytes.
pub(crate) fn numbered(base: &[u8], number: u64) -> Vec<u8> {
    let mut data = base.to_vec();
    data[..8].copy_from_slice(&number.to_le_bytes());
    data
}

/// Reads `key` through `client`, overwriting it with `overwrite` (through `writer`) once
/// `boundary` bytes of the body have arrived: the body, or why it broke off.
pub(crate) async fn read_across_an_overwrite(
    client: &Client,
    (writer, bucket, key): (&Client, &str, &str),
    boundary: usize,
    overwrite: &[u8],
) -> Result<Vec<u8>, String> {
    let output = client
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map_err(|error| format!("the GET did not start: {error:?}"))?;
    let mut body = output.body;
    let mut received = Vec::new();
    while received.len() < boundary {
        match body.try_next().await {
            Ok(Some(chunk)) => received.extend_from_slice(&chunk),
            Ok(None) => break,
            Err(error) => return Err(format!("after {} bytes: {error}", received.len())),
        }
    }
    put_object(writer, bucket, key, overwrite).await;
    loop {
        match body.try_next().await {
            Ok(Some(chunk)) => received.extend_from_slice(&chunk),
            Ok(None) => return Ok(received),
            Err(error) => return Err(format!("after {} bytes: {error}", received.len())),
        }
    }
}

/// The case: a cold object of 20 blocks in an unversioned bucket, read while
/// another client overwrites it, behind Portico or through it, at several points of the
/// read, with the origin slow enough that the streams are still under way (each response
/// 16 MiB/s). Every read completes with the version it started with, and the read cost the
/// origin its discovery GET and a few streams, not a GET per block. Both auth modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_cold_read_across_an_overwrite_completes_with_the_old_version() {
    const BLOCKS: usize = 20;
    let base = random_bytes(BLOCKS * MIB - 300, 57);
    for authenticated in [true, false] {
        let rig = Rig::start("overtaken", |settings| {
            if !authenticated {
                settings.without_auth();
            }
        })
        .await;
        rig.forwarder.limit_rate(Some(16 * MIB as u64));
        for (round, boundary) in [0, 3, 9, 17].into_iter().enumerate() {
            let key = format!("cold-{round}.bin");
            let started = numbered(&base, 2 * round as u64);
            rig.put(&key, &started).await;
            rig.forwarder.take();
            // Even rounds are overwritten behind Portico, odd ones through it.
            let writer = match round % 2 {
                0 => &rig.direct,
                _ => &rig.client,
            };
            let overwrite = numbered(&base, 2 * round as u64 + 1);
            let read = read_across_an_overwrite(
                &rig.client,
                (writer, &rig.bucket, &key),
                boundary * MIB,
                &overwrite,
            )
            .await
            .unwrap_or_else(|error| {
                panic!("auth {authenticated}, overwritten after {boundary} blocks: cut off {error}")
            });
            assert!(
                read == started,
                "auth {authenticated}, overwritten after {boundary} blocks: the version the read started with"
            );
            let gets = rig.forwarder.object_requests("GET");
            assert!(
                gets.len() <= 1 + 4,
                "auth {authenticated}: the discovery and at most four streams, got {gets:#?}"
            );
            // After a write through Portico, the next read is of the new version, whole
            // (one behind it is seen once the metadata is revalidated).
            if round % 2 == 1 {
                let again = rig.get(&key, None).await;
                assert!(
                    again == overwrite,
                    "auth {authenticated}: the new version next"
                );
            }
        }
    }
}

/// Sixteen readers of one cold object at once cost the origin about the object once: the
/// first read's streams bring every block, and the others wait for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cold_herd_costs_the_origin_about_the_object_once() {
    let rig = Rig::start("coldherd", |_| {}).await;
    let data = random_bytes(24 * MIB + 77, 58);
    rig.put("herd.bin", &data).await;
    rig.forwarder.take();
    rig.forwarder.take_counts();
    let readers: Vec<_> = (0..16)
        .map(|_| {
            let (client, bucket) = (rig.client.clone(), rig.bucket.clone());
            tokio::spawn(async move {
                crate::support::try_get(&client, &bucket, "herd.bin", None).await
            })
        })
        .collect();
    for reader in readers {
        let body = reader.await.unwrap().expect("a reader's GET");
        assert!(body == data, "a reader got other bytes");
    }
    let (_, bytes) = rig.forwarder.take_counts();
    let gets = rig.forwarder.object_requests("GET");
    assert!(
        bytes as f64 <= 1.05 * data.len() as f64,
        "origin bytes {bytes} for an object of {}: {gets:#?}",
        data.len()
    );
    assert!(gets.len() <= 1 + 4, "{gets:#?}");
    let streams = rig.portico().metric("portico_origin_streams_total").await;
    assert!(streams >= 1.0, "the blocks came in streams: {streams}");
}

/// A reader that hangs up early stops the streams its read opened: the origin sends a few
/// blocks more, not the rest of the object, and the blocks that came stay cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reader_that_hangs_up_stops_its_streams() {
    let rig = Rig::start("hangup", |_| {}).await;
    let data = random_bytes(64 * MIB, 59);
    rig.put("long.bin", &data).await;
    // Each stream of 16 blocks would take 4 s.
    rig.forwarder.limit_rate(Some(4 * MIB as u64));
    let output = rig
        .client
        .get_object()
        .bucket(&rig.bucket)
        .key("long.bin")
        .send()
        .await
        .expect("the GET starts");
    let mut body = output.body;
    let mut received = 0;
    while received < MIB {
        let chunk = body.try_next().await.expect("the body").expect("more");
        received += chunk.len();
    }
    drop(body);
    let portico = rig.portico();
    eventually(
        "the streams stop",
        std::time::Duration::from_secs(20),
        || async {
            let left = portico
                .metric("portico_origin_streams_ended_total{result=\"readers_left\"}")
                .await;
            (left >= 4.0).then_some(())
        },
    )
    .await;
    let received = portico
        .metric("portico_upstream_received_bytes_total")
        .await;
    assert!(
        received < (24 * MIB) as f64,
        "the origin sent {received} bytes of a 64 MiB object to a reader that left after 1 MiB"
    );
    // What came is kept: the object's start is read again from the cache.
    rig.forwarder.limit_rate(None);
    rig.forwarder.take();
    let start = rig.get("long.bin", Some("bytes=0-1048575")).await;
    assert!(start[..] == data[..MIB]);
    assert_eq!(rig.upstream_gets(), 0, "block 0 was cached");
}
