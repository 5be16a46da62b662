//! A bootstrap with `preLoadImages`: the steps before the images (the wait for the node's init
//! system and containerd), then each image imported into the node's containerd, streamed from the
//! engine one image at a time ([`ContainerRuntime::import_image`]), then the remaining steps
//! through [`run`](super::run). Without images the whole plan goes to the runner unchanged.
//!
//! Steps are numbered across the whole plan (images count as steps), as conditions show them.
#[cfg(doc)]
use super::runner::CLAIM_PATH;
use super::runner::{RunError, StepFailure, output_tail, run};
use super::{Step, plan::shorten, redact};
use crate::docker::{ContainerRuntime, ExecOutput, RuntimeError, RuntimeResult};

/// What a bootstrap runs, in order: `steps[..images_after]`, the `images`, the other steps.
pub struct Plan {
    pub steps: Vec<Step>,
    /// Image references, each imported once (see [`unique`]).
    pub images: Vec<String>,
    pub images_after: usize,
    /// The token this run claims the node's commands with (see [`CLAIM_PATH`]); a plan
    /// without one runs unclaimed.
    pub claim: Option<String>,
}

impl From<Vec<Step>> for Plan {
    fn from(steps: Vec<Step>) -> Self {
        Plan {
            steps,
            images: Vec::new(),
            images_after: 0,
            claim: None,
        }
    }
}

/// Where a run is, for [`run_plan`]'s `progress`.
pub enum Progress<'a> {
    /// At this step (0-based across the plan), described so.
    Step(usize, String),
    /// Running these steps in the runner, which reports no steps while they run in one exec.
    Runner(&'a [Step]),
}

/// The command that reads a `docker save` tarball into the node's containerd, where the kubelet
/// finds its images.
pub fn import_argv() -> Vec<String> {
    ["ctr", "--namespace=k8s.io", "images", "import", "-"]
        .map(String::from)
        .to_vec()
}

/// `images` without repeats (first occurrence kept): an image listed twice is imported once.
pub fn unique<'a>(images: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    images
        .into_iter()
        .filter(|i| seen.insert(*i))
        .map(String::from)
        .collect()
}

impl Plan {
    /// Steps in all, images included.
    pub fn total(&self) -> usize {
        self.steps.len() + self.images.len()
    }

    /// The steps the runner gets, and how many plan steps come before them.
    pub fn runner_part(&self) -> (usize, &[Step]) {
        if self.images.is_empty() {
            (0, &self.steps)
        } else {
            let after = self.images_after.min(self.steps.len());
            (after + self.images.len(), &self.steps[after..])
        }
    }

    /// The description of step `index` (0-based across the plan).
    pub fn description(&self, index: usize) -> String {
        let after = self.images_after.min(self.steps.len());
        if self.images.is_empty() || index < after {
            return self
                .steps
                .get(index)
                .map(|s| s.description.clone())
                .unwrap_or_default();
        }
        match self.images.get(index - after) {
            Some(image) => format!("pre-load image {image}"),
            None => self
                .steps
                .get(index - self.images.len())
                .map(|s| s.description.clone())
                .unwrap_or_default(),
        }
    }
}

/// How often an exec or import is retried when the engine itself fails, and the first pause (it
/// doubles), as the runner does; a command's own non-zero exit is never retried. An import run
/// again starts a new export: `ctr images import` of the same image twice is harmless.
const TRANSIENT_RETRIES: u32 = 5;
const TRANSIENT_FIRST_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

