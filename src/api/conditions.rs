//! Conditional requests answered from cached metadata: `If-Match`, `If-None-Match`,
//! `If-Modified-Since`, `If-Unmodified-Since` and `If-Range`, evaluated in the order and
//! with the precedence RFC 9110 §13.2.2 and S3 define.
//!
//! - `If-Match` false → 412; when `If-Match` is present, `If-Unmodified-Since` is ignored.
//! - `If-Unmodified-Since` false → 412.
//! - `If-None-Match` false → 304; when present, `If-Modified-Since` is ignored.
//! - `If-Modified-Since` false → 304.
//! - `If-Range` that does not match (strong ETag, or exactly the Last-Modified date) turns
//!   a range request into a full one.
//!
//! Unparsable dates are ignored, as HTTP requires. The front moves these headers out of
//! the request into a [`Preconditions`] before s3s parses it, so lists of ETags and
//! non-standard dates never become parse errors.

use std::time::UNIX_EPOCH;

use http::HeaderMap;

use crate::object::ObjectMeta;

const HEADERS: [&str; 5] = [
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "if-range",
];

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preconditions {
    if_match: Option<String>,
    if_none_match: Option<String>,
    if_modified_since: Option<i64>,
    if_unmodified_since: Option<i64>,
    if_range: Option<String>,
}

/// What the preconditions say about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Proceed,
    NotModified,
    PreconditionFailed,
}

impl Preconditions {
    /// Removes the conditional headers from `headers` and returns them parsed.
    pub fn take_from(headers: &mut HeaderMap) -> Self {
        let mut take = |name: &str| {
            let value = headers.remove(name)?;
            value.to_str().ok().map(|text| text.trim().to_owned())
        };
        let mut taken: [Option<String>; 5] = Default::default();
        for (slot, name) in taken.iter_mut().zip(HEADERS) {
            *slot = take(name);
        }
        let [
            if_match,
            if_none_match,
            if_modified_since,
            if_unmodified_since,
            if_range,
        ] = taken;
        Self {
            if_match,
            if_none_match,
            if_modified_since: if_modified_since.as_deref().and_then(http_date_secs),
            if_unmodified_since: if_unmodified_since.as_deref().and_then(http_date_secs),
            if_range,
        }
    }

    /// The verdict for a GET or HEAD of the object `meta` describes.
    pub fn evaluate(&self, meta: &ObjectMeta) -> Verdict {
        let modified = meta.last_modified_unix_secs;
        match (&self.if_match, self.if_unmodified_since, modified) {
            (Some(list), _, _) if !etag_list_matches(list, &meta.etag) => {
                return Verdict::PreconditionFailed;
            }
            (None, Some(since), Some(modified)) if modified > since => {
                return Verdict::PreconditionFailed;
            }
            _ => {}
        }
        match (&self.if_none_match, self.if_modified_since, modified) {
            (Some(list), _, _) if etag_list_matches(list, &meta.etag) => Verdict::NotModified,
            (None, Some(since), Some(modified)) if modified <= since => Verdict::NotModified,
            _ => Verdict::Proceed,
        }
    }

    /// Whether a `Range` header may be honoured: true without `If-Range`, else only if it
    /// names the current version.
    pub fn range_applies(&self, meta: &ObjectMeta) -> bool {
        let Some(validator) = &self.if_range else {
            return true;
        };
        if validator.starts_with('"') {
            return unquote(validator) == unquote(&meta.etag);
        }
        match (http_date_secs(validator), meta.last_modified_unix_secs) {
            (Some(date), Some(modified)) => date == modified,
            _ => false,
        }
    }
}

fn http_date_secs(text: &str) -> Option<i64> {
    let time = httpdate::parse_http_date(text).ok()?;
    let secs = time.duration_since(UNIX_EPOCH).ok()?.as_secs();
    i64::try_from(secs).ok()
}

fn unquote(etag: &str) -> &str {
    let etag = etag.trim();
    let etag = etag.strip_prefix("W/").unwrap_or(etag);
    etag.strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or(etag)
}

