//! Reading ahead of the client: a block fetch hedged once fetch times are known, and the
//! prefetch a sequential reader sets off, which a demand read joins.

use std::sync::Arc;
use std::time::Duration;

use super::*;

#[tokio::test(start_paused = true)]
async fn a_block_fetch_without_a_response_head_is_hedged_once_fetch_times_are_known() {
    for warmed in [true, false] {
        let source = Arc::new(MemorySource::default());
        let settings = ReadSettings {
            hedge_quantile: 0.9,
            ..settings()
        };
        let read = read_path(&source, settings).await;
        if warmed {
            // 30 block fetches teach the hedger the source's time to first byte (reads of
            // one block each: longer ones are streamed, which nothing hedges).
            source.put("warmup", body(31 * BLOCK as usize, 1), 1);
            for index in 1..31 {
                get(
                    &read,
                    "warmup",
                    range(index * BLOCK, (index + 1) * BLOCK - 1),
                )
                .await;
            }
        }
        let expected = body(2 * BLOCK as usize, 1);
        source.put("slow", expected.clone(), 1);
        // Block 0 with the metadata, then block 1 alone, stalled.
        get(&read, "slow", range(0, BLOCK - 1)).await;
        source.stall_next("slow", &block_range(1));
        let started = tokio::time::Instant::now();
        let (bytes, _) = get(&read, "slow", range(BLOCK, 2 * BLOCK - 1)).await;
        assert!(bytes == expected[BLOCK as usize..]);
        let elapsed = started.elapsed();
        if warmed {
            // The stalled fetch was sent again after the hedge delay; the copy answered.
            assert_eq!(source.gets_of("slow", &block_range(1)), 2);
            assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
        } else {
            // Too few fetches seen to know what is slow: nothing is hedged.
            assert_eq!(source.gets_of("slow", &block_range(1)), 1);
            assert!(elapsed >= STALL, "{elapsed:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn sequential_reads_prefetch_and_a_demand_read_joins_the_prefetch() {
    let source = Arc::new(MemorySource::default());
    let expected = body(8 * BLOCK as usize, 1);
    source.put("epoch", expected.clone(), 1);
    let settings = ReadSettings {
        prefetch_window_blocks: 4,
        ..settings()
    };
    let read = read_path(&source, settings).await;
    let block = |index: u64| &expected[(index * BLOCK) as usize..((index + 1) * BLOCK) as usize];
    for index in 0..2 {
        let (bytes, _) = get(
            &read,
            "epoch",
            range(index * BLOCK, (index + 1) * BLOCK - 1),
        )
        .await;
        assert!(bytes == block(index));
    }
    // The third read continues the run and opens a window of one block as it starts, so
    // block 3 is on its way while block 2 still is.
    let third = tokio::spawn({
        let read = read.clone();
        async move { get(&read, "epoch", range(2 * BLOCK, 3 * BLOCK - 1)).await }
    });
    tokio::time::sleep(LATENCY / 2).await;
    assert_eq!(fetches_of(&source, "epoch", 3), 1);
    let (bytes, status) = get(&read, "epoch", range(3 * BLOCK, 4 * BLOCK - 1)).await;
    assert!(bytes == block(3));
    assert!(
        status.contains("collapsed"),
        "joined the prefetch: {status}"
    );
    assert!(third.await.unwrap().0 == block(2));
    assert_eq!(fetches_of(&source, "epoch", 3), 1);
    // The window doubled: blocks 4 and 5 follow, each fetched once, and are then hits.
    tokio::time::sleep(LATENCY * 2).await;
    assert_eq!(fetches_of(&source, "epoch", 4), 1);
    assert_eq!(fetches_of(&source, "epoch", 5), 1);
    let (_, status) = get(&read, "epoch", range(4 * BLOCK, 6 * BLOCK - 1)).await;
    assert!(status.ends_with("detail=memory"), "{status}");
    assert_eq!(fetches_of(&source, "epoch", 4), 1);
}

#[tokio::test(start_paused = true)]
async fn a_sequential_read_waiting_for_its_block_already_issues_the_prefetches_after_it() {
    let source = Arc::new(MemorySource::default());
    source.put("epoch", body(8 * BLOCK as usize, 1), 1);
    let settings = ReadSettings {
        prefetch_window_blocks: 4,
        ..settings()
    };
    let read = read_path(&source, settings).await;
    // Block 3, prefetched after the third read, will not arrive while the test runs.
    source.stall_next("epoch", &block_range(3));
    for index in 0..3 {
        get(
            &read,
            "epoch",
            range(index * BLOCK, (index + 1) * BLOCK - 1),
        )
        .await;
    }
    assert_eq!(fetches_of(&source, "epoch", 3), 1);
    let waiting = tokio::spawn({
        let read = read.clone();
        async move { get(&read, "epoch", range(3 * BLOCK, 4 * BLOCK - 1)).await }
    });
    tokio::time::sleep(LATENCY / 2).await;
    assert!(!waiting.is_finished(), "block 3 is stalled");
    // The fourth continuation doubled the window to two blocks after block 3.
    assert_eq!(fetches_of(&source, "epoch", 4), 1);
    assert_eq!(fetches_of(&source, "epoch", 5), 1);
    assert_eq!(fetches_of(&source, "epoch", 6), 0);
    waiting.abort();
}
