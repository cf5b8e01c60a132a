//! The lean HTTP client benchmarks load targets with: plain GETs over pooled connections,
//! timed to the response head and to the last byte.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

pub type Http = Client<HttpConnector, Empty<Bytes>>;

/// A pooled plain-HTTP client keeping up to `connections` idle connections per host.
pub fn http_client(connections: usize) -> Http {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(connections)
        .build_http()
}

/// One response: time to its head, time to its last byte, bytes received.
pub struct Exchange {
    pub first_byte: Duration,
    pub total: Duration,
    pub bytes: u64,
}

/// GETs `url`, or bytes `first..=last` of it; panics unless the answer is a success with
/// exactly the bytes asked for.
pub async fn fetch(client: &Http, url: &str, range: Option<(u64, u64)>) -> Exchange {
    try_fetch(client, url, range)
        .await
        .unwrap_or_else(|status| panic!("GET {url} {range:?}: {status}"))
}

/// [`fetch`], with the status of an answer that is not a success as the error (its body
/// read and dropped).
pub async fn try_fetch(
    client: &Http,
    url: &str,
    range: Option<(u64, u64)>,
) -> Result<Exchange, u16> {
    let mut request = http::Request::get(url);
    if let Some((first, last)) = range {
        request = request.header(http::header::RANGE, format!("bytes={first}-{last}"));
    }
    let started = Instant::now();
    let response = client
        .request(request.body(Empty::new()).expect("request"))
        .await
        .unwrap_or_else(|error| panic!("GET {url}: {error}"));
    let first_byte = started.elapsed();
    let status = response.status();
    let mut body = response.into_body();
    let mut bytes = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.unwrap_or_else(|error| {
            panic!("GET {url} {range:?}: response body after {bytes} bytes: {error}")
        });
        if let Ok(data) = frame.into_data() {
            bytes += data.len() as u64;
        }
    }
    if !status.is_success() {
        return Err(status.as_u16());
    }
    if let Some((first, last)) = range {
        assert_eq!(bytes, last - first + 1, "GET {url} {range:?}: short body");
    }
    Ok(Exchange {
        first_byte,
        total: started.elapsed(),
        bytes,
    })
}
