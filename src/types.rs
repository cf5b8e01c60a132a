//! Validated values carried through the read path: object references, requested and
//! resolved byte ranges, and the mapping of byte ranges onto fixed-size blocks.
//!
//! Invariants: a [`ByteRange`] is never empty and always lies inside its object; a
//! [`BlockLayout`] never yields a block outside the object.

use std::fmt;
use std::sync::Arc;

/// Longest object key S3 accepts, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// Longest version id Portico accepts in a request, in bytes.
pub const MAX_VERSION_ID_BYTES: usize = 1024;

/// A bucket and a key within it, optionally pinned to one version (`versionId`). Without
/// a version it names whatever version is current. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    bucket: Arc<str>,
    key: Arc<str>,
    version: Option<Arc<str>>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectRefError {
    #[error("bucket name must not be empty")]
    EmptyBucket,
    #[error("object key must not be empty")]
    EmptyKey,
    #[error("object key is {0} bytes, longer than the 1024 bytes S3 allows")]
    KeyTooLong(usize),
    #[error("version id must not be empty")]
    EmptyVersion,
    #[error("version id is {0} bytes, longer than the 1024 bytes Portico accepts")]
    VersionTooLong(usize),
}

impl ObjectRef {
    pub fn new(bucket: &str, key: &str) -> Result<Self, ObjectRefError> {
        if bucket.is_empty() {
            return Err(ObjectRefError::EmptyBucket);
        }
        if key.is_empty() {
            return Err(ObjectRefError::EmptyKey);
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(ObjectRefError::KeyTooLong(key.len()));
        }
        Ok(Self {
            bucket: bucket.into(),
            key: key.into(),
            version: None,
        })
    }

    /// The same object pinned to `version`, or current again when `version` is `None`.
    pub fn with_version(self, version: Option<&str>) -> Result<Self, ObjectRefError> {
        let version = match version {
            None => None,
            Some("") => return Err(ObjectRefError::EmptyVersion),
            Some(version) if version.len() > MAX_VERSION_ID_BYTES => {
                return Err(ObjectRefError::VersionTooLong(version.len()));
            }
            Some(version) => Some(version.into()),
        };
        Ok(Self { version, ..self })
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// The pinned version id, if any.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// The same bucket and key without a pinned version.
    pub fn current(&self) -> Self {
        Self {
            bucket: self.bucket.clone(),
            key: self.key.clone(),
            version: None,
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.bucket, self.key)?;
        match &self.version {
            Some(version) => write!(f, "?versionId={version}"),
            None => Ok(()),
        }
    }
}

/// A byte range as a client asked for it, before the object size is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeRequest {
    /// `bytes=first-last` (inclusive) or `bytes=first-` when `last` is `None`.
    From { first: u64, last: Option<u64> },
    /// `bytes=-length`: the last `length` bytes.
    Suffix { length: u64 },
}

impl From<s3s::dto::Range> for RangeRequest {
    fn from(range: s3s::dto::Range) -> Self {
        match range {
            s3s::dto::Range::Int { first, last } => Self::From { first, last },
            s3s::dto::Range::Suffix { length } => Self::Suffix { length },
        }
    }
}

impl From<ByteRange> for RangeRequest {
    fn from(range: ByteRange) -> Self {
        Self::From {
            first: range.first(),
            last: Some(range.last()),
        }
    }
}

impl RangeRequest {
    /// Parses a `Range` header value (`bytes=FIRST-LAST`, `bytes=FIRST-`, `bytes=-SUFFIX`);
    /// `None` when it is not one.
    pub fn parse(value: &str) -> Option<Self> {
        s3s::dto::Range::parse(value).ok().map(Self::from)
    }

    /// The `Range` header value for this request.
    pub fn header_value(&self) -> String {
        match self {
            Self::From {
                first,
                last: Some(last),
            } => format!("bytes={first}-{last}"),
            Self::From { first, last: None } => format!("bytes={first}-"),
            Self::Suffix { length } => format!("bytes=-{length}"),
        }
    }
}

/// A non-empty, inclusive range of bytes inside an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    first: u64,
    last: u64,
}

impl ByteRange {
    /// `first..=last`; `None` when `first > last`.
    pub fn new(first: u64, last: u64) -> Option<Self> {
        (first <= last).then_some(Self { first, last })
    }

    pub fn first(&self) -> u64 {
        self.first
    }

