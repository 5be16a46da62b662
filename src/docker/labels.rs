//! Labels we put on every container and network, and how ownership is read back from them.
//!
//! The `io.x-k8s.kind.*` labels are upstream CAPD's (the CAPI e2e framework and log collectors
//! look containers up by them). The `capd-rs.x-k8s.io/*` labels are ours: they record the
//! namespace and the UID of the owning object so that a container with our name but another
//! owner is never adopted, and two same-named clusters in two namespaces never touch each other.
use std::collections::BTreeMap;

pub const KIND_CLUSTER: &str = "io.x-k8s.kind.cluster";
pub const KIND_ROLE: &str = "io.x-k8s.kind.role";
pub const FAILURE_DOMAIN: &str = "io.x-k8s.cluster.failureDomain";

pub const CLUSTER_NAMESPACE: &str = "capd-rs.x-k8s.io/cluster-namespace";
pub const OWNER_KIND: &str = "capd-rs.x-k8s.io/owner-kind";
pub const OWNER_UID: &str = "capd-rs.x-k8s.io/owner-uid";
pub const OWNER_NAME: &str = "capd-rs.x-k8s.io/owner-name";
pub const MANAGED_BY: &str = "capd-rs.x-k8s.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "capd-rs";

/// On a node container: the start of the bootstrap the pass that created it runs (RFC 3339),
/// which is also the token that run claims the node's commands with. The container carries the
/// start it was created for, so a first start costs no write to the DockerMachine; a start made
/// again in an existing container is recorded on the DockerMachine instead (see
/// `controllers::docker_machine::bootstrap`).
pub const BOOTSTRAP_START: &str = "capd-rs.x-k8s.io/bootstrap-start";

pub const ROLE_LOAD_BALANCER: &str = "external-load-balancer";
pub const ROLE_CONTROL_PLANE: &str = "control-plane";
pub const ROLE_WORKER: &str = "worker";

/// The object a container belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner<'a> {
    pub cluster_name: &'a str,
    pub cluster_namespace: &'a str,
    /// `DockerCluster` or `DockerMachine`.
    pub kind: &'a str,
    /// Name of the owning object (for mapping Docker events back to it).
    pub name: &'a str,
    pub uid: &'a str,
}

/// Labels for a container owned by `owner` with the given kind role, plus the manager's extra
/// labels (e.g. a test-run label), which never override ours.
pub fn container_labels(
    owner: &Owner<'_>,
    role: &str,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut labels = extra.clone();
    labels.insert(KIND_CLUSTER.into(), owner.cluster_name.into());
    labels.insert(KIND_ROLE.into(), role.into());
    labels.insert(CLUSTER_NAMESPACE.into(), owner.cluster_namespace.into());
    labels.insert(OWNER_KIND.into(), owner.kind.into());
    labels.insert(OWNER_UID.into(), owner.uid.into());
    labels.insert(OWNER_NAME.into(), owner.name.into());
    labels.insert(MANAGED_BY.into(), MANAGED_BY_VALUE.into());
    labels
}

/// Selector for every container of one cluster (in one namespace) with the given role.
pub fn cluster_role_selector(
    cluster_name: &str,
    cluster_namespace: &str,
    role: &str,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (KIND_CLUSTER.to_string(), cluster_name.to_string()),
        (CLUSTER_NAMESPACE.to_string(), cluster_namespace.to_string()),
        (KIND_ROLE.to_string(), role.to_string()),
        (MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string()),
    ])
}

/// Whether a container was created by capd-rs for this cluster (name and namespace).
pub fn belongs_to_cluster(
    labels: &BTreeMap<String, String>,
    cluster_name: &str,
    cluster_namespace: &str,
) -> bool {
    let get = |k: &str| labels.get(k).map(String::as_str);
    get(MANAGED_BY) == Some(MANAGED_BY_VALUE)
        && get(KIND_CLUSTER) == Some(cluster_name)
        && get(CLUSTER_NAMESPACE) == Some(cluster_namespace)
}

/// How an existing container with the name we want relates to the object that wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Ours: created for this very object (same UID).
    Ours,
    /// Created by capd-rs for an object of the same kind, name, cluster and namespace but
    /// another UID: the object was re-created, or restored by `clusterctl move`. Adopted.
    SameClusterOtherUid(String),
    /// Anything else: another namespace's cluster, another tool, a hand-made container.
    Foreign(String),
}

