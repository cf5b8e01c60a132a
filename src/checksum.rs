//! The CRCs S3 keeps of whole objects (CRC32, CRC32C, CRC64NVME), computed over pieces
//! and combined: the CRC of `a ++ b` follows from the CRCs of `a` and `b` and the length
//! of `b`, so the CRCs of an object's blocks give the object's without reading it again.
//!
//! S3 sends a CRC as the base64 of its big-endian bytes (4 for the 32-bit ones, 8 for
//! CRC64NVME); [`Crc::base64`] and [`full_object`] speak that encoding.

use crc_fast::CrcAlgorithm;

use crate::object::Checksums;

/// A CRC S3 can report for a whole object (`x-amz-checksum-type: FULL_OBJECT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Crc32,
    Crc32c,
    Crc64Nvme,
}

impl Algorithm {
    /// The preferred ones first: the one S3's SDKs use by default, then the cheaper CRC.
    pub const PREFERRED: [Self; 3] = [Self::Crc64Nvme, Self::Crc32c, Self::Crc32];

    /// The name S3 uses in `x-amz-checksum-<name>`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Crc32 => "crc32",
            Self::Crc32c => "crc32c",
            Self::Crc64Nvme => "crc64nvme",
        }
    }

    fn crc_fast(self) -> CrcAlgorithm {
        match self {
            Self::Crc32 => CrcAlgorithm::Crc32IsoHdlc,
            Self::Crc32c => CrcAlgorithm::Crc32Iscsi,
            Self::Crc64Nvme => CrcAlgorithm::Crc64Nvme,
        }
    }

    /// Bytes of the value S3 encodes.
    fn width(self) -> usize {
        match self {
            Self::Crc32 | Self::Crc32c => 4,
            Self::Crc64Nvme => 8,
        }
    }
}

/// The CRC of some bytes, with their length (which combining needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crc {
    pub algorithm: Algorithm,
    pub value: u64,
    pub len: u64,
}

impl Crc {
    /// The CRC of `bytes`.
    pub fn of(algorithm: Algorithm, bytes: &[u8]) -> Self {
        Self {
            algorithm,
            value: crc_fast::checksum(algorithm.crc_fast(), bytes),
            len: bytes.len() as u64,
        }
    }

    /// The CRC of no bytes: what [`Self::then`] starts from.
    pub fn empty(algorithm: Algorithm) -> Self {
        Self::of(algorithm, &[])
    }

    /// The CRC of this CRC's bytes followed by `next`'s; `None` when they are of
    /// different algorithms.
    pub fn then(self, next: Self) -> Option<Self> {
        if self.algorithm != next.algorithm {
            return None;
        }
        if next.len == 0 {
            return Some(self);
        }
        let value =
            crc_fast::checksum_combine(self.algorithm.crc_fast(), self.value, next.value, next.len);
        Some(Self {
            algorithm: self.algorithm,
            value,
            len: self.len + next.len,
        })
    }

    /// The value as S3 sends it.
    pub fn base64(&self) -> String {
        let bytes = self.value.to_be_bytes();
        aws_smithy_types::base64::encode(&bytes[8 - self.algorithm.width()..])
    }
}

/// A CRC computed over bytes handed to it piece by piece.
pub struct Running {
    digest: crc_fast::Digest,
    algorithm: Algorithm,
    len: u64,
}

impl Running {
    pub fn new(algorithm: Algorithm) -> Self {
        Self {
            digest: crc_fast::Digest::new(algorithm.crc_fast()),
            algorithm,
            len: 0,
        }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.digest.update(bytes);
        self.len += bytes.len() as u64;
    }

    /// The CRC of every byte handed so far.
    pub fn crc(&self) -> Crc {
        Crc {
            algorithm: self.algorithm,
            value: self.digest.finalize(),
            len: self.len,
        }
    }
}

/// What S3 keeps to check an object's bytes against: the CRC of the whole object, or, for
/// a multipart upload with composite checksums, the CRC of each part (with its length), in
/// order. Every CRC is of one algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    Whole(Crc),
    Parts(Vec<Crc>),
}

impl Reference {
    /// The parts' CRCs when they are all of one algorithm and there is at least one.
    pub fn parts(parts: Vec<Crc>) -> Option<Self> {
        let first = parts.first()?.algorithm;
        parts
            .iter()
            .all(|part| part.algorithm == first)
            .then_some(Self::Parts(parts))
    }

    pub fn algorithm(&self) -> Algorithm {
        match self {
            Self::Whole(crc) => crc.algorithm,
            // Never empty (see `Self::parts`).
            Self::Parts(parts) => parts
                .first()
                .map_or(Algorithm::Crc64Nvme, |crc| crc.algorithm),
        }
    }

    /// The CRC of the whole object: the parts' CRCs combined.
    pub fn whole(&self) -> Option<Crc> {
        match self {
            Self::Whole(crc) => Some(*crc),
            Self::Parts(parts) => parts
                .iter()
                .try_fold(Crc::empty(self.algorithm()), |whole, part| {
                    whole.then(*part)
                }),
        }
    }

    /// Each part's CRC; none for a whole-object CRC.
    pub fn part_crcs(&self) -> &[Crc] {
        match self {
            Self::Whole(_) => &[],
            Self::Parts(parts) => parts,
        }
    }

