//! What benchmarks measure from `/proc`: a process's resident memory, its peak, its CPU
//! time and the bytes it read from storage, and the CPU time the hypervisor took from the
//! machine.

/// The number after `field` on its line of the `/proc` file `path` (`field: value`
/// lines, as in `status` and `io`), 0 when unreadable.
fn proc_field(path: &str, field: &str) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS:`, `VmHWM:`), 0 when unreadable.
pub fn status_field_kib(pid: u32, field: &str) -> u64 {
    proc_field(&format!("/proc/{pid}/status"), field)
}

/// Resets the peak resident set size (`VmHWM`) to the current one.
pub fn reset_peak_rss(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// The numeric fields of `/proc/<pid>/stat` after the parenthesised command name (the
/// 3rd field on), 0 where unreadable.
fn stat_fields(pid: u32) -> Vec<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .map(|value| value.parse().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default()
}

/// User plus system CPU time the process has used, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    // utime and stime are the 14th and 15th fields.
    let ticks: u64 = stat_fields(pid)
        .get(11..13)
        .map_or(0, |pair| pair.iter().sum());
    // The kernel's USER_HZ is 100 on every Linux platform this runs on.
    ticks as f64 / 100.0
}

/// The page faults the process has taken: (minor, major), the 10th and 12th fields.
pub fn page_faults(pid: u32) -> (u64, u64) {
    let fields = stat_fields(pid);
    let field = |at: usize| fields.get(at).copied().unwrap_or(0);
    (field(7), field(9))
}

/// Bytes the process (all its threads) had the storage below the page cache read for it
/// (`read_bytes` of `/proc/<pid>/io`): reads served from the page cache do not count.
/// 0 when unreadable.
pub fn storage_read_bytes(pid: u32) -> u64 {
    proc_field(&format!("/proc/{pid}/io"), "read_bytes:")
}

/// The process and its direct children (an nginx master and its workers).
pub fn with_children(pid: u32) -> Vec<u32> {
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    std::iter::once(pid)
        .chain(
            children
                .split_whitespace()
                .filter_map(|child| child.parse().ok()),
        )
        .collect()
}

/// The machine's CPU time since boot from `/proc/stat`: how much of it the hypervisor
/// took for other guests (steal) and all of it, in clock ticks.
#[derive(Clone, Copy)]
pub struct CpuTicks {
    stolen: u64,
    /// Idle and waiting for I/O.
    idle: u64,
    all: u64,
}

impl CpuTicks {
    pub fn now() -> Self {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        // "cpu  user nice system idle iowait irq softirq steal guest guest_nice"; guest
        // time is already counted in user and nice.
        let fields: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .take(8)
            .filter_map(|value| value.parse().ok())
            .collect();
        Self {
            stolen: fields.get(7).copied().unwrap_or(0),
            idle: fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0),
            all: fields.iter().sum(),
        }
    }

    /// The share of CPU time spent running anything (not idle, not waiting for I/O, not
    /// stolen) since `earlier`, in per cent of all CPUs.
    pub fn busy_percent_since(&self, earlier: CpuTicks) -> f64 {
        let all = self.all.saturating_sub(earlier.all).max(1);
        let idle = self.idle.saturating_sub(earlier.idle);
        let stolen = self.stolen.saturating_sub(earlier.stolen);
        all.saturating_sub(idle + stolen) as f64 * 100.0 / all as f64
    }

    /// The share of CPU time stolen since `earlier`, in per cent.
    pub fn stolen_percent_since(&self, earlier: CpuTicks) -> f64 {
        let all = self.all.saturating_sub(earlier.all).max(1);
        self.stolen.saturating_sub(earlier.stolen) as f64 * 100.0 / all as f64
    }
}
