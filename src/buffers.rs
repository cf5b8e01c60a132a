//! Block buffers kept for reuse: the memory a whole block is gathered in, taken back when
//! the block's last handle is dropped (the memory tier evicted it and no response holds
//! it) and handed to the next fill, its pages still resident.
//!
//! Why: a page the process touches for the first time faults, and the kernel zeroes it
//! (on a VM that reports freed memory to its host, the host must also back it again). The
//! allocator returns freed memory to the kernel after a while, so without this every fill
//! after an idle spell, and every fill of a fresh process, pays that per 4 KiB page.
//! `cache.memory_pretouch` fills the pool at start, in the background, with as many blocks
//! as the memory tier holds: the first fills then cost what later ones do.
//!
//! Invariants:
//! - Only whole blocks (exactly `block_size` bytes) use kept buffers, so a block's length is
//!   the memory it holds, as the memory tier weighs it.
//! - A buffer comes back whenever its block's bytes are dropped (its block left the
//!   memory tier, and no response holds it), so the block that evicted it can be
//!   followed by one gathered in its pages. [`BlockBuffers::fit`], which the cache calls
//!   whenever something enters the tier, lets go of the free buffers beyond the tier's
//!   free room and a spare ([`spare_bytes`]): the tier's contents plus the free buffers
//!   stay within its capacity and that spare, whatever else fills it (pieces from disk,
//!   short blocks). The spare is what a full tier's fills reuse: each evicts a block whose
//!   buffer the next one takes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

/// The free buffers kept beyond the memory tier's room for a tier of `capacity` bytes:
/// those of the blocks a full tier evicts, for the fills that follow. A sixteenth of the
/// tier, at most 32 MiB (part of the process's memory above the tier's capacity).
pub fn spare_bytes(capacity: u64) -> u64 {
    (capacity / 16).min(32 * 1024 * 1024)
}

/// The pool of block buffers. Cheap to clone.
#[derive(Clone)]
pub struct BlockBuffers {
    inner: Arc<Inner>,
}

struct Inner {
    block_size: usize,
    free: Mutex<Vec<Vec<u8>>>,
    /// How many free buffers may be kept: the memory tier's free room at the last fit, in
    /// blocks, and the spare.
    room: AtomicUsize,
    /// The spare, in blocks (at least one).
    spare: usize,
}

impl BlockBuffers {
    /// A pool of buffers of `block_size` bytes with `spare_bytes` of spare, that keeps no
    /// more than the spare until told the tier's room ([`Self::fit`]).
    pub fn new(block_size: usize, spare_bytes: u64) -> Self {
        let block_size = block_size.max(1);
        let spare = (usize::try_from(spare_bytes).unwrap_or(usize::MAX) / block_size).max(1);
        Self {
            inner: Arc::new(Inner {
                block_size,
                free: Mutex::new(Vec::new()),
                room: AtomicUsize::new(spare),
                spare,
            }),
        }
    }

    /// A buffer to gather a block of `length` bytes in: a kept one when the block is
    /// whole and one is free.
    pub fn take(&self, length: usize) -> BlockBuffer {
        if length == self.inner.block_size
            && let Some(mut bytes) = self.inner.free.lock().pop()
        {
            bytes.clear();
            return BlockBuffer {
                bytes,
                home: Some(self.inner.clone()),
            };
        }
        BlockBuffer {
            bytes: Vec::with_capacity(length),
            home: (length == self.inner.block_size).then(|| self.inner.clone()),
        }
    }

    /// Keeps at most `room_bytes` of free buffers (the memory tier's free room) and the
    /// spare, letting the rest go.
    pub fn fit(&self, room_bytes: u64) {
        let room = (usize::try_from(room_bytes).unwrap_or(usize::MAX) / self.inner.block_size)
            .saturating_add(self.inner.spare);
        self.inner.room.store(room, Ordering::Relaxed);
        let released = {
            let mut free = self.inner.free.lock();
            let keep = free.len().min(room);
            free.split_off(keep)
        };
        drop(released);
    }

    /// Touches every page of new buffers until the pool keeps as many as the tier's room
    /// and the spare allow, or `stop` says so: their pages are resident before the first
    /// fill wants them. Runs on the calling thread (a blocking one); the bytes it added.
    pub fn pretouch(&self, stop: impl Fn() -> bool) -> u64 {
        let mut added = 0;
        while !stop() {
            if self.inner.free.lock().len() >= self.inner.room.load(Ordering::Relaxed) {
                break;
            }
            // Writing every byte faults each page in now; the buffer is then emptied (its
            // pages stay), for a block to be gathered in it.
            let mut bytes = vec![1u8; self.inner.block_size];
            bytes.clear();
            let mut free = self.inner.free.lock();
            if free.len() >= self.inner.room.load(Ordering::Relaxed) {
                break;
            }
            free.push(bytes);
            added += self.inner.block_size as u64;
        }
        added
    }

