//! The objects in a rendered manifest (`helm template`, `helm get manifest`), and the release
//! Helm says an applied object is of.

use std::collections::BTreeMap;

use serde_json::Value;

/// The annotations Helm puts on every object it applies, naming its release.
pub const RELEASE_NAME_ANNOTATION: &str = "meta.helm.sh/release-name";
pub const RELEASE_NAMESPACE_ANNOTATION: &str = "meta.helm.sh/release-namespace";

/// The release an object with `annotations` is of, by Helm's annotations: (namespace, name).
pub fn release_of(annotations: Option<&BTreeMap<String, String>>) -> Option<(String, String)> {
    let annotations = annotations?;
    let namespace = annotations.get(RELEASE_NAMESPACE_ANNOTATION)?;
    let name = annotations.get(RELEASE_NAME_ANNOTATION)?;
    Some((namespace.clone(), name.clone()))
}

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

/// One document of a rendered manifest: the object's identity, the chart file it came from,
/// and the whole object.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedDocument {
    /// Who the object is.
    pub object: RenderedObject,
    /// The chart file Helm names in its `# Source:` comment, e.g. `cert-manager/templates/rbac.yaml`.
    pub source: Option<String>,
    /// The object as rendered.
    pub body: Value,
}

impl RenderedDocument {
    /// Whether the object comes from the chart's (or a subchart's) `crds/` folder, which Helm
    /// installs once and never upgrades or deletes.
    pub fn is_chart_crd(&self) -> bool {
        self.source
            .as_deref()
            .is_some_and(|source| source.split('/').rev().nth(1) == Some("crds"))
    }

    /// Whether the object is a Helm hook, which Helm runs around an operation and often deletes
    /// afterwards, so it is not part of what the release keeps.
    pub fn is_hook(&self) -> bool {
        self.body["metadata"]["annotations"]["helm.sh/hook"].is_string()
    }
}

/// Every object of a multi-document manifest; empty documents are skipped.
pub fn parse_manifest(manifest: &str) -> Result<Vec<RenderedObject>, ManifestError> {
    Ok(parse_documents(manifest)?
        .into_iter()
        .map(|document| document.object)
        .collect())
}

/// Every document of a multi-document manifest, whole; empty documents are skipped. Helm
/// names each file's source once, before its first document: a document without a `# Source:`
/// line is the last named file's (a second document of a file, or the first of a file that
/// starts with `---`, as traefik's `crds/` do).
pub fn parse_documents(manifest: &str) -> Result<Vec<RenderedDocument>, ManifestError> {
    let mut documents = Vec::new();
    let mut last_source = None;
    for (index, chunk) in split_documents(manifest).into_iter().enumerate() {
        let named = chunk
            .lines()
            .find_map(|line| line.strip_prefix("# Source: "))
            .map(|source| source.trim().to_string());
        if named.is_some() {
            last_source = named;
        }
        let source = last_source.clone();
        let body: Option<Value> = serde_saphyr::from_str(chunk).map_err(ManifestError::Yaml)?;
        let Some(body) = body.filter(|body| !body.is_null()) else {
            continue;
        };
        let text = |value: &Value| value.as_str().map(str::to_string);
        let object = match (
            text(&body["apiVersion"]),
            text(&body["kind"]),
            text(&body["metadata"]["name"]),
        ) {
            (Some(api_version), Some(kind), Some(name)) => RenderedObject {
                api_version,
                kind,
                namespace: text(&body["metadata"]["namespace"]),
                name,
            },
            _ => return Err(ManifestError::Incomplete { index }),
        };
        documents.push(RenderedDocument {
            object,
            source,
            body,
        });
    }
    Ok(documents)
}

/// The documents of a YAML stream, split at `---` lines as Helm itself splits manifests.
fn split_documents(manifest: &str) -> Vec<&str> {
    let mut documents = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in manifest.split_inclusive('\n') {
        if line.trim_end() == "---" || line.starts_with("--- ") {
            documents.push(&manifest[start..offset]);
            start = offset + line.len();
        }
        offset += line.len();
    }
    documents.push(&manifest[start..]);
    documents
        .into_iter()
        .filter(|document| !document.trim().is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_without_a_source_line_is_the_last_named_files() {
        let manifest = "---\n# Source: t/crds/a.yaml\n---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: a.t.io}\n---\n# Source: t/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: one}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: two}\n";
        let documents = parse_documents(manifest).expect("parse");
        let sources: Vec<(&str, Option<&str>)> = documents
            .iter()
            .map(|d| (d.object.name.as_str(), d.source.as_deref()))
            .collect();
        assert_eq!(
            sources,
            [
                ("a.t.io", Some("t/crds/a.yaml")),
                ("one", Some("t/templates/cm.yaml")),
                ("two", Some("t/templates/cm.yaml")),
            ]
        );
        assert!(documents[0].is_chart_crd());
    }

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
    fn keeps_each_document_whole_with_its_source() {
        let manifest = "---\n# Source: app/crds/widgets.yaml\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.example.com\n---\n# Source: app/templates/role.yaml\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: r\nrules:\n- apiGroups: [\"\"]\n  resources: [\"secrets\"]\n  verbs: [\"get\"]\n";
        let documents = parse_documents(manifest).expect("parse");
        assert_eq!(documents.len(), 2);
        assert!(documents[0].is_chart_crd());
        assert_eq!(
            documents[1].source.as_deref(),
            Some("app/templates/role.yaml")
        );
        assert!(!documents[1].is_chart_crd());
        assert!(!documents[1].is_hook());
        assert_eq!(documents[1].body["rules"][0]["verbs"][0], "get");
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
