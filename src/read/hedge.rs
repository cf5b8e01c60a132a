//! Hedged block fetches: when a block GET has no response head yet after a high quantile
//! of recent block GETs' times to first byte, a second identical request is sent;
//! whichever finishes first with the bytes is used and the other is dropped, which closes
//! its connection.
//!
//! Only the wait for the response head is hedged: a response that is arriving is never
//! duplicated, because a slow transfer means a busy link or CPU, which a second transfer
//! would make worse. The delay follows the upstream: the configured quantile of the last
//! [`WINDOW`] times to first byte (never below the configured floor), so at quantile q at
//! most about 1 − q of fetches are hedged, and an upstream that is slow for everyone raises
//! the delay instead of doubling its load. Until [`MIN_SAMPLES`] fetches have been seen
//! nothing is hedged.
//!
//! The quantile's promise is also enforced as a budget: every fetch that gets a response
//! head earns 1 − q of a hedge, at most [`BURST`] hedges are saved up, and a hedge spends
//! one. When the machine itself is saturated (every response head late, the quantile not
//! yet caught up), hedges stop at the budget instead of adding upstream requests.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::source::ResponseHead;
use crate::telemetry::{HedgeOutcome, Metrics};

/// Latencies the hedge quantile is computed over.
const WINDOW: usize = 256;
/// Latencies needed before the quantile is trusted.
const MIN_SAMPLES: usize = 20;
/// The budget counts thousandths of a hedge (exact sums, unlike fractions of a float).
const HEDGE: u64 = 1000;
/// Hedges that may be saved up in the budget.
const BURST: u64 = HEDGE;

pub struct Hedger {
    /// 0 disables hedging.
    quantile: f64,
    min_delay: Duration,
    state: Mutex<State>,
    metrics: Arc<Metrics>,
}

struct State {
    recent: VecDeque<Duration>,
    /// Thousandths of a hedge that may be sent now (fractions accrue per fetch).
    budget: u64,
}

impl Hedger {
    pub fn new(quantile: f64, min_delay: Duration, metrics: Arc<Metrics>) -> Self {
        Self {
            quantile,
            min_delay,
            state: Mutex::new(State {
                recent: VecDeque::with_capacity(WINDOW),
                budget: 0,
            }),
            metrics,
        }
    }

    /// How long to wait for a first request before hedging it; `None`: do not hedge.
    fn delay(&self) -> Option<Duration> {
        if self.quantile <= 0.0 {
            return None;
        }
        let mut samples: Vec<Duration> = {
            let state = self.state.lock();
            if state.recent.len() < MIN_SAMPLES {
                return None;
            }
            state.recent.iter().copied().collect()
        };
        let rank =
            ((samples.len() as f64 * self.quantile).ceil() as usize).clamp(1, samples.len()) - 1;
        let (_, at_rank, _) = samples.select_nth_unstable(rank);
        Some((*at_rank).max(self.min_delay))
    }

    fn record(&self, latency: Duration) {
        let mut state = self.state.lock();
        if state.recent.len() == WINDOW {
            state.recent.pop_front();
        }
        state.recent.push_back(latency);
        let earned = ((1.0 - self.quantile) * HEDGE as f64).round() as u64;
        state.budget = (state.budget + earned).min(BURST);
    }

    /// Takes one hedge from the budget, if there is one.
    fn spend(&self) -> bool {
        let mut state = self.state.lock();
        if state.budget < HEDGE {
            return false;
        }
        state.budget -= HEDGE;
        true
    }

