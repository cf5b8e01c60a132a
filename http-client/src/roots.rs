//! Trust roots for upstream TLS. The system bundle is found the way OpenSSL-based tools
//! find it (`SSL_CERT_FILE`, else the distribution's well-known path); an extra CA file
//! (a private S3 endpoint's CA) is added on top and must parse completely.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// Where Linux distributions keep their PEM CA bundle, most common first.
pub const SYSTEM_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The certificates upstream TLS trusts, and where they came from.
#[derive(Debug, Clone)]
pub struct TrustRoots {
    store: RootCertStore,
    /// The system bundle that was loaded, if one was found.
    pub system_bundle: Option<PathBuf>,
    /// How many certificates the extra CA file contributed.
    pub extra_certificates: usize,
}

impl TrustRoots {
    /// The system bundle (unless `system` is false) plus every certificate of `extra_ca_file`.
    pub fn load(system: bool, extra_ca_file: Option<&Path>) -> Result<Self, TlsError> {
        let mut store = RootCertStore::empty();
        let system_bundle = if system {
            load_system_bundle(&mut store)
        } else {
            None
        };
        let mut extra_certificates = 0;
        if let Some(path) = extra_ca_file {
            for certificate in read_certificates(path)? {
                store.add(certificate).map_err(|error| TlsError::Invalid {
                    path: path.to_owned(),
                    reason: error.to_string(),
                })?;
                extra_certificates += 1;
            }
        }
        Ok(Self {
            store,
            system_bundle,
            extra_certificates,
        })
    }

    pub fn len(&self) -> usize {
        self.store.len()
    }

    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// A client configuration (TLS 1.2 and 1.3, aws-lc-rs) that trusts these roots.
    pub fn client_config(&self) -> Result<rustls::ClientConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        Ok(rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(self.store.clone())
            .with_no_client_auth())
    }
}

fn load_system_bundle(store: &mut RootCertStore) -> Option<PathBuf> {
    let path = match std::env::var_os("SSL_CERT_FILE") {
        Some(path) => PathBuf::from(path),
        None => SYSTEM_CA_BUNDLES
            .iter()
            .map(PathBuf::from)
            .find(|path| path.is_file())?,
    };
    let certificates = match CertificateDer::pem_file_iter(&path) {
        Ok(certificates) => certificates.filter_map(Result::ok),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot read the system CA bundle");
            return None;
        }
    };
    // Distribution bundles carry the odd certificate rustls rejects; skipping it is what
    // every TLS client does.
    let (added, ignored) = store.add_parsable_certificates(certificates);
    tracing::debug!(path = %path.display(), added, ignored, "system CA bundle loaded");
    Some(path)
}

/// Every PEM certificate in `path`; fails unless there is at least one and all parse.
pub fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let text = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    let certificates = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::Invalid {
            path: path.to_owned(),
            reason: error.to_string(),
        })?;
    if certificates.is_empty() {
        return Err(TlsError::Invalid {
            path: path.to_owned(),
            reason: "no PEM certificate in it".to_owned(),
        });
    }
    Ok(certificates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn an_extra_ca_file_adds_every_certificate_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, format!("{}{}", ca_pem(), ca_pem())).unwrap();
        let roots = TrustRoots::load(false, Some(&path)).unwrap();
        assert_eq!(roots.extra_certificates, 2);
        assert_eq!(roots.len(), 2);
        assert!(roots.client_config().is_ok());
    }

    #[test]
    fn a_ca_file_without_certificates_or_missing_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        assert!(matches!(
            TrustRoots::load(false, Some(&path)),
            Err(TlsError::Invalid { .. })
        ));
        assert!(matches!(
            TrustRoots::load(false, Some(&dir.path().join("missing.pem"))),
            Err(TlsError::Read { .. })
        ));
    }

    #[test]
    fn the_system_bundle_of_this_machine_is_found() {
        if SYSTEM_CA_BUNDLES
            .iter()
            .all(|path| !Path::new(path).is_file())
        {
            return;
        }
        let roots = TrustRoots::load(true, None).unwrap();
        assert!(roots.system_bundle.is_some());
        assert!(roots.len() > 10, "only {} system roots", roots.len());
    }
}
