use super::*;
use http_body_util::{BodyExt, StreamBody};
use proptest::prelude::*;

fn decode_all(pieces: &[&[u8]]) -> Result<(Vec<u8>, HeaderMap), ChunkedError> {
    let mut decoder = Decoder::default();
    let mut out = Vec::new();
    for piece in pieces {
        decoder.feed(Bytes::copy_from_slice(piece), &mut out)?;
    }
    let (length, trailers) = decoder.finish()?;
    let data: Vec<u8> = out.concat();
    assert_eq!(length, data.len() as u64);
    Ok((data, trailers))
}

const SIGNED: &[u8] = b"5;chunk-signature=aaaa\r\nhello\r\n6;chunk-signature=bbbb\r\n world\r\n0;chunk-signature=cccc\r\n\r\n";
const TRAILER: &[u8] = b"b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n";

#[test]
fn signed_chunks_decode_to_their_data() {
    let (data, trailers) = decode_all(&[SIGNED]).unwrap();
    assert_eq!(data, b"hello world");
    assert!(trailers.is_empty());
}

#[test]
fn trailers_are_returned() {
    let (data, trailers) = decode_all(&[TRAILER]).unwrap();
    assert_eq!(data, b"hello world");
    assert_eq!(trailers["x-amz-checksum-crc32"], "DUoRhQ==");
}

#[test]
fn without_a_signer_a_signed_payload_loses_its_signatures_and_keeps_its_checksums() {
    // A SigV4 chunk signature is 64 hex digits, a SigV4a one a DER ECDSA signature.
    let sigv4a = "3045022100".to_owned() + &"ab".repeat(64);
    let body = format!(
        "5;chunk-signature={sigv4a}\r\nhello\r\n6;chunk-signature=bbbb\r\n world\r\n\
         0;chunk-signature=cccc\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\
         x-amz-trailer-signature:dddd\r\n\r\n"
    );
    let (data, trailers) = decode_all(&[body.as_bytes()]).unwrap();
    assert_eq!(data, b"hello world");
    assert_eq!(trailers.len(), 1, "{trailers:?}");
    assert_eq!(trailers["x-amz-checksum-crc32"], "DUoRhQ==");
}

#[test]
fn framing_errors_are_rejected() {
    let cases: [(&[u8], ChunkedError); 6] = [
        (
            b"5\r\nhello world\r\n",
            ChunkedError::Malformed("chunk data longer than its size"),
        ),
        (b"zz\r\n", ChunkedError::Malformed("invalid chunk size")),
        (
            b"5\nhello\r\n",
            ChunkedError::Malformed("line not ended by CRLF"),
        ),
        (b"5\r\nhel", ChunkedError::Incomplete),
        (
            b"0\r\n\r\nextra",
            ChunkedError::Malformed("data after the final chunk"),
        ),
        (
            b"0\r\nno-colon\r\n\r\n",
            ChunkedError::Malformed("trailer line without a colon"),
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(decode_all(&[input]).unwrap_err(), expected, "{input:?}");
    }
    let long_line = [b'1'; MAX_LINE_BYTES + 1];
    assert_eq!(
        decode_all(&[&long_line]).unwrap_err(),
        ChunkedError::Malformed("line too long")
    );
}

proptest! {
    /// However the network splits the payload, the decoded bytes are the same.
    #[test]
    fn any_split_decodes_the_same(cuts in proptest::collection::vec(0..TRAILER.len(), 0..8)) {
        let mut cuts = cuts;
        cuts.sort_unstable();
        let mut pieces = Vec::new();
        let mut start = 0;
        for cut in cuts {
            pieces.push(&TRAILER[start..cut]);
            start = cut;
        }
        pieces.push(&TRAILER[start..]);
        let (data, trailers) = decode_all(&pieces).unwrap();
        prop_assert_eq!(data, b"hello world".to_vec());
        prop_assert_eq!(&trailers["x-amz-checksum-crc32"], "DUoRhQ==");
    }

    /// Encoding then decoding returns the data and trailers unchanged.
    #[test]
    fn encoding_round_trips(pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..100_000), 0..5)) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let expected: Vec<u8> = pieces.concat();
        let mut trailers = HeaderMap::new();
        trailers.insert("x-amz-checksum-crc32c", HeaderValue::from_static("abc="));
        let mut frames: Vec<Result<Frame<Bytes>, BoxError>> =
            pieces.into_iter().map(|piece| Ok(Frame::data(Bytes::from(piece)))).collect();
        frames.push(Ok(Frame::trailers(trailers)));
        let encoded = EncodedBody::new(StreamBody::new(futures::stream::iter(frames)));
        let bytes = runtime.block_on(encoded.collect()).unwrap().to_bytes();
        let (data, decoded_trailers) = decode_all(&[&bytes]).unwrap();
        prop_assert_eq!(data, expected);
        prop_assert_eq!(&decoded_trailers["x-amz-checksum-crc32c"], "abc=");
    }
}

#[tokio::test]
async fn a_short_body_fails_and_records_why() {
    let inner = http_body_util::Full::new(Bytes::from_static(TRAILER));
    let errors = ErrorSlot::default();
    let body = DecodedBody::new(inner, 12, None, errors.clone());
    assert!(body.collect().await.is_err());
    assert_eq!(
        errors.get(),
        Some(BodyError::Chunked(ChunkedError::LengthMismatch {
            announced: 12,
            actual: 11
        }))
    );
}
