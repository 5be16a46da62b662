//! Pure builders: which image a node or load balancer runs, and the [`ContainerSpec`] of a node
//! container and of a load-balancer container, following upstream CAPD's `RunContainer` options.
use std::collections::BTreeMap;

use super::haproxy::{BACKEND_PORT, STATS_PORT};
use super::kind_images::{self, KindMode};
use super::labels::{ROLE_CONTROL_PLANE, ROLE_LOAD_BALANCER};
use super::naming::load_balancer_name;
use super::runtime::{BindMount, ContainerSpec, NodePrivilege, PortPublish};

/// The manager's default load-balancer image (upstream's).
pub const DEFAULT_LB_IMAGE: &str = "kindest/haproxy:v20230606-42a2262b";
/// Repository (registry namespace) of kind's node images; the image name is [`NODE_IMAGE_NAME`].
pub const DEFAULT_NODE_REPOSITORY: &str = "kindest";
/// Name of kind's node image inside its repository.
pub const NODE_IMAGE_NAME: &str = "node";

/// A Kubernetes version parsed the way Go's `semver.ParseTolerant` does for the cases that occur
/// in `Machine.spec.version`: an optional leading `v`, a missing minor or patch read as 0.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Version {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Option<String>,
    build: Option<String>,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if let Some(p) = &self.pre {
            write!(f, "-{p}")?;
        }
        if let Some(b) = &self.build {
            write!(f, "+{b}")?;
        }
        Ok(())
    }
}

fn parse_version(raw: &str) -> Result<Version, String> {
    let invalid = |why: &str| {
        format!("cannot choose a node image: invalid Kubernetes version {raw:?}: {why}")
    };
    let s = raw.trim();
    let s = s.strip_prefix('v').unwrap_or(s);
    let (s, build) = match s.split_once('+') {
        Some((a, b)) => (a, Some(b.to_string())),
        None => (s, None),
    };
    let parts: Vec<&str> = s.splitn(3, '.').collect();
    // The prerelease, if any, hangs off the last numeric part.
    let (last, pre) = match parts[parts.len() - 1].split_once('-') {
        Some((n, p)) => (n, Some(p.to_string())),
        None => (parts[parts.len() - 1], None),
    };
    if parts.len() < 3 && (pre.is_some() || build.is_some()) {
        return Err(invalid(
            "a short version cannot carry prerelease or build metadata",
        ));
    }
    let mut nums = parts[..parts.len() - 1].to_vec();
    nums.push(last);
    while nums.len() < 3 {
        nums.push("0");
    }
    let num = |p: &str| -> Result<u64, String> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid("expected MAJOR.MINOR.PATCH"));
        }
        p.parse::<u64>().map_err(|_| invalid("number out of range"))
    };
    let ident_ok = |x: &str| {
        !x.is_empty()
            && x.split('.')
                .all(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    };
    if pre.as_deref().is_some_and(|p| !ident_ok(p))
        || build.as_deref().is_some_and(|b| !ident_ok(b))
    {
        return Err(invalid("bad prerelease or build metadata"));
    }
    Ok(Version {
        major: num(nums[0])?,
        minor: num(nums[1])?,
        patch: num(nums[2])?,
        pre,
        build,
    })
}

