//! The object model: what an object's GET or HEAD response says about it
//! ([`ObjectMeta`], its stored [`Checksums`], the [`OBJECT_HEADERS`] it keeps), and why an object is [`Missing`]. The
//! upstream produces these, the cache keeps them (its disk encoding is in
//! `cache/meta/encoding.rs`) and the API answers with them.

/// What an object's GET/HEAD response says about it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjectMeta {
    pub size: u64,
    /// The ETag exactly as the upstream sent it, quotes included.
    pub etag: String,
    pub last_modified_unix_secs: Option<i64>,
    pub version_id: Option<String>,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub content_disposition: Option<String>,
    pub content_language: Option<String>,
    pub cache_control: Option<String>,
    /// The raw `Expires` header value.
    pub expires: Option<String>,
    /// `x-amz-meta-*` pairs without the prefix, sorted by name.
    pub user_metadata: Vec<(String, String)>,
    /// The checksums stored with the object; `None` when not known yet (metadata learnt
    /// from a ranged GET, which carries no checksums).
    pub checksums: Option<Checksums>,
    /// The other headers the upstream describes the object with ([`OBJECT_HEADERS`]:
    /// tagging count, lifecycle expiration, object lock, storage class, encryption,
    /// restore, replication, redirect), exactly as it sent them, by name.
    pub headers: Vec<(String, String)>,
}

/// The `x-amz-*` headers of a GET or HEAD answer that describe the object rather than
/// the request, kept with its record and sent with every answer from the cache. Names
/// are lower case; each value is at most [`OBJECT_HEADER_MAX`] bytes (S3's longest, a
/// KMS key ARN or a redirect location, stay within 2 KiB), so a record stays bounded.
pub const OBJECT_HEADERS: [&str; 15] = [
    "x-amz-archive-status",
    "x-amz-expiration",
    "x-amz-missing-meta",
    "x-amz-object-lock-legal-hold",
    "x-amz-object-lock-mode",
    "x-amz-object-lock-retain-until-date",
    "x-amz-replication-status",
    "x-amz-restore",
    "x-amz-server-side-encryption",
    "x-amz-server-side-encryption-aws-kms-key-id",
    "x-amz-server-side-encryption-bucket-key-enabled",
    "x-amz-server-side-encryption-context",
    "x-amz-storage-class",
    "x-amz-tagging-count",
    "x-amz-website-redirect-location",
];

/// The longest value of an [`OBJECT_HEADERS`] header a record keeps.
pub const OBJECT_HEADER_MAX: usize = 4096;

/// An object's stored checksums, as a HEAD with `x-amz-checksum-mode: ENABLED` reports them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Checksums {
    /// `(algorithm, base64 value)` pairs; algorithms are `crc32`, `crc32c`, `crc64nvme`,
    /// `sha1` and `sha256`.
    pub values: Vec<(String, String)>,
    /// `FULL_OBJECT` or `COMPOSITE`, as `x-amz-checksum-type` says.
    pub kind: Option<String>,
}

impl ObjectMeta {
    /// The version id a read of this version pins its block fetches to, so an overwrite
    /// cannot cut it off: the one the upstream reported, in a versioned bucket (a
    /// suspended bucket's `null` names no single version).
    pub fn pinned_version(&self) -> Option<&str> {
        self.version_id
            .as_deref()
            .filter(|id| !id.is_empty() && *id != "null")
    }

    /// The token that names this version of the object: the ETag, or when an upstream
    /// sends none, the modification time and size (which only purges compare: such
    /// objects are never cached, see `read/uncached.rs`).
    pub fn version_token(&self) -> String {
        if self.etag.is_empty() {
            format!(
                "lm:{}:{}",
                self.last_modified_unix_secs.unwrap_or_default(),
                self.size
            )
        } else {
            self.etag.clone()
        }
    }

    /// Whether `other` names the same bytes: the same ETag (not empty), size and version,
    /// whatever the headers say (a copy onto itself that replaces the metadata keeps them).
    pub fn same_bytes(&self, other: &Self) -> bool {
        !self.etag.is_empty()
            && self.etag == other.etag
            && self.size == other.size
            && self.version_id == other.version_id
    }

    /// Whether `other` describes the same object, whatever either knows of its checksums
    /// and whichever of its object headers each answer carried (S3 sends some on a GET
    /// only, others on a HEAD only).
    pub fn same_object(&self, other: &Self) -> bool {
        let strip = |meta: &Self| Self {
            checksums: None,
            headers: Vec::new(),
            ..meta.clone()
        };
        strip(self) == strip(other)
    }
}

/// Why an object was not found upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    NoSuchKey,
    NoSuchBucket,
    /// The pinned `versionId` does not exist.
    NoSuchVersion,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NoSuchKey => "key",
            Self::NoSuchBucket => "bucket",
            Self::NoSuchVersion => "version",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_object_whatever_its_answers_carried_of_checksums_and_object_headers() {
        let get = ObjectMeta {
            size: 5,
            etag: "\"e\"".to_owned(),
            headers: vec![("x-amz-tagging-count".to_owned(), "2".to_owned())],
            ..ObjectMeta::default()
        };
        let head = ObjectMeta {
            headers: vec![(
                "x-amz-archive-status".to_owned(),
                "ARCHIVE_ACCESS".to_owned(),
            )],
            checksums: Some(Checksums::default()),
            ..get.clone()
        };
        assert!(get.same_object(&head));
        let retyped = ObjectMeta {
            content_type: Some("text/csv".to_owned()),
            ..head.clone()
        };
        assert!(!get.same_object(&retyped), "content headers still count");
    }
}
