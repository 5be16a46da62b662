//! Upstream CAPD's rewrite of the kubeadm config file CABPK writes, made for kind-style nodes: a
//! node is a container on a shared host (shared disk, maybe swap, maybe cgroup v1), so the kubelet
//! and kube-proxy must not manage what belongs to the host.
//!
//! Pure text in, text out. The content holds bootstrap tokens and certificate keys: errors name
//! the file and a position, never a value.
use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};

use super::yaml::kind;
use super::{BootstrapError, Format, NodeOptions};

/// Where CABPK's cloud-config writes the config for `kubeadm init` and for `kubeadm join`.
const CLOUD_CONFIG_PATHS: &[&str] = &[
    "/run/kubeadm/kubeadm.yaml",
    "/run/kubeadm/kubeadm-join-config.yaml",
];
/// Where CABPK's Ignition format writes it, for init and join alike.
const IGNITION_PATH: &str = "/etc/kubeadm.yml";

/// The node image runs containerd; kubeadm would otherwise guess among the sockets it finds.
pub(crate) const CRI_SOCKET: &str = "unix:///var/run/containerd/containerd.sock";

const KUBEADM_GROUP: &str = "kubeadm.k8s.io/";
const KUBE_PROXY_GROUP: &str = "kubeproxy.config.k8s.io/";
const KUBE_PROXY_API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";

/// Whether `path` (normalized) is the kubeadm config file of bootstrap data in `format`.
pub(crate) fn is_config_path(format: Format, path: &str) -> bool {
    match format {
        Format::CloudConfig => CLOUD_CONFIG_PATHS.contains(&path),
        Format::Ignition => path == IGNITION_PATH,
    }
}

/// The kubelet flags every node gets, in the order they are added. An existing arg with the same
/// name is overridden: these are what make the kubelet work inside a container at all.
fn kubelet_args(options: &NodeOptions) -> Vec<(&'static str, &'static str)> {
    let mut args = vec![
        // The kubelet sees the host's disk (the images live in the host's storage): never garbage
        // collect images or evict pods because the host's disk fills up.
        ("image-gc-high-threshold", "100"),
        (
            "eviction-hard",
            "nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%",
        ),
        // The host may have swap on; the node cannot turn it off.
        ("fail-swap-on", "false"),
    ];
    if !options.old_kind_image {
        // Pods go under /kubelet, apart from the node's own services: the node image's
        // entrypoint creates that cgroup, as kind's does since v0.20.
        args.push(("cgroup-root", "/kubelet"));
        // Where containerd runs in the node's systemd, for the kubelet's runtime stats.
        args.push(("runtime-cgroups", "/system.slice/containerd.service"));
    }
    if options.cgroup_v1 {
        // kubelet 1.35 refuses to start on a cgroup v1 host unless told otherwise; the node
        // shares the host's cgroup version.
        args.push(("fail-cgroupv1", "false"));
    }
    args
}

/// How `nodeRegistration.kubeletExtraArgs` is shaped in an apiVersion.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ArgsShape {
    /// v1beta3: `{flag: value}`.
    Map,
    /// v1beta4: `[{name: flag, value: value}]`.
    List,
}

