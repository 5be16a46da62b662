//! Where the engine is and how to reach it: `DOCKER_HOST`, `DOCKER_TLS_VERIFY` and
//! `DOCKER_CERT_PATH`, read as the docker CLI reads them, plus one rule of ours: bootstrap data
//! (private keys, join tokens) goes to the engine in exec stdin, so a remote engine is reached
//! over TLS with client certificates, and plain `tcp://` is refused unless the host is this
//! machine's loopback or the operator said the network is trusted.
use std::path::PathBuf;

use super::DEFAULT_SOCKET;

/// How to reach the engine (the manager's flags; tests build it directly).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineOptions {
    /// `unix:///path`, `/path`, `tcp://host:port` (or `https://`, `http://`); the local socket
    /// when empty.
    pub host: Option<String>,
    /// Use TLS and verify the engine's certificate against `ca.pem`, presenting `cert.pem` and
    /// `key.pem` (all three from `cert_path`).
    pub tls_verify: bool,
    /// The directory holding `ca.pem`, `cert.pem` and `key.pem` (default `~/.docker`).
    pub cert_path: Option<PathBuf>,
    /// Allow plain (unencrypted) TCP to a host that is not loopback.
    pub allow_plain_tcp: bool,
}

/// The resolved way in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Endpoint {
    Unix(String),
    Plain(String),
    Tls { addr: String, cert_dir: PathBuf },
}

impl EngineOptions {
    /// Options for a host only (a unix socket, or loopback TCP).
    pub fn host(host: Option<&str>) -> Self {
        Self {
            host: host.map(str::to_string),
            ..Self::default()
        }
    }

    /// Whether these options name a way in we accept (the reason, for a log line, if not).
    pub fn check(&self) -> Result<(), String> {
        self.endpoint().map(|_| ())
    }

    /// The host as it may be logged: any `user:password@` removed.
    pub fn display(&self) -> String {
        without_userinfo(self.host_or_default())
    }

    fn host_or_default(&self) -> &str {
        self.host
            .as_deref()
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .unwrap_or(DEFAULT_SOCKET)
    }

    pub(super) fn endpoint(&self) -> Result<Endpoint, String> {
        let host = self.host_or_default();
        if host.starts_with("unix://") || host.starts_with('/') {
            return Ok(Endpoint::Unix(host.to_string()));
        }
        let Some((scheme, rest)) = host.split_once("://") else {
            return Err(format!(
                "unsupported docker host {:?}: expected unix://, tcp://, https:// or http://",
                self.display()
            ));
        };
        if !matches!(scheme, "tcp" | "https" | "http") {
            return Err(format!(
                "unsupported docker host {:?}: expected unix://, tcp://, https:// or http://",
                self.display()
            ));
        }
        // Only host:port: credentials would be sent (and logged by the client library) and a
        // query, fragment or backslash could make the host we check differ from the one the
        // client connects to.
        if rest.contains(['@', '?', '#', '\\']) {
            return Err(format!(
                "docker host {:?} must be {scheme}://host:port (no user, path query or fragment)",
                self.display()
            ));
        }
        if self.tls_verify || scheme == "https" {
            if scheme == "http" {
                return Err(format!(
                    "docker host {:?} says http:// but TLS verification is on; use tcp:// or https://",
                    self.display()
                ));
            }
            let cert_dir = self.cert_path.clone().unwrap_or_else(|| {
                PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/".into())).join(".docker")
            });
            return Ok(Endpoint::Tls {
                addr: format!("tcp://{rest}"),
                cert_dir,
            });
        }
        if !self.allow_plain_tcp && !is_loopback(rest) {
            return Err(format!(
                "refusing plain TCP to the Docker Engine at {:?}: bootstrap data (private keys, join tokens) would cross the network unencrypted. Set DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH (ca.pem, cert.pem, key.pem), or pass --docker-allow-plain-tcp if the network is trusted",
                self.display()
            ));
        }
        Ok(Endpoint::Plain(format!("tcp://{rest}")))
    }
}

