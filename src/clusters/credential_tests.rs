//! The checks that keep a remote cluster's credentials self-contained, and the messages of
//! refusals and failed requests, which name the cluster and its Secret and never a credential.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::tests::{
    COMPOSITOR, Fixture, TOKEN, kubeconfig, kubeconfig_with, secret, token_kubeconfig,
};
use super::*;

/// The error of a kubeconfig registered as cluster `eu`.
async fn refusal(config: &str) -> Error {
    let mut f = Fixture::new();
    f.apply(&secret("eu", 1, &[COMPOSITOR], &[("kubeconfig", config)]));
    f.registry.client("eu").await.unwrap_err()
}

#[tokio::test]
async fn exec_plugins_are_refused_naming_the_cluster_and_why() {
    let exec = format!(
        "exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: /usr/local/bin/aws\n  args: [eks, get-token, --token, {TOKEN}]\n  env: [{{name: AWS_SECRET_ACCESS_KEY, value: {TOKEN}}}]"
    );
    let err = refusal(&kubeconfig(&exec)).await;
    assert_eq!(err.reason(), "UnsupportedAuth");
    let message = err.to_string();
    assert!(
        message.starts_with(
            "cluster \"eu\": the kubeconfig in Secret compositor/eu uses an exec plugin (\"aws\"), \
             which compositor cannot run"
        ),
        "{message}"
    );
    assert!(!message.contains(TOKEN) && !format!("{err:?}").contains(TOKEN));
}

#[tokio::test]
async fn other_authentication_and_file_references_are_refused() {
    let cases = [
        (
            "auth-provider: {name: oidc, config: {id-token: x}}",
            "UnsupportedAuth",
            "auth provider \"oidc\"",
        ),
        (
            &format!("username: admin\npassword: {TOKEN}"),
            "UnsupportedAuth",
            "basic authentication",
        ),
        (
            &format!("token: {TOKEN}\nas: someone"),
            "UnsupportedAuth",
            "impersonation",
        ),
        (
            "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
            "UnsupportedAuth",
            "tokenFile: \"/var/run/secrets/kubernetes.io/serviceaccount/token\" names a file",
        ),
        (
            "client-certificate: /etc/c.crt\nclient-key: /etc/c.key",
            "UnsupportedAuth",
            "client-certificate: \"/etc/c.crt\" names a file",
        ),
        ("{}", "UnsupportedAuth", "no credentials"),
    ];
    for (user, reason, expected) in cases {
        let err = refusal(&kubeconfig(user)).await;
        let message = err.to_string();
        assert_eq!(err.reason(), reason, "{message}");
        assert!(message.contains(expected), "{message}");
        assert!(!message.contains(TOKEN), "{message}");
    }
    let ca_file = kubeconfig_with("certificate-authority: /etc/ca.crt", "token: t");
    let err = refusal(&ca_file).await;
    assert_eq!(err.reason(), "InvalidKubeconfig", "{err}");
    assert!(
        err.to_string()
            .contains("certificate-authority: \"/etc/ca.crt\" names a file")
    );
}

#[tokio::test]
async fn client_certificates_are_accepted() {
    let identity = rcgen::generate_simple_self_signed(vec!["client".to_string()]).unwrap();
    let cert = STANDARD.encode(identity.cert.pem());
    let key = STANDARD.encode(identity.signing_key.serialize_pem());
    let config = kubeconfig(&format!(
        "client-certificate-data: {cert}\nclient-key-data: {key}"
    ));
    let mut f = Fixture::new();
    f.apply(&secret("eu", 1, &[COMPOSITOR], &[("kubeconfig", &config)]));
    f.registry.client("eu").await.unwrap();

    let half = kubeconfig(&format!("client-certificate-data: {cert}"));
    let err = refusal(&half).await;
    assert_eq!(err.reason(), "InvalidKubeconfig");
    assert!(err.to_string().contains("go together"), "{err}");
}

