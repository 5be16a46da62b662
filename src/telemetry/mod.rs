//! Logging setup and the Prometheus metrics the manager exports: our own `capd_*` series (here),
//! and beside them controller-runtime's (`controller_runtime.rs`), client-go's request counter
//! (`kube_requests.rs`) and the process's (`process.rs`), under upstream's names.
mod controller_runtime;
mod kube_requests;
mod process;

pub use controller_runtime::{ActiveWorker, Outcome};
pub use kube_requests::CountRequests;
use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Install the global subscriber. `RUST_LOG` wins over `level` when set.
pub fn init_logging(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("capd={level},manager={level},warn")));
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Json => registry
            .with(fmt::layer().json().flatten_event(true))
            .init(),
        LogFormat::Text => registry.with(fmt::layer()).init(),
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DockerCallLabels {
    operation: String,
}

impl From<String> for DockerCallLabels {
    fn from(operation: String) -> Self {
        Self { operation }
    }
}

/// The Docker Engine the manager speaks with (`capd_docker_engine_info`, always 1).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EngineLabels {
    /// The engine's version, e.g. `26.1.5+dfsg1`.
    pub version: String,
    /// The newest API version it serves.
    pub api_version: String,
    /// The API version spoken with it.
    pub negotiated_api_version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TrackedLabels {
    map: String,
}

impl From<String> for TrackedLabels {
    fn from(map: String) -> Self {
        Self { map }
    }
}

/// Reads (label value, value) pairs at scrape time, e.g. Docker API call counts by operation.
pub type GaugeSource = Arc<dyn Fn() -> Vec<(String, u64)> + Send + Sync>;

/// A gauge family whose values are read from a source at scrape time: what the manager already
/// counts elsewhere (the runtime adapter, the controllers' maps) is not counted twice.
struct Scraped<L> {
    family: Family<L, Gauge>,
    source: Mutex<Option<GaugeSource>>,
}

impl<L> Default for Scraped<L>
where
    L: Clone + std::hash::Hash + Eq,
{
    fn default() -> Self {
        Self {
            family: Family::default(),
            source: Mutex::new(None),
        }
    }
}

impl<L> Scraped<L>
where
    L: From<String> + Clone + std::hash::Hash + Eq,
{
    fn set_source(&self, source: GaugeSource) {
        *self.source.lock().unwrap_or_else(|p| p.into_inner()) = Some(source);
    }

    fn refresh(&self) {
        let source = self
            .source
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for (label, value) in source.map(|f| f()).unwrap_or_default() {
            self.family
                .get_or_create(&L::from(label))
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
    }
}

/// Reconcile counts, errors by kind, durations, Docker API calls, and the process's own state.
pub struct Metrics {
    registry: Mutex<Registry>,
    reconciles: Family<ControllerLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    durations: Family<ControllerLabels, Histogram>,
    docker_calls: Scraped<DockerCallLabels>,
    engine: Family<EngineLabels, Gauge>,
    tracked: Scraped<TrackedLabels>,
    tasks: Gauge,
    kube_requests: Family<kube_requests::RequestLabels, Counter>,
    rest_client: Family<kube_requests::RestClientLabels, Counter>,
    runtime: controller_runtime::ControllerRuntime,
}

impl Default for Metrics {
    fn default() -> Self {
        // Upstream's series at the root; ours in a `capd_` sub-registry.
        let mut root = Registry::default();
        let runtime = controller_runtime::ControllerRuntime::default();
        runtime.register(&mut root);
        let rest_client = Family::<kube_requests::RestClientLabels, Counter>::default();
        root.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            rest_client.clone(),
        );
        root.register_collector(Box::new(process::ProcessCollector));
        let registry = root.sub_registry_with_prefix("capd");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let durations = Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new([0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0])
        });
        let docker_calls = Scraped::<DockerCallLabels>::default();
        let engine = Family::<EngineLabels, Gauge>::default();
        let tracked = Scraped::<TrackedLabels>::default();
        let tasks = Gauge::default();
        let kube_requests = Family::<kube_requests::RequestLabels, Counter>::default();
        registry.register("reconcile", "Reconciles run", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by error kind",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile duration",
            durations.clone(),
        );
        registry.register(
            "docker_api_calls",
            "Docker Engine API requests made, by operation",
            docker_calls.family.clone(),
        );
        registry.register(
            "docker_engine_info",
            "The Docker Engine the manager speaks with: its version and API versions (always 1)",
            engine.clone(),
        );
        registry.register(
            "tracked_objects",
            "Objects the controllers keep in-memory state for, by map (zero once they are gone)",
            tracked.family.clone(),
        );
        registry.register(
            "runtime_tasks",
            "Live tokio tasks of the manager",
            tasks.clone(),
        );
        registry.register(
            "kube_api_requests",
            "Kubernetes API requests sent, by verb and resource",
            kube_requests.clone(),
        );
        Self {
            registry: Mutex::new(root),
            reconciles,
            errors,
            durations,
            docker_calls,
            engine,
            tracked,
            tasks,
            kube_requests,
            rest_client,
            runtime,
        }
    }
}

