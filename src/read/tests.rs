//! The read path against a [`BlockSource`](crate::source::BlockSource) held in memory, with the clock paused: what it
//! asks the source for, and what it answers, when requests coalesce, objects change, TTLs
//! run out, the source is slow or down, and reads turn sequential.

mod ahead;
mod cluster;
mod discovery;
mod errors;
mod integrity;
mod memory;
mod metadata;
mod policy;
mod races;
mod simulation;
mod steps;
mod versions;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::PrefetchLimits;
use super::stream::DISCOVERY_BLOCKS;
use super::{GetAnswer, GetRequest, Judgement, ObjectRead, ReadError, ReadPath, ReadSettings};
use crate::budget::MemoryBudget;
use crate::cache::BlockCache;
use crate::config::{ByteSize, CacheConfig, HumanDuration, MetadataTtl, RuleConfig};
use crate::object::Missing;
use crate::object::ObjectMeta;
use crate::rules::{Policy, Rules};
use crate::shutdown::Shutdown;
use crate::telemetry::Metrics;
use crate::types::{ObjectRef, RangeRequest};
use memory::{Call, MemorySource};

const BLOCK: u64 = 4096;
const TTL: Duration = Duration::from_secs(60);
/// How long a source takes to answer, unless told otherwise.
const LATENCY: Duration = Duration::from_millis(10);
/// How long a stalled answer takes: far longer than any test waits for.
const STALL: Duration = Duration::from_secs(600);

fn settings() -> ReadSettings {
    ReadSettings {
        block_size: BLOCK,
        rules: Arc::new(Rules::uniform(Policy {
            rule: None,
            metadata_ttl: MetadataTtl::After(TTL),
            negative_ttl: Duration::from_secs(5),
            cache: true,
            prefetch: true,
        })),
        readahead_blocks: 2,
        prefetch_window_blocks: 0,
        prefetch_limits: PrefetchLimits {
            fetches: 4,
            blocks: 4,
        },
        hedge_quantile: 0.0,
        hedge_min_delay: Duration::from_millis(50),
        serve_stale_on_error: false,
        verify: crate::read::Verify::OFF,
        max_concurrent_fills: 64,
        learn_checksums: true,
    }
}

/// A read path over `source` with a memory-only cache.
async fn read_path(source: &Arc<MemorySource>, settings: ReadSettings) -> ReadPath {
    member_read_path(source, settings, None).await
}

/// A source holding `key` (`len` bytes of version 1), those bytes, and a read path over
/// the source with [`settings`].
async fn holding(key: &str, len: usize) -> (Arc<MemorySource>, Vec<u8>, ReadPath) {
    let source = Arc::new(MemorySource::default());
    let data = body(len, 1);
    source.put(key, data.clone(), 1);
    let read = read_path(&source, settings()).await;
    (source, data, read)
}

/// [`read_path`] of a cluster member whose other members are `peers`.
async fn member_read_path(
    source: &Arc<MemorySource>,
    settings: ReadSettings,
    peers: Option<Arc<dyn crate::source::Peers>>,
) -> ReadPath {
    sized_read_path(source, settings, peers, ByteSize::mib(16)).await
}

/// [`member_read_path`] with a memory tier of `memory`.
async fn sized_read_path(
    source: &Arc<MemorySource>,
    settings: ReadSettings,
    peers: Option<Arc<dyn crate::source::Peers>>,
    memory: ByteSize,
) -> ReadPath {
    tiered_read_path(source, settings, peers, memory, None).await
}

/// [`sized_read_path`] with a disk tier of `disk` bytes in `.0`, when given.
async fn tiered_read_path(
    source: &Arc<MemorySource>,
    settings: ReadSettings,
    peers: Option<Arc<dyn crate::source::Peers>>,
    memory: ByteSize,
    disk: Option<(&std::path::Path, ByteSize)>,
) -> ReadPath {
    let metrics = Arc::new(Metrics::new());
    let config = CacheConfig {
        dir: disk.map_or_else(Default::default, |(dir, _)| dir.to_owned()),
        memory_capacity: memory,
        disk_capacity: disk.map_or(ByteSize(0), |(_, bytes)| bytes),
        block_size: ByteSize(BLOCK),
        ..CacheConfig::default()
    };
    let cache = BlockCache::open(&config, metrics.clone()).await.unwrap();
    let budget = MemoryBudget::new(64 << 20, Duration::from_secs(1), metrics.clone());
    let shutdown = Shutdown::never();
    ReadPath::new(
        settings,
        super::ReadParts {
            cache,
            source: source.clone(),
            metrics,
            budget,
            shutdown,
            peers,
            fill_threads: crate::fill_threads::FillThreads::serving(),
        },
    )
}

