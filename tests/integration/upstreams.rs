//! Several upstreams against two MinIO servers with different credentials: buckets route
//! to theirs for every operation (GET, HEAD, PUT, listings, multipart); and read failover
//! to a replica when the primary stops: cached and uncached reads continue byte-exact, a
//! replica holding an older version gives an error (never its bytes), and a revalidation
//! through it never takes that version for a change; writes fail cleanly.

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use portico_testkit::minio::{Minio, free_port, start_on};
use portico_testkit::portico::Settings;
use portico_testkit::{create_bucket, http_get, random_bytes, s3_client_as};

use crate::support::{Rig, multipart_upload, put_object, try_get};

const SECOND_KEY: &str = "second-admin";
const SECOND_SECRET: &str = "second-admin-secret";
const MIB: usize = 1 << 20;

/// A MinIO of its own with its own root credential, and a client of it.
fn second_minio() -> (Minio, Client) {
    let minio = start_on(
        free_port(),
        &[
            ("MINIO_ROOT_USER", SECOND_KEY),
            ("MINIO_ROOT_PASSWORD", SECOND_SECRET),
        ],
    );
    let client = s3_client_as(&minio.endpoint(), SECOND_KEY, SECOND_SECRET, true);
    (minio, client)
}

/// An `[[upstreams]]` entry for `minio`.
fn entry(name: &str, minio: &Minio, buckets: &str) -> String {
    format!(
        "[[upstreams]]\nname = \"{name}\"\nbuckets = [{buckets}]\nendpoint = \"{}\"\nforce_path_style = true\naccess_key_id = \"{SECOND_KEY}\"\nsecret_access_key = \"{SECOND_SECRET}\"\n",
        minio.endpoint()
    )
}

