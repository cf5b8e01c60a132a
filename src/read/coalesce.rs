//! Single-flight execution: concurrent callers with the same key share one run of a task.
//!
//! Invariants: the task runs in its own tokio task, so a caller that goes away never
//! cancels it for the others; a key is in flight only while its task runs, so a caller
//! that arrives after completion starts a fresh run and never sees an old result.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use parking_lot::Mutex;
use tracing::Instrument;

/// The shared task panicked or was aborted at shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the shared task did not complete")]
pub struct TaskFailed;

type InFlight<V> = Shared<BoxFuture<'static, Result<V, TaskFailed>>>;

pub struct Coalescer<K, V> {
    inflight: Arc<Mutex<HashMap<K, InFlight<V>>>>,
}

impl<K, V> Default for Coalescer<K, V> {
    fn default() -> Self {
        Self {
            inflight: Arc::default(),
        }
    }
}

/// Removes a key from the in-flight map when its task ends, however it ends.
struct Completion<K: Hash + Eq, V> {
    key: Option<K>,
    inflight: Arc<Mutex<HashMap<K, InFlight<V>>>>,
}

impl<K: Hash + Eq, V> Drop for Completion<K, V> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.inflight.lock().remove(&key);
        }
    }
}

impl<K, V> Coalescer<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Runs `make()` unless a run for `key` is in flight, and returns that run's result.
    /// The flag is true for the caller whose `make` ran.
    pub async fn run<F, Fut>(&self, key: K, make: F) -> (Result<V, TaskFailed>, bool)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V> + Send + 'static,
    {
        let (shared, led) = {
            let mut inflight = self.inflight.lock();
            match inflight.get(&key) {
                Some(shared) => (shared.clone(), false),
                None => {
                    let completion = Completion {
                        key: Some(key.clone()),
                        inflight: self.inflight.clone(),
                    };
                    // The run's origin requests are charged to the caller that started it.
                    let task = crate::tenant::for_the_caller(make());
                    // The map lock is held until the entry is inserted, so the completion
                    // guard cannot remove the key before it exists.
                    // The shared work belongs to the trace of the caller that started it.
                    let handle = tokio::spawn(
                        async move {
                            let value = task.await;
                            drop(completion);
                            value
                        }
                        .instrument(tracing::Span::current()),
                    );
                    let shared = handle
                        .map(|joined| joined.map_err(|_| TaskFailed))
                        .boxed()
                        .shared();
                    inflight.insert(key, shared.clone());
                    (shared, true)
                }
            }
        };
        (shared.await, led)
    }

    /// Keys with a run in flight (the tests check that finished runs leave none).
    #[cfg(test)]
    fn in_flight(&self) -> usize {
        self.inflight.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn concurrent_callers_share_one_run() {
        let coalescer = Arc::new(Coalescer::<&str, u32>::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let mut callers = Vec::new();
        for _ in 0..10 {
            let coalescer = coalescer.clone();
            let runs = runs.clone();
            callers.push(tokio::spawn(async move {
                coalescer
                    .run("object", move || async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        7
                    })
                    .await
            }));
        }
        let mut leaders = 0;
        for caller in callers {
            let (value, led) = caller.await.unwrap();
            assert_eq!(value, Ok(7));
            leaders += usize::from(led);
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(leaders, 1);
        assert_eq!(coalescer.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_leader_does_not_cancel_the_run() {
        let coalescer = Arc::new(Coalescer::<u8, &'static str>::default());
        let leader = {
            let coalescer = coalescer.clone();
            tokio::spawn(async move {
                coalescer
                    .run(1, || async {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        "done"
                    })
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        leader.abort();
        let (value, led) = coalescer.run(1, || async { "second run" }).await;
        assert_eq!((value, led), (Ok("done"), false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_run_is_not_reused() {
        let coalescer = Coalescer::<u8, u32>::default();
        assert_eq!(coalescer.run(1, || async { 1 }).await, (Ok(1), true));
        assert_eq!(coalescer.run(1, || async { 2 }).await, (Ok(2), true));
    }

    #[tokio::test]
    async fn a_panicking_run_fails_its_callers_and_clears_the_key() {
        let coalescer = Coalescer::<u8, u32>::default();
        let (value, _) = coalescer.run(1, || async { panic!("boom") }).await;
        assert_eq!(value, Err(TaskFailed));
        assert_eq!(coalescer.in_flight(), 0);
    }
}
