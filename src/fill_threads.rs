//! The threads cache fills run on: a runtime of their own, at a lower CPU priority than
//! the threads that serve hits.
//!
//! A fill receives a whole block from the origin, copies it into a block buffer and
//! checks it: milliseconds of CPU per 4 MiB block, in bursts as the chunks arrive. A hit
//! costs tens of microseconds. On the same worker threads, a hit that lands behind a
//! fill's burst waits for it, and one tenant's cold reads stretch another tenant's hits
//! (docs/operations.md, "One cache for many teams"). On threads of their own with a
//! higher nice value, the kernel's scheduler runs a hit's thread as soon as it wakes, and
//! fills take the CPU the hits leave: all of it when there are no hits, and at least the
//! share their nice value gives them when hits saturate the cores.
//!
//! Invariants:
//! - Only the work between a fill's upstream request and its block in hand runs here
//!   (the request, the body's chunks copied into the block, the check), and the upstream
//!   connections' own tasks (socket reads and writes, HTTP framing; see
//!   `SdkHttpClient::with_connections_on`); the cache lookup, the disk and the response
//!   to the client stay on the serving runtime.
//! - Every thread of the runtime (workers and blocking threads) takes the nice value as
//!   it starts. A nice value of 0, or a system that refuses it, runs fills at the serving
//!   threads' priority, on threads of their own still.
//! - Without a runtime of their own ([`FillThreads::serving`], the in-process tests),
//!   fills run on the caller's runtime: a test's paused clock covers them.

use std::future::Future;
use std::sync::Arc;

use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;

/// Where fills run. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct FillThreads {
    own: Option<Arc<Owned>>,
}

/// The runtime of the fill threads, shut down in the background when the last clone
/// goes (a runtime may not be dropped inside another one).
#[derive(Debug)]
struct Owned {
    runtime: Option<Runtime>,
    handle: Handle,
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl FillThreads {
    /// Fills on the runtime of whoever starts them.
    pub fn serving() -> Self {
        Self::default()
    }

    /// A runtime of `threads` worker threads named `portico-fill`, each at `nice` (0 to
    /// 19).
    pub fn start(threads: usize, nice: i32) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("portico-fill")
            .on_thread_start(move || lower_priority(nice))
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        Ok(Self {
            own: Some(Arc::new(Owned {
                runtime: Some(runtime),
                handle,
            })),
        })
    }

    /// Their runtime, when they have one of their own.
    pub fn runtime(&self) -> Option<Handle> {
        self.own.as_ref().map(|own| own.handle.clone())
    }

    /// Runs `fill` on the fill threads.
    pub fn spawn<F>(&self, fill: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.own {
            Some(own) => own.handle.spawn(fill),
            None => tokio::spawn(fill),
        }
    }
}

/// Raises the calling thread's nice value to `nice` (on Linux the nice value is a
/// thread's own). A refusal leaves the thread as it was: fills still run apart.
fn lower_priority(nice: i32) {
    if nice <= 0 {
        return;
    }
    if let Err(error) = rustix::process::setpriority_process(None, nice) {
        tracing::warn!(%error, nice, "cannot lower the fill threads' priority; fills run at the serving threads' priority");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nice value of the calling thread, from `/proc/thread-self/stat` (field 19).
    fn own_nice() -> i32 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("stat");
        let after_name = &stat[stat.rfind(')').expect("a name") + 2..];
        after_name
            .split(' ')
            .nth(16)
            .expect("nice")
            .parse()
            .expect("a number")
    }

    #[tokio::test]
    async fn fills_run_on_threads_of_their_own_at_the_nice_value_given() {
        let threads = FillThreads::start(2, 7).expect("a runtime");
        let (name, nice) = threads
            .spawn(async {
                let name = std::thread::current().name().map(str::to_owned);
                (name, own_nice())
            })
            .await
            .expect("the fill");
        assert_eq!(name.as_deref(), Some("portico-fill"));
        assert_eq!(nice, 7);
        // The serving thread keeps its own.
        assert_eq!(own_nice(), 0);
        // Dropped inside a runtime without a panic: shut down in the background.
        drop(threads);
    }

    #[tokio::test]
    async fn without_threads_of_their_own_fills_run_on_the_callers_runtime() {
        let threads = FillThreads::serving();
        let here = Handle::current().id();
        let there = threads
            .spawn(async { Handle::current().id() })
            .await
            .expect("the fill");
        assert_eq!(here, there);
    }
}
