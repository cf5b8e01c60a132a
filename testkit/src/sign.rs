//! Signing raw requests for tests with `aws-sigv4` (the AWS SDK's own signer, independent of
//! Portico's verifier): header signatures, presigned URLs, and signed `aws-chunked` bodies
//! with chained chunk and trailer signatures.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SignatureLocation,
    SigningSettings, UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use bytes::Bytes;

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
        let signable = SignableRequest::new(method, url, headers.iter().copied(), body)
            .expect("signable request");
        let (instructions, signature) = sign(signable, &params).expect("sign").into_parts();
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
        let mut previous = seed.to_owned();
        let mut out = Vec::with_capacity(data.len() + 1024);
        let pieces = data.chunks(chunk_size).chain(std::iter::once(&[][..]));
        for piece in pieces {
            let chunk = Bytes::copy_from_slice(piece);
            let signature = v4::sign_chunk(&chunk, &previous, &params)
                .expect("chunk signature")
                .into_parts()
                .1;
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
            let mut headers = aws_smithy_runtime_api::http::Headers::new();
            headers.insert(name.to_owned(), value.to_owned());
            let signature = v4::sign_trailer(&headers, &previous, &params)
                .expect("trailer signature")
                .into_parts()
                .1;
            out.extend_from_slice(format!("{name}:{value}\r\n").as_bytes());
            out.extend_from_slice(format!("x-amz-trailer-signature:{signature}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out
    }
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
