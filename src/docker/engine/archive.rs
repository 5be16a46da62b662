//! Files in and out of a container through the engine's archive endpoints (`GET` and `PUT
//! /containers/{id}/archive`): one request each, and no tool in the image. Upstream's load
//! balancer image (kind's haproxy) is distroless: it has haproxy, `cp`, `mkdir` and `kill`, but no
//! shell and no `cat`, so anything that reads or writes its haproxy.cfg through an exec fails.
use std::io::Read;

use bollard::query_parameters::{DownloadFromContainerOptions, UploadToContainerOptionsBuilder};

use super::*;

/// What a tar stream may add to a file's content: a header per entry (the engine sends one),
/// the padding to 512 bytes and the two closing blocks, with room to spare.
const TAR_OVERHEAD: u64 = 64 * 1024;

impl BollardRuntime {
    pub(super) async fn read_file_archive(
        &self,
        reference: &str,
        name: &str,
        path: &str,
        limit: u64,
    ) -> RuntimeResult<Option<Vec<u8>>> {
        let what = || format!("read {path} in container {name}");
        self.count(Op::ArchiveGet);
        let options = DownloadFromContainerOptions {
            path: path.to_string(),
        };
        let mut stream = std::pin::pin!(
            self.docker
                .download_from_container(reference, Some(options))
        );
        let mut tar = Vec::new();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(bytes) => tar.extend_from_slice(&bytes),
                // 404 is both "no such container" and "no such file"; only the second is None
                // (Docker says "No such container", Podman "no such container").
                Err(BollardError::DockerResponseServerError {
                    status_code: 404,
                    message,
                }) if tar.is_empty()
                    && !message.to_ascii_lowercase().contains("no such container") =>
                {
                    return Ok(None);
                }
                Err(e) => return Err(classify(&what(), e)),
            }
            if tar.len() as u64 > limit + TAR_OVERHEAD {
                return Err(RuntimeError::Rejected(format!(
                    "{}: larger than {limit} bytes",
                    what()
                )));
            }
        }
        file_from_tar(&tar, limit)
            .map(Some)
            .map_err(|why| RuntimeError::Rejected(format!("{}: {why}", what())))
    }

    pub(super) async fn write_file_archive(
        &self,
        reference: &str,
        name: &str,
        path: &str,
        content: &[u8],
    ) -> RuntimeResult<()> {
        let what = || format!("write {path} in container {name}");
        let (dir, file) = match path.rsplit_once('/') {
            Some((dir, file)) if !file.is_empty() => (if dir.is_empty() { "/" } else { dir }, file),
            _ => {
                return Err(RuntimeError::Rejected(format!(
                    "{}: not an absolute file path",
                    what()
                )));
            }
        };
        let tar = file_tar(file, content)
            .map_err(|e| RuntimeError::Rejected(format!("{}: {e}", what())))?;
        self.count(Op::ArchivePut);
        let options = UploadToContainerOptionsBuilder::default().path(dir).build();
        self.docker
            .upload_to_container(reference, Some(options), bollard::body_full(tar.into()))
            .await
            .map_err(|e| classify(&what(), e))
    }
}

/// A tar stream of one regular file `name` (mode 0644, root's, dated now): what the engine
/// unpacks into the directory it is given.
pub(super) fn file_tar(name: &str, content: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(content.len() as u64);
    header.set_mode(0o644);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    );
    let mut builder = tar::Builder::new(Vec::new());
    builder.append_data(&mut header, name, content)?;
    builder.into_inner()
}

/// The content of the one regular file in the engine's archive of a path, at most `limit` bytes.
/// Anything else there (a directory, a link) is not a file to read.
pub(super) fn file_from_tar(tar: &[u8], limit: u64) -> Result<Vec<u8>, String> {
    let mut archive = tar::Archive::new(tar);
    let mut entries = archive
        .entries()
        .map_err(|e| format!("unreadable archive: {e}"))?;
    let mut entry = match entries.next() {
        Some(Ok(entry)) => entry,
        Some(Err(e)) => return Err(format!("unreadable archive: {e}")),
        None => return Err("empty archive".into()),
    };
    let kind = entry.header().entry_type();
    if kind != tar::EntryType::Regular {
        return Err(format!("not a regular file ({kind:?})"));
    }
    if entry.size() > limit {
        return Err(format!("larger than {limit} bytes"));
    }
    let mut content = Vec::with_capacity(entry.size() as usize);
    entry
        .read_to_end(&mut content)
        .map_err(|e| format!("unreadable archive: {e}"))?;
    Ok(content)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_goes_in_and_comes_back_as_it_was() {
        let content = b"global\n  log stdout\n".to_vec();
        let tar = file_tar("haproxy.cfg", &content).unwrap();
        let mut archive = tar::Archive::new(&tar[..]);
        let entry = archive.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(entry.path().unwrap().to_str(), Some("haproxy.cfg"));
        assert_eq!(entry.header().mode().unwrap(), 0o644);
        assert_eq!(file_from_tar(&tar, 1024).unwrap(), content);
        assert_eq!(file_from_tar(&file_tar("e", b"").unwrap(), 0).unwrap(), b"");
    }

    #[test]
    fn only_a_regular_file_within_the_limit_is_read() {
        let tar = file_tar("big", &[b'x'; 2000]).unwrap();
        assert_eq!(
            file_from_tar(&tar, 1999).unwrap_err(),
            "larger than 1999 bytes"
        );
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_size(0);
        builder.append_data(&mut header, "etc", &[][..]).unwrap();
        let dir = builder.into_inner().unwrap();
        assert!(
            file_from_tar(&dir, 10)
                .unwrap_err()
                .starts_with("not a regular file")
        );
        assert_eq!(file_from_tar(&[], 10).unwrap_err(), "empty archive");
        assert!(
            file_from_tar(&[7u8; 600], 10)
                .unwrap_err()
                .starts_with("unreadable archive")
        );
    }
}
