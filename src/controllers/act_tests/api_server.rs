//! An in-process API server for the act tests: a `tower-test` mock service answered by a task
//! that keeps every object in a map, as JSON by URL path, and records every request.
//!
//! It does what the reconciles rely on from a real kube-apiserver, and no more: GET, LIST (with
//! equality label selectors), POST, DELETE (a finalizer holds an object as `deletionTimestamp`),
//! JSON patches (their `test` ops guard finalizers: a failed one is a 422), merge patches of
//! the object and of its `/status` subresource (which honour a `metadata.resourceVersion`
//! precondition with a 409), resourceVersions that grow with every write, a generation that
//! grows with every spec change, and an object whose last finalizer goes while it is being
//! deleted disappears. Answering from state instead of a script keeps the tests valid when a
//! reconcile reorders or adds its calls. No watches: the tests call `reconcile` themselves.
use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use http::{Method, Request, Response, StatusCode};
use kube::{Client, client::Body};
use serde_json::{Value, json};

/// One request as the server received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: Method,
    /// Without the query.
    pub path: String,
    /// URL-decoded.
    pub query: String,
    pub content_type: Option<String>,
    pub body: Option<Value>,
    /// The status code it was answered with.
    pub code: u16,
}

impl Recorded {
    /// Whether this is a `method` request to a path ending with `suffix`.
    pub fn is(&self, method: &Method, suffix: &str) -> bool {
        self.method == method && self.path.ends_with(suffix)
    }
}

#[derive(Default)]
struct State {
    /// Objects by their URL path (`<collection>/<name>`).
    objects: BTreeMap<String, Value>,
    requests: Vec<Recorded>,
    /// The last resourceVersion handed out (one counter for every resource, as etcd's).
    rv: u64,
    uids: u64,
}

/// The server's state, shared by the answering task and the test.
#[derive(Clone, Default)]
pub struct ApiServer(Arc<Mutex<State>>);

impl ApiServer {
    /// A server and a client talking to it; the answering task runs until the client is gone.
    pub fn start() -> (Self, Client) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let server = ApiServer::default();
        let answering = server.clone();
        tokio::spawn(async move {
            while let Some((request, respond)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.unwrap_or_default();
                respond.send_response(answering.answer(parts, &bytes));
            }
        });
        (server, Client::new(service, "default"))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Store `obj` at `<collection>/<name>` as a create would (uid, resourceVersion,
    /// generation), and return it as stored.
    pub fn put(&self, collection: &str, mut obj: Value) -> Value {
        let mut s = self.state();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        s.stamp_new(&mut obj);
        s.objects
            .insert(format!("{collection}/{name}"), obj.clone());
        obj
    }

    /// Overwrite the object at `path` (as another client's update would), with a new
    /// resourceVersion; returns it as stored.
    pub fn replace(&self, path: &str, mut obj: Value) -> Value {
        let mut s = self.state();
        obj["metadata"]["resourceVersion"] = json!(s.next_rv());
        s.objects.insert(path.to_string(), obj.clone());
        obj
    }

    /// The object at `path`, as stored now.
    pub fn get(&self, path: &str) -> Option<Value> {
        self.state().objects.get(path).cloned()
    }

    /// Every object stored under `collection`.
    pub fn list(&self, collection: &str) -> Vec<Value> {
        let prefix = format!("{collection}/");
        let s = self.state();
        s.objects
            .iter()
            .filter(|(k, _)| k.strip_prefix(&prefix).is_some_and(|n| !n.contains('/')))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state().requests.clone()
    }

    fn answer(&self, parts: http::request::Parts, body: &[u8]) -> Response<Body> {
        let path = parts.uri.path().to_string();
        let query = percent_decode(parts.uri.query().unwrap_or_default());
        let content_type = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body: Option<Value> = serde_json::from_slice(body).ok();
        let mut s = self.state();
        let (code, answer) = s.handle(
            &parts.method,
            &path,
            &query,
            content_type.as_deref(),
            body.clone(),
        );
        s.requests.push(Recorded {
            method: parts.method,
            path,
            query,
            content_type,
            body,
            code: code.as_u16(),
        });
        Response::builder()
            .status(code)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(&answer).unwrap_or_default()))
            .unwrap_or_else(|_| Response::new(Body::empty()))
    }
}

/// A `metav1.Status` failure, as the API server sends one.
fn failure(code: StatusCode, reason: &str, message: String) -> (StatusCode, Value) {
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    (code, status)
}

/// Where a request points: a collection, an object, or an object's status.
enum Target {
    Collection(String),
    Object(String),
    Status(String),
}

