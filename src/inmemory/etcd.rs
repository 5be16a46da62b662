//! The fake etcd of an in-memory workload cluster: what KCP reads and changes of etcd, served
//! as etcd's gRPC API over TLS and HTTP/2 on a byte pipe that the port-forward to an etcd Pod
//! hands over ([`Etcd::serve`]).
//!
//! **State.** One member per etcd static Pod (`kube-system/etcd-<node>`, label
//! `component=etcd`) in the group's store, kept in that Pod's annotations (upstream's names,
//! so that clusters made by upstream CAPD read the same): the cluster id, the member id, since
//! when the member leads, and whether it was removed. The store stays the one source of truth:
//! deleting the Pod deletes the member, and nothing else needs rebuilding after a restart.
//! The member's name is the node's. The leader is the member (not removed) that leads since
//! the latest time; moving the leadership writes a later time on the new leader.
//!
//! **Served**, over TLS with a serving certificate per member (CN and SAN `etcd-<node>`,
//! signed by the cluster's etcd CA, picked by SNI) and ALPN `h2`: `Maintenance/Status`,
//! `Cluster/MemberList`, `Maintenance/Alarm` (GET: no alarms), `Maintenance/MoveLeader` (on
//! the leader, as etcd requires) and `Cluster/MemberRemove`. Any other method is
//! `UNIMPLEMENTED`. A call to a member that was removed, or whose Pod is gone, fails with
//! `FAILED_PRECONDITION`. Client certificates are not checked, as upstream's fake does not.
//!
//! Errors use etcd's messages with codes that etcd's client does not retry (`NOT_FOUND`,
//! `FAILED_PRECONDITION`): a retried call to a fake that will answer the same only waits out
//! KCP's call timeout.
pub mod proto;

use std::{
    collections::HashMap,
    convert::Infallible,
    hash::BuildHasher,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::{body::Incoming, service::service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use prost::Message;
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::{
    ServerConfig,
    pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer},
    server::{ClientHello, ResolvesServerCert},
    sign::{CertifiedKey, SigningKey},
};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tracing::debug;

use self::proto::*;
use super::{
    certs::{self, CertError},
    grpc::{self, Code, Status},
    kinds::{self, ResourceId},
    selector::{FieldSelector, LabelSelector},
    status::ApiError,
    store::{Filter, Group, Part},
};

pub const CLUSTER_ID: &str = "etcd.inmemory.infrastructure.cluster.x-k8s.io/cluster-id";
pub const MEMBER_ID: &str = "etcd.inmemory.infrastructure.cluster.x-k8s.io/member-id";
pub const LEADER_FROM: &str = "etcd.inmemory.infrastructure.cluster.x-k8s.io/leader-from";
pub const MEMBER_REMOVED: &str = "etcd.inmemory.infrastructure.cluster.x-k8s.io/member-removed";

/// etcd's client port: the one port an etcd Pod serves through port-forward.
pub const PORT: u16 = 2379;
/// An etcd static Pod's name is this and the node's name.
pub const POD_PREFIX: &str = "etcd-";
const NAMESPACE: &str = "kube-system";
/// The etcd version the fake reports.
const VERSION: &str = "3.6.4";
/// Member serving certificates kept per cluster (members are a handful; this only bounds a
/// cache that SNI names of existing Pods fill).
const MAX_CACHED_CERTS: usize = 64;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 streams one client may have open at once (KCP makes one call at a time).
const MAX_STREAMS: u32 = 32;

fn pods() -> ResourceId {
    kinds::find("", "v1", "pods").unwrap_or_default()
}

/// One member, as its Pod's annotations say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The node's name (the Pod's name less [`POD_PREFIX`]).
    pub name: String,
    pub cluster_id: u64,
    pub id: u64,
    pub leader_from: Option<DateTime<Utc>>,
    pub removed: bool,
}

impl Member {
    fn from_pod(pod: &Value) -> Option<Self> {
        let meta = &pod["metadata"];
        let name = meta["name"].as_str()?.strip_prefix(POD_PREFIX)?.to_string();
        let annotations = &meta["annotations"];
        let number = |key: &str| annotations[key].as_str()?.parse::<u64>().ok();
        Some(Self {
            name,
            cluster_id: number(CLUSTER_ID)?,
            id: number(MEMBER_ID).filter(|id| *id != 0)?,
            leader_from: annotations[LEADER_FROM]
                .as_str()
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&Utc)),
            removed: annotations.get(MEMBER_REMOVED).is_some(),
        })
    }

    fn to_proto(&self) -> proto::Member {
        proto::Member {
            id: self.id,
            name: self.name.clone(),
            peer_urls: vec![format!("https://{}:2380", self.name)],
            client_urls: vec![format!("https://{}:{PORT}", self.name)],
            is_learner: false,
        }
    }
}

