//! How the controllers run: the watches and what they trigger, concurrency, Docker events,
//! shutdown, and (in [`instrument`]) metrics and the error policy of every reconcile.
mod instrument;
pub mod mappers;
pub mod predicates;
mod templates;

use std::{future::Future, sync::Arc};

use futures::{Stream, StreamExt, TryStreamExt, channel::mpsc::UnboundedSender, stream::BoxStream};
use kube::{
    Api, Client, Resource,
    runtime::{
        Controller, WatchStreamExt,
        controller::{Action, Config as ControllerConfig},
        reflector::{self, ObjectRef},
        watcher::{self, Config as WatcherConfig},
    },
};
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

use instrument::{error_policy, log_result, reconcile};

use super::{
    docker_cluster::{Clusters, InMemoryClusters},
    docker_machine::{InMemoryMachines, Machines},
    docker_machine_pool::Pools,
    kit::{
        CacheWriters, Context, Shared, backoff,
        error::Result,
        kinds::{self, Kinds},
    },
};
use crate::{
    api::{
        DockerCluster, DockerMachine, DockerMachinePool,
        dev::{DevCluster, DevMachine, DevMachinePool, in_memory_backend},
    },
    capi::{Cluster, Machine, MachinePool, WATCH_FILTER_LABEL},
    docker::EngineEvent,
};

/// Which objects the manager watches, how many it reconciles at once, and which controllers run.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// Watch one namespace only.
    pub namespace: Option<String>,
    /// Only objects labelled `cluster.x-k8s.io/watch-filter=<value>`.
    pub watch_filter: Option<String>,
    /// Per controller of the Docker* family.
    pub docker: Concurrency,
    /// Per controller of the Dev* family.
    pub dev: Concurrency,
    /// The MachinePool feature gate: without it neither the pool controllers nor the
    /// MachinePool watch run (as upstream, whose CAPI core then has no MachinePools either).
    pub machine_pools: bool,
}

/// Objects one family's controllers reconcile at once (0: unbounded).
#[derive(Clone, Copy, Debug, Default)]
pub struct Concurrency {
    pub cluster: u16,
    pub machine: u16,
    pub pool: u16,
}

