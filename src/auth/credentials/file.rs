//! The credentials file: what it may hold (`[[credentials]]` and `[[tenants]]`), and
//! reading and checking it.
//!
//! Invariant: a file is taken whole or not at all: one invalid entry (a credential
//! without its secret, a key id or tenant named twice, a credential of a tenant no
//! `[[tenants]]` entry defines) refuses the file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::{Access, Credential, Scope};
use crate::tenant::TenantSpec;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialsFile {
    #[serde(default)]
    credentials: Vec<Credential>,
    #[serde(default)]
    tenants: Vec<TenantSpec>,
}

/// What a credentials file defines.
#[derive(Debug, Default)]
pub(super) struct Loaded {
    pub(super) credentials: HashMap<String, Arc<Credential>>,
    pub(super) tenants: Vec<TenantSpec>,
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The I/O error is part of the message, not a source a chain printer would repeat.
    #[error("cannot read the credentials file {path} (config key auth.credentials_file): {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("invalid credentials file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// Parses a credentials file's text.
pub(super) fn parse(path: &Path, text: &str) -> Result<Loaded, CredentialsError> {
    let invalid = |message: String| CredentialsError::Invalid {
        path: path.to_owned(),
        message,
    };
    let file: CredentialsFile = toml::from_str(text).map_err(|error| invalid(error.to_string()))?;
    let mut credentials = HashMap::new();
    for credential in file.credentials {
        if credential.access_key_id.is_empty() || credential.secret_access_key.is_empty() {
            return Err(invalid(
                "every credential needs access_key_id and secret_access_key".to_owned(),
            ));
        }
        if credential.access == Access::ReadOnly
            && credential
                .scopes
                .as_ref()
                .is_some_and(|scopes| scopes.iter().any(|scope| *scope != Scope::Read))
        {
            return Err(invalid(format!(
                "credential {}: access = \"read-only\" allows only the read scope",
                credential.access_key_id
            )));
        }
        let id = credential.access_key_id.clone();
        if credentials
            .insert(id.clone(), Arc::new(credential))
            .is_some()
        {
            return Err(invalid(format!("access key id {id} appears twice")));
        }
    }
    let mut names = std::collections::HashSet::new();
    for tenant in &file.tenants {
        if let Some(problem) = tenant.problem() {
            return Err(invalid(problem));
        }
        if !names.insert(tenant.name.as_str()) {
            return Err(invalid(format!("tenant {} appears twice", tenant.name)));
        }
    }
    for credential in credentials.values() {
        if let Some(tenant) = &credential.tenant
            && !names.contains(tenant.as_str())
        {
            return Err(invalid(format!(
                "credential {}: tenant {tenant:?} has no [[tenants]] entry",
                credential.access_key_id
            )));
        }
    }
    Ok(Loaded {
        credentials,
        tenants: file.tenants,
    })
}

pub(super) fn load(path: &Path) -> Result<Loaded, CredentialsError> {
    let text = std::fs::read_to_string(path).map_err(|cause| CredentialsError::Read {
        path: path.to_owned(),
        cause,
    })?;
    parse(path, &text)
}
