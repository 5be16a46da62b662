//! The few writes a reconcile makes to its own object, each minimal: finalizers (guarded by the
//! list we saw), spec fields and annotations we own, and status (guarded by resourceVersion).
//!
//! One [`Patcher`] per reconcile carries the object's resourceVersion from each write to the
//! next, so the status write at the end is conditional on exactly the object this reconcile read
//! and changed itself: a concurrent change makes it fail ([`Error::Stale`]) instead of being
//! overwritten, and the next pass recomputes status from the newer object.
use std::{
    cmp::Ordering,
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use kube::{
    Api, Resource, ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
};
use serde::Serialize;
use serde_json::json;

use super::error::{Error, Result};
use crate::api::v1beta1_conditions::V1Beta1Mirror;

/// The resourceVersion each object had after our last write to it, by UID, and when we wrote it.
/// With it a reconcile can tell a cached view that predates our own write (the watch has not
/// delivered it yet) from one that has it: see [`OwnWrites::lags`] and [`can_skip_status`].
#[derive(Default)]
pub struct OwnWrites(Mutex<HashMap<String, (String, Instant)>>);

/// How long a view may lag behind our own write before we stop waiting for the watch and act
/// on it anyway. A watch delivers within milliseconds; this bounds the wait should the server's
/// resourceVersions ever go backwards (an etcd restored from a backup), which would otherwise
/// make every view look old for good.
const LAG_LIMIT: Duration = Duration::from_secs(10);

impl OwnWrites {
    fn get(&self, uid: &str) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(uid)
            .map(|(rv, _)| rv.clone())
    }

    fn record(&self, uid: &str, rv: Option<String>) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match rv {
            Some(rv) => map.insert(uid.to_string(), (rv, Instant::now())),
            None => map.remove(uid),
        };
    }

    /// Whether `obj`, as the cache has it, is older than our last write to it (within
    /// [`LAG_LIMIT`] of that write). Such a view holds nothing that our write did not already
    /// account for, and a status write from it would certainly meet a 409.
    pub fn lags(&self, obj: &impl Resource) -> bool {
        let (Some(uid), Some(view)) = (
            obj.meta().uid.as_deref(),
            obj.meta().resource_version.as_deref(),
        ) else {
            return false;
        };
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(uid).is_some_and(|(last, at)| {
            at.elapsed() < LAG_LIMIT && compare_versions(view, last) == Some(Ordering::Less)
        })
    }

    /// Forget a deleted object.
    pub fn forget(&self, uid: &str) {
        self.record(uid, None);
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The order of two resourceVersions of one resource, where both are canonical positive
/// integers. Kubernetes guarantees that (and that they grow with every write) since 1.35
/// (KEP-5504, "comparable resource versions"); earlier etcd-backed servers behave the same
/// without promising it. Anything else is `None`: only equality means something then.
pub fn compare_versions(a: &str, b: &str) -> Option<Ordering> {
    let canonical =
        |v: &str| !v.is_empty() && !v.starts_with('0') && v.bytes().all(|c| c.is_ascii_digit());
    (canonical(a) && canonical(b)).then(|| a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
}

/// Whether a status write can be skipped: nothing to change, and the view has our last write
/// (is that version, or a later one): a view from before it may show a status that has changed
/// on the server since (pure; see [`OwnWrites`]).
pub fn can_skip_status<S: PartialEq>(
    current: Option<&S>,
    desired: &S,
    view_rv: Option<&str>,
    last_written_rv: Option<&str>,
) -> bool {
    let has_last_write = match (view_rv, last_written_rv) {
        (_, None) => true,
        (Some(view), Some(last)) => {
            view == last || compare_versions(view, last) == Some(Ordering::Greater)
        }
        (None, Some(_)) => false,
    };
    current == Some(desired) && has_last_write
}

/// Writes to one object during one reconcile. The object is read through its Docker* type (a
/// Dev* object as its view), and written through `api`: its own resource, at paths both
/// shapes share.
pub struct Patcher<'a> {
    api: Api<DynamicObject>,
    writes: &'a OwnWrites,
    name: String,
    uid: String,
    /// The resourceVersion of the object as this reconcile last saw or wrote it.
    rv: Option<String>,
    /// The resourceVersion of the view the reconcile started from.
    view_rv: Option<String>,
    /// The generation of the view, and of the object after our writes while every spec change
    /// since the view was ours (`None` once a write shows one that was not).
    view_generation: Option<i64>,
    own_generation: Option<i64>,
    /// The view has a deletionTimestamp (the v1beta1 summary counts no steps then).
    deleting: bool,
}

fn params() -> PatchParams {
    PatchParams::default()
}

impl<'a> Patcher<'a> {
    pub fn new(api: Api<DynamicObject>, obj: &impl Resource, writes: &'a OwnWrites) -> Self {
        Self {
            api,
            writes,
            name: obj.name_any(),
            uid: obj.uid().unwrap_or_default(),
            rv: obj.resource_version(),
            view_rv: obj.resource_version(),
            view_generation: obj.meta().generation,
            own_generation: obj.meta().generation,
            deleting: obj.meta().deletion_timestamp.is_some(),
        }
    }

    /// `bumps`: whether the write changes spec, i.e. is expected to raise the generation by one.
    fn after_write(&mut self, obj: &DynamicObject, bumps: bool) {
        self.rv = obj.resource_version();
        self.writes.record(&self.uid, self.rv.clone());
        self.own_generation = own_generation(self.own_generation, obj.metadata.generation, bumps);
    }

    /// The generation conditions computed from the view may carry at the status write: the
    /// object's new one when only our own spec writes (e.g. the providerID) raised it, so that
    /// the status write does not report the view's generation and then need a second write
    /// once our change comes back through the watch; otherwise the view's.
    pub fn observed_generation(&self) -> Option<i64> {
        self.own_generation.or(self.view_generation)
    }

    /// Add `finalizer` if absent. A JSON patch whose `test` op guards the list we saw: a
    /// concurrent finalizer change makes it fail (and retry) instead of being overwritten, while
    /// unrelated changes (status, labels) do not conflict. Returns true if it was added.
    pub async fn add_finalizer(&mut self, obj: &impl Resource, finalizer: &str) -> Result<bool> {
        if obj.finalizers().iter().any(|f| f == finalizer) {
            return Ok(false);
        }
        let ops = if obj.meta().finalizers.is_none() {
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}
            ])
        } else {
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": obj.finalizers()},
                {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}
            ])
        };
        let patched = self
            .api
            .patch(
                &self.name,
                &params(),
                &Patch::Json::<()>(serde_json::from_value(ops)?),
            )
            .await?;
        self.after_write(&patched, false);
        Ok(true)
    }

    /// Remove `finalizer` if present (a vanished object is fine), guarded like
    /// [`Self::add_finalizer`].
    pub async fn remove_finalizer(&mut self, obj: &impl Resource, finalizer: &str) -> Result<()> {
        let Some(index) = obj.finalizers().iter().position(|f| f == finalizer) else {
            return Ok(());
        };
        let path = format!("/metadata/finalizers/{index}");
        let ops = json!([{"op": "test", "path": path, "value": finalizer}, {"op": "remove", "path": path}]);
        match self
            .api
            .patch(
                &self.name,
                &params(),
                &Patch::Json::<()>(serde_json::from_value(ops)?),
            )
            .await
        {
            Ok(patched) => {
                self.after_write(&patched, false);
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Merge-patch part of `spec` (e.g. providerID, controlPlaneEndpoint).
    /// The caller sends only fields that change: a patch that changes nothing would leave the
    /// generation where it was, and [`Self::observed_generation`] could not tell ours from
    /// someone else's change.
    pub async fn spec(&mut self, spec_fields: serde_json::Value) -> Result<()> {
        self.merge(json!({ "spec": spec_fields }), true).await
    }

    /// Merge-patch annotations (a `null` value removes one).
    pub async fn annotations(&mut self, annotations: serde_json::Value) -> Result<()> {
        self.merge(json!({ "metadata": { "annotations": annotations } }), false)
            .await
    }

    /// [`Self::annotations`] and [`Self::spec`] in one write, either of them left out when
    /// `None`; nothing is written when both are. Each write to an infrastructure object makes
    /// CAPI reconcile its owner again, so changes known together go together.
    pub async fn annotations_and_spec(
        &mut self,
        annotations: Option<serde_json::Value>,
        spec_fields: Option<serde_json::Value>,
    ) -> Result<()> {
        match (annotations, spec_fields) {
            (None, None) => Ok(()),
            (Some(a), None) => self.annotations(a).await,
            (a, Some(spec)) => {
                let mut patch = json!({ "spec": spec });
                if let Some(a) = a {
                    patch["metadata"] = json!({ "annotations": a });
                }
                self.merge(patch, true).await
            }
        }
    }

    async fn merge(&mut self, patch: serde_json::Value, bumps: bool) -> Result<()> {
        let patched = self
            .api
            .patch(&self.name, &params(), &Patch::Merge(&patch))
            .await?;
        self.after_write(&patched, bumps);
        Ok(())
    }

    /// Write the status we own when it differs from the view (see [`can_skip_status`]), as a
    /// merge patch conditional on the resourceVersion this reconcile last saw or wrote. The v1beta1
    /// conditions (`deprecated`) are derived here from the v1beta2 ones, for every status written.
    pub async fn status<S>(&mut self, current: Option<&S>, desired: &S) -> Result<bool>
    where
        S: Serialize + PartialEq + V1Beta1Mirror,
    {
        let desired = &desired.with_v1beta1(current, self.deleting, chrono::Utc::now());
        let last = self.writes.get(&self.uid);
        if can_skip_status(current, desired, self.view_rv.as_deref(), last.as_deref()) {
            return Ok(false);
        }
        // Merge patch: fields we no longer set must be nulled explicitly, so send the full
        // status with nulls for absent optional fields (serde skips them; add them back as null).
        let mut status = serde_json::to_value(desired)?;
        let current = current.map(serde_json::to_value).transpose()?;
        if let (Some(serde_json::Value::Object(cur)), Some(map)) = (current, status.as_object_mut())
        {
            for key in cur.keys() {
                map.entry(key.clone()).or_insert(serde_json::Value::Null);
            }
        }
        let body = json!({
            "metadata": { "resourceVersion": self.rv },
            "status": status.clone(),
        });
        match self
            .api
            .patch_status(&self.name, &params(), &Patch::Merge(&body))
            .await
        {
            Ok(patched) => {
                self.after_write(&patched, false);
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
            Err(kube::Error::Api(e)) if e.code == 409 => Err(Error::Stale),
            Err(kube::Error::Api(e)) if e.code == 422 || e.code == 400 => {
                let message = super::error::bounded_message(&e.message);
                // The whole status was refused; a Ready condition alone may still be accepted
                // (the refused value is elsewhere), and makes the refusal visible where users
                // look. If it is refused too, the Event is all there is.
                if let Some(body) = rejected_ready_patch(&status, self.rv.as_deref(), &message)
                    && let Ok(patched) = self
                        .api
                        .patch_status(&self.name, &params(), &Patch::Merge(&body))
                        .await
                {
                    self.after_write(&patched, false);
                }
                Err(Error::StatusRejected(message))
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// A status patch that sets only `conditions`: the desired ones with `Ready` False, reason
/// `StatusUpdateRejected` and the API server's message. `None` when the desired status has no
/// conditions list.
fn rejected_ready_patch(
    desired: &serde_json::Value,
    rv: Option<&str>,
    message: &str,
) -> Option<serde_json::Value> {
    let mut conditions = desired.get("conditions")?.as_array()?.clone();
    let previous = conditions
        .iter()
        .find(|c| {
            c.get("type").and_then(|t| t.as_str()) == Some(crate::api::conditions::types::READY)
        })
        .cloned();
    conditions.retain(|c| {
        c.get("type").and_then(|t| t.as_str()) != Some(crate::api::conditions::types::READY)
    });
    let mut ready = json!({
        "type": crate::api::conditions::types::READY,
        "status": "False",
        "reason": crate::api::conditions::reasons::STATUS_UPDATE_REJECTED,
        "message": message,
        "lastTransitionTime": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    });
    if let Some(p) = previous {
        if let Some(g) = p.get("observedGeneration") {
            ready["observedGeneration"] = g.clone();
        }
        // Ready was False already: it did not transition now.
        if p.get("status").and_then(|s| s.as_str()) == Some("False")
            && let Some(t) = p.get("lastTransitionTime")
        {
            ready["lastTransitionTime"] = t.clone();
        }
    }
    conditions.push(ready);
    Some(json!({
        "metadata": { "resourceVersion": rv },
        "status": { "conditions": conditions },
    }))
}

/// The generation after a write, if every change of it since the view was one of ours: each
/// spec write (`bumps`) raises it by exactly one, any other write leaves it. `None` stays `None`.
fn own_generation(before: Option<i64>, after: Option<i64>, bumps: bool) -> Option<i64> {
    let expected = if bumps { before.map(|g| g + 1) } else { before };
    before.and(after).filter(|a| Some(*a) == expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_own_spec_writes_move_the_observed_generation() {
        assert_eq!(
            own_generation(Some(3), Some(4), true),
            Some(4),
            "our spec write"
        );
        assert_eq!(
            own_generation(Some(3), Some(3), false),
            Some(3),
            "metadata or status"
        );
        assert_eq!(
            own_generation(Some(3), Some(5), true),
            None,
            "someone else changed spec too"
        );
        assert_eq!(
            own_generation(Some(3), Some(4), false),
            None,
            "someone else changed spec"
        );
        assert_eq!(own_generation(None, Some(4), true), None, "once lost, lost");
    }

    #[test]
    fn resource_versions_compare_only_as_canonical_integers() {
        assert_eq!(
            compare_versions("9", "10"),
            Some(Ordering::Less),
            "by value, not text"
        );
        assert_eq!(compare_versions("123", "122"), Some(Ordering::Greater));
        assert_eq!(compare_versions("42", "42"), Some(Ordering::Equal));
        for odd in ["", "0", "010", "12a", "-5", " 7"] {
            assert_eq!(compare_versions(odd, "5"), None, "{odd:?}");
            assert_eq!(compare_versions("5", odd), None, "{odd:?}");
        }
    }

    #[test]
    fn a_view_lags_only_behind_a_recent_own_write() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let view = |rv: &str| {
            let mut o = ConfigMap::default();
            o.metadata.uid = Some("u".into());
            o.metadata.resource_version = Some(rv.into());
            o
        };
        let writes = OwnWrites::default();
        assert!(!writes.lags(&view("5")), "nothing written");
        writes.record("u", Some("10".into()));
        assert!(
            writes.lags(&view("9")),
            "the watch has not delivered our write"
        );
        assert!(!writes.lags(&view("10")), "our write");
        assert!(!writes.lags(&view("11")), "a later write");
        assert!(!writes.lags(&view("x9")), "versions that do not compare");
        writes.0.lock().unwrap().get_mut("u").unwrap().1 -= LAG_LIMIT;
        assert!(
            !writes.lags(&view("9")),
            "waited long enough: act on what the cache has"
        );
        writes.forget("u");
        assert!(writes.is_empty());
    }

    #[test]
    fn a_refused_status_write_is_reported_in_ready_alone() {
        let desired = json!({"failureDomain": "x", "conditions": [
            {"type": "Ready", "status": "False", "reason": "NotReady", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 3},
            {"type": "Paused", "status": "False", "reason": "NotPaused", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]});
        let body =
            rejected_ready_patch(&desired, Some("7"), "status.failureDomain: Too long").unwrap();
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        let status = body["status"].as_object().unwrap();
        assert_eq!(status.len(), 1, "conditions only: {status:?}");
        let conds = status["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 2);
        let ready = conds.iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(ready["reason"], "StatusUpdateRejected");
        assert_eq!(ready["message"], "status.failureDomain: Too long");
        assert_eq!(
            ready["lastTransitionTime"], "2026-01-01T00:00:00Z",
            "no new transition"
        );
        assert_eq!(ready["observedGeneration"], 3);
        assert!(rejected_ready_patch(&json!({}), None, "m").is_none());
    }

    #[test]
    fn status_write_is_skipped_only_for_an_up_to_date_view() {
        let (a, b) = (Some(1), 1);
        assert!(
            can_skip_status(a.as_ref(), &b, Some("5"), None),
            "never written"
        );
        assert!(
            can_skip_status(a.as_ref(), &b, Some("5"), Some("5")),
            "view has our write"
        );
        assert!(
            !can_skip_status(a.as_ref(), &b, Some("4"), Some("5")),
            "the view predates our last write: what it shows may be outdated on the server"
        );
        assert!(
            can_skip_status(a.as_ref(), &b, Some("6"), Some("5")),
            "a later view has our write"
        );
        assert!(
            !can_skip_status(a.as_ref(), &b, Some("b"), Some("a")),
            "versions that do not compare: only our own write's version is known to have it"
        );
        assert!(
            !can_skip_status(a.as_ref(), &2, Some("5"), Some("5")),
            "a change"
        );
        assert!(!can_skip_status(None, &b, Some("5"), None), "no status yet");
    }
}
