//! Observability of a request: with `OTEL_EXPORTER_OTLP_ENDPOINT` set, a GET is exported
//! over OTLP/HTTP as one `s3.request` span with children for the metadata lookup, each
//! block lookup (by tier) and each upstream fetch, carrying bucket, block counts and
//! hits/misses; with `log.access_log`, it is also one access log line.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::net::TcpListener;

use crate::support::{Rig, eventually, random_bytes};

const MIB: usize = 1024 * 1024;

/// An OTLP/HTTP receiver on loopback keeping every JSON export request's body.
async fn receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let exports = Arc::new(Mutex::new(Vec::new()));
    let kept = exports.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let kept = kept.clone();
                    async move {
                        let path = request.uri().path().to_owned();
                        let body = request.into_body().collect().await?.to_bytes();
                        if path == "/v1/traces"
                            && let Ok(export) = serde_json::from_slice(&body)
                        {
                            kept.lock().push(export);
                        }
                        Ok::<_, hyper::Error>(http::Response::new(Full::new(Bytes::from_static(
                            b"{}",
                        ))))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (format!("http://{address}"), exports)
}

/// One exported span: its name, ids and attributes as strings.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace: String,
    id: String,
    parent: String,
    attributes: Vec<(String, String)>,
}

impl Span {
    fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }
}

fn spans(exports: &[Value]) -> Vec<Span> {
    let mut spans = Vec::new();
    for export in exports {
        for resource in export["resourceSpans"].as_array().into_iter().flatten() {
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                for span in scope["spans"].as_array().into_iter().flatten() {
                    let text = |field: &str| span[field].as_str().unwrap_or_default().to_owned();
                    let attributes = span["attributes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|attribute| {
                            let value = &attribute["value"];
                            let value = ["stringValue", "intValue", "boolValue", "doubleValue"]
                                .iter()
                                .find_map(|kind| value.get(kind))
                                .map(|value| match value {
                                    Value::String(text) => text.clone(),
                                    other => other.to_string(),
                                })
                                .unwrap_or_default();
                            (
                                attribute["key"].as_str().unwrap_or_default().to_owned(),
                                value,
                            )
                        })
                        .collect();
                    spans.push(Span {
                        name: text("name"),
                        trace: text("traceId"),
                        id: text("spanId"),
                        parent: text("parentSpanId"),
                        attributes,
                    });
                }
            }
        }
    }
    spans
}

