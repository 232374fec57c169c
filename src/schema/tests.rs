//! Conversion rules, one small schema per rule, including the shapes that break naive walkers.

use serde_json::{Value, json};

use super::{ConvertOptions, Warning, convert, structural_problems};
use crate::chart::{ChartType, Dependency, Package};

fn package(values: Value) -> Package {
    Package::bare("demo", values)
}

fn run_with(schema: Value, p: &Package, apply_defaults: bool) -> (Value, Vec<Warning>) {
    let (props, warnings) = convert(
        &schema,
        p,
        &ConvertOptions {
            apply_defaults,
            ..ConvertOptions::default()
        },
    );
    let problems = structural_problems(&props);
    assert!(problems.is_empty(), "not structural: {problems:?}");
    (serde_json::to_value(props).unwrap(), warnings)
}

fn run(schema: Value) -> (Value, Vec<Warning>) {
    run_with(schema, &package(json!({})), false)
}

/// The converted node of property `name` of the root.
fn prop(schema: Value, name: &str) -> (Value, Vec<Warning>) {
    let (v, w) = run(json!({"type": "object", "properties": {name: schema}}));
    (v["properties"][name].clone(), w)
}

fn keywords(w: &[Warning]) -> Vec<&str> {
    w.iter().map(|w| w.keyword.as_str()).collect()
}

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
fn local_refs_are_inlined_with_siblings() {
    let (v, w) = run(json!({
        "definitions": {"a": {"b": {"type": "string", "minLength": 2}}, "img": {"type": "object", "properties": {"tag": {"type": "string"}}}},
        "$defs": {"port": {"type": "integer"}},
        "type": "object",
        "properties": {
            "name": {"$ref": "#/definitions/a/b", "description": "The name."},
            "image": {"$ref": "#/definitions/img"},
            "port": {"$ref": "#/$defs/port"},
            "escaped": {"$ref": "#/definitions/a~1b"}
        }
    }));
    let p = &v["properties"];
    assert_eq!(
        p["name"],
        json!({"type": "string", "minLength": 2, "description": "The name."})
    );
    assert_eq!(p["image"]["properties"]["tag"]["type"], "string");
    assert_eq!(p["port"]["type"], "integer");
    assert_eq!(keywords(&w), ["$ref"]);
    assert_eq!(w[0].path, "spec.escaped");
    assert!(v.get("definitions").is_none());
}

#[test]
fn recursive_refs_are_cut_with_preserve() {
    let (v, w) = run(json!({
        "definitions": {"node": {"type": "object", "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/definitions/node"}}}}},
        "type": "object",
        "properties": {"tree": {"$ref": "#/definitions/node"}}
    }));
    let tree = &v["properties"]["tree"];
    assert_eq!(tree["properties"]["name"]["type"], "string");
    assert_eq!(
        tree["properties"]["children"]["items"],
        json!({"x-kubernetes-preserve-unknown-fields": true, "nullable": true})
    );
    assert_eq!(keywords(&w), ["$ref"]);
    assert_eq!(w[0].path, "spec.tree.children[*]");
}

#[test]
fn root_ref_and_anchor_refs_resolve() {
    let (v, _) = run(json!({
        "$ref": "#/$defs/values",
        "$defs": {
            "values": {"type": "object", "additionalProperties": false, "properties": {"a": {"$ref": "#port"}}},
            "p": {"$anchor": "port", "type": "integer"}
        }
    }));
    assert_eq!(v["properties"]["a"]["type"], "integer");
    assert!(v.get("x-kubernetes-preserve-unknown-fields").is_none());
}

