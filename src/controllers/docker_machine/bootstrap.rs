//! The bootstrap part of a DockerMachine reconcile: start the commands from the bootstrap Secret
//! in a background task, report progress, and record how it ended, without ever running the
//! commands twice on one container (they have side effects: a second `kubeadm init` breaks a node).
//!
//! Before bootstrap starts, its start is on record, and the run claims the node (its file
//! [`bootstrap::CLAIM_PATH`], created exclusively) before its first command. The start is on
//! record in the node container's label [`BOOTSTRAP_START`] when the pass that created the
//! container runs it (the usual case: no write to the DockerMachine), else in the annotations
//! [`STARTED_AT`] and [`BOOTSTRAP_CLAIM`]; the later of the two is the current one. If a later
//! pass finds the start with no task of this process running (the manager restarted), the claim
//! tells the two cases apart. No claim: no command ran (the process stopped while the run waited
//! for a slot, for the node's init system, or imported images), so the bootstrap starts again.
//! A claim: commands ran, and an in-flight exec may still be running inside the node, so it waits
//! for the success sentinel until the start time plus the timeout instead of starting again.
//!
//! [`BOOTSTRAP_START`]: crate::docker::labels::BOOTSTRAP_START
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, ResourceExt,
    runtime::{controller::Action, reflector::ObjectRef},
};
use serde_json::json;
use tracing::info;

use super::decide::Status;
use crate::api::{BOOTSTRAP_CLAIM, STARTED_AT, STOPPED_DURING_BOOTSTRAP};
use crate::controllers::{
    kit::{
        bootstrap_tasks::{Finished, TaskState, WAITING_FOR_SLOT},
        context::Context,
        error::{Error, Result},
        events,
        kinds::Kinds,
        patch::Patcher,
    },
    load_balancer::argv,
};
use crate::{
    api::{
        DockerMachine,
        conditions::{self, Desired, reasons, types},
    },
    bootstrap::{self, Format, Step},
    docker::kind_images::KindMode,
};

/// How often a reconcile looks at a running bootstrap: a finished one wakes it at once, and the
/// steps run in one exec, so there is little to report in between (every look is a container
/// inspect and maybe a status patch, for each machine bootstrapping).
const POLL: Duration = Duration::from_secs(10);
/// How often a terminal result is re-checked against the sentinel (an orphaned exec of a
/// previous manager may still have succeeded).
const TERMINAL_RECHECK: Duration = Duration::from_secs(300);
/// How long the pass that starts a bootstrap waits for its end before it says "Bootstrapping".
/// Long enough for a light node's bootstrap on a busy host, short beside a real node's: a short
/// bootstrap's end is then that pass's one status write, made at once. (At 3 s, 17 to 20 of 500
/// light machines on a saturated 2-core host took longer and were written twice.)
pub(crate) const FIRST_WORD: Duration = Duration::from_secs(5);

pub enum Outcome {
    /// Bootstrap succeeded; provisioning may finish.
    Done,
    /// Not yet (or never): return this action.
    Wait(Action),
}

/// What the reconcile needs to know about the machine.
pub struct Target<'a> {
    pub dm: &'a DockerMachine,
    pub container: &'a str,
    pub secret_name: &'a str,
    /// The container was created by this pass: a bootstrap start on the object (the annotation
    /// of the object as this pass read it) concerns an earlier container, not this one.
    pub fresh: bool,
    /// The start the container was created for (its label
    /// [`BOOTSTRAP_START`](crate::docker::labels::BOOTSTRAP_START)), when this pass inspected or
    /// created it.
    pub created_for: Option<&'a str>,
    /// The node image's kind mode (see
    /// [`node_kind_mode`](crate::docker::specs::node_kind_mode)): it decides the kubelet's
    /// cgroup args, as it decides the container's cgroup namespace.
    pub kind_mode: KindMode,
}

/// Where in its bootstrap a node is, as upstream v1.14 reports it: step 1 waits for the init
/// system and the container runtime (`CGroupsReady`), the next `images` steps import
/// `preLoadImages` (`PreLoadedImagesReady`), the rest are the bootstrap commands
/// (`BootstrapCompleted`). Step 0: not started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    CGroups,
    Images,
    Commands,
}

impl Phase {
    pub fn of_step(step: usize, images: usize) -> Self {
        match step {
            0 | 1 => Phase::CGroups,
            s if s <= 1 + images => Phase::Images,
            _ => Phase::Commands,
        }
    }
}

