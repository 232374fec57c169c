//! The objects in a rendered manifest (`helm template`, `helm get manifest`).

use serde::Deserialize;

/// An object of a rendered manifest, by identity.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RenderedObject {
    /// `group/version` or `v1`.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// `metadata.namespace` as rendered, if any.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

/// A manifest that is not a stream of Kubernetes objects.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The YAML does not parse.
    #[error("rendered manifest is not valid YAML")]
    Yaml(#[source] serde_saphyr::Error),
    /// A document lacks `apiVersion`, `kind` or `metadata.name`.
    #[error("rendered object #{index} lacks apiVersion, kind or metadata.name")]
    Incomplete {
        /// Position of the document in the stream, from 0.
        index: usize,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    metadata: Metadata,
}

#[derive(Deserialize, Default)]
struct Metadata {
    name: Option<String>,
    namespace: Option<String>,
}

/// Every object of a multi-document manifest; empty documents are skipped.
pub fn parse_manifest(manifest: &str) -> Result<Vec<RenderedObject>, ManifestError> {
    let documents: Vec<Option<Document>> =
        serde_saphyr::from_multiple(manifest).map_err(ManifestError::Yaml)?;
    documents
        .into_iter()
        .enumerate()
        .filter_map(|(index, document)| document.map(|document| (index, document)))
        .map(|(index, document)| match document {
            Document {
                api_version: Some(api_version),
                kind: Some(kind),
                metadata:
                    Metadata {
                        name: Some(name),
                        namespace,
                    },
            } => Ok(RenderedObject {
                api_version,
                kind,
                namespace,
                name,
            }),
            _ => Err(ManifestError::Incomplete { index }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_object_and_skips_empty_documents() {
        let manifest = "---\n# Source: a/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: x\n---\n# Source: a/templates/empty.yaml\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r}\n";
        let objects = parse_manifest(manifest).expect("parse");
        assert_eq!(
            objects,
            vec![
                RenderedObject {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: Some("x".into()),
                    name: "a".into()
                },
                RenderedObject {
                    api_version: "rbac.authorization.k8s.io/v1".into(),
                    kind: "ClusterRole".into(),
                    namespace: None,
                    name: "r".into()
                },
            ]
        );
    }

    #[test]
    fn refuses_objects_without_identity() {
        let error = parse_manifest("apiVersion: v1\nmetadata: {name: a}\n").unwrap_err();
        assert!(
            matches!(error, ManifestError::Incomplete { index: 0 }),
            "{error}"
        );
    }
}