/// Decide whether a container carrying `labels` may be used by `owner`.
pub fn ownership(labels: &BTreeMap<String, String>, owner: &Owner<'_>) -> Ownership {
    let get = |k: &str| labels.get(k).map(String::as_str);
    if get(MANAGED_BY) != Some(MANAGED_BY_VALUE) {
        return Ownership::Foreign("it was not created by capd-rs".into());
    }
    if get(KIND_CLUSTER) != Some(owner.cluster_name)
        || get(CLUSTER_NAMESPACE) != Some(owner.cluster_namespace)
    {
        return Ownership::Foreign(format!(
            "it belongs to cluster {}/{}",
            get(CLUSTER_NAMESPACE).unwrap_or("?"),
            get(KIND_CLUSTER).unwrap_or("?")
        ));
    }
    if get(OWNER_KIND) != Some(owner.kind) {
        return Ownership::Foreign(format!(
            "it belongs to a {}",
            get(OWNER_KIND).unwrap_or("?")
        ));
    }
    match get(OWNER_UID) {
        Some(uid) if uid == owner.uid => Ownership::Ours,
        // Another object whose name maps to the same container (machines `a` and `dev-a` of
        // cluster `dev` both map to `dev-a`) must never share it.
        Some(_) if get(OWNER_NAME) != Some(owner.name) => Ownership::Foreign(format!(
            "it belongs to {} {}",
            owner.kind,
            get(OWNER_NAME).unwrap_or("?")
        )),
        Some(uid) => Ownership::SameClusterOtherUid(uid.to_string()),
        None => Ownership::Foreign("it has no owner UID label".into()),
    }
}

/// Whether `owner` may use (adopt, reconfigure, delete) a container carrying `labels`.
pub fn usable_by(labels: &BTreeMap<String, String>, owner: &Owner<'_>) -> bool {
    !matches!(ownership(labels, owner), Ownership::Foreign(_))
}

/// The kinds whose objects own a cluster's load balancer (a DevCluster is DockerCluster's view).
pub const CLUSTER_KINDS: [&str; 2] = ["DockerCluster", "DevCluster"];

/// Whether `labels` are those of a cluster's load balancer: the LB role, owned by a
/// DockerCluster or DevCluster (never a node container that happens to be named `<cluster>-lb`).
pub fn is_cluster_load_balancer(labels: &BTreeMap<String, String>) -> bool {
    let get = |k: &str| labels.get(k).map(String::as_str);
    get(KIND_ROLE) == Some(ROLE_LOAD_BALANCER)
        && get(OWNER_KIND).is_some_and(|k| CLUSTER_KINDS.contains(&k))
}

/// Pure: whether the load balancer carrying `labels`, which capd-rs created for another
/// infrastructure object of `owner`'s cluster, passes to `owner`. A cluster has exactly one
/// load balancer and one infrastructure object, and the object its Cluster names in
/// `spec.infrastructureRef` (`infra_ref`: kind and name) is the rightful owner: so the spec
/// "KCP infra adoption" (the Cluster re-created with a new DevCluster, the old one force-deleted)
/// keeps its LB, as upstream CAPD does. Docker labels cannot change, so this is decided afresh on
/// every pass. Machines keep the strict rule of [`ownership`]; `false` for a container `owner`
/// may use anyway ([`usable_by`]).
pub fn passes_to_infrastructure(
    labels: &BTreeMap<String, String>,
    owner: &Owner<'_>,
    infra_ref: Option<(&str, &str)>,
) -> bool {
    belongs_to_cluster(labels, owner.cluster_name, owner.cluster_namespace)
        && is_cluster_load_balancer(labels)
        && CLUSTER_KINDS.contains(&owner.kind)
        && infra_ref == Some((owner.kind, owner.name))
        && !usable_by(labels, owner)
}

