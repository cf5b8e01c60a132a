//! The admin API: a purge makes the next GET go upstream again, a warm job fills the cache
//! so later reads make no upstream GETs and reports its progress to 100 %, bad requests
//! get clear errors, and nothing works without the admin token.

use std::time::Duration;

use bytes::Bytes;
use portico_testkit::http_send;
use serde_json::{Value, json};

use crate::support::{Rig, random_bytes};

const MIB: usize = 1024 * 1024;
const TOKEN: &str = "admin-secret";

async fn admin_rig(prefix: &str) -> Rig {
    Rig::start(prefix, |settings| {
        settings.admin_extra = format!("token = \"{TOKEN}\"\n");
    })
    .await
}

/// Sends an admin request with the token; (status, JSON body).
async fn admin(rig: &Rig, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let url = format!("{}{path}", rig.portico().admin);
    let bearer = format!("Bearer {TOKEN}");
    let mut headers = vec![("authorization", bearer.as_str())];
    let body = match body {
        Some(body) => {
            headers.push(("content-type", "application/json"));
            Bytes::from(body.to_string())
        }
        None => Bytes::new(),
    };
    let (status, _, body) = http_send(method, &url, &headers, body).await;
    let parsed = serde_json::from_slice(&body)
        .unwrap_or_else(|_| panic!("{path}: not JSON: {}", String::from_utf8_lossy(&body)));
    (status, parsed)
}

