//! What the cache knows about its disk: whether the file system takes `O_DIRECT` (probed
//! once at open), and whether the disk still works — failed reads counted in a row, and a
//! probe that writes, syncs and reads back a small file every [`DISK_PROBE_INTERVAL`] —
//! until persistent errors turn the tier off (degraded mode).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::{BlockCache, layout};
use crate::telemetry::Metrics;

/// How often the disk tier's directory is checked with a probe write and read-back.
pub const DISK_PROBE_INTERVAL: Duration = Duration::from_secs(10);
/// Failed disk reads in a row, or failed probes in a row, that turn the disk tier off.
pub const DISK_FAILURES_BEFORE_DEGRADED: u32 = 3;
/// The first re-probe after a failure; each later one waits twice as long, up to
/// [`DISK_PROBE_INTERVAL`].
const DISK_RETRY_BACKOFF: Duration = Duration::from_secs(1);
/// The probe file, next to foyer's own files in `cache.dir`.
pub(super) const PROBE_FILE: &str = "portico-disk-probe";
/// Created and removed at start to learn whether the disk tier's file system takes
/// `O_DIRECT`.
pub(super) const DIRECT_PROBE_FILE: &str = "portico-direct-io-probe";

/// Whether the file system under `dir` (created if missing) accepts `O_DIRECT`. Some do
/// not (tmpfs before Linux 6.6, some network file systems); then the disk tier uses
/// buffered I/O and says so.
pub(super) fn supports_direct_io(dir: &Path) -> std::io::Result<bool> {
    use rustix::fs::{Mode, OFlags};
    std::fs::create_dir_all(dir)?;
    let path = dir.join(DIRECT_PROBE_FILE);
    let flags = OFlags::CREATE | OFlags::WRONLY | OFlags::DIRECT | OFlags::CLOEXEC;
    let opened = rustix::fs::open(&path, flags, Mode::from_raw_mode(0o600));
    let _ = std::fs::remove_file(&path);
    let direct = direct_io_from_probe(opened.map(drop))?;
    if !direct {
        tracing::warn!(dir = %dir.display(), "the file system refuses direct I/O (O_DIRECT); the disk tier uses buffered I/O");
    }
    Ok(direct)
}

/// What opening a file with `O_DIRECT` says: `EINVAL` is the file system refusing the
/// flag; any other error is a directory Portico cannot use at all.
fn direct_io_from_probe(opened: rustix::io::Result<()>) -> std::io::Result<bool> {
    match opened {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::INVAL) => Ok(false),
        Err(error) => Err(error.into()),
    }
}

/// Whether the disk tier is in use, and why not.
pub(super) struct DiskHealth {
    degraded: AtomicBool,
    reason: Mutex<Option<String>>,
    metrics: Arc<Metrics>,
    /// Failed reads since the last successful one.
    failed_reads: AtomicU32,
    /// Failed probes since the last successful one.
    failed_probes: AtomicU32,
    /// Wakes the probe early after a failed read.
    probe_now: tokio::sync::Notify,
    /// Ends the probe: the cache is closing.
    closing: tokio::sync::Notify,
}

impl DiskHealth {
    /// Why the disk tier was turned off, once it has been.
    pub(super) fn reason(&self) -> Option<String> {
        self.reason.lock().clone()
    }

    pub(super) fn is_degraded(&self) -> bool {
        self.degraded.load(Ordering::Acquire)
    }

    /// Ends the probe task (the cache is closing). A permit, so a probe round under way
    /// sees it when it next waits.
    pub(super) fn stop_probe(&self) {
        self.closing.notify_one();
    }

    pub(super) fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            degraded: AtomicBool::new(false),
            reason: Mutex::new(None),
            metrics,
            failed_reads: AtomicU32::new(0),
            failed_probes: AtomicU32::new(0),
            probe_now: tokio::sync::Notify::new(),
            closing: tokio::sync::Notify::new(),
        }
    }

    /// Records a disk I/O error; the tier turns off once errors of the same kind persist.
    pub(super) fn failed(&self, operation: &'static str, error: &dyn std::fmt::Display) {
        self.metrics.count_disk_error(operation);
        let in_a_row = match operation {
            "read" => &self.failed_reads,
            _ => &self.failed_probes,
        };
        let failures = in_a_row.fetch_add(1, Ordering::AcqRel) + 1;
        if failures < DISK_FAILURES_BEFORE_DEGRADED {
            tracing::warn!(operation, failures, %error, "disk I/O error; the disk tier stays on unless it persists");
            self.probe_now.notify_one();
            return;
        }
        if self.degraded.swap(true, Ordering::AcqRel) {
            return;
        }
        let reason = format!("disk {operation} failed: {error}");
        tracing::error!(%reason, failures, "disk tier turned off after persistent I/O errors; the cache runs memory-only (degraded) until restarted");
        self.metrics.cache_degraded.set(1);
        *self.reason.lock() = Some(reason);
    }

    pub(super) fn read_succeeded(&self) {
        if self.failed_reads.load(Ordering::Relaxed) != 0 {
            self.failed_reads.store(0, Ordering::Release);
        }
    }

    fn probe_succeeded(&self) {
        self.failed_probes.store(0, Ordering::Release);
    }

    /// How long the probe waits before its next round: the interval while all is well,
    /// a doubling back-off from [`DISK_RETRY_BACKOFF`] while failures are unresolved.
    fn next_probe_after(&self) -> Duration {
        let failures = self
            .failed_probes
            .load(Ordering::Acquire)
            .max(self.failed_reads.load(Ordering::Acquire));
        if failures == 0 {
            return DISK_PROBE_INTERVAL;
        }
        DISK_RETRY_BACKOFF
            .saturating_mul(1 << (failures - 1).min(8))
            .min(DISK_PROBE_INTERVAL)
    }
}

