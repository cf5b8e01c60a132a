use super::*;
use std::path::Path;
use std::time::Duration;

mod documented;
mod messages;

/// The client credential every runnable configuration needs (SigV4 is the default).
const CLIENT_CREDENTIAL: [(&str, &str); 2] = [
    ("PORTICO_AUTH_ACCESS_KEY_ID", "client"),
    ("PORTICO_AUTH_SECRET_ACCESS_KEY", "client-secret"),
];

fn with_credential(env: &[(&str, &str)]) -> Vec<(String, String)> {
    CLIENT_CREDENTIAL
        .iter()
        .chain(env)
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

fn load_text(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portico.toml");
    std::fs::write(&path, text).unwrap();
    Config::load(Some(&path), with_credential(env), &CliOverrides::default())
}

fn defaults_with_credential() -> Config {
    let mut config = Config::default();
    config.auth.access_key_id = "client".to_owned();
    config.auth.secret_access_key = "client-secret".to_owned();
    config
}

#[test]
fn defaults_need_only_a_client_credential() {
    defaults_with_credential().validate().unwrap();
    let error = Config::default().validate().unwrap_err().to_string();
    assert!(error.starts_with("config key auth.mode:"), "{error}");
    let mut open = Config::default();
    open.auth.mode = AuthMode::None;
    open.validate().unwrap();
    let mut half = defaults_with_credential();
    half.auth.secret_access_key.clear();
    assert!(half.validate().is_err());
}

#[test]
fn shipped_config_file_matches_the_defaults() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/portico.toml");
    let loaded = Config::load(Some(&path), with_credential(&[]), &CliOverrides::default()).unwrap();
    assert_eq!(loaded, defaults_with_credential());
}

#[test]
fn file_values_are_read_with_units() {
    let config = load_text(
            "[cache]\nblock_size = \"1MiB\"\nmemory_capacity = \"64MiB\"\nmetadata_ttl = \"immutable\"\nnegative_ttl = \"0s\"\n",
            &[],
        )
        .unwrap();
    assert_eq!(config.cache.block_size, ByteSize::mib(1));
    assert_eq!(config.cache.metadata_ttl, MetadataTtl::Immutable);
    assert_eq!(config.cache.negative_ttl.get(), Duration::ZERO);
}

#[test]
fn environment_overrides_the_file() {
    let config = load_text(
        "[cache]\nblock_size = \"1MiB\"\n",
        &[
            ("PORTICO_CACHE_BLOCK_SIZE", "2MiB"),
            ("PORTICO_UPSTREAM_FORCE_PATH_STYLE", "true"),
            ("PORTICO_SERVER_DOMAINS", "s3.local, s3.example.com"),
            ("PORTICO_CACHE_READAHEAD_BLOCKS", "8"),
            ("PORTICO_CONFIG", "/ignored/not/a/key"),
        ],
    )
    .unwrap();
    assert_eq!(config.cache.block_size, ByteSize::mib(2));
    assert!(config.upstream.force_path_style);
    assert_eq!(config.server.domains, vec!["s3.local", "s3.example.com"]);
    assert_eq!(config.cache.readahead_blocks, 8);
}

#[test]
fn cli_overrides_the_environment() {
    let cli = CliOverrides {
        listen: Some("127.0.0.1:1234".parse().unwrap()),
        ..CliOverrides::default()
    };
    let env = with_credential(&[("PORTICO_SERVER_LISTEN", "127.0.0.1:9999")]);
    let config = Config::load(None, env, &cli).unwrap();
    assert_eq!(config.server.listen.port(), 1234);
}

