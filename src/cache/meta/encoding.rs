//! The disk encoding of metadata records: when the record was validated, under which
//! write generation, what is known of the object, and its metadata.
//!
//! Invariant: every earlier encoding still decodes: object metadata of formats 1 and 2,
//! and records written before write generations were kept.

use std::io::{Read, Write};
use std::sync::Arc;

use foyer::Result;

use super::{MetaRecord, MetaState, Validation};
use crate::cache::codec::{
    get_opt_i64, get_opt_str, get_pairs, get_str, get_u8, get_u64, opt_str_size, parse_error,
    put_opt_i64, put_opt_str, put_pairs, put_str, put_u8, put_u64, str_size,
};
use crate::object::{Checksums, Missing, ObjectMeta};

/// The disk encoding of [`ObjectMeta`].
impl ObjectMeta {
    /// Format 1 had no checksums; format 2 appends them; format 3 the object headers.
    const FORMAT_V1: u8 = 1;
    const FORMAT_V2: u8 = 2;
    const FORMAT: u8 = 3;

    fn encode(&self, writer: &mut impl Write) -> Result<()> {
        put_u8(writer, Self::FORMAT)?;
        put_u64(writer, self.size)?;
        put_str(writer, &self.etag)?;
        put_opt_i64(writer, self.last_modified_unix_secs)?;
        for field in self.optional_headers() {
            put_opt_str(writer, field)?;
        }
        put_pairs(writer, &self.user_metadata)?;
        match &self.checksums {
            None => put_u8(writer, 0)?,
            Some(checksums) => {
                put_u8(writer, 1)?;
                put_pairs(writer, &checksums.values)?;
                put_opt_str(writer, checksums.kind.as_deref())?;
            }
        }
        put_pairs(writer, &self.headers)
    }

    fn decode(reader: &mut impl Read) -> Result<Self> {
        let format = get_u8(reader)?;
        if ![Self::FORMAT_V1, Self::FORMAT_V2, Self::FORMAT].contains(&format) {
            return Err(parse_error("unknown object metadata format"));
        }
        let mut meta = Self {
            size: get_u64(reader)?,
            etag: get_str(reader)?,
            last_modified_unix_secs: get_opt_i64(reader)?,
            version_id: get_opt_str(reader)?,
            content_type: get_opt_str(reader)?,
            content_encoding: get_opt_str(reader)?,
            content_disposition: get_opt_str(reader)?,
            content_language: get_opt_str(reader)?,
            cache_control: get_opt_str(reader)?,
            expires: get_opt_str(reader)?,
            user_metadata: get_pairs(reader)?,
            checksums: None,
            headers: Vec::new(),
        };
        if format >= Self::FORMAT_V2 && get_u8(reader)? == 1 {
            meta.checksums = Some(Checksums {
                values: get_pairs(reader)?,
                kind: get_opt_str(reader)?,
            });
        }
        if format >= Self::FORMAT {
            meta.headers = get_pairs(reader)?;
        }
        Ok(meta)
    }

    /// The optional header fields in encoding order.
    fn optional_headers(&self) -> [Option<&str>; 7] {
        [
            self.version_id.as_deref(),
            self.content_type.as_deref(),
            self.content_encoding.as_deref(),
            self.content_disposition.as_deref(),
            self.content_language.as_deref(),
            self.cache_control.as_deref(),
            self.expires.as_deref(),
        ]
    }

    fn encoded_size(&self) -> usize {
        let headers: usize = self.optional_headers().into_iter().map(opt_str_size).sum();
        let pairs = |pairs: &[(String, String)]| -> usize {
            pairs
                .iter()
                .map(|(name, value)| str_size(name) + str_size(value))
                .sum()
        };
        let modified = 1 + self.last_modified_unix_secs.map_or(0, |_| 8);
        let checksums = self.checksums.as_ref().map_or(0, |checksums| {
            4 + pairs(&checksums.values) + opt_str_size(checksums.kind.as_deref())
        });
        1 + 8
            + str_size(&self.etag)
            + modified
            + headers
            + 4
            + pairs(&self.user_metadata)
            + 1
            + checksums
            + 4
            + pairs(&self.headers)
    }
}

impl MetaRecord {
    const FOUND: u8 = 1;
    const MISSING_KEY: u8 = 2;
    const MISSING_BUCKET: u8 = 3;
    const MISSING_VERSION: u8 = 4;
    /// Precedes the write generation, before the state's tag.
    const GENERATION: u8 = 0x47;

    pub(in crate::cache) fn encode(&self, writer: &mut impl Write) -> Result<()> {
        put_u64(writer, self.validated.boot_id)?;
        put_u64(writer, self.validated.millis_since_boot)?;
        put_u8(writer, Self::GENERATION)?;
        put_u64(writer, self.validated.generation)?;
        match &self.state {
            MetaState::Found(meta) => {
                put_u8(writer, Self::FOUND)?;
                meta.encode(writer)
            }
            MetaState::Missing(Missing::NoSuchKey) => put_u8(writer, Self::MISSING_KEY),
            MetaState::Missing(Missing::NoSuchBucket) => put_u8(writer, Self::MISSING_BUCKET),
            MetaState::Missing(Missing::NoSuchVersion) => put_u8(writer, Self::MISSING_VERSION),
        }
    }

