//! Exec'ing the bootstrap steps in a node container: all of them in one exec when they fit (one
//! shell script, see [`script`]), one exec per step when a step carries a large stdin (a
//! `preLoadImages` tarball).
//!
//! One exec instead of one per step is the difference the bench measures: every exec is three
//! engine calls and a runc exec, and CABPK's data is a dozen file writes and their chmods. The
//! script keeps what the per-step loop guaranteed: steps in order, the first failure stops the
//! run and is reported by step, arguments and file content never interpolated into shell code
//! beyond single-quoted words, and a re-run (after a lost engine connection) resumes after the
//! last finished step instead of running finished steps again.
use std::fmt;
use std::sync::LazyLock;

use regex::Regex;

use super::plan::shorten;
use super::{Step, redact, redact::SecretWords};
use crate::docker::ContainerRuntime;

/// At most this many lines of a failed step's output are kept.
pub const TAIL_LINES: usize = 20;
/// At most this many characters of a failed step's output are kept.
pub const TAIL_CHARS: usize = 1500;

/// Why the run stopped: the first step that exited non-zero or could not be exec'd.
///
/// Its `Display` (what conditions and Events show) holds the step number, the step's description
/// (the program, or the file path, never arguments or content) and the exit code or engine error.
/// The output tail, redacted, goes only to the manager's log: a tool's output may still hold what
/// the redactor does not know to be secret, and status is readable by anyone who can read the
/// object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepFailure {
    /// Position of the failed step in the slice given to [`run`] (0-based; shown 1-based).
    pub index: usize,
    /// Number of steps in the run.
    pub total: usize,
    /// The failed step's [`Step::description`].
    pub description: String,
    /// The exit code, when the command ran.
    pub exit_code: Option<i64>,
    /// The last [`TAIL_LINES`] lines (at most [`TAIL_CHARS`] characters) of the step's stdout
    /// followed by its stderr, redacted.
    pub output_tail: String,
    /// The runtime's error, redacted, when the command could not be exec'd at all.
    pub runtime_error: Option<String>,
}

impl StepFailure {
    /// The 1-based step number, as shown in messages.
    pub fn number(&self) -> usize {
        self.index + 1
    }
}

impl std::error::Error for StepFailure {}

impl fmt::Display for StepFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "step {}/{} failed: {}",
            self.number(),
            self.total,
            self.description
        )?;
        match (&self.runtime_error, self.exit_code) {
            (Some(err), _) => write!(f, ": could not exec: {err}")?,
            (None, Some(code)) => write!(f, " exited with code {code}")?,
            (None, None) => {}
        }
        Ok(())
    }
}

/// How often a step is retried when the engine itself fails (5xx, connection lost), and the
/// first pause; the pause doubles. A command's own non-zero exit is never retried.
const TRANSIENT_RETRIES: u32 = 5;
const TRANSIENT_FIRST_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// One step, retried while the engine is unavailable: a Docker Engine restart or a dropped
/// connection must not fail a bootstrap for good. (A step cut off mid-run by a lost connection is
/// run again; CABPK's steps are file writes and one `kubeadm … && echo success > sentinel`, and the
/// caller checks the sentinel before ever starting a bootstrap.)
async fn exec_retrying(
    rt: &dyn ContainerRuntime,
    container: &str,
    step: &Step,
) -> crate::docker::RuntimeResult<crate::docker::ExecOutput> {
    let mut pause = TRANSIENT_FIRST_PAUSE;
    let mut attempt = 0;
    loop {
        match rt.exec(container, &step.argv, step.stdin.as_deref()).await {
            Err(crate::docker::RuntimeError::Unavailable(e)) if attempt < TRANSIENT_RETRIES => {
                attempt += 1;
                tracing::warn!(
                    container,
                    description = %step.description,
                    attempt,
                    error = %redact(&e),
                    "bootstrap: engine unavailable, retrying the step"
                );
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            other => return other,
        }
    }
}

/// Why a run did not succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunError {
    /// A step exited non-zero or could not be exec'd.
    Step(StepFailure),
    /// Every step succeeded but the success sentinel is not there.
    NoSentinel,
    /// Another run (of another manager process) claimed the node's commands first: none ran here.
    ClaimedElsewhere,
    /// The claim could not be written in the node: no command ran.
    ClaimNotRecorded,
}

impl std::error::Error for RunError {}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Step(s) => s.fmt(f),
            RunError::NoSentinel => write!(
                f,
                "All bootstrap commands succeeded but {} was not created",
                super::SENTINEL_PATH
            ),
            RunError::ClaimedElsewhere => write!(
                f,
                "Another manager process's bootstrap run claimed this node first ({CLAIM_PATH}); \
                 no command was run by this one"
            ),
            RunError::ClaimNotRecorded => write!(
                f,
                "The bootstrap claim {CLAIM_PATH} could not be written in the node; no command was run"
            ),
        }
    }
}

impl RunError {
    pub fn step(&self) -> Option<&StepFailure> {
        match self {
            RunError::Step(s) => Some(s),
            _ => None,
        }
    }

    /// Whether the run stopped at its claim, before any command.
    pub fn at_claim(&self) -> bool {
        matches!(
            self,
            RunError::ClaimedElsewhere | RunError::ClaimNotRecorded
        )
    }
}

/// Where the script records how many steps it finished (tmpfs in a node container: a restarted
/// container starts over, and an unprovisioned one that stopped is recreated anyway).
pub const PROGRESS_PATH: &str = "/run/capd-rs/bootstrap-steps-done";

/// Where a run claims the node's commands before the first one, with its token (the start the
/// manager recorded on the DockerMachine). Created exclusively, so of two runs only one goes on;
/// a run that finds its own token is a retry of itself and resumes. On the container's
/// filesystem, not tmpfs: a claim outlives a container restart, as the commands' effects do. A
/// manager that finds a start on record and no claim knows that no command ran, and may start
/// again instead of waiting for a bootstrap that never began.
pub const CLAIM_PATH: &str = "/var/lib/capd-rs/bootstrap-claim";

/// The claim, as shell: `$m` is the [`MARKER`], `$cf` the claim file, `$ct` the token. `set -C`
/// makes `>` an exclusive create (O_EXCL), so two runs cannot both see the file missing.
const CLAIM_SH: &str = concat!(
    "mkdir -p \"${cf%/*}\" 2>/dev/null\n",
    "if ! ( set -C; printf '%s\\n' \"$ct\" > \"$cf\" ) 2>/dev/null; then\n",
    "[ -f \"$cf\" ] || { printf '\\n%s no-claim\\n' \"$m\" >&2; exit 5; }\n",
    "[ \"$(cat \"$cf\" 2>/dev/null)\" = \"$ct\" ] || { printf '\\n%s claimed-elsewhere\\n' \"$m\" >&2; exit 4; }\n",
    "fi\n",
);

