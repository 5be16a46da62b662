//! The one reconcile every controller runs, in the order the Cluster API contract gives it:
//!
//! fetch (the kind's owners, from the caches) -> decide (pure: the contract's [`Gate`], then the
//! kind's own normal or delete plan) -> act (the kind's arm, through a [`Step`]) -> status,
//! written once at the end by the [`Step`], with Ready summarised and Events published.
//!
//! What every kind shares is here. A kind's [`Subject`] says what it reads of its owners and what
//! the gate needs there; a backend's [`Decide`] and [`Reconciler`] say only what differs: the
//! conditions it reports and its own normal and delete.
use std::{future::Future, sync::Arc};

use kube::{Resource, ResourceExt, runtime::controller::Action};
use serde::Serialize;
use tracing::{Instrument, info, info_span};

use super::{
    context::Context,
    error::{Error, Result},
    events,
    kinds::Kinds,
    patch::Patcher,
    report::Report,
};
use crate::{
    api::{
        conditions::{self, Desired, WithConditions, reasons, types},
        dev,
        v1beta1_conditions::V1Beta1Mirror,
    },
    capi::{self, Cluster},
};

/// What a kind is to the contract, whichever backend serves it: what a reconcile reads of its
/// owners and what the gate reads there, its finalizer and its status. Implemented by the
/// Docker* type itself (a Dev* object arrives as its view).
pub trait Subject: Resource<DynamicType = ()> + Send + Sync + 'static {
    /// What the reconcile reads ([`Subject::fetch`]), once.
    type Fetched: Send + Sync;
    /// The owners the normal path needs, all present.
    type Bound;
    type Status: WithConditions
        + V1Beta1Mirror
        + Serialize
        + Default
        + Clone
        + PartialEq
        + Send
        + Sync;

    /// Upstream's finalizer (a Dev* object carries the same one).
    const FINALIZER: &'static str;
    /// The CAPI kind whose owner reference makes the object ours to reconcile.
    const OWNER_KIND: &'static str;

    fn kind(kinds: Kinds) -> &'static str;
    fn status(obj: &Self) -> Option<&Self::Status>;
    /// The objects the reconcile reads (from the caches where there are some).
    fn fetch(obj: &Self, ctx: &Context) -> impl Future<Output = Result<Self::Fetched>> + Send;
    /// Pure: what the gate reads of the owners (see [`decide`]).
    fn facts(kind: &str, obj: &Self, fetched: &Self::Fetched) -> Facts<Self::Bound>;
}

/// What a reconcile of `R` read.
pub type FetchedOf<R> = <<R as Decide>::Object as Subject>::Fetched;
/// The status `R` writes.
pub type StatusOf<R> = <<R as Decide>::Object as Subject>::Status;

/// The pure half of one controller: its own normal and delete plans, once the contract's gate
/// has passed. No API server, no Docker: unit-tested with the kind's `decide`.
pub trait Decide {
    /// The object, as its Docker* type (a Dev* object as its view).
    type Object: Subject;
    type Normal: Send;
    type Delete: Send;

    /// The kind's own plan once the gate says normal.
    fn decide_normal(
        obj: &Self::Object,
        fetched: &<Self::Object as Subject>::Fetched,
        bound: <Self::Object as Subject>::Bound,
    ) -> Self::Normal;
    /// The kind's own plan once the gate says delete.
    fn decide_delete(
        obj: &Self::Object,
        fetched: &<Self::Object as Subject>::Fetched,
    ) -> Self::Delete;
}

