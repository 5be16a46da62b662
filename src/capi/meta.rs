//! Pure decisions on object metadata that the CAPI contract defines.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::{
    CLUSTER_NAME_LABEL, Cluster, DELETE_FOR_MOVE_ANNOTATION, GROUP, MANAGED_BY_ANNOTATION,
    PAUSED_ANNOTATION,
};

/// The owner reference of `kind` in group `cluster.x-k8s.io`, whatever its version or
/// controller flag (CAPI v1.13+ sets `controller: true` only for ClusterClass clusters).
pub fn capi_owner<'a>(meta: &'a ObjectMeta, kind: &str) -> Option<&'a OwnerReference> {
    meta.owner_references
        .as_deref()?
        .iter()
        .find(|r| r.kind == kind && r.api_version.split_once('/').map(|(g, _)| g) == Some(GROUP))
}

/// Externally managed objects (annotation `cluster.x-k8s.io/managed-by`, any value) are left
/// entirely alone.
/// The cluster a Machine or MachinePool belongs to: the cluster-name label CAPI sets, else its
/// `spec.clusterName` (before CAPI has labelled it).
pub fn cluster_name<'a>(
    meta: &'a ObjectMeta,
    spec_cluster_name: Option<&'a str>,
) -> Option<&'a str> {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(CLUSTER_NAME_LABEL))
        .map(String::as_str)
        .or(spec_cluster_name)
        .filter(|n| !n.is_empty())
}

pub fn is_externally_managed(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MANAGED_BY_ANNOTATION))
}

/// What the contract's first checks say about an infrastructure object, before its owner is
/// looked at (the same for every kind we reconcile).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership<'a> {
    /// Externally managed (`cluster.x-k8s.io/managed-by`) and not ours to finish deleting.
    External,
    /// No owner reference of `owner_kind` yet (CAPI sets it); `deleting` says whether the
    /// object is already being deleted.
    Unowned { deleting: bool },
    /// Owned by the CAPI object of this name.
    Owned(&'a str),
}

/// The [`Ownership`] of an object with `meta`, whose finalizer is `finalizer`. A finalizer we
/// added before a managed-by annotation appeared is still honoured (or deletion would hang and
/// containers leak).
pub fn ownership<'a>(meta: &'a ObjectMeta, finalizer: &str, owner_kind: &str) -> Ownership<'a> {
    let deleting = meta.deletion_timestamp.is_some();
    let ours_to_delete = deleting && meta.finalizers.iter().flatten().any(|f| f == finalizer);
    if is_externally_managed(meta) && !ours_to_delete {
        return Ownership::External;
    }
    match capi_owner(meta, owner_kind) {
        Some(owner) => Ownership::Owned(&owner.name),
        None => Ownership::Unowned { deleting },
    }
}

/// Why an object is paused: `Cluster.spec.paused` and/or the paused annotation on the object
/// (presence is enough), or `clusterctl move` deleting it from this management cluster. Empty
/// when not paused.
pub fn paused_reasons(cluster: Option<&Cluster>, meta: &ObjectMeta, kind: &str) -> Vec<String> {
    let mut reasons = Vec::new();
    if cluster.is_some_and(Cluster::is_paused) {
        reasons.push("Cluster spec.paused is set to true".to_string());
    }
    let annotated = |key| {
        meta.annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(key))
    };
    if annotated(PAUSED_ANNOTATION) {
        reasons.push(format!("{kind} has the {PAUSED_ANNOTATION} annotation"));
    }
    // clusterctl pauses the Cluster first, so this only matters when the Cluster is already out
    // of sight (a move retried after a partial one): the containers belong to the target now,
    // and a deletion here must not remove them.
    if annotated(DELETE_FOR_MOVE_ANNOTATION) {
        reasons.push(format!(
            "clusterctl move is deleting this {kind} from this management cluster ({DELETE_FOR_MOVE_ANNOTATION})"
        ));
    }
    reasons
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::ClusterSpec;

    fn meta_with(annotations: &[(&str, &str)], owners: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            owner_references: Some(
                owners
                    .iter()
                    .map(|(api, kind)| OwnerReference {
                        api_version: api.to_string(),
                        kind: kind.to_string(),
                        name: "owner".into(),
                        uid: "u".into(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn owner_lookup_matches_group_and_kind_any_version() {
        let m = meta_with(
            &[],
            &[
                ("apps/v1", "Cluster"),
                ("cluster.x-k8s.io/v1beta1", "Cluster"),
            ],
        );
        assert_eq!(
            capi_owner(&m, "Cluster").unwrap().api_version,
            "cluster.x-k8s.io/v1beta1"
        );
        assert!(capi_owner(&m, "Machine").is_none());
        let other = meta_with(&[], &[("example.com/v1", "Cluster")]);
        assert!(capi_owner(&other, "Cluster").is_none());
    }

    #[test]
    fn paused_by_cluster_or_annotation() {
        let mut cluster = Cluster::new("c", ClusterSpec::default());
        let plain = meta_with(&[], &[]);
        assert!(paused_reasons(Some(&cluster), &plain, "DockerCluster").is_empty());
        assert!(paused_reasons(None, &plain, "DockerCluster").is_empty());

        let annotated = meta_with(&[(PAUSED_ANNOTATION, "")], &[]);
        assert_eq!(
            paused_reasons(Some(&cluster), &annotated, "DockerMachine"),
            vec!["DockerMachine has the cluster.x-k8s.io/paused annotation"]
        );
        cluster.spec.paused = Some(true);
        assert_eq!(
            paused_reasons(Some(&cluster), &annotated, "DockerMachine").len(),
            2
        );
        cluster.spec.paused = Some(false);
        assert!(paused_reasons(Some(&cluster), &plain, "X").is_empty());
        // Moved away: paused even with no Cluster in sight.
        let moved = meta_with(&[(DELETE_FOR_MOVE_ANNOTATION, "")], &[]);
        assert_eq!(paused_reasons(None, &moved, "DockerMachine").len(), 1);
    }

    #[test]
    fn managed_by() {
        assert!(is_externally_managed(&meta_with(
            &[(MANAGED_BY_ANNOTATION, "")],
            &[]
        )));
        assert!(!is_externally_managed(&meta_with(&[], &[])));
    }
}
