//! Whether one version's schema can replace another's without breaking stored objects: the
//! same fields, or only added optional ones.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinitionVersion, JSONSchemaProps, JSONSchemaPropsOrArray,
};

/// Whether every object valid under `old`'s `spec` stays valid, and keeps every field, under
/// `new`'s.
pub fn compatible(
    old: &CustomResourceDefinitionVersion,
    new: &CustomResourceDefinitionVersion,
) -> bool {
    match (spec_of(old), spec_of(new)) {
        (Some(old), Some(new)) => schema_compatible(old, new),
        (None, _) => true,
        (Some(_), None) => false,
    }
}

fn spec_of(version: &CustomResourceDefinitionVersion) -> Option<&JSONSchemaProps> {
    version
        .schema
        .as_ref()?
        .open_api_v3_schema
        .as_ref()?
        .properties
        .as_ref()?
        .get("spec")
}

fn preserves_unknown(schema: &JSONSchemaProps) -> bool {
    schema.x_kubernetes_preserve_unknown_fields == Some(true)
}

fn schema_compatible(old: &JSONSchemaProps, new: &JSONSchemaProps) -> bool {
    // A node that accepts anything accepts whatever the old one did.
    let new_is_open = new.type_.is_none() && preserves_unknown(new);
    if new_is_open {
        return true;
    }
    if old.type_ != new.type_ || old.x_kubernetes_int_or_string != new.x_kubernetes_int_or_string {
        return false;
    }
    if preserves_unknown(old) && !preserves_unknown(new) {
        return false;
    }
    if old.nullable == Some(true) && new.nullable != Some(true) {
        return false;
    }
    let old_required = old.required.as_deref().unwrap_or_default();
    if new
        .required
        .iter()
        .flatten()
        .any(|key| !old_required.contains(key))
    {
        return false;
    }
    if let Some(new_enum) = &new.enum_ {
        match &old.enum_ {
            Some(old_enum) if old_enum.iter().all(|v| new_enum.contains(v)) => {}
            _ => return false,
        }
    }
    let empty = Default::default();
    let new_properties = new.properties.as_ref().unwrap_or(&empty);
    let properties_ok =
        old.properties
            .iter()
            .flatten()
            .all(|(key, old_property)| match new_properties.get(key) {
                Some(new_property) => schema_compatible(old_property, new_property),
                None => preserves_unknown(new),
            });
    let items_ok = match (&old.items, &new.items) {
        (Some(JSONSchemaPropsOrArray::Schema(old)), Some(JSONSchemaPropsOrArray::Schema(new))) => {
            schema_compatible(old, new)
        }
        (None, _) => true,
        _ => false,
    };
    let additional_ok = match (&old.additional_properties, &new.additional_properties) {
        (Some(old), Some(new)) => old == new,
        (None, None) => true,
        _ => false,
    };
    properties_ok && items_ok && additional_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn version(spec: serde_json::Value) -> CustomResourceDefinitionVersion {
        serde_json::from_value(json!({
            "name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}}
        }))
        .expect("version")
    }

    fn object(properties: serde_json::Value) -> serde_json::Value {
        json!({"type": "object", "properties": properties})
    }

    #[test]
    fn same_or_added_optional_fields_are_compatible() {
        let old = version(object(json!({"a": {"type": "string"}})));
        assert!(compatible(&old, &old));
        let added = version(object(
            json!({"a": {"type": "string"}, "b": {"type": "integer"}}),
        ));
        assert!(compatible(&old, &added));
    }

    #[test]
    fn removed_changed_or_newly_required_fields_are_not() {
        let old = version(object(
            json!({"a": {"type": "string"}, "n": {"type": "object", "properties": {"x": {"type": "integer"}}}}),
        ));
        let removed = version(object(
            json!({"n": {"type": "object", "properties": {"x": {"type": "integer"}}}}),
        ));
        assert!(!compatible(&old, &removed));
        let retyped = version(object(
            json!({"a": {"type": "string"}, "n": {"type": "object", "properties": {"x": {"type": "string"}}}}),
        ));
        assert!(!compatible(&old, &retyped));
        let mut required = object(
            json!({"a": {"type": "string"}, "n": {"type": "object", "properties": {"x": {"type": "integer"}}}, "c": {"type": "string"}}),
        );
        required["required"] = json!(["c"]);
        assert!(!compatible(&old, &version(required)));
    }

    #[test]
    fn narrowed_enums_are_not_compatible_and_open_nodes_accept_anything() {
        let old = version(object(json!({"t": {"type": "string", "enum": ["a", "b"]}})));
        let narrowed = version(object(json!({"t": {"type": "string", "enum": ["a"]}})));
        assert!(!compatible(&old, &narrowed));
        let open = version(object(
            json!({"t": {"x-kubernetes-preserve-unknown-fields": true}}),
        ));
        assert!(compatible(&old, &open));
    }
}
