//! The one shutdown signal. `app::run` fires it; every task that outlives a request — the
//! listeners, the file watchers, warm jobs, prefetches, the disk probe — watches it and
//! ends, so a stopped Portico leaves nothing running in its runtime. Work that must end
//! rather than stop (a write's exchange with the origin and its fleet round, once its
//! client has hung up) runs as [`Tasks`], which shutdown waits for within its grace.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

/// Fires the shutdown signal. Dropping it without firing leaves the signal unfired.
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

/// Watches the shutdown signal. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

/// A new signal, not yet fired.
pub fn channel() -> (Trigger, Shutdown) {
    let (sender, receiver) = watch::channel(false);
    (Trigger(sender), Shutdown(receiver))
}

impl Trigger {
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// A signal that never fires, for a part used without a server around it.
    pub fn never() -> Self {
        channel().1
    }

    /// Whether shutdown has begun.
    pub fn is_fired(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once shutdown has begun (never, if the trigger is gone unfired).
    pub async fn fired(&self) {
        let mut receiver = self.0.clone();
        if receiver.wait_for(|fired| *fired).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Runs `task` until it ends or shutdown begins; `None` when shutdown came first.
    pub async fn run<F: Future>(&self, task: F) -> Option<F::Output> {
        tokio::select! {
            output = task => Some(output),
            () = self.fired() => None,
        }
    }
}

/// Work that runs to its end whoever waits for it, tracked so shutdown can wait for it.
/// Cheap to clone: clones track the same tasks.
#[derive(Debug, Clone, Default)]
pub struct Tasks(TaskTracker);

impl Tasks {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `task` to its end, even if whoever awaits the handle goes away.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.0.spawn(task)
    }

    /// Waits up to `grace` for every task to end (no task can be added afterwards);
    /// how many still run when it gives up.
    pub async fn finish(&self, grace: Duration) -> usize {
        self.0.close();
        let _ = tokio::time::timeout(grace, self.0.wait()).await;
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_task_ends_when_shutdown_fires_and_not_before() {
        let (trigger, shutdown) = channel();
        let waiting = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { shutdown.run(std::future::pending::<()>()).await }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!waiting.is_finished());
        assert!(!shutdown.is_fired());
        trigger.fire();
        assert_eq!(waiting.await.unwrap(), None);
        assert!(shutdown.is_fired());
        // A late watcher sees it at once.
        assert_eq!(shutdown.run(std::future::pending::<()>()).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_trigger_never_fires() {
        let shutdown = Shutdown::never();
        let ended = shutdown
            .run(tokio::time::sleep(Duration::from_secs(5)))
            .await;
        assert_eq!(ended, Some(()));
        assert!(!shutdown.is_fired());
    }

    #[tokio::test(start_paused = true)]
    async fn tasks_run_on_when_nobody_waits_and_finish_waits_for_them_within_a_grace() {
        let tasks = Tasks::new();
        let (done, ended) = tokio::sync::oneshot::channel();
        let handle = tasks.spawn(async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            let _ = done.send(());
        });
        drop(handle);
        let stuck = tasks.spawn(std::future::pending::<()>());
        assert_eq!(
            tasks.finish(Duration::from_secs(10)).await,
            1,
            "the stuck one"
        );
        assert!(
            ended.await.is_ok(),
            "the task nobody awaited ran to its end"
        );
        stuck.abort();
    }
}