impl BlockCache {
    /// Writes, syncs and reads back a small file in the cache directory every
    /// [`DISK_PROBE_INTERVAL`], so a disk that fails writes (full, read-only, I/O errors)
    /// turns the tier off even while every read hits memory. Ends when the cache closes.
    pub(super) fn spawn_disk_probe(&self, path: PathBuf) {
        let weak = Arc::downgrade(&self.health);
        tokio::spawn(async move {
            let mut round: u64 = 0;
            loop {
                // Held for one round only: the task ends once the cache is gone.
                let Some(health) = weak.upgrade() else {
                    return;
                };
                // A failed read brings the probe forward to the back-off.
                tokio::select! {
                    () = tokio::time::sleep(health.next_probe_after()) => {}
                    () = health.probe_now.notified() => {
                        tokio::time::sleep(health.next_probe_after()).await;
                    }
                    () = health.closing.notified() => return,
                }
                if health.degraded.load(Ordering::Acquire) {
                    return;
                }
                round += 1;
                let path = path.clone();
                let probe = tokio::task::spawn_blocking(move || probe_disk(&path, round)).await;
                match probe {
                    Ok(Ok(())) => health.probe_succeeded(),
                    Ok(Err(error)) => health.failed("write", &error),
                    Err(error) => health.failed("write", &error),
                }
            }
        });
    }
}

/// One disk probe: write a page naming `round`, sync it, read it back.
fn probe_disk(path: &Path, round: u64) -> std::io::Result<()> {
    use std::io::Write;
    let page: Vec<u8> = round
        .to_le_bytes()
        .iter()
        .copied()
        .cycle()
        .take(layout::PAGE_BYTES as usize)
        .collect();
    let mut file = std::fs::File::create(path)?;
    file.write_all(&page)?;
    file.sync_all()?;
    let read = std::fs::read(path)?;
    if read != page {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} read back different bytes", path.display()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_system_refusing_direct_io_gets_buffered_io() {
        use rustix::io::Errno;
        assert!(direct_io_from_probe(Ok(())).unwrap());
        // EINVAL is how open(2) says the file system does not do O_DIRECT.
        assert!(!direct_io_from_probe(Err(Errno::INVAL)).unwrap());
        let error = direct_io_from_probe(Err(Errno::ACCESS)).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::PermissionDenied);
        // A directory that cannot be created is an error, not a fallback.
        let file = tempfile::NamedTempFile::new().unwrap();
        assert!(supports_direct_io(&file.path().join("below-a-file")).is_err());
    }

    #[test]
    fn a_transient_disk_error_is_retried_with_back_off_not_fatal() {
        let health = DiskHealth::new(Arc::new(Metrics::new()));
        assert_eq!(health.next_probe_after(), DISK_PROBE_INTERVAL);
        for _ in 1..DISK_FAILURES_BEFORE_DEGRADED {
            health.failed("read", &"I/O error");
        }
        assert!(!health.is_degraded());
        assert_eq!(health.next_probe_after(), 2 * DISK_RETRY_BACKOFF);
        // A good read in between: the next errors start counting again.
        health.read_succeeded();
        assert_eq!(health.next_probe_after(), DISK_PROBE_INTERVAL);
        health.failed("read", &"I/O error");
        assert!(!health.is_degraded());
        assert_eq!(health.next_probe_after(), DISK_RETRY_BACKOFF);
        // Probe failures count apart from read failures, and persist into degraded mode.
        for _ in 0..DISK_FAILURES_BEFORE_DEGRADED {
            health.failed("write", &"read-only file system");
        }
        assert!(health.is_degraded());
        let reason = health.reason().unwrap();
        assert!(reason.starts_with("disk write failed"), "{reason}");
    }

    #[test]
    fn the_disk_probe_fails_on_an_unwritable_directory() {
        let dir = tempfile::tempdir().unwrap();
        probe_disk(&dir.path().join(PROBE_FILE), 7).unwrap();
        // A directory where the file should be cannot be written like a file.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir(&blocked).unwrap();
        assert!(probe_disk(&blocked, 8).is_err());
        assert!(probe_disk(&dir.path().join("missing/dir/file"), 9).is_err());
    }
}
