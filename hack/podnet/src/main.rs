//! podnet: a tiny pod network for multi-node workload clusters (a kindnetd stand-in).
//!
//! Runs as a privileged hostNetwork DaemonSet on every node. From the Node objects it derives
//! 1. the CNI config of its own node (`ptp` + `host-local` over the node's podCIDRs, then
//!    `portmap`), which containerd picks up from the CNI config directory;
//! 2. one route per other node's podCIDR via that node's InternalIP: all nodes sit on one Docker
//!    bridge, so every next hop is directly reachable and no encapsulation is needed;
//! 3. masquerading of pod traffic that leaves the pod network (to node IPs or the outside).
//!
//! The desired state is a pure function of the node list (`desired`); the IO layer only applies
//! differences and retries failed commands at the next resync. Deliberately self-contained (no
//! dependency on the `capd` library) to keep the image small.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    net::IpAddr,
    path::{Path, PathBuf},
    process::{ExitCode, Stdio},
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, reflector, watcher},
};
use serde_json::json;
use tokio::{
    io::AsyncWriteExt,
    process::Command,
    signal::unix::{SignalKind, signal},
};
use tracing::{debug, error, info, warn};
use tracing_subscriber::EnvFilter;

const CONFLIST: &str = "10-podnet.conflist";
const MASQ_CHAIN: &str = "PODNET-MASQ";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Family {
    V4,
    V6,
}

impl Family {
    /// Family of a well-formed CIDR; anything else is ignored rather than handed to `ip`.
    fn of_cidr(cidr: &str) -> Option<Family> {
        let (addr, prefix) = cidr.split_once('/')?;
        let prefix: u8 = prefix.parse().ok()?;
        match addr.parse().ok()? {
            IpAddr::V4(_) if prefix <= 32 => Some(Family::V4),
            IpAddr::V6(_) if prefix <= 128 => Some(Family::V6),
            _ => None,
        }
    }

    fn of_ip(ip: &IpAddr) -> Family {
        if ip.is_ipv4() { Family::V4 } else { Family::V6 }
    }

    fn default_route(self) -> &'static str {
        match self {
            Family::V4 => "0.0.0.0/0",
            Family::V6 => "::/0",
        }
    }

    fn ip_flag(self) -> &'static str {
        match self {
            Family::V4 => "-4",
            Family::V6 => "-6",
        }
    }

    fn iptables(self) -> &'static str {
        match self {
            Family::V4 => "iptables",
            Family::V6 => "ip6tables",
        }
    }
}

/// Why the own node is (not) configured; logged once per change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum Status {
    #[default]
    NodeNotFound,
    NoPodCidr,
    Ready(Vec<String>),
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::NodeNotFound => {
                f.write_str("own Node object not found; CNI config not written yet")
            }
            Status::NoPodCidr => f.write_str(
                "own Node has no spec.podCIDR(s): the cluster was created without a pod CIDR \
                 (kube-controller-manager is not allocating node CIDRs, see kubeadm \
                 networking.podSubnet / --allocate-node-cidrs); CNI config not written, pods on \
                 this node cannot start",
            ),
            Status::Ready(cidrs) => write!(f, "pod network configured for {}", cidrs.join(",")),
        }
    }
}

/// Masquerade rules of one family: pods of `sources` reaching anything outside `exempt` (all pod
/// CIDRs of the cluster) are masqueraded.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Masq {
    sources: BTreeSet<String>,
    exempt: BTreeSet<String>,
}

#[derive(Debug, Default, PartialEq)]
struct Desired {
    status: Status,
    /// Content of `10-podnet.conflist`; `None` until the own node has a podCIDR.
    cni_config: Option<String>,
    /// Other nodes' pod CIDR -> their InternalIP.
    routes: BTreeMap<String, IpAddr>,
    masq: BTreeMap<Family, Masq>,
}

/// The node's pod CIDRs: `spec.podCIDRs` (dual-stack aware), falling back to `spec.podCIDR`.
fn pod_cidrs(node: &Node) -> Vec<(String, Family)> {
    let spec = node.spec.as_ref();
    let list = spec
        .and_then(|s| s.pod_cidrs.clone())
        .filter(|l| !l.is_empty());
    let list = list.or_else(|| spec.and_then(|s| s.pod_cidr.clone()).map(|c| vec![c]));
    list.unwrap_or_default()
        .into_iter()
        .filter_map(|c| Family::of_cidr(&c).map(|f| (c, f)))
        .collect()
}

