//! The AWS SDK's HTTP client, built on [`crate::https_connector`] so the SDK and the raw
//! forwarder trust the same roots. One pooled hyper client per distinct timeout setting,
//! as the SDK asks for one per client configuration.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector as TcpConnector;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;
use tokio::runtime::Handle;

use crate::timeout::IdleTimeoutBody;

type Timeouts = (Option<Duration>, Option<Duration>);

/// An [`HttpClient`] for `aws-config` and `aws-sdk-s3` over Portico's TLS configuration.
///
/// The SDK's read timeout bounds the wait for a response head (time to first byte); the
/// idle timeout given here bounds every gap between body frames (the read timeout when
/// none is given).
#[derive(Debug, Clone)]
pub struct SdkHttpClient {
    tls: rustls::ClientConfig,
    idle_timeout: Option<Duration>,
    connections_on: SpawnOn,
    connectors: Arc<Mutex<HashMap<Timeouts, SharedHttpConnector>>>,
}

impl SdkHttpClient {
    pub fn new(tls: rustls::ClientConfig) -> Self {
        Self {
            tls,
            idle_timeout: None,
            connections_on: SpawnOn(None),
            connectors: Arc::default(),
        }
    }

    /// Bounds every gap between response body frames by `limit`.
    pub fn with_idle_timeout(mut self, limit: Duration) -> Self {
        self.idle_timeout = Some(limit);
        self
    }

    /// Drives every connection (its socket reads and writes, and the HTTP framing) on
    /// `runtime`, whichever runtime sends the request; by default, on the runtime of the
    /// request that opened it.
    pub fn with_connections_on(mut self, runtime: Handle) -> Self {
        self.connections_on = SpawnOn(Some(runtime));
        self
    }
}

/// Spawns a connection's task on the runtime given, else on the current one.
#[derive(Debug, Clone)]
struct SpawnOn(Option<Handle>);

impl<F> hyper::rt::Executor<F> for SpawnOn
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        match &self.0 {
            Some(runtime) => drop(runtime.spawn(future)),
            None => hyper::rt::Executor::execute(&TokioExecutor::new(), future),
        }
    }
}

impl HttpClient for SdkHttpClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        let timeouts = (settings.connect_timeout(), settings.read_timeout());
        self.connectors
            .lock()
            .entry(timeouts)
            .or_insert_with(|| {
                let https = crate::https_connector(self.tls.clone(), timeouts.0);
                SharedHttpConnector::new(Connector {
                    client: Client::builder(self.connections_on.clone()).build(https),
                    first_byte_timeout: timeouts.1,
                    idle_timeout: self.idle_timeout.or(timeouts.1),
                })
            })
            .clone()
    }
}

#[derive(Debug, Clone)]
struct Connector {
    client: Client<HttpsConnector<TcpConnector>, SdkBody>,
    /// Bounds the wait for the response head.
    first_byte_timeout: Option<Duration>,
    /// Bounds every gap between body frames.
    idle_timeout: Option<Duration>,
}

impl HttpConnector for Connector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let connector = self.clone();
        HttpConnectorFuture::new(async move { connector.send(request).await })
    }
}

impl Connector {
    async fn send(self, request: HttpRequest) -> Result<HttpResponse, ConnectorError> {
        let request = request
            .try_into_http1x()
            .map_err(|error| ConnectorError::user(error.into()))?;
        let sending = self.client.request(request);
        let response = match self.first_byte_timeout {
            Some(limit) => tokio::time::timeout(limit, sending).await.map_err(|_| {
                ConnectorError::timeout(format!("no response head within {limit:?}").into())
            })?,
            None => sending.await,
        }
        .map_err(|error| ConnectorError::io(error.into()))?;
        let idle_timeout = self.idle_timeout;
        let response =
            response.map(|body| SdkBody::from_body_1_x(IdleTimeoutBody::new(body, idle_timeout)));
        HttpResponse::try_from(response).map_err(|error| ConnectorError::other(error.into(), None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;

    /// The id of the runtime `executor` runs a task on.
    async fn runtime_of(executor: &SpawnOn) -> tokio::runtime::Id {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        executor.execute(async move {
            let _ = sender.send(Handle::current().id());
        });
        receiver.await.expect("the task ran")
    }

    #[tokio::test]
    async fn connections_run_on_the_runtime_given_else_on_the_current_one() {
        let other = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let given = SpawnOn(Some(other.handle().clone()));
        assert_eq!(runtime_of(&given).await, other.handle().id());
        let here = Handle::current().id();
        assert_eq!(runtime_of(&SpawnOn(None)).await, here);
        other.shutdown_background();
    }
}
