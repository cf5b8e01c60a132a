//! The listing cache against MinIO: listings within `listing.cached_prefixes` are answered
//! from memory, keyed by every parameter; a write, delete or purge through Portico under a
//! page's prefix shows at once; nothing is served before authentication and the bucket
//! scope check; paginated and URL-encoded listings come back exactly.

use aws_sdk_s3::Client;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use portico_testkit::{http_request, http_send};

use crate::support::{Rig, s3_client_as};

const TOKEN: &str = "listing-admin-token";

/// A rig whose Portico caches the listings of its bucket under `data/`, with a second
/// credential (`elsewhere`) limited to another bucket.
async fn listing_rig(credentials: &std::path::Path) -> Rig {
    std::fs::write(
        credentials,
        "[[credentials]]\naccess_key_id = \"elsewhere\"\nsecret_access_key = \"elsewhere-secret\"\nbuckets = [\"some-other-bucket\"]\n",
    )
    .expect("credentials file");
    let mut rig = Rig::start("listing", |settings| {
        settings.admin_extra = format!("token = \"{TOKEN}\"\n");
        settings.with_credentials_file(credentials);
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

/// Every page of a listing of `data/`, 2 keys each, URL-encoded, following continuation
/// tokens: each page's keys.
async fn paginated(client: &Client, bucket: &str) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = client
            .list_objects_v2()
            .bucket(bucket)
            .prefix("data/")
            .max_keys(2)
            .encoding_type(aws_sdk_s3::types::EncodingType::Url)
            .set_continuation_token(token.take())
            .send()
            .await
            .expect("a page");
        pages.push(
            page.contents()
                .iter()
                .filter_map(|object| object.key().map(str::to_owned))
                .collect(),
        );
        token = page.next_continuation_token().map(str::to_owned);
        if token.is_none() {
            return pages;
        }
    }
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
    let credentials = tempfile::tempdir().expect("credentials directory");
    let rig = listing_rig(&credentials.path().join("credentials.toml")).await;
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

    // A cached page is never an answer to a request that is not authenticated, nor to a
    // credential whose scope is another bucket.
    assert_eq!(keys(client, bucket, "data/", None).await.len(), 2, "cached");
    let anonymous = format!("{}/{bucket}?list-type=2&prefix=data%2F", portico.s3);
    let (status, _, _) = http_request("GET", &anonymous, &[]).await;
    assert_eq!(status, 403);
    let elsewhere = s3_client_as(&portico.s3, "elsewhere", "elsewhere-secret", false);
    let error = elsewhere
        .list_objects_v2()
        .bucket(bucket)
        .prefix("data/")
        .send()
        .await
        .expect_err("another bucket's credential");
    assert_eq!(error.code(), Some("AccessDenied"), "{error:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn paginated_and_url_encoded_listings_come_back_exactly_as_the_store_sent_them() {
    let credentials = tempfile::tempdir().expect("credentials directory");
    let rig = listing_rig(&credentials.path().join("credentials.toml")).await;
    let names = [
        "data/a b",
        "data/a+b",
        "data/é/1",
        "data/日本/2",
        "data/%41",
        "data/x?y",
        "data/z",
    ];
    for key in names {
        rig.put(key, b"object").await;
    }
    let (client, bucket) = (&rig.client, rig.bucket.as_str());
    // Every page of a paginated listing, followed by continuation tokens, twice.
    let passes = [
        paginated(client, bucket).await,
        paginated(client, bucket).await,
    ];
    let direct = rig
        .direct
        .list_objects_v2()
        .bucket(bucket)
        .prefix("data/")
        .encoding_type(aws_sdk_s3::types::EncodingType::Url)
        .send()
        .await
        .expect("direct listing");
    let expected: Vec<String> = direct
        .contents()
        .iter()
        .filter_map(|object| object.key().map(str::to_owned))
        .collect();
    assert_eq!(expected.len(), names.len());
    // URL-encoded as the store encodes them ("a b" as "a+b", "é" as "%C3%A9").
    assert!(
        expected.contains(&"data/%C3%A9/1".to_owned()),
        "{expected:?}"
    );
    assert_eq!(passes[0].concat(), expected, "every key, in order");
    assert_eq!(passes[0], passes[1], "the second pass got the same pages");
    assert_eq!(passes[0].len(), names.len().div_ceil(2));
    upstream_listings(&rig);
    // A third pass: every page, with its continuation token, from memory.
    assert_eq!(paginated(client, bucket).await, passes[0]);
    assert_eq!(upstream_listings(&rig), 0);
}
