//! Fair fills: the slots for upstream block fetches (`upstream.max_concurrent_fills`),
//! shared between tenants by weight. A fetch takes a slot for its tenant and class; when
//! none is free it waits, and each freed slot goes to the waiting tenant that has had the
//! least service for its weight (start-time fair queueing: every grant advances the
//! tenant's tag by 1/weight, and a tenant that was idle starts from the tag of the last
//! grant, so it banks no credit). Within a tenant, demand reads go first, then prefetch,
//! then warm jobs. A tenant also waits while it has `max_concurrent_fills` in flight; one
//! with nothing queued leaves its share to the others.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::telemetry::Metrics;
use crate::tenant::{DEFAULT_TENANT, Tenant};

/// Why a block is fetched, in the order a tenant's fetches are granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FillClass {
    /// A client waits for it.
    Demand = 0,
    /// A sequential reader will want it soon.
    Prefetch = 1,
    /// An operator asked for it to be cached.
    Warm = 2,
}

impl FillClass {
    /// The `class` label of `portico_tenant_fills_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Demand => "demand",
            Self::Prefetch => "prefetch",
            Self::Warm => "warm",
        }
    }

    /// The class named `name` (as [`Self::as_str`] names it).
    pub fn named(name: &str) -> Option<Self> {
        [Self::Demand, Self::Prefetch, Self::Warm]
            .into_iter()
            .find(|class| class.as_str() == name)
    }
}

/// Who a block fetch is for: the tenant it is charged to and why.
#[derive(Debug, Clone)]
pub struct FillFor {
    pub tenant: Arc<Tenant>,
    pub class: FillClass,
}

impl FillFor {
    /// Charges the bytes a fill fetched from the source to its tenant's byte rate: what a
    /// tenant's reads cost the node includes the blocks they fill, up to 16 times what a
    /// small random read serves.
    pub fn fetched(&self, bytes: usize) {
        self.tenant.charge_bytes(bytes as u64);
    }
}

/// The fill slots. Cheap to clone.
#[derive(Clone)]
pub struct FillSlots {
    inner: Arc<Inner>,
}

struct Inner {
    capacity: usize,
    /// The tenant of fetches no request's tenant is known for (warm jobs, and other
    /// members' that name none this node knows).
    default: Arc<Tenant>,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    in_use: usize,
    /// The start tag of the last grant: where a tenant that was idle starts.
    clock: f64,
    tenants: HashMap<Arc<str>, Queue>,
}

/// One tenant's fetches in flight and waiting.
struct Queue {
    tenant: Arc<Tenant>,
    in_flight: usize,
    /// Its next grant's start tag.
    tag: f64,
    /// Waiting fetches by class, each in arrival order.
    waiting: [VecDeque<oneshot::Sender<FillSlot>>; 3],
}

impl Queue {
    fn waiting(&self) -> usize {
        self.waiting.iter().map(VecDeque::len).sum()
    }

    fn may_start(&self) -> bool {
        self.tenant
            .max_concurrent_fills()
            .is_none_or(|cap| self.in_flight < cap)
    }
}

/// A granted slot, held while the fetch runs; dropping it passes it on.
pub struct FillSlot {
    slots: FillSlots,
    tenant: Arc<str>,
    armed: bool,
}

impl Drop for FillSlot {
    fn drop(&mut self) {
        if self.armed {
            self.slots.release(&self.tenant);
        }
    }
}

