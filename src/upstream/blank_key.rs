//! Keys made only of whitespace. S3 takes them; the SDK refuses them as missing (its
//! endpoint parameters trim the key). Such a key is handed to the SDK as a placeholder,
//! and the real key, percent-encoded, is put back into the request's path before the
//! request is signed, so the signature covers the key that is sent.

use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

/// The key the SDK is given in place of a blank one.
const PLACEHOLDER: &str = "portico-blank-key-placeholder";

/// Puts a blank key back into a request's path.
#[derive(Debug, Clone)]
pub struct RestoreKey {
    encoded: String,
}

/// The key to give the SDK for `key`, and what restores `key` when it is blank.
pub fn sdk_key(key: &str) -> (&str, Option<RestoreKey>) {
    if !key.is_empty() && key.trim().is_empty() {
        let encoded = utf8_percent_encode(key, NON_ALPHANUMERIC).to_string();
        (PLACEHOLDER, Some(RestoreKey { encoded }))
    } else {
        (key, None)
    }
}

impl RestoreKey {
    /// Replaces the placeholder, the path's last segment, with the real key.
    pub fn apply(&self, request: &mut HttpRequest) {
        if let Some(uri) = self.restored(request.uri())
            && let Err(error) = request.set_uri(uri)
        {
            tracing::warn!(%error, "cannot put a blank key back into the request path");
        }
    }

    fn restored(&self, uri: &str) -> Option<String> {
        let marker = format!("/{PLACEHOLDER}");
        let at = uri.rfind(&marker)?;
        let rest = &uri[at + marker.len()..];
        (rest.is_empty() || rest.starts_with('?'))
            .then(|| format!("{}/{}{rest}", &uri[..at], self.encoded))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_blank_keys_are_replaced_and_restored_in_the_path() {
        assert!(sdk_key("a b").1.is_none());
        assert!(sdk_key("").1.is_none());
        assert!(sdk_key("_ ").1.is_none());
        let (given, restore) = sdk_key(" \t ");
        assert_eq!(given, PLACEHOLDER);
        let restore = restore.unwrap();
        assert_eq!(
            restore.restored(&format!(
                "http://h:9000/bucket/{PLACEHOLDER}?x-id=GetObject"
            )),
            Some("http://h:9000/bucket/%20%09%20?x-id=GetObject".to_owned())
        );
        assert_eq!(
            restore.restored(&format!("https://bucket.s3.amazonaws.com/{PLACEHOLDER}")),
            Some("https://bucket.s3.amazonaws.com/%20%09%20".to_owned())
        );
        // Not the last segment: left alone.
        let inner = format!("http://h/{PLACEHOLDER}/other");
        assert_eq!(restore.restored(&inner), None);
    }
}
