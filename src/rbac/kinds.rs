//! Which kinds a chart can create: what `helm template` renders with the chart's defaults, plus
//! every literal `apiVersion`/`kind` pair in the templates of the chart and its subcharts (kinds
//! that only a value enables are found there).

use std::collections::{BTreeMap, BTreeSet};

use super::ResolvedKind;
use crate::chart::TemplateFile;
use crate::helm::{RenderedDocument, RenderedObject};

/// The kinds that run Pods of their own, as (group, kind, plural): the operator lets a
/// controller read the Pods where a chart writes them, and the controller judges them by their
/// Pods.
pub const WORKLOADS: [(&str, &str, &str); 5] = [
    ("apps", "Deployment", "deployments"),
    ("apps", "StatefulSet", "statefulsets"),
    ("apps", "DaemonSet", "daemonsets"),
    ("apps", "ReplicaSet", "replicasets"),
    ("batch", "Job", "jobs"),
];

/// A kind by API version, e.g. (`apps/v1`, `Deployment`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TypeRef {
    /// `group/version`, or `v1` for the core group.
    pub api_version: String,
    /// Kind.
    pub kind: String,
}

impl TypeRef {
    /// The API group (`""` for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    /// The version part of `api_version`.
    pub fn version(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or(&self.api_version, |(_, version)| version)
    }
}

impl std::fmt::Display for TypeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

/// The kinds of rendered objects together with the literal kinds of every template.
pub fn chart_kinds(rendered: &[RenderedObject], templates: &[TemplateFile]) -> BTreeSet<TypeRef> {
    let rendered = rendered.iter().map(|object| TypeRef {
        api_version: object.api_version.clone(),
        kind: object.kind.clone(),
    });
    rendered
        .chain(templates.iter().flat_map(|t| literal_kinds(&t.content)))
        .collect()
}

/// The kinds the chart's own CustomResourceDefinitions define, so that a chart installing a
/// CRD and objects of it needs no discovery of a kind the cluster does not serve yet.
pub fn crd_kinds(documents: &[RenderedDocument]) -> BTreeMap<TypeRef, ResolvedKind> {
    let mut kinds = BTreeMap::new();
    for document in documents {
        if document.object.kind != "CustomResourceDefinition" {
            continue;
        }
        let spec = &document.body["spec"];
        let text = |value: &serde_json::Value| value.as_str().unwrap_or_default().to_string();
        let (group, kind) = (text(&spec["group"]), text(&spec["names"]["kind"]));
        let resolved = ResolvedKind {
            group: group.clone(),
            plural: text(&spec["names"]["plural"]),
            namespaced: spec["scope"] != "Cluster",
        };
        for version in spec["versions"].as_array().into_iter().flatten() {
            let type_ref = TypeRef {
                api_version: format!("{group}/{}", text(&version["name"])),
                kind: kind.clone(),
            };
            kinds.insert(type_ref, resolved.clone());
        }
    }
    kinds
}

/// `apiVersion`/`kind` pairs written literally (no template action in the value) at the top
/// level of each YAML document of a template.
pub fn literal_kinds(template: &str) -> Vec<TypeRef> {
    let mut found = Vec::new();
    let (mut api_version, mut kind) = (None, None);
    for line in template.lines().chain(["---"]) {
        if line.trim_end() == "---" {
            if let (Some(api_version), Some(kind)) = (api_version.take(), kind.take()) {
                found.push(TypeRef { api_version, kind });
            }
            (api_version, kind) = (None, None);
        } else if let Some(value) = top_level_literal(line, "apiVersion") {
            api_version.get_or_insert(value);
        } else if let Some(value) = top_level_literal(line, "kind") {
            kind.get_or_insert(value);
        }
    }
    found
}

/// The value of `key:` at column 0, when it is a plain literal (quotes and comment stripped).
fn top_level_literal(line: &str, key: &str) -> Option<String> {
    let value = line.strip_prefix(key)?.strip_prefix(':')?;
    let value = value
        .split(" #")
        .next()
        .unwrap_or_default()
        .trim()
        .trim_matches(['"', '\'']);
    let literal =
        !value.is_empty() && !value.contains("{{") && !value.contains(char::is_whitespace);
    literal.then(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn type_ref(api_version: &str, kind: &str) -> TypeRef {
        TypeRef {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }

    #[test]
    fn finds_literal_kinds_even_behind_conditions() {
        let template = r#"{{- if .Values.networkPolicy.enabled }}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: x
spec:
  podSelector: {}
{{- end }}
---
apiVersion: "v1"
kind: ConfigMap # the settings
metadata:
  labels:
    kind: not-a-kind
"#;
        assert_eq!(
            literal_kinds(template),
            vec![
                type_ref("networking.k8s.io/v1", "NetworkPolicy"),
                type_ref("v1", "ConfigMap")
            ]
        );
    }

    #[test]
    fn templated_kinds_are_not_literal() {
        assert!(literal_kinds("apiVersion: {{ .Values.api }}\nkind: Deployment\n").is_empty());
        assert!(
            literal_kinds("{{- range .Values.extraObjects }}\n{{ toYaml . }}\n{{- end }}\n")
                .is_empty()
        );
        assert!(
            literal_kinds("  apiVersion: v1\n  kind: Pod\n").is_empty(),
            "nested keys are not objects"
        );
    }

    #[test]
    fn groups_and_versions() {
        assert_eq!(type_ref("v1", "ConfigMap").group(), "");
        assert_eq!(type_ref("apps/v1", "Deployment").group(), "apps");
        assert_eq!(type_ref("apps/v1", "Deployment").version(), "v1");
    }

    #[test]
    fn union_of_rendered_and_literal() {
        let rendered = [RenderedObject {
            api_version: "v1".into(),
            kind: "Service".into(),
            namespace: None,
            name: "s".into(),
        }];
        let templates = [TemplateFile {
            path: "templates/cm.yaml".into(),
            content: "apiVersion: v1\nkind: ConfigMap\n".into(),
        }];
        let kinds: Vec<_> = chart_kinds(&rendered, &templates).into_iter().collect();
        assert_eq!(
            kinds,
            vec![type_ref("v1", "ConfigMap"), type_ref("v1", "Service")]
        );
    }
}
