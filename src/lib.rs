//! Portico: an S3-compatible read-through caching proxy.
//!
//! Clients send S3 requests to [`api`], which [`auth`]enticates them; GETs and HEADs are answered by the [`read`] path
//! from the hybrid memory + disk block [`cache`], which fetches missing blocks from the
//! [`upstream`] object store once however many requests wait for them.
// The warm job's block future (warm → lookup → coalesced fetch → hedged upstream GET →
// SDK orchestrator) is deeper than the compiler's default layout query depth.
#![recursion_limit = "256"]

pub mod admin;
pub mod api;
pub mod app;
pub mod auth;
pub mod budget;
pub mod buffers;
pub mod cache;
pub mod checksum;
pub mod cluster;
pub mod config;
pub mod events;
pub mod fill_threads;
pub mod fuzzing;
#[cfg(test)]
mod layers;
pub mod listing;
pub mod object;
pub mod read;
pub mod reload;
pub mod rules;
pub mod shutdown;
pub mod source;
pub mod telemetry;
pub mod tenant;
pub mod tls;
pub mod types;
pub mod upstream;
pub mod warm;

/// An error whose kind only matters as a message: a failed body or connection.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
