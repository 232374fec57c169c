use serde_json::{Value, json};

use super::*;

fn version(spec: Value) -> CustomResourceDefinitionVersion {
    serde_json::from_value(json!({
        "name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}}
    }))
    .expect("version")
}

fn object(properties: Value) -> Value {
    json!({"type": "object", "properties": properties})
}

/// The breaks from a field `f` of schema `old` to schema `new`, as `path: reason` lines.
fn field(old: Value, new: Value) -> Vec<String> {
    let old = version(object(json!({"f": old})));
    let new = version(object(json!({"f": new})));
    breaks(&old, &new).iter().map(ToString::to_string).collect()
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
fn a_removed_field_is_named() {
    let old = version(object(
        json!({"app": {"type": "object", "properties": {"port": {"type": "integer"}}}}),
    ));
    let new = version(object(json!({"app": {"type": "object", "properties": {}}})));
    assert_eq!(
        breaks(&old, &new)[0].to_string(),
        "spec.app.port: field removed"
    );
    let open = version(object(json!({"app": {"type": "object",
        "x-kubernetes-preserve-unknown-fields": true}})));
    assert!(compatible(&old, &open), "an open object keeps the field");
}

#[test]
fn a_changed_type_is_named_and_widening_is_compatible() {
    assert_eq!(
        field(json!({"type": "integer"}), json!({"type": "string"})),
        ["spec.f: type integer → string"]
    );
    assert!(field(json!({"type": "integer"}), json!({"type": "number"})).is_empty());
    let int_or_string = json!({"x-kubernetes-int-or-string": true});
    assert!(field(json!({"type": "string"}), int_or_string.clone()).is_empty());
    assert_eq!(
        field(int_or_string, json!({"type": "string"})),
        ["spec.f: type int-or-string → string"]
    );
    assert!(
        field(
            json!({"type": "integer"}),
            json!({"x-kubernetes-preserve-unknown-fields": true})
        )
        .is_empty(),
        "a node that accepts anything"
    );
}

#[test]
fn a_new_required_field_is_named() {
    let old = version(object(json!({"git": {"type": "object",
        "properties": {"repository": {"type": "string"}}}})));
    let new = version(object(
        json!({"git": {"type": "object", "required": ["repository"],
        "properties": {"repository": {"type": "string"}}}}),
    ));
    assert_eq!(
        breaks(&old, &new)[0].to_string(),
        "spec.git: new required field repository"
    );
    assert!(compatible(&new, &old), "dropping a requirement relaxes");
}

#[test]
fn a_narrowed_enum_names_what_it_lost() {
    assert_eq!(
        field(
            json!({"type": "string", "enum": ["a", "b"]}),
            json!({"type": "string", "enum": ["a"]})
        ),
        [r#"spec.f: enum no longer allows "b""#]
    );
    assert!(
        field(
            json!({"type": "string", "enum": ["a"]}),
            json!({"type": "string", "enum": ["a", "b"]})
        )
        .is_empty()
    );
    assert_eq!(
        field(
            json!({"type": "string"}),
            json!({"type": "string", "enum": ["a"]})
        ),
        ["spec.f: enum no longer allows values outside it"]
    );
}

#[test]
fn tightened_bounds_are_named_and_relaxed_ones_are_compatible() {
    let old = json!({"type": "integer", "minimum": 1, "maximum": 10});
    assert_eq!(
        field(
            old.clone(),
            json!({"type": "integer", "minimum": 2, "maximum": 5})
        ),
        ["spec.f: minimum 1 → 2", "spec.f: maximum 10 → 5"]
    );
    assert!(field(old.clone(), json!({"type": "integer", "minimum": 0})).is_empty());
    assert_eq!(
        field(
            json!({"type": "string"}),
            json!({"type": "string", "maxLength": 8})
        ),
        ["spec.f: maxLength none → 8"]
    );
    assert_eq!(
        field(
            json!({"type": "array", "items": {"type": "string"}, "maxItems": 4}),
            json!({"type": "array", "items": {"type": "string"}, "maxItems": 2})
        ),
        ["spec.f: maxItems 4 → 2"]
    );
    assert_eq!(
        field(
            json!({"type": "integer", "maximum": 10}),
            json!({"type": "integer", "maximum": 10, "exclusiveMaximum": true})
        ),
        ["spec.f: maximum became exclusive"]
    );
}

#[test]
fn patterns_formats_and_uniqueness_are_new_constraints() {
    assert_eq!(
        field(
            json!({"type": "string"}),
            json!({"type": "string", "pattern": "^a"})
        ),
        ["spec.f: pattern none → ^a"]
    );
    assert!(
        field(
            json!({"type": "string", "pattern": "^a"}),
            json!({"type": "string"})
        )
        .is_empty()
    );
    assert_eq!(
        field(
            json!({"type": "string"}),
            json!({"type": "string", "format": "date-time"})
        ),
        ["spec.f: format none → date-time"]
    );
    assert_eq!(
        field(
            json!({"type": "array", "items": {"type": "string"}}),
            json!({"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"})
        ),
        ["spec.f: items must now be unique"]
    );
}

#[test]
fn nullability_unknown_fields_and_rules_are_kept() {
    assert_eq!(
        field(
            json!({"type": "string", "nullable": true}),
            json!({"type": "string"})
        ),
        ["spec.f: no longer accepts null"]
    );
    assert_eq!(
        field(
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            json!({"type": "object"})
        ),
        ["spec.f: no longer keeps unknown fields"]
    );
    let rule = json!([{"rule": "self.size() > 1"}]);
    assert_eq!(
        field(
            json!({"type": "string"}),
            json!({"type": "string", "x-kubernetes-validations": rule})
        ),
        ["spec.f: validation rules added or changed"]
    );
}

#[test]
fn list_items_and_map_values_are_compared_below_the_list() {
    assert_eq!(
        field(
            json!({"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}}),
            json!({"type": "array", "items": {"type": "object", "properties": {"n": {"type": "string"}}}})
        ),
        ["spec.f[].n: type integer → string"]
    );
    assert_eq!(
        field(
            json!({"type": "object", "additionalProperties": {"type": "integer"}}),
            json!({"type": "object", "additionalProperties": {"type": "boolean"}})
        ),
        ["spec.f.*: type integer → boolean"]
    );
}