impl Scope {
    fn concurrency(&self, kinds: Kinds) -> Concurrency {
        if kinds.is_dev() {
            self.dev
        } else {
            self.docker
        }
    }

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

/// Docker events that should wake one family's controllers (e.g. a container stopped by hand),
/// and when every object should look again (the engine is back after a restart).
pub struct DockerTriggers {
    pub clusters: BoxStream<'static, ObjectRef<DockerCluster>>,
    pub machines: BoxStream<'static, ObjectRef<DockerMachine>>,
    pub all_clusters: BoxStream<'static, ()>,
    pub all_machines: BoxStream<'static, ()>,
}

/// Route container events to the objects that own the containers (by our ownership labels), and
/// an engine that is back to every object of every kind. One set of triggers per family, in the
/// order of `families`.
pub fn docker_triggers<const N: usize>(
    events: impl Stream<Item = EngineEvent> + Send + 'static,
    families: [Kinds; N],
) -> [DockerTriggers; N] {
    /// Where one family's events go.
    struct Route {
        kinds: Kinds,
        clusters: UnboundedSender<ObjectRef<DockerCluster>>,
        machines: UnboundedSender<ObjectRef<DockerMachine>>,
        all_clusters: UnboundedSender<()>,
        all_machines: UnboundedSender<()>,
    }
    let mut routes = Vec::with_capacity(N);
    let triggers = families.map(|kinds| {
        let (cluster_tx, clusters) = futures::channel::mpsc::unbounded();
        let (machine_tx, machines) = futures::channel::mpsc::unbounded();
        let (all_clusters_tx, all_clusters) = futures::channel::mpsc::unbounded();
        let (all_machines_tx, all_machines) = futures::channel::mpsc::unbounded();
        routes.push(Route {
            kinds,
            clusters: cluster_tx,
            machines: machine_tx,
            all_clusters: all_clusters_tx,
            all_machines: all_machines_tx,
        });
        DockerTriggers {
            clusters: clusters.boxed(),
            machines: machines.boxed(),
            all_clusters: all_clusters.boxed(),
            all_machines: all_machines.boxed(),
        }
    });
    tokio::spawn(events.for_each(move |event| {
        for route in &routes {
            match &event {
                EngineEvent::Container(event) => match mappers::container_owner(event) {
                    Some(mappers::ContainerOwner::Cluster(kind, r))
                        if kind == route.kinds.cluster =>
                    {
                        let _ = route.clusters.unbounded_send(r);
                    }
                    Some(mappers::ContainerOwner::Machine(kind, r))
                        if kind == route.kinds.machine =>
                    {
                        let _ = route.machines.unbounded_send(r);
                    }
                    _ => {}
                },
                EngineEvent::Reconnected => {
                    let _ = route.all_clusters.unbounded_send(());
                    let _ = route.all_machines.unbounded_send(());
                }
            }
        }
        futures::future::ready(())
    }));
    triggers
}

/// The event streams of one family's own kinds, as Docker* objects (a Dev* object as its view).
struct OwnWatches {
    clusters: EventStream<DockerCluster>,
    machines: EventStream<DockerMachine>,
    /// The machines again, for the pool controller (its instances).
    instances: EventStream<DockerMachine>,
    pools: EventStream<DockerMachinePool>,
}

type EventStream<K> = BoxStream<'static, std::result::Result<watcher::Event<K>, watcher::Error>>;

impl OwnWatches {
    /// `in_memory`: whether Dev* objects of the in-memory backend are served (their views say
    /// so, see [`crate::api::dev::IN_MEMORY_BACKEND`]).
    fn new(
        kinds: Kinds,
        scope: &Scope,
        client: &Client,
        wc: &WatcherConfig,
        in_memory: bool,
    ) -> Self {
        if kinds.is_dev() {
            let machine = move |d: &DevMachine| d.view_serving(in_memory);
            Self {
                clusters: views(scope.api::<DevCluster>(client), wc, move |d| {
                    d.view_serving(in_memory)
                }),
                machines: views(scope.api::<DevMachine>(client), wc, machine),
                instances: views(scope.api::<DevMachine>(client), wc, machine),
                pools: views(
                    scope.api::<DevMachinePool>(client),
                    wc,
                    DevMachinePool::view,
                ),
            }
        } else {
            Self {
                clusters: watch(scope.api::<DockerCluster>(client), wc).boxed(),
                machines: watch(scope.api::<DockerMachine>(client), wc).boxed(),
                instances: watch(scope.api::<DockerMachine>(client), wc).boxed(),
                pools: watch(scope.api::<DockerMachinePool>(client), wc).boxed(),
            }
        }
    }
}

/// A watch of the Dev* kind `D` whose objects arrive as their Docker* views.
fn views<D, V>(
    api: Api<D>,
    wc: &WatcherConfig,
    view: impl Fn(&D) -> V + Copy + Send + 'static,
) -> EventStream<V>
where
    D: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    V: Send + 'static,
{
    watch(api, wc)
        .map_ok(move |event| match event {
            watcher::Event::Apply(d) => watcher::Event::Apply(view(&d)),
            watcher::Event::Delete(d) => watcher::Event::Delete(view(&d)),
            watcher::Event::InitApply(d) => watcher::Event::InitApply(view(&d)),
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitDone => watcher::Event::InitDone,
        })
        .boxed()
}

/// The families of kinds the manager serves: the same controllers for each.
pub const FAMILIES: [Kinds; 2] = [kinds::DOCKER, kinds::DEV];

/// Run the controllers of every family until `shutdown` resolves. The watches fill `writers`,
/// the caches the reconciles read through their contexts; `triggers` are in [`FAMILIES`] order.
pub async fn run<S>(
    shared: Arc<Shared>,
    writers: CacheWriters,
    scope: Scope,
    shutdown: S,
    triggers: [DockerTriggers; 2],
) where
    S: Future<Output = ()> + Clone + Send + Sync + 'static,
{
    let client = shared.client.clone();
    let wc = scope.watcher();
    // One watch per CAPI kind fills its cache and then triggers every controller that needs it
    // (see `shared_watch`): Clusters reach the three controllers of both families, Machines
    // and MachinePools one controller per family.
    let [c1, c2, c3, c4, c5, c6] =
        shared_watch(watch(scope.api::<Cluster>(&client), &wc), writers.clusters);
    let [m1, m2] = shared_watch(watch(scope.api::<Machine>(&client), &wc), writers.machines);
    // Without the gate the writer is dropped: the cache then reads as empty (a pool-owned
    // machine falls back to the API server) and waits for nothing.
    let [p1, p2] = if scope.machine_pools {
        shared_watch(
            watch(scope.api::<MachinePool>(&client), &wc),
            writers.machine_pools,
        )
        .map(StreamExt::boxed)
    } else {
        std::array::from_fn(|_| futures::stream::pending().boxed())
    };
    let [docker, dev] = triggers;
    let templates = futures::future::join(
        templates::run::<crate::api::DockerMachineTemplate, _>(
            shared.clone(),
            &scope,
            scope.docker.machine,
            shutdown.clone(),
        ),
        templates::run::<crate::api::dev::DevMachineTemplate, _>(
            shared.clone(),
            &scope,
            scope.dev.machine,
            shutdown.clone(),
        ),
    );
    let capi = |clusters: [_; 3], machines, machine_pools| CapiEvents {
        clusters,
        machines,
        machine_pools,
    };
    futures::join!(
        run_family(
            kinds::DOCKER,
            shared.clone(),
            &scope,
            capi([c1, c2, c3], m1, p1),
            docker,
            shutdown.clone(),
        ),
        run_family(
            kinds::DEV,
            shared,
            &scope,
            capi([c4, c5, c6], m2, p2),
            dev,
            shutdown,
        ),
        templates,
    );
}

/// One family's share of the CAPI watches.
struct CapiEvents<C, M, P> {
    clusters: [C; 3],
    machines: M,
    machine_pools: P,
}

/// The cluster, machine and pool controllers of one family.
async fn run_family<S, C, M, P>(
    kinds: Kinds,
    shared: Arc<Shared>,
    scope: &Scope,
    capi: CapiEvents<C, M, P>,
    triggers: DockerTriggers,
    shutdown: S,
) where
    S: Future<Output = ()> + Clone + Send + Sync + 'static,
    C: Stream<Item = std::result::Result<Cluster, watcher::Error>> + Send + 'static,
    M: Stream<Item = std::result::Result<Machine, watcher::Error>> + Send + 'static,
    P: Stream<Item = std::result::Result<MachinePool, watcher::Error>> + Send + 'static,
{
    let client = shared.client.clone();
    let wc = scope.watcher();
    let concurrency = scope.concurrency(kinds);
    let own = OwnWatches::new(kinds, scope, &client, &wc, shared.in_memory.is_some());
    let (infra_clusters, infra_writer) = reflector::store();
    let (wake, woken) = futures::channel::mpsc::unbounded();
    for (kind, n) in [
        (kinds.cluster, concurrency.cluster),
        (kinds.machine, concurrency.machine),
        (kinds.pool, concurrency.pool),
    ] {
        shared.metrics.set_max_concurrent_reconciles(kind, n);
    }
    let ctx = Arc::new(Context {
        shared,
        kinds,
        infra_clusters,
        wake,
    });
    let CapiEvents {
        clusters:
            [
                cluster_events_for_dc,
                cluster_events_for_dm,
                cluster_events_for_dmp,
            ],
        machines: machine_events,
        machine_pools: machine_pool_events,
    } = capi;

    // The family's cluster objects fill their cache and then trigger both the cluster and the
    // machine controller.
    let [dc_events_for_dc, dc_events_for_dm] = shared_watch(own.clusters, infra_writer);
    let dc_stream =
        dc_events_for_dc.predicate_filter(predicates::own_docker_cluster, Default::default());
    let clusters = Controller::for_stream(dc_stream, ctx.infra_clusters.clone())
        .watches_stream(
            cluster_events_for_dc.predicate_filter(predicates::cluster, Default::default()),
            move |c| mappers::cluster_to_docker_cluster(kinds.cluster, c),
        )
        .reconcile_on(triggers.clusters)
        .reconcile_all_on(triggers.all_clusters)
        .with_config(ControllerConfig::default().concurrency(concurrency.cluster))
        .trigger_backoff(backoff::NoTriggerBackoff)
        .graceful_shutdown_on(shutdown.clone())
        .run(
            reconcile_cluster,
            |o, e, c| error_policy(c.kinds.cluster, o, e, c),
            ctx.clone(),
        )
        .for_each(move |r| async move { log_result(kinds.cluster, r) });

    let (dm_store, dm_writer) = reflector::store();
    let dm_stream = primary(own.machines, dm_writer, predicates::own_docker_machine);
    let (by_cluster, by_docker_cluster) = (dm_store.clone(), dm_store.clone());
    let machines = Controller::for_stream(dm_stream, dm_store)
        .watches_stream(
            machine_events.predicate_filter(predicates::machine, Default::default()),
            move |m| mappers::machine_to_docker_machine(kinds.machine, m),
        )
        .watches_stream(
            cluster_events_for_dm.predicate_filter(predicates::cluster, Default::default()),
            move |c| mappers::cluster_to_docker_machines(&by_cluster, &c),
        )
        .watches_stream(
            dc_events_for_dm.predicate_filter(predicates::docker_cluster, Default::default()),
            move |dc| mappers::docker_cluster_to_docker_machines(&by_docker_cluster, &dc),
        )
        .reconcile_on(futures::stream::select(triggers.machines, woken))
        .reconcile_all_on(triggers.all_machines)
        .with_config(ControllerConfig::default().concurrency(concurrency.machine))
        .trigger_backoff(backoff::NoTriggerBackoff)
        .graceful_shutdown_on(shutdown.clone())
        .run(
            reconcile_machine,
            |o, e, c| error_policy(c.kinds.machine, o, e, c),
            ctx.clone(),
        )
        .for_each(move |r| async move { log_result(kinds.machine, r) });

    // MachinePools: their own watches (few objects); the instances are the family's machines,
    // watched here again for the changes a pool counts (provisioned, providerID, deletion).
    let (dmp_store, dmp_writer) = reflector::store();
    let dmp_stream = primary(own.pools, dmp_writer, predicates::own::<DockerMachinePool>);
    let pools_of_cluster = dmp_store.clone();
    let pools = Controller::for_stream(dmp_stream, dmp_store)
        .watches_stream(
            machine_pool_events.predicate_filter(predicates::machine_pool, Default::default()),
            move |mp| mappers::machine_pool_to_docker_machine_pool(kinds.pool, mp),
        )
        .watches_stream(
            own.instances
                .touched_objects()
                .predicate_filter(predicates::pool_instance, Default::default()),
            move |dm| mappers::instance_to_docker_machine_pool(kinds.pool, dm),
        )
        .watches_stream(
            cluster_events_for_dmp.predicate_filter(predicates::cluster, Default::default()),
            move |c| mappers::cluster_to_docker_machine_pools(&pools_of_cluster, &c),
        )
        .with_config(ControllerConfig::default().concurrency(concurrency.pool))
        .trigger_backoff(backoff::NoTriggerBackoff)
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile::<Pools>,
            |o, e, c| error_policy(c.kinds.pool, o, e, c),
            ctx.clone(),
        )
        .for_each(move |r| async move { log_result(kinds.pool, r) });
    // Built either way (the watches above are lazy): without the gate it is never polled, so
    // neither the pool watches nor the controller start.
    let pools = if scope.machine_pools {
        futures::future::Either::Left(pools)
    } else {
        // Dropped, not only left unpolled: its receivers of the shared watches close, so
        // those do not queue events for it.
        drop(pools);
        debug!(
            kind = kinds.pool,
            "controller off: MachinePool feature gate disabled"
        );
        futures::future::Either::Right(futures::future::ready(()))
    };

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
    events: EventStream<K>,
    writer: reflector::store::Writer<K>,
    predicate: fn(&K) -> Option<u64>,
) -> impl Stream<Item = std::result::Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    events
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
    events: impl Stream<Item = std::result::Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
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
    let source = events.reflect(cache).touched_objects();
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
                // The watcher retries with backoff by itself. An expired resourceVersion (410,
                // e.g. right after the CRDs were created, or after a long disconnect) is the
                // watch protocol asking for a fresh list, not a failure.
                Err(e) if watch_expired(&e) => debug!(error = %e, "watch expired; listing again"),
                Err(e) => warn!(error = %e, "watch failed; retrying"),
            }
        }
    });
    streams
}