/// `len` bytes that differ from block to block and from version to version.
fn body(len: usize, version: u32) -> Vec<u8> {
    (0..len)
        .map(|at| (at / 7 + at / 4096 * 13 + version as usize * 101) as u8)
        .collect()
}

fn object(key: &str) -> ObjectRef {
    ObjectRef::new("bucket", key).unwrap()
}

fn range(first: u64, last: u64) -> Option<RangeRequest> {
    Some(RangeRequest::From {
        first,
        last: Some(last),
    })
}

/// The whole body of `read`, or the error that aborted it after the bytes before it.
async fn collect(read: ObjectRead) -> (Vec<u8>, Option<ReadError>) {
    collect_body(read.body).await
}

/// Runs each of `readers` on a task of its own, all at once; their outputs, in order.
async fn concurrently<F>(readers: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let tasks: Vec<_> = readers.into_iter().map(tokio::spawn).collect();
    let mut outputs = Vec::with_capacity(tasks.len());
    for task in tasks {
        outputs.push(task.await.expect("a reader panicked"));
    }
    outputs
}

/// The bytes of `body`, or the error that aborted it after the bytes before it.
async fn collect_body(mut body: super::BodyStream) -> (Vec<u8>, Option<ReadError>) {
    let mut bytes = Vec::new();
    while let Some(item) = body.next().await {
        match item {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(error) => return (bytes, Some(error)),
        }
    }
    (bytes, None)
}

/// A GET of `range` of `object` through `read` without conditions or checksums, under
/// the object's policy.
async fn get_plain(
    read: &ReadPath,
    object: &ObjectRef,
    range: Option<RangeRequest>,
) -> Result<ObjectRead, ReadError> {
    let serve = |_: &ObjectMeta| Judgement::Serve { range: true };
    let request = GetRequest {
        object,
        range,
        checksums: false,
        policy: read.policy(object),
        judge: &serve,
        tenant: &Arc::new(crate::tenant::Tenant::unlimited("t")),
    };
    match read.get(request).await? {
        GetAnswer::Read(read) => Ok(read),
        GetAnswer::Refused { .. } => panic!("a GET without conditions was refused"),
    }
}

/// The metadata of `object` as a plain HEAD through `read` finds it.
async fn head_plain(read: &ReadPath, object: &ObjectRef) -> Result<Arc<ObjectMeta>, ReadError> {
    let (meta, _) = read.head(object, false, read.policy(object)).await?;
    Ok(meta)
}

/// `range` of `key` read through `read`, with what the cache did.
async fn get(read: &ReadPath, key: &str, range: Option<RangeRequest>) -> (Vec<u8>, String) {
    let answer = get_plain(read, &object(key), range).await.unwrap();
    let status = answer.status.to_string();
    let (bytes, error) = collect(answer).await;
    assert_eq!(error, None, "the body of {key} was aborted");
    (bytes, status)
}

fn block_range(index: u64) -> String {
    format!("bytes={}-{}", index * BLOCK, (index + 1) * BLOCK - 1)
}

/// GETs of `key` that brought block `index`: fetched alone, or in a stream of many.
fn fetches_of(source: &MemorySource, key: &str, index: u64) -> usize {
    let covers = |range: &str| {
        let Some((first, last)) = range
            .strip_prefix("bytes=")
            .and_then(|range| range.split_once('-'))
        else {
            return false;
        };
        let (Ok(first), Ok(last)) = (first.parse::<u64>(), last.parse::<u64>()) else {
            return false;
        };
        first <= index * BLOCK && (index + 1) * BLOCK - 1 <= last
    };
    source
        .calls()
        .iter()
        .filter(
            |call| matches!(call, Call::Get { key: asked, range } if asked == key && covers(range)),
        )
        .count()
}

#[tokio::test(start_paused = true)]
async fn concurrent_cold_reads_ask_the_source_once_per_block() {
    let (source, expected, read) = holding("shard", 3 * BLOCK as usize + 100).await;
    let answers = concurrently((0..16).map(|_| {
        let read = read.clone();
        async move { get(&read, "shard", None).await }
    }))
    .await;
    let mut statuses = Vec::new();
    for (bytes, status) in answers {
        assert!(bytes == expected, "a reader got other bytes");
        statuses.push(status);
    }
    // One GET found the metadata and brought every block (it asks for as many as a
    // discovery streams, the answer stops at the object's end); every other reader
    // waited for it.
    let calls = source.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let discovery = format!("bytes=0-{}", DISCOVERY_BLOCKS * BLOCK - 1);
    assert_eq!(source.gets_of("shard", &discovery), 1, "{calls:?}");
    let collapsed = statuses.iter().filter(|s| s.contains("collapsed")).count();
    assert_eq!(collapsed, 15, "{statuses:?}");
    // Read again: everything from memory, nothing asked.
    let (bytes, status) = get(&read, "shard", None).await;
    assert!(bytes == expected);
    assert!(status.starts_with("Portico; hit;"), "{status}");
    assert!(status.ends_with("detail=memory"), "{status}");
    assert_eq!(source.calls().len(), 1);
}