/// The image of a node container: `customImage` if set; otherwise kind's image for the
/// Kubernetes version (`kindest/node:v<version>`, with `+` replaced by `_` as OCI tags require).
/// `default_repository` is the repository the `node` image is taken from (upstream's `kindest`;
/// a manager flag can point it at a mirror such as `registry.local:5000/kindest`); empty means
/// `kindest`.
pub fn node_image(
    version: &str,
    custom_image: Option<&str>,
    default_repository: &str,
) -> Result<String, String> {
    if let Some(custom) = custom_image.map(str::trim).filter(|c| !c.is_empty()) {
        return Ok(custom.to_string());
    }
    if version.trim().is_empty() {
        return Err("cannot choose a node image: Machine.spec.version is empty and spec.customImage is not set".into());
    }
    let v = parse_version(version)?;
    let repository = if default_repository.trim().is_empty() {
        DEFAULT_NODE_REPOSITORY
    } else {
        default_repository.trim().trim_end_matches('/')
    };
    // A version kind publishes a pre-built image for takes the tag of upstream's table; any other
    // version gets upstream's best guess. Tags only, no digest: a locally built or imported image
    // with the same tag has no repository digest to match, and must stay usable offline.
    let tag = match kind_mapping(&v, None).image {
        Some(image) => kind_images::image_tag(image).to_string(),
        None => format!("v{v}").replace('+', "_"),
    };
    Ok(format!("{repository}/{NODE_IMAGE_NAME}:{tag}"))
}

/// Upstream's kind table for a parsed version (build metadata counts as a prerelease: such a
/// version is never a table row).
fn kind_mapping(v: &Version, custom_image: Option<&str>) -> kind_images::Mapping {
    let unreleased = v.pre.is_some() || v.build.is_some();
    kind_images::lookup((v.major, v.minor, v.patch), unreleased, custom_image)
}

/// How the node image of a Machine must be run (upstream's kind mode): from the custom image when
/// the table lists it, else from the version; an unparsable or empty version gets the latest mode.
pub fn node_kind_mode(version: &str, custom_image: Option<&str>) -> KindMode {
    let custom = custom_image.map(str::trim).filter(|c| !c.is_empty());
    match parse_version(version) {
        Ok(v) => kind_mapping(&v, custom).mode,
        Err(_) => kind_images::lookup((0, 0, 0), true, custom).mode,
    }
}

/// The load-balancer image: `default_image` (the manager flag, upstream
/// `kindest/haproxy:v20230606-42a2262b`) with its repository (everything before the image name)
/// replaced by `spec.loadBalancer.imageRepository` and its tag by `spec.loadBalancer.imageTag`
/// when those are set. Upstream's image name is `haproxy`; the default image's name is kept.
pub fn lb_image(repository: Option<&str>, tag: Option<&str>, default_image: &str) -> String {
    let default_image = if default_image.trim().is_empty() {
        DEFAULT_LB_IMAGE
    } else {
        default_image.trim()
    };
    let default = super::image::ImageRef::parse(default_image);
    let path = match repository
        .map(|r| r.trim().trim_end_matches('/'))
        .filter(|r| !r.is_empty())
    {
        Some(repo) => format!("{repo}/{}", default.short_name()),
        None => default.name.to_string(),
    };
    match tag.map(str::trim).filter(|t| !t.is_empty()) {
        Some(t) => format!("{path}:{t}"),
        None => {
            let tag = default.tag.map(|t| format!(":{t}")).unwrap_or_default();
            let digest = default.digest.map(|d| format!("@{d}")).unwrap_or_default();
            format!("{path}{tag}{digest}")
        }
    }
}

/// Inputs of a node (machine) container.
#[derive(Clone, Debug)]
pub struct NodeParams<'a> {
    /// Container name (also the hostname and the Kubernetes node name).
    pub name: &'a str,
    pub image: &'a str,
    /// `control-plane` or `worker`.
    pub role: &'a str,
    /// Complete label set (see `labels::container_labels`, plus the failure-domain label).
    pub labels: BTreeMap<String, String>,
    pub network: &'a str,
    /// `spec.extraMounts`, already checked against the manager's host-path policy.
    pub extra_mounts: &'a [BindMount],
    pub privilege: NodePrivilege,
    /// IPv6-only or dual-stack cluster: enables IPv6 inside the node.
    pub ipv6: bool,
    /// `KEY=value` proxy variables (see [`proxy_env`]).
    pub proxy_env: Vec<String>,
    /// The kind release family that built the image (see [`node_kind_mode`]).
    pub kind_mode: KindMode,
}

