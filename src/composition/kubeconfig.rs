//! A kubeconfig for Helm that says exactly what the controller's own client uses: the same
//! server, CA and token. Helm then acts with the controller's identity and RBAC, nothing more.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kube::Config;

/// Why a kubeconfig for Helm cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The client authenticates in a way Helm cannot be handed (e.g. an exec plugin).
    #[error("the controller's credentials are not a bearer token, which Helm needs")]
    NoToken,
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

/// The kubeconfig (YAML) for `config`, with `namespace` as the default namespace. The token file
/// is read on every call, so a rotated ServiceAccount token is used as soon as it changes.
pub fn kubeconfig_for(config: &Config, namespace: &str) -> Result<String, Error> {
    use secrecy::ExposeSecret;
    let auth = &config.auth_info;
    let token = match (&auth.token, &auth.token_file) {
        (Some(token), _) => token.expose_secret().to_string(),
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|source| Error::TokenFile {
                path: path.clone(),
                source,
            })?
            .trim()
            .to_string(),
        (None, None) => return Err(Error::NoToken),
    };
    let ca: String = config
        .root_cert
        .iter()
        .flatten()
        .map(|der| pem(der))
        .collect();
    let cluster = if ca.is_empty() {
        format!("insecure-skip-tls-verify: {}", config.accept_invalid_certs)
    } else {
        format!("certificate-authority-data: {}", STANDARD.encode(ca))
    };
    Ok(format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: cluster\n  cluster:\n    server: {server}\n    {cluster}\nusers:\n- name: user\n  user:\n    token: {token}\ncontexts:\n- name: context\n  context: {{cluster: cluster, user: user, namespace: {namespace}}}\ncurrent-context: context\n",
        server = config.cluster_url,
    ))
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

    #[test]
    fn carries_server_ca_and_token() {
        let mut config = Config::new("https://127.0.0.1:6443".parse().unwrap());
        config.root_cert = Some(vec![vec![1, 2, 3]]);
        config.auth_info.token = Some("sekret".to_string().into());
        let kubeconfig = kubeconfig_for(&config, "team-a").unwrap();
        assert!(
            kubeconfig.contains("server: https://127.0.0.1:6443/"),
            "{kubeconfig}"
        );
        assert!(kubeconfig.contains("token: sekret"));
        assert!(kubeconfig.contains("namespace: team-a"));
        let data = kubeconfig
            .lines()
            .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
            .unwrap();
        let pem = String::from_utf8(STANDARD.decode(data).unwrap()).unwrap();
        assert_eq!(
            pem,
            "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n"
        );
    }

    #[test]
    fn without_a_token_there_is_no_kubeconfig() {
        let config = Config::new("https://127.0.0.1:6443".parse().unwrap());
        assert!(matches!(kubeconfig_for(&config, "x"), Err(Error::NoToken)));
    }
}
