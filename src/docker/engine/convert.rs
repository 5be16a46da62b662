//! Conversions between our container types and the engine's: the create body from a
//! [`ContainerSpec`], and [`ContainerInfo`] from inspect and list answers.
use super::*;

/// Mounts of user-named paths: structured, never parsed from a string.
fn structured_mounts(mounts: &[BindMount]) -> Vec<Mount> {
    mounts
        .iter()
        .filter(|m| !m.create_host_path)
        .map(|m| Mount {
            typ: Some(MountType::BIND),
            source: Some(m.host_path.clone()),
            target: Some(m.container_path.clone()),
            read_only: Some(m.read_only),
            ..Default::default()
        })
        .collect()
}

/// Mounts of the manager's own fixed paths, in the `Binds` form: the only one with which an
/// engine older than API 1.44 creates a missing host path.
fn legacy_binds(mounts: &[BindMount]) -> Vec<String> {
    mounts
        .iter()
        .filter(|m| m.create_host_path)
        .map(|m| {
            let ro = if m.read_only { ":ro" } else { "" };
            format!("{}:{}{ro}", m.host_path, m.container_path)
        })
        .collect()
}

/// The capability an engine refused to drop because its environment does not offer it
/// (`invalid CapDrop: ... not available in the current environment: "CAP_X"`), when `privilege`
/// drops it: asking again without it changes nothing (an engine from API 1.4x leaves it out of
/// "ALL" by itself). `None` for any other error, or a capability not in the drop list.
pub(super) fn unavailable_cap(privilege: &NodePrivilege, err: &RuntimeError) -> Option<String> {
    let NodePrivilege::AllCapabilities { drop } = privilege else {
        return None;
    };
    let RuntimeError::Rejected(message) = err else {
        return None;
    };
    let (_, rest) = message.split_once("invalid CapDrop:")?;
    let cap = bare_cap(rest.rsplit('"').nth(1)?);
    drop.iter().any(|c| bare_cap(c) == cap).then_some(cap)
}

/// `privilege` without `caps` in its drop list, if it drops any of them.
pub(super) fn without_caps(privilege: &NodePrivilege, caps: &[String]) -> Option<NodePrivilege> {
    let NodePrivilege::AllCapabilities { drop } = privilege else {
        return None;
    };
    let kept: Vec<String> = drop
        .iter()
        .filter(|c| !caps.iter().any(|l| bare_cap(l) == bare_cap(c)))
        .cloned()
        .collect();
    (kept.len() < drop.len()).then_some(NodePrivilege::AllCapabilities { drop: kept })
}

/// `cap_sys_resource`, `CAP_SYS_RESOURCE` and `SYS_RESOURCE` are one capability.
fn bare_cap(c: &str) -> String {
    let c = c.trim().to_ascii_uppercase();
    c.strip_prefix("CAP_").map(str::to_string).unwrap_or(c)
}

