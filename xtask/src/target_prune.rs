//! Keeps the shared cargo target bounded. `hack/test.sh` builds into one target directory kept
//! outside the repository, so that a clean clone (CI) rebuilds only this workspace. Every
//! checkout path gives the workspace's crates new hashes, so each clone leaves behind a full set
//! of test executables and incremental sessions that no later build reads. Left alone they filled
//! the disk, and etcd stopped mid-suite with "no space left on device". This removes the test
//! executables and incremental directories nothing has built or run for some days, then checks
//! that enough space is free to run the suite.
//!
//! By age, not by "all but the newest copy": one checkout builds some targets in several feature
//! sets (the suite selects packages differently from step to step), and those copies are all in
//! use; removing one would make the next run compile it again.
use std::{
    fs, io,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

/// One file or directory of the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: PathBuf,
    /// An executable: the later of its modification and access times (built, or run); an
    /// incremental directory: its modification time (a build wrote a session into it).
    pub last_used: SystemTime,
    pub bytes: u64,
}

/// The entries unused since `cutoff` (pure, so it is tested without a file system).
pub fn stale(entries: &[Entry], cutoff: SystemTime) -> Vec<&Entry> {
    entries.iter().filter(|e| e.last_used < cutoff).collect()
}

fn last_used(meta: &fs::Metadata) -> io::Result<SystemTime> {
    let modified = meta.modified()?;
    Ok(meta.accessed().map_or(modified, |a| a.max(modified)))
}

/// Test and binary executables in `deps/` (libraries, proc macros and `.d` files have an
/// extension and are kept: the dependencies' artifacts are what makes a clean clone fast).
fn executables(deps: &Path) -> io::Result<Vec<Entry>> {
    let mut out = Vec::new();
    for f in read_dir_or_empty(deps)? {
        let f = f?;
        let meta = f.metadata()?;
        let executable = meta.permissions().mode() & 0o111 != 0;
        if meta.is_file() && executable && !f.file_name().to_string_lossy().contains('.') {
            out.push(Entry {
                path: f.path(),
                last_used: last_used(&meta)?,
                bytes: meta.len(),
            });
        }
    }
    Ok(out)
}

/// `incremental/<crate>-<hash>/`: one per crate, checkout and build configuration.
fn incremental(dir: &Path) -> io::Result<Vec<Entry>> {
    let mut out = Vec::new();
    for d in read_dir_or_empty(dir)? {
        let d = d?;
        let meta = d.metadata()?;
        if meta.is_dir() {
            out.push(Entry {
                path: d.path(),
                // Modification only: every build adds a session directory, while reading the
                // directory (as `dir_bytes` does, each run) would refresh its access time and
                // keep a stale one forever.
                last_used: meta.modified()?,
                bytes: dir_bytes(&d.path())?,
            });
        }
    }
    Ok(out)
}

fn read_dir_or_empty(dir: &Path) -> io::Result<Box<dyn Iterator<Item = io::Result<fs::DirEntry>>>> {
    match fs::read_dir(dir) {
        Ok(rd) => Ok(Box::new(rd)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Box::new(std::iter::empty())),
        Err(e) => Err(e),
    }
}

fn dir_bytes(dir: &Path) -> io::Result<u64> {
    let mut sum = 0;
    for e in fs::read_dir(dir)? {
        let e = e?;
        sum += if e.file_type()?.is_dir() {
            dir_bytes(&e.path())?
        } else {
            e.metadata()?.len()
        };
    }
    Ok(sum)
}

/// What a prune did.
#[derive(Debug, Default)]
pub struct Pruned {
    pub removed: usize,
    pub bytes: u64,
}