    pub fn last(&self) -> u64 {
        self.last
    }

    pub fn len_bytes(&self) -> u64 {
        self.last - self.first + 1
    }

    /// The `Range` header value that asks an upstream for exactly these bytes.
    pub fn header_value(&self) -> String {
        format!("bytes={}-{}", self.first, self.last)
    }
}

/// What a GET returns once the object size is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// The whole object, answered with 200.
    Whole,
    /// Part of the object, answered with 206 and `Content-Range`.
    Partial(ByteRange),
}

/// The range cannot be served for an object of `size` bytes (416 `InvalidRange`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the requested range is not satisfiable for an object of {size} bytes")]
pub struct Unsatisfiable {
    pub size: u64,
}

impl Selection {
    /// Applies S3's rules: a range starting at or past the end is unsatisfiable, an end past
    /// the end is clamped, `bytes=-0` is unsatisfiable, and a suffix range of an empty
    /// object returns the (empty) whole object.
    pub fn resolve(request: Option<RangeRequest>, size: u64) -> Result<Self, Unsatisfiable> {
        let unsatisfiable = Unsatisfiable { size };
        match request {
            None => Ok(Self::Whole),
            Some(RangeRequest::From { first, last }) => {
                if first >= size {
                    return Err(unsatisfiable);
                }
                let last = last.map_or(size - 1, |last| last.min(size - 1));
                ByteRange::new(first, last)
                    .map(Self::Partial)
                    .ok_or(unsatisfiable)
            }
            Some(RangeRequest::Suffix { length: 0 }) => Err(unsatisfiable),
            Some(RangeRequest::Suffix { .. }) if size == 0 => Ok(Self::Whole),
            Some(RangeRequest::Suffix { length }) => {
                let first = size.saturating_sub(length);
                ByteRange::new(first, size - 1)
                    .map(Self::Partial)
                    .ok_or(unsatisfiable)
            }
        }
    }

    /// The bytes this selection covers, or `None` for an empty whole object.
    pub fn bytes(&self, size: u64) -> Option<ByteRange> {
        match self {
            Self::Whole => size.checked_sub(1).and_then(|last| ByteRange::new(0, last)),
            Self::Partial(range) => Some(*range),
        }
    }

    /// How many bytes this selection covers of an object of `size` bytes.
    pub fn len_bytes(&self, size: u64) -> u64 {
        self.bytes(size).map_or(0, |bytes| bytes.len_bytes())
    }
}

/// Index of a fixed-size block within an object.
pub type BlockIndex = u64;

/// How an object of `object_size` bytes is cut into blocks of `block_size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLayout {
    block_size: u64,
    object_size: u64,
}

impl BlockLayout {
    /// `block_size` must not be zero (config validation guarantees a minimum of 64 KiB).
    pub fn new(block_size: u64, object_size: u64) -> Self {
        assert!(block_size > 0, "block size must be positive");
        Self {
            block_size,
            object_size,
        }
    }

    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    pub fn object_size(&self) -> u64 {
        self.object_size
    }

    pub fn block_count(&self) -> u64 {
        self.object_size.div_ceil(self.block_size)
    }

    pub fn block_of(&self, offset: u64) -> BlockIndex {
        offset / self.block_size
    }

    /// The bytes of block `index`, or `None` past the end of the object.
    pub fn block_range(&self, index: BlockIndex) -> Option<ByteRange> {
        let first = index.checked_mul(self.block_size)?;
        if first >= self.object_size {
            return None;
        }
        let last = first
            .saturating_add(self.block_size - 1)
            .min(self.object_size - 1);
        ByteRange::new(first, last)
    }

    /// The length of block `index` (0 past the end of the object).
    pub fn block_len(&self, index: BlockIndex) -> u64 {
        self.block_range(index).map_or(0, |range| range.len_bytes())
    }

    /// The blocks that hold `range`, in order.
    pub fn blocks_for(&self, range: ByteRange) -> std::ops::RangeInclusive<BlockIndex> {
        self.block_of(range.first())..=self.block_of(range.last())
    }