fn internal_ip(node: &Node, family: Family) -> Option<IpAddr> {
    let addresses = node.status.as_ref()?.addresses.as_ref()?;
    addresses
        .iter()
        .filter(|a| a.type_ == "InternalIP")
        .filter_map(|a| a.address.parse::<IpAddr>().ok())
        .find(|ip| Family::of_ip(ip) == family)
}

fn desired(own: &str, nodes: &[Node], mtu: u32) -> Desired {
    let mut all: BTreeMap<Family, BTreeSet<String>> = BTreeMap::new();
    let mut routes = BTreeMap::new();
    for node in nodes {
        let is_own = node.metadata.name.as_deref() == Some(own);
        for (cidr, family) in pod_cidrs(node) {
            all.entry(family).or_default().insert(cidr.clone());
            // A next hop must be of the CIDR's family: a node without an InternalIP of that
            // family (e.g. IPv6-only addresses) cannot be routed to, so that CIDR is skipped.
            if let Some(ip) = internal_ip(node, family).filter(|_| !is_own) {
                routes.insert(cidr, ip);
            }
        }
    }
    let mut d = Desired {
        routes,
        ..Desired::default()
    };
    let Some(me) = nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(own))
    else {
        return d;
    };
    let mine = pod_cidrs(me);
    if mine.is_empty() {
        d.status = Status::NoPodCidr;
        return d;
    }
    for (cidr, family) in &mine {
        let exempt = all[family].clone();
        let m = d.masq.entry(*family).or_insert_with(|| Masq {
            sources: BTreeSet::new(),
            exempt,
        });
        m.sources.insert(cidr.clone());
    }
    d.cni_config = Some(cni_config(&mine, mtu));
    d.status = Status::Ready(mine.into_iter().map(|(c, _)| c).collect());
    d
}

/// cniVersion 0.4.0: the newest version the bookworm plugins (1.1.1) support. Masquerading is
/// ours (`ipMasq: false`) so that pod-to-pod traffic across nodes keeps its source IP.
fn cni_config(cidrs: &[(String, Family)], mtu: u32) -> String {
    let ranges: Vec<_> = cidrs
        .iter()
        .map(|(c, _)| json!([{ "subnet": c }]))
        .collect();
    let families: BTreeSet<Family> = cidrs.iter().map(|(_, f)| *f).collect();
    let routes: Vec<_> = families
        .iter()
        .map(|f| json!({ "dst": f.default_route() }))
        .collect();
    let conf = json!({
        "cniVersion": "0.4.0",
        "name": "podnet",
        "plugins": [
            {
                "type": "ptp",
                "ipMasq": false,
                "mtu": mtu,
                "ipam": { "type": "host-local", "ranges": ranges, "routes": routes },
            },
            { "type": "portmap", "capabilities": { "portMappings": true } },
        ],
    });
    format!("{conf:#}\n")
}

/// Routes to (re)install and CIDRs to delete to get from `applied` to `desired`. A changed next
/// hop is only re-installed (`ip route replace`); only CIDRs that vanished are deleted.
fn diff_routes(
    applied: &BTreeMap<String, IpAddr>,
    desired: &BTreeMap<String, IpAddr>,
) -> (Vec<(String, IpAddr)>, Vec<String>) {
    let add = desired
        .iter()
        .filter(|(cidr, via)| applied.get(*cidr) != Some(via))
        .map(|(c, v)| (c.clone(), *v))
        .collect();
    let del = applied
        .keys()
        .filter(|c| !desired.contains_key(*c))
        .cloned()
        .collect();
    (add, del)
}

// ---------------------------------------------------------------------------------------------
// IO layer

