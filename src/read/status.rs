//! What the cache did for one request: where its metadata came from and the
//! `Cache-Status` header that says so.

use super::discovered::{Discovered, MetaSource};
use crate::cache::Tier;

/// What the cache did for one GET or HEAD, rendered as RFC 9211's `Cache-Status`:
/// `Portico; hit; detail=memory`, `Portico; fwd=miss; stored; collapsed`,
/// `Portico; fwd=stale; fwd-status=200`, `Portico; fwd=bypass`, with `ttl` (seconds of
/// metadata freshness left) where it is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStatus {
    source: MetaSource,
    /// Where the response's first block came from; `None` when it has no body.
    first_block: Option<Tier>,
    /// This request waited for another's upstream request.
    collapsed: bool,
    /// The object is never cached (no ETag names its version).
    bypass: bool,
    ttl: Option<std::time::Duration>,
}

impl CacheStatus {
    pub(super) fn new(discovered: &Discovered, first_block: Option<Tier>) -> Self {
        Self {
            source: discovered.source,
            first_block,
            collapsed: discovered.tier == Tier::Coalesced || first_block == Some(Tier::Coalesced),
            bypass: false,
            ttl: discovered.ttl,
        }
    }

    /// A read a rule sends past the cache, straight to the upstream.
    pub fn pass_through() -> Self {
        Self::bypass(&Discovered::default())
    }

    pub(super) fn bypass(discovered: &Discovered) -> Self {
        Self {
            bypass: true,
            ..Self::new(discovered, Some(Tier::Upstream))
        }
    }
}

impl CacheStatus {
    /// Whether the object's metadata or its first block came from the upstream.
    fn fetched(&self) -> bool {
        self.source == MetaSource::Fetched
            || matches!(self.first_block, Some(Tier::Upstream | Tier::Coalesced))
    }

    /// Whether the answer is a hit (`Portico; hit…`): the cache answered without asking
    /// the upstream for the metadata or the first block.
    pub fn is_hit(&self) -> bool {
        !self.bypass && !self.fetched() && self.source != MetaSource::Revalidated
    }
}

impl std::fmt::Display for CacheStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.bypass {
            return f.write_str("Portico; fwd=bypass");
        }
        let fetched = self.fetched();
        f.write_str(match self.source {
            _ if fetched => "Portico; fwd=miss; stored",
            MetaSource::Revalidated => "Portico; fwd=stale; fwd-status=200",
            MetaSource::Stale => "Portico; hit; detail=stale-upstream-failed",
            // `Fetched` is answered by the first arm.
            MetaSource::Fresh | MetaSource::Fetched => "Portico; hit",
        })?;
        if self.collapsed {
            f.write_str("; collapsed")?;
        }
        if let Some(ttl) = self.ttl
            && self.source != MetaSource::Stale
        {
            write!(f, "; ttl={}", ttl.as_secs())?;
        }
        match self.first_block {
            Some(Tier::Memory) if self.source != MetaSource::Stale => {
                f.write_str("; detail=memory")
            }
            Some(Tier::Disk) if self.source != MetaSource::Stale => f.write_str("; detail=disk"),
            _ => Ok(()),
        }
    }
}
