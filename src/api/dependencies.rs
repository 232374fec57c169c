//! `spec.dependsOn`: the compositions a composition waits for before its release is installed
//! or upgraded, by kind and name, in its own namespace. Reserved in every generated CRD and
//! never passed to Helm.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::is_dns_subdomain;

/// The `spec` key of a composition that names the compositions it waits for.
pub const DEPENDS_ON: &str = "dependsOn";

/// Most compositions one may wait for: each is looked up at every change of the graph, which
/// one tenant's compositions must not make costly for everyone's.
pub const MAX_DEPENDENCIES: usize = 32;

/// A composition another waits for.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dependency {
    /// Its kind, a composition kind compositor generated.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its namespace: only the composition's own may be named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl std::fmt::Display for Dependency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

/// The dependencies `spec` names, in order; an entry that is not `{kind, name}` is an error
/// naming its field.
pub fn dependencies_of(spec: &Value) -> Result<Vec<Dependency>, String> {
    let Some(listed) = spec.get(DEPENDS_ON).filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let Some(listed) = listed.as_array() else {
        return Err(format!("spec.{DEPENDS_ON}: not a list"));
    };
    if listed.len() > MAX_DEPENDENCIES {
        return Err(format!(
            "spec.{DEPENDS_ON}: {} entries; at most {MAX_DEPENDENCIES}",
            listed.len()
        ));
    }
    listed
        .iter()
        .enumerate()
        .map(|(at, entry)| {
            let field = format!("spec.{DEPENDS_ON}[{at}]");
            let dependency: Dependency =
                serde_json::from_value(entry.clone()).map_err(|e| format!("{field}: {e}"))?;
            // The name becomes a segment of the request that reads the dependency: anything
            // but an object name could reach past the composition's namespace.
            match is_dns_subdomain(&dependency.name) {
                true => Ok(dependency),
                false => Err(format!(
                    "{field}.name: {:?} is not an object name (a DNS-1123 subdomain)",
                    dependency.name
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn dependencies_are_read_in_order_and_a_bad_entry_names_its_field() {
        let spec = json!({"dependsOn": [
            {"kind": "App", "name": "base"},
            {"kind": "Tenant", "name": "team-a", "namespace": "team-a"},
        ]});
        let found = dependencies_of(&spec).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].to_string(), "App base");
        assert_eq!(found[1].namespace.as_deref(), Some("team-a"));
        assert!(dependencies_of(&json!({})).unwrap().is_empty());
        assert!(
            dependencies_of(&json!({"dependsOn": null}))
                .unwrap()
                .is_empty()
        );
        let bad = dependencies_of(&json!({"dependsOn": [{"kind": "App"}]})).unwrap_err();
        assert!(
            bad.starts_with("spec.dependsOn[0]: missing field `name`"),
            "{bad}"
        );
        let bad = dependencies_of(&json!({"dependsOn": "base"})).unwrap_err();
        assert_eq!(bad, "spec.dependsOn: not a list");
        let many: Vec<_> = (0..=MAX_DEPENDENCIES)
            .map(|i| json!({"kind": "App", "name": format!("a{i}")}))
            .collect();
        let bad = dependencies_of(&json!({"dependsOn": many})).unwrap_err();
        assert_eq!(bad, "spec.dependsOn: 33 entries; at most 32");
        for name in [
            "../../team-b/apps/x",
            "x/y",
            "a..b",
            "",
            "Base",
            "x%2F..%2Fy",
        ] {
            let spec = json!({"dependsOn": [{"kind": "App", "name": "base"},
                                            {"kind": "App", "name": name}]});
            let bad = dependencies_of(&spec).unwrap_err();
            assert!(bad.starts_with("spec.dependsOn[1].name: "), "{name}: {bad}");
        }
    }
}