/// `/api/v1/...` or `/apis/<group>/<version>/...`, then `namespaces/<ns>/<plural>[/<name>[/status]]`
/// (or `<plural>[/<name>]` for cluster-scoped resources).
fn target(path: &str) -> Option<Target> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let prefix = match segments.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => return None,
    };
    let rest = segments.get(prefix..)?;
    let scope = if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
        3
    } else {
        1
    };
    let collection = segments[..prefix + scope].join("/");
    let collection = format!("/{collection}");
    match &rest[scope..] {
        [] => Some(Target::Collection(collection)),
        [name] => Some(Target::Object(format!("{collection}/{name}"))),
        [name, "status"] => Some(Target::Status(format!("{collection}/{name}"))),
        _ => None,
    }
}

impl State {
    fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    /// What a create adds to an object.
    fn stamp_new(&mut self, obj: &mut Value) {
        self.uids += 1;
        let uid = format!("uid-{}", self.uids);
        let rv = self.next_rv();
        let meta = &mut obj["metadata"];
        if meta.get("uid").and_then(Value::as_str).is_none() {
            meta["uid"] = json!(uid);
        }
        meta["resourceVersion"] = json!(rv);
        meta["generation"] = json!(1);
        if meta.get("creationTimestamp").is_none_or(Value::is_null) {
            meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
    }

    fn handle(
        &mut self,
        method: &Method,
        path: &str,
        query: &str,
        content_type: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let Some(target) = target(path) else {
            return failure(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("no route {path}"),
            );
        };
        match (method, target) {
            (&Method::GET, Target::Object(key) | Target::Status(key)) => {
                match self.objects.get(&key) {
                    Some(obj) => (StatusCode::OK, obj.clone()),
                    None => not_found(&key),
                }
            }
            (&Method::GET, Target::Collection(collection)) => self.list(&collection, query),
            (&Method::POST, Target::Collection(collection)) => self.create(&collection, path, body),
            (&Method::DELETE, Target::Object(key)) => self.delete(&key),
            (&Method::PATCH, Target::Object(key)) => self.patch(&key, content_type, body, false),
            (&Method::PATCH, Target::Status(key)) => self.patch(&key, content_type, body, true),
            (m, _) => failure(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                format!("{m} {path} is not served by the act-test API server"),
            ),
        }
    }

    fn list(&self, collection: &str, query: &str) -> (StatusCode, Value) {
        let selector = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("labelSelector="))
            .unwrap_or_default();
        let Some(selector) = Selector::parse(selector) else {
            return failure(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("label selector {selector:?} is not served by the act-test API server"),
            );
        };
        let prefix = format!("{collection}/");
        let items: Vec<Value> = self
            .objects
            .iter()
            .filter(|(k, _)| k.strip_prefix(&prefix).is_some_and(|n| !n.contains('/')))
            .map(|(_, v)| v)
            .filter(|v| selector.matches(&v["metadata"]["labels"]))
            .cloned()
            .collect();
        (
            StatusCode::OK,
            json!({
                "apiVersion": "v1", "kind": "List",
                "metadata": {"resourceVersion": self.rv.to_string()},
                "items": items,
            }),
        )
    }