/// The three bootstrap conditions while the node is at `at`: the phases before it True, this one
/// False with `reason` and `message`, the ones after it waiting for it (pure).
pub fn at_phase(at: Phase, reason: &'static str, message: String) -> [Desired; 3] {
    let waiting = |t, r| Desired::false_(t, r, String::new());
    let cgroups = match at {
        Phase::CGroups => Desired::false_(types::CGROUPS_READY, reason, message.clone()),
        _ => Desired::true_(types::CGROUPS_READY, reasons::READY),
    };
    let images = match at {
        Phase::CGroups => waiting(types::PRE_LOADED_IMAGES_READY, reasons::WAITING_FOR_CGROUPS),
        Phase::Images => Desired::false_(types::PRE_LOADED_IMAGES_READY, reason, message.clone()),
        Phase::Commands => Desired::true_(types::PRE_LOADED_IMAGES_READY, reasons::READY),
    };
    let commands = match at {
        Phase::CGroups => waiting(types::BOOTSTRAP_COMPLETED, reasons::WAITING_FOR_CGROUPS),
        Phase::Images => waiting(
            types::BOOTSTRAP_COMPLETED,
            reasons::WAITING_FOR_PRELOADED_IMAGES,
        ),
        Phase::Commands => Desired::false_(types::BOOTSTRAP_COMPLETED, reason, message),
    };
    [cgroups, images, commands]
}

/// The three bootstrap conditions of a bootstrapped node.
pub fn completed() -> [Desired; 3] {
    [
        Desired::true_(types::CGROUPS_READY, reasons::READY),
        Desired::true_(types::PRE_LOADED_IMAGES_READY, reasons::READY),
        Desired::true_(types::BOOTSTRAP_COMPLETED, reasons::COMPLETED),
    ]
}

/// The bootstrap conditions, in the order [`at_phase`] gives them.
pub const BOOTSTRAP_CONDITIONS: [&str; 3] = [
    types::CGROUPS_READY,
    types::PRE_LOADED_IMAGES_READY,
    types::BOOTSTRAP_COMPLETED,
];

/// How many `preLoadImages` steps a bootstrap of `dm` has.
fn image_steps(dm: &DockerMachine) -> usize {
    pre_load_images(dm).len()
}

/// The images to import, each once however often it is listed.
fn pre_load_images(dm: &DockerMachine) -> Vec<String> {
    bootstrap::unique(
        dm.spec
            .pre_load_images
            .iter()
            .flatten()
            .map(|i| i.trim())
            .filter(|i| !i.is_empty()),
    )
}

