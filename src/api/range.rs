//! The `Range` header of a cached GET or HEAD, read as S3 reads it before the S3 model
//! parses it: a value that is not one `bytes=` range is ignored and the whole object is
//! answered (S3, MinIO and RFC 9110 §14.2 all do so), and a range whose last byte comes
//! before its first is unsatisfiable (416 `InvalidRange`, as MinIO answers) once the object
//! is found.

use http::HeaderMap;
use http::header::{HeaderValue, RANGE};

/// A range that starts past the end of any object (S3 objects are at most 5 TiB), so it
/// resolves to 416 `InvalidRange` after the object's metadata is known (a missing object
/// is still 404).
const PAST_ANY_END: &str = "bytes=9223372036854775807-";

/// What a `Range` value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One range the S3 model reads.
    Valid,
    /// `bytes=FIRST-LAST` with `LAST < FIRST`.
    Inverted,
    /// Anything else: not a single byte range.
    Malformed,
}

fn kind(value: &HeaderValue) -> Kind {
    let Ok(text) = value.to_str() else {
        return Kind::Malformed;
    };
    let Some(spec) = text.strip_prefix("bytes=") else {
        return Kind::Malformed;
    };
    // The S3 model reads a bare `bytes=-` as a zero-length suffix; S3 ignores it.
    if spec == "-" {
        return Kind::Malformed;
    }
    if let Some((first, last)) = spec.split_once('-')
        && let (Some(first), Some(last)) = (number(first), number(last))
        && last < first
    {
        return Kind::Inverted;
    }
    match s3s::dto::Range::parse(text) {
        Ok(_) => Kind::Valid,
        Err(_) => Kind::Malformed,
    }
}

/// Decimal digits only, as a `u64`.
fn number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Rewrites `headers` so the S3 model sees what S3 would act on: a malformed `Range` is
/// removed, an inverted one replaced by a range past any object's end.
pub fn normalize(headers: &mut HeaderMap) {
    let Some(value) = headers.get(RANGE) else {
        return;
    };
    match kind(value) {
        Kind::Valid => {}
        Kind::Malformed => {
            headers.remove(RANGE);
        }
        Kind::Inverted => {
            headers.insert(RANGE, HeaderValue::from_static(PAST_ANY_END));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normalized(value: &str) -> Option<String> {
        let mut headers = HeaderMap::new();
        headers.insert(RANGE, HeaderValue::from_str(value).unwrap());
        normalize(&mut headers);
        headers
            .get(RANGE)
            .map(|value| value.to_str().unwrap().to_owned())
    }

    #[test]
    fn ranges_are_kept_ignored_or_made_unsatisfiable_as_s3_reads_them() {
        for valid in [
            "bytes=0-0",
            "bytes=5-",
            "bytes=-5",
            "bytes=-0",
            "bytes=3-1000",
        ] {
            assert_eq!(normalized(valid).as_deref(), Some(valid), "{valid}");
        }
        for inverted in ["bytes=5-1", "bytes=1-0", "bytes=18446744073709551615-1"] {
            assert_eq!(
                normalized(inverted).as_deref(),
                Some(PAST_ANY_END),
                "{inverted}"
            );
        }
        for malformed in [
            "bytes=abc",
            "bytes=0-1,4-5",
            "items=0-1",
            "bytes=",
            "bytes=-",
            "bytes= 0-1",
            "bytes=0x1-2",
            "bytes=18446744073709551616-",
            "bytes=1-18446744073709551616",
            "BYTES=0-1",
        ] {
            assert_eq!(normalized(malformed), None, "{malformed}");
        }
        let mut headers = HeaderMap::new();
        headers.insert(RANGE, HeaderValue::from_bytes(b"bytes=\xff-1").unwrap());
        normalize(&mut headers);
        assert!(headers.get(RANGE).is_none(), "not UTF-8");
    }
}
