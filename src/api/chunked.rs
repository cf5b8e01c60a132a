//! The `aws-chunked` payload encoding: decoding what clients send
//! (`STREAMING-*` payloads, with or without trailers) and re-encoding the decoded bytes
//! plus trailing checksums for the upstream (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`).
//!
//! Without a signer (authentication off) a signed payload is decoded all the same: chunk
//! signatures and the trailer signature are dropped, the trailers they signed are kept.
//!
//! Invariants: the decoder never buffers chunk data (only header and trailer lines, each
//! bounded); it yields exactly the bytes the chunk sizes announce and fails on any framing
//! error, on a body that ends early, on a decoded length other than the announced one and,
//! for signed payloads, on any chunk or trailer whose signature does not verify. Wrapped
//! in [`HoldLast`](super::checked::HoldLast), a failed decode ends the stream with an error
//! before the upstream has a complete request.

mod encode;

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use parking_lot::Mutex;

use crate::BoxError;
use crate::auth::sigv4::{ChunkSigner, DataHash, EMPTY_SHA256};
pub use encode::EncodedBody;

/// The longest chunk-header or trailer line accepted (a signed header is ~90 bytes).
const MAX_LINE_BYTES: usize = 4096;
/// The most trailer bytes accepted in total.
const MAX_TRAILER_BYTES: usize = 16 * 1024;
/// The trailer that signs the others; it ends at Portico in every auth mode.
const TRAILER_SIGNATURE: &str = "x-amz-trailer-signature";
/// Upstream chunks are at least this large (except the last): fewer, cheaper frames.
pub(super) const UPSTREAM_CHUNK_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkedError {
    #[error("malformed aws-chunked payload: {0}")]
    Malformed(&'static str),
    #[error("the aws-chunked payload ended before its final chunk")]
    Incomplete,
    #[error(
        "the decoded payload has {actual} bytes but x-amz-decoded-content-length says {announced}"
    )]
    LengthMismatch { announced: u64, actual: u64 },
    #[error("a chunk or trailer signature does not match")]
    SignatureMismatch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting a chunk header line: `<hex size>[;chunk-signature=<sig>]`.
    Header,
    /// Inside a chunk's data, this many bytes to go.
    Data(u64),
    /// Expecting the CRLF that ends a chunk's data.
    DataEnd,
    /// After the zero-length chunk: trailer lines until an empty line.
    Trailer,
    Done,
}

/// Verifies a signed payload's chunk and trailer signatures as they are decoded.
#[derive(Debug)]
struct Signatures {
    signer: ChunkSigner,
    /// The running hash of the current chunk's data.
    data: DataHash,
    /// The signature the current chunk's header announced.
    announced: String,
    /// The trailer lines as signed: `name:value\n` each, sorted by name when verified.
    canonical_trailers: Vec<String>,
    trailer_signature: Option<String>,
}

/// Push decoder for `aws-chunked` framing.
#[derive(Debug)]
pub struct Decoder {
    state: State,
    line: BytesMut,
    decoded_bytes: u64,
    trailer_bytes: usize,
    trailers: HeaderMap,
    signatures: Option<Signatures>,
}

impl Default for Decoder {
    fn default() -> Self {
        Self {
            state: State::Header,
            line: BytesMut::new(),
            decoded_bytes: 0,
            trailer_bytes: 0,
            trailers: HeaderMap::new(),
            signatures: None,
        }
    }
}

impl Decoder {
    /// A decoder that also verifies every chunk's and the trailer's signature.
    pub fn signed(signer: ChunkSigner) -> Self {
        Self {
            signatures: Some(Signatures {
                signer,
                data: DataHash::default(),
                announced: String::new(),
                canonical_trailers: Vec::new(),
                trailer_signature: None,
            }),
            ..Self::default()
        }
    }