    pub(in crate::cache) fn decode(reader: &mut impl Read) -> Result<Self> {
        let mut validated = Validation {
            boot_id: get_u64(reader)?,
            millis_since_boot: get_u64(reader)?,
            generation: 0,
        };
        // Records written before generations were kept have none: they come from an
        // earlier process, where a generation means nothing.
        let mut tag = get_u8(reader)?;
        if tag == Self::GENERATION {
            validated.generation = get_u64(reader)?;
            tag = get_u8(reader)?;
        }
        let state = match tag {
            Self::FOUND => MetaState::Found(Arc::new(ObjectMeta::decode(reader)?)),
            Self::MISSING_KEY => MetaState::Missing(Missing::NoSuchKey),
            Self::MISSING_BUCKET => MetaState::Missing(Missing::NoSuchBucket),
            Self::MISSING_VERSION => MetaState::Missing(Missing::NoSuchVersion),
            _ => return Err(parse_error("unknown metadata record tag")),
        };
        Ok(Self { state, validated })
    }

    pub(in crate::cache) fn encoded_size(&self) -> usize {
        16 + 9 + 1 + self.meta().map_or(0, |meta| meta.encoded_size())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::meta::MetaClock;
    use crate::cache::meta::tests::sample_meta;

    #[test]
    fn records_round_trip_through_the_codec() {
        let clock = MetaClock::new();
        let unknown_checksums = ObjectMeta {
            checksums: None,
            ..sample_meta()
        };
        for state in [
            MetaState::Found(Arc::new(sample_meta())),
            MetaState::Found(Arc::new(unknown_checksums)),
            MetaState::Found(Arc::new(ObjectMeta::default())),
            MetaState::Missing(Missing::NoSuchKey),
            MetaState::Missing(Missing::NoSuchBucket),
            MetaState::Missing(Missing::NoSuchVersion),
        ] {
            let record = clock.record(state, 7);
            let mut bytes = Vec::new();
            record.encode(&mut bytes).unwrap();
            assert_eq!(bytes.len(), record.encoded_size());
            let decoded = MetaRecord::decode(&mut bytes.as_slice()).unwrap();
            assert_eq!(decoded, record);
        }
    }

    #[test]
    fn records_of_the_first_format_decode_without_checksums_or_headers() {
        let meta = ObjectMeta {
            checksums: None,
            headers: Vec::new(),
            ..sample_meta()
        };
        let record = MetaClock::new().record(MetaState::Found(Arc::new(meta)), 0);
        let mut bytes = Vec::new();
        record.encode(&mut bytes).unwrap();
        // Format 1 is format 3 without the trailing checksum flag and header count.
        bytes.truncate(bytes.len() - 5);
        bytes[26] = ObjectMeta::FORMAT_V1;
        assert_eq!(MetaRecord::decode(&mut bytes.as_slice()).unwrap(), record);
    }

    #[test]
    fn records_of_the_second_format_decode_without_headers() {
        let meta = ObjectMeta {
            headers: Vec::new(),
            ..sample_meta()
        };
        let record = MetaClock::new().record(MetaState::Found(Arc::new(meta)), 0);
        let mut bytes = Vec::new();
        record.encode(&mut bytes).unwrap();
        // Format 2 is format 3 without the trailing header count.
        bytes.truncate(bytes.len() - 4);
        bytes[26] = ObjectMeta::FORMAT_V2;
        assert_eq!(MetaRecord::decode(&mut bytes.as_slice()).unwrap(), record);
    }

    #[test]
    fn records_written_without_a_generation_decode_with_none_that_matters() {
        let earlier = MetaClock::new();
        let record = earlier.record(MetaState::Found(Arc::new(sample_meta())), 0);
        let mut bytes = Vec::new();
        record.encode(&mut bytes).unwrap();
        // The earlier encoding: no generation between the validation and the state.
        bytes.drain(16..25);
        let decoded = MetaRecord::decode(&mut bytes.as_slice()).unwrap();
        assert_eq!(decoded, record);
        // Another process's record: its generation is not compared.
        assert!(MetaClock::new().vouches(&decoded, 5));
    }

    #[test]
    fn truncated_records_fail_to_decode() {
        let record = MetaClock::new().record(MetaState::Found(Arc::new(sample_meta())), 0);
        let mut bytes = Vec::new();
        record.encode(&mut bytes).unwrap();
        for cut in [0, 10, 17, bytes.len() - 1] {
            assert!(
                MetaRecord::decode(&mut &bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }
}
