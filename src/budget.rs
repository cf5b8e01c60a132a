//! The memory budget: one bound, for the whole process, on the bytes requests hold beside
//! the cache's own capacity — blocks on their way to a client (fetched, read from disk, or
//! found in memory and kept past their eviction), readahead, prefetch, warm jobs and
//! write-through buffers.
//!
//! Invariants:
//! - A charge is taken before the bytes it covers exist (before the lookup or fetch that
//!   makes them) and returned when the last handle on them is dropped: bytes handed to a
//!   connection stay charged until the connection has written them, so a slow reader
//!   holds budget, never unbounded memory.
//! - Charges are granted first come, first served; an opportunistic one (readahead,
//!   prefetch, write-through) is taken only from budget nobody waits for.
//! - One charge never exceeds the whole budget (it is clamped to it), so no request waits
//!   for room that can never exist.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::telemetry::{BudgetWait, Metrics};

/// The budget is counted in KiB: one charge may then cover up to 4 TiB (`u32` units).
const UNIT_BYTES: u64 = 1024;

/// The process's memory budget. Cheap to clone.
#[derive(Clone)]
pub struct MemoryBudget {
    permits: Arc<Semaphore>,
    limit_units: u64,
    /// How long a request that must start now (the first block of a GET) waits for room.
    wait: Duration,
    metrics: Arc<Metrics>,
}

/// The budget was spent for longer than a request may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the memory budget for bytes in flight is spent")]
pub struct Exhausted;

impl MemoryBudget {
    pub fn new(limit_bytes: u64, wait: Duration, metrics: Arc<Metrics>) -> Self {
        let limit_units = units(limit_bytes).clamp(1, Semaphore::MAX_PERMITS as u64);
        metrics
            .inflight_limit_bytes
            .set(i64::try_from(limit_units * UNIT_BYTES).unwrap_or(i64::MAX));
        Self {
            permits: Arc::new(Semaphore::new(limit_units as usize)),
            limit_units,
            wait,
            metrics,
        }
    }

    /// A charge for `bytes`, waiting as long as it takes.
    pub async fn reserve(&self, bytes: u64) -> Charge {
        if let Some(charge) = self.try_reserve(bytes) {
            return charge;
        }
        self.metrics.count_budget_wait(BudgetWait::Waited);
        self.acquire(bytes).await
    }

    /// A charge for `bytes`, waiting at most the configured time.
    pub async fn reserve_within(&self, bytes: u64) -> Result<Charge, Exhausted> {
        if let Some(charge) = self.try_reserve(bytes) {
            return Ok(charge);
        }
        match tokio::time::timeout(self.wait, self.acquire(bytes)).await {
            Ok(charge) => {
                self.metrics.count_budget_wait(BudgetWait::Waited);
                Ok(charge)
            }
            Err(_) => {
                self.metrics.count_budget_wait(BudgetWait::Refused);
                Err(Exhausted)
            }
        }
    }

    /// A charge for `bytes` if the budget has room now and nobody waits for it.
    pub fn try_reserve(&self, bytes: u64) -> Option<Charge> {
        let permit = self
            .permits
            .clone()
            .try_acquire_many_owned(self.units_of(bytes))
            .ok()?;
        Some(self.charge(permit))
    }

    async fn acquire(&self, bytes: u64) -> Charge {
        let permit = self
            .permits
            .clone()
            .acquire_many_owned(self.units_of(bytes))
            .await
            .expect("the budget's semaphore is never closed");
        self.charge(permit)
    }

    fn charge(&self, permit: OwnedSemaphorePermit) -> Charge {
        let charge = Charge {
            permit,
            gauge: self.metrics.inflight_bytes.clone(),
        };
        charge.gauge.inc_by(charge.bytes_signed());
        charge
    }

    fn units_of(&self, bytes: u64) -> u32 {
        let clamped = units(bytes).clamp(1, self.limit_units);
        u32::try_from(clamped).unwrap_or(u32::MAX)
    }
}

fn units(bytes: u64) -> u64 {
    bytes.div_ceil(UNIT_BYTES)
}

/// Budget held; returned when dropped.
pub struct Charge {
    permit: OwnedSemaphorePermit,
    gauge: Gauge,
}

