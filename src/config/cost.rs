//! `[cost]`: the prices the cost ledger values origin traffic at (docs/operations.md,
//! "The cost ledger"). The defaults are S3 Standard's published request prices
//! (us-east-1), with data transfer free (a cache in the bucket's region).

use serde::{Deserialize, Serialize};

use super::{ConfigError, is_plain_name};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CostConfig {
    /// Price of 1,000 GET requests (HEADs cost the same).
    pub get_per_1000: f64,
    /// Price of 1,000 LIST requests.
    pub list_per_1000: f64,
    /// Price of a GiB read from the origin (0 in the bucket's region).
    pub origin_per_gib: f64,
    /// The currency the prices are in, as the ledger reports it.
    pub currency: String,
    /// Buckets the ledger names; besides these and the buckets `[[rules]]` and
    /// `[[upstreams]]` name exactly, every bucket is counted as "other".
    pub buckets: Vec<String>,
}

impl Default for CostConfig {
    fn default() -> Self {
        Self {
            get_per_1000: 0.0004,
            list_per_1000: 0.005,
            origin_per_gib: 0.0,
            currency: "USD".to_owned(),
            buckets: Vec::new(),
        }
    }
}

/// The most buckets the ledger names: each is a label value of its metrics.
pub const MAX_LEDGER_BUCKETS: usize = 256;

impl CostConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (key, price) in [
            ("get_per_1000", self.get_per_1000),
            ("list_per_1000", self.list_per_1000),
            ("origin_per_gib", self.origin_per_gib),
        ] {
            if !(price.is_finite() && price >= 0.0) {
                return Err(ConfigError::not_accepted(
                    format!("cost.{key}"),
                    price,
                    "a price of 0 or more, like 0.0004",
                ));
            }
        }
        let code = &self.currency;
        if code.is_empty() || code.len() > 8 || !code.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(ConfigError::not_accepted(
                "cost.currency",
                format_args!("{:?}", self.currency),
                "a short code, like \"USD\"",
            ));
        }
        if self.buckets.len() > MAX_LEDGER_BUCKETS {
            return Err(ConfigError::with_detail(
                "cost.buckets",
                format_args!(
                    "{} buckets; at most {MAX_LEDGER_BUCKETS} (each is a metric label value)",
                    self.buckets.len()
                ),
            ));
        }
        if let Some(bad) = self.buckets.iter().find(|bucket| !is_plain_name(bucket)) {
            return Err(ConfigError::with_detail(
                "cost.buckets",
                format_args!("{bad:?} is not a bucket name"),
            ));
        }
        Ok(())
    }
}
