//! TLS material that is replaced while serving: a certificate with its key, and the CA
//! that members of a fleet check each other against. Each handshake takes what is in force
//! at that moment, so a reload (file change or SIGHUP) reaches new connections while open
//! ones carry on undisturbed; material that fails to load leaves the previous in force.

mod mutual;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use portico_http_client::{TlsError, read_certificates};
use rustls::SignatureScheme;
use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

pub use mutual::MutualTls;

/// The crypto every TLS endpoint of Portico uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A PEM certificate chain and its private key, loaded from files and reloaded on demand.
/// Serves as the server's certificate and as the client's.
#[derive(Debug)]
pub struct ReloadingCertificate {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
}

impl ReloadingCertificate {
    /// Loads the pair; fails when either is unusable or they do not belong together.
    pub fn load(
        cert_path: &Path,
        key_path: &Path,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, TlsError> {
        let current = load_certified_key(cert_path, key_path, &provider)?;
        Ok(Self {
            cert_path: cert_path.to_owned(),
            key_path: key_path.to_owned(),
            provider,
            current: RwLock::new(Arc::new(current)),
        })
    }

    /// The files to watch for a change.
    pub fn paths(&self) -> Vec<PathBuf> {
        vec![self.cert_path.clone(), self.key_path.clone()]
    }

    /// The pair in force.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.read().clone()
    }

    /// Loads the pair again; on failure the current pair stays.
    pub fn reload(&self) {
        match load_certified_key(&self.cert_path, &self.key_path, &self.provider) {
            Ok(loaded) => {
                *self.current.write() = Arc::new(loaded);
                tracing::info!(cert = %self.cert_path.display(), "TLS certificate loaded");
            }
            // Cert and key are often replaced one after the other: the next change or
            // poll picks up the matching pair.
            Err(error) => tracing::error!(
                %error,
                "TLS certificate not reloaded; the previous certificate stays in force"
            ),
        }
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ResolvesClientCert for ReloadingCertificate {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn load_certified_key(
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = read_certificates(cert_path)?;
    let invalid_key = |reason: String| TlsError::Invalid {
        path: key_path.to_owned(),
        reason,
    };
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|error| match error {
        rustls::pki_types::pem::Error::Io(source) => TlsError::Read {
            path: key_path.to_owned(),
            source,
        },
        other => invalid_key(other.to_string()),
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|error| {
        invalid_key(format!(
            "does not match the certificate in {}: {error}",
            cert_path.display()
        ))
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A self-signed certificate for `name` and its key, written to `dir`.
    pub fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let (cert_path, key_path) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }

    fn served(certificate: &ReloadingCertificate) -> Vec<u8> {
        certificate.current().cert[0].to_vec()
    }

    #[test]
    fn a_reload_replaces_the_certificate_and_a_broken_one_keeps_the_old() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_path, key_path) = write_pair(dir.path(), "first.test");
        let certificate = ReloadingCertificate::load(&cert_path, &key_path, provider()).unwrap();
        let first = served(&certificate);

        write_pair(dir.path(), "second.test");
        certificate.reload();
        let second = served(&certificate);
        assert_ne!(first, second);

        std::fs::write(&key_path, "garbage").unwrap();
        certificate.reload();
        assert_eq!(served(&certificate), second);
    }

    #[test]
    fn a_key_that_does_not_match_the_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_path, _) = write_pair(dir.path(), "a.test");
        let other = tempfile::tempdir().unwrap();
        let (_, other_key) = write_pair(other.path(), "b.test");
        let error = ReloadingCertificate::load(&cert_path, &other_key, provider())
            .err()
            .unwrap();
        assert!(error.to_string().contains("does not match"), "{error}");
        let missing = dir.path().join("missing.key");
        assert!(ReloadingCertificate::load(&cert_path, &missing, provider()).is_err());
    }
}
