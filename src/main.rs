//! The `portico` binary: parse flags, load and validate the config, start logging, run.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use portico::app::{self, Bound};
use portico::config::{CliOverrides, Config};

/// S3-compatible read-through caching proxy.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// TOML config file; every key can also be set as PORTICO_<SECTION>_<KEY>.
    #[arg(long, env = "PORTICO_CONFIG")]
    config: Option<PathBuf>,
    /// S3 listener address (server.listen).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Admin listener address (admin.listen).
    #[arg(long)]
    admin_listen: Option<SocketAddr>,
    /// Upstream S3 endpoint URL (upstream.endpoint).
    #[arg(long)]
    upstream_endpoint: Option<String>,
    /// Disk cache directory (cache.dir).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let overrides = CliOverrides {
        listen: cli.listen,
        admin_listen: cli.admin_listen,
        upstream_endpoint: cli.upstream_endpoint,
        cache_dir: cli.cache_dir,
    };
    let config = match Config::load(cli.config.as_deref(), std::env::vars(), &overrides) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("portico: {error}");
            return ExitCode::from(2);
        }
    };
    portico::telemetry::init_logging(config.log.format);
    tracing::info!(config = %config.to_redacted_toml(), "effective configuration");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("portico: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let announce = |bound: Bound| {
        // One machine-readable line on stdout; logs go to stderr.
        let scheme = if bound.s3_tls { "https" } else { "http" };
        println!(
            "portico listening s3={scheme}://{} admin=http://{}",
            bound.s3, bound.admin
        );
    };
    match runtime.block_on(app::run(config, announce)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let error = anyhow::Error::new(error);
            tracing::error!("{error:#}");
            eprintln!("portico: {error:#}");
            ExitCode::FAILURE
        }
    }
}
