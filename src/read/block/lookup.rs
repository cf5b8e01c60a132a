//! A block's lookup: what the read's discovery brought, else the cache (memory at once
//! when it holds the block, else the coalesced fill in `block.rs`); counted by where the
//! bytes came from, a hit sampled for verify mode, and the part charged to the budget.

use tracing::Instrument;

use super::{Blocks, lookup_span, slice_of};
use crate::budget::{Charge, MemoryBudget};
use crate::cache::{Keep, Part, Tier};
use crate::read::discovered::Discovered;
use crate::read::fetch::Owner;
use crate::read::{Internal, ReadError, Target};
use crate::source::ResponseHead;
use crate::types::{BlockIndex, ByteRange};

impl Blocks {
    /// The part of block `index` of `target` inside `bytes`: from a block the metadata
    /// discovery read, else through the cache. `answered` arrives when the upstream (or
    /// the block's owner) has begun to send the block for a fetch this lookup started:
    /// from then on the block's version can no longer fail it.
    pub(in crate::read) async fn block_or_discovered(
        &self,
        target: &Target,
        index: BlockIndex,
        bytes: ByteRange,
        charge: Charge,
        discovered: &Discovered,
        answered: &ResponseHead,
    ) -> Result<Part, ReadError> {
        let within = target.layout.slice_within(index, bytes);
        match discovered.block(index) {
            Some(block) => {
                let span = lookup_span(index);
                self.counted(&span, discovered.tier);
                let slice = slice_of(&block, within.clone()).ok_or_else(|| {
                    ReadError::Internal(Internal::WrongLength {
                        object: target.object.clone(),
                        index,
                        got: block.len(),
                        wanted: within.end,
                    })
                })?;
                Ok(Part::whole(charge.attach(slice), discovered.tier))
            }
            None => {
                let owner = self.owner(target, index);
                self.lookup(target, index, within, owner, charge, answered)
                    .await
            }
        }
    }

    /// Bytes `within` block `index` of `target` through the cache (from `owner` when
    /// another member owns it), counted as a lookup and carrying `charge` until their last
    /// slice is dropped; `answered` as in [`Self::block_or_discovered`].
    pub(super) async fn lookup(
        &self,
        target: &Target,
        index: BlockIndex,
        within: std::ops::Range<usize>,
        owner: Owner,
        charge: Charge,
        answered: &ResponseHead,
    ) -> Result<Part, ReadError> {
        let span = lookup_span(index);
        // A block memory holds is sliced before anything a fetch needs is made.
        let held = match owner {
            None => self.held_in_memory(target, index, within.clone()),
            Some(_) => None,
        };
        let part = match held {
            Some(part) => part,
            None => {
                self.cache_block(target, index, within.clone(), owner, answered)
                    .instrument(span.clone())
                    .await?
            }
        };
        Ok(self.looked_up(&span, target, index, within, part, charge))
    }

    /// Bytes `within` block `index` of `target` when the memory tier holds the block.
    pub(super) fn held_in_memory(
        &self,
        target: &Target,
        index: BlockIndex,
        within: std::ops::Range<usize>,
    ) -> Option<Part> {
        let block_len = usize::try_from(target.layout.block_len(index)).ok()?;
        let key = target.key(index);
        let cache = &self.inner.cache;
        cache
            .memory_part(&key, block_len, within, Keep::Everywhere)
            .ok()
            .flatten()
    }

    /// The part of block `index` of `target` inside `bytes` when the memory tier holds
    /// the block, another member does not own it, and `budget` has free room for it:
    /// found without a task or a wait, counted as a lookup like any other. `None`
    /// otherwise, and the block is looked up the usual way.
    pub(in crate::read) fn in_memory(
        &self,
        target: &Target,
        index: BlockIndex,
        bytes: ByteRange,
        budget: &MemoryBudget,
    ) -> Option<Part> {
        if self.owner(target, index).is_some() {
            return None;
        }
        let within = target.layout.slice_within(index, bytes);
        let charge = budget.try_reserve(within.len() as u64)?;
        let part = self.held_in_memory(target, index, within.clone())?;
        let span = lookup_span(index);
        Some(self.looked_up(&span, target, index, within, part, charge))
    }

    /// `part`, found by a lookup of the bytes `within` block `index`: counted, sampled
    /// for verification when the cache held it, and carrying `charge`.
    pub(super) fn looked_up(
        &self,
        span: &tracing::Span,
        target: &Target,
        index: BlockIndex,
        within: std::ops::Range<usize>,
        part: Part,
        charge: Charge,
    ) -> Part {
        self.counted(span, part.tier);
        if matches!(part.tier, Tier::Memory | Tier::Disk) {
            // A hit of a whole block helps judge a version being filled around it.
            if within.start == 0 && within.end as u64 == target.layout.block_len(index) {
                self.inner.integrity.hit(target, index, &part.slices);
            }
            if let Some(verifier) = &self.inner.verifier {
                verifier.hit(target, index, within, &part);
            }
        }
        Part {
            slices: charge.attach_all(part.slices),
            ..part
        }
    }

    /// Records where a block came from on its lookup span and in the lookup metric.
    pub(super) fn counted(&self, span: &tracing::Span, tier: Tier) {
        span.record("cache.tier", tier.as_str());
        span.record("cache.hit", matches!(tier, Tier::Memory | Tier::Disk));
        self.inner.metrics.count_block(tier.lookup());
    }
}
