//! The client credentials Portico accepts: one from the configuration, any number from a
//! credentials file that is reloaded when it changes (polled) or on SIGHUP.
//!
//! Invariant: a credentials file that fails to load or parse never replaces the working
//! set; the error is logged and the previous credentials stay in force.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use serde::Deserialize;

/// How often the credentials file is checked for changes.
/// What a credential may do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    ReadOnly,
    #[default]
    ReadWrite,
}

/// One client credential.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credential {
    pub access_key_id: String,
    secret_access_key: String,
    #[serde(default)]
    pub access: Access,
    /// The buckets it may address; every bucket when absent.
    #[serde(default)]
    pub buckets: Option<Vec<String>>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("access_key_id", &self.access_key_id)
            .field("access", &self.access)
            .field("buckets", &self.buckets)
            .finish_non_exhaustive()
    }
}

impl Credential {
    pub fn new(access_key_id: &str, secret_access_key: &str) -> Self {
        Self {
            access_key_id: access_key_id.to_owned(),
            secret_access_key: secret_access_key.to_owned(),
            access: Access::ReadWrite,
            buckets: None,
        }
    }

    pub fn secret(&self) -> &str {
        &self.secret_access_key
    }

    pub fn may_address(&self, bucket: &str) -> bool {
        self.buckets
            .as_ref()
            .is_none_or(|buckets| buckets.iter().any(|allowed| allowed == bucket))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialsFile {
    #[serde(default)]
    credentials: Vec<Credential>,
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("cannot read the credentials file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid credentials file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// Parses a credentials file's text.
fn parse(path: &Path, text: &str) -> Result<HashMap<String, Arc<Credential>>, CredentialsError> {
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
        let id = credential.access_key_id.clone();
        if credentials
            .insert(id.clone(), Arc::new(credential))
            .is_some()
        {
            return Err(invalid(format!("access key id {id} appears twice")));
        }
    }
    Ok(credentials)
}

fn load(path: &Path) -> Result<HashMap<String, Arc<Credential>>, CredentialsError> {
    let text = std::fs::read_to_string(path).map_err(|source| CredentialsError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(path, &text)
}

/// When and how large the file was when last loaded: a change of either reloads it.
/// The credentials in force. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct CredentialStore {
    inner: Arc<StoreInner>,
}

#[derive(Debug, Default)]
struct StoreInner {
    configured: Option<Arc<Credential>>,
    file: Option<PathBuf>,
    from_file: RwLock<Arc<HashMap<String, Arc<Credential>>>>,
}

impl CredentialStore {
    /// A store of the configured credential (if any) and the file's (if any); fails when
    /// the file cannot be loaded at start.
    pub fn open(
        configured: Option<Credential>,
        file: Option<PathBuf>,
    ) -> Result<Self, CredentialsError> {
        let from_file = match &file {
            Some(path) => load(path)?,
            None => HashMap::new(),
        };
        Ok(Self {
            inner: Arc::new(StoreInner {
                configured: configured.map(Arc::new),
                file,
                from_file: RwLock::new(Arc::new(from_file)),
            }),
        })
    }

    pub fn get(&self, access_key_id: &str) -> Option<Arc<Credential>> {
        if let Some(configured) = &self.inner.configured
            && configured.access_key_id == access_key_id
        {
            return Some(configured.clone());
        }
        self.inner.from_file.read().get(access_key_id).cloned()
    }

    /// Reloads the credentials file; on failure the current credentials stay.
    pub fn reload(&self) {
        let Some(path) = &self.inner.file else {
            return;
        };
        match load(path) {
            Ok(credentials) => {
                let count = credentials.len();
                *self.inner.from_file.write() = Arc::new(credentials);
                tracing::info!(path = %path.display(), count, "credentials file loaded");
            }
            Err(error) => {
                tracing::error!(%error, "credentials file not reloaded; the previous credentials stay in force");
            }
        }
    }

    /// Reloads the credentials file whenever it changes or SIGHUP arrives, until the
    /// runtime stops.
    pub fn watch(&self) {
        let Some(path) = self.inner.file.clone() else {
            return;
        };
        let store = self.clone();
        crate::reload::on_change(vec![path], move || store.reload());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credentials_file_is_parsed_with_limits() {
        let text = r#"
[[credentials]]
access_key_id = "reader"
secret_access_key = "s1"
access = "read-only"
buckets = ["datasets"]

[[credentials]]
access_key_id = "writer"
secret_access_key = "s2"
"#;
        let credentials = parse(Path::new("c.toml"), text).unwrap();
        let reader = &credentials["reader"];
        assert_eq!(reader.access, Access::ReadOnly);
        assert!(reader.may_address("datasets"));
        assert!(!reader.may_address("other"));
        let writer = &credentials["writer"];
        assert_eq!(writer.access, Access::ReadWrite);
        assert!(writer.may_address("anything"));
        assert_eq!(writer.secret(), "s2");
        assert!(
            !format!("{writer:?}").contains("s2"),
            "secrets stay out of logs"
        );
    }

    #[test]
    fn invalid_credentials_files_are_refused() {
        for text in [
            "[[credentials]]\naccess_key_id = \"a\"\n",
            "[[credentials]]\naccess_key_id = \"a\"\nsecret_access_key = \"\"\n",
            "[[credentials]]\naccess_key_id = \"a\"\nsecret_access_key = \"s\"\naccess = \"admin\"\n",
            "[[credentials]]\naccess_key_id = \"a\"\nsecret_access_key = \"s\"\n[[credentials]]\naccess_key_id = \"a\"\nsecret_access_key = \"t\"\n",
            "[[credential]]\n",
        ] {
            assert!(parse(Path::new("c.toml"), text).is_err(), "{text}");
        }
    }

    #[test]
    fn a_broken_reload_keeps_the_previous_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("credentials.toml");
        std::fs::write(
            &path,
            "[[credentials]]\naccess_key_id = \"a\"\nsecret_access_key = \"s\"\n",
        )
        .unwrap();
        let store =
            CredentialStore::open(Some(Credential::new("configured", "c")), Some(path.clone()))
                .unwrap();
        assert!(store.get("a").is_some());
        assert!(store.get("configured").is_some());
        std::fs::write(&path, "not toml [").unwrap();
        store.reload();
        assert!(store.get("a").is_some());
        std::fs::write(
            &path,
            "[[credentials]]\naccess_key_id = \"b\"\nsecret_access_key = \"s\"\n",
        )
        .unwrap();
        store.reload();
        assert!(store.get("a").is_none());
        assert!(store.get("b").is_some());
        assert!(store.get("nobody").is_none());
    }
}
