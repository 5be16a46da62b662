//! What to do with a machine's node container, decided purely from what the engine reports and
//! whose it is. The controller acts on the answer; these functions never touch Docker.
use kube::ResourceExt;

use crate::{
    api::DockerMachine,
    docker::{ContainerInfo, ContainerState, adoption, labels, naming},
};

/// The container with the machine's name, as far as this machine is concerned.
// Short-lived (one per reconcile, moved straight into a decision): not worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Found {
    Missing,
    /// Someone else's (another object, another cluster, not capd-rs): never touched.
    Foreign(String),
    Ours(ContainerInfo),
}

/// A container being removed counts as missing: it is gone by the next pass, and a create before
/// then waits on the name.
pub fn found(existing: Option<ContainerInfo>, owner: &labels::Owner<'_>) -> Found {
    match existing.filter(|c| !c.is_being_removed()) {
        None => Found::Missing,
        Some(c) => match labels::ownership(&c.labels, owner) {
            labels::Ownership::Foreign(why) => Found::Foreign(why),
            // Ours, or ours before a re-create/move of the DockerMachine: adopt it.
            _ => Found::Ours(c),
        },
    }
}

/// Like [`found`], for a provisioned machine, which may also adopt the container upstream CAPD
/// provisioned it on (see [`adoption::decide`]): that one counts as ours too; anything else
/// with the name stays foreign, with both reasons.
pub fn found_or_adopted(
    existing: Option<ContainerInfo>,
    owner: &labels::Owner<'_>,
    claim: &adoption::Claim<'_>,
) -> Found {
    let Some(c) = existing.filter(|c| !c.is_being_removed()) else {
        return Found::Missing;
    };
    match found(Some(c.clone()), owner) {
        Found::Foreign(why) => match adoption::decide(&c, claim) {
            // capd-rs's labels of another owner: their own reason says whose it is.
            adoption::Adoption::Refused(_) if c.labels.contains_key(labels::MANAGED_BY) => {
                Found::Foreign(why)
            }
            adoption::Adoption::Refused(not_upstream) => Found::Foreign(not_upstream),
            _ => Found::Ours(c),
        },
        other => other,
    }
}

/// The bootstrap start the container was created for ([`labels::BOOTSTRAP_START`]), if ours.
pub fn created_for(found: &Found) -> Option<&str> {
    match found {
        Found::Ours(c) => c.labels.get(labels::BOOTSTRAP_START).map(String::as_str),
        _ => None,
    }
}

/// Before the machine is provisioned.
#[derive(Clone, Debug, PartialEq)]
pub enum Provisioning {
    Create,
    Use(ContainerInfo),
    /// Ours, created but never started (whoever created it stopped in between: a manager
    /// killed mid-create): nothing ran in it, so start it rather than create another.
    Start(ContainerInfo),
    /// Ours, stopped before its bootstrap began (an engine restart, `docker stop`): nothing of
    /// the bootstrap ran in it, so start over in a new container.
    Recreate,
    /// Ours, stopped after its bootstrap began: the commands themselves most likely stopped it
    /// (`poweroff`, `reboot`, a kill of PID 1, as on a VM). A new container would run them
    /// again and stop again, forever: the machine reports it instead.
    StoppedDuringBootstrap(ContainerInfo),
    Conflict(String),
}

/// What to do with the container found for a machine whose bootstrap is not running (the
/// caller does not look while one runs: that container is the bootstrap's). `bootstrap_began`:
/// a bootstrap was started in the machine's current container (its start is on record).
pub fn provisioning(found: Found, bootstrap_began: bool) -> Provisioning {
    match found {
        Found::Missing => Provisioning::Create,
        Found::Foreign(why) => Provisioning::Conflict(why),
        Found::Ours(c) if c.is_alive() => Provisioning::Use(c),
        Found::Ours(c) if c.state == Some(ContainerState::Created) => Provisioning::Start(c),
        Found::Ours(c) if bootstrap_began => Provisioning::StoppedDuringBootstrap(c),
        Found::Ours(_) => Provisioning::Recreate,
    }
}

/// Pure: whether a machine that reported [`Provisioning::StoppedDuringBootstrap`] for
/// `reported` (the fingerprint recorded then) may try again now that its inputs are `now`: only
/// when they changed (the DockerMachine's spec, or the Machine's bootstrap data Secret).
pub fn retry_after_stop(reported: Option<&str>, now: &str) -> bool {
    reported.is_some_and(|r| r != now)
}