/// Runs a command; `Err` carries its stderr (or the spawn error). Does not log failures, callers
/// decide (an `iptables -C` miss is expected).
async fn exec(program: &str, args: &[&str], stdin: Option<&str>) -> Result<(), String> {
    debug!(program, ?args, "exec");
    let mut cmd = Command::new(program);
    cmd.args(args).stdout(Stdio::null()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().map_err(|e| format!("spawn {program}: {e}"))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())
            .await
            .map_err(|e| format!("write stdin: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| format!("wait {program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `exec` that logs failures; the caller leaves its state unchanged so the next sync retries.
async fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<(), String> {
    let r = exec(program, args, stdin).await;
    if let Err(stderr) = &r {
        warn!(program, ?args, %stderr, "command failed; retrying at next sync");
    }
    r
}

/// Writes via temp file + rename so containerd never loads a half-written config. Returns
/// whether the file changed.
fn write_if_changed(path: &Path, content: &str) -> std::io::Result<bool> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == content) {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // A dot name without a .conf/.conflist/.json suffix: containerd ignores the temp file.
    let tmp = path.with_file_name(format!(".{CONFLIST}.tmp"));
    std::fs::write(&tmp, content)?;
    std::fs::rename(&tmp, path)?;
    Ok(true)
}

/// What this process applied, kept in memory (state is rebuilt idempotently after a restart).
struct Applier {
    own: String,
    conf_path: PathBuf,
    mtu: u32,
    status: Option<Status>,
    routes: BTreeMap<String, IpAddr>,
    /// Per family, the exempt CIDRs the PODNET-MASQ chain was last built with.
    masq: BTreeMap<Family, BTreeSet<String>>,
}

impl Applier {
    /// `full` (periodic resync) also re-installs all routes and re-checks the POSTROUTING jumps,
    /// repairing changes made behind our back; event-driven syncs only apply differences.
    async fn sync(&mut self, nodes: &[Node], full: bool) {
        let d = desired(&self.own, nodes, self.mtu);
        if self.status.as_ref() != Some(&d.status) {
            match d.status {
                Status::Ready(_) => info!(node = %self.own, "{}", d.status),
                _ => warn!(node = %self.own, "{}", d.status),
            }
            self.status = Some(d.status.clone());
        }
        if let Some(conf) = &d.cni_config {
            match write_if_changed(&self.conf_path, conf) {
                Ok(true) => info!(path = %self.conf_path.display(), "wrote CNI config"),
                Ok(false) => {}
                Err(e) => {
                    warn!(path = %self.conf_path.display(), error = %e, "writing CNI config failed")
                }
            }
        }
        self.sync_routes(&d.routes, full).await;
        self.sync_masq(&d.masq, full).await;
    }

    async fn sync_routes(&mut self, desired: &BTreeMap<String, IpAddr>, full: bool) {
        let (mut add, del) = diff_routes(&self.routes, desired);
        if full {
            // `replace` is idempotent, so a resync simply re-installs everything.
            add = desired.iter().map(|(c, v)| (c.clone(), *v)).collect();
        }
        for cidr in del {
            let family = Family::of_cidr(&cidr).unwrap_or(Family::V4);
            match exec("ip", &[family.ip_flag(), "route", "del", &cidr], None).await {
                Ok(()) => info!(%cidr, "route deleted"),
                // ESRCH: the route is already gone, which is what we wanted.
                Err(e) if e.contains("No such process") => {}
                Err(stderr) => {
                    warn!(%cidr, %stderr, "route deletion failed; retrying at next sync");
                    continue;
                }
            }
            self.routes.remove(&cidr);
        }
        for (cidr, via) in add {
            let family = Family::of_ip(&via);
            let via_s = via.to_string();
            let args = [family.ip_flag(), "route", "replace", &cidr, "via", &via_s];
            if run("ip", &args, None).await.is_ok()
                && self.routes.insert(cidr.clone(), via) != Some(via)
            {
                info!(%cidr, %via, "route installed");
            }
        }
    }

    async fn sync_masq(&mut self, desired: &BTreeMap<Family, Masq>, full: bool) {
        for (family, m) in desired {
            let ipt = family.iptables();
            let rebuild = self.masq.get(family) != Some(&m.exempt);
            if rebuild {
                // iptables-restore --noflush: declaring the chain creates or flushes it, and the
                // flush + adds commit atomically, so pods never see a half-built chain.
                let mut rules = format!("*nat\n:{MASQ_CHAIN} - [0:0]\n");
                for cidr in &m.exempt {
                    rules += &format!("-A {MASQ_CHAIN} -d {cidr} -j RETURN\n");
                }
                rules += &format!("-A {MASQ_CHAIN} -j MASQUERADE\nCOMMIT\n");
                if run(
                    &format!("{ipt}-restore"),
                    &["-w", "5", "--noflush"],
                    Some(&rules),
                )
                .await
                .is_err()
                {
                    continue;
                }
                info!(chain = MASQ_CHAIN, ?family, exempt = ?m.exempt, "masquerade chain rebuilt");
                self.masq.insert(*family, m.exempt.clone());
            }
            if rebuild || full {
                for src in &m.sources {
                    let rule = ["POSTROUTING", "-s", src.as_str(), "-j", MASQ_CHAIN];
                    let check = [&["-w", "5", "-t", "nat", "-C"][..], &rule[..]].concat();
                    if exec(ipt, &check, None).await.is_ok() {
                        continue;
                    }
                    let append = [&["-w", "5", "-t", "nat", "-A"][..], &rule[..]].concat();
                    if run(ipt, &append, None).await.is_ok() {
                        info!(source = %src, "POSTROUTING jump to {MASQ_CHAIN} added");
                    }
                }
            }
        }
    }
}

fn env_number<T: std::str::FromStr>(name: &str, default: T) -> Result<T, String> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .map_err(|_| format!("{name}={v:?} is not a valid number")),
        Err(_) => Ok(default),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    match run_main().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(error = %e, "podnet failed");
            ExitCode::FAILURE
        }
    }
}