pub(super) fn create_body(spec: &ContainerSpec) -> ContainerCreateBody {
    let mut port_bindings: PortMap = HashMap::new();
    let mut exposed: Vec<String> = Vec::new();
    for p in &spec.ports {
        let binding = PortBinding {
            host_ip: Some(p.host_ip.clone()),
            // An empty HostPort lets the engine pick a free port.
            host_port: Some(p.host_port.map(|n| n.to_string()).unwrap_or_default()),
        };
        port_bindings
            .entry(p.container_port.clone())
            .or_insert_with(|| Some(Vec::new()))
            .get_or_insert_with(Vec::new)
            .push(binding);
        if !exposed.contains(&p.container_port) {
            exposed.push(p.container_port.clone());
        }
    }

    let mut host = HostConfig {
        network_mode: Some(spec.network.clone()),
        binds: Some(legacy_binds(&spec.mounts)).filter(|b| !b.is_empty()),
        mounts: Some(structured_mounts(&spec.mounts)).filter(|m| !m.is_empty()),
        tmpfs: (!spec.tmpfs.is_empty()).then(|| {
            spec.tmpfs
                .iter()
                .map(|t| (t.clone(), String::new()))
                .collect()
        }),
        security_opt: (!spec.security_opt.is_empty()).then(|| spec.security_opt.clone()),
        sysctls: (!spec.sysctls.is_empty()).then(|| {
            spec.sysctls
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        }),
        port_bindings: (!port_bindings.is_empty()).then_some(port_bindings),
        cgroupns_mode: spec
            .cgroupns_private
            .then_some(HostConfigCgroupnsModeEnum::PRIVATE),
        restart_policy: spec.restart_on_failure.map(|n| RestartPolicy {
            name: Some(RestartPolicyNameEnum::ON_FAILURE),
            maximum_retry_count: Some(n),
        }),
        init: Some(false),
        ..Default::default()
    };
    match &spec.privilege {
        NodePrivilege::Privileged => host.privileged = Some(true),
        NodePrivilege::AllCapabilities { drop } => {
            host.cap_add = Some(vec!["ALL".to_string()]);
            host.cap_drop = (!drop.is_empty()).then(|| drop.clone());
            host.device_cgroup_rules = Some(vec!["a *:* rwm".to_string()]);
        }
        NodePrivilege::None => {}
    }

    ContainerCreateBody {
        hostname: (!spec.hostname.is_empty()).then(|| spec.hostname.clone()),
        image: Some(spec.image.clone()),
        labels: Some(
            spec.labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        env: (!spec.env.is_empty()).then(|| spec.env.clone()),
        entrypoint: spec.entrypoint.clone(),
        cmd: spec.cmd.clone(),
        tty: Some(spec.tty),
        exposed_ports: (!exposed.is_empty()).then_some(exposed),
        volumes: (!spec.volumes.is_empty()).then(|| spec.volumes.clone()),
        host_config: Some(host),
        ..Default::default()
    }
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// The endpoint on the network named by the container's network mode, else the first by name.
fn pick_network<'a>(
    networks: Option<&'a HashMap<String, EndpointSettings>>,
    mode: Option<&str>,
) -> Option<&'a EndpointSettings> {
    let networks = networks?;
    if let Some(endpoint) = mode.and_then(|m| networks.get(m)) {
        return Some(endpoint);
    }
    networks.iter().min_by(|a, b| a.0.cmp(b.0)).map(|(_, e)| e)
}

/// Container states as the engine spells them (inspect and list use separate enums with the
/// same strings).
fn state_from_str(s: &str) -> Option<ContainerState> {
    Some(match s {
        "" => return None,
        "created" => ContainerState::Created,
        "running" => ContainerState::Running,
        "paused" => ContainerState::Paused,
        "restarting" => ContainerState::Restarting,
        "removing" => ContainerState::Removing,
        "exited" => ContainerState::Exited,
        "dead" => ContainerState::Dead,
        _ => ContainerState::Unknown,
    })
}

fn state_from_inspect(s: ContainerStateStatusEnum) -> Option<ContainerState> {
    state_from_str(s.as_ref())
}

fn state_from_summary(s: ContainerSummaryStateEnum) -> Option<ContainerState> {
    state_from_str(s.as_ref())
}

fn host_ports_from_map(ports: Option<&PortMap>) -> BTreeMap<String, u16> {
    let mut out = BTreeMap::new();
    for (key, bindings) in ports.into_iter().flatten() {
        let port = bindings
            .iter()
            .flatten()
            .find_map(|b| b.host_port.as_deref().and_then(|p| p.parse::<u16>().ok()));
        if let Some(port) = port {
            out.insert(key.clone(), port);
        }
    }
    out
}

pub(super) fn info_from_inspect(r: ContainerInspectResponse) -> ContainerInfo {
    let mode = r.host_config.as_ref().and_then(|h| h.network_mode.clone());
    let settings = r.network_settings.as_ref();
    let endpoint = pick_network(settings.and_then(|s| s.networks.as_ref()), mode.as_deref());
    let config = r.config.as_ref();
    ContainerInfo {
        id: r.id.clone().unwrap_or_default(),
        name: r
            .name
            .as_deref()
            .unwrap_or_default()
            .trim_start_matches('/')
            .to_string(),
        image: config
            .and_then(|c| c.image.clone())
            .or_else(|| r.image.clone())
            .unwrap_or_default(),
        state: r
            .state
            .as_ref()
            .and_then(|s| s.status)
            .and_then(state_from_inspect),
        labels: config
            .and_then(|c| c.labels.as_ref())
            .map(|l| l.clone().into_iter().collect())
            .unwrap_or_default(),
        ipv4: endpoint.and_then(|e| non_empty(e.ip_address.clone())),
        ipv6: endpoint.and_then(|e| non_empty(e.global_ipv6_address.clone())),
        networks: network_names(settings.and_then(|s| s.networks.as_ref())),
        host_ports: host_ports_from_map(settings.and_then(|s| s.ports.as_ref())),
        exit_code: r.state.as_ref().and_then(|s| s.exit_code),
        started_at: r
            .state
            .as_ref()
            .and_then(|s| engine_time(s.started_at.as_deref())),
        finished_at: r
            .state
            .as_ref()
            .and_then(|s| engine_time(s.finished_at.as_deref())),
    }
}