#[test]
fn external_refs_accept_anything_with_a_warning() {
    let (v, w) = prop(
        json!({"$ref": "https://kubernetesjsonschema.dev/v1.18.0/_definitions.json#/definitions/io.k8s.api.core.v1.Affinity"}),
        "affinity",
    );
    assert_eq!(v["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(keywords(&w), ["$ref"]);
}

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
fn integers_are_never_narrowed() {
    let (v, _) = prop(json!({"type": "integer"}), "x");
    assert_eq!(v, json!({"type": "integer"}));
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
fn defaults_dropped_unless_applied_then_only_valid_ones() {
    let schema = json!({"type": "object", "properties": {
        "replicas": {"type": "integer", "default": 2},
        "list": {"type": "array", "items": {"type": "string"}, "default": "[]"},
        "nested": {"type": "object", "properties": {"a": {"type": "string", "default": "x"}}}
    }});
    let (v, w) = run(schema.clone());
    assert!(v["properties"]["replicas"].get("default").is_none());
    assert!(w.is_empty());
    let (v, w) = run_with(schema, &package(json!({})), true);
    assert_eq!(v["properties"]["replicas"]["default"], 2);
    assert!(v["properties"]["list"].get("default").is_none());
    assert_eq!(v["properties"]["nested"]["default"], json!({}));
    assert_eq!(v["properties"]["nested"]["properties"]["a"]["default"], "x");
    assert_eq!(keywords(&w), ["default"]);
}

#[test]
fn descriptions_show_the_chart_default() {
    let p = package(json!({"replicas": 3, "image": {"tag": "1.0"}}));
    let (v, _) = run_with(
        json!({"type": "object", "properties": {"replicas": {"type": "integer", "description": "Pods."}, "image": {"type": "object", "properties": {"tag": {"type": "string"}}}}}),
        &p,
        false,
    );
    assert_eq!(
        v["properties"]["replicas"]["description"],
        "Pods.\n\nDefault: 3"
    );
    assert_eq!(
        v["properties"]["image"]["properties"]["tag"]["description"],
        "Default: \"1.0\""
    );
    assert!(v["properties"]["image"].get("description").is_none());
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
fn annotations_and_vendor_keys_are_dropped_silently() {
    let (v, w) = prop(
        json!({"type": "string", "$comment": "c", "examples": ["a"], "form": true, "readOnly": true, "title": "T"}),
        "x",
    );
    assert_eq!(v, json!({"type": "string", "title": "T"}));
    assert!(w.is_empty());
}

fn dependency(name: &str, alias: Option<&str>) -> Dependency {
    Dependency {
        name: name.to_owned(),
        version: None,
        repository: None,
        alias: alias.map(str::to_owned),
        ..Dependency::default()
    }
}

#[test]
fn subchart_keys_survive_pruning() {
    let mut p = package(json!({}));
    p.metadata.dependencies = vec![
        dependency("cluster", Some("monitoring")),
        dependency("common", None),
        dependency("redis", None),
    ];
    let mut common = package(json!({}));
    common.metadata.name = "common".to_owned();
    common.metadata.chart_type = ChartType::Library;
    let mut redis = package(json!({}));
    redis.metadata.name = "redis".to_owned();
    redis.schema = Some(
        json!({"type": "object", "additionalProperties": false, "properties": {"port": {"$ref": "#/definitions/port"}}, "definitions": {"port": {"type": "integer"}}}),
    );
    p.subcharts = vec![common, redis];
    let (v, _) = run_with(
        json!({"type": "object", "additionalProperties": false, "properties": {"a": {"type": "string"}}}),
        &p,
        false,
    );
    let props = &v["properties"];
    assert_eq!(
        props["monitoring"],
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
    );
    assert!(props.get("common").is_none());
    assert!(props.get("cluster").is_none());
    assert_eq!(props["redis"]["properties"]["port"]["type"], "integer");
    assert_eq!(props["redis"]["x-kubernetes-preserve-unknown-fields"], true);
    assert!(v.get("x-kubernetes-preserve-unknown-fields").is_none());
}

#[test]
fn refs_into_subchart_schemas_resolve() {
    let mut p = package(json!({}));
    let mut sub = package(json!({}));
    sub.metadata.name = "db".to_owned();
    sub.schema = Some(
        json!({"definitions": {"auth": {"type": "object", "properties": {"user": {"type": "string"}}}}}),
    );
    p.subcharts = vec![sub];
    let (v, w) = run_with(
        json!({"type": "object", "properties": {"auth": {"$ref": "charts/db/values.schema.json#/definitions/auth"}}}),
        &p,
        false,
    );
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(
        v["properties"]["auth"]["properties"]["user"]["type"],
        "string"
    );
    assert_eq!(
        v["properties"]["db"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
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
fn explicit_preserve_unknown_fields_is_kept() {
    let (v, _) = prop(
        json!({"type": "object", "additionalProperties": false, "x-kubernetes-preserve-unknown-fields": true, "properties": {"a": {"type": "string"}}}),
        "x",
    );
    assert_eq!(v["x-kubernetes-preserve-unknown-fields"], true);
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

#[test]
fn ref_cycles_through_all_of_terminate() {
    let (_, w) = run(json!({
        "definitions": {"a": {"allOf": [{"$ref": "#/definitions/b"}]}, "b": {"anyOf": [{"$ref": "#/definitions/a"}, {"type": "string"}]}},
        "type": "object",
        "properties": {"x": {"$ref": "#/definitions/a"}}
    }));
    assert!(keywords(&w).contains(&"$ref"));
}

#[test]
fn long_reference_chains_are_cut() {
    let mut defs = serde_json::Map::new();
    for i in 0..100 {
        defs.insert(
            format!("d{i}"),
            json!({"type": "object", "properties": {"next": {"$ref": format!("#/definitions/d{}", i + 1)}}}),
        );
    }
    defs.insert("d100".to_owned(), json!({"type": "string"}));
    let (_, w) = run(
        json!({"definitions": defs, "type": "object", "properties": {"x": {"$ref": "#/definitions/d0"}}}),
    );
    assert_eq!(keywords(&w), ["$ref"]);
    assert!(w[0].action.contains("nest too deeply"));
}

#[test]
fn subchart_defaults_count_as_supplied_values() {
    let mut p = package(json!({"db": {"port": 1}}));
    let mut sub = package(json!({"user": "admin"}));
    sub.metadata.name = "db".to_owned();
    sub.schema = Some(
        json!({"type": "object", "required": ["user", "port", "password"], "properties": {
        "user": {"type": "string"}, "port": {"type": "integer"}, "password": {"type": "string"}}}),
    );
    p.subcharts = vec![sub];
    let (v, _) = run_with(json!({"type": "object"}), &p, false);
    assert_eq!(v["properties"]["db"]["required"], json!(["password"]));
    assert_eq!(
        v["properties"]["db"]["properties"]["user"]["description"],
        "Default: \"admin\""
    );
}

#[test]
fn malformed_keywords_never_break_the_output() {
    for node in [
        json!({"type": 5}),
        json!({"type": []}),
        json!({"type": ["null"]}),
        json!({"type": "null"}),
        json!({"type": "any"}),
        json!({"properties": 3}),
        json!({"properties": {"a": 1}}),
        json!({"items": "x"}),
        json!({"items": []}),
        json!({"enum": "x"}),
        json!({"enum": []}),
        json!({"enum": [null]}),
        json!({"required": "a"}),
        json!({"allOf": {}}),
        json!({"allOf": [1, false]}),
        json!({"anyOf": [1, 2]}),
        json!({"anyOf": []}),
        json!({"oneOf": [true, {"type": "string"}]}),
        json!({"$ref": 5}),
        json!({"$ref": "#/nowhere"}),
        json!({"$ref": "#"}),
        json!({"additionalProperties": "x"}),
        json!({"patternProperties": {"a": 1, "b": 2}}),
        json!({"minimum": "a", "maxLength": -1, "multipleOf": 0}),
        json!({"pattern": 4, "format": 1}),
        json!({"type": "string", "enum": [1, 2]}),
        json!({"type": "integer", "const": "x"}),
        json!({"const": {"a": 1}}),
        json!({"type": "array", "items": {"type": "array", "items": {"type": "array"}}, "uniqueItems": true}),
        json!({"type": "object", "x-kubernetes-list-type": "map", "x-kubernetes-embedded-resource": true}),
        json!({"x-kubernetes-int-or-string": true, "type": "string"}),
        json!(false),
        json!(null),
        json!("string"),
    ] {
        let (_, _) = run(json!({"type": "object", "properties": {"x": node.clone()}}));
        let (_, _) = run(node.clone());
        let (_, _) = run_with(
            json!({"type": "object", "properties": {"x": node}}),
            &package(json!({"x": ""})),
            true,
        );
    }
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
