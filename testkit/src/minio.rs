//! One MinIO server per test binary, on a free loopback port, with its data in a
//! temporary directory, and more for the tests that need their own (a notification
//! target in MinIO's environment). A shell watchdog stops each one and removes its data
//! when it is dropped or the test process exits (its stdin pipe closes), however the
//! process ends.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub const ACCESS_KEY: &str = "porticotest";
pub const SECRET_KEY: &str = "porticotest-secret";

pub struct Minio {
    pub address: String,
    _watchdog: Mutex<(Child, ChildStdin)>,
}

impl Minio {
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }
}

/// A loopback port for a server the test starts, that nothing listens on now and that the
/// kernel will not hand out on its own: ports are taken in turn, from a place drawn for
/// each process, outside the range the kernel picks outgoing connections' ports from
/// (`net.ipv4.ip_local_port_range`). A port picked by binding port 0 and closing it could
/// be taken by any outgoing connection on the machine before the server binds it.
pub fn free_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let (low, high) = outside_ephemeral();
    let span = u32::from(high - low);
    if NEXT.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        // Another test process draws another place to start from.
        let seed = std::process::id().wrapping_mul(2_654_435_761)
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.subsec_nanos());
        let _ = NEXT.compare_exchange(
            0,
            seed % span + 1,
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    for _ in 0..span {
        let turn = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = low + (turn % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {low}..{high}");
}

/// The ports below the kernel's ephemeral range (down to 10000), or above it when that
/// leaves more room.
fn outside_ephemeral() -> (u16, u16) {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok();
    let (first, last) = range
        .as_deref()
        .and_then(|text| {
            let mut bounds = text.split_whitespace().map(str::parse::<u16>);
            Some((bounds.next()?.ok()?, bounds.next()?.ok()?))
        })
        .unwrap_or((32768, 60999));
    let below = first.saturating_sub(10_000);
    let above = u16::MAX - last;
    if below >= above {
        (10_000, first)
    } else {
        (last + 1, u16::MAX)
    }
}

/// The test MinIO's KMS key (name and 32 bytes in base64): a fixed test value.
pub const KMS_SECRET_KEY: &str = "portico-test-key:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// `PORTICO_MINIO`, or the MinIO that `make tools` installed in ~/.cache/portico-tools.
fn minio_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("PORTICO_MINIO") {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("HOME").expect("HOME is not set");
    let tools = PathBuf::from(home).join(".cache/portico-tools/bin");
    let installed = std::fs::read_dir(&tools).ok().and_then(|entries| {
        entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .is_some_and(|name| name.to_string_lossy().starts_with("minio-"))
            })
            .max()
    });
    installed.unwrap_or_else(|| {
        panic!(
            "MinIO is not installed in {}: run `make test` (it installs MinIO) or set PORTICO_MINIO",
            tools.display()
        )
    })
}

fn is_live(address: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(address) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /minio/health/ready HTTP/1.0\r\nHost: {address}\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.starts_with("HTTP/1.1 200") || response.starts_with("HTTP/1.0 200")
}

fn start() -> Minio {
    start_on(free_port(), &[])
}

/// A MinIO server of its own on `port`, with `env` added to its environment (e.g.
/// `MINIO_NOTIFY_WEBHOOK_*`); stopped when dropped.
pub fn start_on(port: u16, env: &[(&str, &str)]) -> Minio {
    let binary = minio_binary();
    let data = tempfile::Builder::new()
        .prefix("portico-minio-")
        .tempdir()
        .expect("temporary directory")
        .keep();
    let address = format!("127.0.0.1:{port}");
    let script = r#"
        "$MINIO" server "$DATA" --address "$ADDRESS" --quiet >"$DATA.log" 2>&1 &
        child=$!
        read -r _ignored
        kill "$child" 2>/dev/null
        wait "$child" 2>/dev/null
        rm -rf "$DATA" "$DATA.log"
    "#;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .env("MINIO", &binary)
        .env("DATA", &data)
        .env("ADDRESS", &address)
        .env("MINIO_ROOT_USER", ACCESS_KEY)
        .env("MINIO_ROOT_PASSWORD", SECRET_KEY)
        .env("MINIO_BROWSER", "off")
        // A static key so objects can be stored with server-side encryption (SSE-S3 and
        // SSE-KMS), as S3 stores them; for tests only.
        .env("MINIO_KMS_SECRET_KEY", KMS_SECRET_KEY)
        // Last, so a test can replace the root credential too.
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("cannot start the MinIO watchdog shell");
    let stdin = child.stdin.take().expect("watchdog stdin");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !is_live(&address) {
        assert!(
            Instant::now() < deadline,
            "MinIO did not become ready on {address}; see {}.log",
            data.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Minio {
        address,
        _watchdog: Mutex::new((child, stdin)),
    }
}

/// The shared MinIO server, started on first use.
pub fn minio() -> &'static Minio {
    static MINIO: OnceLock<Minio> = OnceLock::new();
    MINIO.get_or_init(start)
}
