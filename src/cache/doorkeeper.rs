//! The doorkeeper: which disk pieces have been read once, so that their second read keeps
//! them in memory.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{CacheKey, layout, to_usize};
use crate::config::CacheConfig;

/// Doorkeeper slots: twice the pieces the memory tier holds, so a piece read again while
/// memory could still hold it is usually remembered.
pub(super) fn doorkeeper_slots(config: &CacheConfig) -> usize {
    let pieces = config.memory_capacity.bytes() / layout::piece_bytes(config.block_size.bytes());
    to_usize(pieces.saturating_mul(2)).clamp(1024, 1 << 20)
}

/// Remembers pieces read from disk once, so that their second read keeps them in memory:
/// a piece read once (a scan, a one-off range) does not displace memory's hot set. One
/// hash per slot, overwritten by collisions, so it is bounded and forgets old reads.
pub(super) struct Doorkeeper {
    slots: Box<[AtomicU64]>,
    hasher: RandomState,
}

impl Doorkeeper {
    pub(super) fn new(slots: usize) -> Self {
        Self {
            slots: (0..slots.max(1)).map(|_| AtomicU64::new(0)).collect(),
            hasher: RandomState::new(),
        }
    }

    /// Whether `key` was seen since its slot last changed; records it otherwise. A key
    /// stays recorded after its second touch, so a piece that memory admitted and then
    /// evicted is admitted again on its next read from disk (and memory's eviction, which
    /// remembers what it evicted recently, then keeps it longer).
    pub(super) fn second_touch(&self, key: &CacheKey) -> bool {
        // Never 0, the empty slot's value.
        let hash = self.hasher.hash_one(key) | 1;
        let slot = &self.slots[(hash % self.slots.len() as u64) as usize];
        if slot.load(Ordering::Relaxed) == hash {
            true
        } else {
            slot.store(hash, Ordering::Relaxed);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::BlockKey;
    use crate::types::ObjectRef;

    fn block_key(index: u64) -> BlockKey {
        let object = ObjectRef::new("bucket", "key").unwrap();
        BlockKey::new(&object, "\"etag\"".into(), 64 * 1024, index)
    }

    #[test]
    fn the_doorkeeper_admits_from_the_second_touch_on_and_forgets_on_collision() {
        let doorkeeper = Doorkeeper::new(1);
        let key = |index| CacheKey::Block(block_key(index));
        assert!(!doorkeeper.second_touch(&key(0)));
        assert!(doorkeeper.second_touch(&key(0)));
        // Still remembered: a third touch (after memory evicted it) admits it again.
        assert!(doorkeeper.second_touch(&key(0)));
        // One slot: another key takes it, and the first is forgotten.
        assert!(!doorkeeper.second_touch(&key(1)));
        assert!(!doorkeeper.second_touch(&key(0)));
    }
}