/// The claim alone, as one exec (before a step-by-step run): `$0` the claim file, `$1` the token.
fn claim_step(path: &str, token: &str) -> Step {
    Step {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("m={MARKER}; cf=$0; ct=$1\n{CLAIM_SH}"),
            path.into(),
            token.into(),
        ],
        stdin: None,
        description: "claim the node's bootstrap".into(),
    }
}

/// A plan whose stdin adds up to more than this runs one exec per step: the script feeds file
/// content through the shell's `read` (byte by byte), fine for config files and certificates,
/// not for image tarballs.
const SCRIPT_STDIN_LIMIT: usize = 4 << 20;

/// Run `steps` in `container`: nothing if the success sentinel is already there, else (with a
/// `claim` token, once the node's [`CLAIM_PATH`] holds it) every step in order, stopping at the
/// first that exits non-zero or cannot be exec'd; then the sentinel must exist. When steps run
/// one by one, `progress(index, step)` is called before each; in one exec there is no step to
/// report until it ends.
///
/// Only step descriptions are logged, never argv, stdin or output.
pub async fn run(
    rt: &dyn ContainerRuntime,
    container: &str,
    steps: &[Step],
    claim: Option<&str>,
    progress: impl Fn(usize, &Step) + Send + Sync,
) -> Result<(), RunError> {
    let stdin_bytes: usize = steps
        .iter()
        .filter_map(|s| s.stdin.as_ref())
        .map(Vec::len)
        .sum();
    if stdin_bytes > SCRIPT_STDIN_LIMIT {
        if sentinel_exists(rt, container).await {
            return Ok(());
        }
        if let Some(token) = claim {
            take_claim(rt, container, token).await?;
        }
        run_each(rt, container, steps, progress)
            .await
            .map_err(RunError::Step)?;
        return if sentinel_exists(rt, container).await {
            Ok(())
        } else {
            Err(RunError::NoSentinel)
        };
    }
    let Some(first) = steps.first() else {
        return if sentinel_exists(rt, container).await {
            Ok(())
        } else {
            Err(RunError::NoSentinel)
        };
    };
    let total = steps.len();
    let claim = claim.map(|token| (CLAIM_PATH, token));
    let batch = script(steps, super::SENTINEL_PATH, PROGRESS_PATH, claim);
    tracing::debug!(container, total, "bootstrap: running all steps in one exec");
    let out = exec_retrying(rt, container, &batch).await.map_err(|err| {
        RunError::Step(StepFailure {
            index: 0,
            total,
            description: first.description.clone(),
            exit_code: None,
            output_tail: String::new(),
            runtime_error: Some(shorten(&redact(&err.to_string()), 500)),
        })
    })?;
    match outcome(&out, total) {
        Ok(()) => Ok(()),
        Err(Ended::NoSentinel) => Err(RunError::NoSentinel),
        Err(Ended::ClaimedElsewhere) => Err(RunError::ClaimedElsewhere),
        Err(Ended::NoClaim) => Err(RunError::ClaimNotRecorded),
        Err(Ended::Step { index, exit_code }) => {
            let failure = StepFailure {
                index,
                total,
                description: steps[index].description.clone(),
                exit_code: Some(exit_code),
                output_tail: output_tail(&out.stdout, &strip_marker(&out.stderr), steps),
                runtime_error: None,
            };
            tracing::warn!(
                container,
                step = index + 1,
                total,
                description = %failure.description,
                exit_code,
                output = %failure.output_tail,
                "bootstrap: step failed"
            );
            Err(RunError::Step(failure))
        }
    }
}

/// The claim of a step-by-step run, in an exec of its own. Its failure to exec at all is the
/// first step's, as in one exec.
async fn take_claim(
    rt: &dyn ContainerRuntime,
    container: &str,
    token: &str,
) -> Result<(), RunError> {
    let step = claim_step(CLAIM_PATH, token);
    match exec_retrying(rt, container, &step).await {
        Ok(out) => match outcome(&out, 1) {
            Ok(()) => Ok(()),
            Err(Ended::ClaimedElsewhere) => Err(RunError::ClaimedElsewhere),
            Err(_) => Err(RunError::ClaimNotRecorded),
        },
        Err(err) => Err(RunError::Step(StepFailure {
            index: 0,
            total: 1,
            description: step.description,
            exit_code: None,
            output_tail: String::new(),
            runtime_error: Some(shorten(&redact(&err.to_string()), 500)),
        })),
    }
}

/// Whether the file at `path` exists in `container` (the sentinel, a claim). An exec that cannot
/// run is an error, never "no file": a caller that reads no claim from it would start the
/// commands again.
pub async fn file_in_node(
    rt: &dyn ContainerRuntime,
    container: &str,
    path: &str,
) -> crate::docker::RuntimeResult<bool> {
    let argv = ["test", "-f", path].map(String::from);
    Ok(rt.exec(container, &argv, None).await?.success())
}

/// How many steps the one-exec script finished in `container` (its progress file), if it ran.
pub async fn steps_done(rt: &dyn ContainerRuntime, container: &str) -> Option<usize> {
    let argv = ["cat", PROGRESS_PATH].map(String::from);
    let out = rt
        .exec(container, &argv, None)
        .await
        .ok()
        .filter(|o| o.success())?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// The sentinel, read where an engine failure leaves the run's own outcome standing.
async fn sentinel_exists(rt: &dyn ContainerRuntime, container: &str) -> bool {
    matches!(
        file_in_node(rt, container, super::SENTINEL_PATH).await,
        Ok(true)
    )
}

/// The first word of the line the script writes to stderr when it stops.
const MARKER: &str = "capd-rs-bootstrap:";

/// How a script run ended, read from its exit code and its last stderr line.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    Step { index: usize, exit_code: i64 },
    NoSentinel,
    ClaimedElsewhere,
    NoClaim,
}

fn outcome(out: &crate::docker::ExecOutput, total: usize) -> Result<(), Ended> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.trim_end().lines().last().unwrap_or_default();
    let words: Vec<&str> = last.split_whitespace().collect();
    match words.as_slice() {
        [MARKER, "no-sentinel"] => Err(Ended::NoSentinel),
        [MARKER, "claimed-elsewhere"] => Err(Ended::ClaimedElsewhere),
        [MARKER, "no-claim"] => Err(Ended::NoClaim),
        [MARKER, "step", n, "exited", code] => {
            let index = n.parse::<usize>().unwrap_or(1).clamp(1, total) - 1;
            Err(Ended::Step {
                index,
                exit_code: code.parse().unwrap_or(out.exit_code),
            })
        }
        _ if out.success() => Ok(()),
        // The shell itself failed (no /bin/sh, killed): the first step never completed.
        _ => Err(Ended::Step {
            index: 0,
            exit_code: out.exit_code,
        }),
    }
}

