//! The disk tier's unit: a block is stored on disk as pieces (see [`super::PIECE_BYTES`]),
//! each its own foyer entry, so a disk hit reads only the pieces its range overlaps.
//! A piece read from disk twice is kept in memory (the doorkeeper remembers the first
//! read); pieces that skipped the disk under write pressure are queued again.

use std::ops::Range;

use bytes::Bytes;
use foyer::{Load, Location};

use super::writer::{FILL_WAIT, Pieces, Pushed, Retry};
use super::{BlockCache, BlockKey, CacheKey, CacheValue, Part, Tier};

impl BlockCache {
    /// The pieces of `block` that hold `within`, sliced to it, when the cache holds every
    /// one of them: from memory, else from disk. `None` when one is missing (nothing is
    /// read from disk then) or the disk tier is off.
    pub(super) async fn pieces(
        &self,
        block: &BlockKey,
        block_len: usize,
        within: Range<usize>,
    ) -> Result<Option<Part>, foyer::Error> {
        if !self.disk_in_use() {
            return Ok(None);
        }
        let indexes = within.start / self.piece_bytes..=(within.end - 1) / self.piece_bytes;
        let keys: Vec<CacheKey> = indexes
            .clone()
            .map(|index| self.piece_key(block, index))
            .collect();
        if !keys.iter().all(|key| self.piece_held(key)) {
            return Ok(None);
        }
        let spans: Vec<Range<usize>> = indexes
            .map(|index| self.piece_span(index, block_len))
            .collect();
        let loads = keys
            .into_iter()
            .zip(&spans)
            .map(|(key, span)| self.piece(key, span.len()));
        let found = futures::future::try_join_all(loads).await?;
        let mut part = Part {
            slices: Vec::with_capacity(found.len()),
            tier: Tier::Memory,
            memory_bytes: 0,
        };
        for (span, piece) in spans.into_iter().zip(found) {
            let Some((bytes, from)) = piece else {
                return Ok(None);
            };
            let start = within.start.max(span.start) - span.start;
            let end = within.end.min(span.end) - span.start;
            match from {
                Tier::Memory => part.memory_bytes += end - start,
                _ => part.tier = Tier::Disk,
            }
            part.slices.push(bytes.slice(start..end));
        }
        Ok(Some(part))
    }

    /// One piece of `length` bytes from memory, else from disk (kept in memory on its
    /// second read from disk). A piece of another length is a miss.
    async fn piece(
        &self,
        key: CacheKey,
        length: usize,
    ) -> Result<Option<(Bytes, Tier)>, foyer::Error> {
        if let Some(entry) = self.hybrid.memory().get(&key)
            && let CacheValue::Block(bytes) = entry.value()
            && bytes.len() == length
        {
            return Ok(Some((bytes.clone(), Tier::Memory)));
        }
        let listed = self.hybrid.storage().may_contains(&key);
        let value = match self.hybrid.storage().load(&key).await? {
            Load::Entry { value, .. } => value,
            Load::Piece { piece, .. } => piece.value().clone(),
            Load::Miss => {
                // foyer drops an entry whose checksum or header fails from its index and
                // answers a miss; an entry that is simply absent was never listed.
                if listed && !self.hybrid.storage().may_contains(&key) {
                    self.found_corrupt(&key);
                }
                return Ok(None);
            }
            Load::Throttled => return Ok(None),
        };
        self.health.read_succeeded();
        let CacheValue::Block(bytes) = value else {
            self.found_corrupt(&key);
            return Ok(None);
        };
        if bytes.len() != length {
            self.found_corrupt(&key);
            return Ok(None);
        }
        if self.doorkeeper.second_touch(&key) {
            self.hybrid.memory().insert_with_properties(
                key,
                CacheValue::Block(bytes.clone()),
                self.placement(Location::InMem),
            );
            self.metrics.memory_admissions.inc();
            self.fit_buffers();
        }
        Ok(Some((bytes, Tier::Disk)))
    }

    /// Counts a piece that failed verification on its way back from disk and drops it,
    /// so the block is fetched again and stored anew.
    fn found_corrupt(&self, key: &CacheKey) {
        self.metrics.disk_corrupt_pieces.inc();
        self.hybrid.storage().delete(key);
        tracing::warn!(
            ?key,
            "a block piece on disk failed verification; it is fetched again"
        );
    }

    /// Whether the cache holds all of a block of `block_len` bytes (whole in memory, or
    /// every piece), without reading it.
    pub fn holds(&self, key: &BlockKey, block_len: usize) -> bool {
        let key = self.generational(key);
        if self.hybrid.memory().contains(&CacheKey::Block(key.clone())) {
            return true;
        }
        self.disk_in_use()
            && (0..block_len.div_ceil(self.piece_bytes))
                .all(|index| self.piece_held(&self.piece_key(&key, index)))
    }

