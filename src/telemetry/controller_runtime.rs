//! controller-runtime's controller and workqueue series, under its names and labels, so that
//! CAPI's dashboards and alerts read this manager as they read upstream CAPD. They are exported
//! beside our own `capd_*` series, which stay.
//!
//! kube-runtime's `Controller` is not controller-runtime's: it has no workqueue object, its
//! scheduler is internal. What maps, and to what:
//! - `controller_runtime_reconcile_total{controller,result}`: every reconcile that ran.
//!   `result` is `error` for a failed one; `success` for one that returned "wait for a change"
//!   or "look again after the resync period" (the latter is how a kube-runtime controller
//!   spells controller-runtime's `SyncPeriod`, which upstream counts as `success`);
//!   `requeue_after` for one that asked to look again sooner. `requeue` (an immediate,
//!   rate-limited requeue) is never produced: our reconciles always name a delay.
//! - `controller_runtime_reconcile_errors_total{controller}`: the failed ones.
//! - `controller_runtime_reconcile_time_seconds{controller}`: each reconcile's duration.
//! - `controller_runtime_max_concurrent_reconciles{controller}`: the configured concurrency
//!   (0: unbounded, as kube-runtime reads 0).
//! - `controller_runtime_active_workers{controller}`: reconciles running now.
//! - `workqueue_retries_total{name,controller}`: failed reconciles, each of which our error
//!   policy schedules again after a backoff (controller-runtime's rate-limited re-add).
//! - `workqueue_work_duration_seconds{name,controller}`: the same durations as the reconcile
//!   time (a kube-runtime worker does nothing but the reconcile).
//!
//! Not exported, because kube-runtime does not let a caller see them: `workqueue_depth`,
//! `workqueue_adds_total`, `workqueue_queue_duration_seconds` (the scheduler's queue and its
//! wait are private), `workqueue_unfinished_work_seconds` and
//! `workqueue_longest_running_processor_seconds`.
use std::time::Duration;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

/// How a reconcile ended, in controller-runtime's terms (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    RequeueAfter,
    Error,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::RequeueAfter => "requeue_after",
            Self::Error => "error",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Controller {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerResult {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Queue {
    name: String,
    controller: String,
}

/// controller-runtime names a controller after its kind in lower case (`dockermachine`).
fn controller_name(kind: &str) -> String {
    kind.to_ascii_lowercase()
}

pub struct ControllerRuntime {
    reconciles: Family<ControllerResult, Counter>,
    errors: Family<Controller, Counter>,
    time: Family<Controller, Histogram>,
    max_concurrent: Family<Controller, Gauge>,
    active: Family<Controller, Gauge>,
    retries: Family<Queue, Counter>,
    work_duration: Family<Queue, Histogram>,
}

impl Default for ControllerRuntime {
    fn default() -> Self {
        Self {
            reconciles: Family::default(),
            errors: Family::default(),
            // Fine below a second, where most reconciles end, and up to a minute.
            time: Family::new_with_constructor(|| {
                Histogram::new([
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0,
                    1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
                ])
            }),
            max_concurrent: Family::default(),
            active: Family::default(),
            retries: Family::default(),
            // Decades from 10 ns to 1000 s, as client-go's workqueue metrics.
            work_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1e-8, 10.0, 12))
            }),
        }
    }
}

impl ControllerRuntime {
    /// Register every series at the registry's root (these names carry no prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            self.reconciles.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            self.errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            self.time.clone(),
        );
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            self.max_concurrent.clone(),
        );
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            self.active.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            self.retries.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            self.work_duration.clone(),
        );
    }

    pub fn set_max_concurrent_reconciles(&self, kind: &str, n: u16) {
        self.max_concurrent
            .get_or_create(&Controller {
                controller: controller_name(kind),
            })
            .set(i64::from(n));
    }

    /// A reconcile of `kind` starts: it counts as an active worker until the guard is dropped.
    pub fn worker(&self, kind: &str) -> ActiveWorker {
        let gauge = self
            .active
            .get_or_create(&Controller {
                controller: controller_name(kind),
            })
            .clone();
        gauge.inc();
        ActiveWorker(gauge)
    }

    pub fn observe(&self, kind: &str, took: Duration, outcome: Outcome) {
        let controller = controller_name(kind);
        let name = Controller {
            controller: controller.clone(),
        };
        let queue = Queue {
            name: controller.clone(),
            controller: controller.clone(),
        };
        self.reconciles
            .get_or_create(&ControllerResult {
                controller,
                result: outcome.label().to_string(),
            })
            .inc();
        self.time.get_or_create(&name).observe(took.as_secs_f64());
        self.work_duration
            .get_or_create(&queue)
            .observe(took.as_secs_f64());
        if outcome == Outcome::Error {
            self.errors.get_or_create(&name).inc();
            self.retries.get_or_create(&queue).inc();
        }
    }
}

/// One running reconcile in `controller_runtime_active_workers`; dropping it (the reconcile
/// ended, or its future was dropped at shutdown) takes it out.
pub struct ActiveWorker(Gauge);

impl Drop for ActiveWorker {
    fn drop(&mut self) {
        self.0.dec();
    }
}
