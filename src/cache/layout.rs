//! The disk tier's sizes, derived from `cache.block_size` and `cache.disk_capacity`: the
//! pieces blocks are stored in, foyer's engine blocks (its eviction unit) and the write
//! buffers of its flusher.
//!
//! Invariant: a whole block with its key and header fits an engine block, so every piece
//! does (foyer silently skips entries larger than its block).

/// The disk tier's unit: blocks are stored (and read) in pieces of this size, so a ranged
/// read from disk reads the pieces it overlaps, not its whole block. Smaller pieces read
/// less per range but cost a header, a page of alignment and an index entry each.
pub const PIECE_BYTES: u64 = 256 * 1024;

/// The piece size of blocks of `block_size`: [`PIECE_BYTES`], or the block when smaller.
pub fn piece_bytes(block_size: u64) -> u64 {
    block_size.min(PIECE_BYTES)
}

/// foyer's I/O alignment.
pub const PAGE_BYTES: u64 = 4096;
/// Room for an entry's header, its key (object keys are at most 1 KiB) and alignment.
const ENTRY_SLACK_BYTES: u64 = 8 * 1024;
/// Cache blocks per disk-engine block (the disk tier's eviction unit), at least and at
/// most. Between the two, a tier has about [`ENGINE_BLOCKS_TARGET`] engine blocks.
const MIN_ENTRIES_PER_ENGINE_BLOCK: u64 = 4;
const MAX_ENTRIES_PER_ENGINE_BLOCK: u64 = 256;
/// foyer keeps a record per engine block and its device sums them on every allocation
/// (quadratic in their number), so a 2 TiB tier in 16 MiB engine blocks (131,072) takes
/// minutes to open. Larger engine blocks on large tiers keep the count near this.
const ENGINE_BLOCKS_TARGET: u64 = 4096;
/// Disk writers. One writer with a large buffer absorbs a burst of blocks that several
/// writers, each taking a hash-chosen share into a smaller buffer, would partly drop.
pub const DISK_FLUSHERS: usize = 1;
/// Bytes one disk write may batch. foyer drops entries that arrive while its buffer is
/// full and a write is in flight, so the buffer must hold a few readahead bursts; it is
/// allocated twice (filling and writing), which bounds the disk tier's write memory.
const FLUSH_BUFFER_BYTES: u64 = 32 * 1024 * 1024;

/// Sizes of the foyer disk engine derived from the configured block size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskLayout {
    /// One cache block plus key and header: the unit engine blocks and write buffers are
    /// sized in (the entries themselves are pieces of a block, or metadata, and smaller).
    pub max_entry_bytes: u64,
    /// foyer's disk block: a few entries plus the blob index.
    pub engine_block_bytes: u64,
    /// Write buffer per flusher; it holds at least two blocks of pieces.
    pub flusher_buffer_bytes: u64,
    /// Bound on bytes queued for the flusher (references to cached entries, not
    /// copies); beyond it entries skip the disk tier.
    pub submit_queue_bytes: u64,
}

impl DiskLayout {
    pub fn new(block_size: u64, capacity: u64) -> Self {
        let max_entry_bytes = (block_size + ENTRY_SLACK_BYTES).next_multiple_of(PAGE_BYTES);
        let entries = (capacity / ENGINE_BLOCKS_TARGET / max_entry_bytes)
            .clamp(MIN_ENTRIES_PER_ENGINE_BLOCK, MAX_ENTRIES_PER_ENGINE_BLOCK);
        let engine_block_bytes = entries * max_entry_bytes + PAGE_BYTES;
        let entries_per_flush = (FLUSH_BUFFER_BYTES / max_entry_bytes).max(2);
        let flusher_buffer_bytes = entries_per_flush * max_entry_bytes;
        Self {
            max_entry_bytes,
            engine_block_bytes,
            flusher_buffer_bytes,
            submit_queue_bytes: 4 * DISK_FLUSHERS as u64 * flusher_buffer_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_layout_fits_the_largest_block() {
        for block_size in [64 * 1024, 4 << 20, 64 << 20] {
            let layout = DiskLayout::new(block_size, 10 << 30);
            // foyer accepts an entry up to its block size minus one 4 KiB blob index page.
            assert!(layout.max_entry_bytes <= layout.engine_block_bytes - PAGE_BYTES);
            assert!(layout.max_entry_bytes >= block_size + 1024 + 1024 + 64);
            assert!(layout.flusher_buffer_bytes >= 2 * layout.max_entry_bytes);
            assert!(layout.flusher_buffer_bytes <= (64 << 20) * 2 + 2 * ENTRY_SLACK_BYTES);
            assert_eq!(layout.engine_block_bytes % PAGE_BYTES, 0);
        }
    }

    #[test]
    fn large_tiers_get_larger_engine_blocks_and_a_bounded_count() {
        let small = DiskLayout::new(4 << 20, 10 << 30);
        assert_eq!(
            small.engine_block_bytes,
            MIN_ENTRIES_PER_ENGINE_BLOCK * small.max_entry_bytes + PAGE_BYTES
        );
        for capacity in [500u64 << 30, 2 << 40, 16 << 40] {
            let layout = DiskLayout::new(4 << 20, capacity);
            let engine_blocks = capacity / layout.engine_block_bytes;
            assert!(
                engine_blocks <= 4 * ENGINE_BLOCKS_TARGET,
                "{capacity}: {engine_blocks}"
            );
            assert!(layout.engine_block_bytes <= 1030 << 20, "{layout:?}");
        }
        // The write path does not depend on the tier's size.
        assert_eq!(
            small.flusher_buffer_bytes,
            DiskLayout::new(4 << 20, 2 << 40).flusher_buffer_bytes
        );
    }
}