fn strip_marker(stderr: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(stderr);
    let trimmed = text.trim_end();
    match trimmed.rfind('\n') {
        Some(i) if trimmed[i + 1..].starts_with(MARKER) => trimmed.as_bytes()[..i].to_vec(),
        None if trimmed.starts_with(MARKER) => Vec::new(),
        _ => stderr.to_vec(),
    }
}

/// A word the shell reads back verbatim: single-quoted, `'` as `'\''`.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The only program text a bootstrap exec carries in its argv (visible in the host's process
/// table, to anyone on the host): fixed, with no word of the bootstrap data. It reads the real
/// script from stdin, as the first base64 block (lines ended by a `.` line, read by the shell's
/// `read`, which reads no further than the line, so whatever follows on stdin is left for the
/// script), and evaluates it in this shell: `$0` and `$1` stay the loader's arguments. The
/// script never touches a file, so nothing of it is left behind in the node either.
const LOADER: &str = concat!(
    "command -v base64 >/dev/null 2>&1 || { echo 'base64 not found in the node image' >&2; exit 127; }\n",
    "s=$(while IFS= read -r l; do [ \"$l\" = . ] && exit 0; printf '%s\\n' \"$l\"; done; exit 1) || { echo 'the bootstrap script ended early' >&2; exit 1; }\n",
    "s=$(printf '%s\\n' \"$s\" | base64 -d) || { echo 'the bootstrap script is not valid base64' >&2; exit 1; }\n",
    "eval \"$s\"\n",
);

/// `content` as a stdin block: base64 lines ended by a `.` line.
fn push_block(stdin: &mut Vec<u8>, content: &[u8]) {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(content);
    stdin.reserve(encoded.len() + encoded.len() / 76 + 3);
    for line in encoded.as_bytes().chunks(76) {
        stdin.extend_from_slice(line);
        stdin.push(b'\n');
    }
    stdin.extend_from_slice(b".\n");
}

/// A step that runs `argv` exec'd through the [`LOADER`]: the words travel on stdin, the
/// exec's argv is fixed text. Only for steps without stdin of their own (commands: runcmd
/// entries, chmod, chown).
fn hidden(step: &Step) -> Step {
    let words: Vec<String> = step.argv.iter().map(|a| quote(a)).collect();
    let mut stdin = Vec::new();
    push_block(
        &mut stdin,
        format!("{} </dev/null\n", words.join(" ")).as_bytes(),
    );
    Step {
        argv: vec!["/bin/sh".into(), "-c".into(), LOADER.into()],
        stdin: Some(stdin),
        description: step.description.clone(),
    }
}

/// The whole plan as one exec of the [`LOADER`], which reads this script from stdin first.
/// `$0` is the sentinel, `$1` the progress file (fixed paths, not bootstrap data); with a
/// `claim` (its file and token: `$2`, `$3`), the script claims the node before any step.
///
/// Each step is its argv as single-quoted words, stdin from `/dev/null` as when exec'd alone;
/// a step's stdin (file content) arrives on the script's stdin as base64 lines ended by a `.`
/// line, read by the shell's `read` (which reads no further than the line) and decoded into the
/// step; a block cut short (the stdin stream ended early) fails its step rather than writing
/// part of a file. A step that fails stops the script with a last stderr line naming it and its exit code.
/// Finished steps are counted in the progress file, and a re-run skips them (their stdin
/// blocks are read and dropped, to stay aligned).
pub(crate) fn script(
    steps: &[Step],
    sentinel: &str,
    progress_file: &str,
    claim: Option<(&str, &str)>,
) -> Step {
    let mut text = format!("m={MARKER}\n");
    text.push_str("if [ -f \"$0\" ]; then echo \"$m already bootstrapped\"; exit 0; fi\n");
    if claim.is_some() {
        text.push_str("cf=$2; ct=$3\n");
        text.push_str(CLAIM_SH);
    }
    text.push_str(concat!(
        "fail() { rc=$?; printf '\\n%s step %s exited %s\\n' \"$m\" \"$i\" \"$rc\" >&2; exit \"$rc\"; }\n",
        "block() { while IFS= read -r l; do [ \"$l\" = . ] && return 0; printf '%s\\n' \"$l\"; done; return 1; }\n",
        "mkdir -p \"${1%/*}\" 2>/dev/null\n",
        "did=$(cat \"$1\" 2>/dev/null)\n",
        "case $did in ''|*[!0-9]*) did=0 ;; esac\n",
    ));
    let mut blocks = Vec::new();
    for (k, step) in steps.iter().enumerate() {
        let n = k + 1;
        let argv: Vec<String> = step.argv.iter().map(|a| quote(a)).collect();
        let argv = argv.join(" ");
        let record = format!("{{ echo {n} > \"$1\"; }} 2>/dev/null");
        match &step.stdin {
            None => text.push_str(&format!(
                "i={n}; if [ \"$did\" -lt {n} ]; then {argv} </dev/null || fail; {record}; fi\n"
            )),
            Some(content) => {
                text.push_str(&format!(
                    "i={n}; if [ \"$did\" -lt {n} ]; then b=$(block) || {{ echo 'the bootstrap data ended early' >&2; (exit 1); }} || fail; printf '%s\\n' \"$b\" | base64 -d | {argv} || fail; {record}; else block >/dev/null; fi\n"
                ));
                push_block(&mut blocks, content);
            }
        }
    }
    text.push_str("[ -f \"$0\" ] || { printf '\\n%s no-sentinel\\n' \"$m\" >&2; exit 3; }\n");
    let mut stdin = Vec::new();
    push_block(&mut stdin, text.as_bytes());
    stdin.extend_from_slice(&blocks);
    let mut argv: Vec<String> = vec![
        "/bin/sh".into(),
        "-c".into(),
        LOADER.into(),
        sentinel.into(),
        progress_file.into(),
    ];
    if let Some((file, token)) = claim {
        argv.extend([file.into(), token.into()]);
    }
    Step {
        argv,
        stdin: Some(stdin),
        description: format!("{} bootstrap steps in one exec", steps.len()),
    }
}

