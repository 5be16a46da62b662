//! The fake etcd: its member state over the store, and its gRPC served over TLS and HTTP/2 to
//! a client that trusts only the etcd CA and sends the SNI KCP sends (`etcd-<node>`).
use std::sync::Arc;

use bytes::Bytes;
use chrono::{TimeZone, Utc};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite};

use super::*;
use crate::inmemory::{
    certs::tests::{RSA_PKCS1, ca_cert},
    store::{Limits, Store},
};

const STATUS: &str = "/etcdserverpb.Maintenance/Status";
const MEMBER_LIST: &str = "/etcdserverpb.Cluster/MemberList";
const ALARM: &str = "/etcdserverpb.Maintenance/Alarm";
const MOVE_LEADER: &str = "/etcdserverpb.Maintenance/MoveLeader";
const MEMBER_REMOVE: &str = "/etcdserverpb.Cluster/MemberRemove";

fn t(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
}

/// Adds a member on `node` as the controllers will: the annotations from [`add_member`] on a
/// new etcd static Pod.
pub(crate) fn add_etcd_pod(group: &Group, node: &str, now: DateTime<Utc>) {
    let annotations = add_member(group, node, now);
    group
        .create(
            pods(),
            "kube-system",
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": format!("etcd-{node}"),
                    "namespace": "kube-system",
                    "labels": {"component": "etcd", "tier": "control-plane"},
                    "annotations": annotations,
                },
                "spec": {"nodeName": node},
            }),
        )
        .unwrap();
}

fn three() -> Arc<Group> {
    let store = Store::new(Limits::default());
    let g = store.group("default/c1");
    for (i, n) in ["cp-a", "cp-b", "cp-c"].iter().enumerate() {
        add_etcd_pod(&g, n, t(i as i64));
    }
    g
}

fn names(members: &[proto::Member]) -> Vec<&str> {
    members.iter().map(|m| m.name.as_str()).collect()
}

fn unary<Resp: Message + Default>(
    g: &Group,
    member: &str,
    method: &str,
    req: &impl Message,
) -> Result<Resp, Status> {
    let framed = call(g, member, method, &req.encode_to_vec(), t(100))?;
    Ok(Resp::decode(grpc::unframe(&framed).unwrap()).unwrap())
}

#[test]
fn members_share_a_cluster_id_and_the_first_leads() {
    let g = three();
    let all = members(&g);
    assert_eq!(
        all.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
        ["cp-a", "cp-b", "cp-c"]
    );
    assert!(all.iter().all(|m| m.cluster_id == all[0].cluster_id));
    let mut ids: Vec<u64> = all.iter().map(|m| m.id).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|id| *id != 0));
    assert_eq!(leader(&all).unwrap().name, "cp-a");
    assert!(all[1].leader_from.is_none() && all[2].leader_from.is_none());
    // Adding an existing member again changes nothing.
    let again = add_member(&g, "cp-b", t(50));
    assert_eq!(again[MEMBER_ID], json!(all[1].id.to_string()));
    assert!(!again.contains_key(LEADER_FROM));
}

#[test]
fn status_and_member_list_answer_per_member() {
    let g = three();
    let all = members(&g);
    let status: StatusResponse = unary(&g, "cp-b", STATUS, &StatusRequest {}).unwrap();
    let header = status.header.unwrap();
    assert_eq!(header.member_id, all[1].id);
    assert_eq!(header.cluster_id, all[0].cluster_id);
    assert_eq!(status.leader, all[0].id);
    let list: MemberListResponse =
        unary(&g, "cp-c", MEMBER_LIST, &MemberListRequest::default()).unwrap();
    assert_eq!(names(&list.members), ["cp-a", "cp-b", "cp-c"]);
    assert_eq!(list.members[2].id, all[2].id);
    assert!(list.members.iter().all(|m| !m.is_learner));
    let alarms: AlarmResponse = unary(&g, "cp-a", ALARM, &AlarmRequest::default()).unwrap();
    assert!(alarms.alarms.is_empty());
    let activate = AlarmRequest {
        action: 1,
        ..Default::default()
    };
    assert_eq!(
        unary::<AlarmResponse>(&g, "cp-a", ALARM, &activate)
            .unwrap_err()
            .code,
        Code::Unimplemented
    );
}

