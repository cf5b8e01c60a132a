//! The Portico binary under test: started with a generated config on free loopback ports,
//! stopped with SIGTERM like an orchestrator would, its stderr kept in a log file.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::minio::{ACCESS_KEY, SECRET_KEY};

/// Settings a test varies; everything else is a small, fast test configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    pub upstream: String,
    pub cache_dir: PathBuf,
    pub block_size: &'static str,
    pub memory_capacity: &'static str,
    /// `cache.memory_pretouch`: off, since the suites start hundreds of nodes on few
    /// cores; the tests of the pretouch turn it on. `None` leaves the key out (the
    /// binary's default; a build older than the key knows no other).
    pub memory_pretouch: Option<bool>,
    pub disk_capacity: &'static str,
    pub metadata_ttl: &'static str,
    pub negative_ttl: &'static str,
    pub domains: Vec<String>,
    /// The secret Portico signs upstream requests with.
    pub upstream_secret: &'static str,
    /// Whether `[upstream]` names a credential at all (else the AWS credential chain).
    pub upstream_credentials: bool,
    pub write_through: bool,
    /// `upstream.hedge_quantile`; 0 (off) unless a test enables it, so upstream request
    /// counts stay exact on a loaded machine.
    pub hedge_quantile: f64,
    /// `cache.serve_stale_on_error`.
    pub serve_stale_on_error: bool,
    /// The body of the `[auth]` section: by default SigV4 with the test credentials that
    /// [`crate::s3_client`] signs with.
    pub auth: String,
    /// Extra lines for the `[server]` section (TLS, limits).
    pub server_extra: String,
    /// Extra lines for the `[upstream]` section.
    pub upstream_extra: String,
    /// Extra lines for the `[admin]` section.
    pub admin_extra: String,
    /// Extra lines for the `[cache]` section.
    pub cache_extra: String,
    /// Lines for the `[log]` section.
    pub log: String,
    /// Lines for the `[cluster]` section.
    pub cluster: String,
    /// Lines for the `[listing]` section.
    pub listing: String,
    /// Tables after every section: `[[rules]]`, `[[upstreams]]`.
    pub tables: String,
    /// Extra environment variables for the process (e.g. `OTEL_*`).
    pub env: Vec<(String, String)>,
    /// Log at debug level, for tests; off, Portico runs with its own default filter, as
    /// deployed (benchmarks).
    pub debug_log: bool,
    /// Starts the process with this soft and hard open-file limit (`ulimit -n`), through
    /// util-linux's `prlimit`.
    pub open_files_limit: Option<u64>,
}

impl Settings {
    pub fn new(upstream: String, cache_dir: &Path) -> Self {
        Self {
            upstream,
            cache_dir: cache_dir.to_owned(),
            block_size: "1MiB",
            memory_capacity: "256MiB",
            memory_pretouch: Some(false),
            disk_capacity: "512MiB",
            metadata_ttl: "60s",
            negative_ttl: "5s",
            domains: Vec::new(),
            upstream_secret: SECRET_KEY,
            upstream_credentials: true,
            write_through: false,
            hedge_quantile: 0.0,
            serve_stale_on_error: true,
            auth: format!(
                "mode = \"sigv4\"\naccess_key_id = \"{ACCESS_KEY}\"\nsecret_access_key = \"{SECRET_KEY}\"\n"
            ),
            server_extra: String::new(),
            upstream_extra: String::new(),
            admin_extra: String::new(),
            cache_extra: String::new(),
            log: String::new(),
            cluster: String::new(),
            listing: String::new(),
            tables: String::new(),
            env: Vec::new(),
            debug_log: true,
            open_files_limit: None,
        }
    }

    /// SigV4 with the test credential and the credentials file at `path`.
    pub fn with_credentials_file(&mut self, path: &Path) {
        self.auth = format!(
            "mode = \"sigv4\"\naccess_key_id = \"{ACCESS_KEY}\"\nsecret_access_key = \"{SECRET_KEY}\"\ncredentials_file = \"{}\"\n",
            path.display()
        );
    }

    /// Turns client authentication off (`auth.mode = "none"`).
    pub fn without_auth(&mut self) {
        self.auth = "mode = \"none\"\n".to_owned();
    }

