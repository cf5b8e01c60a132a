//! How a forwarded request's body is framed on its way upstream: plain with a length,
//! chunked, or `aws-chunked` (decoded from the client's signed chunks and re-encoded with
//! Portico's own signature), and which headers go with it.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use s3s::S3Error;

use crate::BoxError;
use crate::api::checked::HoldLast;
use crate::api::chunked::{BodyError, DecodedBody, EncodedBody, ErrorSlot};
use crate::api::error::{self, RequestError};
use crate::auth::sigv4::ChunkSigner;
use crate::upstream::{Payload, UpstreamBody};

/// Request headers never forwarded: connection-level, or replaced by Portico's signature
/// and framing.
pub(super) const DROPPED_REQUEST_HEADERS: [&str; 17] = [
    "authorization",
    "connection",
    "content-length",
    "expect",
    "host",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "x-amz-content-sha256",
    "x-amz-date",
    "x-amz-decoded-content-length",
    // SigV4a's scope, signed for Portico alone.
    "x-amz-region-set",
    "x-amz-security-token",
];

/// How the client framed its request body.
pub(super) enum Framing {
    None,
    Plain(Option<u64>),
    /// `aws-chunked`: the decoded length, and whether checksums trail the data.
    AwsChunked {
        decoded_length: u64,
        trailer: bool,
    },
}

impl Framing {
    /// `ended`: the request's stream carries no body (HTTP/1 without `Content-Length` or
    /// `Transfer-Encoding`, HTTP/2 with END_STREAM on its headers).
    pub(super) fn of(
        headers: &HeaderMap,
        method: &http::Method,
        ended: bool,
    ) -> Result<Self, S3Error> {
        let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
        let content_sha256 = header("x-amz-content-sha256").unwrap_or_default();
        // The framing comes from the payload's declared hash, as S3 reads it: a client may
        // name `aws-chunked` in `Content-Encoding` over a plain body (boto3's
        // `ContentEncoding='gzip, aws-chunked'`), and S3 stores that body as sent.
        if content_sha256.starts_with("STREAMING-") {
            let decoded_length = header("x-amz-decoded-content-length")
                .and_then(|value| value.trim().parse().ok())
                .ok_or(RequestError::MissingDecodedLength)?;
            let trailer =
                content_sha256.ends_with("-TRAILER") || headers.contains_key("x-amz-trailer");
            return Ok(Self::AwsChunked {
                decoded_length,
                trailer,
            });
        }
        let length = match header("content-length") {
            Some(value) => Some(
                value
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| RequestError::ContentLengthNotANumber)?,
            ),
            None => None,
        };
        let empty = length == Some(0) || (length.is_none() && ended);
        Ok(match *method {
            // An empty PutObject still needs its `Content-Length: 0` upstream.
            http::Method::PUT | http::Method::POST if empty => Self::Plain(Some(0)),
            _ if empty => Self::None,
            _ => Self::Plain(length),
        })
    }

    /// The upstream payload for `body`, adjusting `headers` to its framing; the decoded
    /// length when known.
    /// `signer` verifies the chunk signatures of a signed `aws-chunked` body.
    pub(super) fn payload(
        self,
        body: UpstreamBody,
        headers: &mut HeaderMap,
        signer: Option<ChunkSigner>,
        errors: ErrorSlot,
    ) -> (Payload, Option<u64>) {
        match self {
            Self::None => (Payload::Empty, Some(0)),
            Self::Plain(length) => {
                // A declared `aws-chunked` over a plain body names no coding of the object.
                if headers
                    .get(http::header::CONTENT_ENCODING)
                    .and_then(|value| value.to_str().ok())
                    .is_some_and(has_aws_chunked)
                {
                    remove_aws_chunked(headers);
                }
                (Payload::Plain(body, length), length)
            }
            Self::AwsChunked {
                decoded_length,
                trailer,
            } => {
                let decoded = HoldLast::new(DecodedBody::new(body, decoded_length, signer, errors));
                let remaining = remove_aws_chunked(headers);
                if trailer {
                    let encoding = match remaining {
                        Some(rest) => format!("aws-chunked,{rest}"),
                        None => "aws-chunked".to_owned(),
                    };
                    if let Ok(value) = HeaderValue::from_str(&encoding) {
                        headers.insert(http::header::CONTENT_ENCODING, value);
                    }
                    headers.insert(
                        "x-amz-decoded-content-length",
                        HeaderValue::from(decoded_length),
                    );
                    let encoded = EncodedBody::new(decoded);
                    (
                        Payload::AwsChunked(encoded.boxed(), decoded_length),
                        Some(decoded_length),
                    )
                } else {
                    (
                        Payload::Plain(decoded.boxed(), Some(decoded_length)),
                        Some(decoded_length),
                    )
                }
            }
        }
    }
}

