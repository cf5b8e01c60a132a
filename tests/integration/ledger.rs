//! The cost ledger: after a mixed run of two tenants (misses, hits, ranges, HEADs, cached
//! and uncached listings, writes, deletes, a missing key), its origin requests and bytes
//! equal what the counting forwarder saw, request for request and byte for byte, and
//! each request is charged to its tenant and bucket.

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use portico_testkit::{http_send, s3_client_as};
use serde_json::Value;

use crate::support::{Rig, random_bytes};

const MIB: usize = 1024 * 1024;
const TOKEN: &str = "ledger-admin-token";

async fn usage(rig: &Rig) -> Value {
    let url = format!("{}/admin/usage", rig.portico().admin);
    let bearer = format!("Bearer {TOKEN}");
    let (status, _, body) =
        http_send("GET", &url, &[("authorization", &bearer)], Bytes::new()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).expect("JSON")
}

/// The ledger's origin requests (all kinds) and bytes.
fn origin_totals(usage: &Value) -> (u64, u64) {
    let total = &usage["total"];
    let requests = ["get", "head", "list", "other"]
        .iter()
        .map(|kind| total["origin_requests"][kind].as_u64().unwrap())
        .sum();
    (requests, total["origin_bytes"].as_u64().unwrap())
}

fn account<'a>(usage: &'a Value, bucket: &str, tenant: &str) -> &'a Value {
    usage["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["bucket"] == bucket && row["tenant"] == tenant)
        .unwrap_or_else(|| panic!("no account for {bucket}/{tenant}: {usage}"))
}

async fn get(client: &Client, bucket: &str, key: &str, range: Option<&str>) -> usize {
    let output = client
        .get_object()
        .bucket(bucket)
        .key(key)
        .set_range(range.map(str::to_owned))
        .send()
        .await
        .unwrap_or_else(|error| panic!("GET {key}: {error:?}"));
    output.body.collect().await.unwrap().into_bytes().len()
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_mixed_run_the_ledger_equals_the_origin_and_charges_each_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let credentials = dir.path().join("credentials.toml");
    std::fs::write(
        &credentials,
        r#"
[[tenants]]
name = "team-a"

[[credentials]]
access_key_id = "a"
secret_access_key = "a-secret"
tenant = "team-a"

[[credentials]]
access_key_id = "b"
secret_access_key = "b-secret"
"#,
    )
    .unwrap();
    let bucket = portico_testkit::unique_bucket("ledger");
    let (named, path) = (bucket.clone(), credentials.clone());
    let rig = Rig::start("ledger-other", move |settings| {
        settings.with_credentials_file(&path);
        settings.admin_extra = format!("token = \"{TOKEN}\"\n");
        settings.listing = format!("cached_prefixes = [\"{named}\"]\n");
        settings.tables = format!(
            "[prefetch]\nenabled = false\n\n[cost]\nbuckets = [\"{named}\"]\norigin_per_gib = 0.02\n"
        );
    })
    .await;
    rig.direct
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    let s3 = &rig.portico().s3;
    let (a, b) = (
        s3_client_as(s3, "a", "a-secret", true),
        s3_client_as(s3, "b", "b-secret", true),
    );
    let data = random_bytes(3 * MIB + 5, 181);

    // Team A: a write through Portico, a miss, hits, ranges, HEADs, listings (the second
    // from the listing cache), a delete, a missing key.
    a.put_object()
        .bucket(&bucket)
        .key("data.bin")
        .body(ByteStream::from(data.clone()))
        .send()
        .await
        .unwrap();
    rig.direct
        .put_object()
        .bucket(&bucket)
        .key("cold.bin")
        .body(ByteStream::from(data.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(get(&a, &bucket, "cold.bin", None).await, data.len());
    assert_eq!(get(&a, &bucket, "cold.bin", None).await, data.len());
    assert_eq!(
        get(&a, &bucket, "cold.bin", Some("bytes=100-2000000")).await,
        1_999_901
    );
    assert_eq!(get(&a, &bucket, "data.bin", Some("bytes=-10")).await, 10);
    a.head_object()
        .bucket(&bucket)
        .key("cold.bin")
        .send()
        .await
        .unwrap();
    for _ in 0..2 {
        let listed = a.list_objects_v2().bucket(&bucket).send().await.unwrap();
        assert_eq!(listed.key_count(), Some(2));
    }
    let missing = a.get_object().bucket(&bucket).key("nothing").send().await;
    assert!(missing.is_err());
    a.delete_object()
        .bucket(&bucket)
        .key("data.bin")
        .send()
        .await
        .unwrap();
    // The other bucket, counted as "other".
    rig.put("elsewhere", b"elsewhere").await;
    assert_eq!(get(&a, &rig.bucket, "elsewhere", None).await, 9);

    // Credential b, a tenant of its own: hits only.
    let before_b = usage(&rig).await;
    assert_eq!(get(&b, &bucket, "cold.bin", None).await, data.len());
    b.head_object()
        .bucket(&bucket)
        .key("cold.bin")
        .send()
        .await
        .unwrap();

    // The ledger against the forwarder: taken until no origin request lands between the
    // two reads of the ledger (health checks run in the background).
    let mut seen = (0, 0);
    let after = loop {
        let first = usage(&rig).await;
        let (requests, bytes) = rig.forwarder.take_counts();
        seen = (seen.0 + requests, seen.1 + bytes);
        let second = usage(&rig).await;
        if origin_totals(&first) == origin_totals(&second) {
            break second;
        }
    };
    assert_eq!(
        origin_totals(&after),
        seen,
        "ledger (requests, bytes) against the origin's"
    );
    assert!(seen.0 >= 8, "{seen:?}");

    let team_a = account(&after, &bucket, "team-a");
    let kinds = &team_a["origin_requests"];
    assert!(kinds["get"].as_u64().unwrap() >= 4, "{team_a}");
    assert_eq!(
        kinds["list"], 1,
        "the second listing came from the cache: {team_a}"
    );
    assert_eq!(kinds["other"], 2, "the PUT and the DELETE: {team_a}");
    assert!(
        team_a["requests_without_origin"].as_u64().unwrap() >= 2,
        "{team_a}"
    );
    assert!(
        account(&after, "other", "team-a")["origin_requests"]["get"]
            .as_u64()
            .unwrap()
            >= 1
    );
    // b's two requests never reached the origin, and saved a GET's price each (plus
    // the bytes at 0.02 per GiB).
    assert!(
        before_b["accounts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|row| row["tenant"] != "b")
    );
    let team_b = account(&after, &bucket, "b");
    assert_eq!(team_b["requests"], 2, "{team_b}");
    assert_eq!(team_b["requests_without_origin"], 2, "{team_b}");
    assert_eq!(team_b["origin_bytes"], 0, "{team_b}");
    assert_eq!(team_b["served_bytes"], data.len(), "{team_b}");
    let saved = team_b["saved"].as_f64().unwrap();
    let expected = 2.0 * 0.0004 / 1000.0 + 0.02 * data.len() as f64 / (1024.0 * 1024.0 * 1024.0);
    assert!(
        (saved - expected).abs() < 1e-12,
        "saved {saved}, expected {expected}"
    );
    let metric = format!(
        "portico_ledger_requests_total{{bucket=\"{bucket}\",tenant=\"b\",origin=\"none\"}}"
    );
    assert_eq!(rig.portico().metric(&metric).await, 2.0);
}
