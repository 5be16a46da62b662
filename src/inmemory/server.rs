//! The fake workload API server: one HTTPS listener per group, serving the Kubernetes API over
//! the group's [`Group`] store.
//!
//! Served: `GET /` (the health probe CAPI's ClusterCache sends every 10 s), `/healthz`,
//! `/livez`, `/readyz`, `/version`; discovery (`/api`, `/api/v1`, `/apis`, `/apis/<g>`,
//! `/apis/<g>/<v>`; the legacy documents, which client-go falls back to from aggregated
//! discovery); for every resource of [`RESOURCES`]: get, list (`labelSelector`,
//! `fieldSelector`, `limit`, `continue`), create, update, merge/JSON/strategic patch, delete
//! (with preconditions), the `status` subresource, and watch (`resourceVersion`,
//! `timeoutSeconds`, `allowWatchBookmarks`, and watch-list: `sendInitialEvents=true` with
//! `resourceVersionMatch=NotOlderThan`). Bodies of create, update and delete are JSON or
//! protobuf (`application/vnd.kubernetes.protobuf`, what controller-runtime sends for built-in
//! kinds) for the kinds CAPI, KCP and CABPK write: ConfigMap, Secret, Node, ClusterRoleBinding,
//! and DeleteOptions ([`super::protobuf`]); a protobuf body of another kind is a 415 naming it.
//! Patches are JSON, as every client sends them. `pods/<pod>/eviction` is not served: its POST
//! (JSON or protobuf) is a 404 `NotFound` before the body is read, which CAPI's drain reads as
//! "the Pod is gone", as from upstream's fake.
//!
//! Answers are always JSON, whatever the request's `Accept` (client-go asks for protobuf
//! first): client-go v0.36.3 picks its decoder by the *response's* Content-Type, for a single
//! object (`rest/request.go:1210-1220`, `transformResponse`) and for a watch stream alike
//! (`rest/request.go:832-837`, `newStreamWatcher`), through the client negotiator, which serves
//! every media type its scheme supports, JSON included (apimachinery
//! `pkg/runtime/negotiate.go:58-83`).
//! And `pods/<name>/portforward`, handed to [`super::portforward`].
//!
//! Every failure is a `Status` object with its code: unknown paths 404, unserved verbs 405,
//! bad bodies or parameters 400, too-large bodies 413, unsupported media types (and protobuf
//! bodies of kinds not decoded) 415.
//!
//! Bounds: [`MAX_CONNECTIONS`] connections per listener (more wait in the kernel's queue),
//! bodies of at most [`MAX_BODY`], a TLS handshake within 10 s, request headers within 30 s, a
//! non-watch request within 60 s, a watch at most an hour. A watch holds no copy of the events:
//! it reads the group's event ring as the client consumes. One that starts from, or falls
//! behind to, a resourceVersion the ring no longer covers ends with an ERROR event carrying a
//! 410 `Expired` Status, as the API server's watch cache does (the client lists again).
use std::{
    collections::{HashMap, VecDeque},
    convert::Infallible,
    io,
    net::SocketAddr,
    sync::{Arc, Weak},
    time::Duration,
};

use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, StreamBody, combinators::UnsyncBoxBody};
use hyper::{
    body::{Frame, Incoming},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::ServerConfig;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpListener,
    sync::{Semaphore, watch},
    time::Instant,
};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{
    certs::CertError,
    etcd::Etcd,
    kinds::{self, RESOURCES, Resource, ResourceId, VERBS},
    patch::{self, PatchType},
    portforward::Pods,
    protobuf,
    selector::{FieldSelector, LabelSelector},
    status::ApiError,
    store::{Event, EventType, Filter, Group, Obj, Part, Preconditions},
};

/// Connections one listener holds at once (over HTTP/1.1 each watch holds one; CAPI's
/// managers hold a handful per cluster).
pub const MAX_CONNECTIONS: usize = 256;
/// The largest request body read (an object's limit in the store is 1 MiB).
pub const MAX_BODY: usize = 3 << 20;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// A watch without `timeoutSeconds` ends after this (the API server picks 30-60 min).
const DEFAULT_WATCH: Duration = Duration::from_secs(1800);
const MAX_WATCH: Duration = Duration::from_secs(3600);
/// How often a watch that allows bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);
/// The Kubernetes version `/version` reports.
const VERSION: (&str, &str) = ("1", "35");

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A listening fake API server for one group. Dropping it (or [`Listener::stop`]) closes the
/// socket and every connection.
#[derive(Debug)]
pub struct Listener {
    local: SocketAddr,
    stop: CancellationToken,
    pods: Arc<Pods>,
}

