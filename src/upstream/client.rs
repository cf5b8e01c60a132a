//! The S3 client Portico signs upstream requests with: its TLS roots, timeouts and
//! retries, and an interceptor that counts retries.

use std::sync::Arc;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_s3::config::{ConfigBag, Credentials, Intercept, Region, RuntimeComponents};
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::retries::RequestAttempts;
use portico_http_client::TlsError;
use portico_http_client::{SdkHttpClient, TrustRoots};

use crate::BoxError;
use crate::config::UpstreamConfig;
use crate::telemetry::Metrics;

/// The AWS SDK configuration for the upstream: region, timeouts and credentials (static
/// from the config, else the standard AWS chain).
/// The TLS client configuration for every upstream connection: the system CA bundle plus
/// `upstream.ca_file`.
pub fn tls_config(config: &UpstreamConfig) -> Result<rustls::ClientConfig, TlsError> {
    let extra = (!config.ca_file.as_os_str().is_empty()).then_some(config.ca_file.as_path());
    let roots = TrustRoots::load(true, extra)?;
    match &roots.system_bundle {
        Some(bundle) => tracing::info!(
            system_bundle = %bundle.display(),
            extra_certificates = roots.extra_certificates,
            roots = roots.len(),
            "upstream TLS roots loaded"
        ),
        None => tracing::warn!(
            extra_certificates = roots.extra_certificates,
            "no system CA bundle found (set SSL_CERT_FILE); upstream TLS trusts only upstream.ca_file"
        ),
    }
    roots.client_config()
}

pub async fn sdk_config(config: &UpstreamConfig, tls: &rustls::ClientConfig) -> SdkConfig {
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(config.connect_timeout.get())
        .read_timeout(config.first_byte_timeout.get())
        .build();
    let retries = RetryConfig::standard()
        .with_max_attempts(config.max_attempts)
        .with_initial_backoff(config.retry_initial_backoff.get());
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(SdkHttpClient::new(tls.clone()).with_idle_timeout(config.idle_timeout.get()))
        .retry_config(retries)
        .region(Region::new(config.region.clone()))
        .timeout_config(timeouts);
    if !config.access_key_id.is_empty() {
        loader = loader.credentials_provider(Credentials::new(
            config.access_key_id.clone(),
            config.secret_access_key.clone(),
            None,
            None,
            "portico-config",
        ));
    }
    loader.load().await
}

/// Counts every upstream attempt after the first: the SDK's retries are otherwise invisible.
pub(super) struct RetryCounter {
    pub(super) metrics: Arc<Metrics>,
}

impl std::fmt::Debug for RetryCounter {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("RetryCounter")
    }
}

impl Intercept for RetryCounter {
    fn name(&self) -> &'static str {
        "portico-retry-counter"
    }

    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let attempt = cfg
            .load::<RequestAttempts>()
            .map_or(1, RequestAttempts::attempts);
        if attempt > 1 {
            let operation = match cfg.load::<Metadata>().map(Metadata::name) {
                Some("GetObject") => "GetObject",
                Some("HeadObject") => "HeadObject",
                Some("ListBuckets") => "ListBuckets",
                _ => "other",
            };
            self.metrics.count_retry(operation);
        }
        Ok(())
    }
}
