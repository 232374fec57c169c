//! A scripted API server for unit tests: a client whose every request is handed to the test,
//! which asserts what was asked and answers it, so a step's API calls are checked one by one
//! without a control plane.

use std::time::Duration;

use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::Value;
use tower_test::mock::{self, Handle};

/// The server side of [`client`].
pub struct ApiServer {
    handle: Handle<Request<Body>, Response<Body>>,
}

/// A client whose requests an [`ApiServer`] answers.
pub fn client() -> (Client, ApiServer) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), ApiServer { handle })
}

/// One request the server received.
#[derive(Debug)]
pub struct Received {
    /// Its path and query.
    pub uri: String,
    /// Its body as JSON, `Null` when it had none.
    pub body: Value,
}

impl ApiServer {
    /// The next request, which must be `method` on a path starting with `path`, answered with
    /// `status` and `answer`.
    pub async fn expect(
        &mut self,
        method: Method,
        path: &str,
        status: u16,
        answer: Value,
    ) -> Received {
        let next = tokio::time::timeout(Duration::from_secs(5), self.handle.next_request());
        let (request, respond) = next
            .await
            .unwrap_or_else(|_| panic!("no request came; expected {method} {path}"))
            .unwrap_or_else(|| panic!("the client is gone; expected {method} {path}"));
        let uri = request.uri().to_string();
        assert_eq!(request.method(), method, "{uri}");
        assert!(uri.starts_with(path), "expected {method} {path}, got {uri}");
        let bytes = request.into_body().collect_bytes().await.unwrap();
        let body = match bytes.is_empty() {
            true => Value::Null,
            false => serde_json::from_slice(&bytes).unwrap(),
        };
        let answer = serde_json::to_vec(&answer).unwrap();
        let response = Response::builder().status(status).body(Body::from(answer));
        respond.send_response(response.unwrap());
        Received { uri, body }
    }

    /// Asserts that no further request comes.
    pub async fn expect_nothing_more(mut self) {
        let next = tokio::time::timeout(Duration::from_millis(100), self.handle.next_request());
        if let Ok(Some((request, _))) = next.await {
            panic!("unexpected {} {}", request.method(), request.uri());
        }
    }
}

/// The API server's answer for a missing object.
pub fn not_found() -> Value {
    serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": "NotFound", "code": 404, "message": "not found",
    })
}
