//! Cache keys and values, and their foyer [`Code`] implementations.
//!
//! Invariants: a block key names the object version (ETag or version token) and the block
//! size it was cut with, so neither bytes of two versions nor blocks of another layout
//! (an earlier `cache.block_size` on the same disk tier) can be returned for a key. Block
//! and metadata keys also carry the object's purge generation (see `purges`): entries
//! written before a purge are never found again, even after a restart recovers them.

use std::io::{Read, Write};
use std::sync::Arc;

use bytes::Bytes;
use foyer::{Code, Result};

use super::codec::{
    get_bytes, get_bytes_owned, get_str, get_u8, get_u32, get_u64, parse_error, put_bytes, put_str,
    put_u8, put_u32, put_u64, str_size,
};
use super::meta::MetaRecord;
use crate::types::{BlockIndex, ObjectRef};

/// One block of one version of one object.
///
/// The version token alone names the bytes, so the object is always held without a pinned
/// `versionId`: a GET by version id and a plain GET of the same version share blocks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlockKey {
    object: ObjectRef,
    pub version: Arc<str>,
    /// The block size the object was cut with: block `index` holds the bytes from
    /// `index * block_size_bytes`.
    pub block_size_bytes: u64,
    pub index: BlockIndex,
    /// How often the object was purged when the block was cached; set by the cache.
    pub generation: u64,
}

impl BlockKey {
    pub fn new(
        object: &ObjectRef,
        version: Arc<str>,
        block_size_bytes: u64,
        index: BlockIndex,
    ) -> Self {
        Self {
            object: object.current(),
            version,
            block_size_bytes,
            index,
            generation: 0,
        }
    }

    /// The object the block belongs to (never a pinned version).
    pub fn object(&self) -> &ObjectRef {
        &self.object
    }
}