/// `shard` (8 blocks) held, its metadata and block 0 read, then a read of blocks 1 to 4
/// whose stream is cut off after block 1: the lookups of blocks 2 and 3 were waiting for
/// it, and fetch them alone; block 3's fetch stalls. Returns once it has, with the cut
/// read's task.
async fn with_block_3_held() -> (
    Arc<MemorySource>,
    Vec<u8>,
    ReadPath,
    tokio::task::JoinHandle<Result<ObjectRead, ReadError>>,
) {
    let (source, expected, read) = holding("shard", 8 * BLOCK as usize).await;
    get(&read, "shard", range(0, 9)).await;
    source.cut_next_stream("shard", BLOCK as usize);
    source.stall_next("shard", &block_range(3));
    let cut = tokio::spawn({
        let read = read.clone();
        async move { get_plain(&read, &object("shard"), range(BLOCK, 5 * BLOCK - 1)).await }
    });
    while source.gets_of("shard", &block_range(3)) == 0 {
        tokio::time::sleep(LATENCY / 10).await;
    }
    (source, expected, read, cut)
}

/// A stream cut off before the blocks its lookups waited for leaves each to a fetch of
/// its own. A read that opens its streams while one of those fetches is slow streams the
/// block again rather than wait for it, and the copy it brings answers both reads: a read
/// of several blocks from there, and one within that block alone (which a read otherwise
/// leaves to its lookup).
#[tokio::test(start_paused = true)]
async fn a_read_streams_a_block_whose_stream_stopped_rather_than_wait_for_its_slow_lone_fetch() {
    let later_reads = [
        (3 * BLOCK, 7 * BLOCK - 1, 7 * BLOCK - 1),
        (3 * BLOCK + 5, 3 * BLOCK + 9, 4 * BLOCK - 1),
    ];
    for (first, last, streamed_to) in later_reads {
        let started = tokio::time::Instant::now();
        let (source, expected, read, cut) = with_block_3_held().await;
        let (bytes, _) = get(&read, "shard", range(first, last)).await;
        assert!(
            bytes == expected[first as usize..=last as usize],
            "{first}-{last}"
        );
        let (bytes, error) = collect(cut.await.unwrap().unwrap()).await;
        assert_eq!(error, None, "the body of shard was aborted");
        assert!(bytes == expected[BLOCK as usize..5 * BLOCK as usize]);
        let elapsed = started.elapsed();
        assert!(elapsed < STALL / 2, "{first}-{last}: {elapsed:?}");
        let streamed = format!("bytes={}-{streamed_to}", 3 * BLOCK);
        let calls = source.calls();
        let lone = usize::from(streamed_to == 4 * BLOCK - 1);
        assert_eq!(
            source.gets_of("shard", &streamed),
            1 + lone,
            "{first}-{last}: {calls:?}"
        );
    }
}

/// As above, with the object overwritten while block 3's lone fetch is held: the stream a
/// later read opens for block 3 is refused the version it announced, and the read learns
/// of the new version from that refusal at once, rather than from the held fetch.
#[tokio::test(start_paused = true)]
async fn a_read_whose_stream_is_refused_the_version_does_not_wait_for_a_held_fetch_to_learn_it() {
    let (source, _, read, cut) = with_block_3_held().await;
    let newer = body(8 * BLOCK as usize, 2);
    source.put("shard", newer.clone(), 2);
    let started = tokio::time::Instant::now();
    let (first, last) = (3 * BLOCK + 5, 3 * BLOCK + 9);
    let (bytes, _) = get(&read, "shard", range(first, last)).await;
    assert!(
        bytes == newer[first as usize..=last as usize],
        "the new version"
    );
    let elapsed = started.elapsed();
    assert!(elapsed < STALL / 2, "{elapsed:?}");
    cut.abort();
}

#[tokio::test(start_paused = true)]
async fn the_reads_one_fetch_releases_take_turns_and_a_hit_or_the_fetch_s_own_read_does_not() {
    let (source, expected, read) = holding("herd", 3 * BLOCK as usize + 100).await;
    let mut in_turns = concurrently((0..4).map(|_| {
        let (read, expected) = (read.clone(), expected.clone());
        async move {
            let answer = get_plain(&read, &object("herd"), None).await.unwrap();
            let turns = answer.body.takes_turns();
            let (bytes, error) = collect(answer).await;
            assert_eq!(error, None);
            assert!(bytes == expected, "a reader got other bytes");
            turns
        }
    }))
    .await;
    // One read fetched; the three it released share the worker in turns.
    in_turns.sort();
    assert_eq!(in_turns, [false, true, true, true]);
    assert_eq!(source.calls().len(), 1);
    // A hit is written whole.
    let answer = get_plain(&read, &object("herd"), None).await.unwrap();
    assert!(!answer.body.takes_turns());
    let (bytes, _) = collect(answer).await;
    assert!(bytes == expected);
}

