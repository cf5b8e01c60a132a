//! AWS Signature Version 4 as S3 defines it: the signed parts of a request (from the
//! `Authorization` header or a presigned query string), the canonical request, the signing
//! key, and the chained signatures of `aws-chunked` payloads and their trailers.
//!
//! Invariants: signatures are compared in constant time; nothing here allocates in
//! proportion to anything but the request's headers and query.

use hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::AuthError;

pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";
/// SHA-256 of the empty string, in hex.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

/// Characters SigV4 leaves unencoded: `A-Z a-z 0-9 - . _ ~`.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A signing key: derived from the secret and the credential scope.
pub type SigningKey = [u8; 32];

/// The parts of a signature a request carries, wherever it carries them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureParts {
    pub access_key_id: String,
    /// `YYYYMMDD` from the credential scope.
    pub date: String,
    pub region: String,
    pub service: String,
    /// The request time, `YYYYMMDDTHHMMSSZ`.
    pub amz_date: String,
    /// Lower-case header names, as listed.
    pub signed_headers: Vec<String>,
    /// Lower-case hex.
    pub signature: String,
    /// Presigned URLs: seconds the URL is valid after `amz_date`.
    pub expires: Option<u64>,
}

impl SignatureParts {
    /// `date/region/service/aws4_request`.
    pub fn scope(&self) -> String {
        format!(
            "{}/{}/{}/aws4_request",
            self.date, self.region, self.service
        )
    }

    /// Parses `AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…`.
    pub fn from_header(authorization: &str, amz_date: Option<&str>) -> Result<Self, AuthError> {
        let malformed = |what: &str| AuthError::MalformedHeader(what.to_owned());
        let rest = authorization
            .strip_prefix(ALGORITHM)
            .ok_or_else(|| AuthError::UnsupportedAlgorithm(first_word(authorization)))?;
        let (mut credential, mut signed_headers, mut signature) = (None, None, None);
        for part in rest.split(',') {
            let (name, value) = part
                .trim()
                .split_once('=')
                .ok_or_else(|| malformed("the Authorization header is malformed"))?;
            match name.trim() {
                "Credential" => credential = Some(value.trim()),
                "SignedHeaders" => signed_headers = Some(value.trim()),
                "Signature" => signature = Some(value.trim()),
                _ => return Err(malformed("the Authorization header has an unknown field")),
            }
        }
        let (Some(credential), Some(signed_headers), Some(signature)) =
            (credential, signed_headers, signature)
        else {
            return Err(malformed(
                "the Authorization header needs Credential, SignedHeaders and Signature",
            ));
        };
        let amz_date = amz_date.ok_or(AuthError::MissingDate)?;
        Self::assemble(credential, signed_headers, signature, amz_date, None)
    }

    /// Parses the `X-Amz-*` parameters of a presigned URL (already percent-decoded).
    pub fn from_query(query: &[(String, String)]) -> Result<Self, AuthError> {
        let value = |name: &str| {
            query
                .iter()
                .find(|(candidate, _)| candidate == name)
                .map(|(_, value)| value.as_str())
                .ok_or_else(|| AuthError::MalformedQuery(format!("{name} is missing")))
        };
        let algorithm = value("X-Amz-Algorithm")?;
        if algorithm != ALGORITHM {
            return Err(AuthError::UnsupportedAlgorithm(first_word(algorithm)));
        }
        let expires = value("X-Amz-Expires")?
            .parse::<u64>()
            .ok()
            .filter(|seconds| *seconds <= 7 * 24 * 3600)
            .ok_or_else(|| {
                AuthError::MalformedQuery(
                    "X-Amz-Expires must be a number of seconds up to 604800".to_owned(),
                )
            })?;
        Self::assemble(
            value("X-Amz-Credential")?,
            value("X-Amz-SignedHeaders")?,
            value("X-Amz-Signature")?,
            value("X-Amz-Date")?,
            Some(expires),
        )
    }

    /// The parts of a POST form's signature: its `x-amz-credential`, `x-amz-date` and
    /// `x-amz-signature` fields (it signs the policy, not the request).
    pub fn from_credential(
        credential: &str,
        amz_date: Option<&str>,
        signature: &str,
    ) -> Result<Self, AuthError> {
        let amz_date = amz_date.ok_or(AuthError::MissingDate)?;
        Self::assemble(credential, "host", signature, amz_date, None)
    }

