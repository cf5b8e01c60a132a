//! How a read's uncached blocks become streams: its runs of consecutive blocks, holes of
//! a cached block bridged, each split into a few streams of many blocks.

use std::ops::RangeInclusive;

use super::{BLOCKS_PER_STREAM, GAP_BRIDGED, STREAMS_PER_READ};
use crate::types::BlockIndex;

/// `runs`, those apart by at most [`GAP_BRIDGED`] blocks (cached ones, `bridgeable`)
/// joined into one: a read of a partly cached object asks for its holes in a stream
/// rather than one block at a time, before its headers, at the cost of the cached blocks
/// in between.
pub(super) fn bridged(
    runs: Vec<RangeInclusive<BlockIndex>>,
    bridgeable: impl Fn(&RangeInclusive<BlockIndex>) -> bool,
) -> Vec<RangeInclusive<BlockIndex>> {
    let mut joined: Vec<RangeInclusive<BlockIndex>> = Vec::new();
    for run in runs {
        if let Some(last) = joined.last_mut() {
            let gap = last.end() + 1..=run.start().saturating_sub(1);
            if run.start() - last.end() - 1 <= GAP_BRIDGED && bridgeable(&gap) {
                *last = *last.start()..=*run.end();
                continue;
            }
        }
        joined.push(run);
    }
    joined
}

/// `runs` as at most `streams` streams: each run in at most [`STREAMS_PER_READ`] parts of
/// at least [`BLOCKS_PER_STREAM`] blocks, but a run of the single block `alone`; runs past
/// the streams, and that one, are fetched by block.
pub(super) fn split(
    runs: &[RangeInclusive<BlockIndex>],
    streams: usize,
    alone: Option<BlockIndex>,
) -> Vec<RangeInclusive<BlockIndex>> {
    let mut parts = Vec::new();
    for run in runs {
        let left = streams.saturating_sub(parts.len());
        let length = run.end() - run.start() + 1;
        if left == 0 {
            break;
        }
        if length == 1 && alone == Some(*run.start()) {
            continue;
        }
        let count = length
            .div_ceil(BLOCKS_PER_STREAM)
            .min(left.min(STREAMS_PER_READ) as u64);
        let each = length.div_ceil(count);
        let mut first = *run.start();
        while first <= *run.end() {
            let last = (first + each - 1).min(*run.end());
            parts.push(first..=last);
            first = last + 1;
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: usize = STREAMS_PER_READ;

    #[test]
    fn a_long_run_is_split_in_a_few_parts_of_many_blocks() {
        assert_eq!(
            split(&[0..=255], ALL, Some(0)),
            vec![0..=63, 64..=127, 128..=191, 192..=255]
        );
        assert_eq!(
            split(&[1..=15], ALL, Some(1)),
            vec![1..=4, 5..=8, 9..=12, 13..=15]
        );
        assert_eq!(split(&[3..=8], ALL, Some(3)), vec![3..=5, 6..=8]);
        assert_eq!(split(&[3..=4], ALL, Some(3)), vec![3..=4]);
    }

    #[test]
    fn only_the_read_s_first_block_is_left_to_a_block_fetch_and_the_streams_are_bounded() {
        assert_eq!(split(&[0..=0, 2..=2], ALL, Some(0)), vec![2..=2]);
        assert_eq!(split(&[0..=0], ALL, None), vec![0..=0]);
        assert_eq!(
            split(
                &[0..=1, 3..=3, 5..=6, 8..=9, 11..=12, 14..=15],
                ALL,
                Some(0)
            ),
            vec![0..=1, 3..=3, 5..=6, 8..=9]
        );
        // A lone block after a discovery's: streamed, before the headers.
        assert_eq!(split(&[16..=16], ALL, Some(0)), vec![16..=16]);
        assert_eq!(
            split(&[0..=99, 200..=201], ALL, Some(0)),
            vec![0..=24, 25..=49, 50..=74, 75..=99]
        );
    }

    #[test]
    fn holes_one_cached_block_apart_are_asked_for_in_one_run() {
        let every = |_: &RangeInclusive<u64>| true;
        assert_eq!(bridged(vec![1..=1, 3..=3, 5..=9], every), vec![1..=9]);
        assert_eq!(bridged(vec![1..=1, 4..=4], every), vec![1..=1, 4..=4]);
        // A block another stream brings is not asked for twice.
        let not_3 = |gap: &RangeInclusive<u64>| !gap.contains(&3);
        assert_eq!(
            bridged(vec![1..=2, 4..=5, 7..=7], not_3),
            vec![1..=2, 4..=7]
        );
    }

    #[test]
    fn with_few_fill_slots_free_a_read_opens_fewer_longer_streams() {
        assert_eq!(split(&[0..=255], 1, Some(0)), vec![0..=255]);
        assert_eq!(split(&[0..=255], 2, Some(0)), vec![0..=127, 128..=255]);
        assert_eq!(split(&[0..=9, 20..=29], 1, Some(0)), vec![0..=9]);
    }
}
