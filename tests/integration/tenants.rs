//! One cache for many teams: tenants from the credentials file, the limits that refuse a
//! tenant's requests with 503 SlowDown (and only that tenant's), and the fill slots that
//! share the origin between tenants by weight.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::error::ProvideErrorMetadata;
use portico_testkit::{s3_client_as, s3_client_retrying};

use crate::support::{Rig, random_bytes};

const MIB: usize = 1024 * 1024;

/// A rig whose credentials file is `credentials`, with `extra` lines in `[upstream]`.
async fn rig_with(prefix: &str, credentials: &str, extra: &str) -> (Rig, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credentials.toml");
    std::fs::write(&path, credentials).unwrap();
    let extra = extra.to_owned();
    let rig = Rig::start(prefix, |settings| {
        settings.with_credentials_file(&path);
        settings.upstream_extra = extra;
        settings.tables = "[prefetch]\nenabled = false\n".to_owned();
    })
    .await;
    (rig, dir)
}

/// A client of `key` (its secret is `<key>-secret`) that does not retry.
fn client(rig: &Rig, key: &str) -> Client {
    s3_client_as(&rig.portico().s3, key, &format!("{key}-secret"), false)
}

/// HEADs `key` `count` times: how many were refused with 503 SlowDown (anything else
/// fails the test).
async fn refused_heads(client: &Client, bucket: &str, key: &str, count: usize) -> usize {
    let mut refused = 0;
    for _ in 0..count {
        match client.head_object().bucket(bucket).key(key).send().await {
            Ok(_) => {}
            Err(error) => {
                let status = error.raw_response().map(|r| r.status().as_u16());
                assert_eq!(status, Some(503), "{error:?}");
                refused += 1;
            }
        }
    }
    refused
}

