//! The objects of the fake workload clusters: per cluster ("group") a map per resource, one
//! resourceVersion counter and a bounded ring of recent events for watches.
//!
//! Objects are kept **pre-serialized** (`Bytes` of their JSON) with the few fields filters need
//! (labels, `spec.nodeName`) beside them: a GET, a LIST page or a watch event is the stored bytes
//! copied into the answer, never a re-serialisation, and a JSON object costs about its text
//! (a `serde_json::Value` tree takes several times that). Only writes parse and serialise.
//!
//! Semantics kept from the API server (what its clients rely on): `uid`, `creationTimestamp` and
//! `resourceVersion` are the store's, not the writer's; an update or patch whose object carries a
//! `resourceVersion` other than the stored one is a 409 `Conflict`; an update that changes
//! nothing is not a write (no new resourceVersion, no event); a resource with a status
//! subresource keeps its status on main writes and changes only its status through `…/status`;
//! deleting an object with finalizers only marks it (`deletionTimestamp`), and it goes when the
//! last finalizer does; a Namespace's deletion removes what is in it; the four system
//! Namespaces exist from the start and cannot be deleted.
//!
//! Not kept: `generation`, `managedFields`, owner-reference garbage collection, defaulting and
//! validation of the kinds' own fields (an object is any JSON object with metadata).
//!
//! ## Memory bound
//!
//! Per group, at most [`Limits::max_objects`] objects of at most [`Limits::max_object_bytes`]
//! each and [`Limits::max_group_bytes`] together (writes past them: 413, 403), plus the event
//! ring: at most [`Limits::ring_events`] events whose objects hold at most
//! [`Limits::ring_bytes`] not already counted live (an event shares its object with the map).
//! With the defaults a group holds at most 32 MiB of objects + 8 MiB of history + a fixed
//! ~200 bytes of bookkeeping per object; the store holds the groups its owner creates.
//! `tests::bound_1000_groups_of_10_nodes` measures the per-object cost.
use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    hash::{BuildHasher, Hasher},
    ops::Bound,
    sync::{Arc, Mutex, RwLock},
};

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::{
    kinds::{RESOURCES, Resource, ResourceId, by_kind},
    selector::{Field, FieldSelector, LabelSelector},
    status::ApiError,
};

/// What one group may hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// One object's JSON (the API server's own limit is ~1.5 MiB, etcd's request size).
    pub max_object_bytes: usize,
    /// All live objects' JSON together.
    pub max_group_bytes: usize,
    pub max_objects: usize,
    /// Events kept for watches to resume from.
    pub ring_events: usize,
    /// Bytes of the objects the ring's events hold.
    pub ring_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_object_bytes: 1 << 20,
            // A cluster of 5,000 Nodes, the most Kubernetes supports, holds two objects per
            // machine (its Node and CABPK's bootstrap-token Secret for its join): 10,004
            // objects and 8.7 MiB, about a third of these (`a_group_holds_a_cluster_of_5000_nodes`).
            max_group_bytes: 32 << 20,
            max_objects: 30_000,
            ring_events: 512,
            ring_bytes: 8 << 20,
        }
    }
}

/// Namespaces every cluster has from the start (as kube-apiserver makes them).
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-node-lease", "kube-public", "kube-system"];
/// Those of them the API server refuses to delete.
const UNDELETABLE: &[&str] = &["default", "kube-public", "kube-system"];

/// One stored object: its JSON and what filters read.
#[derive(Debug)]
pub struct Obj {
    /// `""` for cluster-scoped objects.
    pub namespace: Box<str>,
    pub name: Box<str>,
    pub resource_version: u64,
    /// The object's JSON, exactly as served.
    pub bytes: Bytes,
    labels: Box<[(Box<str>, Box<str>)]>,
    node_name: Option<Box<str>>,
}

impl Obj {
    fn new(value: &Value, namespace: &str, name: &str, rv: u64) -> Self {
        let labels = value["metadata"]["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.as_str().into(), v.as_str()?.into())))
                    .collect()
            })
            .unwrap_or_default();
        let node_name = value["spec"]["nodeName"].as_str().map(Into::into);
        let bytes = serde_json::to_vec(value).unwrap_or_default();
        Self {
            namespace: namespace.into(),
            name: name.into(),
            resource_version: rv,
            bytes: Bytes::from(bytes.into_boxed_slice()),
            labels,
            node_name,
        }
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }

    pub fn field(&self, field: Field) -> &str {
        match field {
            Field::Name => &self.name,
            Field::Namespace => &self.namespace,
            Field::NodeName => self.node_name.as_deref().unwrap_or(""),
        }
    }

    /// The object parsed (for writes and tests).
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or(Value::Null)
    }

    /// Approximate heap use: the JSON, the names and labels, the struct, its `Arc` and its
    /// map entry.
    fn approx_bytes(&self) -> usize {
        let labels: usize = self
            .labels
            .iter()
            .map(|(k, v)| k.len() + v.len() + 32)
            .sum();
        self.bytes.len()
            + 2 * (self.namespace.len() + self.name.len())
            + labels
            + self.node_name.as_ref().map_or(0, |n| n.len())
            + std::mem::size_of::<Self>()
            + 16 // the Arc's counts
            + 48 // the map entry: key (two boxed strs), value pointer, node share
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One write, as watches see it.
#[derive(Debug)]
pub struct Event {
    pub resource_version: u64,
    pub resource: ResourceId,
    pub kind: EventType,
    /// The object after the write (for a deletion: its last state, at the deletion's
    /// resourceVersion).
    pub object: Arc<Obj>,
    /// The object before a modification: a watch with a selector turns a modification into an
    /// ADDED or DELETED when the object enters or leaves its selection.
    pub previous: Option<Arc<Obj>>,
}

impl Event {
    fn bytes(&self) -> usize {
        self.object.bytes.len() + self.previous.as_ref().map_or(0, |p| p.bytes.len())
    }
}

/// Which objects of a resource a list or watch is about.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// `None`: all namespaces (and cluster-scoped resources).
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub fn matches(&self, obj: &Obj) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| *obj.namespace == *ns)
            && self.labels.matches(|k| obj.label(k))
            && self.fields.matches(|f| obj.field(f))
    }
}