/// Rewrite a kubeadm config file (multi-document YAML) for a kind-style node:
/// - every `InitConfiguration` / `JoinConfiguration` (kubeadm.k8s.io v1beta3 or v1beta4) gets the
///   containerd `criSocket` when it has none, and the kubelet args of [`kubelet_args`];
/// - a file with an `InitConfiguration` gets `conntrack.maxPerCore: 0` in its
///   `KubeProxyConfiguration` (added when missing): kube-proxy must not try to set the host-wide
///   `nf_conntrack_max` from inside a container, which fails.
///
/// Other documents and fields are kept; empty documents are dropped. A file with nothing to
/// rewrite is returned as is. `location` names the file in errors.
pub(crate) fn rewrite(
    location: &str,
    content: &[u8],
    options: &NodeOptions,
) -> Result<Vec<u8>, BootstrapError> {
    let text = std::str::from_utf8(content).map_err(|e| {
        invalid(
            location,
            format!(
                "kubeadm config is not valid UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ),
        )
    })?;
    let mut docs = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        // Only the position: the parser's message may quote the content.
        let doc = Value::deserialize(document).map_err(|e| {
            let at = e
                .location()
                .map(|l| format!(" at line {} column {}", l.line(), l.column()))
                .unwrap_or_default();
            invalid(location, format!("kubeadm config is not valid YAML{at}"))
        })?;
        if !doc.is_null() {
            docs.push(doc);
        }
    }

    let args = kubelet_args(options);
    let mut changed = false;
    let mut has_init = false;
    for (i, doc) in docs.iter_mut().enumerate() {
        let Value::Mapping(doc) = doc else { continue };
        let (Some(api_version), Some(kind)) =
            (str_field(doc, "apiVersion"), str_field(doc, "kind"))
        else {
            continue;
        };
        if !api_version.starts_with(KUBEADM_GROUP)
            || !matches!(kind, "InitConfiguration" | "JoinConfiguration")
        {
            continue;
        }
        // Owned: the document is changed below.
        let (api_version, kind) = (api_version.to_string(), kind.to_string());
        let version = &api_version[KUBEADM_GROUP.len()..];
        has_init |= kind == "InitConfiguration";
        let shape = match version {
            "v1beta3" => ArgsShape::Map,
            "v1beta4" => ArgsShape::List,
            // Older versions are refused by current kubeadm; newer ones are not guessed at.
            _ => continue,
        };
        let at = |reason: String| {
            invalid(
                location,
                format!("kubeadm config document {} ({kind}): {reason}", i + 1),
            )
        };
        node_registration(doc, shape, &args, &api_version).map_err(at)?;
        changed = true;
    }

    if has_init {
        let mut found = false;
        for (i, doc) in docs.iter_mut().enumerate() {
            let Value::Mapping(doc) = doc else { continue };
            let is_kube_proxy = str_field(doc, "kind") == Some("KubeProxyConfiguration")
                && str_field(doc, "apiVersion").is_some_and(|v| v.starts_with(KUBE_PROXY_GROUP));
            if is_kube_proxy {
                found = true;
                child_mapping(doc, "conntrack")
                    .map_err(|reason| {
                        invalid(
                            location,
                            format!(
                                "kubeadm config document {} (KubeProxyConfiguration): {reason}",
                                i + 1
                            ),
                        )
                    })?
                    .insert("maxPerCore".into(), 0.into());
            }
        }
        if !found {
            let mut conntrack = Mapping::new();
            conntrack.insert("maxPerCore".into(), 0.into());
            let mut doc = Mapping::new();
            doc.insert("apiVersion".into(), KUBE_PROXY_API_VERSION.into());
            doc.insert("kind".into(), "KubeProxyConfiguration".into());
            doc.insert("conntrack".into(), conntrack.into());
            docs.push(doc.into());
        }
        changed = true;
    }

    if !changed {
        return Ok(content.to_vec());
    }
    let mut out = String::new();
    for doc in &docs {
        out.push_str("---\n");
        out.push_str(
            &emit(doc).map_err(|()| {
                invalid(location, "kubeadm config could not be written back as YAML")
            })?,
        );
    }
    Ok(out.into_bytes())
}

fn invalid(location: &str, reason: impl Into<String>) -> BootstrapError {
    BootstrapError::Invalid {
        location: location.to_string(),
        reason: reason.into(),
    }
}

fn str_field<'a>(m: &'a Mapping, key: &str) -> Option<&'a str> {
    m.get(key).and_then(Value::as_str)
}

/// `parent[key]` as a mapping, created when absent or null. The error names the key, not content.
fn child_mapping<'a>(parent: &'a mut Mapping, key: &str) -> Result<&'a mut Mapping, String> {
    let slot = parent.entry(key.into()).or_insert(Value::Null);
    if slot.is_null() {
        *slot = Mapping::new().into();
    }
    match slot {
        Value::Mapping(m) => Ok(m),
        other => Err(format!("{key} must be a mapping, found {}", kind(other))),
    }
}