impl Listener {
    /// Binds `addr` and serves `group` over TLS with `tls` (see [`super::certs::serving_config`]).
    pub async fn bind(
        addr: SocketAddr,
        tls: Arc<ServerConfig>,
        group: Arc<Group>,
    ) -> io::Result<Self> {
        let tcp = TcpListener::bind(addr).await?;
        let local = tcp.local_addr()?;
        let stop = CancellationToken::new();
        let acceptor = TlsAcceptor::from(tls);
        // A port-forward to a kube-apiserver Pod is one more connection to this server.
        let ctx = Arc::new_cyclic(|me: &Weak<Ctx>| {
            let (me, acceptor, conn_stop) = (me.clone(), acceptor.clone(), stop.clone());
            let api_server = Box::new(move |pipe| {
                if let Some(ctx) = me.upgrade() {
                    let conn = serve_conn(pipe, acceptor.clone(), ctx, conn_stop.clone(), None);
                    tokio::spawn(conn);
                }
            });
            let pods = Arc::new(Pods::new(group.clone(), api_server, stop.clone()));
            Ctx { group, local, pods }
        });
        let pods = ctx.pods.clone();
        tokio::spawn(accept(tcp, acceptor, ctx, stop.clone()));
        Ok(Self { local, stop, pods })
    }

    /// Registers the cluster's etcd CA (the `<cluster>-etcd` Secret's `tls.crt` and
    /// `tls.key`): from then on the group's etcd Pods serve the fake etcd through port-forward.
    pub fn register_etcd_ca(&self, ca_cert_pem: &[u8], ca_key_pem: &[u8]) -> Result<(), CertError> {
        let etcd = Etcd::new(self.pods.group().clone(), ca_cert_pem, ca_key_pem)?;
        self.pods.set_etcd(Some(etcd));
        Ok(())
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

struct Ctx {
    group: Arc<Group>,
    local: SocketAddr,
    pods: Arc<Pods>,
}

async fn accept(tcp: TcpListener, acceptor: TlsAcceptor, ctx: Arc<Ctx>, stop: CancellationToken) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p,
            _ = stop.cancelled() => return,
        };
        let Ok(permit) = permit else { return };
        let (stream, peer) = tokio::select! {
            accepted = tcp.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    warn!(error = %e, "in-memory API server: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => return,
        };
        let (acceptor, ctx, stop) = (acceptor.clone(), ctx.clone(), stop.clone());
        tokio::spawn(async move {
            let _permit = permit;
            serve_conn(stream, acceptor, ctx, stop, Some(peer)).await;
        });
    }
}

/// Serves HTTP/1.1 (with upgrades, for port-forward) over one TLS connection: a client's
/// socket, or a pipe port-forwarded to a kube-apiserver Pod (no `peer`).
async fn serve_conn<IO>(
    io: IO,
    acceptor: TlsAcceptor,
    ctx: Arc<Ctx>,
    stop: CancellationToken,
    peer: Option<SocketAddr>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return debug!(?peer, error = %e, "TLS handshake failed"),
        Err(_) => return debug!(?peer, "TLS handshake timed out"),
    };
    let service = service_fn(move |req| {
        let ctx = ctx.clone();
        async move { Ok::<_, Infallible>(handle(&ctx, req).await) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(tls), service)
        .with_upgrades();
    tokio::select! {
        r = conn => if let Err(e) = r { debug!(?peer, error = %e, "connection ended") },
        _ = stop.cancelled() => {}
    }
}

async fn handle(ctx: &Ctx, req: Request<Incoming>) -> Response<Body> {
    // A watch answers at once with a streaming body, so this bounds its start only.
    match tokio::time::timeout(REQUEST_TIMEOUT, route(ctx, req)).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => failure(&e),
        Err(_) => failure(&ApiError::new(
            504,
            "Timeout",
            "the request was not completed in time",
        )),
    }
}

