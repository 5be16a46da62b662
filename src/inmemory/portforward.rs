//! `POST /api/v1/namespaces/<ns>/pods/<pod>/portforward` over SPDY/3.1, as the kubelet
//! serves it, with the pod's ports served in process: a forwarded connection is a byte pipe
//! ([`tokio::io::duplex`]) to the fake etcd of that member (`etcd-<node>`, port 2379) or to
//! this API server itself (`kube-apiserver-<node>`), never a socket.
//!
//! **Negotiation.** client-go (v0.36, which KCP v1.14 links) first tries a WebSocket tunnel
//! (`GET` with `Upgrade: websocket`) and falls back to SPDY when that upgrade fails with
//! anything but a `101` (gorilla/websocket reports any other answer as a bad handshake,
//! client-go wraps it as an upgrade failure, and KCP's dialer falls back on exactly that).
//! So the WebSocket attempt gets a `400` Status, and the `POST` with `Upgrade: SPDY/3.1` and
//! `X-Stream-Protocol-Version: portforward.k8s.io` a `101`.
//!
//! **Streams.** Per forwarded connection the client opens two streams with the same
//! `requestID` header: `streamType: error` and `streamType: data` (with a `port` header). Each
//! gets a SYN_REPLY at once. Once both are there, the data stream is piped to the port's
//! server; a port nothing serves is reported on the error stream with the kubelet's wording
//! ("error forwarding port ...") and the data stream reset. A pair not complete within
//! [`STREAM_CREATION_TIMEOUT`] is reported the same way. A pod that does not exist is the API
//! server's `404` before any upgrade.
//!
//! **Bounds.** [`MAX_SESSIONS`] sessions per listener (then `429`), [`MAX_STREAMS`] streams
//! per session over its life (then each new one is refused with RST_STREAM), frames bounded
//! by [`super::spdy`], at most [`QUEUED_CHUNKS`] data frames queued towards one pipe: when a
//! pipe's reader is slow, reading the connection waits (as spdystream's own frame loop does),
//! so memory stays bounded. A session with no frame from the client for [`IDLE_TIMEOUT`]
//! (client-go pings every few seconds when asked to) ends. Every protocol error ends the
//! session with GOAWAY and a close, never a panic.
use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{Arc, RwLock},
    time::Duration,
};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, combinators::UnsyncBoxBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream},
    sync::{Semaphore, mpsc},
    time::Instant,
};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::{
    etcd::{self, Etcd},
    kinds,
    spdy::{self, Deflater, Frame, Headers, Inflater, SpdyError},
    status::ApiError,
    store::Group,
};

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// The sub-protocol port-forward speaks inside SPDY.
pub const PROTOCOL: &str = "portforward.k8s.io";
/// Port-forward sessions one listener serves at once.
pub const MAX_SESSIONS: usize = 128;
/// Streams one session may open over its life (two per forwarded connection).
pub const MAX_STREAMS: usize = 256;
/// How long the second stream of a pair may take (the kubelet's default).
pub const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// Data frames queued towards one pipe before the session waits for it.
pub const QUEUED_CHUNKS: usize = 8;
/// The API server's port in a kube-apiserver static pod when the pod declares none.
pub const API_SERVER_PORT: u16 = 6443;
/// How long the end of a session waits for its last frames to be written.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes buffered in each direction of a pipe.
const PIPE: usize = 64 << 10;
const READ_CHUNK: usize = 32 << 10;
/// Frames waiting for the connection's writer.
const OUTGOING: usize = 64;

/// Serves the API over one more connection (the TLS endpoint of a forwarded
/// `kube-apiserver-<node>` port).
pub type ApiServer = Box<dyn Fn(DuplexStream) + Send + Sync>;

/// What the pods of one workload cluster serve through port-forward.
pub struct Pods {
    group: Arc<Group>,
    etcd: RwLock<Option<Arc<Etcd>>>,
    api_server: ApiServer,
    sessions: Arc<Semaphore>,
    stop: CancellationToken,
}

impl std::fmt::Debug for Pods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pods").finish_non_exhaustive()
    }
}

fn pods() -> kinds::ResourceId {
    kinds::find("", "v1", "pods").unwrap_or_default()
}

fn has_token(req: &Request<Incoming>, name: header::HeaderName, token: &str) -> bool {
    req.headers().get_all(name).iter().any(|v| {
        v.to_str()
            .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    })
}