/// Which part of an object a write changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
}

/// DeleteOptions' preconditions.
#[derive(Clone, Debug, Default)]
pub struct Preconditions {
    pub resource_version: Option<String>,
    pub uid: Option<String>,
}

/// One page of a list.
#[derive(Debug)]
pub struct Page {
    pub items: Vec<Arc<Obj>>,
    /// The group's resourceVersion when the page was read.
    pub resource_version: u64,
    /// Where the next page starts (after this namespace/name), when there is one.
    pub next: Option<(String, String)>,
}

type Key = (Box<str>, Box<str>);

struct State {
    rv: u64,
    objects: Vec<BTreeMap<Key, Arc<Obj>>>,
    live_bytes: usize,
    count: usize,
    ring: VecDeque<Arc<Event>>,
    ring_bytes: usize,
    /// Watches from a resourceVersion below this missed evicted events: 410.
    floor: u64,
    /// For uids and generated names.
    seq: u64,
}

/// The objects of one workload cluster.
pub struct Group {
    name: String,
    limits: Limits,
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    seed: std::collections::hash_map::RandomState,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("name", &self.name).finish()
    }
}

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn metadata(value: &mut Value) -> Result<&mut Map<String, Value>, ApiError> {
    let Some(obj) = value.as_object_mut() else {
        return Err(ApiError::bad_request("the body is not a JSON object"));
    };
    let meta = obj.entry("metadata").or_insert_with(|| json!({}));
    meta.as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata is not a JSON object"))
}

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {s:?}")))
}

