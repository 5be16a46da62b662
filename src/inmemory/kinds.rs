//! The resources the fake API server serves: one static table, read by the store (scope, status
//! subresource), the router (paths) and discovery (the documents under `/api` and `/apis`).

/// One served resource (a kind at one group/version).
#[derive(Debug, PartialEq, Eq)]
pub struct Resource {
    /// The API group; `""` for the core group (`/api/v1`).
    pub group: &'static str,
    pub version: &'static str,
    /// The path segment and discovery name (`nodes`).
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    /// Has a `status` subresource: the main resource's writes keep the stored status, and
    /// `…/status` writes change nothing else.
    pub status: bool,
    pub short_names: &'static [&'static str],
}

impl Resource {
    /// `v1` or `rbac.authorization.k8s.io/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// How the API server names the resource in its messages: `nodes`,
    /// `clusterroles.rbac.authorization.k8s.io`.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// `(group, version)`, `(plural, singular, kind)`, namespaced, has status, short names.
const fn r(
    (group, version): (&'static str, &'static str),
    (plural, singular, kind): (&'static str, &'static str, &'static str),
    namespaced: bool,
    status: bool,
    short_names: &'static [&'static str],
) -> Resource {
    Resource {
        group,
        version,
        plural,
        singular,
        kind,
        namespaced,
        status,
        short_names,
    }
}

const CORE: (&str, &str) = ("", "v1");
const APPS: (&str, &str) = ("apps", "v1");
const DISCOVERY: (&str, &str) = ("discovery.k8s.io", "v1");
const RBAC: (&str, &str) = ("rbac.authorization.k8s.io", "v1");
const STORAGE: (&str, &str) = ("storage.k8s.io", "v1");

/// Every resource served, grouped by group/version (discovery lists them in this order). The
/// store is the same for all of them: adding a kind is one line here. Beyond the kinds CAPI,
/// KCP and CABPK write, the table holds the few they read (DaemonSets, Deployments,
/// VolumeAttachments: see docs/in-memory.md), so those reads get an answer of the right shape.
#[rustfmt::skip]
pub const RESOURCES: &[Resource] = &[
    r(CORE, ("namespaces", "namespace", "Namespace"), false, true, &["ns"]),
    r(CORE, ("nodes", "node", "Node"), false, true, &["no"]),
    r(CORE, ("pods", "pod", "Pod"), true, true, &["po"]),
    r(CORE, ("configmaps", "configmap", "ConfigMap"), true, false, &["cm"]),
    r(CORE, ("secrets", "secret", "Secret"), true, false, &[]),
    r(CORE, ("serviceaccounts", "serviceaccount", "ServiceAccount"), true, false, &["sa"]),
    r(CORE, ("services", "service", "Service"), true, true, &["svc"]),
    r(CORE, ("endpoints", "endpoints", "Endpoints"), true, false, &["ep"]),
    r(APPS, ("daemonsets", "daemonset", "DaemonSet"), true, true, &["ds"]),
    r(APPS, ("deployments", "deployment", "Deployment"), true, true, &["deploy"]),
    r(DISCOVERY, ("endpointslices", "endpointslice", "EndpointSlice"), true, false, &[]),
    r(RBAC, ("clusterroles", "clusterrole", "ClusterRole"), false, false, &[]),
    r(RBAC, ("clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding"), false, false, &[]),
    r(RBAC, ("roles", "role", "Role"), true, false, &[]),
    r(RBAC, ("rolebindings", "rolebinding", "RoleBinding"), true, false, &[]),
    r(STORAGE, ("volumeattachments", "volumeattachment", "VolumeAttachment"), false, true, &[]),
];

/// The index of a resource in [`RESOURCES`]: how the store keys its maps.
pub type ResourceId = usize;

/// The resource served at `group`/`version` under `plural`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<ResourceId> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource of a kind (the store's own writes, tests).
pub fn by_kind(kind: &str) -> Option<ResourceId> {
    RESOURCES.iter().position(|r| r.kind == kind)
}

/// The group/versions served, in table order, each once.
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

/// The verbs discovery advertises: everything the router serves (no `deletecollection`).
pub const VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_resource_is_found_by_its_path_and_kind() {
        for (i, r) in RESOURCES.iter().enumerate() {
            assert_eq!(find(r.group, r.version, r.plural), Some(i), "{}", r.plural);
            assert_eq!(by_kind(r.kind), Some(i), "{}", r.kind);
        }
        assert_eq!(find("", "v1", "widgets"), None);
        assert_eq!(RESOURCES[by_kind("Node").unwrap()].api_version(), "v1");
        assert_eq!(
            RESOURCES[by_kind("ClusterRole").unwrap()].qualified(),
            "clusterroles.rbac.authorization.k8s.io"
        );
        assert_eq!(group_versions()[0], ("", "v1"));
    }
}
