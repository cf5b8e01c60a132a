//! A cold read's discovery: one GET of the read's first blocks (up to
//! [`DISCOVERY_BLOCKS`]), whose first block comes with the metadata and whose rest is
//! streamed on to the reads that share it.

use std::sync::Arc;

use super::memory::{Call, MemorySource};
use super::*;

/// Every GET the source was asked, as `(first, last)` byte offsets.
fn gets(source: &MemorySource) -> Vec<(u64, u64)> {
    source
        .calls()
        .iter()
        .filter_map(|call| match call {
            Call::Get { range, .. } => {
                let (first, last) = range.strip_prefix("bytes=")?.split_once('-')?;
                Some((first.parse().ok()?, last.parse().ok()?))
            }
            Call::Head { .. } => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_cold_read_of_up_to_a_discovery_s_blocks_is_one_get_and_a_longer_one_streams_the_rest() {
    let discovery = DISCOVERY_BLOCKS * BLOCK;
    let sizes = [
        BLOCK - 1,
        BLOCK,
        (DISCOVERY_BLOCKS - 1) * BLOCK + 5,
        discovery,
        discovery + 1,
        (DISCOVERY_BLOCKS + 3) * BLOCK,
    ];
    for size in sizes {
        let (source, expected, read) = holding("object", size as usize).await;
        let (bytes, status) = get(&read, "object", None).await;
        assert!(bytes == expected, "{size} bytes: other bytes");
        assert!(status.contains("fwd=miss"), "{size}: {status}");
        let asked = gets(&source);
        // The discovery asks for as many blocks as it streams, from the first.
        assert_eq!(asked[0], (0, discovery - 1), "{size}: {asked:?}");
        if size <= discovery {
            assert_eq!(asked.len(), 1, "{size} bytes in one GET: {asked:?}");
        } else {
            // The rest in streams pinned to the version, every byte once.
            assert_eq!(asked[1].0, discovery, "{size}: {asked:?}");
            let rest: u64 = asked[1..]
                .iter()
                .map(|(first, last)| last - first + 1)
                .sum();
            assert_eq!(rest, size - discovery, "{asked:?}");
        }
        // All of it cached: read again, nothing asked.
        let (again, status) = get(&read, "object", None).await;
        assert!(again == expected);
        assert!(status.starts_with("Portico; hit"), "{size}: {status}");
        assert_eq!(gets(&source).len(), asked.len(), "{size}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_cold_range_asks_for_the_blocks_it_covers_and_a_block_alone_as_before() {
    let (source, expected, read) = holding("object", 40 * BLOCK as usize).await;
    // From inside block 2 to inside block 6: blocks 2 to 6, in one GET.
    let (first, last) = (2 * BLOCK + 100, 6 * BLOCK + 7);
    let (bytes, _) = get(&read, "object", range(first, last)).await;
    assert!(bytes == expected[first as usize..=last as usize]);
    assert_eq!(gets(&source), [(2 * BLOCK, 7 * BLOCK - 1)]);

    // A range inside one block of an unknown object: that block alone.
    let source = Arc::new(MemorySource::default());
    source.put("object", expected.clone(), 1);
    let read = read_path(&source, settings()).await;
    let (bytes, _) = get(&read, "object", range(9 * BLOCK + 1, 9 * BLOCK + 9)).await;
    assert!(bytes == expected[9 * BLOCK as usize + 1..=9 * BLOCK as usize + 9]);
    assert_eq!(gets(&source), [(9 * BLOCK, 10 * BLOCK - 1)]);
}

/// Readers that share one discovery at offsets of their own each wait for the blocks the
/// discovery's stream brings, however far along: no block comes twice.
#[tokio::test(start_paused = true)]
async fn readers_that_share_a_discovery_at_other_offsets_cost_each_block_once() {
    let source = Arc::new(MemorySource::default());
    let size = 2 * DISCOVERY_BLOCKS * BLOCK;
    let expected = body(size as usize, 1);
    source.put("object", expected.clone(), 1);
    let read = read_path(&source, settings()).await;
    let answers = concurrently((0..8u64).map(|n| {
        let read = read.clone();
        let first = n * 3 * BLOCK + 17;
        async move {
            let asked = Some(RangeRequest::From { first, last: None });
            (first, get(&read, "object", asked).await.0)
        }
    }))
    .await;
    for (first, bytes) in answers {
        assert!(bytes == expected[first as usize..], "from {first}");
    }
    let asked = gets(&source);
    for index in 0..size / BLOCK {
        let covering = asked
            .iter()
            .filter(|(first, last)| *first <= index * BLOCK && (index + 1) * BLOCK - 1 <= *last)
            .count();
        assert_eq!(covering, 1, "block {index}: {asked:?}");
    }
}

/// A read one or two blocks longer than a discovery, overwritten once its headers are out
/// (an unversioned bucket): the blocks past the discovery's were asked for before the
/// headers, so the read completes with the version it announced.
#[tokio::test(start_paused = true)]
async fn a_read_a_block_past_a_discovery_completes_across_an_overwrite() {
    let discovery = DISCOVERY_BLOCKS * BLOCK;
    let whole = [discovery + 1, discovery + BLOCK, discovery + BLOCK + 1];
    let reads = whole.map(|size| (size, None)).into_iter().chain([(
        discovery + 5 * BLOCK,
        range(BLOCK / 2, discovery + BLOCK / 2),
    )]);
    for (size, asked) in reads {
        let (source, first, read) = holding("object", size as usize).await;
        let answer = get_plain(&read, &object("object"), asked).await.unwrap();
        source.put("object", body(size as usize, 2), 2);
        let (bytes, error) = collect(answer).await;
        assert_eq!(error, None, "{size} bytes, {asked:?}: cut off");
        let expected = match asked {
            Some(RangeRequest::From {
                first: from,
                last: Some(to),
            }) => &first[from as usize..=to as usize],
            _ => &first[..],
        };
        assert!(
            bytes == expected,
            "{size} bytes, {asked:?}: the first version"
        );
    }
}
