//! The S3 client Portico signs upstream requests with: its TLS roots, timeouts and
//! retries, and interceptors that count retries and bill each attempt to the cost ledger.

use std::sync::Arc;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_s3::config::{ConfigBag, Credentials, Intercept, Region, RuntimeComponents};
use aws_sdk_s3::operation::get_object::GetObjectInput;
use aws_sdk_s3::operation::get_object_attributes::GetObjectAttributesInput;
use aws_sdk_s3::operation::head_object::HeadObjectInput;
use aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Input;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextRef, BeforeSerializationInterceptorContextRef,
    BeforeTransmitInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::retries::RequestAttempts;
use portico_http_client::TlsError;
use portico_http_client::{SdkHttpClient, TrustRoots};

use crate::BoxError;
use crate::config::UpstreamConfig;
use crate::telemetry::{Metrics, RequestKind};
use crate::tenant::DEFAULT_TENANT;

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

/// The SDK's configuration for `config`; its connections are driven on `connections_on`
/// when given (the fill threads), else where each opens.
pub async fn sdk_config(
    config: &UpstreamConfig,
    tls: &rustls::ClientConfig,
    connections_on: Option<tokio::runtime::Handle>,
) -> SdkConfig {
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(config.connect_timeout.get())
        .read_timeout(config.first_byte_timeout.get())
        .build();
    let retries = RetryConfig::standard()
        .with_max_attempts(config.max_attempts)
        .with_initial_backoff(config.retry_initial_backoff.get());
    let mut http = SdkHttpClient::new(tls.clone()).with_idle_timeout(config.idle_timeout.get());
    if let Some(runtime) = connections_on {
        http = http.with_connections_on(runtime);
    }
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
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

/// The bucket an SDK operation addresses, kept for the cost ledger.
#[derive(Debug, Clone)]
struct LedgerBucket(Option<String>);

impl aws_smithy_types::config_bag::Storable for LedgerBucket {
    type Storer = aws_smithy_types::config_bag::StoreReplace<Self>;
}

/// Counts every upstream attempt that got an answer in the cost ledger: its kind, its
/// bucket, the tenant its task is charged to, and the body bytes the answer announces.
pub(super) struct LedgerCounter {
    pub(super) metrics: Arc<Metrics>,
}

impl std::fmt::Debug for LedgerCounter {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("LedgerCounter")
    }
}

impl Intercept for LedgerCounter {
    fn name(&self) -> &'static str {
        "portico-ledger-counter"
    }

    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let input = context.input();
        let bucket = input
            .downcast_ref::<GetObjectInput>()
            .and_then(GetObjectInput::bucket)
            .or_else(|| {
                input
                    .downcast_ref::<HeadObjectInput>()
                    .and_then(HeadObjectInput::bucket)
            })
            .or_else(|| {
                input
                    .downcast_ref::<GetObjectAttributesInput>()
                    .and_then(GetObjectAttributesInput::bucket)
            })
            .or_else(|| {
                input
                    .downcast_ref::<ListObjectsV2Input>()
                    .and_then(ListObjectsV2Input::bucket)
            })
            .map(str::to_owned);
        cfg.interceptor_state().store_put(LedgerBucket(bucket));
        Ok(())
    }

    fn read_before_deserialization(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let operation = cfg.load::<Metadata>().map(Metadata::name);
        let kind = operation.map_or(RequestKind::Other, RequestKind::of_operation);
        // A HEAD's Content-Length is the object's; it sends no body.
        let bytes = match operation {
            Some("HeadObject") => 0,
            _ => context
                .response()
                .headers()
                .get("content-length")
                .and_then(|length| length.parse::<u64>().ok())
                .unwrap_or(0),
        };
        let bucket = cfg
            .load::<LedgerBucket>()
            .and_then(|bucket| bucket.0.as_deref());
        let tenant = crate::tenant::note_origin_request();
        let tenant = tenant
            .as_ref()
            .map_or(DEFAULT_TENANT, |tenant| tenant.name());
        self.metrics
            .ledger
            .count_origin(bucket, tenant, kind, bytes);
        Ok(())
    }
}
