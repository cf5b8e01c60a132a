//! The client credentials Portico accepts: one from the configuration, any number from a
//! credentials file that is reloaded when it changes (polled) or on SIGHUP.
//!
//! Invariant: the file's credentials are in force only while the file loads: a file that
//! is deleted or fails to parse revokes them (fails closed, logged as an error) until it
//! loads again. A revoked key must not live on because its file was removed.
//!
//! The file's format, and how it is read and checked, are in `credentials/file.rs`.

mod file;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;
use serde::Deserialize;

pub use file::CredentialsError;
use file::{Loaded, load};

use crate::shutdown::Shutdown;
use crate::tenant::{Tenant, Tenants};

/// What a credential may do: the older, coarse form of [`Scope`]s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    ReadOnly,
    #[default]
    ReadWrite,
}

/// A kind of operation a credential may be allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// Object reads (GET, HEAD, tagging, attributes) and listings.
    Read,
    /// Object writes: PUT, copies, multipart uploads, deletes, tagging.
    Write,
    /// Bucket administration (create, delete, policies, ACLs, lifecycle, versioning and
    /// every other bucket configuration), object ACLs and grants, retention and legal
    /// holds: what changes who may reach data or how long it must be kept.
    Admin,
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
    /// What it may do; when absent: read for a read-only credential, read and write for
    /// one limited to buckets, everything for one that is not.
    #[serde(default)]
    scopes: Option<Vec<Scope>>,
    /// The `[[tenants]]` entry it belongs to; absent: a tenant of its own, named by its
    /// access key id.
    #[serde(default)]
    tenant: Option<String>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("access_key_id", &self.access_key_id)
            .field("access", &self.access)
            .field("buckets", &self.buckets)
            .field("scopes", &self.scopes)
            .field("tenant", &self.tenant)
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
            scopes: None,
            tenant: None,
        }
    }

    /// The name of the tenant its requests are charged to.
    pub fn tenant(&self) -> &str {
        self.tenant.as_deref().unwrap_or(&self.access_key_id)
    }

    /// Whether the credential may send operations of `scope`.
    pub fn allows(&self, scope: Scope) -> bool {
        match &self.scopes {
            Some(scopes) => scopes.contains(&scope),
            None => match (self.access, scope) {
                (_, Scope::Read) => true,
                (Access::ReadOnly, _) => false,
                (Access::ReadWrite, Scope::Write) => true,
                (Access::ReadWrite, Scope::Admin) => self.buckets.is_none(),
            },
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
    tenants: RwLock<Arc<Tenants>>,
}

impl CredentialStore {
    /// A store of the configured credential (if any) and the file's (if any); fails when
    /// the file cannot be loaded at start.
    pub fn open(
        configured: Option<Credential>,
        file: Option<PathBuf>,
    ) -> Result<Self, CredentialsError> {
        let loaded = match &file {
            Some(path) => load(path)?,
            None => Loaded::default(),
        };
        let configured = configured.map(Arc::new);
        let tenants = tenants_of(&loaded, configured.as_deref(), None);
        Ok(Self {
            inner: Arc::new(StoreInner {
                configured,
                file,
                from_file: RwLock::new(Arc::new(loaded.credentials)),
                tenants: RwLock::new(Arc::new(tenants)),
            }),
        })
    }

    /// The tenant `credential`'s requests are charged to; without one, the default.
    pub fn tenant(&self, credential: Option<&Credential>) -> Arc<Tenant> {
        let tenants = self.inner.tenants.read();
        match credential {
            Some(credential) => tenants.get(credential.tenant()),
            None => tenants.default_tenant(),
        }
    }

    /// The tenant named `name`; the default one when no credential or entry names it.
    pub fn tenant_named(&self, name: &str) -> Arc<Tenant> {
        self.inner.tenants.read().get(name)
    }

    pub fn get(&self, access_key_id: &str) -> Option<Arc<Credential>> {
        if let Some(configured) = &self.inner.configured
            && configured.access_key_id == access_key_id
        {
            return Some(configured.clone());
        }
        self.inner.from_file.read().get(access_key_id).cloned()
    }

    /// Reloads the credentials file; on failure its credentials are revoked until it
    /// loads again.
    pub fn reload(&self) {
        let Some(path) = &self.inner.file else {
            return;
        };
        match load(path) {
            Ok(loaded) => {
                let count = loaded.credentials.len();
                let tenants = {
                    let previous = self.inner.tenants.read().clone();
                    tenants_of(&loaded, self.inner.configured.as_deref(), Some(&previous))
                };
                *self.inner.from_file.write() = Arc::new(loaded.credentials);
                *self.inner.tenants.write() = Arc::new(tenants);
                tracing::info!(path = %path.display(), count, "credentials file loaded");
            }
            Err(error) => {
                let revoked = std::mem::take(&mut *self.inner.from_file.write()).len();
                tracing::error!(%error, revoked, "credentials file failed to load: its credentials are refused until it loads again");
            }
        }
    }

    /// Reloads the credentials file whenever it changes or SIGHUP arrives, until
    /// `shutdown`.
    pub fn watch(&self, shutdown: Shutdown) {
        let Some(path) = self.inner.file.clone() else {
            return;
        };
        let store = self.clone();
        crate::reload::on_change(vec![path], shutdown, move || store.reload());
    }
}

/// The tenants of `loaded` and of every credential in force.
fn tenants_of(
    loaded: &Loaded,
    configured: Option<&Credential>,
    previous: Option<&Tenants>,
) -> Tenants {
    let members = loaded
        .credentials
        .values()
        .map(|credential| credential.tenant())
        .chain(configured.map(Credential::tenant));
    Tenants::new(&loaded.tenants, members, previous)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::file::parse;
    use super::*;
    use crate::tenant::TenantSpec;

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
        let credentials = parse(Path::new("c.toml"), text).unwrap().credentials;
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
    fn credentials_join_tenants_and_each_other_one_is_a_tenant_of_its_own() {
        let text = r#"
[[tenants]]
name = "training"
max_bytes_per_second = "100MiB"
max_concurrent_fills = 8
weight = 2

[[tenants]]
name = "notebook"
max_requests_per_second = 50

[[credentials]]
access_key_id = "trainer-1"
secret_access_key = "s"
tenant = "training"

[[credentials]]
access_key_id = "trainer-2"
secret_access_key = "s"
tenant = "training"

[[credentials]]
access_key_id = "notebook"
secret_access_key = "s"

[[credentials]]
access_key_id = "loner"
secret_access_key = "s"
"#;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("credentials.toml");
        std::fs::write(&path, text).unwrap();
        let store = CredentialStore::open(Some(Credential::new("root", "r")), Some(path)).unwrap();
        let tenant_of = |id: &str| store.tenant(store.get(id).as_deref());
        let training = tenant_of("trainer-1");
        assert_eq!(training.name(), "training");
        assert!(Arc::ptr_eq(&training, &tenant_of("trainer-2")), "one group");
        assert_eq!(training.weight(), 2);
        assert_eq!(training.max_concurrent_fills(), Some(8));
        assert_eq!(
            training.spec().max_bytes_per_second,
            Some(crate::config::ByteSize::mib(100))
        );
        // A [[tenants]] entry named like a credential sets that credential's limits.
        assert_eq!(
            tenant_of("notebook").spec().max_requests_per_second,
            Some(50)
        );
        assert_eq!(tenant_of("loner").name(), "loner");
        assert_eq!(tenant_of("loner").spec(), &TenantSpec::unlimited("loner"));
        assert_eq!(tenant_of("root").name(), "root");
        assert_eq!(store.tenant(None).name(), crate::tenant::DEFAULT_TENANT);

        for (bad, expected) in [
            (
                "[[credentials]]\naccess_key_id = \"a\"\nsecret_access_key = \"s\"\ntenant = \"ghost\"\n",
                "no [[tenants]] entry",
            ),
            (
                "[[tenants]]\nname = \"t\"\n[[tenants]]\nname = \"t\"\n",
                "appears twice",
            ),
            ("[[tenants]]\nname = \"t\"\nweight = 0\n", "weight"),
            (
                "[[tenants]]\nname = \"t\"\nmax_fills = 3\n",
                "unknown field",
            ),
        ] {
            let error = parse(Path::new("c.toml"), bad).unwrap_err().to_string();
            assert!(error.contains(expected), "{bad}: {error}");
        }
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
    fn scopes_default_from_access_and_bucket_limits() {
        let text = r#"
[[credentials]]
access_key_id = "reader"
secret_access_key = "s"
access = "read-only"

[[credentials]]
access_key_id = "limited"
secret_access_key = "s"
buckets = ["data"]

[[credentials]]
access_key_id = "operator"
secret_access_key = "s"
buckets = ["data"]
scopes = ["read", "admin"]

[[credentials]]
access_key_id = "root"
secret_access_key = "s"
"#;
        let credentials = parse(Path::new("c.toml"), text).unwrap().credentials;
        let allowed = |id: &str| {
            [Scope::Read, Scope::Write, Scope::Admin]
                .into_iter()
                .filter(|scope| credentials[id].allows(*scope))
                .collect::<Vec<_>>()
        };
        assert_eq!(allowed("reader"), [Scope::Read]);
        assert_eq!(allowed("limited"), [Scope::Read, Scope::Write]);
        assert_eq!(allowed("operator"), [Scope::Read, Scope::Admin]);
        assert_eq!(allowed("root"), [Scope::Read, Scope::Write, Scope::Admin]);
        let contradiction = "[[credentials]]\naccess_key_id = \"a\"\nsecret_access_key = \"s\"\naccess = \"read-only\"\nscopes = [\"write\"]\n";
        assert!(parse(Path::new("c.toml"), contradiction).is_err());
        let unknown = "[[credentials]]\naccess_key_id = \"a\"\nsecret_access_key = \"s\"\nscopes = [\"delete\"]\n";
        assert!(parse(Path::new("c.toml"), unknown).is_err());
    }

    #[test]
    fn a_broken_or_deleted_file_revokes_its_credentials_until_it_loads_again() {
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
        assert!(store.get("a").is_none(), "a broken file fails closed");
        assert!(
            store.get("configured").is_some(),
            "the configured one stays"
        );
        std::fs::write(
            &path,
            "[[credentials]]\naccess_key_id = \"a\"\nsecret_access_key = \"s\"\n",
        )
        .unwrap();
        store.reload();
        assert!(store.get("a").is_some(), "back once the file loads");
        std::fs::remove_file(&path).unwrap();
        store.reload();
        assert!(store.get("a").is_none(), "a deleted file fails closed");
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