/// Exec `steps` one by one in `container`, stopping at the first one that exits non-zero or cannot
/// be exec'd. `progress(index, step)` is called before each step (0-based index), e.g. to show the
/// current step in a condition.
///
/// Only step descriptions are logged, never argv, stdin or output. The caller bounds the whole run
/// with a timeout and checks [`SENTINEL_PATH`](super::SENTINEL_PATH) itself.
async fn run_each(
    rt: &dyn ContainerRuntime,
    container: &str,
    steps: &[Step],
    progress: impl Fn(usize, &Step) + Send + Sync,
) -> Result<(), StepFailure> {
    let total = steps.len();
    for (index, step) in steps.iter().enumerate() {
        progress(index, step);
        tracing::debug!(
            container,
            step = index + 1,
            total,
            description = %step.description,
            "bootstrap: running step"
        );
        // A command's words go on stdin, through the loader; a step with stdin of its own (a
        // file write: its path; an image import: fixed words) is exec'd as it is, its stdin
        // streamed unchanged.
        let wrapped;
        let exec = if step.stdin.is_none() {
            wrapped = hidden(step);
            &wrapped
        } else {
            step
        };
        let failure = match exec_retrying(rt, container, exec).await {
            Ok(out) if out.success() => continue,
            Ok(out) => StepFailure {
                index,
                total,
                description: step.description.clone(),
                exit_code: Some(out.exit_code),
                output_tail: output_tail(&out.stdout, &out.stderr, steps),
                runtime_error: None,
            },
            Err(err) => StepFailure {
                index,
                total,
                description: step.description.clone(),
                exit_code: None,
                output_tail: String::new(),
                runtime_error: Some(shorten(&redact(&err.to_string()), 500)),
            },
        };
        tracing::warn!(
            container,
            step = index + 1,
            total,
            description = %step.description,
            exit_code = ?failure.exit_code,
            output = %failure.output_tail,
            "bootstrap: step failed"
        );
        return Err(failure);
    }
    Ok(())
}

