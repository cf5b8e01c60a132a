//! Client authentication and authorization: AWS SigV4 on every S3 request (header-signed,
//! presigned, and the chained signatures of `aws-chunked` payloads), checked against the
//! credentials Portico is configured with, and each credential's bucket and write limits.
//!
//! Invariants: an unsigned or badly signed request never reaches the cache or the upstream;
//! a signed payload whose bytes do not match its signature never reaches the upstream as a
//! complete request (the body adapters hold back the last bytes until it is verified).

mod credentials;
mod post_policy;
pub mod sigv4;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, Method};

pub use credentials::{Access, Credential, CredentialStore, CredentialsError, Scope};
pub use post_policy::{FormFields, PostPolicy, check_unsigned, upstream_policy};
use sigv4::{CanonicalInput, ChunkSigner, SignatureParts};

/// How far a request's time may be from Portico's clock, as S3 allows.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(15 * 60);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("the request is not signed")]
    Anonymous,
    #[error("unsupported authorization mechanism {0:?}")]
    UnsupportedAlgorithm(String),
    #[error("{0}")]
    MalformedHeader(String),
    #[error("{0}")]
    MalformedQuery(String),
    #[error("malformed credential {0:?}")]
    MalformedCredential(String),
    #[error("the request has no valid x-amz-date")]
    MissingDate,
    #[error("unknown access key id {0:?}")]
    UnknownKey(String),
    #[error("the signature does not match")]
    SignatureMismatch,
    #[error("the request time is more than 15 minutes from the server time")]
    Skewed,
    #[error("the presigned URL has expired")]
    Expired,
    #[error("x-amz-content-sha256 is missing")]
    MissingContentSha256,
    #[error("x-amz-content-sha256 is not a valid value")]
    InvalidContentSha256,
    #[error("access denied: {0}")]
    Denied(&'static str),
    #[error("x-amz-* headers not covered by the signature: {0}")]
    HeadersNotSigned(String),
    #[error("invalid according to the POST policy: {0}")]
    Policy(String),
    #[error("{0}")]
    PolicyDocument(String),
    #[error("the credential is scoped to region {given:?}; this endpoint signs for {expected:?}")]
    WrongRegion {
        given: String,
        expected: String,
        presigned: bool,
    },
}

