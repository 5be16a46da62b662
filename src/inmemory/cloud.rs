//! The in-memory backend's state in the manager: the workload clusters' object stores, their
//! listeners and ports, and what each simulated machine needs remembered between reconciles.
//! One per manager, shared by the DevCluster and DevMachine controllers; lost on a restart, as
//! upstream's, and rebuilt from the Dev* objects (a Machine marked bootstrapped skips every
//! delay, see [`super::phases`]).
use std::{
    collections::{BTreeMap, HashMap},
    hash::{DefaultHasher, Hash, Hasher},
    net::{IpAddr, SocketAddr},
    sync::{Arc, Mutex, MutexGuard},
};

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{
    ApiError, Group, Limits, Listener, Store, certs, kinds,
    phases::{Draws, PortAllocation, PortRequest},
    spec::Draw,
    store::Preconditions,
};

/// Why a cluster's listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("the cluster CA cannot sign the API server's certificate: {0}")]
    Certs(#[from] certs::CertError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the listener host {0:?} is not an IP address (set POD_IP)")]
    Host(String),
}

/// The in-memory backend of one manager.
pub struct Cloud {
    store: Store,
    /// The address the listeners bind and endpoints name: the manager's Pod IP.
    host: String,
    range: (u16, u16),
    ports: Mutex<BTreeMap<String, u16>>,
    listeners: Mutex<HashMap<String, Listener>>,
    /// Per DevMachine UID: when its VM record was made (its VM delay counts from then).
    vms: Mutex<HashMap<String, DateTime<Utc>>>,
}

