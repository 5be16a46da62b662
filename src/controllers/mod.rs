//! The three controllers and how they are wired: watches, concurrency, backoff, metrics, shutdown.
pub mod backoff;
pub mod bootstrap_tasks;
pub mod caches;
pub mod context;
pub mod docker_cluster;
pub mod docker_machine;
pub mod docker_machine_pool;
pub mod error;
pub mod events;
pub mod load_balancer;
pub mod machine_bootstrap;
pub mod mappers;
pub mod node;
pub mod patch;
pub mod predicates;
pub mod workload;

use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{Stream, StreamExt};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        Controller, WatchStreamExt,
        controller::{Action, Config as ControllerConfig},
        reflector::{self, ObjectRef},
        watcher::{self, Config as WatcherConfig},
    },
};
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

use backoff::Backoff;
pub use caches::{CacheWriters, Caches, caches};
pub use context::{Context, Settings};
use error::{Error, Result};

use crate::{
    api::{DockerCluster, DockerMachine, DockerMachinePool},
    capi::{Cluster, Machine, MachinePool, WATCH_FILTER_LABEL},
    docker::EngineEvent,
};

/// Which objects the manager watches and how many it reconciles at once.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// Watch one namespace only.
    pub namespace: Option<String>,
    /// Only objects labelled `cluster.x-k8s.io/watch-filter=<value>`.
    pub watch_filter: Option<String>,
    pub cluster_concurrency: u16,
    pub machine_concurrency: u16,
}

impl Scope {
    fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }

    fn watcher(&self) -> WatcherConfig {
        let wc = WatcherConfig::default().any_semantic();
        match self.watch_filter.as_deref().filter(|f| !f.is_empty()) {
            Some(v) => wc.labels(&format!("{WATCH_FILTER_LABEL}={v}")),
            None => wc,
        }
    }
}

/// Docker events that should wake a controller (e.g. a container stopped by hand), and when
/// every object should look again (the engine is back after a restart).
pub struct DockerTriggers<C, M, A> {
    pub clusters: C,
    pub machines: M,
    pub all_clusters: A,
    pub all_machines: A,
}

/// Route container events to the objects that own the containers (by our ownership labels), and
/// an engine that is back to every object of both kinds.
pub fn docker_triggers(
    events: impl Stream<Item = EngineEvent> + Send + 'static,
) -> DockerTriggers<
    impl Stream<Item = ObjectRef<DockerCluster>> + Send + 'static,
    impl Stream<Item = ObjectRef<DockerMachine>> + Send + 'static,
    impl Stream<Item = ()> + Send + 'static,
> {
    let (cluster_tx, clusters) = futures::channel::mpsc::unbounded();
    let (machine_tx, machines) = futures::channel::mpsc::unbounded();
    let (all_clusters_tx, all_clusters) = futures::channel::mpsc::unbounded();
    let (all_machines_tx, all_machines) = futures::channel::mpsc::unbounded();
    tokio::spawn(events.for_each(move |event| {
        match event {
            EngineEvent::Container(event) => match mappers::container_owner(&event) {
                Some(mappers::ContainerOwner::DockerCluster(r)) => {
                    let _ = cluster_tx.unbounded_send(r);
                }
                Some(mappers::ContainerOwner::DockerMachine(r)) => {
                    let _ = machine_tx.unbounded_send(r);
                }
                None => {}
            },
            EngineEvent::Reconnected => {
                let _ = all_clusters_tx.unbounded_send(());
                let _ = all_machines_tx.unbounded_send(());
            }
        }
        futures::future::ready(())
    }));
    DockerTriggers {
        clusters,
        machines,
        all_clusters,
        all_machines,
    }
}

