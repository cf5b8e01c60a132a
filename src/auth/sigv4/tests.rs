use super::*;

/// The GetObject example of the AWS SigV4 documentation ("Examples of how to derive a
/// signing key and signature", Amazon S3 API reference).
fn aws_example() -> (SignatureParts, HeaderMap) {
    let mut headers = HeaderMap::new();
    headers.insert("range", "bytes=0-9".parse().unwrap());
    headers.insert("x-amz-content-sha256", EMPTY_SHA256.parse().unwrap());
    headers.insert("x-amz-date", "20130524T000000Z".parse().unwrap());
    let authorization = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
    let parts = SignatureParts::from_header(authorization, Some("20130524T000000Z")).unwrap();
    (parts, headers)
}

const EXAMPLE_SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

#[test]
fn the_documented_example_verifies() {
    let (parts, headers) = aws_example();
    assert_eq!(parts.access_key_id, "AKIAIOSFODNN7EXAMPLE");
    let input = CanonicalInput {
        method: "GET",
        raw_path: "/test.txt",
        raw_query: "",
        headers: &headers,
        host: "examplebucket.s3.amazonaws.com",
        payload_hash: EMPTY_SHA256,
    };
    let canonical = canonical_request(&input, &parts, &canonical_uri(input.raw_path));
    let key = signing_key(EXAMPLE_SECRET, &parts);
    let signature = sign(&key, &request_string_to_sign(&parts, &canonical));
    assert_eq!(signature, parts.signature);
}

/// The signed-chunk example of the AWS documentation ("Signature calculations for the
/// Authorization header: transferring payload in multiple chunks").
#[test]
fn the_documented_chunk_signatures_chain() {
    let parts = SignatureParts {
        access_key_id: "AKIAIOSFODNN7EXAMPLE".to_owned(),
        date: "20130524".to_owned(),
        region: "us-east-1".to_owned(),
        service: "s3".to_owned(),
        amz_date: "20130524T000000Z".to_owned(),
        signed_headers: vec!["host".to_owned()],
        signature: "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9".to_owned(),
        expires: None,
    };
    let mut signer = ChunkSigner::new(signing_key(EXAMPLE_SECRET, &parts), &parts);
    let first = vec![b'a'; 65536];
    assert!(signer.verify_chunk(
        &sha256_hex(&first),
        "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"
    ));
    let second = vec![b'a'; 1024];
    assert!(signer.verify_chunk(
        &sha256_hex(&second),
        "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497"
    ));
    assert!(signer.verify_chunk(
        EMPTY_SHA256,
        "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"
    ));
}

#[test]
fn a_chunk_with_a_wrong_signature_fails() {
    let (parts, _) = aws_example();
    let mut signer = ChunkSigner::new(signing_key(EXAMPLE_SECRET, &parts), &parts);
    assert!(!signer.verify_chunk(EMPTY_SHA256, &"0".repeat(64)));
}

#[test]
fn presigned_parameters_are_parsed_and_bounded() {
    let query = |expires: &str| {
        vec![
            ("X-Amz-Algorithm".to_owned(), ALGORITHM.to_owned()),
            (
                "X-Amz-Credential".to_owned(),
                "AKID/20260101/eu-west-1/s3/aws4_request".to_owned(),
            ),
            ("X-Amz-Date".to_owned(), "20260101T120000Z".to_owned()),
            ("X-Amz-Expires".to_owned(), expires.to_owned()),
            ("X-Amz-SignedHeaders".to_owned(), "host".to_owned()),
            ("X-Amz-Signature".to_owned(), "a".repeat(64)),
        ]
    };
    let parts = SignatureParts::from_query(&query("3600")).unwrap();
    assert_eq!(parts.expires, Some(3600));
    assert_eq!(parts.region, "eu-west-1");
    assert_eq!(parts.scope(), "20260101/eu-west-1/s3/aws4_request");
    assert!(SignatureParts::from_query(&query("604801")).is_err());
    assert!(SignatureParts::from_query(&query("soon")).is_err());
}

#[test]
fn malformed_authorization_headers_are_rejected() {
    for header in [
        "AWS AKID:signature",
        "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3/aws4_request",
        "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/ec2/aws4_request,SignedHeaders=host,Signature=00",
        "AWS4-HMAC-SHA256 Credential=AKID/20260102/us-east-1/s3/aws4_request,SignedHeaders=host,Signature=00",
        "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3/aws4_request,SignedHeaders=x-amz-date,Signature=00",
    ] {
        assert!(
            SignatureParts::from_header(header, Some("20260101T000000Z")).is_err(),
            "{header}"
        );
    }
}

#[test]
fn header_values_are_signed_byte_for_byte() {
    let canonical = |value: &[u8]| {
        let mut out = Vec::new();
        push_canonical_value(&mut out, value);
        out
    };
    // Two values that differ only in bytes that are not UTF-8 must not sign alike, as
    // they would if both became U+FFFD; whitespace is still folded as S3 folds it.
    assert_ne!(canonical(b"caf\xe9"), canonical(b"caf\xe8"));
    assert_eq!(canonical(b"caf\xe9"), b"caf\xe9");
    assert_eq!(canonical(b"  a \t b  \xff "), b"a b \xff");
}

#[test]
fn uris_and_queries_are_canonicalised_as_s3_signs_them() {
    assert_eq!(canonical_uri("/b/a%20b+c~d"), "/b/a%20b%2Bc~d");
    assert_eq!(canonical_uri("/b/%E2%82%AC/x"), "/b/%E2%82%AC/x");
    assert_eq!(canonical_uri("/b/dir//k"), "/b/dir//k");
    assert_eq!(canonical_uri(""), "/");
    assert_eq!(
        canonical_query("uploads&prefix=a%2Fb&X-Amz-Signature=zz&max-keys=2"),
        "max-keys=2&prefix=a%2Fb&uploads="
    );
}