impl Pods {
    /// `api_server` serves the API over a forwarded connection; `stop` ends every session.
    pub fn new(group: Arc<Group>, api_server: ApiServer, stop: CancellationToken) -> Self {
        Self {
            group,
            etcd: RwLock::new(None),
            api_server,
            sessions: Arc::new(Semaphore::new(MAX_SESSIONS)),
            stop,
        }
    }

    pub fn group(&self) -> &Arc<Group> {
        &self.group
    }

    /// Sets (or with `None` removes) the cluster's fake etcd, which its etcd Pods serve.
    pub fn set_etcd(&self, etcd: Option<Arc<Etcd>>) {
        *self.etcd.write().unwrap_or_else(|e| e.into_inner()) = etcd;
    }

    /// Connects to `port` of `pod` (in kube-system), or says why not as the kubelet would.
    fn connect(&self, namespace: &str, pod: &str, port: u16) -> Result<DuplexStream, String> {
        let obj = self
            .group
            .get(pods(), namespace, pod)
            .map_err(|_| format!("pod {namespace}/{pod} not found"))?
            .value();
        let component = obj["metadata"]["labels"]["component"]
            .as_str()
            .unwrap_or("");
        let declared = || {
            obj["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|c| c["ports"].as_array().into_iter().flatten())
                .filter_map(|p| p["containerPort"].as_u64())
                .any(|p| p == u64::from(port))
        };
        let refused = || {
            format!(
                "failed to connect to localhost:{port} inside the pod: nothing listens on that port in the in-memory cluster"
            )
        };
        let (ours, theirs) = tokio::io::duplex(PIPE);
        match (namespace, component) {
            ("kube-system", "etcd") if port == etcd::PORT => {
                let node = pod.strip_prefix(etcd::POD_PREFIX).ok_or_else(refused)?;
                let etcd = self
                    .etcd
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone()
                    .ok_or("the in-memory etcd of this cluster has no CA registered yet")?;
                etcd.serve(theirs, node.to_string());
            }
            ("kube-system", "kube-apiserver") if port == API_SERVER_PORT || declared() => {
                (self.api_server)(theirs);
            }
            _ => return Err(refused()),
        }
        Ok(ours)
    }

    /// Answers a request on `pods/<name>/portforward`.
    pub fn answer(
        self: &Arc<Self>,
        req: Request<Incoming>,
        namespace: &str,
        name: &str,
    ) -> Result<Response<Body>, ApiError> {
        // The pod first, as the API server does (404 for the WebSocket attempt too).
        self.group.get(pods(), namespace, name)?;
        if has_token(&req, header::UPGRADE, "websocket") {
            // Not 101: client-go takes it as an upgrade failure and falls back to SPDY.
            return Err(ApiError::bad_request(
                "the in-memory API server forwards ports over SPDY/3.1 only, not WebSockets",
            ));
        }
        if req.method() != Method::POST {
            return Err(ApiError::method_not_allowed(
                "port-forward is a POST with Upgrade: SPDY/3.1",
            ));
        }
        if !has_token(&req, header::CONNECTION, "upgrade")
            || !has_token(&req, header::UPGRADE, "SPDY/3.1")
        {
            return Err(ApiError::bad_request(
                "unable to upgrade: missing upgrade headers in request (Connection: Upgrade, Upgrade: SPDY/3.1)",
            ));
        }
        let version = header::HeaderName::from_static("x-stream-protocol-version");
        if !has_token(&req, version.clone(), PROTOCOL) {
            return Err(ApiError::forbidden(format!(
                "unable to upgrade: no supported protocol in X-Stream-Protocol-Version (the server speaks {PROTOCOL})"
            )));
        }
        let Ok(permit) = self.sessions.clone().try_acquire_owned() else {
            return Err(ApiError::new(
                429,
                "TooManyRequests",
                "too many port-forward sessions on this in-memory cluster",
            ));
        };
        let (this, namespace, pod) = (self.clone(), namespace.to_string(), name.to_string());
        tokio::spawn(async move {
            let _permit = permit;
            match hyper::upgrade::on(req).await {
                Ok(upgraded) => {
                    let stop = this.stop.clone();
                    let session = Session::new(this, namespace, pod);
                    tokio::select! {
                        r = session.run(TokioIo::new(upgraded)) => {
                            if let Err(e) = r { debug!(error = %e, "port-forward session ended") }
                        }
                        _ = stop.cancelled() => {}
                    }
                }
                Err(e) => debug!(error = %e, "port-forward upgrade failed"),
            }
        });
        let mut response = Response::new(http_body_util::Empty::new().boxed_unsync());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let h = response.headers_mut();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        h.insert(version, HeaderValue::from_static(PROTOCOL));
        Ok(response)
    }
}

/// One stream the client opened, as the pairing sees it.
struct Opened {
    id: u32,
    headers: Headers,
    incoming: mpsc::Receiver<Bytes>,
    reset: CancellationToken,
}

#[derive(Default)]
struct Pair {
    error: Option<Opened>,
    data: Option<Opened>,
    deadline: Option<Instant>,
}

/// The reading side's record of a stream: where its data goes until the client's FIN.
struct Open {
    to_pipe: Option<mpsc::Sender<Bytes>>,
    reset: CancellationToken,
}

struct Session {
    pods: Arc<Pods>,
    namespace: String,
    pod: String,
    streams: HashMap<u32, Open>,
    opened: usize,
    last_id: u32,
    pairs: HashMap<String, Pair>,
    /// Cancelled when the session ends, however it ends (also when its future is dropped):
    /// stops the writer and every pipe.
    done: CancellationToken,
    /// Every stream's reset token is a child: cancelled first, to end the pipes while the
    /// writer still flushes what they sent.
    streams_done: CancellationToken,
}

/// Why a session ended early.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error(transparent)]
    Spdy(#[from] SpdyError),
    #[error("protocol: {0}")]
    Protocol(&'static str),
    #[error("no frame for {0:?}")]
    Idle(Duration),
}

impl Session {
    fn new(pods: Arc<Pods>, namespace: String, pod: String) -> Self {
        let done = CancellationToken::new();
        Self {
            pods,
            namespace,
            pod,
            streams: HashMap::new(),
            opened: 0,
            last_id: 0,
            pairs: HashMap::new(),
            streams_done: done.child_token(),
            done,
        }
    }

    async fn run<IO>(mut self, io: IO) -> Result<(), SessionError>
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let _ends_everything = self.done.clone().drop_guard();
        let (rd, wr) = tokio::io::split(io);
        let (out, rx) = mpsc::channel(OUTGOING);
        let writer = tokio::spawn(write_frames(wr, rx, self.done.clone()));
        let result = self.read_loop(rd, &out).await;
        if let Err(e) = &result {
            let status = match e {
                SessionError::Idle(_) => spdy::goaway::OK,
                _ => spdy::goaway::PROTOCOL_ERROR,
            };
            let goaway = Frame::GoAway {
                last_good: self.last_id,
                status,
            };
            let _ = tokio::time::timeout(FLUSH_TIMEOUT, out.send(goaway)).await;
        }
        // Ends every pipe, then lets the writer flush for a moment; a client that does not
        // read does not hold the session.
        self.streams_done.cancel();
        drop(out);
        let _ = tokio::time::timeout(FLUSH_TIMEOUT, writer).await;
        result
    }

    async fn read_loop<R: AsyncRead + Unpin + Send + 'static>(
        &mut self,
        rd: R,
        out: &mpsc::Sender<Frame>,
    ) -> Result<(), SessionError> {
        // Frames are read by a task of their own: reading one is not cancel-safe, and the
        // loop below also waits for pair deadlines. One frame in flight keeps the
        // backpressure of a slow pipe on the connection.
        let (tx, mut frames) = mpsc::channel(1);
        let reader = tokio::spawn(async move {
            let mut rd = rd;
            let mut inflater = Inflater::default();
            loop {
                let frame = spdy::read_frame(&mut rd, &mut inflater).await;
                let end = !matches!(frame, Ok(Some(_)));
                if tx.send(frame).await.is_err() || end {
                    return;
                }
            }
        });
        let _abort = AbortOnDrop(reader);
        let mut last_frame = Instant::now();
        loop {
            let next_deadline = self.pairs.values().filter_map(|p| p.deadline).min();
            let frame = tokio::select! {
                f = tokio::time::timeout_at(last_frame + IDLE_TIMEOUT, frames.recv()) => match f {
                    Ok(Some(f)) => { last_frame = Instant::now(); f? }
                    Ok(None) => return Ok(()),
                    Err(_) => return Err(SessionError::Idle(IDLE_TIMEOUT)),
                },
                _ = sleep_until(next_deadline) => {
                    self.expire_pairs(out).await;
                    continue;
                }
            };
            let Some(frame) = frame else { return Ok(()) };
            match frame {
                Frame::SynStream { id, fin, headers } => {
                    self.open(id, fin, headers, out).await?;
                }
                Frame::Data { id, fin, data } => {
                    if let Some(s) = self.streams.get_mut(&id) {
                        if !data.is_empty()
                            && let Some(tx) = &s.to_pipe
                            && tx.send(data).await.is_err()
                        {
                            // The pipe is gone: what follows is dropped.
                            s.to_pipe = None;
                        }
                        if fin {
                            self.streams.remove(&id);
                        }
                    }
                    // Data on a stream that is closed or unknown is dropped, as spdystream
                    // does.
                }
                Frame::RstStream { id, .. } => {
                    if let Some(s) = self.streams.remove(&id) {
                        s.reset.cancel();
                    }
                }
                // Only the client's pings (odd ids) are answered; the server sends none.
                Frame::Ping { id } if id % 2 == 1 => {
                    let _ = out.send(Frame::Ping { id }).await;
                }
                // HEADERS may close the client's half too (client-go sends none).
                Frame::Headers { id, fin: true, .. } => {
                    self.streams.remove(&id);
                }
                Frame::GoAway { .. } => return Ok(()),
                Frame::Ping { .. }
                | Frame::SynReply { .. }
                | Frame::Headers { .. }
                | Frame::Ignored { .. } => {}
            }
        }
    }