#[test]
fn errors_name_the_key_and_the_accepted_values() {
    let error = load_text("[cache]\nblock_size = \"3XB\"\n", &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("cache.block_size") && error.contains("512MiB"),
        "{error}"
    );

    let error = load_text("[cache]\nblock_size = \"100KiB\"\n", &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("cache.block_size") && error.contains("multiple of 64KiB"),
        "{error}"
    );

    let error = load_text("[cache]\nblok_size = \"4MiB\"\n", &[])
        .unwrap_err()
        .to_string();
    assert!(error.contains("blok_size"), "{error}");

    let error = load_text("[auth]\nmode = \"open\"\n", &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("auth.mode") && error.contains("none"),
        "{error}"
    );

    let error = load_text("[server]\nlisten = \"localhost\"\n", &[])
        .unwrap_err()
        .to_string();
    assert!(error.contains("server.listen"), "{error}");

    let error = load_text("", &[("PORTICO_CACHE_BLOK_SIZE", "4MiB")])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("PORTICO_CACHE_BLOK_SIZE") && error.contains("block_size"),
        "{error}"
    );

    let error = load_text("", &[("PORTICO_UPSTREAM_FORCE_PATH_STYLE", "yes")])
        .unwrap_err()
        .to_string();
    assert!(error.contains("true or false"), "{error}");

    let error = load_text("[cache]\nmemory_capacity = \"1MiB\"\n", &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("cache.memory_capacity") && error.contains("16MiB"),
        "{error}"
    );

    let error = load_text("[upstream]\nendpoint = \"minio:9000\"\n", &[])
        .unwrap_err()
        .to_string();
    assert!(error.contains("upstream.endpoint"), "{error}");

    let error = load_text("[cache\n", &[]).unwrap_err().to_string();
    assert!(error.contains("line 1"), "{error}");

    let error = load_text("[prefetch]\nmax_window_blocks = 0\n", &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("config key prefetch.max_window_blocks:") && error.contains("1 to 256"),
        "{error}"
    );
    let error = load_text("[prefetch]\nmax_concurrent_fetches = 0\n", &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("config key prefetch.max_concurrent_fetches:"),
        "{error}"
    );
}

#[test]
fn redacted_output_hides_secrets_and_reads_back() {
    let mut config = Config::default();
    config.upstream.access_key_id = "AKIDEXAMPLE".to_owned();
    config.upstream.secret_access_key = "very-secret".to_owned();
    let shown = config.to_redacted_toml();
    assert!(!shown.contains("very-secret"));
    assert!(shown.contains("AKIDEXAMPLE"));
    let reread: Config = toml::from_str(&shown).unwrap();
    assert_eq!(reread.cache, config.cache);
}

#[test]
fn cluster_members_can_come_from_a_file_of_one_member_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("members");
    std::fs::write(
        &file,
        "# the fleet\n127.0.0.1:9100\n\n127.0.0.1:9101  # the second\n",
    )
    .unwrap();
    let section = |path: &std::path::Path| {
        format!(
            "[cluster]\nenabled = true\nlisten = \"127.0.0.1:9100\"\nmembers_file = \"{}\"\nsecret = \"sixteen-bytes-or-more\"\n",
            path.display()
        )
    };
    let config = load_text(&section(&file), &[]).unwrap();
    assert_eq!(config.cluster.members_file, file);
    assert_eq!(
        crate::config::parse_members(&std::fs::read_to_string(&file).unwrap()).unwrap(),
        ["127.0.0.1:9100", "127.0.0.1:9101"]
    );
    let env = [("PORTICO_CLUSTER_MEMBERS_FILE", file.to_str().unwrap())];
    let from_env = "[cluster]\nenabled = true\nlisten = \"127.0.0.1:9100\"\nsecret = \"sixteen-bytes-or-more\"\n";
    assert_eq!(
        load_text(from_env, &env).unwrap().cluster.members_file,
        file
    );

    std::fs::write(&file, "127.0.0.1:9100\nnot-a-member\n").unwrap();
    let error = load_text(&section(&file), &[]).unwrap_err().to_string();
    assert!(
        error.contains("cluster.members_file") && error.contains("line 2"),
        "{error}"
    );
    let missing = dir.path().join("missing");
    let error = load_text(&section(&missing), &[]).unwrap_err().to_string();
    assert!(error.contains("cannot be read"), "{error}");
    let both = format!("{}members = [\"127.0.0.1:9100\"]\n", section(&file));
    let error = load_text(&both, &[]).unwrap_err().to_string();
    assert!(error.contains("set exactly one"), "{error}");
}

