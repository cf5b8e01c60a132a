//! The metadata step's freshness: TTLs, negative TTLs, and stale serves while the source
//! fails.

use std::sync::Arc;

use super::memory::MemorySource;
use super::*;

#[tokio::test(start_paused = true)]
async fn metadata_is_revalidated_once_its_ttl_has_passed() {
    let source = Arc::new(MemorySource::default());
    source.put("config", body(100, 1), 1);
    let read = read_path(&source, settings()).await;
    get(&read, "config", None).await;
    tokio::time::advance(TTL - Duration::from_secs(1)).await;
    let (_, status) = get(&read, "config", None).await;
    assert_eq!(source.calls().len(), 1, "fresh metadata asks nothing");
    assert_eq!(status, "Portico; hit; ttl=1; detail=memory");
    tokio::time::advance(Duration::from_secs(2)).await;
    let (_, status) = get(&read, "config", None).await;
    assert_eq!(
        status,
        "Portico; fwd=stale; fwd-status=200; ttl=60; detail=memory"
    );
    assert_eq!(
        source.calls()[1..],
        [Call::Head {
            key: "config".to_owned(),
            conditional: false,
        }]
    );
    // The same bytes written again with other headers keep the ETag: the revalidating HEAD
    // takes the new headers and keeps the blocks.
    tokio::time::advance(TTL + Duration::from_secs(1)).await;
    source.put_with("config", body(100, 1), 1, |meta| {
        meta.content_type = Some("application/json".to_owned());
        meta.user_metadata = vec![("owner".to_owned(), "ops".to_owned())];
    });
    let (bytes, status) = get(&read, "config", None).await;
    assert_eq!(bytes, body(100, 1));
    assert_eq!(
        status,
        "Portico; fwd=stale; fwd-status=200; ttl=60; detail=memory"
    );
    let meta = head_plain(&read, &object("config")).await.unwrap();
    assert_eq!(meta.content_type.as_deref(), Some("application/json"));
    assert_eq!(meta.user_metadata, [("owner".to_owned(), "ops".to_owned())]);
    // A changed object found at revalidation is read in its new version.
    tokio::time::advance(TTL + Duration::from_secs(1)).await;
    let second = body(100, 2);
    source.put("config", second.clone(), 2);
    let (bytes, status) = get(&read, "config", None).await;
    assert_eq!(bytes, second);
    assert!(status.starts_with("Portico; fwd=miss"), "{status}");
}

#[tokio::test(start_paused = true)]
async fn a_missing_object_is_remembered_for_the_negative_ttl() {
    let source = Arc::new(MemorySource::default());
    let read = read_path(&source, settings()).await;
    for _ in 0..2 {
        let error = get_plain(&read, &object("nope"), None).await.err();
        assert!(matches!(
            error,
            Some(ReadError::NotFound(Missing::NoSuchKey, _))
        ));
    }
    assert_eq!(source.calls().len(), 1);
    tokio::time::advance(Duration::from_secs(6)).await;
    source.put("nope", body(10, 1), 1);
    let (bytes, _) = get(&read, "nope", None).await;
    assert_eq!(bytes, body(10, 1));
}

#[tokio::test(start_paused = true)]
async fn a_failed_revalidation_serves_the_cached_version_only_when_allowed() {
    for serve_stale in [true, false] {
        let source = Arc::new(MemorySource::default());
        let expected = body(BLOCK as usize + 5, 1);
        source.put("index", expected.clone(), 1);
        let settings = ReadSettings {
            serve_stale_on_error: serve_stale,
            ..settings()
        };
        let read = read_path(&source, settings).await;
        get(&read, "index", None).await;
        tokio::time::advance(TTL + Duration::from_secs(1)).await;
        source.set_down(true);
        let answer = get_plain(&read, &object("index"), None).await;
        if serve_stale {
            let answer = answer.unwrap();
            let status = answer.status.to_string();
            assert_eq!(status, "Portico; hit; detail=stale-upstream-failed");
            let (bytes, error) = collect(answer).await;
            assert_eq!((bytes, error), (expected, None));
        } else {
            let error = answer.err();
            assert!(matches!(error, Some(ReadError::Upstream(_))), "{error:?}");
        }
        // The record stays stale: once the source is back, the next read asks it.
        source.set_down(false);
        get(&read, "index", None).await;
        let heads = source
            .calls()
            .iter()
            .filter(|call| matches!(call, Call::Head { .. }))
            .count();
        assert_eq!(heads, 2, "serve_stale_on_error = {serve_stale}");
    }
}