/// The container spec of a node, as upstream CAPD runs kind node images.
pub fn node_container_spec(p: &NodeParams<'_>) -> ContainerSpec {
    let control_plane = p.role == ROLE_CONTROL_PLANE;
    let mut env = Vec::new();
    if control_plane {
        env.push("KUBECONFIG=/etc/kubernetes/admin.conf".to_string());
    }
    env.extend(p.proxy_env.iter().cloned());

    let mut mounts = p.extra_mounts.to_vec();
    mounts.push(BindMount {
        host_path: "/lib/modules".into(),
        container_path: "/lib/modules".into(),
        read_only: true,
        create_host_path: true,
    });

    let ports = if control_plane {
        vec![PortPublish {
            container_port: format!("{BACKEND_PORT}/tcp"),
            host_ip: "127.0.0.1".into(),
            host_port: None,
        }]
    } else {
        Vec::new()
    };

    let mut sysctls = BTreeMap::new();
    if p.ipv6 {
        sysctls.insert(
            "net.ipv6.conf.all.disable_ipv6".to_string(),
            "0".to_string(),
        );
        sysctls.insert("net.ipv6.conf.all.forwarding".to_string(), "1".to_string());
    }

    ContainerSpec {
        name: p.name.to_string(),
        hostname: p.name.to_string(),
        image: p.image.to_string(),
        labels: p.labels.clone(),
        env,
        entrypoint: None,
        cmd: None,
        network: p.network.to_string(),
        ports,
        tmpfs: vec!["/tmp".into(), "/run".into()],
        volumes: vec!["/var".into()],
        mounts,
        privilege: p.privilege.clone(),
        security_opt: vec!["seccomp=unconfined".into(), "apparmor=unconfined".into()],
        sysctls,
        // kind v0.20 and newer images need a private cgroup namespace; older ones the host's.
        cgroupns_private: p.kind_mode != KindMode::Mode0_19,
        tty: true,
        restart_on_failure: Some(1),
    }
}

/// Inputs of a cluster's load-balancer container.
#[derive(Clone, Debug)]
pub struct LbParams<'a> {
    /// The CAPI cluster name; the container is `<cluster>-lb`.
    pub cluster_name: &'a str,
    pub image: &'a str,
    pub network: &'a str,
    /// Complete label set (role `external-load-balancer`).
    pub labels: BTreeMap<String, String>,
    /// IPv6-only cluster: publish on `::` instead of `0.0.0.0`.
    pub ipv6_only: bool,
}

/// The container spec of the load balancer: the image's own entrypoint, no extra privileges,
/// 6443/tcp published on a random host port of every address (as upstream: the API must be
/// reachable), 8404/tcp (haproxy's stats page) on a random port of the host's loopback only:
/// it needs no audience beyond the host.
pub fn lb_container_spec(p: &LbParams<'_>) -> ContainerSpec {
    let name = load_balancer_name(p.cluster_name);
    let (any, loopback) = if p.ipv6_only {
        ("::", "::1")
    } else {
        ("0.0.0.0", "127.0.0.1")
    };
    let publish = |port: u16, host_ip: &str| PortPublish {
        container_port: format!("{port}/tcp"),
        host_ip: host_ip.to_string(),
        host_port: None,
    };
    let mut labels = p.labels.clone();
    labels
        .entry(super::labels::KIND_ROLE.to_string())
        .or_insert_with(|| ROLE_LOAD_BALANCER.to_string());
    ContainerSpec {
        hostname: name.clone(),
        name,
        image: p.image.to_string(),
        labels,
        env: Vec::new(),
        entrypoint: None,
        cmd: None,
        network: p.network.to_string(),
        ports: vec![publish(BACKEND_PORT, any), publish(STATS_PORT, loopback)],
        tmpfs: Vec::new(),
        volumes: Vec::new(),
        mounts: Vec::new(),
        privilege: NodePrivilege::None,
        security_opt: Vec::new(),
        sysctls: BTreeMap::new(),
        cgroupns_private: false,
        tty: true,
        restart_on_failure: Some(1),
    }
}

