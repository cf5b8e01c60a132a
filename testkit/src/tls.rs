//! Certificates for a fleet whose members speak mutual TLS (`cluster.tls_*`): one CA, and
//! a certificate for each member issued by it, all written to a directory of their own.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Whether the cluster tests run their fleets with mutual TLS between members
/// (`PORTICO_TEST_PEER_TLS=1`; `make test` runs them both ways).
pub fn peer_tls_from_env() -> bool {
    std::env::var("PORTICO_TEST_PEER_TLS").is_ok_and(|value| value == "1")
}

/// A fleet's CA and the files of what it issued.
pub struct FleetCa {
    key: rcgen::KeyPair,
    certificate: rcgen::Certificate,
    dir: tempfile::TempDir,
    issued: AtomicUsize,
}

/// The PEM files of one member's certificate.
#[derive(Debug, Clone)]
pub struct MemberFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl MemberFiles {
    /// The `[cluster]` lines that make a member use these files.
    pub fn cluster_lines(&self) -> String {
        format!(
            "tls_cert = {:?}\ntls_key = {:?}\ntls_ca = {:?}\n",
            self.cert.display().to_string(),
            self.key.display().to_string(),
            self.ca.display().to_string()
        )
    }
}

impl FleetCa {
    pub fn new() -> Self {
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let mut name = rcgen::DistinguishedName::new();
        name.push(rcgen::DnType::CommonName, "Portico test fleet CA");
        params.distinguished_name = name;
        let certificate = params.self_signed(&key).expect("CA certificate");
        let dir = tempfile::tempdir().expect("certificate directory");
        std::fs::write(dir.path().join("ca.crt"), certificate.pem()).expect("write the CA");
        Self {
            key,
            certificate,
            dir,
            issued: AtomicUsize::new(0),
        }
    }

    /// The CA certificate's file.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// Issues a member certificate for `names` (IP addresses or DNS names).
    pub fn issue(&self, names: &[&str]) -> MemberFiles {
        let serial = self.issued.fetch_add(1, Ordering::Relaxed);
        let key = rcgen::KeyPair::generate().expect("member key");
        let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        let params = rcgen::CertificateParams::new(names).expect("member names");
        let certificate = params
            .signed_by(&key, &self.certificate, &self.key)
            .expect("member certificate");
        let file = |extension: &str| -> PathBuf {
            self.dir.path().join(format!("member-{serial}.{extension}"))
        };
        write(&file("key"), &key.serialize_pem());
        write(&file("crt"), &certificate.pem());
        MemberFiles {
            cert: file("crt"),
            key: file("key"),
            ca: self.ca(),
        }
    }
}

impl Default for FleetCa {
    fn default() -> Self {
        Self::new()
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
}
