//! Claims ([`Claims`]): in cluster mode, the blocks of this node's that a member said its
//! origin stream brings, so that a lookup of one here asks that member instead of the
//! origin, and another member asking about it is told it is coming; and the blocks a read
//! of this node is about to stream, which the lookups here wait for.
//!
//! A member about to stream a cold read asks each owner which of the blocks it holds or
//! has coming; the owner claims the others for that member at once, in the same step, so
//! of two members that ask together only one streams a block. A claim lasts until the
//! block is handed over or [`CLAIMED_FOR`] passes, whichever first. A lookup that asks the
//! claiming member is never stuck: that member's own lookup of the block joins its
//! stream, or fetches the block alone when the stream stopped, as a lookup there always
//! does.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::cache::BlockKey;
use crate::source::PeerId;

/// How long a claim holds at most: a stream slower than this leaves its blocks' lookups
/// to fetch them the usual way.
const CLAIMED_FOR: Duration = Duration::from_secs(30);
/// Claims held at most; past it, those that expired are dropped before a new one is made.
const CLAIMS_HELD: usize = 65_536;

/// Who brings a claimed block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Bringer {
    /// This node's own stream (or the stream a read of this node is about to open).
    Here,
    /// Another member's stream.
    Member(PeerId),
}

/// Cheap to clone.
#[derive(Default, Clone)]
pub(super) struct Claims {
    held: std::sync::Arc<parking_lot::Mutex<HashMap<BlockKey, (Bringer, Instant)>>>,
}

impl Claims {
    /// Claims block `key` for `bringer` unless a claim of another bringer holds; whether
    /// `bringer` holds it now.
    pub(super) fn claim(&self, key: &BlockKey, bringer: Bringer) -> bool {
        let now = Instant::now();
        let mut held = self.held.lock();
        if let Some((by, until)) = held.get(key)
            && *until > now
            && *by != bringer
        {
            return false;
        }
        if held.len() >= CLAIMS_HELD {
            held.retain(|_, (_, until)| *until > now);
        }
        if held.len() < CLAIMS_HELD {
            held.insert(key.clone(), (bringer, now + CLAIMED_FOR));
        }
        true
    }

    /// Who brings block `key`, while a claim holds.
    pub(super) fn bringer(&self, key: &BlockKey) -> Option<Bringer> {
        let held = self.held.lock();
        let (by, until) = held.get(key)?;
        (*until > Instant::now()).then(|| by.clone())
    }

    /// Block `key` arrived: its claim ends.
    pub(super) fn release(&self, key: &BlockKey) {
        self.held.lock().remove(key);
    }

    /// No stream of this node brings block `key` after all: this node's claim of it ends.
    pub(super) fn release_here(&self, key: &BlockKey) {
        let mut held = self.held.lock();
        if held.get(key).is_some_and(|(by, _)| *by == Bringer::Here) {
            held.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ObjectRef;

    fn key(index: u64) -> BlockKey {
        let object = ObjectRef::new("bucket", "key").unwrap();
        BlockKey::new(&object, "\"etag\"".into(), 1024, index)
    }

    #[test]
    fn the_first_member_to_claim_a_block_brings_it_until_it_arrives() {
        let claims = Claims::default();
        let (a, b) = (
            Bringer::Member("10.0.0.1:9100".into()),
            Bringer::Member("10.0.0.2:9100".into()),
        );
        assert!(claims.claim(&key(0), a.clone()));
        assert!(!claims.claim(&key(0), b.clone()), "claimed by another");
        assert!(!claims.claim(&key(0), Bringer::Here));
        assert!(claims.claim(&key(0), a.clone()), "the same member again");
        assert_eq!(claims.bringer(&key(0)), Some(a));
        assert_eq!(claims.bringer(&key(1)), None);
        claims.release(&key(0));
        assert!(claims.claim(&key(0), b.clone()));
        assert_eq!(claims.bringer(&key(0)), Some(b));
    }

    #[test]
    fn a_block_this_node_claimed_and_does_not_stream_is_released_and_no_other_claim() {
        let claims = Claims::default();
        assert!(claims.claim(&key(1), Bringer::Here));
        claims.release_here(&key(1));
        assert_eq!(claims.bringer(&key(1)), None);
        // Another member's claim is not this node's to release.
        let other = Bringer::Member("10.0.0.1:9100".into());
        assert!(claims.claim(&key(3), other.clone()));
        claims.release_here(&key(3));
        assert_eq!(claims.bringer(&key(3)), Some(other));
    }
}