/// A time as the engine reports it (RFC 3339 with nanoseconds); its zero time
/// (`0001-01-01T00:00:00Z`, never started or never stopped) is `None`.
fn engine_time(raw: Option<&str>) -> Option<chrono::DateTime<chrono::Utc>> {
    let t = chrono::DateTime::parse_from_rfc3339(raw?).ok()?;
    (t.timestamp() > 0).then(|| t.with_timezone(&chrono::Utc))
}

pub(super) fn info_from_summary(s: ContainerSummary) -> ContainerInfo {
    let mode = s.host_config.as_ref().and_then(|h| h.network_mode.clone());
    let endpoint = pick_network(
        s.network_settings
            .as_ref()
            .and_then(|n| n.networks.as_ref()),
        mode.as_deref(),
    );
    let mut host_ports = BTreeMap::new();
    for p in s.ports.iter().flatten() {
        if let Some(public) = p.public_port {
            let proto = p
                .typ
                .map(|t| t.to_string())
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| "tcp".into());
            host_ports
                .entry(format!("{}/{proto}", p.private_port))
                .or_insert(public);
        }
    }
    ContainerInfo {
        id: s.id.clone().unwrap_or_default(),
        name: s
            .names
            .as_ref()
            .and_then(|n| n.first())
            .map(|n| n.trim_start_matches('/').to_string())
            .unwrap_or_default(),
        image: s.image.clone().unwrap_or_default(),
        state: s.state.and_then(state_from_summary),
        labels: s
            .labels
            .map(|l| l.into_iter().collect())
            .unwrap_or_default(),
        ipv4: endpoint.and_then(|e| non_empty(e.ip_address.clone())),
        ipv6: endpoint.and_then(|e| non_empty(e.global_ipv6_address.clone())),
        networks: network_names(
            s.network_settings
                .as_ref()
                .and_then(|n| n.networks.as_ref()),
        ),
        host_ports,
        ..Default::default()
    }
}

/// The names of the networks a container is attached to, sorted.
fn network_names(networks: Option<&HashMap<String, EndpointSettings>>) -> Vec<String> {
    let mut names: Vec<String> = networks
        .into_iter()
        .flatten()
        .map(|(n, _)| n.clone())
        .collect();
    names.sort();
    names
}

/// What the network `n` says about `address`: in one of its subnets or not, and the name of
/// the endpoint whose address (`172.18.0.2/16`, `fc00::2/64`) it is.
pub(super) fn address_use(n: NetworkInspect, address: IpAddr) -> AddressUse {
    let on_network = n
        .ipam
        .and_then(|i| i.config)
        .into_iter()
        .flatten()
        .filter_map(|c| c.subnet?.parse::<ipnet::IpNet>().ok())
        .any(|subnet| subnet.contains(&address));
    if !on_network {
        return AddressUse::OffNetwork;
    }
    let holds = |cidr: &Option<String>| {
        cidr.as_deref()
            .and_then(|c| c.split('/').next())
            .and_then(|ip| ip.parse::<IpAddr>().ok())
            == Some(address)
    };
    n.containers
        .into_iter()
        .flatten()
        .map(|(_, e)| e)
        .find(|e| holds(&e.ipv4_address) || holds(&e.ipv6_address))
        .map_or(AddressUse::Free, |e| {
            AddressUse::HeldBy(e.name.unwrap_or_default())
        })
}