fn body(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

fn respond(code: u16, content_type: &str, bytes: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(body(bytes));
    *response.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    response
}

fn json_bytes(code: u16, bytes: impl Into<Bytes>) -> Response<Body> {
    respond(code, "application/json", bytes)
}

fn json_value(code: u16, value: &Value) -> Response<Body> {
    json_bytes(code, serde_json::to_vec(value).unwrap_or_default())
}

fn failure(e: &ApiError) -> Response<Body> {
    json_value(e.code, &e.to_status())
}

fn not_allowed() -> ApiError {
    ApiError::method_not_allowed("the server does not allow this method on the requested resource")
}

struct Query(HashMap<String, String>);

impl Query {
    fn parse(query: Option<&str>) -> Self {
        Self(
            form_urlencoded::parse(query.unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn flag(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some("true" | "1") => Ok(Some(true)),
            Some("false" | "0" | "") => Ok(Some(false)),
            Some(other) => Err(ApiError::bad_request(format!(
                "{key}: invalid boolean {other:?}"
            ))),
        }
    }

    fn number(&self, key: &str) -> Result<Option<u64>, ApiError> {
        self.get(key)
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse()
                    .map_err(|_| ApiError::bad_request(format!("{key}: invalid number {v:?}")))
            })
            .transpose()
    }
}

async fn route(ctx: &Ctx, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let is_get = req.method() == Method::GET;
    let get_only = |value: Result<Value, ApiError>| {
        if is_get {
            value.map(|v| json_value(200, &v))
        } else {
            Err(not_allowed())
        }
    };
    match segments.as_slice() {
        [] => get_only(Ok(root())),
        ["healthz" | "livez" | "readyz"] => {
            if is_get {
                Ok(respond(200, "text/plain; charset=utf-8", "ok"))
            } else {
                Err(not_allowed())
            }
        }
        ["version"] => get_only(Ok(version())),
        ["api"] => get_only(Ok(json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ctx.local.to_string()}],
        }))),
        ["apis"] => get_only(Ok(group_list())),
        ["api", version] => get_only(resource_list("", version)),
        ["apis", group] => get_only(api_group(group).ok_or_else(ApiError::path_not_found)),
        ["apis", group, version] => get_only(resource_list(group, version)),
        ["api", version, rest @ ..] => resource(ctx, req, "", version, rest).await,
        ["apis", group, version, rest @ ..] => resource(ctx, req, group, version, rest).await,
        _ => Err(ApiError::path_not_found()),
    }
}

fn root() -> Value {
    let mut paths = vec!["/api".to_string(), "/api/v1".into(), "/apis".into()];
    for (g, v) in kinds::group_versions() {
        if !g.is_empty() {
            paths.push(format!("/apis/{g}"));
            paths.push(format!("/apis/{g}/{v}"));
        }
    }
    paths.extend(["/healthz", "/livez", "/readyz", "/version"].map(String::from));
    json!({ "paths": paths })
}

fn version() -> Value {
    let (major, minor) = VERSION;
    json!({
        "major": major,
        "minor": minor,
        "gitVersion": format!("v{major}.{minor}.0"),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "",
        "compiler": "capd-rs in-memory",
        "platform": format!("linux/{}", std::env::consts::ARCH),
    })
}

fn group_entry(group: &str) -> Option<Value> {
    let versions: Vec<Value> = kinds::group_versions()
        .into_iter()
        .filter(|(g, _)| *g == group && !group.is_empty())
        .map(|(g, v)| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first()?.clone();
    Some(json!({"name": group, "versions": versions, "preferredVersion": preferred}))
}

fn group_list() -> Value {
    let mut seen = Vec::new();
    for (g, _) in kinds::group_versions() {
        if !g.is_empty() && !seen.contains(&g) {
            seen.push(g);
        }
    }
    let groups: Vec<Value> = seen.into_iter().filter_map(group_entry).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn api_group(group: &str) -> Option<Value> {
    let mut entry = group_entry(group)?;
    entry["kind"] = json!("APIGroup");
    entry["apiVersion"] = json!("v1");
    Some(entry)
}

fn resource_list(group: &str, version: &str) -> Result<Value, ApiError> {
    let mut resources = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        resources.push(json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": VERBS,
            "shortNames": r.short_names,
        }));
        if r.status {
            resources.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return Err(ApiError::path_not_found());
    }
    Ok(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": RESOURCES.iter().find(|r| r.group == group && r.version == version).map(Resource::api_version),
        "resources": resources,
    }))
}

