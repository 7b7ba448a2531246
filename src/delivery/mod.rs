//! The deliverer: sends the outbox's due rows to their destinations, at least once and
//! always with the same key, so that a destination that dedupes by `Idempotency-Key` books
//! each document exactly once.
//!
//! A pass goes over each destination whose circuit lets it: claims a few due rows (leased),
//! sends them one by one, records each outcome while it still holds the lease, and stops
//! early when the circuit opens. A failure is retried after a delay drawn uniformly between
//! zero and `backoff_ms * 2^(attempts - 1)` (capped at `backoff_max_ms`): full jitter, so that
//! retries after an outage do not all come back at once. `process` makes one pass over
//! what it queued; `deliver` passes until the queue is empty (`--drain`); `watch` runs a
//! deliverer thread beside its workers.

mod send;

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::{Config, Destination};
use crate::registry::{
    Attempted, CircuitState, Claimed, DeliveryState, Gate, Policy, Recorded, Registry,
    RegistryError, Wanted,
};

pub use crate::registry::PROTOCOL_ERROR;
pub use send::{missing_environment, COMMAND_REFUSED};

/// Rows claimed at once: few, so that an opening circuit leaves most of them unsent and
/// unclaimed, and a deliverer that dies holds few leases.
const CLAIM: usize = 8;

/// Rows of a folder destination claimed, written and recorded together: one round of
/// fsyncs and one transaction for them all.
const FOLDER_BATCH: usize = 512;

/// Beyond a destination's timeout, how long a claimed row stays leased to its deliverer.
const LEASE_MARGIN_MS: u64 = 30_000;

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub delivered: u64,
    pub retrying: u64,
    pub dead: u64,
    /// Attempts whose rows another deliverer took over meanwhile (not recorded by us).
    pub lost: u64,
    /// Destinations skipped because their circuit is open (or another deliverer probes it).
    pub waiting: u64,
}

impl Summary {
    fn add(&mut self, other: &Summary) {
        self.delivered += other.delivered;
        self.retrying += other.retrying;
        self.dead += other.dead;
        self.lost += other.lost;
        self.waiting += other.waiting;
    }

    pub fn attempts(&self) -> u64 {
        self.delivered + self.retrying + self.dead
    }
}

/// Which rows a deliverer takes.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    All,
    /// Only the rows this process queued (`documents release` sends what it let go).
    QueuedBy(&'a str),
}

impl<'a> Scope<'a> {
    fn queued_by(self) -> Option<&'a str> {
        match self {
            Scope::All => None,
            Scope::QueuedBy(owner) => Some(owner),
        }
    }
}