async fn retrying<F, Fut>(what: &str, container: &str, mut call: F) -> RuntimeResult<ExecOutput>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = RuntimeResult<ExecOutput>>,
{
    let mut pause = TRANSIENT_FIRST_PAUSE;
    let mut attempt = 0;
    loop {
        match call().await {
            Err(RuntimeError::Unavailable(e)) if attempt < TRANSIENT_RETRIES => {
                attempt += 1;
                tracing::warn!(container, description = %what, attempt, error = %redact(&e), "bootstrap: engine unavailable, retrying the step");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            other => return other,
        }
    }
}

/// Run `plan` in `container`. With images: nothing when the success sentinel is there already;
/// else the steps before the images, each image, then the runner with the rest (which checks the
/// sentinel at the end). Without images: the runner with every step.
pub async fn run_plan(
    rt: &dyn ContainerRuntime,
    container: &str,
    plan: &Plan,
    progress: impl Fn(Progress<'_>) + Send + Sync,
) -> Result<(), RunError> {
    let (offset, rest) = plan.runner_part();
    if offset > 0 {
        if matches!(
            super::file_in_node(rt, container, super::SENTINEL_PATH).await,
            Ok(true)
        ) {
            return Ok(());
        }
        let total = plan.total();
        let fail = |index: usize, result: RuntimeResult<ExecOutput>| {
            let description = plan.description(index);
            let (exit_code, output_tail, runtime_error) = match result {
                Ok(out) if out.success() => return Ok(()),
                Ok(out) => (
                    Some(out.exit_code),
                    output_tail(&out.stdout, &out.stderr, &[]),
                    None,
                ),
                Err(e) => (
                    None,
                    String::new(),
                    Some(shorten(&redact(&e.to_string()), 500)),
                ),
            };
            tracing::warn!(container, step = index + 1, total, %description, ?exit_code, output = %output_tail, "bootstrap: step failed");
            Err(RunError::Step(StepFailure {
                index,
                total,
                description,
                exit_code,
                output_tail,
                runtime_error,
            }))
        };
        let before = &plan.steps[..plan.images_after.min(plan.steps.len())];
        for (index, step) in before.iter().enumerate() {
            progress(Progress::Step(index, step.description.clone()));
            let out = retrying(&step.description, container, || {
                rt.exec(container, &step.argv, step.stdin.as_deref())
            })
            .await;
            fail(index, out)?;
        }
        let argv = import_argv();
        for (k, image) in plan.images.iter().enumerate() {
            let index = before.len() + k;
            let description = plan.description(index);
            progress(Progress::Step(index, description.clone()));
            let out = retrying(&description, container, || {
                rt.import_image(container, image, &argv)
            })
            .await;
            fail(index, out)?;
        }
        progress(Progress::Runner(rest));
    }
    let renumber = |mut e: RunError| {
        if let RunError::Step(f) = &mut e {
            f.index += offset;
            f.total = plan.total();
        }
        e
    };
    run(rt, container, rest, plan.claim.as_deref(), |i, s| {
        progress(Progress::Step(offset + i, s.description.clone()))
    })
    .await
    .map_err(renumber)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::docker::fake::FakeRuntime;

    fn step(name: &str) -> Step {
        Step {
            argv: vec![name.into()],
            stdin: None,
            description: name.into(),
        }
    }

    fn plan(images: &[&str]) -> Plan {
        Plan {
            steps: vec![step("wait"), step("write"), step("kubeadm")],
            images: unique(images.iter().copied()),
            images_after: 1,
            claim: None,
        }
    }

    #[test]
    fn an_image_listed_twice_is_one_step() {
        let p = plan(&["a:1", "b:1", "a:1"]);
        assert_eq!(p.images, ["a:1", "b:1"]);
        assert_eq!(p.total(), 5);
        let described: Vec<String> = (0..5).map(|i| p.description(i)).collect();
        assert_eq!(
            described,
            [
                "wait",
                "pre-load image a:1",
                "pre-load image b:1",
                "write",
                "kubeadm"
            ]
        );
        assert_eq!(p.runner_part().0, 3);
        assert_eq!(
            plan(&[]).runner_part().1.len(),
            3,
            "no images: all in the runner"
        );
    }

    #[tokio::test]
    async fn images_are_imported_after_the_wait_and_before_the_commands() {
        // The sentinel check fails (not bootstrapped); every other exec succeeds.
        let rt = FakeRuntime::answering(vec![Ok(ExecOutput {
            exit_code: 1,
            ..Default::default()
        })]);
        let seen = Mutex::new(Vec::new());
        let p = plan(&["a:1", "a:1"]);
        let _ = run_plan(&rt, "node", &p, |at| {
            seen.lock().unwrap().push(match at {
                Progress::Step(i, d) => format!("{i} {d}"),
                Progress::Runner(s) => format!("runner {}", s.len()),
            })
        })
        .await;
        assert_eq!(rt.imports(), [("node".to_string(), "a:1".to_string())]);
        assert_eq!(
            *seen.lock().unwrap(),
            ["0 wait", "1 pre-load image a:1", "runner 2"]
        );
        let calls = rt.calls();
        assert_eq!(calls[1].1, ["wait"], "the wait ran before the import");
    }

    #[tokio::test]
    async fn a_missing_image_fails_its_step_and_runs_no_command() {
        let rt = FakeRuntime::answering(vec![Ok(ExecOutput {
            exit_code: 1,
            ..Default::default()
        })])
        .without_images(&["gone:1"]);
        let p = plan(&["a:1", "gone:1"]);
        let e = run_plan(&rt, "node", &p, |_| {}).await.unwrap_err();
        let f = e.step().expect("a step failed");
        assert_eq!((f.number(), f.total), (3, 5));
        assert!(f.to_string().contains("pre-load image gone:1"), "{f}");
        assert!(
            f.runtime_error
                .as_deref()
                .unwrap()
                .contains("No such image")
        );
        assert_eq!(rt.calls().len(), 2, "the sentinel check and the wait only");
    }
}