static ANSI: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\x1b\[[0-9;?]*[ -/]*[@-~]").unwrap());

/// stdout then stderr (errors last, where the tail keeps them), redacted as a whole (so a PEM
/// block cut by the tail is still recognised), with the credential-like words of `steps` hidden,
/// cleaned of terminal escapes and bounded.
pub(crate) fn output_tail(stdout: &[u8], stderr: &[u8], steps: &[Step]) -> String {
    let mut text = String::from_utf8_lossy(stdout).into_owned();
    let err = String::from_utf8_lossy(stderr);
    if !text.is_empty() && !err.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&err);

    let words = SecretWords::collect(steps.iter().flat_map(|s| {
        s.argv
            .iter()
            .map(|a| a.as_bytes())
            .chain(s.stdin.as_deref())
    }));
    let text = words.hide(&redact(&text));
    let text = ANSI.replace_all(&text, "");
    let text: String = text
        .replace("\r\n", "\n")
        .chars()
        .map(|c| match c {
            '\r' => '\n',
            '\n' | '\t' => c,
            c if c.is_control() => '?',
            c => c,
        })
        .collect();

    let lines: Vec<&str> = text.trim_end().lines().collect();
    let start = lines.len().saturating_sub(TAIL_LINES);
    let tail = lines[start..].join("\n");
    let count = tail.chars().count();
    if count <= TAIL_CHARS {
        return tail;
    }
    let kept: String = tail.chars().skip(count - (TAIL_CHARS - 1)).collect();
    format!("…{kept}")
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::bootstrap::{Format, NodeOptions, commands};
    use crate::docker::{ExecOutput, RuntimeError, RuntimeResult, fake::FakeRuntime};

    fn ok() -> RuntimeResult<ExecOutput> {
        Ok(ExecOutput::default())
    }

    fn exit(code: i64, stdout: &str, stderr: &str) -> RuntimeResult<ExecOutput> {
        Ok(ExecOutput {
            exit_code: code,
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
        })
    }

    /// A step as `run_each` execs it.
    fn as_execd(step: &Step) -> Step {
        if step.stdin.is_none() {
            hidden(step)
        } else {
            step.clone()
        }
    }

    fn shell(script: &str) -> Step {
        let mut plan = super::super::plan::Plan::default();
        plan.shell(script.to_string());
        plan.into_steps().remove(0)
    }

    fn write(path: &str, content: &[u8]) -> Step {
        Step {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                "cat > \"$0\"".into(),
                path.into(),
            ],
            stdin: Some(content.to_vec()),
            description: format!("write {path}"),
        }
    }

    const TOKEN: &str = "abcdef.0123456789abcdef";
    const HASH: &str = "sha256:5d4c7f4e0a3b9e8f1c2d6a7b8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f";

    #[tokio::test]
    async fn runs_every_step_in_order_with_stdin() {
        let rt = FakeRuntime::default();
        let steps = vec![
            write("/etc/a", b"secret-a"),
            shell("echo hi"),
            write("/etc/b", b"secret-b"),
        ];
        let seen = Mutex::new(Vec::new());
        run_each(&rt, "node-0", &steps, |i, s| {
            seen.lock().unwrap().push((i, s.description.clone()))
        })
        .await
        .unwrap();

        let calls = rt.calls();
        assert_eq!(calls.len(), 3);
        for (call, step) in calls.iter().zip(&steps) {
            assert_eq!(call.0, "node-0");
            let exec = as_execd(step);
            assert_eq!(call.1, exec.argv);
            assert_eq!(call.2, exec.stdin);
        }
        assert_eq!(calls[0].2.as_deref(), Some(&b"secret-a"[..]));
        // The command's words went on stdin, through the loader.
        assert_eq!(calls[1].1[2], LOADER);
        assert!(!calls[1].1.iter().any(|a| a.contains("echo hi")));
        assert_eq!(
            *seen.lock().unwrap(),
            [
                (0, "write /etc/a".to_string()),
                (1, "shell script running echo".to_string()),
                (2, "write /etc/b".to_string()),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn engine_errors_are_retried_and_exits_are_not() {
        let unavailable = || Err(RuntimeError::Unavailable("503 restarting".into()));
        // Two engine failures, then the step runs; the next step exits 1 and is not retried.
        let rt = FakeRuntime::answering(vec![unavailable(), unavailable(), ok(), exit(1, "", "")]);
        let steps = vec![shell("true"), shell("false"), shell("echo never")];
        let err = run_each(&rt, "n", &steps, |_, _| {}).await.unwrap_err();
        assert_eq!((err.index, err.exit_code), (1, Some(1)));
        assert_eq!(rt.calls().len(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn an_engine_that_stays_down_fails_the_step_after_the_retries() {
        let answers = (0..=TRANSIENT_RETRIES)
            .map(|_| Err(RuntimeError::Unavailable("connection refused".into())))
            .collect();
        let rt = FakeRuntime::answering(answers);
        let err = run_each(&rt, "n", &[shell("true")], |_, _| {})
            .await
            .unwrap_err();
        assert!(err.runtime_error.unwrap().contains("connection refused"));
        assert_eq!(rt.calls().len(), TRANSIENT_RETRIES as usize + 1);
    }

    #[tokio::test]
    async fn empty_plan_succeeds() {
        let rt = FakeRuntime::default();
        run_each(&rt, "n", &[], |_, _| {}).await.unwrap();
        assert!(rt.calls().is_empty());
    }

    #[tokio::test]
    async fn first_failure_stops_the_run() {
        let rt = FakeRuntime::answering(vec![ok(), ok(), exit(1, "", ""), ok()]);
        let steps = vec![
            shell("true"),
            write("/x", b"x"),
            shell("false"),
            shell("echo never"),
            shell("echo never"),
            shell("echo never"),
            shell("echo never"),
        ];
        let failure = run_each(&rt, "n", &steps, |_, _| {}).await.unwrap_err();
        assert_eq!(rt.calls().len(), 3, "nothing runs after the failed step");
        assert_eq!(failure.index, 2);
        assert_eq!(failure.number(), 3);
        assert_eq!(failure.total, 7);
        assert_eq!(failure.exit_code, Some(1));
        assert_eq!(failure.runtime_error, None);
        assert_eq!(
            failure.to_string(),
            "step 3/7 failed: shell script running false exited with code 1"
        );
    }

    #[tokio::test]
    async fn failure_message_names_step_and_code_and_the_tail_loses_secrets() {
        let stdout = format!(
            "[init] Using Kubernetes version: v1.31.2\n\
             You can now join any number of control-plane nodes by running:\n\
             \n  kubeadm join 172.18.0.2:6443 --token {TOKEN} \\\n\
             \t--discovery-token-ca-cert-hash {HASH} \\\n\
             \t--control-plane --certificate-key 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n"
        );
        let stderr = "W0101 kubelet: something\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n-----END RSA PRIVATE KEY-----\nerror execution phase addon/coredns: unable to create deployment\n";
        let rt = FakeRuntime::answering(vec![ok(), exit(2, &stdout, stderr)]);
        let steps = vec![
            write(
                "/run/kubeadm/kubeadm.yaml",
                format!("token: {TOKEN}\n").as_bytes(),
            ),
            shell(&format!(
                "kubeadm join 172.18.0.2:6443 --token {TOKEN} --discovery-token-ca-cert-hash {HASH}"
            )),
        ];
        let failure = run_each(&rt, "n", &steps, |_, _| {}).await.unwrap_err();
        // Status shows the step and the program, never output.
        assert_eq!(
            failure.to_string(),
            "step 2/2 failed: shell script running kubeadm exited with code 2"
        );
        // The tail (for the log) keeps the error and loses the secrets.
        let tail = &failure.output_tail;
        assert!(
            tail.ends_with("error execution phase addon/coredns: unable to create deployment"),
            "{tail}"
        );
        assert!(tail.contains("[redacted PEM block]"), "{tail}");
        for secret in [
            "0123456789abcdef",
            "5d4c7f4e0a3b",
            "9f86d081884c",
            "MIIEpAIBAAK",
        ] {
            assert!(!tail.contains(secret), "{secret} leaked: {tail}");
            assert!(
                !format!("{failure:?}").contains(secret),
                "{secret} leaked in Debug"
            );
        }
    }

    #[tokio::test]
    async fn runtime_errors_that_retrying_cannot_fix_stop_the_run() {
        let rt = FakeRuntime::answering(vec![Err(RuntimeError::Rejected(format!(
            "bad request while sending --token {TOKEN}"
        )))]);
        let steps = vec![write("/etc/k", b"k"), shell("true")];
        let failure = run_each(&rt, "n", &steps, |_, _| {}).await.unwrap_err();
        assert_eq!(rt.calls().len(), 1);
        assert_eq!(failure.exit_code, None);
        assert_eq!(
            failure.to_string(),
            "step 1/2 failed: write /etc/k: could not exec: docker engine refused the request: bad request while sending --token [redacted]"
        );
    }

    #[tokio::test]
    async fn cabpk_fixture_through_the_runner() {
        let steps = commands(
            Format::CloudConfig,
            include_bytes!("testdata/cabpk-init.yaml"),
            &NodeOptions::default(),
        )
        .unwrap();
        let kubeadm_at = steps
            .iter()
            .position(|s| s.description == "shell script running kubeadm")
            .unwrap();
        let mut answers: Vec<_> = (0..kubeadm_at).map(|_| ok()).collect();
        answers.push(exit(
            1,
            "",
            "[preflight] Running pre-flight checks\nerror execution phase preflight: [preflight] Some fatal errors occurred:\n\t[ERROR Port-6443]: Port 6443 is in use\n",
        ));
        let rt = FakeRuntime::answering(answers);
        let failure = run_each(&rt, "c1-cp-abcde", &steps, |_, _| {})
            .await
            .unwrap_err();
        assert_eq!(failure.index, kubeadm_at);
        assert_eq!(failure.total, steps.len());
        let msg = failure.to_string();
        assert!(
            msg.contains(&format!(
                "step {}/{} failed: shell script running kubeadm",
                kubeadm_at + 1,
                steps.len()
            )),
            "{msg}"
        );
        assert!(msg.ends_with("exited with code 1"), "{msg}");
        assert!(
            failure
                .output_tail
                .ends_with("[ERROR Port-6443]: Port 6443 is in use"),
            "{}",
            failure.output_tail
        );
        // stdin reached the runtime for every write.
        let calls = rt.calls();
        for (call, step) in calls.iter().zip(&steps) {
            assert_eq!(call.2, as_execd(step).stdin);
        }
    }

    #[test]
    fn tail_keeps_the_last_lines_and_chars() {
        let stdout: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        let tail = output_tail(stdout.as_bytes(), b"", &[]);
        let lines: Vec<&str> = tail.lines().collect();
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines[0], "line 81");
        assert_eq!(lines[19], "line 100");

        let long = "word ".repeat(2000);
        let tail = output_tail(b"", long.as_bytes(), &[]);
        assert_eq!(tail.chars().count(), TAIL_CHARS);
        assert!(tail.starts_with('…'));
    }

    #[test]
    fn tail_orders_stdout_before_stderr_and_cleans_up() {
        assert_eq!(output_tail(b"out", b"err\n", &[]), "out\nerr");
        assert_eq!(output_tail(b"", b"", &[]), "");
        assert_eq!(
            output_tail(
                b"\x1b[31mred\x1b[0m\r\nprogress 10%\rprogress 100%\n\x07bell",
                b"",
                &[]
            ),
            "red\nprogress 10%\nprogress 100%\n?bell"
        );
        assert_eq!(output_tail(&[0x66, 0xff, 0x6f], b"", &[]), "f\u{fffd}o");
    }

    #[test]
    fn words_of_the_steps_are_hidden_in_the_tail() {
        let step = Step {
            argv: vec![
                "sh".into(),
                "-c".into(),
                "echo api-key-7Gq2x9Lm4Pz1; exit 1".into(),
            ],
            stdin: Some(b"password: s3cretS3cret99\n".to_vec()),
            description: "shell script running echo".into(),
        };
        let tail = output_tail(
            b"api-key-7Gq2x9Lm4Pz1\n",
            b"bad password s3cretS3cret99",
            &[step],
        );
        assert_eq!(tail, "[redacted]\nbad password [redacted]");
    }

    #[test]
    fn tail_redacts_before_cutting() {
        // A PEM block whose BEGIN line falls outside the last 20 lines is still hidden.
        let mut out = String::from("-----BEGIN PRIVATE KEY-----\n");
        for _ in 0..30 {
            out.push_str("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n");
        }
        out.push_str("-----END PRIVATE KEY-----\nfailed\n");
        assert_eq!(
            output_tail(out.as_bytes(), b"", &[]),
            "[redacted PEM block]\nfailed"
        );
    }

    #[test]
    fn run_future_is_send() {
        fn assert_send<T: Send>(_: &T) {}
        let rt = FakeRuntime::default();
        let fut = run(&rt, "n", &[], None, |_, _| {});
        assert_send(&fut);
    }

    /// Runs the one-exec script of `steps` on this host's /bin/sh, with the sentinel and the
    /// progress file in `dir`: the script is pure shell, so this is the script as a node runs it.
    fn run_script(steps: &[Step], dir: &std::path::Path) -> ExecOutput {
        let batch = script(
            steps,
            &dir.join("sentinel").to_string_lossy(),
            &dir.join("state/done").to_string_lossy(),
            None,
        );
        run_step_locally(&batch)
    }

    /// Runs a step's argv on this host with its stdin.
    fn run_step_locally(batch: &Step) -> ExecOutput {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let mut child = Command::new(&batch.argv[0])
            .args(&batch.argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(batch.stdin.as_deref().unwrap_or_default())
            .unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        ExecOutput {
            exit_code: out.status.code().unwrap_or(-1).into(),
            stdout: out.stdout,
            stderr: out.stderr,
        }
    }

    fn tmp(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("capd-rs-runner-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn path(dir: &std::path::Path, f: &str) -> String {
        dir.join(f).to_string_lossy().into_owned()
    }

    #[test]
    fn one_script_writes_files_byte_for_byte_and_runs_commands_in_order() {
        let dir = tmp("order");
        let binary: Vec<u8> = (0..=255u8)
            .chain(b"\n.\n'$(touch pwned)'".iter().copied())
            .collect();
        let mut plan = super::super::plan::Plan::default();
        plan.write_file(&path(&dir, "a/bin"), binary.clone(), false);
        plan.chmod(&path(&dir, "a/bin"), 0o600);
        // Words with quotes, `$()` and newlines reach the program verbatim, never the shell.
        plan.command(vec![
            "sh".into(),
            "-c".into(),
            "printf '%s|' \"$@\" > \"$0\"".into(),
            path(&dir, "args"),
            "it's".into(),
            "$(touch pwned2)".into(),
            "a\nb".into(),
        ]);
        plan.write_file(&path(&dir, "a/log"), b"one\n".to_vec(), false);
        plan.write_file(&path(&dir, "a/log"), b"two\n".to_vec(), true);
        plan.shell(format!("touch {}", path(&dir, "sentinel")));
        let steps = plan.into_steps();
        let out = run_script(&steps, &dir);
        assert_eq!(outcome(&out, steps.len()), Ok(()), "{out:?}");
        assert_eq!(std::fs::read(dir.join("a/bin")).unwrap(), binary);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(dir.join("a/bin"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("args")).unwrap(),
            "it's|$(touch pwned2)|a\nb|"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("a/log")).unwrap(),
            "one\ntwo\n"
        );
        assert!(
            !dir.join("pwned").exists()
                && !dir.join("pwned2").exists()
                && !std::path::Path::new("pwned").exists()
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("state/done"))
                .unwrap()
                .trim(),
            steps.len().to_string()
        );
    }

    #[test]
    fn the_first_failing_step_stops_the_script_and_is_named() {
        let dir = tmp("fail");
        let steps = vec![
            write(&path(&dir, "first"), b"1"),
            shell("echo about to fail; echo oops >&2; exit 7"),
            write(&path(&dir, "never"), b"x"),
        ];
        let out = run_script(&steps, &dir);
        assert_eq!(
            outcome(&out, 3),
            Err(Ended::Step {
                index: 1,
                exit_code: 7
            })
        );
        assert!(dir.join("first").exists() && !dir.join("never").exists());
        // The tail is the step's output without the script's own last line.
        assert_eq!(
            output_tail(&out.stdout, &strip_marker(&out.stderr), &[]),
            "about to fail\noops"
        );
    }

    #[test]
    fn a_rerun_resumes_after_the_finished_steps_with_stdin_still_aligned() {
        let dir = tmp("resume");
        let steps = vec![
            write(&path(&dir, "a"), b"content of a"),
            shell(&format!("echo ran >> {}", path(&dir, "count"))),
            shell(&format!("test -f {}", path(&dir, "go"))),
            write(&path(&dir, "b"), b"content of b"),
            shell(&format!("touch {}", path(&dir, "sentinel"))),
        ];
        assert_eq!(
            outcome(&run_script(&steps, &dir), 5),
            Err(Ended::Step {
                index: 2,
                exit_code: 1
            })
        );
        std::fs::write(dir.join("go"), "").unwrap();
        std::fs::write(dir.join("a"), "changed since").unwrap();
        assert_eq!(outcome(&run_script(&steps, &dir), 5), Ok(()));
        // Steps 1 and 2 did not run again; step 4 got its own content, not step 1's.
        assert_eq!(std::fs::read_to_string(dir.join("count")).unwrap(), "ran\n");
        assert_eq!(
            std::fs::read_to_string(dir.join("a")).unwrap(),
            "changed since"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("b")).unwrap(),
            "content of b"
        );
    }

    #[test]
    fn content_cut_short_fails_its_step_and_writes_nothing_after() {
        let dir = tmp("short");
        let steps = vec![
            write(&path(&dir, "a"), b"first"),
            write(&path(&dir, "b"), &[b'x'; 500]),
            shell(&format!("touch {}", path(&dir, "after"))),
        ];
        let mut batch = script(
            &steps,
            &path(&dir, "sentinel"),
            &path(&dir, "state/done"),
            None,
        );
        // The stream ends inside the second block.
        let stdin = batch.stdin.take().unwrap();
        let cut = stdin.len() - 100;
        batch.stdin = Some(stdin[..cut].to_vec());
        let out = run_step_locally(&batch);
        assert_eq!(
            outcome(&out, 3),
            Err(Ended::Step {
                index: 1,
                exit_code: 1
            })
        );
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "first");
        assert!(!dir.join("b").exists() && !dir.join("after").exists());
    }

    #[test]
    fn an_existing_sentinel_runs_nothing_and_a_missing_one_is_reported() {
        let dir = tmp("sentinel");
        std::fs::write(dir.join("sentinel"), "").unwrap();
        let steps = vec![shell(&format!("touch {}", path(&dir, "ran")))];
        assert_eq!(outcome(&run_script(&steps, &dir), 1), Ok(()));
        assert!(!dir.join("ran").exists());
        std::fs::remove_file(dir.join("sentinel")).unwrap();
        assert_eq!(
            outcome(&run_script(&steps, &dir), 1),
            Err(Ended::NoSentinel)
        );
        assert!(dir.join("ran").exists());
    }

    /// [`run_script`] claiming the node with `token`, its claim file in `dir`.
    fn run_claimed(steps: &[Step], dir: &std::path::Path, token: &str) -> ExecOutput {
        let claim = path(dir, "lib/claim");
        let batch = script(
            steps,
            &path(dir, "sentinel"),
            &path(dir, "state/done"),
            Some((&claim, token)),
        );
        run_step_locally(&batch)
    }

    #[test]
    fn of_runs_racing_for_a_node_one_runs_the_commands_and_its_retry_resumes() {
        let dir = tmp("claim");
        let count = path(&dir, "count");
        let steps = vec![
            shell(&format!("echo ran >> {count}")),
            shell(&format!("test -f {}", path(&dir, "go"))),
            shell(&format!("touch {}", path(&dir, "sentinel"))),
        ];
        // Eight runs with their own tokens start together: one claims, the others run nothing.
        let ends: Vec<Result<(), Ended>> = std::thread::scope(|scope| {
            let runs: Vec<_> = (0..8)
                .map(|k| {
                    let (steps, dir) = (&steps, &dir);
                    scope.spawn(move || outcome(&run_claimed(steps, dir, &format!("run-{k}")), 3))
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let winner = std::fs::read_to_string(dir.join("lib/claim")).unwrap();
        let winner = winner.trim_end();
        let stopped = ends
            .iter()
            .filter(|e| **e == Err(Ended::ClaimedElsewhere))
            .count();
        assert_eq!(stopped, 7, "{ends:?}");
        assert_eq!(std::fs::read_to_string(&count).unwrap(), "ran\n");
        // The winner stopped at step 2; its retry resumes there, another run still does not.
        let k: usize = winner.trim_start_matches("run-").parse().unwrap();
        assert_eq!(
            ends[k],
            Err(Ended::Step {
                index: 1,
                exit_code: 1
            })
        );
        std::fs::write(dir.join("go"), "").unwrap();
        let other = format!("run-{}", (k + 1) % 8);
        assert_eq!(
            outcome(&run_claimed(&steps, &dir, &other), 3),
            Err(Ended::ClaimedElsewhere)
        );
        assert_eq!(outcome(&run_claimed(&steps, &dir, winner), 3), Ok(()));
        assert_eq!(std::fs::read_to_string(&count).unwrap(), "ran\n");
        assert!(dir.join("sentinel").exists());
        // Bootstrapped: any run now ends at the sentinel, claim or not.
        assert_eq!(outcome(&run_claimed(&steps, &dir, &other), 3), Ok(()));
    }

    #[test]
    fn a_claim_that_cannot_be_written_runs_nothing_and_says_so() {
        let dir = tmp("noclaim");
        // The claim's directory is a file: neither mkdir nor the create can succeed.
        std::fs::write(dir.join("lib"), "").unwrap();
        let ran = path(&dir, "ran");
        let steps = vec![shell(&format!("touch {ran}"))];
        assert_eq!(
            outcome(&run_claimed(&steps, &dir, "t"), 1),
            Err(Ended::NoClaim)
        );
        assert!(!std::path::Path::new(&ran).exists());
    }

    #[test]
    fn the_claim_exec_of_a_step_by_step_run_claims_once() {
        let dir = tmp("claimstep");
        let claim = path(&dir, "lib/claim");
        let mine = claim_step(&claim, "mine");
        assert_eq!(outcome(&run_step_locally(&mine), 1), Ok(()));
        assert_eq!(
            outcome(&run_step_locally(&mine), 1),
            Ok(()),
            "its own claim"
        );
        assert_eq!(
            outcome(&run_step_locally(&claim_step(&claim, "theirs")), 1),
            Err(Ended::ClaimedElsewhere)
        );
        assert_eq!(std::fs::read_to_string(&claim).unwrap(), "mine\n");
    }

    #[tokio::test]
    async fn a_step_by_step_run_claims_before_its_first_step_and_stops_if_it_cannot() {
        let big = vec![0u8; SCRIPT_STDIN_LIMIT + 1];
        let steps = vec![write("/tmp/image.tar", &big), shell("ctr import")];
        // Sentinel absent, then another run's claim.
        let rt = FakeRuntime::answering(vec![
            exit(1, "", ""),
            exit(4, "", "\ncapd-rs-bootstrap: claimed-elsewhere\n"),
        ]);
        let err = run(&rt, "n", &steps, Some("t"), |_, _| {})
            .await
            .unwrap_err();
        assert_eq!(err, RunError::ClaimedElsewhere);
        assert!(err.at_claim() && err.step().is_none());
        let calls = rt.calls();
        assert_eq!(calls.len(), 2, "no step ran: {calls:?}");
        assert_eq!(calls[1].1[3..], [CLAIM_PATH, "t"]);
        // Claimed: the steps follow.
        let rt = FakeRuntime::answering(vec![exit(1, "", ""), ok(), ok(), ok(), ok()]);
        run(&rt, "n", &steps, Some("t"), |_, _| {}).await.unwrap();
        assert_eq!(rt.calls().len(), 5);
    }

    #[tokio::test]
    async fn run_is_one_exec_and_maps_the_scripts_end() {
        let stderr = "W kubelet\nerror: port 6443 in use\n\ncapd-rs-bootstrap: step 2 exited 3\n";
        let rt = FakeRuntime::answering(vec![exit(3, "", stderr)]);
        let steps = vec![write("/etc/k", b"k"), shell("kubeadm init"), shell("true")];
        let err = run(&rt, "n", &steps, None, |_, _| {}).await.unwrap_err();
        let failure = err.step().unwrap();
        assert_eq!((failure.index, failure.exit_code), (1, Some(3)));
        assert_eq!(
            err.to_string(),
            "step 2/3 failed: shell script running kubeadm exited with code 3"
        );
        assert_eq!(failure.output_tail, "W kubelet\nerror: port 6443 in use");
        let calls = rt.calls();
        assert_eq!(calls.len(), 1, "one exec for the whole plan");
        assert_eq!(&calls[0].1[..2], ["/bin/sh", "-c"]);
        // File content travels on stdin, never in argv.
        assert!(
            !calls[0].1.iter().any(|a| a.contains("azo=")),
            "base64 of k stays out of argv"
        );

        let rt = FakeRuntime::answering(vec![exit(3, "", "capd-rs-bootstrap: no-sentinel\n")]);
        let err = run(&rt, "n", &steps, None, |_, _| {}).await.unwrap_err();
        assert_eq!(err, RunError::NoSentinel);
        assert!(err.to_string().contains("was not created"), "{err}");
    }

    /// A cloud-config whose runcmd holds a secret-looking token, in both shapes of runcmd.
    const SECRET_WORD: &str = "s3cr3t-TOKEN-wq8ZP2";

    fn secret_plan() -> Vec<Step> {
        let yaml = format!(
            "write_files:\n- path: /etc/k\n  content: k\nruncmd:\n- [kubeadm, join, --token, {SECRET_WORD}]\n- echo {SECRET_WORD} > /tmp/x\n"
        );
        commands(
            Format::CloudConfig,
            yaml.as_bytes(),
            &NodeOptions::default(),
        )
        .unwrap()
    }

    fn assert_no_secret_in_argv(rt: &FakeRuntime) {
        let calls = rt.calls();
        assert!(!calls.is_empty());
        for (_, argv, _) in calls {
            for word in argv {
                assert!(
                    !word.contains(SECRET_WORD) && !word.contains("kubeadm"),
                    "runcmd text in argv: {word}"
                );
            }
        }
    }

    #[tokio::test]
    async fn runcmd_words_never_reach_exec_argv_in_one_exec() {
        let rt = FakeRuntime::default();
        run(&rt, "n", &secret_plan(), None, |_, _| {})
            .await
            .unwrap();
        assert_no_secret_in_argv(&rt);
    }

    #[tokio::test]
    async fn runcmd_words_never_reach_exec_argv_step_by_step() {
        // No sentinel yet; every step then succeeds.
        let rt = FakeRuntime::answering(vec![exit(1, "", "")]);
        let mut steps = secret_plan();
        steps.insert(
            0,
            write("/tmp/image.tar", &vec![0u8; SCRIPT_STDIN_LIMIT + 1]),
        );
        run(&rt, "n", &steps, None, |_, _| {}).await.unwrap();
        assert!(rt.calls().len() > steps.len(), "one exec per step");
        assert_no_secret_in_argv(&rt);
    }

    #[test]
    fn the_loader_runs_steps_given_on_stdin_step_by_step() {
        let dir = tmp("hidden");
        let target = path(&dir, "args");
        let mut plan = super::super::plan::Plan::default();
        plan.command(vec![
            "sh".into(),
            "-c".into(),
            "printf '%s|' \"$@\" > \"$0\"; exit 6".into(),
            target.clone(),
            "it's".into(),
            SECRET_WORD.into(),
        ]);
        let step = hidden(&plan.into_steps()[0]);
        assert!(!step.argv.iter().any(|a| a.contains(SECRET_WORD)));
        let out = run_step_locally(&step);
        assert_eq!(out.exit_code, 6, "{out:?}");
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            format!("it's|{SECRET_WORD}|")
        );
    }

    #[tokio::test]
    async fn huge_output_of_a_failing_step_is_bounded_and_still_named() {
        // 12 MB of short lines on stdout, then the error and the script's marker on stderr.
        let stdout = "progress line\n".repeat((12 << 20) / 14);
        let stderr = format!(
            "{}fatal: it broke\n\ncapd-rs-bootstrap: step 2 exited 5\n",
            "warning\n".repeat(1 << 20)
        );
        let rt = FakeRuntime::answering(vec![exit(5, &stdout, &stderr)]);
        let steps = vec![write("/etc/k", b"k"), shell("kubeadm init"), shell("true")];
        let started = std::time::Instant::now();
        let err = run(&rt, "n", &steps, None, |_, _| {}).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "step 2/3 failed: shell script running kubeadm exited with code 5"
        );
        let failure = err.step().unwrap();
        assert!(failure.output_tail.chars().count() <= TAIL_CHARS);
        assert!(
            failure.output_tail.ends_with("fatal: it broke"),
            "{}",
            failure.output_tail
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // What the runtime hands back is the tail, not the 12 MB.
        let rt = FakeRuntime::answering(vec![exit(5, &stdout, &stderr)]);
        let out = rt.exec("n", &[], None).await.unwrap();
        assert_eq!(out.stdout.len(), crate::docker::tail::EXEC_OUTPUT_TAIL);
        assert_eq!(out.stderr.len(), crate::docker::tail::EXEC_OUTPUT_TAIL);
    }

    #[tokio::test]
    async fn large_stdin_runs_step_by_step_between_two_sentinel_checks() {
        let big = vec![0u8; SCRIPT_STDIN_LIMIT + 1];
        // Sentinel absent, two steps, sentinel present.
        let rt = FakeRuntime::answering(vec![exit(1, "", ""), ok(), ok(), ok()]);
        let steps = vec![write("/tmp/image.tar", &big), shell("ctr import")];
        run(&rt, "n", &steps, None, |_, _| {}).await.unwrap();
        let calls = rt.calls();
        assert_eq!(calls.len(), 4);
        assert_eq!(calls[1].2.as_ref().map(Vec::len), Some(big.len()));
    }
}
