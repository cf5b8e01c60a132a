//! Reloading from files while serving: a file set is polled for changes (modification
//! time and length, so a replaced Kubernetes secret is seen too) and SIGHUP forces a
//! reload. The reload callback decides what a broken file means; the watcher only calls it.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::signal::unix::{SignalKind, signal};

use crate::shutdown::Shutdown;

/// How often watched files are checked for changes.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

fn stamps(paths: &[PathBuf]) -> Vec<Stamp> {
    paths.iter().map(|path| stamp(path)).collect()
}

/// Calls `reload` whenever one of `paths` changes or SIGHUP arrives, until `shutdown`.
/// Must be called inside a Tokio runtime.
pub fn on_change(paths: Vec<PathBuf>, shutdown: Shutdown, reload: impl Fn() + Send + 'static) {
    tokio::spawn(async move {
        let mut hangups = signal(SignalKind::hangup()).ok();
        let mut last = stamps(&paths);
        let mut ticks = tokio::time::interval(POLL_INTERVAL);
        loop {
            let hangup = async {
                match hangups.as_mut() {
                    Some(signals) => signals.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = ticks.tick() => {
                    let now = stamps(&paths);
                    if now != last {
                        last = now;
                        reload();
                    }
                }
                _ = hangup => {
                    last = stamps(&paths);
                    reload();
                }
                () = shutdown.fired() => return,
            }
        }
    });
}
