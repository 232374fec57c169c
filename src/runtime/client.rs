//! The Kubernetes client both roles use: kube's own stack, with every request counted in
//! `compositor_api_requests_total` by cluster, verb, resource and status code.
//!
//! Labels stay bounded: the cluster is `local` or a registered cluster's name, the resource the
//! plural (plus subresource) parsed from the request path, never an object's name or namespace.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ClientBuilder;

use super::Metrics;

/// The code label of a request that got no HTTP response (connection refused, timeout, TLS).
pub const NO_RESPONSE: &str = "<error>";

/// A client of the management cluster for `config` whose requests are counted in `metrics`
/// under the cluster `local`; otherwise exactly the client `kube::Client::try_from(config)`
/// builds (same TLS, auth, retries and timeouts).
pub fn client(config: kube::Config, metrics: Arc<Metrics>) -> Result<kube::Client, kube::Error> {
    cluster_client(crate::api::LOCAL_CLUSTER, config, metrics)
}

/// As [`client`], for the cluster named `cluster`.
pub fn cluster_client(
    cluster: &str,
    config: kube::Config,
    metrics: Arc<Metrics>,
) -> Result<kube::Client, kube::Error> {
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&CountLayer {
            metrics,
            cluster: cluster.into(),
        })
        .build())
}

/// How often an idle HTTP/2 connection is pinged, and how long an answer may take: a cluster
/// that stops answering ends its watches (which then back off and try again) within seconds.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// A client for long-lived watches on `cluster`, as `config` says (same TLS, credentials and
/// impersonation as [`cluster_client`]), whose requests share one HTTP/2 connection. Kube's own
/// client speaks HTTP/1.1, one connection per open watch: a watch there holds about 52 KiB
/// (TLS and read buffers), here about 12 KiB, and three thousand list in a quarter of the time.
/// The connection carries every request of this client, so the caller bounds how many watches
/// it opens on one ([`WATCHES_PER_CONNECTION`]): beyond the server's stream limit a request
/// would wait for one to end. A config with a proxy or a TLS server name gets kube's own client,
/// which knows both.
pub fn watch_client(
    cluster: &str,
    config: &kube::Config,
    metrics: Arc<Metrics>,
) -> Result<kube::Client, kube::Error> {
    use kube::client::ConfigExt;
    if config.proxy_url.is_some() || config.tls_server_name.is_some() {
        return cluster_client(cluster, config.clone(), metrics);
    }
    let mut tls = config.rustls_client_config()?;
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnector::from((http, Arc::new(tls)));
    let connection = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .http2_only(true)
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .http2_keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .build(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(connection);
    let counted = CountLayer {
        metrics,
        cluster: cluster.into(),
    };
    Ok(
        ClientBuilder::new(service, config.default_namespace.clone())
            .with_layer(&counted)
            .build(),
    )
}

/// How many watches share one [`watch_client`]: well below the 250 concurrent streams Go's
/// HTTP/2 server allows by default (kube-apiserver's own default is higher).
pub const WATCHES_PER_CONNECTION: usize = 100;

/// Counts each request once its response (or failure) arrives. It sits outside kube's retry
/// layer, so a request kube retried counts once, with its final outcome.
#[derive(Clone)]
struct CountLayer {
    metrics: Arc<Metrics>,
    cluster: Arc<str>,
}

impl<S> tower_layer::Layer<S> for CountLayer {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Counted {
            inner,
            metrics: self.metrics.clone(),
            cluster: self.cluster.clone(),
        }
    }
}

/// The service [`CountLayer`] wraps around kube's stack.
#[derive(Clone)]
struct Counted<S> {
    inner: S,
    metrics: Arc<Metrics>,
    cluster: Arc<str>,
}

