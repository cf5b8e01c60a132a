//! `[auth]`: how S3 clients authenticate.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ConfigError;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Every request must carry a valid AWS Signature V4 of a configured credential.
    #[default]
    Sigv4,
    /// Requests are accepted without verifying their signature (trusted sidecars only).
    None,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    pub mode: AuthMode,
    /// One client credential (read-write, every bucket).
    pub access_key_id: String,
    pub secret_access_key: String,
    /// A TOML file of `[[credentials]]`, reloaded when it changes; empty for none.
    pub credentials_file: PathBuf,
    /// The region clients sign their requests for; empty means `upstream.region`.
    pub region: String,
}

impl AuthConfig {
    /// Client credentials: both halves, and some for SigV4.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let auth = self;
        if auth.access_key_id.is_empty() != auth.secret_access_key.is_empty() {
            return Err(ConfigError::keys(
                ["auth.access_key_id", "auth.secret_access_key"],
                "set both, or neither",
            ));
        }
        if auth.mode == AuthMode::Sigv4
            && auth.access_key_id.is_empty()
            && auth.credentials_file.as_os_str().is_empty()
        {
            return Err(ConfigError::with_detail(
                "auth.mode",
                "\"sigv4\" needs client credentials (set auth.access_key_id and auth.secret_access_key, or auth.credentials_file), or set auth.mode = \"none\" for a trusted sidecar",
            ));
        }
        Ok(())
    }
}
