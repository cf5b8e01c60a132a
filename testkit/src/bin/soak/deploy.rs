//! The deployments under test: Portico nodes on fixed loopback ports (so a node killed
//! and started again keeps its address and its disk tier), each deployment behind its own
//! fault-injecting forwarder to the origin, and cluster members that reach each other
//! through forwarders too (stopping one cuts its member off). Each member reads the
//! membership from a file of its own, which the soak rewrites to take a member out and
//! put it back.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use aws_sdk_s3::Client;
use parking_lot::Mutex;
use portico_testkit::forwarder::Forwarder;
use portico_testkit::minio::free_port;
use portico_testkit::portico::{Portico, Settings, cluster_section_with_file};
use portico_testkit::s3_client;

use crate::report::Troubles;

/// One Portico process, which the faults stop and start again.
pub struct Node {
    pub name: String,
    pub admin: String,
    pub cache_dir: PathBuf,
    pub client: Client,
    /// `None` for a node the soak did not start.
    settings: Option<Settings>,
    binary: PathBuf,
    process: tokio::sync::Mutex<Option<Portico>>,
    /// The running process's id; 0 while it is down.
    pid: AtomicU32,
    clustered: bool,
    /// The logs of the processes before this one.
    logs: Mutex<String>,
}

impl Node {
    pub fn new(name: String, binary: &Path, mut settings: Settings, clustered: bool) -> Self {
        let (s3, admin) = (
            format!("127.0.0.1:{}", free_port()),
            format!("127.0.0.1:{}", free_port()),
        );
        settings
            .env
            .push(("PORTICO_SERVER_LISTEN".to_owned(), s3.clone()));
        settings
            .env
            .push(("PORTICO_ADMIN_LISTEN".to_owned(), admin.clone()));
        let s3 = format!("http://{s3}");
        Self {
            name,
            client: s3_client(&s3, true),
            admin: format!("http://{admin}"),
            cache_dir: settings.cache_dir.clone(),
            settings: Some(settings),
            binary: binary.to_owned(),
            process: tokio::sync::Mutex::new(None),
            pid: AtomicU32::new(0),
            clustered,
            logs: Mutex::new(String::new()),
        }
    }

    /// A node the soak only talks to (`endpoint`, signing with `key` and `secret`).
    pub fn external(endpoint: &str, key: &str, secret: &str) -> Self {
        Self {
            name: endpoint.to_owned(),
            admin: String::new(),
            cache_dir: PathBuf::new(),
            client: portico_testkit::s3_client_as(endpoint, key, secret, true),
            settings: None,
            binary: PathBuf::new(),
            process: tokio::sync::Mutex::new(None),
            pid: AtomicU32::new(0),
            clustered: false,
            logs: Mutex::new(String::new()),
        }
    }

    /// Whether the soak runs this node's process.
    pub fn started_here(&self) -> bool {
        self.settings.is_some()
    }

    pub fn pid(&self) -> Option<u32> {
        Some(self.pid.load(Ordering::SeqCst)).filter(|pid| *pid != 0)
    }

    /// Starts the process (on the same ports and cache directory as before); in a
    /// cluster, waits up to 30 s for it to hold its lease. An error says why it did not
    /// come up.
    pub async fn start(&self) -> Result<(), String> {
        self.spawn().await?;
        self.wait_for_lease().await
    }

    /// Starts the process, without waiting for its lease.
    pub async fn spawn(&self) -> Result<(), String> {
        let Some(settings) = self.settings.clone() else {
            return Err(format!("{} was not started by the soak", self.name));
        };
        let mut process = self.process.lock().await;
        let binary = self.binary.clone();
        let started = tokio::spawn(async move { Portico::start(&binary, &settings).await })
            .await
            .map_err(|error| format!("{} did not start: {error}", self.name))?;
        self.pid.store(started.pid().unwrap_or(0), Ordering::SeqCst);
        *process = Some(started);
        Ok(())
    }

