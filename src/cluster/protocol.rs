//! The peer protocol, on the peer listener (`cluster.listen`), every request carrying
//! `Authorization: Bearer <cluster.secret>`:
//!
//! - `POST /peer/v1/block` with a JSON [`BlockRequest`]: the bytes asked for of one block
//!   (200), as the owner's cache holds them or from the whole block it fetched from the
//!   upstream with `If-Match` on the ETag asked for. Such a fill is for the tenant that
//!   `x-portico-tenant` names and of the class `x-portico-fill` names (`demand`,
//!   `prefetch`, `warm`): it waits its turn among that tenant's fills, is charged to its
//!   byte rate and counted in its ledger, as a fill of the asking member's would be. A
//!   tenant the owner does not know (or none named) is the default tenant; no class is
//!   demand. `ETag` repeats that ETag; `x-portico-peer-result` says `hit`
//!   or `miss`; `x-portico-crc64nvme` is the CRC64NVME of the body, in hex, which the asking
//!   member checks before it uses a byte (an answer without it is refused). A changed
//!   object answers 412, a missing one 404 with `x-portico-missing`.
//! - `POST /peer/v1/held` with a JSON [`HeldRequest`]: which of the blocks named this
//!   member holds or has coming, as a JSON [`HeldAnswer`] (200); it claims the others for
//!   the asking member, which is to stream them. A member about to stream a cold read from
//!   the origin asks the owners of the read's blocks first, and streams only those no one
//!   holds or brings (docs/cluster.md, "Cold reads in a fleet").
//! - `POST /peer/v1/hand` with a whole block as its body and [`HAND_HEADER`] naming it (a
//!   [`BlockRequest`] whose `within` is the whole block, as JSON, percent-encoded): a block
//!   of this member's that another member's origin stream brought, which this member
//!   caches (204) when its body has the length of the block and the CRC64NVME
//!   `x-portico-crc64nvme` names, else refuses (400).
//! - `POST /peer/v1/purge` with the admin API's purge body: purges on this member only.
//! - `POST /peer/v1/invalidate` with a JSON [`InvalidateRequest`]: forgets what this member
//!   knows of objects a write through another member changed (204), before that member
//!   answers its client.
//! - `POST /peer/v1/lease` with a JSON [`LeaseRequest`]: a lease for the asking member
//!   (204), or 409 when this member does not grant it one (a write could not tell it). A
//!   204 names the member's `cluster.zone` in `x-portico-zone` (absent when it has none):
//!   the members learn each other's zones from their leases. Either answer carries
//!   `x-portico-lease-token`: the answer is also the answering member's request for a
//!   lease from the asking one, which grants it back in its next request
//!   ([`LeaseRequest::grant`]), so two members lease to each other in one exchange.
//!   Both also name the members a write through the sender cut off lately (the request
//!   in [`LeaseRequest::cut`], the answer in `x-portico-cut`, comma-separated).
//! - `POST /peer/v1/cut` with a JSON [`CutRequest`]: members a write through the sender
//!   could not tell (204): this member stops granting them leases too, until each has
//!   caught up with it.
//! - `GET /peer/v1/health`: 200 `ok`.

use serde::{Deserialize, Serialize};

pub const BLOCK_PATH: &str = "/peer/v1/block";
pub const HELD_PATH: &str = "/peer/v1/held";
pub const HAND_PATH: &str = "/peer/v1/hand";
pub const PURGE_PATH: &str = "/peer/v1/purge";
pub const INVALIDATE_PATH: &str = "/peer/v1/invalidate";
pub const LEASE_PATH: &str = "/peer/v1/lease";
pub const CUT_PATH: &str = "/peer/v1/cut";
pub const HEALTH_PATH: &str = "/peer/v1/health";
/// `hit` or `miss`: whether the owner's cache held the block.
pub const RESULT_HEADER: &str = "x-portico-peer-result";
/// The answering member's `cluster.zone`, on a granted lease.
pub const ZONE_HEADER: &str = "x-portico-zone";
/// The CRC64NVME of a block answer's body, 16 hex digits.
pub const CRC_HEADER: &str = "x-portico-crc64nvme";
/// What is missing in a 404: `key`, `bucket` or `version`.
pub const MISSING_HEADER: &str = "x-portico-missing";
/// On a handed block: the [`BlockRequest`] that names it, as JSON, percent-encoded.
pub const HAND_HEADER: &str = "x-portico-block";
/// Blocks one [`HeldRequest`] may name: a read of 16 GiB at 4 MiB blocks.
pub const HELD_MOST: usize = 4096;
/// On a block request: the tenant a fill from the origin is for.
pub const TENANT_HEADER: &str = "x-portico-tenant";
/// On a block request: why the block is fetched, `demand`, `prefetch` or `warm`.
pub const FILL_HEADER: &str = "x-portico-fill";

/// Who a block request's fill is for: the values of [`TENANT_HEADER`] and
/// [`FILL_HEADER`].
#[derive(Debug, Clone, Copy)]
pub struct FillHeaders<'a> {
    pub tenant: &'a str,
    pub class: &'a str,
}