#[test]
fn cluster_mode_needs_members_an_identity_among_them_and_a_secret() {
    let member_env = [
        ("PORTICO_CLUSTER_ENABLED", "true"),
        ("PORTICO_CLUSTER_LISTEN", "127.0.0.1:9100"),
        ("PORTICO_CLUSTER_MEMBERS", "127.0.0.1:9100,127.0.0.1:9101"),
        ("PORTICO_CLUSTER_SECRET", "sixteen-bytes-or-more"),
    ];
    let config = load_text("", &member_env).unwrap();
    assert_eq!(config.cluster.members.len(), 2, "a comma-separated list");
    assert_eq!(config.cluster.identity(), "127.0.0.1:9100");
    assert!(!config.to_redacted_toml().contains("sixteen-bytes-or-more"));

    let cases: [(&str, &str); 10] = [
        ("members = []\n", "exactly one"),
        ("tls_cert = \"/tls/tls.crt\"\n", "set all three"),
        (
            "tls_server_name = \"peer.cache.svc\"\n",
            "only applies with cluster.tls_cert",
        ),
        ("zone = \"eu west\"\n", "cluster.zone"),
        (
            "members_dns = \"portico-peers:9100\"\n",
            "cluster.members, cluster.members_dns and cluster.members_file",
        ),
        ("members = [\"127.0.0.1:9101\"]\n", "is not among them"),
        ("members = [\"127.0.0.1\"]\n", "cluster.members"),
        ("secret = \"short\"\n", "cluster.secret"),
        ("listen = \"0.0.0.0:9100\"\n", "cluster.advertise"),
        ("listen = \"127.0.0.1:9090\"\n", "admin.listen"),
    ];
    for (line, expected) in cases {
        let text = "[cluster]\nenabled = true\nlisten = \"127.0.0.1:9100\"\nmembers = [\"127.0.0.1:9100\"]\nsecret = \"sixteen-bytes-or-more\"\n";
        // The case's line replaces the default's line for the same key.
        let key = line.split(' ').next().unwrap();
        let text: String = text
            .lines()
            .filter(|existing| !existing.starts_with(&format!("{key} ")))
            .map(|existing| format!("{existing}\n"))
            .chain([line.to_owned()])
            .collect();
        let error = load_text(&text, &[]).unwrap_err().to_string();
        assert!(error.contains(expected), "{line:?}: {error}");
    }

    let dns = "[cluster]\nenabled = true\nadvertise = \"10.0.0.5:9100\"\nlisten = \"0.0.0.0:9100\"\nmembers_dns = \"portico-peers.default.svc:9100\"\nsecret = \"sixteen-bytes-or-more\"\n";
    let config = load_text(dns, &[]).unwrap();
    assert_eq!(config.cluster.identity(), "10.0.0.5:9100");
    assert!(!config.cluster.tls());

    let tls = format!(
        "{dns}tls_cert = \"/tls/tls.crt\"\ntls_key = \"/tls/tls.key\"\ntls_ca = \"/tls/ca.crt\"\n"
    );
    assert!(load_text(&tls, &[]).unwrap().cluster.tls());
    let named = format!("{tls}tls_server_name = \"peer.cache.svc\"\n");
    assert!(load_text(&named, &[]).is_ok());
    let error = load_text(&format!("{tls}tls_server_name = \"10.0.0.5:9100\"\n"), &[])
        .unwrap_err()
        .to_string();
    assert!(error.contains("expected a DNS name"), "{error}");
}

