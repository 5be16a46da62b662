//! Swapping the Docker* CRDs between the providers' phases: both define the same kinds with
//! different schemas, so each runs with its own. Replacing a CRD keeps its stored objects'
//! storage version (v1beta2 in both), and the bench's namespaces are gone by then anyway.
use std::{path::Path, time::Duration};

use anyhow::{Context, Result, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{DeleteParams, PostParams},
};
use serde::Deserialize;

/// Every CRD in the YAML files of `dir` (several documents per file allowed).
pub fn load_dir(dir: &Path) -> Result<Vec<CustomResourceDefinition>> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let value = serde_yaml_ng::Value::deserialize(doc)?;
            if value.get("kind").and_then(|k| k.as_str()) == Some("CustomResourceDefinition") {
                out.push(
                    serde_yaml_ng::from_value(value)
                        .with_context(|| format!("CRD in {}", file.display()))?,
                );
            }
        }
    }
    if out.is_empty() {
        bail!("no CustomResourceDefinition in {}", dir.display());
    }
    Ok(out)
}

/// The contract labels upstream's release kustomization adds to its CRDs (its `config/crd/bases`
/// lack them): CAPI core resolves an `apiGroup`-only reference, such as a Cluster's
/// `infrastructureRef`, through them. One `cluster.x-k8s.io/<version>: <version>` per served
/// version.
pub fn label_contracts(crds: &mut [CustomResourceDefinition]) {
    for crd in crds {
        let served: Vec<String> = crd
            .spec
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.clone())
            .collect();
        let labels = crd.metadata.labels.get_or_insert_with(Default::default);
        for v in served {
            labels.insert(format!("cluster.x-k8s.io/{v}"), v);
        }
    }
}

/// Each CRD as the plane has it, where it has it: the bench must leave the plane as it found
/// it. `hack/plane.sh` points ours at the manager's conversion webhook, which the bases lack:
/// restored from the bases, the plane would convert v1beta1 by strategy None and the next test
/// run's v1beta1 objects would lose what only the webhook converts.
pub async fn as_live(client: &Client, crds: &mut [CustomResourceDefinition]) -> Result<()> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in crds {
        let name = crd.metadata.name.clone().context("CRD name")?;
        if let Some(mut live) = api.get_opt(&name).await? {
            live.metadata.resource_version = None;
            live.metadata.managed_fields = None;
            live.status = None;
            *crd = live;
        }
    }
    Ok(())
}

/// Creates or replaces each CRD and waits until all are Established.
pub async fn install(client: &Client, crds: &[CustomResourceDefinition]) -> Result<()> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in crds {
        let name = crd.metadata.name.clone().context("CRD name")?;
        let mut crd = crd.clone();
        match api.get_opt(&name).await? {
            Some(current) => {
                crd.metadata.resource_version = current.metadata.resource_version;
                api.replace(&name, &PostParams::default(), &crd).await?;
            }
            None => {
                api.create(&PostParams::default(), &crd).await?;
            }
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for crd in crds {
        let name = crd.metadata.name.as_deref().unwrap_or_default();
        loop {
            let established = api
                .get(name)
                .await?
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                bail!("CRD {name} not Established after 60 s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// Deletes the CRDs of `extra` whose names `keep` does not have (the kinds only one provider
/// defines).
pub async fn remove_extra(
    client: &Client,
    extra: &[CustomResourceDefinition],
    keep: &[CustomResourceDefinition],
) -> Result<()> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in extra {
        let name = crd.metadata.name.as_deref().unwrap_or_default();
        let only_there = keep
            .iter()
            .all(|k| k.metadata.name.as_deref() != Some(name));
        if !only_there {
            continue;
        }
        match api.delete(name, &DeleteParams::default()).await {
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
            Ok(_) => {}
        }
    }
    Ok(())
}
