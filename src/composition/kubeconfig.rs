//! A kubeconfig for Helm that says exactly what the controller's own client uses: the same
//! server, CA, TLS server name and credentials (a bearer token, or a client certificate and key).
//! Helm then acts with the identity and RBAC the controller has on that cluster, nothing more.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kube::Config;
use secrecy::ExposeSecret;
use serde_json::{Map, Value, json};

/// Why a kubeconfig for Helm cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The client authenticates in a way Helm cannot be handed (e.g. an exec plugin).
    #[error(
        "the controller's credentials are neither a bearer token nor a client certificate and key, which Helm needs"
    )]
    NoCredentials,
    /// The token file cannot be read.
    #[error("cannot read the token file {path}")]
    TokenFile {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The kubeconfig for `config`, with `namespace` as the default namespace. It is JSON, which
/// every kubeconfig reader accepts as YAML, so no value needs quoting by hand. The token file is
/// read on every call, so a rotated ServiceAccount token is used as soon as it changes.
pub fn kubeconfig_for(config: &Config, namespace: &str) -> Result<String, Error> {
    let mut cluster = Map::new();
    cluster.insert("server".into(), json!(config.cluster_url.to_string()));
    let ca: String = config
        .root_cert
        .iter()
        .flatten()
        .map(|der| pem(der))
        .collect();
    if ca.is_empty() {
        cluster.insert(
            "insecure-skip-tls-verify".into(),
            json!(config.accept_invalid_certs),
        );
    } else {
        cluster.insert(
            "certificate-authority-data".into(),
            json!(STANDARD.encode(ca)),
        );
    }
    if let Some(name) = &config.tls_server_name {
        cluster.insert("tls-server-name".into(), json!(name));
    }
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": "user", "user": credentials(config)?}],
        "contexts": [{"name": "context", "context": {"cluster": "cluster", "user": "user", "namespace": namespace}}],
        "current-context": "context",
    });
    Ok(kubeconfig.to_string())
}

/// The `user` of the kubeconfig: the client's bearer token (inline or from its file), else its
/// client certificate and key, as the kubeconfig it was loaded from gave them; and whom it
/// impersonates, if anyone.
fn credentials(config: &Config) -> Result<Value, Error> {
    let mut user = authentication(config)?;
    if let Some(identity) = &config.auth_info.impersonate {
        user["as"] = json!(identity);
    }
    Ok(user)
}

/// The client's bearer token (inline or from its file), else its client certificate and key.
fn authentication(config: &Config) -> Result<Value, Error> {
    let auth = &config.auth_info;
    if let Some(token) = &auth.token {
        return Ok(json!({"token": token.expose_secret()}));
    }
    if let Some(path) = &auth.token_file {
        let token = std::fs::read_to_string(path).map_err(|source| Error::TokenFile {
            path: path.clone(),
            source,
        })?;
        return Ok(json!({"token": token.trim()}));
    }
    match (&auth.client_certificate_data, &auth.client_key_data) {
        (Some(certificate), Some(key)) => Ok(json!({
            "client-certificate-data": certificate,
            "client-key-data": key.expose_secret(),
        })),
        _ => Err(Error::NoCredentials),
    }
}

fn pem(der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let lines: Vec<&str> = body
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap_or_default())
        .collect();
    format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(kubeconfig: &str) -> Value {
        serde_json::from_str(kubeconfig).unwrap()
    }

    #[test]
    fn carries_server_ca_and_token() {
        let mut config = Config::new("https://127.0.0.1:6443".parse().unwrap());
        config.root_cert = Some(vec![vec![1, 2, 3]]);
        config.auth_info.token = Some("sekret".to_string().into());
        let kubeconfig = parsed(&kubeconfig_for(&config, "team-a").unwrap());
        let cluster = &kubeconfig["clusters"][0]["cluster"];
        assert_eq!(cluster["server"], "https://127.0.0.1:6443/");
        assert_eq!(kubeconfig["users"][0]["user"], json!({"token": "sekret"}));
        assert_eq!(kubeconfig["contexts"][0]["context"]["namespace"], "team-a");
        let data = cluster["certificate-authority-data"].as_str().unwrap();
        let pem = String::from_utf8(STANDARD.decode(data).unwrap()).unwrap();
        assert_eq!(
            pem,
            "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n"
        );
        assert!(cluster.get("tls-server-name").is_none());
    }

    #[test]
    fn carries_a_client_certificate_and_the_tls_server_name() {
        let mut config = Config::new("https://10.0.0.1:6443".parse().unwrap());
        config.tls_server_name = Some("api.edge.example".into());
        config.auth_info.client_certificate_data = Some("Y2VydA==".into());
        config.auth_info.client_key_data = Some("a2V5".to_string().into());
        let kubeconfig = parsed(&kubeconfig_for(&config, "x").unwrap());
        assert_eq!(
            kubeconfig["clusters"][0]["cluster"]["tls-server-name"],
            "api.edge.example"
        );
        assert_eq!(
            kubeconfig["users"][0]["user"],
            json!({"client-certificate-data": "Y2VydA==", "client-key-data": "a2V5"})
        );
    }

    #[test]
    fn a_token_with_yaml_syntax_stays_one_value() {
        let mut config = Config::new("https://127.0.0.1:6443".parse().unwrap());
        config.auth_info.token = Some("a: b # c\nd".to_string().into());
        let kubeconfig = parsed(&kubeconfig_for(&config, "x").unwrap());
        assert_eq!(kubeconfig["users"][0]["user"]["token"], "a: b # c\nd");
    }

    #[test]
    fn without_credentials_there_is_no_kubeconfig() {
        let config = Config::new("https://127.0.0.1:6443".parse().unwrap());
        assert!(matches!(
            kubeconfig_for(&config, "x"),
            Err(Error::NoCredentials)
        ));
    }
}