/// Run the controllers until `shutdown` resolves. The watches fill `writers`, the caches the
/// reconciles read through `ctx`.
pub async fn run<S, C, M, A>(
    ctx: Arc<Context>,
    writers: CacheWriters,
    scope: Scope,
    shutdown: S,
    triggers: DockerTriggers<C, M, A>,
) where
    S: Future<Output = ()> + Clone + Send + Sync + 'static,
    C: Stream<Item = ObjectRef<DockerCluster>> + Send + 'static,
    M: Stream<Item = ObjectRef<DockerMachine>> + Send + 'static,
    A: Stream<Item = ()> + Send + 'static,
{
    let client = ctx.client.clone();
    let wc = scope.watcher();

    // One Cluster watch and one DockerCluster watch fill their caches and then trigger both
    // controllers (see `shared_watch`); the machine controller's Machine watch fills the Machine
    // cache it alone reads.
    let [
        cluster_events_for_dc,
        cluster_events_for_dm,
        cluster_events_for_dmp,
    ] = shared_watch(scope.api::<Cluster>(&client), &wc, writers.clusters);
    let [dc_events_for_dc, dc_events_for_dm] = shared_watch(
        scope.api::<DockerCluster>(&client),
        &wc,
        writers.docker_clusters,
    );
    let dc_stream =
        dc_events_for_dc.predicate_filter(predicates::own_docker_cluster, Default::default());
    let clusters = Controller::for_stream(dc_stream, ctx.caches.docker_clusters.clone())
        .watches_stream(
            cluster_events_for_dc.predicate_filter(predicates::cluster, Default::default()),
            mappers::cluster_to_docker_cluster,
        )
        .reconcile_on(triggers.clusters)
        .reconcile_all_on(triggers.all_clusters)
        .with_config(ControllerConfig::default().concurrency(scope.cluster_concurrency))
        .trigger_backoff(backoff::NoTriggerBackoff)
        .graceful_shutdown_on(shutdown.clone())
        .run(
            reconcile_cluster,
            error_policy::<DockerCluster>,
            ctx.clone(),
        )
        .for_each(|r| async move { log_result("DockerCluster", r) });

    let (dm_store, dm_writer) = reflector::store();
    let dm_stream = primary(
        scope.api::<DockerMachine>(&client),
        &wc,
        dm_writer,
        predicates::own_docker_machine,
    );
    let (by_cluster, by_docker_cluster) = (dm_store.clone(), dm_store.clone());
    let machines = Controller::for_stream(dm_stream, dm_store)
        .watches_stream(
            filtered(
                scope.api::<Machine>(&client),
                &wc,
                writers.machines,
                predicates::machine,
            ),
            mappers::machine_to_docker_machine,
        )
        .watches_stream(
            cluster_events_for_dm.predicate_filter(predicates::cluster, Default::default()),
            move |c| mappers::cluster_to_docker_machines(&by_cluster, &c),
        )
        .watches_stream(
            dc_events_for_dm.predicate_filter(predicates::docker_cluster, Default::default()),
            move |dc| mappers::docker_cluster_to_docker_machines(&by_docker_cluster, &dc),
        )
        .reconcile_on(triggers.machines)
        .reconcile_all_on(triggers.all_machines)
        .with_config(ControllerConfig::default().concurrency(scope.machine_concurrency))
        .trigger_backoff(backoff::NoTriggerBackoff)
        .graceful_shutdown_on(shutdown.clone())
        .run(
            reconcile_machine,
            error_policy::<DockerMachine>,
            ctx.clone(),
        )
        .for_each(|r| async move { log_result("DockerMachine", r) });

    let shutdown_pools = shutdown;
    // MachinePools: their own watches (few objects); the instances are DockerMachines, watched
    // here again for the changes a pool counts (provisioned, providerID, deletion).
    let (dmp_store, dmp_writer) = reflector::store();
    let dmp_stream = primary(
        scope.api::<DockerMachinePool>(&client),
        &wc,
        dmp_writer,
        predicates::own::<DockerMachinePool>,
    );
    let pools_of_cluster = dmp_store.clone();
    let pools = Controller::for_stream(dmp_stream, dmp_store)
        .watches_stream(
            filtered(
                scope.api::<MachinePool>(&client),
                &wc,
                writers.machine_pools,
                predicates::machine_pool,
            ),
            mappers::machine_pool_to_docker_machine_pool,
        )
        .watches_stream(
            watch(scope.api::<DockerMachine>(&client), &wc)
                .touched_objects()
                .predicate_filter(predicates::pool_instance, Default::default()),
            mappers::instance_to_docker_machine_pool,
        )
        .watches_stream(
            cluster_events_for_dmp.predicate_filter(predicates::cluster, Default::default()),
            move |c| mappers::cluster_to_docker_machine_pools(&pools_of_cluster, &c),
        )
        .with_config(ControllerConfig::default().concurrency(scope.cluster_concurrency))
        .trigger_backoff(backoff::NoTriggerBackoff)
        .graceful_shutdown_on(shutdown_pools)
        .run(
            reconcile_pool,
            error_policy::<DockerMachinePool>,
            ctx.clone(),
        )
        .for_each(|r| async move { log_result("DockerMachinePool", r) });

    futures::join!(clusters, machines, pools);
}