/// Every member of the group's etcd cluster, removed ones too, by name. Etcd Pods without
/// readable member annotations are not members.
pub fn members(group: &Group) -> Vec<Member> {
    let filter = Filter {
        namespace: Some(NAMESPACE.into()),
        labels: LabelSelector::parse("component=etcd").unwrap_or_default(),
        fields: FieldSelector::default(),
    };
    let mut members: Vec<Member> = group
        .list(pods(), &filter, None, None)
        .items
        .iter()
        .filter_map(|o| Member::from_pod(&o.value()))
        .collect();
    members.sort_by(|a, b| a.name.cmp(&b.name));
    members
}

/// The leader: of the members not removed, the one leading since the latest time (the larger
/// id on a tie, so that the answer never depends on order).
pub fn leader(members: &[Member]) -> Option<&Member> {
    members
        .iter()
        .filter(|m| !m.removed)
        .filter_map(|m| Some((m.leader_from?, m)))
        .max_by_key(|(t, m)| (*t, m.id))
        .map(|(_, m)| m)
}

fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

/// A random non-zero id (ids are not secrets: the std hasher's random keys will do).
fn random_id(taken: impl Fn(u64) -> bool) -> u64 {
    let state = std::collections::hash_map::RandomState::new();
    (0u64..)
        .map(|i| state.hash_one(i))
        .find(|id| *id != 0 && !taken(*id))
        .unwrap_or(1)
}

/// The annotations for the etcd Pod of a new member on `node`: the cluster's id (a new one for
/// the first member), a new member id, and, when the cluster has no leader, leadership from
/// `now`. The caller creates the Pod `kube-system/etcd-<node>` (label `component=etcd`) with
/// them. If that Pod exists already its annotations are returned unchanged, so a retried
/// reconcile adds no second member.
pub fn add_member(group: &Group, node: &str, now: DateTime<Utc>) -> Map<String, Value> {
    if let Ok(pod) = group.get(pods(), NAMESPACE, &format!("{POD_PREFIX}{node}"))
        && let Some(existing) = pod.value()["metadata"]["annotations"].as_object()
        && existing.contains_key(MEMBER_ID)
    {
        return existing.clone();
    }
    let all = members(group);
    let live: Vec<Member> = all.iter().filter(|m| !m.removed).cloned().collect();
    let cluster_id = all
        .first()
        .map(|m| m.cluster_id)
        .unwrap_or_else(|| random_id(|_| false));
    let id = random_id(|id| all.iter().any(|m| m.id == id));
    let mut annotations = Map::new();
    annotations.insert(CLUSTER_ID.into(), json!(cluster_id.to_string()));
    annotations.insert(MEMBER_ID.into(), json!(id.to_string()));
    if leader(&live).is_none() {
        annotations.insert(LEADER_FROM.into(), json!(timestamp(now)));
    }
    annotations
}

fn annotate(group: &Group, node: &str, key: &str, value: &str) -> Result<(), Status> {
    group
        .patch(
            pods(),
            NAMESPACE,
            &format!("{POD_PREFIX}{node}"),
            Part::Main,
            |mut pod| {
                let meta = pod["metadata"]
                    .as_object_mut()
                    .ok_or_else(|| ApiError::bad_request("a Pod without metadata"))?;
                let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
                if !annotations.is_object() {
                    *annotations = json!({});
                }
                annotations[key] = json!(value);
                Ok(pod)
            },
        )
        .map(|_| ())
        .map_err(|e| Status::new(Code::Internal, format!("updating the etcd Pod: {e}")))
}

