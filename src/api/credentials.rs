//! The Secret and ConfigMap references of a definition's `spec.chart`: credentials for the
//! chart's repository or registry, and the CA bundle that verifies it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec.chart.credentials`: a username with a password from a Secret key, or a whole
/// `kubernetes.io/basic-auth` or `kubernetes.io/dockerconfigjson` Secret.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ChartCredentials {
    /// User name, used with `passwordRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The Secret key holding the password or token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_ref: Option<SecretKeyRef>,
    /// A `kubernetes.io/basic-auth` or `kubernetes.io/dockerconfigjson` Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
}

/// A key of a Secret.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct SecretKeyRef {
    /// The Secret's name.
    pub name: String,
    /// The Secret's namespace; the definition's when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The key in the Secret's data.
    pub key: String,
}

/// A whole Secret.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct SecretRef {
    /// The Secret's name.
    pub name: String,
    /// The Secret's namespace; the definition's when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `spec.chart.caBundleRef`: PEM CA certificates in a ConfigMap or Secret key.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct CaBundleRef {
    /// `ConfigMap` or `Secret`; when empty a ConfigMap is looked up first, then a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<CaBundleKind>,
    /// The object's name.
    pub name: String,
    /// The object's namespace; the definition's when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The key holding the PEM bundle; `ca.crt` when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Where a CA bundle is stored.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum CaBundleKind {
    /// A ConfigMap (`data` or `binaryData`).
    ConfigMap,
    /// A Secret.
    Secret,
}
