//! Re-encoding for the upstream: the decoded bytes in `aws-chunked` chunks of
//! `UPSTREAM_CHUNK_BYTES`, then the trailing checksums, signed with Portico's own
//! credential (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame};

use super::UPSTREAM_CHUNK_BYTES;
use crate::BoxError;

/// Re-encodes a body of data frames and a final trailers frame as unsigned `aws-chunked`.
pub struct EncodedBody<B> {
    inner: B,
    pending: BytesMut,
    finished: bool,
}

impl<B> EncodedBody<B> {
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            pending: BytesMut::new(),
            finished: false,
        }
    }
}

fn put_chunk(out: &mut BytesMut, data: &[u8]) {
    out.put_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

fn final_chunk(trailers: Option<&HeaderMap>) -> Bytes {
    let mut out = BytesMut::from(&b"0\r\n"[..]);
    for (name, value) in trailers.into_iter().flatten() {
        out.put_slice(name.as_str().as_bytes());
        out.put_u8(b':');
        out.put_slice(value.as_bytes());
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"\r\n");
    out.freeze()
}

impl<B> Body for EncodedBody<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.finished {
            return Poll::Ready(None);
        }
        loop {
            match std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(mut data) => {
                        self.pending.reserve(data.len());
                        while data.has_remaining() {
                            let chunk = data.chunk();
                            let length = chunk.len();
                            self.pending.put_slice(chunk);
                            data.advance(length);
                        }
                        if self.pending.len() >= UPSTREAM_CHUNK_BYTES {
                            let data = self.pending.split();
                            let mut out = BytesMut::with_capacity(data.len() + 32);
                            put_chunk(&mut out, &data);
                            return Poll::Ready(Some(Ok(Frame::data(out.freeze()))));
                        }
                    }
                    Err(frame) => {
                        self.finished = true;
                        return Poll::Ready(Some(Ok(Frame::data(
                            self.finish(frame.trailers_ref()),
                        ))));
                    }
                },
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None => {
                    self.finished = true;
                    return Poll::Ready(Some(Ok(Frame::data(self.finish(None)))));
                }
            }
        }
    }
}

impl<B> EncodedBody<B> {
    /// The last data chunk (if any bytes are pending), the zero chunk and the trailers.
    fn finish(&mut self, trailers: Option<&HeaderMap>) -> Bytes {
        let mut out = BytesMut::new();
        if !self.pending.is_empty() {
            let data = self.pending.split();
            put_chunk(&mut out, &data);
        }
        out.put_slice(&final_chunk(trailers));
        out.freeze()
    }
}
