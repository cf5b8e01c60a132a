//! Raw HTTP/1.1: requests written byte by byte on a fresh connection, for the malformed,
//! slow, interrupted and hand-framed requests an HTTP client would not send, and the body
//! framings they carry.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends a raw HTTP/1.1 request and returns the response status (0 if none came).
pub async fn raw_request(address: &str, head: &str, body: &[u8]) -> u16 {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream.write_all(head.as_bytes()).await.expect("send head");
    stream.write_all(body).await.expect("send body");
    let mut response = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buffer))
            .await
            .expect("response in time")
            .expect("read");
        response.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&response);
        // Skip interim 100 Continue responses.
        let final_head = text
            .split("\r\n\r\n")
            .find(|head| head.starts_with("HTTP/1.1 ") && !head.starts_with("HTTP/1.1 100"));
        if let Some(head) = final_head {
            return head[9..12].parse().unwrap_or(0);
        }
        if read == 0 {
            return 0;
        }
    }
}

/// Wraps `body` in HTTP/1.1 chunked transfer coding.
pub fn http_chunked(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in body.chunks(100_000) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// Sends `request` on a new connection and reads until the server closes it or 10 s
/// pass: (status, everything received as text, time taken). Status 0: no response.
pub async fn raw_exchange(address: &str, request: &[u8]) -> (u16, String, Duration) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(address).await.expect("connect");
    // The server may answer and close before it has read everything.
    let _ = stream.write_all(request).await;
    let mut received = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut received)).await;
    let text = String::from_utf8_lossy(&received).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, text, started.elapsed())
}

/// `data` in `aws-chunked` framing, in chunks of `chunk` bytes; with `signed`, each chunk
/// carries a placeholder `chunk-signature` (for a Portico that does not verify them); with
/// `trailer`, one trailing header.
pub fn aws_chunked(
    data: &[u8],
    chunk: usize,
    signed: bool,
    trailer: Option<(&str, &str)>,
) -> Vec<u8> {
    let signature =
        ";chunk-signature=0000000000000000000000000000000000000000000000000000000000000000";
    let extension = if signed { signature } else { "" };
    let mut out = Vec::new();
    for piece in data.chunks(chunk) {
        out.extend_from_slice(format!("{:x}{extension}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("0{extension}\r\n").as_bytes());
    if let Some((name, value)) = trailer {
        out.extend_from_slice(format!("{name}:{value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}
