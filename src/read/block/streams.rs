//! The origin streams a read opens through the block step: for the blocks of its range
//! that neither this node nor what its discovery brought has, nor, in a fleet, another
//! member holds or brings (asked of the owners at once, with claims on this node's own).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::Blocks;
use crate::cache::Fetch;
use crate::read::Target;
use crate::read::claims::Bringer;
use crate::read::discovered::Discovered;
use crate::read::stream::{BLOCKS_PER_STREAM, Has, Interest};
use crate::source::{BlocksAsk, PeerId, Peers};
use crate::types::BlockIndex;

impl Blocks {
    /// Opens the origin streams that bring the blocks `wanted` of `target` this node does
    /// not have (see [`Self::has`]; nor `discovered`, nor, in cluster mode, their
    /// owners), and joins those under way that bring some (see `stream.rs`); the read
    /// holds the interests while it needs the blocks.
    pub(in crate::read) async fn open_streams(
        &self,
        target: &Target,
        wanted: std::ops::RangeInclusive<BlockIndex>,
        discovered: &Discovered,
    ) -> Vec<Interest> {
        let has = |index| match discovered.block(index) {
            Some(_) => Has::Here,
            None => self.has(target, index),
        };
        let Some(peers) = &self.inner.peers else {
            return self.inner.streams.open(target, wanted, has);
        };
        let here = |index| has(index) != Has::Missing;
        let (elsewhere, claimed) = self
            .held_elsewhere(peers, target, wanted.clone(), &here)
            .await;
        let has = |index| match has(index) {
            Has::Missing if elsewhere.contains(&index) => Has::Elsewhere,
            has => has,
        };
        let interests = self.inner.streams.open(target, wanted, has);
        if !claimed.is_empty() {
            // The blocks this read claimed that none of its streams brings after all.
            for index in claimed {
                let key = target.key(index);
                if !self.inner.streams.brings(&key) {
                    self.inner.claims.release_here(&key);
                }
            }
            self.inner.streams.claims_settled();
        }
        interests
    }

    /// Blocks a grown prefetch window issues at least at once: one stream's worth on one
    /// node; 1 in cluster mode, where a prefetch asks each block of its owner.
    pub(in crate::read) fn prefetch_batch(&self) -> u64 {
        match self.inner.peers {
            Some(_) => 1,
            None => BLOCKS_PER_STREAM,
        }
    }

    /// The streams of a prefetch of the blocks `wanted` of `target`, as
    /// [`Self::open_streams`] opens them on one node; none in cluster mode, where a
    /// prefetch asks each block of its owner (docs/cluster.md, "Cold reads in a fleet").
    pub(in crate::read) fn prefetch_streams(
        &self,
        target: &Target,
        wanted: std::ops::RangeInclusive<BlockIndex>,
    ) -> Vec<Interest> {
        if self.inner.peers.is_some() {
            return Vec::new();
        }
        self.inner
            .streams
            .open(target, wanted, |index| self.has(target, index))
    }

    /// Whether this node has block `index` of `target` without a stream: the cache holds
    /// it, or a lookup is fetching it from a stream (a read's lookup joins that fetch). A
    /// block a stream just handed to a lookup, which caches it a moment later, is not
    /// streamed again by a read that opens its streams in that moment. In a fleet a
    /// lookup fetching it alone counts too: that is the fleet's one fetch of the block.
    fn has(&self, target: &Target, index: BlockIndex) -> Has {
        let key = target.key(index);
        let fetching = match self.inner.cache.fetch_under_way(&key) {
            Some(Fetch::FromStream) => true,
            Some(Fetch::Alone | Fetch::FellBack) => self.inner.peers.is_some(),
            None => false,
        };
        if self.holds(&key, target.layout.block_len(index)) {
            Has::Here
        } else if fetching {
            Has::Fetching
        } else {
            Has::Missing
        }
    }

    /// The blocks `wanted` of `target` this node does not hold (`here`) that another
    /// member holds or brings, so no stream of this node is to bring them: this node's
    /// own blocks another member claimed (see `claims.rs`; those no one did are claimed
    /// for this node), and the others' blocks their owners said they hold or have coming,
    /// asked of each owner at once (each claims the rest for this node). A member that
    /// does not answer holds all of its blocks: they are asked of it by block. A read that
    /// misses fewer than two blocks here opens no stream, and asks no one. Also the blocks
    /// this read claimed (none, when it asked no one).
    async fn held_elsewhere(
        &self,
        peers: &Arc<dyn Peers>,
        target: &Target,
        wanted: std::ops::RangeInclusive<BlockIndex>,
        here: &impl Fn(BlockIndex) -> bool,
    ) -> (HashSet<BlockIndex>, Vec<BlockIndex>) {
        let block_size = target.layout.block_size();
        let missed: Vec<BlockIndex> = wanted.filter(|index| !here(*index)).collect();
        if missed.len() < 2 {
            let elsewhere = missed
                .into_iter()
                .filter(|index| self.owner(target, *index).is_some())
                .collect();
            return (elsewhere, Vec::new());
        }
        let mut owned: HashMap<PeerId, Vec<BlockIndex>> = HashMap::new();
        let mut elsewhere = HashSet::new();
        for index in missed.iter().copied() {
            // Claimed for this node at once: a lookup here waits for this read's streams
            // rather than fetch a block one of them is about to bring.
            let claimed = self.inner.claims.claim(&target.key(index), Bringer::Here);
            match peers.owner(&target.object, block_size, index) {
                Some(owner) => owned.entry(owner).or_default().push(index),
                None if !claimed => {
                    elsewhere.insert(index);
                }
                None => {}
            }
        }
        let asked = owned.iter().map(|(owner, indexes)| {
            let ask = BlocksAsk {
                object: &target.object,
                meta: &target.meta,
                block_size,
                indexes,
            };
            peers.held(owner, ask)
        });
        let answers = futures::future::join_all(asked).await;
        // The rest their owners claimed for this node: its lookups of them fetch them from
        // the origin (when no stream brings them) rather than from owners that would ask
        // this node back.
        elsewhere.extend(answers.into_iter().flatten());
        (elsewhere, missed)
    }
}