#[tokio::test(start_paused = true)]
async fn a_discovery_caches_its_block_even_when_the_client_that_started_it_leaves() {
    let (source, expected, read) = holding("shard", BLOCK as usize).await;
    let leaver = tokio::spawn({
        let read = read.clone();
        async move { get(&read, "shard", None).await }
    });
    tokio::time::sleep(LATENCY / 2).await;
    leaver.abort();
    tokio::time::sleep(LATENCY * 2).await;
    // The discovery finished without its client: its block and metadata are both cached.
    let (bytes, status) = get(&read, "shard", None).await;
    assert!(bytes == expected);
    assert_eq!(status, "Portico; hit; ttl=59; detail=memory");
    assert_eq!(source.calls().len(), 1);
}

/// The bytes of `body` that are ready now, without waiting, and whether it ended.
fn ready_now(body: &mut super::BodyStream) -> (Vec<u8>, bool) {
    use futures::FutureExt;

    let mut bytes = Vec::new();
    loop {
        match body.next().now_or_never() {
            Some(Some(Ok(chunk))) => bytes.extend_from_slice(&chunk),
            Some(None) => return (bytes, true),
            Some(Some(Err(error))) => panic!("the body was aborted: {error}"),
            None => return (bytes, false),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_hit_in_memory_is_in_the_body_when_it_starts() {
    let (source, expected, read) = holding("held", 4 * BLOCK as usize).await;
    get(&read, "held", range(0, 3 * BLOCK - 1)).await;
    let asked = source.calls().len();
    // Within one block, and across three held blocks (the first and the readahead of
    // two): every frame is ready without another task running, so no task sends the body.
    for (first, last) in [(BLOCK + 10, 2 * BLOCK - 11), (10, 3 * BLOCK - 11)] {
        let answer = get_plain(&read, &object("held"), range(first, last))
            .await
            .unwrap();
        let status = answer.status.to_string();
        assert!(
            status.contains("; hit;") && status.ends_with("detail=memory"),
            "{status}"
        );
        let mut body = answer.body;
        let (bytes, ended) = ready_now(&mut body);
        assert!(ended, "a frame of a hit in memory was not ready");
        assert!(bytes == expected[first as usize..=last as usize]);
    }
    assert_eq!(
        source.calls().len(),
        asked,
        "the hits asked the source nothing"
    );

    // Block 3 is not held: the held ones are ready, a task sends the rest.
    let (first, last) = (2 * BLOCK + 10, 4 * BLOCK - 1);
    let answer = get_plain(&read, &object("held"), range(first, last))
        .await
        .unwrap();
    let mut body = answer.body;
    let (mut bytes, ended) = ready_now(&mut body);
    assert!(!ended);
    assert!(bytes == expected[first as usize..3 * BLOCK as usize]);
    let (rest, error) = collect_body(body).await;
    assert_eq!(error, None);
    bytes.extend_from_slice(&rest);
    assert!(bytes == expected[first as usize..=last as usize]);

    // All four held, but more than the first and the readahead (two): the first is in
    // hand, and a task sends the rest, holding no more than the readahead at once.
    let answer = get_plain(&read, &object("held"), None).await.unwrap();
    let mut body = answer.body;
    let (mut bytes, ended) = ready_now(&mut body);
    assert!(!ended);
    assert!(bytes == expected[..BLOCK as usize]);
    let (rest, error) = collect_body(body).await;
    assert_eq!(error, None);
    bytes.extend_from_slice(&rest);
    assert!(bytes == expected);
    assert_eq!(source.calls().len(), asked + 1, "block 3, once");
}

#[tokio::test(start_paused = true)]
async fn a_suffix_range_in_the_last_block_of_an_unknown_object_is_one_request() {
    let (source, expected, read) = holding("tail", 2 * BLOCK as usize + 10).await;
    let suffix = Some(RangeRequest::Suffix { length: 10 });
    let (bytes, _) = get(&read, "tail", suffix).await;
    assert_eq!(bytes, expected[expected.len() - 10..]);
    let calls = source.calls();
    assert_eq!(
        calls,
        [Call::Get {
            key: "tail".to_owned(),
            range: format!("bytes=-{BLOCK}"),
        }]
    );
}
