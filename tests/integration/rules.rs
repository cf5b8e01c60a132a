//! `[[rules]]` against MinIO: an immutable prefix is never revalidated after its first
//! read, a pass-through prefix never enters the cache (reads, HEADs and write-through
//! uploads all go to the upstream), everything else follows `[cache]`, and the access log
//! names the rule that applied.

use portico_testkit::random_bytes;

use crate::support::{Rig, put_object};

const MIB: usize = 1 << 20;

/// A rig whose global metadata TTL is `0s` (every read revalidates), with `shards/`
/// immutable and `scratch/` passed through, and write-through on.
async fn rules_rig() -> Rig {
    let mut rig = Rig::start("rules", |settings| {
        settings.metadata_ttl = "0s";
        settings.write_through = true;
        settings.log = "access_log = true\n".to_owned();
    })
    .await;
    rig.settings.tables = format!(
        "[[rules]]\nname = \"shards\"\nbucket = \"{bucket}\"\nprefix = \"shards/\"\nmetadata_ttl = \"immutable\"\n\n[[rules]]\nname = \"scratch\"\nbucket = \"rules*\"\nprefix = \"scratch/\"\ncache = false\n",
        bucket = rig.bucket
    );
    rig.restart_portico().await;
    rig
}

/// Object GETs and HEADs the upstream received since the last call.
fn upstream(rig: &Rig) -> (usize, usize) {
    let seen = rig.forwarder.take();
    let count = |method: &str| {
        seen.iter()
            .filter(|seen| seen.method == method && seen.is_object())
            .count()
    };
    (count("GET"), count("HEAD"))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_immutable_prefix_is_not_revalidated_and_a_pass_through_prefix_is_never_cached() {
    let rig = rules_rig().await;
    let shard = random_bytes(3 * MIB / 2, 1);
    let scratch = random_bytes(3 * MIB / 2, 2);
    let other = random_bytes(1000, 3);
    rig.put("shards/0001", &shard).await;
    rig.put("scratch/run", &scratch).await;
    rig.put("other/x", &other).await;
    rig.forwarder.take();

    // shards/: one discovery, then no upstream request at all.
    assert!(rig.get("shards/0001", None).await == shard);
    // Its two 1 MiB blocks in one GET, and the HEAD that learns the checksums the SDK
    // asks for.
    let (gets, heads) = upstream(&rig);
    assert_eq!(gets, 1);
    assert!(heads <= 1, "{heads}");
    for _ in 0..3 {
        assert!(rig.get("shards/0001", Some("bytes=1000-1999")).await == shard[1000..2000]);
        rig.head("shards/0001").await;
    }
    assert_eq!(upstream(&rig), (0, 0));

    // other/: the global TTL of 0s revalidates every read.
    assert!(rig.get("other/x", None).await == other);
    upstream(&rig);
    for _ in 0..3 {
        assert!(rig.get("other/x", None).await == other);
    }
    assert_eq!(upstream(&rig), (0, 3));

    // scratch/: every GET, ranged GET and HEAD is the upstream's, said in Cache-Status.
    for _ in 0..2 {
        assert!(rig.get("scratch/run", None).await == scratch);
    }
    assert!(rig.get("scratch/run", Some("bytes=10-19")).await == scratch[10..20]);
    let head = rig.head("scratch/run").await;
    assert_eq!(head.content_length(), Some(scratch.len() as i64));
    assert_eq!(upstream(&rig), (3, 1));

    // A write-through upload under scratch/ is not cached either; one elsewhere is.
    let uploaded = random_bytes(1000, 4);
    put_object(&rig.client, &rig.bucket, "scratch/uploaded", &uploaded).await;
    let written = random_bytes(1000, 5);
    put_object(&rig.client, &rig.bucket, "other/uploaded", &written).await;

    // With the upstream gone, only what the cache holds is served: the shard (immutable,
    // no revalidation needed), the write-through upload outside scratch/ (stale, kept by
    // serve_stale_on_error), and nothing under scratch/.
    let mut rig = rig;
    rig.forwarder.stop().await;
    assert!(rig.get("shards/0001", Some("bytes=0-99")).await == shard[..100]);
    assert!(rig.get("other/uploaded", None).await == written);
    for key in ["scratch/run", "scratch/uploaded"] {
        let error = rig.try_get(key, None).await.unwrap_err();
        assert!(
            error.contains("503") || error.contains("502") || error.contains("ServiceUnavailable"),
            "{key} was not served from the cache: {error}"
        );
    }
    rig.forwarder.restart().await;

    let logs = rig.portico().logs();
    let lines = |key: &str, rule: &str| {
        logs.lines()
            .filter(|line| line.contains("portico::access"))
            .filter(|line| line.contains(&format!("key=\"{key}\" ")))
            .filter(|line| line.contains(&format!("rule=\"{rule}\" ")))
            .count()
    };
    assert!(lines("shards/0001", "shards") >= 7, "{logs}");
    assert!(lines("scratch/run", "scratch") >= 4, "{logs}");
    assert!(
        logs.lines().any(|line| line.contains("key=\"scratch/run\"")
            && line.contains("cache_status=\"Portico; fwd=bypass\"")),
        "{logs}"
    );
    assert!(lines("other/x", "-") >= 4, "{logs}");
}