/// A deliverer: one HTTP agent and an owner for its leases. The agent keeps no idle
/// connection: each POST has a connection of its own, so an answer a destination (or a proxy
/// before it) sent beyond the one to its request, such as a second `200`, is never read as
/// the answer to the next document. On loopback that costs about 0.2 ms per POST (docs/delivery.md,
/// "An answer belongs to its request").
pub struct Deliverer<'c> {
    config: &'c Config,
    owner: String,
    agent: ureq::Agent,
    /// Destinations already said to lack environment variables (said once, not per pass).
    warned: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl<'c> Deliverer<'c> {
    pub fn new(config: &'c Config, owner: &str) -> Self {
        Deliverer {
            config,
            owner: owner.to_string(),
            agent: ureq::AgentBuilder::new()
                .redirects(0)
                .max_idle_connections(0)
                .max_idle_connections_per_host(0)
                .build(),
            warned: std::sync::Mutex::default(),
        }
    }

    /// The destinations this deliverer can send to: `out/`, and the declared ones with every
    /// environment variable their headers need (one that lacks some is said once).
    fn sendable(&self) -> Vec<&'c Destination> {
        let config: &'c Config = self.config;
        config
            .sendable_destinations()
            .filter(|d| {
                let missing = send::missing_environment(d);
                if missing.is_empty() {
                    return true;
                }
                if self
                    .warned
                    .lock()
                    .map(|mut w| w.insert(d.name.clone()))
                    .unwrap_or(true)
                {
                    tracing::error!(destination = %d.name, variables = ?missing, "not delivering: the environment lacks variables its headers need; its deliveries wait");
                }
                false
            })
            .collect()
    }

    /// When this deliverer next has something to send (of `scope`); `None`: nothing it can
    /// send is queued (what is left waits for a destination it cannot reach).
    pub fn next_due(
        &self,
        registry: &Registry,
        scope: Scope<'_>,
    ) -> Result<Option<i64>, RegistryError> {
        let names: Vec<&str> = self.sendable().iter().map(|d| d.name.as_str()).collect();
        registry.next_sendable(&names, scope.queued_by(), &crate::owner::is_dead)
    }

    /// Says (at error level) which queued or retrying deliveries no configured destination
    /// will send: their destination was renamed or removed from `partners.toml`.
    pub fn warn_unconfigured(&self, registry: &Registry) -> Result<(), RegistryError> {
        for (name, state, n) in registry.delivery_counts()? {
            let open = matches!(state, DeliveryState::Queued | DeliveryState::Retrying);
            let sent = self.config.sendable_destinations().any(|d| d.name == name);
            if open && !sent {
                tracing::error!(destination = %name, %state, deliveries = n, "deliveries wait for a destination that partners.toml no longer declares; declare it again (or x12gate deliveries lists them)");
            }
        }
        Ok(())
    }

    /// One pass: every row of `scope` due now is attempted at most once, destination by
    /// destination, unless `stop` says to stop or a circuit opens.
    pub fn pass(
        &self,
        registry: &mut Registry,
        scope: Scope<'_>,
        stop: &dyn Fn() -> bool,
    ) -> Result<Summary, RegistryError> {
        let mut total = Summary::default();
        let started = crate::registry::now_ms();
        // Nothing it can send due: no transaction at all (an idle watcher passes every poll).
        if self
            .next_due(registry, scope)?
            .is_none_or(|next| next > started)
        {
            return Ok(total);
        }
        for d in self.sendable() {
            if stop() {
                break;
            }
            let s = self.destination(registry, d, scope, started, stop)?;
            total.add(&s);
        }
        if total.dead > 0 {
            let depth = dead_depth(registry)?;
            tracing::error!(
                dead = total.dead,
                depth,
                "deliveries dead-lettered: x12gate deliveries --state dead"
            );
        }
        Ok(total)
    }

    fn destination(
        &self,
        registry: &mut Registry,
        d: &Destination,
        scope: Scope<'_>,
        started: i64,
        stop: &dyn Fn() -> bool,
    ) -> Result<Summary, RegistryError> {
        let mut summary = Summary::default();
        let probe_ms = ms(d.timeout_ms.saturating_add(LEASE_MARGIN_MS));
        loop {
            if stop() {
                return Ok(summary);
            }
            let gate =
                registry.circuit_gate(&d.name, &self.owner, probe_ms, &crate::owner::is_dead)?;
            let batch = matches!(d.kind, crate::config::DestinationKind::Folder { .. });
            let (limit, wave) = match gate {
                // A folder's files are written a batch at a time, one round of fsyncs each.
                Gate::Closed if batch => (FOLDER_BATCH, FOLDER_BATCH),
                Gate::Closed => (CLAIM.max(d.concurrency), d.concurrency.max(1)),
                Gate::Probe => (1, 1),
                Gate::Wait { .. } => {
                    summary.waiting += 1;
                    return Ok(summary);
                }
            };
            // Sent `wave` at a time: the last wave's rows wait for the ones before.
            let waves = limit.div_ceil(wave) as u64;
            let lease = ms((d.timeout_ms.saturating_add(LEASE_MARGIN_MS)).saturating_mul(waves));
            let wanted = Wanted {
                destination: &d.name,
                limit,
                // Due when the pass began: a row retried in this pass waits for the next.
                due_ms: started,
                queued_by: scope.queued_by(),
            };
            let claimed: Vec<Claimed> =
                registry.claim_deliveries(wanted, &self.owner, lease, &crate::owner::is_dead)?;
            if claimed.is_empty() {
                if gate == Gate::Probe {
                    registry.abandon_probe(&d.name, &self.owner)?;
                }
                return Ok(summary);
            }
            let mut opened = false;
            let mut left = Vec::new();
            let one_wave = ms(d.timeout_ms.saturating_add(LEASE_MARGIN_MS));
            for chunk in claimed.chunks(wave) {
                if opened || stop() {
                    left.extend(chunk.iter().map(|c| c.id));
                    continue;
                }
                // Still ours, just before sending: a row whose lease ran out meanwhile (a
                // stall) may be another deliverer's now, and is not sent twice at once.
                let held = registry.renew_deliveries(
                    &self.owner,
                    &chunk.iter().map(|c| c.id).collect::<Vec<_>>(),
                    one_wave,
                )?;
                let chunk: Vec<Claimed> = chunk
                    .iter()
                    .filter(|c| held.contains(&c.id))
                    .cloned()
                    .collect();
                if chunk.is_empty() {
                    if gate == Gate::Probe {
                        registry.abandon_probe(&d.name, &self.owner)?;
                    }
                    continue;
                }
                let ids: Vec<i64> = chunk.iter().map(|c| c.document_id).collect();
                let bodies = registry.document_bodies(&ids)?;
                let sent = self.send_all(d, &chunk, bodies);
                // Sent, not recorded: the next attempt sends them again with the same keys.
                fail::fail_point!("deliver.sent", |_| std::process::abort());
                opened |= self.record(registry, d, &chunk, &sent, &mut summary)?;
            }
            if !left.is_empty() {
                registry.unclaim_deliveries(&self.owner, &left)?;
            }
            if opened || stop() {
                return Ok(summary);
            }
        }
    }

    /// One attempt at each of `claimed`, at once (each on a thread of its own; a folder's
    /// as one batch of files), given their JSON: what came back and how long it took, in
    /// order.
    fn send_all(
        &self,
        d: &Destination,
        claimed: &[Claimed],
        bodies: Vec<crate::registry::KeptBody>,
    ) -> Vec<(Attempted, u64)> {
        let began = Instant::now();
        let took = |began: Instant| u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
        if matches!(d.kind, crate::config::DestinationKind::Folder { .. }) {
            let written = send::folder(d, claimed, bodies, &self.owner);
            let took = took(began);
            return written.into_iter().map(|a| (a, took)).collect();
        }
        let one = |c: &Claimed, body: crate::registry::KeptBody| {
            let began = Instant::now();
            let outcome = send::send(&self.agent, d, c, body);
            (outcome, took(began))
        };
        if let ([c], [body]) = (claimed, bodies.as_slice()) {
            return vec![one(c, body.clone())];
        }
        std::thread::scope(|scope| {
            let handles: Vec<_> = claimed
                .iter()
                .zip(bodies)
                .map(|(c, body)| scope.spawn(move || one(c, body)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        (
                            Attempted::Failed {
                                status: "panic".into(),
                                error: "the sending thread panicked".into(),
                            },
                            0,
                        )
                    })
                })
                .collect()
        })
    }

    /// Records the attempts of one wave, in one transaction (one fsync for the wave); whether
    /// the circuit is open after them.
    fn record(
        &self,
        registry: &mut Registry,
        d: &Destination,
        claimed: &[Claimed],
        sent: &[(Attempted, u64)],
        summary: &mut Summary,
    ) -> Result<bool, RegistryError> {
        let policy = Policy {
            max_attempts: d.max_attempts,
            max_age_ms: i64::from(d.max_age_hours).saturating_mul(3_600_000),
            circuit_failures: d.circuit_failures,
            cooldown_ms: ms(d.circuit_cooldown_ms),
        };
        let retries: Vec<i64> = claimed
            .iter()
            // By the failures that count: a failed probe does not lengthen the row's wait.
            .map(|c| retry_delay(d, c.failures.saturating_add(1)))
            .collect();
        let recorded = registry.batch(|b| {
            claimed
                .iter()
                .zip(sent)
                .zip(&retries)
                .map(|((c, (outcome, took)), retry_in)| {
                    b.record_attempt(c, &self.owner, outcome, *took, policy, *retry_in)
                })
                .collect::<Result<Vec<_>, RegistryError>>()
        })?;
        let mut open = false;
        for (((c, sent), retry_in), recorded) in
            claimed.iter().zip(sent).zip(&retries).zip(recorded)
        {
            open |= self.said(d, c, sent, *retry_in, recorded, summary);
        }
        Ok(open)
    }

    /// Logs and counts one recorded attempt (what came back, and how long it took); whether
    /// the circuit is open after it.
    fn said(
        &self,
        d: &Destination,
        c: &Claimed,
        (outcome, took): &(Attempted, u64),
        retry_in: i64,
        recorded: Option<Recorded>,
        summary: &mut Summary,
    ) -> bool {
        let Some(recorded) = recorded else {
            tracing::warn!(document = %crate::text::printable(&c.key), destination = %d.name, "delivery taken over by another deliverer while being sent; its outcome is theirs to record");
            summary.lost += 1;
            return false;
        };
        let key = crate::text::printable(&c.key);
        match (outcome, recorded.state) {
            (Attempted::Delivered { status, result_ref }, _) => {
                summary.delivered += 1;
                tracing::info!(document = %key, destination = %d.name, %status, result_ref = result_ref.as_deref().unwrap_or("-"), attempts = recorded.attempts, took_ms = took, "delivered");
            }
            (
                Attempted::Refused { status, error }
                | Attempted::Failed { status, error }
                | Attempted::Unsent { status, error, .. },
                DeliveryState::Dead,
            ) => {
                summary.dead += 1;
                tracing::error!(document = %key, destination = %d.name, %status, error = %crate::text::printable(error), attempts = recorded.attempts, blocked = recorded.blocked, "DEAD: delivery given up (and the later documents of its PO blocked behind it); x12gate deliveries retry KEY once the cause is fixed");
            }
            (
                Attempted::Refused { status, error }
                | Attempted::Failed { status, error }
                | Attempted::Unsent { status, error, .. },
                _,
            ) => {
                summary.retrying += 1;
                tracing::warn!(document = %key, destination = %d.name, %status, error = %crate::text::printable(error), attempts = recorded.attempts, retry_in_ms = retry_in, "delivery failed; retrying");
            }
        }
        match recorded.circuit {
            Some(CircuitState::Open) => {
                tracing::warn!(destination = %d.name, failures = d.circuit_failures, cooldown_ms = d.circuit_cooldown_ms, "circuit open: destination failing; deliveries wait, one probe per cool-down");
            }
            Some(CircuitState::Closed) => {
                tracing::warn!(destination = %d.name, "circuit closed: destination answering again");
            }
            _ => {}
        }
        recorded.open
    }

    /// Passes until nothing of `scope` is queued or retrying (or `deadline`, or `stop`),
    /// sleeping until the next row falls due.
    pub fn drain(
        &self,
        registry: &mut Registry,
        scope: Scope<'_>,
        deadline: Option<Instant>,
        stop: &dyn Fn() -> bool,
    ) -> Result<Summary, RegistryError> {
        let mut total = Summary::default();
        loop {
            let s = self.pass(registry, scope, stop)?;
            total.add(&s);
            if stop() || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(total);
            }
            let Some(next) = self.next_due(registry, scope)? else {
                return Ok(total);
            };
            let wait = next
                .saturating_sub(crate::registry::now_ms())
                .clamp(10, 500);
            let mut wait = Duration::from_millis(u64::try_from(wait).unwrap_or(500));
            if let Some(d) = deadline {
                wait = wait.min(d.saturating_duration_since(Instant::now()));
            }
            std::thread::sleep(wait);
        }
    }
}