impl std::fmt::Debug for Cloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cloud")
            .field("host", &self.host)
            .field("range", &self.range)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Cloud {
    /// Listeners on `host`, ports from `min` to `max` (both included).
    pub fn new(host: impl Into<String>, (min, max): (u16, u16)) -> Self {
        Self {
            store: Store::new(Limits::default()),
            host: host.into(),
            range: (min, max),
            ports: Mutex::default(),
            listeners: Mutex::default(),
            vms: Mutex::default(),
        }
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    /// The object store of cluster `name` (`<namespace>/<cluster>`), made on first use.
    pub fn group(&self, name: &str) -> Arc<Group> {
        self.store.group(name)
    }

    /// The port of cluster `name`'s listener: the one it holds already, the one asked for, or
    /// the lowest free one of the range.
    pub fn reserve_port(&self, name: &str, request: PortRequest) -> PortAllocation {
        let mut ports = lock(&self.ports);
        if let PortRequest::Keep(p) = request {
            ports.insert(name.to_string(), p);
            return PortAllocation::Port(p);
        }
        if let Some(p) = ports.get(name) {
            return PortAllocation::Port(*p);
        }
        let (min, max) = self.range;
        let taken: std::collections::HashSet<u16> = ports.values().copied().collect();
        match (min..=max).find(|p| !taken.contains(p)) {
            Some(p) => {
                ports.insert(name.to_string(), p);
                PortAllocation::Port(p)
            }
            None => PortAllocation::Exhausted { min, max },
        }
    }

    /// Whether cluster `name`'s listener is up.
    pub fn is_listening(&self, name: &str) -> bool {
        lock(&self.listeners).contains_key(name)
    }

    /// Start cluster `name`'s listener on its port, serving a certificate signed by the
    /// cluster's CA (`ca`: certificate and key, PEM), and its etcd members' signed by the etcd
    /// CA (`etcd_ca`), once; a second call is a no-op.
    pub async fn listen(
        &self,
        name: &str,
        port: u16,
        (ca_cert, ca_key): (&[u8], &[u8]),
        (etcd_cert, etcd_key): (&[u8], &[u8]),
    ) -> Result<(), ListenError> {
        if self.is_listening(name) {
            return Ok(());
        }
        let ip: IpAddr = self
            .host
            .parse()
            .map_err(|_| ListenError::Host(self.host.clone()))?;
        let tls = certs::serving_config(ca_cert, ca_key, std::slice::from_ref(&self.host))?;
        let addr = SocketAddr::new(bind_address(ip), port);
        let listener = Listener::bind(addr, tls, self.group(name))
            .await
            .map_err(|source| ListenError::Bind { addr, source })?;
        listener.register_etcd_ca(etcd_cert, etcd_key)?;
        // Two reconciles may race here; the loser's listener is dropped (and closed).
        lock(&self.listeners)
            .entry(name.to_string())
            .or_insert(listener);
        Ok(())
    }

    /// Forget cluster `name`: close its listener, drop its objects, free its port.
    pub fn remove_cluster(&self, name: &str) {
        lock(&self.listeners).remove(name);
        lock(&self.ports).remove(name);
        self.store.remove_group(name);
    }

    /// When DevMachine `uid`'s VM record was made (now, the first time it is asked).
    pub fn vm_created(&self, uid: &str, now: DateTime<Utc>) -> DateTime<Utc> {
        *lock(&self.vms).entry(uid.to_string()).or_insert(now)
    }

    /// Forget DevMachine `uid`.
    pub fn forget_machine(&self, uid: &str) {
        lock(&self.vms).remove(uid);
    }

    /// How many entries each map holds (they must return to zero once the objects are gone).
    pub fn tracked(&self) -> [(&'static str, usize); 3] {
        [
            ("in_memory_listeners", lock(&self.listeners).len()),
            ("in_memory_ports", lock(&self.ports).len()),
            ("in_memory_vms", lock(&self.vms).len()),
        ]
    }
}

/// Where a listener advertised at `host` binds: every address of the Pod, as upstream's, since a
/// port-forward to the manager's Pod (how upstream's e2e framework reaches an in-memory cluster)
/// arrives on the Pod's loopback, not on its IP. A loopback host (a manager run on a workstation
/// or in the tests) binds only that.
fn bind_address(host: IpAddr) -> IpAddr {
    match host {
        h if h.is_loopback() => h,
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    }
}

/// The jitter draws of one machine: fixed by its UID, so a delay does not move from one
/// reconcile to the next, nor across a restart.
pub fn draws(uid: &str) -> Draws {
    let draw = |phase: &str| {
        let mut h = DefaultHasher::new();
        (uid, phase).hash(&mut h);
        Draw::from_bits(h.finish())
    };
    Draws {
        vm: draw("vm"),
        node: draw("node"),
        etcd: draw("etcd"),
        api_server: draw("apiServer"),
    }
}

/// Create `obj` (of `kind`) in `group` unless an object of that name is there already.
pub fn ensure(group: &Group, kind: &str, obj: Value) -> Result<(), ApiError> {
    let res = kinds::by_kind(kind)
        .ok_or_else(|| ApiError::bad_request(format!("{kind} is not a kind the store holds")))?;
    let namespace = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    match group.create(res, &namespace, obj) {
        Ok(_) => Ok(()),
        Err(e) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Delete `kind` `namespace/name` from `group`; gone already is fine.
pub fn remove(group: &Group, kind: &str, namespace: &str, name: &str) -> Result<(), ApiError> {
    let res = kinds::by_kind(kind)
        .ok_or_else(|| ApiError::bad_request(format!("{kind} is not a kind the store holds")))?;
    match group.delete(res, namespace, name, &Preconditions::default()) {
        Ok(_) => Ok(()),
        Err(e) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether `kind` `namespace/name` is in `group`.
pub fn exists(group: &Group, kind: &str, namespace: &str, name: &str) -> bool {
    kinds::by_kind(kind).is_some_and(|res| group.get(res, namespace, name).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_kept_allocated_lowest_first_and_freed_with_the_cluster() {
        let cloud = Cloud::new("127.0.0.1", (20000, 20001));
        assert_eq!(
            cloud.reserve_port("ns/a", PortRequest::Allocate),
            PortAllocation::Port(20000)
        );
        assert_eq!(
            cloud.reserve_port("ns/a", PortRequest::Allocate),
            PortAllocation::Port(20000),
            "a cluster keeps its port"
        );
        assert_eq!(
            cloud.reserve_port("ns/b", PortRequest::Allocate),
            PortAllocation::Port(20001)
        );
        assert_eq!(
            cloud.reserve_port("ns/c", PortRequest::Allocate),
            PortAllocation::Exhausted {
                min: 20000,
                max: 20001
            }
        );
        cloud.remove_cluster("ns/a");
        assert_eq!(
            cloud.reserve_port("ns/c", PortRequest::Allocate),
            PortAllocation::Port(20000)
        );
        assert_eq!(
            cloud.reserve_port("ns/d", PortRequest::Keep(25000)),
            PortAllocation::Port(25000),
            "an endpoint's own port is kept, in the range or not"
        );
        assert_eq!(cloud.tracked()[1], ("in_memory_ports", 3));
    }

    #[test]
    fn a_pod_ip_binds_every_address_of_its_family_and_loopback_stays_loopback() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(bind_address(ip("10.244.0.7")), ip("0.0.0.0"));
        assert_eq!(bind_address(ip("fd00::7")), ip("::"));
        assert_eq!(bind_address(ip("127.0.0.1")), ip("127.0.0.1"));
        assert_eq!(bind_address(ip("::1")), ip("::1"));
    }

    #[test]
    fn draws_are_fixed_by_uid_and_differ_between_machines_and_phases() {
        assert_eq!(draws("u1"), draws("u1"));
        assert_ne!(draws("u1"), draws("u2"));
        let d = draws("u1");
        assert_ne!(d.vm, d.node);
        for v in [d.vm, d.node, d.etcd, d.api_server] {
            assert!((0.0..1.0).contains(&v.value()));
        }
    }

    #[test]
    fn vm_records_keep_their_first_time_until_forgotten() {
        let cloud = Cloud::new("127.0.0.1", (20000, 20001));
        let t0 = Utc::now();
        let t1 = t0 + chrono::TimeDelta::seconds(5);
        assert_eq!(cloud.vm_created("u", t0), t0);
        assert_eq!(cloud.vm_created("u", t1), t0);
        cloud.forget_machine("u");
        assert_eq!(cloud.vm_created("u", t1), t1);
    }

    #[test]
    fn ensure_and_remove_are_idempotent() {
        let cloud = Cloud::new("127.0.0.1", (20000, 20001));
        let g = cloud.group("ns/c");
        let n = super::super::objects::node("n", "in-memory://n", None, false);
        ensure(&g, "Node", n.clone()).unwrap();
        ensure(&g, "Node", n).unwrap();
        assert!(exists(&g, "Node", "", "n"));
        remove(&g, "Node", "", "n").unwrap();
        remove(&g, "Node", "", "n").unwrap();
        assert!(!exists(&g, "Node", "", "n"));
        assert!(ensure(&g, "Widget", serde_json::json!({})).is_err());
    }

    #[tokio::test]
    async fn a_listener_starts_once_and_stops_with_its_cluster() {
        let ca_key = certs::tests::RSA_PKCS1;
        let ca_cert = certs::tests::ca_cert(ca_key).into_bytes();
        let cloud = Cloud::new("127.0.0.1", (20000, 20001));
        // Port 0: the kernel picks one, so parallel tests never collide.
        let ca = (ca_cert.as_slice(), ca_key);
        cloud.listen("ns/c", 0, ca, ca).await.unwrap();
        cloud.listen("ns/c", 0, ca, ca).await.unwrap();
        assert!(cloud.is_listening("ns/c"));
        assert_eq!(cloud.tracked()[0], ("in_memory_listeners", 1));
        cloud.remove_cluster("ns/c");
        assert!(!cloud.is_listening("ns/c"));
        let bad = Cloud::new("pod-ip", (20000, 20001));
        assert!(matches!(
            bad.listen("ns/c", 0, ca, ca).await,
            Err(ListenError::Host(_))
        ));
    }
}
