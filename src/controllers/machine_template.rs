//! The machine templates' controller (DockerMachineTemplate, DevMachineTemplate): it writes
//! `status.capacity` (`cpu`, `memory`) from the engine's host, as upstream CAPD does, so that
//! cluster-autoscaler can scale a MachineDeployment up from zero machines (it reads a machine's
//! size from its infrastructure template). Every node container shares the engine's host, so
//! that host is the capacity. Status only: no finalizer, no containers, nothing read from the
//! template but its current capacity; the host is read again every resync period (its memory
//! can change).
use std::{collections::BTreeMap, sync::Arc};

use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::controller::Action,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::kit::{Shared, error::Result};
use crate::{
    api::{DockerMachineTemplate, dev::DevMachineTemplate},
    docker::{ContainerRuntime, HostCapacity},
};

/// A machine template kind: both share the status type.
pub trait Template:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    fn capacity(&self) -> Option<&BTreeMap<String, Value>>;
}

impl Template for DockerMachineTemplate {
    fn capacity(&self) -> Option<&BTreeMap<String, Value>> {
        self.status.as_ref()?.capacity.as_ref()
    }
}

impl Template for DevMachineTemplate {
    fn capacity(&self) -> Option<&BTreeMap<String, Value>> {
        self.status.as_ref()?.capacity.as_ref()
    }
}

/// `status.capacity` for a host: `cpu` a plain count, `memory` the bytes as Kubernetes writes a
/// binary-unit Quantity (as upstream's `resource.NewQuantity(MemTotal, BinarySI)` serializes).
pub fn capacity(host: HostCapacity) -> BTreeMap<String, Value> {
    BTreeMap::from([
        ("cpu".to_string(), Value::String(host.cpus.to_string())),
        (
            "memory".to_string(),
            Value::String(binary_quantity(host.memory_bytes)),
        ),
    ])
}

/// The canonical form of a whole number of bytes in binary units: the largest of Ki, Mi, Gi,
/// Ti, Pi, Ei that divides it exactly, none below 1024 or when 1024 does not divide it.
pub fn binary_quantity(bytes: u64) -> String {
    const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if bytes < 1024 {
        return bytes.to_string();
    }
    let (mut n, mut suffix) = (bytes, "");
    for s in SUFFIXES {
        if n % 1024 != 0 {
            break;
        }
        n /= 1024;
        suffix = s;
    }
    format!("{n}{suffix}")
}

/// The status merge patch that makes `current` into `desired`, or `None` when they are equal.
/// Keys we do not set (someone added them by hand) are removed, as upstream replaces the map.
pub fn capacity_patch(
    current: Option<&BTreeMap<String, Value>>,
    desired: &BTreeMap<String, Value>,
) -> Option<Value> {
    if current == Some(desired) {
        return None;
    }
    let mut map: serde_json::Map<String, Value> = desired
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for k in current.into_iter().flat_map(BTreeMap::keys) {
        map.entry(k.clone()).or_insert(Value::Null);
    }
    Some(json!({ "status": { "capacity": map } }))
}

/// The status patch a template with `current` capacity needs, from the host as `runtime` reports
/// it now (`None`: nothing to write).
pub async fn needed_patch(
    runtime: &dyn ContainerRuntime,
    current: Option<&BTreeMap<String, Value>>,
) -> Result<Option<Value>> {
    let host = runtime.host_capacity().await?;
    Ok(capacity_patch(current, &capacity(host)))
}

/// One pass: read the host, write the capacity if it differs, look again after the resync.
pub async fn reconcile<K: Template>(obj: Arc<K>, shared: Arc<Shared>) -> Result<Action> {
    if let Some(patch) = needed_patch(shared.runtime.as_ref(), obj.capacity()).await? {
        let api: Api<K> =
            Api::namespaced(shared.client.clone(), &obj.namespace().unwrap_or_default());
        match api
            .patch_status(
                &obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            // Deleted meanwhile: nothing left to describe.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
            Ok(_) => {}
        }
    }
    Ok(Action::requeue(shared.settings.resync))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::kit::error::Error;

    #[test]
    fn memory_is_written_in_binary_units_as_kubernetes_does() {
        assert_eq!(binary_quantity(0), "0");
        assert_eq!(binary_quantity(1000), "1000");
        assert_eq!(binary_quantity(1024), "1Ki");
        assert_eq!(binary_quantity(1025), "1025");
        assert_eq!(binary_quantity(16 << 30), "16Gi");
        // A typical MemTotal: whole KiB, not whole MiB.
        assert_eq!(binary_quantity(8_237_142_016), "8044084Ki");
        assert_eq!(binary_quantity(1 << 60), "1Ei");
        assert_eq!(binary_quantity(1 << 62), "4Ei");
    }

    #[test]
    fn capacity_is_cpu_and_memory_as_strings() {
        let c = capacity(HostCapacity {
            cpus: 4,
            memory_bytes: 2 << 30,
        });
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!({"cpu": "4", "memory": "2Gi"})
        );
    }

    #[test]
    fn the_patch_is_sent_only_when_the_capacity_differs_and_replaces_the_map() {
        let desired = capacity(HostCapacity {
            cpus: 2,
            memory_bytes: 1 << 30,
        });
        assert_eq!(capacity_patch(Some(&desired), &desired), None);
        assert_eq!(
            capacity_patch(None, &desired),
            Some(json!({"status": {"capacity": {"cpu": "2", "memory": "1Gi"}}}))
        );
        let mut old = desired.clone();
        old.insert("memory".into(), json!("2Gi"));
        old.insert("nvidia.com/gpu".into(), json!("1"));
        assert_eq!(
            capacity_patch(Some(&old), &desired),
            Some(json!({"status": {"capacity": {
                "cpu": "2", "memory": "1Gi", "nvidia.com/gpu": null
            }}}))
        );
    }

    #[tokio::test]
    async fn the_host_is_read_on_every_pass_and_an_unavailable_engine_is_a_retryable_error() {
        use crate::docker::{RuntimeError, fake::FakeRuntime};
        let rt = FakeRuntime::default();
        rt.set_capacity(Some(HostCapacity {
            cpus: 8,
            memory_bytes: 4 << 30,
        }));
        let first = needed_patch(&rt, None).await.unwrap().unwrap();
        assert_eq!(
            first["status"]["capacity"],
            json!({"cpu": "8", "memory": "4Gi"})
        );
        let written: BTreeMap<String, Value> =
            serde_json::from_value(first["status"]["capacity"].clone()).unwrap();
        assert_eq!(needed_patch(&rt, Some(&written)).await.unwrap(), None);
        // The host's memory changed: the next pass writes it.
        rt.set_capacity(Some(HostCapacity {
            cpus: 8,
            memory_bytes: 6 << 30,
        }));
        let next = needed_patch(&rt, Some(&written)).await.unwrap().unwrap();
        assert_eq!(next["status"]["capacity"]["memory"], json!("6Gi"));
        rt.set_capacity(None);
        let err = needed_patch(&rt, Some(&written)).await.unwrap_err();
        assert!(matches!(err, Error::Runtime(RuntimeError::Unavailable(_))));
        assert_eq!(err.kind(), "docker_unavailable");
    }
}