/// How the request body is checked as it streams.
#[derive(Debug, Clone)]
pub enum PayloadCheck {
    /// Not signed (`UNSIGNED-PAYLOAD`, `STREAMING-UNSIGNED-PAYLOAD-TRAILER`, presigned), or
    /// authentication is off.
    Unsigned,
    /// The body must hash to this SHA-256 (lower-case hex).
    Sha256(String),
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]`: every chunk (and the trailer) is signed.
    Chunks(ChunkSigner),
}

/// A verified request: who sent it and how its body is checked.
#[derive(Debug, Clone)]
pub struct Verified {
    pub credential: Arc<Credential>,
    pub payload: PayloadCheck,
}

/// The parts of a request authentication looks at.
pub struct RequestHead<'a> {
    pub method: &'a Method,
    pub raw_path: &'a str,
    pub raw_query: &'a str,
    /// The decoded query; only a presigned URL's parameters are read from it.
    pub query: &'a [(String, String)],
    pub headers: &'a HeaderMap,
    pub host: &'a str,
}

pub struct Authenticator {
    credentials: CredentialStore,
    /// The region clients must sign for (S3 refuses a signature scoped to another).
    region: String,
}

/// `x-amz-*` headers a request may carry unsigned. Each is bound by the signature another
/// way or never leaves Portico: the payload hash is the canonical request's last line,
/// `x-amz-date` is the string to sign's, the session token and the decoded length are
/// dropped before forwarding (Portico frames the body itself).
const UNSIGNED_AMZ_HEADERS: [&str; 4] = [
    "x-amz-content-sha256",
    "x-amz-date",
    "x-amz-decoded-content-length",
    "x-amz-security-token",
];

/// `x-amz-*` headers a presigned URL's request may also carry unsigned: the AWS SDKs
/// never sign these into a presigned URL, and neither changes what is read or written.
const UNSIGNED_PRESIGNED_AMZ_HEADERS: [&str; 2] = ["x-amz-checksum-mode", "x-amz-user-agent"];

impl Authenticator {
    pub fn new(credentials: CredentialStore, region: &str) -> Self {
        Self {
            credentials,
            region: region.to_owned(),
        }
    }

    /// The tenant the requests of `credential` are charged to.
    pub fn tenant(&self, credential: &Credential) -> Arc<crate::tenant::Tenant> {
        self.credentials.tenant(Some(credential))
    }

    /// The tenant named `name`; the default one when no credential or entry names it.
    pub fn tenant_named(&self, name: &str) -> Arc<crate::tenant::Tenant> {
        self.credentials.tenant_named(name)
    }

    /// Verifies the request's signature at time `now`.
    pub fn verify(&self, head: &RequestHead<'_>, now: SystemTime) -> Result<Verified, AuthError> {
        let header = |name: &str| head.headers.get(name).and_then(|value| value.to_str().ok());
        let presigned = head.query.iter().any(|(name, _)| name == "X-Amz-Signature");
        let (parts, payload_hash) = match header("authorization") {
            Some(authorization) => {
                let parts = SignatureParts::from_header(authorization, header("x-amz-date"))?;
                // Some signers (curl's --aws-sigv4) leave the header out; for a request
                // without a body the signed hash can only be the empty payload's.
                let hash = match header("x-amz-content-sha256") {
                    Some(hash) => hash,
                    None if has_no_body(head.headers) => sigv4::EMPTY_SHA256,
                    None => return Err(AuthError::MissingContentSha256),
                };
                (parts, hash.to_owned())
            }
            None if presigned => {
                let parts = SignatureParts::from_query(head.query)?;
                let hash = header("x-amz-content-sha256").unwrap_or(sigv4::UNSIGNED_PAYLOAD);
                (parts, hash.to_owned())
            }
            None => return Err(AuthError::Anonymous),
        };
        check_time(&parts, now)?;
        if parts.region != self.region {
            return Err(AuthError::WrongRegion {
                given: parts.region.clone(),
                expected: self.region.clone(),
                presigned,
            });
        }
        check_all_amz_headers_signed(head.headers, &parts.signed_headers, presigned)?;
        let credential = self
            .credentials
            .get(&parts.access_key_id)
            .ok_or_else(|| AuthError::UnknownKey(parts.access_key_id.clone()))?;
        let payload = payload_check(&payload_hash)?;
        let key = sigv4::signing_key(credential.secret(), &parts);
        let input = CanonicalInput {
            method: head.method.as_str(),
            raw_path: head.raw_path,
            raw_query: head.raw_query,
            headers: head.headers,
            host: head.host,
            payload_hash: &payload_hash,
        };
        // Clients sign the canonical encoding of the path; one that signed the path exactly
        // as it sent it (a different but valid encoding) is accepted too.
        let signed_for = |uri: &str| {
            let request = sigv4::canonical_request(&input, &parts, uri);
            let expected = sigv4::sign(&key, &sigv4::request_string_to_sign(&parts, &request));
            sigv4::same_signature(&expected, &parts.signature)
        };
        let canonical = sigv4::canonical_uri(head.raw_path);
        let signed =
            signed_for(&canonical) || (canonical != head.raw_path && signed_for(head.raw_path));
        if !signed {
            return Err(AuthError::SignatureMismatch);
        }
        let payload = match payload {
            Payload::Unsigned => PayloadCheck::Unsigned,
            Payload::Sha256 => PayloadCheck::Sha256(payload_hash.to_ascii_lowercase()),
            Payload::SignedChunks => PayloadCheck::Chunks(ChunkSigner::new(key, &parts)),
        };
        Ok(Verified {
            credential,
            payload,
        })
    }
}

/// S3 refuses a request carrying an `x-amz-*` header its signature does not cover: such a
/// header (a copy source, an ACL, SSE-C keys, tagging, retention) would otherwise be
/// forwarded and signed with Portico's own upstream credentials.
fn check_all_amz_headers_signed(
    headers: &HeaderMap,
    signed_headers: &[String],
    presigned: bool,
) -> Result<(), AuthError> {
    let unsigned: Vec<&str> = headers
        .keys()
        .map(http::HeaderName::as_str)
        .filter(|name| name.starts_with("x-amz-"))
        .filter(|name| !UNSIGNED_AMZ_HEADERS.contains(name))
        .filter(|name| !(presigned && UNSIGNED_PRESIGNED_AMZ_HEADERS.contains(name)))
        .filter(|name| !signed_headers.iter().any(|signed| signed == name))
        .collect();
    if unsigned.is_empty() {
        Ok(())
    } else {
        Err(AuthError::HeadersNotSigned(unsigned.join(", ")))
    }
}

fn has_no_body(headers: &HeaderMap) -> bool {
    !headers.contains_key(http::header::TRANSFER_ENCODING)
        && headers
            .get(http::header::CONTENT_LENGTH)
            .is_none_or(|length| length.as_bytes() == b"0")
}

enum Payload {
    Unsigned,
    Sha256,
    SignedChunks,
}

fn payload_check(hash: &str) -> Result<Payload, AuthError> {
    match hash {
        sigv4::UNSIGNED_PAYLOAD | "STREAMING-UNSIGNED-PAYLOAD-TRAILER" => Ok(Payload::Unsigned),
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" | "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER" => {
            Ok(Payload::SignedChunks)
        }
        _ if hash.len() == 64 && hash.bytes().all(|byte| byte.is_ascii_hexdigit()) => {
            Ok(Payload::Sha256)
        }
        _ => Err(AuthError::InvalidContentSha256),
    }
}

/// Parses `YYYYMMDDTHHMMSSZ` into seconds since the epoch.
fn parse_amz_date(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() != 16 || bytes[8] != b'T' || bytes[15] != b'Z' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| text.get(range)?.parse::<u32>().ok();
    let month = time::Month::try_from(u8::try_from(number(4..6)?).ok()?).ok()?;
    let date = time::Date::from_calendar_date(
        i32::try_from(number(0..4)?).ok()?,
        month,
        u8::try_from(number(6..8)?).ok()?,
    )
    .ok()?;
    let time = time::Time::from_hms(
        u8::try_from(number(9..11)?).ok()?,
        u8::try_from(number(11..13)?).ok()?,
        u8::try_from(number(13..15)?).ok()?,
    )
    .ok()?;
    Some(date.with_time(time).assume_utc().unix_timestamp())
}

fn check_time(parts: &SignatureParts, now: SystemTime) -> Result<(), AuthError> {
    let signed = parse_amz_date(&parts.amz_date).ok_or(AuthError::MissingDate)?;
    let now = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs() as i64);
    let skew = MAX_CLOCK_SKEW.as_secs() as i64;
    match parts.expires {
        Some(expires) => {
            // `X-Amz-Expires=0` is valid for no time at all: S3 refuses it as expired.
            if expires == 0 || now > signed.saturating_add(expires as i64) {
                return Err(AuthError::Expired);
            }
            if signed > now + skew {
                return Err(AuthError::Skewed);
            }
        }
        None => {
            if (signed - now).abs() > skew {
                return Err(AuthError::Skewed);
            }
        }
    }
    Ok(())
}

/// Whether `credential` may send this request: its scopes, its bucket list (including a
/// copy's source).
pub fn authorize(
    credential: &Credential,
    scope: Scope,
    bucket: Option<&str>,
    headers: &HeaderMap,
) -> Result<(), AuthError> {
    if !credential.allows(scope) {
        return Err(AuthError::Denied(match scope {
            Scope::Read => "the credential may not read",
            Scope::Write => "the credential may not write",
            Scope::Admin => "the credential may not administer buckets, ACLs or retention",
        }));
    }
    if credential.buckets.is_some() {
        let Some(bucket) = bucket else {
            return Err(AuthError::Denied(
                "a credential limited to buckets cannot list all buckets",
            ));
        };
        if !credential.may_address(bucket) {
            return Err(AuthError::Denied(
                "the bucket is outside the credential's list",
            ));
        }
        if let Some(source) = headers
            .get("x-amz-copy-source")
            .and_then(|value| value.to_str().ok())
        {
            let decoded = percent_encoding::percent_decode_str(source).decode_utf8_lossy();
            let source_bucket = decoded
                .trim_start_matches('/')
                .split('/')
                .next()
                .unwrap_or_default();
            if !credential.may_address(source_bucket) {
                return Err(AuthError::Denied(
                    "the copy source is outside the credential's list",
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
