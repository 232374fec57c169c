//! Constraints on scalars and arrays: enums, bounds, patterns, formats, items and sets; and
//! keywords a CRD cannot carry.

use serde_json::json;

use super::{keywords, prop, run};

#[test]
fn enum_with_null_on_nullable_field_moves_to_description() {
    let (v, w) = prop(
        json!({"type": ["string", "null"], "enum": ["a", "b", null], "description": "Mode."}),
        "x",
    );
    assert_eq!(v["nullable"], true);
    assert!(v.get("enum").is_none());
    assert_eq!(
        v["description"],
        "Mode.\n\nAllowed values: \"a\", \"b\", null"
    );
    assert_eq!(keywords(&w), ["enum"]);
    let (v, _) = prop(json!({"type": "string", "enum": ["a", "b"]}), "x");
    assert_eq!(v["enum"], json!(["a", "b"]));
}

#[test]
fn const_becomes_enum() {
    let (v, _) = prop(json!({"const": 3}), "x");
    assert_eq!(v, json!({"type": "integer", "enum": [3]}));
}

#[test]
fn numeric_exclusive_bounds_become_boolean_flags() {
    let (v, _) = prop(
        json!({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10, "maximum": 5}),
        "x",
    );
    assert_eq!(
        v,
        json!({"type": "number", "minimum": 0.0, "exclusiveMinimum": true, "maximum": 5.0})
    );
    let (v, _) = prop(
        json!({"type": "integer", "minimum": 1, "exclusiveMinimum": true}),
        "x",
    );
    assert_eq!(
        v,
        json!({"type": "integer", "minimum": 1.0, "exclusiveMinimum": true})
    );
}

#[test]
fn unique_items_becomes_a_set_for_scalars_only() {
    let (v, w) = prop(
        json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true}),
        "x",
    );
    assert_eq!(v["x-kubernetes-list-type"], "set");
    assert!(w.is_empty());
    let (v, w) = prop(
        json!({"type": "array", "items": {"type": "object"}, "uniqueItems": true}),
        "x",
    );
    assert!(v.get("x-kubernetes-list-type").is_none());
    assert_eq!(keywords(&w), ["uniqueItems"]);
}

#[test]
fn arrays_without_items_keep_any_items() {
    let (v, _) = prop(json!({"type": "array"}), "x");
    assert_eq!(
        v["items"],
        json!({"x-kubernetes-preserve-unknown-fields": true, "nullable": true})
    );
}

#[test]
fn tuples_and_false_schemas() {
    let (v, w) = prop(
        json!({"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}),
        "x",
    );
    assert_eq!(v["items"]["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(keywords(&w), ["items"]);
    let (v, _) = prop(
        json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "string"}]}),
        "x",
    );
    assert_eq!(v["items"]["type"], "string");
}

#[test]
fn patterns_re2_cannot_compile_are_dropped() {
    let (v, w) = prop(json!({"type": "string", "pattern": "^(?!kube-).*$"}), "x");
    assert!(v.get("pattern").is_none());
    assert_eq!(keywords(&w), ["pattern"]);
    let (v, _) = prop(json!({"type": "string", "pattern": "^[a-z]+$"}), "x");
    assert_eq!(v["pattern"], "^[a-z]+$");
}

#[test]
fn formats_kept_only_when_kubernetes_knows_them() {
    let (v, w) = prop(json!({"type": "string", "format": "uri-reference"}), "x");
    assert!(v.get("format").is_none());
    assert_eq!(keywords(&w), ["format"]);
    let (v, _) = prop(json!({"type": "integer", "format": "int64"}), "x");
    assert_eq!(v["format"], "int64");
}

#[test]
fn conditionals_and_not_are_dropped_with_warnings() {
    let (_, w) = run(json!({
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "if": {"properties": {"a": {"const": "x"}}}, "then": {"required": ["b"]},
        "not": {"required": ["c"]},
        "dependencies": {"a": ["b"]}
    }));
    let mut k = keywords(&w);
    k.sort();
    assert_eq!(k, ["dependencies", "if", "not", "then"]);
}

#[test]
fn annotations_and_vendor_keys_are_dropped_silently() {
    let (v, w) = prop(
        json!({"type": "string", "$comment": "c", "examples": ["a"], "form": true, "readOnly": true, "title": "T"}),
        "x",
    );
    assert_eq!(v, json!({"type": "string", "title": "T"}));
    assert!(w.is_empty());
}