    /// In a cluster, waits up to 30 s for the member to hold its lease.
    pub async fn wait_for_lease(&self) -> Result<(), String> {
        if !self.clustered {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while metric(&self.admin, "portico_cluster_lease_held").await != Some(1.0) {
            if tokio::time::Instant::now() > deadline {
                return Err(format!("{} holds no lease 30 s after starting", self.name));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Sends `signal` (`STOP`, `CONT`, `HUP`) to the running process, if any.
    pub fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let _ = std::process::Command::new("kill")
                .args([format!("-{signal}"), pid.to_string()])
                .status();
        }
    }

    /// `kill -9`, as a crash or an OOM kill.
    pub async fn kill(&self) {
        if let Some(process) = self.process.lock().await.take() {
            self.pid.store(0, Ordering::SeqCst);
            let logs = process.logs();
            process.kill().await;
            self.logs.lock().push_str(&logs);
        }
    }

    /// SIGTERM, as a rolling restart: the member leaves. An error if it did not exit
    /// cleanly.
    pub async fn leave(&self) -> Result<(), String> {
        let Some(process) = self.process.lock().await.take() else {
            return Ok(());
        };
        self.pid.store(0, Ordering::SeqCst);
        process.terminate();
        let logs = process.logs();
        let status = process.exit_status().await;
        self.logs.lock().push_str(&logs);
        if status.success() {
            Ok(())
        } else {
            Err(format!("{} exited with {status} on SIGTERM", self.name))
        }
    }

    /// Every log line this node wrote so far, over its restarts.
    pub async fn logs(&self) -> String {
        let mut all = self.logs.lock().clone();
        if let Some(process) = self.process.lock().await.as_ref() {
            all.push_str(&process.logs());
        }
        all
    }

    /// Stops the process cleanly at the end of the run.
    pub async fn stop(&self) -> Result<(), String> {
        self.leave().await
    }
}

/// One sample from the admin listener at `admin`, if it answers.
pub async fn metric(admin: &str, sample: &str) -> Option<f64> {
    let url = format!("{admin}/metrics");
    let fetch = portico_testkit::http_request("GET", &url, &[]);
    let (status, _, body) = tokio::time::timeout(Duration::from_secs(5), fetch)
        .await
        .ok()?;
    if status != 200 {
        return None;
    }
    String::from_utf8_lossy(&body).lines().find_map(|line| {
        line.strip_prefix(sample)
            .and_then(|rest| rest.trim().parse().ok())
    })
}

/// A single node or a fleet, with its origin forwarder and bucket.
pub struct Deployment {
    pub name: &'static str,
    pub bucket: String,
    pub nodes: Vec<Node>,
    /// Between the nodes and the origin; the origin faults act on it.
    /// `None` for a deployment the soak did not start.
    pub origin: Option<tokio::sync::Mutex<Forwarder>>,
    /// In front of each member's peer port (a fleet only).
    pub peers: Vec<tokio::sync::Mutex<Forwarder>>,
    /// The members' peer addresses as the others reach them, and the directory of their
    /// members files (a fleet only).
    advertised: Vec<String>,
    members_files: Option<tempfile::TempDir>,
    pub memory_capacity: u64,
    pub disk_capacity: u64,
    pub max_inflight: u64,
    pub serve_stale_on_error: bool,
    pub fillable: bool,
    /// When the origin failed (errors, resets, delays, down) for this deployment.
    pub origin_troubles: Troubles,
    /// When a node was down, restarting, or cut off from the others.
    pub node_troubles: Troubles,
}

/// What a deployment's nodes are configured with.
pub struct Plan<'a> {
    pub name: &'static str,
    pub binary: &'a Path,
    /// The origin, `host:port`.
    pub minio: &'a str,
    pub bucket: String,
    pub members: usize,
    pub dirs: Vec<PathBuf>,
    pub memory_capacity: u64,
    pub disk_capacity: u64,
    pub direct_io: bool,
    pub serve_stale_on_error: bool,
    /// The disk tier's file system is small (a tmpfs): the fill-disk fault applies.
    pub fillable: bool,
    pub events_token: &'a str,
}

pub const MAX_INFLIGHT: u64 = 256 << 20;

impl Deployment {
    /// The deployment `plan` describes, its nodes not started yet.
    pub async fn new(plan: Plan<'_>) -> Self {
        let origin = Forwarder::start(plan.minio).await;
        let clustered = plan.members > 1;
        let listens: Vec<String> = (0..plan.members)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let mut peers = Vec::new();
        let mut advertised = Vec::new();
        if clustered {
            for listen in &listens {
                let proxy = Forwarder::start(listen).await;
                advertised.push(proxy.endpoint().trim_start_matches("http://").to_owned());
                peers.push(tokio::sync::Mutex::new(proxy));
            }
        }
        let members_files =
            clustered.then(|| tempfile::tempdir().expect("a directory for the members files"));
        let mut nodes = Vec::new();
        for (index, dir) in plan.dirs.iter().enumerate() {
            let mut settings = Settings::new(origin.endpoint(), dir);
            settings.block_size = "1MiB";
            settings.memory_capacity = leak(format!("{}B", plan.memory_capacity));
            settings.disk_capacity = leak(format!("{}B", plan.disk_capacity));
            settings.metadata_ttl = "5s";
            settings.negative_ttl = "2s";
            settings.serve_stale_on_error = plan.serve_stale_on_error;
            settings.debug_log = false;
            settings.listing = "cached_prefixes = [\"*/list/\"]\nttl = \"5s\"\n".to_owned();
            settings.tables = format!("[events]\ntoken = \"{}\"\n", plan.events_token);
            settings.cache_extra = format!("direct_io = {}\n", plan.direct_io);
            if let Some(files) = &members_files {
                let file = members_file(files.path(), index);
                std::fs::write(&file, advertised.join("\n")).expect("a members file");
                settings.cluster =
                    cluster_section_with_file(&listens[index], &advertised[index], &file);
            }
            let name = if clustered {
                format!("{} member {index}", plan.name)
            } else {
                plan.name.to_owned()
            };
            nodes.push(Node::new(name, plan.binary, settings, clustered));
        }
        Self {
            name: plan.name,
            bucket: plan.bucket,
            nodes,
            origin: Some(tokio::sync::Mutex::new(origin)),
            peers,
            advertised,
            members_files,
            memory_capacity: plan.memory_capacity,
            disk_capacity: plan.disk_capacity,
            max_inflight: MAX_INFLIGHT,
            serve_stale_on_error: plan.serve_stale_on_error,
            fillable: plan.fillable,
            origin_troubles: Troubles::default(),
            node_troubles: Troubles::default(),
        }
    }

