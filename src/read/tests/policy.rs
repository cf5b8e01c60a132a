//! What an object's policy makes of its reads: an object without an ETag streamed and
//! never cached, and a rule's metadata TTL, negative TTL and prefetch over its prefix.

use std::sync::Arc;
use std::time::Duration;

use super::*;

#[tokio::test(start_paused = true)]
async fn an_object_without_an_etag_is_streamed_and_never_cached() {
    let source = Arc::new(MemorySource::default());
    let expected = body(2 * BLOCK as usize, 1);
    source.put("plain", expected.clone(), 1);
    source.strip_etag("plain");
    let read = read_path(&source, settings()).await;
    for _ in 0..2 {
        let (bytes, status) = get(&read, "plain", None).await;
        assert!(bytes == expected);
        assert_eq!(status, "Portico; fwd=bypass");
    }
    // The first read: the discovery's GET, which names no version to cache its bytes
    // under, and the GET of the read's bytes; the second (the metadata known): the GET of
    // its bytes. Never from the cache.
    let gets = source
        .calls()
        .iter()
        .filter(|call| matches!(call, Call::Get { .. }))
        .count();
    assert_eq!(gets, 3);
}

#[tokio::test(start_paused = true)]
async fn a_rule_sets_the_metadata_ttl_negative_ttl_and_prefetch_of_its_prefix() {
    let source = Arc::new(MemorySource::default());
    let rule = |name: &str, prefix: &str| RuleConfig {
        name: name.to_owned(),
        bucket: "bucket".parse().unwrap(),
        prefix: prefix.to_owned(),
        ..RuleConfig::default()
    };
    let rules = [
        RuleConfig {
            metadata_ttl: Some(MetadataTtl::Immutable),
            negative_ttl: Some(HumanDuration::secs(0)),
            prefetch: Some(false),
            ..rule("shards", "shards/")
        },
        RuleConfig {
            metadata_ttl: Some(MetadataTtl::After(Duration::ZERO)),
            ..rule("live", "live/")
        },
    ];
    let defaults = Policy {
        rule: None,
        metadata_ttl: MetadataTtl::After(TTL),
        negative_ttl: Duration::from_secs(5),
        cache: true,
        prefetch: true,
    };
    let settings = ReadSettings {
        rules: Arc::new(Rules::new(&rules, defaults)),
        prefetch_window_blocks: 4,
        ..settings()
    };
    let read = read_path(&source, settings).await;
    let heads = |key: &str| {
        source
            .calls()
            .iter()
            .filter(|call| matches!(call, Call::Head { key: asked, .. } if asked == key))
            .count()
    };
    let expected = body(8 * BLOCK as usize, 1);
    for key in ["shards/0", "live/0", "other/0"] {
        source.put(key, expected.clone(), 1);
        get(&read, key, range(0, 9)).await;
    }
    tokio::time::advance(TTL * 100).await;
    for _ in 0..3 {
        for key in ["shards/0", "live/0", "other/0"] {
            let (bytes, _) = get(&read, key, range(0, 9)).await;
            assert!(bytes == expected[..10]);
        }
    }
    // Immutable: never revalidated. `0s`: every read. The default TTL: once past it.
    assert_eq!(heads("shards/0"), 0);
    assert_eq!(heads("live/0"), 3);
    assert_eq!(heads("other/0"), 1);

    // Sequential reads prefetch, except under the rule that turns prefetch off.
    for key in ["shards/0", "other/0"] {
        for index in 1..4 {
            get(&read, key, range(index * BLOCK, (index + 1) * BLOCK - 1)).await;
        }
    }
    tokio::time::sleep(LATENCY * 4).await;
    assert_eq!(fetches_of(&source, "other/0", 4), 1);
    assert_eq!(fetches_of(&source, "shards/0", 4), 0);

    // A negative TTL of 0s under the rule: a missing key is asked for every time.
    for key in ["shards/missing", "other/missing"] {
        for _ in 0..2 {
            assert!(get_plain(&read, &object(key), None).await.is_err());
        }
    }
    let asked = |key: &str| {
        source
            .calls()
            .iter()
            .filter(|call| match call {
                Call::Head { key: asked, .. } | Call::Get { key: asked, .. } => asked == key,
            })
            .count()
    };
    assert_eq!(asked("shards/missing"), 2);
    assert_eq!(asked("other/missing"), 1);
}
