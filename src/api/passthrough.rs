//! Forwarded requests: the client's request is re-framed for the upstream (signature and
//! hop-by-hop headers dropped, `aws-chunked` payloads decoded and, when they carry
//! trailing checksums, re-encoded unsigned), sent through the [`Forwarder`], and the
//! upstream's response streamed back as it came. Writes invalidate the keys they change.
//!
//! Invariants: no request body is buffered whole, except a DeleteObjects key list
//! (bounded); a body that fails mid-stream (client gone, broken framing, wrong length)
//! aborts the upstream request, so nothing partial is stored upstream or in the cache;
//! invalidation runs after every write attempt, whatever its outcome.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use parking_lot::Mutex;
use quick_xml::events::Event;
use s3s::{S3Error, S3ErrorCode};

use super::checked::{HoldLast, Sha256Body};
use super::chunked::{BodyError, ChunkedError, DecodedBody, EncodedBody, ErrorSlot};
use super::error::{UPSTREAM_REQUEST_ID_HEADER, error_response, forward_error, invalid_object};
use super::route::{Address, Effect};
use crate::auth::sigv4::ChunkSigner;
use crate::auth::{PayloadCheck, Verified};
use crate::budget::Charge;
use crate::read::ReadPath;
use crate::types::{ObjectRef, ObjectRefError};
use crate::upstream::{BoxError, ForwardRequest, Forwarder, Payload, UpstreamBody};

/// The largest DeleteObjects request accepted (S3 allows 1,000 keys of up to 1 KiB each).
const MAX_DELETE_LIST_BYTES: usize = 2 * 1024 * 1024;

/// Request headers never forwarded: connection-level, or replaced by Portico's signature
/// and framing.
const DROPPED_REQUEST_HEADERS: [&str; 16] = [
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
    "x-amz-security-token",
];

/// Response headers that describe the upstream connection, not the response.
const DROPPED_RESPONSE_HEADERS: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Write-through settings: on, and the largest object whose bytes are held for it.
#[derive(Debug, Clone, Copy)]
pub struct WriteThrough {
    pub max_object_bytes: u64,
}

pub struct Passthrough {
    forwarder: Arc<Forwarder>,
    read: ReadPath,
    write_through: Option<WriteThrough>,
}

/// A forwarded request as the front classified it.
pub struct Forwarded {
    pub operation: &'static str,
    pub effect: Effect,
    pub address: Address,
    pub request_id: String,
}

impl Passthrough {
    pub fn new(
        forwarder: Arc<Forwarder>,
        read: ReadPath,
        write_through: Option<WriteThrough>,
    ) -> Self {
        Self {
            forwarder,
            read,
            write_through,
        }
    }

    pub async fn handle(
        &self,
        request: Request<Incoming>,
        forwarded: Forwarded,
    ) -> Response<s3s::Body> {
        let request_id = forwarded.request_id.clone();
        match self.forward(request, forwarded).await {
            Ok(response) => response,
            Err(error) => error_response(error, &request_id),
        }
    }

