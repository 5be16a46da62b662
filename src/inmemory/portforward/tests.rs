//! Port-forward through a real listener: the upgrade answers client-go relies on, then a small
//! test-only SPDY client (our framer on the client side; the framer itself is checked against
//! Go's bytes in `spdy::tests`) opening error/data stream pairs as client-go does, with TLS,
//! HTTP/2 and gRPC to the fake etcd, and TLS and HTTP/1.1 to the API server, over them.
use std::{collections::HashMap, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream},
    net::TcpStream,
    sync::{Mutex, mpsc, oneshot},
};

use crate::inmemory::{
    certs::{
        self,
        tests::{RSA_PKCS1, ca_cert, tls_client},
    },
    etcd::{
        members,
        proto::{MemberListRequest, MemberListResponse},
        tests::{add_etcd_pod, grpc_call, h2_client},
    },
    server::Listener,
    spdy::{self, Deflater, Frame, Inflater},
    store::{Limits, Store},
};

const EC_SEC1: &[u8] = include_bytes!("../testdata/ca-ec-sec1.key");

struct Fake {
    listener: Listener,
    api_ca: String,
    etcd_ca: String,
    group: Arc<crate::inmemory::Group>,
}

async fn start() -> Fake {
    let store = Store::new(Limits::default());
    let group = store.group("default/c1");
    for n in ["cp-a", "cp-b"] {
        add_etcd_pod(&group, n, chrono::Utc::now());
    }
    group
        .create(
            crate::inmemory::kinds::find("", "v1", "pods").unwrap(),
            "kube-system",
            json!({
                "metadata": {"name": "kube-apiserver-cp-a", "namespace": "kube-system",
                             "labels": {"component": "kube-apiserver", "tier": "control-plane"}},
                "spec": {"nodeName": "cp-a"},
            }),
        )
        .unwrap();
    let api_ca = ca_cert(RSA_PKCS1);
    let tls = certs::serving_config(api_ca.as_bytes(), RSA_PKCS1, &[]).unwrap();
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), tls, group.clone())
        .await
        .unwrap();
    // The etcd CA is another CA (ECDSA here), as CAPI makes `<cluster>-etcd`.
    let etcd_ca = ca_cert(EC_SEC1);
    listener
        .register_etcd_ca(etcd_ca.as_bytes(), EC_SEC1)
        .unwrap();
    Fake {
        listener,
        api_ca,
        etcd_ca,
        group,
    }
}

/// An HTTP/1.1 request to the listener, on a connection of its own.
async fn request(
    fake: &Fake,
    req: http::Request<Empty<Bytes>>,
) -> http::Response<hyper::body::Incoming> {
    let tcp = TcpStream::connect(fake.listener.local_addr())
        .await
        .unwrap();
    let tls = tls_client(&fake.api_ca, b"http/1.1")
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn.with_upgrades());
    send.send_request(req).await.unwrap()
}

fn portforward(pod: &str) -> http::request::Builder {
    http::Request::post(format!(
        "/api/v1/namespaces/kube-system/pods/{pod}/portforward"
    ))
    .header("host", "localhost")
}

