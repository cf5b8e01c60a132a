//! Logs and metrics. Logs go to stderr as text or JSON, filtered by `RUST_LOG`.

mod metrics;

pub use metrics::Metrics;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// The filter used when `RUST_LOG` is not set. s3s logs every error response (404s
/// included) at error level; Portico logs failed requests itself at the right level.
const DEFAULT_FILTER: &str = "info,s3s=off";

pub fn init_logging(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    if let Err(error) = result {
        eprintln!("portico: logging already initialised: {error}");
    }
}