fn node_registration(
    doc: &mut Mapping,
    shape: ArgsShape,
    args: &[(&str, &str)],
    api_version: &str,
) -> Result<(), String> {
    let reg = child_mapping(doc, "nodeRegistration")?;
    let has_socket = match reg.get("criSocket") {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.trim().is_empty(),
        Some(_) => true,
    };
    if !has_socket {
        reg.insert("criSocket".into(), CRI_SOCKET.into());
    }

    let slot = reg.entry("kubeletExtraArgs".into()).or_insert(Value::Null);
    if slot.is_null() {
        *slot = match shape {
            ArgsShape::Map => Mapping::new().into(),
            ArgsShape::List => Value::Sequence(Vec::new()),
        };
    }
    match (shape, slot) {
        (ArgsShape::Map, Value::Mapping(map)) => {
            for (name, value) in args {
                // An existing key keeps its place.
                map.insert((*name).into(), (*value).into());
            }
        }
        (ArgsShape::List, Value::Sequence(list)) => {
            for (name, value) in args {
                let mut found = false;
                for entry in list.iter_mut() {
                    if let Value::Mapping(entry) = entry
                        && str_field(entry, "name") == Some(name)
                    {
                        entry.insert("value".into(), (*value).into());
                        found = true;
                    }
                }
                if !found {
                    let mut entry = Mapping::new();
                    entry.insert("name".into(), (*name).into());
                    entry.insert("value".into(), (*value).into());
                    list.push(entry.into());
                }
            }
        }
        (shape, other) => {
            let expected = match shape {
                ArgsShape::Map => "a mapping of flag to value",
                ArgsShape::List => "a list of {name, value}",
            };
            return Err(format!(
                "nodeRegistration.kubeletExtraArgs must be {expected} in {api_version}, found {}",
                kind(other)
            ));
        }
    }
    Ok(())
}

/// One document as YAML that kubeadm reads back the same. kubeadm parses YAML 1.1 (go-yaml v2),
/// where a plain `yes`, `off` or `1_000` is not a string; the serializer writes YAML 1.2 and would
/// leave such strings unquoted. A document holding one is written as JSON instead (also YAML),
/// where every string is quoted.
fn emit(doc: &Value) -> Result<String, ()> {
    if has_yaml11_ambiguous_string(doc)
        && let Ok(mut json) = serde_json::to_string_pretty(doc)
    {
        json.push('\n');
        return Ok(json);
    }
    serde_yaml_ng::to_string(doc).map_err(|_| ())
}

