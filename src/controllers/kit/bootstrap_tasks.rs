//! Bootstrap runs as a background task per DockerMachine so that a reconcile never blocks a
//! worker for minutes (the pass that starts one waits a few seconds at most, for a short one's
//! end: [`BootstrapTasks::ended_within`]). Reconciles poll the task's progress and collect its
//! result. At most `limit` tasks run their steps at once (the controller's concurrency no longer
//! bounds them once the reconcile that started them has returned); the others wait for a slot,
//! and their timeout starts when they get one.
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use tokio::{
    sync::{Semaphore, watch},
    task::JoinHandle,
};
use tracing::{Instrument, info};

use crate::{
    bootstrap::{self, Step},
    docker::ContainerRuntime,
};

/// How a finished bootstrap ended. `step` is where it stopped (1-based; one past the last
/// step when every step ran but the success sentinel was missing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finished {
    Succeeded,
    /// A step failed; the message names the step, its exit code and redacted output.
    Failed {
        step: usize,
        message: String,
    },
    TimedOut {
        step: usize,
        message: String,
    },
}

/// The state of a machine's bootstrap as seen by a reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskState {
    NotStarted,
    Running {
        step: usize,
        total: usize,
        description: String,
        elapsed: Duration,
    },
    Finished(Finished),
}

struct Task {
    handle: JoinHandle<()>,
    progress: Arc<Mutex<(usize, String)>>,
    total: usize,
    started: Instant,
    /// `None` until the run ends (the sender is the run's; a cancelled run drops it).
    result: watch::Receiver<Option<Finished>>,
}

/// In-flight bootstrap tasks, keyed by DockerMachine UID.
pub struct BootstrapTasks {
    tasks: Mutex<HashMap<String, Task>>,
    slots: Arc<Semaphore>,
}

