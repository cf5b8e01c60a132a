//! Integration tests: the real `portico` binary in front of a real MinIO server on
//! loopback, driven by aws-sdk-s3, with a counting forwarder as an independent observer
//! of every upstream request.

mod support;

mod admin;
mod auth;
mod clients;
mod cluster;
mod coalescing;
mod cold_reads;
mod cold_reads_seams;
mod conditionals;
mod conformance;
mod corruption;
mod dependencies;
mod errors;
mod events;
mod fill_threads;
mod forwarding;
mod hardening;
mod inprocess;
mod integrity;
mod integrity_ranges;
mod ledger;
mod lifecycle;
mod listings;
mod metrics;
mod object_headers;
mod operations;
mod payloads;
mod post_uploads;
mod prefetch;
mod pretouch;
mod reads;
mod resilience;
mod rules;
mod scans;
mod scopes;
mod tenants;
mod tls;
mod tracing;
mod upstreams;
mod versions;
mod writes;