#[test]
fn leadership_moves_only_from_the_leader_to_a_member() {
    let g = three();
    let all = members(&g);
    let to_c = MoveLeaderRequest {
        target_id: all[2].id,
    };
    let refused = unary::<MoveLeaderResponse>(&g, "cp-b", MOVE_LEADER, &to_c).unwrap_err();
    assert_eq!(
        refused,
        Status::new(Code::FailedPrecondition, "etcdserver: not leader")
    );
    let nobody = MoveLeaderRequest { target_id: 7 };
    assert_eq!(
        unary::<MoveLeaderResponse>(&g, "cp-a", MOVE_LEADER, &nobody)
            .unwrap_err()
            .message,
        "etcdserver: bad leader transferee"
    );
    unary::<MoveLeaderResponse>(&g, "cp-a", MOVE_LEADER, &to_c).unwrap();
    let status: StatusResponse = unary(&g, "cp-a", STATUS, &StatusRequest {}).unwrap();
    assert_eq!(status.leader, all[2].id);
    // Back again within the same instant: the later move still wins.
    let to_a = MoveLeaderRequest {
        target_id: all[0].id,
    };
    unary::<MoveLeaderResponse>(&g, "cp-c", MOVE_LEADER, &to_a).unwrap();
    assert_eq!(leader(&members(&g)).unwrap().name, "cp-a");
}

#[test]
fn a_removed_member_leaves_the_list_and_answers_no_more() {
    let g = three();
    let all = members(&g);
    let remove_b = MemberRemoveRequest { id: all[1].id };
    let left: MemberRemoveResponse = unary(&g, "cp-a", MEMBER_REMOVE, &remove_b).unwrap();
    assert_eq!(names(&left.members), ["cp-a", "cp-c"]);
    let list: MemberListResponse =
        unary(&g, "cp-c", MEMBER_LIST, &MemberListRequest::default()).unwrap();
    assert_eq!(names(&list.members), ["cp-a", "cp-c"]);
    let gone = unary::<StatusResponse>(&g, "cp-b", STATUS, &StatusRequest {}).unwrap_err();
    assert_eq!(gone.code, Code::FailedPrecondition);
    assert!(gone.message.contains("removed"), "{gone:?}");
    assert_eq!(
        unary::<MemberRemoveResponse>(&g, "cp-a", MEMBER_REMOVE, &remove_b)
            .unwrap_err()
            .code,
        Code::NotFound
    );
    // The Pod says so (and so a restart keeps it).
    let pod = g.get(pods(), "kube-system", "etcd-cp-b").unwrap().value();
    assert!(pod["metadata"]["annotations"][MEMBER_REMOVED].is_string());
    // A new member joining after the leader was removed leads.
    let remove_a = MemberRemoveRequest { id: all[0].id };
    unary::<MemberRemoveResponse>(&g, "cp-c", MEMBER_REMOVE, &remove_a).unwrap();
    assert!(unary::<StatusResponse>(&g, "cp-c", STATUS, &StatusRequest {}).is_err());
    add_etcd_pod(&g, "cp-d", t(200));
    let status: StatusResponse = unary(&g, "cp-c", STATUS, &StatusRequest {}).unwrap();
    let d = members(&g).into_iter().find(|m| m.name == "cp-d").unwrap();
    assert_eq!(status.leader, d.id);
    assert_eq!(d.cluster_id, all[0].cluster_id);
}

#[test]
fn unknown_methods_members_and_garbage_are_statuses() {
    let g = three();
    let e = call(&g, "cp-a", "/etcdserverpb.KV/Range", &[], t(0)).unwrap_err();
    assert_eq!(e.code, Code::Unimplemented);
    let e = call(&g, "cp-z", STATUS, &[], t(0)).unwrap_err();
    assert_eq!(e.code, Code::FailedPrecondition);
    let e = call(&g, "cp-a", MOVE_LEADER, &[0xff, 0xff, 0xff], t(0)).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
}

// ---- over TLS and HTTP/2, as a gRPC client ----

/// A TLS + HTTP/2 client over `io` that trusts only `ca_pem` and sends `sni`, as etcd's client
/// in KCP does (ALPN h2).
pub(crate) async fn h2_client<IO>(
    io: IO,
    ca_pem: &str,
    sni: &str,
) -> Result<(SendRequest<Full<Bytes>>, Vec<CertificateDer<'static>>), String>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connector = crate::inmemory::certs::tests::tls_client(ca_pem, b"h2");
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let tls = connector
        .connect(name, io)
        .await
        .map_err(|e| e.to_string())?;
    let peer = tls
        .get_ref()
        .1
        .peer_certificates()
        .unwrap_or_default()
        .to_vec();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok((send, peer))
}