/// What a task waiting for a slot reports as its step.
pub const WAITING_FOR_SLOT: &str = "waiting for a free bootstrap slot";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl BootstrapTasks {
    /// Tasks that run at most `limit` bootstraps at once.
    pub fn new(limit: usize) -> Self {
        Self {
            tasks: Mutex::default(),
            slots: Arc::new(Semaphore::new(limit.clamp(1, Semaphore::MAX_PERMITS))),
        }
    }

    /// The state of `uid`'s bootstrap. A finished result stays until [`Self::forget`].
    pub fn poll(&self, uid: &str) -> TaskState {
        let tasks = lock(&self.tasks);
        let Some(task) = tasks.get(uid) else {
            return TaskState::NotStarted;
        };
        if let Some(done) = task.result.borrow().clone() {
            return TaskState::Finished(done);
        }
        let (step, description) = lock(&task.progress).clone();
        TaskState::Running {
            step,
            total: task.total,
            description,
            elapsed: task.started.elapsed(),
        }
    }

    /// The state of `uid`'s bootstrap once it has ended, or once `at_most` has passed. The
    /// reconcile that starts a short bootstrap (a light node's) reports its end this way, in the
    /// same pass: the pass its end wakes would first wait for a worker, behind every machine
    /// queued for one (at a burst of 500 new machines, up to minutes).
    pub async fn ended_within(&self, uid: &str, at_most: Duration) -> TaskState {
        // While this clone lives, the run's end wakes nobody (see `start`): this pass reports it.
        // It is dropped before the poll, so an end that the poll misses does wake the machine.
        let result = lock(&self.tasks).get(uid).map(|t| t.result.clone());
        if let Some(mut result) = result {
            // Ended, cancelled (its sender dropped) or still running: the poll says which.
            let _ = tokio::time::timeout(at_most, result.wait_for(Option::is_some)).await;
        }
        self.poll(uid)
    }

    /// Whether a bootstrap of `uid` is in flight (waiting for a slot or running).
    pub fn is_running(&self, uid: &str) -> bool {
        matches!(self.poll(uid), TaskState::Running { .. })
    }

    /// Start running `plan` (its steps, or a [`bootstrap::Plan`] with `preLoadImages`) in
    /// `container` with a deadline. No-op if one is already running. Nothing of the plan runs,
    /// and no image is read, before the task holds a slot.
    /// `on_finish` runs once the result is recorded (it wakes the machine's reconcile, so the
    /// result is picked up at once rather than at the next poll), unless a pass is waiting for
    /// that result ([`Self::ended_within`]) and so reports it itself.
    pub fn start(
        &self,
        uid: &str,
        runtime: Arc<dyn ContainerRuntime>,
        container: String,
        plan: impl Into<bootstrap::Plan>,
        timeout: Duration,
        on_finish: impl FnOnce() + Send + 'static,
    ) {
        let mut tasks = lock(&self.tasks);
        if tasks.contains_key(uid) {
            return;
        }
        let progress = Arc::new(Mutex::new((0usize, WAITING_FOR_SLOT.to_string())));
        let (ended, result) = watch::channel(None);
        let plan: bootstrap::Plan = plan.into();
        let total = plan.total();
        let (p, slots) = (progress.clone(), self.slots.clone());
        let handle = tokio::spawn(
            async move {
            // Closed only if dropped, which never happens while tasks exist.
            let Ok(_slot) = slots.acquire_owned().await else {
                return;
            };
            info!(%container, steps = total, "bootstrap started");
            let (offset, rest) = plan.runner_part();
            *lock(&p) = if offset == 0 { (0, in_one_exec(rest)) } else { (1, plan.description(0)) };
            let report = |at: bootstrap::Progress<'_>| {
                *lock(&p) = match at {
                    bootstrap::Progress::Step(i, description) => (i + 1, description),
                    bootstrap::Progress::Runner(steps) => (0, in_one_exec(steps)),
                }
            };
            let run = bootstrap::run_plan(runtime.as_ref(), &container, &plan, report);
            let finished = match tokio::time::timeout(timeout, run).await {
                Ok(Ok(())) => Finished::Succeeded,
                // The runner logged the failure with its output tail.
                Ok(Err(failure)) => Finished::Failed {
                    // A claim comes before the runner's first step; a missing sentinel after
                    // the last.
                    step: match failure.step() {
                        Some(f) => f.number(),
                        None if failure.at_claim() => offset + 1,
                        None => total + 1,
                    },
                    message: failure.to_string(),
                },
                Err(_) => {
                    // The node knows how far its script got (counted from where the runner
                    // took over); a step-by-step run reported it.
                    let reported = lock(&p).clone();
                    let (step, description) = match reported {
                        (0, _) => match bootstrap::steps_done(runtime.as_ref(), &container).await {
                            Some(done) if offset + done < total => {
                                (offset + done + 1, plan.description(offset + done))
                            }
                            _ => reported,
                        },
                        at => at,
                    };
                    Finished::TimedOut {
                        step,
                        message: format!(
                            "bootstrap did not finish within {}s; it was at step {step}/{total}: {description}",
                            timeout.as_secs()
                        ),
                    }
                }
            };
            info!(%container, result = ?finished_label(&finished), "bootstrap finished");
            ended.send_replace(Some(finished));
            // The task's own receiver, and one per pass in `ended_within`: a pass that waits
            // polls after it lets go of its receiver, so it sees this result.
            if ended.receiver_count() <= 1 {
                on_finish();
            }
        }
        // The reconcile's span (kind, namespace, name, owner) follows the work it started.
        .in_current_span());
        tasks.insert(
            uid.to_string(),
            Task {
                handle,
                progress,
                total,
                started: Instant::now(),
                result,
            },
        );
    }

    /// Drop a finished result once it has been persisted in the object's status.
    pub fn forget(&self, uid: &str) {
        let mut tasks = lock(&self.tasks);
        let finished = tasks.get(uid).is_some_and(|t| t.result.borrow().is_some());
        if finished {
            tasks.remove(uid);
        }
    }

    /// Machines with a bootstrap in flight or a result not yet persisted.
    pub fn len(&self) -> usize {
        lock(&self.tasks).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stop a running bootstrap (the machine is being deleted, or its container recreated).
    pub fn cancel(&self, uid: &str) {
        if let Some(task) = lock(&self.tasks).remove(uid) {
            task.handle.abort();
        }
    }
}

