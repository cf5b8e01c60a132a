//! One version's CRCs while its blocks are filled: each block's, hashed once as it
//! arrives (and, when the version's parts are known by then, in pieces cut at the part
//! boundaries, so that a part is judged as soon as its bytes are all known), and what they
//! are judged against.

use crate::checksum::{Algorithm, Crc, Reference};

/// The CRCs of one block as it arrived.
#[derive(Debug, Clone)]
pub(super) struct Hashed {
    /// Of the whole block, in each algorithm it was hashed with.
    whole: Vec<Crc>,
    /// Of its pieces between part boundaries, in the reference's algorithm, when the block
    /// holds a boundary and the parts were known as it arrived.
    pieces: Option<Vec<Crc>>,
}

impl Hashed {
    fn crc(&self, algorithm: Algorithm) -> Option<Crc> {
        self.whole
            .iter()
            .find(|crc| crc.algorithm == algorithm)
            .copied()
    }

    fn len(&self) -> u64 {
        self.whole.first().map_or(0, |crc| crc.len)
    }
}

/// How a block is hashed: with which algorithms, cut where.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    algorithms: Vec<Algorithm>,
    /// Offsets within the block where a part begins (0 excluded).
    cuts: Vec<u64>,
}

impl Plan {
    /// The CRCs of `bytes`; `known` is reused where it is the CRC of the same bytes.
    pub(super) fn hash(&self, bytes: &[u8], known: Option<Crc>) -> Hashed {
        let of = |algorithm| {
            known
                .filter(|known| known.algorithm == algorithm && known.len == bytes.len() as u64)
                .unwrap_or_else(|| Crc::of(algorithm, bytes))
        };
        match (self.algorithms.as_slice(), self.cuts.is_empty()) {
            ([algorithm], false) => {
                let mut pieces = Vec::with_capacity(self.cuts.len() + 1);
                let mut start = 0;
                for end in self.cuts.iter().copied().chain([bytes.len() as u64]) {
                    let (from, to) = (start as usize, end as usize);
                    pieces.push(Crc::of(*algorithm, &bytes[from..to]));
                    start = end;
                }
                let whole = pieces
                    .iter()
                    .try_fold(Crc::empty(*algorithm), |whole, piece| whole.then(*piece))
                    .unwrap_or_else(|| of(*algorithm));
                Hashed {
                    whole: vec![whole],
                    pieces: Some(pieces),
                }
            }
            (algorithms, _) => Hashed {
                whole: algorithms.iter().map(|algorithm| of(*algorithm)).collect(),
                pieces: None,
            },
        }
    }
}

/// What a comparison found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Judged {
    Right,
    Wrong {
        expected: Crc,
        computed: Crc,
    },
    /// Nothing to compare with (no reference, or blocks hashed with another algorithm).
    Unknown,
}

/// One version being filled.
pub(super) struct Record {
    reference: Option<Reference>,
    /// Where each part begins, for a reference of parts.
    starts: Vec<u64>,
    /// Parts judged already.
    judged: Vec<bool>,
    /// The origin is being asked for the reference: until it answers, each block is hashed
    /// with every algorithm S3 may name.
    pub(super) learning: bool,
    block_size: u64,
    blocks: Vec<Option<Hashed>>,
    known: usize,
}

impl Record {
    pub(super) fn new(blocks: usize, block_size: u64, learning: bool) -> Self {
        Self {
            reference: None,
            starts: Vec::new(),
            judged: Vec::new(),
            learning,
            block_size,
            blocks: vec![None; blocks],
            known: 0,
        }
    }

    /// Blocks the record has room for.
    pub(super) fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Judges the version by `reference` from now on (the first one given stands).
    pub(super) fn set_reference(&mut self, reference: Reference) {
        if self.reference.is_some() {
            return;
        }
        let mut start = 0;
        self.starts = reference
            .part_crcs()
            .iter()
            .map(|part| {
                let begins = start;
                start += part.len;
                begins
            })
            .collect();
        self.judged = vec![false; self.starts.len()];
        self.reference = Some(reference);
    }