/// The calls of one member's server, over the group's store. `member` is the node name the
/// port-forward addressed.
pub fn call(
    group: &Group,
    member: &str,
    method: &str,
    request: &[u8],
    now: DateTime<Utc>,
) -> Result<Bytes, Status> {
    let all = members(group);
    let me = all
        .iter()
        .find(|m| m.name == member)
        .ok_or_else(|| Status::new(Code::FailedPrecondition, "etcdserver: member not found"))?;
    if me.removed {
        return Err(Status::new(
            Code::FailedPrecondition,
            "etcdserver: the member has been permanently removed from the cluster",
        ));
    }
    let header = || {
        Some(ResponseHeader {
            cluster_id: me.cluster_id,
            member_id: me.id,
            revision: group.resource_version() as i64,
            raft_term: 2,
        })
    };
    let live: Vec<Member> = all.iter().filter(|m| !m.removed).cloned().collect();
    let list = |members: &[Member]| members.iter().map(Member::to_proto).collect();
    let bad = |e: prost::DecodeError| Status::new(Code::InvalidArgument, format!("grpc: {e}"));
    Ok(match method {
        "/etcdserverpb.Maintenance/Status" => {
            StatusRequest::decode(request).map_err(bad)?;
            let leader = leader(&live)
                .ok_or_else(|| Status::new(Code::FailedPrecondition, "etcdserver: no leader"))?;
            let rv = group.resource_version();
            grpc::frame(&StatusResponse {
                header: header(),
                version: VERSION.into(),
                db_size: 1 << 20,
                leader: leader.id,
                raft_index: rv,
                raft_term: 2,
                raft_applied_index: rv,
                db_size_in_use: 1 << 20,
                storage_version: "3.6.0".into(),
                db_size_quota: 2 << 30,
                ..Default::default()
            })
        }
        "/etcdserverpb.Cluster/MemberList" => {
            MemberListRequest::decode(request).map_err(bad)?;
            grpc::frame(&MemberListResponse {
                header: header(),
                members: list(&live),
            })
        }
        "/etcdserverpb.Maintenance/Alarm" => {
            let req = AlarmRequest::decode(request).map_err(bad)?;
            if req.action != ALARM_GET {
                return Err(Status::new(
                    Code::Unimplemented,
                    "the fake etcd only answers alarm GET",
                ));
            }
            grpc::frame(&AlarmResponse {
                header: header(),
                alarms: vec![],
            })
        }
        "/etcdserverpb.Maintenance/MoveLeader" => {
            let req = MoveLeaderRequest::decode(request).map_err(bad)?;
            let current = leader(&live);
            if current.map(|l| l.id) != Some(me.id) {
                return Err(Status::new(
                    Code::FailedPrecondition,
                    "etcdserver: not leader",
                ));
            }
            let target = live.iter().find(|m| m.id == req.target_id).ok_or_else(|| {
                Status::new(
                    Code::FailedPrecondition,
                    "etcdserver: bad leader transferee",
                )
            })?;
            if target.id != me.id {
                // Strictly later than the current leader's time, even with a clock that did
                // not move.
                let since = current
                    .and_then(|l| l.leader_from)
                    .map(|t| t + chrono::Duration::microseconds(1))
                    .map_or(now, |t| t.max(now));
                annotate(group, &target.name, LEADER_FROM, &timestamp(since))?;
            }
            grpc::frame(&MoveLeaderResponse { header: header() })
        }
        "/etcdserverpb.Cluster/MemberRemove" => {
            let req = MemberRemoveRequest::decode(request).map_err(bad)?;
            let target = live
                .iter()
                .find(|m| m.id == req.id)
                .ok_or_else(|| Status::new(Code::NotFound, "etcdserver: member not found"))?;
            annotate(group, &target.name, MEMBER_REMOVED, "")?;
            let remaining: Vec<Member> = live.iter().filter(|m| m.id != req.id).cloned().collect();
            grpc::frame(&MemberRemoveResponse {
                header: header(),
                members: list(&remaining),
            })
        }
        other => {
            return Err(Status::new(
                Code::Unimplemented,
                format!("unknown method {other} for the in-memory etcd"),
            ));
        }
    })
}

/// Serving certificates per member, made on first use for an SNI name that is an existing
/// etcd Pod's, signed by the cluster's etcd CA. One key for all of them (as upstream uses one
/// key for every leaf).
struct MemberCerts {
    issuer: Issuer<'static, KeyPair>,
    key: KeyPair,
    signing: Arc<dyn SigningKey>,
    group: Arc<Group>,
    cache: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for MemberCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberCerts").finish_non_exhaustive()
    }
}

