//! The block step's part in a fleet: which member owns a block, which blocks of a read
//! other members hold or bring (so this node's streams skip them), what this node answers
//! a member that asks it for a block, and the blocks other members' streams hand to it.

use bytes::Bytes;

use super::{Blocks, lookup_span, slice_of};
use crate::budget::Charge;
use crate::cache::{BlockKey, Part, Tier};
use crate::read::claims::Bringer;
use crate::read::fetch::{BlockFetch, Owner};
use crate::read::{Internal, ReadError, Target};
use crate::source::{PeerId, ResponseHead};
use crate::types::BlockIndex;

impl Blocks {
    /// Of the blocks `indexes` of `target` (this node's), those the cache holds whole or a
    /// stream brings; the others are claimed for `member` (see `claims.rs`).
    pub(in crate::read) fn held_or_claimed(
        &self,
        target: &Target,
        indexes: &[BlockIndex],
        member: &PeerId,
    ) -> Vec<BlockIndex> {
        let bringer = Bringer::Member(member.clone());
        indexes
            .iter()
            .copied()
            .filter(|index| target.layout.block_range(*index).is_some())
            .filter(|index| {
                let key = target.key(*index);
                self.holds(&key, target.layout.block_len(*index))
                    || self.inner.streams.brings(&key)
                    || !self.inner.claims.claim(&key, bringer.clone())
            })
            .collect()
    }

    /// Block `index` of `target`, which another member's stream brought for this node
    /// (its owner): cached, and its claim ends.
    pub(in crate::read) async fn handed(&self, target: &Target, index: BlockIndex, bytes: Bytes) {
        let key = target.key(index);
        if !self.holds(&key, target.layout.block_len(index)) {
            self.inner.cache.insert_fetched(key.clone(), bytes).await;
        }
        self.inner.claims.release(&key);
    }

    /// Notes that a lookup here asks another member for block `key`, until the note is
    /// dropped: a member that asks this node for it meanwhile does not wait for that
    /// lookup (see [`Self::serve_peer`]).
    pub(super) fn asking(&self, key: BlockKey) -> Asking {
        *self.inner.asking.lock().entry(key.clone()).or_default() += 1;
        Asking {
            blocks: self.clone(),
            key,
        }
    }

    /// The member a fetch of block `index` of `target` asks first, when no stream of this
    /// node brings it: `owner`, or, for a block of this node's, the member whose stream
    /// brings it, while its claim holds.
    pub(super) fn ask_first(&self, target: &Target, index: BlockIndex, owner: Owner) -> Owner {
        let peers = self.inner.peers.as_ref()?;
        match (owner, self.inner.claims.bringer(&target.key(index))) {
            (Some(owner), _) => Some(owner),
            (None, Some(Bringer::Member(member))) => Some((peers.clone(), member)),
            (None, _) => None,
        }
    }

    /// The bytes `within` block `index` of the version `meta` names, for a member that
    /// asked this node (its owner) for them: from the cache, or from the whole block
    /// fetched once from this node's own source, or from the member whose stream brings
    /// it (see `claims.rs`). A block of another member's (the owner asked this node,
    /// whose stream it claimed for, or the members' views of the membership differ for a
    /// moment) is looked up here as this node's own, unless a lookup here is asking a
    /// member for it: then it comes from memory, from a stream of this node's, or from the
    /// source, never after that lookup, so requests cannot go round in circles. `charge`
    /// covers the bytes asked for.
    pub(in crate::read) async fn serve_peer(
        &self,
        target: &Target,
        index: BlockIndex,
        within: std::ops::Range<u64>,
        charge: Charge,
    ) -> Result<Part, ReadError> {
        let length = target.layout.block_len(index);
        if target.layout.block_range(index).is_none()
            || within.start >= within.end
            || within.end > length
        {
            return Err(ReadError::Internal(Internal::OutsideObject {
                index,
                within,
            }));
        }
        let within = within.start as usize..within.end as usize;
        let answered = ResponseHead::default();
        let key = target.key(index);
        if self.owner(target, index).is_none() || !self.inner.asking.lock().contains_key(&key) {
            return self
                .lookup(target, index, within, None, charge, &answered)
                .await;
        }
        let span = lookup_span(index);
        let part = match self.held_in_memory(target, index, within.clone()) {
            Some(part) => part,
            None => {
                let fetch = BlockFetch {
                    patient: true,
                    ..self.block_fetch(target, index, &answered)?
                };
                let block = match fetch.streamed(&self.inner.streams).await {
                    Some(result) => result,
                    None => fetch.run(None, ResponseHead::default()).await,
                };
                let block = block.map_err(ReadError::from_upstream)?;
                let got = block.len();
                let slice = slice_of(&block, within.clone()).ok_or_else(|| {
                    ReadError::Internal(Internal::WrongLength {
                        object: target.object.clone(),
                        index,
                        got,
                        wanted: within.end,
                    })
                })?;
                Part::whole(slice, Tier::Upstream)
            }
        };
        Ok(self.looked_up(&span, target, index, within, part, charge))
    }

    /// The member that owns block `index` of `target`, when cluster mode is on and it is
    /// not this node.
    pub(super) fn owner(&self, target: &Target, index: BlockIndex) -> Owner {
        let peers = self.inner.peers.as_ref()?;
        let owner = peers.owner(&target.object, target.layout.block_size(), index)?;
        Some((peers.clone(), owner))
    }
}

/// A lookup's note that it is asking another member for a block, until dropped.
pub(super) struct Asking {
    blocks: Blocks,
    key: BlockKey,
}

impl Drop for Asking {
    fn drop(&mut self) {
        let mut asking = self.blocks.inner.asking.lock();
        if let Some(count) = asking.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                asking.remove(&self.key);
            }
        }
    }
}