    async fn open(
        &mut self,
        id: u32,
        fin: bool,
        headers: Headers,
        out: &mpsc::Sender<Frame>,
    ) -> Result<(), SessionError> {
        if id.is_multiple_of(2) || id <= self.last_id {
            return Err(SessionError::Protocol(
                "a stream id not odd or not increasing",
            ));
        }
        self.last_id = id;
        if self.opened >= MAX_STREAMS {
            let _ = out
                .send(Frame::RstStream {
                    id,
                    status: spdy::rst::REFUSED_STREAM,
                })
                .await;
            return Ok(());
        }
        self.opened += 1;
        // Replied at once: the client waits for it before using the stream.
        let _ = out
            .send(Frame::SynReply {
                id,
                fin: false,
                headers: vec![],
            })
            .await;
        let (tx, rx) = mpsc::channel(QUEUED_CHUNKS);
        let reset = self.streams_done.child_token();
        if !fin {
            self.streams.insert(
                id,
                Open {
                    to_pipe: Some(tx),
                    reset: reset.clone(),
                },
            );
        }
        let stream = Opened {
            id,
            headers,
            incoming: rx,
            reset,
        };
        self.pair(stream, out).await;
        Ok(())
    }

    /// Adds a stream to its request's pair; a complete pair starts forwarding.
    async fn pair(&mut self, stream: Opened, out: &mpsc::Sender<Frame>) {
        let kind = spdy::header(&stream.headers, "streamtype").unwrap_or("");
        // Without a requestID header, the kubelet pairs an error stream n with data stream
        // n+2 (how older clients opened them).
        let request = match spdy::header(&stream.headers, "requestid") {
            Some(r) => r.to_string(),
            None if kind == "data" => stream.id.saturating_sub(2).to_string(),
            None => stream.id.to_string(),
        };
        if !self.pairs.contains_key(&request) && self.pairs.len() >= MAX_STREAMS {
            return reset(out, &stream).await;
        }
        let pair = self.pairs.entry(request.clone()).or_default();
        let slot = match kind {
            "error" => &mut pair.error,
            "data" => &mut pair.data,
            _ => return reset(out, &stream).await,
        };
        if slot.is_some() {
            // A second stream of the same type for one request.
            return reset(out, &stream).await;
        }
        *slot = Some(stream);
        pair.deadline
            .get_or_insert_with(|| Instant::now() + STREAM_CREATION_TIMEOUT);
        if pair.error.is_some() && pair.data.is_some() {
            let pair = self.pairs.remove(&request).unwrap_or_default();
            if let (Some(error), Some(data)) = (pair.error, pair.data) {
                self.forward(error, data, out.clone());
            }
        }
    }