/// What a stop during bootstrap is recorded against: the DockerMachine's generation and the
/// bootstrap data Secret's name.
pub fn bootstrap_inputs(generation: Option<i64>, secret: &str) -> String {
    format!(
        "generation={};secret={secret}",
        generation.unwrap_or_default()
    )
}

/// The condition message of a node that stopped while its bootstrap ran.
pub fn stopped_during_bootstrap_message(name: &str, c: &ContainerInfo) -> String {
    let code = c
        .exit_code
        .map_or_else(|| "unknown".to_string(), |code| code.to_string());
    format!(
        "Container {name} stopped twice while its bootstrap commands ran (last exit code {code}); \
         a command such as poweroff, reboot or a kill of PID 1 stops a node container for good, so \
         it is not recreated again: change the bootstrap data (a new Secret on the Machine) or the DockerMachine's \
         spec to try again, or delete the Machine"
    )
}

/// After the machine was provisioned: the node holds state (etcd, kubelet certificates), so it
/// is never recreated; a stopped one (engine restart, `docker stop`) is started again.
#[derive(Clone, Debug, PartialEq)]
pub enum Provisioned {
    Alive(ContainerInfo),
    Start(ContainerInfo),
    Gone,
    Conflict(String),
}

pub fn provisioned(found: Found) -> Provisioned {
    match found {
        Found::Missing => Provisioned::Gone,
        Found::Foreign(why) => Provisioned::Conflict(why),
        Found::Ours(c) if c.is_alive() => Provisioned::Alive(c),
        Found::Ours(c) => Provisioned::Start(c),
    }
}