/// The proxy variables (`HTTP_PROXY`, `HTTPS_PROXY`, either spelling) whose value carries
/// credentials that [`proxy_env`] leaves out of node containers, for one line at start-up.
pub fn proxy_credentials(lookup: impl Fn(&str) -> Option<String>) -> Vec<&'static str> {
    let keys = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"];
    keys.into_iter()
        .filter(|k| lookup(k).is_some_and(|v| without_userinfo(&v).is_none_or(|clean| clean != v)))
        .collect()
}

/// A proxy URL without its `user:password@` part; `None` when the value cannot be read as one
/// (whitespace or control characters, no host), so that it is left out rather than passed on.
/// Go's proxy variables also accept `host:port` without a scheme, so no scheme is required.
fn without_userinfo(value: &str) -> Option<String> {
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    let (scheme, rest) = match value.split_once("://") {
        Some((scheme, rest)) => (&value[..scheme.len() + 3], rest),
        None => ("", value),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    // The last `@` ends the userinfo: a password may hold `@` unescaped.
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if host.is_empty() || host.starts_with(':') {
        return None;
    }
    Some(format!("{scheme}{host}{path}"))
}

/// Proxy variables for node containers, as upstream: each of `HTTP_PROXY`, `HTTPS_PROXY`,
/// `NO_PROXY` found in the manager's environment (upper case first, then lower case) is passed in
/// both spellings, except that proxy URLs lose their `user:password@` (see
/// [`proxy_credentials`]) and a value that is no URL is left out; when any is set, `NO_PROXY` is extended with the network subnets, the
/// container name and the in-cluster DNS suffixes. `lookup` is the environment (e.g.
/// `|k| std::env::var(k).ok()`). Sorted by key so the spec is deterministic.
pub fn proxy_env(
    lookup: impl Fn(&str) -> Option<String>,
    subnets: &[String],
    container_name: &str,
) -> Vec<String> {
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    for key in ["HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"] {
        let value = lookup(key)
            .filter(|v| !v.is_empty())
            .or_else(|| lookup(&key.to_lowercase()).filter(|v| !v.is_empty()));
        // Credentials stay with the manager: a node's environment is readable by anyone who can
        // inspect its container or read its PID 1's environ.
        let value = match key {
            "NO_PROXY" => value,
            _ => value.and_then(|v| without_userinfo(&v)),
        };
        if let Some(v) = value {
            vars.insert(key.to_string(), v.clone());
            vars.insert(key.to_lowercase(), v);
        }
    }
    if !vars.is_empty() {
        let mut list: Vec<String> = subnets.to_vec();
        list.push(vars.get("NO_PROXY").cloned().unwrap_or_default());
        list.push(container_name.to_string());
        list.extend([".svc", ".svc.cluster", ".svc.cluster.local"].map(String::from));
        let joined = list.join(",");
        vars.insert("NO_PROXY".into(), joined.clone());
        vars.insert("no_proxy".into(), joined);
    }
    vars.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_image_custom_wins() {
        assert_eq!(
            node_image("v1.35.0", Some("my/node:x"), "kindest").unwrap(),
            "my/node:x"
        );
        assert_eq!(
            node_image("", Some("my/node:x"), "kindest").unwrap(),
            "my/node:x"
        );
    }

    #[test]
    fn node_image_from_version() {
        assert_eq!(
            node_image("v1.35.0", None, "kindest").unwrap(),
            "kindest/node:v1.35.0"
        );
        assert_eq!(
            node_image("1.36.1", None, "kindest").unwrap(),
            "kindest/node:v1.36.1"
        );
        // Unknown (newer) patch: best guess.
        assert_eq!(
            node_image("v1.35.9", None, "kindest").unwrap(),
            "kindest/node:v1.35.9"
        );
        // Build metadata: `+` is not valid in an OCI tag.
        assert_eq!(
            node_image("v1.36.0-rc.1+abc", None, "kindest").unwrap(),
            "kindest/node:v1.36.0-rc.1_abc"
        );
        // Tolerant parsing, as Go's semver.ParseTolerant.
        assert_eq!(
            node_image("v1.34", None, "kindest").unwrap(),
            "kindest/node:v1.34.0"
        );
        assert_eq!(
            node_image("v1.35.0", None, "mirror.local:5000/kind/").unwrap(),
            "mirror.local:5000/kind/node:v1.35.0"
        );
        assert_eq!(
            node_image("v1.35.0", Some(""), "").unwrap(),
            "kindest/node:v1.35.0"
        );
    }

    #[test]
    fn node_image_follows_upstreams_table() {
        // Every release version of upstream's table maps to its own tag (no digest).
        for (v, _, image) in kind_images::PREBUILT {
            let want = format!(
                "kindest/{}",
                image
                    .split('@')
                    .next()
                    .unwrap()
                    .trim_start_matches("kindest/")
            );
            if *v == "1.27.16" && image.contains("v1.27.17") {
                continue; // upstream's row 1.27.16 -> v1.27.17 is shadowed by an earlier 1.27.16 row
            }
            assert_eq!(node_image(v, None, "kindest").unwrap(), want);
        }
        // Versions only upstream's whole table knows (the old 13 did not).
        assert_eq!(
            node_image("v1.37.0", None, "").unwrap(),
            "kindest/node:v1.37.0"
        );
        assert_eq!(
            node_image("v1.19.16", None, "").unwrap(),
            "kindest/node:v1.19.16"
        );
    }

    #[test]
    fn kind_mode_decides_the_cgroup_namespace() {
        assert_eq!(node_kind_mode("v1.27.1", None), KindMode::Mode0_19);
        assert_eq!(node_kind_mode("v1.35.0", None), KindMode::Mode0_20);
        assert_eq!(node_kind_mode("v1.35.99", None), KindMode::Mode0_20);
        assert_eq!(node_kind_mode("", Some("my/node:x")), KindMode::Mode0_20);
        assert_eq!(
            node_kind_mode(
                "",
                Some(
                    "kindest/node:v1.26.0@sha256:691e24bd2417609db7e589e1a479b902d2e209892a10ce375fab60a8407c7352"
                )
            ),
            KindMode::Mode0_19
        );
        let mut p = node("worker", &[], false);
        assert!(p.cgroupns_private);
        p = node_container_spec(&NodeParams {
            kind_mode: KindMode::Mode0_19,
            name: "n",
            image: "kindest/node:v1.27.1",
            role: "worker",
            labels: BTreeMap::new(),
            network: "kind",
            extra_mounts: &[],
            privilege: NodePrivilege::Privileged,
            ipv6: false,
            proxy_env: vec![],
        });
        assert!(!p.cgroupns_private);
    }

    #[test]
    fn node_image_errors() {
        let e = node_image("", None, "kindest").unwrap_err();
        assert_eq!(
            e,
            "cannot choose a node image: Machine.spec.version is empty and spec.customImage is not set"
        );
        assert!(
            node_image("latest", None, "kindest")
                .unwrap_err()
                .contains("invalid Kubernetes version")
        );
        assert!(node_image("v1.x.0", None, "kindest").is_err());
        assert!(node_image("v1.35-rc.1", None, "kindest").is_err());
    }

    #[test]
    fn lb_image_overrides() {
        let d = DEFAULT_LB_IMAGE;
        assert_eq!(
            lb_image(None, None, d),
            "kindest/haproxy:v20230606-42a2262b"
        );
        assert_eq!(
            lb_image(Some("registry.local:5000/mirror"), None, d),
            "registry.local:5000/mirror/haproxy:v20230606-42a2262b"
        );
        assert_eq!(lb_image(None, Some("v2"), d), "kindest/haproxy:v2");
        assert_eq!(lb_image(Some("r/"), Some("t"), d), "r/haproxy:t");
        assert_eq!(lb_image(Some(""), Some(""), d), d);
        assert_eq!(lb_image(None, None, ""), d);
        // A custom default image keeps its own name; a registry port is not a tag.
        assert_eq!(
            lb_image(Some("x"), None, "reg:5000/lb/myhaproxy"),
            "x/myhaproxy"
        );
        assert_eq!(
            lb_image(None, Some("2"), "reg:5000/lb/myhaproxy"),
            "reg:5000/lb/myhaproxy:2"
        );
        assert_eq!(
            lb_image(None, None, "haproxy@sha256:abc"),
            "haproxy@sha256:abc"
        );
        assert_eq!(
            lb_image(Some("m"), None, "kindest/haproxy:v1@sha256:abc"),
            "m/haproxy:v1@sha256:abc"
        );
        assert_eq!(
            lb_image(None, Some("v2"), "kindest/haproxy:v1@sha256:abc"),
            "kindest/haproxy:v2"
        );
    }

    fn bind(host: &str, container: &str, read_only: bool) -> BindMount {
        BindMount {
            host_path: host.into(),
            container_path: container.into(),
            read_only,
            create_host_path: host == "/lib/modules",
        }
    }

    fn node(role: &str, mounts: &[BindMount], ipv6: bool) -> ContainerSpec {
        node_container_spec(&NodeParams {
            name: "dev-cp-1",
            image: "kindest/node:v1.35.0",
            role,
            labels: BTreeMap::from([("a".to_string(), "b".to_string())]),
            network: "kind",
            extra_mounts: mounts,
            privilege: NodePrivilege::Privileged,
            ipv6,
            proxy_env: vec!["HTTP_PROXY=http://p:3128".into()],
            kind_mode: KindMode::Mode0_20,
        })
    }

    #[test]
    fn control_plane_node_spec() {
        let mounts = vec![bind("/src", "/dst", true), bind("/a:b", "/b", false)];
        let s = node("control-plane", &mounts, false);
        assert_eq!(s.name, "dev-cp-1");
        assert_eq!(s.hostname, "dev-cp-1");
        assert!(s.tty);
        assert_eq!(s.tmpfs, vec!["/tmp", "/run"]);
        assert_eq!(s.volumes, vec!["/var"]);
        assert_eq!(
            s.mounts,
            vec![
                bind("/src", "/dst", true),
                bind("/a:b", "/b", false),
                bind("/lib/modules", "/lib/modules", true)
            ]
        );
        assert_eq!(
            s.security_opt,
            vec!["seccomp=unconfined", "apparmor=unconfined"]
        );
        assert!(s.cgroupns_private);
        assert_eq!(s.restart_on_failure, Some(1));
        assert_eq!(
            s.ports,
            vec![PortPublish {
                container_port: "6443/tcp".into(),
                host_ip: "127.0.0.1".into(),
                host_port: None
            }]
        );
        assert_eq!(
            s.env,
            vec![
                "KUBECONFIG=/etc/kubernetes/admin.conf",
                "HTTP_PROXY=http://p:3128"
            ]
        );
        assert!(s.sysctls.is_empty());
        assert_eq!(s.network, "kind");
        assert_eq!(s.labels["a"], "b");
        assert_eq!(s.privilege, NodePrivilege::Privileged);
        assert_eq!(s.entrypoint, None);
    }

    #[test]
    fn worker_node_spec_with_ipv6() {
        let s = node("worker", &[], true);
        assert!(s.ports.is_empty());
        assert_eq!(s.env, vec!["HTTP_PROXY=http://p:3128"]);
        assert_eq!(s.mounts, vec![bind("/lib/modules", "/lib/modules", true)]);
        assert_eq!(s.sysctls["net.ipv6.conf.all.disable_ipv6"], "0");
        assert_eq!(s.sysctls["net.ipv6.conf.all.forwarding"], "1");
    }

    #[test]
    fn lb_spec() {
        let labels = BTreeMap::from([("io.x-k8s.kind.cluster".to_string(), "dev".to_string())]);
        let s = lb_container_spec(&LbParams {
            cluster_name: "dev",
            image: "kindest/haproxy:v1",
            network: "kind",
            labels,
            ipv6_only: false,
        });
        assert_eq!(s.name, "dev-lb");
        assert_eq!(s.hostname, "dev-lb");
        assert_eq!(s.entrypoint, None);
        assert_eq!(s.privilege, NodePrivilege::None);
        assert!(s.security_opt.is_empty() && s.mounts.is_empty() && s.volumes.is_empty());
        assert_eq!(s.restart_on_failure, Some(1));
        assert_eq!(s.labels["io.x-k8s.kind.role"], "external-load-balancer");
        let ports: Vec<_> = s
            .ports
            .iter()
            .map(|p| (p.container_port.as_str(), p.host_ip.as_str(), p.host_port))
            .collect();
        assert_eq!(
            ports,
            vec![
                ("6443/tcp", "0.0.0.0", None),
                ("8404/tcp", "127.0.0.1", None)
            ]
        );

        let s6 = lb_container_spec(&LbParams {
            cluster_name: "dev",
            image: "i",
            network: "kind",
            labels: BTreeMap::new(),
            ipv6_only: true,
        });
        let hosts: Vec<_> = s6.ports.iter().map(|p| p.host_ip.as_str()).collect();
        assert_eq!(hosts, ["::", "::1"]);
    }

    #[test]
    fn proxy_env_follows_upstream() {
        let env = |k: &str| match k {
            "HTTP_PROXY" => Some("http://up:3128".to_string()),
            "https_proxy" => Some("http://low:3128".to_string()),
            "NO_PROXY" => Some("example.com".to_string()),
            _ => None,
        };
        let got = proxy_env(env, &["172.18.0.0/16".to_string()], "dev-cp-1");
        let no_proxy = "172.18.0.0/16,example.com,dev-cp-1,.svc,.svc.cluster,.svc.cluster.local";
        assert_eq!(
            got,
            vec![
                "HTTPS_PROXY=http://low:3128".to_string(),
                "HTTP_PROXY=http://up:3128".to_string(),
                format!("NO_PROXY={no_proxy}"),
                "http_proxy=http://up:3128".to_string(),
                "https_proxy=http://low:3128".to_string(),
                format!("no_proxy={no_proxy}"),
            ]
        );
        assert!(proxy_env(|_| None, &[], "x").is_empty());
    }

    #[test]
    fn proxy_credentials_never_reach_a_node() {
        let env = |k: &str| match k {
            "HTTP_PROXY" => Some("http://alice:s3cret@proxy.corp:3128/".to_string()),
            "HTTPS_PROXY" => Some("bob:hunter2@proxy.corp:3129".to_string()),
            "NO_PROXY" => Some("example.com".to_string()),
            _ => None,
        };
        let got = proxy_env(env, &[], "n").join("\n");
        for secret in ["alice", "s3cret", "bob", "hunter2", "@"] {
            assert!(!got.contains(secret), "{secret} reached the node: {got}");
        }
        assert!(
            got.contains("HTTP_PROXY=http://proxy.corp:3128/\n"),
            "{got}"
        );
        assert!(got.contains("HTTPS_PROXY=proxy.corp:3129\n"), "{got}");
        // A value that cannot be read as a URL is left out rather than passed on.
        let bad = |k: &str| (k == "HTTP_PROXY").then(|| "http://a:b@\nproxy:1".to_string());
        assert!(proxy_env(bad, &[], "n").is_empty());
        assert_eq!(proxy_credentials(env), ["HTTP_PROXY", "HTTPS_PROXY"]);
        assert!(proxy_credentials(|_| Some("http://proxy:3128".into())).is_empty());
    }
}