    fn assemble(
        credential: &str,
        signed_headers: &str,
        signature: &str,
        amz_date: &str,
        expires: Option<u64>,
    ) -> Result<Self, AuthError> {
        let mut scope = credential.rsplitn(5, '/');
        let (Some("aws4_request"), Some(service), Some(region), Some(date), Some(access_key_id)) = (
            scope.next(),
            scope.next(),
            scope.next(),
            scope.next(),
            scope.next(),
        ) else {
            return Err(AuthError::MalformedCredential(credential.to_owned()));
        };
        if service != "s3" || date.len() != 8 || !amz_date.starts_with(date) {
            return Err(AuthError::MalformedCredential(credential.to_owned()));
        }
        let signed_headers: Vec<String> = signed_headers
            .split(';')
            .map(|name| name.trim().to_ascii_lowercase())
            .collect();
        if !signed_headers.iter().any(|name| name == "host") {
            return Err(AuthError::MalformedHeader(
                "the host header must be signed".to_owned(),
            ));
        }
        if signature.len() != 64 || !signature.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return Err(AuthError::SignatureMismatch);
        }
        Ok(Self {
            access_key_id: access_key_id.to_owned(),
            date: date.to_owned(),
            region: region.to_owned(),
            service: service.to_owned(),
            amz_date: amz_date.to_owned(),
            signed_headers,
            signature: signature.to_ascii_lowercase(),
            expires,
        })
    }
}

fn first_word(text: &str) -> String {
    text.split_whitespace()
        .next()
        .unwrap_or_default()
        .chars()
        .take(40)
        .collect()
}

/// What the canonical request is built from.
pub struct CanonicalInput<'a> {
    pub method: &'a str,
    /// The path exactly as sent (percent-encoded).
    pub raw_path: &'a str,
    /// The query exactly as sent, without `?`.
    pub raw_query: &'a str,
    pub headers: &'a HeaderMap,
    /// The `host` value (the `Host` header or the HTTP/2 authority).
    pub host: &'a str,
    pub payload_hash: &'a str,
}

/// The canonical URI: every path segment decoded and encoded once, as S3 signs it.
pub fn canonical_uri(raw_path: &str) -> String {
    let decoded = percent_decode_str(raw_path).collect::<Vec<u8>>();
    let mut out = String::with_capacity(raw_path.len() + 8);
    for (index, segment) in decoded.split(|&byte| byte == b'/').enumerate() {
        if index > 0 {
            out.push('/');
        }
        out.extend(percent_encoding::percent_encode(segment, UNRESERVED));
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// The canonical query string, leaving out the presigned signature itself.
pub fn canonical_query(raw_query: &str) -> String {
    let mut pairs: Vec<(String, String)> = raw_query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (encode_component(name), encode_component(value))
        })
        .filter(|(name, _)| name != "X-Amz-Signature")
        .collect();
    pairs.sort();
    let mut out = String::new();
    for (index, (name, value)) in pairs.iter().enumerate() {
        if index > 0 {
            out.push('&');
        }
        out.push_str(name);
        out.push('=');
        out.push_str(value);
    }
    out
}

fn encode_component(raw: &str) -> String {
    let decoded: Vec<u8> = percent_decode_str(raw).collect();
    percent_encoding::percent_encode(&decoded, UNRESERVED).to_string()
}

/// Appends a header value as SigV4 canonicalises it: trimmed, inner runs of spaces
/// collapsed. Works on the bytes as sent: a value that is not UTF-8 (obs-text) is signed
/// byte for byte, never replaced.
fn push_canonical_value(out: &mut Vec<u8>, value: &[u8]) {
    let mut words = value
        .split(|byte| byte.is_ascii_whitespace())
        .filter(|word| !word.is_empty());
    if let Some(first) = words.next() {
        out.extend_from_slice(first);
        for word in words {
            out.push(b' ');
            out.extend_from_slice(word);
        }
    }
}

