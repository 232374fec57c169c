//! `spec.valuesFrom`: values a composition takes from ConfigMaps and Secrets in its own
//! namespace, merged in list order beneath the spec's own values. Reserved in every generated
//! CRD and never passed to Helm.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::is_dns_subdomain;

/// The `spec` key of a composition that names where more of its values come from.
pub const VALUES_FROM: &str = "valuesFrom";

/// Most objects one composition takes values from: each is read at every reconcile.
pub const MAX_VALUES_SOURCES: usize = 16;

/// The key read when a source names none, as Flux's helm-controller reads.
pub const DEFAULT_VALUES_KEY: &str = "values.yaml";

/// The kind of object values come from.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceKind {
    /// A ConfigMap: its `data`.
    ConfigMap,
    /// A Secret: its `data`, decoded; its content is never shown.
    Secret,
}

impl std::fmt::Display for SourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SourceKind::ConfigMap => "ConfigMap",
            SourceKind::Secret => "Secret",
        })
    }
}

/// Where some of a composition's values come from.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ValuesSource {
    /// ConfigMap or Secret.
    pub kind: SourceKind,
    /// Its name, in the composition's namespace.
    pub name: String,
    /// The key whose content is taken: a YAML map of values, or with `target_path` one value.
    #[serde(default = "default_key")]
    pub key: String,
    /// Where the key's content goes, as a string (`a.b.c`, a dot in a key escaped `\.`); the
    /// key's content is a map merged at the top when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_path: Option<String>,
    /// Whether a missing object or key is skipped instead of waited for.
    #[serde(default)]
    pub optional: bool,
    /// Its namespace: only the composition's own may be named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

fn default_key() -> String {
    DEFAULT_VALUES_KEY.to_string()
}

impl std::fmt::Display for ValuesSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} key {}", self.kind, self.name, self.key)
    }
}

impl ValuesSource {
    /// The path its content goes to, as keys from the top; empty for the top.
    pub fn target(&self) -> Vec<String> {
        let Some(path) = &self.target_path else {
            return Vec::new();
        };
        let mut keys = vec![String::new()];
        let mut chars = path.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => keys.last_mut().unwrap().extend(chars.next()),
                '.' => keys.push(String::new()),
                c => keys.last_mut().unwrap().push(c),
            }
        }
        keys
    }
}

/// The sources `spec` names, in order; an entry that is not well formed is an error naming its
/// field.
pub fn values_sources_of(spec: &Value) -> Result<Vec<ValuesSource>, String> {
    let Some(listed) = spec.get(VALUES_FROM).filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let Some(listed) = listed.as_array() else {
        return Err(format!("spec.{VALUES_FROM}: not a list"));
    };
    if listed.len() > MAX_VALUES_SOURCES {
        return Err(format!(
            "spec.{VALUES_FROM}: {} entries; at most {MAX_VALUES_SOURCES}",
            listed.len()
        ));
    }
    listed
        .iter()
        .enumerate()
        .map(|(at, entry)| {
            let field = format!("spec.{VALUES_FROM}[{at}]");
            let source: ValuesSource =
                serde_json::from_value(entry.clone()).map_err(|e| format!("{field}: {e}"))?;
            check(&source).map_err(|problem| format!("{field}.{problem}"))?;
            Ok(source)
        })
        .collect()
}

/// What is wrong with `source`, as `field: why`.
fn check(source: &ValuesSource) -> Result<(), String> {
    // The name and key become parts of requests and of field selectors: anything but an object
    // name and a data key could reach past the object named.
    if !is_dns_subdomain(&source.name) {
        return Err(format!(
            "name: {:?} is not an object name (a DNS-1123 subdomain)",
            source.name
        ));
    }
    let key_chars = |c: char| c.is_ascii_alphanumeric() || "-._".contains(c);
    if source.key.is_empty() || source.key.len() > 253 || !source.key.chars().all(key_chars) {
        return Err(format!(
            "key: {:?} is not a data key (letters, digits, '-', '_' and '.')",
            source.key
        ));
    }
    if source.target_path.is_some() && source.target().iter().any(String::is_empty) {
        return Err(format!(
            "targetPath: {:?} has an empty key",
            source.target_path.as_deref().unwrap_or_default()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn sources_are_read_in_order_with_their_defaults_and_a_bad_entry_names_its_field() {
        let spec = json!({"valuesFrom": [
            {"kind": "ConfigMap", "name": "shared"},
            {"kind": "Secret", "name": "db", "key": "password", "targetPath": "db.auth\\.password",
             "optional": true},
        ]});
        let found = values_sources_of(&spec).unwrap();
        assert_eq!(found[0].key, "values.yaml");
        assert!(!found[0].optional);
        assert!(found[0].target().is_empty());
        assert_eq!(found[1].to_string(), "Secret db key password");
        assert_eq!(found[1].target(), ["db", "auth.password"]);
        assert!(found[1].optional);
        assert!(values_sources_of(&json!({})).unwrap().is_empty());

        for (entry, says) in [
            (
                json!({"kind": "Pod", "name": "x"}),
                "spec.valuesFrom[0]: unknown variant `Pod`",
            ),
            (
                json!({"kind": "Secret"}),
                "spec.valuesFrom[0]: missing field `name`",
            ),
            (
                json!({"kind": "Secret", "name": "../x"}),
                "spec.valuesFrom[0].name: ",
            ),
            (
                json!({"kind": "Secret", "name": "x", "key": "a/b"}),
                "spec.valuesFrom[0].key: ",
            ),
            (
                json!({"kind": "Secret", "name": "x", "key": ""}),
                "spec.valuesFrom[0].key: ",
            ),
            (
                json!({"kind": "Secret", "name": "x", "targetPath": "a..b"}),
                "spec.valuesFrom[0].targetPath: ",
            ),
        ] {
            let bad = values_sources_of(&json!({"valuesFrom": [entry]})).unwrap_err();
            assert!(bad.starts_with(says), "{bad}");
        }
        let bad = values_sources_of(&json!({"valuesFrom": {"kind": "Secret"}})).unwrap_err();
        assert_eq!(bad, "spec.valuesFrom: not a list");
        let many = vec![json!({"kind": "Secret", "name": "x"}); MAX_VALUES_SOURCES + 1];
        let bad = values_sources_of(&json!({"valuesFrom": many})).unwrap_err();
        assert_eq!(bad, "spec.valuesFrom: 17 entries; at most 16");
    }
}