pub(super) fn has_aws_chunked(content_encoding: &str) -> bool {
    content_encoding
        .split(',')
        .any(|token| token.trim().eq_ignore_ascii_case("aws-chunked"))
}

/// Removes `aws-chunked` from `Content-Encoding`; returns what encodings remain.
pub(super) fn remove_aws_chunked(headers: &mut HeaderMap) -> Option<String> {
    let value = headers.remove(http::header::CONTENT_ENCODING)?;
    let rest: Vec<&str> = value
        .to_str()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|token| !token.is_empty() && !token.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    if rest.is_empty() {
        return None;
    }
    let rest = rest.join(",");
    if let Ok(value) = HeaderValue::from_str(&rest) {
        headers.insert(http::header::CONTENT_ENCODING, value);
    }
    Some(rest)
}

/// The client's headers minus those Portico replaces or that end at this hop.
pub(super) fn forwarded_headers(headers: &HeaderMap) -> HeaderMap {
    let connection_named: Vec<String> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .collect();
    let mut forwarded = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let name_text = name.as_str();
        if DROPPED_REQUEST_HEADERS.contains(&name_text)
            || connection_named.iter().any(|named| named == name_text)
        {
            continue;
        }
        forwarded.append(name.clone(), value.clone());
    }
    forwarded
}

/// A plain client body whose failure (the client going away) is recorded in `errors`.
pub(super) fn client_body(body: Incoming, errors: ErrorSlot) -> UpstreamBody {
    body.map_err(move |error| -> BoxError {
        let error = BodyError::Client(error.to_string());
        errors.set(error.clone());
        error.into()
    })
    .boxed()
}

pub(super) fn full_body(bytes: Bytes) -> UpstreamBody {
    http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed()
}

/// The client's error when its body was at fault, else `None`.
pub(super) fn body_error(errors: &ErrorSlot) -> Option<S3Error> {
    errors.get().map(|error| error::body_error(&error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_and_hop_by_hop_headers_are_not_forwarded() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("authorization", "AWS4-HMAC-SHA256 x"),
            ("x-amz-date", "20260101T000000Z"),
            ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
            ("x-amz-region-set", "*"),
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "1"),
            ("content-type", "text/plain"),
            ("x-amz-meta-owner", "me"),
            ("content-md5", "abc"),
        ] {
            headers.append(name, value.parse().unwrap());
        }
        let forwarded = forwarded_headers(&headers);
        let names: Vec<&str> = forwarded.keys().map(|name| name.as_str()).collect();
        assert_eq!(names, ["content-type", "x-amz-meta-owner", "content-md5"]);
    }

    #[test]
    fn a_declared_aws_chunked_over_a_plain_body_is_plain_and_leaves_the_object_s_coding() {
        for (declared, stored) in [
            ("gzip, aws-chunked", Some("gzip")),
            ("aws-chunked, gzip", Some("gzip")),
            ("aws-chunked", None),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert("x-amz-content-sha256", "UNSIGNED-PAYLOAD".parse().unwrap());
            headers.insert("content-encoding", declared.parse().unwrap());
            headers.insert("content-length", "5".parse().unwrap());
            let framing = Framing::of(&headers, &http::Method::PUT, false).unwrap();
            assert!(matches!(framing, Framing::Plain(Some(5))), "{declared}");
            let (payload, length) = framing.payload(
                full_body(Bytes::from_static(b"hello")),
                &mut headers,
                None,
                ErrorSlot::default(),
            );
            assert!(matches!(payload, Payload::Plain(_, Some(5))), "{declared}");
            assert_eq!(length, Some(5));
            let coding = headers
                .get("content-encoding")
                .map(|value| value.to_str().unwrap());
            assert_eq!(coding, stored, "{declared}");
        }
    }

    #[test]
    fn aws_chunked_is_removed_from_content_encoding() {
        let mut headers = HeaderMap::new();
        headers.insert("content-encoding", "aws-chunked, gzip".parse().unwrap());
        assert_eq!(remove_aws_chunked(&mut headers).as_deref(), Some("gzip"));
        assert_eq!(headers["content-encoding"], "gzip");
        headers.insert("content-encoding", "aws-chunked".parse().unwrap());
        assert_eq!(remove_aws_chunked(&mut headers), None);
        assert!(!headers.contains_key("content-encoding"));
    }
}