    /// Runs `request`, and once more if the first run has no response head after the
    /// hedge delay. The first success is returned and the other run dropped; an error is
    /// returned only when every run has failed.
    pub async fn run<T, E, F, Fut>(&self, mut request: F) -> Result<T, E>
    where
        F: FnMut(ResponseHead) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let started = Instant::now();
        let head = ResponseHead::default();
        let first = request(head.clone());
        tokio::pin!(first);
        let Some(delay) = self.delay() else {
            return self.timed(started, &head, first.await);
        };
        tokio::select! {
            result = &mut first => return self.timed(started, &head, result),
            () = tokio::time::sleep(delay) => {}
        }
        if head.at().is_some() {
            return self.timed(started, &head, first.await);
        }
        if !self.spend() {
            self.metrics.count_hedge(HedgeOutcome::OverBudget);
            return self.timed(started, &head, first.await);
        }
        self.metrics.count_hedge(HedgeOutcome::Sent);
        let hedge_started = Instant::now();
        let hedge_head = ResponseHead::default();
        let second = request(hedge_head.clone());
        tokio::pin!(second);
        tokio::select! {
            result = &mut first => match result {
                Ok(value) => self.timed(started, &head, Ok(value)),
                Err(_) => self.hedge_result(hedge_started, &hedge_head, second.await),
            },
            result = &mut second => match result {
                Ok(value) => self.hedge_result(hedge_started, &hedge_head, Ok(value)),
                Err(_) => self.timed(started, &head, first.await),
            },
        }
    }

    /// Records a run's time to first byte, if its head arrived.
    fn timed<T, E>(
        &self,
        started: Instant,
        head: &ResponseHead,
        result: Result<T, E>,
    ) -> Result<T, E> {
        if let Some(at) = head.at() {
            self.record(at.duration_since(started));
        }
        result
    }

    fn hedge_result<T, E>(
        &self,
        started: Instant,
        head: &ResponseHead,
        result: Result<T, E>,
    ) -> Result<T, E> {
        if result.is_ok() {
            self.metrics.count_hedge(HedgeOutcome::Won);
        }
        self.timed(started, head, result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts runs that were dropped before they finished.
    struct DropGuard(Arc<AtomicUsize>, bool);

    impl Drop for DropGuard {
        fn drop(&mut self) {
            if !self.1 {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    fn counters() -> (Arc<AtomicUsize>, Arc<AtomicUsize>) {
        (Arc::default(), Arc::default())
    }

    fn hedger(quantile: f64) -> Hedger {
        let hedger = Hedger::new(
            quantile,
            Duration::from_millis(50),
            Arc::new(Metrics::new()),
        );
        for millis in 1..=100 {
            hedger.record(Duration::from_millis(millis));
        }
        hedger
    }

    /// A request whose `n`-th run gets its response head after `heads[n]` ms, finishes
    /// `transfer` ms later and answers `Ok(n)` (or `Err(n)` when `fails[n]`).
    fn runs(
        heads: &'static [u64],
        transfer: u64,
        fails: &'static [bool],
        started: Arc<AtomicUsize>,
        cancelled: Arc<AtomicUsize>,
    ) -> impl FnMut(ResponseHead) -> std::pin::Pin<Box<dyn Future<Output = Result<usize, usize>> + Send>>
    {
        move |head| {
            let run = started.fetch_add(1, Ordering::SeqCst);
            let cancelled = cancelled.clone();
            Box::pin(async move {
                let mut guard = DropGuard(cancelled, false);
                tokio::time::sleep(Duration::from_millis(heads[run])).await;
                head.arrived();
                tokio::time::sleep(Duration::from_millis(transfer)).await;
                guard.1 = true;
                if fails[run] { Err(run) } else { Ok(run) }
            })
        }
    }

    #[test]
    fn the_delay_is_the_quantile_of_recent_latencies_with_a_floor() {
        assert_eq!(hedger(0.95).delay(), Some(Duration::from_millis(95)));
        assert_eq!(hedger(0.5).delay(), Some(Duration::from_millis(50)));
        // Below the floor the floor holds.
        assert_eq!(hedger(0.1).delay(), Some(Duration::from_millis(50)));
        assert_eq!(hedger(0.0).delay(), None);
        let fresh = Hedger::new(0.95, Duration::ZERO, Arc::new(Metrics::new()));
        for _ in 0..MIN_SAMPLES - 1 {
            fresh.record(Duration::from_millis(5));
        }
        assert_eq!(fresh.delay(), None, "too few samples to hedge");
        fresh.record(Duration::from_millis(5));
        assert_eq!(fresh.delay(), Some(Duration::from_millis(5)));
        // The window forgets old latencies.
        for _ in 0..WINDOW {
            fresh.record(Duration::from_millis(300));
        }
        assert_eq!(fresh.delay(), Some(Duration::from_millis(300)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_request_is_hedged_and_the_loser_cancelled() {
        let hedger = hedger(0.95);
        let (started, cancelled) = counters();
        let begin = Instant::now();
        let result = hedger
            .run(runs(
                &[5_000, 5],
                5,
                &[false, false],
                started.clone(),
                cancelled.clone(),
            ))
            .await;
        assert_eq!(result, Ok(1), "the hedge answered");
        assert_eq!(begin.elapsed(), Duration::from_millis(95 + 10));
        assert_eq!(started.load(Ordering::SeqCst), 2);
        assert_eq!(
            cancelled.load(Ordering::SeqCst),
            1,
            "the slow run was dropped"
        );
        let text = hedger.metrics.render();
        assert!(
            text.contains("portico_upstream_hedges_total{result=\"sent\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("portico_upstream_hedges_total{result=\"won\"} 1"),
            "{text}"
        );
    }

    /// Runs a request whose head arrives after `head` ms and whose body takes `transfer`
    /// ms more, and checks it was not hedged.
    async fn assert_not_hedged(head: &'static [u64], transfer: u64) {
        let hedger = hedger(0.95);
        let (started, cancelled) = counters();
        let result = hedger
            .run(runs(
                head,
                transfer,
                &[false, false],
                started.clone(),
                cancelled,
            ))
            .await;
        assert_eq!(result, Ok(0));
        assert_eq!(started.load(Ordering::SeqCst), 1);
        let text = hedger.metrics.render();
        assert!(
            text.contains("portico_upstream_hedges_total{result=\"sent\"} 0"),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_fast_request_is_not_hedged() {
        assert_not_hedged(&[80, 10], 0).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_that_is_arriving_is_not_hedged() {
        // The head came in 10 ms; the body takes 2 s: a busy link, not a lost request.
        assert_not_hedged(&[10, 10], 2_000).await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_request_wins_when_it_finishes_before_the_hedge() {
        let hedger = hedger(0.95);
        let (started, cancelled) = counters();
        let result = hedger
            .run(runs(
                &[120, 500],
                0,
                &[false, false],
                started.clone(),
                cancelled.clone(),
            ))
            .await;
        assert_eq!(result, Ok(0));
        assert_eq!(started.load(Ordering::SeqCst), 2);
        assert_eq!(cancelled.load(Ordering::SeqCst), 1, "the hedge was dropped");
        let text = hedger.metrics.render();
        assert!(
            text.contains("portico_upstream_hedges_total{result=\"sent\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("portico_upstream_hedges_total{result=\"won\"} 0"),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_waits_for_the_other_run() {
        let hedger = hedger(0.95);
        let (started, cancelled) = counters();
        // The first fails after the hedge was sent: the hedge's bytes are used.
        let result = hedger
            .run(runs(
                &[100, 200],
                0,
                &[true, false],
                started.clone(),
                cancelled.clone(),
            ))
            .await;
        assert_eq!(result, Ok(1));
        // Both fail: the error is returned.
        let started = Arc::new(AtomicUsize::new(0));
        let result = hedger
            .run(runs(&[100, 200], 0, &[true, true], started, cancelled))
            .await;
        assert!(result.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn hedges_stay_within_the_budget_the_quantile_allows() {
        // Quantile 0.9: each fetch earns a tenth of a hedge, one can be saved up.
        let hedger = hedger(0.9);
        let slow = || {
            let (started, cancelled) = counters();
            (
                runs(&[5_000, 5], 5, &[false, false], started.clone(), cancelled),
                started,
            )
        };
        let (request, started) = slow();
        assert_eq!(hedger.run(request).await, Ok(1), "the saved-up hedge");
        assert_eq!(started.load(Ordering::SeqCst), 2);
        // The hedge's own fetch earned 0.1: a second straggler right after is not hedged.
        let (request, started) = slow();
        assert_eq!(hedger.run(request).await, Ok(0));
        assert_eq!(started.load(Ordering::SeqCst), 1, "over budget");
        // Eight more fetches (with the straggler's, 1.0 earned) buy the next hedge.
        for _ in 0..8 {
            hedger.record(Duration::from_millis(10));
        }
        let (request, started) = slow();
        assert_eq!(hedger.run(request).await, Ok(1));
        assert_eq!(started.load(Ordering::SeqCst), 2);
        let text = hedger.metrics.render();
        assert!(
            text.contains("portico_upstream_hedges_total{result=\"sent\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("portico_upstream_hedges_total{result=\"over_budget\"} 1"),
            "{text}"
        );
    }
}
