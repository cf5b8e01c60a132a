//! A local SQS server for the event-notification tests: moto's server mode (PyPI `moto`,
//! installed by `make test` into ~/.cache/portico-tools), on a free loopback port,
//! stopped when dropped.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::minio::free_port;

pub struct SqsServer {
    pub endpoint: String,
    _child: Child,
}

/// `PORTICO_MOTO_SERVER`, or the moto server `make test` installed.
fn moto_server() -> PathBuf {
    if let Some(path) = std::env::var_os("PORTICO_MOTO_SERVER") {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("HOME").expect("HOME is not set");
    PathBuf::from(home).join(".cache/portico-tools/python-moto-5.2.5/bin/moto_server")
}

impl SqsServer {
    pub async fn start() -> Self {
        let binary = moto_server();
        assert!(
            binary.exists(),
            "{} is not installed: run `make test` (it installs it) or set PORTICO_MOTO_SERVER",
            binary.display()
        );
        let port = free_port();
        let child = Command::new(&binary)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("cannot start the moto server");
        let address = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        while tokio::net::TcpStream::connect(&address).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "the moto server did not listen on {address}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self {
            endpoint: format!("http://{address}"),
            _child: child,
        }
    }
}
