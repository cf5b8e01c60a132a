//! The integrity checks' metrics (see docs/architecture.md, "What checks what"): objects
//! compared with the full-object CRC S3 keeps, mismatches found by any check, and what
//! verify mode (`cache.verify_fraction`) checked and spent at the origin.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::ResultLabel;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CheckLabel {
    pub check: &'static str,
}

/// Outcomes of comparing a whole object with S3's CRC.
pub const OBJECT_OUTCOMES: [&str; 3] = ["verified", "mismatch", "no_checksum"];
/// The checks that can find wrong bytes.
pub const CHECKS: [&str; 5] = ["object", "part", "response", "peer", "verify"];
/// Outcomes of asking the origin what it keeps of a version.
pub const LOOKUP_OUTCOMES: [&str; 4] = ["learnt", "none", "failed", "skipped"];
/// Outcomes of one verify-mode check.
pub const VERIFY_OUTCOMES: [&str; 5] = ["ok", "mismatch", "changed", "failed", "skipped"];

#[derive(Default)]
pub struct IntegrityMetrics {
    objects: Family<ResultLabel, Counter>,
    mismatches: Family<CheckLabel, Counter>,
    verify_checks: Family<ResultLabel, Counter>,
    lookups: Family<ResultLabel, Counter>,
    verify_requests: Counter,
    verify_bytes: Counter,
}

impl IntegrityMetrics {
    /// An object whose every block was filled here, compared with S3's CRC: `outcome` is
    /// one of [`OBJECT_OUTCOMES`].
    pub fn count_object(&self, outcome: &'static str) {
        self.objects
            .get_or_create(&ResultLabel { result: outcome })
            .inc();
    }

    /// Wrong bytes found by `check`, one of [`CHECKS`].
    pub fn count_mismatch(&self, check: &'static str) {
        self.mismatches.get_or_create(&CheckLabel { check }).inc();
    }

    /// The origin asked what it keeps of a version, by one of [`LOOKUP_OUTCOMES`].
    pub fn count_lookup(&self, outcome: &'static str) {
        self.lookups
            .get_or_create(&ResultLabel { result: outcome })
            .inc();
    }

    /// One verify-mode check, by one of [`VERIFY_OUTCOMES`].
    pub fn count_verify(&self, outcome: &'static str) {
        self.verify_checks
            .get_or_create(&ResultLabel { result: outcome })
            .inc();
    }

    /// An origin request verify mode sent, and the body bytes it received.
    pub fn count_verify_request(&self, bytes: u64) {
        self.verify_requests.inc();
        self.verify_bytes.inc_by(bytes);
    }

    /// Mismatches found by `check` so far.
    pub fn mismatches(&self, check: &'static str) -> u64 {
        self.mismatches.get_or_create(&CheckLabel { check }).get()
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "portico_integrity_objects",
            "Objects whose every block this node filled from the origin, by how their combined block CRCs compared with the full-object CRC S3 keeps: verified, mismatch (the object was purged on every member), no_checksum (S3 keeps no CRC of it, or none could be learnt)",
            self.objects.clone(),
        );
        registry.register(
            "portico_integrity_mismatches",
            "Wrong bytes caught before they were served again, by check: object (an object's blocks against S3's CRC), part (a multipart object's part against the CRC S3 keeps of it), response (a checksum-mode GET, aborted before its last byte), peer (a block from another member, fetched again), verify (verify mode re-read a hit from the origin)",
            self.mismatches.clone(),
        );
        registry.register(
            "portico_integrity_checksum_lookups",
            "Versions whose checksums the origin was asked for (GetObjectAttributes, when a fill's metadata did not report them), by result: learnt (a full-object CRC or the parts' CRCs), none (it keeps none to compare with, or the object changed), failed (no answer: the version is not judged), skipped (too many questions queued, or the origin refused the question for the bucket in the last 15 minutes)",
            self.lookups.clone(),
        );
        registry.register(
            "portico_verify_checks",
            "Verify-mode checks of cache hits (cache.verify_fraction), by outcome: ok, mismatch (purged), changed (the origin holds a new version), failed (the origin did not answer), skipped (over the rate limit)",
            self.verify_checks.clone(),
        );
        registry.register(
            "portico_verify_origin_requests",
            "Origin requests verify mode sent (conditional HEADs and ranged GETs)",
            self.verify_requests.clone(),
        );
        registry.register(
            "portico_verify_origin_bytes",
            "Body bytes verify mode read from the origin",
            self.verify_bytes.clone(),
        );
    }

    pub(super) fn start_at_zero(&self) {
        for result in OBJECT_OUTCOMES {
            drop(self.objects.get_or_create(&ResultLabel { result }));
        }
        for check in CHECKS {
            drop(self.mismatches.get_or_create(&CheckLabel { check }));
        }
        for result in LOOKUP_OUTCOMES {
            drop(self.lookups.get_or_create(&ResultLabel { result }));
        }
        for result in VERIFY_OUTCOMES {
            drop(self.verify_checks.get_or_create(&ResultLabel { result }));
        }
    }
}