fn has_yaml11_ambiguous_string(v: &Value) -> bool {
    match v {
        Value::String(s) => is_yaml11_ambiguous(s),
        Value::Sequence(items) => items.iter().any(has_yaml11_ambiguous_string),
        Value::Mapping(m) => m
            .iter()
            .any(|(k, v)| has_yaml11_ambiguous_string(k) || has_yaml11_ambiguous_string(v)),
        Value::Tagged(t) => has_yaml11_ambiguous_string(&t.value),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// Plain scalars YAML 1.1 reads as booleans or numbers but YAML 1.2 (serde_yaml_ng) as strings.
fn is_yaml11_ambiguous(s: &str) -> bool {
    const BOOLS: &[&str] = &["y", "yes", "n", "no", "on", "off"];
    if BOOLS.iter().any(|b| s.eq_ignore_ascii_case(b)) {
        return true;
    }
    // go-yaml v2 drops underscores in numbers.
    s.contains('_') && {
        let digits = s.replace('_', "");
        digits.parse::<f64>().is_ok() || digits.parse::<i64>().is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_35_INIT: &str = "---
apiVersion: kubeadm.k8s.io/v1beta4
apiServer:
  certSANs:
  - localhost
  - 127.0.0.1
controlPlaneEndpoint: 172.18.0.2:6443
controllerManager:
  extraArgs:
  - name: enable-hostpath-provisioner
    value: \"true\"
etcd:
  local:
    dataDir: /var/lib/etcd
kind: ClusterConfiguration
kubernetesVersion: v1.35.0
networking:
  podSubnet: 192.168.0.0/16
---
apiVersion: kubeadm.k8s.io/v1beta4
bootstrapTokens:
- groups:
  - system:bootstrappers:kubeadm:default-node-token
  token: abcdef.0123456789abcdef
  ttl: 24h0m0s
kind: InitConfiguration
localAPIEndpoint: {}
nodeRegistration:
  imagePullPolicy: IfNotPresent
  kubeletExtraArgs:
  - name: node-labels
    value: tier=control
  - name: eviction-hard
    value: nodefs.available<10%
  - name: v
    value: \"4\"
  taints: null
";

    const JOIN: &str = "---
apiVersion: kubeadm.k8s.io/v1beta4
discovery:
  bootstrapToken:
    apiServerEndpoint: 172.18.0.2:6443
    token: abcdef.0123456789abcdef
kind: JoinConfiguration
nodeRegistration:
  criSocket: unix:///run/custom/cri.sock
  kubeletExtraArgs:
  - name: fail-swap-on
    value: \"true\"
";

    const V1BETA3_JOIN: &str = "apiVersion: kubeadm.k8s.io/v1beta3
kind: JoinConfiguration
nodeRegistration:
  criSocket: ''
  kubeletExtraArgs:
    node-labels: pool=a
    cgroup-root: /elsewhere
";

    fn run(text: &str, cgroup_v1: bool) -> Vec<Value> {
        let options = NodeOptions {
            cgroup_v1,
            ..NodeOptions::default()
        };
        run_with(text, &options)
    }

    fn run_with(text: &str, options: &NodeOptions) -> Vec<Value> {
        let out = rewrite("f", text.as_bytes(), options).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with("---\n"), "{out}");
        serde_yaml_ng::Deserializer::from_str(&out)
            .map(|d| Value::deserialize(d).unwrap())
            .collect()
    }

    fn list_args(doc: &Value) -> Vec<(String, String)> {
        doc["nodeRegistration"]["kubeletExtraArgs"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_string(),
                    e["value"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    const EVICTION: &str = "nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%";

    #[test]
    fn v1beta4_init_file() {
        let docs = run(V1_35_INIT, false);
        assert_eq!(docs.len(), 3, "{docs:?}");
        // ClusterConfiguration untouched.
        let cluster: Value = serde_yaml_ng::Deserializer::from_str(V1_35_INIT)
            .map(|d| Value::deserialize(d).unwrap())
            .next()
            .unwrap();
        assert_eq!(docs[0], cluster);
        let init = &docs[1];
        assert_eq!(init["kind"], "InitConfiguration");
        assert_eq!(
            init["bootstrapTokens"][0]["token"],
            "abcdef.0123456789abcdef"
        );
        assert_eq!(init["localAPIEndpoint"], Value::Mapping(Mapping::new()));
        assert_eq!(init["nodeRegistration"]["taints"], Value::Null);
        assert_eq!(init["nodeRegistration"]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(init["nodeRegistration"]["criSocket"], CRI_SOCKET);
        assert_eq!(
            list_args(init),
            pairs(&[
                ("node-labels", "tier=control"),
                ("eviction-hard", EVICTION),
                ("v", "4"),
                ("image-gc-high-threshold", "100"),
                ("fail-swap-on", "false"),
                ("cgroup-root", "/kubelet"),
                ("runtime-cgroups", "/system.slice/containerd.service"),
            ])
        );
        // Field order kept.
        let keys: Vec<&str> = init
            .as_mapping()
            .unwrap()
            .keys()
            .map(|k| k.as_str().unwrap())
            .collect();
        assert_eq!(
            keys,
            [
                "apiVersion",
                "bootstrapTokens",
                "kind",
                "localAPIEndpoint",
                "nodeRegistration"
            ]
        );
        let proxy = &docs[2];
        assert_eq!(proxy["apiVersion"], KUBE_PROXY_API_VERSION);
        assert_eq!(proxy["kind"], "KubeProxyConfiguration");
        assert_eq!(proxy["conntrack"]["maxPerCore"], 0);
    }

    #[test]
    fn cgroup_v1_adds_fail_cgroupv1() {
        let off = run(V1_35_INIT, false);
        assert!(!list_args(&off[1]).iter().any(|(n, _)| n == "fail-cgroupv1"));
        let on = run(V1_35_INIT, true);
        assert_eq!(
            list_args(&on[1]).last().unwrap(),
            &("fail-cgroupv1".to_string(), "false".to_string())
        );
        let v3 = run(V1BETA3_JOIN, true);
        assert_eq!(
            v3[0]["nodeRegistration"]["kubeletExtraArgs"]["fail-cgroupv1"],
            "false"
        );
    }

    #[test]
    fn an_old_kind_image_keeps_the_kubelets_own_cgroups() {
        let old = NodeOptions {
            old_kind_image: true,
            ..NodeOptions::default()
        };
        // The same args as a current image's, in the same order, but those two.
        let cgroups = |name: &str| name == "cgroup-root" || name == "runtime-cgroups";
        let mut current = list_args(&run(JOIN, false)[0]);
        assert_eq!(current.iter().filter(|(n, _)| cgroups(n)).count(), 2);
        current.retain(|(n, _)| !cgroups(n));
        assert_eq!(list_args(&run_with(JOIN, &old)[0]), current);
        // A value the data sets is not overridden either.
        let v3 = &run_with(V1BETA3_JOIN, &old)[0]["nodeRegistration"]["kubeletExtraArgs"];
        assert_eq!(v3["cgroup-root"], "/elsewhere");
        assert_eq!(v3["runtime-cgroups"], Value::Null);
    }

    #[test]
    fn join_file_keeps_cri_socket_and_gets_no_kube_proxy() {
        let docs = run(JOIN, false);
        assert_eq!(
            docs.len(),
            1,
            "no KubeProxyConfiguration for a join: {docs:?}"
        );
        let join = &docs[0];
        assert_eq!(
            join["nodeRegistration"]["criSocket"],
            "unix:///run/custom/cri.sock"
        );
        assert_eq!(
            join["discovery"]["bootstrapToken"]["token"],
            "abcdef.0123456789abcdef"
        );
        assert_eq!(
            list_args(join),
            pairs(&[
                ("fail-swap-on", "false"),
                ("image-gc-high-threshold", "100"),
                ("eviction-hard", EVICTION),
                ("cgroup-root", "/kubelet"),
                ("runtime-cgroups", "/system.slice/containerd.service"),
            ])
        );
    }

    #[test]
    fn v1beta3_map_args() {
        let docs = run(V1BETA3_JOIN, false);
        let reg = &docs[0]["nodeRegistration"];
        assert_eq!(reg["criSocket"], CRI_SOCKET, "empty criSocket is filled");
        let args: Vec<(String, String)> = reg["kubeletExtraArgs"]
            .as_mapping()
            .unwrap()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().unwrap().to_string(),
                    v.as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            args,
            pairs(&[
                ("node-labels", "pool=a"),
                ("cgroup-root", "/kubelet"),
                ("image-gc-high-threshold", "100"),
                ("eviction-hard", EVICTION),
                ("fail-swap-on", "false"),
                ("runtime-cgroups", "/system.slice/containerd.service"),
            ])
        );
    }

    #[test]
    fn missing_node_registration_is_created() {
        let docs = run(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n",
            false,
        );
        assert_eq!(docs[0]["nodeRegistration"]["criSocket"], CRI_SOCKET);
        assert_eq!(list_args(&docs[0]).len(), 5);
        let docs = run(
            "apiVersion: kubeadm.k8s.io/v1beta3\nkind: JoinConfiguration\nnodeRegistration:\n  kubeletExtraArgs:\n",
            false,
        );
        assert_eq!(
            docs[0]["nodeRegistration"]["kubeletExtraArgs"]["fail-swap-on"],
            "false"
        );
    }

    #[test]
    fn existing_kube_proxy_configuration_is_updated() {
        let text = format!(
            "{V1_35_INIT}---\napiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nconntrack:\n  maxPerCore: 32768\n  min: 131072\n---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
        );
        let docs = run(&text, false);
        assert_eq!(docs.len(), 4, "no second KubeProxyConfiguration: {docs:?}");
        assert_eq!(docs[2]["kind"], "KubeProxyConfiguration");
        assert_eq!(docs[2]["mode"], "ipvs");
        assert_eq!(docs[2]["conntrack"]["maxPerCore"], 0);
        assert_eq!(docs[2]["conntrack"]["min"], 131072);
        assert_eq!(docs[3]["kind"], "KubeletConfiguration");
        assert_eq!(docs[3]["cgroupDriver"], "systemd");
        assert!(docs[3].get("nodeRegistration").is_none());
    }

    #[test]
    fn empty_documents_are_dropped() {
        let docs = run(
            "---\n---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\n---\n",
            false,
        );
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0]["kind"], "JoinConfiguration");
    }

    #[test]
    fn nothing_to_do_is_returned_verbatim() {
        let text =
            "# comment kept\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n";
        let out = rewrite("f", text.as_bytes(), &NodeOptions::default()).unwrap();
        assert_eq!(out, text.as_bytes());
        // Unknown kubeadm versions are not guessed at.
        let text = "apiVersion: kubeadm.k8s.io/v1beta9\nkind: JoinConfiguration\n";
        let out = rewrite("f", text.as_bytes(), &NodeOptions::default()).unwrap();
        assert_eq!(out, text.as_bytes());
    }

    #[test]
    fn invalid_yaml_names_the_file_not_the_content() {
        let text = "---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nbootstrapTokens:\n- token: abcdef.0123456789abcdef\n  ttl: [24h\n";
        let e = rewrite(
            "write_files[3] (/run/kubeadm/kubeadm.yaml)",
            text.as_bytes(),
            &NodeOptions::default(),
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with(
                "write_files[3] (/run/kubeadm/kubeadm.yaml): kubeadm config is not valid YAML at line "
            ),
            "{msg}"
        );
        assert!(!msg.contains("abcdef"), "{msg}");
        assert!(!msg.contains("24h"), "{msg}");

        let e = rewrite("f", b"kind: \xff", &NodeOptions::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "f: kubeadm config is not valid UTF-8 (invalid byte at offset 6)"
        );
    }

    #[test]
    fn wrong_shapes_are_named() {
        let e = rewrite(
            "f",
            b"apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\nnodeRegistration:\n  kubeletExtraArgs:\n    v: 's3cret'\n",
            &NodeOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "f: kubeadm config document 1 (JoinConfiguration): nodeRegistration.kubeletExtraArgs must be a list of {name, value} in kubeadm.k8s.io/v1beta4, found a mapping"
        );
        let e = rewrite(
            "f",
            b"apiVersion: kubeadm.k8s.io/v1beta3\nkind: InitConfiguration\nnodeRegistration: [x]\n",
            &NodeOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "f: kubeadm config document 1 (InitConfiguration): nodeRegistration must be a mapping, found a list"
        );
    }

    #[test]
    fn yaml11_ambiguous_strings_stay_strings() {
        let text = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\nnodeRegistration:\n  kubeletExtraArgs:\n  - name: some-flag\n    value: \"off\"\n";
        let out = rewrite("f", text.as_bytes(), &NodeOptions::default()).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("\"value\": \"off\""), "{out}");
        let docs = run(text, false);
        assert_eq!(list_args(&docs[0])[0], ("some-flag".into(), "off".into()));
        assert!(is_yaml11_ambiguous("Yes"));
        assert!(is_yaml11_ambiguous("1_000"));
        assert!(!is_yaml11_ambiguous("a_b"));
        assert!(!is_yaml11_ambiguous("none"));
    }

    #[test]
    fn config_paths() {
        assert!(is_config_path(
            Format::CloudConfig,
            "/run/kubeadm/kubeadm.yaml"
        ));
        assert!(is_config_path(
            Format::CloudConfig,
            "/run/kubeadm/kubeadm-join-config.yaml"
        ));
        assert!(!is_config_path(Format::CloudConfig, "/etc/kubeadm.yml"));
        assert!(is_config_path(Format::Ignition, "/etc/kubeadm.yml"));
        assert!(!is_config_path(
            Format::Ignition,
            "/run/kubeadm/kubeadm.yaml"
        ));
    }
}