    /// Nodes the soak only talks to, in front of an origin it reaches itself.
    pub fn external(bucket: String, nodes: Vec<Node>) -> Self {
        Self {
            name: "external",
            bucket,
            nodes,
            origin: None,
            peers: Vec::new(),
            advertised: Vec::new(),
            members_files: None,
            memory_capacity: 0,
            disk_capacity: 0,
            max_inflight: 0,
            serve_stale_on_error: true,
            fillable: false,
            origin_troubles: Troubles::default(),
            node_troubles: Troubles::default(),
        }
    }

    /// The most a node may hold resident: its memory tier, its in-flight budget and 256 MiB
    /// for everything else.
    pub fn rss_bound(&self) -> u64 {
        self.memory_capacity + self.max_inflight + (256 << 20)
    }

    /// A node picked by `pick` (an index drawn by the caller).
    pub fn node(&self, pick: usize) -> &Node {
        &self.nodes[pick % self.nodes.len()]
    }

    /// Lists every member but `left_out` in each member's members file, and has each read
    /// it again (SIGHUP): the member left out runs on outside the membership.
    pub fn list_all_but(&self, left_out: Option<usize>) {
        let Some(files) = &self.members_files else {
            return;
        };
        let listed: Vec<&str> = self
            .advertised
            .iter()
            .enumerate()
            .filter(|(index, _)| Some(*index) != left_out)
            .map(|(_, member)| member.as_str())
            .collect();
        for (index, node) in self.nodes.iter().enumerate() {
            let file = members_file(files.path(), index);
            if std::fs::write(&file, listed.join("\n")).is_ok() {
                node.signal("HUP");
            }
        }
    }
}

/// Member `index`'s members file in `dir`.
fn members_file(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("members-{index}"))
}

/// Settings hold `&'static str`s; the soak makes a handful of these once.
fn leak(value: String) -> &'static str {
    Box::leak(value.into_boxed_str())
}
