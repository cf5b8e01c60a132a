//! What the soak counts, and the report it ends with.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

/// Breaks of an invariant; any of them fails the run.
#[derive(Default)]
pub struct Violations {
    pub wrong_bytes: AtomicU64,
    pub mixed_versions: AtomicU64,
    pub unknown_versions: AtomicU64,
    pub stale_reads: AtomicU64,
    pub lost_writes: AtomicU64,
    pub unexplained_errors: AtomicU64,
    pub over_bounds: AtomicU64,
    pub bad_restarts: AtomicU64,
    pub panics: AtomicU64,
    /// An integrity check that caught wrong bytes where no fault puts any: the origin and
    /// the peer hops of the soak never change a byte, so every alarm is a false one.
    pub integrity_alarms: AtomicU64,
}

/// The highest resource use seen of one node.
#[derive(Default, Clone, Copy)]
pub struct Peak {
    pub rss_bytes: u64,
    pub open_files: u64,
    pub disk_bytes: u64,
}

/// Intervals in which a kind of fault was active, to explain errors seen in them.
#[derive(Default)]
pub struct Troubles {
    spans: Mutex<Vec<(Instant, Option<Instant>)>>,
}

impl Troubles {
    pub fn begin(&self) -> usize {
        let mut spans = self.spans.lock();
        spans.push((Instant::now(), None));
        spans.len() - 1
    }

    pub fn end(&self, span: usize) {
        self.spans.lock()[span].1 = Some(Instant::now());
    }

    /// Whether a fault was active at any time between `from` and `to`, or within `slack`
    /// before `from` (its effects last: a node's restart, an SDK's back-off).
    pub fn during(&self, from: Instant, to: Instant, slack: std::time::Duration) -> bool {
        let from = from.checked_sub(slack).unwrap_or(from);
        self.spans
            .lock()
            .iter()
            .any(|(start, end)| *start <= to && end.is_none_or(|end| end >= from))
    }
}

#[derive(Default)]
pub struct Report {
    outcomes: Mutex<BTreeMap<(&'static str, String), u64>>,
    pub violations: Violations,
    /// Reads of an older version while the origin failed, under `serve_stale_on_error`.
    pub stale_on_origin_error: AtomicU64,
    /// Failed requests (5xx or no answer) while the origin failed, and while a node was
    /// down or cut off.
    pub errors_origin: AtomicU64,
    pub errors_node: AtomicU64,
    /// The longest a read missed a change made straight to the origin, in ms, by prefix kind.
    pub direct_lag_ms: AtomicU64,
    pub events_lag_ms: AtomicU64,
    pub bytes_served: AtomicU64,
    pub reads_checked: AtomicU64,
    pub peaks: Mutex<BTreeMap<String, Peak>>,
    /// The first messages of each violation, to start a diagnosis from.
    pub messages: Mutex<Vec<String>>,
}

impl Report {
    pub fn count(&self, kind: &'static str, outcome: impl Into<String>) {
        self.count_by(kind, outcome, 1);
    }

    /// Counts `count` outcomes at once.
    pub fn count_by(&self, kind: &'static str, outcome: impl Into<String>, count: u64) {
        *self
            .outcomes
            .lock()
            .entry((kind, outcome.into()))
            .or_default() += count;
    }

    /// Counts a violation and keeps its message (the first 50).
    pub fn violation(&self, counter: &AtomicU64, message: String) {
        counter.fetch_add(1, Ordering::Relaxed);
        let mut messages = self.messages.lock();
        let message = format!("[{:>4}s] {message}", started().elapsed().as_secs());
        if messages.len() < 50 {
            eprintln!("VIOLATION {message}");
            messages.push(message);
        }
    }

    pub fn lag(counter: &AtomicU64, ms: u64) {
        counter.fetch_max(ms, Ordering::Relaxed);
    }

    pub fn peak(&self, node: &str, sample: Peak) {
        let mut peaks = self.peaks.lock();
        let peak = peaks.entry(node.to_owned()).or_default();
        peak.rss_bytes = peak.rss_bytes.max(sample.rss_bytes);
        peak.open_files = peak.open_files.max(sample.open_files);
        peak.disk_bytes = peak.disk_bytes.max(sample.disk_bytes);
    }

    /// Requests by kind and outcome, one line per kind.
    pub fn outcome_lines(&self) -> Vec<String> {
        let outcomes = self.outcomes.lock();
        let mut lines = Vec::new();
        let mut current: Option<&str> = None;
        let mut line = String::new();
        for ((kind, outcome), count) in outcomes.iter() {
            if current != Some(kind) {
                if current.is_some() {
                    lines.push(std::mem::take(&mut line));
                }
                line = format!("  {kind:<12}");
                current = Some(kind);
            }
            line.push_str(&format!(" {outcome}={count}"));
        }
        if current.is_some() {
            lines.push(line);
        }
        lines
    }

    pub fn requests(&self) -> u64 {
        self.outcomes.lock().values().sum()
    }

    pub fn broken(&self) -> u64 {
        let v = &self.violations;
        [
            &v.wrong_bytes,
            &v.mixed_versions,
            &v.unknown_versions,
            &v.stale_reads,
            &v.lost_writes,
            &v.unexplained_errors,
            &v.over_bounds,
            &v.bad_restarts,
            &v.panics,
            &v.integrity_alarms,
        ]
        .iter()
        .map(|counter| counter.load(Ordering::Relaxed))
        .sum()
    }
}

/// When the run started (the first call).
pub fn started() -> Instant {
    static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *STARTED.get_or_init(Instant::now)
}

/// The value of a counter of the report.
pub fn count(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}