    /// Consumes `input`, pushing the chunk data it contains onto `out`.
    pub fn feed(&mut self, mut input: Bytes, out: &mut Vec<Bytes>) -> Result<(), ChunkedError> {
        while !input.is_empty() {
            match self.state {
                State::Data(remaining) => {
                    let take = remaining.min(input.len() as u64);
                    let data = input.split_to(take as usize);
                    self.decoded_bytes += take;
                    if let Some(signatures) = self.signatures.as_mut() {
                        signatures.data.update(&data);
                    }
                    out.push(data);
                    self.state = match remaining - take {
                        0 => {
                            self.verify_chunk(false)?;
                            State::DataEnd
                        }
                        left => State::Data(left),
                    };
                }
                State::Done => return Err(ChunkedError::Malformed("data after the final chunk")),
                State::Header | State::DataEnd | State::Trailer => {
                    if let Some(line) = self.take_line(&mut input)? {
                        self.on_line(&line)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Ends decoding; returns the trailing headers.
    pub fn finish(self) -> Result<(u64, HeaderMap), ChunkedError> {
        match self.state {
            State::Done => Ok((self.decoded_bytes, self.trailers)),
            _ => Err(ChunkedError::Incomplete),
        }
    }

    /// Moves bytes up to and including the next LF into the line buffer; returns the line
    /// without its CRLF once complete.
    fn take_line(&mut self, input: &mut Bytes) -> Result<Option<BytesMut>, ChunkedError> {
        let newline = input.iter().position(|&byte| byte == b'\n');
        let end = newline.map_or(input.len(), |position| position + 1);
        if self.line.len() + end > MAX_LINE_BYTES {
            return Err(ChunkedError::Malformed("line too long"));
        }
        self.line.extend_from_slice(&input.split_to(end));
        if newline.is_none() {
            return Ok(None);
        }
        let mut line = self.line.split();
        if !line.ends_with(b"\r\n") {
            return Err(ChunkedError::Malformed("line not ended by CRLF"));
        }
        line.truncate(line.len() - 2);
        Ok(Some(line))
    }

    fn on_line(&mut self, line: &[u8]) -> Result<(), ChunkedError> {
        match self.state {
            State::DataEnd if line.is_empty() => self.state = State::Header,
            State::DataEnd => {
                return Err(ChunkedError::Malformed("chunk data longer than its size"));
            }
            State::Header => {
                let size = parse_chunk_size(line)?;
                if let Some(signatures) = self.signatures.as_mut() {
                    signatures.announced = chunk_signature(line)?.to_owned();
                }
                self.state = if size == 0 {
                    self.verify_chunk(true)?;
                    State::Trailer
                } else {
                    State::Data(size)
                };
            }
            State::Trailer if line.is_empty() => {
                self.verify_trailer()?;
                self.state = State::Done;
            }
            State::Trailer => {
                self.trailer_bytes += line.len();
                if self.trailer_bytes > MAX_TRAILER_BYTES {
                    return Err(ChunkedError::Malformed("trailers too large"));
                }
                let (name, value) = parse_trailer(line)?;
                if name == TRAILER_SIGNATURE {
                    // Signed for Portico's eyes alone: checked when authentication is on,
                    // never forwarded (the upstream would take it for one more trailer).
                    if let Some(signatures) = self.signatures.as_mut() {
                        let signature = value.to_str().unwrap_or_default().to_owned();
                        signatures.trailer_signature = Some(signature);
                    }
                    return Ok(());
                }
                if let Some(signatures) = self.signatures.as_mut() {
                    let value_text = String::from_utf8_lossy(value.as_bytes());
                    signatures
                        .canonical_trailers
                        .push(format!("{}:{value_text}\n", name.as_str()));
                }
                self.trailers.append(name, value);
            }
            State::Data(_) | State::Done => unreachable!("no lines are read in this state"),
        }
        Ok(())
    }
}

impl Decoder {
    /// Checks the signature of the chunk whose data just ended, or of the final empty one.
    fn verify_chunk(&mut self, final_chunk: bool) -> Result<(), ChunkedError> {
        let Some(signatures) = self.signatures.as_mut() else {
            return Ok(());
        };
        let hash = if final_chunk {
            EMPTY_SHA256.to_owned()
        } else {
            signatures.data.finish()
        };
        if signatures.signer.verify_chunk(&hash, &signatures.announced) {
            Ok(())
        } else {
            Err(ChunkedError::SignatureMismatch)
        }
    }

    /// Checks the trailer signature; trailers of a signed payload must be signed.
    fn verify_trailer(&mut self) -> Result<(), ChunkedError> {
        let Some(signatures) = self.signatures.as_mut() else {
            return Ok(());
        };
        match &signatures.trailer_signature {
            None if signatures.canonical_trailers.is_empty() => Ok(()),
            None => Err(ChunkedError::SignatureMismatch),
            Some(given) => {
                let given = given.clone();
                signatures.canonical_trailers.sort();
                let canonical = signatures.canonical_trailers.concat();
                if signatures.signer.verify_trailer(&canonical, &given) {
                    Ok(())
                } else {
                    Err(ChunkedError::SignatureMismatch)
                }
            }
        }
    }
}

/// The `chunk-signature` extension of a signed chunk's header line.
fn chunk_signature(line: &[u8]) -> Result<&str, ChunkedError> {
    let text = std::str::from_utf8(line)
        .map_err(|_| ChunkedError::Malformed("chunk header is not text"))?;
    text.split(';')
        .skip(1)
        .find_map(|extension| extension.trim().strip_prefix("chunk-signature="))
        .ok_or(ChunkedError::SignatureMismatch)
}

fn parse_chunk_size(line: &[u8]) -> Result<u64, ChunkedError> {
    let size_part = line.split(|&byte| byte == b';').next().unwrap_or_default();
    let size_text = std::str::from_utf8(size_part)
        .map_err(|_| ChunkedError::Malformed("chunk size is not text"))?
        .trim();
    if size_text.is_empty() || size_text.len() > 16 {
        return Err(ChunkedError::Malformed("invalid chunk size"));
    }
    u64::from_str_radix(size_text, 16).map_err(|_| ChunkedError::Malformed("invalid chunk size"))
}

fn parse_trailer(line: &[u8]) -> Result<(HeaderName, HeaderValue), ChunkedError> {
    let colon = line
        .iter()
        .position(|&byte| byte == b':')
        .ok_or(ChunkedError::Malformed("trailer line without a colon"))?;
    let name = HeaderName::from_bytes(line[..colon].trim_ascii())
        .map_err(|_| ChunkedError::Malformed("invalid trailer name"))?;
    let value = HeaderValue::from_bytes(line[colon + 1..].trim_ascii())
        .map_err(|_| ChunkedError::Malformed("invalid trailer value"))?;
    Ok((name, value))
}

/// Why a request body stopped early: the first error wins and is kept for the response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    #[error(transparent)]
    Chunked(#[from] ChunkedError),
    #[error("the client stopped sending the request body: {0}")]
    Client(String),
    #[error("the body does not match its signed x-amz-content-sha256")]
    Sha256Mismatch,
    #[error("Your proposed upload exceeds the maximum allowed size")]
    EntityTooLarge,
    #[error("Your proposed upload is smaller than the minimum allowed size")]
    EntityTooSmall,
    #[error("The body of your POST request is not well-formed multipart/form-data.")]
    MalformedForm,
}

/// Where a body adapter records the error it ended with, for the handler to report.
#[derive(Debug, Clone, Default)]
pub struct ErrorSlot(Arc<Mutex<Option<BodyError>>>);

impl ErrorSlot {
    pub fn set(&self, error: BodyError) {
        self.0.lock().get_or_insert(error);
    }

    pub fn get(&self) -> Option<BodyError> {
        self.0.lock().clone()
    }
}

/// A client's `aws-chunked` body, decoded: data frames, then one trailers frame if the
/// client sent trailers.
pub struct DecodedBody<B> {
    inner: B,
    decoder: Option<Decoder>,
    ready: VecDeque<Bytes>,
    announced_bytes: u64,
    errors: ErrorSlot,
}

impl<B> DecodedBody<B> {
    /// Decodes `inner`; with `signer`, also verifies every chunk and trailer signature.
    pub fn new(
        inner: B,
        announced_bytes: u64,
        signer: Option<ChunkSigner>,
        errors: ErrorSlot,
    ) -> Self {
        Self {
            inner,
            decoder: Some(signer.map_or_else(Decoder::default, Decoder::signed)),
            ready: VecDeque::new(),
            announced_bytes,
            errors,
        }
    }

    fn fail(&mut self, error: BodyError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.decoder = None;
        self.ready.clear();
        self.errors.set(error.clone());
        Poll::Ready(Some(Err(error.into())))
    }
}

impl<B> Body for DecodedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            if let Some(data) = self.ready.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            if self.decoder.is_none() {
                return Poll::Ready(None);
            }
            match std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue; // HTTP trailers of the outer encoding carry nothing we use
                    };
                    let mut out = Vec::new();
                    let decoder = self.decoder.as_mut().expect("checked above");
                    if let Err(error) = decoder.feed(data, &mut out) {
                        return self.fail(error.into());
                    }
                    self.ready.extend(out);
                }
                Some(Err(error)) => return self.fail(BodyError::Client(error.to_string())),
                None => {
                    let decoder = self.decoder.take().expect("checked above");
                    let (actual, trailers) = match decoder.finish() {
                        Ok(finished) => finished,
                        Err(error) => return self.fail(error.into()),
                    };
                    if actual != self.announced_bytes {
                        let announced = self.announced_bytes;
                        return self
                            .fail(ChunkedError::LengthMismatch { announced, actual }.into());
                    }
                    if trailers.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                }
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.announced_bytes)
    }
}

#[cfg(test)]
mod tests;