/// Removes what writers that died mid-write left in the gateway's folders and in every
/// folder destination's ([`crate::outputs::clean_stale`]): a deliverer writes there too.
pub fn clean_stale_folders(config: &Config) {
    crate::outputs::clean_stale_outputs(&config.gateway);
    let lease = Duration::from_secs(config.gateway.lease_seconds);
    for d in &config.destinations {
        if let crate::config::DestinationKind::Folder { path: Some(path) } = &d.kind {
            crate::outputs::clean_stale(path, lease);
        }
    }
}

/// The delay before attempt `attempt + 1` after `attempt` failed: full jitter.
fn retry_delay(d: &Destination, attempt: u32) -> i64 {
    ms(fastrand::u64(1..=retry_ceiling(d, attempt)))
}

/// The longest delay before attempt `attempt + 1`: `backoff_ms * 2^(attempt - 1)`, at most
/// `backoff_max_ms`.
fn retry_ceiling(d: &Destination, attempt: u32) -> u64 {
    d.backoff_ms
        .saturating_mul(1u64 << attempt.saturating_sub(1).min(40))
        .min(d.backoff_max_ms)
        .max(1)
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn dead_depth(registry: &Registry) -> Result<u64, RegistryError> {
    Ok(registry
        .delivery_counts()?
        .iter()
        .filter(|(_, s, _)| *s == DeliveryState::Dead)
        .map(|(_, _, n)| n)
        .sum())
}

/// The deliverer `watch` runs beside its workers: a thread of its own with its own registry
/// connection, passing whenever rows fall due or it is nudged, until stopped.
pub struct Background {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    nudge: std::sync::mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    /// Starts it.
    pub fn start(
        config: std::sync::Arc<Config>,
        registry: Registry,
        owner: String,
    ) -> Option<Background> {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (nudge, nudged) = std::sync::mpsc::channel::<()>();
        let stopping = stop.clone();
        let poll = Duration::from_millis(config.gateway.poll_ms.max(10));
        let thread = std::thread::Builder::new()
            .name("deliverer".into())
            .spawn(move || {
                let mut registry = registry;
                let deliverer = Deliverer::new(&config, &owner);
                if let Err(e) = deliverer.warn_unconfigured(&registry) {
                    tracing::error!(error = %e, "deliveries: registry error");
                }
                let stopped = || stopping.load(std::sync::atomic::Ordering::Relaxed);
                while !stopped() {
                    if let Err(e) = deliverer.pass(&mut registry, Scope::All, &stopped) {
                        tracing::error!(error = %e, "deliveries: registry error; trying again");
                    }
                    let next = deliverer.next_due(&registry, Scope::All).ok().flatten();
                    let wait = next.map_or(poll, |n| {
                        let ms = n.saturating_sub(crate::registry::now_ms()).clamp(10, 1_000);
                        Duration::from_millis(u64::try_from(ms).unwrap_or(1_000)).min(poll)
                    });
                    // Woken early by a nudge (a batch queued rows) or by the stop.
                    let _ = nudged.recv_timeout(wait);
                    while nudged.try_recv().is_ok() {}
                }
            })
            .ok()?;
        Some(Background {
            stop,
            nudge,
            thread: Some(thread),
        })
    }

    /// Rows were queued: pass now rather than at the next poll.
    pub fn nudge(&self) {
        let _ = self.nudge.send(());
    }

    /// Stops after the attempt in flight (bounded by its destination's timeout).
    pub fn stop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.nudge.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn destination(backoff_ms: u64, backoff_max_ms: u64) -> Destination {
        Destination {
            name: "erp".into(),
            kind: crate::config::DestinationKind::Folder { path: None },
            timeout_ms: 1_000,
            max_attempts: 12,
            max_age_hours: 72,
            result_ref: None,
            owner: None,
            backoff_ms,
            backoff_max_ms,
            circuit_failures: 5,
            circuit_cooldown_ms: 30_000,
            concurrency: 1,
            usage: crate::document::Usage::Production,
        }
    }

    #[test]
    fn retry_delays_are_jittered_below_a_doubling_ceiling() {
        let d = destination(100, 1_000);
        for attempt in 1..=8u32 {
            let ceiling = (100i64 << (attempt - 1)).min(1_000);
            let delays: Vec<i64> = (0..400).map(|_| retry_delay(&d, attempt)).collect();
            assert!(
                delays.iter().all(|x| (1..=ceiling).contains(x)),
                "{attempt}: {delays:?}"
            );
            // Spread over the whole range, not bunched at its top (full jitter).
            assert!(delays.iter().any(|x| *x < ceiling / 4), "{attempt}");
            assert!(delays.iter().any(|x| *x > ceiling * 3 / 4), "{attempt}");
        }
        // A huge attempt count neither overflows nor passes the cap.
        assert!(retry_delay(&d, u32::MAX) <= 1_000);
    }

    /// The default settings of a destination.
    fn defaults() -> Destination {
        use crate::config::destination_defaults as d;
        Destination {
            timeout_ms: d::timeout_ms(),
            max_attempts: d::max_attempts(),
            max_age_hours: d::max_age_hours(),
            backoff_ms: d::backoff_ms(),
            backoff_max_ms: d::backoff_max_ms(),
            circuit_failures: d::circuit_failures(),
            circuit_cooldown_ms: d::circuit_cooldown_ms(),
            concurrency: d::concurrency(),
            ..destination(0, 0)
        }
    }

    /// `documents` deliveries to `d` while it fails every request, for `horizon_ms` of the
    /// registry's clock, moved by hand: each retry waits its longest, each attempt takes a
    /// millisecond. When each delivery died, in ms after it was queued.
    fn outage(d: &Destination, documents: i64, horizon_ms: i64) -> Vec<Option<i64>> {
        use crate::registry::{Identity, Queue};
        let shift = crate::time::shift_this_thread;
        shift(0);
        let mut r = Registry::in_memory(Identity {
            qualifier: "ZZ",
            id: "US",
        });
        let keys: Vec<String> = (1..=documents).map(|i| format!("K{i}")).collect();
        for (i, key) in keys.iter().enumerate() {
            r.batch(|b| {
                b.queue_delivery(&Queue {
                    document_id: i as i64 + 1,
                    key,
                    idempotency_key: key,
                    destination: "erp",
                    partner: "ZZ:ACME",
                    interchange_key: "ZZ:ACME:000000001",
                    correlation_id: "ZZ:ACME:000000001",
                    file: "/nowhere",
                    queued_by: "sim",
                })
            })
            .unwrap();
        }
        let start = crate::registry::now_ms();
        let mut died: Vec<Option<i64>> = vec![None; keys.len()];
        let policy = Policy {
            max_attempts: d.max_attempts,
            max_age_ms: i64::from(d.max_age_hours) * 3_600_000,
            circuit_failures: d.circuit_failures,
            cooldown_ms: ms(d.circuit_cooldown_ms),
        };
        let failed = Attempted::Failed {
            status: "connection refused".into(),
            error: "down".into(),
        };
        let mut elapsed = 0i64;
        while elapsed < horizon_ms {
            shift(elapsed);
            let now = crate::registry::now_ms();
            let limit = match r.circuit_gate("erp", "sim", 60_000, &|_| false).unwrap() {
                Gate::Wait { until_ms } => {
                    elapsed += (until_ms - now).max(1);
                    continue;
                }
                Gate::Probe => 1,
                Gate::Closed => CLAIM,
            };
            let claimed = r
                .claim_deliveries(
                    Wanted {
                        destination: "erp",
                        limit,
                        due_ms: now,
                        queued_by: None,
                    },
                    "sim",
                    60_000,
                    &|_| false,
                )
                .unwrap();
            if claimed.is_empty() {
                r.abandon_probe("erp", "sim").unwrap();
                match r.next_sendable(&["erp"], None, &|_| false).unwrap() {
                    None => break,
                    Some(next) => elapsed += (next - now).max(1),
                }
                continue;
            }
            let mut left = Vec::new();
            for c in &claimed {
                if r.circuit_gate("erp", "sim", 60_000, &|_| false).unwrap() == Gate::Closed
                    || limit == 1
                {
                    let wait = ms(retry_ceiling(d, c.failures + 1));
                    let rec = r
                        .record_attempt(c, "sim", &failed, 1, policy, wait)
                        .unwrap()
                        .unwrap();
                    if rec.state == DeliveryState::Dead {
                        let i = keys.iter().position(|k| *k == c.key).unwrap();
                        died[i] = Some(crate::registry::now_ms() - start);
                    }
                } else {
                    left.push(c.id);
                }
            }
            r.unclaim_deliveries("sim", &left).unwrap();
            elapsed += 1;
        }
        shift(0);
        died
    }

    #[test]
    fn an_outage_of_four_hours_dead_letters_nothing_with_the_defaults_and_72_hours_end_it() {
        let d = defaults();
        for documents in [1, 3, 20] {
            let died = outage(&d, documents, 4 * 3_600_000);
            assert!(died.iter().all(Option::is_none), "{documents}: {died:?}");
        }
        // Only max_age_hours ends an outage's rows: each at the first failed probe after
        // it, one per cool-down (and the row's own wait, at most backoff_max_ms).
        let died: Vec<i64> = outage(&d, 3, 80 * 3_600_000)
            .into_iter()
            .map(|t| t.expect("dead after max_age_hours"))
            .collect();
        let age = 72 * 3_600_000;
        let step = ms(d.circuit_cooldown_ms + d.backoff_max_ms);
        for t in &died {
            assert!((age..=age + 3 * step).contains(t), "{died:?}");
        }
        eprintln!("outage with the defaults: 3 deliveries dead after {died:?} ms");
    }

    #[test]
    fn a_document_failing_alone_is_dead_after_max_attempts_once_its_waits_add_up() {
        // Its destination answers the others: the circuit stays closed.
        let d = Destination {
            circuit_failures: u32::MAX,
            ..defaults()
        };
        let died = outage(&d, 1, 3_600_000)[0].expect("dead within the hour");
        let waits: u64 = (1..d.max_attempts).map(|n| retry_ceiling(&d, n)).sum();
        assert_eq!(waits, 1_111_000, "18 min 31 s, as docs/delivery.md says");
        // A millisecond per attempt, and the real time the test itself takes.
        assert!((ms(waits)..=ms(waits) + 1_000).contains(&died), "{died} ms");
    }
}