/// Who a container's labels say it belongs to, for log lines: `DevCluster name (uid)`.
pub fn recorded_owner(labels: &BTreeMap<String, String>) -> String {
    let get = |k: &str| labels.get(k).map_or("?", String::as_str);
    format!(
        "{} {} ({})",
        get(OWNER_KIND),
        get(OWNER_NAME),
        get(OWNER_UID)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner<'static> {
        Owner {
            cluster_name: "c1",
            cluster_namespace: "ns-a",
            kind: "DockerCluster",
            name: "c1",
            uid: "uid-1",
        }
    }

    #[test]
    fn labels_carry_kind_compat_and_ownership() {
        let extra = BTreeMap::from([("capd-rs.test/run".to_string(), "r1".to_string())]);
        let l = container_labels(&owner(), ROLE_LOAD_BALANCER, &extra);
        assert_eq!(l[KIND_CLUSTER], "c1");
        assert_eq!(l[KIND_ROLE], "external-load-balancer");
        assert_eq!(l[CLUSTER_NAMESPACE], "ns-a");
        assert_eq!(l[OWNER_UID], "uid-1");
        assert_eq!(l["capd-rs.test/run"], "r1");
    }

    #[test]
    fn extra_labels_cannot_override_ownership() {
        let extra = BTreeMap::from([(OWNER_UID.to_string(), "evil".to_string())]);
        assert_eq!(
            container_labels(&owner(), ROLE_WORKER, &extra)[OWNER_UID],
            "uid-1"
        );
    }

    #[test]
    fn ownership_decisions() {
        let mine = container_labels(&owner(), ROLE_LOAD_BALANCER, &BTreeMap::new());
        assert_eq!(ownership(&mine, &owner()), Ownership::Ours);

        let other_ns = Owner {
            cluster_namespace: "ns-b",
            ..owner()
        };
        assert!(
            matches!(ownership(&mine, &other_ns), Ownership::Foreign(m) if m.contains("ns-a/c1"))
        );

        let recreated = Owner {
            uid: "uid-2",
            ..owner()
        };
        assert_eq!(
            ownership(&mine, &recreated),
            Ownership::SameClusterOtherUid("uid-1".into())
        );
        // Another object whose name maps to the same container never shares it.
        let other_object = Owner {
            uid: "uid-3",
            name: "other",
            ..owner()
        };
        assert!(!usable_by(&mine, &other_object));
        assert!(usable_by(&mine, &recreated));

        assert!(matches!(
            ownership(&BTreeMap::new(), &owner()),
            Ownership::Foreign(_)
        ));
        let machine = Owner {
            kind: "DockerMachine",
            ..owner()
        };
        assert!(matches!(ownership(&mine, &machine), Ownership::Foreign(_)));
    }

    /// The LB of DevCluster `old` (uid-old) of cluster ns-a/c1, and the new DevCluster `new`.
    fn succession() -> (BTreeMap<String, String>, Owner<'static>) {
        let old = Owner {
            kind: "DevCluster",
            name: "old",
            uid: "uid-old",
            ..owner()
        };
        let new = Owner {
            kind: "DevCluster",
            name: "new",
            uid: "uid-new",
            ..owner()
        };
        (
            container_labels(&old, ROLE_LOAD_BALANCER, &BTreeMap::new()),
            new,
        )
    }

    #[test]
    fn the_load_balancer_passes_to_the_object_the_cluster_names() {
        let (lb, new) = succession();
        assert!(!usable_by(&lb, &new), "the strict rule refuses it");
        assert!(passes_to_infrastructure(
            &lb,
            &new,
            Some(("DevCluster", "new"))
        ));
        // From a DockerCluster to a DevCluster too: both own a cluster's LB.
        let docker = container_labels(
            &Owner {
                kind: "DockerCluster",
                name: "old",
                uid: "uid-old",
                ..owner()
            },
            ROLE_LOAD_BALANCER,
            &BTreeMap::new(),
        );
        assert!(passes_to_infrastructure(
            &docker,
            &new,
            Some(("DevCluster", "new"))
        ));
        assert_eq!(recorded_owner(&lb), "DevCluster old (uid-old)");
    }

    #[test]
    fn the_load_balancer_does_not_pass_otherwise() {
        let (lb, new) = succession();
        let passes = |labels: &BTreeMap<String, String>, owner: &Owner<'_>, r| {
            passes_to_infrastructure(labels, owner, r)
        };
        // The Cluster names another object, another kind, or nothing.
        assert!(!passes(&lb, &new, Some(("DevCluster", "old"))));
        assert!(!passes(&lb, &new, Some(("DockerCluster", "new"))));
        assert!(!passes(&lb, &new, None));
        // Not the LB role: a node container named `<cluster>-lb`.
        let mut node = lb.clone();
        node.insert(KIND_ROLE.into(), ROLE_CONTROL_PLANE.into());
        assert!(!passes(&node, &new, Some(("DevCluster", "new"))));
        // Owned by a machine.
        let mut machine = lb.clone();
        machine.insert(OWNER_KIND.into(), "DevMachine".into());
        assert!(!passes(&machine, &new, Some(("DevCluster", "new"))));
        // Another namespace's cluster of the same name.
        let mut other_ns = lb.clone();
        other_ns.insert(CLUSTER_NAMESPACE.into(), "ns-b".into());
        assert!(!passes(&other_ns, &new, Some(("DevCluster", "new"))));
        // Another cluster.
        let mut other_cluster = lb.clone();
        other_cluster.insert(KIND_CLUSTER.into(), "c2".into());
        assert!(!passes(&other_cluster, &new, Some(("DevCluster", "new"))));
        // Not created by capd-rs (the kind labels alone are upstream's: adoption's business).
        let mut unmanaged = lb.clone();
        unmanaged.remove(MANAGED_BY);
        assert!(!passes(&unmanaged, &new, Some(("DevCluster", "new"))));
        // A machine never takes a container over this way, even one the infraRef names.
        let machine_owner = Owner {
            kind: "DevMachine",
            ..new.clone()
        };
        assert!(!passes(&lb, &machine_owner, Some(("DevMachine", "new"))));
        // Its own container is simply usable: not a succession.
        let mine = container_labels(&new, ROLE_LOAD_BALANCER, &BTreeMap::new());
        assert!(!passes(&mine, &new, Some(("DevCluster", "new"))));
    }
}
