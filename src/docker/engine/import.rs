//! `preLoadImages`: an image's `docker save` tarball streamed from the engine's image export into
//! the stdin of a command in a node (`ctr images import -`). Each chunk is written before the next
//! is read, so the manager holds a chunk or two of the tarball at a time, never the whole image
//! (a kind node image is hundreds of MiB, and many nodes may bootstrap at once).
use super::*;

use super::exec::{Fed, Input};

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

        // Each chunk is written before the next is read: a chunk or two in memory at a time.
        self.exec_fed(name, argv, true, None, |mut input: Input| async move {
            input.write_all(&first).await?;
            drop(first);
            while let Some(chunk) = export.next().await {
                let chunk = chunk.map_err(|e| Fed::Abort(missing(classify(&saving(), e))))?;
                input.write_all(&chunk).await?;
            }
            input.flush().await?;
            input.shutdown().await?;
            Ok(())
        })
        .await
    }
}
