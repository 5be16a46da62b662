//! What to do with a machine's node container, decided purely from what the engine reports and
//! whose it is. The controller acts on the answer; these functions never touch Docker.
use crate::docker::{ContainerInfo, ContainerState, labels};

/// The container with the machine's name, as far as this machine is concerned.
#[derive(Clone, Debug, PartialEq)]
pub enum Found {
    Missing,
    /// Someone else's (another object, another cluster, not capd-rs): never touched.
    Foreign(String),
    Ours(ContainerInfo),
}

pub fn found(existing: Option<ContainerInfo>, owner: &labels::Owner<'_>) -> Found {
    match existing {
        None => Found::Missing,
        Some(c) => match labels::ownership(&c.labels, owner) {
            labels::Ownership::Foreign(why) => Found::Foreign(why),
            // Ours, or ours before a re-create/move of the DockerMachine: adopt it.
            _ => Found::Ours(c),
        },
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
    /// Ours, stopped, and no bootstrap of this process is running in it: what ran inside is
    /// unknown, so start over in a new container.
    Recreate,
    Conflict(String),
}

/// What to do with the container found for a machine whose bootstrap is not running (the
/// caller does not look while one runs: that container is the bootstrap's).
pub fn provisioning(found: Found) -> Provisioning {
    match found {
        Found::Missing => Provisioning::Create,
        Found::Foreign(why) => Provisioning::Conflict(why),
        Found::Ours(c) if c.is_alive() => Provisioning::Use(c),
        Found::Ours(c) if c.state == Some(ContainerState::Created) => Provisioning::Start(c),
        Found::Ours(_) => Provisioning::Recreate,
    }
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
                provisioning(found(Some(c.clone()), &OWNER)),
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
                provisioning(found(Some(c.clone()), &OWNER)),
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
    fn a_foreign_container_is_never_reported_as_ours() {
        assert!(matches!(
            provisioning(found(Some(foreign()), &OWNER)),
            Provisioning::Conflict(_)
        ));
        assert!(matches!(
            provisioned(found(Some(foreign()), &OWNER)),
            Provisioned::Conflict(_)
        ));
        assert_eq!(provisioned(found(None, &OWNER)), Provisioned::Gone);
        assert_eq!(provisioning(found(None, &OWNER)), Provisioning::Create);
    }
}