    /// Whether memory or the disk tier holds a piece (the disk's answer comes from foyer's
    /// in-memory index; rarely, a hash collision makes it a false yes, which the read
    /// then finds out).
    fn piece_held(&self, key: &CacheKey) -> bool {
        self.hybrid.memory().contains(key) || self.hybrid.storage().may_contains(key)
    }

    /// The bytes piece `index` covers in a block of `block_len` bytes.
    fn piece_span(&self, index: usize, block_len: usize) -> Range<usize> {
        let start = index * self.piece_bytes;
        start..(start + self.piece_bytes).min(block_len)
    }

    /// Queues the pieces of `block` (its `bytes`) the disk tier does not hold for it, in
    /// the disk write queue; whether any were queued. They skip the disk (counted) when
    /// the queue is full, and are not queued twice.
    pub(super) fn store_pieces(&self, block: &BlockKey, bytes: &Bytes) -> bool {
        self.missing_pieces(block, bytes)
            .is_some_and(|pieces| self.writes.push(block, pieces) == Pushed::Queued)
    }

    /// Like [`Self::store_pieces`], for a block just fetched: when the queue is full, it
    /// waits for room (up to [`FILL_WAIT`]), so that fills run at the disk's pace.
    pub(super) async fn store_fetched(&self, block: &BlockKey, bytes: &Bytes) {
        if let Some(pieces) = self.missing_pieces(block, bytes) {
            self.writes.push_waiting(block, pieces, FILL_WAIT).await;
        }
    }

    /// The pieces of a block that skipped the disk tier, to write now that it has room:
    /// from those `kept` for it, else from memory; those the disk lacks, while the
    /// object's purge generation is still the block's.
    pub(super) fn skipped_pieces(&self, block: &BlockKey, kept: Option<Pieces>) -> Retry {
        if self.purges.generation(block.object()) != block.generation {
            return Retry::Needless;
        }
        let missing = match kept {
            Some(pieces) => self.missing_kept(block, pieces),
            None => {
                let Some(entry) = self.hybrid.memory().get(&CacheKey::Block(block.clone())) else {
                    // Memory evicted it: lost, unless the disk took it meanwhile.
                    let on_disk = self
                        .hybrid
                        .storage()
                        .may_contains(&self.piece_key(block, 0));
                    return if on_disk || self.writes.holds(block) {
                        Retry::Needless
                    } else {
                        Retry::Lost
                    };
                };
                let CacheValue::Block(bytes) = entry.value() else {
                    return Retry::Lost;
                };
                self.missing_pieces(block, bytes)
            }
        };
        missing.map_or(Retry::Needless, Retry::Write)
    }

    /// Of the `pieces` kept for `block`, those the disk tier lacks, unless the block is
    /// queued for it again.
    fn missing_kept(&self, block: &BlockKey, pieces: Pieces) -> Option<Pieces> {
        self.takes_pieces_of(block)
            .then(|| self.lacking(pieces))
            .flatten()
    }

    /// The pieces of `block` the disk tier lacks and that are not queued for it yet.
    pub(super) fn missing_pieces(&self, block: &BlockKey, bytes: &Bytes) -> Option<Pieces> {
        if !self.takes_pieces_of(block) {
            return None;
        }
        let pieces = (0..bytes.len().div_ceil(self.piece_bytes))
            .map(|index| {
                let span = self.piece_span(index, bytes.len());
                (self.piece_key(block, index), bytes.slice(span))
            })
            .collect();
        self.lacking(pieces)
    }

    /// Whether the disk tier takes pieces of `block` now: it is in use, and the block is
    /// not queued for it already.
    fn takes_pieces_of(&self, block: &BlockKey) -> bool {
        self.disk_in_use() && !self.writes.holds(block)
    }

    /// Those of `pieces` the disk tier does not hold; `None` when it holds them all.
    fn lacking(&self, pieces: Pieces) -> Option<Pieces> {
        let pieces: Pieces = pieces
            .into_iter()
            .filter(|(key, _)| !self.hybrid.storage().may_contains(key))
            .collect();
        (!pieces.is_empty()).then_some(pieces)
    }

    /// Queues the pieces of a block served from memory for the disk tier again when the
    /// tier does not hold them: they skipped the disk while its write queue was full.
    /// Without this, memory would evict the block and the next read would fetch it from
    /// the upstream again. Pieces on disk or in flight to it are left alone.
    ///
    /// Each hit asks the disk's index for one piece, `probe` (the first the hit reads),
    /// not all of them: a block that skipped the disk lacks every piece, and one whose
    /// pieces the disk evicted in part is found lacking by the hits that read them.
    pub(super) fn readmit(&self, block: &BlockKey, bytes: &Bytes, probe: usize) {
        if !self.disk_in_use()
            || self
                .hybrid
                .storage()
                .may_contains(&self.piece_key(block, probe))
        {
            return;
        }
        if self.store_pieces(block, bytes) {
            self.metrics.disk_readmissions.inc();
        }
    }
}