impl Metrics {
    /// A reconcile of `controller` ended after `took`: `error_kind` when it failed, else how it
    /// asked to be looked at again (controller-runtime's result label).
    pub fn observe_reconcile(
        &self,
        controller: &str,
        took: Duration,
        outcome: Outcome,
        error_kind: Option<&str>,
    ) {
        self.runtime.observe(controller, took, outcome);
        let labels = ControllerLabels {
            controller: controller.to_string(),
        };
        self.reconciles.get_or_create(&labels).inc();
        self.durations
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if let Some(kind) = error_kind {
            self.errors
                .get_or_create(&ErrorLabels {
                    controller: controller.to_string(),
                    kind: kind.to_string(),
                })
                .inc();
        }
    }

    /// A reconcile of `controller` is running until the returned guard is dropped.
    pub fn worker(&self, controller: &str) -> ActiveWorker {
        self.runtime.worker(controller)
    }

    /// The concurrency a controller was started with.
    pub fn set_max_concurrent_reconciles(&self, controller: &str, n: u16) {
        self.runtime.set_max_concurrent_reconciles(controller, n);
    }

    /// A layer for the kube client that counts every request it sends into these metrics;
    /// `host` is the API server's `host:port`.
    pub fn kube_request_layer(&self, host: &str) -> CountRequests {
        CountRequests {
            requests: self.kube_requests.clone(),
            rest_client: self.rest_client.clone(),
            host: host.to_string(),
        }
    }

    /// Where the Docker call counts (operation, count) come from.
    pub fn set_docker_call_source(&self, source: GaugeSource) {
        self.docker_calls.set_source(source);
    }

    /// The engine the manager connected to.
    pub fn set_engine(&self, engine: EngineLabels) {
        self.engine.clear();
        self.engine.get_or_create(&engine).set(1);
    }

    /// Where the sizes of the controllers' in-memory maps (map, objects) come from.
    pub fn set_tracked_source(&self, source: GaugeSource) {
        self.tracked.set_source(source);
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        self.docker_calls.refresh();
        self.tracked.refresh();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let tasks = runtime.metrics().num_alive_tasks();
            self.tasks.set(i64::try_from(tasks).unwrap_or(i64::MAX));
        }
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_errors_docker_calls_and_tracked_objects() {
        let m = Metrics::default();
        m.observe_reconcile(
            "DockerMachine",
            Duration::from_millis(20),
            Outcome::Success,
            None,
        );
        m.observe_reconcile(
            "DockerMachine",
            Duration::from_millis(20),
            Outcome::Error,
            Some("docker_unavailable"),
        );
        m.set_docker_call_source(Arc::new(|| vec![("inspect".to_string(), 7)]));
        m.set_tracked_source(Arc::new(|| vec![("backoff".to_string(), 3)]));
        m.set_engine(EngineLabels {
            version: "26.1.5".into(),
            api_version: "1.45".into(),
            negotiated_api_version: "1.45".into(),
        });
        let text = m.render();
        assert!(
            text.contains(r#"capd_docker_engine_info{version="26.1.5",api_version="1.45",negotiated_api_version="1.45"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"capd_reconcile_total{controller="DockerMachine"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"capd_reconcile_errors_total{controller="DockerMachine",kind="docker_unavailable"} 1"#), "{text}");
        assert!(
            text.contains(r#"capd_docker_api_calls{operation="inspect"} 7"#),
            "{text}"
        );
        assert!(
            text.contains(r#"capd_tracked_objects{map="backoff"} 3"#),
            "{text}"
        );
    }

    #[test]
    fn renders_controller_runtime_client_go_and_process_series() {
        let m = Metrics::default();
        m.set_max_concurrent_reconciles("DockerMachine", 100);
        let worker = m.worker("DockerMachine");
        m.observe_reconcile(
            "DockerMachine",
            Duration::from_millis(20),
            Outcome::RequeueAfter,
            None,
        );
        m.observe_reconcile(
            "DockerMachine",
            Duration::from_millis(20),
            Outcome::Error,
            Some("stale"),
        );
        let text = m.render();
        for line in [
            r#"controller_runtime_reconcile_total{controller="dockermachine",result="requeue_after"} 1"#,
            r#"controller_runtime_reconcile_total{controller="dockermachine",result="error"} 1"#,
            r#"controller_runtime_reconcile_errors_total{controller="dockermachine"} 1"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="dockermachine"} 2"#,
            r#"controller_runtime_max_concurrent_reconciles{controller="dockermachine"} 100"#,
            r#"controller_runtime_active_workers{controller="dockermachine"} 1"#,
            r#"workqueue_retries_total{name="dockermachine",controller="dockermachine"} 1"#,
            r#"workqueue_work_duration_seconds_count{name="dockermachine",controller="dockermachine"} 2"#,
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
            "process_max_fds ",
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
        drop(worker);
        assert!(
            m.render()
                .contains(r#"controller_runtime_active_workers{controller="dockermachine"} 0"#)
        );
    }
}
