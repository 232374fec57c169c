//! Types: declared, guessed from keywords, or settled by the chart's own values; and null.

use serde_json::json;

use super::{package, prop, run_with};

#[test]
fn type_with_null_becomes_nullable() {
    let (v, w) = prop(json!({"type": ["string", "null"]}), "tag");
    assert_eq!(v, json!({"type": "string", "nullable": true}));
    assert!(w.is_empty());
}

#[test]
fn integer_or_string_becomes_int_or_string() {
    let (v, _) = prop(json!({"type": ["integer", "string"]}), "port");
    assert_eq!(v, json!({"x-kubernetes-int-or-string": true}));
    let (v, _) = prop(json!({"type": ["string", "integer", "null"]}), "port");
    assert_eq!(
        v,
        json!({"x-kubernetes-int-or-string": true, "nullable": true})
    );
}

#[test]
fn other_type_arrays_accept_anything_with_a_warning() {
    let (v, w) = prop(
        json!({"type": ["object", "string"], "properties": {"a": {"type": "string"}}}),
        "x",
    );
    assert_eq!(
        v,
        json!({"x-kubernetes-preserve-unknown-fields": true, "nullable": true})
    );
    assert_eq!(w[0].path, "spec.x");
    assert_eq!(w[0].keyword, "type");
    let (v, _) = prop(json!({"type": ["integer", "number"]}), "ratio");
    assert_eq!(v, json!({"type": "number"}));
}

#[test]
fn integers_are_never_narrowed() {
    let (v, _) = prop(json!({"type": "integer"}), "x");
    assert_eq!(v, json!({"type": "integer"}));
}

#[test]
fn untyped_nodes_are_inferred_or_accept_anything() {
    let (v, _) = prop(json!({"properties": {"a": {"type": "string"}}}), "x");
    assert_eq!(v["type"], "object");
    let (v, _) = prop(json!({"enum": ["a", "b"]}), "x");
    assert_eq!(v["type"], "string");
    let (v, _) = prop(json!({"description": "Anything."}), "x");
    assert_eq!(
        v,
        json!({"x-kubernetes-preserve-unknown-fields": true, "nullable": true, "description": "Anything."})
    );
    let (v, _) = prop(json!(true), "x");
    assert_eq!(v["x-kubernetes-preserve-unknown-fields"], true);
}

#[test]
fn null_in_enum_allows_null_only_without_a_type() {
    let (v, _) = prop(json!({"enum": ["a", null]}), "x");
    assert_eq!(v["nullable"], true);
    let (v, _) = prop(json!({"type": "string", "enum": ["a", null]}), "x");
    assert!(v.get("nullable").is_none());
    assert_eq!(v["enum"], json!(["a"]));
}

#[test]
fn guessed_types_yield_to_the_charts_own_values() {
    let p = package(json!({"port": 8080, "name": "x"}));
    let (v, _) = run_with(
        json!({"type": "object", "properties": {"port": {"pattern": "^[0-9]+$"}, "name": {"pattern": "^[a-z]+$"}}}),
        &p,
        false,
    );
    assert_eq!(
        v["properties"]["port"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    assert_eq!(v["properties"]["name"]["type"], "string");
}

#[test]
fn values_that_are_null_make_the_field_nullable() {
    let p = package(json!({"name": null}));
    let (v, _) = run_with(
        json!({"type": "object", "properties": {"name": {"type": "string"}}}),
        &p,
        false,
    );
    assert_eq!(v["properties"]["name"]["nullable"], true);
}