    /// Which part of block `index` falls inside `range`, as offsets within the block.
    pub fn slice_within(&self, index: BlockIndex, range: ByteRange) -> std::ops::Range<usize> {
        let block_first = index * self.block_size;
        let start = range.first().saturating_sub(block_first);
        let end = (range.last() + 1 - block_first).min(self.block_size);
        // Both bounds are at most block_size, which fits in usize.
        start as usize..end as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn partial(first: u64, last: u64) -> Selection {
        Selection::Partial(ByteRange::new(first, last).unwrap())
    }

    #[test]
    fn ranges_follow_s3_rules() {
        let from = |first, last| Some(RangeRequest::From { first, last });
        let suffix = |length| Some(RangeRequest::Suffix { length });
        assert_eq!(Selection::resolve(None, 11), Ok(Selection::Whole));
        assert_eq!(Selection::resolve(None, 0), Ok(Selection::Whole));
        assert_eq!(
            Selection::resolve(from(5, Some(100)), 11),
            Ok(partial(5, 10))
        );
        assert_eq!(
            Selection::resolve(from(10, Some(10)), 11),
            Ok(partial(10, 10))
        );
        assert_eq!(Selection::resolve(from(3, None), 11), Ok(partial(3, 10)));
        assert_eq!(
            Selection::resolve(from(11, None), 11),
            Err(Unsatisfiable { size: 11 })
        );
        assert_eq!(
            Selection::resolve(from(0, None), 0),
            Err(Unsatisfiable { size: 0 })
        );
        assert_eq!(
            Selection::resolve(from(0, Some(0)), 0),
            Err(Unsatisfiable { size: 0 })
        );
        assert_eq!(Selection::resolve(suffix(100), 11), Ok(partial(0, 10)));
        assert_eq!(Selection::resolve(suffix(3), 11), Ok(partial(8, 10)));
        assert_eq!(
            Selection::resolve(suffix(0), 11),
            Err(Unsatisfiable { size: 11 })
        );
        assert_eq!(Selection::resolve(suffix(5), 0), Ok(Selection::Whole));
    }

    #[test]
    fn object_refs_reject_what_s3_rejects() {
        assert_eq!(ObjectRef::new("", "k"), Err(ObjectRefError::EmptyBucket));
        assert_eq!(ObjectRef::new("b", ""), Err(ObjectRefError::EmptyKey));
        assert_eq!(
            ObjectRef::new("b", &"k".repeat(1025)),
            Err(ObjectRefError::KeyTooLong(1025))
        );
        let object = ObjectRef::new("b", "dir/ü ñ%2F..").unwrap();
        assert_eq!(object.key(), "dir/ü ñ%2F..");
    }

    #[test]
    fn layout_of_an_empty_object_has_no_blocks() {
        let layout = BlockLayout::new(4, 0);
        assert_eq!(layout.block_count(), 0);
        assert_eq!(layout.block_range(0), None);
    }

    proptest! {
        #[test]
        fn resolved_ranges_lie_inside_the_object(
            size in 0u64..10_000,
            first in 0u64..12_000,
            span in proptest::option::of(0u64..12_000),
            suffix in proptest::option::of(0u64..12_000),
        ) {
            let request = match suffix {
                Some(length) => RangeRequest::Suffix { length },
                None => RangeRequest::From { first, last: span.map(|span| first + span) },
            };
            match Selection::resolve(Some(request), size) {
                Ok(selection) => {
                    if let Some(range) = selection.bytes(size) {
                        prop_assert!(range.last() < size);
                        prop_assert!(range.first() <= range.last());
                    } else {
                        prop_assert_eq!(size, 0);
                    }
                }
                Err(error) => prop_assert_eq!(error.size, size),
            }
        }

        #[test]
        fn blocks_cover_a_range_exactly_once(
            block_size in 1u64..5_000,
            size in 1u64..50_000,
            a in 0u64..50_000,
            b in 0u64..50_000,
        ) {
            let (first, last) = (a.min(b) % size, a.max(b) % size);
            let (first, last) = (first.min(last), first.max(last));
            let range = ByteRange::new(first, last).unwrap();
            let layout = BlockLayout::new(block_size, size);
            let mut covered = 0u64;
            let mut next = first;
            for index in layout.blocks_for(range) {
                let block = layout.block_range(index).unwrap();
                let slice = layout.slice_within(index, range);
                prop_assert!(slice.start < slice.end);
                prop_assert_eq!(block.first() + slice.start as u64, next);
                prop_assert!((slice.end as u64) <= block.len_bytes());
                next = block.first() + slice.end as u64;
                covered += (slice.end - slice.start) as u64;
            }
            prop_assert_eq!(covered, range.len_bytes());
            prop_assert_eq!(next, last + 1);
        }
    }
}