impl FillSlots {
    pub fn new(capacity: usize, metrics: Arc<Metrics>) -> Self {
        Self {
            inner: Arc::new(Inner {
                capacity: capacity.max(1),
                default: Arc::new(Tenant::unlimited(DEFAULT_TENANT)),
                metrics,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// A slot for a fetch `fill` makes: at once when one is free and the tenant may start
    /// another, else when its turn comes.
    pub async fn acquire(&self, fill: &FillFor) -> FillSlot {
        let name = fill.tenant.key();
        let receiver = {
            let mut state = self.inner.state.lock();
            let free = state.in_use < self.inner.capacity;
            let clock = state.clock;
            let queue = state.queue(&name, &fill.tenant, clock);
            if free && queue.waiting() == 0 && queue.may_start() {
                let slot = self.grant(&mut state, &name);
                drop(state);
                self.inner
                    .metrics
                    .tenants
                    .count_fill(fill.tenant.name(), fill.class.as_str());
                return slot;
            }
            let (sender, receiver) = oneshot::channel();
            queue.waiting[fill.class as usize].push_back(sender);
            self.inner.metrics.tenants.fills_waiting.inc();
            receiver
        };
        let slot = receiver.await.unwrap_or_else(|_| {
            // The slots live as long as the read path that awaits them: a sender is
            // only dropped unsent when its slot was passed on elsewhere.
            FillSlot {
                slots: self.clone(),
                tenant: name.clone(),
                armed: false,
            }
        });
        self.inner
            .metrics
            .tenants
            .count_fill(fill.tenant.name(), fill.class.as_str());
        slot
    }

    /// How many fetches `fill` could start now without waiting: the free slots, within
    /// its tenant's cap, none while fetches wait for a slot.
    pub fn free_for(&self, fill: &FillFor) -> usize {
        let state = self.inner.state.lock();
        if state.tenants.values().any(|queue| queue.waiting() > 0) {
            return 0;
        }
        let free = self.inner.capacity.saturating_sub(state.in_use);
        let in_flight = state
            .tenants
            .get(&fill.tenant.key())
            .map_or(0, |queue| queue.in_flight);
        match fill.tenant.max_concurrent_fills() {
            Some(cap) => free.min(cap.saturating_sub(in_flight)),
            None => free,
        }
    }

    /// A demand fetch of the default tenant.
    pub fn default_fill(&self) -> FillFor {
        FillFor {
            tenant: self.inner.default.clone(),
            class: FillClass::Demand,
        }
    }

    /// Fetches of `tenant` waiting for a slot now.
    pub fn waiting(&self, tenant: &str) -> usize {
        self.inner
            .state
            .lock()
            .tenants
            .get(tenant)
            .map_or(0, Queue::waiting)
    }

    /// Counts a slot as taken by `tenant` and advances its tag.
    fn grant(&self, state: &mut State, tenant: &Arc<str>) -> FillSlot {
        state.in_use += 1;
        let clock = state.clock;
        let queue = state.tenants.get_mut(tenant).expect("queued tenant");
        queue.in_flight += 1;
        let start = queue.tag.max(clock);
        queue.tag = start + 1.0 / f64::from(queue.tenant.weight().max(1));
        state.clock = start;
        FillSlot {
            slots: self.clone(),
            tenant: tenant.clone(),
            armed: true,
        }
    }

    /// The slot `tenant` held is free: granted to the next waiting fetch, if any.
    fn release(&self, tenant: &Arc<str>) {
        let mut next = {
            let mut state = self.inner.state.lock();
            state.in_use -= 1;
            if let Some(queue) = state.tenants.get_mut(tenant) {
                queue.in_flight -= 1;
            }
            self.next_waiting(&mut state)
        };
        while let Some((sender, slot)) = next {
            self.inner.metrics.tenants.fills_waiting.dec();
            match sender.send(slot) {
                Ok(()) => return,
                Err(mut slot) => {
                    // Its fetch was cancelled while it waited: the slot goes on.
                    slot.armed = false;
                    let mut state = self.inner.state.lock();
                    state.in_use -= 1;
                    if let Some(queue) = state.tenants.get_mut(&slot.tenant) {
                        queue.in_flight -= 1;
                    }
                    next = self.next_waiting(&mut state);
                }
            }
        }
    }

    /// The waiting fetch whose turn it is, its slot granted: of the tenants that may
    /// start one, the one with the lowest tag; its first fetch of the first class.
    fn next_waiting(&self, state: &mut State) -> Option<(oneshot::Sender<FillSlot>, FillSlot)> {
        if state.in_use >= self.inner.capacity {
            return None;
        }
        let clock = state.clock;
        let tenant = state
            .tenants
            .iter()
            .filter(|(_, queue)| queue.waiting() > 0 && queue.may_start())
            .min_by(|(a_name, a), (b_name, b)| {
                a.tag
                    .max(clock)
                    .total_cmp(&b.tag.max(clock))
                    .then_with(|| a_name.cmp(b_name))
            })
            .map(|(name, _)| name.clone())?;
        let queue = state.tenants.get_mut(&tenant)?;
        let sender = queue.waiting.iter_mut().find_map(VecDeque::pop_front)?;
        let slot = self.grant(state, &tenant);
        Some((sender, slot))
    }
}

impl State {
    /// `tenant`'s queue, made when it has none; a tenant's newest [`Tenant`] (its limits
    /// after a reload) replaces the one it was made with.
    fn queue(&mut self, name: &Arc<str>, tenant: &Arc<Tenant>, clock: f64) -> &mut Queue {
        let queue = self.tenants.entry(name.clone()).or_insert_with(|| Queue {
            tenant: tenant.clone(),
            in_flight: 0,
            tag: clock,
            waiting: Default::default(),
        });
        if !Arc::ptr_eq(&queue.tenant, tenant) {
            queue.tenant = tenant.clone();
        }
        queue
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::tenant::TenantSpec;

    fn tenant(name: &str, weight: u32, cap: Option<u32>) -> FillFor {
        FillFor {
            tenant: Arc::new(Tenant::new(TenantSpec {
                weight,
                max_concurrent_fills: cap,
                ..TenantSpec::unlimited(name)
            })),
            class: FillClass::Demand,
        }
    }

    /// Queues `count` fetches of each of `fills` while every slot is held, then frees
    /// the slots one at a time: the tenants in the order they were granted.
    async fn order(slots: &FillSlots, fills: &[FillFor], count: usize) -> Vec<String> {
        let (sender, mut granted) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for _ in 0..count {
            for fill in fills {
                let (slots, fill, sender) = (slots.clone(), fill.clone(), sender.clone());
                tasks.push(tokio::spawn(async move {
                    let slot = slots.acquire(&fill).await;
                    sender.send(fill.tenant.name().to_owned()).unwrap();
                    // Held until the test lets it go.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    drop(slot);
                }));
                tokio::task::yield_now().await;
            }
        }
        drop(sender);
        let mut order = Vec::new();
        while let Some(name) = granted.recv().await {
            order.push(name);
        }
        for task in tasks {
            task.await.unwrap();
        }
        order
    }

    #[tokio::test(start_paused = true)]
    async fn slots_go_round_by_weight_and_an_idle_tenant_banks_nothing() {
        let slots = FillSlots::new(1, Arc::new(Metrics::new()));
        let (a, b) = (tenant("a", 1, None), tenant("b", 3, None));
        let granted = order(&slots, &[a.clone(), b.clone()], 8).await;
        // After the first grant (a, which found the slot free), b gets three for each of
        // a's while both wait.
        let first_twelve: Vec<&str> = granted[..12].iter().map(String::as_str).collect();
        let b_count = first_twelve.iter().filter(|name| **name == "b").count();
        assert!((8..=9).contains(&b_count), "{granted:?}");

        // a alone for a while, then b again: b gets no catch-up burst.
        order(&slots, std::slice::from_ref(&a), 6).await;
        let granted = order(&slots, &[a, b], 4).await;
        let leading_b = granted.iter().take_while(|name| *name == "b").count();
        assert!(leading_b <= 4, "{granted:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn two_equal_tenants_share_the_slots_evenly_whoever_asks_more() {
        let slots = FillSlots::new(2, Arc::new(Metrics::new()));
        let (a, b) = (tenant("a", 1, None), tenant("b", 1, None));
        // a queues three times as many fetches as b.
        let fills = [a.clone(), a.clone(), a, b];
        let granted = order(&slots, &fills, 10).await;
        let early: Vec<&String> = granted[..20].iter().collect();
        let b_count = early.iter().filter(|name| **name == "b").count();
        assert!((9..=11).contains(&b_count), "{granted:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenant_waits_at_its_cap_and_demand_goes_before_prefetch_and_warm() {
        let slots = FillSlots::new(8, Arc::new(Metrics::new()));
        let capped = tenant("capped", 1, Some(2));
        let held: Vec<FillSlot> = vec![slots.acquire(&capped).await, slots.acquire(&capped).await];
        let waiting = {
            let (slots, capped) = (slots.clone(), capped.clone());
            tokio::spawn(async move { slots.acquire(&capped).await })
        };
        tokio::task::yield_now().await;
        assert_eq!(slots.waiting("capped"), 1, "at its cap with slots free");
        drop(held);
        let _third = waiting.await.unwrap();
        assert_eq!(slots.waiting("capped"), 0);

        let one = FillSlots::new(1, Arc::new(Metrics::new()));
        let holder = one.acquire(&tenant("t", 1, None)).await;
        let (sender, mut granted) = tokio::sync::mpsc::unbounded_channel();
        for class in [FillClass::Warm, FillClass::Prefetch, FillClass::Demand] {
            let fill = FillFor {
                class,
                ..tenant("t", 1, None)
            };
            let (one, sender) = (one.clone(), sender.clone());
            tokio::spawn(async move {
                let slot = one.acquire(&fill).await;
                sender.send(class).unwrap();
                drop(slot);
            });
            tokio::task::yield_now().await;
        }
        drop(holder);
        let mut classes = Vec::new();
        for _ in 0..3 {
            classes.push(granted.recv().await.unwrap());
        }
        assert_eq!(
            classes,
            [FillClass::Demand, FillClass::Prefetch, FillClass::Warm]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_wait_passes_its_slot_on() {
        let slots = FillSlots::new(1, Arc::new(Metrics::new()));
        let t = tenant("t", 1, None);
        let holder = slots.acquire(&t).await;
        let cancelled = {
            let (slots, t) = (slots.clone(), t.clone());
            tokio::spawn(async move { slots.acquire(&t).await })
        };
        let patient = {
            let (slots, t) = (slots.clone(), t.clone());
            tokio::spawn(async move { slots.acquire(&t).await })
        };
        tokio::task::yield_now().await;
        cancelled.abort();
        let _ = cancelled.await;
        drop(holder);
        let slot = tokio::time::timeout(Duration::from_secs(1), patient)
            .await
            .expect("the slot reached the next waiter")
            .unwrap();
        drop(slot);
        assert_eq!(slots.inner.state.lock().in_use, 0);
    }
}