#[tokio::test(flavor = "multi_thread")]
async fn a_get_is_traced_over_otlp_and_logged_once_in_the_access_log() {
    let (endpoint, exports) = receiver().await;
    let mut rig = Rig::start("tracing", |settings| {
        settings.log = "access_log = true\n".to_owned();
        // A rule that changes nothing this test sees, to be named on the span.
        settings.tables =
            "[[rules]]\nname = \"traced\"\nprefix = \"traced\"\nprefetch = false\n".to_owned();
        settings.env = vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(), endpoint),
            (
                "OTEL_EXPORTER_OTLP_PROTOCOL".to_owned(),
                "http/json".to_owned(),
            ),
            (
                "OTEL_SERVICE_NAME".to_owned(),
                "portico-under-test".to_owned(),
            ),
        ];
    })
    .await;
    let data = random_bytes(2 * MIB, 71);
    rig.put("traced.bin", &data).await;
    assert!(rig.get("traced.bin", None).await == data, "cold read");
    assert!(rig.get("traced.bin", None).await == data, "warm read");
    // A response's access line is written once its body has ended on the server, which
    // can be just after the client has read its last byte.
    let portico = rig.portico();
    let within = std::time::Duration::from_secs(10);
    let logs = eventually("both GETs in the access log", within, || async {
        let logs = portico.logs();
        let logged = logs
            .lines()
            .filter(|line| line.contains("portico::access"))
            .count();
        (logged >= 2).then_some(logs)
    })
    .await;
    // Stopping flushes the exporter's last batch.
    rig.portico.take().expect("running").stop().await;

    let exports = exports.lock().clone();
    assert!(!exports.is_empty(), "the collector received exports");
    assert!(
        exports[0].to_string().contains("portico-under-test"),
        "the service name is the resource's"
    );
    let spans = spans(&exports);
    let requests: Vec<&Span> = spans
        .iter()
        .filter(|span| {
            span.name == "s3.request" && span.attribute("s3.operation") == Some("GetObject")
        })
        .collect();
    assert_eq!(requests.len(), 2, "one span per GET: {spans:#?}");
    for request in &requests {
        assert_eq!(request.attribute("s3.bucket"), Some(rig.bucket.as_str()));
        assert_eq!(request.attribute("s3.key"), Some("traced.bin"));
        assert_eq!(request.attribute("http.status_code"), Some("200"));
        assert_eq!(request.attribute("cache.blocks"), Some("2"));
        assert_eq!(request.attribute("cache.rule"), Some("traced"));
        assert_eq!(
            request.attribute("bytes"),
            Some((2 * MIB).to_string().as_str())
        );
    }
    let (cold, warm) = (requests[0], requests[1]);
    // The cold read's first block comes with its metadata in one upstream GET (a miss,
    // though the probe also cached it); the second is fetched by its own lookup.
    assert_eq!(cold.attribute("cache.misses"), Some("2"), "{cold:?}");
    assert_eq!(cold.attribute("cache.hits"), Some("0"), "{cold:?}");
    assert_eq!(warm.attribute("cache.hits"), Some("2"), "{warm:?}");
    assert_eq!(warm.attribute("cache.misses"), Some("0"), "{warm:?}");
    assert_eq!(warm.attribute("cache.source"), Some("memory"));
    // The span carries the response's Cache-Status.
    assert_eq!(
        cold.attribute("cache.status"),
        Some("Portico; fwd=miss; stored; ttl=60")
    );
    assert!(
        warm.attribute("cache.status")
            .is_some_and(|status| status.starts_with("Portico; hit; ttl=")),
        "{warm:?}"
    );

    let children = |parent: &Span, name: &str| -> Vec<Span> {
        spans
            .iter()
            .filter(|span| span.name == name && span.parent == parent.id)
            .inspect(|span| assert_eq!(span.trace, parent.trace, "one trace per request"))
            .cloned()
            .collect()
    };
    let (metadata,) = <[Span; 1]>::try_from(children(cold, "metadata.lookup"))
        .map(|[span]| (span,))
        .expect("one metadata lookup");
    assert_eq!(metadata.attribute("s3.bucket"), Some(rig.bucket.as_str()));
    let probe = children(&metadata, "upstream.get");
    assert_eq!(
        probe.len(),
        1,
        "the metadata came with the blocks: {spans:#?}"
    );
    // The discovery asks for as many blocks as it streams; the answer ends with the object.
    let discovery = format!("bytes=0-{}", 16 * MIB - 1);
    assert_eq!(probe[0].attribute("http.range"), Some(discovery.as_str()));
    assert_eq!(probe[0].attribute("http.status_code"), Some("206"));
    let lookups = children(cold, "block.lookup");
    assert_eq!(lookups.len(), 2, "a lookup per block: {spans:#?}");
    let tiers: Vec<&str> = lookups
        .iter()
        .filter_map(|lookup| lookup.attribute("cache.tier"))
        .collect();
    assert_eq!(tiers, ["upstream", "upstream"]);
    assert_eq!(lookups[0].attribute("cache.hit"), Some("false"));
    let streamed = &lookups[1];
    assert_eq!(streamed.attribute("cache.hit"), Some("false"));
    // Its fetch waited for the discovery's GET, which brought it, and sent none of its own.
    let fetches = children(streamed, "upstream.fetch");
    assert!(
        fetches
            .iter()
            .all(|fetch| children(fetch, "upstream.get").is_empty()),
        "block 1 came in the discovery's GET: {spans:#?}"
    );
    let warm_lookups = children(warm, "block.lookup");
    assert_eq!(warm_lookups.len(), 2);
    for lookup in &warm_lookups {
        assert_eq!(lookup.attribute("cache.tier"), Some("memory"));
        assert!(children(lookup, "upstream.fetch").is_empty());
    }

    let access: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains("portico::access") && line.contains("traced.bin"))
        .collect();
    // The PUT went to MinIO directly; the two GETs are logged once each.
    assert_eq!(access.len(), 2, "{logs}");
    assert!(
        access[0].contains("operation=\"GetObject\"") || access[0].contains("operation=GetObject"),
        "{}",
        access[0]
    );
    assert!(access[0].contains("status=200"), "{}", access[0]);
    assert!(
        access[0].contains("source=\"upstream\"") || access[0].contains("source=upstream"),
        "{}",
        access[0]
    );
    assert!(
        access[1].contains("source=\"memory\"") || access[1].contains("source=memory"),
        "{}",
        access[1]
    );
}
