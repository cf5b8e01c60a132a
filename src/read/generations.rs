//! Each object's write generation: what makes an invalidation win over a discovery that
//! was under way when it began.
//!
//! Invariants: each object has a generation that every invalidation bumps; metadata a
//! discovery learned is cached only if the generation did not move meanwhile, and readers
//! after an invalidation never join a discovery that started before it. "Check the
//! generation, then insert" and "bump, then remove" are each one step under the
//! generation's shard lock, so they never interleave: a record stored after a write's
//! invalidation began can never be one learnt before it. A record carries the generation
//! it was stored under and is served only while that is still the object's, so a copy
//! of an older record that comes back after the invalidation (from foyer's disk write
//! queue, or a disk read that was under way) is revalidated, never served.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::source::Lease;
use crate::types::ObjectRef;

const GENERATION_SHARDS: usize = 16 * 1024;

/// Per-object write generations, sharded by key hash: an invalidation of one object moves
/// the generation of the few objects sharing its shard, which costs them a revalidation
/// (cached records carry the generation they were stored under). 16 Ki shards of 16 bytes:
/// at 100 writes a second a shard moves about every 160 s, past the default metadata TTL.
/// Reading a generation takes no lock (every GET does); a shard's lock is held only for a
/// check and an in-memory insert, or a bump and an in-memory remove.
pub(super) struct Generations {
    shards: Box<[Shard]>,
    /// The fleet lease, whose epoch is part of every object's generation.
    lease: Arc<Lease>,
    hasher: std::collections::hash_map::RandomState,
    /// Runs between a store's check and its store: lets a test put an invalidation there.
    #[cfg(test)]
    pub(super) after_check: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// Runs once a reader has taken an object's generation: lets a test renew the lease
    /// there.
    #[cfg(test)]
    pub(super) after_read: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

#[derive(Default)]
struct Shard {
    generation: AtomicU64,
    /// Makes "check, then store" and "bump, then forget" one step each.
    steps: Mutex<()>,
}

impl Generations {
    /// Generations under `lease` (see [`Lease`]).
    pub(super) fn new(lease: Arc<Lease>) -> Self {
        Self {
            shards: (0..GENERATION_SHARDS).map(|_| Shard::default()).collect(),
            lease,
            hasher: std::collections::hash_map::RandomState::new(),
            #[cfg(test)]
            after_check: Mutex::new(None),
            #[cfg(test)]
            after_read: Mutex::new(None),
        }
    }

    /// The shard of `object`: one for its key's current version, one for all the
    /// versions a read names by id. A version's bytes never change, but its tags,
    /// retention and legal hold do, through writes on the key, each of which invalidates
    /// both the current version and one named version (`null`, or the one it names): so
    /// every named version's record moves with any write on the key, while the current
    /// version's moves only with its own invalidation (a write of unknown outcome keeps
    /// it servable while the origin is down).
    fn shard(&self, object: &ObjectRef) -> &Shard {
        let key = (object.bucket(), object.key(), object.version().is_some());
        &self.shards[self.hasher.hash_one(key) as usize % GENERATION_SHARDS]
    }

    /// The generation of the objects of `shard`: its count plus the lease's epoch.
    fn generation(&self, shard: &Shard) -> u64 {
        shard.generation.load(Ordering::Acquire) + self.lease.epoch()
    }

    /// `object`'s generation: its shard's count of invalidations plus the lease's epoch.
    /// Both only grow, so the sum moves whenever either does.
    pub(super) fn current(&self, object: &ObjectRef) -> u64 {
        let generation = self.generation(self.shard(object));
        #[cfg(test)]
        if let Some(then) = self.after_read.lock().take() {
            then();
        }
        generation
    }

    /// Whether metadata cached under `generation`, read earlier, may be served as it is:
    /// the fleet lease holds now, and has not been renewed after running out since then.
    /// The lease is read first: a renewal after a lapse moves the epoch before the lease
    /// holds again, so a lease seen holding with the epoch unmoved held all along.
    pub(super) fn leased_since(&self, object: &ObjectRef, generation: u64) -> bool {
        self.lease.holds() && self.generation(self.shard(object)) == generation
    }

    /// Runs `store` if `object`'s generation is still `generation`, as one step against
    /// [`Self::bump_then`].
    pub(super) fn store_if_current(
        &self,
        object: &ObjectRef,
        generation: u64,
        store: impl FnOnce(),
    ) {
        let shard = self.shard(object);
        let _step = shard.steps.lock();
        if self.generation(shard) != generation {
            return;
        }
        #[cfg(test)]
        if let Some(between) = self.after_check.lock().take() {
            between();
        }
        store();
    }

    /// Moves `object`'s generation, then runs `forget` with the new one, as one step
    /// against [`Self::store_if_current`].
    pub(super) fn bump_then(&self, object: &ObjectRef, forget: impl FnOnce(u64)) {
        let shard = self.shard(object);
        let _step = shard.steps.lock();
        let generation = shard.generation.fetch_add(1, Ordering::AcqRel) + 1;
        forget(generation + self.lease.epoch());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidation_moves_only_the_generation_of_its_shard() {
        let generations = Generations::new(Arc::new(Lease::alone()));
        let first = ObjectRef::new("b", "first").unwrap();
        let before = generations.current(&first);
        generations.bump_then(&first, |_| {});
        assert_eq!(generations.current(&first), before + 1);
        let bumped: *const Shard = generations.shard(&first);
        let others: Vec<ObjectRef> = (0..100)
            .map(|index| ObjectRef::new("b", &format!("other-{index}")).unwrap())
            .collect();
        for object in &others {
            let shares_the_shard = std::ptr::eq(generations.shard(object), bumped);
            let expected = if shares_the_shard { before + 1 } else { 0 };
            assert_eq!(generations.current(object), expected, "{object:?}");
        }
        // The shards are spread: almost every other object keeps its own generation.
        let sharing = others
            .iter()
            .filter(|object| std::ptr::eq(generations.shard(object), bumped))
            .count();
        assert!(sharing < 10, "{sharing} of 100 objects share one shard");
    }
}