/// The host's capacity from `docker info`'s `NCPU` and `MemTotal`. An engine that leaves either
/// out (or reports no CPU or memory) has not told us the capacity: an error to retry, never a
/// zero that would tell the autoscaler a machine fits nothing.
pub(super) fn host_capacity(
    ncpu: Option<i64>,
    mem_total: Option<i64>,
) -> RuntimeResult<HostCapacity> {
    match (ncpu, mem_total) {
        (Some(cpus), Some(memory)) if cpus > 0 && memory > 0 => Ok(HostCapacity {
            cpus: cpus as u64,
            memory_bytes: memory as u64,
        }),
        _ => Err(RuntimeError::Unavailable(format!(
            "engine info without the host's capacity (NCPU {ncpu:?}, MemTotal {mem_total:?})"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_on_the_network_free_or_held_by_an_endpoint() {
        use bollard::models::{EndpointResource, Ipam, IpamConfig};
        let endpoint = |name: &str, v4: &str, v6: &str| {
            let cidr = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
            EndpointResource {
                name: Some(name.into()),
                ipv4_address: cidr(v4),
                ipv6_address: cidr(v6),
                ..Default::default()
            }
        };
        let network = || NetworkInspect {
            ipam: Some(Ipam {
                config: Some(
                    ["172.18.0.0/16", "fc00:f853:ccd:e793::/64"]
                        .map(|s| IpamConfig {
                            subnet: Some(s.into()),
                            ..Default::default()
                        })
                        .into(),
                ),
                ..Default::default()
            }),
            containers: Some(HashMap::from([
                ("id1".into(), endpoint("c-lb", "172.18.0.2/16", "")),
                (
                    "id2".into(),
                    endpoint("c-cp", "172.18.0.20/16", "fc00:f853:ccd:e793::3/64"),
                ),
            ])),
            ..Default::default()
        };
        let of = |s: &str| address_use(network(), s.parse().unwrap());
        assert_eq!(of("172.18.0.2"), AddressUse::HeldBy("c-lb".into()));
        // A prefix of another address is not that address.
        assert_eq!(of("172.18.0.20"), AddressUse::HeldBy("c-cp".into()));
        assert_eq!(
            of("fc00:f853:ccd:e793::3"),
            AddressUse::HeldBy("c-cp".into())
        );
        assert_eq!(of("172.18.0.3"), AddressUse::Free);
        // A host set by the user outside the network (a forwarded port, say).
        assert_eq!(of("10.0.0.1"), AddressUse::OffNetwork);
        assert_eq!(of("127.0.0.1"), AddressUse::OffNetwork);
    }

    #[test]
    fn host_capacity_needs_both_numbers() {
        assert_eq!(
            host_capacity(Some(8), Some(16 << 30)).unwrap(),
            HostCapacity {
                cpus: 8,
                memory_bytes: 16 << 30
            }
        );
        for (ncpu, mem) in [
            (None, Some(1)),
            (Some(1), None),
            (Some(0), Some(1)),
            (Some(1), Some(-1)),
        ] {
            assert!(matches!(
                host_capacity(ncpu, mem),
                Err(RuntimeError::Unavailable(_))
            ));
        }
    }
    use crate::docker::runtime::PortPublish;

    fn spec(privilege: NodePrivilege) -> ContainerSpec {
        ContainerSpec {
            name: "n".into(),
            hostname: "n".into(),
            image: "i".into(),
            labels: BTreeMap::from([("k".to_string(), "v".to_string())]),
            env: vec![],
            entrypoint: None,
            cmd: None,
            network: "kind".into(),
            ports: vec![
                PortPublish {
                    container_port: "6443/tcp".into(),
                    host_ip: "0.0.0.0".into(),
                    host_port: None,
                },
                PortPublish {
                    container_port: "6443/tcp".into(),
                    host_ip: "::".into(),
                    host_port: Some(7000),
                },
            ],
            tmpfs: vec!["/tmp".into()],
            volumes: vec!["/var".into()],
            mounts: vec![],
            privilege,
            security_opt: vec![],
            sysctls: BTreeMap::new(),
            cgroupns_private: true,
            tty: true,
            restart_on_failure: Some(1),
        }
    }

    #[test]
    fn user_paths_are_structured_mounts_and_fixed_paths_binds() {
        let mut s = spec(NodePrivilege::None);
        let mount = |host: &str, create_host_path| BindMount {
            host_path: host.into(),
            container_path: "/in".into(),
            read_only: true,
            create_host_path,
        };
        s.mounts = vec![mount("/a:/etc:rw", false), mount("/lib/modules", true)];
        let host = create_body(&s).host_config.unwrap();
        assert_eq!(host.binds, Some(vec!["/lib/modules:/in:ro".to_string()]));
        let mounts = host.mounts.unwrap();
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].typ, Some(MountType::BIND));
        assert_eq!(mounts[0].source.as_deref(), Some("/a:/etc:rw"));
        assert_eq!(mounts[0].target.as_deref(), Some("/in"));
        assert_eq!(mounts[0].read_only, Some(true));
        // Nothing to mount: neither field is sent.
        let host = create_body(&spec(NodePrivilege::None)).host_config.unwrap();
        assert_eq!((host.binds, host.mounts), (None, None));
    }

    #[test]
    fn a_cap_the_engine_lacks_leaves_the_drop_list_and_nothing_else_does() {
        let all = |drop: &[&str]| NodePrivilege::AllCapabilities {
            drop: drop.iter().map(|c| c.to_string()).collect(),
        };
        let refused = RuntimeError::Rejected(
            "create container n: invalid CapDrop: capability not supported by your kernel or \
             not available in the current environment: \"CAP_SYS_RESOURCE\""
                .into(),
        );
        let lacked = unavailable_cap(&all(&["SYS_RESOURCE", "NET_RAW"]), &refused);
        assert_eq!(lacked.as_deref(), Some("SYS_RESOURCE"));
        let lacked = [lacked.unwrap()];
        assert_eq!(
            without_caps(&all(&["SYS_RESOURCE", "NET_RAW"]), &lacked),
            Some(all(&["NET_RAW"]))
        );
        assert_eq!(
            without_caps(&all(&["cap_sys_resource"]), &lacked),
            Some(all(&[]))
        );
        assert_eq!(without_caps(&all(&["NET_RAW"]), &lacked), None);
        assert_eq!(without_caps(&NodePrivilege::Privileged, &lacked), None);
        // Not in the list: asking again would be refused again.
        assert_eq!(unavailable_cap(&all(&["NET_RAW"]), &refused), None);
        assert_eq!(unavailable_cap(&NodePrivilege::Privileged, &refused), None);
        let other = RuntimeError::Rejected("create container n: invalid mount".into());
        assert_eq!(unavailable_cap(&all(&["SYS_RESOURCE"]), &other), None);
        let unavailable = RuntimeError::Unavailable(refused.to_string());
        assert_eq!(unavailable_cap(&all(&["SYS_RESOURCE"]), &unavailable), None);
    }

    #[test]
    fn create_body_maps_the_spec() {
        let body = create_body(&spec(NodePrivilege::AllCapabilities {
            drop: vec!["SYS_RESOURCE".into()],
        }));
        let host = body.host_config.clone().unwrap();
        assert_eq!(host.cap_add, Some(vec!["ALL".to_string()]));
        assert_eq!(host.cap_drop, Some(vec!["SYS_RESOURCE".to_string()]));
        assert_eq!(
            host.device_cgroup_rules,
            Some(vec!["a *:* rwm".to_string()])
        );
        assert_eq!(host.privileged, None);
        assert_eq!(
            host.cgroupns_mode,
            Some(HostConfigCgroupnsModeEnum::PRIVATE)
        );
        assert_eq!(host.network_mode.as_deref(), Some("kind"));
        let bindings = host.port_bindings.unwrap()["6443/tcp"].clone().unwrap();
        assert_eq!(bindings.len(), 2);
        assert_eq!(bindings[0].host_port.as_deref(), Some(""));
        assert_eq!(bindings[1].host_port.as_deref(), Some("7000"));
        assert_eq!(body.exposed_ports, Some(vec!["6443/tcp".to_string()]));
        assert_eq!(host.tmpfs.unwrap()["/tmp"], "");
        assert_eq!(host.restart_policy.unwrap().maximum_retry_count, Some(1));
        // The wire form the engine expects for anonymous volumes and exposed ports.
        let json = serde_json::to_value(&body).unwrap();
        assert_eq!(json["Volumes"], serde_json::json!({"/var": {}}));
        assert_eq!(json["ExposedPorts"], serde_json::json!({"6443/tcp": {}}));
        assert!(json.get("Entrypoint").is_none());

        let privileged = create_body(&spec(NodePrivilege::Privileged))
            .host_config
            .unwrap();
        assert_eq!(privileged.privileged, Some(true));
        assert_eq!(privileged.cap_add, None);
    }

    #[test]
    fn network_choice_prefers_network_mode() {
        let ep = |ip: &str| EndpointSettings {
            ip_address: Some(ip.into()),
            ..Default::default()
        };
        let nets = HashMap::from([
            ("a".to_string(), ep("10.0.0.1")),
            ("kind".to_string(), ep("172.18.0.2")),
        ]);
        assert_eq!(
            pick_network(Some(&nets), Some("kind"))
                .unwrap()
                .ip_address
                .as_deref(),
            Some("172.18.0.2")
        );
        assert_eq!(
            pick_network(Some(&nets), Some("default"))
                .unwrap()
                .ip_address
                .as_deref(),
            Some("10.0.0.1")
        );
        assert!(pick_network(None, None).is_none());
    }
}
