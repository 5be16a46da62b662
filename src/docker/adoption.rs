//! Adopting the containers upstream CAPD created, so that swapping upstream's manager for
//! capd-rs leaves running clusters running.
//!
//! Upstream CAPD labels its containers only with kind's `io.x-k8s.kind.cluster` (the cluster's
//! name) and `io.x-k8s.kind.role`; it has no namespace and no owner labels. capd-rs's own
//! ownership labels ([`super::labels`]) are therefore missing on them, and Docker cannot add a
//! label to an existing container. So adoption is recorded on the owning object instead: the
//! annotation [`ADOPTED_CONTAINER`] on the DockerMachine or DockerCluster names the adopted
//! container's ID. From then on that one container (that ID, nothing else) is treated as the
//! object's own, across manager restarts; the annotation is visible with `kubectl get -o yaml`.
//!
//! A container is adopted only when everything says it is upstream's container for this very
//! object (see [`decide`]); anything else stays foreign (`ContainerNameConflict`).
use super::{ContainerInfo, labels};

/// Annotation on a DockerMachine / DockerCluster: the ID of the upstream CAPD container it
/// adopted.
pub const ADOPTED_CONTAINER: &str = "capd-rs.x-k8s.io/adopted-container";

/// What the object that wants the container says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim<'a> {
    /// The cluster's name (the value of `io.x-k8s.kind.cluster` upstream sets).
    pub cluster_name: &'a str,
    /// The role the container must have (`control-plane`, `worker`, `external-load-balancer`).
    pub role: &'a str,
    /// The Docker network the cluster's containers sit on.
    pub network: &'a str,
    /// The object's [`ADOPTED_CONTAINER`] annotation, if any.
    pub recorded: Option<&'a str>,
    /// The object's own spec says upstream provisioned it on this container: a DockerMachine's
    /// `spec.providerID` is `docker:////<container name>`, a DockerCluster's
    /// `spec.controlPlaneEndpoint.host` is the load balancer's address. This is what ties an
    /// upstream container (whose labels name no namespace) to one object.
    pub provisioned_on: bool,
}

/// Whether an upstream container may be used by the object that claims it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Adoption {
    /// Adopted earlier: the annotation names this container's ID.
    Recorded,
    /// To be adopted now: the caller records the container's ID in the annotation.
    New,
    /// Not this object's; the reason says why (for `ContainerNameConflict`).
    Refused(String),
}

impl Adoption {
    pub fn is_usable(&self) -> bool {
        !matches!(self, Adoption::Refused(_))
    }
}

/// Whether `labels` carry any capd-rs label: such a container is judged by
/// [`labels::ownership`] alone, never adopted as upstream's.
fn has_capd_rs_labels(c: &ContainerInfo) -> bool {
    c.labels.keys().any(|k| k.starts_with("capd-rs.x-k8s.io/"))
}

/// Pure: may the object making `claim` adopt `c` (found under the name it expects)?
/// Every one of these must hold: no capd-rs label (ours are judged by owner labels), the kind
/// cluster label names the claim's cluster, the role matches, the container is on the cluster's
/// network, and either the annotation already names this container's ID or (nothing recorded)
/// the object's spec says upstream provisioned it there.
pub fn decide(c: &ContainerInfo, claim: &Claim<'_>) -> Adoption {
    let get = |k: &str| c.labels.get(k).map(String::as_str);
    if has_capd_rs_labels(c) {
        return Adoption::Refused("it carries capd-rs labels of another owner".into());
    }
    match get(labels::KIND_CLUSTER) {
        None => return Adoption::Refused("it was not created by capd-rs or upstream CAPD".into()),
        Some(cluster) if cluster != claim.cluster_name => {
            return Adoption::Refused(format!("upstream CAPD created it for cluster {cluster}"));
        }
        Some(_) => {}
    }
    if get(labels::KIND_ROLE) != Some(claim.role) {
        return Adoption::Refused(format!(
            "its role is {}, not {}",
            get(labels::KIND_ROLE).unwrap_or("<none>"),
            claim.role
        ));
    }
    if !c.networks.iter().any(|n| n == claim.network) {
        return Adoption::Refused(format!("it is not on network {}", claim.network));
    }
    match claim.recorded {
        Some(id) if !id.is_empty() && id == c.id => Adoption::Recorded,
        // The adopted container was replaced behind our back: the new one is not adopted.
        Some(id) if !id.is_empty() => Adoption::Refused(format!(
            "this object adopted container {id}, not {}",
            c.id
        )),
        _ if claim.provisioned_on => Adoption::New,
        _ => Adoption::Refused(
            "upstream CAPD created it, but this object's spec does not say it was provisioned on it"
                .into(),
        ),
    }
}

