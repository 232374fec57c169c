//! A counting proxy in front of the test bed's apiserver, so that what one process writes is told
//! apart from what the control plane writes meanwhile: the process gets a kubeconfig pointing at
//! the proxy, which forwards every request with the admin client and counts it by verb and
//! resource, and keeps when each request started and was answered.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kube::Client;
use serde_json::json;

use super::{Counts, Error};

type Requests = Arc<Mutex<Counts>>;
type Exchanges = Arc<Mutex<Vec<Exchange>>>;

/// One request through the proxy: what it asked for, when it arrived and when the apiserver's
/// answer began to stream back.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub method: Method,
    pub path: String,
    pub started: Instant,
    pub answered: Instant,
}

/// The verbs that only read.
const READS: [Method; 3] = [Method::GET, Method::HEAD, Method::OPTIONS];

/// The proxy; it stops when dropped.
pub struct CountingProxy {
    address: SocketAddr,
    requests: Requests,
    exchanges: Exchanges,
    server: tokio::task::JoinHandle<()>,
}

impl CountingProxy {
    /// Serves on a free loopback port, forwarding with `client`.
    pub async fn start(client: Client) -> Result<Self, Error> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let requests = Requests::default();
        let exchanges = Exchanges::default();
        let app = axum::Router::new().fallback(forward).with_state((
            client,
            requests.clone(),
            exchanges.clone(),
        ));
        // Without it, an answer's body waits for the acknowledgement of its headers, which the
        // client delays by some 40 ms.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(CountingProxy {
            address,
            requests,
            exchanges,
            server,
        })
    }

    /// Writes a kubeconfig that reaches the apiserver through the proxy to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), Error> {
        let kubeconfig = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": format!("http://{}", self.address)}}],
            "users": [{"name": "proxy", "user": {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}],
            "current-context": "proxy",
        });
        std::fs::write(path, kubeconfig.to_string())?;
        Ok(())
    }

    /// The requests so far that `write` (or else only read), by verb and resource.
    pub fn requests(&self, write: bool) -> Counts {
        let is_read = |verb: &str| READS.iter().any(|read| read.as_str() == verb);
        let requests = self.requests.lock().map(|r| r.clone()).unwrap_or_default();
        requests
            .into_iter()
            .filter(|(key, _)| is_read(&key[0]) != write)
            .collect()
    }

    /// The requests answered since the last call, in the order they arrived.
    pub fn take_exchanges(&self) -> Vec<Exchange> {
        let mut exchanges = self
            .exchanges
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default();
        exchanges.sort_by_key(|exchange| exchange.started);
        exchanges
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn forward(
    State((client, requests, exchanges)): State<(Client, Requests, Exchanges)>,
    request: Request,
) -> Response {
    let started = Instant::now();
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let response = relay(&client, &requests, request).await;
    let exchange = Exchange {
        method,
        path,
        started,
        answered: Instant::now(),
    };
    if let Ok(mut exchanges) = exchanges.lock() {
        exchanges.push(exchange);
    }
    match response {
        Ok(response) => response,
        Err(error) => (StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
    }
}

/// Counts `request` and forwards it; the apiserver's response streams back.
async fn relay(
    client: &Client,
    requests: &Mutex<Counts>,
    request: Request,
) -> Result<Response, Box<dyn std::error::Error + Send + Sync>> {
    let (mut parts, body) = request.into_parts();
    let key = vec![parts.method.to_string(), resource_of(parts.uri.path())];
    if let Ok(mut requests) = requests.lock() {
        *requests.entry(key).or_default() += 1.0;
    }
    parts.headers.remove(header::HOST);
    let body = axum::body::to_bytes(body, usize::MAX).await?;
    let request = Request::from_parts(parts, kube::client::Body::from(body));
    Ok(client.send(request).await?.map(Body::new))
}

/// `resource` or `resource/subresource` of an API path such as
/// `/apis/apps/v1/namespaces/acme/deployments/web/status`; other paths as they are.
fn resource_of(path: &str) -> String {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.first() {
        Some(&"api") => segments.get(2..),
        Some(&"apis") => segments.get(3..),
        _ => None,
    };
    let rest = match rest {
        Some(["namespaces", _, more @ ..]) if !more.is_empty() => more,
        Some(rest) => rest,
        None => return path.to_string(),
    };
    match rest {
        [resource, _, subresource, ..] => format!("{resource}/{subresource}"),
        [resource, ..] => resource.to_string(),
        [] => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::resource_of;

    #[test]
    fn resources_of_api_paths() {
        for (path, resource) in [
            ("/api/v1/namespaces/acme", "namespaces"),
            ("/api/v1/namespaces/acme/secrets/x", "secrets"),
            (
                "/apis/apps/v1/namespaces/acme/deployments/web/status",
                "deployments/status",
            ),
            (
                "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                "clusterroles",
            ),
            ("/version", "/version"),
        ] {
            assert_eq!(resource_of(path), resource, "{path}");
        }
    }
}
