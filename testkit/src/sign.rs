//! Signing raw requests for tests with `aws-sigv4` (the AWS SDK's own signer, independent of
//! Portico's verifier): header signatures, presigned URLs, and signed `aws-chunked` bodies
//! with chained chunk and trailer signatures, in SigV4 and in SigV4a.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SignatureLocation,
    SigningSettings, UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::{v4, v4a};
use aws_smithy_runtime_api::client::identity::Identity;
use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::minio::{ACCESS_KEY, SECRET_KEY};

/// SHA-256 of the empty payload, in hex.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Who signs and when.
#[derive(Debug, Clone)]
pub struct Signer {
    pub access_key_id: String,
    pub secret: String,
    pub time: SystemTime,
    pub region: String,
}

impl Default for Signer {
    /// The test credentials, now, us-east-1.
    fn default() -> Self {
        Self {
            access_key_id: ACCESS_KEY.to_owned(),
            secret: SECRET_KEY.to_owned(),
            time: SystemTime::now(),
            region: "us-east-1".to_owned(),
        }
    }
}

/// The headers (or query parameters) a signature adds, and the signature itself.
#[derive(Debug, Clone)]
pub struct Signed {
    pub headers: Vec<(String, String)>,
    pub query: Vec<(String, String)>,
    pub signature: String,
}

impl Signed {
    /// The signature's headers as `(name, value)` pairs for a request builder.
    pub fn header_pairs(&self) -> Vec<(&str, &str)> {
        self.headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect()
    }
}

impl Signer {
    fn identity(&self) -> Identity {
        Credentials::new(&self.access_key_id, &self.secret, None, None, "test").into()
    }

    fn settings(&self, presign_for: Option<Duration>) -> SigningSettings {
        let mut settings = SigningSettings::default();
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        match presign_for {
            Some(expires) => {
                settings.signature_location = SignatureLocation::QueryParams;
                settings.expires_in = Some(expires);
            }
            None => settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256,
        }
        settings
    }

    fn run(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        payload_hash: &str,
        presign_for: Option<Duration>,
    ) -> Signed {
        let identity = self.identity();
        let params: aws_sigv4::http_request::SigningParams<'_> = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("s3")
            .time(self.time)
            .settings(self.settings(presign_for))
            .build()
            .expect("signing parameters")
            .into();
        let body = match presign_for {
            Some(_) => SignableBody::UnsignedPayload,
            None => SignableBody::Precomputed(payload_hash.to_owned()),
        };
        signed(&params, method, url, headers, body)
    }

    /// Signs a request whose body hashes to `payload_hash` (hex, `UNSIGNED-PAYLOAD` or a
    /// `STREAMING-*` value); `headers` must include `host` and every header to sign.
    pub fn sign(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        payload_hash: &str,
    ) -> Signed {
        self.run(method, url, headers, payload_hash, None)
    }

