//! Where a block came from: memory, disk, the upstream, or another request's fetch; with
//! how each is counted in the metrics.

use bytes::Bytes;

use crate::telemetry::{BlockLookup, ServedFrom};

/// Where a block came from, for metrics and the access path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Memory,
    Disk,
    /// This request fetched it from the upstream.
    Upstream,
    /// Another request was already fetching it; this one waited for that fetch.
    Coalesced,
}

impl Tier {
    /// How a lookup that found its block here is counted.
    pub fn lookup(self) -> BlockLookup {
        match self {
            Self::Memory => BlockLookup::MemoryHit,
            Self::Disk => BlockLookup::DiskHit,
            Self::Upstream => BlockLookup::Miss,
            Self::Coalesced => BlockLookup::Coalesced,
        }
    }

    /// How bytes from here are counted when they are served.
    pub fn served_from(self) -> ServedFrom {
        match self {
            Self::Memory => ServedFrom::Memory,
            Self::Disk => ServedFrom::Disk,
            Self::Upstream => ServedFrom::Upstream,
            Self::Coalesced => ServedFrom::Coalesced,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Disk => "disk",
            Self::Upstream => "upstream",
            Self::Coalesced => "coalesced",
        }
    }
}

/// The bytes a lookup found for part of a block: consecutive slices (one of a whole
/// block, or one per piece read), the tier they came from — [`Tier::Disk`] when any piece
/// was read from disk — and how many of them came from pieces held in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub slices: Vec<Bytes>,
    pub tier: Tier,
    /// Bytes from pieces memory held (read from disk twice before); what matters is the
    /// share of a [`Tier::Disk`] part. 0 for a slice of a whole block.
    pub memory_bytes: usize,
}

impl Part {
    /// One slice of a whole block.
    pub fn whole(slice: Bytes, tier: Tier) -> Self {
        Self {
            slices: vec![slice],
            tier,
            memory_bytes: 0,
        }
    }

    /// Bytes in all the slices.
    pub fn total_bytes(&self) -> usize {
        self.slices.iter().map(Bytes::len).sum()
    }
}