    /// The bytes of the free buffers kept now.
    pub fn kept_bytes(&self) -> u64 {
        (self.inner.free.lock().len() * self.inner.block_size) as u64
    }
}

/// A buffer a block is gathered in, then frozen into the block's bytes.
pub struct BlockBuffer {
    bytes: Vec<u8>,
    /// The pool the buffer goes back to when the block's bytes are dropped, for a whole
    /// block.
    home: Option<Arc<Inner>>,
}

impl BlockBuffer {
    pub fn extend_from_slice(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
    }

    /// Bytes gathered so far.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The block's bytes. A whole block's buffer returns to the pool when they are dropped
    /// (every slice of them).
    pub fn freeze(self) -> Bytes {
        match self.home {
            Some(home) if self.bytes.len() == home.block_size => Bytes::from_owner(Kept {
                bytes: self.bytes,
                home,
            }),
            _ => Bytes::from(self.bytes),
        }
    }
}

/// A whole block's bytes in a buffer of the pool.
struct Kept {
    bytes: Vec<u8>,
    home: Arc<Inner>,
}

impl AsRef<[u8]> for Kept {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let mut bytes = std::mem::take(&mut self.bytes);
        bytes.clear();
        // Kept until the next fit, which lets it go unless the tier has room for it.
        self.home.free.lock().push(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Large enough that the spare is two blocks.
    const BLOCK: usize = 16 * 1024 * 1024;
    const SPARE: u64 = 2 * BLOCK as u64;

    fn block(buffers: &BlockBuffers, fill: u8) -> Bytes {
        let mut buffer = buffers.take(BLOCK);
        buffer.extend_from_slice(&vec![fill; BLOCK]);
        buffer.freeze()
    }

    #[test]
    fn a_whole_blocks_buffer_is_reused_once_its_last_slice_is_dropped() {
        let buffers = BlockBuffers::new(BLOCK, SPARE);
        buffers.fit(4 * BLOCK as u64);
        let first = block(&buffers, 1);
        let address = first.as_ptr();
        let slice = first.slice(10..20);
        drop(first);
        assert_eq!(buffers.kept_bytes(), 0, "a slice still holds it");
        drop(slice);
        assert_eq!(buffers.kept_bytes(), BLOCK as u64);
        let second = block(&buffers, 2);
        assert_eq!(second.as_ptr(), address, "the same memory");
        assert!(
            second.iter().all(|&byte| byte == 2),
            "holding the new block only"
        );
        assert_eq!(buffers.kept_bytes(), 0);
    }

    #[test]
    fn a_pretouched_buffer_holds_exactly_the_block_gathered_in_it() {
        let buffers = BlockBuffers::new(BLOCK, SPARE);
        buffers.fit(0);
        assert_eq!(buffers.pretouch(|| false), SPARE, "the spare alone");
        let taken = block(&buffers, 9);
        assert_eq!(buffers.kept_bytes(), SPARE - BLOCK as u64, "one taken");
        assert_eq!(taken.len(), BLOCK);
        assert!(taken.iter().all(|&byte| byte == 9));
    }

    #[test]
    fn short_blocks_never_hold_a_whole_blocks_buffer() {
        let buffers = BlockBuffers::new(BLOCK, SPARE);
        buffers.fit(0);
        assert_eq!(buffers.pretouch(|| false), SPARE);
        let mut short = buffers.take(100);
        short.extend_from_slice(&[7; 100]);
        let short = short.freeze();
        assert_eq!(buffers.kept_bytes(), SPARE, "none taken for it");
        drop(short);
        assert_eq!(buffers.kept_bytes(), SPARE, "and none given back");
    }

    #[test]
    fn free_buffers_never_exceed_the_tiers_room_and_the_spare_after_a_fit() {
        let buffers = BlockBuffers::new(BLOCK, SPARE);
        buffers.fit(BLOCK as u64);
        assert_eq!(buffers.pretouch(|| false), BLOCK as u64 + SPARE);
        assert_eq!(buffers.pretouch(|| false), 0, "full already");
        let held: Vec<Bytes> = (0..3).map(|fill| block(&buffers, fill)).collect();
        assert_eq!(buffers.kept_bytes(), 0);
        // Pieces from disk took the tier meanwhile: no room is left.
        buffers.fit(0);
        drop(held);
        assert_eq!(
            buffers.kept_bytes(),
            3 * BLOCK as u64,
            "back until the next fit"
        );
        buffers.fit(0);
        assert_eq!(
            buffers.kept_bytes(),
            SPARE,
            "the spare kept, the other let go"
        );
        assert_eq!(buffers.pretouch(|| false), 0, "none touched beyond it");
    }

    #[test]
    fn pretouch_stops_when_asked() {
        let buffers = BlockBuffers::new(BLOCK, SPARE);
        buffers.fit(100 * BLOCK as u64);
        let calls = AtomicUsize::new(0);
        let added = buffers.pretouch(|| calls.fetch_add(1, Ordering::Relaxed) >= 2);
        assert_eq!(added, 2 * BLOCK as u64);
    }
}