    fn create(&mut self, collection: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let Some(mut obj) = body.filter(Value::is_object) else {
            return failure(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "no object in the body".into(),
            );
        };
        let mut name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            let generate = obj["metadata"]["generateName"].as_str().unwrap_or_default();
            name = format!("{generate}{}", self.uids + 1);
            obj["metadata"]["name"] = json!(name);
        }
        if let Some(ns) = path
            .split("/namespaces/")
            .nth(1)
            .and_then(|r| r.split('/').next())
        {
            obj["metadata"]["namespace"] = json!(ns);
        }
        let key = format!("{collection}/{name}");
        if self.objects.contains_key(&key) {
            return failure(
                StatusCode::CONFLICT,
                "AlreadyExists",
                format!("{key} already exists"),
            );
        }
        obj["metadata"]["uid"] = Value::Null;
        self.stamp_new(&mut obj);
        self.objects.insert(key, obj.clone());
        (StatusCode::CREATED, obj)
    }

    fn delete(&mut self, key: &str) -> (StatusCode, Value) {
        let rv = self.next_rv();
        let Some(obj) = self.objects.get_mut(key) else {
            return not_found(key);
        };
        let held = obj["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if held {
            if obj["metadata"]["deletionTimestamp"].is_null() {
                obj["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:01Z");
                obj["metadata"]["resourceVersion"] = json!(rv);
            }
            return (StatusCode::OK, obj.clone());
        }
        let gone = self.objects.remove(key).unwrap_or_default();
        (StatusCode::OK, gone)
    }

    fn patch(
        &mut self,
        key: &str,
        content_type: Option<&str>,
        body: Option<Value>,
        status: bool,
    ) -> (StatusCode, Value) {
        let Some(current) = self.objects.get(key).cloned() else {
            return not_found(key);
        };
        let Some(patch) = body else {
            return failure(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "no patch in the body".into(),
            );
        };
        let mut next = current.clone();
        match content_type {
            Some("application/json-patch+json") => {
                // The API server's JSON patch passes a `test` for null at a path that is not
                // there (how a client guards "no finalizers yet"); the json-patch crate's fails.
                let patch = match patch {
                    Value::Array(ops) => Value::Array(
                        ops.into_iter()
                            .filter(|op| {
                                let absent = op["path"]
                                    .as_str()
                                    .is_some_and(|p| current.pointer(p).is_none());
                                !(op["op"] == "test" && op["value"].is_null() && absent)
                            })
                            .collect(),
                    ),
                    other => other,
                };
                let ops: json_patch::Patch = match serde_json::from_value(patch) {
                    Ok(ops) => ops,
                    Err(e) => return failure(StatusCode::BAD_REQUEST, "BadRequest", e.to_string()),
                };
                if let Err(e) = json_patch::patch(&mut next, &ops) {
                    return failure(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", e.to_string());
                }
            }
            Some("application/merge-patch+json") => {
                let wanted = patch["metadata"]["resourceVersion"].as_str();
                let stored = current["metadata"]["resourceVersion"].as_str();
                if wanted.is_some() && wanted != stored {
                    return failure(
                        StatusCode::CONFLICT,
                        "Conflict",
                        format!(
                            "{key}: the object has been modified; please apply your changes to the latest version and try again"
                        ),
                    );
                }
                json_patch::merge(&mut next, &patch);
            }
            other => {
                return failure(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    format!("patch type {other:?} is not served by the act-test API server"),
                );
            }
        }
        // A subresource writes only its part; the object's endpoint never writes status.
        if status {
            let mut only_status = current.clone();
            only_status["status"] = next["status"].take();
            next = only_status;
        } else {
            next["status"] = current["status"].clone();
            if next["status"].is_null() && current.get("status").is_none() {
                next.as_object_mut().map(|o| o.remove("status"));
            }
        }
        for fixed in [
            "uid",
            "name",
            "namespace",
            "creationTimestamp",
            "deletionTimestamp",
        ] {
            next["metadata"][fixed] = current["metadata"][fixed].clone();
        }
        if next["spec"] != current["spec"] {
            let generation = current["metadata"]["generation"].as_i64().unwrap_or(1);
            next["metadata"]["generation"] = json!(generation + 1);
        }
        if next == current {
            return (StatusCode::OK, current);
        }
        next["metadata"]["resourceVersion"] = json!(self.next_rv());
        let deleting = !next["metadata"]["deletionTimestamp"].is_null();
        let finalized = next["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty);
        if deleting && finalized {
            self.objects.remove(key);
        } else {
            self.objects.insert(key.to_string(), next.clone());
        }
        (StatusCode::OK, next)
    }
}

fn not_found(key: &str) -> (StatusCode, Value) {
    failure(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("{key} not found"),
    )
}

/// Equality-based label selectors: `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated.
struct Selector(Vec<(String, Option<String>, bool)>);

impl Selector {
    fn parse(s: &str) -> Option<Self> {
        let mut terms = Vec::new();
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if term.contains(" in ") || term.contains(" notin ") || term.contains('(') {
                return None;
            }
            let parsed = if let Some((k, v)) = term.split_once("!=") {
                (k.to_string(), Some(v.to_string()), false)
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (k.to_string(), Some(v.to_string()), true)
            } else if let Some(k) = term.strip_prefix('!') {
                (k.to_string(), None, false)
            } else {
                (term.to_string(), None, true)
            };
            terms.push(parsed);
        }
        Some(Selector(terms))
    }

    fn matches(&self, labels: &Value) -> bool {
        self.0.iter().all(|(k, v, want)| {
            let got = labels.get(k).and_then(Value::as_str);
            let hit = match v {
                Some(v) => got == Some(v.as_str()),
                None => got.is_some(),
            };
            hit == *want
        })
    }
}

/// `%XX` escapes and `+` decoded (label selectors arrive URL-encoded).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_collections_objects_and_status() {
        let ns = "/apis/g/v1/namespaces/ns/things";
        assert!(matches!(target(ns), Some(Target::Collection(c)) if c == ns));
        assert!(
            matches!(target(&format!("{ns}/a")), Some(Target::Object(o)) if o == format!("{ns}/a"))
        );
        assert!(
            matches!(target(&format!("{ns}/a/status")), Some(Target::Status(o)) if o == format!("{ns}/a"))
        );
        assert!(
            matches!(target("/api/v1/namespaces/ns/secrets/s"), Some(Target::Object(o)) if o == "/api/v1/namespaces/ns/secrets/s")
        );
        assert_eq!(percent_decode("a%3Db%2Cc"), "a=b,c");
        let sel = Selector::parse("a=b,!c").unwrap();
        assert!(sel.matches(&json!({"a": "b"})));
        assert!(!sel.matches(&json!({"a": "b", "c": ""})));
    }
}
