//! Bootstrap runs as a background task per DockerMachine so that a reconcile never blocks a
//! worker for minutes. Reconciles poll the task's progress and collect its result.
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::{
    bootstrap::{self, Step},
    docker::ContainerRuntime,
};

/// How a finished bootstrap ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finished {
    Succeeded,
    /// A step failed; the message names the step, its exit code and redacted output.
    Failed(String),
    TimedOut(String),
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
    result: Arc<Mutex<Option<Finished>>>,
}

/// In-flight bootstrap tasks, keyed by DockerMachine UID.
#[derive(Default)]
pub struct BootstrapTasks {
    tasks: Mutex<HashMap<String, Task>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl BootstrapTasks {
    /// The state of `uid`'s bootstrap. A finished result stays until [`Self::forget`].
    pub fn poll(&self, uid: &str) -> TaskState {
        let tasks = lock(&self.tasks);
        let Some(task) = tasks.get(uid) else {
            return TaskState::NotStarted;
        };
        if let Some(done) = lock(&task.result).clone() {
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

    /// Start running `steps` in `container` with a deadline. No-op if one is already running.
    /// `on_finish` runs once the result is recorded (it wakes the machine's reconcile, so the
    /// result is picked up at once rather than at the next poll).
    pub fn start(
        &self,
        uid: &str,
        runtime: Arc<dyn ContainerRuntime>,
        container: String,
        steps: Vec<Step>,
        timeout: Duration,
        on_finish: impl FnOnce() + Send + 'static,
    ) {
        let mut tasks = lock(&self.tasks);
        if tasks.contains_key(uid) {
            return;
        }
        let progress = Arc::new(Mutex::new((0usize, String::new())));
        let result = Arc::new(Mutex::new(None));
        let total = steps.len();
        let (p, r) = (progress.clone(), result.clone());
        let handle = tokio::spawn(async move {
            info!(%container, steps = total, "bootstrap started");
            let report = |i: usize, s: &Step| *lock(&p) = (i + 1, s.description.clone());
            let run = bootstrap::run(runtime.as_ref(), &container, &steps, report);
            let finished = match tokio::time::timeout(timeout, run).await {
                Ok(Ok(())) => Finished::Succeeded,
                Ok(Err(failure)) => {
                    warn!(%container, %failure, "bootstrap failed");
                    Finished::Failed(failure.to_string())
                }
                Err(_) => {
                    let (step, description) = lock(&p).clone();
                    Finished::TimedOut(format!(
                        "bootstrap did not finish within {}s; it was at step {step}/{total}: {description}",
                        timeout.as_secs()
                    ))
                }
            };
            info!(%container, result = ?finished_label(&finished), "bootstrap finished");
            *lock(&r) = Some(finished);
            on_finish();
        });
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
        let finished = tasks.get(uid).is_some_and(|t| lock(&t.result).is_some());
        if finished {
            tasks.remove(uid);
        }
    }

    /// Stop a running bootstrap (the machine is being deleted, or its container recreated).
    pub fn cancel(&self, uid: &str) {
        if let Some(task) = lock(&self.tasks).remove(uid) {
            task.handle.abort();
        }
    }
}

fn finished_label(f: &Finished) -> &'static str {
    match f {
        Finished::Succeeded => "succeeded",
        Finished::Failed(_) => "failed",
        Finished::TimedOut(_) => "timed out",
    }
}
