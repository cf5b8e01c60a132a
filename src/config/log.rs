//! `[log]`: log format and level, and the access log.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` for people, `json` (one object per line) for log pipelines.
    pub format: LogFormat,
    /// One more line per S3 request: time, request id, credential, operation, bucket, key,
    /// range, status, bytes, milliseconds and where the bytes came from.
    pub access_log: bool,
}
