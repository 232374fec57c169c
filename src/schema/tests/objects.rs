//! Objects: declared properties, extra keys (`additionalProperties`, `patternProperties`, preserved
//! unknown fields) and `required`.

use serde_json::json;

use super::{keywords, package, prop, run, run_with};

#[test]
fn objects_that_allow_extra_keys_keep_properties_and_unknown_fields() {
    let (v, w) = run(json!({"type": "object", "properties": {"a": {"type": "string"}}}));
    assert_eq!(v["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(v["properties"]["a"]["type"], "string");
    assert!(w.is_empty());
    let (v, _) = prop(json!({"type": "object"}), "labels");
    assert_eq!(
        v,
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
    );
}

#[test]
fn only_additional_properties_false_prunes() {
    let (v, w) = run(
        json!({"type": "object", "additionalProperties": false, "properties": {"a": {"type": "string"}}}),
    );
    assert!(v.get("x-kubernetes-preserve-unknown-fields").is_none());
    assert!(v.get("additionalProperties").is_none());
    assert!(w.is_empty());
}

#[test]
fn properties_with_additional_properties_schema_keep_properties() {
    let (v, w) = prop(
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}),
        "m",
    );
    assert_eq!(v["x-kubernetes-preserve-unknown-fields"], true);
    assert!(v.get("additionalProperties").is_none());
    assert_eq!(keywords(&w), ["additionalProperties"]);
    let (v, w) = prop(
        json!({"type": "object", "additionalProperties": {"type": "string"}}),
        "m",
    );
    assert_eq!(
        v,
        json!({"type": "object", "additionalProperties": {"type": "string"}})
    );
    assert!(w.is_empty());
    let (v, _) = prop(json!({"type": "object", "additionalProperties": true}), "m");
    assert_eq!(v["x-kubernetes-preserve-unknown-fields"], true);
}

#[test]
fn pattern_properties_become_a_map_or_preserve() {
    let (v, w) = prop(
        json!({"type": "object", "patternProperties": {".*": {"type": "string"}}}),
        "m",
    );
    assert_eq!(
        v,
        json!({"type": "object", "additionalProperties": {"type": "string"}})
    );
    assert!(w.is_empty());
    let (v, w) = prop(
        json!({"type": "object", "additionalProperties": false, "patternProperties": {"^x-": {"type": "string"}}}),
        "m",
    );
    assert_eq!(
        v,
        json!({"type": "object", "additionalProperties": {"type": "string"}})
    );
    assert_eq!(keywords(&w), ["patternProperties"]);
    // Keys that miss the pattern are free in the chart's schema, so they must stay free.
    let (v, w) = prop(
        json!({"type": "object", "patternProperties": {"^x-": {"type": "string"}}}),
        "m",
    );
    assert_eq!(
        v,
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
    );
    assert_eq!(keywords(&w), ["patternProperties"]);
    let (v, w) = prop(
        json!({"type": "object", "properties": {"a": {"type": "integer"}}, "patternProperties": {"^x-": {"type": "string"}}}),
        "m",
    );
    assert_eq!(v["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(keywords(&w), ["patternProperties"]);
}

#[test]
fn properties_named_like_keywords_are_properties() {
    let (v, w) = run(json!({
        "type": "object",
        "properties": {
            "properties": {"type": "string"},
            "type": {"type": "string", "enum": ["a", "b"]},
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
            "default": {"type": "integer"},
            "$ref": {"type": "boolean"},
            "items": {"type": "array", "items": {"type": "string"}}
        }
    }));
    assert!(w.is_empty(), "{w:?}");
    let p = &v["properties"];
    assert_eq!(p["properties"]["type"], "string");
    assert_eq!(p["type"]["enum"], json!(["a", "b"]));
    assert_eq!(p["metadata"]["properties"]["labels"]["type"], "object");
    assert_eq!(p["default"]["type"], "integer");
    assert_eq!(p["$ref"]["type"], "boolean");
    assert_eq!(p["items"]["items"]["type"], "string");
}

#[test]
fn explicit_preserve_unknown_fields_is_kept() {
    let (v, _) = prop(
        json!({"type": "object", "additionalProperties": false, "x-kubernetes-preserve-unknown-fields": true, "properties": {"a": {"type": "string"}}}),
        "x",
    );
    assert_eq!(v["x-kubernetes-preserve-unknown-fields"], true);
}

#[test]
fn required_keeps_declared_keys_not_supplied_by_values() {
    let schema = json!({
        "type": "object",
        "required": ["image", "name", "ghost"],
        "properties": {"image": {"type": "string"}, "name": {"type": "string"},
            "list": {"type": "array", "items": {"type": "object", "required": ["k"], "properties": {"k": {"type": "string"}}}}}
    });
    let (v, w) = run_with(schema, &package(json!({"image": "nginx"})), false);
    assert_eq!(v["required"], json!(["name"]));
    assert_eq!(v["properties"]["list"]["items"]["required"], json!(["k"]));
    assert_eq!(keywords(&w), ["required"]);
    assert!(w[0].action.starts_with("ghost"));
}

#[test]
fn root_is_always_an_object() {
    let (v, _) = run(json!({}));
    assert_eq!(
        v,
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
    );
    let (v, w) = run(json!({"type": "string"}));
    assert_eq!(v["type"], "object");
    assert_eq!(keywords(&w), ["type"]);
}
