//! What an operator sees: health, readiness and metrics endpoints, and a config mistake
//! reported in one line that names the key.

use std::process::Command;

use crate::support::{Rig, binary, http_request, random_bytes};

#[tokio::test]
async fn health_readiness_and_metrics_are_served() {
    let rig = Rig::start("admin", |_| {}).await;
    let data = random_bytes(2_500_000, 9);
    rig.put("metrics.bin", &data).await;
    assert!(rig.get("metrics.bin", None).await == data);
    assert!(rig.get("metrics.bin", Some("bytes=0-9")).await == data[..10]);
    let portico = rig.portico();

    assert_eq!(
        portico.admin_get("/healthz").await,
        (200, "ok\n".to_owned())
    );
    let (status, body) = portico.admin_get("/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("cache: open (memory + disk)"), "{body}");

    let (status, headers, body) =
        http_request("GET", &format!("{}/metrics", portico.admin), &[]).await;
    assert_eq!(status, 200);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let text = String::from_utf8_lossy(&body);
    for sample in [
        "portico_requests_total{operation=\"GetObject\",status=\"200\"} 1",
        "portico_requests_total{operation=\"GetObject\",status=\"206\"} 1",
        "portico_request_duration_seconds_count{operation=\"GetObject\"} 2",
        "portico_served_bytes_total{source=\"memory\"}",
        "portico_served_bytes_total{source=\"upstream\"}",
        "portico_cache_block_lookups_total{result=\"miss\"}",
        "portico_cache_block_lookups_total{result=\"memory_hit\"}",
        "portico_upstream_requests_total{operation=\"GetObject\",status=\"206\"} 1",
        "portico_origin_streams_total 1",
        "portico_stream_blocks_total{result=\"streamed\"} 2",
        "portico_upstream_received_bytes_total 2500000",
        "portico_upstream_request_duration_seconds_bucket",
        "foyer_storage_op_total_total",
    ] {
        assert!(text.contains(sample), "metrics lack {sample:?}:\n{text}");
    }
    // Four block lookups: the whole read's three and the range's one. Which of the whole
    // read's are misses depends on timing: a block its stream brought before the lookup
    // of it asked (one further on had) is already in memory, and found there.
    let lookups = |result: &str| {
        let sample = format!("portico_cache_block_lookups_total{{result=\"{result}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(sample.as_str()))
            .and_then(|value| value.parse::<f64>().ok())
            .unwrap_or(-1.0)
    };
    let (misses, hits) = (lookups("miss"), lookups("memory_hit"));
    assert_eq!(misses + hits, 4.0, "{misses} misses, {hits} memory hits");
    assert!(
        misses >= 2.0,
        "the first block and another were missed: {misses}"
    );
}

fn run_with(config: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portico.toml");
    std::fs::write(&path, config).unwrap();
    let output = Command::new(binary())
        .arg("--config")
        .arg(&path)
        .envs(env.iter().copied())
        .output()
        .expect("run portico");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A config file, environment variables, and words the error must contain.
type BadConfig = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
);

#[test]
fn bad_config_stops_portico_with_a_message_naming_the_key() {
    let cases: [BadConfig; 9] = [
        (
            "[upstream]\nconnect_timeout = 30\n",
            &[],
            &["upstream.connect_timeout", "has no unit", "\"30s\""],
        ),
        (
            "[cache]\nmemory_capacity = \"8GB\"\n",
            &[],
            &["cache.memory_capacity", "decimal units", "\"8GiB\""],
        ),
        (
            "[server]\nlisten = \"8080\"\n",
            &[],
            &["server.listen", "\"localhost:8080\""],
        ),
        (
            "[cache]\nblock_size = \"3XB\"\n",
            &[],
            &["cache.block_size", "512MiB"],
        ),
        (
            "[cache]\nblock_size = \"128MiB\"\n",
            &[],
            &["cache.block_size", "64MiB"],
        ),
        ("[cache]\nblok_size = \"4MiB\"\n", &[], &["blok_size"]),
        ("[auth]\nmode = \"everyone\"\n", &[], &["auth.mode", "none"]),
        (
            "",
            &[("PORTICO_CACHE_MEMORY_CAPACITY", "1KiB")],
            &["cache.memory_capacity"],
        ),
        (
            "[cache]\nmetadata_ttl = \"soon\"\n",
            &[],
            &["cache.metadata_ttl", "immutable"],
        ),
    ];
    for (config, env, expected) in cases {
        let (code, stderr) = run_with(config, env);
        assert_eq!(code, Some(2), "{config:?} {env:?}: {stderr}");
        assert_eq!(
            stderr.lines().count(),
            1,
            "one line for {config:?}: {stderr}"
        );
        for word in expected {
            assert!(
                stderr.contains(word),
                "{config:?} {env:?}: {stderr:?} lacks {word:?}"
            );
        }
    }
    // A name resolves; a port in use names the key that chose it.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let config = format!(
        "[server]\nlisten = \"localhost:{port}\"\n[cache]\ndisk_capacity = \"0B\"\n[auth]\nmode = \"none\"\n"
    );
    let (code, stderr) = run_with(&config, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "config key server.listen: cannot listen on 127.0.0.1:{port}"
        )),
        "{stderr}"
    );
    let output = Command::new(binary())
        .args(["--config", "/nonexistent/portico.toml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("/nonexistent/portico.toml"));
}

#[test]
fn check_config_validates_without_starting_and_prints_the_effective_config_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portico.toml");
    std::fs::write(
        &path,
        "[cache]\nblock_size = \"8MiB\"\n[server]\nlisten = \"127.0.0.1:1\"\n",
    )
    .unwrap();
    let check = |env: &[(&str, &str)]| {
        Command::new(binary())
            .args(["check-config", "--config"])
            .arg(&path)
            .envs(env.iter().copied())
            .output()
            .expect("run portico check-config")
    };
    let output = check(&[
        ("PORTICO_AUTH_ACCESS_KEY_ID", "client"),
        ("PORTICO_AUTH_SECRET_ACCESS_KEY", "client-secret-value"),
        ("PORTICO_ADMIN_TOKEN", "admin-token-value"),
        ("PORTICO_CACHE_MEMORY_CAPACITY", "2GiB"),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    // The file, the environment and the defaults, merged; nothing was bound or opened.
    for line in [
        "block_size = \"8MiB\"",
        "memory_capacity = \"2GiB\"",
        "listen = \"127.0.0.1:1\"",
        "access_key_id = \"client\"",
        "secret_access_key = \"<redacted>\"",
        "token = \"<redacted>\"",
        "metadata_ttl = \"1m\"",
    ] {
        assert!(stdout.contains(line), "{line:?} missing from:\n{stdout}");
    }
    assert!(!stdout.contains("client-secret-value") && !stdout.contains("admin-token-value"));

    let output = check(&[("PORTICO_CACHE_MEMORY_CAPACITY", "2GiB")]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("auth.mode"), "{stderr}");
}
