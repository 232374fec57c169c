//! Conversion rules, one small schema per rule, including the shapes that break naive walkers;
//! one file per family of keywords.

mod constraints;
mod junctors;
mod objects;
mod refs;
mod subcharts;
mod types;
mod values;

use serde_json::{Value, json};

use super::{ConvertOptions, Warning, convert, structural_problems};
use crate::chart::Package;

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