/// A GET of `key` whole: its length, or the S3 error code.
async fn get(client: &Client, bucket: &str, key: &str) -> Result<usize, String> {
    match client.get_object().bucket(bucket).key(key).send().await {
        Ok(output) => Ok(output.body.collect().await.unwrap().into_bytes().len()),
        Err(error) => Err(error.code().unwrap_or("no code").to_owned()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_over_its_limits_gets_slowdown_and_the_other_tenants_do_not() {
    let credentials = r#"
[[tenants]]
name = "batch"
max_requests_per_second = 4
max_bytes_per_second = "2MiB"

[[credentials]]
access_key_id = "batch-1"
secret_access_key = "batch-1-secret"
tenant = "batch"

[[credentials]]
access_key_id = "batch-2"
secret_access_key = "batch-2-secret"
tenant = "batch"

[[credentials]]
access_key_id = "notebook"
secret_access_key = "notebook-secret"
"#;
    let (rig, _dir) = rig_with("tenant-limits", credentials, "").await;
    rig.put("small", b"a small object").await;
    rig.put("big", &random_bytes(4 * MIB, 171)).await;
    rig.put("cold", &random_bytes(4 * MIB, 172)).await;
    let (batch_1, batch_2, notebook) = (
        client(&rig, "batch-1"),
        client(&rig, "batch-2"),
        client(&rig, "notebook"),
    );
    let bucket = rig.bucket.clone();

    // Requests: a second's worth (4) pass, the rest of a quick burst is refused, for
    // either credential of the group; the notebook is never refused.
    let refused_1 = refused_heads(&batch_1, &bucket, "small", 12).await;
    let refused_2 = refused_heads(&batch_2, &bucket, "small", 4).await;
    assert!(refused_1 >= 6, "batch-1: {refused_1} of 12 refused");
    assert!(
        refused_2 >= 2,
        "batch-2 shares the tenant: {refused_2} of 4 refused"
    );
    assert_eq!(refused_heads(&notebook, &bucket, "small", 30).await, 0);
    let portico = rig.portico();
    let counted = portico
        .metric("portico_tenant_refusals_total{tenant=\"batch\",limit=\"requests\"}")
        .await;
    assert_eq!(counted, (refused_1 + refused_2) as f64);

    // Bytes served: 4 MiB of hits (the notebook filled them) against 2 MiB/s leaves a
    // debt of 2 MiB that refuses the tenant's requests for about a second.
    assert_eq!(get(&notebook, &bucket, "big").await, Ok(4 * MIB));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(get(&batch_1, &bucket, "big").await, Ok(4 * MIB));
    assert_eq!(
        get(&batch_2, &bucket, "small").await,
        Err("SlowDown".to_owned())
    );
    assert_eq!(get(&notebook, &bucket, "big").await, Ok(4 * MIB));
    let bytes = "portico_tenant_refusals_total{tenant=\"batch\",limit=\"bytes\"}";
    assert_eq!(portico.metric(bytes).await, 1.0);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(
        get(&batch_2, &bucket, "small").await,
        Ok(14),
        "the debt is repaid"
    );

    // Bytes filled: one byte of each 1 MiB block of a cold object serves 4 bytes, far
    // below the rate, but fills a block each; by the third the tenant is in debt.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut read = 0;
    let refused = loop {
        let first = read * MIB;
        let answer = batch_1
            .get_object()
            .bucket(&bucket)
            .key("cold")
            .range(format!("bytes={first}-{first}"))
            .send()
            .await;
        match answer {
            Ok(_) => read += 1,
            Err(error) => break error.code().map(str::to_owned),
        }
        if read == 4 {
            break None;
        }
    };
    assert_eq!(refused.as_deref(), Some("SlowDown"), "after {read} reads");
    assert!(read <= 3, "{read} one-byte reads passed");
    assert_eq!(portico.metric(bytes).await, 2.0);

    // A retrying SDK client rides the refusals out. With the standard three attempts,
    // full jitter can make the waits shorter than the debt; a client that expects
    // throttling allows more (and the back-off grows with each).
    let retry = aws_sdk_s3::config::retry::RetryConfig::standard().with_max_attempts(10);
    let patient = s3_client_retrying(&portico.s3, ("batch-1", "batch-1-secret"), retry);
    for _ in 0..6 {
        let read = patient
            .head_object()
            .bucket(&bucket)
            .key("small")
            .send()
            .await;
        assert!(read.is_ok(), "{read:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn fill_slots_go_to_the_waiting_tenants_by_weight() {
    let credentials = r#"
[[tenants]]
name = "heavy"
weight = 3

[[credentials]]
access_key_id = "heavy"
secret_access_key = "heavy-secret"

[[credentials]]
access_key_id = "light"
secret_access_key = "light-secret"
"#;
    let (rig, _dir) = rig_with("tenant-fills", credentials, "max_concurrent_fills = 1\n").await;
    const BLOCKS: usize = 16;
    for name in ["heavy.bin", "light.bin"] {
        rig.put(name, &random_bytes(BLOCKS * MIB, 172)).await;
    }
    let bucket = rig.bucket.clone();
    // Each tenant's object known (its first block cached with its metadata), so what
    // follows is block fetches only, each 100 ms at the origin.
    for (key, name) in [("heavy", "heavy.bin"), ("light", "light.bin")] {
        let range = "bytes=0-0".to_owned();
        let read = client(&rig, key)
            .get_object()
            .bucket(&bucket)
            .key(name)
            .range(range)
            .send()
            .await;
        assert!(read.is_ok(), "{read:?}");
    }
    rig.forwarder.take();
    rig.forwarder.set_latency(Duration::from_millis(100));
    // Asked for in turns, so first come, first served would split the fetches evenly.
    let mut reads = Vec::new();
    for block in 1..BLOCKS {
        for (key, name) in [("heavy", "heavy.bin"), ("light", "light.bin")] {
            let client = client(&rig, key);
            let bucket = bucket.clone();
            reads.push(tokio::spawn(async move {
                let first = block * MIB;
                client
                    .get_object()
                    .bucket(bucket)
                    .key(name)
                    .range(format!("bytes={first}-{}", first + MIB - 1))
                    .send()
                    .await
                    .map(drop)
            }));
        }
    }
    for read in reads {
        read.await.unwrap().expect("a ranged GET");
    }
    // The origin's order of block GETs while both tenants had fetches waiting: the
    // first 16 after the first of each.
    let order: Vec<String> = rig
        .forwarder
        .object_requests("GET")
        .into_iter()
        .map(|seen| seen.path)
        .collect();
    assert_eq!(order.len(), 2 * (BLOCKS - 1), "{order:?}");
    let early = &order[2..18];
    let mut counts: HashMap<bool, usize> = HashMap::new();
    for path in early {
        *counts.entry(path.ends_with("heavy.bin")).or_default() += 1;
    }
    let heavy = counts.get(&true).copied().unwrap_or_default();
    assert!(
        (10..=14).contains(&heavy),
        "heavy got {heavy} of 16: {order:?}"
    );
    let portico = rig.portico();
    for tenant in ["heavy", "light"] {
        let sample = format!("portico_tenant_fills_total{{tenant=\"{tenant}\",class=\"demand\"}}");
        // The discovery of its object took a slot too.
        assert_eq!(portico.metric(&sample).await, BLOCKS as f64, "{tenant}");
    }
}
