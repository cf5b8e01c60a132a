//! The OTLP trace exporter: OTLP over HTTP (protobuf, or JSON with
//! `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`) through Portico's own hyper + rustls client,
//! configured by the standard `OTEL_*` variables (endpoint, headers, timeout, batching,
//! `OTEL_SERVICE_NAME`).

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry_otlp::{SpanExporter, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use portico_http_client::{Connector, TrustRoots, https_connector};

const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("{0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("TLS roots for the collector: {0}")]
    Tls(#[from] portico_http_client::TlsError),
}

/// The tracer provider, when an OTLP endpoint is configured.
pub fn provider() -> Result<Option<SdkTracerProvider>, OtlpError> {
    let configured = ENDPOINT_VARIABLES
        .iter()
        .any(|name| std::env::var(name).is_ok_and(|value| !value.is_empty()));
    if !configured {
        return Ok(None);
    }
    let exporter = SpanExporter::builder()
        .with_http()
        .with_http_client(CollectorClient::new()?)
        .build()?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "portico".to_owned());
    Ok(Some(
        SdkTracerProvider::builder()
            .with_resource(Resource::builder().with_service_name(service).build())
            .with_batch_exporter(exporter)
            .build(),
    ))
}

/// Sends export requests on the Tokio runtime it was created in: the batch processor
/// calls it from its own thread.
#[derive(Debug)]
struct CollectorClient {
    client: Client<Connector, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
}

impl CollectorClient {
    fn new() -> Result<Self, OtlpError> {
        let tls = TrustRoots::load(true, None)?.client_config()?;
        let connector = https_connector(tls, Some(std::time::Duration::from_secs(5)));
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            runtime: tokio::runtime::Handle::current(),
        })
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for CollectorClient {
    async fn send_bytes(
        &self,
        request: Request<Bytes>,
    ) -> Result<Response<Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let exchange = self.runtime.spawn(async move {
            let response = client.request(request.map(Full::new)).await?;
            let (parts, body) = response.into_parts();
            let body = body.collect().await?.to_bytes();
            Ok::<_, opentelemetry_http::HttpError>(Response::from_parts(parts, body))
        });
        exchange.await?
    }
}