impl<S, B, R> tower_service::Service<Request<B>> for Counted<S>
where
    S: tower_service::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    R: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let action = ApiAction::of(request.method(), request.uri());
        let metrics = self.metrics.clone();
        let cluster = self.cluster.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let code = match &result {
                Ok(response) => response.status().as_str().to_string(),
                Err(_) => NO_RESPONSE.to_string(),
            };
            metrics.api_request(&cluster, action.verb, &action.resource, &code);
            result
        })
    }
}

/// What a request does, in Kubernetes' terms: its verb and the resource it acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiAction {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`, or
    /// the lowercased HTTP method of anything else.
    pub verb: &'static str,
    /// The plural (`secrets`), with its subresource (`deployments/status`); `discovery` for the
    /// API discovery paths; the first path segment for other non-resource paths (`version`,
    /// `openapi`).
    pub resource: String,
}

/// Subresources of a namespace, which the apiserver tells apart from a namespaced collection
/// of the same name (`/api/v1/namespaces/x/status` is x's status, not resource `status`).
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

impl ApiAction {
    /// Classifies a request the way the apiserver does (its `RequestInfo`): a path naming an
    /// object is a `get`, a collection a `list` (or a `watch` with `watch=true`).
    pub fn of(method: &Method, uri: &http::Uri) -> ApiAction {
        let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
        let rest = match segments.as_slice() {
            ["api", _version, rest @ ..] => rest,
            ["apis", _group, _version, rest @ ..] => rest,
            ["api" | "apis", ..] => &[][..],
            [first, ..] => {
                return ApiAction {
                    verb: plain_verb(method),
                    resource: (*first).to_string(),
                };
            }
            [] => {
                return ApiAction {
                    verb: plain_verb(method),
                    resource: String::new(),
                };
            }
        };
        // The deprecated `/watch/` prefix still exists; treat it as `?watch=true`.
        let (prefixed_watch, rest) = match rest {
            ["watch", rest @ ..] => (true, rest),
            rest => (false, rest),
        };
        let parts = match rest {
            ["namespaces", _namespace, next, tail @ ..]
                if !NAMESPACE_SUBRESOURCES.contains(next) =>
            {
                let mut parts = vec![*next];
                parts.extend(tail);
                parts
            }
            parts => parts.to_vec(),
        };
        let (resource, named) = match parts.as_slice() {
            [] => {
                return ApiAction {
                    verb: plain_verb(method),
                    resource: "discovery".to_string(),
                };
            }
            [plural] => ((*plural).to_string(), false),
            [plural, _name] => ((*plural).to_string(), true),
            [plural, _name, subresource, ..] => (format!("{plural}/{subresource}"), true),
        };
        let watch = prefixed_watch
            || uri
                .query()
                .unwrap_or_default()
                .split('&')
                .any(|pair| pair == "watch=true" || pair == "watch=1");
        let verb = match (method.as_str(), named) {
            ("GET", _) if watch => "watch",
            ("GET", true) => "get",
            ("GET", false) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            _ => plain_verb(method),
        };
        ApiAction { verb, resource }
    }
}

