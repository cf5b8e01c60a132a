//! Entry points for the fuzz targets in `fuzz/`: each takes arbitrary bytes, runs one of
//! the parsers Portico applies to client input, and checks what must hold whatever the
//! input — panicking (so the fuzzer reports it) when it does not. Client input reaches
//! exactly these parsers before any handler sees a request.

use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};

use crate::api::chunked::Decoder;
use crate::api::route::{Address, parse_query};
use crate::auth::sigv4::SignatureParts;
use crate::auth::{Authenticator, Credential, CredentialStore, RequestHead};
use crate::types::{BlockLayout, Selection};

/// A `Range` header against an object size and block size taken from the input: parsing
/// never panics, and whatever is selected lies inside the object and is covered exactly
/// by the blocks the read path would fetch.
pub fn range(data: &[u8]) {
    if data.len() < 12 {
        return;
    }
    let size = u64::from_le_bytes(data[..8].try_into().unwrap_or_default()) % (1 << 50);
    let block_size = 64
        * 1024
        * (1 + u64::from(u32::from_le_bytes(data[8..12].try_into().unwrap_or_default()) % 256));
    let Ok(header) = std::str::from_utf8(&data[12..]) else {
        return;
    };
    let Ok(parsed) = s3s::dto::Range::parse(header) else {
        return;
    };
    let Ok(selection) = Selection::resolve(Some(crate::types::RangeRequest::from(parsed)), size)
    else {
        return;
    };
    let Some(bytes) = selection.bytes(size) else {
        assert_eq!(size, 0, "only an empty object selects nothing");
        return;
    };
    assert!(bytes.first() <= bytes.last() && bytes.last() < size);
    let layout = BlockLayout::new(block_size, size);
    let blocks = layout.blocks_for(bytes);
    let mut covered = 0u64;
    for index in blocks.clone() {
        let block = layout
            .block_range(index)
            .expect("a block inside the object");
        let slice = layout.slice_within(index, bytes);
        assert!(slice.start < slice.end && slice.end as u64 <= block.len_bytes());
        covered += (slice.end - slice.start) as u64;
        // Bounded work per input: ranges over thousands of blocks are checked by ends only.
        if index - blocks.start() > 64 {
            covered = bytes.len_bytes();
            break;
        }
    }
    assert_eq!(covered, bytes.len_bytes());
}

/// An aws-chunked body fed in pieces whose sizes come from the input: decoding never
/// panics, and the outcome does not depend on how the body was split.
pub fn aws_chunked(data: &[u8]) {
    let Some((&split_seed, body)) = data.split_first() else {
        return;
    };
    let whole = decode(body, &[body.len().max(1)]);
    let sizes: Vec<usize> = (0..8)
        .map(|i| 1 + ((split_seed as usize) >> i & 7))
        .collect();
    let pieces = decode(body, &sizes);
    assert_eq!(
        whole, pieces,
        "the same body split differently decoded differently"
    );
}

type Decoded = Result<(Vec<u8>, u64, Vec<(String, Vec<u8>)>), String>;

fn decode(body: &[u8], sizes: &[usize]) -> Decoded {
    let mut decoder = Decoder::default();
    let mut out = Vec::new();
    let mut rest = Bytes::copy_from_slice(body);
    let mut turn = 0;
    while !rest.is_empty() {
        let size = sizes[turn % sizes.len()].min(rest.len());
        turn += 1;
        decoder
            .feed(rest.split_to(size), &mut out)
            .map_err(|error| error.to_string())?;
    }
    let (length, trailers) = decoder.finish().map_err(|error| error.to_string())?;
    let data: Vec<u8> = out.iter().flat_map(|piece| piece.iter().copied()).collect();
    assert_eq!(
        data.len() as u64,
        length,
        "the decoded length matches the data"
    );
    let trailers = trailers
        .iter()
        .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
        .collect();
    Ok((data, length, trailers))
}

/// A request line and headers built from the input, through address parsing and SigV4
/// verification against a known credential: parsing never panics, and garbage never
/// authenticates.
pub fn request(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let target = lines.next().unwrap_or_default();
    let Ok(uri) = target.parse::<Uri>() else {
        return;
    };
    let _ = Address::parse(&uri, Some("bucket.s3.local"), None);
    let raw_query = uri.query().unwrap_or_default();
    let query = parse_query(raw_query).unwrap_or_default();
    let _ = SignatureParts::from_query(&query);
    let mut headers = HeaderMap::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.trim().as_bytes()),
            HeaderValue::from_str(value.trim()),
        ) {
            headers.append(name, value);
        }
    }
    if let Some(authorization) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        let date = headers.get("x-amz-date").and_then(|v| v.to_str().ok());
        let _ = SignatureParts::from_header(authorization, date);
    }
    let store = CredentialStore::open(Some(Credential::new("fuzz-key", "fuzz-secret")), None)
        .expect("no credentials file to read");
    let head = RequestHead {
        method: &Method::GET,
        raw_path: uri.path(),
        raw_query,
        query: &query,
        headers: &headers,
        host: "bucket.s3.local",
    };
    // A date inside any x-amz-date the input may carry, so verification runs to the end.
    let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let verified = Authenticator::new(store, "us-east-1").verify(&head, now);
    assert!(
        verified.is_err() || signed_for_fuzzing(&headers, &query),
        "arbitrary input authenticated"
    );
}

/// Whether the input carries a signature at all (the only way verification may pass).
fn signed_for_fuzzing(headers: &HeaderMap, query: &[(String, String)]) -> bool {
    headers.contains_key("authorization") || query.iter().any(|(name, _)| name == "X-Amz-Signature")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fuzz targets' seed inputs pass their own checks.
    #[test]
    fn the_entry_points_accept_their_seed_inputs() {
        let mut range_input = 10_000_000u64.to_le_bytes().to_vec();
        range_input.extend_from_slice(&3u32.to_le_bytes());
        for header in ["bytes=0-99", "bytes=-500", "bytes=9999990-", "bytes=abc"] {
            let mut input = range_input.clone();
            input.extend_from_slice(header.as_bytes());
            range(&input);
        }
        let body = b"\x03a;chunk-signature=00\r\nabc\r\n0;chunk-signature=00\r\n\r\n";
        let mut input = vec![0x5a];
        input.extend_from_slice(body);
        aws_chunked(&input);
        request(b"/bucket/key?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=00\nx-amz-date: 20231114T221320Z\nauthorization: AWS4-HMAC-SHA256 Credential=fuzz-key/20231114/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00");
    }
}
