//! The listing cache against MinIO: listings within `listing.cached_prefixes` are answered
//! from memory, keyed by every parameter; a write, delete or purge through Portico under a
//! page's prefix shows at once; nothing is served before authentication.

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use portico_testkit::{http_request, http_send};

use crate::support::Rig;

const TOKEN: &str = "listing-admin-token";

/// A rig whose Portico caches the listings of its bucket under `data/`.
async fn listing_rig() -> Rig {
    let mut rig = Rig::start("listing", |settings| {
        settings.admin_extra = format!("token = \"{TOKEN}\"\n");
    })
    .await;
    rig.settings.listing = format!("cached_prefixes = [\"{}/data/\"]\n", rig.bucket);
    rig.restart_portico().await;
    rig
}

/// The keys ListObjectsV2 returns for `prefix` (one page of at most `max_keys`).
async fn keys(client: &Client, bucket: &str, prefix: &str, max_keys: Option<i32>) -> Vec<String> {
    let listed = client
        .list_objects_v2()
        .bucket(bucket)
        .prefix(prefix)
        .set_max_keys(max_keys)
        .send()
        .await
        .unwrap_or_else(|error| panic!("list {prefix}: {error:?}"));
    listed
        .contents()
        .iter()
        .filter_map(|object| object.key().map(str::to_owned))
        .collect()
}

/// Listings the upstream received since the last call.
fn upstream_listings(rig: &Rig) -> usize {
    rig.forwarder
        .take()
        .iter()
        .filter(|seen| seen.method == "GET" && !seen.is_object())
        .count()
}

async fn put_through_portico(rig: &Rig, key: &str) {
    rig.client
        .put_object()
        .bucket(&rig.bucket)
        .key(key)
        .body(ByteStream::from_static(b"new"))
        .send()
        .await
        .unwrap_or_else(|error| panic!("PUT {key}: {error:?}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn listings_are_answered_from_memory_until_a_write_delete_or_purge_under_their_prefix() {
    let rig = listing_rig().await;
    for key in ["data/a", "data/b", "data/c", "other/x"] {
        rig.put(key, b"object").await;
    }
    let (client, bucket) = (&rig.client, rig.bucket.as_str());
    upstream_listings(&rig);

    let first = keys(client, bucket, "data/", None).await;
    assert_eq!(first, ["data/a", "data/b", "data/c"]);
    assert_eq!(keys(client, bucket, "data/", None).await, first);
    assert_eq!(
        upstream_listings(&rig),
        1,
        "the second listing came from memory"
    );

    // Another parameter is another page.
    assert_eq!(
        keys(client, bucket, "data/", Some(2)).await,
        ["data/a", "data/b"]
    );
    assert_eq!(
        keys(client, bucket, "data/", Some(2)).await,
        ["data/a", "data/b"]
    );
    assert_eq!(upstream_listings(&rig), 1);

    // Outside the configured prefixes nothing is cached.
    keys(client, bucket, "other/", None).await;
    keys(client, bucket, "other/", None).await;
    assert_eq!(upstream_listings(&rig), 2);

    // A write through Portico under data/ shows in the next listing.
    put_through_portico(&rig, "data/d").await;
    upstream_listings(&rig);
    assert_eq!(
        keys(client, bucket, "data/", None).await,
        ["data/a", "data/b", "data/c", "data/d"]
    );
    assert_eq!(upstream_listings(&rig), 1);
    // A write elsewhere leaves the page cached.
    put_through_portico(&rig, "other/y").await;
    upstream_listings(&rig);
    assert_eq!(keys(client, bucket, "data/", None).await.len(), 4);
    assert_eq!(upstream_listings(&rig), 0);

    // A delete through Portico.
    client
        .delete_object()
        .bucket(bucket)
        .key("data/a")
        .send()
        .await
        .expect("DELETE");
    assert_eq!(
        keys(client, bucket, "data/", None).await,
        ["data/b", "data/c", "data/d"]
    );

    // A purge (of an object deleted behind Portico's back, say).
    rig.direct
        .delete_object()
        .bucket(bucket)
        .key("data/b")
        .send()
        .await
        .expect("DELETE direct");
    assert_eq!(
        keys(client, bucket, "data/", None).await.len(),
        3,
        "still cached"
    );
    let url = format!("{}/admin/purge", rig.portico().admin);
    let bearer = format!("Bearer {TOKEN}");
    let body = format!("{{\"bucket\": \"{bucket}\", \"key\": \"data/b\"}}");
    let headers = [
        ("authorization", bearer.as_str()),
        ("content-type", "application/json"),
    ];
    let (status, _, _) = http_send("POST", &url, &headers, Bytes::from(body)).await;
    assert_eq!(status, 200);
    assert_eq!(
        keys(client, bucket, "data/", None).await,
        ["data/c", "data/d"]
    );

    let portico = rig.portico();
    assert!(
        portico
            .metric("portico_listing_cache_lookups_total{result=\"hit\"}")
            .await
            >= 4.0
    );
    assert!(
        portico
            .metric("portico_listing_cache_invalidations_total")
            .await
            >= 3.0
    );
    assert!(portico.metric("portico_listing_cache_bytes").await > 0.0);

    // A cached page is never an answer to a request that is not authenticated.
    let anonymous = format!("{}/{bucket}?list-type=2&prefix=data%2F", portico.s3);
    let (status, _, _) = http_request("GET", &anonymous, &[]).await;
    assert_eq!(status, 403);
}