/// The acting half of one controller (one backend of a kind): what it reports, and its two arms.
pub trait Reconciler: Decide + Sized + Send + Sync + 'static {
    /// The condition that says what the object's infrastructure is doing: an unserved backend,
    /// an owner naming another object, a deletion and an error without one of its own land here.
    const PRIMARY: &'static str;
    /// [`Self::PRIMARY`]'s message while the object is being deleted.
    const DELETING: &'static str;
    /// The conditions Ready summarises.
    const READY_FROM: &'static [&'static str];
    /// Conditions an earlier capd-rs reported that no longer exist: removed when seen.
    const RETIRED: &'static [&'static str] = &[];

    /// [`Self::PRIMARY`] and [`Self::READY_FROM`].
    const REPORTS: Reports = Reports {
        primary: Self::PRIMARY,
        ready_from: Some(Self::READY_FROM),
    };

    fn kind(kinds: Kinds) -> &'static str {
        <Self::Object as Subject>::kind(kinds)
    }

    /// The conditions this object reports under: [`Self::REPORTS`], unless they depend on the
    /// object (an in-memory control plane's phases).
    fn reports(_obj: &Self::Object) -> Reports {
        Self::REPORTS
    }

    /// The finalizer is on; Paused is False. Conditions go through `step.report`.
    fn normal(
        step: &mut Step<'_, Self>,
        plan: Self::Normal,
    ) -> impl Future<Output = Result<Action>> + Send;
    /// Ready and [`Self::PRIMARY`] already say Deleting, and status has been written.
    fn delete(
        step: &mut Step<'_, Self>,
        plan: Self::Delete,
    ) -> impl Future<Output = Result<Deleted>> + Send;
}

/// Where one object's reconcile reports: the condition an error without one of its own, or a
/// deletion, lands in; and what Ready summarises (`None`: the arm sets Ready itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reports {
    pub primary: &'static str,
    pub ready_from: Option<&'static [&'static str]>,
}

/// What the gate reads of a kind's owners.
pub struct Facts<B> {
    /// The owners the normal path needs, or what is missing (read only while not deleting).
    pub bound: std::result::Result<B, String>,
    /// Set when the owner's infrastructure reference names another object (read only while not
    /// deleting): the condition saying whom it names.
    pub named_elsewhere: Option<Desired>,
    /// The Cluster, whose `spec.paused` pauses the object.
    pub cluster: Option<Arc<Cluster>>,
}

