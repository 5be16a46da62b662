//! `cluster.x-k8s.io/v1beta2` Cluster, the fields we read.
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::{CapiCondition, ContractRef};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Cluster",
    namespaced,
    status = "ClusterStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    #[serde(default)]
    pub paused: Option<bool>,
    #[serde(default)]
    pub cluster_network: Option<ClusterNetwork>,
    #[serde(default)]
    pub control_plane_endpoint: Option<Endpoint>,
    #[serde(default)]
    pub control_plane_ref: Option<ContractRef>,
    #[serde(default)]
    pub infrastructure_ref: Option<ContractRef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetwork {
    #[serde(default)]
    pub pods: Option<NetworkRanges>,
    #[serde(default)]
    pub services: Option<NetworkRanges>,
    #[serde(default)]
    pub service_domain: Option<String>,
    #[serde(default)]
    pub api_server_port: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRanges {
    #[serde(default)]
    pub cidr_blocks: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Endpoint {
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub port: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    #[serde(default)]
    pub initialization: Option<ClusterInitialization>,
    #[serde(default)]
    pub conditions: Option<Vec<CapiCondition>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInitialization {
    #[serde(default)]
    pub infrastructure_provisioned: Option<bool>,
    #[serde(default)]
    pub control_plane_initialized: Option<bool>,
}

/// IP family of a workload cluster, from its pod and service CIDRs (upstream's rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpFamily {
    V4,
    V6,
    Dual,
}

impl Cluster {
    /// `spec.controlPlaneEndpoint` once set (a host and a port): what CAPI copied from the
    /// infrastructure object, and what every client of the workload cluster dials.
    pub fn endpoint(&self) -> Option<(&str, i32)> {
        let e = self.spec.control_plane_endpoint.as_ref()?;
        let host = e.host.as_deref().filter(|h| !h.is_empty())?;
        Some((host, e.port.filter(|p| *p != 0)?))
    }

    pub fn is_paused(&self) -> bool {
        self.spec.paused == Some(true)
    }

    pub fn infrastructure_provisioned(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.infrastructure_provisioned)
            == Some(true)
    }

    pub fn control_plane_initialized(&self) -> bool {
        let status = self.status.as_ref();
        status
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.control_plane_initialized)
            == Some(true)
            || status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "ControlPlaneInitialized" && c.status == "True")
                })
    }

    /// The IP family; a mix of v4 pods and v6 services (or the reverse) is an error, as upstream.
    pub fn ip_family(&self) -> Result<IpFamily, String> {
        let net = self.spec.cluster_network.as_ref();
        let family = |r: Option<&NetworkRanges>| -> Option<IpFamily> {
            let blocks = &r?.cidr_blocks;
            let v6 = blocks.iter().filter(|b| b.contains(':')).count();
            match (blocks.len() - v6, v6) {
                (0, 0) => None,
                (_, 0) => Some(IpFamily::V4),
                (0, _) => Some(IpFamily::V6),
                _ => Some(IpFamily::Dual),
            }
        };
        let pods = family(net.and_then(|n| n.pods.as_ref()));
        let services = family(net.and_then(|n| n.services.as_ref()));
        match (pods, services) {
            (None, None) => Ok(IpFamily::V4),
            (Some(f), None) | (None, Some(f)) => Ok(f),
            (Some(a), Some(b)) if a == b => Ok(a),
            (Some(a), Some(b)) => Err(format!(
                "pods and services IP families differ ({a:?} vs {b:?}) in Cluster.spec.clusterNetwork"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(pods: &[&str], services: &[&str]) -> Cluster {
        let ranges = |b: &[&str]| {
            Some(NetworkRanges {
                cidr_blocks: b.iter().map(|s| s.to_string()).collect(),
            })
        };
        let mut c = Cluster::new("c", ClusterSpec::default());
        c.spec.cluster_network = Some(ClusterNetwork {
            pods: ranges(pods),
            services: ranges(services),
            ..Default::default()
        });
        c
    }

    #[test]
    fn ip_family_rules() {
        assert_eq!(cluster(&[], &[]).ip_family(), Ok(IpFamily::V4));
        assert_eq!(
            cluster(&["192.168.0.0/16"], &["10.128.0.0/12"]).ip_family(),
            Ok(IpFamily::V4)
        );
        assert_eq!(cluster(&["fd00::/48"], &[]).ip_family(), Ok(IpFamily::V6));
        assert_eq!(
            cluster(
                &["192.168.0.0/16", "fd00::/48"],
                &["10.0.0.0/12", "fd01::/108"]
            )
            .ip_family(),
            Ok(IpFamily::Dual)
        );
        assert!(
            cluster(&["192.168.0.0/16"], &["fd01::/108"])
                .ip_family()
                .is_err()
        );
    }

    #[test]
    fn reads_v1beta2_json_leniently() {
        let c: Cluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"paused": true, "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": "c"},
                     "topology": {"classRef": {"name": "x"}}, "somethingNew": 1},
            "status": {"initialization": {"infrastructureProvisioned": true},
                       "conditions": [{"type": "ControlPlaneInitialized", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "X"}]}
        }))
        .unwrap();
        assert!(c.is_paused() && c.infrastructure_provisioned() && c.control_plane_initialized());
        let r = c.spec.infrastructure_ref.unwrap();
        assert_eq!(
            r.name_if("infrastructure.cluster.x-k8s.io", "DockerCluster"),
            Some("c")
        );
        assert_eq!(
            r.name_if("infrastructure.cluster.x-k8s.io", "DockerMachine"),
            None
        );
    }
}