/// Removes what was unused for `keep` under `<target>/debug` and `<target>/release`.
pub fn prune(target: &Path, keep: Duration) -> io::Result<Pruned> {
    let cutoff = SystemTime::now()
        .checked_sub(keep)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let mut pruned = Pruned::default();
    for profile in ["debug", "release"] {
        let base = target.join(profile);
        let mut entries = executables(&base.join("deps"))?;
        entries.extend(incremental(&base.join("incremental"))?);
        for e in stale(&entries, cutoff) {
            let gone = if e.path.is_dir() {
                fs::remove_dir_all(&e.path)
            } else {
                fs::remove_file(&e.path)
            };
            match gone {
                Ok(()) => {
                    pruned.removed += 1;
                    pruned.bytes += e.bytes;
                }
                // A build running beside this one may have removed or replaced it.
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => {
                    return Err(io::Error::new(
                        err.kind(),
                        format!("{}: {err}", e.path.display()),
                    ));
                }
            }
        }
    }
    Ok(pruned)
}

/// Bytes available to an unprivileged writer on the file system holding `path`.
pub fn available_bytes(path: &Path) -> io::Result<u64> {
    let s = rustix::fs::statvfs(path)?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{File, FileTimes};

    const DAY: Duration = Duration::from_secs(86_400);

    fn entry(path: &str, days_ago: u64) -> Entry {
        Entry {
            path: path.into(),
            last_used: SystemTime::now() - DAY * days_ago as u32,
            bytes: 1,
        }
    }

    #[test]
    fn only_what_was_unused_since_the_cutoff_goes() {
        let es = [
            entry("deps/e2e-1111111111111111", 5),
            entry("deps/e2e-2222222222222222", 0),
            entry("incremental/capd-0bhlylxxbxacc", 3),
        ];
        let cutoff = SystemTime::now() - 2 * DAY;
        let gone: Vec<_> = stale(&es, cutoff).iter().map(|e| e.path.clone()).collect();
        assert_eq!(
            gone,
            [
                PathBuf::from("deps/e2e-1111111111111111"),
                PathBuf::from("incremental/capd-0bhlylxxbxacc")
            ]
        );
    }

    fn age(path: &Path, days: u32) {
        let t = SystemTime::now() - DAY * days;
        File::open(path)
            .unwrap()
            .set_times(FileTimes::new().set_accessed(t).set_modified(t))
            .unwrap();
    }

    #[test]
    fn prune_removes_old_executables_and_incremental_dirs_and_keeps_the_rest() {
        let t = std::env::temp_dir().join(format!("xtask-prune-{}", std::process::id()));
        let deps = t.join("debug/deps");
        let inc = t.join("debug/incremental");
        fs::create_dir_all(&deps).unwrap();
        let exe = |name: &str| {
            let p = deps.join(name);
            fs::write(&p, b"x").unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        let old = exe("swap-aaaaaaaaaaaaaaaa");
        age(&old, 3);
        let used = exe("swap-bbbbbbbbbbbbbbbb");
        // An old library stays: dependencies are what a clean clone reuses.
        let lib = deps.join("libserde-aaaaaaaaaaaaaaaa.rlib");
        fs::write(&lib, b"x").unwrap();
        age(&lib, 30);
        let old_inc = inc.join("capd-0bhlylxxbxacc");
        fs::create_dir_all(old_inc.join("s-1")).unwrap();
        fs::write(old_inc.join("s-1/query-cache.bin"), b"xyz").unwrap();
        // Read yesterday (a listing refreshes the access time), last built into 3 days ago.
        let read = SystemTime::now() - DAY;
        File::open(&old_inc)
            .unwrap()
            .set_times(
                FileTimes::new()
                    .set_accessed(read)
                    .set_modified(SystemTime::now() - 3 * DAY),
            )
            .unwrap();
        let new_inc = inc.join("capd-36r3pwxqg5i2r");
        fs::create_dir_all(&new_inc).unwrap();

        let p = prune(&t, 2 * DAY).unwrap();
        assert_eq!((p.removed, p.bytes), (2, 4));
        assert!(!old.exists() && !old_inc.exists());
        assert!(used.exists() && new_inc.exists() && lib.exists());
        // Nothing left to do the second time; a missing profile is no error.
        assert_eq!(prune(&t, 2 * DAY).unwrap().removed, 0);
        fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn available_space_is_read_from_the_file_system() {
        assert!(available_bytes(Path::new("/")).unwrap() > 0);
    }
}