    /// CRCs held, for bounding what is kept.
    pub fn weight(&self) -> usize {
        self.part_crcs().len().max(1)
    }
}

/// `encoded` (the base64 S3 sends for `algorithm`), as the CRC of `len` bytes.
pub fn decode(algorithm: Algorithm, encoded: &str, len: u64) -> Option<Crc> {
    let bytes = aws_smithy_types::base64::decode(encoded).ok()?;
    if bytes.len() != algorithm.width() {
        return None;
    }
    let mut value = [0_u8; 8];
    value[8 - bytes.len()..].copy_from_slice(&bytes);
    Some(Crc {
        algorithm,
        value: u64::from_be_bytes(value),
        len,
    })
}

/// The CRC algorithm of the composite (multipart, `…-N`) checksum `checksums` report, whose
/// parts' CRCs S3 keeps.
pub fn composite(checksums: &Checksums) -> Option<Algorithm> {
    let kind = checksums.kind.as_deref();
    if kind == Some("FULL_OBJECT") {
        return None;
    }
    Algorithm::PREFERRED.into_iter().find(|algorithm| {
        checksums.values.iter().any(|(name, value)| {
            name == algorithm.name() && (kind == Some("COMPOSITE") || value.contains('-'))
        })
    })
}

/// The whole-object CRC `checksums` report, decoded: the preferred one of CRC64NVME,
/// CRC32C and CRC32 when the checksum type is `FULL_OBJECT` (or not given, and the value
/// is not a composite `…-N`). `None` for composite (multipart) checksums, SHA ones, and
/// values that do not decode.
pub fn full_object(checksums: &Checksums) -> Option<(Algorithm, u64)> {
    match checksums.kind.as_deref() {
        None | Some("FULL_OBJECT") => {}
        Some(_) => return None,
    }
    Algorithm::PREFERRED.into_iter().find_map(|algorithm| {
        let (_, encoded) = checksums
            .values
            .iter()
            .find(|(name, _)| name == algorithm.name())?;
        decode(algorithm, encoded, 0).map(|crc| (algorithm, crc.value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Algorithm; 3] = Algorithm::PREFERRED;

    #[test]
    fn the_check_values_of_the_standard_crcs() {
        // The catalogue's check value: the CRC of "123456789".
        let check = |algorithm| Crc::of(algorithm, b"123456789").value;
        assert_eq!(check(Algorithm::Crc32), 0xcbf4_3926);
        assert_eq!(check(Algorithm::Crc32c), 0xe306_9283);
        assert_eq!(check(Algorithm::Crc64Nvme), 0xae8b_1486_0a79_9888);
    }

    #[test]
    fn combined_pieces_give_the_crc_of_the_whole() {
        let data: Vec<u8> = (0..100_000_u32).map(|i| (i * 7 % 251) as u8).collect();
        for algorithm in ALL {
            let whole = Crc::of(algorithm, &data);
            for cuts in [
                vec![],
                vec![0],
                vec![1, 2],
                vec![4096, 65_536],
                vec![99_999],
            ] {
                let mut combined = Crc::empty(algorithm);
                let mut start = 0;
                for end in cuts.into_iter().chain([data.len()]) {
                    let piece = Crc::of(algorithm, &data[start..end]);
                    combined = combined.then(piece).unwrap();
                    start = end;
                }
                assert_eq!(combined, whole, "{algorithm:?}");
            }
            let mut running = Running::new(algorithm);
            running.update(&data[..3]);
            running.update(&data[3..]);
            assert_eq!(running.crc(), whole);
        }
        let crc32 = Crc::of(Algorithm::Crc32, b"a");
        assert_eq!(crc32.then(Crc::of(Algorithm::Crc32c, b"b")), None);
    }

    #[test]
    fn full_object_values_decode_as_s3_encodes_them() {
        let crc = Crc::of(Algorithm::Crc64Nvme, b"hello");
        let mut checksums = Checksums {
            values: vec![
                (
                    "crc32".to_owned(),
                    Crc::of(Algorithm::Crc32, b"hello").base64(),
                ),
                ("crc64nvme".to_owned(), crc.base64()),
            ],
            kind: Some("FULL_OBJECT".to_owned()),
        };
        assert_eq!(crc.base64().len(), 12);
        assert_eq!(
            full_object(&checksums),
            Some((Algorithm::Crc64Nvme, crc.value))
        );
        checksums.values.remove(1);
        let crc32 = Crc::of(Algorithm::Crc32, b"hello");
        assert_eq!(
            full_object(&checksums),
            Some((Algorithm::Crc32, crc32.value))
        );
        // The known base64 of CRC32("hello") as S3 sends it.
        assert_eq!(crc32.base64(), "NhCmhg==");
        checksums.kind = Some("COMPOSITE".to_owned());
        assert_eq!(full_object(&checksums), None);
        let garbled = Checksums {
            values: vec![("crc32c".to_owned(), "not base64!".to_owned())],
            kind: None,
        };
        assert_eq!(full_object(&garbled), None);
        let sha = Checksums {
            values: vec![("sha256".to_owned(), "AAAA".to_owned())],
            kind: Some("FULL_OBJECT".to_owned()),
        };
        assert_eq!(full_object(&sha), None);
    }
}
