//! Counts the manager's Kubernetes API requests by verb and resource: a tower layer on the kube
//! client, so every request is seen (controllers, watches, leader election) and none is missed
//! by a forgotten call site. It answers "how many GETs does a reconcile cost" from `/metrics`.
use std::task::{Context, Poll};

use http::{Method, Request, Uri};
use prometheus_client::{
    encoding::EncodeLabelSet, metrics::counter::Counter, metrics::family::Family,
};
use tower::{Layer, Service};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// The resource's plural, with the subresource if any (`dockermachines/status`).
    pub resource: String,
}

/// The layer to put on the kube client; it increments `family` once per request sent.
#[derive(Clone)]
pub struct CountRequests(pub Family<RequestLabels, Counter>);

impl<S> Layer<S> for CountRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            family: self.0.clone(),
        }
    }
}

pub struct Counted<S> {
    inner: S,
    family: Family<RequestLabels, Counter>,
}

impl<S, B> Service<Request<B>> for Counted<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.family
            .get_or_create(&classify(req.method(), req.uri()))
            .inc();
        self.inner.call(req)
    }
}

/// The verb and resource of a request, from its method and path:
/// `/api/v1/[namespaces/<ns>/]<plural>[/<name>[/<subresource>]]`, or the same under
/// `/apis/<group>/<version>`. A GET on a collection is a list, or a watch with `watch=true`.
pub fn classify(method: &Method, uri: &Uri) -> RequestLabels {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] | ["apis", _, _version, rest @ ..] => rest,
        _ => &[][..],
    };
    // A namespaced path, but not the namespace object itself (`namespaces/<ns>`).
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        _ => rest,
    };
    let (resource, collection) = match rest {
        [] => ("other".to_string(), false),
        [plural] => (plural.to_string(), true),
        [plural, _name] => (plural.to_string(), false),
        [plural, _name, sub, ..] => (format!("{plural}/{sub}"), false),
    };
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match *method {
        Method::GET if watch => "watch",
        Method::GET if collection => "list",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if collection => "deletecollection",
        Method::DELETE => "delete",
        _ => "other",
    };
    RequestLabels {
        verb: verb.to_string(),
        resource,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(method: Method, uri: &str) -> (String, String) {
        let l = classify(&method, &uri.parse().unwrap());
        (l.verb, l.resource)
    }

    #[test]
    fn verbs_and_resources_from_paths() {
        let dm = "/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/ns/dockermachines";
        assert_eq!(c(Method::GET, dm), ("list".into(), "dockermachines".into()));
        assert_eq!(
            c(Method::GET, &format!("{dm}?watch=true&resourceVersion=5")),
            ("watch".into(), "dockermachines".into())
        );
        assert_eq!(
            c(Method::GET, &format!("{dm}/m1")),
            ("get".into(), "dockermachines".into())
        );
        assert_eq!(
            c(Method::PATCH, &format!("{dm}/m1/status")),
            ("patch".into(), "dockermachines/status".into())
        );
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/ns/secrets/s"),
            ("get".into(), "secrets".into())
        );
        assert_eq!(
            c(
                Method::GET,
                "/apis/cluster.x-k8s.io/v1beta2/machines?labelSelector=a"
            ),
            ("list".into(), "machines".into())
        );
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/ns"),
            ("get".into(), "namespaces".into())
        );
        assert_eq!(
            c(
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
            ),
            ("update".into(), "leases".into())
        );
        assert_eq!(c(Method::GET, "/version"), ("get".into(), "other".into()));
    }
}