pub async fn reconcile(
    t: &Target<'_>,
    patcher: &mut Patcher<'_>,
    ctx: &Context,
    status: &mut Status,
) -> Result<Outcome> {
    let uid = t.dm.uid().unwrap_or_default();
    let ns = t.dm.namespace().unwrap_or_default();
    let now = Utc::now();
    let conds = status.conditions();
    let done = conditions::is_true(conds, types::BOOTSTRAP_COMPLETED);
    // A terminal result, on whichever of the three conditions its phase reports.
    let terminal_on_record = BOOTSTRAP_CONDITIONS.iter().any(|ty| {
        conditions::get(conds, ty).is_some_and(|c| {
            c.reason == reasons::BOOTSTRAP_FAILED || c.reason == reasons::BOOTSTRAP_TIMED_OUT
        })
    });
    // It concerns the container its run ran in: one this pass made is a new node, where no
    // command has run yet (a node removed after its bootstrap failed, by hand or by whatever
    // stopped it, gets one run of its own, as the first node did).
    let terminal = terminal_on_record && !t.fresh;
    let images = image_steps(t.dm);
    let at = |step| Phase::of_step(step, images);
    // Once a terminal result is in status, the finished task has nothing left to tell.
    if terminal {
        ctx.bootstraps.forget(&uid);
    }
    if done {
        ctx.bootstraps.forget(&uid);
        return Ok(Outcome::Done);
    }

    // A bootstrap younger than FIRST_WORD (its pass failed after starting it) gets the rest of
    // the wait its start would have had.
    let state = match ctx.bootstraps.poll(&uid) {
        TaskState::Running { elapsed, .. } if elapsed < FIRST_WORD => {
            ctx.bootstraps
                .ended_within(&uid, FIRST_WORD - elapsed)
                .await
        }
        state => state,
    };
    if let Some(outcome) = report_task(state, t, ctx, Look::Progress, status).await {
        return Ok(outcome);
    }

    // No task of this process. After a terminal result or a start by an earlier process, the
    // sentinel wins over everything: bootstrap already happened (an orphaned exec finished). A
    // first start needs no look: the runner does nothing when the sentinel is there.
    let on_record = if t.fresh {
        None
    } else {
        recorded_start(t.dm, t.created_for)
    };
    let started = on_record.as_ref().map(|r| r.at);
    if (terminal || started.is_some()) && sentinel_exists(ctx, t.container).await? {
        set(status, completed());
        return Ok(Outcome::Done);
    }
    if terminal {
        ctx.bootstraps.forget(&uid);
        return Ok(Outcome::Wait(Action::requeue(TERMINAL_RECHECK)));
    }
    let timeout = t.dm.bootstrap_timeout(ctx.settings.bootstrap_timeout);
    if let Some(record) = &on_record
        && !never_began(record, ctx, t.container).await?
    {
        let started = record.at;
        // Started by an earlier manager process: never start the commands a second time.
        let phase = at(current_step(ctx, t.container, images).await);
        let deadline = started + chrono::Duration::from_std(timeout).unwrap_or_default();
        if now < deadline {
            let waiting = format!(
                "Waiting for the bootstrap started at {} by an earlier manager process (it is not re-run)",
                started.to_rfc3339()
            );
            set(status, at_phase(phase, reasons::BOOTSTRAPPING, waiting));
            return Ok(Outcome::Wait(Action::requeue(POLL)));
        }
        set(
            status,
            at_phase(
                phase,
                reasons::BOOTSTRAP_TIMED_OUT,
                format!(
                    "The bootstrap started at {} by an earlier manager process did not create {} within {}s; \
                 if that process stopped between two steps, the remaining steps were not run, to avoid running \
                 any command twice: replace the machine (e.g. with a MachineHealthCheck)",
                    started.to_rfc3339(),
                    bootstrap::SENTINEL_PATH,
                    timeout.as_secs()
                ),
            ),
        );
        return Ok(Outcome::Wait(Action::requeue(TERMINAL_RECHECK)));
    }

    let pre_load = pre_load_images(t.dm);
    let (mut plan, skipped) = match load_steps(ctx, &ns, t, pre_load).await {
        Ok(loaded) => loaded,
        // Without usable data, a node that was bootstrapped all the same (a moved cluster
        // whose status did not come along) is still recognised by its sentinel.
        Err(e) if sentinel_exists(ctx, t.container).await? => {
            info!(container = %t.container, error = %e, "bootstrap data unusable, but the node is bootstrapped");
            set(status, completed());
            return Ok(Outcome::Done);
        }
        Err(e) => return Err(e),
    };
    // The start is on record before the run starts, so that no later pass can start a second
    // run, with the token the run claims the node with, so that a later process knows it
    // claims: the container created for it by this pass carries both; any other start is
    // recorded on the object.
    plan.claim = Some(match t.created_for.filter(|_| t.fresh) {
        Some(token) => token.to_string(),
        None => record_start(patcher, now).await?,
    });
    let total = plan.total();
    let (wake, me) = (ctx.wake.clone(), ObjectRef::from_obj(t.dm));
    ctx.bootstraps.start(
        &uid,
        ctx.runtime.clone(),
        t.container.to_string(),
        plan,
        timeout,
        move || {
            // The controller may be shutting down; then there is nobody to wake.
            let _ = wake.unbounded_send(me);
        },
    );
    info!(container = %t.container, steps = total, "bootstrap started");
    // Once per bootstrap run (a start happens once per node container), never per pass.
    if !skipped.is_empty() {
        events::publish_modules_skipped(
            &ctx.recorder,
            &Kinds::reference(ctx.kinds.machine, &t.dm.metadata),
            &skipped,
        )
        .await;
    }
    // A short bootstrap (a light node's, or one whose node was bootstrapped already) ends
    // within FIRST_WORD: its end is then this pass's one status write, made at once. The pass
    // its end wakes would first wait for a worker, behind every machine queued for one.
    let state = ctx.bootstraps.ended_within(&uid, FIRST_WORD).await;
    Ok(report_task(state, t, ctx, Look::Started, status)
        .await
        .unwrap_or(Outcome::Wait(Action::requeue(POLL))))
}