async fn resource(
    ctx: &Ctx,
    req: Request<Incoming>,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Response<Body>, ApiError> {
    let query = Query::parse(req.uri().query());
    if query.get("dryRun").is_some_and(|v| !v.is_empty()) {
        return Err(ApiError::bad_request(
            "dryRun is not supported by the in-memory API server",
        ));
    }
    // The legacy `/watch/` paths: a watch of what follows.
    let (watch_path, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    let namespaced_path = rest.len() >= 3
        && rest[0] == "namespaces"
        && kinds::find(group, version, rest[2]).is_some_and(|i| RESOURCES[i].namespaced);
    let (namespace, rest) = if namespaced_path {
        (Some(rest[1]), &rest[2..])
    } else {
        (None, rest)
    };
    let (plural, name, sub) = match rest {
        [p] => (*p, None, None),
        [p, n] => (*p, Some(*n), None),
        [p, n, s] => (*p, Some(*n), Some(*s)),
        _ => return Err(ApiError::path_not_found()),
    };
    let res = kinds::find(group, version, plural).ok_or_else(ApiError::path_not_found)?;
    let r = &RESOURCES[res];
    if r.namespaced && name.is_some() && namespace.is_none() {
        return Err(ApiError::path_not_found());
    }
    let ns = if r.namespaced {
        namespace.unwrap_or("")
    } else {
        ""
    };
    let g = &ctx.group;
    let method = req.method().clone();
    match (name, sub) {
        (None, None) => match method {
            Method::GET => {
                let filter = filter(r, namespace, &query)?;
                if watch_path || query.flag("watch")? == Some(true) {
                    start_watch(g.clone(), res, filter, &query)
                } else {
                    list(g, res, &filter, &query)
                }
            }
            Method::POST if !r.namespaced || namespace.is_some() => {
                let value = object_body(req, r).await?;
                let obj = g.create(res, ns, value)?;
                Ok(json_bytes(201, obj.bytes.clone()))
            }
            _ => Err(not_allowed()),
        },
        (Some(name), sub) => {
            if sub == Some("portforward") && r.kind == "Pod" && !watch_path {
                return ctx.pods.answer(req, ns, name);
            }
            let part = match sub {
                None => Part::Main,
                Some("status") if r.status => Part::Status,
                Some(_) => return Err(ApiError::path_not_found()),
            };
            if watch_path {
                return Err(ApiError::path_not_found());
            }
            match method {
                Method::GET => Ok(json_bytes(200, g.get(res, ns, name)?.bytes.clone())),
                Method::PUT => {
                    let value = object_body(req, r).await?;
                    Ok(json_bytes(
                        200,
                        g.update(res, ns, name, value, part)?.bytes.clone(),
                    ))
                }
                Method::PATCH => {
                    let kind = PatchType::from_content_type(content_type(&req))?;
                    let bytes = read_body(req).await?;
                    let obj = g.patch(res, ns, name, part, |current| {
                        patch::apply(kind, current, &bytes)
                    })?;
                    Ok(json_bytes(200, obj.bytes.clone()))
                }
                Method::DELETE if part == Part::Main => {
                    let pre = delete_options(req, r).await?;
                    Ok(json_bytes(
                        200,
                        g.delete(res, ns, name, &pre)?.bytes.clone(),
                    ))
                }
                _ => Err(not_allowed()),
            }
        }
        (None, Some(_)) => Err(ApiError::path_not_found()),
    }
}

fn content_type(req: &Request<Incoming>) -> &str {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// The encodings a request body may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Media {
    Json,
    Protobuf,
}

/// The encoding of a body, or the 415 that refuses it.
fn media(content_type: &str) -> Result<Media, ApiError> {
    let media = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if media.is_empty() || media == "application/json" || media.ends_with("+json") {
        Ok(Media::Json)
    } else if media == protobuf::MEDIA_TYPE {
        Ok(Media::Protobuf)
    } else {
        Err(ApiError::unsupported_media(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, {} (got {media:?})",
            protobuf::MEDIA_TYPE
        )))
    }
}

async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::too_large(format!(
            "the request body is larger than {MAX_BODY} bytes"
        ))),
        Err(e) => Err(ApiError::bad_request(format!(
            "reading the request body: {e}"
        ))),
    }
}

fn parse_json(bytes: &[u8], what: &str) -> Result<Value, ApiError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("{what} is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::bad_request(format!(
            "{what} is not a JSON object"
        )));
    }
    Ok(value)
}

/// The object of a create or update, as JSON whatever its encoding. A protobuf body's kind is
/// the URL's unless its envelope says otherwise; the store refuses one that does not match.
async fn object_body(req: Request<Incoming>, r: &Resource) -> Result<Value, ApiError> {
    let media = media(content_type(&req))?;
    let bytes = read_body(req).await?;
    match media {
        Media::Json => parse_json(&bytes, "the body"),
        Media::Protobuf => protobuf::decode(&bytes, (&r.api_version(), r.kind)),
    }
}

