//! The one shutdown signal. `app::run` fires it; every task that outlives a request — the
//! listeners, the file watchers, warm jobs, prefetches, the disk probe — watches it and
//! ends, so a stopped Portico leaves nothing running in its runtime.

use std::future::Future;

use tokio::sync::watch;

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
}
