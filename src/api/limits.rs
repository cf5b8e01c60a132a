//! Request-level limits, checked before anything else looks at a request: the URI and
//! header-section sizes, the object key length (1024 bytes, as S3), and the request rate
//! of one connection. Each refusal is the S3 error S3 itself gives.

use http::Request;
use parking_lot::Mutex;
use s3s::S3Error;
use tokio::time::Instant;

use super::error::RequestError;
use crate::config::ServerConfig;

/// S3's limit on the UTF-8 length of an object key.
pub const MAX_KEY_BYTES: usize = 1024;

#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    pub max_url_bytes: usize,
    pub max_header_bytes: usize,
    /// 0: unlimited.
    pub requests_per_second_per_connection: u32,
}

impl RequestLimits {
    pub fn of(config: &ServerConfig) -> Self {
        Self {
            max_url_bytes: config.max_url_bytes.bytes() as usize,
            max_header_bytes: config.max_header_bytes.bytes() as usize,
            requests_per_second_per_connection: config.max_requests_per_second_per_connection,
        }
    }

    /// Refuses a request whose URI or header section is larger than allowed.
    pub fn check<B>(&self, request: &Request<B>) -> Result<(), S3Error> {
        let uri_bytes = request
            .uri()
            .path_and_query()
            .map_or(0, |path| path.as_str().len());
        if uri_bytes > self.max_url_bytes {
            return Err(RequestError::UriTooLong {
                bytes: uri_bytes,
                limit: self.max_url_bytes,
            }
            .into());
        }
        // As sent on the wire: "name: value\r\n" per header, plus the request line.
        let header_bytes = request
            .headers()
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 4)
            .sum::<usize>()
            + request.method().as_str().len()
            + uri_bytes
            + 12;
        if header_bytes > self.max_header_bytes {
            return Err(RequestError::HeaderSectionTooLarge {
                bytes: header_bytes,
                limit: self.max_header_bytes,
            }
            .into());
        }
        Ok(())
    }
}

/// Refuses a key longer than S3 allows; its bytes are never used for anything else.
pub fn check_key(key: &str) -> Result<(), S3Error> {
    if key.len() > MAX_KEY_BYTES {
        return Err(RequestError::KeyTooLong {
            bytes: key.len(),
            limit: MAX_KEY_BYTES,
        }
        .into());
    }
    Ok(())
}

/// One connection's request budget: a token bucket refilled at `per_second`, holding
/// at most one second's worth.
#[derive(Debug)]
pub struct RequestRate {
    per_second: f64,
    state: Mutex<(f64, Instant)>,
}

impl RequestRate {
    pub fn new(per_second: u32) -> Self {
        let per_second = f64::from(per_second);
        Self {
            per_second,
            state: Mutex::new((per_second, Instant::now())),
        }
    }

    /// Takes one request from the budget; `SlowDown` when it is spent.
    pub fn take(&self) -> Result<(), S3Error> {
        let mut state = self.state.lock();
        let (tokens, refilled) = &mut *state;
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(*refilled);
        *tokens = (*tokens + elapsed.as_secs_f64() * self.per_second).min(self.per_second);
        *refilled = now;
        if *tokens < 1.0 {
            return Err(RequestError::SlowDown.into());
        }
        *tokens -= 1.0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::S3ErrorCode;
    use std::time::Duration;

    fn limits() -> RequestLimits {
        RequestLimits {
            max_url_bytes: 100,
            max_header_bytes: 300,
            requests_per_second_per_connection: 0,
        }
    }

    fn code(result: Result<(), S3Error>) -> Option<S3ErrorCode> {
        result.err().map(|error| error.code().clone())
    }

    #[test]
    fn long_uris_and_header_sections_are_refused_with_s3_codes() {
        let ok = Request::get("/bucket/key").body(()).unwrap();
        assert_eq!(code(limits().check(&ok)), None);
        let long_uri = Request::get(format!("/bucket/{}", "k".repeat(100)))
            .body(())
            .unwrap();
        assert_eq!(
            code(limits().check(&long_uri)),
            Some(S3ErrorCode::InvalidURI)
        );
        let big_headers = Request::get("/bucket/key")
            .header("x-amz-meta-big", "v".repeat(300))
            .body(())
            .unwrap();
        assert_eq!(
            code(limits().check(&big_headers)),
            Some(S3ErrorCode::RequestHeaderSectionTooLarge)
        );
    }

    #[test]
    fn keys_up_to_1024_bytes_pass() {
        assert!(check_key(&"é".repeat(512)).is_ok());
        assert_eq!(
            code(check_key(&"k".repeat(1025))),
            Some(S3ErrorCode::KeyTooLongError)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_request_rate_refills_over_time() {
        let rate = RequestRate::new(10);
        for _ in 0..10 {
            assert!(rate.take().is_ok());
        }
        assert_eq!(code(rate.take()), Some(S3ErrorCode::SlowDown));
        tokio::time::advance(Duration::from_millis(101)).await;
        assert!(rate.take().is_ok());
        assert_eq!(code(rate.take()), Some(S3ErrorCode::SlowDown));
    }
}