/// The preconditions of a DELETE's DeleteOptions (JSON or protobuf; none without a body).
async fn delete_options(req: Request<Incoming>, r: &Resource) -> Result<Preconditions, ApiError> {
    let media = media(content_type(&req))?;
    let bytes = read_body(req).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Preconditions::default());
    }
    let value = match media {
        Media::Json => parse_json(&bytes, "the DeleteOptions")?,
        Media::Protobuf => protobuf::decode(&bytes, (&r.api_version(), "DeleteOptions"))?,
    };
    match value.get("kind").and_then(Value::as_str) {
        None | Some("DeleteOptions") => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "the body of a DELETE is a DeleteOptions, not a {other}"
            )));
        }
    }
    // As for the dryRun parameter: nothing here may pretend to have deleted.
    if value["dryRun"].as_array().is_some_and(|d| !d.is_empty()) {
        return Err(ApiError::bad_request(
            "dryRun is not supported by the in-memory API server",
        ));
    }
    let field = |k: &str| value["preconditions"][k].as_str().map(String::from);
    Ok(Preconditions {
        resource_version: field("resourceVersion"),
        uid: field("uid"),
    })
}

fn filter(r: &Resource, namespace: Option<&str>, query: &Query) -> Result<Filter, ApiError> {
    Ok(Filter {
        namespace: namespace.filter(|_| r.namespaced).map(String::from),
        labels: LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?,
        fields: FieldSelector::parse(query.get("fieldSelector").unwrap_or(""), r.kind == "Pod")?,
    })
}

fn encode_continue(namespace: &str, name: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!([namespace, name]).to_string())
}

fn decode_continue(token: &str) -> Result<(String, String), ApiError> {
    let invalid = || ApiError::bad_request(format!("invalid continue token {token:?}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| invalid())?;
    let (ns, name): (String, String) = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    Ok((ns, name))
}

fn list(
    g: &Group,
    res: ResourceId,
    filter: &Filter,
    query: &Query,
) -> Result<Response<Body>, ApiError> {
    let r = &RESOURCES[res];
    let limit = query.number("limit")?.map(|l| l as usize);
    let after = query
        .get("continue")
        .filter(|t| !t.is_empty())
        .map(decode_continue)
        .transpose()?;
    let page = g.list(res, filter, limit, after);
    let mut metadata = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some((ns, name)) = &page.next {
        metadata["continue"] = json!(encode_continue(ns, name));
    }
    let head = format!(
        "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{metadata},\"items\":[",
        r.kind,
        r.api_version()
    );
    let mut out = Vec::with_capacity(
        head.len() + 2 + page.items.iter().map(|o| o.bytes.len() + 1).sum::<usize>(),
    );
    out.extend_from_slice(head.as_bytes());
    for (i, obj) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&obj.bytes);
    }
    out.extend_from_slice(b"]}");
    Ok(json_bytes(200, out))
}

/// One watch's position and what it still has to send.
struct Watch {
    group: Arc<Group>,
    res: ResourceId,
    filter: Filter,
    /// Every event up to this resourceVersion has been looked at.
    rv: u64,
    /// The initial objects (watch-list, or a watch from "" or "0"), sent as ADDED.
    initial: VecDeque<Arc<Obj>>,
    /// After the initial objects: the BOOKMARK that ends them (watch-list).
    end_bookmark: bool,
    pending: VecDeque<Bytes>,
    changed: watch::Receiver<u64>,
    deadline: Instant,
    bookmarks: bool,
    next_bookmark: Instant,
    done: bool,
}

