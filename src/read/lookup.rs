//! A block lookup in a task of its own, as a GET starts it ahead of the block it sends:
//! the headers wait until its version is settled, the body until its bytes are read.

use std::sync::Arc;

use tracing::Instrument;

use super::block::Blocks;
use super::discovered::Discovered;
use super::{Internal, ReadError, Target};
use crate::budget::{Charge, MemoryBudget};
use crate::cache::Part;
use crate::source::ResponseHead;
use crate::types::{BlockIndex, ByteRange};

/// Starts the lookups of the blocks after `first_index` up to the last one in the
/// readahead (`readahead` blocks) that the cache does not hold, as many as the free room
/// in `budget` allows, with the first. A read of a few blocks asks the upstream for all
/// of them at once, and its headers wait until every answer has begun: an overwrite that
/// lands between its fetches (in an unversioned bucket the later ones find the version
/// gone) is retried from fresh metadata instead of cutting the body off.
pub(super) fn start_ahead(
    blocks: &Blocks,
    budget: &MemoryBudget,
    readahead: usize,
    target: &Target,
    bytes: ByteRange,
    first_index: BlockIndex,
    discovered: &Discovered,
) -> Vec<(BlockIndex, Lookup)> {
    let last_index = target.layout.block_of(bytes.last());
    let window_end = last_index.min(first_index.saturating_add(readahead as u64));
    // A read the cache holds whole starts nothing early: a hit has no fetch to start,
    // and spends no task on it.
    let Some(last_missing) = (first_index + 1..=window_end)
        .rev()
        .find(|&index| !blocks.holds(&target.key(index), target.layout.block_len(index)))
    else {
        return Vec::new();
    };
    let mut ahead = Vec::new();
    for index in first_index + 1..=last_missing {
        let Some(charge) = budget.try_reserve(target.layout.block_len(index)) else {
            break;
        };
        let lookup = Lookup::spawn(blocks, target, index, bytes, charge, discovered);
        ahead.push((index, lookup));
    }
    ahead
}

/// A block lookup in a task of its own: under way, or ended before the stream took it.
pub(super) enum Lookup {
    Running {
        index: BlockIndex,
        task: tokio::task::JoinHandle<Result<Part, ReadError>>,
        /// Arrives when the upstream began to answer for a fetch the lookup started.
        answered: ResponseHead,
    },
    Ended(Result<Part, ReadError>),
}

impl Lookup {
    /// The part of block `index` inside `bytes`, looked up in a task of its own (a client
    /// that goes away leaves it to finish, as it leaves the block's fetch).
    pub(super) fn spawn(
        blocks: &Blocks,
        target: &Target,
        index: BlockIndex,
        bytes: ByteRange,
        charge: Charge,
        discovered: &Discovered,
    ) -> Self {
        let (blocks, target, discovered) = (blocks.clone(), target.clone(), discovered.clone());
        let hold = blocks.answer_latch(&target.key(index));
        let answered = hold.latch.clone();
        let lookup = async move {
            blocks
                .block_or_discovered(&target, index, bytes, charge, &discovered, &hold.latch)
                .await
        };
        Self::Running {
            index,
            task: tokio::spawn(lookup.instrument(tracing::Span::current())),
            answered,
        }
    }

    /// Returns once the block's version can no longer fail the lookup: its fetch was
    /// answered, or the lookup ended (a hit, a fetch it joined, an error).
    pub(super) async fn settle(&mut self) {
        if let Self::Running {
            index,
            task,
            answered,
        } = self
        {
            let result = tokio::select! {
                biased;
                joined = &mut *task => joined_result(*index, joined),
                () = answered.wait() => return,
            };
            *self = Self::Ended(result);
        }
    }

    /// The part, with its block index.
    pub(super) async fn finish(self, index: BlockIndex) -> (BlockIndex, Result<Part, ReadError>) {
        let result = match self {
            Self::Running { task, .. } => joined_result(index, task.await),
            Self::Ended(result) => result,
        };
        (index, result)
    }

    pub(super) fn abort(&self) {
        if let Self::Running { task, .. } = self {
            task.abort();
        }
    }
}

/// The error of the first lookup in `ahead` that ended with one, taken out of it.
pub(super) fn failed(ahead: &mut [(BlockIndex, Lookup)]) -> Option<ReadError> {
    ahead.iter_mut().find_map(|(_, lookup)| match lookup {
        Lookup::Ended(Err(error)) => Some(std::mem::replace(error, ReadError::Changed)),
        _ => None,
    })
}

/// What a lookup task's join gave.
fn joined_result(
    index: BlockIndex,
    joined: Result<Result<Part, ReadError>, tokio::task::JoinError>,
) -> Result<Part, ReadError> {
    joined.unwrap_or_else(|error| {
        Err(ReadError::Internal(Internal::Lookup {
            index,
            cause: Arc::new(error),
        }))
    })
}
