//! Objects that change while they are read: a change found before the headers is read
//! again on the new version, one found after them aborts the body; bytes of two versions
//! are never mixed.

use std::sync::Arc;

use super::memory::MemorySource;
use super::*;

#[tokio::test(start_paused = true)]
async fn a_version_change_before_the_first_byte_is_read_again() {
    let source = Arc::new(MemorySource::default());
    source.put("model", body(2 * BLOCK as usize, 1), 1);
    let read = read_path(&source, settings()).await;
    // Learn version 1 and its block 0.
    get(&read, "model", range(0, 9)).await;
    let second = body(2 * BLOCK as usize, 2);
    source.put("model", second.clone(), 2);
    // Block 1 is fetched pinned to version 1, refused, and the GET starts over.
    let answer = get_plain(&read, &object("model"), range(BLOCK, BLOCK + 9))
        .await
        .unwrap();
    assert_eq!(answer.meta.etag, "\"v2\"");
    let (bytes, error) = collect(answer).await;
    assert_eq!(error, None);
    assert_eq!(bytes, second[BLOCK as usize..BLOCK as usize + 10]);
}

#[tokio::test(start_paused = true)]
async fn the_blocks_after_the_first_are_asked_for_with_it_so_an_overwrite_after_the_headers_cuts_no_short_read()
 {
    let (source, first, read) = holding("model", 3 * BLOCK as usize).await;
    // Headers are out once block 0 is read; blocks 1 and 2 (the readahead) were asked
    // for with it, so the overwrite that follows finds them answered already.
    let answer = get_plain(&read, &object("model"), None).await.unwrap();
    source.put("model", body(3 * BLOCK as usize, 2), 2);
    let (bytes, error) = collect(answer).await;
    assert_eq!(error, None, "the read was cut off");
    assert!(bytes == first, "the version the read started with");
}

/// An overwrite lands between the requests a read starts (the discovery's GET of the
/// first blocks answered, the stream of the blocks after them not yet sent): the read's
/// headers wait for every answer, so it starts over on the new version instead of cutting
/// its body off.
#[tokio::test(start_paused = true)]
async fn an_overwrite_between_a_read_s_first_fetches_restarts_it_before_its_headers() {
    let blocks = DISCOVERY_BLOCKS + 2;
    let size = (blocks * BLOCK) as usize;
    let source = Arc::new(MemorySource::default());
    source.put("model", body(size, 1), 1);
    let second = body(size, 2);
    let read = read_path(&source, settings()).await;
    let discovery = format!("bytes=0-{}", DISCOVERY_BLOCKS * BLOCK - 1);
    let rest = format!("bytes={}-{}", DISCOVERY_BLOCKS * BLOCK, blocks * BLOCK - 1);
    let release = source.hold_next("model", &rest);
    let reader = tokio::spawn({
        let read = read.clone();
        async move { get_plain(&read, &object("model"), None).await }
    });
    tokio::time::sleep(LATENCY * 5).await;
    assert_eq!(
        source.gets_of("model", &discovery),
        1,
        "the first blocks answered"
    );
    assert!(
        !reader.is_finished(),
        "the headers wait for the stream's answer"
    );
    source.put("model", second.clone(), 2);
    release.send(()).unwrap();
    let answer = reader.await.unwrap().expect("the GET starts");
    assert_eq!(answer.meta.etag, "\"v2\"");
    let (bytes, error) = collect(answer).await;
    assert_eq!(error, None, "the read was cut off");
    assert!(bytes == second, "the new version, whole");
    assert_eq!(read.metrics().read_aborts("changed"), 0);
}

/// The read's first block is cached, the blocks after it are not, and the object
/// changed upstream (out of band: the metadata is still fresh). The fetches started with
/// the first block find the version gone before the headers go out: the read is retried
/// from fresh metadata.
#[tokio::test(start_paused = true)]
async fn a_cached_first_block_of_an_overwritten_version_is_not_sent_before_the_rest_is_answered() {
    let source = Arc::new(MemorySource::default());
    source.put("model", body(3 * BLOCK as usize, 1), 1);
    let second = body(3 * BLOCK as usize, 2);
    let read = read_path(&source, settings()).await;
    get(&read, "model", range(0, 9)).await;
    source.put("model", second.clone(), 2);
    let answer = get_plain(&read, &object("model"), None).await.unwrap();
    assert_eq!(answer.meta.etag, "\"v2\"");
    let (bytes, error) = collect(answer).await;
    assert_eq!(error, None);
    assert!(bytes == second);
    assert_eq!(read.metrics().read_aborts("changed"), 0);
}