async fn status_of(response: http::Response<hyper::body::Incoming>) -> (u16, Value) {
    let code = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// client-go's SPDY upgrade request.
async fn upgrade(fake: &Fake, pod: &str) -> Upgraded {
    let req = portforward(pod)
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .header("x-stream-protocol-version", "portforward.k8s.io")
        .body(Empty::new())
        .unwrap();
    let response = request(fake, req).await;
    assert_eq!(response.status(), 101);
    assert_eq!(
        response.headers()["x-stream-protocol-version"],
        "portforward.k8s.io"
    );
    assert_eq!(response.headers()["upgrade"], "SPDY/3.1");
    hyper::upgrade::on(response).await.unwrap()
}

/// What the server said on one stream.
#[derive(Default)]
struct Seen {
    replied: bool,
    data: Vec<u8>,
    fin: bool,
    reset: bool,
}

/// A minimal SPDY client: opens streams, sends data, and records or pipes what comes back.
struct SpdyClient {
    wr: Arc<Mutex<(Box<dyn AsyncWrite + Send + Unpin>, Deflater)>>,
    seen: Arc<Mutex<HashMap<u32, Seen>>>,
    pipes: Arc<Mutex<HashMap<u32, mpsc::Sender<Bytes>>>>,
    pongs: Arc<Mutex<Vec<u32>>>,
    closed: Arc<Mutex<Option<oneshot::Sender<()>>>>,
}

impl SpdyClient {
    fn new(io: Upgraded) -> (Self, oneshot::Receiver<()>) {
        Self::over(TokioIo::new(io))
    }

    fn over<IO: AsyncRead + AsyncWrite + Send + 'static>(io: IO) -> (Self, oneshot::Receiver<()>) {
        let (mut rd, wr) = tokio::io::split(io);
        let (closed_tx, closed_rx) = oneshot::channel();
        let client = Self {
            wr: Arc::new(Mutex::new((Box::new(wr), Deflater::default()))),
            seen: Default::default(),
            pipes: Default::default(),
            pongs: Default::default(),
            closed: Arc::new(Mutex::new(Some(closed_tx))),
        };
        let (seen, pipes, pongs, closed) = (
            client.seen.clone(),
            client.pipes.clone(),
            client.pongs.clone(),
            client.closed.clone(),
        );
        tokio::spawn(async move {
            let mut inflater = Inflater::default();
            while let Ok(Some(frame)) = spdy::read_frame(&mut rd, &mut inflater).await {
                let mut seen = seen.lock().await;
                match frame {
                    Frame::SynReply { id, .. } => seen.entry(id).or_default().replied = true,
                    Frame::Data { id, fin, data } => {
                        let s = seen.entry(id).or_default();
                        s.fin |= fin;
                        let pipe = pipes.lock().await.get(&id).cloned();
                        match pipe {
                            Some(p) => {
                                if !data.is_empty() {
                                    let _ = p.send(data).await;
                                }
                                if fin {
                                    pipes.lock().await.remove(&id);
                                }
                            }
                            None => s.data.extend_from_slice(&data),
                        }
                    }
                    Frame::RstStream { id, .. } => {
                        seen.entry(id).or_default().reset = true;
                        pipes.lock().await.remove(&id);
                    }
                    Frame::Ping { id } => pongs.lock().await.push(id),
                    _ => {}
                }
            }
            if let Some(tx) = closed.lock().await.take() {
                let _ = tx.send(());
            }
        });
        (client, closed_rx)
    }

    async fn send(&self, frame: Frame) {
        let mut w = self.wr.lock().await;
        let mut buf = Vec::new();
        spdy::write_frame(&frame, &mut w.1, &mut buf).unwrap();
        let _ = w.0.write_all(&buf).await;
        let _ = w.0.flush().await;
    }

    async fn send_raw(&self, bytes: &[u8]) {
        let mut w = self.wr.lock().await;
        let _ = w.0.write_all(bytes).await;
        let _ = w.0.flush().await;
    }

    /// Opens the error stream (closed at once, as KCP does) and the data stream of one
    /// request, as client-go does.
    async fn open_pair(&self, request: u32, port: u16) -> (u32, u32) {
        let (error, data) = (4 * request + 1, 4 * request + 3);
        let headers = |kind: &str| {
            vec![
                ("port".to_string(), port.to_string()),
                ("requestid".to_string(), request.to_string()),
                ("streamtype".to_string(), kind.to_string()),
            ]
        };
        self.send(Frame::SynStream {
            id: error,
            fin: false,
            headers: headers("error"),
        })
        .await;
        self.send(Frame::Data {
            id: error,
            fin: true,
            data: Bytes::new(),
        })
        .await;
        self.send(Frame::SynStream {
            id: data,
            fin: false,
            headers: headers("data"),
        })
        .await;
        (error, data)
    }

    /// The data stream as a byte pipe, for TLS on top.
    async fn pipe(self: &Arc<Self>, id: u32) -> DuplexStream {
        let (app, mut bridge) = tokio::io::duplex(64 << 10);
        let (tx, mut rx) = mpsc::channel::<Bytes>(16);
        self.pipes.lock().await.insert(id, tx);
        let this = self.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 16 << 10];
            loop {
                tokio::select! {
                    n = bridge.read(&mut buf) => match n {
                        Ok(0) | Err(_) => {
                            this.send(Frame::Data { id, fin: true, data: Bytes::new() }).await;
                            return;
                        }
                        Ok(n) => this.send(Frame::Data { id, fin: false, data: Bytes::copy_from_slice(&buf[..n]) }).await,
                    },
                    chunk = rx.recv() => match chunk {
                        Some(c) => { if bridge.write_all(&c).await.is_err() { return } }
                        None => { let _ = bridge.shutdown().await; return }
                    },
                }
            }
        });
        app
    }

    async fn wait_for(&self, what: impl Fn(&HashMap<u32, Seen>) -> bool) {
        for _ in 0..200 {
            if what(&*self.seen.lock().await) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("timed out waiting for the server");
    }
}

