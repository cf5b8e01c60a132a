use super::*;

#[test]
fn rendered_metrics_carry_portico_names_and_labels() {
    let metrics = Metrics::new();
    metrics.record_request("GetObject", 206, 0.01);
    metrics.count_block(BlockLookup::MemoryHit);
    metrics.count_served(ServedFrom::Disk, 4096);
    metrics.record_upstream("GetObject", 200, 0.02);
    metrics.upstream_received_bytes.inc_by(10);
    let text = metrics.render();
    assert!(
        text.contains("portico_requests_total{operation=\"GetObject\",status=\"206\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("portico_cache_block_lookups_total{result=\"memory_hit\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("portico_served_bytes_total{source=\"disk\"} 4096"),
        "{text}"
    );
    assert!(
        text.contains("portico_upstream_requests_total{operation=\"GetObject\",status=\"200\"} 1")
    );
    assert!(text.contains("portico_upstream_received_bytes_total 10"));
    assert!(text.contains("portico_request_duration_seconds_bucket"));
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn every_portico_metric_is_explained_in_the_operations_guide() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md");
    let guide = std::fs::read_to_string(path).unwrap();
    // Every name registered, as written where it is.
    let source = [
        include_str!("register.rs"),
        include_str!("integrity.rs"),
        include_str!("tenants.rs"),
        include_str!("ledger.rs"),
    ]
    .concat();
    let names: Vec<&str> = source
        .split("registry.register(")
        .skip(1)
        .filter_map(|call| call.split('"').nth(1))
        .filter(|name| name.starts_with("portico_"))
        .collect();
    assert!(names.len() >= 15, "{names:?}");
    for name in names {
        assert!(
            guide.contains(&format!("| `{name}")),
            "docs/operations.md has no row for {name}"
        );
    }
}