    /// Reports pairs whose second stream did not come in time, on the error stream if it is
    /// there, and resets what came.
    async fn expire_pairs(&mut self, out: &mpsc::Sender<Frame>) {
        let now = Instant::now();
        let expired: Vec<String> = self
            .pairs
            .iter()
            .filter(|(_, p)| p.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for request in expired {
            let Some(pair) = self.pairs.remove(&request) else {
                continue;
            };
            let message = format!("timed out waiting for the streams of request {request}");
            if let Some(error) = &pair.error {
                report(out, error.id, message).await;
            }
            if let Some(data) = &pair.data {
                reset(out, data).await;
            }
        }
    }

    /// Pipes the data stream to the port's server, or reports why not.
    fn forward(&self, error: Opened, data: Opened, out: mpsc::Sender<Frame>) {
        let port = spdy::header(&data.headers, "port")
            .unwrap_or("")
            .to_string();
        let connected = port
            .parse::<u16>()
            .map_err(|_| format!("invalid port {port:?}"))
            .and_then(|p| self.pods.connect(&self.namespace, &self.pod, p));
        let (namespace, pod) = (self.namespace.clone(), self.pod.clone());
        tokio::spawn(async move {
            let pipe = match connected {
                Ok(pipe) => pipe,
                Err(why) => {
                    // The kubelet's wording, so that clients and people read it the same.
                    let message = format!(
                        "error forwarding port {port} to pod {namespace}/{pod}, uid : {why}"
                    );
                    report(&out, error.id, message).await;
                    return reset(&out, &data).await;
                }
            };
            pipe_stream(pipe, data, &out).await;
            // Done: the error stream closes without a word.
            let _ = out
                .send(Frame::Data {
                    id: error.id,
                    fin: true,
                    data: Bytes::new(),
                })
                .await;
        });
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Writes `message` on an error stream and closes it.
async fn report(out: &mpsc::Sender<Frame>, id: u32, message: String) {
    let _ = out
        .send(Frame::Data {
            id,
            fin: true,
            data: Bytes::from(message),
        })
        .await;
}

async fn reset(out: &mpsc::Sender<Frame>, stream: &Opened) {
    stream.reset.cancel();
    let _ = out
        .send(Frame::RstStream {
            id: stream.id,
            status: spdy::rst::CANCEL,
        })
        .await;
}

/// Copies both ways between a data stream and its pipe until both directions end or the
/// stream is reset.
async fn pipe_stream(pipe: DuplexStream, stream: Opened, out: &mpsc::Sender<Frame>) {
    let Opened {
        id,
        mut incoming,
        reset,
        ..
    } = stream;
    let (mut from_target, mut to_target) = tokio::io::split(pipe);
    let upstream = async {
        while let Some(chunk) = incoming.recv().await {
            if to_target.write_all(&chunk).await.is_err() {
                // The target closed: drain nothing more into it.
                return;
            }
        }
        // The client's FIN: the target sees the end of its input.
        let _ = to_target.shutdown().await;
    };
    let downstream = async {
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            match from_target.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let data = Bytes::copy_from_slice(&buf[..n]);
                    if out
                        .send(Frame::Data {
                            id,
                            fin: false,
                            data,
                        })
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
        let _ = out
            .send(Frame::Data {
                id,
                fin: true,
                data: Bytes::new(),
            })
            .await;
    };
    tokio::select! {
        _ = async { tokio::join!(upstream, downstream) } => {}
        _ = reset.cancelled() => {}
    }
}

/// Encodes frames in the order they are sent (header compression is one context) and writes
/// them, batching what is already queued.
async fn write_frames<W: AsyncWrite + Unpin>(
    wr: W,
    rx: mpsc::Receiver<Frame>,
    done: CancellationToken,
) {
    tokio::select! {
        _ = write_all_frames(wr, rx) => {}
        _ = done.cancelled() => {}
    }
}

async fn write_all_frames<W: AsyncWrite + Unpin>(mut wr: W, mut rx: mpsc::Receiver<Frame>) {
    let mut deflater = Deflater::default();
    let mut buf = Vec::with_capacity(READ_CHUNK + 64);
    while let Some(frame) = rx.recv().await {
        buf.clear();
        let mut next = Some(frame);
        while let Some(f) = next.take() {
            if let Err(e) = spdy::write_frame(&f, &mut deflater, &mut buf) {
                debug!(error = %e, "port-forward: encoding a frame");
                return;
            }
            if buf.len() < 4 * READ_CHUNK {
                next = rx.try_recv().ok();
            }
        }
        if wr.write_all(&buf).await.is_err() || wr.flush().await.is_err() {
            return;
        }
    }
    let _ = wr.shutdown().await;
}

#[cfg(test)]
mod tests;