/// What a task running its steps in one exec reports: which steps, so that a condition still
/// names the command a long bootstrap waits on (CABPK's last step, `kubeadm`).
fn in_one_exec(steps: &[Step]) -> String {
    match steps {
        [] => "checking the success sentinel".into(),
        [only] => format!("running 1 step in one exec: {}", only.description),
        [first, .., last] => format!(
            "running {} steps in one exec (the first: {}; the last: {})",
            steps.len(),
            first.description,
            last.description
        ),
    }
}

fn finished_label(f: &Finished) -> &'static str {
    match f {
        Finished::Succeeded => "succeeded",
        Finished::Failed { .. } => "failed",
        Finished::TimedOut { .. } => "timed out",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::docker::fake::FakeRuntime;

    fn step(n: usize) -> Step {
        Step {
            argv: vec!["true".into()],
            stdin: None,
            description: format!("step {n}"),
        }
    }

    #[test]
    fn a_one_exec_run_names_its_steps() {
        assert_eq!(
            in_one_exec(&[step(1)]),
            "running 1 step in one exec: step 1"
        );
        assert_eq!(
            in_one_exec(&[step(1), step(2), step(3)]),
            "running 3 steps in one exec (the first: step 1; the last: step 3)"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_names_the_step_the_node_had_reached() {
        // Every exec takes a minute; the one-exec script is cut off at 10 s, then the node's
        // progress file says two steps were done.
        let rt = FakeRuntime::answering(vec![Ok(crate::docker::ExecOutput {
            exit_code: 0,
            stdout: b"2\n".to_vec(),
            stderr: Vec::new(),
        })])
        .slowed(Duration::from_secs(60));
        let tasks = BootstrapTasks::new(1);
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        tasks.start(
            "uid",
            Arc::new(rt),
            "node".into(),
            vec![step(1), step(2), step(3)],
            Duration::from_secs(10),
            move || {
                let _ = done_tx.send(());
            },
        );
        done_rx.recv().await.unwrap();
        match tasks.poll("uid") {
            TaskState::Finished(Finished::TimedOut { step, message: m }) => {
                assert_eq!(step, 3);
                assert!(m.ends_with("it was at step 3/3: step 3"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_waits_for_a_bootstraps_end_no_longer_than_it_says() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let tasks = BootstrapTasks::new(3);
        let at_most = Duration::from_secs(3);
        assert_eq!(
            tasks.ended_within("none", at_most).await,
            TaskState::NotStarted
        );
        // A one-second run, a five-second one and a one-minute one (every exec takes that
        // long); each counts the wakes of its machine.
        let wakes: HashMap<&str, Arc<AtomicUsize>> =
            HashMap::from(["short", "late", "long"].map(|uid| (uid, Arc::default())));
        for (uid, exec) in [("short", 1), ("late", 5), ("long", 60)] {
            let woken = wakes[uid].clone();
            tasks.start(
                uid,
                Arc::new(FakeRuntime::slow(Duration::from_secs(exec))),
                format!("node-{uid}"),
                vec![step(1)],
                Duration::from_secs(300),
                move || {
                    woken.fetch_add(1, Ordering::SeqCst);
                },
            );
        }
        let woken = |uid: &str| wakes[uid].load(Ordering::SeqCst);
        let t0 = tokio::time::Instant::now();
        assert_eq!(
            tasks.ended_within("short", at_most).await,
            TaskState::Finished(Finished::Succeeded)
        );
        assert!(
            t0.elapsed() < at_most,
            "back at its end: {:?}",
            t0.elapsed()
        );
        assert_eq!(woken("short"), 0, "the waiting pass reports it: no wake");
        // A run that outlasts the wait wakes its machine when it ends.
        let t0 = tokio::time::Instant::now();
        assert!(matches!(
            tasks.ended_within("late", at_most).await,
            TaskState::Running { .. }
        ));
        assert!(
            t0.elapsed() >= at_most && t0.elapsed() < Duration::from_secs(4),
            "back when the wait is over: {:?}",
            t0.elapsed()
        );
        tokio::time::sleep(at_most).await;
        assert_eq!(tasks.poll("late"), TaskState::Finished(Finished::Succeeded));
        assert_eq!(woken("late"), 1);
        // A run cancelled meanwhile is waited for no longer.
        let t0 = tokio::time::Instant::now();
        let (state, ()) = tokio::join!(
            tasks.ended_within("long", Duration::from_secs(600)),
            async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                tasks.cancel("long");
            }
        );
        assert_eq!(state, TaskState::NotStarted);
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    }

    #[tokio::test]
    async fn images_are_read_only_inside_the_slot_and_once_each() {
        // The holder's one exec succeeds; the waiter's sentinel check says "not bootstrapped".
        let not_yet = crate::docker::ExecOutput {
            exit_code: 1,
            ..Default::default()
        };
        let rt = Arc::new(
            FakeRuntime::answering(vec![Ok(Default::default()), Ok(not_yet)])
                .slowed(Duration::from_millis(100)),
        );
        let tasks = BootstrapTasks::new(1);
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        for (uid, images) in [("holder", vec![]), ("waiter", vec!["img:1", "img:1"])] {
            let done = done_tx.clone();
            let plan = bootstrap::Plan {
                steps: vec![step(1), step(2)],
                images: bootstrap::unique(images),
                images_after: 1,
                claim: None,
            };
            tasks.start(
                uid,
                rt.clone(),
                format!("node-{uid}"),
                plan,
                Duration::from_secs(30),
                move || {
                    let _ = done.send(());
                },
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            matches!(tasks.poll("waiter"), TaskState::Running { ref description, .. } if description == WAITING_FOR_SLOT)
        );
        assert!(rt.imports().is_empty(), "nothing read before the slot");
        done_rx.recv().await.unwrap();
        done_rx.recv().await.unwrap();
        assert_eq!(
            rt.imports(),
            [("node-waiter".to_string(), "img:1".to_string())]
        );
        assert_eq!(rt.most_at_once(), 1);
    }

    #[tokio::test]
    async fn at_most_limit_bootstraps_run_at_once() {
        let rt = Arc::new(FakeRuntime::slow(Duration::from_millis(50)));
        let tasks = BootstrapTasks::new(2);
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..6 {
            let done = done_tx.clone();
            tasks.start(
                &format!("uid-{i}"),
                rt.clone(),
                format!("node-{i}"),
                vec![step(1), step(2)],
                Duration::from_secs(30),
                move || {
                    let _ = done.send(());
                },
            );
        }
        let waiting = (0..6)
            .filter(|i| {
                matches!(tasks.poll(&format!("uid-{i}")),
                    TaskState::Running { ref description, .. } if description == WAITING_FOR_SLOT)
            })
            .count();
        assert!(waiting >= 4, "only two can hold a slot: {waiting} waiting");
        for _ in 0..6 {
            done_rx.recv().await.unwrap();
        }
        assert_eq!(
            rt.calls().len(),
            6,
            "every bootstrap ran, all its steps in one exec"
        );
        assert_eq!(rt.most_at_once(), 2, "never more than the limit at once");
        for i in 0..6 {
            assert_eq!(
                tasks.poll(&format!("uid-{i}")),
                TaskState::Finished(Finished::Succeeded)
            );
        }
    }
}