    /// The config file these settings make.
    pub fn toml(&self) -> String {
        let domains: Vec<String> = self
            .domains
            .iter()
            .map(|domain| format!("{domain:?}"))
            .collect();
        format!(
            r#"
[server]
listen = "127.0.0.1:0"
domains = [{domains}]
shutdown_grace = "10s"
{server_extra}

[admin]
listen = "127.0.0.1:0"
{admin_extra}

[upstream]
endpoint = "{upstream}"
force_path_style = true
{credentials}
connect_timeout = "1s"
first_byte_timeout = "10s"
hedge_quantile = {hedge_quantile:?}
{upstream_extra}

[cache]
dir = "{dir}"
block_size = "{block_size}"
memory_capacity = "{memory}"
{memory_pretouch}disk_capacity = "{disk}"
metadata_ttl = "{ttl}"
negative_ttl = "{negative_ttl}"
write_through = {write_through}
serve_stale_on_error = {serve_stale_on_error}
{cache_extra}

[auth]
{auth}

[log]
{log}

[cluster]
{cluster}

[listing]
{listing}

{tables}
"#,
            domains = domains.join(", "),
            upstream = self.upstream,
            dir = self.cache_dir.display(),
            block_size = self.block_size,
            memory = self.memory_capacity,
            memory_pretouch = self
                .memory_pretouch
                .map(|on| format!("memory_pretouch = {on}\n"))
                .unwrap_or_default(),
            disk = self.disk_capacity,
            ttl = self.metadata_ttl,
            negative_ttl = self.negative_ttl,
            credentials = if self.upstream_credentials {
                format!(
                    "access_key_id = \"{ACCESS_KEY}\"\nsecret_access_key = \"{}\"",
                    self.upstream_secret
                )
            } else {
                String::new()
            },
            write_through = self.write_through,
            hedge_quantile = self.hedge_quantile,
            serve_stale_on_error = self.serve_stale_on_error,
            auth = self.auth,
            server_extra = self.server_extra,
            upstream_extra = self.upstream_extra,
            admin_extra = self.admin_extra,
            cache_extra = self.cache_extra,
            log = self.log,
            cluster = self.cluster,
            listing = self.listing,
            tables = self.tables,
        )
    }
}

pub struct Portico {
    child: Child,
    pub s3: String,
    pub admin: String,
    /// The admin API's own listener, when `admin.api_listen` is set.
    pub admin_api: Option<String>,
    /// The peer listener, in cluster mode.
    pub peers: Option<String>,
    log: PathBuf,
    _config_dir: tempfile::TempDir,
}

