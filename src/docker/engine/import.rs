//! `preLoadImages`: an image's `docker save` tarball streamed from the engine's image export into
//! the stdin of a command in a node (`ctr images import -`). Each chunk is written before the next
//! is read, so the manager holds a chunk or two of the tarball at a time, never the whole image
//! (a kind node image is hundreds of MiB, and many nodes may bootstrap at once).
use super::*;

/// At most this much of each of the command's stdout and stderr is kept (the end of it): the
/// output of an import is a few lines, but nothing in a node bounds it.
const OUTPUT_KEEP: usize = 64 << 10;

/// Why feeding the command stopped early.
enum Fed {
    /// The export broke off (or was missing): the command got a truncated tarball.
    Export(RuntimeError),
    /// The command stopped reading (it exited, or failed on its input).
    Write(std::io::Error),
}

impl BollardRuntime {
    pub(super) async fn run_import(
        &self,
        name: &str,
        image: &str,
        argv: &[String],
    ) -> RuntimeResult<ExecOutput> {
        let saving = || format!("save image {image}");
        let missing = |e: RuntimeError| match e {
            // The engine answers a missing image with 404: say which image.
            RuntimeError::NotFound(message) => RuntimeError::Image {
                image: image.to_string(),
                message,
            },
            other => other,
        };
        self.count(Op::ImageSave);
        let mut export = std::pin::pin!(self.docker.export_image(image));
        // The first chunk before any exec: a missing image runs nothing in the node.
        let first = match export.next().await {
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => return Err(missing(classify(&saving(), e))),
            None => {
                return Err(RuntimeError::Unavailable(format!(
                    "{}: the engine sent an empty tarball",
                    saving()
                )));
            }
        };

        let program = argv.first().map(String::as_str).unwrap_or("");
        let what = || format!("exec {program} in {name}");
        let config = ExecConfig {
            attach_stdin: Some(true),
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
        let (mut output, mut input) = match self
            .docker
            .start_exec(&id, None)
            .await
            .map_err(|e| classify(&what(), e))?
        {
            StartExecResults::Attached { output, input } => (output, input),
            StartExecResults::Detached => {
                return Err(RuntimeError::Unavailable(format!(
                    "{}: the engine did not attach the exec",
                    what()
                )));
            }
        };

        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let writer = async {
            input.write_all(&first).await.map_err(Fed::Write)?;
            drop(first);
            while let Some(chunk) = export.next().await {
                let chunk = chunk.map_err(|e| Fed::Export(missing(classify(&saving(), e))))?;
                input.write_all(&chunk).await.map_err(Fed::Write)?;
            }
            input.flush().await.map_err(Fed::Write)?;
            input.shutdown().await.map_err(Fed::Write)?;
            Ok::<(), Fed>(())
        };
        let reader = async {
            while let Some(chunk) = output.next().await {
                match chunk? {
                    LogOutput::StdOut { message } | LogOutput::Console { message } => {
                        keep_tail(&mut stdout, &message)
                    }
                    LogOutput::StdErr { message } => keep_tail(&mut stderr, &message),
                    LogOutput::StdIn { .. } => {}
                }
            }
            Ok::<(), BollardError>(())
        };
        // As in `run_exec`: output ending means the process is gone, and a write still pending
        // would wait for the engine to drop the connection.
        let (written, read) = {
            let mut writer = std::pin::pin!(writer);
            let mut reader = std::pin::pin!(reader);
            let mut written = None;
            let read = loop {
                tokio::select! {
                    w = &mut writer, if written.is_none() => {
                        // A broken export is an error whatever the command makes of the
                        // truncated tarball: the exec is abandoned (its connection closed).
                        if let Err(Fed::Export(e)) = w {
                            return Err(e);
                        }
                        written = Some(w);
                    }
                    r = &mut reader => break r,
                }
            };
            let written = written.unwrap_or_else(|| {
                Err(Fed::Write(std::io::Error::other(
                    "the command ended before reading the whole image",
                )))
            });
            (written, read)
        };
        read.map_err(|e| classify(&format!("{}: reading output", what()), e))?;
        let exit_code = self.wait_exec(&id, &what()).await?;
        match written {
            Err(Fed::Export(e)) => return Err(e),
            // A command that exits early closes its stdin; its exit code tells the story,
            // unless it is zero after a truncated input.
            Err(Fed::Write(e)) if exit_code == 0 => {
                return Err(RuntimeError::Unavailable(format!(
                    "{}: writing the image: {e}",
                    what()
                )));
            }
            _ => {}
        }
        Ok(ExecOutput {
            exit_code,
            stdout,
            stderr,
        })
    }
}

/// Append `more` to `buf`, keeping only its last [`OUTPUT_KEEP`] bytes.
fn keep_tail(buf: &mut Vec<u8>, more: &[u8]) {
    buf.extend_from_slice(more);
    if buf.len() > OUTPUT_KEEP {
        buf.drain(..buf.len() - OUTPUT_KEEP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_keeps_its_tail() {
        let mut buf = Vec::new();
        keep_tail(&mut buf, &vec![b'a'; OUTPUT_KEEP]);
        keep_tail(&mut buf, b"end");
        assert_eq!(buf.len(), OUTPUT_KEEP);
        assert!(buf.ends_with(b"aend"));
    }
}