impl MemberCerts {
    fn issue(&self, pod: &str) -> Result<Arc<CertifiedKey>, CertError> {
        let names = vec![
            pod.to_string(),
            "localhost".into(),
            "127.0.0.1".into(),
            "::1".into(),
        ];
        let mut params = CertificateParams::new(names)?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, pod);
        params.distinguished_name = dn;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        // etcd's own certificates (kubeadm's etcd server certificate) serve both ways.
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        certs::valid_for_a_year(&mut params);
        let leaf = params.signed_by(&self.key, &self.issuer)?;
        Ok(Arc::new(CertifiedKey::new(
            vec![leaf.der().clone()],
            self.signing.clone(),
        )))
    }
}

impl ResolvesServerCert for MemberCerts {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let sni = hello.server_name()?;
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(hit) = cache.get(sni) {
            return Some(hit.clone());
        }
        // Only names of etcd Pods get a certificate: SNI is the client's to choose.
        let node = sni.strip_prefix(POD_PREFIX)?;
        if !members(&self.group).iter().any(|m| m.name == node) {
            debug!(sni, "in-memory etcd: no member for this SNI name");
            return None;
        }
        let issued = self
            .issue(sni)
            .inspect_err(|e| debug!(sni, error = %e, "in-memory etcd: issuing a certificate"))
            .ok()?;
        if cache.len() >= MAX_CACHED_CERTS {
            cache.clear();
        }
        cache.insert(sni.to_string(), issued.clone());
        Some(issued)
    }
}

/// One workload cluster's fake etcd: its TLS (the etcd CA's leaves) over the group's store.
pub struct Etcd {
    group: Arc<Group>,
    tls: TlsAcceptor,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd").finish_non_exhaustive()
    }
}

impl Etcd {
    /// From the cluster's etcd CA (the `<cluster>-etcd` Secret's `tls.crt` and `tls.key`).
    pub fn new(
        group: Arc<Group>,
        ca_cert_pem: &[u8],
        ca_key_pem: &[u8],
    ) -> Result<Arc<Self>, CertError> {
        let issuer = certs::issuer(ca_cert_pem, ca_key_pem)?;
        let key = KeyPair::generate()?;
        let provider = crate::webhook::provider();
        let signing = provider
            .key_provider
            .load_private_key(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                key.serialize_der(),
            )))?;
        let resolver = MemberCerts {
            issuer,
            key,
            signing,
            group: group.clone(),
            cache: Mutex::new(HashMap::new()),
        };
        let mut tls = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        // gRPC clients (grpc-go since 1.67) insist on HTTP/2 by ALPN.
        tls.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(Self {
            group,
            tls: TlsAcceptor::from(Arc::new(tls)),
        }))
    }

    pub fn group(&self) -> &Arc<Group> {
        &self.group
    }

    /// Serves the member on `node` over `io` (a port-forwarded stream) until the client
    /// closes it: TLS, then gRPC over HTTP/2.
    pub fn serve<IO>(self: &Arc<Self>, io: IO, node: String)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let this = self.clone();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, this.tls.accept(io)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return debug!(node, error = %e, "in-memory etcd: TLS failed"),
                Err(_) => return debug!(node, "in-memory etcd: TLS handshake timed out"),
            };
            let service = service_fn(move |req| {
                let (this, node) = (this.clone(), node.clone());
                async move { Ok::<_, Infallible>(this.handle(&node, req).await) }
            });
            let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .max_concurrent_streams(MAX_STREAMS)
                .max_header_list_size(16 << 10)
                .serve_connection(TokioIo::new(tls), service);
            if let Err(e) = conn.await {
                debug!(error = %e, "in-memory etcd: connection ended");
            }
        });
    }

    async fn handle(&self, node: &str, req: Request<Incoming>) -> Response<grpc::Body> {
        let grpc_type = req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("application/grpc"));
        if req.method() != Method::POST || !grpc_type {
            return grpc::error(&Status::new(
                Code::Unimplemented,
                "the in-memory etcd serves gRPC only",
            ));
        }
        let method = req.uri().path().to_string();
        let body = match Limited::new(req.into_body(), grpc::MAX_MESSAGE + 5)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                return grpc::error(&Status::new(
                    Code::InvalidArgument,
                    format!("grpc: reading the request: {e}"),
                ));
            }
        };
        let answer =
            grpc::unframe(&body).and_then(|msg| call(&self.group, node, &method, msg, Utc::now()));
        match answer {
            Ok(framed) => grpc::ok_framed(framed),
            Err(status) => grpc::error(&status),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