    /// How block `index` of `len` bytes is to be hashed.
    pub(super) fn plan(&self, index: usize, len: u64) -> Plan {
        let Some(reference) = &self.reference else {
            let algorithms = if self.learning {
                Algorithm::PREFERRED.to_vec()
            } else {
                vec![Algorithm::Crc64Nvme]
            };
            return Plan {
                algorithms,
                cuts: Vec::new(),
            };
        };
        let start = index as u64 * self.block_size;
        let end = start + len;
        let first = self.starts.partition_point(|begins| *begins <= start);
        let last = self.starts.partition_point(|begins| *begins < end);
        Plan {
            algorithms: vec![reference.algorithm()],
            cuts: self.starts[first..last]
                .iter()
                .map(|begins| begins - start)
                .collect(),
        }
    }

    /// Whether block `index` of `len` bytes is worth hashing for the record: not noted
    /// yet, or noted whole where a part boundary now known cuts it.
    pub(super) fn wants(&self, index: usize, len: u64) -> bool {
        match self.blocks.get(index) {
            Some(None) => true,
            Some(Some(hashed)) => hashed.pieces.is_none() && !self.plan(index, len).cuts.is_empty(),
            None => false,
        }
    }

    /// Notes block `index`; the first part it completes that is wrong, if any.
    pub(super) fn note(&mut self, index: usize, hashed: Hashed) -> Option<Judged> {
        let start = index as u64 * self.block_size;
        let end = start + hashed.len();
        let slot = self.blocks.get_mut(index)?;
        if slot.replace(hashed).is_none() {
            self.known += 1;
        }
        if self.starts.is_empty() || end == start {
            return None;
        }
        let first = self.starts.partition_point(|begins| *begins <= start);
        let last = self.starts.partition_point(|begins| *begins < end);
        self.judge_parts(first.saturating_sub(1)..last)
    }

    /// Judges every part whose bytes are all known and that was not judged yet; the first
    /// wrong one, if any.
    pub(super) fn judge_known_parts(&mut self) -> Option<Judged> {
        self.judge_parts(0..self.starts.len())
    }

    fn judge_parts(&mut self, parts: std::ops::Range<usize>) -> Option<Judged> {
        for part in parts {
            if self.judged.get(part) != Some(&false) {
                continue;
            }
            let Some(computed) = self.part_crc(part) else {
                continue;
            };
            self.judged[part] = true;
            let expected = self.reference.as_ref()?.part_crcs()[part];
            if computed.value != expected.value {
                return Some(Judged::Wrong { expected, computed });
            }
        }
        None
    }

    /// The CRC of part `part`'s bytes, when every block it spans is known (and a block
    /// that also holds bytes of another part was cut at the boundary as it arrived).
    fn part_crc(&self, part: usize) -> Option<Crc> {
        let expected = *self.reference.as_ref()?.part_crcs().get(part)?;
        let algorithm = expected.algorithm;
        let start = self.starts[part];
        let end = start + expected.len;
        if expected.len == 0 {
            return Some(Crc::empty(algorithm));
        }
        let mut crc = Crc::empty(algorithm);
        for index in start / self.block_size..=(end - 1) / self.block_size {
            let hashed = self.blocks.get(usize::try_from(index).ok()?)?.as_ref()?;
            let block_start = index * self.block_size;
            let block_end = block_start + hashed.len();
            let piece = if start <= block_start && block_end <= end {
                hashed.crc(algorithm)?
            } else {
                // Piece k begins at the block's start or at the k-th part start within it.
                let from = start.max(block_start);
                let k = self.starts.partition_point(|begins| *begins <= from)
                    - self.starts.partition_point(|begins| *begins <= block_start);
                *hashed.pieces.as_ref()?.get(k)?
            };
            crc = crc.then(piece)?;
        }
        (crc.len == expected.len).then_some(crc)
    }

    /// Whether every block is known.
    pub(super) fn complete(&self) -> bool {
        self.known == self.blocks.len()
    }

    /// The whole version against the reference.
    pub(super) fn judge_whole(&self) -> Judged {
        let Some(expected) = self.reference.as_ref().and_then(Reference::whole) else {
            return Judged::Unknown;
        };
        let computed = self
            .blocks
            .iter()
            .try_fold(Crc::empty(expected.algorithm), |whole, hashed| {
                whole.then(hashed.as_ref()?.crc(expected.algorithm)?)
            });
        match computed {
            Some(computed) if computed.value == expected.value => Judged::Right,
            Some(computed) => Judged::Wrong { expected, computed },
            None => Judged::Unknown,
        }
    }
}