/// What the contract decides before anything kind-specific.
#[derive(Clone, Debug, PartialEq)]
pub enum Gate {
    /// Externally managed (`cluster.x-k8s.io/managed-by`): not ours to touch.
    LeaveAlone,
    /// No owner yet: CAPI sets it; a watch event brings the object back.
    AwaitOwner,
    /// Deleted before it ever had an owner, or a Dev* object of an unserved backend being
    /// deleted: remove what carries its UID, then let go.
    Release,
    /// A Dev* object whose backend this provider does not serve: say so.
    Unserved(String),
    /// An owner the normal path needs does not exist (transient: it may appear).
    Missing(String),
    /// The owner's infrastructure reference names another object: not provisioned (no
    /// finalizer, no Secret read), the condition says why.
    NotInfrastructure(Desired),
    /// Paused by its Cluster, its own annotation or `clusterctl move`: report only.
    Paused(Vec<String>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Plan<N, D> {
    Gate(Gate),
    Delete(D),
    Normal(N),
}

/// A controller's plan.
pub type PlanOf<R> = Plan<<R as Decide>::Normal, <R as Decide>::Delete>;

/// Where a delete arm got to.
#[derive(Debug)]
pub enum Deleted {
    /// Everything is gone: the finalizer goes.
    Released,
    /// Not yet: look again then (status is written).
    Pending(Action),
}

/// Pure: the plan for `obj` (of kind `kind`), the contract's checks in the contract's order.
pub fn decide<R: Decide>(kind: &str, obj: &R::Object, fetched: &FetchedOf<R>) -> PlanOf<R> {
    let meta = obj.meta();
    let deleting = meta.deletion_timestamp.is_some();
    let ownership = capi::ownership(meta, R::Object::FINALIZER, R::Object::OWNER_KIND);
    if let Some(backend) = dev::unserved_backend(meta)
        && ownership != capi::Ownership::External
    {
        return Plan::Gate(if deleting {
            Gate::Release
        } else {
            Gate::Unserved(backend.to_string())
        });
    }
    match ownership {
        capi::Ownership::External => return Plan::Gate(Gate::LeaveAlone),
        capi::Ownership::Unowned { deleting: true } => return Plan::Gate(Gate::Release),
        capi::Ownership::Unowned { deleting: false } => return Plan::Gate(Gate::AwaitOwner),
        capi::Ownership::Owned(_) => {}
    }
    let facts = R::Object::facts(kind, obj, fetched);
    let bound = match (deleting, facts.bound) {
        (true, _) => None,
        (false, Err(missing)) => return Plan::Gate(Gate::Missing(missing)),
        (false, Ok(bound)) => Some(bound),
    };
    if !deleting && let Some(why) = facts.named_elsewhere {
        return Plan::Gate(Gate::NotInfrastructure(why));
    }
    let paused = capi::paused_reasons(facts.cluster.as_deref(), meta, kind);
    if !paused.is_empty() {
        return Plan::Gate(Gate::Paused(paused));
    }
    match bound {
        Some(bound) => Plan::Normal(R::decide_normal(obj, fetched, bound)),
        None => Plan::Delete(R::decide_delete(obj, fetched)),
    }
}

/// Reconcile `obj`: fetch, decide, act, status.
pub async fn reconcile<R: Reconciler>(obj: Arc<R::Object>, ctx: Arc<Context>) -> Result<Action> {
    let kind = R::kind(ctx.kinds);
    let owner = capi::capi_owner(obj.meta(), R::Object::OWNER_KIND).map(|o| o.name.clone());
    let span = info_span!("reconcile", kind, namespace = %obj.namespace().unwrap_or_default(),
        name = %obj.name_any(), owner = owner.as_deref().unwrap_or(""));
    async move {
        let fetched = R::Object::fetch(&obj, &ctx).await?;
        let plan = decide::<R>(kind, &obj, &fetched);
        act::<R>(plan, &obj, &fetched, &ctx).await
    }
    .instrument(span)
    .await
}

async fn act<R: Reconciler>(
    plan: PlanOf<R>,
    obj: &R::Object,
    fetched: &FetchedOf<R>,
    ctx: &Context,
) -> Result<Action> {
    let kind = R::kind(ctx.kinds);
    let mut step = Step::<R>::new(obj, fetched, ctx);
    let outcome = match plan {
        Plan::Gate(Gate::LeaveAlone) => return Ok(Action::await_change()),
        Plan::Gate(Gate::AwaitOwner) => {
            info!(
                owner_kind = R::Object::OWNER_KIND,
                "waiting for CAPI to set the owner reference"
            );
            return Ok(Action::requeue(ctx.settings.resync));
        }
        Plan::Gate(Gate::Missing(message)) => return Err(Error::Missing(message)),
        Plan::Gate(Gate::Release) => {
            ctx.release(&obj.uid().unwrap_or_default()).await?;
            return step.let_go().await;
        }
        Plan::Gate(Gate::Unserved(backend)) => {
            step.report.set(&Desired::false_(
                R::PRIMARY,
                reasons::BACKEND_NOT_SERVED,
                dev::unserved_message(kind, &backend),
            ));
            Ok(Action::await_change())
        }
        Plan::Gate(Gate::NotInfrastructure(why)) => {
            info!(message = %why.message, "not the owner's infrastructure: not provisioned");
            step.report.set(&why);
            // The owner's mapper does not lead here (it follows the infrastructure reference):
            // look again at the resync period, never faster.
            Ok(Action::requeue(ctx.settings.resync))
        }
        Plan::Gate(Gate::Paused(why)) => {
            step.report.set(&conditions::paused(&why));
            Ok(Action::requeue(ctx.settings.resync))
        }
        Plan::Delete(plan) => {
            step.report.set(&conditions::paused(&[]));
            step.report.set(&Desired::false_(
                step.reports.primary,
                reasons::DELETING,
                R::DELETING,
            ));
            step.report.set(&Desired::false_(
                types::READY,
                reasons::DELETING,
                "Deleting",
            ));
            // The one early status write: a user watching the deletion sees why it takes time.
            step.write_status().await?;
            match R::delete(&mut step, plan).await {
                Ok(Deleted::Released) => return step.let_go().await,
                Ok(Deleted::Pending(action)) => Ok(action),
                Err(e) => Err(e),
            }
        }
        Plan::Normal(plan) => {
            step.report.set(&conditions::paused(&[]));
            match step.patcher.add_finalizer(obj, R::Object::FINALIZER).await {
                Ok(_) => R::normal(&mut step, plan).await,
                Err(e) => Err(e),
            }
        }
    };
    step.finish(outcome).await
}

/// One reconcile's act: the object, what was fetched, the writes to the object and the status
/// being built.
pub struct Step<'a, R: Reconciler> {
    pub obj: &'a R::Object,
    pub fetched: &'a FetchedOf<R>,
    pub ctx: &'a Context,
    pub patcher: Patcher<'a>,
    pub report: Report<StatusOf<R>>,
    reports: Reports,
}

impl<'a, R: Reconciler> Step<'a, R> {
    fn new(obj: &'a R::Object, fetched: &'a FetchedOf<R>, ctx: &'a Context) -> Self {
        let kind = R::kind(ctx.kinds);
        let api = Kinds::api(kind, &ctx.client, &obj.namespace().unwrap_or_default());
        Self {
            obj,
            fetched,
            ctx,
            patcher: Patcher::new(api, obj, &ctx.own_writes),
            report: Report::new(R::Object::status(obj), obj.meta().generation),
            reports: R::reports(obj),
        }
    }

