//! What other cluster members ask of this node as the owner of blocks (the peer listener
//! calls these): a block's bytes, which blocks it holds, and a block another member's
//! origin stream brought for it.

use std::sync::Arc;

use bytes::Bytes;

use super::{FillFor, Internal, ReadError, ReadPath, Target};
use crate::cache::Part;
use crate::object::ObjectMeta;
use crate::source::PeerId;
use crate::types::{BlockIndex, ObjectRef};

impl ReadPath {
    /// The bytes `within` block `index` of the version `meta` names, for a member that
    /// asked this node (its owner) for them, charged to the budget (see
    /// `Blocks::serve_peer`: never from another member). A fill from the origin is for
    /// `fill` (the tenant and class the member named), else the default tenant's demand.
    pub async fn serve_peer(
        &self,
        object: &ObjectRef,
        meta: Arc<ObjectMeta>,
        index: BlockIndex,
        within: std::ops::Range<u64>,
        fill: Option<FillFor>,
    ) -> Result<Part, ReadError> {
        let target = Target::new(object, meta, self.block_size);
        let target = match fill {
            Some(fill) => target.for_fill(fill),
            None => target,
        };
        let length = within.end.saturating_sub(within.start);
        let charge = self.budget.reserve_within(length).await?;
        self.blocks.serve_peer(&target, index, within, charge).await
    }

    /// Which of the blocks `indexes` of the version `meta` names the cache holds whole or
    /// a stream brings; the others are claimed for `member`, whose stream is to bring them
    /// (see `claims.rs`).
    pub fn blocks_held(
        &self,
        object: &ObjectRef,
        meta: Arc<ObjectMeta>,
        indexes: &[BlockIndex],
        member: PeerId,
    ) -> Vec<BlockIndex> {
        let target = Target::new(object, meta, self.block_size);
        self.blocks.held_or_claimed(&target, indexes, &member)
    }

    /// Caches `bytes` as block `index` of the version `meta` names: another member's
    /// origin stream brought it for this node, its owner. Refused when it is not that
    /// block's length.
    pub async fn take_handed(
        &self,
        object: &ObjectRef,
        meta: Arc<ObjectMeta>,
        index: BlockIndex,
        bytes: Bytes,
    ) -> Result<(), ReadError> {
        let target = Target::new(object, meta, self.block_size);
        let length = target.layout.block_len(index);
        if target.layout.block_range(index).is_none() || bytes.len() as u64 != length {
            return Err(ReadError::Internal(Internal::WrongLength {
                object: object.clone(),
                index,
                got: bytes.len(),
                wanted: usize::try_from(length).unwrap_or(usize::MAX),
            }));
        }
        self.blocks.handed(&target, index, bytes).await;
        Ok(())
    }
}
