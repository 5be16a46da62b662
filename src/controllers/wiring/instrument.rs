//! Every reconcile, counted and timed; and what a failed one waits before the next.
use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use kube::{Resource, ResourceExt, runtime::controller::Action};
use tracing::{debug, warn};

use crate::{
    controllers::kit::{
        Context,
        backoff::Backoff,
        error::{Error, Result},
        events, key,
        kinds::Kinds,
        lifecycle,
    },
    telemetry::Outcome,
};

pub(super) fn log_result<T: std::fmt::Debug, E: std::fmt::Display>(
    kind: &str,
    r: std::result::Result<T, E>,
) {
    match r {
        Ok(o) => debug!(kind, object = ?o, "reconciled"),
        Err(e) => debug!(kind, error = %e, "reconcile failed"),
    }
}

/// One reconcile of a controller, counted and timed (see [`instrumented`]).
pub(super) async fn reconcile<R: lifecycle::Reconciler>(
    obj: Arc<R::Object>,
    ctx: Arc<Context>,
) -> Result<Action> {
    instrumented(
        R::kind(ctx.kinds),
        obj.clone(),
        ctx.clone(),
        lifecycle::reconcile::<R>(obj, ctx),
    )
    .await
}

/// How soon a reconcile whose view predates our own last write looks again. The echo of our
/// write passes no predicate (it changes nothing a reconcile reads), so it would not wake it.
const CACHE_LAG_RETRY: Duration = Duration::from_millis(200);

/// Count and time a reconcile of an object of `kind`, and forget its backoff once it succeeds.
/// A view older than our own last write to the object is not reconciled: it holds nothing our
/// write did not account for, and its status write would meet a certain 409 (with CAPI's
/// reactions to our writes triggering passes faster than the watch delivers them, that was one
/// or two failed writes per machine).
async fn instrumented(
    kind: &str,
    obj: Arc<impl Resource>,
    ctx: Arc<Context>,
    fut: impl Future<Output = Result<Action>>,
) -> Result<Action> {
    if ctx.own_writes.lags(obj.as_ref()) {
        debug!(%kind, namespace = obj.namespace().unwrap_or_default(), name = obj.name_any(),
            "the cache has not caught up with our last write; looking again");
        return Ok(Action::requeue(CACHE_LAG_RETRY));
    }
    let start = Instant::now();
    let worker = ctx.metrics.worker(kind);
    let result = fut.await;
    drop(worker);
    ctx.metrics.observe_reconcile(
        kind,
        start.elapsed(),
        outcome(&result, ctx.settings.resync),
        result.as_ref().err().map(Error::kind),
    );
    if result.is_ok() {
        ctx.backoff.reset(&key(kind, obj.as_ref()));
    }
    if let Err(e) = &result
        && let Some(message) = e.status_rejected()
    {
        // Otherwise invisible: the status that would carry a condition is what was refused.
        tracing::error!(%kind, namespace = obj.namespace().unwrap_or_default(), name = obj.name_any(),
            %message, "the API server refused the status write");
        events::publish_status_rejected(
            &ctx.recorder,
            &Kinds::reference(kind, obj.meta()),
            message,
        )
        .await;
    }
    result
}

/// controller-runtime's result of a reconcile. Looking again after the resync period is how a
/// kube-runtime controller spells upstream's `SyncPeriod`, which upstream counts as a success.
fn outcome(result: &Result<Action>, resync: Duration) -> Outcome {
    match result {
        Err(_) => Outcome::Error,
        Ok(a) if *a == Action::await_change() || *a == Action::requeue(resync) => Outcome::Success,
        Ok(_) => Outcome::RequeueAfter,
    }
}

pub(super) fn error_policy(
    kind: &str,
    obj: Arc<impl Resource>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    let delay = retry_delay(error, &ctx.backoff, &key(kind, obj.as_ref()));
    // The reconcile's span has ended here: the same fields, named as the span names them.
    let (namespace, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
    if matches!(error, Error::Stale) {
        debug!(%kind, %namespace, %name, retry_in = ?delay, "status write met a newer object; looking again");
    } else {
        warn!(%kind, %namespace, %name, %error, retry_in = ?delay, "reconcile failed");
    }
    Action::requeue(delay)
}

/// How long a failed reconcile waits. A stale status write is optimistic concurrency doing its
/// job, not a failure: CAPI wrote the object meanwhile, or the pass started from a view older
/// than our own last write that [`instrumented`] could not tell (resourceVersions that do not
/// compare). The newer object is
/// already in the cache or about to be, so it is looked at again after an eighth of the
/// failure backoff (0.25 s, doubling); a bench of 50 machines met 62 such conflicts, each of
/// which waited 2 s before. Repeated conflicts still back off.
pub(super) fn retry_delay(error: &Error, backoff: &Backoff, key: &str) -> Duration {
    let delay = backoff.next_delay(key);
    match error {
        Error::Stale => delay / 8,
        // A write the API server refuses as invalid will be refused again: slowly.
        _ => error.min_retry().map_or(delay, |min| delay.max(min)),
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
        let rejected = Error::StatusRejected("status.failureDomain: Too long".into());
        assert_eq!(
            retry_delay(&rejected, &backoff, "c"),
            crate::controllers::kit::error::STATUS_REJECTED_RETRY,
            "a refused status write is not retried at backoff speed"
        );
    }
}
