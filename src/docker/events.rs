//! Docker events as reconcile triggers: when one of our containers dies, stops or disappears
//! (by hand, OOM, engine restart), the owning DockerCluster/DockerMachine is reconciled at once
//! instead of at the next resync.
use std::{collections::HashMap, future::Future, time::Duration};

use bollard::query_parameters::EventsOptionsBuilder;
use futures::{StreamExt, channel::mpsc, stream::BoxStream};
use kube::runtime::reflector::ObjectRef;
use tracing::{debug, warn};

use super::{engine::BollardRuntime, labels};
use crate::api::{DockerCluster, DockerMachine};

pub struct Triggers {
    pub clusters: BoxStream<'static, ObjectRef<DockerCluster>>,
    pub machines: BoxStream<'static, ObjectRef<DockerMachine>>,
}

/// Container actions after which the owner should look again.
const ACTIONS: [&str; 4] = ["die", "stop", "destroy", "oom"];

/// Follow the engine's event stream (reconnecting after errors) until `stop` resolves.
pub fn triggers(rt: &BollardRuntime, stop: impl Future<Output = ()> + Send + 'static) -> Triggers {
    let (cluster_tx, cluster_rx) = mpsc::unbounded();
    let (machine_tx, machine_rx) = mpsc::unbounded();
    let docker = rt.client().clone();
    let follow = async move {
        loop {
            let managed = format!("{}={}", labels::MANAGED_BY, labels::MANAGED_BY_VALUE);
            let filters = HashMap::from([
                ("type", vec!["container"]),
                ("label", vec![managed.as_str()]),
                ("event", ACTIONS.to_vec()),
            ]);
            let mut events = docker.events(Some(
                EventsOptionsBuilder::default().filters(&filters).build(),
            ));
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(e) => e,
                    Err(e) => {
                        warn!(error = %e, "Docker event stream failed; reconnecting");
                        break;
                    }
                };
                let attrs = event.actor.and_then(|a| a.attributes).unwrap_or_default();
                let (Some(kind), Some(name), Some(ns)) = (
                    attrs.get(labels::OWNER_KIND),
                    attrs.get(labels::OWNER_NAME),
                    attrs.get(labels::CLUSTER_NAMESPACE),
                ) else {
                    continue;
                };
                debug!(%kind, %name, %ns, action = ?event.action, "container event");
                match kind.as_str() {
                    "DockerCluster" => {
                        drop(cluster_tx.unbounded_send(ObjectRef::new(name).within(ns)))
                    }
                    "DockerMachine" => {
                        drop(machine_tx.unbounded_send(ObjectRef::new(name).within(ns)))
                    }
                    _ => {}
                }
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    };
    tokio::spawn(async move {
        tokio::select! {
            _ = stop => {},
            _ = follow => {},
        }
    });
    Triggers {
        clusters: cluster_rx.boxed(),
        machines: machine_rx.boxed(),
    }
}