    /// A presigned URL for `method` on `url`, valid for `expires`.
    pub fn presign(&self, method: &str, url: &str, host: &str, expires: Duration) -> String {
        let signed = self.run(method, url, &[("host", host)], "", Some(expires));
        let query: Vec<String> = signed
            .query
            .iter()
            .map(|(name, value)| format!("{name}={}", encode(value)))
            .collect();
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}{}", query.join("&"))
    }

    /// `data` as a signed `aws-chunked` body chained from `seed` (the request signature),
    /// in chunks of `chunk_size`, with an optional signed trailer.
    pub fn chunked_body(
        &self,
        seed: &str,
        data: &[u8],
        chunk_size: usize,
        trailer: Option<(&str, &str)>,
    ) -> Vec<u8> {
        let identity = self.identity();
        let params: v4::SigningParams<'_, ()> = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("s3")
            .time(self.time)
            .settings(())
            .build()
            .expect("signing parameters");
        chained_body(
            seed,
            data,
            chunk_size,
            trailer,
            |chunk, previous| {
                v4::sign_chunk(&Bytes::copy_from_slice(chunk), previous, &params)
                    .expect("chunk signature")
                    .into_parts()
                    .1
            },
            |(name, value), previous| {
                let mut headers = aws_smithy_runtime_api::http::Headers::new();
                headers.insert(name.to_owned(), value.to_owned());
                v4::sign_trailer(&headers, previous, &params)
                    .expect("trailer signature")
                    .into_parts()
                    .1
            },
        )
    }

    /// Signs a request with SigV4a (`AWS4-ECDSA-P256-SHA256`, what clients of multi-region
    /// access points send), for every region.
    pub fn sign_v4a(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        payload_hash: &str,
    ) -> Signed {
        let identity = self.identity();
        let params: aws_sigv4::http_request::SigningParams<'_> = v4a::SigningParams::builder()
            .identity(&identity)
            .region_set("*")
            .name("s3")
            .time(self.time)
            .settings(self.settings(None))
            .build()
            .expect("signing parameters")
            .into();
        let body = SignableBody::Precomputed(payload_hash.to_owned());
        signed(&params, method, url, headers, body)
    }

    /// [`Signer::chunked_body`] for a SigV4a request signed at `amz_date`: each chunk and
    /// the trailer signed with the request's ECDSA key (`STREAMING-AWS4-ECDSA-P256-SHA256-*`).
    pub fn chunked_body_v4a(
        &self,
        seed: &str,
        amz_date: &str,
        data: &[u8],
        chunk_size: usize,
        trailer: Option<(&str, &str)>,
    ) -> Vec<u8> {
        let key = v4a::generate_signing_key(&self.access_key_id, &self.secret);
        let scope = format!("{}/s3/aws4_request", &amz_date[..8]);
        let sign = |kind: &str, previous: &str, hashed: &str| {
            let string_to_sign =
                format!("AWS4-ECDSA-P256-SHA256-{kind}\n{amz_date}\n{scope}\n{previous}\n{hashed}");
            v4a::calculate_signature(&key, string_to_sign.as_bytes())
        };
        chained_body(
            seed,
            data,
            chunk_size,
            trailer,
            |chunk, previous| {
                let hashed = format!("{EMPTY_SHA256}\n{}", hex::encode(Sha256::digest(chunk)));
                sign("PAYLOAD", previous, &hashed)
            },
            |(name, value), previous| {
                let canonical = format!("{name}:{value}\n");
                sign("TRAILER", previous, &hex::encode(Sha256::digest(canonical)))
            },
        )
    }
}

/// A request signed with `params`: the headers or query parameters to add, and the
/// signature.
fn signed(
    params: &aws_sigv4::http_request::SigningParams<'_>,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: SignableBody<'_>,
) -> Signed {
    let signable =
        SignableRequest::new(method, url, headers.iter().copied(), body).expect("signable request");
    let (instructions, signature) = sign(signable, params).expect("sign").into_parts();
    let (headers, query) = instructions.into_parts();
    Signed {
        headers: headers
            .into_iter()
            .map(|header| (header.name().to_owned(), header.value().to_owned()))
            .collect(),
        query: query
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value.into_owned()))
            .collect(),
        signature,
    }
}

/// `aws-chunked` framing with chained signatures: `sign_chunk(data, previous signature)`
/// for every chunk and the final empty one, `sign_trailer` for the trailer if there is one.
fn chained_body(
    seed: &str,
    data: &[u8],
    chunk_size: usize,
    trailer: Option<(&str, &str)>,
    mut sign_chunk: impl FnMut(&[u8], &str) -> String,
    sign_trailer: impl FnOnce((&str, &str), &str) -> String,
) -> Vec<u8> {
    let mut previous = seed.to_owned();
    let mut out = Vec::with_capacity(data.len() + 1024);
    let pieces = data.chunks(chunk_size).chain(std::iter::once(&[][..]));
    for piece in pieces {
        let signature = sign_chunk(piece, &previous);
        out.extend_from_slice(
            format!("{:x};chunk-signature={signature}\r\n", piece.len()).as_bytes(),
        );
        out.extend_from_slice(piece);
        if !piece.is_empty() {
            out.extend_from_slice(b"\r\n");
        }
        previous = signature;
    }
    if let Some((name, value)) = trailer {
        let signature = sign_trailer((name, value), &previous);
        out.extend_from_slice(format!("{name}:{value}\r\n").as_bytes());
        out.extend_from_slice(format!("x-amz-trailer-signature:{signature}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}