/// Everything the hybrid cache stores is a whole block (memory only), a piece of a block
/// (the disk tier's unit, and memory's for pieces read from disk twice) or an object's
/// metadata. Metadata of a pinned version (`versionId`) has its own key, apart from the
/// current version's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CacheKey {
    Block(BlockKey),
    /// Piece `index` of a block cut into pieces of `piece_bytes`: the bytes from
    /// `index * piece_bytes` within the block.
    Piece {
        block: BlockKey,
        piece_bytes: u32,
        index: u32,
    },
    /// An object's metadata, and the object's purge generation.
    Meta(ObjectRef, u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheValue {
    Block(Bytes),
    Meta(MetaRecord),
}

const TAG_BLOCK: u8 = 1;
const TAG_META: u8 = 2;
const TAG_META_VERSION: u8 = 3;
const TAG_PIECE: u8 = 4;

fn encode_block(writer: &mut impl Write, block: &BlockKey) -> Result<()> {
    put_str(writer, block.object.bucket())?;
    put_str(writer, block.object.key())?;
    put_str(writer, &block.version)?;
    put_u64(writer, block.block_size_bytes)?;
    put_u64(writer, block.index)?;
    put_u64(writer, block.generation)
}

fn decode_block(reader: &mut impl Read) -> Result<BlockKey> {
    let object = decode_object(reader, false)?;
    let version = get_str(reader)?;
    let block_size_bytes = get_u64(reader)?;
    let index = get_u64(reader)?;
    let generation = get_u64(reader)?;
    Ok(BlockKey {
        generation,
        ..BlockKey::new(&object, version.into(), block_size_bytes, index)
    })
}

/// Encoded size of a block key written by [`encode_block`].
fn encoded_block_size(block: &BlockKey) -> usize {
    str_size(block.object.bucket()) + str_size(block.object.key()) + str_size(&block.version) + 24
}

fn decode_object(reader: &mut impl Read, versioned: bool) -> Result<ObjectRef> {
    let bucket = get_str(reader)?;
    let key = get_str(reader)?;
    let version = if versioned {
        Some(get_str(reader)?)
    } else {
        None
    };
    ObjectRef::new(&bucket, &key)
        .and_then(|object| object.with_version(version.as_deref()))
        .map_err(|_| parse_error("invalid object reference in cache key"))
}

impl Code for CacheKey {
    fn encode(&self, writer: &mut impl Write) -> Result<()> {
        match self {
            Self::Block(block) => {
                put_u8(writer, TAG_BLOCK)?;
                encode_block(writer, block)
            }
            Self::Piece {
                block,
                piece_bytes,
                index,
            } => {
                put_u8(writer, TAG_PIECE)?;
                encode_block(writer, block)?;
                put_u32(writer, *piece_bytes)?;
                put_u32(writer, *index)
            }
            Self::Meta(object, generation) => {
                let tag = match object.version() {
                    Some(_) => TAG_META_VERSION,
                    None => TAG_META,
                };
                put_u8(writer, tag)?;
                put_str(writer, object.bucket())?;
                put_str(writer, object.key())?;
                if let Some(version) = object.version() {
                    put_str(writer, version)?;
                }
                put_u64(writer, *generation)
            }
        }
    }

    fn decode(reader: &mut impl Read) -> Result<Self> {
        match get_u8(reader)? {
            TAG_BLOCK => Ok(Self::Block(decode_block(reader)?)),
            TAG_PIECE => Ok(Self::Piece {
                block: decode_block(reader)?,
                piece_bytes: get_u32(reader)?,
                index: get_u32(reader)?,
            }),
            tag @ (TAG_META | TAG_META_VERSION) => {
                let object = decode_object(reader, tag == TAG_META_VERSION)?;
                Ok(Self::Meta(object, get_u64(reader)?))
            }
            _ => Err(parse_error("unknown cache key tag")),
        }
    }

    fn estimated_size(&self) -> usize {
        match self {
            Self::Block(block) => 1 + encoded_block_size(block),
            Self::Piece { block, .. } => 1 + encoded_block_size(block) + 4 + 4,
            Self::Meta(object, _) => {
                1 + str_size(object.bucket())
                    + str_size(object.key())
                    + object.version().map_or(0, str_size)
                    + 8
            }
        }
    }
}

impl Code for CacheValue {
    fn encode(&self, writer: &mut impl Write) -> Result<()> {
        match self {
            Self::Block(bytes) => {
                put_u8(writer, TAG_BLOCK)?;
                put_bytes(writer, bytes)
            }
            Self::Meta(record) => {
                put_u8(writer, TAG_META)?;
                record.encode(writer)
            }
        }
    }

    fn decode(reader: &mut impl Read) -> Result<Self> {
        match get_u8(reader)? {
            TAG_BLOCK => Ok(Self::Block(Bytes::from(get_bytes(reader)?))),
            TAG_META => Ok(Self::Meta(MetaRecord::decode(reader)?)),
            _ => Err(parse_error("unknown cache value tag")),
        }
    }

    /// A piece read from disk keeps its bytes in the buffer foyer read it into (checked
    /// by foyer's entry checksum before this runs): serving it copies nothing more.
    fn decode_owned(bytes: Bytes) -> Result<Self> {
        match bytes.first() {
            Some(&TAG_BLOCK) => Ok(Self::Block(get_bytes_owned(&bytes, 1)?)),
            _ => Self::decode(&mut &bytes[..]),
        }
    }

    fn estimated_size(&self) -> usize {
        match self {
            Self::Block(bytes) => 1 + 8 + bytes.len(),
            Self::Meta(record) => 1 + record.encoded_size(),
        }
    }
}

/// Bytes an entry occupies in the memory tier, for foyer's weighter.
pub fn memory_weight(key: &CacheKey, value: &CacheValue) -> usize {
    const ENTRY_OVERHEAD: usize = 128;
    key.estimated_size() + value.estimated_size() + ENTRY_OVERHEAD
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::meta::{MetaClock, MetaState};
    use crate::object::Missing;
    use proptest::prelude::*;

    fn round_trip<T: Code + std::fmt::Debug + PartialEq>(value: &T) -> T {
        let mut bytes = Vec::new();
        value.encode(&mut bytes).unwrap();
        assert_eq!(
            bytes.len(),
            value.estimated_size(),
            "estimated size of {value:?}"
        );
        let decoded = T::decode(&mut bytes.as_slice()).unwrap();
        // A disk load decodes from the buffer it read into: the same value.
        assert_eq!(T::decode_owned(Bytes::from(bytes)).unwrap(), decoded);
        decoded
    }

    #[test]
    fn meta_keys_and_values_round_trip() {
        let object = ObjectRef::new("bucket", "a/b c/ü.parquet").unwrap();
        let pinned = object.clone().with_version(Some("3/L4kqtJl")).unwrap();
        let key = CacheKey::Meta(object.clone(), 0);
        assert_eq!(round_trip(&key), key);
        let pinned_key = CacheKey::Meta(pinned, 0);
        assert_eq!(round_trip(&pinned_key), pinned_key);
        assert_ne!(pinned_key, key);
        let purged = CacheKey::Meta(object, 1);
        assert_eq!(round_trip(&purged), purged);
        assert_ne!(purged, key);
        let value =
            CacheValue::Meta(MetaClock::new().record(MetaState::Missing(Missing::NoSuchBucket), 0));
        assert_eq!(round_trip(&value), value);
    }

    #[test]
    fn block_keys_never_pin_a_version_id() {
        let object = ObjectRef::new("bucket", "k").unwrap();
        let pinned = object.clone().with_version(Some("v1")).unwrap();
        assert_eq!(
            BlockKey::new(&pinned, "\"e\"".into(), 4096, 0),
            BlockKey::new(&object, "\"e\"".into(), 4096, 0)
        );
    }

    #[test]
    fn blocks_cut_with_another_block_size_have_other_keys() {
        let object = ObjectRef::new("bucket", "k").unwrap();
        let eight_mib = CacheKey::Block(BlockKey::new(&object, "\"e\"".into(), 8 << 20, 1));
        let four_mib = CacheKey::Block(BlockKey::new(&object, "\"e\"".into(), 4 << 20, 1));
        assert_ne!(eight_mib, four_mib);
        let encoded = |key: &CacheKey| {
            let mut bytes = Vec::new();
            key.encode(&mut bytes).unwrap();
            bytes
        };
        assert_ne!(encoded(&eight_mib), encoded(&four_mib));
        assert_eq!(round_trip(&four_mib), four_mib);
    }

    #[test]
    fn pieces_of_other_sizes_or_indexes_have_other_keys() {
        let block = BlockKey::new(
            &ObjectRef::new("bucket", "k").unwrap(),
            "\"e\"".into(),
            4 << 20,
            1,
        );
        let piece = |piece_bytes, index| CacheKey::Piece {
            block: block.clone(),
            piece_bytes,
            index,
        };
        assert_ne!(piece(256 << 10, 1), piece(128 << 10, 1));
        assert_ne!(piece(256 << 10, 1), piece(256 << 10, 2));
        assert_ne!(piece(256 << 10, 0), CacheKey::Block(block.clone()));
        assert_eq!(round_trip(&piece(256 << 10, 15)), piece(256 << 10, 15));
    }

    #[test]
    fn unknown_tags_are_rejected() {
        assert!(CacheKey::decode(&mut [9u8].as_slice()).is_err());
        assert!(CacheValue::decode(&mut [9u8].as_slice()).is_err());
        assert!(CacheValue::decode_owned(Bytes::from_static(&[9u8])).is_err());
        assert!(CacheValue::decode_owned(Bytes::new()).is_err());
    }

    #[test]
    fn oversized_block_lengths_are_rejected_before_allocating() {
        let mut bytes = vec![TAG_BLOCK];
        bytes.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(CacheValue::decode(&mut bytes.as_slice()).is_err());
        assert!(CacheValue::decode_owned(Bytes::from(bytes)).is_err());
    }

    #[test]
    fn a_block_value_shorter_than_its_length_is_rejected() {
        let mut encoded = Vec::new();
        CacheValue::Block(Bytes::from_static(b"twelve bytes"))
            .encode(&mut encoded)
            .unwrap();
        let whole = CacheValue::decode(&mut encoded.as_slice()).unwrap();
        assert_eq!(
            whole,
            CacheValue::Block(Bytes::from_static(b"twelve bytes"))
        );
        encoded.pop();
        let error = CacheValue::decode(&mut encoded.as_slice()).unwrap_err();
        assert!(error.to_string().contains("shorter"), "{error}");
        let error = CacheValue::decode_owned(Bytes::from(encoded.clone())).unwrap_err();
        assert!(error.to_string().contains("shorter"), "{error}");
        // Cut inside the length itself.
        encoded.truncate(5);
        let error = CacheValue::decode_owned(Bytes::from(encoded)).unwrap_err();
        assert!(error.to_string().contains("shorter"), "{error}");
    }

    #[test]
    fn a_block_decoded_from_an_owned_buffer_is_a_slice_of_it_not_a_copy() {
        let mut encoded = Vec::new();
        let data = Bytes::from(vec![7u8; 64 * 1024]);
        CacheValue::Block(data.clone())
            .encode(&mut encoded)
            .unwrap();
        // Bytes after the value (foyer reads whole pages) are not part of it.
        encoded.extend_from_slice(&[0u8; 100]);
        let buffer = Bytes::from(encoded);
        let CacheValue::Block(block) = CacheValue::decode_owned(buffer.clone()).unwrap() else {
            panic!("a block value decodes as a block");
        };
        assert_eq!(block, data);
        assert_eq!(block.as_ptr(), buffer[9..].as_ptr(), "the block is copied");
    }

    proptest! {
        #[test]
        fn block_keys_and_values_round_trip(
            bucket in "[a-z0-9.-]{3,63}",
            key in "\\PC{1,200}",
            version in "\\PC{0,80}",
            block_size in any::<u64>(),
            index in any::<u64>(),
            generation in any::<u64>(),
            data in proptest::collection::vec(any::<u8>(), 0..4096),
        ) {
            let key = CacheKey::Block(BlockKey {
                generation,
                ..BlockKey::new(
                    &ObjectRef::new(&bucket, &key).unwrap(),
                    version.into(),
                    block_size,
                    index,
                )
            });
            prop_assert_eq!(round_trip(&key), key.clone());
            let CacheKey::Block(block) = key else { unreachable!() };
            let piece = CacheKey::Piece { block, piece_bytes: 256 * 1024, index: (index % 64) as u32 };
            prop_assert_eq!(round_trip(&piece), piece);
            let value = CacheValue::Block(Bytes::from(data));
            prop_assert_eq!(round_trip(&value), value);
        }
    }
}
