//! The engine's container events, as the runtime port exposes them: when one of our containers
//! dies, stops or disappears (by hand, OOM, engine restart), its labels are reported so that the
//! controllers can reconcile the owner at once instead of at the next resync. Which object a
//! container belongs to is the controllers' business ([`crate::controllers::docker_triggers`]).
use std::{collections::HashMap, future::Future, time::Duration};

use bollard::query_parameters::EventsOptionsBuilder;
use futures::{StreamExt, channel::mpsc, stream::BoxStream};
use tracing::{debug, warn};

use super::{ContainerEvent, engine::BollardRuntime, labels};

/// Container actions after which the owner should look again.
const ACTIONS: [&str; 4] = ["die", "stop", "destroy", "oom"];

/// Follow the engine's event stream for containers we manage (reconnecting after errors) until
/// `stop` resolves.
pub fn container_events(
    rt: &BollardRuntime,
    stop: impl Future<Output = ()> + Send + 'static,
) -> BoxStream<'static, ContainerEvent> {
    let (tx, rx) = mpsc::unbounded();
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
                let action = event.action.unwrap_or_default();
                let labels = event
                    .actor
                    .and_then(|a| a.attributes)
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                debug!(%action, "container event");
                if tx
                    .unbounded_send(ContainerEvent { action, labels })
                    .is_err()
                {
                    return;
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
    rx.boxed()
}