fn has_finalizers(value: &Value) -> bool {
    value["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

impl Group {
    fn new(name: &str, limits: Limits) -> Self {
        let (changed, _) = watch::channel(0);
        let group = Self {
            name: name.into(),
            limits,
            state: Mutex::new(State {
                rv: 0,
                objects: RESOURCES.iter().map(|_| BTreeMap::new()).collect(),
                live_bytes: 0,
                count: 0,
                ring: VecDeque::new(),
                ring_bytes: 0,
                floor: 0,
                seq: 0,
            }),
            changed,
            seed: Default::default(),
        };
        let namespaces = by_kind("Namespace").unwrap_or_default();
        for ns in SYSTEM_NAMESPACES {
            let created = group.create(namespaces, "", json!({"metadata": {"name": ns}}));
            debug_assert!(created.is_ok(), "{created:?}");
        }
        group
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent maps (every write is a few inserts
        // after all checks): go on with them.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The newest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Told the new resourceVersion after every write.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn random(&self, state: &mut State) -> u64 {
        state.seq += 1;
        let mut h = self.seed.build_hasher();
        h.write_u64(state.seq);
        h.finish()
    }

    fn uid(&self, state: &mut State) -> String {
        let (a, b) = (self.random(state), self.random(state));
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }

    fn suffix(&self, state: &mut State) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut x = self.random(state);
        (0..5)
            .map(|_| {
                let c = ALPHABET[(x % ALPHABET.len() as u64) as usize] as char;
                x /= ALPHABET.len() as u64;
                c
            })
            .collect()
    }

    pub fn get(&self, res: ResourceId, namespace: &str, name: &str) -> Result<Arc<Obj>, ApiError> {
        let state = self.lock();
        state.objects[res]
            .get(&(namespace.into(), name.into()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&RESOURCES[res], name))
    }

    /// One page: the matching objects after `after` (namespace/name order), at most `limit`.
    pub fn list(
        &self,
        res: ResourceId,
        filter: &Filter,
        limit: Option<usize>,
        after: Option<(String, String)>,
    ) -> Page {
        let state = self.lock();
        let map = &state.objects[res];
        let start: Bound<Key> = match after {
            Some((ns, name)) => Bound::Excluded((ns.into(), name.into())),
            None => match &filter.namespace {
                Some(ns) if RESOURCES[res].namespaced => {
                    Bound::Included((ns.as_str().into(), "".into()))
                }
                _ => Bound::Unbounded,
            },
        };
        let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let mut items = Vec::new();
        let mut next = None;
        for ((ns, _), obj) in map.range((start, Bound::Unbounded)) {
            if let Some(want) = &filter.namespace
                && RESOURCES[res].namespaced
                && **ns != **want
            {
                if **ns > **want {
                    break;
                }
                continue;
            }
            if !filter.matches(obj) {
                continue;
            }
            if items.len() == limit {
                let last: &Arc<Obj> = &items[items.len() - 1];
                next = Some((last.namespace.to_string(), last.name.to_string()));
                break;
            }
            items.push(obj.clone());
        }
        Page {
            items,
            resource_version: state.rv,
            next,
        }
    }

    /// Events after `rv`, and the resourceVersion they reach; `Err(floor)` when events after
    /// `rv` were already dropped from the ring.
    pub fn events_since(&self, rv: u64) -> Result<(Vec<Arc<Event>>, u64), u64> {
        let state = self.lock();
        if rv < state.floor {
            return Err(state.floor);
        }
        let from = state.ring.partition_point(|e| e.resource_version <= rv);
        Ok((state.ring.range(from..).cloned().collect(), state.rv))
    }

    /// Checks the object's type fields and fills them, and its name and namespace.
    fn identify(
        r: &Resource,
        value: &mut Value,
        namespace: &str,
        name: Option<&str>,
    ) -> Result<(), ApiError> {
        let api_version = r.api_version();
        for (field, want) in [("kind", r.kind), ("apiVersion", api_version.as_str())] {
            match value.get(field) {
                None | Some(Value::Null) => value[field] = json!(want),
                Some(Value::String(s)) if s == want => {}
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "{field} {other} does not match the request's {want:?}"
                    )));
                }
            }
        }
        let meta = metadata(value)?;
        if let Some(name) = name {
            match meta.get("name").and_then(Value::as_str) {
                None => {
                    meta.insert("name".into(), json!(name));
                }
                Some(n) if n == name => {}
                Some(n) => {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({n}) does not match the name on the URL ({name})"
                    )));
                }
            }
        }
        if r.namespaced {
            match meta.get("namespace").and_then(Value::as_str) {
                None | Some("") => {
                    meta.insert("namespace".into(), json!(namespace));
                }
                Some(ns) if ns == namespace => {}
                Some(_) => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
            }
        } else {
            meta.remove("namespace");
        }
        Ok(())
    }

    /// Stores a write and records its event (all checks done).
    fn commit(
        &self,
        state: &mut State,
        res: ResourceId,
        kind: EventType,
        object: Arc<Obj>,
        previous: Option<Arc<Obj>>,
    ) {
        let key: Key = (object.namespace.clone(), object.name.clone());
        if let Some(old) = &previous {
            state.live_bytes -= old.bytes.len();
            state.count -= 1;
        }
        if kind == EventType::Deleted {
            state.objects[res].remove(&key);
        } else {
            state.live_bytes += object.bytes.len();
            state.count += 1;
            state.objects[res].insert(key, object.clone());
        }
        let event = Arc::new(Event {
            resource_version: object.resource_version,
            resource: res,
            kind,
            object,
            previous,
        });
        state.ring_bytes += event.bytes();
        state.ring.push_back(event);
        while state.ring.len() > self.limits.ring_events
            || (state.ring_bytes > self.limits.ring_bytes && state.ring.len() > 1)
        {
            let Some(old) = state.ring.pop_front() else {
                break;
            };
            state.ring_bytes -= old.bytes();
            state.floor = old.resource_version;
        }
        self.changed.send_replace(state.rv);
    }

    /// Checks the limits for an object about to replace `old` (if any).
    fn admit(
        &self,
        state: &State,
        r: &Resource,
        obj: Obj,
        old: Option<&Obj>,
    ) -> Result<Arc<Obj>, ApiError> {
        let name = &obj.name;
        if obj.bytes.len() > self.limits.max_object_bytes {
            return Err(ApiError::too_large(format!(
                "{} \"{name}\" is {} bytes; the in-memory API server keeps objects of at most {} bytes",
                r.qualified(),
                obj.bytes.len(),
                self.limits.max_object_bytes
            )));
        }
        let old_bytes = old.map_or(0, |o| o.bytes.len());
        if state.live_bytes - old_bytes + obj.bytes.len() > self.limits.max_group_bytes
            || (old.is_none() && state.count >= self.limits.max_objects)
        {
            return Err(ApiError::forbidden(format!(
                "{} \"{name}\" is forbidden: exceeded the in-memory cluster's quota ({} objects, {} bytes)",
                r.qualified(),
                self.limits.max_objects,
                self.limits.max_group_bytes
            )));
        }
        Ok(Arc::new(obj))
    }

    /// POST: a new object in `namespace` (`""` for cluster-scoped resources).
    pub fn create(
        &self,
        res: ResourceId,
        namespace: &str,
        mut value: Value,
    ) -> Result<Arc<Obj>, ApiError> {
        let r = &RESOURCES[res];
        Self::identify(r, &mut value, namespace, None)?;
        let mut state = self.lock();
        let name = match value["metadata"]["name"].as_str() {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => match value["metadata"]["generateName"].as_str() {
                Some(prefix) if !prefix.is_empty() => {
                    format!("{prefix}{}", self.suffix(&mut state))
                }
                _ => {
                    return Err(ApiError::invalid(
                        r,
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    ));
                }
            },
        };
        if name.contains('/') || name == "." || name == ".." {
            return Err(ApiError::invalid(
                r,
                &name,
                "metadata.name: Invalid value: may not contain '/' or be '.' or '..'",
            ));
        }
        if r.namespaced {
            let namespaces = by_kind("Namespace").unwrap_or_default();
            match state.objects[namespaces].get(&("".into(), namespace.into())) {
                None => {
                    return Err(ApiError::not_found(&RESOURCES[namespaces], namespace));
                }
                Some(ns) if ns.value()["metadata"]["deletionTimestamp"].is_string() => {
                    return Err(ApiError::forbidden(format!(
                        "unable to create new content in namespace {namespace} because it is being terminated"
                    )));
                }
                Some(_) => {}
            }
        }
        let ns = if r.namespaced { namespace } else { "" };
        if state.objects[res].contains_key(&(ns.into(), name.as_str().into())) {
            return Err(ApiError::already_exists(r, &name));
        }
        let rv = state.rv + 1;
        let uid = self.uid(&mut state);
        let meta = metadata(&mut value)?;
        meta.insert("name".into(), json!(name));
        meta.insert("uid".into(), json!(uid));
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
        meta.insert("creationTimestamp".into(), json!(now()));
        for server_owned in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
        ] {
            meta.remove(server_owned);
        }
        if r.kind == "Namespace" {
            let labels = meta.entry("labels").or_insert_with(|| json!({}));
            if let Some(labels) = labels.as_object_mut() {
                labels.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
        }
        let obj = self.admit(&state, r, Obj::new(&value, ns, &name, rv), None)?;
        state.rv = rv;
        self.commit(&mut state, res, EventType::Added, obj.clone(), None);
        Ok(obj)
    }

    /// PUT: replace the object (or, `Part::Status`, its status).
    pub fn update(
        &self,
        res: ResourceId,
        namespace: &str,
        name: &str,
        value: Value,
        part: Part,
    ) -> Result<Arc<Obj>, ApiError> {
        let mut state = self.lock();
        self.replace(&mut state, res, namespace, name, value, part)
    }

    /// PATCH: `apply` turns the stored object into the new one (merge or JSON patch); then as
    /// an update. A `resourceVersion` left in the result (the patch set one) must be current.
    pub fn patch(
        &self,
        res: ResourceId,
        namespace: &str,
        name: &str,
        part: Part,
        apply: impl FnOnce(Value) -> Result<Value, ApiError>,
    ) -> Result<Arc<Obj>, ApiError> {
        let mut state = self.lock();
        let current = state.objects[res]
            .get(&(namespace.into(), name.into()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&RESOURCES[res], name))?;
        let patched = apply(current.value())?;
        self.replace(&mut state, res, namespace, name, patched, part)
    }

    fn replace(
        &self,
        state: &mut State,
        res: ResourceId,
        namespace: &str,
        name: &str,
        mut value: Value,
        part: Part,
    ) -> Result<Arc<Obj>, ApiError> {
        let r = &RESOURCES[res];
        Self::identify(r, &mut value, namespace, Some(name))?;
        let old = state.objects[res]
            .get(&(namespace.into(), name.into()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(r, name))?;
        let old_value = old.value();
        if let Some(rv) = value["metadata"]["resourceVersion"].as_str()
            && !rv.is_empty()
            && parse_rv(rv)? != old.resource_version
        {
            return Err(ApiError::stale(r, name));
        }
        if let Some(uid) = value["metadata"]["uid"].as_str()
            && !uid.is_empty()
            && Some(uid) != old_value["metadata"]["uid"].as_str()
        {
            return Err(ApiError::conflict(
                r,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    old_value["metadata"]["uid"].as_str().unwrap_or("")
                ),
            ));
        }
        let mut new = match part {
            Part::Status => {
                let mut new = old_value.clone();
                match value.get("status") {
                    Some(status) => new["status"] = status.clone(),
                    None => {
                        if let Some(o) = new.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
                new
            }
            Part::Main => {
                if r.status {
                    match old_value.get("status") {
                        Some(status) => value["status"] = status.clone(),
                        None => {
                            if let Some(o) = value.as_object_mut() {
                                o.remove("status");
                            }
                        }
                    }
                }
                value
            }
        };
        {
            let meta = metadata(&mut new)?;
            for server_owned in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ] {
                match old_value["metadata"].get(server_owned) {
                    Some(v) => meta.insert(server_owned.into(), v.clone()),
                    None => meta.remove(server_owned),
                };
            }
            meta.insert(
                "resourceVersion".into(),
                old_value["metadata"]["resourceVersion"].clone(),
            );
            meta.remove("managedFields");
        }
        if new == old_value {
            return Ok(old);
        }
        let rv = state.rv + 1;
        let terminating = new["metadata"]["deletionTimestamp"].is_string();
        new["metadata"]["resourceVersion"] = json!(rv.to_string());
        let obj = self.admit(
            state,
            r,
            Obj::new(&new, &old.namespace, name, rv),
            Some(&old),
        )?;
        state.rv = rv;
        let kind = if terminating && !has_finalizers(&new) {
            EventType::Deleted
        } else {
            EventType::Modified
        };
        self.commit(state, res, kind, obj.clone(), Some(old));
        Ok(obj)
    }

    /// DELETE: the object goes (its last state answered), or, with finalizers, is marked.
    pub fn delete(
        &self,
        res: ResourceId,
        namespace: &str,
        name: &str,
        pre: &Preconditions,
    ) -> Result<Arc<Obj>, ApiError> {
        let r = &RESOURCES[res];
        if r.kind == "Namespace" && UNDELETABLE.contains(&name) {
            return Err(ApiError::forbidden(format!(
                "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            )));
        }
        let mut state = self.lock();
        let old = state.objects[res]
            .get(&(namespace.into(), name.into()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(r, name))?;
        let mut value = old.value();
        if let Some(rv) = pre.resource_version.as_deref()
            && parse_rv(rv)? != old.resource_version
        {
            return Err(ApiError::conflict(
                r,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    old.resource_version
                ),
            ));
        }
        if let Some(uid) = pre.uid.as_deref()
            && Some(uid) != value["metadata"]["uid"].as_str()
        {
            return Err(ApiError::conflict(
                r,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    value["metadata"]["uid"].as_str().unwrap_or("")
                ),
            ));
        }
        if has_finalizers(&value) {
            if value["metadata"]["deletionTimestamp"].is_string() {
                return Ok(old);
            }
            let rv = state.rv + 1;
            value["metadata"]["deletionTimestamp"] = json!(now());
            value["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            value["metadata"]["resourceVersion"] = json!(rv.to_string());
            let obj = self.admit(&state, r, Obj::new(&value, namespace, name, rv), Some(&old))?;
            state.rv = rv;
            self.commit(&mut state, res, EventType::Modified, obj.clone(), Some(old));
            return Ok(obj);
        }
        if r.kind == "Namespace" {
            self.empty_namespace(&mut state, name);
        }
        let rv = state.rv + 1;
        value["metadata"]["resourceVersion"] = json!(rv.to_string());
        // Smaller than or as large as it was: no limit to check.
        let obj = Arc::new(Obj::new(&value, namespace, name, rv));
        state.rv = rv;
        self.commit(&mut state, res, EventType::Deleted, obj.clone(), Some(old));
        Ok(obj)
    }

    /// Deletes everything in a namespace (its finalizers ignored: the namespace goes at once).
    fn empty_namespace(&self, state: &mut State, namespace: &str) {
        for (res, r) in RESOURCES.iter().enumerate() {
            if !r.namespaced {
                continue;
            }
            let inside: Vec<Arc<Obj>> = state.objects[res]
                .range::<Key, _>((
                    Bound::Included((namespace.into(), "".into())),
                    Bound::Unbounded,
                ))
                .take_while(|((ns, _), _)| **ns == *namespace)
                .map(|(_, o)| o.clone())
                .collect();
            for old in inside {
                let rv = state.rv + 1;
                let mut value = old.value();
                value["metadata"]["resourceVersion"] = json!(rv.to_string());
                let obj = Arc::new(Obj::new(&value, namespace, &old.name, rv));
                state.rv = rv;
                self.commit(state, res, EventType::Deleted, obj, Some(old));
            }
        }
    }

    /// Approximate heap use of the live objects (not the ring's history).
    pub fn approx_bytes(&self) -> usize {
        let state = self.lock();
        state
            .objects
            .iter()
            .flat_map(|m| m.values())
            .map(|o| o.approx_bytes())
            .sum::<usize>()
            + state.ring.len() * (std::mem::size_of::<Event>() + 16)
    }

    pub fn object_count(&self) -> usize {
        self.lock().count
    }
}

/// The fake clusters' objects, by group name (upstream keys them `<namespace>/<cluster>`).
#[derive(Debug, Default)]
pub struct Store {
    limits: Limits,
    groups: RwLock<HashMap<String, Arc<Group>>>,
}

impl Store {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            groups: RwLock::default(),
        }
    }

    /// The group of that name, made (with its system Namespaces) if it is new.
    pub fn group(&self, name: &str) -> Arc<Group> {
        if let Some(g) = self
            .groups
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            return g.clone();
        }
        self.groups
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(Group::new(name, self.limits)))
            .clone()
    }

    pub fn get_group(&self, name: &str) -> Option<Arc<Group>> {
        self.groups
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Forgets a group (its listener, if any, keeps its `Arc` until it stops).
    pub fn remove_group(&self, name: &str) -> Option<Arc<Group>> {
        self.groups
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name)
    }

    /// Approximate heap use of every group's live objects.
    pub fn approx_bytes(&self) -> usize {
        let groups = self.groups.read().unwrap_or_else(|e| e.into_inner());
        groups.values().map(|g| g.approx_bytes()).sum::<usize>()
            + groups.len() * (std::mem::size_of::<Group>() + 64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(kind: &str) -> ResourceId {
        by_kind(kind).unwrap()
    }

    fn node(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"a": "1"}},
               "spec": {"providerID": format!("in-memory://{name}")}})
    }

    #[test]
    fn create_sets_the_servers_fields_and_refuses_a_second_one() {
        let g = Store::default().group("ns/c1");
        let start = g.resource_version();
        assert_eq!(start, SYSTEM_NAMESPACES.len() as u64);
        let n = g.create(res("Node"), "", node("n1")).unwrap();
        let v = n.value();
        assert_eq!(
            v["metadata"]["resourceVersion"],
            json!((start + 1).to_string())
        );
        assert_eq!(v["metadata"]["uid"].as_str().unwrap().len(), 36);
        assert!(
            v["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap()
                .ends_with('Z')
        );
        let again = g.create(res("Node"), "", node("n1")).unwrap_err();
        assert_eq!((again.code, again.reason), (409, "AlreadyExists"));
        let other = g.create(res("Node"), "", node("n2")).unwrap();
        assert_ne!(other.value()["metadata"]["uid"], v["metadata"]["uid"]);
        assert_eq!(g.resource_version(), start + 2);
        let missing = g.get(res("Node"), "", "n3").unwrap_err();
        assert_eq!((missing.code, missing.reason), (404, "NotFound"));
    }

    #[test]
    fn namespaced_objects_need_their_namespace_and_generated_names_work() {
        let g = Store::default().group("c");
        let cm = json!({"metadata": {"generateName": "kubeadm-"}, "data": {"k": "v"}});
        let e = g.create(res("ConfigMap"), "nope", cm.clone()).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (404, "namespaces \"nope\" not found")
        );
        let made = g.create(res("ConfigMap"), "kube-system", cm).unwrap();
        assert!(
            made.name.starts_with("kubeadm-") && made.name.len() == 13,
            "{}",
            made.name
        );
        assert_eq!(&*made.namespace, "kube-system");
        assert_eq!(made.value()["kind"], "ConfigMap");
        let wrong_ns = json!({"metadata": {"name": "x", "namespace": "default"}});
        assert_eq!(
            g.create(res("ConfigMap"), "kube-system", wrong_ns)
                .unwrap_err()
                .code,
            400
        );
        let wrong_kind = json!({"kind": "Secret", "metadata": {"name": "x"}});
        assert_eq!(
            g.create(res("ConfigMap"), "default", wrong_kind)
                .unwrap_err()
                .code,
            400
        );
        let nameless = json!({"metadata": {}});
        assert_eq!(
            g.create(res("ConfigMap"), "default", nameless)
                .unwrap_err()
                .code,
            422
        );
    }

    #[test]
    fn a_stale_update_is_a_conflict_and_a_noop_update_is_no_write() {
        let g = Store::default().group("c");
        let n = g.create(res("Node"), "", node("n1")).unwrap();
        let mut v = n.value();
        v["metadata"]["labels"]["b"] = json!("2");
        let updated = g
            .update(res("Node"), "", "n1", v.clone(), Part::Main)
            .unwrap();
        assert_eq!(updated.resource_version, n.resource_version + 1);
        assert_eq!(updated.label("b"), Some("2"));
        // The same body again still carries the old resourceVersion.
        let stale = g.update(res("Node"), "", "n1", v, Part::Main).unwrap_err();
        assert_eq!((stale.code, stale.reason), (409, "Conflict"));
        let same = g
            .update(res("Node"), "", "n1", updated.value(), Part::Main)
            .unwrap();
        assert_eq!(same.resource_version, updated.resource_version);
        // Without a resourceVersion: unconditional.
        let mut free = updated.value();
        free["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        free["metadata"]["labels"]["c"] = json!("3");
        assert!(g.update(res("Node"), "", "n1", free, Part::Main).is_ok());
    }

    #[test]
    fn status_is_written_only_through_its_subresource() {
        let g = Store::default().group("c");
        let mut n = node("n1");
        n["status"] = json!({"phase": "Running"});
        let made = g.create(res("Node"), "", n).unwrap();
        let mut v = made.value();
        v["status"] = json!({"phase": "Gone"});
        v["spec"]["unschedulable"] = json!(true);
        let main = g
            .update(res("Node"), "", "n1", v.clone(), Part::Main)
            .unwrap()
            .value();
        assert_eq!(main["status"]["phase"], "Running");
        assert_eq!(main["spec"]["unschedulable"], true);
        v["spec"]["unschedulable"] = json!(false);
        v["metadata"]["resourceVersion"] = main["metadata"]["resourceVersion"].clone();
        let status = g
            .update(res("Node"), "", "n1", v, Part::Status)
            .unwrap()
            .value();
        assert_eq!(status["status"]["phase"], "Gone");
        assert_eq!(status["spec"]["unschedulable"], true);
    }

    #[test]
    fn finalizers_hold_a_deletion_until_they_are_removed() {
        let g = Store::default().group("c");
        let mut n = node("n1");
        n["metadata"]["finalizers"] = json!(["x"]);
        g.create(res("Node"), "", n).unwrap();
        let marked = g
            .delete(res("Node"), "", "n1", &Preconditions::default())
            .unwrap();
        assert!(marked.value()["metadata"]["deletionTimestamp"].is_string());
        let mut v = marked.value();
        v["metadata"]["finalizers"] = json!([]);
        g.update(res("Node"), "", "n1", v, Part::Main).unwrap();
        assert_eq!(g.get(res("Node"), "", "n1").unwrap_err().code, 404);
        let (events, _) = g.events_since(0).unwrap();
        assert_eq!(events.last().unwrap().kind, EventType::Deleted);
    }

    #[test]
    fn delete_checks_preconditions_and_namespaces_take_their_content() {
        let g = Store::default().group("c");
        g.create(res("Namespace"), "", json!({"metadata": {"name": "team"}}))
            .unwrap();
        let cm = g
            .create(res("ConfigMap"), "team", json!({"metadata": {"name": "a"}}))
            .unwrap();
        let pre = Preconditions {
            resource_version: Some("1".into()),
            uid: None,
        };
        assert_eq!(
            g.delete(res("ConfigMap"), "team", "a", &pre)
                .unwrap_err()
                .code,
            409
        );
        let pre = Preconditions {
            resource_version: None,
            uid: Some("other".into()),
        };
        assert_eq!(
            g.delete(res("ConfigMap"), "team", "a", &pre)
                .unwrap_err()
                .code,
            409
        );
        g.delete(res("Namespace"), "", "team", &Preconditions::default())
            .unwrap();
        assert_eq!(g.get(res("ConfigMap"), "team", "a").unwrap_err().code, 404);
        assert!(cm.resource_version < g.resource_version());
        let e = g
            .delete(
                res("Namespace"),
                "",
                "kube-system",
                &Preconditions::default(),
            )
            .unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(g.object_count(), SYSTEM_NAMESPACES.len());
    }

    #[test]
    fn lists_filter_and_page() {
        let g = Store::default().group("c");
        for i in 0..5 {
            let mut n = node(&format!("n{i}"));
            if i % 2 == 0 {
                n["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("");
            }
            g.create(res("Node"), "", n).unwrap();
        }
        let cp = Filter {
            labels: LabelSelector::parse("node-role.kubernetes.io/control-plane").unwrap(),
            ..Filter::default()
        };
        let names = |p: &Page| {
            p.items
                .iter()
                .map(|o| o.name.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(&g.list(res("Node"), &cp, None, None)),
            ["n0", "n2", "n4"]
        );
        let first = g.list(res("Node"), &cp, Some(2), None);
        assert_eq!(names(&first), ["n0", "n2"]);
        let second = g.list(res("Node"), &cp, Some(2), first.next.clone());
        assert_eq!(names(&second), ["n4"]);
        assert!(second.next.is_none());
        let by_name = Filter {
            fields: FieldSelector::parse("metadata.name=n3", false).unwrap(),
            ..Filter::default()
        };
        assert_eq!(names(&g.list(res("Node"), &by_name, None, None)), ["n3"]);
        // Namespaced: one namespace or all.
        for ns in ["default", "kube-system"] {
            g.create(res("ConfigMap"), ns, json!({"metadata": {"name": "cm"}}))
                .unwrap();
        }
        let in_ns = Filter {
            namespace: Some("kube-system".into()),
            ..Filter::default()
        };
        let page = g.list(res("ConfigMap"), &in_ns, None, None);
        assert_eq!(page.items.len(), 1);
        assert_eq!(&*page.items[0].namespace, "kube-system");
        assert_eq!(
            g.list(res("ConfigMap"), &Filter::default(), None, None)
                .items
                .len(),
            2
        );
    }

    #[test]
    fn the_ring_forgets_old_events_and_says_so() {
        let limits = Limits {
            ring_events: 8,
            ..Limits::default()
        };
        let g = Store::new(limits).group("c");
        let start = g.resource_version();
        let (events, rv) = g.events_since(start).unwrap();
        assert!(events.is_empty());
        assert_eq!(rv, start);
        for i in 0..20 {
            g.create(res("Node"), "", node(&format!("n{i}"))).unwrap();
        }
        let now = g.resource_version();
        let (events, rv) = g.events_since(now - 3).unwrap();
        assert_eq!(events.len(), 3);
        assert_eq!(rv, now);
        assert_eq!(events[0].resource_version, now - 2);
        assert_eq!(g.events_since(start).unwrap_err(), now - 8);
    }

    #[test]
    fn object_and_group_limits_are_4xx() {
        let limits = Limits {
            max_object_bytes: 1024,
            max_group_bytes: 4096,
            ..Limits::default()
        };
        let g = Store::new(limits).group("c");
        let big = json!({"metadata": {"name": "big"}, "data": {"k": "x".repeat(2000)}});
        assert_eq!(
            g.create(res("ConfigMap"), "default", big).unwrap_err().code,
            413
        );
        let mut codes = Vec::new();
        for i in 0..10 {
            let cm = json!({"metadata": {"name": format!("c{i}")}, "data": {"k": "x".repeat(700)}});
            codes.push(
                g.create(res("ConfigMap"), "default", cm)
                    .map(|_| 201)
                    .unwrap_or_else(|e| e.code),
            );
        }
        assert!(codes.contains(&201) && codes.ends_with(&[403]), "{codes:?}");
    }

    /// The largest cluster Kubernetes supports, 5,000 Nodes, as CAPI makes it through this
    /// backend: per machine its Node (as the backend writes it, with what CAPI's Machine
    /// controller adds) and the bootstrap-token Secret CABPK creates in the workload cluster for
    /// its join. The default limits hold it with room to spare: at most a half of each.
    #[test]
    fn a_group_holds_a_cluster_of_5000_nodes() {
        let limits = Limits::default();
        let g = Store::new(limits).group("ns/big");
        for m in 0..5000 {
            let name = format!("big-md-0-{:05}-x7k2p", m);
            let mut n = crate::inmemory::objects::node(
                &name,
                &format!("in-memory://{name}"),
                Some("v1.35.4"),
                false,
            );
            n["metadata"]["annotations"] = json!({
                "cluster.x-k8s.io/cluster-name": "big",
                "cluster.x-k8s.io/cluster-namespace": "ns",
                "cluster.x-k8s.io/machine": name,
                "cluster.x-k8s.io/owner-kind": "MachineSet",
                "cluster.x-k8s.io/owner-name": "big-md-0-x7k2p",
                "cluster.x-k8s.io/labels-from-machine": "node-role.kubernetes.io/worker",
            });
            n["metadata"]["labels"]["node-role.kubernetes.io/worker"] = json!("");
            g.create(res("Node"), "", n).unwrap();
            let token = json!({
                "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
                "metadata": {"name": format!("bootstrap-token-{m:06}"), "namespace": "kube-system"},
                "data": {
                    "auth-extra-groups": "c3lzdGVtOmJvb3RzdHJhcHBlcnM6a3ViZWFkbTpkZWZhdWx0LW5vZGUtdG9rZW4=",
                    "expiration": "MjAyNi0xMi0wN1QxNToxOTowNVo=",
                    "token-id": "YWJjZGVm",
                    "token-secret": "MDEyMzQ1Njc4OWFiY2RlZg==",
                    "usage-bootstrap-authentication": "dHJ1ZQ==",
                    "usage-bootstrap-signing": "dHJ1ZQ==",
                    "description": "dG9rZW4gZm9yIHdvcmtlci0x",
                },
            });
            g.create(res("Secret"), "kube-system", token).unwrap();
        }
        let (count, bytes) = {
            let state = g.lock();
            (state.count, state.live_bytes)
        };
        println!(
            "store: a 5,000-Node cluster: {count} objects, {} KiB of JSON",
            bytes / 1024
        );
        assert!(2 * count <= limits.max_objects, "{count} objects");
        assert!(2 * bytes <= limits.max_group_bytes, "{bytes} bytes");
    }

    /// 1,000 groups × 10 Nodes: what one Node costs in the store (printed; no assertion on
    /// timing, a loose one on size so a regression to a parsed tree would show).
    #[test]
    fn bound_1000_groups_of_10_nodes() {
        // Resident memory, where /proc tells it: a second view, noisy when other tests run
        // in the same process at the same time (run this test alone for a clean figure).
        fn rss() -> Option<usize> {
            let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
            let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
            Some(pages * 4096)
        }
        let store = Store::default();
        let groups: Vec<_> = (0..1000)
            .map(|c| store.group(&format!("ns-{c}/cluster-{c}")))
            .collect();
        let (empty, rss_before) = (store.approx_bytes(), rss());
        let mut json_bytes = 0;
        for (c, g) in groups.iter().enumerate() {
            for m in 0..10 {
                let mut n = node(&format!("cluster-{c}-md-0-{m:05}"));
                n["metadata"]["labels"] = json!({
                    "kubernetes.io/hostname": format!("cluster-{c}-md-0-{m:05}"),
                    "node-role.kubernetes.io/control-plane": "",
                });
                n["spec"]["taints"] = json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]);
                n["status"] = json!({
                    "nodeInfo": {"kubeletVersion": "v1.35.0"},
                    "conditions": [
                        {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": "2026-11-26T06:00:00Z"},
                        {"type": "MemoryPressure", "status": "False", "lastTransitionTime": "2026-11-26T06:00:00Z"},
                        {"type": "DiskPressure", "status": "False", "lastTransitionTime": "2026-11-26T06:00:00Z"},
                        {"type": "PIDPressure", "status": "False", "lastTransitionTime": "2026-11-26T06:00:00Z"},
                    ],
                });
                json_bytes += g.create(res("Node"), "", n).unwrap().bytes.len();
            }
        }
        let (full, rss_after) = (store.approx_bytes(), rss());
        let per_node = (full - empty) / 10_000;
        println!(
            "store: 1000 groups x 10 Nodes: ~{} KiB in all ({} KiB of it the groups and their \
             {} system Namespaces); ~{per_node} bytes per Node, of which {} its JSON",
            full / 1024,
            empty / 1024,
            SYSTEM_NAMESPACES.len(),
            json_bytes / 10_000,
        );
        if let (Some(before), Some(after)) = (rss_before, rss_after) {
            println!(
                "store: resident memory grew by {} KiB for the 10,000 Nodes (~{} bytes each)",
                after.saturating_sub(before) / 1024,
                after.saturating_sub(before) / 10_000
            );
        }
        assert_eq!(
            store
                .get_group("ns-999/cluster-999")
                .unwrap()
                .object_count(),
            14
        );
        // Loose: a Node costs its JSON plus bookkeeping, not a parsed tree's several times.
        assert!(per_node < 2 * (json_bytes / 10_000), "{per_node}");
    }
}
