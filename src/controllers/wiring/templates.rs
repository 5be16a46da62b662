//! The machine templates' controller, run: its own watch of one template kind.
use std::sync::Arc;

use futures::StreamExt;
use kube::{
    ResourceExt,
    runtime::{Controller, WatchStreamExt, controller::Action, reflector},
};

use super::{
    Scope,
    instrument::{log_result, retry_delay},
    predicates, watch,
};
use crate::controllers::{
    kit::{Shared, backoff, error::Error, key},
    machine_template::{Template, reconcile},
};

/// The controller of template kind `K` until `shutdown` resolves. Its own watch (templates are
/// few and only this controller reads them), filtered like every other watch by namespace and
/// watch-filter label. `concurrency`: the machine concurrency of the template's family.
pub async fn run<K, S>(shared: Arc<Shared>, scope: &Scope, concurrency: u16, shutdown: S)
where
    K: Template,
    S: std::future::Future<Output = ()> + Send + Sync + 'static,
{
    let wc = scope.watcher();
    let (store, writer) = reflector::store::<K>();
    let events = watch(scope.api::<K>(&shared.client), &wc)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::template::<K>, Default::default());
    let kind = K::kind(&());
    Controller::for_stream(events, store)
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .trigger_backoff(backoff::NoTriggerBackoff)
        .graceful_shutdown_on(shutdown)
        .run(
            |obj, shared: Arc<Shared>| async move {
                let k = key(&K::kind(&()), obj.as_ref());
                let result = reconcile(obj, shared.clone()).await;
                if result.is_ok() {
                    shared.backoff.reset(&k);
                }
                result
            },
            |obj, error: &Error, shared| {
                let kind = K::kind(&());
                let delay = retry_delay(error, &shared.backoff, &key(&kind, obj.as_ref()));
                tracing::warn!(%kind, namespace = obj.namespace().unwrap_or_default(),
                    name = obj.name_any(), %error, retry_in = ?delay, "reconcile failed");
                Action::requeue(delay)
            },
            shared,
        )
        .for_each(|r| {
            log_result(&kind, r);
            futures::future::ready(())
        })
        .await;
}
