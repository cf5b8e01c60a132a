use super::*;

fn at(amz_date: &str) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(parse_amz_date(amz_date).unwrap() as u64)
}

fn parts(amz_date: &str, expires: Option<u64>) -> SignatureParts {
    SignatureParts {
        access_key_id: "AKID".to_owned(),
        date: amz_date[..8].to_owned(),
        region: "us-east-1".to_owned(),
        service: "s3".to_owned(),
        amz_date: amz_date.to_owned(),
        signed_headers: vec!["host".to_owned()],
        signature: "0".repeat(64),
        expires,
    }
}

#[test]
fn only_requests_without_a_body_may_leave_out_the_payload_hash() {
    let mut headers = HeaderMap::new();
    assert!(has_no_body(&headers));
    headers.insert(http::header::CONTENT_LENGTH, "0".parse().unwrap());
    assert!(has_no_body(&headers));
    headers.insert(http::header::CONTENT_LENGTH, "5".parse().unwrap());
    assert!(!has_no_body(&headers));
    headers.remove(http::header::CONTENT_LENGTH);
    headers.insert(http::header::TRANSFER_ENCODING, "chunked".parse().unwrap());
    assert!(!has_no_body(&headers));
}

#[test]
fn amz_dates_are_parsed_strictly() {
    assert_eq!(parse_amz_date("19700101T000100Z"), Some(60));
    assert_eq!(parse_amz_date("20260230T000000Z"), None);
    assert_eq!(parse_amz_date("20260101T246000Z"), None);
    assert_eq!(parse_amz_date("20260101 000000Z"), None);
    assert_eq!(parse_amz_date("2026-01-01T00:00:00Z"), None);
}

#[test]
fn request_times_allow_fifteen_minutes_of_skew() {
    let signed = parts("20260101T120000Z", None);
    assert_eq!(check_time(&signed, at("20260101T121400Z")), Ok(()));
    assert_eq!(check_time(&signed, at("20260101T114600Z")), Ok(()));
    assert_eq!(
        check_time(&signed, at("20260101T121600Z")),
        Err(AuthError::Skewed)
    );
    assert_eq!(
        check_time(&signed, at("20260101T114400Z")),
        Err(AuthError::Skewed)
    );
}

#[test]
fn presigned_urls_expire() {
    let presigned = parts("20260101T120000Z", Some(3600));
    assert_eq!(check_time(&presigned, at("20260101T125959Z")), Ok(()));
    assert_eq!(
        check_time(&presigned, at("20260101T130001Z")),
        Err(AuthError::Expired)
    );
    assert_eq!(
        check_time(&presigned, at("20260101T113000Z")),
        Err(AuthError::Skewed)
    );
    // A URL valid for no time at all has expired when it is signed, as S3 says.
    let instant = parts("20260101T120000Z", Some(0));
    assert_eq!(
        check_time(&instant, at("20260101T120000Z")),
        Err(AuthError::Expired)
    );
}

#[test]
fn credentials_are_limited_to_their_buckets_and_access() {
    let text = r#"
[[credentials]]
access_key_id = "reader"
secret_access_key = "s"
access = "read-only"
buckets = ["data"]
"#;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, text).unwrap();
    let store = CredentialStore::open(None, Some(path)).unwrap();
    let reader = store.get("reader").unwrap();
    let none = HeaderMap::new();
    assert_eq!(authorize(&reader, Scope::Read, Some("data"), &none), Ok(()));
    assert!(authorize(&reader, Scope::Read, Some("other"), &none).is_err());
    assert!(authorize(&reader, Scope::Read, None, &none).is_err());
    assert!(authorize(&reader, Scope::Write, Some("data"), &none).is_err());
    assert!(authorize(&reader, Scope::Admin, Some("data"), &none).is_err());
    let mut writer = (*reader).clone();
    writer.access = Access::ReadWrite;
    let mut copy = HeaderMap::new();
    copy.insert("x-amz-copy-source", "/other/key".parse().unwrap());
    assert_eq!(
        authorize(&writer, Scope::Write, Some("data"), &none),
        Ok(())
    );
    assert!(
        authorize(&writer, Scope::Admin, Some("data"), &none).is_err(),
        "a credential limited to buckets does not administer them by default"
    );
    assert!(authorize(&writer, Scope::Write, Some("data"), &copy).is_err());
    copy.insert("x-amz-copy-source", "data/key%20x".parse().unwrap());
    assert_eq!(
        authorize(&writer, Scope::Write, Some("data"), &copy),
        Ok(())
    );
}
