//! The phase each counted object is in, read from its status as the reconciler's cache holds it
//! (see [`super::Metrics::count_phases`]).

use kube::ResourceExt;
use kube::core::DynamicObject;

use crate::api::{CompositionDefinition, VERSION_LABEL, find_condition};

/// `Ready` when the definition's Ready condition is True, else `NotReady` (a definition not yet
/// reconciled included).
pub fn definition_phase(definition: &CompositionDefinition) -> Option<&'static str> {
    let ready = definition
        .status
        .as_ref()
        .and_then(|status| find_condition(&status.conditions, "Ready"))
        .is_some_and(|condition| condition.status == "True");
    Some(if ready { "Ready" } else { "NotReady" })
}

/// The `status.phase` of a composition of `version` (by its version label); compositions of
/// other versions, and those without a phase yet, are not counted.
pub fn composition_phase(version: &str) -> impl Fn(&DynamicObject) -> Option<&'static str> + use<> {
    let version = version.to_string();
    move |object: &DynamicObject| {
        if object.labels().get(VERSION_LABEL) != Some(&version) {
            return None;
        }
        match object.data.get("status")?.get("phase")?.as_str()? {
            "Ready" => Some("Ready"),
            "Progressing" => Some("Progressing"),
            "Failed" => Some("Failed"),
            "Paused" => Some("Paused"),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_composition_counts_only_under_its_own_version() {
        let object = |version: &str, phase: &str| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "g/v1", "kind": "K",
                "metadata": {"name": "a", "labels": {VERSION_LABEL: version}},
                "status": {"phase": phase},
            }))
            .expect("object")
        };
        let phase = composition_phase("v1");
        assert_eq!(phase(&object("v1", "Failed")), Some("Failed"));
        assert_eq!(phase(&object("v2", "Failed")), None);
        assert_eq!(phase(&object("v1", "Unheard")), None);
    }
}