/// `tcp://user:pw@host:2376` → `tcp://host:2376` (also without a scheme: `user:pw@host`).
fn without_userinfo(host: &str) -> String {
    let (scheme, rest) = match host.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), host),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}{}", &rest[at + 1..]),
        None => host.to_string(),
    }
}

/// Whether `host:port[/…]` names this machine's loopback.
fn is_loopback(rest: &str) -> bool {
    let authority = rest.split('/').next().unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(host: &str) -> EngineOptions {
        EngineOptions::host(Some(host))
    }

    #[test]
    fn unix_sockets_and_the_default() {
        assert_eq!(
            EngineOptions::default().endpoint(),
            Ok(Endpoint::Unix(DEFAULT_SOCKET.into()))
        );
        assert_eq!(
            opts(" ").endpoint(),
            Ok(Endpoint::Unix(DEFAULT_SOCKET.into()))
        );
        assert_eq!(
            opts("unix:///x.sock").endpoint(),
            Ok(Endpoint::Unix("unix:///x.sock".into()))
        );
    }

    #[test]
    fn plain_tcp_only_to_loopback_or_when_allowed() {
        for local in [
            "tcp://127.0.0.1:2375",
            "http://localhost:1",
            "tcp://[::1]:2375",
        ] {
            assert!(
                matches!(opts(local).endpoint(), Ok(Endpoint::Plain(_))),
                "{local}"
            );
        }
        let err = opts("tcp://10.0.0.5:2376").endpoint().unwrap_err();
        assert!(err.contains("refusing plain TCP"), "{err}");
        assert!(err.contains("DOCKER_TLS_VERIFY"), "{err}");
        // Credentials, queries and fragments are refused (a loopback look-alike after them
        // would pass the check while the client connects elsewhere), and never echoed.
        for tricky in [
            "tcp://u:secret@10.0.0.5:2376",
            "tcp://127.0.0.1@10.0.0.5:2376",
            "tcp://10.0.0.5:2375?@127.0.0.1",
            "tcp://10.0.0.5:2375#@127.0.0.1",
            "tcp://10.0.0.5:2375\\@127.0.0.1",
        ] {
            let err = opts(tricky).endpoint().unwrap_err();
            assert!(err.contains("must be tcp://host:port"), "{tricky}: {err}");
            assert!(!err.contains("secret"), "userinfo leaked: {err}");
        }
        let allowed = EngineOptions {
            allow_plain_tcp: true,
            ..opts("tcp://10.0.0.5:2375")
        };
        assert_eq!(
            allowed.endpoint(),
            Ok(Endpoint::Plain("tcp://10.0.0.5:2375".into()))
        );
    }

    #[test]
    fn tls_with_the_cli_variables() {
        let tls = EngineOptions {
            tls_verify: true,
            cert_path: Some("/certs".into()),
            ..opts("tcp://engine.example:2376")
        };
        assert_eq!(
            tls.endpoint(),
            Ok(Endpoint::Tls {
                addr: "tcp://engine.example:2376".into(),
                cert_dir: "/certs".into()
            })
        );
        // https:// means TLS without the variable; http:// with it is a contradiction.
        assert!(matches!(
            opts("https://engine.example:2376").endpoint(),
            Ok(Endpoint::Tls { .. })
        ));
        let contradiction = EngineOptions {
            tls_verify: true,
            ..opts("http://engine.example:2376")
        };
        assert!(contradiction.endpoint().is_err());
    }

    #[test]
    fn unsupported_schemes_are_named_without_userinfo() {
        let err = opts("ssh://me:pw@host").endpoint().unwrap_err();
        assert!(err.contains("ssh://host"), "{err}");
        assert!(!err.contains("pw"), "{err}");
        assert_eq!(
            opts("tcp://a:b@h:1/p@q").display(),
            "tcp://h:1/p@q",
            "an @ after the authority is not userinfo"
        );
        let err = opts("me:pw@host:2376").endpoint().unwrap_err();
        assert!(err.contains("\"host:2376\""), "{err}");
    }
}