    async fn forward(
        &self,
        request: Request<Incoming>,
        forwarded: Forwarded,
    ) -> Result<Response<s3s::Body>, S3Error> {
        let Forwarded {
            operation,
            effect,
            address,
            ..
        } = forwarded;
        let mut changed = changed_objects(&address, effect)?;
        let (parts, body) = request.into_parts();
        let errors = ErrorSlot::default();
        // Over HTTP/2 a body needs no Content-Length: only the stream says whether one comes.
        let framing = Framing::of(&parts.headers, &parts.method, body.is_end_stream())?;
        let mut headers = forwarded_headers(&parts.headers);
        let check = parts
            .extensions
            .get::<Verified>()
            .map_or(PayloadCheck::Unsigned, |verified| verified.payload.clone());
        let mut body = client_body(body, errors.clone());
        let mut signer = None;
        match check {
            PayloadCheck::Unsigned => {}
            PayloadCheck::Sha256(expected) => {
                body = HoldLast::new(Sha256Body::new(body, expected, errors.clone())).boxed();
            }
            PayloadCheck::Chunks(chunks) => signer = Some(chunks),
        }
        let (mut payload, decoded_length) =
            framing.payload(body, &mut headers, signer, errors.clone());

        if effect == Effect::DeleteListed
            && let Some(bucket) = &address.bucket
        {
            let list = collect_bounded(payload, MAX_DELETE_LIST_BYTES).await?;
            changed = deleted_objects(&list)?
                .iter()
                .filter_map(|(key, version)| deleted(bucket, key, version.as_deref()).ok())
                .flatten()
                .collect();
            let length = list.len() as u64;
            payload = Payload::Plain(full_body(list), Some(length));
        }
        let capture = match (effect, self.write_through, decoded_length) {
            // Held until the upload is admitted, so only taken from free budget: without
            // room the upload is forwarded all the same, just not cached.
            (Effect::WriteObject, Some(settings), Some(length))
                if length <= settings.max_object_bytes =>
            {
                let capture = self.read.budget().try_reserve(length).map(Capture::new);
                if let Some(capture) = &capture {
                    payload = capture.tee(payload);
                }
                capture
            }
            _ => None,
        };

        let Address { bucket, key, query } = address;
        let result = self
            .forwarder
            .send(ForwardRequest {
                operation,
                method: parts.method,
                bucket,
                key,
                query,
                headers,
                payload,
            })
            .await;
        for object in &changed {
            self.read.invalidate(object);
        }
        let response = match result {
            Ok(response) => response,
            Err(error) => return Err(body_error(&errors).unwrap_or_else(|| forward_error(&error))),
        };
        if response.status().is_success()
            && let (Some(capture), Some(object)) = (capture, changed.first())
        {
            self.admit(object, &response, capture).await;
        }
        Ok(client_response(response))
    }

    /// Write-through: caches the bytes just written, if the upstream holds exactly them.
    async fn admit(&self, object: &ObjectRef, response: &Response<Incoming>, capture: Capture) {
        let Some(etag) = response
            .headers()
            .get(http::header::ETAG)
            .and_then(|value| value.to_str().ok())
        else {
            return;
        };
        let Some(data) = capture.take() else {
            return;
        };
        match self.read.admit_written(object, etag, data).await {
            Ok(()) => tracing::debug!(%object, etag, "written object admitted to the cache"),
            Err(error) => tracing::debug!(%object, %error, "written object not cached"),
        }
    }
}

/// The objects a PutObject, CopyObject (destination), CompleteMultipartUpload or
/// DeleteObject changes (the written object first); DeleteObjects' keys come from its body.
fn changed_objects(address: &Address, effect: Effect) -> Result<Vec<ObjectRef>, S3Error> {
    if !matches!(effect, Effect::WriteObject | Effect::ChangeKey) {
        return Ok(Vec::new());
    }
    let (Some(bucket), Some(key)) = (&address.bucket, &address.key) else {
        return Ok(Vec::new());
    };
    deleted(bucket, key, address.query_value("versionId")).map_err(|error| invalid_object(&error))
}

