//! Block ownership by rendezvous (highest-random-weight) hashing: every member scores every
//! block, the highest score owns it. One object's blocks spread over all members, and a
//! member that joins or leaves moves only the blocks it gains or had — about 1/n of them.
//!
//! The block is named by bucket, key, block size and index, not by version: a node can
//! route the first block of an object before it knows the object's version, and every
//! request to the owner still carries the ETag it must answer for.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use hrw_hash::{HrwNode, HrwNodes};

use crate::source::PeerId;
use crate::types::{BlockIndex, ObjectRef};

/// A member as the ring scores it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Member(PeerId);

impl HrwNode for Member {}

/// The block a score is computed for, hashed as fixed bytes (stable across platforms and
/// releases: every member must compute the same owner).
struct Spot<'a> {
    bucket: &'a str,
    key: &'a str,
    block_size: u64,
    index: BlockIndex,
}

impl Hash for Spot<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(&(self.bucket.len() as u64).to_le_bytes());
        state.write(self.bucket.as_bytes());
        state.write(&(self.key.len() as u64).to_le_bytes());
        state.write(self.key.as_bytes());
        state.write(&self.block_size.to_le_bytes());
        state.write(&self.index.to_le_bytes());
    }
}

/// The members, ready to rank them for any block.
pub struct Ring {
    members: Vec<PeerId>,
    nodes: HrwNodes<Member>,
}

impl Ring {
    /// A ring of `members` (duplicates count once).
    pub fn new(members: impl IntoIterator<Item = PeerId>) -> Self {
        let mut members: Vec<PeerId> = members.into_iter().collect();
        members.sort();
        members.dedup();
        let nodes = HrwNodes::new(members.iter().cloned().map(Member));
        Self { members, nodes }
    }

    /// The members, sorted.
    pub fn members(&self) -> &[PeerId] {
        &self.members
    }

    /// Every member, best owner of block `index` of `object` first.
    pub fn ranked(
        &self,
        object: &ObjectRef,
        block_size: u64,
        index: BlockIndex,
    ) -> impl Iterator<Item = &PeerId> {
        let spot = Spot {
            bucket: object.bucket(),
            key: object.key(),
            block_size,
            index,
        };
        // The crate's iterator borrows the spot, which lives only here.
        let ranked: Vec<&PeerId> = self.nodes.sorted(&spot).map(|member| &member.0).collect();
        ranked.into_iter()
    }

    /// The share of blocks each member owns, measured over `samples` blocks of synthetic
    /// objects (what `/admin/cluster` reports), members for which `passed_over` holds
    /// handing theirs to the next member in each block's order.
    pub fn shares(
        &self,
        samples: u64,
        passed_over: impl Fn(&PeerId) -> bool,
    ) -> Vec<(PeerId, f64)> {
        let mut owned = vec![0u64; self.members.len()];
        let Ok(object) = ObjectRef::new("portico-ownership-sample", "blocks") else {
            return Vec::new();
        };
        for index in 0..samples {
            let owner = self
                .ranked(&object, 1 << 22, index)
                .find(|member| !passed_over(member));
            if let Some(at) = owner.and_then(|owner| self.members.iter().position(|m| m == owner)) {
                owned[at] += 1;
            }
        }
        self.members
            .iter()
            .zip(owned)
            .map(|(member, count)| (member.clone(), count as f64 / samples.max(1) as f64))
            .collect()
    }
}

/// A member id from its `host:port`.
pub fn peer_id(address: &str) -> PeerId {
    Arc::from(address)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(count: u16) -> Ring {
        Ring::new((0..count).map(|at| peer_id(&format!("10.0.0.{at}:9100"))))
    }

    fn owners(ring: &Ring, blocks: u64) -> Vec<PeerId> {
        let object = ObjectRef::new("datasets", "shard-00017.parquet").unwrap();
        (0..blocks)
            .map(|index| ring.ranked(&object, 4 << 20, index).next().unwrap().clone())
            .collect()
    }

    #[test]
    fn one_objects_blocks_spread_over_every_member() {
        let three = ring(3);
        let owners = owners(&three, 3000);
        for member in three.members() {
            let share = owners.iter().filter(|owner| *owner == member).count() as f64 / 3000.0;
            assert!(
                (0.28..0.39).contains(&share),
                "{member} owns {share:.3} of the blocks, expected about 1/3"
            );
        }
    }

    #[test]
    fn a_fourth_member_takes_about_a_quarter_of_the_blocks_and_nothing_else_moves() {
        let blocks = 10_000;
        let before = owners(&ring(3), blocks);
        let after = owners(&ring(4), blocks);
        let newcomer = peer_id("10.0.0.3:9100");
        let moved: Vec<usize> = (0..before.len())
            .filter(|&at| before[at] != after[at])
            .collect();
        let share = moved.len() as f64 / blocks as f64;
        assert!(
            (0.22..0.28).contains(&share),
            "{share:.3} of the blocks changed owner going from 3 to 4 members, expected about 1/4"
        );
        assert!(
            moved.iter().all(|&at| after[at] == newcomer),
            "a block moved between two members that both stayed"
        );
    }

    #[test]
    fn a_member_leaving_moves_only_its_own_blocks() {
        let blocks = 5_000;
        let before = owners(&ring(4), blocks);
        let after = owners(&ring(3), blocks);
        let gone = peer_id("10.0.0.3:9100");
        for at in 0..before.len() {
            if before[at] != gone {
                assert_eq!(
                    before[at], after[at],
                    "block {at} moved although its owner stayed"
                );
            }
        }
    }

    #[test]
    fn ownership_is_the_same_whatever_order_the_members_are_listed_in() {
        let forward = ring(5);
        let backward = Ring::new(forward.members().iter().rev().cloned());
        assert_eq!(owners(&forward, 500), owners(&backward, 500));
    }

    #[test]
    fn shares_pass_suspect_members_blocks_to_the_next_in_order() {
        let three = ring(3);
        let suspect = peer_id("10.0.0.1:9100");
        let shares = three.shares(3000, |member| *member == suspect);
        let of = |name: &str| shares.iter().find(|(m, _)| &**m == name).unwrap().1;
        assert_eq!(of("10.0.0.1:9100"), 0.0);
        assert!((of("10.0.0.0:9100") + of("10.0.0.2:9100") - 1.0).abs() < 1e-9);
        assert!(of("10.0.0.0:9100") > 0.4 && of("10.0.0.2:9100") > 0.4);
    }
}