impl Charge {
    pub fn bytes(&self) -> u64 {
        self.permit.num_permits() as u64 * UNIT_BYTES
    }

    fn bytes_signed(&self) -> i64 {
        i64::try_from(self.bytes()).unwrap_or(i64::MAX)
    }

    /// Returns what the charge holds beyond `bytes`.
    pub fn shrink_to(&mut self, bytes: u64) {
        let keep = units(bytes).max(1) as usize;
        let held = self.permit.num_permits();
        if keep < held
            && let Some(extra) = self.permit.split(held - keep)
        {
            self.gauge
                .dec_by(i64::try_from(extra.num_permits() as u64 * UNIT_BYTES).unwrap_or(0));
        }
    }

    /// `bytes`, carrying this charge: it is returned when the last slice of them is
    /// dropped, wherever that happens.
    pub fn attach(self, bytes: Bytes) -> Bytes {
        Bytes::from_owner(Charged {
            bytes,
            _charge: Arc::new(self),
        })
    }

    /// `parts`, sharing this charge: it is returned when the last slice of any of them
    /// is dropped.
    pub fn attach_all(self, parts: Vec<Bytes>) -> Vec<Bytes> {
        let charge = Arc::new(self);
        parts
            .into_iter()
            .map(|bytes| {
                Bytes::from_owner(Charged {
                    bytes,
                    _charge: charge.clone(),
                })
            })
            .collect()
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.gauge.dec_by(self.bytes_signed());
    }
}

/// Bytes that hold a charge as long as they live.
struct Charged {
    bytes: Bytes,
    _charge: Arc<Charge>,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(limit_bytes: u64) -> MemoryBudget {
        MemoryBudget::new(
            limit_bytes,
            Duration::from_millis(50),
            Arc::new(Metrics::new()),
        )
    }

    fn held(budget: &MemoryBudget) -> i64 {
        budget.metrics.inflight_bytes.get()
    }

    #[tokio::test]
    async fn bytes_keep_their_charge_until_the_last_slice_is_dropped() {
        let budget = budget(8 * 1024);
        let charge = budget.try_reserve(6 * 1024).unwrap();
        let bytes = charge.attach(Bytes::from(vec![7u8; 6 * 1024]));
        let slice = bytes.slice(100..200);
        drop(bytes);
        assert_eq!(held(&budget), 6 * 1024);
        assert!(budget.try_reserve(4 * 1024).is_none());
        assert_eq!(slice[..], [7u8; 100]);
        drop(slice);
        assert_eq!(held(&budget), 0);
        assert!(budget.try_reserve(8 * 1024).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_must_start_waits_then_is_refused() {
        let budget = budget(4 * 1024);
        let all = budget.try_reserve(4 * 1024).unwrap();
        assert_eq!(budget.reserve_within(1).await.err(), Some(Exhausted));
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move {
                budget
                    .reserve_within(2048)
                    .await
                    .map(|charge| charge.bytes())
            }
        });
        tokio::task::yield_now().await;
        drop(all);
        assert_eq!(waiting.await.unwrap(), Ok(2048));
    }

    #[tokio::test]
    async fn opportunistic_charges_never_overtake_a_waiting_one() {
        let budget = budget(4 * 1024);
        let first = budget.try_reserve(3 * 1024).unwrap();
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.reserve(3 * 1024).await }
        });
        while budget.metrics.budget_waits_of(BudgetWait::Waited) == 0 {
            tokio::task::yield_now().await;
        }
        drop(first);
        // The freed room belongs to the waiter, not to a later try.
        assert!(budget.try_reserve(2 * 1024).is_none());
        let granted = waiting.await.unwrap();
        assert_eq!(granted.bytes(), 3 * 1024);
    }

    #[tokio::test]
    async fn charges_are_clamped_to_the_budget_and_shrink() {
        let budget = budget(4 * 1024);
        let mut whole = budget.try_reserve(1 << 40).unwrap();
        assert_eq!(whole.bytes(), 4 * 1024);
        whole.shrink_to(1500);
        assert_eq!(whole.bytes(), 2048);
        assert_eq!(held(&budget), 2048);
        assert!(budget.try_reserve(2048).is_some());
    }
}