    pub fn kind(&self) -> &'static str {
        R::kind(self.ctx.kinds)
    }

    /// The object's backoff key.
    pub fn key(&self) -> String {
        super::key(self.kind(), self.obj)
    }

    async fn write_status(&mut self) -> Result<bool> {
        self.patcher
            .status(R::Object::status(self.obj), &*self.report)
            .await
    }

    /// Status once, whatever happened: an error is reported in the condition it concerns, Ready
    /// summarises the kind's conditions, then Events for what turned bad.
    async fn finish(mut self, outcome: Result<Action>) -> Result<Action> {
        if let Err(e) = &outcome
            && let Some(reason) = e.reason()
        {
            let condition = match e {
                Error::Blocked(b) => b.condition,
                _ => self.reports.primary,
            };
            self.report
                .set(&Desired::false_(condition, reason, e.to_string()));
        }
        let deleting = self.obj.meta().deletion_timestamp.is_some();
        let observed = self.patcher.observed_generation();
        let ready_from = self.reports.ready_from.filter(|_| !deleting);
        self.report.close(R::RETIRED, ready_from, observed);
        self.write_status().await?;
        let before = R::Object::status(self.obj).map(WithConditions::conditions);
        events::publish(
            &self.ctx.recorder,
            &Kinds::reference(self.kind(), self.obj.meta()),
            before.unwrap_or_default(),
            self.report.conditions(),
        )
        .await;
        match outcome {
            Err(e) => match e.fixed_retry() {
                Some(retry) => {
                    info!(error = %e, retry_in = ?retry, "blocked until something changes");
                    Ok(Action::requeue(retry))
                }
                None => Err(e),
            },
            ok => ok,
        }
    }

    /// Remove the finalizer and everything kept in memory for the object.
    async fn let_go(mut self) -> Result<Action> {
        self.patcher
            .remove_finalizer(self.obj, R::Object::FINALIZER)
            .await?;
        self.ctx
            .forget(&self.key(), &self.obj.uid().unwrap_or_default());
        Ok(Action::await_change())
    }
}