async fn run_main() -> Result<(), String> {
    let own = std::env::var("NODE_NAME")
        .map_err(|_| "NODE_NAME is required (downward API spec.nodeName)")?;
    let conf_dir = std::env::var("CNI_CONF_DIR").unwrap_or_else(|_| "/etc/cni/net.d".into());
    let resync = Duration::from_secs(env_number("PODNET_RESYNC_SECONDS", 30u64)?.max(1));
    let mtu = env_number("PODNET_MTU", 1500u32)?;
    let client = Client::try_default()
        .await
        .map_err(|e| format!("kube client: {e}"))?;
    info!(node = %own, %conf_dir, ?resync, mtu, "podnet starting");

    let mut applier = Applier {
        own,
        conf_path: Path::new(&conf_dir).join(CONFLIST),
        mtu,
        status: None,
        routes: BTreeMap::new(),
        masq: BTreeMap::new(),
    };
    let (store, writer) = reflector::store::<Node>();
    // default_backoff: an unreachable API server or an expired watch is retried, never fatal.
    let mut events = watcher(Api::<Node>::all(client), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .boxed();
    let mut tick = tokio::time::interval(resync);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sigterm =
        signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM handler: {e}"))?;
    // Until the first complete list the store is empty; syncing then would only log noise.
    let mut listed = false;
    let nodes = || {
        store
            .state()
            .iter()
            .map(|n| Node::clone(n))
            .collect::<Vec<_>>()
    };

    loop {
        tokio::select! {
            _ = sigterm.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = tick.tick() => if listed { applier.sync(&nodes(), true).await },
            event = events.next() => match event {
                Some(Ok(watcher::Event::InitDone)) => {
                    listed = true;
                    applier.sync(&nodes(), true).await;
                }
                Some(Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))) if listed => {
                    applier.sync(&nodes(), false).await;
                }
                // Init/InitApply: a (re)list in progress; the store swaps in at InitDone.
                Some(Ok(_)) => {}
                Some(Err(e)) => warn!(error = %e, "node watch failed; retrying with backoff"),
                None => return Err("node watch stream ended".into()),
            },
        }
    }
    // Routes, rules and the CNI config stay in place on purpose: pods keep working while the
    // DaemonSet pod is replaced, and the successor re-applies the same state idempotently.
    info!("terminating; leaving routes and CNI config in place");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cidrs: &[&str], ips: &[&str]) -> Node {
        let addresses: Vec<_> = ips
            .iter()
            .map(|ip| json!({ "type": "InternalIP", "address": ip }))
            .collect();
        serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "podCIDRs": cidrs },
            "status": { "addresses": addresses },
        }))
        .unwrap()
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn routes(items: &[(&str, &str)]) -> BTreeMap<String, IpAddr> {
        items
            .iter()
            .map(|(c, ip)| (c.to_string(), ip.parse().unwrap()))
            .collect()
    }

    fn conf(d: &Desired) -> serde_json::Value {
        serde_json::from_str(d.cni_config.as_ref().expect("CNI config")).unwrap()
    }

    #[test]
    fn single_node() {
        let d = desired(
            "cp",
            &[node("cp", &["10.244.0.0/24"], &["172.18.0.2"])],
            1500,
        );
        assert_eq!(d.status, Status::Ready(vec!["10.244.0.0/24".into()]));
        assert!(d.routes.is_empty());
        let masq = Masq {
            sources: set(&["10.244.0.0/24"]),
            exempt: set(&["10.244.0.0/24"]),
        };
        assert_eq!(d.masq, BTreeMap::from([(Family::V4, masq)]));
        assert_eq!(
            conf(&d),
            json!({
                "cniVersion": "0.4.0",
                "name": "podnet",
                "plugins": [
                    {
                        "type": "ptp", "ipMasq": false, "mtu": 1500,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{ "subnet": "10.244.0.0/24" }]],
                            "routes": [{ "dst": "0.0.0.0/0" }],
                        },
                    },
                    { "type": "portmap", "capabilities": { "portMappings": true } },
                ],
            })
        );
    }

    #[test]
    fn mtu_is_passed_through() {
        let d = desired("cp", &[node("cp", &["10.244.0.0/24"], &[])], 1400);
        assert_eq!(conf(&d)["plugins"][0]["mtu"], 1400);
    }

    #[test]
    fn three_nodes() {
        let nodes = [
            node("cp", &["10.244.0.0/24"], &["172.18.0.2"]),
            node("w1", &["10.244.1.0/24"], &["172.18.0.3"]),
            node("w2", &["10.244.2.0/24"], &["172.18.0.4"]),
        ];
        let d = desired("w1", &nodes, 1500);
        assert_eq!(
            d.routes,
            routes(&[
                ("10.244.0.0/24", "172.18.0.2"),
                ("10.244.2.0/24", "172.18.0.4")
            ])
        );
        let masq = &d.masq[&Family::V4];
        assert_eq!(masq.sources, set(&["10.244.1.0/24"]));
        assert_eq!(
            masq.exempt,
            set(&["10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"])
        );
        assert_eq!(
            conf(&d)["plugins"][0]["ipam"]["ranges"],
            json!([[{ "subnet": "10.244.1.0/24" }]])
        );
    }

    #[test]
    fn own_node_without_pod_cidr_writes_nothing_but_routes_others() {
        let nodes = [
            node("cp", &[], &["172.18.0.2"]),
            node("w1", &["10.244.1.0/24"], &["172.18.0.3"]),
        ];
        let d = desired("cp", &nodes, 1500);
        assert_eq!(d.status, Status::NoPodCidr);
        assert_eq!(d.cni_config, None);
        assert!(d.masq.is_empty());
        assert_eq!(d.routes, routes(&[("10.244.1.0/24", "172.18.0.3")]));
    }

    #[test]
    fn other_node_without_pod_cidr_gets_no_route() {
        let nodes = [
            node("cp", &["10.244.0.0/24"], &["172.18.0.2"]),
            node("w1", &[], &["172.18.0.3"]),
        ];
        let d = desired("cp", &nodes, 1500);
        assert!(d.routes.is_empty());
        assert_eq!(d.masq[&Family::V4].exempt, set(&["10.244.0.0/24"]));
    }

    #[test]
    fn own_node_missing() {
        let d = desired(
            "cp",
            &[node("w1", &["10.244.1.0/24"], &["172.18.0.3"])],
            1500,
        );
        assert_eq!(d.status, Status::NodeNotFound);
        assert_eq!(d.cni_config, None);
        assert_eq!(d.routes, routes(&[("10.244.1.0/24", "172.18.0.3")]));
    }

    #[test]
    fn falls_back_to_singular_pod_cidr() {
        let mut n = node("cp", &[], &[]);
        n.spec.as_mut().unwrap().pod_cidr = Some("10.244.0.0/24".into());
        let d = desired("cp", &[n], 1500);
        assert_eq!(d.status, Status::Ready(vec!["10.244.0.0/24".into()]));
    }

    #[test]
    fn node_without_internal_ip_gets_no_route() {
        let mut w1 = node("w1", &["10.244.1.0/24"], &[]);
        // Only an ExternalIP: not a next hop on the shared bridge.
        w1.status = serde_json::from_value(
            json!({ "addresses": [{ "type": "ExternalIP", "address": "1.2.3.4" }] }),
        )
        .unwrap();
        let d = desired(
            "cp",
            &[node("cp", &["10.244.0.0/24"], &["172.18.0.2"]), w1],
            1500,
        );
        assert!(d.routes.is_empty());
        // Its CIDR is still pod network: not masqueraded.
        assert!(d.masq[&Family::V4].exempt.contains("10.244.1.0/24"));
    }

    #[test]
    fn dual_stack() {
        let nodes = [
            node(
                "cp",
                &["10.244.0.0/24", "fd00:10:244::/64"],
                &["172.18.0.2", "fc00:f853:ccd:e793::2"],
            ),
            node(
                "w1",
                &["10.244.1.0/24", "fd00:10:244:1::/64"],
                &["172.18.0.3", "fc00:f853:ccd:e793::3"],
            ),
        ];
        let d = desired("cp", &nodes, 1500);
        assert_eq!(
            d.routes,
            routes(&[
                ("10.244.1.0/24", "172.18.0.3"),
                ("fd00:10:244:1::/64", "fc00:f853:ccd:e793::3")
            ])
        );
        assert_eq!(d.masq[&Family::V6].sources, set(&["fd00:10:244::/64"]));
        assert_eq!(
            d.masq[&Family::V6].exempt,
            set(&["fd00:10:244::/64", "fd00:10:244:1::/64"])
        );
        assert_eq!(
            d.masq[&Family::V4].exempt,
            set(&["10.244.0.0/24", "10.244.1.0/24"])
        );
        let ipam = &conf(&d)["plugins"][0]["ipam"];
        assert_eq!(
            ipam["ranges"],
            json!([[{ "subnet": "10.244.0.0/24" }], [{ "subnet": "fd00:10:244::/64" }]])
        );
        assert_eq!(
            ipam["routes"],
            json!([{ "dst": "0.0.0.0/0" }, { "dst": "::/0" }])
        );
    }

    #[test]
    fn ipv6_only_address_skips_v4_route() {
        let nodes = [
            node("cp", &["10.244.0.0/24", "fd00:10:244::/64"], &["fc00::2"]),
            node("w1", &["10.244.1.0/24", "fd00:10:244:1::/64"], &["fc00::3"]),
        ];
        let d = desired("cp", &nodes, 1500);
        assert_eq!(d.routes, routes(&[("fd00:10:244:1::/64", "fc00::3")]));
    }

    #[test]
    fn ipv6_only_cluster() {
        let nodes = [
            node("cp", &["fd00:10:244::/64"], &["fc00::2"]),
            node("w1", &["fd00:10:244:1::/64"], &["fc00::3"]),
        ];
        let d = desired("cp", &nodes, 1500);
        assert_eq!(d.routes, routes(&[("fd00:10:244:1::/64", "fc00::3")]));
        assert_eq!(d.masq.keys().collect::<Vec<_>>(), [&Family::V6]);
        assert_eq!(
            conf(&d)["plugins"][0]["ipam"]["routes"],
            json!([{ "dst": "::/0" }])
        );
    }

    #[test]
    fn invalid_cidrs_are_ignored() {
        let d = desired("cp", &[node("cp", &["nonsense", "10.0.0.0/33"], &[])], 1500);
        assert_eq!(d.status, Status::NoPodCidr);
    }

    #[test]
    fn diff_node_removed_deletes_route() {
        let applied = routes(&[
            ("10.244.1.0/24", "172.18.0.3"),
            ("10.244.2.0/24", "172.18.0.4"),
        ]);
        let nodes = [
            node("cp", &["10.244.0.0/24"], &["172.18.0.2"]),
            node("w1", &["10.244.1.0/24"], &["172.18.0.3"]),
        ];
        let d = desired("cp", &nodes, 1500);
        let (add, del) = diff_routes(&applied, &d.routes);
        assert!(add.is_empty());
        assert_eq!(del, ["10.244.2.0/24"]);
    }

    #[test]
    fn diff_changed_next_hop_is_replaced_not_deleted() {
        let applied = routes(&[("10.244.1.0/24", "172.18.0.3")]);
        let (add, del) = diff_routes(&applied, &routes(&[("10.244.1.0/24", "172.18.0.9")]));
        assert_eq!(
            add,
            [("10.244.1.0/24".to_string(), "172.18.0.9".parse().unwrap())]
        );
        assert!(del.is_empty());
    }

    #[test]
    fn diff_unchanged_is_empty() {
        let applied = routes(&[("10.244.1.0/24", "172.18.0.3")]);
        assert_eq!(diff_routes(&applied, &applied.clone()), (vec![], vec![]));
    }
}
