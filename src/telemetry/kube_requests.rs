//! Counts the manager's Kubernetes API requests: a tower layer on the kube client, so every
//! request is seen (controllers, watches, leader election) and none is missed by a forgotten
//! call site. Two series: ours, by verb and resource (`capd_kube_api_requests_total`: "how many
//! GETs does a reconcile cost"), and client-go's `rest_client_requests_total{code,method,host}`
//! (what controller-runtime managers export), counted when the response (or failure) arrives.
use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use http::{Method, Request, Response, Uri};
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

/// client-go's labels: the HTTP status code (`<error>` when no response came), the method,
/// and the API server's `host:port`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RestClientLabels {
    pub code: String,
    pub method: String,
    pub host: String,
}

/// The layer to put on the kube client; it counts each request into both families.
#[derive(Clone)]
pub struct CountRequests {
    pub requests: Family<RequestLabels, Counter>,
    pub rest_client: Family<RestClientLabels, Counter>,
    /// The API server's `host:port`: the layer sits outside kube's base-URI layer, so the
    /// requests it sees carry only a path.
    pub host: String,
}

impl<S> Layer<S> for CountRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            count: self.clone(),
        }
    }
}

pub struct Counted<S> {
    inner: S,
    count: CountRequests,
}

impl<S, B, R> Service<Request<B>> for Counted<S>
where
    S: Service<Request<B>, Response = Response<R>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = CountedResponse<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.count
            .requests
            .get_or_create(&classify(req.method(), req.uri()))
            .inc();
        let labels = RestClientLabels {
            code: String::new(),
            method: req.method().as_str().to_string(),
            host: self.count.host.clone(),
        };
        CountedResponse {
            inner: Box::pin(self.inner.call(req)),
            labels: Some(labels),
            family: self.count.rest_client.clone(),
        }
    }
}

/// The inner service's response future; counts the request under its status code once it ends.
pub struct CountedResponse<F> {
    inner: Pin<Box<F>>,
    /// Taken when counted (a future polled again after it finished counts nothing twice).
    labels: Option<RestClientLabels>,
    family: Family<RestClientLabels, Counter>,
}

impl<F, R, E> Future for CountedResponse<F>
where
    F: Future<Output = Result<Response<R>, E>>,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let result = std::task::ready!(self.inner.as_mut().poll(cx));
        if let Some(mut labels) = self.labels.take() {
            labels.code = match &result {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "<error>".to_string(),
            };
            self.family.get_or_create(&labels).inc();
        }
        Poll::Ready(result)
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

    /// Answers each request with `status`, or fails when it is None.
    struct Answer(Option<u16>);

    impl Service<Request<()>> for Answer {
        type Response = Response<()>;
        type Error = &'static str;
        type Future = std::future::Ready<Result<Response<()>, &'static str>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            std::future::ready(match self.0 {
                Some(code) => Ok(Response::builder().status(code).body(()).unwrap()),
                None => Err("connection refused"),
            })
        }
    }

    #[tokio::test]
    async fn counts_client_go_requests_by_code_method_and_host() {
        let layer = CountRequests {
            requests: Family::default(),
            rest_client: Family::default(),
            host: "127.0.0.1:16443".into(),
        };
        let request = || {
            Request::post("/apis/authentication.k8s.io/v1/tokenreviews")
                .body(())
                .unwrap()
        };
        let _ = layer.layer(Answer(Some(201))).call(request()).await;
        let _ = layer.layer(Answer(Some(201))).call(request()).await;
        let _ = layer.layer(Answer(None)).call(request()).await;
        let count = |code: &str| {
            layer
                .rest_client
                .get_or_create(&RestClientLabels {
                    code: code.into(),
                    method: "POST".into(),
                    host: "127.0.0.1:16443".into(),
                })
                .get()
        };
        assert_eq!((count("201"), count("<error>")), (2, 1));
        let created = layer
            .requests
            .get_or_create(&RequestLabels {
                verb: "create".into(),
                resource: "tokenreviews".into(),
            })
            .get();
        assert_eq!(created, 3);
    }

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
