//! nginx as an S3 caching proxy, the reference the scenarios compare with.

use super::*;

/// nginx's cache size unless a scenario bounds it: more than any scenario reads.
pub(super) const NGINX_MAX_SIZE: &str = "8g";

/// nginx as an S3 caching proxy: 4 MiB slices cached on disk, one fetch per slice. With
/// `sendfile`, it also takes the two sending settings of Debian's stock `nginx.conf`
/// (`sendfile on`, `tcp_nopush on`); without, nginx's built-in defaults (both off).
pub(super) struct Nginx {
    pub(super) child: Child,
    pub(super) port: u16,
    /// Its prefix directory, where `error.log` is.
    dir: String,
}

impl Drop for Nginx {
    /// When the benchmark fails, nginx's last complaints go with it (the work directory
    /// is removed right after) and so does nginx.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let log = std::fs::read_to_string(format!("{}/error.log", self.dir)).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        eprintln!("nginx on port {}, the end of its error.log:", self.port);
        for line in &lines[lines.len().saturating_sub(20)..] {
            eprintln!("  {line}");
        }
        // Nothing else stops it on this path; TERM lets the master stop its workers.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Nginx {
    pub(super) fn start(dir: &Path, origin: &str, sendfile: bool) -> Self {
        Self::start_sized(dir, origin, sendfile, NGINX_MAX_SIZE)
    }

    /// nginx with its cache bounded to `max_size` (nginx's size syntax).
    pub(super) fn start_sized(dir: &Path, origin: &str, sendfile: bool, max_size: &str) -> Self {
        Self::launch(dir, origin, sendfile, max_size, None)
    }

    /// nginx without `sendfile` in `cgroup`, so that its page cache shares the cgroup's
    /// memory limit with its processes, and with disk reads handed to a thread pool
    /// (`aio threads`), as nginx is run for a cache larger than its memory: without it
    /// a read that misses the page cache blocks a worker and every request it serves.
    pub(super) fn start_in(dir: &Path, origin: &str, cgroup: &MemoryCgroup) -> Self {
        Self::launch(dir, origin, false, NGINX_MAX_SIZE, Some(cgroup))
    }

    pub(super) fn launch(
        dir: &Path,
        origin: &str,
        sendfile: bool,
        max_size: &str,
        cgroup: Option<&MemoryCgroup>,
    ) -> Self {
        let port = free_port();
        for sub in ["cache", "tmp"] {
            std::fs::create_dir_all(dir.join(sub)).expect("nginx directories");
        }
        // Workers run as an unprivileged user when the master is root.
        let _ = Command::new("chmod")
            .args(["-R", "a+rwx"])
            .arg(dir)
            .status();
        let dir = dir.display();
        let sending = if sendfile {
            "sendfile on;\n    tcp_nopush on;"
        } else {
            "sendfile off;\n    tcp_nopush off;"
        };
        let aio = if cgroup.is_some() { "aio threads;" } else { "" };
        let config = format!(
            r#"daemon off;
master_process on;
worker_processes 2;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    {sending}
    {aio}
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    proxy_cache_path {dir}/cache levels=1:2 keys_zone=s3:64m max_size={max_size} inactive=1d use_temp_path=off;
    upstream origin {{ server {origin}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            slice 4m;
            proxy_cache s3;
            proxy_cache_key $uri$slice_range;
            proxy_set_header Range $slice_range;
            proxy_cache_valid 200 206 1d;
            proxy_cache_lock on;
            proxy_cache_lock_timeout 300s;
            proxy_cache_lock_age 300s;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_pass http://origin;
        }}
    }}
}}
"#
        );
        let path = format!("{dir}/nginx.conf");
        std::fs::write(&path, config).expect("nginx.conf");
        let args = [
            "-p".to_owned(),
            dir.to_string(),
            "-c".to_owned(),
            path,
            "-e".to_owned(),
            format!("{dir}/error.log"),
        ];
        let program = "/usr/sbin/nginx";
        let child = match cgroup {
            Some(cgroup) => cgroup.command(program, &args),
            None => {
                let mut command = Command::new(program);
                command.args(&args);
                command
            }
        }
        .spawn()
        .expect("start nginx (make bench installs it)");
        wait_for_port(port, &format!("nginx (see {dir}/error.log)"));
        Self {
            child,
            port,
            dir: dir.to_string(),
        }
    }

    pub(super) fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-QUIT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}
