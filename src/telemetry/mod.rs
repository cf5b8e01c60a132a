//! Logs, traces and metrics. Logs go to stderr as text or JSON, filtered by `RUST_LOG`;
//! the optional access log is one more line per request. Traces are exported over OTLP
//! when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set.
//!
//! Invariant: request spans use the [`TRACE_TARGET`] target, which the log filter always
//! turns off, so without an OTLP endpoint no layer is interested in them and creating one
//! costs a cached callsite check — tracing is free when it is not configured.

mod labels;
mod metrics;
mod otlp;

pub use labels::{
    BlockLookup, BudgetWait, EventRecord, EventRejection, HedgeOutcome, InvalidationResult,
    ListingLookup, MetadataLookup, PeerResult, PrefetchOutcome, ServedFrom,
};
pub use metrics::{Metrics, RequestKind, StreamEnd};

/// Lets a repeated log line through at most once per interval (the first at once), so a
/// failure every request meets is logged, not repeated per request.
#[derive(Debug)]
pub struct LogLimit {
    interval: std::time::Duration,
    started: std::time::Instant,
    /// Milliseconds after `started` when the next line may pass; 0 lets the first pass.
    next: std::sync::atomic::AtomicU64,
}

impl LogLimit {
    pub fn per(interval: std::time::Duration) -> Self {
        Self {
            interval,
            started: std::time::Instant::now(),
            next: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Whether a line may be logged now; if so, the next one waits an interval.
    pub fn allow(&self) -> bool {
        use std::sync::atomic::Ordering;
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next.load(Ordering::Acquire);
        let later =
            now.saturating_add(u64::try_from(self.interval.as_millis()).unwrap_or(u64::MAX));
        now >= next
            && self
                .next
                .compare_exchange(next, later.max(1), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }
}

use std::io::IsTerminal;

use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

use crate::config::{LogConfig, LogFormat};

/// The target of the spans exported as traces (never logged).
pub const TRACE_TARGET: &str = "portico::trace";
/// The target of access log lines.
pub const ACCESS_TARGET: &str = "portico::access";

/// The filter used when `RUST_LOG` is not set. s3s logs every error response (404s
/// included) at error level; Portico logs failed requests itself at the right level.
const DEFAULT_FILTER: &str = "info,s3s=off";

/// Added to any filter: foyer's single-file device warns at every start that a file in a
/// file system is "inefficient" compared with a raw block device. Portico keeps its disk
/// tier in one data file on purpose (docs/architecture.md, "The disk tier's files").
const FOYER_FILE_DEVICE: &str = "foyer_storage::io::device::file=error";

/// Keeps the trace exporter running; [`Telemetry::shutdown`] flushes it.
pub struct Telemetry {
    traces: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Exports the spans still buffered and stops the exporter.
    pub fn shutdown(&self) {
        if let Some(provider) = &self.traces
            && let Err(error) = provider.shutdown()
        {
            tracing::warn!(%error, "flushing traces at shutdown failed");
        }
    }
}

/// Installs logging (and tracing, when an OTLP endpoint is configured). Must run inside
/// the Tokio runtime: the exporter sends its batches on it.
pub fn init(log: &LogConfig) -> Telemetry {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER))
        .add_directive(FOYER_FILE_DEVICE.parse().expect("static directive"))
        .add_directive(
            format!("{TRACE_TARGET}=off")
                .parse()
                .expect("static directive"),
        );
    let filter = if log.access_log {
        filter.add_directive(
            format!("{ACCESS_TARGET}=info")
                .parse()
                .expect("static directive"),
        )
    } else {
        filter.add_directive(
            format!("{ACCESS_TARGET}=off")
                .parse()
                .expect("static directive"),
        )
    };
    let logs = match log.format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
    };
    let (traces, provider, error) = match otlp::provider() {
        Ok(Some(provider)) => {
            use opentelemetry::trace::TracerProvider;
            let tracer = provider.tracer("portico");
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(Targets::new().with_target(TRACE_TARGET, LevelFilter::INFO))
                .boxed();
            (Some(layer), Some(provider), None)
        }
        Ok(None) => (None, None, None),
        Err(error) => (None, None, Some(error)),
    };
    let layers: Vec<Box<dyn Layer<Registry> + Send + Sync>> =
        [Some(logs), traces].into_iter().flatten().collect();
    if let Err(error) = tracing_subscriber::registry().with(layers).try_init() {
        eprintln!("portico: logging already initialised: {error}");
    }
    match (&provider, error) {
        (Some(_), _) => tracing::info!("exporting traces over OTLP"),
        (None, Some(error)) => {
            tracing::error!(%error, "traces are not exported: the OTLP exporter could not start");
        }
        (None, None) => {}
    }
    Telemetry { traces: provider }
}

/// An error and each of its causes, outermost first, joined by ": " (what actually failed
/// often hides levels down: "connection refused"). It formats only when displayed, so a
/// log line that is filtered out costs nothing.
pub struct ErrorChain<'a>(pub &'a dyn std::error::Error);

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

/// [`ErrorChain`] as text, for a message.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    ErrorChain(error).to_string()
}

#[cfg(test)]
mod tests {
    use super::LogLimit;

    #[test]
    fn one_line_per_interval_passes() {
        let limit = LogLimit::per(std::time::Duration::from_millis(200));
        assert!(limit.allow());
        assert!(!limit.allow());
        std::thread::sleep(std::time::Duration::from_millis(250));
        assert!(limit.allow());
        assert!(!limit.allow());
    }
}
