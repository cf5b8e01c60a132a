//! The loopback ceiling: the least work any HTTP server can do to answer range GETs of
//! objects it holds in memory. It parses no more than the request line and the Range
//! header, keeps no statistics and sends each response with one vectored write (or with
//! `sendfile` from a memfd), so its throughput in a scenario is what the machine allows
//! any server, Portico included.
//!
//! The server runs in a process of its own (this benchmark binary, started again with
//! `BENCH_CEILING_DIR` set), like the servers it is compared with, so that it does not
//! share the load generator's runtime.

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;

use bytes::{Buf, Bytes};
use portico_testkit::minio::free_port;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::{TcpListener, TcpStream};

const DIR_VARIABLE: &str = "BENCH_CEILING_DIR";
const PORT_VARIABLE: &str = "BENCH_CEILING_PORT";
const SEND_VARIABLE: &str = "BENCH_CEILING_SEND";

/// How the ceiling sends a response body.
#[derive(Clone, Copy)]
pub enum Sending {
    /// `writev` of the head and the body from memory: one copy into the socket.
    Write,
    /// The head with `write`, the body with `sendfile` from a sealed memfd: no copy on
    /// the sending side.
    Sendfile,
}

impl Sending {
    fn as_str(self) -> &'static str {
        match self {
            Sending::Write => "write",
            Sending::Sendfile => "sendfile",
        }
    }
}

/// A running ceiling server.
pub struct Ceiling {
    child: Child,
    pub port: u16,
}

impl Ceiling {
    /// Starts a ceiling on a free port, serving every file in `dir` as
    /// `/<any bucket>/<file name>`.
    pub fn start(dir: &Path, sending: Sending) -> Self {
        let port = free_port();
        let child = Command::new(std::env::current_exe().expect("benchmark executable"))
            .env(DIR_VARIABLE, dir)
            .env(PORT_VARIABLE, port.to_string())
            .env(SEND_VARIABLE, sending.as_str())
            .spawn()
            .expect("start the ceiling server");
        super::wait_for_port(port, "the ceiling server");
        Self { child, port }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serves as a ceiling and exits when this process was started as one; returns at once
/// otherwise.
pub fn serve_if_asked() {
    let Ok(dir) = std::env::var(DIR_VARIABLE) else {
        return;
    };
    let port: u16 = std::env::var(PORT_VARIABLE)
        .ok()
        .and_then(|port| port.parse().ok())
        .expect("BENCH_CEILING_PORT");
    let sending = match std::env::var(SEND_VARIABLE).as_deref() {
        Ok("sendfile") => Sending::Sendfile,
        _ => Sending::Write,
    };
    let objects = Arc::new(load(Path::new(&dir)));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("ceiling listener");
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let objects = objects.clone();
            tokio::spawn(async move {
                let _ = connection(stream, &objects, sending).await;
            });
        }
    });
    std::process::exit(0);
}

/// One object both ways: in memory and in a sealed memfd.
struct Object {
    bytes: Bytes,
    memfd: OwnedFd,
}

fn load(dir: &Path) -> HashMap<String, Object> {
    let mut objects = HashMap::new();
    for entry in std::fs::read_dir(dir).expect("ceiling directory") {
        let path = entry.expect("ceiling entry").path();
        let bytes = Bytes::from(std::fs::read(&path).expect("ceiling object"));
        let memfd = rustix::fs::memfd_create("ceiling", rustix::fs::MemfdFlags::ALLOW_SEALING)
            .expect("memfd");
        let mut file = std::fs::File::from(memfd);
        std::io::Write::write_all(&mut file, &bytes).expect("fill the memfd");
        let memfd = OwnedFd::from(file);
        rustix::fs::fcntl_add_seals(
            &memfd,
            rustix::fs::SealFlags::WRITE
                | rustix::fs::SealFlags::GROW
                | rustix::fs::SealFlags::SHRINK,
        )
        .expect("seal the memfd");
        let name = path
            .file_name()
            .expect("file name")
            .to_string_lossy()
            .into_owned();
        objects.insert(name, Object { bytes, memfd });
    }
    objects
}

/// Answers the requests of one keep-alive connection until the client closes it.
async fn connection(
    mut stream: TcpStream,
    objects: &HashMap<String, Object>,
    sending: Sending,
) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buffer = Vec::with_capacity(4096);
    loop {
        let end = loop {
            if let Some(at) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
                break at + 4;
            }
            if stream.read_buf(&mut buffer).await? == 0 {
                return Ok(());
            }
        };
        let request = String::from_utf8_lossy(&buffer[..end]).into_owned();
        buffer.drain(..end);
        let Some((object, first, last)) = parse(&request, objects) else {
            stream
                .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                .await?;
            continue;
        };
        let total = object.bytes.len();
        let (status, length) = match (first, last) {
            (0, None) => ("200 OK", total),
            (first, last) => ("206 Partial Content", last.unwrap_or(total - 1) - first + 1),
        };
        let last = first + length - 1;
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {length}\r\nContent-Range: bytes {first}-{last}/{total}\r\n\r\n"
        );
        match sending {
            Sending::Write => {
                let mut response = Bytes::from(head).chain(object.bytes.slice(first..=last));
                stream.write_all_buf(&mut response).await?;
            }
            Sending::Sendfile => {
                stream.write_all(head.as_bytes()).await?;
                send_file(&stream, &object.memfd, first as u64, length).await?;
            }
        }
    }
}

/// The object and byte range a GET asks for; `None` for an unknown object or a range
/// outside it.
fn parse<'a>(
    request: &str,
    objects: &'a HashMap<String, Object>,
) -> Option<(&'a Object, usize, Option<usize>)> {
    let path = request.split_whitespace().nth(1)?;
    let object = objects.get(path.rsplit('/').next()?)?;
    let range = request.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("range")
            .then(|| value.trim().strip_prefix("bytes="))
            .flatten()
    });
    let Some(range) = range else {
        return Some((object, 0, None));
    };
    let (first, last) = range.split_once('-')?;
    let (first, last): (usize, usize) = (first.parse().ok()?, last.parse().ok()?);
    (first <= last && last < object.bytes.len()).then_some((object, first, Some(last)))
}

/// Sends `length` bytes of `memfd` from `offset` with `sendfile`, waiting whenever the
/// socket is full.
async fn send_file(
    stream: &TcpStream,
    memfd: &OwnedFd,
    mut offset: u64,
    mut length: usize,
) -> io::Result<()> {
    while length > 0 {
        stream.writable().await?;
        match stream.try_io(Interest::WRITABLE, || {
            rustix::fs::sendfile(stream, memfd, Some(&mut offset), length).map_err(io::Error::from)
        }) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(sent) => length -= sent,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
            Err(error) => return Err(error),
        }
    }
    Ok(())
}
