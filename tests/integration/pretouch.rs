//! Block buffers kept for reuse and the memory tier's pretouch (`cache.memory_pretouch`):
//! a pretouched node holds its tier's capacity in resident buffers from the start, the
//! buffers free beside the tier never exceed its room and a small spare, and a buffer that held one
//! object's block serves the next object's bytes exactly. Without the pretouch, the
//! buffers of purged blocks are reused the same way.

use std::time::{Duration, Instant};

use bytes::Bytes;
use portico_testkit::http_send;
use serde_json::Value;

use crate::support::{Rig, random_bytes};

const MIB: usize = 1024 * 1024;
const TOKEN: &str = "pretouch-admin-token";
/// The memory tier: 32 blocks of 1 MiB.
const CAPACITY: u64 = 32 * MIB as u64;
/// The free buffers kept beyond its room: a sixteenth of it.
const SPARE: u64 = CAPACITY / 16;

async fn rig(prefix: &str, pretouch: bool) -> Rig {
    Rig::start(prefix, |settings| {
        settings.memory_capacity = "32MiB";
        settings.memory_pretouch = Some(pretouch);
        settings.admin_extra = format!("token = \"{TOKEN}\"\n");
        settings.tables = "[prefetch]\nenabled = false\n".to_owned();
    })
    .await
}

async fn admin(rig: &Rig, method: &str, path: &str, body: &str) -> Value {
    let url = format!("{}{path}", rig.portico().admin);
    let bearer = format!("Bearer {TOKEN}");
    let headers = [
        ("authorization", bearer.as_str()),
        ("content-type", "application/json"),
    ];
    let (status, _, answer) = http_send(method, &url, &headers, Bytes::from(body.to_owned())).await;
    assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&answer));
    serde_json::from_slice(&answer).expect("JSON")
}

/// The memory tier's (used, kept free) bytes, as `/admin/cache` reports them.
async fn memory(rig: &Rig) -> (u64, u64) {
    let report = admin(rig, "GET", "/admin/cache", "").await;
    let memory = &report["memory"];
    (
        memory["used_bytes"].as_u64().expect("used"),
        memory["kept_buffer_bytes"].as_u64().expect("kept"),
    )
}

/// Waits (up to 5 s) until `holds` is true of the memory tier's (used, kept) bytes; the
/// last ones seen.
async fn memory_until(rig: &Rig, holds: impl Fn(u64, u64) -> bool) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (used, kept) = memory(rig).await;
        if holds(used, kept) || Instant::now() > deadline {
            return (used, kept);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|value| value.parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// Reads A, purges it (its buffers come back: at least `kept_after_purge` bytes of
/// them), reads B in those buffers: both exact, and the free buffers never exceed the
/// tier's room.
async fn reuse_serves_exact_bytes(rig: &Rig, kept_after_purge: u64) {
    let (a, b) = (random_bytes(24 * MIB, 31), random_bytes(24 * MIB, 32));
    rig.put("a.bin", &a).await;
    rig.put("b.bin", &b).await;
    assert!(rig.get("a.bin", None).await == a);
    let (used, kept) = memory_until(rig, |used, kept| used + kept <= CAPACITY + SPARE).await;
    assert!(used + kept <= CAPACITY + SPARE, "used {used} + kept {kept}");

    let body = format!("{{\"bucket\": \"{}\", \"key\": \"a.bin\"}}", rig.bucket);
    admin(rig, "POST", "/admin/purge", &body).await;
    let wanted = kept_after_purge;
    let (_, kept_after_purge) = memory_until(rig, |_, kept| kept >= wanted).await;
    assert!(
        kept_after_purge >= wanted,
        "the purged blocks' buffers are kept: {kept_after_purge}, {:?}",
        memory(rig).await
    );

    assert!(
        rig.get("b.bin", None).await == b,
        "B, gathered in A's buffers"
    );
    let (used, kept) = memory_until(rig, |used, kept| used + kept <= CAPACITY + SPARE).await;
    assert!(used + kept <= CAPACITY + SPARE, "used {used} + kept {kept}");
    assert!(rig.get("a.bin", None).await == a);
    assert!(rig.get("b.bin", None).await == b);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pretouched_node_holds_its_tier_resident_and_reused_buffers_serve_exact_bytes() {
    let rig = rig("pretouch", true).await;
    // Started (the testkit waited for the pretouch to settle).
    let (used, kept) = memory(&rig).await;
    assert_eq!(
        kept,
        CAPACITY - used + SPARE,
        "every block of the tier's room and the spare, touched"
    );
    let pid = rig.portico().pid().expect("pid");
    assert!(resident_bytes(pid) >= CAPACITY, "the pages are resident");
    reuse_serves_exact_bytes(&rig, 16 * MIB as u64).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_pretouch_the_buffers_of_purged_blocks_are_reused() {
    let rig = rig("no-pretouch", false).await;
    let (_, kept) = memory(&rig).await;
    assert_eq!(kept, 0, "nothing touched at start");
    // Evicted while A was read, and purged after: whichever blocks A left in the tier.
    reuse_serves_exact_bytes(&rig, MIB as u64).await;
}