/// The lowercased HTTP method; only the standard methods, so the label stays bounded.
fn plain_verb(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::POST => "post",
        Method::PUT => "put",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        Method::HEAD => "head",
        Method::OPTIONS => "options",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(method: Method, path: &str) -> (&'static str, String) {
        let target = ApiAction::of(&method, &path.parse().expect("uri"));
        (target.verb, target.resource)
    }

    #[test]
    fn core_and_group_resources_by_plural_never_by_name_or_namespace() {
        let cases = [
            (
                Method::GET,
                "/api/v1/namespaces/x/secrets/y",
                "get",
                "secrets",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/x/secrets",
                "list",
                "secrets",
            ),
            (Method::GET, "/api/v1/secrets", "list", "secrets"),
            (
                Method::GET,
                "/api/v1/namespaces/x/secrets?watch=true&resourceVersion=5",
                "watch",
                "secrets",
            ),
            (
                Method::GET,
                "/apis/apps/v1/deployments?labelSelector=a&watch=1",
                "watch",
                "deployments",
            ),
            (
                Method::GET,
                "/api/v1/watch/namespaces/x/pods",
                "watch",
                "pods",
            ),
            (
                Method::POST,
                "/apis/apps/v1/namespaces/x/deployments",
                "create",
                "deployments",
            ),
            (
                Method::PUT,
                "/apis/apps/v1/namespaces/x/deployments/d",
                "update",
                "deployments",
            ),
            (
                Method::PATCH,
                "/apis/apps/v1/namespaces/x/deployments/d/status",
                "patch",
                "deployments/status",
            ),
            (
                Method::PATCH,
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/a.b.c",
                "patch",
                "customresourcedefinitions",
            ),
            (
                Method::DELETE,
                "/apis/rbac.authorization.k8s.io/v1/clusterroles/compositor:x:y",
                "delete",
                "clusterroles",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/x/configmaps",
                "deletecollection",
                "configmaps",
            ),
            (
                Method::POST,
                "/api/v1/namespaces/x/serviceaccounts/sa/token",
                "create",
                "serviceaccounts/token",
            ),
        ];
        for (method, path, verb, resource) in cases {
            assert_eq!(target(method, path), (verb, resource.to_string()), "{path}");
        }
    }

    #[test]
    fn namespaces_themselves_and_their_subresources() {
        assert_eq!(
            target(Method::GET, "/api/v1/namespaces"),
            ("list", "namespaces".into())
        );
        assert_eq!(
            target(Method::GET, "/api/v1/namespaces/team-a"),
            ("get", "namespaces".into())
        );
        assert_eq!(
            target(Method::PUT, "/api/v1/namespaces/team-a/finalize"),
            ("update", "namespaces/finalize".into())
        );
        assert_eq!(
            target(Method::PATCH, "/api/v1/namespaces/team-a/status"),
            ("patch", "namespaces/status".into())
        );
    }

    #[test]
    fn discovery_and_other_paths_have_fixed_labels() {
        for path in ["/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1"] {
            assert_eq!(
                target(Method::GET, path),
                ("get", "discovery".into()),
                "{path}"
            );
        }
        assert_eq!(target(Method::GET, "/version"), ("get", "version".into()));
        assert_eq!(
            target(Method::GET, "/openapi/v3/apis/apps/v1"),
            ("get", "openapi".into())
        );
    }

    #[tokio::test]
    async fn a_request_is_counted_with_its_status_code() {
        use tower_service::Service;
        let metrics = Arc::new(Metrics::default());
        let mut service = tower_layer::Layer::layer(
            &CountLayer {
                metrics: metrics.clone(),
                cluster: "edge".into(),
            },
            tower_service_fn(|_request: Request<()>| async {
                Ok::<_, std::convert::Infallible>(
                    Response::builder().status(404).body(()).expect("response"),
                )
            }),
        );
        let request = Request::get("/api/v1/namespaces/x/secrets/y")
            .body(())
            .expect("request");
        let response = service.call(request).await.expect("response");
        assert_eq!(response.status(), 404);
        let text = metrics.encode().expect("encode");
        assert!(
            text.contains(
                "compositor_api_requests_total{cluster=\"edge\",verb=\"get\",resource=\"secrets\",code=\"404\"} 1"
            ),
            "{text}"
        );
    }

    /// A service from a closure, for the test above (tower's `service_fn` without tower).
    fn tower_service_fn<F>(f: F) -> ServiceFn<F> {
        ServiceFn(f)
    }

    struct ServiceFn<F>(F);

    impl<F, Fut, Req, Res, E> tower_service::Service<Req> for ServiceFn<F>
    where
        F: FnMut(Req) -> Fut,
        Fut: Future<Output = Result<Res, E>>,
    {
        type Response = Res;
        type Error = E;
        type Future = Fut;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), E>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Req) -> Fut {
            (self.0)(request)
        }
    }
}
