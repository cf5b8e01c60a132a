//! The values a metric's label may take, as types: a call site cannot count a result the
//! metric does not document, and each value is spelt once.

/// An enum of label values, each with the one string it is exported as.
macro_rules! label_values {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $value:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($variant),+
        }

        impl $name {
            /// Every value, as exported (the documentation test reads them).
            #[cfg(test)]
            pub const VALUES: &[&str] = &[$($value),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $value),+
                }
            }
        }
    };
}

label_values!(
    /// How a block lookup was answered (`portico_cache_block_lookups_total{result}`).
    BlockLookup {
        MemoryHit => "memory_hit",
        DiskHit => "disk_hit",
        Miss => "miss",
        Coalesced => "coalesced",
    }
);

label_values!(
    /// Where object bytes sent to clients came from (`portico_served_bytes_total{source}`).
    ServedFrom {
        Memory => "memory",
        Disk => "disk",
        Upstream => "upstream",
        Coalesced => "coalesced",
    }
);

label_values!(
    /// How object metadata was found (`portico_metadata_lookups_total{result}`).
    MetadataLookup {
        Fresh => "fresh",
        Negative => "negative",
        Revalidated => "revalidated",
        Changed => "changed",
        Fetched => "fetched",
        Missing => "missing",
    }
);

label_values!(
    /// What happened to prefetched blocks (`portico_prefetch_blocks_total{result}`).
    PrefetchOutcome {
        Issued => "issued",
        Skipped => "skipped",
        Used => "used",
        Wasted => "wasted",
    }
);

label_values!(
    /// Hedged block fetches (`portico_upstream_hedges_total{result}`).
    HedgeOutcome {
        Sent => "sent",
        Won => "won",
        OverBudget => "over_budget",
    }
);

label_values!(
    /// Requests for memory budget that could not be granted at once
    /// (`portico_memory_budget_waits_total{result}`).
    BudgetWait {
        Waited => "waited",
        Refused => "refused",
    }
);

label_values!(
    /// How a block asked of its owner was answered (`portico_cluster_peer_requests_total{result}`
    /// on the asking node, `portico_cluster_peer_served_total{result}` on the owner).
    PeerResult {
        Hit => "hit",
        Miss => "miss",
        Error => "error",
        Fallback => "fallback",
        Late => "late",
    }
);

label_values!(
    /// How a cacheable listing was answered (`portico_listing_cache_lookups_total{result}`).
    ListingLookup {
        Hit => "hit",
        Miss => "miss",
    }
);

label_values!(
    /// What a member did with an invalidation a write through this node sent it
    /// (`portico_cluster_invalidations_total{result}`).
    InvalidationResult {
        Confirmed => "confirmed",
        Failed => "failed",
    }
);

label_values!(
    /// What an event notification record did (`portico_event_records_total{result}`).
    EventRecord {
        Purged => "purged",
        Unchanged => "unchanged",
        Ignored => "ignored",
    }
);

label_values!(
    /// Why an event notification message was rejected
    /// (`portico_event_messages_rejected_total{reason}`).
    EventRejection {
        Malformed => "malformed",
        Unauthorized => "unauthorized",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The operator's metric table names every value a label can take.
    #[test]
    fn every_label_value_is_documented_with_its_metric() {
        let table = include_str!("../../docs/operations.md");
        for (metric, values) in [
            ("portico_cache_block_lookups_total", BlockLookup::VALUES),
            ("portico_served_bytes_total", ServedFrom::VALUES),
            (
                "portico_cache_metadata_lookups_total",
                MetadataLookup::VALUES,
            ),
            ("portico_prefetch_blocks_total", PrefetchOutcome::VALUES),
            ("portico_upstream_hedges_total", HedgeOutcome::VALUES),
            ("portico_memory_budget_waits_total", BudgetWait::VALUES),
            ("portico_cluster_peer_requests_total", PeerResult::VALUES),
            ("portico_listing_cache_lookups_total", ListingLookup::VALUES),
            ("portico_event_records_total", EventRecord::VALUES),
            (
                "portico_cluster_invalidations_total",
                InvalidationResult::VALUES,
            ),
            (
                "portico_event_messages_rejected_total",
                EventRejection::VALUES,
            ),
        ] {
            let row = table
                .lines()
                .find(|line| line.starts_with(&format!("| `{metric}`")))
                .unwrap_or_else(|| panic!("{metric} has no row in docs/operations.md"));
            for value in values {
                assert!(
                    row.contains(&format!("`{value}`")),
                    "{metric}: `{value}` is not documented"
                );
            }
        }
    }
}