#[test]
fn rules_load_in_order_and_a_bad_one_names_its_index_and_key() {
    let config = load_text(
        "[[rules]]\nname = \"shards\"\nbucket = \"ml-*\"\nprefix = \"shards/\"\nmetadata_ttl = \"immutable\"\nprefetch = false\n\n[[rules]]\nname = \"scratch\"\nprefix = \"tmp/\"\ncache = false\n",
        &[],
    )
    .unwrap();
    assert_eq!(config.rules.len(), 2);
    assert_eq!(config.rules[0].bucket.as_str(), "ml-*");
    assert_eq!(config.rules[0].metadata_ttl, Some(MetadataTtl::Immutable));
    assert_eq!(config.rules[1].bucket, BucketPattern::any());
    assert_eq!(config.rules[1].cache, Some(false));
    // The effective configuration prints them back as they were read.
    let printed = config.to_redacted_toml();
    let reread: Config = toml::from_str(&printed).unwrap();
    assert_eq!(reread.rules, config.rules);

    let error = load_text(
        "[[rules]]\nname = \"a\"\nmetadata_ttl = \"60s\"\n\n[[rules]]\nname = \"b\"\nmetadata_ttl = \"forever\"\n",
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.starts_with("config key rules[1].metadata_ttl:"),
        "{error}"
    );
    let error = load_text(
        "[[rules]]\nname = \"a\"\nbucket = \"a/b\"\ncache = false\n",
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(error.starts_with("config key rules[0].bucket:"), "{error}");
    let error = load_text("[[rules]]\nname = \"a\"\nttl = \"5s\"\n", &[])
        .unwrap_err()
        .to_string();
    assert!(error.contains("unknown field `ttl`"), "{error}");
}

#[test]
fn upstream_entries_load_and_take_their_credential_from_the_environment() {
    let config = load_text(
        "[upstream]\nfallback = \"replica\"\nfallback_bucket = \"{bucket}-r\"\n\n[[upstreams]]\nname = \"lab-eu.1\"\nbuckets = [\"lab-*\"]\nendpoint = \"http://127.0.0.1:9000\"\n\n[[upstreams]]\nname = \"replica\"\nregion = \"us-east-2\"\n",
        &[
            ("PORTICO_UPSTREAMS_LAB_EU_1_ACCESS_KEY_ID", "lab-key"),
            ("PORTICO_UPSTREAMS_LAB_EU_1_SECRET_ACCESS_KEY", "lab-secret"),
        ],
    )
    .unwrap();
    assert_eq!(config.upstreams.len(), 2);
    assert_eq!(config.upstreams[0].access_key_id, "lab-key");
    assert_eq!(config.upstreams[0].buckets[0].as_str(), "lab-*");
    assert!(config.upstreams[1].access_key_id.is_empty());
    assert_eq!(config.upstream.fallback, "replica");
    let printed = config.to_redacted_toml();
    assert!(!printed.contains("lab-secret"), "{printed}");
    assert!(printed.contains("<redacted>"), "{printed}");

    let error = load_text(
        "[[upstreams]]\nname = \"lab\"\nbuckets = [\"lab-*\"]\n",
        &[("PORTICO_UPSTREAMS_LAB_ACCESS_KEY_ID", "only-the-key")],
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.starts_with(
            "config keys upstreams[0].access_key_id and upstreams[0].secret_access_key"
        ),
        "{error}"
    );
}

#[test]
fn fill_nice_takes_linux_nice_values() {
    assert_eq!(defaults_with_credential().upstream.fill_nice, 10);
    let config = load_text("[upstream]\nfill_nice = 19\n", &[]).unwrap();
    assert_eq!(config.upstream.fill_nice, 19);
    let config = load_text("", &[("PORTICO_UPSTREAM_FILL_NICE", "0")]).unwrap();
    assert_eq!(config.upstream.fill_nice, 0);
    let error = load_text("[upstream]\nfill_nice = 20\n", &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("upstream.fill_nice: 20 is not accepted (expected 0 to 19)"),
        "{error}"
    );
    let error = load_text("[upstream]\nfill_nice = -5\n", &[])
        .unwrap_err()
        .to_string();
    assert!(error.contains("fill_nice"), "{error}");
}
