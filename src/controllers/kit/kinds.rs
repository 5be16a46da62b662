//! Which family of kinds a set of controllers serves. The same three controllers run twice: for
//! the Docker* kinds, and for the Dev* kinds, whose objects they reconcile as views of the
//! Docker* objects they describe ([`crate::api::dev`]). What differs between the two runs is
//! here: the kind names (in spans, container labels, Events, owner references and the
//! references CAPI objects hold) and the resources every write goes to.
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta},
};

use crate::api::{GROUP, VERSION};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kinds {
    pub cluster: &'static str,
    pub machine: &'static str,
    pub pool: &'static str,
}

pub const DOCKER: Kinds = Kinds {
    cluster: "DockerCluster",
    machine: "DockerMachine",
    pool: "DockerMachinePool",
};

pub const DEV: Kinds = Kinds {
    cluster: "DevCluster",
    machine: "DevMachine",
    pool: "DevMachinePool",
};

impl Kinds {
    pub fn is_dev(&self) -> bool {
        *self == DEV
    }

    /// The v1beta2 resource of `kind` (one of ours: the plural is the lowercase kind + "s").
    pub fn resource(kind: &str) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, VERSION, kind),
            &format!("{}s", kind.to_lowercase()),
        )
    }

    /// Writes to objects of `kind` in `namespace`.
    pub fn api(kind: &str, client: &Client, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), namespace, &Self::resource(kind))
    }

    /// What an Event about an object of `kind` refers to: the object, not one version of it
    /// (the recorder counts a repeated Event in a series only when the reference is equal).
    pub fn reference(kind: &str, meta: &ObjectMeta) -> ObjectReference {
        ObjectReference {
            api_version: Some(format!("{GROUP}/{VERSION}")),
            kind: Some(kind.into()),
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_our_plurals() {
        assert_eq!(Kinds::resource(DEV.machine).plural, "devmachines");
        assert_eq!(Kinds::resource(DOCKER.pool).plural, "dockermachinepools");
        assert_eq!(
            Kinds::resource(DEV.cluster).api_version,
            "infrastructure.cluster.x-k8s.io/v1beta2"
        );
    }
}