/// A watch of `K` that retries with backoff and drops each object's `managedFields` before it
/// reaches a cache: nothing here reads them, and they are a large part of an object that
/// several managers write (CAPI core, this manager, kubectl), kept for every cached object.
fn watch<K>(
    api: Api<K>,
    wc: &WatcherConfig,
) -> impl Stream<Item = std::result::Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    watcher::watcher(api, wc.clone())
        .backoff(backoff::WatchBackoff::default())
        .modify(|o| o.meta_mut().managed_fields = None)
}

/// A controller's own kind: every event updates the cache (mappers and reconciles read it), but
/// only changes that pass `predicate` trigger a reconcile (not the echo of our status writes).
fn primary<K>(
    api: Api<K>,
    wc: &WatcherConfig,
    writer: reflector::store::Writer<K>,
    predicate: fn(&K) -> Option<u64>,
) -> impl Stream<Item = std::result::Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    watch(api, wc)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicate, Default::default())
}

/// One watch of `K` whose objects first update `cache`, then reach each of the `N` returned
/// streams. A reconcile triggered by a change therefore always finds at least that version in
/// the cache; with one watch feeding the cache and another triggering, the trigger can win the
/// race and the reconcile acts on the old object (seen: a paused Cluster not pausing its
/// DockerCluster until the next resync).
fn shared_watch<K, const N: usize>(
    api: Api<K>,
    wc: &WatcherConfig,
    cache: reflector::store::Writer<K>,
) -> [impl Stream<Item = std::result::Result<K, watcher::Error>> + Send + 'static; N]
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let mut senders = Vec::with_capacity(N);
    let streams = std::array::from_fn::<_, N, _>(|_| futures::channel::mpsc::unbounded::<K>()).map(
        |(tx, rx)| {
            senders.push(tx);
            rx.map(Ok::<K, watcher::Error>)
        },
    );
    let source = watch(api, wc).reflect(cache).touched_objects();
    tokio::spawn(async move {
        futures::pin_mut!(source);
        while let Some(item) = source.next().await {
            match item {
                Ok(obj) => {
                    let delivered = senders
                        .iter()
                        .filter(|tx| tx.unbounded_send(obj.clone()).is_ok())
                        .count();
                    if delivered == 0 {
                        return; // every controller has stopped
                    }
                }
                // The watcher retries with backoff by itself.
                Err(e) => warn!(error = %e, "watch failed; retrying"),
            }
        }
    });
    streams
}

/// A related kind watched for triggers through a predicate (only changes of fields we read
/// trigger); every event updates `cache` first (reconciles read the objects from there).
fn filtered<K>(
    api: Api<K>,
    wc: &WatcherConfig,
    cache: reflector::store::Writer<K>,
    predicate: fn(&K) -> Option<u64>,
) -> impl Stream<Item = std::result::Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    watch(api, wc)
        .reflect(cache)
        .touched_objects()
        .predicate_filter(predicate, Default::default())
}

fn log_result<T: std::fmt::Debug, E: std::fmt::Display>(kind: &str, r: std::result::Result<T, E>) {
    match r {
        Ok(o) => debug!(kind, object = ?o, "reconciled"),
        Err(e) => debug!(kind, error = %e, "reconcile failed"),
    }
}