#[tokio::test]
async fn the_websocket_attempt_gets_a_non_101_and_unknown_pods_a_404() {
    let fake = start().await;
    // gorilla/websocket's handshake, as client-go's tunnel dialer sends it.
    let ws = http::Request::get("/api/v1/namespaces/kube-system/pods/etcd-cp-a/portforward")
        .header("host", "localhost")
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("sec-websocket-protocol", "SPDY/3.1+portforward.k8s.io")
        .body(Empty::new())
        .unwrap();
    let (code, status) = status_of(request(&fake, ws).await).await;
    assert_eq!(code, 400);
    assert_eq!(status["kind"], "Status");
    let missing = portforward("etcd-nope")
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .header("x-stream-protocol-version", "portforward.k8s.io")
        .body(Empty::new())
        .unwrap();
    let (code, status) = status_of(request(&fake, missing).await).await;
    assert_eq!(code, 404, "{status}");
    let no_upgrade = portforward("etcd-cp-a").body(Empty::new()).unwrap();
    assert_eq!(status_of(request(&fake, no_upgrade).await).await.0, 400);
    let other_protocol = portforward("etcd-cp-a")
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .header("x-stream-protocol-version", "v4.channel.k8s.io")
        .body(Empty::new())
        .unwrap();
    assert_eq!(status_of(request(&fake, other_protocol).await).await.0, 403);
}

#[tokio::test]
async fn etcd_grpc_through_port_forward() {
    let fake = start().await;
    let (client, _closed) = SpdyClient::new(upgrade(&fake, "etcd-cp-b").await);
    let client = Arc::new(client);
    let (error, data) = client.open_pair(0, 2379).await;
    client
        .wait_for(|s| {
            s.get(&error).is_some_and(|e| e.replied) && s.get(&data).is_some_and(|d| d.replied)
        })
        .await;
    let pipe = client.pipe(data).await;
    let (mut send, _) = h2_client(pipe, &fake.etcd_ca, "etcd-cp-b").await.unwrap();
    let list: MemberListResponse = grpc_call(
        &mut send,
        "/etcdserverpb.Cluster/MemberList",
        &MemberListRequest::default(),
    )
    .await
    .unwrap();
    let names: Vec<&str> = list.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["cp-a", "cp-b"]);
    let b = members(&fake.group)
        .into_iter()
        .find(|m| m.name == "cp-b")
        .unwrap();
    assert_eq!(list.header.unwrap().member_id, b.id);

    // A second request on the same session, and a ping.
    let (_, data2) = client.open_pair(1, 2379).await;
    let pipe = client.pipe(data2).await;
    let (mut send2, _) = h2_client(pipe, &fake.etcd_ca, "etcd-cp-b").await.unwrap();
    grpc_call::<MemberListResponse>(
        &mut send2,
        "/etcdserverpb.Cluster/MemberList",
        &MemberListRequest::default(),
    )
    .await
    .unwrap();
    client.send(Frame::Ping { id: 7 }).await;
    for _ in 0..100 {
        if client.pongs.lock().await.contains(&7) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(*client.pongs.lock().await, [7]);
}

#[tokio::test]
async fn a_port_nothing_serves_is_reported_on_the_error_stream() {
    let fake = start().await;
    let (client, _closed) = SpdyClient::new(upgrade(&fake, "etcd-cp-a").await);
    // Here the error stream stays open to read the report, as kubectl does.
    let headers = |kind: &str| {
        vec![
            ("port".to_string(), "2380".to_string()),
            ("requestid".to_string(), "0".to_string()),
            ("streamtype".to_string(), kind.to_string()),
        ]
    };
    client
        .send(Frame::SynStream {
            id: 1,
            fin: false,
            headers: headers("error"),
        })
        .await;
    client
        .send(Frame::SynStream {
            id: 3,
            fin: false,
            headers: headers("data"),
        })
        .await;
    client
        .wait_for(|s| s.get(&1).is_some_and(|e| e.fin) && s.get(&3).is_some_and(|d| d.reset))
        .await;
    let seen = client.seen.lock().await;
    let message = String::from_utf8_lossy(&seen[&1].data).to_string();
    assert!(
        message.starts_with("error forwarding port 2380 to pod kube-system/etcd-cp-a"),
        "{message}"
    );
    assert!(message.contains("nothing listens"), "{message}");
}

