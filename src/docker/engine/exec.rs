//! Running commands in containers: create an exec, feed stdin, keep the tail of the output, wait
//! for the exit code (the engine may close the output before it records the exit).
use super::*;
use crate::docker::tail::{EXEC_OUTPUT_TAIL, TailBuffer};

/// Why feeding an exec's stdin stopped early.
pub(super) enum Fed {
    /// The source of the input broke off: the exec is abandoned with this error.
    Abort(RuntimeError),
    /// The command stopped reading (it exited, or failed on its input).
    Write(std::io::Error),
}

impl From<std::io::Error> for Fed {
    fn from(e: std::io::Error) -> Self {
        Fed::Write(e)
    }
}

/// An exec's stdin, as bollard attaches it.
pub(super) type Input = std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

impl BollardRuntime {
    pub(super) async fn run_exec(
        &self,
        name: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
    ) -> RuntimeResult<ExecOutput> {
        let len = stdin.map(<[u8]>::len);
        self.exec_fed(
            name,
            argv,
            stdin.is_some(),
            len,
            |mut input: Input| async move {
                if let Some(data) = stdin {
                    input.write_all(data).await?;
                    input.flush().await?;
                    input.shutdown().await?;
                }
                Ok(())
            },
        )
        .await
    }

    /// The one way a command runs in a container: create and start an attached exec, feed its
    /// stdin with `feed` (when `attach_stdin`) while draining its output, keep only the tail of
    /// each stream, and wait for its exit code. `input_len`, when known, goes into the error of a
    /// command that stopped reading early.
    pub(super) async fn exec_fed<F, Fut>(
        &self,
        name: &str,
        argv: &[String],
        attach_stdin: bool,
        input_len: Option<usize>,
        feed: F,
    ) -> RuntimeResult<ExecOutput>
    where
        F: FnOnce(Input) -> Fut,
        Fut: std::future::Future<Output = Result<(), Fed>>,
    {
        // Only the program name: arguments may carry bootstrap secrets, and this text ends up
        // in errors, logs and conditions.
        let program = argv.first().map(String::as_str).unwrap_or("");
        let what = || format!("exec {program} in {name}");
        let config = ExecConfig {
            attach_stdin: Some(attach_stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            cmd: Some(argv.to_vec()),
            ..Default::default()
        };
        self.count(Op::ExecCreate);
        let id = self
            .docker
            .create_exec(name, config)
            .await
            .map_err(|e| classify(&what(), e))?
            .id;

        self.count(Op::ExecStart);
        let started = self
            .docker
            .start_exec(&id, None)
            .await
            .map_err(|e| classify(&what(), e))?;
        let (mut output, input) = match started {
            StartExecResults::Attached { output, input } => (output, input),
            StartExecResults::Detached => {
                return Err(RuntimeError::Unavailable(format!(
                    "{}: the engine did not attach the exec",
                    what()
                )));
            }
        };

        // Only the tails: a command may print without bound, and the stream is drained as it
        // arrives, so memory stays at the bound whatever it prints.
        let mut stdout = TailBuffer::new(EXEC_OUTPUT_TAIL);
        let mut stderr = TailBuffer::new(EXEC_OUTPUT_TAIL);
        // Feed stdin while draining the output, so neither side can block the other.
        let writer = feed(input);
        let reader = async {
            while let Some(chunk) = output.next().await {
                match chunk? {
                    LogOutput::StdOut { message } | LogOutput::Console { message } => {
                        stdout.push(&message)
                    }
                    LogOutput::StdErr { message } => stderr.push(&message),
                    LogOutput::StdIn { .. } => {}
                }
            }
            Ok::<(), BollardError>(())
        };
        // When the output ends the process is gone. A write still pending then would block until
        // the engine drops the connection (about two minutes), so it is abandoned instead.
        let (written, read) = {
            let mut writer = std::pin::pin!(writer);
            let mut reader = std::pin::pin!(reader);
            let mut written = None;
            let read = loop {
                tokio::select! {
                    w = &mut writer, if written.is_none() => {
                        // A broken source is an error whatever the command made of the
                        // truncated input: the exec is abandoned (its connection closed).
                        if let Err(Fed::Abort(e)) = w {
                            return Err(e);
                        }
                        written = Some(w);
                    }
                    r = &mut reader => break r,
                }
            };
            let written = written.unwrap_or_else(|| {
                let size = input_len.map_or(String::new(), |n| format!(" {n}-byte"));
                Err(Fed::Write(std::io::Error::other(format!(
                    "the command ended before reading all of its{size} input"
                ))))
            });
            (written, read)
        };
        read.map_err(|e| classify(&format!("{}: reading output", what()), e))?;

        let exit_code = self.wait_exec(&id, &what()).await?;
        match written {
            Err(Fed::Abort(e)) => return Err(e),
            // A process that exits early closes its stdin; its exit code then tells the story.
            // With a zero exit code, though, it may have consumed a truncated input.
            Err(Fed::Write(e)) if exit_code == 0 => {
                return Err(RuntimeError::Unavailable(format!(
                    "{}: writing stdin: {e}",
                    what()
                )));
            }
            _ => {}
        }
        if stdout.dropped() + stderr.dropped() > 0 {
            tracing::debug!(
                exec = %what(),
                stdout_dropped = stdout.dropped(),
                stderr_dropped = stderr.dropped(),
                "exec output beyond the kept tail was dropped"
            );
        }
        Ok(ExecOutput {
            exit_code,
            stdout: stdout.into_vec(),
            stderr: stderr.into_vec(),
        })
    }

    /// The output stream has ended; the engine may take a moment to record the exit code.
    pub(super) async fn wait_exec(&self, id: &str, what: &str) -> RuntimeResult<i64> {
        let mut delay = Duration::from_millis(5);
        for _ in 0..100 {
            self.count(Op::ExecInspect);
            let state = self
                .docker
                .inspect_exec(id)
                .await
                .map_err(|e| classify(what, e))?;
            if state.running != Some(true) {
                return Ok(state.exit_code.unwrap_or(-1));
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(250));
        }
        Err(RuntimeError::Unavailable(format!(
            "{what}: still running after its output closed"
        )))
    }
}