fn frame(kind: &str, object: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(object.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

impl Watch {
    fn bookmark(&self, initial_end: bool) -> Bytes {
        let r = &RESOURCES[self.res];
        let mut metadata = json!({"resourceVersion": self.rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = json!({"kind": r.kind, "apiVersion": r.api_version(), "metadata": metadata});
        frame("BOOKMARK", object.to_string().as_bytes())
    }

    /// What a watch with this filter sees of an event: a modification that moves the object
    /// into or out of the selection is an ADDED or a DELETED.
    fn translate(&self, event: &Event) -> Option<&'static str> {
        if event.resource != self.res {
            return None;
        }
        let now = self.filter.matches(&event.object);
        let before = event
            .previous
            .as_ref()
            .is_some_and(|p| self.filter.matches(p));
        match event.kind {
            EventType::Added => now.then_some("ADDED"),
            EventType::Deleted => (now || before).then_some("DELETED"),
            EventType::Modified => match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            },
        }
    }

    /// Queues the events written since `rv`, or ends the watch with 410 when they are gone.
    fn catch_up(&mut self) {
        match self.group.events_since(self.rv) {
            Ok((events, rv)) => {
                for event in events {
                    if let Some(kind) = self.translate(&event) {
                        self.pending.push_back(frame(kind, &event.object.bytes));
                    }
                }
                self.rv = rv;
            }
            Err(floor) => {
                let status =
                    ApiError::expired(format!("too old resource version: {} ({floor})", self.rv))
                        .to_status();
                self.pending
                    .push_back(frame("ERROR", status.to_string().as_bytes()));
                self.done = true;
            }
        }
    }

    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if let Some(obj) = self.initial.pop_front() {
                return Some(frame("ADDED", &obj.bytes));
            }
            if self.end_bookmark {
                self.end_bookmark = false;
                return Some(self.bookmark(true));
            }
            if let Some(bytes) = self.pending.pop_front() {
                return Some(bytes);
            }
            if self.done {
                return None;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(self.deadline) => self.done = true,
                _ = tokio::time::sleep_until(self.next_bookmark), if self.bookmarks => {
                    self.catch_up();
                    if !self.done {
                        self.pending.push_back(self.bookmark(false));
                    }
                    self.next_bookmark = Instant::now() + BOOKMARK_EVERY;
                }
                changed = self.changed.changed() => match changed {
                    Ok(()) => self.catch_up(),
                    Err(_) => self.done = true,
                },
            }
        }
    }
}

fn start_watch(
    group: Arc<Group>,
    res: ResourceId,
    filter: Filter,
    query: &Query,
) -> Result<Response<Body>, ApiError> {
    let send_initial = query.flag("sendInitialEvents")?;
    let bookmarks = query.flag("allowWatchBookmarks")?.unwrap_or(false);
    let rv_match = query.get("resourceVersionMatch").unwrap_or("");
    match (send_initial, rv_match) {
        (Some(_), "NotOlderThan") => {}
        (Some(_), _) => {
            return Err(ApiError::bad_request(
                "sendInitialEvents requires resourceVersionMatch=NotOlderThan",
            ));
        }
        (None, "") => {}
        (None, _) => {
            return Err(ApiError::bad_request(
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
    }
    if send_initial == Some(true) && !bookmarks {
        return Err(ApiError::bad_request(
            "sendInitialEvents requires allowWatchBookmarks=true",
        ));
    }
    let timeout = match query.number("timeoutSeconds")? {
        Some(0) | None => DEFAULT_WATCH,
        Some(s) => Duration::from_secs(s).min(MAX_WATCH),
    };
    let rv_param = query.get("resourceVersion").unwrap_or("");
    // Subscribed before reading the store: no write between the two is missed.
    let changed = group.subscribe();
    let from_snapshot = match send_initial {
        Some(initial) => initial,
        None => rv_param.is_empty() || rv_param == "0",
    };
    let (initial, rv) = if from_snapshot || rv_param.is_empty() || rv_param == "0" {
        let page = group.list(res, &filter, None, None);
        let initial = if from_snapshot {
            page.items.into()
        } else {
            VecDeque::new()
        };
        (initial, page.resource_version)
    } else {
        let rv: u64 = rv_param
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv_param:?}")))?;
        // A watch from an rv whose events are gone still starts (200), and its first and only
        // event is an ERROR with the 410 Status: the API server's watch cache answers so, and
        // client-go and kube-rs list again on it.
        (VecDeque::new(), rv)
    };
    let now = Instant::now();
    let mut state = Watch {
        group,
        res,
        filter,
        rv,
        initial,
        end_bookmark: send_initial == Some(true),
        pending: VecDeque::new(),
        changed,
        deadline: now + timeout,
        bookmarks,
        next_bookmark: now + BOOKMARK_EVERY,
        done: false,
    };
    if !from_snapshot {
        // Events since the client's rv that are already in the ring.
        state.catch_up();
    }
    let stream = futures::stream::unfold(state, |mut w| async move {
        let bytes = w.next().await?;
        Some((Ok::<_, Infallible>(Frame::data(bytes)), w))
    });
    let mut response = Response::new(StreamBody::new(stream).boxed_unsync());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

#[cfg(test)]
mod tests;