#[tokio::test]
async fn invalid_kubeconfigs_are_described_without_their_content() {
    let good = token_kubeconfig(TOKEN);
    let cases = [
        // A YAML error on the token's line: the parser would quote it.
        (
            good.replace(&format!("token: {TOKEN}"), &format!("token: {TOKEN}: [")),
            "not a YAML kubeconfig (line",
        ),
        (
            good.replace("current-context: x", "current-context: y"),
            "current-context \"y\" is not among its contexts",
        ),
        (
            good.replace("current-context: x\n", ""),
            "it has no current-context",
        ),
        (
            good.replace("cluster: c,", "cluster: d,"),
            "the cluster \"d\" of context \"x\" is not among its clusters",
        ),
        (
            good.replace("https://127.0.0.1:6443", "https://[bad"),
            "its server is not a URL",
        ),
        (
            good.replace(
                "certificate-authority-data: ",
                &format!("certificate-authority-data: {TOKEN}!"),
            ),
            "certificate-authority-data is not base64",
        ),
        (format!("{TOKEN}\n"), "not a YAML kubeconfig"),
    ];
    // The YAML library quotes the offending line: what these messages must not do.
    let raw = kube::config::Kubeconfig::from_yaml(&cases[0].0).unwrap_err();
    assert!(raw.to_string().contains(TOKEN), "{raw}");
    for (config, expected) in cases {
        let err = refusal(&config).await;
        let message = err.to_string();
        assert_eq!(err.reason(), "InvalidKubeconfig", "{message}");
        assert!(message.contains(expected), "{message}");
        assert!(!message.contains(TOKEN), "{message}");
        assert!(!format!("{err:?}").contains(TOKEN), "{err:?}");
    }
}

#[tokio::test]
async fn a_client_shows_no_credential() {
    let mut f = Fixture::new();
    f.apply(&secret(
        "eu",
        1,
        &[COMPOSITOR],
        &[("kubeconfig", &token_kubeconfig(TOKEN))],
    ));
    let client = f.registry.client("eu").await.unwrap();
    let debug = format!("{client:?}");
    assert!(
        debug.contains("https://127.0.0.1:6443") && !debug.contains(TOKEN),
        "{debug}"
    );
}

#[test]
fn request_errors_are_classified() {
    let api = |code: u16, message: &str| {
        let mut status = kube::core::Status::failure(message, "Reason");
        status.code = code;
        kube::Error::Api(status.boxed())
    };
    let classify = |err| error::request_error("eu", "compositor/eu", "https://h:1", err);
    let unauthorized = classify(api(401, "Unauthorized"));
    assert_eq!(unauthorized.reason(), "ClusterUnauthorized");
    assert_eq!(
        unauthorized.to_string(),
        "cluster \"eu\" at https://h:1 rejected the credentials of Secret compositor/eu (HTTP 401): \
         Unauthorized"
    );
    assert_eq!(
        classify(api(503, "unavailable")).reason(),
        "ClusterUnreachable"
    );
    let forbidden = classify(api(403, "forbidden: nope"));
    assert_eq!(forbidden.reason(), "ClusterForbidden");
    assert_eq!(
        forbidden.to_string(),
        "cluster \"eu\" at https://h:1: the identity of Secret compositor/eu may not do this \
         (HTTP 403): forbidden: nope; grant it what the chart writes there"
    );
    let failed = classify(api(500, "etcd timeout"));
    assert_eq!(failed.reason(), "ClusterRequestFailed");
    assert!(
        failed
            .to_string()
            .ends_with("request failed: HTTP 500: etcd timeout")
    );
}

#[test]
fn servers_are_shown_without_user_info() {
    let uri: http::Uri = "https://user:pw@10.0.0.1:6443/prefix?x=1".parse().unwrap();
    assert_eq!(error::server(&uri), "https://10.0.0.1:6443");
    let uri: http::Uri = "https://example.com".parse().unwrap();
    assert_eq!(error::server(&uri), "https://example.com");
}

#[test]
fn error_chains_say_each_message_once() {
    #[derive(Debug, thiserror::Error)]
    #[error("ServiceError: client error (Connect)")]
    struct Outer(#[source] Middle);
    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Middle(#[source] std::io::Error);
    let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
    assert_eq!(
        error::chain(&Outer(Middle(io))),
        "client error (Connect): Connection refused"
    );
}
