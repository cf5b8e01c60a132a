//! The blocks whose fetch is under way: from a lookup's miss until the fetched block is
//! in memory. The origin streams ask this before they bring a block, so a block another
//! lookup is fetching (or was just handed by a stream, and caches a moment later) is not
//! asked of the origin a second time; a read that needs it joins that fetch instead.
//!
//! The read depends on that fetch however slow it is, as it did before: its lookup of the
//! block joins the fetch under way whether or not one of its streams also brings the
//! block (concurrent misses of a block make one fetch), unless the stream's copy lands in
//! memory first. The counting starts at the miss, not when the bytes arrive: a stream
//! hands a block to the lookup waiting for it and may end, forgetting the block, before
//! that lookup's task runs again.

use std::collections::HashMap;
use std::sync::Arc;

use super::BlockKey;

/// The blocks fetched now, each with how many lookups hold it.
#[derive(Default)]
pub(super) struct Fetching {
    blocks: parking_lot::Mutex<HashMap<BlockKey, usize>>,
}

impl Fetching {
    /// Notes that a lookup fetches `key` until the guard is dropped.
    pub(super) fn hold(self: &Arc<Self>, key: &BlockKey) -> Held {
        *self.blocks.lock().entry(key.clone()).or_default() += 1;
        Held {
            fetching: self.clone(),
            key: key.clone(),
        }
    }

    pub(super) fn contains(&self, key: &BlockKey) -> bool {
        self.blocks.lock().contains_key(key)
    }
}

/// A lookup's hold on a block it fetches (see [`Fetching::hold`]).
pub(super) struct Held {
    fetching: Arc<Fetching>,
    key: BlockKey,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut blocks = self.fetching.blocks.lock();
        if let Some(holders) = blocks.get_mut(&self.key) {
            *holders -= 1;
            if *holders == 0 {
                blocks.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ObjectRef;

    fn key(index: u64) -> BlockKey {
        let object = ObjectRef::new("bucket", "key").expect("object");
        BlockKey::new(&object, "etag".into(), 1024, index)
    }

    #[test]
    fn a_block_is_fetched_while_any_lookup_holds_it() {
        let fetching = Arc::new(Fetching::default());
        let first = fetching.hold(&key(1));
        let second = fetching.hold(&key(1));
        assert!(fetching.contains(&key(1)));
        assert!(!fetching.contains(&key(2)));
        drop(first);
        assert!(
            fetching.contains(&key(1)),
            "the second lookup still fetches it"
        );
        drop(second);
        assert!(!fetching.contains(&key(1)));
    }
}