async fn post(rig: &Rig, path: &str, body: Value) -> (u16, Value) {
    admin(rig, "POST", path, Some(body)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn purge_of_a_key_or_prefix_sends_the_next_get_upstream() {
    let rig = admin_rig("purge").await;
    let data = random_bytes(3 * MIB, 61);
    for key in ["logs/a.bin", "logs/b.bin", "other/c.bin"] {
        rig.put(key, &data).await;
        assert!(rig.get(key, None).await == data);
    }
    rig.forwarder.take();
    for key in ["logs/a.bin", "logs/b.bin", "other/c.bin"] {
        assert!(rig.get(key, None).await == data);
    }
    assert_eq!(
        rig.upstream_gets(),
        0,
        "everything is cached before the purge"
    );

    let bucket = rig.bucket.clone();
    let (status, purged) = post(
        &rig,
        "/admin/purge",
        json!({ "bucket": bucket, "key": "logs/a.bin" }),
    )
    .await;
    assert_eq!(status, 200, "{purged}");
    assert_eq!(purged, json!({ "objects": 1, "blocks": 3 }));
    assert!(rig.get("logs/a.bin", None).await == data);
    assert_eq!(rig.upstream_blocks(), 3, "the purged key is read again");
    rig.forwarder.take();
    assert!(rig.get("logs/b.bin", None).await == data);
    assert_eq!(rig.upstream_gets(), 0, "other keys stay cached");

    let (status, purged) = post(
        &rig,
        "/admin/purge",
        json!({ "bucket": bucket, "prefix": "logs/" }),
    )
    .await;
    assert_eq!(status, 200, "{purged}");
    assert_eq!(purged["objects"], 2, "{purged}");
    rig.forwarder.take();
    assert!(rig.get("other/c.bin", None).await == data);
    assert_eq!(rig.upstream_gets(), 0, "outside the prefix stays cached");
    assert!(rig.get("logs/b.bin", None).await == data);
    assert_eq!(rig.upstream_blocks(), 3, "inside the prefix is read again");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_purge_holds_across_a_restart_and_counts_what_it_removed() {
    let mut rig = admin_rig("purge-restart").await;
    let data = random_bytes(3 * MIB + 5, 62);
    rig.put("kept.bin", &data).await;
    rig.put("purged.bin", &data).await;
    assert!(rig.get("kept.bin", None).await == data);
    // Only the first two of four blocks are cached.
    assert!(rig.get("purged.bin", Some("bytes=0-2097151")).await == data[..2 * MIB]);

    let bucket = rig.bucket.clone();
    let (status, purged) = post(
        &rig,
        "/admin/purge",
        json!({ "bucket": bucket, "key": "purged.bin" }),
    )
    .await;
    assert_eq!(status, 200, "{purged}");
    assert_eq!(
        purged,
        json!({ "objects": 1, "blocks": 2 }),
        "the blocks the cache held"
    );

    // The disk tier still holds the purged entries; the restart recovers them, and they
    // must stay unreachable.
    rig.restart_portico().await;
    rig.forwarder.take();
    assert!(rig.get("purged.bin", None).await == data);
    assert_eq!(
        rig.upstream_blocks(),
        4,
        "every block of the purged object came from the upstream: {:#?}",
        rig.forwarder.take()
    );
    assert_eq!(
        rig.portico()
            .metric("portico_cache_metadata_lookups_total{result=\"revalidated\"}")
            .await,
        0.0,
        "the purged metadata did not come back"
    );
    rig.forwarder.take();
    assert!(rig.get("kept.bin", None).await == data);
    assert_eq!(rig.upstream_gets(), 0, "the other object stayed cached");
}

/// Polls a job until it ends; returns its last status and every percent it reported.
async fn finished_job(rig: &Rig, id: u64) -> (Value, Vec<f64>) {
    let mut seen = Vec::new();
    for _ in 0..300 {
        let (status, job) = admin(rig, "GET", &format!("/admin/jobs/{id}"), None).await;
        assert_eq!(status, 200, "{job}");
        seen.push(job["percent"].as_f64().expect("percent"));
        if job["state"] != "running" {
            return (job, seen);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("warm job {id} did not finish in 15 s");
}

#[tokio::test(flavor = "multi_thread")]
async fn warm_of_a_prefix_fills_the_cache_and_reports_progress() {
    let rig = admin_rig("warm").await;
    let first = random_bytes(3 * MIB, 62);
    let second = random_bytes(5 * MIB / 2, 63);
    rig.put("set/one.bin", &first).await;
    rig.put("set/two.bin", &second).await;
    rig.put("elsewhere.bin", &first).await;
    rig.forwarder.take();

    let bucket = rig.bucket.clone();
    let (status, started) = post(
        &rig,
        "/admin/warm",
        json!({ "bucket": bucket, "prefix": "set/" }),
    )
    .await;
    assert_eq!(status, 202, "{started}");
    let id = started["id"].as_u64().expect("job id");
    assert_eq!(started["status"], format!("/admin/jobs/{id}"));
    let (job, percents) = finished_job(&rig, id).await;
    assert_eq!(job["state"], "done", "{job}");
    let total = (first.len() + second.len()) as u64;
    assert_eq!(job["bytes_total"], total, "{job}");
    assert_eq!(job["bytes_done"], total, "{job}");
    assert_eq!(job["objects_done"], 2);
    assert_eq!(job["objects_total"], 2);
    assert_eq!(job["percent"], 100.0);
    assert!(
        percents.windows(2).all(|pair| pair[0] <= pair[1]),
        "progress only grows: {percents:?}"
    );
    assert_eq!(rig.upstream_blocks(), 6, "3 + 3 blocks, each fetched once");

    rig.forwarder.take();
    assert!(rig.get("set/one.bin", None).await == first);
    assert!(rig.get("set/two.bin", Some("bytes=1000-2000000")).await == second[1000..=2_000_000]);
    assert_eq!(
        rig.upstream_gets(),
        0,
        "warmed objects are served from the cache"
    );
    assert_eq!(rig.upstream_heads(), 0, "with their metadata");
    assert!(rig.get("elsewhere.bin", None).await == first);
    assert_eq!(
        rig.upstream_blocks(),
        3,
        "nothing outside the prefix was warmed"
    );

    let (status, report) = admin(&rig, "GET", "/admin/cache", None).await;
    assert_eq!(status, 200, "{report}");
    assert!(report["memory"]["used_bytes"].as_u64().unwrap() >= total);
    assert!(report["memory"]["capacity_bytes"].as_u64().unwrap() >= 256 * MIB as u64);
    assert_eq!(report["disk"]["enabled"], true);
    let hits = report["block_lookups"]["memory_hit"].as_u64().unwrap();
    assert!(hits >= 5, "{report}");
    let ratio = report["hit_ratio"]["overall"].as_f64().unwrap();
    assert!(ratio > 0.0 && ratio < 1.0, "{report}");
}

#[tokio::test(flavor = "multi_thread")]
async fn warm_of_a_range_loads_only_its_blocks() {
    let rig = admin_rig("warmrange").await;
    let data = random_bytes(4 * MIB, 64);
    rig.put("big.bin", &data).await;
    rig.forwarder.take();
    let bucket = rig.bucket.clone();
    let (status, started) = post(
        &rig,
        "/admin/warm",
        json!({ "bucket": bucket, "key": "big.bin", "range": "bytes=0-1048575" }),
    )
    .await;
    assert_eq!(status, 202, "{started}");
    let (job, _) = finished_job(&rig, started["id"].as_u64().unwrap()).await;
    assert_eq!(job["bytes_done"], MIB as u64, "{job}");
    assert_eq!(rig.upstream_gets(), 1);
    rig.forwarder.take();
    assert!(rig.get("big.bin", Some("bytes=0-1048575")).await == data[..MIB]);
    assert_eq!(rig.upstream_gets(), 0);
    assert!(rig.get("big.bin", Some("bytes=3145728-")).await == data[3 * MIB..]);
    assert_eq!(rig.upstream_gets(), 1, "the last block was not warmed");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_admin_requests_get_clear_errors() {
    let rig = admin_rig("adminbad").await;
    let bucket = rig.bucket.clone();
    let cases = [
        (
            "/admin/purge",
            json!({ "bucket": bucket, "key": "k", "prefix": "p" }),
            400,
            "exactly one of",
        ),
        (
            "/admin/warm",
            json!({ "bucket": bucket }),
            400,
            "exactly one of",
        ),
        (
            "/admin/warm",
            json!({ "bucket": bucket, "key": "k", "range": "lines=1-2" }),
            400,
            "Range header value",
        ),
        (
            "/admin/purge",
            json!({ "bucket": bucket, "key": "k", "range": "bytes=0-1" }),
            400,
            "whole objects",
        ),
        ("/admin/purge", json!({ "key": "k" }), 422, "bucket"),
        (
            "/admin/warm",
            json!({ "bucket": "", "prefix": "p" }),
            400,
            "bucket",
        ),
    ];
    for (path, body, expected, says) in cases {
        let (status, answer) = admin(&rig, "POST", path, Some(body.clone())).await;
        assert_eq!(status, expected, "{path} {body}: {answer}");
        let message = answer["error"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{path} {body}: {message}");
    }
    let (status, answer) = admin(&rig, "GET", "/admin/jobs/999", None).await;
    assert_eq!(status, 404, "{answer}");
    // A listing that fails ends its job as failed, saying why.
    let (status, started) = post(
        &rig,
        "/admin/warm",
        json!({ "bucket": "no-such-bucket-anywhere", "prefix": "" }),
    )
    .await;
    assert_eq!(status, 202, "{started}");
    let (job, _) = finished_job(&rig, started["id"].as_u64().unwrap()).await;
    assert_eq!(job["state"], "failed", "{job}");
    // The cause is said once, whole.
    let error = job["errors"][0].as_str().unwrap_or_default();
    assert_eq!(
        error, "listing the upstream failed: the upstream has no such bucket",
        "{job}"
    );

    // Nothing is reachable without the token.
    for (method, path) in [
        ("POST", "/admin/warm"),
        ("GET", "/admin/jobs/1"),
        ("GET", "/admin/cache"),
    ] {
        let url = format!("{}{path}", rig.portico().admin);
        let (status, _, _) = http_send(method, &url, &[], Bytes::new()).await;
        assert_eq!(status, 401, "{method} {path}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_api_can_listen_apart_from_health_and_metrics() {
    let rig = Rig::start("admin-apart", |settings| {
        settings.admin_extra = format!("token = \"{TOKEN}\"\napi_listen = \"127.0.0.1:0\"\n");
    })
    .await;
    let portico = rig.portico();
    let api = portico
        .admin_api
        .clone()
        .expect("the admin API's own address");
    assert_ne!(api, portico.admin);
    let bearer = format!("Bearer {TOKEN}");
    let auth = [("authorization", bearer.as_str())];
    let get = |base: &str, path: &str| {
        let url = format!("{base}{path}");
        async move { http_send("GET", &url, &auth, Bytes::new()).await.0 }
    };
    // Probes and Prometheus on admin.listen; the admin API is not there.
    assert_eq!(get(&portico.admin, "/healthz").await, 200);
    assert_eq!(get(&portico.admin, "/metrics").await, 200);
    assert_eq!(get(&portico.admin, "/admin/cache").await, 404);
    // The admin API on its own listener, still behind the token; nothing else there.
    assert_eq!(get(&api, "/admin/cache").await, 200);
    assert_eq!(get(&api, "/metrics").await, 404);
    let (status, _, _) = http_send("GET", &format!("{api}/admin/cache"), &[], Bytes::new()).await;
    assert_eq!(status, 401);
}