impl Portico {
    /// Starts `binary` (tests pass `env!("CARGO_BIN_EXE_portico")`) with `settings`.
    pub async fn start(binary: &Path, settings: &Settings) -> Self {
        let config_dir = tempfile::tempdir().expect("config directory");
        let config = config_dir.path().join("portico.toml");
        std::fs::write(&config, settings.toml()).expect("write config");
        let log = config_dir.path().join("portico.log");
        let stderr = std::fs::File::create(&log).expect("log file");
        let mut command = match settings.open_files_limit {
            Some(limit) => {
                let mut command = Command::new("prlimit");
                command
                    .arg(format!("--nofile={limit}:{limit}"))
                    .arg("--")
                    .arg(binary);
                command
            }
            None => Command::new(binary),
        };
        if settings.debug_log {
            command.env("RUST_LOG", "info,portico=debug");
        } else {
            command.env_remove("RUST_LOG");
        }
        let mut child = command
            .arg("--config")
            .arg(&config)
            .envs(settings.env.iter().map(|(name, value)| (name, value)))
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("start portico");
        let stdout = child.stdout.take().expect("portico stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .ok()
            .and_then(|line| line.ok().flatten())
            .unwrap_or_else(|| {
                panic!(
                    "portico did not announce its listeners; log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix(name))
                .unwrap_or_else(|| panic!("no {name} in {line:?}"))
                .to_owned()
        };
        let (s3, admin) = (field("s3="), field("admin="));
        let optional = |name: &str| {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix(name))
                .map(str::to_owned)
        };
        let portico = Self {
            child,
            s3,
            admin,
            admin_api: optional("admin_api="),
            peers: optional("peers="),
            log,
            _config_dir: config_dir,
        };
        // Measurements start from a settled node: the pretouch's work is its own.
        if settings.memory_pretouch == Some(true) {
            portico.pretouched().await;
        }
        portico
    }

    /// Sends SIGTERM and waits for a clean exit.
    pub async fn stop(self) {
        self.terminate();
        let logs = self.log.clone();
        let exit = self.exit_status().await;
        assert!(
            exit.success(),
            "portico exited with {exit}; log:\n{}",
            std::fs::read_to_string(logs).unwrap_or_default()
        );
    }

    /// Sends SIGTERM without waiting (see [`Portico::exit_status`]).
    pub fn terminate(&self) {
        let pid = self.child.id().expect("portico is running");
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Waits up to 30 s for the process to exit on its own.
    pub async fn exit_status(mut self) -> std::process::ExitStatus {
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("portico did not exit within 30 s")
            .expect("wait for portico")
    }

    /// Kills the process with SIGKILL, as a crash or an OOM kill would, and waits for it.
    pub async fn kill(mut self) {
        self.child.kill().await.expect("kill portico");
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GETs a path on the admin listener: (status, body).
    pub async fn admin_get(&self, path: &str) -> (u16, String) {
        crate::http_get(&format!("{}{path}", self.admin), &[]).await
    }

    /// The value of one metric sample, e.g. `portico_cache_block_lookups_total{result="miss"}`.
    /// Waits until the memory tier's pretouch (`cache.memory_pretouch`) has stopped
    /// adding buffers; the bytes of free buffers kept then.
    pub async fn pretouched(&self) -> f64 {
        const KEPT: &str = "portico_cache_memory_kept_buffer_bytes";
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let mut last = self.metric(KEPT).await;
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = self.metric(KEPT).await;
            if now == last && now > 0.0 {
                return now;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the memory tier's pretouch did not settle: {now} bytes kept"
            );
            last = now;
        }
    }

    pub async fn metric(&self, sample: &str) -> f64 {
        let (_, text) = self.admin_get("/metrics").await;
        text.lines()
            .find_map(|line| {
                line.strip_prefix(sample)
                    .and_then(|rest| rest.trim().parse().ok())
            })
            .unwrap_or(0.0)
    }
}

/// One Portico node per directory of `dirs`, in front of `upstream`, each with the
/// settings `configure` gives; more than one make a fleet (cluster mode, each listing all,
/// on free peer ports), and each member holds its lease before this returns.
pub async fn start_fleet(
    binary: &Path,
    upstream: &str,
    dirs: &[tempfile::TempDir],
    configure: impl Fn(&mut Settings),
) -> Vec<Portico> {
    start_fleet_each(binary, upstream, dirs, |_, settings| configure(settings)).await
}

/// [`start_fleet`], `configure` given each member's position in `dirs` (a zone each, say).
pub async fn start_fleet_each(
    binary: &Path,
    upstream: &str,
    dirs: &[tempfile::TempDir],
    configure: impl Fn(usize, &mut Settings),
) -> Vec<Portico> {
    let listens: Vec<String> = dirs
        .iter()
        .map(|_| format!("127.0.0.1:{}", crate::minio::free_port()))
        .collect();
    start_members(binary, upstream, dirs, configure, &listens, &listens).await
}

/// [`start_fleet`] of members the others reach only through a forwarder each (the
/// forwarders, member by member): stopping one cuts its member off from the others
/// (not the other way round, and not from the upstream).
pub async fn start_proxied_fleet(
    binary: &Path,
    upstream: &str,
    dirs: &[tempfile::TempDir],
    configure: impl Fn(&mut Settings),
) -> (Vec<Portico>, Vec<crate::forwarder::Forwarder>) {
    let listens: Vec<String> = dirs
        .iter()
        .map(|_| format!("127.0.0.1:{}", crate::minio::free_port()))
        .collect();
    let mut proxies = Vec::new();
    for listen in &listens {
        proxies.push(crate::forwarder::Forwarder::start(listen).await);
    }
    let advertised: Vec<String> = proxies
        .iter()
        .map(|proxy| proxy.endpoint().trim_start_matches("http://").to_owned())
        .collect();
    let configure = |_: usize, settings: &mut Settings| configure(settings);
    let nodes = start_members(binary, upstream, dirs, configure, &listens, &advertised).await;
    (nodes, proxies)
}

/// Members listening on `listens`, known to each other as `advertised`.
async fn start_members(
    binary: &Path,
    upstream: &str,
    dirs: &[tempfile::TempDir],
    configure: impl Fn(usize, &mut Settings),
    listens: &[String],
    advertised: &[String],
) -> Vec<Portico> {
    let mut nodes = Vec::new();
    for (at, ((listen, advertise), dir)) in listens.iter().zip(advertised).zip(dirs).enumerate() {
        let mut settings = Settings::new(upstream.to_owned(), dir.path());
        configure(at, &mut settings);
        if dirs.len() > 1 {
            settings.cluster = cluster_section(listen, advertise, advertised);
        }
        nodes.push(Portico::start(binary, &settings).await);
    }
    for node in &nodes {
        while dirs.len() > 1 && node.metric("portico_cluster_lease_held").await != 1.0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    nodes
}

/// The `[cluster]` section of a member listening for peers on `listen`, known to the
/// others as `advertise`, in a fleet of `members` (their advertised addresses). The
/// membership is resolved every second ([`TEST_REFRESH`]): a member trusts its lease two
/// refreshes after it is listed, so the fleets of the tests settle in seconds.
pub fn cluster_section(listen: &str, advertise: &str, members: &[String]) -> String {
    let listed: Vec<String> = members.iter().map(|peer| format!("{peer:?}")).collect();
    format!(
        "enabled = true\nlisten = \"{listen}\"\nadvertise = \"{advertise}\"\nmembers = [{}]\nsecret = \"a-secret-of-the-test-fleet\"\nrefresh_interval = \"{TEST_REFRESH}\"\n",
        listed.join(", ")
    )
}

/// [`cluster_section`] for a member that reads the membership from `file`
/// (`cluster.members_file`).
pub fn cluster_section_with_file(listen: &str, advertise: &str, file: &Path) -> String {
    format!(
        "enabled = true\nlisten = \"{listen}\"\nadvertise = \"{advertise}\"\nmembers_file = \"{}\"\nsecret = \"a-secret-of-the-test-fleet\"\nrefresh_interval = \"{TEST_REFRESH}\"\n",
        file.display()
    )
}

/// The `cluster.refresh_interval` of test fleets.
pub const TEST_REFRESH: &str = "1s";
