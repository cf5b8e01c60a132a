//! The blocks a lookup is fetching from an origin stream: from the lookup's miss, once
//! its fetch found a stream bringing the block, until the block is in memory. The origin
//! streams ask this before they bring a block. A stream hands a block to the lookup
//! waiting for it and may end, forgetting the block, before that lookup's task has put it
//! in memory; a read that opens its streams in that moment would stream the block again.
//! With this it joins the lookup's fetch, which has the bytes or will have them from the
//! stream.
//!
//! A fetch that asks the origin for its block alone does not count: a read that needs
//! the block streams it as well, and whichever copy reaches memory first answers both
//! (foyer hands a fetch's waiters a copy inserted meanwhile), so a slow lone fetch does
//! not hold up a read that could stream around it. Nor does one whose stream stopped
//! before the block, so that it fell back to asking alone; a read whose first block that
//! is streams even that block alone, which it otherwise leaves to its lookup. In a fleet
//! every fetch counts: a block's fetch there is the fleet's one fetch of it, by its owner
//! or for it.

use std::collections::HashMap;
use std::sync::Arc;

use super::BlockKey;

/// The blocks fetched now: how many lookups hold each, and whether its fetch found a
/// stream bringing it.
#[derive(Default)]
pub(super) struct Fetching {
    blocks: parking_lot::Mutex<HashMap<BlockKey, Fetched>>,
}

/// How a block under way is fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fetch {
    /// Asked of the origin (or its owner) alone, so far.
    #[default]
    Alone,
    /// From an origin stream that brings it.
    FromStream,
    /// Asked of the origin alone after the stream it waited for stopped before the block.
    FellBack,
}

#[derive(Default)]
struct Fetched {
    holders: usize,
    how: Fetch,
}

impl Fetching {
    /// Notes that a lookup fetches `key` until the guard is dropped.
    pub(super) fn hold(self: &Arc<Self>, key: &BlockKey) -> Held {
        self.blocks.lock().entry(key.clone()).or_default().holders += 1;
        Held {
            fetching: self.clone(),
            key: key.clone(),
        }
    }

    /// Notes how the fetch of `key` under way fetches it from here: it found a stream
    /// bringing the block, or that stream stopped before the block.
    pub(super) fn note(&self, key: &BlockKey, how: Fetch) {
        if let Some(fetched) = self.blocks.lock().get_mut(key) {
            fetched.how = how;
        }
    }

    /// How a lookup is fetching `key`, if one is.
    pub(super) fn under_way(&self, key: &BlockKey) -> Option<Fetch> {
        self.blocks.lock().get(key).map(|fetched| fetched.how)
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
        if let Some(fetched) = blocks.get_mut(&self.key) {
            fetched.holders -= 1;
            if fetched.holders == 0 {
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
    fn a_block_is_under_way_while_any_lookup_holds_it_and_from_a_stream_while_one_brings_it() {
        let fetching = Arc::new(Fetching::default());
        fetching.note(&key(1), Fetch::FromStream);
        let first = fetching.hold(&key(1));
        assert_eq!(
            fetching.under_way(&key(1)),
            Some(Fetch::Alone),
            "a lone fetch"
        );
        let second = fetching.hold(&key(1));
        fetching.note(&key(1), Fetch::FromStream);
        assert_eq!(fetching.under_way(&key(1)), Some(Fetch::FromStream));
        assert_eq!(fetching.under_way(&key(2)), None);
        fetching.note(&key(1), Fetch::FellBack);
        assert_eq!(
            fetching.under_way(&key(1)),
            Some(Fetch::FellBack),
            "its stream stopped"
        );
        fetching.note(&key(1), Fetch::FromStream);
        drop(first);
        assert_eq!(
            fetching.under_way(&key(1)),
            Some(Fetch::FromStream),
            "the second lookup still holds it"
        );
        drop(second);
        assert_eq!(fetching.under_way(&key(1)), None);
        let again = fetching.hold(&key(1));
        assert_eq!(
            fetching.under_way(&key(1)),
            Some(Fetch::Alone),
            "a new fetch"
        );
        drop(again);
    }
}
