use super::*;

fn address(uri: &str) -> Address {
    Address::parse(&uri.parse().unwrap(), None, None).unwrap()
}

fn route(method: Method, uri: &str) -> Route {
    Route::of(&method, &address(uri), &HeaderMap::new())
}

fn operation(method: Method, uri: &str) -> &'static str {
    match route(method, uri) {
        Route::Cached => "cache",
        Route::Forward { operation, .. } => operation,
    }
}

#[test]
fn addresses_are_decoded() {
    let parsed = address("/bucket/dir/a%20b+c?prefix=x+y%2Fz&uploads");
    assert_eq!(parsed.bucket.as_deref(), Some("bucket"));
    assert_eq!(parsed.key.as_deref(), Some("dir/a b+c"));
    assert_eq!(
        parsed.query,
        vec![
            ("prefix".to_owned(), "x y/z".to_owned()),
            ("uploads".to_owned(), String::new())
        ]
    );
    assert_eq!(address("/bucket/").key, None);
    assert_eq!(address("/bucket").key, None);
    assert_eq!(address("/").bucket, None);
    assert_eq!(
        Address::parse(&"/a%FF".parse().unwrap(), None, None),
        Err(AddressError::Path)
    );
    let hosts = VirtualHosts::new(&["s3.local".to_owned()]);
    let virtual_host = Address::parse(
        &"/k/x".parse().unwrap(),
        Some("b.s3.local:8080"),
        Some(&hosts),
    )
    .unwrap();
    assert_eq!(virtual_host.bucket.as_deref(), Some("b"));
    assert_eq!(virtual_host.key.as_deref(), Some("k/x"));
}

#[test]
fn only_plain_object_reads_are_cached() {
    assert_eq!(operation(Method::GET, "/b/k"), "cache");
    assert_eq!(operation(Method::HEAD, "/b/k?versionId=3"), "cache");
    assert_eq!(
        operation(Method::GET, "/b/k?versionId=3&x-id=GetObject"),
        "cache"
    );
    assert_eq!(
        operation(
            Method::GET,
            "/b/k?response-content-type=text%2Fplain&x-id=GetObject"
        ),
        "cache"
    );
    assert_eq!(operation(Method::GET, "/b/k?partNumber=1"), "GetObject");
    assert_eq!(operation(Method::HEAD, "/b/k?partNumber=1"), "HeadObject");
    assert_eq!(
        operation(Method::GET, "/b/k?attributes"),
        "GetObjectAttributes"
    );
    assert_eq!(operation(Method::GET, "/b/k?acl"), "GetObjectAcl");
    assert_eq!(operation(Method::GET, "/b/k?tagging"), "GetObjectTagging");
    assert_eq!(operation(Method::GET, "/b/k?torrent"), "GetObject");
    let mut sse_c = HeaderMap::new();
    sse_c.insert(
        "x-amz-server-side-encryption-customer-algorithm",
        "AES256".parse().unwrap(),
    );
    assert!(matches!(
        Route::of(&Method::GET, &address("/b/k"), &sse_c),
        Route::Forward { .. }
    ));
    // S3 refuses the other encryption headers on reads; the origin says so itself.
    for name in [
        "x-amz-server-side-encryption",
        "x-amz-server-side-encryption-aws-kms-key-id",
        "x-amz-server-side-encryption-bucket-key-enabled",
    ] {
        let mut sse = HeaderMap::new();
        sse.insert(name, "AES256".parse().unwrap());
        for method in [Method::GET, Method::HEAD] {
            assert!(
                matches!(
                    Route::of(&method, &address("/b/k"), &sse),
                    Route::Forward { .. }
                ),
                "{method} with {name}"
            );
        }
    }
}

#[test]
fn bucket_requests_are_forwarded_with_or_without_trailing_slash() {
    assert_eq!(operation(Method::GET, "/b/"), "ListObjects");
    assert_eq!(
        operation(Method::GET, "/b?delimiter=%2F&encoding-type=url"),
        "ListObjects"
    );
    assert_eq!(
        operation(Method::GET, "/b?versioning"),
        "GetBucketConfiguration"
    );
    assert_eq!(
        operation(Method::GET, "/b?prefix=&delimiter=%2F"),
        "ListObjects"
    );
    assert_eq!(
        operation(Method::GET, "/b/?list-type=2&delimiter=%2F"),
        "ListObjectsV2"
    );
    assert_eq!(operation(Method::GET, "/"), "ListBuckets");
    assert_eq!(operation(Method::HEAD, "/b"), "HeadBucket");
    assert_eq!(operation(Method::PUT, "/b"), "CreateBucket");
}