/// The API server ended the watch because its resourceVersion is too old (HTTP 410 Gone).
fn watch_expired(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::WatchError(s) if s.code == 410)
}

/// A cluster's reconcile: the backend its view is marked with picks the reconciler (a DevCluster
/// of the in-memory backend gets a port; every other one a load balancer).
pub(crate) async fn reconcile_cluster(dc: Arc<DockerCluster>, ctx: Arc<Context>) -> Result<Action> {
    match in_memory_backend(&dc.metadata) {
        Some(_) => reconcile::<InMemoryClusters>(dc, ctx).await,
        None => reconcile::<Clusters>(dc, ctx).await,
    }
}

/// A machine's reconcile, picked as [`reconcile_cluster`]'s (a DevMachine of the in-memory
/// backend is simulated; every other one is a node container).
pub(crate) async fn reconcile_machine(dm: Arc<DockerMachine>, ctx: Arc<Context>) -> Result<Action> {
    match in_memory_backend(&dm.metadata) {
        Some(_) => reconcile::<InMemoryMachines>(dm, ctx).await,
        None => reconcile::<Machines>(dm, ctx).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expired_watch_is_told_from_a_failed_one() {
        let status = |code| {
            Box::new(kube::core::Status {
                code,
                ..Default::default()
            })
        };
        assert!(watch_expired(&watcher::Error::WatchError(status(410))));
        assert!(!watch_expired(&watcher::Error::WatchError(status(500))));
        assert!(!watch_expired(&watcher::Error::NoResourceVersion));
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
        let [t, dev] = docker_triggers(events, FAMILIES);
        let machines: Vec<_> = t.machines.take(1).collect().await;
        assert_eq!(machines, [ObjectRef::new("m").within("ns")]);
        assert_eq!(t.all_clusters.take(1).collect::<Vec<_>>().await, [()]);
        assert_eq!(t.all_machines.take(1).collect::<Vec<_>>().await, [()]);
        assert_eq!(dev.all_machines.take(1).collect::<Vec<_>>().await, [()]);
        // Nothing was routed to a DockerCluster, nor to the Dev* family's machines; the streams
        // end with the events.
        assert_eq!(t.clusters.collect::<Vec<_>>().await, []);
        assert_eq!(dev.machines.collect::<Vec<_>>().await, []);
    }
}
