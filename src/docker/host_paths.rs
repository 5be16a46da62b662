//! Which host paths a DockerMachine's `spec.extraMounts` may bind into its (privileged) node.
//!
//! A privileged node with a host directory mounted is that directory's root; with the engine's
//! socket it is root on the whole host. Upstream CAPD mounts whatever a DockerMachine names. Here
//! the host's root and the engine's socket (the path itself and every directory above it) are
//! refused (unless `--extra-mount-allow-docker-socket`, for self-hosted management clusters whose
//! nodes run this provider), and the manager's `--extra-mount-allowed-prefix` flags, when given,
//! narrow the rest to an allow-list. Checks are lexical: the manager may talk to a remote engine and cannot
//! resolve symbolic links on its host (SECURITY.md says what that leaves open).
use std::path::{Component, Path, PathBuf};

/// Where Docker Engines put their socket, besides the one the manager was pointed at.
const WELL_KNOWN_SOCKETS: [&str; 2] = ["/var/run/docker.sock", "/run/docker.sock"];

/// The policy: the paths that are never mounted and, optionally, the only prefixes that may be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPathPolicy {
    /// Sockets whose path and ancestors are refused (empty when the socket is allowed).
    sockets: Vec<PathBuf>,
    /// Empty: any other absolute path. Otherwise a path must be one of these or below one.
    allowed_prefixes: Vec<PathBuf>,
}

impl Default for HostPathPolicy {
    fn default() -> Self {
        Self::new(None, &[])
    }
}

impl HostPathPolicy {
    /// The same policy, but the engine's socket (and its directories) may be mounted.
    pub fn allowing_docker_socket(mut self) -> Self {
        self.sockets.clear();
        self
    }
}

impl HostPathPolicy {
    /// `engine_socket`: the unix socket the manager uses, if it uses one. `allowed_prefixes`: the
    /// allow-list (empty for none); each must be an absolute path without `..`.
    pub fn new(engine_socket: Option<&str>, allowed_prefixes: &[String]) -> Self {
        let mut sockets: Vec<PathBuf> = WELL_KNOWN_SOCKETS.iter().map(PathBuf::from).collect();
        if let Some(s) = engine_socket.and_then(|s| normalize(s).ok())
            && !sockets.contains(&s)
        {
            sockets.push(s);
        }
        Self {
            sockets,
            allowed_prefixes: allowed_prefixes
                .iter()
                .filter_map(|p| normalize(p).ok())
                .collect(),
        }
    }

    /// `Ok(())` if `host_path` may be mounted; otherwise why not, for a condition message.
    pub fn check(&self, host_path: &str) -> Result<(), String> {
        let path = normalize(host_path)?;
        if path == Path::new("/") {
            return Err("the host's root directory is never mounted".into());
        }
        if let Some(socket) = self.sockets.iter().find(|s| s.starts_with(&path)) {
            return Err(format!(
                "it is or holds the Docker Engine's socket {} (root on the host)",
                socket.display()
            ));
        }
        if !self.allowed_prefixes.is_empty()
            && !self.allowed_prefixes.iter().any(|p| path.starts_with(p))
        {
            let list: Vec<_> = self
                .allowed_prefixes
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            return Err(format!(
                "it is not below an allowed prefix ({}; the manager's --extra-mount-allowed-prefix)",
                list.join(", ")
            ));
        }
        Ok(())
    }
}

/// Absolute, without `.`, `..` or repeated or trailing slashes.
fn normalize(path: &str) -> Result<PathBuf, String> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err("host paths must be absolute".into());
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(part) => out.push(part),
            Component::ParentDir | Component::Prefix(_) => {
                return Err("host paths must not contain \"..\"".into());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_the_socket_with_its_parents_are_refused() {
        let p = HostPathPolicy::new(Some("/custom/engine.sock"), &[]);
        for denied in [
            "/",
            "//",
            "/./",
            "/var",
            "/var/run",
            "/var/run/",
            "/var/run/docker.sock",
            "/run",
            "/run//docker.sock",
            "/custom",
            "/custom/engine.sock",
        ] {
            assert!(p.check(denied).is_err(), "{denied} must be refused");
        }
        assert!(p.check("/").unwrap_err().contains("root"));
        assert!(p.check("/var/run").unwrap_err().contains("socket"));
        for allowed in [
            "/var/lib/data",
            "/run/containerd",
            "/home/u/src",
            "/tmp/x:y",
        ] {
            assert_eq!(p.check(allowed), Ok(()), "{allowed}");
        }
    }

    #[test]
    fn the_socket_can_be_allowed_for_self_hosting() {
        let p = HostPathPolicy::default().allowing_docker_socket();
        assert_eq!(p.check("/var/run/docker.sock"), Ok(()));
        assert!(p.check("/").is_err(), "the root stays refused");
    }

    #[test]
    fn relative_and_dot_dot_paths_are_refused() {
        let p = HostPathPolicy::default();
        assert!(p.check("data").unwrap_err().contains("absolute"));
        assert!(p.check("/tmp/../var/run").unwrap_err().contains(".."));
    }

    #[test]
    fn an_allow_list_narrows_the_rest() {
        let p = HostPathPolicy::new(None, &["/srv/capd/".into(), "/data".into()]);
        assert_eq!(p.check("/srv/capd"), Ok(()));
        assert_eq!(p.check("/data/x/y"), Ok(()));
        let err = p.check("/database").unwrap_err();
        assert!(err.contains("/srv/capd, /data"), "{err}");
        assert!(p.check("/etc").is_err());
        // The socket rule still applies inside an allowed prefix.
        let p = HostPathPolicy::new(Some("/data/docker.sock"), &["/data".into()]);
        assert!(p.check("/data").is_err());
    }
}