/// The backoff key of an object.
pub(crate) fn key<K: Resource>(obj: &K) -> String
where
    K::DynamicType: Default,
{
    format!(
        "{}/{}/{}",
        K::kind(&Default::default()),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

async fn reconcile_cluster(obj: Arc<DockerCluster>, ctx: Arc<Context>) -> Result<Action> {
    instrumented(
        obj.clone(),
        ctx.clone(),
        docker_cluster::reconcile(obj, ctx),
    )
    .await
}

async fn reconcile_pool(obj: Arc<DockerMachinePool>, ctx: Arc<Context>) -> Result<Action> {
    instrumented(
        obj.clone(),
        ctx.clone(),
        docker_machine_pool::reconcile(obj, ctx),
    )
    .await
}

async fn reconcile_machine(obj: Arc<DockerMachine>, ctx: Arc<Context>) -> Result<Action> {
    instrumented(
        obj.clone(),
        ctx.clone(),
        docker_machine::reconcile(obj, ctx),
    )
    .await
}

/// Count and time a reconcile, and forget the object's backoff once it succeeds.
async fn instrumented<K: Resource>(
    obj: Arc<K>,
    ctx: Arc<Context>,
    fut: impl Future<Output = Result<Action>>,
) -> Result<Action>
where
    K::DynamicType: Default,
{
    let kind = K::kind(&Default::default()).to_string();
    let start = Instant::now();
    let result = fut.await;
    ctx.metrics.observe_reconcile(
        &kind,
        start.elapsed(),
        result.as_ref().err().map(Error::kind),
    );
    if result.is_ok() {
        ctx.backoff.reset(&key(obj.as_ref()));
    }
    result
}

fn error_policy<K: Resource>(obj: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action
where
    K::DynamicType: Default,
{
    let delay = retry_delay(error, &ctx.backoff, &key(obj.as_ref()));
    // The reconcile's span has ended here: the same fields, named as the span names them.
    let (kind, namespace, name) = (
        K::kind(&Default::default()).to_string(),
        obj.namespace().unwrap_or_default(),
        obj.name_any(),
    );
    if matches!(error, Error::Stale) {
        debug!(%kind, %namespace, %name, retry_in = ?delay, "status write met a newer object; looking again");
    } else {
        warn!(%kind, %namespace, %name, %error, retry_in = ?delay, "reconcile failed");
    }
    Action::requeue(delay)
}

/// How long a failed reconcile waits. A stale status write is optimistic concurrency doing its
/// job, not a failure: most often the pass started from a watch view older than our own last
/// write (the 409 is certain then), or CAPI wrote the object meanwhile. The newer object is
/// already in the cache or about to be, so it is looked at again after an eighth of the
/// failure backoff (0.25 s, doubling); a bench of 50 machines met 62 such conflicts, each of
/// which waited 2 s before. Repeated conflicts still back off.
fn retry_delay(error: &Error, backoff: &Backoff, key: &str) -> Duration {
    let delay = backoff.next_delay(key);
    match error {
        Error::Stale => delay / 8,
        _ => delay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_write_looks_again_soon_and_still_backs_off() {
        let backoff = Backoff::new(Duration::from_secs(2), Duration::from_secs(120));
        let stale: Vec<u64> = (0..4)
            .map(|_| retry_delay(&Error::Stale, &backoff, "a").as_millis() as u64)
            .collect();
        assert_eq!(stale, [250, 500, 1000, 2000]);
        let missing = Error::Missing("owner".into());
        assert_eq!(
            retry_delay(&missing, &backoff, "b"),
            Duration::from_secs(2),
            "a real failure keeps the full backoff"
        );
    }
    use crate::docker::{ContainerEvent, labels};

    #[tokio::test]
    async fn container_events_reach_their_owner_and_a_reconnect_reaches_everyone() {
        let machine_event = ContainerEvent {
            action: "die".into(),
            labels: [
                (labels::OWNER_KIND, "DockerMachine"),
                (labels::OWNER_NAME, "m"),
                (labels::CLUSTER_NAMESPACE, "ns"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        };
        let events = futures::stream::iter([
            EngineEvent::Container(machine_event),
            EngineEvent::Reconnected,
        ]);
        let t = docker_triggers(events);
        let machines: Vec<_> = t.machines.take(1).collect().await;
        assert_eq!(machines, [ObjectRef::new("m").within("ns")]);
        assert_eq!(t.all_clusters.take(1).collect::<Vec<_>>().await, [()]);
        assert_eq!(t.all_machines.take(1).collect::<Vec<_>>().await, [()]);
        // Nothing was routed to a DockerCluster; the stream ends with the events.
        assert_eq!(t.clusters.collect::<Vec<_>>().await, []);
    }
}
