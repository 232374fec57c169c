//! Junctors: `allOf` merged, `anyOf` and `oneOf` folded into one node.

use serde_json::json;

use super::{keywords, prop};

#[test]
fn all_of_is_merged_and_conflicts_warn() {
    let (v, w) = prop(
        json!({"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}}, {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]}),
        "x",
    );
    assert_eq!(v["properties"]["a"]["type"], "string");
    assert_eq!(v["properties"]["b"]["type"], "integer");
    assert_eq!(v["required"], json!(["b"]));
    assert!(w.is_empty());
    let (v, w) = prop(
        json!({"allOf": [{"type": "string"}, {"type": "integer"}]}),
        "x",
    );
    assert_eq!(v["type"], "string");
    assert_eq!(keywords(&w), ["allOf"]);
}

#[test]
fn any_of_with_null_is_nullable() {
    let (v, w) = prop(
        json!({"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]}),
        "x",
    );
    assert_eq!(
        v,
        json!({"type": "string", "maxLength": 5, "nullable": true})
    );
    assert!(w.is_empty());
}

#[test]
fn one_of_integer_and_string_is_int_or_string_with_both_rules() {
    let (v, w) = prop(
        json!({"oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": "^[0-9]+%$"}]}),
        "x",
    );
    assert_eq!(
        v,
        json!({"x-kubernetes-int-or-string": true, "minimum": 1.0, "pattern": "^[0-9]+%$"})
    );
    assert!(w.is_empty());
}

#[test]
fn any_of_enum_branches_become_one_enum() {
    let (v, _) = prop(
        json!({"anyOf": [{"const": "a"}, {"enum": ["b", "c"]}]}),
        "x",
    );
    assert_eq!(v, json!({"type": "string", "enum": ["a", "b", "c"]}));
}

#[test]
fn any_of_object_branches_unite_properties() {
    let (v, w) = prop(
        json!({"oneOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}}, "required": ["a"]}
        ]}),
        "x",
    );
    assert_eq!(v["properties"]["b"]["type"], "integer");
    // `a` is a string in one branch and an integer in the other.
    assert_eq!(
        v["properties"]["a"],
        json!({"x-kubernetes-int-or-string": true})
    );
    assert_eq!(v["required"], json!(["a"]));
    assert_eq!(v["x-kubernetes-preserve-unknown-fields"], true);
    assert!(keywords(&w).contains(&"oneOf"));
}

#[test]
fn mixed_any_of_accepts_anything() {
    let (v, w) = prop(
        json!({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}),
        "x",
    );
    assert_eq!(v["x-kubernetes-preserve-unknown-fields"], true);
    assert!(v.get("type").is_none());
    assert_eq!(keywords(&w), ["anyOf"]);
}

#[test]
fn constraint_only_branches_are_dropped() {
    let (v, w) = prop(
        json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}),
        "x",
    );
    assert_eq!(v["type"], "object");
    assert!(v.get("required").is_none());
    assert_eq!(keywords(&w), ["oneOf"]);
}

#[test]
fn junctors_inside_branches_and_nested_all_of_are_folded() {
    let (v, w) = prop(
        json!({"anyOf": [{"allOf": [{"type": "string"}, {"maxLength": 3}]}, {"oneOf": [{"type": "null"}]}]}),
        "x",
    );
    assert_eq!(
        v,
        json!({"type": "string", "maxLength": 3, "nullable": true})
    );
    assert!(w.is_empty(), "{w:?}");
}
