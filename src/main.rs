//! The `portico` binary: parse flags, load and validate the config, start logging, run —
//! or, with `check-config`, only validate the config and print the effective one.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use portico::app::{self, Bound};
use portico::config::{CliOverrides, Config};

/// jemalloc, not the system allocator: a fill frees a 4 MiB block buffer (the memory tier
/// evicts one) for every one it allocates, and jemalloc hands the freed pages to the next
/// block while glibc returns them to the kernel, so every block of a fill would fault in
/// and zero fresh pages (docs/architecture.md, "What a miss costs").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate the configuration (file, environment and flags) and print the effective
    /// configuration as TOML with secrets redacted; exit 2 when it is invalid.
    CheckConfig {
        /// TOML config file (the same as the global --config).
        #[arg(long = "config", value_name = "FILE")]
        file: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let overrides = CliOverrides {
        listen: cli.listen,
        admin_listen: cli.admin_listen,
        upstream_endpoint: cli.upstream_endpoint,
        cache_dir: cli.cache_dir,
    };
    let (checking, path) = match cli.command {
        Some(Command::CheckConfig { file }) => (true, file.or(cli.config)),
        None => (false, cli.config),
    };
    let config = match Config::load(path.as_deref(), std::env::vars(), &overrides) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("portico: {error}");
            return ExitCode::from(2);
        }
    };
    if checking {
        print!("{}", config.to_redacted_toml());
        eprintln!("portico: configuration is valid");
        return ExitCode::SUCCESS;
    }
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
    let telemetry = {
        let _runtime = runtime.enter();
        portico::telemetry::init(&config.log)
    };
    // One line at start; the whole effective configuration at debug level, or from
    // `portico check-config`.
    tracing::info!(
        s3 = %config.server.listen,
        admin = %config.admin.listen,
        upstream = if config.upstream.endpoint.is_empty() { "AWS S3" } else { config.upstream.endpoint.as_str() },
        memory = %config.cache.memory_capacity,
        disk = %config.cache.disk_capacity,
        cache_dir = %config.cache.dir.display(),
        block_size = %config.cache.block_size,
        auth = ?config.auth.mode,
        "configuration (portico check-config prints all of it)"
    );
    tracing::debug!(config = %config.to_redacted_toml(), "effective configuration");
    let announce = |bound: Bound| {
        // One machine-readable line on stdout; logs go to stderr.
        let scheme = if bound.s3_tls { "https" } else { "http" };
        let api = bound
            .admin_api
            .map(|address| format!(" admin_api=http://{address}"))
            .unwrap_or_default();
        let peer_scheme = if bound.cluster_tls { "https" } else { "http" };
        let peers = bound
            .cluster
            .map(|address| format!(" peers={peer_scheme}://{address}"))
            .unwrap_or_default();
        println!(
            "portico listening s3={scheme}://{} admin=http://{}{api}{peers}",
            bound.s3, bound.admin
        );
    };
    let result = runtime.block_on(app::run_until_signal(config, announce));
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // Logs go to stderr: one line says it (in the configured log format).
            let error = anyhow::Error::new(error);
            tracing::error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}