/// A block asked of its owner: the object, the version its bytes must belong to, and
/// which block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockRequest {
    pub bucket: String,
    pub key: String,
    /// The `versionId` the client pinned, if any.
    pub version_id: Option<String>,
    /// The ETag of the version, quotes included.
    pub etag: String,
    /// The object's size.
    pub size: u64,
    /// The asking node's `cache.block_size`; an owner with another refuses.
    pub block_size: u64,
    pub index: u64,
    /// The bytes of the block to send: from the first, up to the second (excluded).
    pub within: [u64; 2],
}

/// Blocks of one version asked about: which does the member hold, or have coming (from
/// its own origin stream or another member's)? It claims the others for `member`, whose
/// stream is to bring them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeldRequest {
    /// The asking member, as the members know it (its `cluster.advertise`).
    pub member: String,
    pub version: ObjectVersion,
    /// At most [`HELD_MOST`].
    pub indexes: Vec<u64>,
}

/// The version of an object a member names to another, and how it is cut in blocks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectVersion {
    pub bucket: String,
    pub key: String,
    /// The `versionId` the client pinned, if any.
    pub version_id: Option<String>,
    /// The ETag of the version, quotes included.
    pub etag: String,
    /// The object's size.
    pub size: u64,
    /// The asking node's `cache.block_size`; a member with another refuses.
    pub block_size: u64,
}

impl BlockRequest {
    /// The version it names.
    pub fn version(&self) -> ObjectVersion {
        ObjectVersion {
            bucket: self.bucket.clone(),
            key: self.key.clone(),
            version_id: self.version_id.clone(),
            etag: self.etag.clone(),
            size: self.size,
            block_size: self.block_size,
        }
    }
}

/// The blocks of a [`HeldRequest`] the member holds whole or has coming.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeldAnswer {
    pub held: Vec<u64>,
}

/// A purge passed on to a member: a key, or every object under a prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurgeRequest {
    pub bucket: String,
    pub key: Option<String>,
    pub prefix: Option<String>,
}

/// Objects a write through another member changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvalidateRequest {
    pub objects: Vec<WrittenObject>,
    /// The write's outcome is unknown (sent, but not answered): the objects' metadata is
    /// revalidated before it is served again, rather than forgotten.
    pub unknown: bool,
}

/// One object a write changed: a key, or one version of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WrittenObject {
    pub bucket: String,
    pub key: String,
    pub version_id: Option<String>,
}

/// The header of a lease answer that carries the answering member's token.
pub const LEASE_TOKEN_HEADER: &str = "x-portico-lease-token";
/// The header of a lease answer that names the members the answering member cut off
/// lately, comma-separated.
pub const CUT_HEADER: &str = "x-portico-cut";

/// A member asking for a lease: how the members know it (its `cluster.advertise`), and its
/// grant to the member it asks, when it holds a token of that member's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    pub member: String,
    /// Absent from the requests of members of older releases, which send no grants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<LeaseGrant>,
    /// The members a write through the asking member cut off lately (sent only with a
    /// grant: a member of an older release refuses fields it does not know).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cut: Vec<String>,
}

/// Members a write through the sending member could not tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CutRequest {
    pub members: Vec<String>,
}

/// A grant to the member asked, resting on the answer its token names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseGrant {
    /// The token's process number.
    pub process: u64,
    /// The token's moment, in nanoseconds of the answering member's lease clock.
    pub answered: u64,
    pub granted: bool,
}

/// An answer's token as `x-portico-lease-token` carries it: `<process>.<nanoseconds>`.
pub fn token_header(token: portico_fleet::Token) -> String {
    format!("{}.{}", token.process, token.answered.as_nanos())
}

/// The token an `x-portico-lease-token` value names.
pub fn parse_token(value: &str) -> Option<portico_fleet::Token> {
    let (process, answered) = value.split_once('.')?;
    Some(portico_fleet::Token {
        process: process.parse().ok()?,
        answered: portico_fleet::Moment::from_nanos(answered.parse().ok()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use portico_fleet::{Moment, Token};

    #[test]
    fn a_lease_request_of_an_older_release_carries_no_grant_and_is_understood() {
        let older: LeaseRequest = serde_json::from_str(r#"{"member":"10.0.0.5:9100"}"#).unwrap();
        assert_eq!(older.grant, None);
        assert!(older.cut.is_empty());
        let plain = serde_json::to_string(&older).unwrap();
        assert_eq!(
            plain, r#"{"member":"10.0.0.5:9100"}"#,
            "what an older release reads"
        );
        let granting = LeaseRequest {
            member: "10.0.0.5:9100".to_owned(),
            grant: Some(LeaseGrant {
                process: 7,
                answered: 123,
                granted: true,
            }),
            cut: vec!["10.0.0.7:9100".to_owned()],
        };
        let text = serde_json::to_string(&granting).unwrap();
        assert_eq!(
            serde_json::from_str::<LeaseRequest>(&text).unwrap(),
            granting
        );
    }

    #[test]
    fn a_token_header_names_the_process_and_the_moment() {
        let token = Token {
            process: u64::MAX,
            answered: Moment::from_nanos(1_234_567_890),
        };
        assert_eq!(parse_token(&token_header(token)), Some(token));
        for bad in ["", "1", "1.", ".2", "a.2", "1.b", "1.2.3"] {
            assert_eq!(parse_token(bad), None, "{bad:?}");
        }
    }
}