/// Whether a comma-separated ETag list (or `*`) matches `etag`.
fn etag_list_matches(list: &str, etag: &str) -> bool {
    let current = unquote(etag);
    list.split(',')
        .map(str::trim)
        .any(|candidate| candidate == "*" || unquote(candidate) == current)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETAG: &str = "\"abc\"";
    /// Sun, 01 Nov 2026 00:00:00 GMT
    const MODIFIED: i64 = 1_793_491_200;
    const BEFORE: &str = "Sat, 31 Oct 2026 00:00:00 GMT";
    const AT: &str = "Sun, 01 Nov 2026 00:00:00 GMT";
    const AFTER: &str = "Mon, 02 Nov 2026 00:00:00 GMT";

    fn meta() -> ObjectMeta {
        ObjectMeta {
            size: 10,
            etag: ETAG.to_owned(),
            last_modified_unix_secs: Some(MODIFIED),
            version_id: None,
            content_type: None,
            content_encoding: None,
            content_disposition: None,
            content_language: None,
            cache_control: None,
            expires: None,
            user_metadata: Vec::new(),
            checksums: None,
            headers: Vec::new(),
        }
    }

    fn verdict(headers: &[(&'static str, &str)]) -> Verdict {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, value.parse().unwrap());
        }
        let conditions = Preconditions::take_from(&mut map);
        assert!(map.is_empty(), "conditional headers are moved out");
        conditions.evaluate(&meta())
    }

    #[test]
    fn each_condition_alone() {
        use Verdict::{NotModified, PreconditionFailed, Proceed};
        let cases: [(&str, &str, Verdict); 14] = [
            ("if-match", ETAG, Proceed),
            ("if-match", "abc", Proceed),
            ("if-match", "*", Proceed),
            ("if-match", "\"x\", \"abc\"", Proceed),
            ("if-match", "\"x\"", PreconditionFailed),
            ("if-none-match", ETAG, NotModified),
            ("if-none-match", "*", NotModified),
            ("if-none-match", "\"x\"", Proceed),
            ("if-modified-since", BEFORE, Proceed),
            ("if-modified-since", AT, NotModified),
            ("if-modified-since", "not a date", Proceed),
            ("if-unmodified-since", AT, Proceed),
            ("if-unmodified-since", BEFORE, PreconditionFailed),
            ("if-unmodified-since", AFTER, Proceed),
        ];
        for (name, value, expected) in cases {
            assert_eq!(verdict(&[(name, value)]), expected, "{name}: {value}");
        }
    }

    #[test]
    fn s3_precedence_rules() {
        // If-Match true wins over If-Unmodified-Since false.
        assert_eq!(
            verdict(&[("if-match", ETAG), ("if-unmodified-since", BEFORE)]),
            Verdict::Proceed
        );
        // If-None-Match false (matches) wins over If-Modified-Since true.
        assert_eq!(
            verdict(&[("if-none-match", ETAG), ("if-modified-since", BEFORE)]),
            Verdict::NotModified
        );
        // If-None-Match true (differs) makes If-Modified-Since irrelevant.
        assert_eq!(
            verdict(&[("if-none-match", "\"x\""), ("if-modified-since", AFTER)]),
            Verdict::Proceed
        );
        // 412 conditions are checked before 304 conditions.
        assert_eq!(
            verdict(&[("if-match", "\"x\""), ("if-none-match", ETAG)]),
            Verdict::PreconditionFailed
        );
    }

    #[test]
    fn if_range_needs_the_current_etag_or_exact_date() {
        let with = |value: &str| {
            let mut map = HeaderMap::new();
            map.insert("if-range", value.parse().unwrap());
            Preconditions::take_from(&mut map).range_applies(&meta())
        };
        assert!(with(ETAG));
        assert!(!with("\"other\""));
        assert!(with(AT));
        assert!(!with(BEFORE));
        assert!(Preconditions::default().range_applies(&meta()));
    }
}