/// What a DockerMachine says about the upstream CAPD container named `name` (see
/// [`adoption::decide`]): upstream set its providerID to that container when it provisioned it.
pub fn adoption_claim<'a>(
    dm: &'a DockerMachine,
    network: &'a str,
    cluster_name: &'a str,
    name: &str,
    role: &'a str,
) -> adoption::Claim<'a> {
    adoption::Claim {
        cluster_name,
        role,
        network,
        recorded: dm
            .annotations()
            .get(adoption::ADOPTED_CONTAINER)
            .map(String::as_str),
        provisioned_on: dm.spec.provider_id.as_deref() == Some(naming::provider_id(name).as_str()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::docker::ContainerState;

    const OWNER: labels::Owner<'static> = labels::Owner {
        cluster_name: "c",
        cluster_namespace: "ns",
        kind: "DockerMachine",
        name: "m",
        uid: "u1",
    };

    fn ours(state: ContainerState) -> ContainerInfo {
        ContainerInfo {
            name: "c-m".into(),
            state: Some(state),
            labels: labels::container_labels(&OWNER, labels::ROLE_WORKER, &BTreeMap::new()),
            ..Default::default()
        }
    }

    /// What a provisioned worker DockerMachine of cluster `c` on `kind` claims.
    fn worker_claim() -> adoption::Claim<'static> {
        adoption::Claim {
            cluster_name: "c",
            role: labels::ROLE_WORKER,
            network: "kind",
            recorded: None,
            provisioned_on: true,
        }
    }

    fn foreign() -> ContainerInfo {
        ContainerInfo {
            name: "c-m".into(),
            state: Some(ContainerState::Running),
            ..Default::default()
        }
    }

    #[test]
    fn paused_and_restarting_nodes_are_kept() {
        for state in [
            ContainerState::Running,
            ContainerState::Paused,
            ContainerState::Restarting,
        ] {
            let c = ours(state);
            assert_eq!(
                provisioning(found(Some(c.clone()), &OWNER), true),
                Provisioning::Use(c.clone()),
                "{state:?} before provisioning"
            );
            assert_eq!(
                provisioned(found(Some(c.clone()), &OWNER)),
                Provisioned::Alive(c),
                "{state:?} after provisioning"
            );
        }
    }

    #[test]
    fn a_node_being_removed_is_never_started_but_counts_as_missing() {
        let c = ours(ContainerState::Removing);
        assert_eq!(found(Some(c.clone()), &OWNER), Found::Missing);
        for began in [false, true] {
            assert_eq!(
                provisioning(found(Some(c.clone()), &OWNER), began),
                Provisioning::Create
            );
        }
        assert_eq!(
            provisioned(found(Some(c.clone()), &OWNER)),
            Provisioned::Gone
        );
        let claim = worker_claim();
        assert_eq!(
            provisioned(found_or_adopted(Some(c), &OWNER, &claim)),
            Provisioned::Gone
        );
    }

    #[test]
    fn stopped_nodes_are_recreated_before_provisioning_and_started_after() {
        for state in [
            ContainerState::Exited,
            ContainerState::Created,
            ContainerState::Dead,
        ] {
            let c = ours(state);
            let expected = if state == ContainerState::Created {
                // Never started: nothing ran in it (its creator died between create and start).
                Provisioning::Start(c.clone())
            } else {
                Provisioning::Recreate
            };
            assert_eq!(
                provisioning(found(Some(c.clone()), &OWNER), false),
                expected,
                "{state:?} before provisioning"
            );
            assert_eq!(
                provisioned(found(Some(c.clone()), &OWNER)),
                Provisioned::Start(c)
            );
        }
    }

    #[test]
    fn an_upstream_node_of_this_machine_is_adopted_anything_else_conflicts() {
        let upstream = |cluster: &str| ContainerInfo {
            id: "id-1".into(),
            name: "c-m".into(),
            state: Some(ContainerState::Running),
            labels: BTreeMap::from([
                (labels::KIND_CLUSTER.to_string(), cluster.to_string()),
                (
                    labels::KIND_ROLE.to_string(),
                    labels::ROLE_WORKER.to_string(),
                ),
            ]),
            networks: vec!["kind".into()],
            ..Default::default()
        };
        let claim = worker_claim();
        let c = upstream("c");
        assert_eq!(
            provisioned(found_or_adopted(Some(c.clone()), &OWNER, &claim)),
            Provisioned::Alive(c)
        );
        // Same name, another cluster's labels: still a conflict.
        assert!(matches!(
            provisioned(found_or_adopted(Some(upstream("other")), &OWNER, &claim)),
            Provisioned::Conflict(why) if why.contains("other")
        ));
        // No labels at all: a conflict too.
        assert!(matches!(
            provisioned(found_or_adopted(Some(foreign()), &OWNER, &claim)),
            Provisioned::Conflict(_)
        ));
        // capd-rs's own container of another machine: its owner reason.
        let theirs = ContainerInfo {
            labels: labels::container_labels(
                &labels::Owner {
                    name: "n",
                    uid: "u2",
                    ..OWNER
                },
                labels::ROLE_WORKER,
                &BTreeMap::new(),
            ),
            ..upstream("c")
        };
        assert!(matches!(
            provisioned(found_or_adopted(Some(theirs), &OWNER, &claim)),
            Provisioned::Conflict(why) if why.contains("DockerMachine n")
        ));
    }

    #[test]
    fn a_foreign_container_is_never_reported_as_ours() {
        assert!(matches!(
            provisioning(found(Some(foreign()), &OWNER), false),
            Provisioning::Conflict(_)
        ));
        assert!(matches!(
            provisioned(found(Some(foreign()), &OWNER)),
            Provisioned::Conflict(_)
        ));
        assert_eq!(provisioned(found(None, &OWNER)), Provisioned::Gone);
        assert_eq!(
            provisioning(found(None, &OWNER), false),
            Provisioning::Create
        );
    }

    #[test]
    fn a_node_that_stopped_during_its_bootstrap_is_reported_not_recreated() {
        let mut c = ours(ContainerState::Exited);
        c.exit_code = Some(0);
        assert_eq!(
            provisioning(found(Some(c.clone()), &OWNER), true),
            Provisioning::StoppedDuringBootstrap(c.clone())
        );
        let never_ran = ours(ContainerState::Created);
        assert_eq!(
            provisioning(found(Some(never_ran.clone()), &OWNER), true),
            Provisioning::Start(never_ran),
            "nothing ran in a container that never started"
        );
        let m = stopped_during_bootstrap_message("c-m", &c);
        assert!(
            m.contains("exit code 0") && m.contains("stopped twice while its bootstrap"),
            "{m}"
        );
        // Tried again only once the inputs change.
        let before = bootstrap_inputs(Some(1), "boot");
        assert!(!retry_after_stop(
            Some(&before),
            &bootstrap_inputs(Some(1), "boot")
        ));
        assert!(
            !retry_after_stop(None, &before),
            "nothing recorded: nothing to retry"
        );
        assert!(retry_after_stop(
            Some(&before),
            &bootstrap_inputs(Some(2), "boot")
        ));
        assert!(retry_after_stop(
            Some(&before),
            &bootstrap_inputs(Some(1), "boot-2")
        ));
    }
}