#[tokio::test]
async fn the_api_servers_certificate_through_port_forward() {
    let fake = start().await;
    let (client, _closed) = SpdyClient::new(upgrade(&fake, "kube-apiserver-cp-a").await);
    let client = Arc::new(client);
    let (_, data) = client.open_pair(0, 6443).await;
    let pipe = client.pipe(data).await;
    // KCP's certificate-expiry probe: a TLS handshake, then the peer's certificate (KCP
    // checks no name; this client checks the chain against the cluster CA).
    let tls = tls_client(&fake.api_ca, b"http/1.1")
        .connect(ServerName::try_from("localhost").unwrap(), pipe)
        .await
        .unwrap();
    let peer = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    let (_, leaf) = x509_parser::parse_x509_certificate(&peer).unwrap();
    let cn: Vec<&str> = leaf
        .subject()
        .iter_common_name()
        .filter_map(|c| c.as_str().ok())
        .collect();
    assert_eq!(cn, ["kube-apiserver"]);
    // And the API answers over it.
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let version = send
        .send_request(
            http::Request::get("/version")
                .header("host", "x")
                .body(Empty::<Bytes>::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(version.status(), 200);
}

#[tokio::test]
async fn a_protocol_error_closes_the_session_and_only_it() {
    let fake = start().await;
    let (client, closed) = SpdyClient::new(upgrade(&fake, "etcd-cp-a").await);
    // A SPDY/2 frame.
    client
        .send_raw(&[0x80, 0x02, 0x00, 0x06, 0, 0, 0, 4, 0, 0, 0, 1])
        .await;
    tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .expect("the session was not closed")
        .unwrap();
    // Even stream ids are the server's: a client using one is a protocol error too.
    let (client, closed) = SpdyClient::new(upgrade(&fake, "etcd-cp-a").await);
    client
        .send(Frame::SynStream {
            id: 2,
            fin: false,
            headers: vec![],
        })
        .await;
    tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .expect("the session was not closed")
        .unwrap();
    // The listener goes on.
    let ok = http::Request::get("/version")
        .header("host", "x")
        .body(Empty::new())
        .unwrap();
    assert_eq!(request(&fake, ok).await.status(), 200);
}

/// A session over an in-process pipe, with the clock paused (it moves when all is idle).
async fn session(fake: &Fake, pod: &str) -> (SpdyClient, oneshot::Receiver<()>) {
    let (client_io, server_io) = tokio::io::duplex(64 << 10);
    let pods = fake.listener_pods();
    let session = super::Session::new(pods, "kube-system".into(), pod.into());
    tokio::spawn(session.run(server_io));
    SpdyClient::over(client_io)
}

impl Fake {
    fn listener_pods(&self) -> Arc<super::Pods> {
        let pods = Arc::new(super::Pods::new(
            self.group.clone(),
            Box::new(|_| {}),
            tokio_util::sync::CancellationToken::new(),
        ));
        pods.set_etcd(
            crate::inmemory::etcd::Etcd::new(self.group.clone(), self.etcd_ca.as_bytes(), EC_SEC1)
                .ok(),
        );
        pods
    }
}

#[tokio::test]
async fn a_lone_stream_times_out_on_its_error_stream() {
    let fake = start().await;
    tokio::time::pause();
    let (client, _closed) = session(&fake, "etcd-cp-a").await;
    let headers = vec![
        ("requestid".to_string(), "9".to_string()),
        ("streamtype".to_string(), "error".to_string()),
    ];
    client
        .send(Frame::SynStream {
            id: 1,
            fin: false,
            headers,
        })
        .await;
    client
        .wait_for(|s| s.get(&1).is_some_and(|e| e.replied))
        .await;
    // The data stream never comes: after the kubelet's 30 s, the error stream says so.
    tokio::time::sleep(super::STREAM_CREATION_TIMEOUT + Duration::from_secs(1)).await;
    client.wait_for(|s| s.get(&1).is_some_and(|e| e.fin)).await;
    let seen = client.seen.lock().await;
    assert_eq!(
        String::from_utf8_lossy(&seen[&1].data),
        "timed out waiting for the streams of request 9"
    );
}

#[tokio::test]
async fn an_idle_session_ends_and_streams_are_bounded() {
    let fake = start().await;
    tokio::time::pause();
    let (client, closed) = session(&fake, "etcd-cp-a").await;
    // Every stream of one session counts; past the bound each new one is refused.
    for i in 0..=super::MAX_STREAMS as u32 {
        let headers = vec![
            ("requestid".to_string(), i.to_string()),
            ("streamtype".to_string(), "error".to_string()),
        ];
        client
            .send(Frame::SynStream {
                id: 2 * i + 1,
                fin: true,
                headers,
            })
            .await;
    }
    let last = 2 * super::MAX_STREAMS as u32 + 1;
    client
        .wait_for(|s| s.get(&last).is_some_and(|e| e.reset))
        .await;
    assert!(!client.seen.lock().await[&last].replied);
    assert!(client.seen.lock().await[&(last - 2)].replied);
    // Nothing more from the client: the session ends (the pending pairs time out first).
    tokio::time::sleep(super::IDLE_TIMEOUT + Duration::from_secs(1)).await;
    tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .expect("the idle session was not closed")
        .unwrap();
}

#[tokio::test]
async fn the_end_of_a_session_ends_its_pipes() {
    let fake = start().await;
    let pods = fake.listener_pods();
    let etcd = pods.etcd.read().unwrap().clone().unwrap();
    let (client_io, server_io) = tokio::io::duplex(64 << 10);
    let session = super::Session::new(pods.clone(), "kube-system".into(), "etcd-cp-a".into());
    let running = tokio::spawn(session.run(server_io));
    let (client, closed) = SpdyClient::over(client_io);
    let client = Arc::new(client);
    let (_, data) = client.open_pair(0, 2379).await;
    let pipe = client.pipe(data).await;
    let (mut send, _) = h2_client(pipe, &fake.etcd_ca, "etcd-cp-a").await.unwrap();
    grpc_call::<MemberListResponse>(
        &mut send,
        "/etcdserverpb.Cluster/MemberList",
        &MemberListRequest::default(),
    )
    .await
    .unwrap();
    // The member's connection holds the etcd server: the Pods' slot, ours, and it.
    assert_eq!(Arc::strong_count(&etcd), 3);
    // The session is dropped (as when its listener stops): the pipe and the member's
    // connection end with it, although this client never closed its stream.
    running.abort();
    tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .expect("the session was not closed")
        .unwrap();
    for _ in 0..200 {
        if Arc::strong_count(&etcd) == 2 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the member's connection outlived its session");
}

/// Not a test: the server end of `hack/inmemory-interop` (KCP's own dialer and etcd client, in
/// Go), run by hand with `cargo test --lib inmemory::portforward::tests::serve_for_go --
/// --ignored --nocapture`. Writes a kubeconfig and the etcd CA to `$INMEMORY_INTEROP_DIR`
/// (default /tmp/inmemory-interop), with etcd members cp-a (leader), cp-b and cp-c and the
/// Pod kube-apiserver-cp-a, then serves for `$INMEMORY_INTEROP_SECONDS` (default 120).
#[tokio::test]
#[ignore = "a harness for the Go interop program, run by hand"]
async fn serve_for_go() {
    use base64::Engine as _;
    let dir = std::env::var("INMEMORY_INTEROP_DIR").unwrap_or("/tmp/inmemory-interop".into());
    let seconds: u64 = std::env::var("INMEMORY_INTEROP_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or("capd=debug".into()))
        .try_init();
    let fake = start().await;
    add_etcd_pod(&fake.group, "cp-c", chrono::Utc::now());
    std::fs::create_dir_all(&dir).unwrap();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c1\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c1\n  context: {{cluster: c1, user: u}}\ncurrent-context: c1\n",
        fake.listener.local_addr().port(),
        b64(&fake.api_ca)
    );
    std::fs::write(format!("{dir}/kubeconfig"), kubeconfig).unwrap();
    std::fs::write(format!("{dir}/etcd-ca.crt"), &fake.etcd_ca).unwrap();
    std::fs::write(format!("{dir}/etcd-ca.key"), EC_SEC1).unwrap();
    println!("serving on {} for {seconds} s", fake.listener.local_addr());
    tokio::time::sleep(Duration::from_secs(seconds)).await;
}