/// How the client framed its request body.
enum Framing {
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
    fn of(headers: &HeaderMap, method: &http::Method, ended: bool) -> Result<Self, S3Error> {
        let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
        let content_sha256 = header("x-amz-content-sha256").unwrap_or_default();
        let aws_chunked = content_sha256.starts_with("STREAMING-")
            || header("content-encoding").is_some_and(has_aws_chunked);
        if aws_chunked {
            let decoded_length = header("x-amz-decoded-content-length")
                .and_then(|value| value.trim().parse().ok())
                .ok_or_else(|| {
                    S3Error::with_message(
                        S3ErrorCode::MissingContentLength,
                        "You must provide the x-amz-decoded-content-length header with an aws-chunked payload.",
                    )
                })?;
            let trailer =
                content_sha256.ends_with("-TRAILER") || headers.contains_key("x-amz-trailer");
            return Ok(Self::AwsChunked {
                decoded_length,
                trailer,
            });
        }
        let length = match header("content-length") {
            Some(value) => Some(value.trim().parse::<u64>().map_err(|_| {
                S3Error::with_message(
                    S3ErrorCode::InvalidArgument,
                    "Content-Length is not a number.",
                )
            })?),
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
    fn payload(
        self,
        body: UpstreamBody,
        headers: &mut HeaderMap,
        signer: Option<ChunkSigner>,
        errors: ErrorSlot,
    ) -> (Payload, Option<u64>) {
        match self {
            Self::None => (Payload::Empty, Some(0)),
            Self::Plain(length) => (Payload::Plain(body, length), length),
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

fn has_aws_chunked(content_encoding: &str) -> bool {
    content_encoding
        .split(',')
        .any(|token| token.trim().eq_ignore_ascii_case("aws-chunked"))
}

/// Removes `aws-chunked` from `Content-Encoding`; returns what encodings remain.
fn remove_aws_chunked(headers: &mut HeaderMap) -> Option<String> {
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
fn forwarded_headers(headers: &HeaderMap) -> HeaderMap {
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
fn client_body(body: Incoming, errors: ErrorSlot) -> UpstreamBody {
    body.map_err(move |error| -> BoxError {
        let error = BodyError::Client(error.to_string());
        errors.set(error.clone());
        error.into()
    })
    .boxed()
}

fn full_body(bytes: Bytes) -> UpstreamBody {
    http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed()
}

async fn collect_bounded(payload: Payload, limit: usize) -> Result<Bytes, S3Error> {
    let mut body = match payload {
        Payload::Empty => return Ok(Bytes::new()),
        Payload::Plain(body, _) | Payload::AwsChunked(body, _) => body,
    };
    let mut collected = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| {
            S3Error::with_message(
                S3ErrorCode::IncompleteBody,
                format!("The request body could not be read: {error}"),
            )
        })?;
        if let Ok(data) = frame.into_data() {
            if collected.len() + data.len() > limit {
                return Err(S3Error::with_message(
                    S3ErrorCode::MaxMessageLengthExceeded,
                    "Your request was too big.",
                ));
            }
            collected.extend_from_slice(&data);
        }
    }
    Ok(collected.freeze())
}

/// The objects a DeleteObjects request names: each key, with its version id when given.
fn deleted_objects(list: &[u8]) -> Result<Vec<(String, Option<String>)>, S3Error> {
    let malformed = || {
        S3Error::with_message(
            S3ErrorCode::MalformedXML,
            "The XML you provided was not well-formed or did not validate against our published schema.",
        )
    };
    let mut reader = quick_xml::Reader::from_reader(list);
    let mut objects = Vec::new();
    let (mut key, mut version): (Option<String>, Option<String>) = (None, None);
    // The element whose text is being read (`Key` or `VersionId` of an `Object`) and the
    // text so far; entity references arrive as their own events.
    let mut reading: Option<(&'static str, String)> = None;
    loop {
        match reader.read_event().map_err(|_| malformed())? {
            Event::Start(start) => match start.local_name().as_ref() {
                b"Object" => (key, version) = (None, None),
                b"Key" => reading = Some(("Key", String::new())),
                b"VersionId" => reading = Some(("VersionId", String::new())),
                _ => {}
            },
            Event::End(end) => match end.local_name().as_ref() {
                b"Key" | b"VersionId" => match reading.take().ok_or_else(malformed)? {
                    ("Key", text) => key = Some(text),
                    (_, text) => version = Some(text),
                },
                b"Object" => objects.push((key.take().ok_or_else(malformed)?, version.take())),
                _ => {}
            },
            Event::Text(text) => {
                if let Some((_, value)) = reading.as_mut() {
                    value.push_str(&text.decode().map_err(|_| malformed())?);
                }
            }
            // A key may be written as CDATA (`<Key><![CDATA[a<b]]></Key>`); S3 reads it.
            Event::CData(text) => {
                if let Some((_, value)) = reading.as_mut() {
                    value.push_str(&text.decode().map_err(|_| malformed())?);
                }
            }
            Event::GeneralRef(reference) => {
                if let Some((_, value)) = reading.as_mut() {
                    let resolved = match reference.resolve_char_ref().map_err(|_| malformed())? {
                        Some(character) => character.to_string(),
                        None => {
                            let name = reference.decode().map_err(|_| malformed())?;
                            quick_xml::escape::resolve_xml_entity(&name)
                                .ok_or_else(malformed)?
                                .to_owned()
                        }
                    };
                    value.push_str(&resolved);
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(objects)
}

/// What deleting `key` (at `version`, if given) changes: that version, and the current
/// version of the key, which a delete of any version may replace.
fn deleted(
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> Result<Vec<ObjectRef>, ObjectRefError> {
    let current = ObjectRef::new(bucket, key)?;
    Ok(match version {
        Some(_) => vec![current.clone().with_version(version)?, current],
        None => vec![current],
    })
}

/// The client's error when its body was at fault, else `None`.
fn body_error(errors: &ErrorSlot) -> Option<S3Error> {
    let error = errors.get()?;
    let (code, status) = match error {
        BodyError::Client(_) => (S3ErrorCode::IncompleteBody, StatusCode::BAD_REQUEST),
        BodyError::Chunked(ChunkedError::SignatureMismatch) => {
            (S3ErrorCode::SignatureDoesNotMatch, StatusCode::FORBIDDEN)
        }
        BodyError::Chunked(_) => (S3ErrorCode::InvalidRequest, StatusCode::BAD_REQUEST),
        BodyError::Sha256Mismatch => (
            S3ErrorCode::Custom("XAmzContentSHA256Mismatch".into()),
            StatusCode::BAD_REQUEST,
        ),
    };
    let mut s3_error = S3Error::with_message(code, error.to_string());
    s3_error.set_status_code(status);
    Some(s3_error)
}

/// The upstream's response for the client: same status, headers and streamed body; the
/// upstream's request id moves to its own header (the client gets Portico's).
fn client_response(response: Response<Incoming>) -> Response<s3s::Body> {
    let (mut parts, body) = response.into_parts();
    for name in DROPPED_RESPONSE_HEADERS {
        parts.headers.remove(name);
    }
    if let Some(upstream_id) = parts.headers.remove("x-amz-request-id") {
        parts
            .headers
            .insert(UPSTREAM_REQUEST_ID_HEADER, upstream_id);
    }
    Response::from_parts(parts, s3s::Body::from(body))
}

/// The bytes of a body as they pass, for write-through; dropped if the body fails. They
/// are charged to the memory budget until the last clone of the capture is dropped.
#[derive(Clone)]
struct Capture {
    pieces: Arc<Mutex<Option<Vec<Bytes>>>>,
    _charge: Arc<Charge>,
}

impl Capture {
    fn new(charge: Charge) -> Self {
        Self {
            pieces: Arc::new(Mutex::new(Some(Vec::new()))),
            _charge: Arc::new(charge),
        }
    }

    fn tee(&self, payload: Payload) -> Payload {
        match payload {
            Payload::Empty => Payload::Empty,
            Payload::Plain(body, length) => Payload::Plain(self.wrap(body), length),
            Payload::AwsChunked(body, length) => Payload::AwsChunked(self.wrap(body), length),
        }
    }

    fn wrap(&self, body: UpstreamBody) -> UpstreamBody {
        Tee {
            inner: body,
            capture: self.clone(),
        }
        .boxed()
    }

    fn take(&self) -> Option<Vec<Bytes>> {
        self.pieces.lock().take()
    }
}

struct Tee {
    inner: UpstreamBody,
    capture: Capture,
}

impl Body for Tee {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && let Some(pieces) = self.capture.pieces.lock().as_mut()
                {
                    pieces.push(data.clone());
                }
            }
            Poll::Ready(Some(Err(_))) => {
                self.capture.pieces.lock().take();
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deleted_keys_are_read_from_the_request() {
        let xml = br#"<?xml version="1.0" encoding="UTF-8"?>
<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>a &amp; b.txt</Key></Object><Object><Key>dir/c</Key><VersionId>v1</VersionId></Object><Quiet>true</Quiet></Delete>"#;
        assert_eq!(
            deleted_objects(xml).unwrap(),
            vec![
                ("a & b.txt".to_owned(), None),
                ("dir/c".to_owned(), Some("v1".to_owned()))
            ]
        );
        let cdata = b"<Delete><Object><Key><![CDATA[x<y & z]]></Key></Object><Object><Key>p<![CDATA[&]]>q</Key></Object></Delete>";
        assert_eq!(
            deleted_objects(cdata).unwrap(),
            vec![("x<y & z".to_owned(), None), ("p&q".to_owned(), None)]
        );
        assert!(deleted_objects(b"<Delete><Object><Key>a</Object>").is_err());
        assert!(deleted_objects(b"<Delete><Object><VersionId>v</VersionId></Object>").is_err());
    }

    #[test]
    fn signature_and_hop_by_hop_headers_are_not_forwarded() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("authorization", "AWS4-HMAC-SHA256 x"),
            ("x-amz-date", "20260101T000000Z"),
            ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
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
