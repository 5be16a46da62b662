//! The engine's container events, as the runtime port exposes them: when one of our containers
//! dies, stops or disappears (by hand, OOM, engine restart), its labels are reported so that the
//! controllers can reconcile the owner at once instead of at the next resync; and when the engine
//! answers again after the stream broke, that is reported too. Events of a removal this process
//! made are left out (see [`super::engine::OwnRemovals`]). Which object a container belongs
//! to is the controllers' business ([`crate::controllers::docker_triggers`]).
use std::{
    collections::{BTreeMap, HashMap},
    future::Future,
    time::Duration,
};

use bollard::query_parameters::EventsOptionsBuilder;
use futures::{StreamExt, channel::mpsc, stream::BoxStream};
use tracing::{debug, info, warn};

use super::{ContainerEvent, EngineEvent, engine::BollardRuntime, labels};

/// Container actions after which the owner should look again.
const ACTIONS: [&str; 4] = ["die", "stop", "destroy", "oom"];
/// How often an unreachable engine is pinged.
const RECONNECT_POLL: Duration = Duration::from_millis(500);
/// How long to wait before following a new stream when the engine still answers.
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(2);

/// Follow the engine's event stream for containers we manage until `stop` resolves. When the
/// stream breaks because the engine went away (stopped, restarting), wait until it answers a
/// ping again, report [`EngineEvent::Reconnected`] and follow a new stream.
pub fn container_events(
    rt: &BollardRuntime,
    stop: impl Future<Output = ()> + Send + 'static,
) -> BoxStream<'static, EngineEvent> {
    let (tx, rx) = mpsc::unbounded();
    let docker = rt.client().clone();
    let own = rt.own_removals();
    let follow = async move {
        let managed = format!("{}={}", labels::MANAGED_BY, labels::MANAGED_BY_VALUE);
        let filters = HashMap::from([
            ("type", vec!["container"]),
            ("label", vec![managed.as_str()]),
            ("event", ACTIONS.to_vec()),
        ]);
        loop {
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
                let action = event.action.unwrap_or_default();
                let labels: BTreeMap<String, String> = event
                    .actor
                    .and_then(|a| a.attributes)
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                let name = labels.get("name").map(String::as_str).unwrap_or_default();
                if own.is_own(name, &action) {
                    debug!(%action, container = name, "event of our own removal; not news");
                    continue;
                }
                debug!(%action, "container event");
                let event = EngineEvent::Container(ContainerEvent { action, labels });
                if tx.unbounded_send(event).is_err() {
                    return;
                }
            }
            // The stream broke. An engine that still answers gets a new stream after a pause
            // (events in between are missed; the resync covers them). One that does not (it
            // stopped or is restarting) is pinged until it is back, and then every object looks
            // again: those that failed meanwhile are backing off (up to minutes), and their
            // containers stopped with the engine.
            if docker.ping().await.is_ok() {
                tokio::time::sleep(RESUBSCRIBE_AFTER).await;
                continue;
            }
            while docker.ping().await.is_err() {
                tokio::time::sleep(RECONNECT_POLL).await;
            }
            info!("Docker Engine answers again; every object looks again");
            if tx.unbounded_send(EngineEvent::Reconnected).is_err() {
                return;
            }
        }
    };
    tokio::spawn(async move {
        tokio::select! {
            _ = stop => {},
            _ = follow => {},
        }
    });
    rx.boxed()
}
