//! What a composition asks for: its values, and the fingerprint of an install.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::api::{CLUSTER_REF, DEPENDS_ON, VALUES_FROM};

/// The values of a composition: its `spec` without the keys compositor reserves.
pub fn values_of(spec: Option<&Value>) -> Value {
    let mut values = spec.and_then(Value::as_object).cloned().unwrap_or_default();
    values.remove(CLUSTER_REF);
    values.remove(DEPENDS_ON);
    values.remove(VALUES_FROM);
    Value::Object(values)
}

/// The paths (`/a/0/b`) of the strings in `values`, keys or values, that hold a template
/// action, which a chart's `tpl` would run: such values can make the render read the cluster
/// (`lookup`).
pub fn template_paths(values: &Value) -> Vec<String> {
    fn walk(value: &Value, path: &str, found: &mut Vec<String>) {
        match value {
            Value::String(text) if text.contains("{{") => found.push(path.to_string()),
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    walk(item, &format!("{path}/{index}"), found);
                }
            }
            Value::Object(map) => {
                for (key, value) in map {
                    let path = format!("{path}/{}", key.replace('~', "~0").replace('/', "~1"));
                    if key.contains("{{") {
                        found.push(path.clone());
                    }
                    walk(value, &path, found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(values, "", &mut found);
    found
}

/// What an install depends on: the chart's digest, the values, where it goes and which Helm
/// installs it. Equal fingerprints mean a new install would change nothing.
pub fn fingerprint(
    chart_digest: &str,
    values: &Value,
    cluster: &str,
    namespace: &str,
    engine: &str,
) -> String {
    let mut hash = Sha256::new();
    for part in [chart_digest, &canonical(values), cluster, namespace, engine] {
        hash.update(part.len().to_le_bytes());
        hash.update(part.as_bytes());
    }
    format!("sha256:{}", hex::encode(hash.finalize()))
}

/// JSON with object keys sorted at every level, so equal values print equally.
fn canonical(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<_> = map.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&map[k])))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reserved_keys_are_not_values() {
        let spec = json!({"replicaCount": 2, "clusterRef": {"name": "edge"}});
        assert_eq!(values_of(Some(&spec)), json!({"replicaCount": 2}));
        assert_eq!(values_of(None), json!({}));
    }

    #[test]
    fn template_actions_are_found_anywhere_in_the_values() {
        assert!(template_paths(&json!({"a": ["x", {"b": "{ not }"}], "n": 1})).is_empty());
        assert_eq!(
            template_paths(&json!({"a": ["x", {"b/c": "{{ lookup }}"}], "{{ k }}": 1})),
            ["/a/1/b~1c", "/{{ k }}"]
        );
    }

    #[test]
    fn fingerprints_ignore_key_order_and_see_every_input() {
        let a = fingerprint(
            "sha256:1",
            &json!({"a": 1, "b": {"c": 2, "d": 3}}),
            "local",
            "ns",
            "v4",
        );
        let b = fingerprint(
            "sha256:1",
            &json!({"b": {"d": 3, "c": 2}, "a": 1}),
            "local",
            "ns",
            "v4",
        );
        assert_eq!(a, b);
        assert_ne!(
            a,
            fingerprint(
                "sha256:2",
                &json!({"a": 1, "b": {"c": 2, "d": 3}}),
                "local",
                "ns",
                "v4"
            )
        );
        assert_ne!(
            a,
            fingerprint(
                "sha256:1",
                &json!({"a": 2, "b": {"c": 2, "d": 3}}),
                "local",
                "ns",
                "v4"
            )
        );
        assert_ne!(
            a,
            fingerprint(
                "sha256:1",
                &json!({"a": 1, "b": {"c": 2, "d": 3}}),
                "local",
                "other",
                "v4"
            )
        );
        assert_ne!(
            a,
            fingerprint(
                "sha256:1",
                &json!({"a": 1, "b": {"c": 2, "d": 3}}),
                "local",
                "ns",
                "v5"
            )
        );
    }
}
