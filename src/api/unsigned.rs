//! Client signatures are removed before a request goes on: Portico signs upstream
//! requests with its own credential, and a client's signature (header or presigned query)
//! must never reach the upstream.

use http::{Request, Uri};

/// Query parameters of presigned URLs (SigV4 and SigV2).
pub(super) const SIGNATURE_QUERY_PARAMS: [&str; 10] = [
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
    "X-Amz-Security-Token",
    "AWSAccessKeyId",
    "Signature",
    "Expires",
];

/// Removes the `Authorization` header and presigned-URL parameters.
pub(super) fn strip_signature<B>(request: &mut Request<B>) {
    request.headers_mut().remove(http::header::AUTHORIZATION);
    let Some(query) = request.uri().query() else {
        return;
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let name = pair.split_once('=').map_or(*pair, |(name, _)| name);
            !SIGNATURE_QUERY_PARAMS
                .iter()
                .any(|signature| signature.eq_ignore_ascii_case(name))
        })
        .collect();
    if kept.len() == query.split('&').count() {
        return;
    }
    let path = request.uri().path();
    let path_and_query = if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", kept.join("&"))
    };
    let mut parts = request.uri().clone().into_parts();
    match path_and_query.parse() {
        Ok(parsed) => parts.path_and_query = Some(parsed),
        Err(_) => return,
    }
    if let Ok(uri) = Uri::from_parts(parts) {
        *request.uri_mut() = uri;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stripped(uri: &str) -> Request<()> {
        let mut request = Request::builder()
            .uri(uri)
            .header("authorization", "AWS4-HMAC-SHA256 Credential=x")
            .header("x-amz-date", "20260101T000000Z")
            .body(())
            .unwrap();
        strip_signature(&mut request);
        request
    }

    #[test]
    fn signatures_are_removed_and_everything_else_kept() {
        let request = stripped(
            "/bucket/a%20b?X-Amz-Algorithm=AWS4-HMAC-SHA256&response-content-type=text%2Fplain&X-Amz-Signature=abc&x-amz-credential=k",
        );
        assert_eq!(request.uri().path(), "/bucket/a%20b");
        assert_eq!(
            request.uri().query(),
            Some("response-content-type=text%2Fplain")
        );
        assert!(request.headers().get("authorization").is_none());
        assert!(request.headers().get("x-amz-date").is_some());
        assert_eq!(
            stripped("/b/k?Signature=s&Expires=1&AWSAccessKeyId=a")
                .uri()
                .query(),
            None
        );
        assert_eq!(
            stripped("/b/k?versionId=3").uri().query(),
            Some("versionId=3")
        );
    }
}