/// The canonical request for `parts`, with the canonical URI `uri`, as bytes (header
/// values are signed as sent).
pub fn canonical_request(input: &CanonicalInput<'_>, parts: &SignatureParts, uri: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(input.method.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(uri.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(canonical_query(input.raw_query).as_bytes());
    out.push(b'\n');
    for name in &parts.signed_headers {
        out.extend_from_slice(name.as_bytes());
        out.push(b':');
        if name == "host" {
            out.extend_from_slice(input.host.trim().as_bytes());
        } else {
            for (index, value) in input.headers.get_all(name.as_str()).iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                push_canonical_value(&mut out, value.as_bytes());
            }
        }
        out.push(b'\n');
    }
    out.push(b'\n');
    out.extend_from_slice(parts.signed_headers.join(";").as_bytes());
    out.push(b'\n');
    out.extend_from_slice(input.payload_hash.as_bytes());
    out
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// The signing key for `secret` in the scope of `parts`.
pub fn signing_key(secret: &str, parts: &SignatureParts) -> SigningKey {
    let date = hmac(format!("AWS4{secret}").as_bytes(), parts.date.as_bytes());
    let region = hmac(&date, parts.region.as_bytes());
    let service = hmac(&region, parts.service.as_bytes());
    hmac(&service, b"aws4_request")
}

/// The hex signature of `string_to_sign`.
pub fn sign(key: &SigningKey, string_to_sign: &str) -> String {
    hex::encode(hmac(key, string_to_sign.as_bytes()))
}

/// Whether two hex signatures are equal, in constant time.
pub fn same_signature(expected: &str, given: &str) -> bool {
    expected.len() == given.len() && bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}

/// The string to sign for a request's canonical request.
pub fn request_string_to_sign(parts: &SignatureParts, canonical_request: &[u8]) -> String {
    format!(
        "{ALGORITHM}\n{}\n{}\n{}",
        parts.amz_date,
        parts.scope(),
        sha256_hex(canonical_request)
    )
}

/// Verifies the chained signatures of a signed `aws-chunked` payload: each chunk's, then
/// the trailer's.
#[derive(Debug, Clone)]
pub struct ChunkSigner {
    key: SigningKey,
    amz_date: String,
    scope: String,
    /// The signature the next one chains from: the request's, then each chunk's.
    previous: String,
}

impl ChunkSigner {
    pub fn new(key: SigningKey, parts: &SignatureParts) -> Self {
        Self {
            key,
            amz_date: parts.amz_date.clone(),
            scope: parts.scope(),
            previous: parts.signature.clone(),
        }
    }

    /// Checks the signature of a chunk whose data hashes to `data_sha256`.
    pub fn verify_chunk(&mut self, data_sha256: &str, given: &str) -> bool {
        let string_to_sign = format!(
            "{ALGORITHM}-PAYLOAD\n{}\n{}\n{}\n{EMPTY_SHA256}\n{data_sha256}",
            self.amz_date, self.scope, self.previous
        );
        self.check(&string_to_sign, given)
    }

    /// Checks the trailer signature over the canonical trailer lines (`name:value\n`).
    pub fn verify_trailer(&mut self, canonical_trailers: &str, given: &str) -> bool {
        let string_to_sign = format!(
            "{ALGORITHM}-TRAILER\n{}\n{}\n{}\n{}",
            self.amz_date,
            self.scope,
            self.previous,
            sha256_hex(canonical_trailers.as_bytes())
        );
        self.check(&string_to_sign, given)
    }

    fn check(&mut self, string_to_sign: &str, given: &str) -> bool {
        let expected = sign(&self.key, string_to_sign);
        let matches = same_signature(&expected, &given.to_ascii_lowercase());
        self.previous = expected;
        matches
    }
}

/// A running SHA-256 of chunk data.
#[derive(Debug, Clone, Default)]
pub struct DataHash(Sha256);

impl DataHash {
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// The hex digest; the hash starts again empty.
    pub fn finish(&mut self) -> String {
        hex::encode(std::mem::take(&mut self.0).finalize())
    }
}

/// Percent-encodes a query component the way SigV4 does (used by tests and presigning).
pub fn encode_query_component(text: &str) -> String {
    utf8_percent_encode(text, UNRESERVED).to_string()
}

#[cfg(test)]
mod tests;