async fn read(client: &Client, bucket: &str, key: &str) -> Vec<u8> {
    try_get(client, bucket, key, None)
        .await
        .unwrap_or_else(|error| panic!("GET {bucket}/{key}: {error}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn buckets_route_to_their_upstream_for_every_operation() {
    let (second, direct_second) = second_minio();
    let beta = create_bucket(&direct_second, "beta").await;
    let rig = Rig::start("alpha", |settings| {
        settings.tables = entry("second", &second, "\"beta-*\"");
    })
    .await;
    let client = &rig.client;

    // PUT, GET, HEAD through Portico land on the second MinIO, signed with its credential.
    let data = random_bytes(3 * MIB / 2, 1);
    put_object(client, &beta, "objects/one", &data).await;
    assert!(read(&direct_second, &beta, "objects/one").await == data);
    assert!(read(client, &beta, "objects/one").await == data);
    let head = client
        .head_object()
        .bucket(&beta)
        .key("objects/one")
        .send()
        .await
        .expect("HEAD");
    assert_eq!(head.content_length(), Some(data.len() as i64));
    let listed = client
        .list_objects_v2()
        .bucket(&beta)
        .send()
        .await
        .expect("ListObjectsV2");
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["objects/one"]);

    // A multipart upload, part by part, to the second MinIO.
    let parts = [random_bytes(5 * MIB, 2), random_bytes(MIB, 3)];
    multipart_upload(client, &beta, "objects/multipart", &parts).await;
    let whole = parts.concat();
    assert!(read(&direct_second, &beta, "objects/multipart").await == whole);
    assert!(read(client, &beta, "objects/multipart").await == whole);

    // The rig's own bucket stays on the first MinIO, which knows nothing of the other.
    let own = random_bytes(1000, 4);
    put_object(client, &rig.bucket, "here", &own).await;
    assert!(read(&rig.direct, &rig.bucket, "here").await == own);
    assert!(
        try_get(&rig.direct, &beta, "objects/one", None)
            .await
            .is_err(),
        "the first MinIO has no bucket {beta}"
    );

    let (status, ready) = http_get(&format!("{}/readyz", rig.portico().admin), &[]).await;
    assert_eq!(status, 200);
    assert!(ready.contains("upstream default: reachable"), "{ready}");
    assert!(ready.contains("upstream second: reachable"), "{ready}");
    assert_eq!(
        rig.portico()
            .metric("portico_upstream_up{upstream=\"second\"}")
            .await,
        1.0
    );
}

/// A rig whose upstream falls back to the bucket `{bucket}-r` of a second MinIO, made here;
/// `more` sets the rest. The rig, the second MinIO (it runs while kept), a client of it and
/// the replica bucket.
async fn with_a_replica(
    name: &str,
    more: impl FnOnce(&mut Settings),
) -> (Rig, Minio, Client, String) {
    let (replica, direct_replica) = second_minio();
    let rig = Rig::start(name, |settings| {
        settings.upstream_extra =
            "fallback = \"replica\"\nfallback_bucket = \"{bucket}-r\"\n".to_owned();
        settings.tables = entry("replica", &replica, "");
        more(settings);
    })
    .await;
    let replica_bucket = format!("{}-r", rig.bucket);
    direct_replica
        .create_bucket()
        .bucket(&replica_bucket)
        .send()
        .await
        .expect("replica bucket");
    (rig, replica, direct_replica, replica_bucket)
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_fail_over_to_a_replica_pinned_to_their_version_and_writes_do_not() {
    let (mut rig, _replica, direct_replica, replica_bucket) =
        with_a_replica("failover", |_| {}).await;

    // Replicated: the same bytes (so the same ETag) on both sides.
    let same = random_bytes(5 * MIB / 2, 5);
    let fresh = random_bytes(3 * MIB / 2, 6);
    for key in ["same", "fresh"] {
        let data = if key == "same" { &same } else { &fresh };
        rig.put(key, data).await;
        put_object(&direct_replica, &replica_bucket, key, data).await;
    }
    // Not replicated yet: the replica still holds the older version.
    let newer = random_bytes(5 * MIB / 2, 7);
    let older = random_bytes(5 * MIB / 2, 8);
    rig.put("lagging", &newer).await;
    put_object(&direct_replica, &replica_bucket, "lagging", &older).await;

    // While the primary serves: the first block of each is cached, with its metadata.
    for (key, expected) in [("same", &same), ("lagging", &newer)] {
        let first = rig.get(key, Some("bytes=0-1048575")).await;
        assert!(first == expected[..MIB], "{key}");
    }

    rig.forwarder.stop().await;
    // Cached and uncached blocks of a version the replica holds: byte-exact.
    assert!(rig.get("same", None).await == same);
    // An object never read before: the replica's version.
    assert!(rig.get("fresh", None).await == fresh);
    // The cached block of the newer version is still served; its uncached blocks are
    // not on the replica: an error, never the older version's bytes.
    assert!(rig.get("lagging", Some("bytes=0-99")).await == newer[..100]);
    let error = rig
        .try_get("lagging", Some("bytes=2097152-2097251"))
        .await
        .expect_err("the replica holds another version");
    assert!(error.contains("ServiceUnavailable"), "{error}");
    // A whole GET starts with the cached first block, then stops short of the older bytes.
    let whole = rig.try_get("lagging", None).await;
    assert!(whole.is_err(), "a whole GET of lagging completed");
    assert!(
        rig.portico()
            .metric("portico_upstream_failovers_total{upstream=\"default\"}")
            .await
            >= 2.0
    );

    // Writes never fail over: the PUT fails and the replica does not get it.
    let written = rig
        .client
        .put_object()
        .bucket(&rig.bucket)
        .key("written")
        .body(ByteStream::from_static(b"never on the replica"))
        .send()
        .await;
    let status = written
        .expect_err("the primary is down")
        .raw_response()
        .map(|response| response.status().as_u16());
    assert!(
        matches!(status, Some(500..=504)),
        "the PUT failed with {status:?}"
    );
    assert!(
        try_get(&direct_replica, &replica_bucket, "written", None)
            .await
            .is_err()
    );
    rig.forwarder.restart().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revalidation_that_fails_over_answers_only_for_the_version_it_knows() {
    let (mut rig, _replica, direct_replica, replica_bucket) =
        with_a_replica("failover-revalidate", |settings| {
            settings.metadata_ttl = "0s"
        })
        .await;

    let newer = random_bytes(MIB / 2, 9);
    let older = random_bytes(MIB / 2, 10);
    rig.put("lagging", &newer).await;
    put_object(&direct_replica, &replica_bucket, "lagging", &older).await;
    let known = rig.head("lagging").await;
    assert!(rig.get("lagging", None).await == newer, "cached");

    // Every read revalidates (`metadata_ttl = "0s"`): with the primary down, the replica is
    // asked for the known version only, and its older copy never counts as a change.
    rig.forwarder.stop().await;
    let head = rig.head("lagging").await;
    assert_eq!(
        head.e_tag(),
        known.e_tag(),
        "the known version, served stale"
    );
    assert!(
        rig.get("lagging", None).await == newer,
        "never the older bytes"
    );
    assert!(
        rig.portico()
            .metric("portico_upstream_failovers_total{upstream=\"default\"}")
            .await
            >= 2.0,
        "the replica was asked"
    );
    rig.forwarder.restart().await;
}