/// A block past the readahead, fetched after the headers went out (the read's fifth hole:
/// a read opens at most four streams), finds its version gone: the bytes are in neither
/// the cache nor the origin, so the body is aborted.
#[tokio::test(start_paused = true)]
async fn a_version_change_found_past_the_first_fetches_aborts_the_body() {
    let (source, first, read) = holding("model", 15 * BLOCK as usize).await;
    // Blocks 0-1, 3-4, 6-7, 9-10 and 12-13 cached: holes at 2, 5, 8, 11 and 14.
    for pair in [0, 3, 6, 9, 12] {
        get(&read, "model", range(pair * BLOCK, (pair + 2) * BLOCK - 1)).await;
    }
    // Four streams bring the holes at blocks 2 to 11 before the headers; then version 2
    // replaces version 1, whose block 14 is gone upstream when the body needs it.
    let answer = get_plain(&read, &object("model"), None).await.unwrap();
    source.put("model", body(15 * BLOCK as usize, 2), 2);
    assert_eq!(answer.meta.etag, "\"v1\"");
    let (bytes, error) = collect(answer).await;
    assert_eq!(error, Some(ReadError::Changed));
    assert!(
        bytes.len() <= 14 * BLOCK as usize && bytes == first[..bytes.len()],
        "only version 1's bytes before the abort"
    );
    assert_eq!(read.metrics().read_aborts("changed"), 1, "counted by cause");
    // The stale metadata was dropped: the next GET reads version 2.
    let answer = get_plain(&read, &object("model"), None).await.unwrap();
    assert_eq!(answer.meta.etag, "\"v2\"");
}

/// A GET's conditions are judged against the version found before a byte of it is read:
/// a refusal (a 304 or 412 to be) reads no block, and an `If-Range` that names another
/// version turns the range into the whole object, in the one call.
#[tokio::test(start_paused = true)]
async fn conditions_are_judged_before_a_byte_is_read() {
    let (source, data, read) = holding("model", 3 * BLOCK as usize).await;
    let object = object("model");
    head_plain(&read, &object).await.unwrap();
    let asked_before = source.calls().len();
    let refuse = |_: &ObjectMeta| Judgement::Refuse;
    let request = GetRequest {
        object: &object,
        range: range(0, 9),
        checksums: false,
        policy: read.policy(&object),
        judge: &refuse,
        tenant: &Arc::new(crate::tenant::Tenant::unlimited("t")),
    };
    match read.get(request).await.unwrap() {
        GetAnswer::Refused { meta, .. } => assert_eq!(meta.size, data.len() as u64),
        GetAnswer::Read(_) => panic!("a refused GET was read"),
    }
    assert_eq!(
        source.calls().len(),
        asked_before,
        "a refused GET read a block"
    );

    let whole = |_: &ObjectMeta| Judgement::Serve { range: false };
    let request = GetRequest {
        object: &object,
        range: range(0, 9),
        checksums: false,
        policy: read.policy(&object),
        judge: &whole,
        tenant: &Arc::new(crate::tenant::Tenant::unlimited("t")),
    };
    let GetAnswer::Read(answer) = read.get(request).await.unwrap() else {
        panic!("the GET was refused");
    };
    assert_eq!(answer.selection, crate::types::Selection::Whole);
    let (bytes, error) = collect(answer).await;
    assert_eq!(error, None);
    assert!(bytes == data, "the whole object, not the range");
}

/// A cold read of many blocks (more than the readahead) in an unversioned bucket, its
/// object overwritten after its headers: the blocks come in streams the origin began
/// before the overwrite, so the read completes with the version it announced, in a few
/// requests rather than one a block.
#[tokio::test(start_paused = true)]
async fn a_long_cold_read_overtaken_by_an_overwrite_completes_with_its_version() {
    let (source, first, read) = holding("model", 20 * BLOCK as usize + 33).await;
    let answer = get_plain(&read, &object("model"), None).await.unwrap();
    source.put("model", body(20 * BLOCK as usize + 33, 2), 2);
    let (bytes, error) = collect(answer).await;
    assert_eq!(error, None, "the read was cut off");
    assert!(bytes == first, "the version the read started with");
    let calls = source.calls();
    assert!(
        calls.len() <= 1 + crate::read::stream::STREAMS_PER_READ,
        "{calls:?}"
    );
    // Every whole block once (the last, short one is not a whole block).
    for index in 0..20 {
        assert_eq!(
            fetches_of(&source, "model", index),
            1,
            "block {index}: {calls:?}"
        );
    }
}