/// Set the three bootstrap conditions.
fn set(status: &mut Status, conditions: [Desired; 3]) {
    for d in &conditions {
        status.set(d);
    }
}

/// What a running bootstrap's conditions say of its progress.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Look {
    /// What the task knows, and the node's progress file when the task runs every step in one
    /// exec (an exec: a process in the node).
    Progress,
    /// What the task knows only: this pass started it, so it is at its beginning (and at a
    /// burst of new machines, each look would be a process started in a node).
    Started,
}

/// The conditions a bootstrap task of this process gives `status`, and what the reconcile does
/// next; `None` when there is no task.
async fn report_task(
    state: TaskState,
    t: &Target<'_>,
    ctx: &Context,
    look: Look,
    status: &mut Status,
) -> Option<Outcome> {
    let images = image_steps(t.dm);
    let at = |step| Phase::of_step(step, images);
    let outcome = match state {
        TaskState::NotStarted => return None,
        TaskState::Running {
            step,
            total,
            description,
            ..
        } => {
            // Step 0: not at a step (waiting for a slot, or all steps in one exec, where the
            // node's progress file tells how far the script got; one this pass started is at
            // its beginning).
            let (phase, message) = if step > 0 {
                (
                    at(step),
                    format!("Running step {step}/{total}: {description}"),
                )
            } else if description == WAITING_FOR_SLOT || look == Look::Started {
                (Phase::CGroups, format!("Bootstrap {description}"))
            } else {
                let step = current_step(ctx, t.container, images).await;
                (
                    at(step),
                    format!("Bootstrap {description}; at step {step}/{total}"),
                )
            };
            set(status, at_phase(phase, reasons::BOOTSTRAPPING, message));
            Outcome::Wait(Action::requeue(POLL))
        }
        // A terminal result stays in the task list until a pass sees it persisted.
        TaskState::Finished(Finished::Failed { step, message }) => {
            set(
                status,
                at_phase(at(step), reasons::BOOTSTRAP_FAILED, message),
            );
            Outcome::Wait(Action::requeue(TERMINAL_RECHECK))
        }
        TaskState::Finished(Finished::TimedOut { step, message }) => {
            set(
                status,
                at_phase(at(step), reasons::BOOTSTRAP_TIMED_OUT, message),
            );
            Outcome::Wait(Action::requeue(TERMINAL_RECHECK))
        }
        // The runner saw the sentinel (a run without it ends as Failed).
        TaskState::Finished(Finished::Succeeded) => {
            set(status, completed());
            Outcome::Done
        }
    };
    Some(outcome)
}

/// The step the node's bootstrap script is at (1-based), from its progress file: one exec, only
/// while a bootstrap runs in one exec (a step-by-step run reports its steps itself). With
/// `images`, the script runs the steps after the wait and the imports, so a progress file means
/// those are done.
async fn current_step(ctx: &Context, container: &str, images: usize) -> usize {
    let after_images = if images > 0 { 1 + images } else { 0 };
    bootstrap::steps_done(ctx.runtime.as_ref(), container)
        .await
        .map_or(1, |done| after_images + done + 1)
}

/// Forget any bootstrap state of a node container that is being recreated: the new container
/// needs its own bootstrap.
pub async fn reset(
    dm: &DockerMachine,
    patcher: &mut Patcher<'_>,
    ctx: &Context,
    status: &mut Status,
) -> Result<()> {
    ctx.bootstraps.cancel(&dm.uid().unwrap_or_default());
    let annotations = dm.annotations();
    if [STARTED_AT, BOOTSTRAP_CLAIM, STOPPED_DURING_BOOTSTRAP]
        .iter()
        .any(|k| annotations.contains_key(*k))
    {
        patcher
            .annotations(
                json!({ STARTED_AT: null, BOOTSTRAP_CLAIM: null, STOPPED_DURING_BOOTSTRAP: null }),
            )
            .await?;
    }
    for d in at_phase(
        Phase::CGroups,
        reasons::WAITING_FOR_CONTAINER,
        "The node container was recreated".into(),
    ) {
        status.set(&d);
    }
    Ok(())
}

