//! References: local, root and anchor references inlined; recursive, external and overlong ones
//! cut.

use serde_json::json;

use super::{keywords, prop, run};

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