#[test]
fn writes_carry_their_cache_effect() {
    let effect = |method, uri| match route(method, uri) {
        Route::Forward { effect, .. } => effect,
        Route::Cached => panic!("{uri} must be forwarded"),
    };
    assert_eq!(effect(Method::PUT, "/b/k"), Effect::WriteObject);
    // The steps of a multipart upload change no object until it completes.
    assert_eq!(
        effect(Method::PUT, "/b/k?partNumber=1&uploadId=u"),
        Effect::None
    );
    assert_eq!(effect(Method::POST, "/b/k?uploads"), Effect::None);
    assert_eq!(effect(Method::PUT, "/b/k?tagging"), Effect::ChangeKey);
    assert_eq!(effect(Method::POST, "/b/k?uploadId=u"), Effect::ChangeKey);
    assert_eq!(effect(Method::DELETE, "/b/k"), Effect::ChangeKey);
    assert_eq!(effect(Method::DELETE, "/b/k?uploadId=u"), Effect::None);
    assert_eq!(effect(Method::POST, "/b?delete"), Effect::DeleteListed);
    assert_eq!(effect(Method::GET, "/b?list-type=2"), Effect::None);
    assert_eq!(effect(Method::GET, "/b/k?acl"), Effect::None);
    let mut copy = HeaderMap::new();
    copy.insert("x-amz-copy-source", "src/k".parse().unwrap());
    assert_eq!(
        Route::of(&Method::PUT, &address("/b/k"), &copy),
        Route::Forward {
            operation: "CopyObject",
            effect: Effect::ChangeKey
        }
    );
}

#[test]
fn a_presigned_put_with_checksum_parameters_is_a_put_object() {
    // What aws-sdk-s3 presigns for a PUT with a checksum: the parameters stay in the URL.
    let uri =
        "/b/k?x-id=PutObject&x-amz-checksum-crc32=AAAAAA%3D%3D&x-amz-sdk-checksum-algorithm=CRC32";
    assert_eq!(
        route(Method::PUT, uri),
        Route::Forward {
            operation: "PutObject",
            effect: Effect::WriteObject
        }
    );
    // Whatever a write on a key is called, it invalidates the key.
    for (method, uri) in [
        (Method::PUT, "/b/k?unknown-parameter"),
        (Method::PUT, "/b/k?retention"),
        (Method::PUT, "/b/k?acl"),
        (Method::POST, "/b/k?restore"),
        (Method::PATCH, "/b/k"),
    ] {
        assert!(
            matches!(
                route(method.clone(), uri),
                Route::Forward {
                    effect: Effect::ChangeKey | Effect::WriteObject,
                    ..
                }
            ),
            "{method} {uri}"
        );
    }
}

#[test]
fn each_operation_needs_its_scope() {
    let scope = |method, uri, headers: &[(&str, &str)]| {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        Route::of(&method, &address(uri), &map).scope(&map)
    };
    for (method, uri) in [
        (Method::GET, "/b/k"),
        (Method::HEAD, "/b/k"),
        (Method::GET, "/b/k?tagging"),
        (Method::GET, "/b?list-type=2"),
        (Method::GET, "/b?uploads"),
        (Method::HEAD, "/b"),
        (Method::GET, "/"),
    ] {
        assert_eq!(
            scope(method.clone(), uri, &[]),
            Scope::Read,
            "{method} {uri}"
        );
    }
    for (method, uri) in [
        (Method::PUT, "/b/k"),
        (Method::PUT, "/b/k?partNumber=1&uploadId=u"),
        (Method::POST, "/b/k?uploads"),
        (Method::DELETE, "/b/k"),
        (Method::POST, "/b?delete"),
        (Method::PUT, "/b/k?tagging"),
    ] {
        assert_eq!(
            scope(method.clone(), uri, &[]),
            Scope::Write,
            "{method} {uri}"
        );
    }
    for (method, uri) in [
        (Method::PUT, "/b"),
        (Method::DELETE, "/b"),
        (Method::PUT, "/b?policy"),
        (Method::GET, "/b?policy"),
        (Method::PUT, "/b?acl"),
        (Method::DELETE, "/b?lifecycle"),
        (Method::PUT, "/b/k?acl"),
        (Method::GET, "/b/k?acl"),
        (Method::PUT, "/b/k?retention"),
        (Method::PUT, "/b/k?legal-hold"),
        (Method::POST, "/b/k"),
        (Method::PATCH, "/b/k"),
    ] {
        assert_eq!(
            scope(method.clone(), uri, &[]),
            Scope::Admin,
            "{method} {uri}"
        );
    }
    // A form upload writes; an ACL, grant or lock field makes it an admin's.
    let mut fields = HeaderMap::new();
    fields.insert("x-amz-meta-owner", "web".parse().unwrap());
    assert_eq!(form_upload_scope(&fields), Scope::Write);
    fields.insert("x-amz-acl", "public-read".parse().unwrap());
    assert_eq!(form_upload_scope(&fields), Scope::Admin);
    assert_eq!(
        scope(Method::PUT, "/b/k", &[("x-amz-acl", "public-read")]),
        Scope::Admin
    );
    assert_eq!(
        scope(Method::PUT, "/b/k", &[("x-amz-grant-read", "uri=x")]),
        Scope::Admin
    );
    assert_eq!(
        scope(
            Method::PUT,
            "/b/k",
            &[("x-amz-object-lock-mode", "COMPLIANCE")]
        ),
        Scope::Admin
    );
}