/// One unary gRPC call; a failure is its (grpc-status, grpc-message).
pub(crate) async fn grpc_call<Resp: Message + Default>(
    send: &mut SendRequest<Full<Bytes>>,
    method: &str,
    req: &impl Message,
) -> Result<Resp, (u32, String)> {
    let request = http::Request::post(format!("https://etcd{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(grpc::frame(req)))
        .unwrap();
    let response = send.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    if let Some(status) = grpc::parse_status(response.headers()) {
        return Err(status);
    }
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let body = collected.to_bytes();
    match grpc::parse_status(&trailers) {
        Some((0, _)) => Ok(Resp::decode(grpc::unframe(&body).unwrap()).unwrap()),
        Some(failed) => Err(failed),
        None => panic!("no grpc-status in the trailers"),
    }
}

fn start(etcd: &Arc<Etcd>, node: &str) -> tokio::io::DuplexStream {
    let (ours, theirs) = tokio::io::duplex(64 << 10);
    etcd.serve(theirs, node.to_string());
    ours
}

#[tokio::test]
async fn grpc_over_tls_per_member_certificates() {
    let ca = ca_cert(RSA_PKCS1);
    let g = three();
    let etcd = Etcd::new(g.clone(), ca.as_bytes(), RSA_PKCS1).unwrap();
    let all = members(&g);

    let (mut b, peer) = h2_client(start(&etcd, "cp-b"), &ca, "etcd-cp-b")
        .await
        .unwrap();
    // The member's own certificate: CN and SAN etcd-<node>.
    let (_, leaf) = x509_parser::parse_x509_certificate(&peer[0]).unwrap();
    let cn: Vec<&str> = leaf
        .subject()
        .iter_common_name()
        .filter_map(|c| c.as_str().ok())
        .collect();
    assert_eq!(cn, ["etcd-cp-b"]);
    let san = leaf.subject_alternative_name().unwrap().unwrap();
    assert!(san.value.general_names.iter().any(|n| matches!(
        n,
        x509_parser::extensions::GeneralName::DNSName("etcd-cp-b")
    )));
    // Valid for about a year, like upstream's leaves.
    let days = (leaf.validity().not_after.timestamp() - Utc::now().timestamp()) / 86_400;
    assert!((300..400).contains(&days), "{days}");

    let status: StatusResponse = grpc_call(&mut b, STATUS, &StatusRequest {}).await.unwrap();
    assert_eq!(status.header.unwrap().member_id, all[1].id);
    assert_eq!(status.leader, all[0].id);
    let list: MemberListResponse = grpc_call(&mut b, MEMBER_LIST, &MemberListRequest::default())
        .await
        .unwrap();
    assert_eq!(names(&list.members), ["cp-a", "cp-b", "cp-c"]);
    let alarms: AlarmResponse = grpc_call(&mut b, ALARM, &AlarmRequest::default())
        .await
        .unwrap();
    assert!(alarms.alarms.is_empty());
    let not_leader = grpc_call::<MoveLeaderResponse>(
        &mut b,
        MOVE_LEADER,
        &MoveLeaderRequest {
            target_id: all[1].id,
        },
    )
    .await
    .unwrap_err();
    assert_eq!(not_leader, (9, "etcdserver: not leader".to_string()));
    let unknown = grpc_call::<StatusResponse>(&mut b, "/etcdserverpb.KV/Range", &StatusRequest {})
        .await
        .unwrap_err();
    assert_eq!(unknown.0, 12);

    // On the leader: move the leadership to cp-b, then remove cp-a.
    let (mut a, _) = h2_client(start(&etcd, "cp-a"), &ca, "etcd-cp-a")
        .await
        .unwrap();
    grpc_call::<MoveLeaderResponse>(
        &mut a,
        MOVE_LEADER,
        &MoveLeaderRequest {
            target_id: all[1].id,
        },
    )
    .await
    .unwrap();
    let status: StatusResponse = grpc_call(&mut b, STATUS, &StatusRequest {}).await.unwrap();
    assert_eq!(status.leader, all[1].id);
    let left: MemberRemoveResponse = grpc_call(
        &mut b,
        MEMBER_REMOVE,
        &MemberRemoveRequest { id: all[0].id },
    )
    .await
    .unwrap();
    assert_eq!(names(&left.members), ["cp-b", "cp-c"]);
    let removed = grpc_call::<StatusResponse>(&mut a, STATUS, &StatusRequest {})
        .await
        .unwrap_err();
    assert_eq!(removed.0, 9);
}

#[tokio::test]
async fn tls_refuses_names_that_are_not_members() {
    let ca = ca_cert(RSA_PKCS1);
    let etcd = Etcd::new(three(), ca.as_bytes(), RSA_PKCS1).unwrap();
    for sni in ["etcd-cp-z", "kube-apiserver", "cp-a"] {
        assert!(
            h2_client(start(&etcd, "cp-a"), &ca, sni).await.is_err(),
            "{sni}"
        );
    }
    // A certificate from another CA is not trusted by the client.
    let other = ca_cert(include_bytes!("../testdata/ca-ec-sec1.key"));
    assert!(
        h2_client(start(&etcd, "cp-a"), &other, "etcd-cp-a")
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_non_grpc_request_is_unimplemented() {
    let ca = ca_cert(RSA_PKCS1);
    let etcd = Etcd::new(three(), ca.as_bytes(), RSA_PKCS1).unwrap();
    let (mut send, _) = h2_client(start(&etcd, "cp-a"), &ca, "etcd-cp-a")
        .await
        .unwrap();
    let response = send
        .send_request(
            http::Request::get("https://etcd/")
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(grpc::parse_status(response.headers()).unwrap().0, 12);
}