/// Whether a bootstrap was started in the machine's current container: its start is on record
/// (on the object, or the container was created for one: `created_for`), or this process ran
/// one (finished, or still running).
pub fn began(dm: &DockerMachine, ctx: &Context, created_for: Option<&str>) -> bool {
    recorded_start(dm, created_for).is_some()
        || !matches!(
            ctx.bootstraps.poll(&dm.uid().unwrap_or_default()),
            TaskState::NotStarted
        )
}

/// Record that the node stopped during a bootstrap run with `inputs`.
pub async fn record_stop(patcher: &mut Patcher<'_>, inputs: &str) -> Result<()> {
    patcher
        .annotations(json!({ STOPPED_DURING_BOOTSTRAP: inputs }))
        .await
}

/// A bootstrap start on record.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    pub at: DateTime<Utc>,
    /// Its run claims the node before the first command (a claim token is on record with it).
    pub claims: bool,
}

/// The token of a start at `at`: its time, to the nanosecond. Only an exclusive claim keeps two
/// runs apart, and only when their tokens differ: two starts in the same nanosecond are not a
/// practical concern.
pub fn start_token(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

fn parse_time(value: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(value)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Pure: the machine's current bootstrap start, the later of the one on the object (a start
/// made again in an existing container; [`BOOTSTRAP_CLAIM`] with it if its manager claims) and
/// the one its container was created for (`created_for`, always claimed). An object's start
/// older than the container's concerns an earlier container.
pub fn recorded_start(dm: &DockerMachine, created_for: Option<&str>) -> Option<Recorded> {
    let annotations = dm.annotations();
    let on_object = annotations
        .get(STARTED_AT)
        .and_then(|v| parse_time(v))
        .map(|at| Recorded {
            at,
            claims: annotations.contains_key(BOOTSTRAP_CLAIM),
        });
    let on_container = created_for
        .and_then(parse_time)
        .map(|at| Recorded { at, claims: true });
    match (on_object, on_container) {
        (Some(o), Some(c)) => Some(if o.at > c.at { o } else { c }),
        (o, c) => o.or(c),
    }
}

/// Persist the start at `at` and the token its run claims the node with (returned).
async fn record_start(patcher: &mut Patcher<'_>, at: DateTime<Utc>) -> Result<String> {
    let token = start_token(at);
    patcher
        .annotations(json!({ STARTED_AT: token, BOOTSTRAP_CLAIM: token }))
        .await?;
    Ok(token)
}

/// Whether the bootstrap on record (of an earlier process) never reached its commands: its
/// manager claims before the first command ([`Recorded::claims`]) and the node holds no
/// claim. Such a start is made again rather than waited for until it times out: a manager Pod
/// that a control-plane rollout deletes (self-hosted) may stop between recording a start and
/// running it. A start by an older manager, which did not claim, is waited for as before.
async fn never_began(record: &Recorded, ctx: &Context, container: &str) -> Result<bool> {
    if !record.claims
        || bootstrap::file_in_node(ctx.runtime.as_ref(), container, bootstrap::CLAIM_PATH).await?
    {
        return Ok(false);
    }
    info!(
        %container,
        started = %record.at.to_rfc3339(),
        "the bootstrap on record never reached its commands (its process stopped first); starting it again"
    );
    Ok(true)
}

/// The commands from the bootstrap Secret, preceded by a wait for the node's init system and
/// container runtime and by the `preLoadImages` imports, and the cloud-config modules skipped. A missing or unusable Secret blocks
/// bootstrap: it may still be fixed or appear, so it is re-read slowly, never in a hot loop. So
/// does an image missing from the host's engine; the images themselves are only read by the
/// bootstrap task, one at a time, once it holds a slot.
async fn load_steps(
    ctx: &Context,
    ns: &str,
    t: &Target<'_>,
    pre_load: Vec<String>,
) -> Result<(bootstrap::Plan, Vec<String>)> {
    let secret_name = t.secret_name;
    let blocked = |reason, message: String, retry| {
        Err(Error::blocked(
            types::BOOTSTRAP_COMPLETED,
            reason,
            message,
            Duration::from_secs(retry),
        ))
    };
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let Some(secret) = api.get_opt(secret_name).await? else {
        return blocked(
            reasons::BOOTSTRAP_DATA_NOT_FOUND,
            format!("Bootstrap data Secret {ns}/{secret_name} not found"),
            30,
        );
    };
    let invalid = |m: String| {
        blocked(
            reasons::BOOTSTRAP_DATA_INVALID,
            format!("Bootstrap data Secret {ns}/{secret_name}: {m}"),
            120,
        )
    };
    // Any type, as upstream: CAPI's bootstrap providers write `cluster.x-k8s.io/secret`, but a
    // hand-made Secret (`Opaque`) with a `value` is bootstrap data too. The Machine names it, and
    // what it can do in the node is what any bootstrap data can (SECURITY.md).
    let mut data = secret.data.unwrap_or_default();
    let Some(value) = data.remove("value") else {
        return invalid("has no key \"value\"".into());
    };
    let format = data
        .remove("format")
        .map(|f| String::from_utf8_lossy(&f.0).into_owned());
    let format = match Format::parse(format.as_deref()) {
        Ok(format) => format,
        Err(e) => return invalid(e.to_string()),
    };
    let options = bootstrap::NodeOptions {
        cgroup_v1: ctx.settings.cgroup_v1,
        old_kind_image: t.kind_mode == KindMode::Mode0_19,
    };
    // Parsing is CPU work over up to 1 MiB (YAML, base64, gzip): off the async workers, so a
    // large or hostile Secret cannot stall every other reconcile.
    let parsed =
        tokio::task::spawn_blocking(move || bootstrap::plan(format, &value.0, &options)).await;
    let planned = match parsed {
        Ok(Ok(planned)) => planned,
        Ok(Err(e)) => return invalid(e.to_string()),
        // A panic in the parser (a bug; its message may quote the data): reported like bad
        // data, slowly retried, never in a hot loop.
        Err(_) => return invalid("parsing the bootstrap data failed unexpectedly".into()),
    };
    for image in &pre_load {
        if !ctx.runtime.image_present(image).await? {
            return Err(image_unavailable(image, "No such image"));
        }
    }
    let mut steps = vec![wait_for_init_step()];
    steps.extend(planned.steps);
    Ok((
        bootstrap::Plan {
            steps,
            images: pre_load,
            images_after: 1,
            // The start's token, set once the start is recorded.
            claim: None,
        },
        planned.skipped,
    ))
}

/// A `preLoadImages` entry the host's engine does not have: it may still be loaded there, so it
/// is looked for again slowly.
fn image_unavailable(image: &str, message: &str) -> Error {
    Error::blocked(
        types::PRE_LOADED_IMAGES_READY,
        reasons::IMAGE_UNAVAILABLE,
        format!(
            "preLoadImages: {image} cannot be saved from the host's Docker Engine (images are never pulled for pre-loading): {message}"
        ),
        Duration::from_secs(60),
    )
}

/// kind-style nodes (kind's marker `/kind/version`) run systemd and containerd: commands must
/// wait until systemd has started the system (multi-user target reached: `running`, or
/// `degraded` when an unrelated unit failed) and containerd serves CRI, or kubeadm finds no
/// runtime. `ctr version` answering is not enough: containerd answers without its CRI plugin
/// when that plugin failed to load (seen: "failed to create fsnotify watcher: too many open
/// files" once the host's inotify instances ran out), and kubeadm's preflight then fails with
/// "unknown service runtime.v1.RuntimeService". So the step also waits for `crictl info`, for a
/// minute at most, and then fails naming the likely cause. Other images (the light test image)
/// pass straight through, unless systemd is PID 1. The whole bootstrap's timeout bounds the wait.
fn wait_for_init_step() -> Step {
    Step {
        argv: argv(&[
            "/bin/sh",
            "-c",
            "if [ -f /kind/version ] || [ \"$(cat /proc/1/comm 2>/dev/null)\" = systemd ]; then \
             until s=$(systemctl is-system-running 2>/dev/null); [ \"$s\" = running ] || [ \"$s\" = degraded ]; do sleep 0.5; done; fi; \
             if [ -f /kind/version ]; then until ctr --namespace k8s.io version >/dev/null 2>&1; do sleep 0.5; done; \
             if command -v crictl >/dev/null 2>&1; then i=0; until crictl info >/dev/null 2>&1; do \
             i=$((i+1)); if [ $i -ge 120 ]; then echo \"containerd in this node does not serve CRI after 60s: its CRI plugin did not load \
             (journalctl -u containerd in the node says why; 'too many open files' means the host's fs.inotify.max_user_instances is spent)\" >&2; exit 1; fi; \
             sleep 0.5; done; fi; fi",
        ]),
        stdin: None,
        description: "wait for the node's init system and container runtime".into(),
    }
}

async fn sentinel_exists(ctx: &Context, container: &str) -> Result<bool> {
    let path = bootstrap::SENTINEL_PATH;
    Ok(bootstrap::file_in_node(ctx.runtime.as_ref(), container, path).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_annotations(pairs: &[(&str, &str)]) -> DockerMachine {
        let mut dm = DockerMachine::new("m", Default::default());
        let annotations = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        dm.metadata.annotations = Some(annotations.collect());
        dm
    }

    #[test]
    fn the_later_of_the_objects_and_the_containers_start_is_the_current_one() {
        let (earlier, later) = ("2026-11-27T10:00:00.5Z", "2026-11-27T10:00:01Z");
        let at = |t| parse_time(t).unwrap();
        let unclaimed = with_annotations(&[(STARTED_AT, earlier)]);
        assert_eq!(
            recorded_start(&unclaimed, Some(later)),
            Some(Recorded {
                at: at(later),
                claims: true
            }),
            "an object's start older than the container's concerns an earlier container"
        );
        let again = with_annotations(&[(STARTED_AT, later), (BOOTSTRAP_CLAIM, later)]);
        assert_eq!(
            recorded_start(&again, Some(earlier)),
            Some(Recorded {
                at: at(later),
                claims: true
            }),
            "a start made again in the container is on the object"
        );
        let old = with_annotations(&[(STARTED_AT, later)]);
        assert_eq!(
            recorded_start(&old, None),
            Some(Recorded {
                at: at(later),
                claims: false
            }),
            "an older manager's start, without a claim token"
        );
        let none = with_annotations(&[]);
        assert_eq!(recorded_start(&none, None), None);
        assert_eq!(recorded_start(&none, Some("not a time")), None);
        let token = start_token(at(earlier));
        assert_eq!(parse_time(&token), Some(at(earlier)), "{token}");
    }

    #[test]
    fn steps_map_to_upstreams_three_bootstrap_conditions() {
        assert_eq!(Phase::of_step(0, 2), Phase::CGroups);
        assert_eq!(Phase::of_step(1, 2), Phase::CGroups);
        assert_eq!(Phase::of_step(2, 2), Phase::Images);
        assert_eq!(Phase::of_step(3, 2), Phase::Images);
        assert_eq!(Phase::of_step(4, 2), Phase::Commands);
        assert_eq!(Phase::of_step(2, 0), Phase::Commands, "no images to import");
        let [cgroups, images, commands] = at_phase(
            Phase::Images,
            reasons::BOOTSTRAP_FAILED,
            "import failed".into(),
        );
        assert_eq!(cgroups.status, conditions::ConditionStatus::True);
        assert_eq!(
            (images.reason, images.message.as_str()),
            (reasons::BOOTSTRAP_FAILED, "import failed")
        );
        assert_eq!(commands.reason, reasons::WAITING_FOR_PRELOADED_IMAGES);
        let [_, images, commands] = at_phase(Phase::CGroups, reasons::BOOTSTRAPPING, "".into());
        assert_eq!(images.reason, reasons::WAITING_FOR_CGROUPS);
        assert_eq!(commands.reason, reasons::WAITING_FOR_CGROUPS);
        assert!(
            completed()
                .iter()
                .all(|d| d.status == conditions::ConditionStatus::True)
        );
    }

    #[test]
    fn an_image_listed_twice_is_imported_once() {
        let mut dm = DockerMachine::new("m", Default::default());
        dm.spec.pre_load_images = Some(vec![
            "kindest/haproxy:v1".into(),
            " kindest/haproxy:v1 ".into(),
            "".into(),
            "busybox:1".into(),
        ]);
        assert_eq!(pre_load_images(&dm), ["kindest/haproxy:v1", "busybox:1"]);
        assert_eq!(image_steps(&dm), 2);
    }

    #[test]
    fn init_wait_step_is_harmless_without_systemd() {
        let s = wait_for_init_step();
        assert_eq!(s.argv[0], "/bin/sh");
        assert!(s.argv[2].contains("/proc/1/comm"));
        assert!(
            s.argv[2].contains("crictl info"),
            "containerd answering is not CRI answering"
        );
    }
}
