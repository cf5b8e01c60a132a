use super::*;
use crate::types::Unsatisfiable;

#[test]
fn request_errors_answer_with_the_code_and_status_s3_uses() {
    let cases = [
        (RequestError::SlowDown, "SlowDown", 503),
        (
            RequestError::MissingDecodedLength,
            "MissingContentLength",
            411,
        ),
        (
            RequestError::KeyTooLong {
                bytes: 1025,
                limit: 1024,
            },
            "KeyTooLongError",
            400,
        ),
        (RequestError::MalformedXml, "MalformedXML", 400),
        (
            RequestError::BadHost("two Host headers"),
            "InvalidRequest",
            400,
        ),
        (RequestError::PreconditionFailed, "PreconditionFailed", 412),
        (RequestError::NotModified, "NotModified", 304),
        (RequestError::InvalidUri("no".to_owned()), "InvalidURI", 400),
    ];
    for (error, code, status) in cases {
        let s3 = S3Error::from(error.clone());
        assert_eq!(s3.code().as_str(), code, "{error:?}");
        let response = error_response(s3, "id");
        assert_eq!(response.status().as_u16(), status, "{error:?}");
    }
}

fn parts(error: ReadError) -> (String, u16, Option<String>, Option<String>) {
    let s3 = s3_error(&error, "REQ1");
    assert_eq!(s3.request_id(), Some("REQ1"));
    let header = |name: &str| {
        s3.headers()
            .and_then(|headers| headers.get(name))
            .map(|value| value.to_str().unwrap().to_owned())
    };
    (
        s3.code().as_str().to_owned(),
        s3.status_code().unwrap().as_u16(),
        header("content-range"),
        header(UPSTREAM_REQUEST_ID_HEADER),
    )
}

#[test]
fn every_read_error_maps_to_an_s3_code_and_status() {
    assert_eq!(
        parts(ReadError::NotFound(Missing::NoSuchKey, Some("UP1".into()))),
        ("NoSuchKey".into(), 404, None, Some("UP1".into()))
    );
    assert_eq!(
        parts(ReadError::NotFound(Missing::NoSuchBucket, None)).0,
        "NoSuchBucket"
    );
    assert_eq!(
        parts(ReadError::NotFound(Missing::NoSuchVersion, None)).1,
        404
    );
    assert_eq!(
        parts(ReadError::InvalidRange(Unsatisfiable { size: 11 })),
        ("InvalidRange".into(), 416, Some("bytes */11".into()), None)
    );
    assert_eq!(parts(ReadError::Changed).1, 503);
    let busy = parts(ReadError::Busy(crate::budget::Exhausted));
    assert_eq!((busy.0.as_str(), busy.1), ("SlowDown", 503));
    let internal = ReadError::Internal(crate::read::Internal::OutsideObject {
        index: 3,
        within: 0..1,
    });
    assert_eq!(parts(internal).1, 500);
    let unreachable = UpstreamError::unreachable("connection refused");
    assert_eq!(
        parts(ReadError::Upstream(unreachable)).0,
        "ServiceUnavailable"
    );
}

#[test]
fn portico_s_own_credential_failing_is_not_the_client_s_error() {
    let refused = UpstreamError::Rejected {
        status: 403,
        code: "SignatureDoesNotMatch".into(),
        message: "The request signature we calculated does not match".into(),
        request_id: Some("UP9".into()),
    };
    let (code, status, _, upstream_id) = parts(ReadError::Upstream(refused));
    assert_eq!(
        (code.as_str(), status, upstream_id.as_deref()),
        ("UpstreamCredentialRejected", 502, Some("UP9"))
    );
    let missing = UpstreamError::NoCredential {
        cause: crate::source::Cause::described("no credentials found in chain"),
    };
    let (code, status, ..) = parts(ReadError::Upstream(missing));
    assert_eq!((code.as_str(), status), ("UpstreamCredentialMissing", 502));
}

#[test]
fn upstream_rejections_pass_through() {
    let denied = UpstreamError::Rejected {
        status: 403,
        code: "AccessDenied".into(),
        message: "Access Denied.".into(),
        request_id: Some("UP2".into()),
    };
    let s3 = s3_error(&ReadError::Upstream(denied), "REQ2");
    assert_eq!(s3.code(), &S3ErrorCode::AccessDenied);
    assert_eq!(s3.status_code(), Some(StatusCode::FORBIDDEN));
    assert_eq!(s3.message(), Some("Access Denied."));
    // A HEAD's refusal has no body: the message says what happened instead.
    let bodiless = UpstreamError::Rejected {
        status: 403,
        code: "AccessDenied".into(),
        message: String::new(),
        request_id: None,
    };
    let s3 = s3_error(&ReadError::Upstream(bodiless), "REQ4");
    assert!(
        s3.message()
            .is_some_and(|message| message.contains("refused") && message.contains("403")),
        "{:?}",
        s3.message()
    );
    let custom = UpstreamError::Rejected {
        status: 400,
        code: "SomethingNew".into(),
        message: "new".into(),
        request_id: None,
    };
    assert_eq!(
        s3_error(&ReadError::Upstream(custom), "REQ3")
            .code()
            .as_str(),
        "SomethingNew"
    );
}