/// Whether `c` is one of upstream CAPD's containers of `cluster` on `network` with `role`
/// (labels and network only; who may use it is [`decide`]'s question).
pub fn is_upstream_of(c: &ContainerInfo, cluster: &str, role: &str, network: &str) -> bool {
    !has_capd_rs_labels(c)
        && c.labels.get(labels::KIND_CLUSTER).map(String::as_str) == Some(cluster)
        && c.labels.get(labels::KIND_ROLE).map(String::as_str) == Some(role)
        && c.networks.iter().any(|n| n == network)
}

/// The kind labels upstream CAPD selects a cluster's containers by (`io.x-k8s.kind.cluster`
/// and role): capd-rs's containers carry them too, so upstream finds ours after a swap back.
pub fn kind_selector(cluster: &str, role: &str) -> std::collections::BTreeMap<String, String> {
    std::collections::BTreeMap::from([
        (labels::KIND_CLUSTER.to_string(), cluster.to_string()),
        (labels::KIND_ROLE.to_string(), role.to_string()),
    ])
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn upstream(cluster: &str, role: &str) -> ContainerInfo {
        ContainerInfo {
            id: "abc123".into(),
            name: format!("{cluster}-md-0-x"),
            labels: BTreeMap::from([
                (labels::KIND_CLUSTER.to_string(), cluster.to_string()),
                (labels::KIND_ROLE.to_string(), role.to_string()),
            ]),
            networks: vec!["kind".into()],
            ..Default::default()
        }
    }

    fn claim() -> Claim<'static> {
        Claim {
            cluster_name: "dev",
            role: labels::ROLE_WORKER,
            network: "kind",
            recorded: None,
            provisioned_on: true,
        }
    }

    #[test]
    fn upstream_container_of_this_object_is_adopted_then_recorded() {
        let c = upstream("dev", labels::ROLE_WORKER);
        assert_eq!(decide(&c, &claim()), Adoption::New);
        let recorded = Claim {
            recorded: Some("abc123"),
            // Once recorded, the annotation alone decides.
            provisioned_on: false,
            ..claim()
        };
        assert_eq!(decide(&c, &recorded), Adoption::Recorded);
    }

    #[test]
    fn anything_else_stays_foreign() {
        let refused = |c: &ContainerInfo, claim: &Claim<'_>| !decide(c, claim).is_usable();
        // Another cluster's.
        assert!(refused(&upstream("prod", labels::ROLE_WORKER), &claim()));
        // No labels at all (hand-made).
        let bare = ContainerInfo {
            labels: BTreeMap::new(),
            ..upstream("dev", labels::ROLE_WORKER)
        };
        assert!(refused(&bare, &claim()));
        // Another role.
        assert!(refused(
            &upstream("dev", labels::ROLE_CONTROL_PLANE),
            &claim()
        ));
        // Another network.
        let elsewhere = ContainerInfo {
            networks: vec!["bridge".into()],
            ..upstream("dev", labels::ROLE_WORKER)
        };
        assert!(refused(&elsewhere, &claim()));
        // The object's spec does not say it was provisioned there (a same-named cluster in
        // another namespace, or a machine upstream never finished).
        let unproven = Claim {
            provisioned_on: false,
            ..claim()
        };
        assert!(refused(&upstream("dev", labels::ROLE_WORKER), &unproven));
        // The adopted container was replaced by another with the same name.
        let replaced = Claim {
            recorded: Some("other-id"),
            ..claim()
        };
        assert!(refused(&upstream("dev", labels::ROLE_WORKER), &replaced));
        // capd-rs's labels of another owner: judged by owner labels, never adopted.
        let mut theirs = upstream("dev", labels::ROLE_WORKER);
        theirs
            .labels
            .insert(labels::OWNER_UID.to_string(), "uid-x".to_string());
        assert!(refused(&theirs, &claim()));
    }

    #[test]
    fn upstream_membership_by_labels_and_network() {
        let c = upstream("dev", labels::ROLE_CONTROL_PLANE);
        assert!(is_upstream_of(
            &c,
            "dev",
            labels::ROLE_CONTROL_PLANE,
            "kind"
        ));
        assert!(!is_upstream_of(
            &c,
            "dev",
            labels::ROLE_CONTROL_PLANE,
            "other"
        ));
        assert!(!is_upstream_of(
            &c,
            "prod",
            labels::ROLE_CONTROL_PLANE,
            "kind"
        ));
        assert!(!is_upstream_of(&c, "dev", labels::ROLE_WORKER, "kind"));
    }

    #[test]
    fn our_containers_carry_what_upstream_selects_by() {
        let owner = labels::Owner {
            cluster_name: "dev",
            cluster_namespace: "ns",
            kind: "DockerMachine",
            name: "m",
            uid: "u",
        };
        let ours = labels::container_labels(&owner, labels::ROLE_WORKER, &BTreeMap::new());
        for (k, v) in kind_selector("dev", labels::ROLE_WORKER) {
            assert_eq!(ours.get(&k), Some(&v), "{k}");
        }
    }
}
